//! The workloads of docs/WORKLOADS.md, each written once against [`Target`].
//!
//! A workload builds its tree on a target, with the same relative layout on every target (under
//! the tmpfs directory for the kernel, under `/` for scalevfs), then returns its [`Case`]s: one
//! per variant, each a recipe for one thread's timed loop. The harness runs every case on every
//! system side by side, so a workload never names a system.
//!
//! Every path a loop uses is prepared while the case is built, and every call a loop makes is
//! checked: a worker runs its operation once before it is handed to the harness, and a failing
//! call inside the timed loop ends the benchmark with an error. No figure counts failing calls.
//!
//! # Adding a workload
//! Add a variant to [`Workload`] and to [`Workload::ALL`], its arms in the `match`es below, and a
//! function from a target to its cases.

use std::fmt::Debug;
use std::hint::black_box;

use super::target::{Access, Errno, Target};
use super::Error;

/// A workload of docs/WORKLOADS.md.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Workload {
    /// stat_same: every thread loops `stat("/wis/a/b/c/file")` on one file.
    W1,
    /// access_distinct: thread *i* loops `access(path_i, R_OK)` on its own file, 4 components.
    W2,
    /// Depth sweep: `fstatat(dirfd, p)` with 1, 4 and 16 components, 1- and 40-character names;
    /// `stat` of an absolute path of 20 components.
    W3,
    /// fstree: each thread builds its own tree of directories of empty files, walks it with
    /// `stat` of full paths, then with readdir + `fstatat`, then removes it.
    W4,
    /// fstree warm on a host tree: every thread loops `stat` over the 1,024 files of a tree
    /// (16 directories of 64), scalevfs serving it from a host tmpfs directory through
    /// hostfs, the kernel from its own tmpfs directory.
    W5Warm,
    /// W5-warm with hostfs under the shared policy (a TTL of one second): the same loop,
    /// served by the lockless walk within each deadline and revalidated against the host
    /// once a second.
    W5Shared,
    /// fstree cold: every thread loops `stat` over the 32,000 files of a host tree (32
    /// directories of 1,000), scalevfs serving it through hostfs with its caches capped at a
    /// quarter of the tree, so that names are swept and directories loaded again all the
    /// time (every object loaded is an inode-cache miss and insert); the kernel stats its
    /// own tmpfs tree (which never misses), for scale.
    W5,
    /// W5 with the ablation switch on: every inode-cache miss takes one cache-wide lock
    /// instead of its shard's (`HostFsOptions::one_lock`).
    W5Lock,
    /// orc: loop `open` / `read(64 B)` / `close` over 254 small files in one directory.
    W7,
    /// create_unlink: loop create + unlink of a private name, in one shared directory and in
    /// private directories.
    W8,
    /// rename: loop renaming a -> b -> a, in one shared directory, in private directories, and
    /// between two shared directories.
    W9,
    /// memory: bytes per empty file with many files (not a timed loop; see `memory`).
    W12,
}

/// What one counted operation is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Unit {
    /// One call.
    Ops,
    /// One create (open + close) and one unlink.
    Pairs,
    /// One open, one read and one close.
    Triples,
    /// Bytes of memory per empty file.
    BytesPerFile,
}

impl Unit {
    /// The name in the table and the JSON records.
    pub fn name(self) -> &'static str {
        match self {
            Unit::Ops => "ops",
            Unit::Pairs => "pairs",
            Unit::Triples => "triples",
            Unit::BytesPerFile => "B/file",
        }
    }
}

impl Workload {
    /// Every workload, in table order.
    pub const ALL: [Workload; 12] = [
        Workload::W1,
        Workload::W2,
        Workload::W3,
        Workload::W4,
        Workload::W5,
        Workload::W5Lock,
        Workload::W5Warm,
        Workload::W5Shared,
        Workload::W7,
        Workload::W8,
        Workload::W9,
        Workload::W12,
    ];

