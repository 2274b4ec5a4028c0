//! What the loop examples share: the allocator, the arguments, and running a fixed number of
//! operations on N threads, each with its own forked `Process`.
// Each example uses the part it needs.
#![allow(dead_code)]

use scalevfs::Process;

/// As the `scalevfs` binary does (see ARCHITECTURE.md, "Allocation").
#[global_allocator]
static ALLOC: scalevfs_alloc::Alloc = scalevfs_alloc::Alloc;

/// The operation count: the first argument, 1,000,000 by default.
pub fn count() -> u64 {
    arg(1).and_then(|s| s.parse().ok()).unwrap_or(1_000_000)
}

/// The thread count: the second argument, 1 by default.
pub fn threads() -> usize {
    arg(2).and_then(|s| s.parse().ok()).unwrap_or(1)
}

/// The `i`-th command-line argument.
pub fn arg(i: usize) -> Option<String> {
    std::env::args().nth(i)
}

/// With `PIN=1` in the environment, pins the calling thread to CPU `i` modulo the CPUs
/// there are, as `scalevfs bench` pins its threads; otherwise the scheduler places it.
pub fn pin(i: usize) {
    if std::env::var_os("PIN").map_or(true, |v| v != "1") {
        return;
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut set = rustix::thread::CpuSet::new();
    set.set(i % cpus);
    rustix::thread::sched_setaffinity(None, &set).expect("sched_setaffinity");
}

/// Runs `op(p, &state, k)` for k in 0..n on each of `threads` threads, each on a fork of `p`
/// whose `state` comes from `setup(p, i)`; all start together after their set-up. Prints the
/// rate of `what` (none when n is 0: that run measures the set-up alone, for callgrind).
/// Thread `i` is pinned to CPU `i` with `PIN=1` ([`pin`]).
pub fn run_threads<S>(
    p: &Process,
    n: u64,
    threads: usize,
    what: &str,
    setup: impl Fn(&Process, usize) -> S + Sync,
    op: impl Fn(&Process, &S, u64) + Sync,
) {
    let barrier = std::sync::Barrier::new(threads + 1);
    let mut start = std::time::Instant::now();
    // The threads' own CPU time in their loops, summed (nanoseconds).
    let cpu = std::sync::atomic::AtomicU64::new(0);
    let (user, sys) = (
        std::sync::atomic::AtomicU64::new(0),
        std::sync::atomic::AtomicU64::new(0),
    );
    std::thread::scope(|s| {
        for i in 0..threads {
            let p = p.fork();
            let (barrier, setup, op, cpu, user, sys) = (&barrier, &setup, &op, &cpu, &user, &sys);
            s.spawn(move || {
                pin(i);
                let state = setup(&p, i);
                barrier.wait();
                let t = thread_cpu_ns();
                let (u0, s0) = thread_user_sys_ns();
                for k in 0..n {
                    op(&p, &state, k);
                }
                cpu.fetch_add(thread_cpu_ns() - t, std::sync::atomic::Ordering::Relaxed);
                let (u1, s1) = thread_user_sys_ns();
                user.fetch_add(u1 - u0, std::sync::atomic::Ordering::Relaxed);
                sys.fetch_add(s1 - s0, std::sync::atomic::Ordering::Relaxed);
            });
        }
        barrier.wait();
        start = std::time::Instant::now();
    });
    if n > 0 {
        let el = start.elapsed().as_secs_f64();
        let ops = n * threads as u64;
        println!(
            "{threads} threads x {n} {what}: {:.2}M/s total, {:.1} ns per thread, \
             {:.1} ns of CPU per op ({:.0} user, {:.0} system)",
            ops as f64 / el / 1e6,
            el * 1e9 / n as f64,
            cpu.into_inner() as f64 / ops as f64,
            user.into_inner() as f64 / ops as f64,
            sys.into_inner() as f64 / ops as f64
        );
    }
}

/// The calling thread's CPU time, in nanoseconds: with the wall clock, it tells a loop
/// that got slower per operation (CPU per op rises) from one whose thread did not run
/// (a busy host's steal: the wall clock rises alone).
/// Read through the C library, as `scripts/icount.sh` runs these programs under valgrind
/// (rustix's own vDSO reader fails there).
/// The calling thread's CPU time split into user and system time, in nanoseconds
/// (`getrusage(RUSAGE_THREAD)`, at the kernel's accounting resolution): it tells what a
/// second thread costs in the engine (user) from what it costs in the host's calls
/// (system), as hostfs's loops make both.
pub fn thread_user_sys_ns() -> (u64, u64) {
    // SAFETY: an all-zero rusage is valid, and `r` is a valid rusage for the call to fill.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut r) } != 0 {
        return (0, 0);
    }
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    (ns(r.ru_utime), ns(r.ru_stime))
}

pub fn thread_cpu_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec for the call to fill.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) } != 0 {
        return 0;
    }
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// W7's files: `/w7/f000` .. `/w7/f253`, each holding 64 bytes; returns their paths.
pub fn w7_files(p: &Process) -> Vec<String> {
    w7_files_in(p, "/w7")
}

/// W7's files in directory `dir` (made here).
pub fn w7_files_in(p: &Process, dir: &str) -> Vec<String> {
    p.mkdir(dir, 0o755).expect("mkdir");
    let paths: Vec<String> = (0..254).map(|f| format!("{dir}/f{f:03}")).collect();
    for path in &paths {
        p.write_file(path, &[b'x'; 64]).expect("create a file");
    }
    paths
}
