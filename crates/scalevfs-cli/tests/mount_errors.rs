//! `scalevfs mount` refuses what would fail or mislead, and names the cause: a mountpoint that
//! is missing, not a directory, or already mounted on; a user without access to `/dev/fuse`.

use std::ffi::OsStr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn scalevfs(args: &[&OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_scalevfs"))
        .args(args)
        .output()
        .unwrap()
}

/// Runs `scalevfs mount <mp> <more>`; expects a failure and returns its message.
fn mount_fails(mp: &Path, more: &[&str]) -> String {
    let mut args: Vec<&OsStr> = vec!["mount".as_ref(), mp.as_os_str()];
    args.extend(more.iter().map(OsStr::new));
    let out = scalevfs(&args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "mounting on {} succeeded",
        mp.display()
    );
    assert!(err.starts_with("scalevfs mount: "), "{err}");
    err
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("scalevfs-mnterr-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_mountpoint_that_is_missing_or_not_a_directory_is_refused() {
    let dir = scratch("kinds");
    let file = dir.join("f");
    std::fs::write(&file, b"data").unwrap();
    for daemon in [&[][..], &["--daemon"][..]] {
        let err = mount_fails(&file, daemon);
        assert!(err.contains("not a directory"), "{err}");
        let err = mount_fails(&dir.join("missing"), daemon);
        assert!(err.contains("no such directory"), "{err}");
    }
    // Nothing was mounted on the file: its data is still there.
    assert_eq!(std::fs::read(&file).unwrap(), b"data");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_mountpoint_already_mounted_on_is_refused() {
    let err = mount_fails(Path::new("/proc"), &[]);
    assert!(
        err.contains("/proc: already a mount point (proc from "),
        "{err}"
    );

    if let Err(why) = scalevfs_fuse::fuse_available() {
        eprintln!("SKIPPED (the scalevfs-on-scalevfs case): FUSE unavailable: {why}");
        return;
    }
    let dir = scratch("twice");
    let out = scalevfs(&["mount".as_ref(), dir.as_os_str(), "--daemon".as_ref()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result = std::panic::catch_unwind(|| {
        std::fs::write(dir.join("mine"), b"1").unwrap();
        let err = mount_fails(&dir, &[]);
        assert!(
            err.contains("already a mount point (fuse.scalevfs from scalevfs)"),
            "{err}"
        );
        // The first mount is still the one seen there.
        assert_eq!(std::fs::read(dir.join("mine")).unwrap(), b"1");
    });
    let st = Command::new("umount").arg(&dir).status();
    if !st.is_ok_and(|s| s.success()) {
        let _ = Command::new("fusermount3").arg("-u").arg(&dir).status();
    }
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

/// As a user with no access to `/dev/fuse`, the error is about `/dev/fuse`, not about the
/// mountpoint. Needs root (to become another user) and a `/dev/fuse` that user cannot open.
#[test]
fn a_user_without_dev_fuse_is_told_so() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: needs root to run as another user");
        return;
    }
    let Ok(dev) = std::fs::metadata("/dev/fuse") else {
        eprintln!("SKIPPED: no /dev/fuse");
        return;
    };
    let nobody = 65534;
    let usable =
        dev.mode() & 0o006 == 0o006 || (dev.uid() == nobody && dev.mode() & 0o600 == 0o600);
    if usable {
        eprintln!("SKIPPED: /dev/fuse is open to uid {nobody} here");
        return;
    }
    let dir = scratch("nobody");
    nix::unistd::chown(&dir, Some(nobody.into()), Some(nobody.into())).unwrap();
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_scalevfs"))
        .arg("mount")
        .arg(&dir)
        .output();
    let _ = std::fs::remove_dir_all(&dir);
    let Ok(out) = out else {
        eprintln!("SKIPPED: no setpriv");
        return;
    };
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("cannot mount FUSE here: /dev/fuse: permission denied to uid 65534"),
        "{err}"
    );
}