    /// The id, as in docs/WORKLOADS.md.
    pub fn id(self) -> &'static str {
        match self {
            Workload::W1 => "W1",
            Workload::W2 => "W2",
            Workload::W3 => "W3",
            Workload::W4 => "W4",
            Workload::W5Warm => "W5-warm",
            Workload::W5Shared => "W5-shared",
            Workload::W5 => "W5",
            Workload::W5Lock => "W5-1lock",
            Workload::W7 => "W7",
            Workload::W8 => "W8",
            Workload::W9 => "W9",
            Workload::W12 => "W12",
        }
    }

    /// The name, as in docs/WORKLOADS.md.
    pub fn title(self) -> &'static str {
        match self {
            Workload::W1 => "stat_same",
            Workload::W2 => "access_distinct",
            Workload::W3 => "depth sweep",
            Workload::W4 => "fstree",
            Workload::W5Warm => "fstree warm (hostfs)",
            Workload::W5Shared => "fstree warm (hostfs, shared policy, 1 s TTL)",
            Workload::W5 => "fstree cold (hostfs, caches at 25%)",
            Workload::W5Lock => "fstree cold, one-lock miss path (ablation)",
            Workload::W7 => "orc",
            Workload::W8 => "create_unlink",
            Workload::W9 => "rename",
            Workload::W12 => "memory",
        }
    }

    /// What one counted operation is.
    pub fn unit(self) -> Unit {
        match self {
            Workload::W7 => Unit::Triples,
            Workload::W8 => Unit::Pairs,
            Workload::W12 => Unit::BytesPerFile,
            _ => Unit::Ops,
        }
    }

    /// Parses an id such as `W1` (any case).
    pub fn parse(s: &str) -> Result<Workload, String> {
        Workload::ALL
            .into_iter()
            .find(|w| w.id().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| {
                let ids: Vec<_> = Workload::ALL.iter().map(|w| w.id()).collect();
                format!(
                    "unknown workload {s:?} (expected one of {})",
                    ids.join(", ")
                )
            })
    }

    /// Whether this is a timed workload (one with [`Case`]s); W12 is measured by `memory`.
    pub fn is_timed(self) -> bool {
        self != Workload::W12
    }

    /// Builds the tree on `t` and returns the cases, for up to `max_threads` threads. A
    /// workload that is not timed has none.
    pub fn cases<T: Target>(
        self,
        t: &T,
        max_threads: usize,
        sizes: &Sizes,
    ) -> Result<Vec<Case>, Error> {
        match self {
            Workload::W1 => stat_same(t),
            Workload::W2 => access_distinct(t, max_threads),
            Workload::W3 => depth_sweep(t),
            Workload::W4 => fstree(t, max_threads, sizes),
            Workload::W5Warm => warm_tree(t, "w5"),
            Workload::W5Shared => warm_tree(t, "w5s"),
            Workload::W5 => cold_tree(t, "w5c", max_threads),
            Workload::W5Lock => cold_tree(t, "w5l", max_threads),
            Workload::W7 => orc(t, max_threads),
            Workload::W8 => create_unlink(t, max_threads),
            Workload::W9 => rename(t, max_threads),
            Workload::W12 => Ok(Vec::new()),
        }
    }
}

/// The sizes of the workloads that do a fixed amount of work.
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    /// W4: directories per thread.
    pub fstree_dirs: usize,
    /// W4: files per directory.
    pub fstree_files: usize,
    /// W12: files in the measured tree.
    pub memory_files: usize,
}

impl Sizes {
    /// docs/WORKLOADS.md's sizes.
    pub const FULL: Sizes = Sizes {
        fstree_dirs: 200,
        fstree_files: 1000,
        memory_files: 1_000_000,
    };
    /// For `--quick`: a tenth of each dimension.
    pub const QUICK: Sizes = Sizes {
        fstree_dirs: 20,
        fstree_files: 100,
        memory_files: 100_000,
    };
}

/// One thread's timed loop: `worker(n)` performs `n` operations and stops at the first failure.
pub type Worker = Box<dyn FnMut(u64) -> Result<(), Error>>;

/// One phase of one thread's fixed work: does all of it and returns how many operations that
/// was, or stops at the first failure.
pub type Phase = Box<dyn FnMut() -> Result<u64, Error>>;

/// One variant of a workload on one target.
pub struct Case {
    /// The variant's name, identical on every target.
    pub variant: String,
    /// How it runs.
    pub kind: Kind,
    /// What the target counted so far (cache counters), printed after each run's row.
    pub counters: Option<Counters>,
}

