//! `scalevfs mount` in the foreground prints the namespace's statistics on `SIGUSR1` and
//! keeps serving. Needs FUSE (root, or `/dev/fuse` with `fusermount3`); skipped, with a
//! message, where the machine cannot mount.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

#[test]
fn sigusr1_prints_the_statistics_and_the_mount_goes_on() {
    if let Err(why) = scalevfs_fuse::fuse_available() {
        eprintln!("SKIPPED: FUSE unavailable: {why}");
        return;
    }
    let dir = std::env::temp_dir().join(format!("scalevfs-stats-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_scalevfs"))
        .arg("mount")
        .arg(&dir)
        .arg("--notify-ready")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = Pid::from_raw(child.id() as i32);
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    let mut err = BufReader::new(child.stderr.take().unwrap());

    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        std::fs::create_dir(dir.join("d")).unwrap();
        std::fs::write(dir.join("d/f"), vec![1u8; 3 * 4096]).unwrap();
        kill(pid, Signal::SIGUSR1).unwrap();
        let mut line = String::new();
        err.read_line(&mut line).unwrap();
        assert!(line.starts_with("scalevfs mount: "), "{line}");
        assert!(line.contains(" inodes=3 "), "root, d and f: {line}");
        assert!(line.contains(" data_pages=3 "), "{line}");
        // Still serving.
        assert_eq!(std::fs::read(dir.join("d/f")).unwrap().len(), 3 * 4096);
    }));
    kill(pid, Signal::SIGTERM).unwrap();
    let st = child.wait().unwrap();
    let _ = std::fs::remove_dir(&dir);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    assert!(st.success(), "the mount exits cleanly on SIGTERM: {st}");
}
