//! memfs: the in-memory file system with tmpfs semantics.
//!
//! The dentry tree *is* the directory structure, as in Linux tmpfs: every directory is
//! always complete in the dentry cache, so a lookup that misses under the directory lock is
//! an authoritative "no such name" and the file system is never asked. [`MemFs`] is what
//! memfs adds to the engine's [`SuperBlock`] (see `backend`): the inode-number allocator and the
//! usage counters, as the [`FileSystem`] implementation; [`MemFs::new`] makes the
//! superblock to mount.
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
//!
//! With `max_inodes`, inodes and extended attributes share one budget of *inode space*,
//! as on tmpfs since Linux 6.6: `max_inodes` times 1,024 bytes (`BOGO_INODE_SIZE`), of
//! which each inode takes 1,024 and each extended attribute 40 bytes plus its name and
//! value (`simple_xattr_space`). `statfs`'s free inodes are what is left, in 1,024-byte
//! units. Without `max_inodes`, nothing limits either (tmpfs's `nr_inodes=0`).
//!
//! # Extended attributes
//! Kept beside the inodes, not in them (an inode without any pays nothing): a table of
//! hashed locks (`locktable`, seed 002) whose slot for an inode number holds a map from
//! inode number to that inode's attributes, name to value. The map is listed in
//! descending byte order of the names, as tmpfs lists them. The call layer checks names,
//! sizes and permissions (`process::xattr`), and calls with a hold on the inode
//! (`SuperBlock::xattr_op`); a set marks the inode (`Inode::has_xattrs`), and its
//! eviction, which comes after the setter's hold is given back, then takes the slot lock
//! and frees them.
//!
//! # What protects what
//! The counters are atomic (striped, or exact under a limit), and an inode's per-owner
//! count moves by compare-and-swap on `Inode::quota_uid`. An inode's extended attributes
//! live under their slot's lock (a leaf: nothing else is taken while it is held, and no
//! lock is held when it is taken); `Inode::has_xattrs` is set under it, and read by the
//! eviction, which the last hold's release orders after every set.

use crate::backend::{CacheOptions, FileSystem, SuperBlock};
use crate::errno::{Errno, Result};
use crate::inode::InodeArc;
use crate::inode::{Contents, Inode, NO_QUOTA};
use crate::locktable::LockTable;
use crate::sync::{PerUserCounts, UsageCounter};
use crate::types::{mode::*, StatFs, Timespec, XattrFlags};
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::os::fd::BorrowedFd;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
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
    /// Maximum number of inodes (`ENOSPC` beyond); `None` for no limit. Extended
    /// attributes take from the same budget, as on tmpfs (see the module docs).
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
    /// `None` (the default): proportional to the tree, [`crate::NEGATIVE_FLOOR`] plus one per inode
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

/// The in-memory file system: what memfs keeps beside the engine's [`SuperBlock`].
pub struct MemFs {
    id: u64,
    next_ino: AtomicU64,
    /// Inodes in use, from creation to eviction.
    inodes: UsageCounter,
    /// Inode space in bytes, with `max_inodes` (see "Accounting").
    ispace: Option<UsageCounter>,
    /// Extended attributes, by inode number (see "Extended attributes").
    xattrs: LockTable<HashMap<u64, Xattrs>>,
    /// Inodes per owner, with `max_inodes_per_user` (see `Inode::quota_uid`).
    user_inodes: Option<PerUserCounts>,
    /// Data pages in use: each charged once when a write allocates it, uncharged once when
    /// a truncate, a hole punch or the inode's eviction frees it.
    pages: UsageCounter,
    opts: MemFsOptions,
}

const INO_BATCH: u64 = 1024;

/// What an inode takes of the inode space (tmpfs's `BOGO_INODE_SIZE`).
const BOGO_INODE_SIZE: u64 = 1024;

/// One inode's extended attributes, name to value.
type Xattrs = BTreeMap<Box<[u8]>, Box<[u8]>>;

/// What an extended attribute takes of the inode space (Linux `simple_xattr_space`).
fn xattr_space(name: &[u8], value: usize) -> u64 {
    40 + name.len() as u64 + value as u64
}

static NEXT_FS: AtomicU64 = AtomicU64::new(1);