/// Reads a target's counters (see [`Target::cache_counters`]).
pub type Counters = Box<dyn Fn() -> Option<String> + Send + Sync>;

/// How a case runs.
pub enum Kind {
    /// A timed loop: thread `i` runs `make(i)` for the run's duration.
    Loop(Box<dyn Fn(usize) -> Result<Worker, Error> + Send + Sync>),
    /// Fixed work in phases (W4): thread `i` runs each of `make(i)` in turn, all threads
    /// starting a phase together; each phase is a figure of its own, named in `names`.
    Phases {
        /// The phases' names, in order; they are the figures' variants.
        names: Vec<&'static str>,
        /// Thread `i`'s phases, in the order of `names`.
        make: Box<dyn Fn(usize) -> Result<Vec<Phase>, Error> + Send + Sync>,
    },
}

impl Case {
    /// A timed-loop case whose thread `i` runs `make(i)`.
    pub fn new(
        variant: impl Into<String>,
        make: impl Fn(usize) -> Result<Worker, Error> + Send + Sync + 'static,
    ) -> Case {
        Case {
            variant: variant.into(),
            kind: Kind::Loop(Box::new(make)),
            counters: None,
        }
    }

    /// The same case, reporting `counters` after each run.
    pub fn with_counters(
        mut self,
        counters: impl Fn() -> Option<String> + Send + Sync + 'static,
    ) -> Case {
        self.counters = Some(Box::new(counters));
        self
    }

    /// A fixed-work case whose thread `i` runs the phases `make(i)`, named `names`.
    pub fn phased(
        variant: impl Into<String>,
        names: Vec<&'static str>,
        make: impl Fn(usize) -> Result<Vec<Phase>, Error> + Send + Sync + 'static,
    ) -> Case {
        Case {
            variant: variant.into(),
            kind: Kind::Phases {
                names,
                make: Box::new(make),
            },
            counters: None,
        }
    }

    /// The figures' variants: the case's own name for a loop, its phases' names otherwise.
    pub fn figure_variants(&self) -> Vec<String> {
        match &self.kind {
            Kind::Loop(_) => vec![self.variant.clone()],
            Kind::Phases { names, .. } => names.iter().map(|n| (*n).to_owned()).collect(),
        }
    }
}

/// Checks `op` once, then wraps it in a counted loop. `op` is monomorphic inside the box, so the
/// loop pays one indirect call per batch, not per operation.
fn looped(mut op: impl FnMut() -> Result<(), Error> + 'static) -> Result<Worker, Error> {
    op()?;
    Ok(Box::new(move |n| {
        for _ in 0..n {
            op()?;
        }
        Ok(())
    }))
}

#[cold]
#[inline(never)]
fn failed(op: &str, p: &dyn Debug, e: Errno) -> Error {
    Error::from(format!("{op} {p:?}: {e}"))
}

/// Thread `i`'s entry of a per-thread list (a bug in the harness if absent).
fn nth<P: Clone>(paths: &[P], i: usize) -> Result<P, Error> {
    paths
        .get(i)
        .cloned()
        .ok_or_else(|| Error::from(format!("no path prepared for thread {i}")))
}

// ---- Set-up helpers: every call checked. ----

/// `mkdir -p` of `rel` under the root.
fn mkdir_all<T: Target>(t: &T, rel: &str) -> Result<(), Error> {
    let mut prefix = String::new();
    for c in rel.split('/') {
        if !prefix.is_empty() {
            prefix.push('/');
        }
        prefix.push_str(c);
        let p = t.path(&prefix);
        match t.mkdir(&p, 0o755) {
            Ok(()) => {}
            Err(Errno::EEXIST) => match t.stat(&p) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => return Err(format!("{p:?} exists and is not a directory").into()),
                Err(e) => return Err(failed("stat", &p, e)),
            },
            Err(e) => return Err(failed("mkdir", &p, e)),
        }
    }
    Ok(())
}

