//! `scalevfs bench`: the workloads of docs/WORKLOADS.md against the kernel and against scalevfs, side
//! by side in one run.
//!
//! # Systems
//! - `kernel`: real system calls on a fresh tmpfs directory (the reference).
//! - `vfs`, `wasmer`: the in-process peers, the `vfs` crate's `MemoryFS` and wasmer's
//!   `virtual-fs` memory file system, on the workloads whose operations they have
//!   ([`target::peers`](target)). They come with the `peers` cargo feature, on by default;
//!   a build without it measures the other three and refuses `--systems vfs,wasmer`.
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
//! - [`memory`]: W12, bytes per empty file (in a child process for the in-process systems).
//! - [`plot`]: `--plot`, the figures drawn.
//! - [`cleanup`]: what a signal must undo (the FUSE mount, the temporary directories).
//!
//! # Side by side
//! For each case and thread count, every system gets one warm-up run, then the systems take turns
//! run by run (the order reversed every other run), so that a noisy neighbour or a change of CPU
//! frequency falls on both columns alike. Only ratios taken this way are meant to be compared.
//!
//! W4 is fixed work (a tree per thread, built, walked twice and removed), run the same way: one
//! warm-up and then the systems in turn, each run yielding one figure per phase.

mod cleanup;
mod control;
mod memory;
mod plot;
mod report;
mod runner;
mod target;
mod workloads;

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use memory::MemFigure;
use report::{Columns, Figure, Summary};
use runner::Cpus;
use target::{fuse, Engine, HostDir, Kernel, System, Target};
#[cfg(feature = "peers")]
use target::{VfsMem, WasmerMem};
use workloads::{Case, Sizes, Workload};

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
    /// Short runs and a tenth of W4's and W12's sizes: the whole benchmark finishes in about
    /// a minute.
    #[arg(long)]
    quick: bool,
    /// Only these workloads, comma-separated (e.g. W1,W3).
    #[arg(long, value_delimiter = ',', value_parser = Workload::parse, value_name = "IDS")]
    only: Vec<Workload>,
    /// Only these systems, comma-separated: kernel, vfs, wasmer, scalevfs, fuse (fuse needs
    /// root and /dev/fuse, and is skipped with a note otherwise), control (a loop that shares
    /// nothing, measured beside each timed case: what the machine gave a second thread).
    #[arg(long, value_delimiter = ',', value_parser = System::parse, value_name = "SYSTEMS")]
    systems: Vec<System>,
    /// Write one JSON record per figure to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Draw the figures to FILE (.svg or .png): rates at one thread by workload and system,
    /// scaling by threads, and W12's bytes per file.
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
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
    /// Internal: measure W12 for this system in this process, and print the bytes.
    #[arg(long, hide = true, value_parser = System::parse)]
    memory_child: Option<System>,
    /// Internal: the file count for --memory-child.
    #[arg(long, hide = true, default_value_t = Sizes::FULL.memory_files)]
    memory_files: usize,
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
    sizes: Sizes,
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
            .filter(|s| s.is_built())
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
            sizes: if args.quick {
                Sizes::QUICK
            } else {
                Sizes::FULL
            },
        })
    }

    fn max_threads(&self) -> usize {
        self.threads[self.threads.len() - 1]
    }
}

