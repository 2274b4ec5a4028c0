//! memfs: the in-memory file system with tmpfs semantics.
//!
//! The dentry tree *is* the directory structure, as in Linux tmpfs: every directory is
//! always complete in the dentry cache, so a lookup that misses under the directory lock is
//! an authoritative "no such name" and the backend is never asked. A [`MemFs`] is the
//! superblock: device number, inode-number allocator, dentry hash, root, the rename mutex
//! for cross-directory directory renames, and usage counters.
//!
//! # Inode numbers
//! Handed out in per-thread batches (like Linux `get_next_ino`), so concurrent creates do
//! not share a counter line.
//!
//! # Accounting
//! As tmpfs: an inode counts from its creation until it is evicted, when its last link and
//! its last open description are both gone (`Inode::hold`); a data page counts from the
//! write that allocates it until a truncate, a hole punch or the eviction frees it. Each is
//! charged once and uncharged once. Without limits the counts are striped; with
//! `max_inodes` or `max_bytes` they are exact (`sync::UsageCounter`): a create or an
//! allocation that would pass the limit fails with `ENOSPC`, and nothing it would have
//! allocated is kept.

use crate::dentry::{DHash, DRef};
use crate::errno::{Errno, Result};
use crate::inode::{Contents, DirState, FileData, Inode, NO_QUOTA};
use crate::sync::{PerUserCounts, StripedCounter, UsageCounter};
use crate::types::{mode::*, StatFs, Timespec};
use parking_lot::{Mutex, RwLock};
use std::cell::Cell;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;

/// `TMPFS_MAGIC`.
pub const TMPFS_MAGIC: u64 = 0x0102_1994;

/// Options for a new memfs.
#[derive(Clone, Debug)]
pub struct MemFsOptions {
    /// Permission bits of the root directory (tmpfs: `1777`).
    pub mode: u32,
    /// Owner of the root directory.
    pub uid: u32,
    /// Group of the root directory.
    pub gid: u32,
    /// Maximum number of inodes (`ENOSPC` beyond); `None` for no limit.
    pub max_inodes: Option<u64>,
    /// Maximum bytes of file data (`ENOSPC` beyond); `None` for no limit.
    pub max_bytes: Option<u64>,
    /// Maximum inodes each user other than root may own (`EDQUOT` beyond, as tmpfs's
    /// `usrquota_inode_hardlimit`); `None` for no limit. Root is never refused, so it can
    /// always get in to clean up. An inode counts against its owner from its creation to
    /// its eviction, and moves with `chown`.
    pub max_inodes_per_user: Option<u64>,
    /// Dentry hash buckets at first: any value is accepted, rounded up to a power of two and
    /// clamped to 16..=2^24. The table grows fourfold (up to 2^24) whenever it holds more
    /// than two dentries per bucket, so this only saves the first few growths of a tree
    /// whose size is known. It also caps the bucket locks (never more than the first size).
    pub hash_buckets: usize,
    /// Cap on cached negative entries (lookups of missing names beyond it are not cached).
    /// `None` (the default): proportional to the tree, [`NEGATIVE_FLOOR`] plus one per inode
    /// in use, so a flood of lookups of missing names costs at most about as much as the
    /// tree itself.
    pub max_negative: Option<u64>,
}

impl Default for MemFsOptions {
    fn default() -> Self {
        MemFsOptions {
            mode: 0o1777,
            uid: 0,
            gid: 0,
            max_inodes: None,
            max_bytes: None,
            max_inodes_per_user: None,
            hash_buckets: 256,
            max_negative: None,
        }
    }
}

/// What a memfs holds (sums of per-thread stripes: exact when it is quiet).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemFsStats {
    /// Inodes in use, from creation to eviction (unlinked-but-open ones included).
    pub inodes: u64,
    /// Data pages in use.
    pub data_pages: u64,
    /// Cached negative entries (names known not to exist).
    pub negative_entries: u64,
    /// The dentry hash's buckets.
    pub hash_buckets: u64,
}