/// Creates the empty regular file `rel` under the root; it must not exist.
fn create_file<T: Target>(t: &T, rel: &str) -> Result<(), Error> {
    let p = t.path(rel);
    t.create_close(&p, 0o644)
        .map_err(|e| failed("create", &p, e))?;
    match t.stat(&p) {
        Ok(m) if m.is_file() => Ok(()),
        Ok(m) => Err(format!("{p:?} has mode {:o} after create", m.mode).into()),
        Err(e) => Err(failed("stat", &p, e)),
    }
}

/// Creates the regular file `rel` under the root holding `data`, and reads it back.
fn create_file_with<T: Target>(t: &T, rel: &str, data: &[u8]) -> Result<(), Error> {
    let p = t.path(rel);
    t.create_with(&p, 0o644, data)
        .map_err(|e| failed("create", &p, e))?;
    let mut buf = vec![0; data.len() + 1];
    match t.open_read_close(&p, &mut buf) {
        Ok(n) if buf[..n] == *data => Ok(()),
        Ok(n) => Err(format!("{p:?} reads back {n} bytes other than written").into()),
        Err(e) => Err(failed("read", &p, e)),
    }
}

// ---- Workers: the timed loops. ----

/// Loops `stat(p)`.
fn stat_worker<T: Target>(t: &T, p: T::Path) -> Result<Worker, Error> {
    let me = t.fork();
    looped(move || match me.stat(&p) {
        Ok(m) => {
            black_box(m);
            Ok(())
        }
        Err(e) => Err(failed("stat", &p, e)),
    })
}

/// Loops `access(p, mode)`.
fn access_worker<T: Target>(t: &T, p: T::Path, mode: Access) -> Result<Worker, Error> {
    let me = t.fork();
    looped(move || me.access(&p, mode).map_err(|e| failed("access", &p, e)))
}

/// Opens `dir` in this thread's handle and loops `fstatat(dir, p)`.
fn fstatat_worker<T: Target>(t: &T, dir: &T::Path, p: T::Path) -> Result<Worker, Error> {
    let me = t.fork();
    let fd = me.open_dir(dir).map_err(|e| failed("open", dir, e))?;
    looped(move || match me.fstatat(&fd, &p) {
        Ok(m) => {
            black_box(m);
            Ok(())
        }
        Err(e) => Err(failed("fstatat", &p, e)),
    })
}

/// Loops `open` / `read` of `W7_READ` bytes / `close` over `paths`, in order, from `start`;
/// every read must return the whole buffer.
fn orc_worker<T: Target>(t: &T, paths: Vec<T::Path>, start: usize) -> Result<Worker, Error> {
    let me = t.fork();
    let mut i = start % paths.len();
    let mut buf = [0u8; W7_READ];
    looped(move || {
        let p = &paths[i];
        i = if i + 1 == paths.len() { 0 } else { i + 1 };
        match me.open_read_close(p, &mut buf) {
            Ok(W7_READ) => {
                black_box(&buf);
                Ok(())
            }
            Ok(n) => Err(format!("read {p:?}: {n} bytes, expected {W7_READ}").into()),
            Err(e) => Err(failed("open/read/close", p, e)),
        }
    })
}

/// Loops `rename(a, b)`, `rename(b, a)`: one operation per rename. The file is at `a` or at
/// `b`, wherever the last run left it.
fn rename_worker<T: Target>(t: &T, a: T::Path, b: T::Path) -> Result<Worker, Error> {
    let me = t.fork();
    let mut forward = me.stat(&a).is_ok();
    looped(move || {
        let (from, to) = if forward { (&a, &b) } else { (&b, &a) };
        forward = !forward;
        me.rename(from, to).map_err(|e| failed("rename", from, e))
    })
}

/// Loops create (`open(O_CREAT | O_EXCL | O_WRONLY, 0o644)` + `close`) and `unlink` of `p`.
fn create_unlink_worker<T: Target>(t: &T, p: T::Path) -> Result<Worker, Error> {
    let me = t.fork();
    looped(move || {
        me.create_close(&p, 0o644)
            .map_err(|e| failed("create", &p, e))?;
        me.unlink(&p).map_err(|e| failed("unlink", &p, e))
    })
}

// ---- The workloads. ----