/// The systems being measured, each present if selected (and, for fuse, possible here).
struct Systems {
    kernel: Option<Kernel>,
    #[cfg(feature = "peers")]
    vfs: Option<VfsMem>,
    #[cfg(feature = "peers")]
    wasmer: Option<WasmerMem>,
    engine: Option<Engine>,
    /// The kernel's code, rooted at a FUSE mount of scalevfs.
    fuse: Option<Kernel>,
    /// Why fuse was selected but is not measured.
    fuse_skipped: Option<String>,
    /// Whether the control row is measured beside each timed loop.
    control: bool,
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
        #[cfg(feature = "peers")]
        let vfs = plan.systems.contains(&System::Vfs).then(VfsMem::new);
        #[cfg(feature = "peers")]
        let wasmer = plan.systems.contains(&System::Wasmer).then(WasmerMem::new);
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
            #[cfg(feature = "peers")]
            vfs,
            #[cfg(feature = "peers")]
            wasmer,
            engine,
            fuse,
            fuse_skipped,
            control: plan.systems.contains(&System::Control),
        })
    }

    /// Whether `sys` is a peer being measured.
    fn has_peer(&self, sys: System) -> bool {
        match sys {
            #[cfg(feature = "peers")]
            System::Vfs => self.vfs.is_some(),
            #[cfg(feature = "peers")]
            System::Wasmer => self.wasmer.is_some(),
            _ => false,
        }
    }

    /// The table's optional columns.
    fn columns(&self) -> Columns {
        let peers = self.has_peer(System::Vfs) || self.has_peer(System::Wasmer);
        let others = peers || self.engine.is_some() || self.fuse.is_some();
        Columns {
            vs_kernel: self.kernel.is_some() && others,
            vs_peer: peers && self.engine.is_some(),
            vs_fuse: self.fuse.is_some() && self.engine.is_some(),
        }
    }

    /// Builds `w`'s tree and cases on every selected system that can run it, in
    /// [`System::ALL`] order.
    ///
    /// A peer whose set-up fails is left out, with a note; any other system's failure is the
    /// benchmark's error.
    fn cases(
        &self,
        w: Workload,
        plan: &Plan,
        notes: &mut Vec<String>,
    ) -> Result<Vec<(System, Vec<Case>)>, Error> {
        let mut sets = Vec::new();
        let mut build = |built: Option<(System, Result<Vec<Case>, Error>)>| match built {
            None => Ok(()),
            Some((sys, Ok(cases))) => {
                sets.push((sys, cases));
                Ok(())
            }
            Some((sys, Err(e))) => {
                let e = format!("{} set-up on {}: {e}", w.id(), sys.name());
                match sys.is_peer() {
                    true => {
                        notes.push(e);
                        Ok(())
                    }
                    false => Err(Error::from(e)),
                }
            }
        };
        type Built = Option<(System, Result<Vec<Case>, Error>)>;
        fn on<T: Target>(t: &Option<T>, w: Workload, plan: &Plan) -> Built {
            let t = t.as_ref().filter(|t| t.supports(w))?;
            let cases = t
                .for_workload(w)
                .map_err(Error::from)
                .and_then(|t| w.cases(&t, plan.max_threads(), &plan.sizes));
            Some((t.system(), cases))
        }
        build(on(&self.kernel, w, plan))?;
        #[cfg(feature = "peers")]
        {
            build(on(&self.vfs, w, plan))?;
            build(on(&self.wasmer, w, plan))?;
        }
        build(on(&self.engine, w, plan))?;
        build(on(&self.fuse, w, plan))?;
        Ok(sets)
    }

    /// W12 on every selected system that can run it, in [`System::ALL`] order.
    fn memory(&self, plan: &Plan, progress: &ProgressBar) -> Result<Vec<MemFigure>, Error> {
        let files = plan.sizes.memory_files;
        let mut figures = Vec::new();
        for sys in System::ALL {
            progress.set_message(format!("W12 memory on {}", sys.name()));
            let figure = match sys {
                System::Kernel => match &self.kernel {
                    Some(k) => memory::kernel(k, files)?,
                    None => continue,
                },
                System::Vfs | System::Wasmer if self.has_peer(sys) => memory::in_child(sys, files)?,
                System::Scalevfs if self.engine.is_some() => memory::in_child(sys, files)?,
                _ => continue,
            };
            progress.inc(1);
            figures.push(figure);
        }
        Ok(figures)
    }

    /// How many systems W12 measures.
    fn memory_count(&self) -> u64 {
        [
            self.kernel.is_some(),
            self.has_peer(System::Vfs),
            self.has_peer(System::Wasmer),
            self.engine.is_some(),
        ]
        .iter()
        .filter(|&&b| b)
        .count() as u64
    }
}

