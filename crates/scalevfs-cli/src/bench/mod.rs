//! `scalevfs bench`: the workloads of WORKLOADS.md against the kernel and against scalevfs, side
//! by side in one run.
//!
//! # Systems
//! - `kernel`: real system calls on a fresh tmpfs directory (the reference).
//! - `scalevfs`: the engine's API, in this process.
//! - `fuse`: the engine served through FUSE from this process, mounted on a fresh directory
//!   under the temporary directory, and used with the same system calls as `kernel` (the same
//!   code, rooted at the mountpoint). It shows what FUSE costs against tmpfs, and what the
//!   in-process API saves against FUSE. It needs root and `/dev/fuse`; without them it is
//!   skipped with a note.
//!
//! # Shape
//! - [`target`]: the systems, behind one trait ([`target::Target`]).
//! - [`workloads`]: each workload written once against that trait; it builds its tree and returns
//!   cases (variants), each a recipe for one thread's timed loop.
//! - [`runner`]: one run of a case on N pinned threads for a fixed time.
//! - [`report`]: medians, the table, the JSON records.
//! - [`cleanup`]: what a signal must undo (the FUSE mount, the temporary directories).
//!
//! # Side by side
//! For each case and thread count, every system gets one warm-up run, then the systems take turns
//! run by run (the order reversed every other run), so that a noisy neighbour or a change of CPU
//! frequency falls on both columns alike. Only ratios taken this way are meant to be compared.

mod cleanup;
mod report;
mod runner;
mod target;
mod workloads;

use std::fmt;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use report::{Columns, Figure, Summary};
use runner::Cpus;
use target::{fuse, Engine, Kernel, System, Target};
use workloads::{Case, Workload};

/// Run duration and count by default.
const RUN: Duration = Duration::from_millis(300);
const RUNS: usize = 5;
/// Run duration and count with `--quick`.
const QUICK_RUN: Duration = Duration::from_millis(60);
const QUICK_RUNS: usize = 3;

/// Options of `scalevfs bench`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Thread counts to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    threads: Vec<usize>,
    /// Runs per figure; a figure is their median [default: 5, 3 with --quick].
    #[arg(long)]
    runs: Option<usize>,
    /// Duration of one run, in milliseconds [default: 300, 60 with --quick].
    #[arg(long, value_name = "MS")]
    duration_ms: Option<u64>,
    /// Short runs: the whole benchmark finishes in well under a minute.
    #[arg(long)]
    quick: bool,
    /// Only these workloads, comma-separated (e.g. W1,W3).
    #[arg(long, value_delimiter = ',', value_parser = Workload::parse, value_name = "IDS")]
    only: Vec<Workload>,
    /// Only these systems, comma-separated: kernel, scalevfs, fuse (fuse needs root and
    /// /dev/fuse, and is skipped with a note otherwise).
    #[arg(long, value_delimiter = ',', value_parser = System::parse, value_name = "SYSTEMS")]
    systems: Vec<System>,
    /// Write one JSON record per figure to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Entry and attribute timeout of the fuse system's mount, in seconds. 0 (as `scalevfs
    /// mount` by default): the kernel caches no lookup and no attribute, so every call reaches
    /// the engine.
    #[arg(long, value_name = "SECS", default_value_t = 0.0)]
    fuse_timeout: f64,
    /// Where the kernel side makes its temporary directory (should be tmpfs).
    #[arg(long, value_name = "DIR", default_value = "/dev/shm")]
    tmpdir: PathBuf,
    /// List the workloads and exit.
    #[arg(long)]
    list: bool,
}