/// W1: every thread stats `wis/a/b/c/file`.
fn stat_same<T: Target>(t: &T) -> Result<Vec<Case>, Error> {
    mkdir_all(t, "wis/a/b/c")?;
    create_file(t, "wis/a/b/c/file")?;
    let p = t.path("wis/a/b/c/file");
    let t = t.clone();
    Ok(vec![Case::new("stat_same", move |_| {
        stat_worker(&t, p.clone())
    })])
}

/// W5-warm's tree: directories, and files in each.
const W5_DIRS: usize = 16;
const W5_FILES: usize = 64;

/// W5-warm: every thread loops `stat(w5/dNN/fNN)` over all the tree's files, each thread
/// starting at its own place. On scalevfs the target is hostfs (see `Target::for_workload`):
/// the tree is made through it, so it is on the host, and every name is in the engine's
/// cache: this is the warm case.
fn warm_tree<T: Target>(t: &T, top: &str) -> Result<Vec<Case>, Error> {
    let mut paths = Vec::with_capacity(W5_DIRS * W5_FILES);
    for d in 0..W5_DIRS {
        mkdir_all(t, &format!("{top}/d{d:02}"))?;
        for f in 0..W5_FILES {
            let rel = format!("{top}/d{d:02}/f{f:02}");
            create_file(t, &rel)?;
            paths.push(t.path(&rel));
        }
    }
    let paths = std::sync::Arc::new(paths);
    let t = t.clone();
    Ok(vec![Case::new("stat_tree", move |i| {
        cycle_stat_worker(&t, paths.clone(), i * 97)
    })])
}

/// Loops `stat` over `paths` in order, from `start`, round and round.
fn cycle_stat_worker<T: Target>(
    t: &T,
    paths: std::sync::Arc<Vec<T::Path>>,
    start: usize,
) -> Result<Worker, Error> {
    let me = t.fork();
    let mut k = start;
    looped(move || {
        let p = &paths[k % paths.len()];
        k = k.wrapping_add(1);
        match me.stat(p) {
            Ok(m) => {
                black_box(m);
                Ok(())
            }
            Err(e) => Err(failed("stat", p, e)),
        }
    })
}

/// W5's tree: each thread's directories, and the files in each.
pub const W5_COLD_DIRS: usize = 16;
pub const W5_COLD_FILES: usize = 1000;
/// W5's cache cap, in objects: half of one thread's tree, so a quarter of two threads'
/// (see `Target::for_workload`). Below what a thread walks at any thread count, so every
/// stat misses.
pub const W5_COLD_CAP: u64 = (W5_COLD_DIRS * W5_COLD_FILES / 2) as u64;

/// W5 (and its ablation), W4's walk on a cold cache: every thread has a tree of its own,
/// `<top>/tN/dNN/fNNN`, and loops `stat` over it in order. The threads' calls commute:
/// no directory is shared but the tree's top. On scalevfs the target is hostfs with its
/// caches capped at [`W5_COLD_CAP`]: a thread that comes back to a directory finds its
/// names swept, and loads it again from the host. The case reports the inode cache's
/// counters after each run (loads, lock acquisitions).
fn cold_tree<T: Target>(t: &T, top: &str, max_threads: usize) -> Result<Vec<Case>, Error> {
    let mut trees = Vec::with_capacity(max_threads);
    for i in 0..max_threads {
        let mut paths = Vec::with_capacity(W5_COLD_DIRS * W5_COLD_FILES);
        for d in 0..W5_COLD_DIRS {
            mkdir_all(t, &format!("{top}/t{i}/d{d:02}"))?;
            for f in 0..W5_COLD_FILES {
                let rel = format!("{top}/t{i}/d{d:02}/f{f:03}");
                t.create_close(&t.path(&rel), 0o644)
                    .map_err(|e| failed("create", &rel, e))?;
                paths.push(t.path(&rel));
            }
        }
        trees.push(std::sync::Arc::new(paths));
    }
    let counters = t.clone();
    let t = t.clone();
    Ok(vec![Case::new("stat_walk", move |i| {
        cycle_stat_worker(&t, nth(&trees, i)?, 0)
    })
    .with_counters(move || counters.cache_counters())])
}

