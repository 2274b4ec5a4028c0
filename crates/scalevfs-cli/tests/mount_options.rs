//! `scalevfs mount -o`: the options reach the mount, which shows in /proc/self/mountinfo as
//! type `fuse.scalevfs` with its fsname. Needs FUSE; skipped, with a message, without it.

use std::process::Command;

/// The mountinfo line of the mount on `dir`, if any.
fn mountinfo_of(dir: &std::path::Path) -> Option<String> {
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let dir = dir.to_str().unwrap();
    table
        .lines()
        .find(|l| l.split(' ').nth(4) == Some(dir))
        .map(str::to_owned)
}

#[test]
fn o_options_reach_the_mount_and_its_type_is_fuse_scalevfs() {
    if let Err(why) = scalevfs_fuse::fuse_available() {
        eprintln!("SKIPPED: FUSE unavailable: {why}");
        return;
    }
    let dir = std::env::temp_dir().join(format!("scalevfs-mntopt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.canonicalize().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_scalevfs"))
        .arg("mount")
        .arg(&dir)
        .args([
            "--daemon",
            "-o",
            "fsname=opt-test,entry_timeout=1",
            "-o",
            "threads=1",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = mountinfo_of(&dir);
    let works = std::fs::write(dir.join("f"), b"x").is_ok();
    let st = Command::new("umount").arg(&dir).status();
    if !st.is_ok_and(|s| s.success()) {
        let _ = Command::new("fusermount3").arg("-u").arg(&dir).status();
    }
    assert_eq!(mountinfo_of(&dir), None, "unmounted");
    let _ = std::fs::remove_dir(&dir);
    let line = line.expect("mounted");
    let after = line.split(" - ").nth(1).unwrap();
    assert!(after.starts_with("fuse.scalevfs opt-test "), "{line}");
    assert!(line.contains(" rw,nosuid,nodev"), "{line}");
    assert!(works, "the mount serves");
}