impl MemFs {
    /// A new, empty file system, ready to be the root of a [`crate::Vfs`] or to be
    /// mounted.
    #[allow(clippy::new_ret_no_self)]
    pub fn new(opts: MemFsOptions) -> Arc<SuperBlock> {
        let cache = CacheOptions {
            hash_buckets: opts.hash_buckets,
            max_negative: opts.max_negative,
            max_dentries: None,
            ttl: None,
        };
        let fs = MemFs {
            id: NEXT_FS.fetch_add(1, Relaxed),
            // Inode 1 is the root, as on tmpfs the root is the first inode allocated.
            next_ino: AtomicU64::new(2),
            inodes: UsageCounter::new(None),
            ispace: opts
                .max_inodes
                .map(|n| UsageCounter::new(Some(n.saturating_mul(BOGO_INODE_SIZE)))),
            xattrs: LockTable::new(),
            user_inodes: opts.max_inodes_per_user.map(PerUserCounts::new),
            pages: UsageCounter::new(
                opts.max_bytes
                    .map(|b| b.div_ceil(crate::inode::PAGE as u64)),
            ),
            opts,
        };
        SuperBlock::new(Box::new(fs), cache)
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
}

impl FileSystem for MemFs {
    fn root_inode(&self) -> InodeArc {
        // The root always fits (tmpfs counts it too, even against `nr_inodes=1`).
        self.inodes.charge(1);
        if let Some(s) = &self.ispace {
            s.charge_up_to(BOGO_INODE_SIZE);
        }
        InodeArc::new(Inode::new(
            1,
            S_IFDIR | (self.opts.mode & 0o7777),
            self.opts.uid,
            self.opts.gid,
            Contents::empty_dir(),
            Timespec::now(),
        ))
    }

    fn new_inode(
        &self,
        mode: u32,
        uid: u32,
        gid: u32,
        rdev: u64,
        target: Option<&[u8]>,
        now: Timespec,
    ) -> Result<InodeArc> {
        // tmpfs's order: the file system's inode limit, then the owner's quota.
        if let Some(s) = &self.ispace {
            if !s.charge(BOGO_INODE_SIZE) {
                return Err(Errno::ENOSPC);
            }
        }
        if let Some(q) = &self.user_inodes {
            if !q.charge(uid, uid != 0) {
                if let Some(s) = &self.ispace {
                    s.uncharge(BOGO_INODE_SIZE);
                }
                return Err(Errno::EDQUOT);
            }
        }
        self.inodes.charge(1);
        let contents = Contents::in_memory(mode, rdev, target);
        let inode = Inode::new(self.alloc_ino(), mode, uid, gid, contents, now);
        if self.user_inodes.is_some() {
            inode.quota_uid.store(uid, Relaxed);
        }
        Ok(InodeArc::new(inode))
    }

    /// Its data pages and extended attributes are freed at once (they need no grace
    /// period: nothing can reach them any more) and uncharged, and the inode stops
    /// counting.
    ///
    /// A file with no blocks has no pages to free, and its data lock is not taken (two
    /// read-modify-writes, on every create + unlink of an empty file). That it has none
    /// stays true: pages are added only by a holder of the inode (`write`, `fallocate`,
    /// `copy_file_range` run on a held description), every hold has gone (the last one's
    /// release acquired what each holder did before its release), and a truncation without
    /// a hold only frees pages. A lockless reader (`Process::read_pinned`) reads the same
    /// nothing before and after. Checked builds take the lock anyway and check the count.
    fn evict(&self, inode: &Inode) {
        if let Contents::File(d) = &inode.contents {
            if inode.has_blocks() || cfg!(debug_assertions) {
                let freed = d.write().clear();
                debug_assert!(
                    freed == 0 || inode.has_blocks(),
                    "{freed} pages with no blocks counted"
                );
                self.pages.uncharge(freed);
            }
        }
        let mut space = BOGO_INODE_SIZE;
        if inode.has_xattrs.load(Relaxed) {
            if let Some(x) = self.xattrs.lock(inode.ino).remove(&inode.ino) {
                space += x.iter().map(|(n, v)| xattr_space(n, v.len())).sum::<u64>();
            }
        }
        if let Some(s) = &self.ispace {
            s.uncharge(space);
        }
        self.inodes.uncharge(1);
        if let Some(q) = &self.user_inodes {
            let owner = inode.quota_uid.swap(NO_QUOTA, Relaxed);
            if owner != NO_QUOTA {
                q.uncharge(owner);
            }
        }
    }