/// W2: thread `i` checks `access(w2/d<i>/e/f<i>, R_OK)`, four components below the root.
fn access_distinct<T: Target>(t: &T, max_threads: usize) -> Result<Vec<Case>, Error> {
    let mut paths = Vec::with_capacity(max_threads);
    for i in 0..max_threads {
        mkdir_all(t, &format!("w2/d{i}/e"))?;
        let rel = format!("w2/d{i}/e/f{i}");
        create_file(t, &rel)?;
        paths.push(t.path(&rel));
    }
    let t = t.clone();
    Ok(vec![Case::new("access_distinct", move |i| {
        access_worker(&t, nth(&paths, i)?, Access::READ)
    })])
}

/// W3's component counts for `fstatat`.
const W3_DEPTHS: [usize; 3] = [1, 4, 16];
/// W3's component count for the absolute `stat`.
const W3_ABS_DEPTH: usize = 20;

/// `n` components: `n - 1` times `dir`, then `file`.
fn chain(dir: &str, file: &str, n: usize) -> String {
    let mut parts = vec![dir; n - 1];
    parts.push(file);
    parts.join("/")
}

/// W3: `fstatat(<root>/w3, p)` for p of 1, 4 and 16 components with 1- and 40-character names,
/// each thread on its own descriptor for `w3`; then `stat` of `/p/p/.../f`, 20 components below
/// the root (for the kernel the root itself is a few components below `/`).
fn depth_sweep<T: Target>(t: &T) -> Result<Vec<Case>, Error> {
    let mut cases = Vec::new();
    let deepest = W3_DEPTHS[W3_DEPTHS.len() - 1];
    for width in [1, 40] {
        let (dir, file) = match width {
            1 => ("s".to_owned(), "f".to_owned()),
            _ => ("l".repeat(width), "f".repeat(width)),
        };
        mkdir_all(t, &format!("w3/{}", chain(&dir, &dir, deepest - 1)))?;
        for n in W3_DEPTHS {
            let rel = chain(&dir, &file, n);
            create_file(t, &format!("w3/{rel}"))?;
            let (t, base, p) = (t.clone(), t.path("w3"), t.rel_path(&rel));
            cases.push(Case::new(format!("fstatat-{n}c-{width}ch"), move |_| {
                fstatat_worker(&t, &base, p.clone())
            }));
        }
    }
    mkdir_all(t, &chain("p", "p", W3_ABS_DEPTH - 1))?;
    let rel = chain("p", "f", W3_ABS_DEPTH);
    create_file(t, &rel)?;
    let (t, p) = (t.clone(), t.path(&rel));
    cases.push(Case::new(
        format!("stat-abs-{W3_ABS_DEPTH}c-1ch"),
        move |_| stat_worker(&t, p.clone()),
    ));
    Ok(cases)
}

/// W7's file count.
const W7_FILES: usize = 254;
/// W7's read size; every file holds exactly this many bytes.
const W7_READ: usize = 64;

/// W7: `w7/f000` .. `w7/f253`, each holding 64 bytes; every thread loops `open(abs path)` /
/// `read(64)` / `close`.
/// - `open_read_close`: over all of them, thread `i` starting `i / max_threads` of the way
///   round, so that the threads are on different files at any moment but each file is
///   opened by every thread in turn.
/// - `private_files`: thread `i` over the files whose number is `i` modulo `max_threads`
///   (at every thread count, so a thread's share is the same at 1 thread as at 2): no file
///   is opened by two threads, the unrelated files seed 002's hashed locks are about.
fn orc<T: Target>(t: &T, max_threads: usize) -> Result<Vec<Case>, Error> {
    mkdir_all(t, "w7")?;
    let mut paths = Vec::with_capacity(W7_FILES);
    for f in 0..W7_FILES {
        let rel = format!("w7/f{f:03}");
        // Distinct contents: the name, then filler, then a newline, 64 bytes in all.
        let mut data = format!("{rel} ").into_bytes();
        data.resize(W7_READ - 1, b'.');
        data.push(b'\n');
        create_file_with(t, &rel, &data)?;
        paths.push(t.path(&rel));
    }
    let threads = max_threads.max(1);
    let own = |i: usize| -> Vec<T::Path> {
        paths
            .iter()
            .skip(i % threads)
            .step_by(threads)
            .cloned()
            .collect()
    };
    let own: Vec<Vec<T::Path>> = (0..threads).map(own).collect();
    let (t1, t2) = (t.clone(), t.clone());
    Ok(vec![
        Case::new("open_read_close", move |i| {
            orc_worker(&t1, paths.clone(), i * W7_FILES / threads)
        }),
        Case::new("private_files", move |i| {
            orc_worker(&t2, own[i % threads].clone(), 0)
        }),
    ])
}

