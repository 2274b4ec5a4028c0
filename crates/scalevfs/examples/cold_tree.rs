//! W5's loop, for instruction counts under callgrind and for profiles at two threads:
//! `cold_tree N [CAP] [THREADS] [split|deep]` has each of THREADS threads (default 1) stat N
//! files over hostfs, cycling over a host tree of its own of 16 directories of 1,000 files
//! (made in a fresh directory on `/dev/shm`, removed at the end), with the inode cache
//! capped at CAP objects (default 8,000, W5's cap: half of one tree). Every directory the
//! cycle comes back to was swept meanwhile and is loaded again, so this counts the miss
//! path: the listing, the inode-cache inserts, the sweeps and the trims. At the end it
//! prints the objects loaded per stat and the host listings per directory visit (1.0 when
//! no directory is swept while a thread is in it).
//!
//! With `split`, each thread has a namespace of its own instead (a hostfs over its own
//! tree, capped at CAP / THREADS), so that the threads share no cache at all: what is left
//! between them is the process (the allocator, the epoch collector, the host's descriptor
//! table). Comparing the two tells what the shared caches cost a second thread. But a
//! shared namespace serves the trees' parent, so its paths have one component more than
//! `split`'s; `deep` gives each thread a namespace of its own over that parent (capped at
//! CAP / THREADS), with the shared run's paths, so that only the sharing differs; at one
//! thread, `deep` has the shared run's paths too (W5's own layout at every thread count).
//!
//! Each run prints the wall-clock rate and the CPU time per stat (the threads' own, in
//! their loops): on a busy host the first moves with the time a thread did not get, the
//! second with the work and the cache misses of each stat. The CPU time is split into
//! user time (the engine) and system time (the host's calls, mostly one `fstatat` per
//! object loaded). With `PIN=1`, thread i runs on CPU i, as in `scalevfs bench`
//! (unpinned, the scheduler places them). Like `scalevfs bench`, it keeps each thread's
//! full allocator pages its own (`scalevfs_alloc::keep_full_pages`): without that, a
//! second thread's frees into abandoned full pages cost about 300 instructions a stat
//! more than one thread's.

mod common;

use scalevfs::{Creds, HostFs, HostFsOptions, Process, Vfs};
use std::sync::Arc;

const DIRS: usize = 16;
const FILES: usize = 1000;

fn hostfs(root: &std::path::Path, cap: u64) -> Arc<Vfs> {
    let opts = HostFsOptions {
        max_inodes: Some(cap),
        ..HostFsOptions::default()
    };
    Vfs::new(HostFs::new(root, opts).expect("hostfs over the tree"))
}

/// The host tree, removed when dropped: at the end, or as a panic unwinds (a closed pipe
/// on standard output, as `| head -1` gives, left 32,000 files in `/dev/shm`).
struct Tree(std::path::PathBuf);

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn main() {
    scalevfs_alloc::keep_full_pages();
    let n = common::count();
    let cap: u64 = common::arg(2).and_then(|a| a.parse().ok()).unwrap_or(8000);
    let threads: usize = common::arg(3).and_then(|a| a.parse().ok()).unwrap_or(1);
    let split = common::arg(4).is_some_and(|a| a == "split" || a == "deep");
    let deep = common::arg(4).is_some_and(|a| a == "deep");
    let base = if std::path::Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "/tmp"
    };
    let tree = Tree(std::path::PathBuf::from(format!(
        "{base}/scalevfs-cold-tree-{}",
        std::process::id()
    )));
    let root = &tree.0;
    // Each thread's tree is `t<i>` below the root; a namespace serves the root (shared, or
    // one per thread with `deep`), or (one thread, or `split`) a namespace per tree serves
    // that tree, so the paths have one component fewer.
    let per_tree = !deep && (split || threads == 1);
    let paths: Vec<Vec<String>> = (0..threads)
        .map(|t| {
            let top = if per_tree {
                String::new()
            } else {
                format!("/t{t}")
            };
            let mut paths = Vec::with_capacity(DIRS * FILES);
            for d in 0..DIRS {
                let dir = root.join(format!("t{t}/d{d:02}"));
                std::fs::create_dir_all(&dir).expect("create the host tree");
                for f in 0..FILES {
                    std::fs::write(dir.join(format!("f{f:03}")), b"").expect("create a host file");
                    paths.push(format!("{top}/d{d:02}/f{f:03}"));
                }
            }
            paths
        })
        .collect();
    let vfss: Vec<Arc<Vfs>> = if deep {
        let share = (cap / threads as u64).max(1);
        (0..threads).map(|_| hostfs(root, share)).collect()
    } else if per_tree {
        let share = (cap / threads as u64).max(1);
        (0..threads)
            .map(|t| hostfs(&root.join(format!("t{t}")), share))
            .collect()
    } else {
        vec![hostfs(root, cap)]
    };
    let p = vfss[0].process(Creds::root());
    let stat = |p: &Process, paths: &[String], k: u64| {
        p.stat(&paths[k as usize % paths.len()]).expect("stat").ino
    };
    if threads == 1 {
        // On this thread, as the instruction counts recorded in perf/ were taken.
        common::pin(0);
        let (t, cpu) = (std::time::Instant::now(), common::thread_cpu_ns());
        let (u0, s0) = common::thread_user_sys_ns();
        let mut sum = 0u64;
        for k in 0..n {
            sum = sum.wrapping_add(stat(&p, &paths[0], k));
        }
        if n > 0 {
            let ns = t.elapsed().as_nanos() as f64 / n as f64;
            let cpu = (common::thread_cpu_ns() - cpu) as f64 / n as f64;
            let (u1, s1) = common::thread_user_sys_ns();
            println!(
                "1 thread x {n} stats: {ns:.1} ns per stat, {cpu:.1} ns of CPU per op \
                 ({:.0} user, {:.0} system) (checksum {sum})",
                (u1 - u0) as f64 / n as f64,
                (s1 - s0) as f64 / n as f64
            );
        }
    } else {
        // Each thread's own process: a fork of `p`, or one of its own namespace's.
        let own = |p: &Process, t: usize| match split {
            true => vfss[t].process(Creds::root()),
            false => p.fork(),
        };
        common::run_threads(
            &p,
            n,
            threads,
            "stats",
            |p, t| (own(p, t), &paths[t], std::cell::Cell::new(0u64)),
            |_, (p, paths, sum), k| {
                // Per thread: a shared sum would be a line both threads write.
                sum.set(std::hint::black_box(
                    sum.get().wrapping_add(stat(p, paths, k)),
                ));
            },
        );
    }
    let (mut loads, mut listings) = (0, 0);
    for v in &vfss {
        let s = v.stats();
        loads += s.root_fs.inode_cache.map_or(0, |c| c.loads);
        listings += s.unpinned_calls;
    }
    drop(p);
    drop(vfss);
    drop(tree);
    if n > 0 {
        let stats = threads as u64 * n;
        println!(
            "{} host files, cache capped at {cap}{}: {:.3} objects loaded per stat; \
             {:.3} host listings per directory visit",
            threads * DIRS * FILES,
            match (deep, split) {
                (true, _) => " (a namespace per thread)",
                (_, true) => " (split per thread)",
                _ => "",
            },
            loads as f64 / stats as f64,
            listings as f64 / stats.div_ceil(FILES as u64) as f64,
        );
    }
}
