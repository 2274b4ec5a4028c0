//! The file-system layer: what the engine keeps for each file-system instance
//! ([`SuperBlock`]) and what it asks of the file system itself ([`FileSystem`]).
//!
//! Linux splits a mounted file system the same way: the VFS owns `struct super_block`
//! (device number, root dentry, the dentry cache it fills) and calls the file system
//! through `super_operations`/`inode_operations` (gVisor: `vfs.Filesystem` and
//! `FilesystemImpl`). Here:
//! - [`SuperBlock`] is the engine's: the anonymous device number, the dentry hash
//!   (`dentry::DHash`), the root dentry, the mutex that serializes renames moving a
//!   directory to another parent, and the cap on cached negative entries. Every mount of
//!   one instance shares it, so there is one dentry cache per instance, as in Linux.
//! - [`FileSystem`] is the file system's: how a new inode is made and charged, what an
//!   evicted one gives back, how data pages are accounted, what `statfs` says.
//!
//! The hot paths never call the trait: a lookup, a `stat` and a walk read only the
//! dentry cache and the engine's inodes (`Mount::fs` is an `Arc<SuperBlock>` with the
//! dentry hash inline). The trait is called where the file system must act: a create
//! (one call), an eviction, a `chown` that moves a quota, a write that allocates pages,
//! `statfs`.
//!
//! memfs (`memfs`) is the one implementation so far. It keeps every directory complete
//! in the dentry cache, so a miss under the directory lock is authoritative and it has no
//! lookup method. File systems whose objects live elsewhere (a host directory, a SQL
//! store) add the methods they need as they arrive: lookup on a miss, readdir, data I/O
//! and the namespace changes, each called with no engine lock but the directory's held.
//! The trait stays crate-private until then, so its shape is settled by its second user
//! rather than guessed now.
//!
//! # Lock order
//! `SuperBlock::rename_lock` is taken before any directory lock (see `process`). Nothing
//! else here is a lock; the negative-entry count is striped and its verdict cached in an
//! atomic flag that each thread re-checks every `NEG_RECHECK` admissions.
//!
//! # Reclamation
//! A `SuperBlock` lives as long as its last holder: the `Vfs` it is the root of, each
//! [`Mount`](crate::mount::Mount) of it, and each open file (through its mount). When it
//! goes, it tears its dentry hash down; the dentries wait for an epoch grace period like
//! any other (see `dentry`).

use crate::dentry::{DHash, DRef};
use crate::errno::Result;
use crate::inode::Inode;
use crate::sync::StripedCounter;
use crate::types::{StatFs, Timespec};
use parking_lot::Mutex;
use std::cell::Cell;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;

/// What the engine asks of a file system, beyond the dentry cache it keeps for it.
///
/// Each method is called with no engine lock held unless it says otherwise, and may be
/// called from any number of threads at once.
pub(crate) trait FileSystem: Send + Sync + 'static {
    /// The root directory's inode; called once, when the [`SuperBlock`] is made.
    fn root_inode(&self) -> Arc<Inode>;

    /// A new inode for a create (`mkdir`, `mknod`, `symlink`, `open(O_CREAT)`,
    /// `O_TMPFILE`): `mode` holds the type and permission bits, `target` the body of a
    /// symlink. Called with the parent directory's lock held (except for `O_TMPFILE`).
    /// The inode counts against the file system from now until [`FileSystem::evict`].
    ///
    /// Errors: `ENOSPC` (no inode left), `EDQUOT` (the owner's inode limit). On an error
    /// nothing stays charged.
    fn new_inode(
        &self,
        mode: u32,
        uid: u32,
        gid: u32,
        rdev: u64,
        target: Option<&[u8]>,
        now: Timespec,
    ) -> Result<Arc<Inode>>;

    /// `inode`'s last hold went (its last link and last open description; see
    /// `Inode::hold`): free what it holds and stop counting it. Called exactly once per
    /// inode made by [`FileSystem::new_inode`], by whoever gave the last hold back.
    fn evict(&self, inode: &Inode);

    /// `inode` was given to `uid` (`chown`): move it in the per-owner counts. Never
    /// refused (only root may give a file away, and root ignores the limits). May race
    /// with [`FileSystem::evict`] of the same inode.
    fn transfer_owner(&self, inode: &Inode, uid: u32);

    /// Inodes `uid` owns, where the file system counts them per owner (else 0).
    fn inodes_of(&self, uid: u32) -> u64;

    /// Charges `n` new data pages: all of them or none (`partial == false`, returns `n` or
    /// 0), or as many as fit (`partial == true`).
    fn charge_pages(&self, n: u64, partial: bool) -> u64;

    /// Gives back `n` data pages that were freed.
    fn uncharge_pages(&self, n: u64);

    /// Inodes and data pages in use.
    fn usage(&self) -> (u64, u64);

    /// What `statfs` reports.
    fn statfs(&self) -> StatFs;
}

/// Options of the dentry cache a [`SuperBlock`] keeps for its file system.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CacheOptions {
    /// The dentry hash's first size (see `MemFsOptions::hash_buckets`).
    pub(crate) hash_buckets: usize,
    /// Cap on cached negative entries; `None`: [`NEGATIVE_FLOOR`] plus one per inode.
    pub(crate) max_negative: Option<u64>,
}

/// The negative entries a file system may cache whatever its size (see
/// [`crate::MemFsOptions::max_negative`]).
pub const NEGATIVE_FLOOR: u64 = 1024;

/// How often (in admissions per thread) the negative-entry count is re-summed.
const NEG_RECHECK: u32 = 64;

static NEXT_SB: AtomicU64 = AtomicU64::new(1);