/// A benchmark failure, with enough context to find the call that failed.
#[derive(Debug)]
pub struct Error(String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl From<String> for Error {
    fn from(s: String) -> Error {
        Error(s)
    }
}

impl From<&str> for Error {
    fn from(s: &str) -> Error {
        Error(s.to_owned())
    }
}

/// What to run, from the arguments.
struct Plan {
    workloads: Vec<Workload>,
    systems: Vec<System>,
    threads: Vec<usize>,
    runs: usize,
    run: Duration,
    warmup: Duration,
    fuse_timeout: Duration,
}

impl Plan {
    fn new(args: &Args) -> Result<Plan, Error> {
        let pick = |chosen: &[Workload]| {
            Workload::ALL
                .into_iter()
                .filter(|w| chosen.is_empty() || chosen.contains(w))
                .collect::<Vec<_>>()
        };
        let workloads = pick(&args.only);
        let systems: Vec<System> = System::ALL
            .into_iter()
            .filter(|s| args.systems.is_empty() || args.systems.contains(s))
            .collect();
        let mut threads = args.threads.clone();
        threads.sort_unstable();
        threads.dedup();
        if threads.is_empty() || threads[0] == 0 {
            return Err("--threads: thread counts must be at least 1".into());
        }
        let runs = args
            .runs
            .unwrap_or(if args.quick { QUICK_RUNS } else { RUNS });
        if runs == 0 {
            return Err("--runs must be at least 1".into());
        }
        let run = args.duration_ms.map_or(
            if args.quick { QUICK_RUN } else { RUN },
            Duration::from_millis,
        );
        if run.is_zero() {
            return Err("--duration-ms must be at least 1".into());
        }
        let fuse_timeout = Duration::try_from_secs_f64(args.fuse_timeout)
            .map_err(|e| format!("--fuse-timeout {}: {e}", args.fuse_timeout))?;
        Ok(Plan {
            workloads,
            systems,
            threads,
            runs,
            run,
            warmup: (run / 3).max(Duration::from_millis(10)),
            fuse_timeout,
        })
    }

    fn max_threads(&self) -> usize {
        self.threads[self.threads.len() - 1]
    }
}

/// The systems being measured, each present if selected (and, for fuse, possible here).
struct Systems {
    kernel: Option<Kernel>,
    engine: Option<Engine>,
    /// The kernel's code, rooted at a FUSE mount of scalevfs.
    fuse: Option<Kernel>,
    /// Why fuse was selected but is not measured.
    fuse_skipped: Option<String>,
}

impl Systems {
    fn open(plan: &Plan, tmpdir: &std::path::Path) -> Result<Systems, Error> {
        let mut kernel = None;
        if plan.systems.contains(&System::Kernel) {
            let (k, on_tmpfs) = Kernel::in_fresh_dir(tmpdir)?;
            if !on_tmpfs {
                eprintln!(
                    "warning: {} is not on tmpfs; the kernel column is not the reference",
                    tmpdir.display()
                );
            }
            kernel = Some(k);
        }
        let engine = plan
            .systems
            .contains(&System::Scalevfs)
            .then(Engine::new_memfs);
        let (mut fuse, mut fuse_skipped) = (None, None);
        if plan.systems.contains(&System::Fuse) {
            match fuse::usable() {
                Err(why) => {
                    fuse_skipped = Some(format!("it needs root and a usable /dev/fuse ({why})"))
                }
                Ok(()) => match Kernel::fuse_mounted(&std::env::temp_dir(), plan.fuse_timeout) {
                    Ok(k) => fuse = Some(k),
                    Err(e) => fuse_skipped = Some(format!("could not mount: {e}")),
                },
            }
        }
        Ok(Systems {
            kernel,
            engine,
            fuse,
            fuse_skipped,
        })
    }

    /// The table's optional columns.
    fn columns(&self) -> Columns {
        let others = self.engine.is_some() || self.fuse.is_some();
        Columns {
            vs_kernel: self.kernel.is_some() && others,
            vs_fuse: self.fuse.is_some() && self.engine.is_some(),
        }
    }

    /// Builds `w`'s tree and cases on every selected system, in [`System::ALL`] order.
    fn cases(&self, w: Workload, max_threads: usize) -> Result<Vec<(System, Vec<Case>)>, Error> {
        fn build<T: Target>(t: &T, w: Workload, n: usize) -> Result<(System, Vec<Case>), Error> {
            let cases = w
                .cases(t, n)
                .map_err(|e| format!("{} set-up on {}: {e}", w.id(), t.system().name()))?;
            Ok((t.system(), cases))
        }
        let mut sets = Vec::new();
        if let Some(k) = &self.kernel {
            sets.push(build(k, w, max_threads)?);
        }
        if let Some(e) = &self.engine {
            sets.push(build(e, w, max_threads)?);
        }
        if let Some(f) = &self.fuse {
            sets.push(build(f, w, max_threads)?);
        }
        Ok(sets)
    }
}

/// Runs `scalevfs bench`.
pub fn run(args: Args) -> Result<(), Error> {
    if args.list {
        for w in Workload::ALL {
            println!("{}  {:<16} counts {}", w.id(), w.title(), w.unit().name());
        }
        return Ok(());
    }
    let plan = Plan::new(&args)?;
    let cpus = Cpus::allowed()?;
    if plan.max_threads() > cpus.len() {
        eprintln!(
            "warning: {} threads on {} CPUs: some threads share a CPU",
            plan.max_threads(),
            cpus.len()
        );
    }
    // Before any thread starts (the FUSE server's included), so that all of them leave the
    // signals to the thread that cleans up.
    cleanup::install();
    let systems = Systems::open(&plan, &args.tmpdir)?;
    print_preamble(&plan, &cpus, &systems);
    let cols = systems.columns();
    println!("{}", report::header(cols));

    let mut figures: Vec<Figure> = Vec::new();
    for &w in &plan.workloads {
        let sets = systems.cases(w, plan.max_threads())?;
        let Some((_, first)) = sets.first() else {
            continue;
        };
        for (v, case) in first.iter().enumerate() {
            for (sys, cases) in &sets {
                if cases.get(v).map(|c| &c.variant) != Some(&case.variant) {
                    return Err(format!("{}: {} builds different cases", w.id(), sys.name()).into());
                }
            }
            for &threads in &plan.threads {
                let cases: Vec<(System, &Case)> = sets.iter().map(|(s, c)| (*s, &c[v])).collect();
                let row = measure(&plan, &cpus, w, &cases, threads)?;
                let one_thread = |sys: System| {
                    figures
                        .iter()
                        .find(|f| {
                            f.workload == w
                                && f.variant == case.variant
                                && f.system == sys
                                && f.threads == 1
                        })
                        .map(|f| f.ops.median)
                };
                for line in report::rows(&row, one_thread, cols) {
                    println!("{line}");
                }
                // Progress goes to a terminal as it happens; a failure to flush is not fatal.
                let _ = std::io::stdout().flush();
                figures.extend(row);
            }
        }
    }
    if let Some(path) = &args.json {
        report::write_json(path, &figures)?;
        eprintln!("wrote {} records to {}", figures.len(), path.display());
    }
    Ok(())
}

/// Measures one case on every system at `threads` threads, side by side.
fn measure(
    plan: &Plan,
    cpus: &Cpus,
    w: Workload,
    cases: &[(System, &Case)],
    threads: usize,
) -> Result<Vec<Figure>, Error> {
    for (_, case) in cases {
        runner::run_once(case, threads, plan.warmup, cpus)?;
    }
    let mut samples = vec![Vec::with_capacity(plan.runs); cases.len()];
    for r in 0..plan.runs {
        for k in 0..cases.len() {
            let i = if r % 2 == 0 { k } else { cases.len() - 1 - k };
            samples[i].push(runner::run_once(cases[i].1, threads, plan.run, cpus)?);
        }
    }
    Ok(cases
        .iter()
        .zip(&samples)
        .map(|((system, case), runs)| Figure {
            workload: w,
            variant: case.variant.clone(),
            system: *system,
            threads,
            ops: Summary::of(runs),
            runs: runs.len(),
        })
        .collect())
}

fn print_preamble(plan: &Plan, cpus: &Cpus, systems: &Systems) {
    let ids: Vec<&str> = plan.workloads.iter().map(|w| w.id()).collect();
    let threads: Vec<String> = plan.threads.iter().map(|t| t.to_string()).collect();
    println!(
        "scalevfs bench: {} | threads {} pinned to CPUs {} | median of {} runs x {} ms, after a warm-up",
        ids.join(" "),
        threads.join(","),
        cpus.describe(plan.max_threads()),
        plan.runs,
        plan.run.as_millis(),
    );
    if let Some(k) = &systems.kernel {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        println!(
            "kernel:   system calls on {} (Linux {})",
            k.root().display(),
            release.trim()
        );
    }
    if plan.systems.contains(&System::Scalevfs) {
        println!("scalevfs: memfs at /, one Process per thread (Process::fork)");
    }
    if let Some(f) = &systems.fuse {
        let how = f.mount().map(|m| m.describe()).unwrap_or_default();
        println!(
            "fuse:     system calls, as for kernel, on {}: memfs served through FUSE by this \
             process ({how})",
            f.root().display()
        );
    }
    if let Some(why) = &systems.fuse_skipped {
        println!("fuse:     skipped: {why}");
    }
    let cols = systems.columns();
    let mut legend =
        "rates are totals over all threads; ns/op is per thread; scale = rate / rate at 1 thread"
            .to_owned();
    if cols.vs_kernel {
        legend.push_str("; vs kernel = rate / kernel's rate");
    }
    if cols.vs_fuse {
        legend.push_str("; vs fuse = scalevfs's rate / fuse's rate");
    }
    println!("{legend}");
    println!();
}