/// W8: thread `i` creates and unlinks `w8s/t<i>` (shared directory), then `w8p/t<i>/n` (a
/// directory of its own).
fn create_unlink<T: Target>(t: &T, max_threads: usize) -> Result<Vec<Case>, Error> {
    mkdir_all(t, "w8s")?;
    let shared: Vec<_> = (0..max_threads)
        .map(|i| t.path(&format!("w8s/t{i}")))
        .collect();
    let mut private = Vec::with_capacity(max_threads);
    for i in 0..max_threads {
        mkdir_all(t, &format!("w8p/t{i}"))?;
        private.push(t.path(&format!("w8p/t{i}/n")));
    }
    let mut cases = Vec::new();
    for (variant, paths) in [("shared", shared), ("private", private)] {
        let t = t.clone();
        cases.push(Case::new(variant, move |i| {
            create_unlink_worker(&t, nth(&paths, i)?)
        }));
    }
    Ok(cases)
}

/// W4's phases, in order.
const W4_PHASES: [&str; 4] = ["create", "walk-stat", "readdir-fstatat", "unlink"];

/// One thread's W4 tree, its paths prepared: `w4/t<i>/d<j>/f<k>`.
struct Tree<P> {
    /// `w4/t<i>`.
    root: P,
    /// `w4/t<i>/d<j>`.
    dirs: Vec<P>,
    /// `w4/t<i>/d<j>/f<k>`, directory by directory.
    files: Vec<P>,
}

impl<P> Tree<P> {
    /// Directories and files: every phase touches each once.
    fn ops(&self) -> u64 {
        (self.dirs.len() + self.files.len()) as u64
    }
}

/// W4: thread `i` owns `w4/t<i>`. Each run, every thread builds `dirs` directories of `files`
/// empty files (`mkdir`, then create + close of each file), stats every directory and file by
/// its absolute path, lists its root and every directory with readdir + `fstatat` of each
/// entry, and removes it all (`unlink` of each file, `rmdir` of each directory). Each phase
/// counts one operation per directory and one per file, and is timed on its own.
fn fstree<T: Target>(t: &T, max_threads: usize, sizes: &Sizes) -> Result<Vec<Case>, Error> {
    let (n_dirs, n_files) = (sizes.fstree_dirs, sizes.fstree_files);
    for i in 0..max_threads {
        mkdir_all(t, &format!("w4/t{i}"))?;
    }
    let t = t.clone();
    Ok(vec![Case::phased("fstree", W4_PHASES.to_vec(), move |i| {
        let me = t.fork();
        let base = format!("w4/t{i}");
        let mut tree = Tree {
            root: me.path(&base),
            dirs: Vec::with_capacity(n_dirs),
            files: Vec::with_capacity(n_dirs * n_files),
        };
        for d in 0..n_dirs {
            tree.dirs.push(me.path(&format!("{base}/d{d}")));
            for f in 0..n_files {
                tree.files.push(me.path(&format!("{base}/d{d}/f{f}")));
            }
        }
        let tree = std::sync::Arc::new(tree);
        let phase = |body: fn(&T, &Tree<T::Path>) -> Result<(), Error>| -> Phase {
            let (me, tree) = (me.clone(), std::sync::Arc::clone(&tree));
            Box::new(move || body(&me, &tree).map(|()| tree.ops()))
        };
        Ok(vec![
            phase(fstree_create),
            phase(fstree_walk),
            phase(fstree_readdir),
            phase(fstree_remove),
        ])
    })])
}

