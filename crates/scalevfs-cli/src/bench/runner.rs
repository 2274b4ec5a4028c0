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
//! # Fixed work in phases (W4)
//! Every thread pins itself and builds its phases, then all threads start each phase together
//! at a barrier and time themselves until they finish it. A phase's figure is the operations of
//! all threads over the time of the slowest: the wall time of the phase. A thread whose phase
//! fails raises the abort flag; the others skip their remaining phases but still pass every
//! barrier.
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

use super::workloads::{Case, Kind, Phase, Worker};
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

/// Runs `case` on `threads` pinned threads; returns total operations per second for each of
/// its figures ([`Case::figure_variants`]). A timed loop runs for `duration`; fixed work runs
/// to its end.
pub fn run_once(
    case: &Case,
    threads: usize,
    duration: Duration,
    cpus: &Cpus,
) -> Result<Vec<f64>, Error> {
    match &case.kind {
        Kind::Loop(make) => run_loop(case, make, threads, duration, cpus).map(|r| vec![r]),
        Kind::Phases { names, make } => run_phases(case, names.len(), make, threads, cpus),
    }
}

/// Builds thread `i`'s state with `make` on a pinned thread, catching a panic.
fn set_up<W>(
    case: &Case,
    i: usize,
    cpu: usize,
    make: &(dyn Fn(usize) -> Result<W, Error> + Send + Sync),
) -> Result<W, Error> {
    pin(cpu).and_then(|()| {
        catch_unwind(AssertUnwindSafe(|| make(i))).unwrap_or_else(|_| {
            Err(format!("thread {i}: set-up of {} panicked", case.variant).into())
        })
    })
}

/// Joins a benchmark thread, turning a panic into an error.
fn join<T>(
    case: &Case,
    i: usize,
    h: thread::ScopedJoinHandle<'_, Result<T, Error>>,
) -> Result<T, Error> {
    h.join()
        .unwrap_or_else(|_| Err(format!("thread {i} panicked in {}", case.variant).into()))
}

type Make<W> = Box<dyn Fn(usize) -> Result<W, Error> + Send + Sync>;

/// A timed loop: see the module docs.
fn run_loop(
    case: &Case,
    make: &Make<Worker>,
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
                    let worker = set_up(case, i, cpu, make.as_ref());
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
            .map(|(i, h)| join(case, i, h))
            .collect()
    });
    let mut total = 0.0;
    for r in results {
        let (ops, elapsed) = r?;
        total += ops as f64 / elapsed.as_secs_f64();
    }
    Ok(total)
}