    /// Linux's `dquot_transfer` for `CAP_SYS_RESOURCE`. Races with eviction settle on
    /// `quota_uid`: the new owner is charged first, and given back if the inode was
    /// evicted meanwhile.
    fn transfer_owner(&self, inode: &Inode, uid: u32) {
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

    fn inodes_of(&self, uid: u32) -> u64 {
        self.user_inodes.as_ref().map_or(0, |q| q.count(uid))
    }

    fn charge_pages(&self, n: u64, partial: bool) -> u64 {
        if partial {
            self.pages.charge_up_to(n)
        } else if self.pages.charge(n) {
            n
        } else {
            0
        }
    }

    fn uncharge_pages(&self, n: u64) {
        self.pages.uncharge(n);
    }

    fn usage(&self) -> (u64, u64) {
        (self.inodes.used(), self.pages.used())
    }

    fn statfs(&self) -> StatFs {
        let page = crate::inode::PAGE as u64;
        let blocks = self.pages.max().unwrap_or(u64::MAX / page / 2);
        let used = self.pages.used();
        let (files, ifree) = match (&self.ispace, self.opts.max_inodes) {
            (Some(s), Some(n)) => {
                let free = s.max().unwrap_or(0).saturating_sub(s.used());
                (n, free / BOGO_INODE_SIZE)
            }
            _ => {
                let files = u64::MAX / 2;
                (files, files.saturating_sub(self.inodes.used()))
            }
        };
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

    fn get_xattr(&self, inode: &Inode, name: &[u8], _: Option<BorrowedFd<'_>>) -> Result<Vec<u8>> {
        let slot = self.xattrs.lock(inode.ino);
        let v = slot.get(&inode.ino).and_then(|x| x.get(name));
        v.map(|v| v.to_vec()).ok_or(Errno::ENODATA)
    }

    /// tmpfs's `shmem_xattr_handler_set`: the new attribute's space is charged first
    /// (`ENOSPC`), and the old one's (or, on a refusal, the new one's) given back after.
    fn set_xattr(
        &self,
        inode: &Inode,
        name: &[u8],
        value: &[u8],
        flags: XattrFlags,
        _: Option<BorrowedFd<'_>>,
    ) -> Result<()> {
        let space = xattr_space(name, value.len());
        if let Some(s) = &self.ispace {
            if !s.charge(space) {
                return Err(Errno::ENOSPC);
            }
        }
        let mut slot = self.xattrs.lock(inode.ino);
        let old = slot
            .get(&inode.ino)
            .and_then(|x| x.get(name))
            .map(|v| v.len());
        let r = match old {
            Some(_) if flags.contains(XattrFlags::CREATE) => Err(Errno::EEXIST),
            None if flags.contains(XattrFlags::REPLACE) => Err(Errno::ENODATA),
            _ => {
                inode.has_xattrs.store(true, Relaxed);
                let x = slot.entry(inode.ino).or_default();
                x.insert(name.into(), value.into());
                Ok(())
            }
        };
        drop(slot);
        if let Some(s) = &self.ispace {
            match (&r, old) {
                (Ok(()), Some(len)) => s.uncharge(xattr_space(name, len)),
                (Ok(()), None) => {}
                (Err(_), _) => s.uncharge(space),
            }
        }
        r
    }

    fn remove_xattr(&self, inode: &Inode, name: &[u8], _: Option<BorrowedFd<'_>>) -> Result<()> {
        let mut slot = self.xattrs.lock(inode.ino);
        let x = slot.get_mut(&inode.ino).ok_or(Errno::ENODATA)?;
        let v = x.remove(name).ok_or(Errno::ENODATA)?;
        if x.is_empty() {
            slot.remove(&inode.ino);
        }
        drop(slot);
        if let Some(s) = &self.ispace {
            s.uncharge(xattr_space(name, v.len()));
        }
        Ok(())
    }

    /// In descending byte order of the names, as tmpfs (whose tree of attributes is
    /// walked that way) lists them.
    fn list_xattr(&self, inode: &Inode, _: Option<BorrowedFd<'_>>) -> Result<Vec<u8>> {
        let slot = self.xattrs.lock(inode.ino);
        let mut list = Vec::new();
        for name in slot
            .get(&inode.ino)
            .into_iter()
            .flat_map(|x| x.keys().rev())
        {
            list.extend_from_slice(name);
            list.push(0);
        }
        Ok(list)
    }
}
