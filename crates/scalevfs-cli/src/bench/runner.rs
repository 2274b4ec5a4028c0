//! Running one case on N pinned threads for a fixed time.
//!
//! # A run
//! Every thread pins itself to its CPU, builds its worker (which forks the target handle and
//! checks the operation once), then waits at a barrier with the coordinator. The coordinator
//! releases them together, sleeps for the run's duration and raises the stop flag. Each thread
//! counts operations in a local and times itself from the barrier to the batch in which it sees
//! the flag; its rate is its own count over its own time, and the run's figure is the sum of the
//! threads' rates. The flag is read once per batch of [`BATCH`] operations, so the loop touches
//! no shared line that anyone writes.
//!
//! # Failure
//! A thread whose set-up or operation fails raises the stop flag and returns the error; a
//! thread that panics is reported. Set-up runs under `catch_unwind` so that every thread reaches
//! the barrier: a panic there would otherwise leave the others waiting for ever.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use rustix::thread::CpuSet;

use super::workloads::Case;
use super::Error;

/// Operations between two reads of the stop flag.
const BATCH: u64 = 32;

/// The CPUs this process may run on; thread `i` is pinned to the `i`-th (round robin).
pub struct Cpus(Vec<usize>);

impl Cpus {
    /// The calling thread's affinity mask, as a list.
    pub fn allowed() -> Result<Cpus, Error> {
        let set = rustix::thread::sched_getaffinity(None)
            .map_err(|e| Error::from(format!("sched_getaffinity: {e}")))?;
        let cpus: Vec<usize> = (0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect();
        if cpus.is_empty() {
            return Err("sched_getaffinity: empty CPU set".into());
        }
        Ok(Cpus(cpus))
    }

    /// How many CPUs there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The CPU of thread `i`.
    pub fn for_thread(&self, i: usize) -> usize {
        self.0[i % self.0.len()]
    }

    /// The CPUs that `threads` threads use, e.g. `0,1`.
    pub fn describe(&self, threads: usize) -> String {
        let used: Vec<String> = (0..threads.min(self.0.len()))
            .map(|i| self.for_thread(i).to_string())
            .collect();
        used.join(",")
    }
}

/// Pins the calling thread to `cpu`.
fn pin(cpu: usize) -> Result<(), Error> {
    let mut set = CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set)
        .map_err(|e| Error::from(format!("sched_setaffinity(CPU {cpu}): {e}")))
}

/// Runs `case` on `threads` pinned threads for `duration`; returns total operations per second.
pub fn run_once(
    case: &Case,
    threads: usize,
    duration: Duration,
    cpus: &Cpus,
) -> Result<f64, Error> {
    let barrier = Barrier::new(threads + 1);
    let stop = AtomicBool::new(false);
    let results: Vec<Result<(u64, Duration), Error>> = thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let (barrier, stop) = (&barrier, &stop);
                let cpu = cpus.for_thread(i);
                s.spawn(move || {
                    let worker = pin(cpu).and_then(|()| {
                        catch_unwind(AssertUnwindSafe(|| case.worker(i))).unwrap_or_else(|_| {
                            Err(format!("thread {i}: set-up of {} panicked", case.variant).into())
                        })
                    });
                    barrier.wait();
                    let mut worker = match worker {
                        Ok(w) => w,
                        Err(e) => {
                            stop.store(true, Ordering::Relaxed);
                            return Err(e);
                        }
                    };
                    let start = Instant::now();
                    let mut ops = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        if let Err(e) = worker(BATCH) {
                            stop.store(true, Ordering::Relaxed);
                            return Err(e);
                        }
                        ops += BATCH;
                    }
                    Ok((ops, start.elapsed()))
                })
            })
            .collect();
        barrier.wait();
        thread::sleep(duration);
        stop.store(true, Ordering::Relaxed);
        handles
            .into_iter()
            .enumerate()
            .map(|(i, h)| {
                h.join().unwrap_or_else(|_| {
                    Err(format!("thread {i} panicked in {}", case.variant).into())
                })
            })
            .collect()
    });
    let mut total = 0.0;
    for r in results {
        let (ops, elapsed) = r?;
        total += ops as f64 / elapsed.as_secs_f64();
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::target::Fake;
    use crate::bench::workloads::Workload;

    const SHORT: Duration = Duration::from_millis(20);

    #[test]
    fn every_workload_runs_on_two_threads() {
        let cpus = Cpus::allowed().unwrap();
        for w in Workload::ALL {
            let cases = w.cases(&Fake::new(), 2).unwrap();
            assert!(!cases.is_empty());
            for case in &cases {
                let rate = run_once(case, 2, SHORT, &cpus).unwrap();
                assert!(
                    rate > 0.0,
                    "{} {}: no operations counted",
                    w.id(),
                    case.variant
                );
            }
        }
    }

    /// The fuse system end to end: W1 and W7 through a real mount, then the mount and its
    /// directory are gone. Returns early, with a message, where FUSE cannot be used.
    #[test]
    fn fuse_runs_and_unmounts() {
        use crate::bench::target::{fuse, Kernel, System, Target};
        if let Err(why) = fuse::usable() {
            eprintln!("skipping fuse_runs_and_unmounts: {why}");
            return;
        }
        let cpus = Cpus::allowed().unwrap();
        let k = Kernel::fuse_mounted(&std::env::temp_dir(), Duration::ZERO).unwrap();
        assert_eq!(k.system(), System::Fuse);
        let dir = k.root().to_owned();
        for w in [Workload::W1, Workload::W7] {
            for case in &w.cases(&k, 2).unwrap() {
                let rate = run_once(case, 2, SHORT, &cpus).unwrap();
                assert!(rate > 0.0, "{} {}", w.id(), case.variant);
            }
        }
        let mounts = || std::fs::read_to_string("/proc/self/mounts").unwrap();
        assert!(mounts().contains(dir.to_str().unwrap()));
        drop(k);
        assert!(!mounts().contains(dir.to_str().unwrap()), "still mounted");
        assert!(!dir.exists(), "{} not removed", dir.display());
    }

    #[test]
    fn a_failing_call_in_the_loop_is_an_error() {
        let cpus = Cpus::allowed().unwrap();
        let fake = Fake::failing_after(1000);
        let cases = Workload::W1.cases(&fake, 2).unwrap();
        let err = run_once(&cases[0], 2, SHORT, &cpus).unwrap_err();
        assert!(err.to_string().contains("stat"), "{err}");
    }

    #[test]
    fn a_failing_set_up_is_an_error() {
        let fake = Fake::failing_after(3);
        let err = Workload::W3
            .cases(&fake, 1)
            .err()
            .expect("set-up must fail");
        assert!(err.to_string().contains("Input/output error"), "{err}");
    }

    #[test]
    fn a_panic_in_set_up_does_not_hang() {
        let cpus = Cpus::allowed().unwrap();
        let case = Case::new("panics", |i| match i {
            1 => panic!("deliberate"),
            _ => Ok(Box::new(|_| Ok(()))),
        });
        let err = run_once(&case, 2, SHORT, &cpus).unwrap_err();
        assert!(err.to_string().contains("panicked"), "{err}");
    }
}