/// Runs `scalevfs bench`.
pub fn run(args: Args) -> Result<(), Error> {
    if let Some(system) = args.memory_child {
        return memory::child(system, args.memory_files);
    }
    if args.list {
        for w in Workload::ALL {
            println!("{:<7} {:<20} counts {}", w.id(), w.title(), w.unit().name());
        }
        return Ok(());
    }
    let plan = Plan::new(&args)?;
    if let Some(path) = &args.plot {
        plot::check_path(path)?;
    }
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

    // Progress on stderr (shown only on a terminal); the table goes to stdout between redraws.
    let progress = ProgressBar::new(0).with_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} runs, {elapsed} {msg}")
            .map_err(|e| format!("progress template: {e}"))?,
    );
    let say = |line: &str| progress.suspend(|| println!("{line}"));
    let mut figures: Vec<Figure> = Vec::new();
    // What went wrong with a peer, repeated after the table.
    let mut notes: Vec<String> = Vec::new();
    for &w in plan.workloads.iter().filter(|w| w.is_timed()) {
        progress.set_message(format!("{} set-up", w.id()));
        let sets = systems.cases(w, &plan, &mut notes)?;
        let Some((_, first)) = sets.first() else {
            continue;
        };
        // The control sits beside each timed loop (a phased case's figures are its phases).
        let control = |case: &Case| systems.control && case.figure_variants().len() == 1;
        let rows_of = |case: &Case| sets.len() as u64 + u64::from(control(case));
        let runs: u64 = first.iter().map(rows_of).sum();
        progress.inc_length((plan.runs as u64 + 1) * runs * plan.threads.len() as u64);
        for (v, case) in first.iter().enumerate() {
            for (sys, cases) in &sets {
                if cases.get(v).map(|c| &c.variant) != Some(&case.variant) {
                    return Err(format!("{}: {} builds different cases", w.id(), sys.name()).into());
                }
            }
            // A peer that fails on this case sits out the rest of it, at every thread count.
            let mut failed: Vec<(System, usize, Error)> = Vec::new();
            let mut cases: Vec<(System, &Case)> = sets.iter().map(|(s, c)| (*s, &c[v])).collect();
            let probe = control(case).then(|| control::case(&case.variant));
            if let Some(p) = &probe {
                cases.push((System::Control, p));
            }
            progress.set_message(format!("{} {}", w.id(), case.variant));
            let measured = measure(&plan, &cpus, w, &cases, &progress, &mut failed)?;
            for (sys, threads, e) in &failed {
                say(&format!(
                    "{:<7} {:<16} {:>11}  {:<8}  failed: {e}",
                    w.id(),
                    case.variant,
                    threads,
                    sys.name()
                ));
                notes.push(format!(
                    "{} {} at {threads} threads: {} failed: {e}",
                    w.id(),
                    case.variant,
                    sys.name()
                ));
            }
            for rows in measured {
                for row in rows {
                    let one_thread = |sys: System| {
                        figures
                            .iter()
                            .find(|f| {
                                f.workload == w
                                    && f.variant == row[0].variant
                                    && f.system == sys
                                    && f.threads == 1
                            })
                            .map(|f| f.ops.median)
                    };
                    for line in report::rows(&row, one_thread, cols) {
                        say(&line);
                    }
                    figures.extend(row);
                }
            }
            // What the systems' caches counted, cumulative from the set-up on, over every
            // thread count (W5).
            let threads: Vec<String> = plan.threads.iter().map(|t| t.to_string()).collect();
            for (sys, c) in &cases {
                if let Some(line) = c.counters.as_ref().and_then(|f| f()) {
                    say(&format!(
                        "{:<7} {:<16} {:>11}  {:<8}  {line}",
                        w.id(),
                        case.variant,
                        threads.join(","),
                        sys.name()
                    ));
                }
            }
        }
    }
    let mut mem = Vec::new();
    if plan.workloads.contains(&Workload::W12) {
        progress.inc_length(systems.memory_count());
        mem = systems.memory(&plan, &progress)?;
        say("");
        for line in report::memory_rows(&mem) {
            say(&line);
        }
    }
    progress.finish_and_clear();
    if !notes.is_empty() {
        println!();
        println!("Peers that failed (their rows are missing above):");
        for n in &notes {
            println!("- {n}");
        }
    }
    if let Some(path) = &args.json {
        report::write_json(path, &figures, &mem)?;
        eprintln!(
            "wrote {} records to {}",
            figures.len() + mem.len(),
            path.display()
        );
    }
    if let Some(path) = &args.plot {
        plot::write(path, &figures, &mem, &plan.threads)?;
        eprintln!("wrote the plot to {}", path.display());
    }
    Ok(())
}