/// An in-memory file system.
pub struct MemFs {
    /// Device number reported in `st_dev`.
    pub dev: u64,
    id: u64,
    /// The dentry hash.
    pub(crate) dcache: DHash,
    root: Option<DRef>,
    next_ino: AtomicU64,
    /// Serializes renames that move a directory to another parent (loop prevention).
    pub(crate) rename_lock: Mutex<()>,
    /// Inodes in use, from creation to eviction.
    inodes: UsageCounter,
    /// Inodes per owner, with `max_inodes_per_user` (see `Inode::quota_uid`).
    user_inodes: Option<PerUserCounts>,
    /// Data pages in use: each charged once when a write allocates it, uncharged once when
    /// a truncate, a hole punch or the inode's eviction frees it.
    pages: UsageCounter,
    negatives: StripedCounter,
    negatives_full: AtomicBool,
    opts: MemFsOptions,
}

/// The negative entries a file system may cache whatever its size (see
/// [`MemFsOptions::max_negative`]).
pub const NEGATIVE_FLOOR: u64 = 1024;

/// How often (in admissions per thread) the negative-entry count is re-summed.
const NEG_RECHECK: u32 = 64;

const INO_BATCH: u64 = 1024;

static NEXT_FS: AtomicU64 = AtomicU64::new(1);

impl MemFs {
    /// A new, empty file system.
    pub fn new(opts: MemFsOptions) -> Arc<MemFs> {
        let id = NEXT_FS.fetch_add(1, Relaxed);
        let mut fs = MemFs {
            // Anonymous device numbers, like Linux's (major 0).
            dev: 0x100 + id,
            id,
            dcache: DHash::new(opts.hash_buckets),
            root: None,
            // Inode 1 is the root, as on tmpfs the root is the first inode allocated.
            next_ino: AtomicU64::new(2),
            rename_lock: Mutex::new(()),
            inodes: UsageCounter::new(opts.max_inodes),
            user_inodes: opts.max_inodes_per_user.map(PerUserCounts::new),
            pages: UsageCounter::new(
                opts.max_bytes
                    .map(|b| b.div_ceil(crate::inode::PAGE as u64)),
            ),
            negatives: StripedCounter::default(),
            negatives_full: AtomicBool::new(false),
            opts,
        };
        let root = Arc::new(Inode::new(
            1,
            S_IFDIR | (fs.opts.mode & 0o7777),
            fs.opts.uid,
            fs.opts.gid,
            0,
            Contents::Dir(Mutex::new(DirState::default())),
            Timespec::now(),
        ));
        // The root always fits (tmpfs counts it too, even against `nr_inodes=1`).
        fs.inodes.charge_up_to(1);
        fs.root = Some(DHash::d_alloc_root(root));
        Arc::new(fs)
    }

    /// The root dentry.
    pub(crate) fn root(&self) -> &DRef {
        self.root.as_ref().expect("memfs root present until drop")
    }

    fn alloc_ino(&self) -> u64 {
        thread_local! {
            static BATCH: Cell<(u64, u64, u64)> = const { Cell::new((0, 0, 0)) };
        }
        BATCH.with(|b| {
            let (fs, next, end) = b.get();
            if fs == self.id && next < end {
                b.set((fs, next + 1, end));
                return next;
            }
            let start = self.next_ino.fetch_add(INO_BATCH, Relaxed);
            b.set((self.id, start + 1, start + INO_BATCH));
            start
        })
    }

    /// A new inode of the given mode (type and permission bits) and owner. For symlinks
    /// `target` is the link body.
    pub(crate) fn new_inode(
        &self,
        mode: u32,
        uid: u32,
        gid: u32,
        rdev: u64,
        target: Option<&[u8]>,
        now: Timespec,
    ) -> Result<Arc<Inode>> {
        // tmpfs's order: the file system's inode limit, then the owner's quota.
        if !self.inodes.charge(1) {
            return Err(Errno::ENOSPC);
        }
        if let Some(q) = &self.user_inodes {
            if !q.charge(uid, uid != 0) {
                self.inodes.uncharge(1);
                return Err(Errno::EDQUOT);
            }
        }
        let contents = match mode & S_IFMT {
            S_IFDIR => Contents::Dir(Mutex::new(DirState::default())),
            S_IFREG => Contents::File(RwLock::new(FileData::default())),
            S_IFLNK => Contents::Symlink(target.unwrap_or_default().into()),
            _ => Contents::Special,
        };
        let inode = Inode::new(self.alloc_ino(), mode, uid, gid, rdev, contents, now);
        if self.user_inodes.is_some() {
            inode.quota_uid.store(uid, Relaxed);
        }
        Ok(Arc::new(inode))
    }