/// A file-system instance as the engine holds it: what [`crate::Vfs::new`] and
/// [`crate::Process::mount`] take, and what [`crate::MemFs::new`] makes. Mounting one
/// instance at several places shares its files, as a bind mount does.
pub struct SuperBlock {
    /// Device number reported in `st_dev` (anonymous, like Linux's: major 0).
    pub dev: u64,
    /// The dentry hash.
    pub(crate) dcache: DHash,
    root: Option<DRef>,
    /// Serializes renames that move a directory to another parent (loop prevention).
    pub(crate) rename_lock: Mutex<()>,
    negatives: StripedCounter,
    negatives_full: AtomicBool,
    max_negative: Option<u64>,
    ops: Box<dyn FileSystem>,
}

/// What a file system holds (sums of per-thread stripes: exact when it is quiet).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FsStats {
    /// Inodes in use, from creation to eviction (unlinked-but-open ones included).
    pub inodes: u64,
    /// Data pages in use.
    pub data_pages: u64,
    /// Cached negative entries (names known not to exist).
    pub negative_entries: u64,
    /// The dentry hash's buckets.
    pub hash_buckets: u64,
}

impl SuperBlock {
    /// The engine's state for the file system `ops`, with an empty dentry cache but for
    /// the root.
    pub(crate) fn new(ops: Box<dyn FileSystem>, opts: CacheOptions) -> Arc<SuperBlock> {
        let id = NEXT_SB.fetch_add(1, Relaxed);
        let root = DHash::d_alloc_root(ops.root_inode());
        Arc::new(SuperBlock {
            dev: 0x100 + id,
            dcache: DHash::new(opts.hash_buckets),
            root: Some(root),
            rename_lock: Mutex::new(()),
            negatives: StripedCounter::default(),
            negatives_full: AtomicBool::new(false),
            max_negative: opts.max_negative,
            ops,
        })
    }

    /// The root dentry.
    pub(crate) fn root(&self) -> &DRef {
        self.root.as_ref().expect("root present until drop")
    }

    /// A new inode (see [`FileSystem::new_inode`]).
    #[inline]
    pub(crate) fn new_inode(
        &self,
        mode: u32,
        uid: u32,
        gid: u32,
        rdev: u64,
        target: Option<&[u8]>,
        now: Timespec,
    ) -> Result<Arc<Inode>> {
        self.ops.new_inode(mode, uid, gid, rdev, target, now)
    }

    /// Gives back a hold on `inode`, evicting it with the last one.
    #[inline]
    pub(crate) fn release(&self, inode: &Inode) {
        if inode.release() {
            self.ops.evict(inode);
        }
    }

    /// Moves `inode` to `uid` in the per-owner counts (see
    /// [`FileSystem::transfer_owner`]).
    pub(crate) fn transfer_owner(&self, inode: &Inode, uid: u32) {
        self.ops.transfer_owner(inode, uid);
    }

    /// Inodes `uid` owns, when the file system counts them per owner (memfs with
    /// `max_inodes_per_user`); 0 otherwise.
    pub fn inodes_of(&self, uid: u32) -> u64 {
        self.ops.inodes_of(uid)
    }

    /// Charges as many of `n` new data pages as the limit allows; returns how many.
    pub(crate) fn charge_pages_up_to(&self, n: u64) -> u64 {
        self.ops.charge_pages(n, true)
    }

    /// Charges `n` new data pages if all fit under the limit; `false` (none charged)
    /// otherwise.
    pub(crate) fn charge_pages(&self, n: u64) -> bool {
        self.ops.charge_pages(n, false) == n
    }

    /// Gives back `n` data pages that were freed.
    pub(crate) fn uncharge_pages(&self, n: u64) {
        self.ops.uncharge_pages(n);
    }

    /// Whether another negative entry may be cached; counts it if so. Summing the stripes
    /// touches every stripe's line, so each thread re-sums only every `NEG_RECHECK`
    /// admissions and the verdict is shared in `negatives_full`: the cap may be overshot by
    /// that many entries per thread.
    pub(crate) fn negative_admit(&self) -> bool {
        thread_local! {
            static TICK: Cell<u32> = const { Cell::new(0) };
        }
        let tick = TICK.with(|t| {
            let v = t.get().wrapping_add(1);
            t.set(v);
            v
        });
        if tick % NEG_RECHECK == 0 {
            let cap = self
                .max_negative
                .unwrap_or_else(|| NEGATIVE_FLOOR + self.ops.usage().0);
            let full = self.negatives.sum().max(0) as u64 >= cap;
            if full != self.negatives_full.load(Relaxed) {
                self.negatives_full.store(full, Relaxed);
            }
        }
        if self.negatives_full.load(Relaxed) {
            return false;
        }
        self.negatives.add(1);
        true
    }

    /// Records that `n` negative entries went away (dropped or turned positive).
    pub(crate) fn negative_gone(&self, n: i64) {
        self.negatives.add(-n);
    }

    /// What this file system holds (see [`FsStats`]).
    pub fn stats(&self) -> FsStats {
        let (inodes, data_pages) = self.ops.usage();
        FsStats {
            inodes,
            data_pages,
            negative_entries: self.negatives.sum().max(0) as u64,
            hash_buckets: self.dcache.buckets() as u64,
        }
    }

    /// What `statfs` reports.
    pub fn statfs(&self) -> StatFs {
        self.ops.statfs()
    }
}

impl Drop for SuperBlock {
    fn drop(&mut self) {
        self.dcache.teardown();
        // The dentries torn down wait for a grace period: hand them to the collector now,
        // rather than leave them in this thread's bag until it next defers enough.
        crossbeam_epoch::pin().flush();
    }
}

impl std::fmt::Debug for SuperBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SuperBlock(dev {:#x})", self.dev)
    }
}
