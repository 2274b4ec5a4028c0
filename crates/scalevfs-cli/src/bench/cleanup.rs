//! Clean-up when a signal (Ctrl-C, `SIGTERM`, `SIGHUP`) ends the benchmark.
//!
//! Errors and panics unwind through the targets' destructors, which remove the temporary
//! directories and unmount the FUSE mount. A signal would kill the process without them, and a
//! FUSE mount whose server is gone stays behind, answering "Transport endpoint is not
//! connected". So the benchmark blocks these signals in every thread and a watcher thread takes
//! them: it detaches the registered mounts (lazy unmount), removes the registered directories,
//! and exits with the conventional status (128 + the signal number).

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nix::sys::signal::{SigSet, Signal};

/// What a signal must clean up.
enum Leftover {
    /// A directory tree to remove.
    Tree(PathBuf),
    /// A mountpoint to detach, then remove (it is empty underneath).
    Mount(PathBuf),
}

impl Leftover {
    fn path(&self) -> &Path {
        match self {
            Leftover::Tree(p) | Leftover::Mount(p) => p,
        }
    }
}

static LEFTOVERS: Mutex<Vec<Leftover>> = Mutex::new(Vec::new());

fn register(l: Leftover) {
    LEFTOVERS.lock().unwrap_or_else(|e| e.into_inner()).push(l);
}

/// Removes the tree under `path` if a signal ends the benchmark.
pub fn remove_tree_on_signal(path: &Path) {
    register(Leftover::Tree(path.to_owned()));
}

/// Detaches the mount on `path` and removes `path` if a signal ends the benchmark.
pub fn unmount_on_signal(path: &Path) {
    register(Leftover::Mount(path.to_owned()));
}

/// `path` has been cleaned up normally.
pub fn forget(path: &Path) {
    LEFTOVERS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|l| l.path() != path);
}

/// Blocks `SIGINT`, `SIGTERM` and `SIGHUP` in the calling thread, and so in every thread it
/// starts afterwards, and starts the thread that takes them. Call it before starting any
/// other thread. If the watcher cannot start, the signals stay as they were (a warning says
/// so).
pub fn install() {
    let mut signals = SigSet::empty();
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        signals.add(s);
    }
    if let Err(e) = signals.thread_block() {
        eprintln!("warning: cannot block signals ({e}); Ctrl-C will not clean up");
        return;
    }
    let watcher = std::thread::Builder::new()
        .name("bench-signals".into())
        .spawn(move || {
            // Only a signal ends this thread (or the process's exit).
            if let Ok(sig) = signals.wait() {
                clean_up(sig);
            }
        });
    if let Err(e) = watcher {
        eprintln!("warning: cannot start the signal thread ({e}); Ctrl-C will not clean up");
        let _ = signals.thread_unblock();
    }
}

/// Detaches the mounts, removes the directories and exits.
fn clean_up(sig: Signal) -> ! {
    eprintln!("scalevfs bench: {sig}: cleaning up");
    let leftovers = std::mem::take(&mut *LEFTOVERS.lock().unwrap_or_else(|e| e.into_inner()));
    for l in &leftovers {
        if let Leftover::Mount(p) = l {
            if let Err(e) = scalevfs_fuse::lazy_unmount(p) {
                eprintln!("warning: detaching {}: {e}", p.display());
            }
            if let Err(e) = std::fs::remove_dir(p) {
                eprintln!("warning: could not remove {}: {e}", p.display());
            }
        }
    }
    for l in &leftovers {
        if let Leftover::Tree(p) = l {
            // The benchmark's threads may still be changing the tree: try again once.
            if std::fs::remove_dir_all(p).is_err() {
                if let Err(e) = std::fs::remove_dir_all(p) {
                    eprintln!("warning: could not remove {}: {e}", p.display());
                }
            }
        }
    }
    std::process::exit(128 + sig as i32);
}