/// Fixed work in `n` phases: see the module docs.
fn run_phases(
    case: &Case,
    n: usize,
    make: &Make<Vec<Phase>>,
    threads: usize,
    cpus: &Cpus,
) -> Result<Vec<f64>, Error> {
    let barrier = Barrier::new(threads);
    let abort = AtomicBool::new(false);
    // Per thread: its (operations, time) for each phase, `None` if another thread failed.
    type Timed = Option<Vec<(u64, Duration)>>;
    let results: Vec<Result<Timed, Error>> = thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let (barrier, abort) = (&barrier, &abort);
                let cpu = cpus.for_thread(i);
                s.spawn(move || {
                    let mut failure = None;
                    let mut phases = match set_up(case, i, cpu, make.as_ref()) {
                        Ok(p) if p.len() == n => p,
                        Ok(p) => {
                            let e = format!("thread {i}: {} phases, expected {n}", p.len());
                            failure = Some(Error::from(e));
                            Vec::new()
                        }
                        Err(e) => {
                            failure = Some(e);
                            Vec::new()
                        }
                    };
                    if failure.is_some() {
                        abort.store(true, Ordering::Relaxed);
                    }
                    let mut timed = Vec::with_capacity(n);
                    for phase in 0..n {
                        barrier.wait();
                        if abort.load(Ordering::Relaxed) {
                            continue;
                        }
                        // Empty only after a failed set-up, which raised `abort`.
                        let Some(run) = phases.get_mut(phase) else {
                            continue;
                        };
                        let start = Instant::now();
                        match run() {
                            Ok(ops) => timed.push((ops, start.elapsed())),
                            Err(e) => {
                                abort.store(true, Ordering::Relaxed);
                                failure = Some(e);
                            }
                        }
                    }
                    match failure {
                        Some(e) => Err(e),
                        None => Ok((timed.len() == n).then_some(timed)),
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(i, h)| join(case, i, h))
            .collect()
    });
    let mut all = Vec::with_capacity(threads);
    for r in results {
        all.push(r?);
    }
    let mut ops = vec![0u64; n];
    let mut wall = vec![Duration::ZERO; n];
    for timed in all {
        let timed = timed.ok_or_else(|| format!("{}: aborted", case.variant))?;
        for (k, (o, t)) in timed.into_iter().enumerate() {
            ops[k] += o;
            wall[k] = wall[k].max(t);
        }
    }
    Ok(ops
        .iter()
        .zip(&wall)
        .map(|(&o, t)| o as f64 / t.as_secs_f64())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::target::{Engine, Fake, Target};
    use crate::bench::workloads::{Sizes, Workload};

    const SHORT: Duration = Duration::from_millis(20);
    const TINY: Sizes = Sizes {
        fstree_dirs: 3,
        fstree_files: 4,
        memory_files: 10,
    };

    /// Every timed workload twice (the second run finds what the first left), each run
    /// yielding one positive rate per figure.
    fn runs_every_workload<T: Target>(t: &T) {
        let cpus = Cpus::allowed().unwrap();
        for w in Workload::ALL.into_iter().filter(|w| w.is_timed()) {
            let cases = w.cases(t, 2, &TINY).unwrap();
            assert!(!cases.is_empty());
            for case in &cases {
                for _ in 0..2 {
                    let rates = run_once(case, 2, SHORT, &cpus).unwrap();
                    assert_eq!(rates.len(), case.figure_variants().len());
                    assert!(
                        rates.iter().all(|&r| r > 0.0),
                        "{} {}: no operations counted",
                        w.id(),
                        case.variant
                    );
                }
            }
        }
    }

    #[test]
    fn every_workload_runs_on_two_threads() {
        runs_every_workload(&Fake::new());
    }

    #[test]
    fn every_workload_runs_on_the_engine() {
        runs_every_workload(&Engine::new_memfs());
    }

    /// W4 leaves no tree behind, and a failure in one phase of one thread is the error.
    #[test]
    fn fstree_cleans_up_and_reports_failures() {
        let cpus = Cpus::allowed().unwrap();
        let t = Engine::new_memfs();
        let case = Workload::W4.cases(&t, 2, &TINY).unwrap().remove(0);
        assert_eq!(
            case.figure_variants(),
            ["create", "walk-stat", "readdir-fstatat", "unlink"]
        );
        run_once(&case, 2, SHORT, &cpus).unwrap();
        assert_eq!(t.readdir_fstatat(&t.path("w4/t0")), Ok(0));
        // A directory in the way of thread 1's tree: its create phase fails with EEXIST.
        t.mkdir(&t.path("w4/t1/d2"), 0o755).unwrap();
        let err = run_once(&case, 2, SHORT, &cpus).unwrap_err();
        assert!(err.to_string().contains("File exists"), "{err}");
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
            for case in &w.cases(&k, 2, &TINY).unwrap() {
                let rates = run_once(case, 2, SHORT, &cpus).unwrap();
                assert!(rates[0] > 0.0, "{} {}", w.id(), case.variant);
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
        let cases = Workload::W1.cases(&fake, 2, &TINY).unwrap();
        let err = run_once(&cases[0], 2, SHORT, &cpus).unwrap_err();
        assert!(err.to_string().contains("stat"), "{err}");
    }

    #[test]
    fn a_failing_set_up_is_an_error() {
        let fake = Fake::failing_after(3);
        let err = Workload::W3
            .cases(&fake, 1, &TINY)
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
