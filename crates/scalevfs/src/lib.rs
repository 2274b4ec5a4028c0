//! scalevfs: a virtual file system engine for user space.
//!
//! A [`Vfs`] is a namespace: a tree of mounts, each a file system instance ([`SuperBlock`]; [`MemFs`] today). A
//! [`Process`] is a caller's view of it: root and working directory, credentials, umask
//! and a descriptor table, with the POSIX calls as methods.
//!
//! ```
//! use scalevfs::{Vfs, Creds, OFlags};
//!
//! let vfs = Vfs::new_memfs();
//! let p = vfs.process(Creds::root());
//! p.create_dir_all("/srv/data").unwrap();
//! p.write_file("/srv/data/hello.txt", b"hello").unwrap();
//! let st = p.stat("/srv/data/hello.txt").unwrap();
//! assert_eq!(st.size, 5);
//! let fd = p.open("/srv/data/hello.txt", OFlags::RDONLY, 0).unwrap();
//! let mut buf = [0u8; 5];
//! assert_eq!(p.read(fd, &mut buf).unwrap(), 5);
//! p.close(fd).unwrap();
//! ```
//!
//! Paths walk without locks (see the `walk` module); every error is a Linux errno.

#![warn(missing_docs)]

mod backend;
mod dentry;
mod dirindex;
mod errno;
mod file;
mod filelock;
pub mod fs;
#[cfg(not(loom))]
mod hostfs;
pub mod icache;
mod inode;
mod locktable;
mod memfs;
mod mount;
mod name;
mod pathcache;
mod process;
mod reclaim;
pub mod sync;
mod types;
mod unpin;
mod walk;

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;

/// Engine internals for the criterion benchmarks; not part of the API.
#[doc(hidden)]
#[path = "bench_internals.rs"]
pub mod __bench;

/// Asserts that the allocator the `scalevfs` binary links (`scalevfs_alloc::Alloc`) serves
/// blocks of `layout` aligned to `align`: what an object's line layout counts on beyond
/// the alignment its type asks (the dentry's and the inode's).
#[cfg(test)]
pub(crate) fn assert_binary_allocator_aligns(layout: std::alloc::Layout, align: usize) {
    use std::alloc::GlobalAlloc;
    let heap = scalevfs_alloc::Alloc;
    let blocks: Vec<*mut u8> = (0..256)
        // SAFETY: the engine's layouts are of non-zero size.
        .map(|_| unsafe { heap.alloc(layout) })
        .collect();
    for &b in &blocks {
        assert!(!b.is_null());
        assert_eq!(b as usize % align, 0, "{layout:?} served at {b:p}");
    }
    for b in blocks {
        // SAFETY: allocated above with this layout, by this allocator.
        unsafe { heap.dealloc(b, layout) };
    }
}

pub use backend::{FsStats, SuperBlock, NEGATIVE_FLOOR};
pub use errno::{Errno, Result};
pub use file::{Desc, Handle};
#[cfg(not(loom))]
pub use hostfs::{HostFs, HostFsOptions, Policy as HostPolicy};
pub use memfs::{MemFs, MemFsOptions, TMPFS_MAGIC};
pub use pathcache::{clear_thread_cache, thread_stats as path_cache_stats, PathCacheStats};
pub use process::{Process, XattrsOf};
pub use types::*;

/// The sizes, in bytes, of the structures every file costs (for `scalevfs bench`'s W12 and
/// BENCHMARKS.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// A dentry (one per name).
    pub dentry: usize,
    /// An inode (one per file).
    pub inode: usize,
    /// An inode's allocation: the inode with its `InodeArc` count (before the allocator's
    /// rounding to a size class).
    pub inode_alloc: usize,
}

/// The sizes of the per-file structures of this build.
pub fn layout() -> Layout {
    use std::mem::{align_of, size_of};
    let inode = size_of::<inode::Inode>();
    let align = align_of::<inode::Inode>();
    Layout {
        dentry: size_of::<dentry::Dentry>(),
        inode,
        inode_alloc: size_of::<usize>().next_multiple_of(align) + inode,
    }
}