    /// Moves `inode`'s count in the per-user inode counts to its new owner `uid` (after
    /// a `chown`). Never refused: only root may give a file away, and root ignores the
    /// limits (Linux's `dquot_transfer` for `CAP_SYS_RESOURCE`). Races with eviction
    /// settle on `quota_uid`: the new owner is charged first, and given back if the
    /// inode was evicted meanwhile.
    pub(crate) fn transfer_owner(&self, inode: &Inode, uid: u32) {
        let Some(q) = &self.user_inodes else {
            return;
        };
        let mut cur = inode.quota_uid.load(Relaxed);
        while cur != NO_QUOTA && cur != uid {
            q.charge(uid, false);
            match inode.quota_uid.compare_exchange(cur, uid, Relaxed, Relaxed) {
                Ok(_) => {
                    q.uncharge(cur);
                    return;
                }
                Err(now) => {
                    q.uncharge(uid);
                    cur = now;
                }
            }
        }
    }

    /// Inodes `uid` owns, when per-user limits are on (else 0).
    pub fn inodes_of(&self, uid: u32) -> u64 {
        self.user_inodes.as_ref().map_or(0, |q| q.count(uid))
    }

    /// Evicts an inode whose last hold went (see `Inode::hold`): its data pages are freed
    /// at once (they need no grace period: nothing can reach them any more) and uncharged,
    /// and the inode stops counting. Called exactly once per inode.
    pub(crate) fn evict(&self, inode: &Inode) {
        if let Contents::File(d) = &inode.contents {
            let freed = d.write().clear();
            self.pages.uncharge(freed);
        }
        self.inodes.uncharge(1);
        if let Some(q) = &self.user_inodes {
            let owner = inode.quota_uid.swap(NO_QUOTA, Relaxed);
            if owner != NO_QUOTA {
                q.uncharge(owner);
            }
        }
    }

    /// Gives back a hold on `inode`, evicting it with the last one.
    pub(crate) fn release(&self, inode: &Inode) {
        if inode.release() {
            self.evict(inode);
        }
    }

    /// Charges as many of `n` new data pages as the limit allows; returns how many.
    pub(crate) fn charge_pages_up_to(&self, n: u64) -> u64 {
        self.pages.charge_up_to(n)
    }

    /// Charges `n` new data pages if all fit under the limit; `false` (none charged)
    /// otherwise.
    pub(crate) fn charge_pages(&self, n: u64) -> bool {
        self.pages.charge(n)
    }

    /// Gives back `n` data pages that were freed.
    pub(crate) fn uncharge_pages(&self, n: u64) {
        self.pages.uncharge(n);
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
                .opts
                .max_negative
                .unwrap_or_else(|| NEGATIVE_FLOOR + self.inodes.used());
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

    /// What this file system holds (see [`MemFsStats`]).
    pub fn stats(&self) -> MemFsStats {
        MemFsStats {
            inodes: self.inodes.used(),
            data_pages: self.pages.used(),
            negative_entries: self.negatives.sum().max(0) as u64,
            hash_buckets: self.dcache.buckets() as u64,
        }
    }

    /// What `statfs` reports.
    pub fn statfs(&self) -> StatFs {
        let page = crate::inode::PAGE as u64;
        let blocks = self.pages.max().unwrap_or(u64::MAX / page / 2);
        let used = self.pages.used();
        let files = self.inodes.max().unwrap_or(u64::MAX / 2);
        let ifree = files.saturating_sub(self.inodes.used());
        StatFs {
            fs_type: TMPFS_MAGIC,
            bsize: page,
            blocks,
            bfree: blocks.saturating_sub(used),
            bavail: blocks.saturating_sub(used),
            files,
            ffree: ifree,
            namelen: crate::types::limits::NAME_MAX as u64,
            frsize: page,
        }
    }
}

impl Drop for MemFs {
    fn drop(&mut self) {
        self.dcache.teardown();
        // The dentries torn down wait for a grace period: hand them to the collector now,
        // rather than leave them in this thread's bag until it next defers enough.
        crossbeam_epoch::pin().flush();
    }
}

impl std::fmt::Debug for MemFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MemFs(dev {:#x})", self.dev)
    }
}
