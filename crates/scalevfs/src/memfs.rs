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
//! Inode and page counts are striped counters. An inode is counted from creation until its
//! last link goes (an unlinked-but-open file's pages are no longer counted).

use crate::dentry::{DHash, DRef};
use crate::errno::{Errno, Result};
use crate::inode::{Contents, DirState, FileData, Inode};
use crate::sync::StripedCounter;
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
    /// Dentry hash buckets: any value is accepted, rounded up to a power of two and clamped
    /// to 16..=2^24.
    pub hash_buckets: usize,
    /// Cap on cached negative entries (lookups of missing names beyond it are not cached).
    pub max_negative: u64,
}

impl Default for MemFsOptions {
    fn default() -> Self {
        MemFsOptions {
            mode: 0o1777,
            uid: 0,
            gid: 0,
            max_inodes: None,
            max_bytes: None,
            hash_buckets: 1 << 17,
            max_negative: 1 << 20,
        }
    }
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
    inodes: StripedCounter,
    pages: StripedCounter,
    negatives: StripedCounter,
    negatives_full: AtomicBool,
    opts: MemFsOptions,
}

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
            inodes: StripedCounter::default(),
            pages: StripedCounter::default(),
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
        fs.inodes.add(1);
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
        if let Some(max) = self.opts.max_inodes {
            if self.inodes.sum() as u64 >= max {
                return Err(Errno::ENOSPC);
            }
        }
        let contents = match mode & S_IFMT {
            S_IFDIR => Contents::Dir(Mutex::new(DirState::default())),
            S_IFREG => Contents::File(RwLock::new(FileData::default())),
            S_IFLNK => Contents::Symlink(target.unwrap_or_default().into()),
            _ => Contents::Special,
        };
        self.inodes.add(1);
        Ok(Arc::new(Inode::new(
            self.alloc_ino(),
            mode,
            uid,
            gid,
            rdev,
            contents,
            now,
        )))
    }

    /// Records that an inode lost its last link (and its pages with it).
    pub(crate) fn inode_released(&self, pages: u64) {
        self.inodes.add(-1);
        self.pages.add(-(pages as i64));
    }

    /// Reserves `n` more data pages, or `ENOSPC`.
    pub(crate) fn charge_pages(&self, n: i64) -> Result<()> {
        if n > 0 {
            if let Some(max) = self.opts.max_bytes {
                if (self.pages.sum() + n) as u64 * crate::inode::PAGE as u64 > max {
                    return Err(Errno::ENOSPC);
                }
            }
        }
        self.pages.add(n);
        Ok(())
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
            let full = self.negatives.sum() as u64 >= self.opts.max_negative;
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

    /// What `statfs` reports.
    pub fn statfs(&self) -> StatFs {
        let page = crate::inode::PAGE as u64;
        let blocks = self
            .opts
            .max_bytes
            .map_or(u64::MAX / page / 2, |b| b / page);
        let used = self.pages.sum().max(0) as u64;
        let files = self.opts.max_inodes.unwrap_or(u64::MAX / 2);
        let ifree = files.saturating_sub(self.inodes.sum().max(0) as u64);
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
    }
}

impl std::fmt::Debug for MemFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MemFs(dev {:#x})", self.dev)
    }
}