use crossbeam_epoch::{Atomic, Owned};
use mount::{Mount, MountSync, MountTable};
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use sync::StripedCounter;

/// A namespace: the mount tree and its shared state.
///
/// What protects each field: `mounts` is replaced under `mount_sync.lock` inside a write
/// section of `mount_sync.seq`, and read under an epoch guard; `check` is atomic.
pub struct Vfs {
    /// Unique among all namespaces of the process (a key of the path cache).
    pub(crate) id: u64,
    root_mnt: Arc<Mount>,
    /// The mount table snapshot; see `mount`.
    pub(crate) mounts: Atomic<MountTable>,
    /// The mount table's lock and sequence counter (the umount handshake; see `mount`).
    pub(crate) mount_sync: MountSync,
    next_mount_id: AtomicU64,
    check: AtomicBool,
    check_failures: StripedCounter,
    /// Walk statistics (see [`VfsStats`]); striped, and written only on the locked path.
    pub(crate) counters: WalkCounters,
}

impl std::fmt::Display for VfsStats {
    /// One line of `name=value` pairs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = &self.root_fs;
        write!(
            f,
            "fast_walk_fallbacks={} locked_rewalks={} unpinned_calls={} inodes={} \
             data_pages={} dentries={} negative_entries={} hash_buckets={} \
             dentry_evictions={} sweeps={}",
            self.fast_walk_fallbacks,
            self.locked_rewalks,
            self.unpinned_calls,
            r.inodes,
            r.data_pages,
            r.dentries,
            r.negative_entries,
            r.hash_buckets,
            r.dentry_evictions,
            r.sweeps
        )?;
        if let Some(c) = &r.inode_cache {
            write!(
                f,
                " icache_hits={} icache_loads={} icache_waits={} icache_shard_locks={} \
                 icache_evictions={}",
                c.hits, c.loads, c.waits, c.shard_locks, c.evictions
            )?;
        }
        Ok(())
    }
}

/// Counts of the walks that fell back to locked mode, kept per namespace.
#[derive(Default)]
pub(crate) struct WalkCounters {
    pub(crate) fallbacks: StripedCounter,
    pub(crate) rewalks: StripedCounter,
    pub(crate) unpinned: StripedCounter,
}

/// What a namespace has done and holds (sums of per-thread stripes, read without stopping
/// anyone: each figure is exact when the namespace is quiet, approximate while it changes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VfsStats {
    /// Calls whose lockless walk could not answer (a name not cached, a counter that moved)
    /// and that walked again in locked mode.
    pub fast_walk_fallbacks: u64,
    /// Locked walks run again because what they found went away before the call took its
    /// reference.
    pub locked_rewalks: u64,
    /// Calls to a file system (directory listings, revalidations) that path calls made
    /// between their attempts, with no epoch guard pinned: each one is a call that started
    /// again once it was made.
    pub unpinned_calls: u64,
    /// The root file system's figures.
    pub root_fs: FsStats,
}

impl Vfs {
    /// A namespace whose root is `fs`.
    pub fn new(fs: Arc<SuperBlock>) -> Arc<Vfs> {
        let root = fs.root().clone();
        let root_mnt = Arc::new(Mount::new(1, fs, root, None));
        static NEXT_VFS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Arc::new(Vfs {
            id: NEXT_VFS.fetch_add(1, Relaxed),
            root_mnt,
            mounts: Atomic::new(MountTable::default()),
            mount_sync: MountSync::new(),
            next_mount_id: AtomicU64::new(2),
            check: AtomicBool::new(false),
            check_failures: StripedCounter::default(),
            counters: WalkCounters::default(),
        })
    }

    /// A namespace on a fresh memfs with default options (root directory mode `1777`).
    pub fn new_memfs() -> Arc<Vfs> {
        Vfs::new(MemFs::new(MemFsOptions::default()))
    }

    /// A caller with `creds`, its root and working directory at the namespace root, umask
    /// `022`, and no open files.
    pub fn process(self: &Arc<Self>, creds: Creds) -> Process {
        Process::new(self.clone(), creds)
    }

