//! scalevfs: a virtual file system engine for user space.
//!
//! A [`Vfs`] is a namespace: a tree of mounts, each a file system ([`MemFs`] today). A
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

mod dentry;
mod errno;
mod file;
mod inode;
mod memfs;
mod mount;
mod name;
mod pathcache;
mod process;
pub mod sync;
mod types;
mod walk;

/// Engine internals for the criterion benchmarks; not part of the API.
#[doc(hidden)]
#[path = "bench_internals.rs"]
pub mod __bench;

pub use errno::{Errno, Result};
pub use memfs::{MemFs, MemFsOptions, TMPFS_MAGIC};
pub use pathcache::clear_thread_cache;
pub use process::Process;
pub use types::*;

/// The sizes, in bytes, of the structures every file costs (for `scalevfs bench`'s W12 and
/// BENCHMARKS.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// A dentry (one per name).
    pub dentry: usize,
    /// An inode (one per file).
    pub inode: usize,
    /// An inode's allocation: the inode with its `Arc` counts (before the allocator's
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
        inode_alloc: (2 * size_of::<usize>()).next_multiple_of(align) + inode,
    }
}

use crossbeam_epoch::{Atomic, Owned};
use crossbeam_utils::CachePadded;
use mount::{Mount, MountTable};
use parking_lot::Mutex;
use std::sync::atomic::Ordering::{Acquire, Relaxed, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use sync::{SeqCount, StripedCounter};

/// A namespace: the mount tree and its shared state.
pub struct Vfs {
    /// Unique among all namespaces of the process (a key of the path cache).
    pub(crate) id: u64,
    /// The namespace generation; see `pathcache`. Bumped before and after every change
    /// that can alter how an existing path resolves through directories or symlinks.
    ns_gen: CachePadded<AtomicU64>,
    root_mnt: Arc<Mount>,
    /// The mount table snapshot; see `mount`.
    pub(crate) mounts: Atomic<MountTable>,
    /// Serializes mount table writers.
    mount_lock: Mutex<()>,
    /// Bumped around every mount table change; validates lockless crossings.
    pub(crate) mount_seq: SeqCount,
    next_mount_id: AtomicU64,
    check: AtomicBool,
    /// In check mode: bumped at the start and at the end of every namespace change.
    /// Striped would not do: readers need one word to compare.
    changes: AtomicU64,
    /// In check mode: how many namespace changes are in progress. A change ends (in its
    /// caller) after it has released its directory locks, so a locked walk can see its
    /// result before `changes` moves again; while any change is in progress, no
    /// disagreement can be judged.
    changes_active: AtomicU64,
    check_failures: StripedCounter,
}

impl Vfs {
    /// A namespace whose root is `fs`.
    pub fn new(fs: Arc<MemFs>) -> Arc<Vfs> {
        let root = fs.root().clone();
        let root_mnt = Arc::new(Mount {
            id: 1,
            fs,
            root,
            parent: None,
            users: StripedCounter::default(),
            detached: Default::default(),
        });
        static NEXT_VFS: AtomicU64 = AtomicU64::new(1);
        Arc::new(Vfs {
            id: NEXT_VFS.fetch_add(1, Relaxed),
            ns_gen: CachePadded::new(AtomicU64::new(0)),
            root_mnt,
            mounts: Atomic::new(MountTable::default()),
            mount_lock: Mutex::new(()),
            mount_seq: SeqCount::new(),
            next_mount_id: AtomicU64::new(2),
            check: AtomicBool::new(false),
            changes: AtomicU64::new(0),
            changes_active: AtomicU64::new(0),
            check_failures: StripedCounter::default(),
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

    /// The namespace generation, read before using or filling the path cache.
    #[inline]
    pub(crate) fn ns_gen(&self) -> u64 {
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        self.ns_gen.load(Acquire)
    }

    /// Runs a change that can alter how existing paths resolve (see `pathcache`),
    /// bracketed by generation bumps so no cached walk survives it.
    pub(crate) fn ns_change<R>(&self, f: impl FnOnce() -> R) -> R {
        self.ns_gen.fetch_add(1, SeqCst);
        let r = f();
        self.ns_gen.fetch_add(1, SeqCst);
        r
    }

    /// Like [`Vfs::ns_change`], for code with several exits: bumps now and when dropped.
    pub(crate) fn ns_guard(&self) -> NsChange<'_> {
        self.ns_gen.fetch_add(1, SeqCst);
        NsChange(self)
    }

    /// Check mode: every lockless walk is repeated by the locked walk and the two must
    /// agree (a disagreement panics). Slow; for tests.
    pub fn set_check_mode(&self, on: bool) {
        self.check.store(on, SeqCst);
    }

    #[inline]
    pub(crate) fn check_mode(&self) -> bool {
        self.check.load(Relaxed)
    }

    /// The number of namespace changes begun or ended so far, or `u64::MAX` while one is
    /// in progress (which no later reading equals, so a comparison against it is excused).
    pub(crate) fn change_count(&self) -> u64 {
        if self.changes_active.load(SeqCst) != 0 {
            return u64::MAX;
        }
        self.changes.load(SeqCst)
    }

    /// Brackets a namespace change for check mode.
    #[inline]
    /// Returns whether it counted the change (check mode was on), to hand to
    /// [`Vfs::change_end`], so that turning check mode on or off meanwhile cannot unbalance
    /// the count of changes in progress.
    #[must_use]
    pub(crate) fn change_begin(&self) -> bool {
        let counted = self.check_mode();
        if counted {
            self.changes_active.fetch_add(1, SeqCst);
            self.changes.fetch_add(1, SeqCst);
        }
        counted
    }

    /// Ends what [`Vfs::change_begin`] began.
    #[inline]
    pub(crate) fn change_end(&self, counted: bool) {
        if counted {
            self.changes.fetch_add(1, SeqCst);
            self.changes_active.fetch_sub(1, SeqCst);
        }
    }

    pub(crate) fn record_check_failure(&self) {
        self.check_failures.add(1);
    }

    /// How many disagreements check mode has seen.
    pub fn check_failures(&self) -> u64 {
        self.check_failures.sum() as u64
    }

    pub(crate) fn root_mount(&self) -> &Arc<Mount> {
        &self.root_mnt
    }

    pub(crate) fn lock_mounts(&self) -> parking_lot::MutexGuard<'_, ()> {
        self.mount_lock.lock()
    }

    pub(crate) fn next_mount_id(&self) -> u64 {
        self.next_mount_id.fetch_add(1, Relaxed)
    }

    /// Replaces the mount table; the caller holds the mount lock and is inside a
    /// `mount_seq` write section.
    pub(crate) fn publish_mounts(&self, t: MountTable, guard: &crossbeam_epoch::Guard) {
        let old = self.mounts.swap(Owned::new(t), SeqCst, guard);
        // SAFETY: the old table is unreachable now; readers that loaded it hold guards.
        unsafe { guard.defer_destroy(old) };
    }
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

/// An open namespace change; see [`Vfs::ns_guard`].
pub(crate) struct NsChange<'a>(&'a Vfs);

impl Drop for NsChange<'_> {
    fn drop(&mut self) {
        self.0.ns_gen.fetch_add(1, SeqCst);
    }
}

impl Drop for Vfs {
    fn drop(&mut self) {
        // SAFETY: no reader remains: every Process holds an Arc<Vfs>.
        unsafe {
            let g = crossbeam_epoch::unprotected();
            let t = self.mounts.load(Relaxed, g);
            if !t.is_null() {
                drop(t.into_owned());
            }
        }
    }
}

impl std::fmt::Debug for Vfs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Vfs(root {:?})", self.root_mnt)
    }
}