/// Measures one case on every system at every thread count of the plan, side by side:
/// each round runs every (thread count, system) pair once, in an order that reverses from
/// one round to the next, so that a drift of the machine's speed during the measurement
/// weighs on every pair alike, and on the scaling (one figure over another measured a
/// moment apart) as little as on the ratios between systems. Returns, for each thread
/// count in the plan's order, one group of figures (a row per system) for each of the
/// case's figure variants.
///
/// A peer that fails (both peers have known bugs under concurrency) is dropped from the case
/// at every thread count, and its error returned in `failed` with the thread count it failed
/// at; a failure of any other system is the benchmark's error.
fn measure(
    plan: &Plan,
    cpus: &Cpus,
    w: Workload,
    cases: &[(System, &Case)],
    progress: &ProgressBar,
    failed: &mut Vec<(System, usize, Error)>,
) -> Result<Vec<Vec<Vec<Figure>>>, Error> {
    let threads = &plan.threads;
    let mut alive = vec![true; cases.len()];
    // samples[thread count][system][run][figure variant]
    let mut samples = vec![vec![Vec::with_capacity(plan.runs); cases.len()]; threads.len()];
    let mut run = |t: usize, i: usize, duration: Duration, keep: bool| -> Result<(), Error> {
        if alive[i] {
            match runner::run_once(cases[i].1, threads[t], duration, cpus) {
                Ok(rates) if keep => samples[t][i].push(rates),
                Ok(_) => {}
                Err(e) if cases[i].0.is_peer() => {
                    alive[i] = false;
                    failed.push((cases[i].0, threads[t], e));
                }
                Err(e) => return Err(e),
            }
        }
        progress.inc(1);
        Ok(())
    };
    let pairs: Vec<(usize, usize)> = (0..threads.len())
        .flat_map(|t| (0..cases.len()).map(move |i| (t, i)))
        .collect();
    for &(t, i) in &pairs {
        run(t, i, plan.warmup, false)?;
    }
    for r in 0..plan.runs {
        for k in 0..pairs.len() {
            let (t, i) = pairs[if r % 2 == 0 { k } else { pairs.len() - 1 - k }];
            run(t, i, plan.run, true)?;
        }
    }
    let variants = cases[0].1.figure_variants();
    Ok(threads
        .iter()
        .zip(&samples)
        .map(|(&threads, samples)| {
            variants
                .iter()
                .enumerate()
                .map(|(v, variant)| {
                    cases
                        .iter()
                        .zip(samples)
                        .zip(&alive)
                        .filter(|(_, &alive)| alive)
                        .map(|(((system, _), runs), _)| {
                            let runs: Vec<f64> = runs.iter().map(|r| r[v]).collect();
                            Figure {
                                workload: w,
                                variant: variant.clone(),
                                system: *system,
                                threads,
                                ops: Summary::of(&runs),
                                runs: runs.len(),
                            }
                        })
                        .collect()
                })
                .collect()
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
    let sz = &plan.sizes;
    if plan.workloads.contains(&Workload::W4) {
        println!(
            "W4:       {} directories x {} files per thread, every phase timed on its own",
            sz.fstree_dirs, sz.fstree_files
        );
    }
    if plan.workloads.contains(&Workload::W12) {
        println!(
            "W12:      {} empty files, {} to a directory",
            sz.memory_files,
            memory::PER_DIR
        );
    }
    if let Some(k) = &systems.kernel {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        println!(
            "kernel:   system calls on {} (Linux {})",
            k.root().display(),
            release.trim()
        );
    }
    if systems.has_peer(System::Vfs) {
        println!("vfs:      the vfs crate's MemoryFS, in this process (W1 W3 W4 W7 W8 W12)");
    }
    if systems.has_peer(System::Wasmer) {
        println!("wasmer:   wasmer's virtual-fs mem_fs, in this process (W1 W3 W4 W8 W9 W12)");
    }
    if systems.engine.is_some() {
        println!(
            "scalevfs: memfs at /, one Process per thread (Process::fork); for W5 and W5-warm, \
             hostfs over a fresh directory in {} (W5: a tree per thread, caches capped at half of one tree)",
            HostDir::parent().display()
        );
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
    if systems.control {
        println!(
            "control:  not a file system: a loop that shares nothing between threads (a lookup \
             in a table of the thread's own, a 64-byte copy into a fresh allocation), measured \
             in the same rounds as each timed case; its scale is what this machine gave a \
             second thread meanwhile"
        );
    }
    let cols = systems.columns();
    let mut legend =
        "rates are totals over all threads; ns/op is per thread; scale = rate / rate at 1 thread"
            .to_owned();
    if cols.vs_kernel {
        legend.push_str("; vs kernel = rate / kernel's rate");
    }
    if cols.vs_peer {
        legend.push_str("; vs peer = scalevfs's rate / the best peer's rate");
    }
    if cols.vs_fuse {
        legend.push_str("; vs fuse = scalevfs's rate / fuse's rate");
    }
    println!("{legend}");
    println!();
}