fn fstree_create<T: Target>(t: &T, tree: &Tree<T::Path>) -> Result<(), Error> {
    let per_dir = tree.files.len() / tree.dirs.len().max(1);
    for (d, dir) in tree.dirs.iter().enumerate() {
        t.mkdir(dir, 0o755).map_err(|e| failed("mkdir", dir, e))?;
        for p in &tree.files[d * per_dir..(d + 1) * per_dir] {
            t.create_close(p, 0o644)
                .map_err(|e| failed("create", p, e))?;
        }
    }
    Ok(())
}

fn fstree_walk<T: Target>(t: &T, tree: &Tree<T::Path>) -> Result<(), Error> {
    let per_dir = tree.files.len() / tree.dirs.len().max(1);
    for (d, dir) in tree.dirs.iter().enumerate() {
        match t.stat(dir) {
            Ok(m) if m.is_dir() => {}
            Ok(m) => return Err(format!("{dir:?} has mode {:o}", m.mode).into()),
            Err(e) => return Err(failed("stat", dir, e)),
        }
        for p in &tree.files[d * per_dir..(d + 1) * per_dir] {
            match t.stat(p) {
                Ok(m) if m.is_file() => black_box(m),
                Ok(m) => return Err(format!("{p:?} has mode {:o}", m.mode).into()),
                Err(e) => return Err(failed("stat", p, e)),
            };
        }
    }
    Ok(())
}

fn fstree_readdir<T: Target>(t: &T, tree: &Tree<T::Path>) -> Result<(), Error> {
    let per_dir = tree.files.len() / tree.dirs.len().max(1);
    let mut listed = t
        .readdir_fstatat(&tree.root)
        .map_err(|e| failed("readdir", &tree.root, e))?;
    for dir in &tree.dirs {
        let n = t
            .readdir_fstatat(dir)
            .map_err(|e| failed("readdir", dir, e))?;
        if n != per_dir {
            return Err(format!("readdir {dir:?}: {n} entries, expected {per_dir}").into());
        }
        listed += n;
    }
    match listed == tree.dirs.len() + tree.files.len() {
        true => Ok(()),
        false => Err(format!("readdir {:?}: {listed} entries in all", tree.root).into()),
    }
}

fn fstree_remove<T: Target>(t: &T, tree: &Tree<T::Path>) -> Result<(), Error> {
    let per_dir = tree.files.len() / tree.dirs.len().max(1);
    for (d, dir) in tree.dirs.iter().enumerate() {
        for p in &tree.files[d * per_dir..(d + 1) * per_dir] {
            t.unlink(p).map_err(|e| failed("unlink", p, e))?;
        }
        t.rmdir(dir).map_err(|e| failed("rmdir", dir, e))?;
    }
    Ok(())
}

/// W9: thread `i` renames `w9s/a<i>` <-> `w9s/b<i>` (one shared directory), `w9p/t<i>/a` <->
/// `w9p/t<i>/b` (a directory of its own), and `w9x/A/t<i>` <-> `w9x/B/t<i>` (across two
/// directories that all threads share).
fn rename<T: Target>(t: &T, max_threads: usize) -> Result<Vec<Case>, Error> {
    let mut shared = Vec::with_capacity(max_threads);
    let mut private = Vec::with_capacity(max_threads);
    let mut across = Vec::with_capacity(max_threads);
    mkdir_all(t, "w9s")?;
    mkdir_all(t, "w9x/A")?;
    mkdir_all(t, "w9x/B")?;
    for i in 0..max_threads {
        mkdir_all(t, &format!("w9p/t{i}"))?;
        for (list, a, b) in [
            (&mut shared, format!("w9s/a{i}"), format!("w9s/b{i}")),
            (&mut private, format!("w9p/t{i}/a"), format!("w9p/t{i}/b")),
            (&mut across, format!("w9x/A/t{i}"), format!("w9x/B/t{i}")),
        ] {
            create_file(t, &a)?;
            list.push((t.path(&a), t.path(&b)));
        }
    }
    let mut cases = Vec::new();
    for (variant, pairs) in [("shared", shared), ("private", private), ("across", across)] {
        let t = t.clone();
        cases.push(Case::new(variant, move |i| {
            let (a, b) = nth(&pairs, i)?;
            rename_worker(&t, a, b)
        }));
    }
    Ok(cases)
}
