//! What the race and stress tests share: a time budget, a watchdog, workers, and errno
//! lists that hold only what Linux can return.

#![allow(dead_code)]

use scalevfs::*;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// How long each race runs.
pub fn budget() -> Duration {
    let secs = std::env::var("SCALEVFS_RACE_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or(2.0);
    Duration::from_secs_f64(secs)
}

/// Runs `workers` (each gets its index and the stop flag) until the budget is spent, under
/// a watchdog that aborts the process if they have not all returned well after it (a hang
/// is a failure too). A worker's panic fails the test.
pub fn race(name: &str, workers: Vec<Worker>) {
    race_for(name, budget(), workers)
}

/// [`race`] for `dur`.
pub fn race_for(name: &str, dur: Duration, workers: Vec<Worker>) {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    let limit = dur + Duration::from_secs(60);
    let watchdog = {
        let done = done.clone();
        let name = name.to_string();
        std::thread::spawn(move || {
            let t0 = Instant::now();
            while !done.load(SeqCst) {
                if t0.elapsed() > limit {
                    eprintln!("watchdog: {name} still running after {limit:?}: a hang");
                    std::process::abort();
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let start = Arc::new(Barrier::new(workers.len()));
    let hs: Vec<_> = workers
        .into_iter()
        .map(|w| {
            let stop = stop.clone();
            let start = start.clone();
            std::thread::spawn(move || {
                // A worker that panics stops the others; one that finishes does not.
                struct OnPanic(Arc<AtomicBool>);
                impl Drop for OnPanic {
                    fn drop(&mut self) {
                        if std::thread::panicking() {
                            self.0.store(true, SeqCst);
                        }
                    }
                }
                let _on_panic = OnPanic(stop.clone());
                start.wait();
                w(&stop)
            })
        })
        .collect();
    let t0 = Instant::now();
    while t0.elapsed() < dur && !stop.load(SeqCst) && !hs.iter().all(|h| h.is_finished()) {
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, SeqCst);
    let mut failed = None;
    for h in hs {
        if let Err(p) = h.join() {
            failed.get_or_insert(p);
        }
    }
    done.store(true, SeqCst);
    watchdog.join().unwrap();
    if let Some(p) = failed {
        std::panic::resume_unwind(p);
    }
}

pub type Worker = Box<dyn FnOnce(&AtomicBool) + Send>;

pub fn worker(f: impl FnOnce(&AtomicBool) + Send + 'static) -> Worker {
    Box::new(f)
}

/// Asserts that `r` is Ok or one of `allowed` (what Linux can return here).
#[track_caller]
pub fn ok_or<T>(what: &str, r: Result<T>, allowed: &[Errno]) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) if allowed.contains(&e) => None,
        Err(e) => panic!("{what}: {e:?}, which Linux does not return here"),
    }
}

/// Mount churn on the directory `dir` (which it makes), keeping the mount sequence moving
/// so that lockless walks fail their validation and fall back to the locked walk.
pub fn mount_churn(p: Process, dir: &str) -> Worker {
    p.mkdir(dir, 0o755).unwrap();
    let dir = dir.to_string();
    worker(move |stop| {
        while !stop.load(SeqCst) {
            p.mount(&dir, MemFs::new(MemFsOptions::default())).unwrap();
            p.umount(&dir).unwrap();
        }
    })
}