    /// Check mode: every lockless walk and every path-cache answer is repeated by the
    /// locked walk and the two must agree (a disagreement panics). Slow; for tests.
    pub fn set_check_mode(&self, on: bool) {
        if self.check.swap(on, SeqCst) != on {
            sync::effects::enable(on);
        }
    }

    #[inline]
    pub(crate) fn check_mode(&self) -> bool {
        self.check.load(Relaxed)
    }

    pub(crate) fn record_check_failure(&self) {
        self.check_failures.add(1);
    }

    /// How many disagreements check mode has seen.
    pub fn check_failures(&self) -> u64 {
        self.check_failures.sum() as u64
    }

    /// This namespace's statistics (see [`VfsStats`]).
    pub fn stats(&self) -> VfsStats {
        VfsStats {
            fast_walk_fallbacks: self.counters.fallbacks.sum().max(0) as u64,
            locked_rewalks: self.counters.rewalks.sum().max(0) as u64,
            unpinned_calls: self.counters.unpinned.sum().max(0) as u64,
            root_fs: self.root_mnt.fs.stats(),
        }
    }

    /// The file system at the namespace's root.
    pub fn root_fs(&self) -> &Arc<SuperBlock> {
        &self.root_mnt.fs
    }

    pub(crate) fn root_mount(&self) -> &Arc<Mount> {
        &self.root_mnt
    }

    pub(crate) fn lock_mounts(&self) -> sync::MutexGuard<'_, ()> {
        self.mount_sync.lock.lock()
    }

    pub(crate) fn mount_seq(&self) -> &sync::SeqCount {
        &self.mount_sync.seq
    }

    pub(crate) fn next_mount_id(&self) -> u64 {
        self.next_mount_id.fetch_add(1, Relaxed)
    }

    /// Replaces the mount table; the caller holds the mount lock and is inside a
    /// mount sequence write section.
    pub(crate) fn publish_mounts(&self, t: MountTable, guard: &crossbeam_epoch::Guard) {
        let old = self.mounts.swap(Owned::new(t), SeqCst, guard);
        // SAFETY: the old table is unreachable now; readers that loaded it hold guards.
        unsafe { guard.defer_destroy(old) };
    }
}

/// A new count on the object behind `p`, a pointer `triomphe::Arc::into_raw` made (a
/// descriptor slot's, a dentry's inode), whose count is still held: what std's
/// `Arc::increment_strong_count` and `Arc::from_raw` do together.
///
/// # Safety
/// `p` came from `triomphe::Arc::<T>::into_raw` (with that provenance), and the count it
/// stands for is not given back during the call.
#[inline]
pub(crate) unsafe fn arc_counted<T>(p: *const T) -> triomphe::Arc<T> {
    // SAFETY: per the contract, `p` is an `into_raw` pointer whose count is held; the
    // `ManuallyDrop` gives none back, so the clone adds the only new count.
    let owner = std::mem::ManuallyDrop::new(unsafe { triomphe::Arc::from_raw(p) });
    triomphe::Arc::clone(&owner)
}

/// A raw pointer that may cross threads inside a deferred function.
pub(crate) struct SendPtr<T>(pub(crate) *mut T);
// SAFETY: the pointee is `Sync` and owned by the deferred function.
unsafe impl<T: Sync> Send for SendPtr<T> {}
impl<T> SendPtr<T> {
    pub(crate) fn into_inner(self) -> *mut T {
        self.0
    }
}

impl Drop for Vfs {
    fn drop(&mut self) {
        self.set_check_mode(false);
        // SAFETY: no reader remains: every Process holds an Arc<Vfs>.
        unsafe {
            let g = crossbeam_epoch::unprotected();
            let t = self.mounts.load(Relaxed, g);
            if !t.is_null() {
                drop(t.into_owned());
            }
        }
        crate::reclaim::flush();
    }
}

impl std::fmt::Debug for Vfs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Vfs(root {:?})", self.root_mnt)
    }
}
