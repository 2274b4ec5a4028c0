//! Open files and the descriptor table.
//!
//! An [`OpenFile`] holds its inode (an `Arc`, and a hold on its contents: see
//! `Inode::hold`), its mount, and for directories its dentry (for `*at` lookups, `fchdir`
//! and `getdents`). A regular file's open does not pin its dentry: unlinking the name turns
//! the dentry negative while the file stays open, and the inode is evicted (its pages freed
//! and uncharged) on the last close (tmpfs semantics for unlinked-but-open files).
//! A removed directory can be reached after its eviction through what still refers to
//! its dentry (a working directory, a child's `..`): a description of it holds nothing,
//! as nothing is left to hold (see `NewFile::new`).
//!
//! The descriptor table ([`FdTable`]) is read without locks under an epoch guard; writers
//! serialize on its allocation mutex, and the lowest free number is handed out, as POSIX
//! requires, found in a two-level bitmap as Linux's `find_next_fd` finds it. A description stops counting as a user of its mount at its last close (so
//! `umount` right after `close` succeeds), and its memory goes after a grace period,
//! deferred in per-thread batches (see `retire`). The first descriptors also publish
//! their directory's key under a sequence counter ([`DirKeys`]), for `fstatat` answered
//! from the path cache with no epoch pin.

use crate::dentry::DRef;
use crate::errno::{Errno, Result};
use crate::inode::InodeArc;
use crate::mount::{Mount, MountRef};
use crate::reclaim::OwnerReclaim;
use crate::sync::{
    AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, LeafMutex, LeafMutexGuard, Mutex,
    SeqCount,
};
use crate::types::{Fd, OFlags};
use crate::SendPtr;
use crossbeam_epoch::{Atomic, Guard, Owned};
use std::ptr;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::Arc;

/// A counted pointer to a description: triomphe's `Arc`, which has no weak count, so that
/// the last drop (a batch's free, once per close) is one atomic read-modify-write, not
/// two as with std's (`scripts/icount.sh --atomics`).
pub(crate) type FileArc = triomphe::Arc<OpenFile>;

/// Drops a retired description's count. Most often it is the last: then an acquire load
/// proves it and the description is freed without the decrement's read-modify-write.
fn release(f: FileArc) {
    // Either way the count goes: the description itself (`Ok`) or a decrement (`Err`).
    drop(FileArc::try_unwrap(f));
}

/// A mount and a dentry in it, held with references: a process's root or working
/// directory. It counts as one user of its mount from [`Loc::new`] until [`Loc::release`]
/// or its drop, whichever comes first: a place replaced in its published slot gives the
/// count back at once, while its memory waits a grace period for lockless readers (see
/// `mount`, "A published place").
pub(crate) struct Loc {
    pub mnt: Arc<Mount>,
    pub d: DRef,
    counted: AtomicBool,
}

impl Loc {
    pub fn new(mnt: Arc<Mount>, d: DRef) -> Loc {
        mnt.add_users(1);
        Loc {
            mnt,
            d,
            counted: AtomicBool::new(true),
        }
    }

    /// Gives the count back now: the caller has just replaced this place in its published
    /// slot (`chdir`).
    pub fn release(&self) {
        if self.counted.swap(false, AcqRel) {
            self.mnt.release_published();
        }
    }
}

impl Clone for Loc {
    fn clone(&self) -> Loc {
        Loc::new(self.mnt.clone(), self.d.clone())
    }
}

impl Drop for Loc {
    fn drop(&mut self) {
        if self.counted.load(Relaxed) {
            self.mnt.add_users(-1);
        }
    }
}

/// An open file description.
pub struct OpenFile {
    pub(crate) mnt: MountRef,
    /// The dentry, for directories (and `O_PATH` descriptors of directories).
    pub(crate) dir: Option<DRef>,
    pub(crate) inode: InodeArc,
    pub(crate) flags: OFlags,
    /// File position, or the readdir cookie for directories.
    pub(crate) pos: Mutex<u64>,
    /// Descriptor-table slots (in any process) that refer to this description.
    fd_refs: AtomicU32,
    /// Whether it was ever in a descriptor table.
    installed: AtomicBool,
    /// Whether it holds its inode's contents: always, except for a description of a removed
    /// directory that was evicted before the open (see [`NewFile::new`]). Set at creation.
    pub(crate) held: bool,
    /// The storage's descriptor of a stored file's data (`Contents::Stored`), or -1: opened
    /// when the description is (`FileSystem::open_data`; never for `O_PATH`), installed by
    /// CAS, and closed with the description. A raw number, not a `OnceLock<OwnedFd>`: it fits in the padding after
    /// `fd_refs`, where 8 more bytes would move every description to a larger allocation.
    data: std::sync::atomic::AtomicI32,
}

impl NewFile {
    /// A description of `inode`, holding its contents (see `Inode::hold`); `None` if the
    /// inode was evicted since the caller found it (the caller walks again).
    ///
    /// A removed directory is the exception: what still refers to its dentry (a working
    /// directory, a child's `..`, a descriptor) can reach it after its last hold went, and
    /// Linux opens it, since its dentry keeps its inode. Evicted, it has no contents to hold
    /// (it was empty and is dead: no listing, no new names), so the description holds none.
    /// Walking again would find the same dentry forever. One difference from Linux stays:
    /// its extended attributes answer `ENOENT` (`SuperBlock::xattr_op` takes a hold, so
    /// that nothing is set on an inode whose eviction has run), where Linux sets them.
    #[inline]
    pub(crate) fn new(
        mnt: &Arc<Mount>,
        dir: Option<DRef>,
        inode: InodeArc,
        flags: OFlags,
    ) -> Option<NewFile> {
        if inode.hold() {
            return Some(Self::with_hold(mnt, dir, inode, flags));
        }
        Self::of_removed_dir(mnt, dir, inode, flags)
    }

    /// [`NewFile::new`]'s exception: a description that holds nothing, of a removed
    /// directory (`dir`: the caller holds its dentry). Removal is final: `dead` stays true.
    #[cold]
    fn of_removed_dir(
        mnt: &Arc<Mount>,
        dir: Option<DRef>,
        inode: InodeArc,
        flags: OFlags,
    ) -> Option<NewFile> {
        let removed = dir.is_some() && inode.dir_is_dead();
        removed.then(|| Self::build(mnt, dir, inode, flags, false))
    }

    /// A description of `inode` that takes over a hold the caller has (a new `O_TMPFILE`
    /// inode's creator's).
    pub(crate) fn with_hold(
        mnt: &Arc<Mount>,
        dir: Option<DRef>,
        inode: InodeArc,
        flags: OFlags,
    ) -> NewFile {
        Self::build(mnt, dir, inode, flags, true)
    }

    #[inline]
    fn build(
        mnt: &Arc<Mount>,
        dir: Option<DRef>,
        inode: InodeArc,
        flags: OFlags,
        held: bool,
    ) -> NewFile {
        mnt.add_users(1);
        let mnt = MountRef::new(mnt);
        // Written field by field into its allocation: a description built on the stack
        // and then moved in was read back in 16-byte loads over narrower stores, each a
        // failed store-to-load forward (about a third of this function's samples in W7).
        let mut a = triomphe::UniqueArc::<OpenFile>::new_uninit();
        let p = a.as_mut_ptr().cast::<OpenFile>();
        // SAFETY: `p` points to the new allocation's uninitialized `OpenFile`, which this
        // thread alone can reach; each field is written once, through a raw pointer.
        unsafe {
            ptr::addr_of_mut!((*p).mnt).write(mnt);
            ptr::addr_of_mut!((*p).dir).write(dir);
            ptr::addr_of_mut!((*p).inode).write(inode);
            ptr::addr_of_mut!((*p).flags).write(flags);
            ptr::addr_of_mut!((*p).pos).write(Mutex::new(0));
            ptr::addr_of_mut!((*p).fd_refs).write(AtomicU32::new(0));
            ptr::addr_of_mut!((*p).installed).write(AtomicBool::new(false));
            ptr::addr_of_mut!((*p).held).write(held);
            ptr::addr_of_mut!((*p).data).write(std::sync::atomic::AtomicI32::new(-1));
        }
        // SAFETY: every field of the `OpenFile` was written above.
        NewFile(unsafe { triomphe::UniqueArc::assume_init(a) }.shareable())
    }
}

impl OpenFile {
    /// The owner of this description's `flock` and OFD locks.
    pub(crate) fn lock_owner(&self) -> crate::filelock::Owner {
        crate::filelock::Owner::Desc(self as *const OpenFile as usize)
    }

    /// Whether a descriptor or handle still refers to this description (the lock half of
    /// the close/lock race: see `filelock`, "Release").
    pub(crate) fn is_referenced(&self) -> bool {
        // A read-modify-write, not a load: see `filelock`, "Release".
        self.fd_refs.fetch_add(0, AcqRel) > 0
    }

    /// The start of a walk under this description, as the path cache keys it: its
    /// directory's dentry address and its mount's id; `None` if it is not a directory's.
    #[inline]
    pub(crate) fn dir_key(&self) -> Option<DirKey> {
        self.dir
            .as_ref()
            .map(|d| (d.ptr().as_ptr() as usize, self.mnt.id))
    }

    /// Whether this is an `O_PATH` descriptor.
    pub(crate) fn is_path(&self) -> bool {
        self.flags.contains(OFlags::PATH)
    }

    /// A slot now refers to it. A description counts as one user of its mount, and holds
    /// its inode's contents, from its creation until its last slot goes (or, if never
    /// installed, until it is dropped); each 0 <-> 1 transition of `fd_refs` after the
    /// first install moves both, so they are right whatever order racing closes and
    /// `dup2`s take. The caller holds a [`FileRef`] (or created the description), so the
    /// inode cannot have been evicted.
    fn slot_added(&self) {
        if self.fd_refs.fetch_add(1, AcqRel) == 0 && self.installed.swap(true, AcqRel) {
            self.mnt.add_users(1);
            let held = self.hold_inode();
            debug_assert!(held, "re-installed a description of an evicted inode");
        }
    }

    /// A slot no longer refers to it: at the last one it stops counting as a user of the
    /// mount and gives its inode hold back at once (so `umount` right after `close` works,
    /// and an unlinked file's space comes back at its last close, as on tmpfs), though
    /// lockless readers may hold the memory for a grace period.
    fn slot_removed(&self) {
        // The read-modify-write, then the flag: the close half of the close/lock race (see
        // `filelock`, "Release").
        if self.fd_refs.fetch_sub(1, AcqRel) == 1 {
            if self.inode.has_locks.load(Acquire) {
                crate::filelock::global().drop_owner(&self.inode, self.lock_owner());
            }
            self.mnt.add_users(-1);
            self.release_inode();
        }
    }

    /// Takes another hold on the inode's contents for this description (for a call, or a
    /// re-install); `false` if the inode was evicted. A description that holds none (see
    /// [`NewFile::new`]) needs none.
    #[inline]
    fn hold_inode(&self) -> bool {
        !self.held || self.inode.hold()
    }

    /// Gives back a hold [`OpenFile::hold_inode`] took.
    #[inline]
    fn release_inode(&self) {
        if self.held {
            self.mnt.fs.release(&self.inode);
        }
    }
}

impl OpenFile {
    /// The stored file's data descriptor, opened by `open` on the first call (a racing
    /// first call's descriptor is closed, and the winner's serves both).
    pub(crate) fn data_fd(
        &self,
        open: impl FnOnce() -> Result<std::os::fd::OwnedFd>,
    ) -> Result<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::{BorrowedFd, IntoRawFd};
        let mut fd = self.data.load(Acquire);
        if fd < 0 {
            let new = open()?.into_raw_fd();
            fd = match self.data.compare_exchange(-1, new, AcqRel, Acquire) {
                Ok(_) => new,
                Err(won) => {
                    // SAFETY: `new` came from `into_raw_fd` above and was never shared.
                    drop(unsafe {
                        <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(new)
                    });
                    won
                }
            };
        }
        // SAFETY: `fd` is this description's own descriptor, installed once and closed only
        // in `drop`, which cannot run while `&self` is borrowed.
        Ok(unsafe { BorrowedFd::borrow_raw(fd) })
    }

    /// The stored file's data descriptor, opened for this description's access mode if it
    /// was not yet (see [`OpenFile::data_fd`]).
    pub(crate) fn stored_fd(&self) -> Result<std::os::fd::BorrowedFd<'_>> {
        let write = self.flags.0 & OFlags::ACCMODE.0 != OFlags::RDONLY.0;
        self.data_fd(|| self.mnt.fs.open_data(&self.inode, write))
    }

    /// The data descriptor, if this description has one (a stored file's, opened).
    pub(crate) fn data_fd_if_open(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        let fd = self.data.load(Acquire);
        // SAFETY: as in `data_fd`: installed once, closed only in `drop`.
        (fd >= 0).then(|| unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) })
    }
}

/// A description just made, which nothing else refers to yet: its `Arc` has no other
/// count, and only its constructors ([`NewFile::new`], [`NewFile::with_hold`]) make one. An
/// open builds the description in its allocation once and passes this pointer on (not the
/// description by value through every layer), and its first referrer, a slot
/// ([`FdTable::insert_new`]) or a [`Handle`] ([`Handle::new_open`]), is recorded with plain
/// stores: what [`OpenFile::slot_added`] does at a first install (creation already counted
/// the mount's user and took the inode's hold), without its read-modify-writes, since no
/// other thread can see the description until the caller publishes it (a slot's release
/// store).
/// Dropped without an install, the description gives back what its creation took.
pub(crate) struct NewFile(FileArc);

impl NewFile {
    /// The description, with its first referrer recorded (see above).
    fn into_installed(self) -> FileArc {
        let f = self.0;
        debug_assert!(f.fd_refs.load(Relaxed) == 0 && !f.installed.load(Relaxed));
        f.fd_refs.store(1, Relaxed);
        f.installed.store(true, Relaxed);
        f
    }
}

impl std::ops::Deref for NewFile {
    type Target = OpenFile;
    fn deref(&self) -> &OpenFile {
        &self.0
    }
}

impl Drop for OpenFile {
    fn drop(&mut self) {
        let fd = *self.data.get_mut();
        if fd >= 0 {
            // SAFETY: installed by `data_fd` from an `OwnedFd`, and owned by this description.
            drop(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) });
        }
        if !self.installed.load(Acquire) {
            self.mnt.add_users(-1);
            self.release_inode();
        }
    }
}

/// A description in use by a call: a count on it, and a hold on its inode's contents, so
/// that a close on another thread cannot evict the pages under the call (Linux holds a
/// file reference for the same reason).
pub struct FileRef(FileArc);

impl FileRef {
    /// The description itself (to keep or to install elsewhere).
    pub(crate) fn arc(&self) -> &FileArc {
        &self.0
    }
}

impl std::ops::Deref for FileRef {
    type Target = OpenFile;
    #[inline]
    fn deref(&self) -> &OpenFile {
        &self.0
    }
}

impl Drop for FileRef {
    fn drop(&mut self) {
        self.0.release_inode();
    }
}

/// An open file description held by its owner instead of by a descriptor table: what a
/// frontend (the FUSE server keeps one per node the kernel knows and per open file) or a
/// Rust caller holds when a number in a table is the wrong tool. It counts as one more
/// reference to the description, like a descriptor: the description's mount stays in use
/// and its inode's contents stay held (an unlinked file's data included) until the last
/// descriptor or handle goes. Dropping it closes it; cloning it is `dup`. It needs no
/// number, so it takes no descriptor slot and no table's limit applies to it.
///
/// Made by [`Process::openat_handle`](crate::Process::openat_handle) and
/// [`Process::reopen_handle`](crate::Process::reopen_handle); every call that takes a
/// descriptor takes `&Handle` too (see [`Desc`]).
pub struct Handle(FileArc);

impl Handle {
    pub(crate) fn new(f: FileArc) -> Handle {
        f.slot_added();
        Handle(f)
    }

    /// A handle on a new description (a new open's), which nothing else refers to yet:
    /// its first referrer is recorded with plain stores ([`NewFile::into_installed`]).
    pub(crate) fn new_open(f: NewFile) -> Handle {
        Handle(f.into_installed())
    }

    /// Whether both handles refer to one object (one inode). Unlike comparing `st_dev`
    /// and `st_ino`, this tells apart an object that is gone from a new one its file
    /// system gave the same number (hostfs reuses the host's inode numbers).
    pub fn same_object(&self, other: &Handle) -> bool {
        InodeArc::ptr_eq(&self.0.inode, &other.0.inode)
    }
}

impl Clone for Handle {
    fn clone(&self) -> Handle {
        Handle::new(self.0.clone())
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // The borrow checker keeps every `&OpenFile` taken through this handle inside its
        // life, so the description needs no grace period here (a table's slot does).
        self.0.slot_removed();
    }
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle")
            .field("ino", &self.0.inode.ino)
            .field("flags", &self.0.flags)
            .finish()
    }
}

mod sealed {
    /// Only the engine's own kinds of descriptor implement [`super::Desc`].
    pub trait Sealed {}
    impl Sealed for crate::types::Fd {}
    impl Sealed for &super::Handle {}
}

/// What names an open description in a call: a descriptor number ([`Fd`], looked up in
/// the calling process's table; [`Fd::CWD`] for the working directory where a call
/// allows it), or a [`Handle`] the caller holds (`&handle`). Sealed.
pub trait Desc: Copy + sealed::Sealed {
    #[doc(hidden)]
    fn is_cwd(self) -> bool;
    /// The description, borrowed for the guard's life, with no write.
    #[doc(hidden)]
    fn lookup<'g>(self, t: &FdTable, g: &'g Guard) -> Result<&'g OpenFile>
    where
        Self: 'g;
    /// The description, held for a call (see [`FileRef`]).
    #[doc(hidden)]
    fn hold(self, t: &FdTable) -> Result<FileRef>;
    /// The directory key of the description ([`OpenFile::dir_key`]), taking no reference;
    /// `None` if there is no description or it is not a directory's. The key was the
    /// description's at some moment during the call (see [`DirKeys`]).
    #[doc(hidden)]
    fn dir_key(self, t: &FdTable) -> Option<DirKey>;
}

impl Desc for Fd {
    #[inline]
    fn is_cwd(self) -> bool {
        self == Fd::CWD
    }
    #[inline]
    fn lookup<'g>(self, t: &FdTable, g: &'g Guard) -> Result<&'g OpenFile>
    where
        Self: 'g,
    {
        t.get_ref(self, g)
    }
    #[inline]
    fn hold(self, t: &FdTable) -> Result<FileRef> {
        t.get(self)
    }
    #[inline(always)]
    fn dir_key(self, t: &FdTable) -> Option<DirKey> {
        t.dir_key(self)
    }
}

impl Desc for &Handle {
    #[inline]
    fn is_cwd(self) -> bool {
        false
    }
    #[inline]
    fn lookup<'g>(self, _: &FdTable, _: &'g Guard) -> Result<&'g OpenFile>
    where
        Self: 'g,
    {
        Ok(&self.0)
    }
    #[inline]
    fn hold(self, _: &FdTable) -> Result<FileRef> {
        // The handle's own reference holds the contents, so this hold succeeds.
        if !self.0.hold_inode() {
            return Err(Errno::EBADF);
        }
        Ok(FileRef(self.0.clone()))
    }
    #[inline]
    fn dir_key(self, _: &FdTable) -> Option<DirKey> {
        // The handle is borrowed: its description, and so the directory, live meanwhile.
        self.0.dir_key()
    }
}

/// Most descriptors one process may hold (like `RLIMIT_NOFILE`).
pub const MAX_FDS: usize = 1 << 20;

struct Slots(Box<[AtomicPtr<OpenFile>]>);

impl Slots {
    fn with_len(n: usize) -> Slots {
        Slots((0..n).map(|_| AtomicPtr::new(ptr::null_mut())).collect())
    }
}

/// Which descriptor numbers are taken, for finding the lowest free one in O(1) amortised
/// time: a bit per number (`open`), and a bit per word of `open` that is full (`full`),
/// as Linux's `open_fds` and `full_fds_bits`. A search skips 64 numbers per bit of a
/// `full` word, so it reads at most `n / 4096` words of `full` and one of `open`; `low`
/// (no number below it is free) makes the common case a single probe.
#[derive(Default)]
struct FdBits {
    /// No number below this is free.
    low: usize,
    open: Vec<u64>,
    full: Vec<u64>,
}

impl FdBits {
    #[cfg(test)]
    fn is_set(&self, i: usize) -> bool {
        self.open
            .get(i / 64)
            .is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    /// The summary is exact: one bit per word of `open`, set exactly when that word is
    /// full, and no longer than it needs to be.
    #[cfg(test)]
    fn assert_summary(&self) {
        assert_eq!(
            self.full.len(),
            self.open.len().div_ceil(64),
            "summary length"
        );
        for (w, word) in self.open.iter().enumerate() {
            let marked = self.full[w / 64] & (1 << (w % 64)) != 0;
            assert_eq!(marked, *word == u64::MAX, "summary bit of word {w}");
        }
        for (f, bits) in self.full.iter().enumerate() {
            let words = self.open.len().saturating_sub(f * 64);
            if words < 64 {
                assert_eq!(bits >> words, 0, "summary bits past the end");
            }
        }
    }

    fn set(&mut self, i: usize) {
        let w = i / 64;
        if w >= self.open.len() {
            self.open.resize(w + 1, 0);
            self.full.resize(w / 64 + 1, 0);
        }
        self.open[w] |= 1 << (i % 64);
        if self.open[w] == u64::MAX {
            self.full[w / 64] |= 1 << (w % 64);
        }
        if i == self.low {
            self.low = i + 1;
        }
    }

    fn clear(&mut self, i: usize) {
        let w = i / 64;
        if let Some(word) = self.open.get_mut(w) {
            *word &= !(1 << (i % 64));
            self.full[w / 64] &= !(1 << (w % 64));
        }
        self.low = self.low.min(i);
    }

    /// The lowest number not taken (it may be past the bitmap's end).
    fn lowest_free(&self) -> usize {
        let start = self.low;
        // Numbers below `start` in its own word count as taken.
        let below = (1u64 << (start % 64)) - 1;
        let mut w = start / 64;
        while let Some(nf) = self.next_not_full(w) {
            let word = self.open[nf] | if nf == start / 64 { below } else { 0 };
            if word != u64::MAX {
                return nf * 64 + word.trailing_ones() as usize;
            }
            w = nf + 1;
        }
        (self.open.len() * 64).max(start)
    }

    /// The first word of `open` at or after `w` that is not full.
    fn next_not_full(&self, mut w: usize) -> Option<usize> {
        while w < self.open.len() {
            // Words below `w` in its `full` word count as full.
            let f = self.full[w / 64] | ((1u64 << (w % 64)) - 1);
            if f != u64::MAX {
                let c = w / 64 * 64 + f.trailing_ones() as usize;
                return (c < self.open.len()).then_some(c);
            }
            w = (w / 64 + 1) * 64;
        }
        None
    }
}

/// A directory's dentry address and its mount's id: the start of a walk under a
/// directory descriptor, as the path cache keys it (`pathcache::Key`). Compared, never
/// dereferenced.
pub(crate) type DirKey = (usize, u64);

/// Descriptors below this number publish their directory's key in [`DirKeys`].
const DIR_KEYS: usize = if cfg!(loom) { 2 } else { 32 };

/// The directory keys of the descriptions in the first [`DIR_KEYS`] slots, for a reader
/// with no guard: `fstatat(dirfd, ...)` answered from the path cache
/// (`Process::cache_key`), which needs only the key of `dirfd`'s directory, and used
/// to pin the epoch and read the slot for it (a third of the call).
///
/// # Mechanism
/// A slot's key is 0 unless the slot holds a directory's description. A writer (who holds
/// the table's `alloc`) that puts a directory's description in such a slot, or takes one
/// out, changes the slot and its key inside one write section of `seq`; changes between
/// other descriptions (a regular file's open and close, W7's) leave the key 0 and take no
/// write section. A reader reads the key between `seq`'s begin and retry; a key read so
/// was the slot's key at a moment when no writer was changing either, so the slot then
/// held a description of that directory, which kept the dentry alive at that address.
/// The reader's path cache is its own thread's, unchanged during the call, and each of its
/// entries holds its start directory: an entry under that address is an entry of that
/// same directory. (So is the working directory's address read from `KeyIds`.)
///
/// What protects each field outside its lock: `d` and `mnt` are written only under
/// `alloc`, in a write section of `seq`, and read under `seq`.
struct DirKeys {
    seq: SeqCount,
    d: [AtomicUsize; DIR_KEYS],
    mnt: [AtomicU64; DIR_KEYS],
    /// What a loom model's twin breaks: the key written with no write section.
    #[cfg(loom)]
    broken_no_section: bool,
}

impl Default for DirKeys {
    fn default() -> Self {
        DirKeys {
            seq: SeqCount::new(),
            d: std::array::from_fn(|_| AtomicUsize::new(0)),
            mnt: std::array::from_fn(|_| AtomicU64::new(0)),
            #[cfg(loom)]
            broken_no_section: false,
        }
    }
}

impl DirKeys {
    /// Runs `write`, which changes slot `i` to a description whose key is `new`, and
    /// publishes the key with it: both in one write section when the slot's key changes
    /// (see above). The caller holds `alloc`.
    #[inline]
    fn update<R>(&self, i: usize, new: Option<DirKey>, write: impl FnOnce() -> R) -> R {
        if i >= DIR_KEYS || (new.is_none() && self.d[i].load(Relaxed) == 0) {
            return write();
        }
        let (d, mnt) = new.unwrap_or((0, 0));
        #[cfg(not(loom))]
        let section = true;
        #[cfg(loom)]
        let section = !self.broken_no_section;
        if section {
            self.seq.write_begin();
        }
        let r = write();
        self.d[i].store(d, Relaxed);
        self.mnt[i].store(mnt, Relaxed);
        if section {
            self.seq.write_end();
        }
        r
    }

    /// Slot `i`'s directory key as published: `Some(None)` if the slot holds no
    /// directory's description; `None` if it cannot be read with no guard (a slot past
    /// [`DIR_KEYS`], or a writer changing the keys).
    #[inline(always)]
    fn read(&self, i: usize) -> Option<Option<DirKey>> {
        if i >= DIR_KEYS {
            return None;
        }
        let s = self.seq.read_begin()?;
        let (d, mnt) = (self.d[i].load(Relaxed), self.mnt[i].load(Relaxed));
        (!self.seq.read_retry(s)).then_some((d != 0).then_some((d, mnt)))
    }
}

/// A descriptor table, read without locks (like Linux's RCU fdtable).
///
/// # Mechanism
/// `slots` is an epoch-protected array of `FileArc` pointers (each slot owns one
/// strong count). A lookup loads the array and the slot under the caller's guard and
/// borrows the description for the guard's life, writing nothing. Writers (open, close,
/// dup) hold `alloc`; a slot is cleared first and its count dropped after a grace period,
/// so a lockless reader never sees a freed description. The array grows by copying into
/// a new one and retiring the old after a grace period.
///
/// # Reclamation
/// A closed description's memory waits for a grace period in batches of [`BATCH`], kept
/// under `alloc` (which the close holds anyway), and is freed by this table's own closes
/// ([`OwnerReclaim`]): the collector gets one two-word marker per batch. A
/// `defer` per close was once the costliest step of a close, and freeing a batch in the
/// deferred call does not scale either: whichever thread collects a bag runs what is in
/// it, touching other threads' descriptions and freeing to their heaps (with two threads,
/// about 9% of W7's time). A batch's grace period starts when it is retired, after every
/// pointer in it left its slot, so a reader that loaded one holds a guard pinned before
/// that. Nothing a close must do waits for the batch: the mount's user count and the
/// inode's hold are given back at the close ([`OpenFile::slot_removed`]); what waits is
/// the memory and the references it holds (inode, dentry, mount): at most `BATCH - 1`
/// descriptions until the batch fills, then until the batch's marker has run and a later
/// batch of this table fills, or the table is dropped with its process (then the
/// collector frees what is left). A description with a host descriptor (hostfs) is
/// deferred alone, so that the descriptor closes a grace period after its last close.
///
/// What protects each field outside its lock: `slots` (pointer and entries) is written
/// only under `alloc` and read under an epoch guard, or under `alloc` without one (only a
/// holder of `alloc` replaces the array). `alloc`'s bitmap has a number's bit
/// set exactly while its slot is non-null. `dir_keys` is written under `alloc`, in the
/// same write section as the slot it describes, and read under its sequence counter
/// (see [`DirKeys`]).
///
/// Lock order: `alloc` is taken with nothing of the table held; `dir_keys`' write section
/// opens and closes inside it, and nothing is locked inside the section.
pub struct FdTable {
    /// This table's number: the owner of its process's record locks (`filelock`), never
    /// reused.
    id: u64,
    slots: Atomic<Slots>,
    /// Which numbers are taken, and the closed descriptions waiting for their batch to be
    /// deferred; serializes writers.
    alloc: LeafMutex<Alloc>,
    /// The directory keys of the first slots, for readers with no guard.
    dir_keys: DirKeys,
    /// What a loom model's twin breaks.
    #[cfg(loom)]
    broken: Broken,
}

/// What a loom model's twin breaks.
#[cfg(loom)]
#[derive(Clone, Copy, Default)]
struct Broken {
    /// An install counts the description as its mount's user (and holds its inode) only
    /// at its first install, not at each 0 -> 1 of its slots: a `dup2` of a description
    /// whose last slot a racing close just cleared then leaves it uncounted.
    count_first_install_only: bool,
}

/// What [`FdTable::alloc`] protects.
#[derive(Default)]
struct Alloc {
    bits: FdBits,
    /// Descriptions whose last slot in this table went: the batch being filled (see
    /// "Reclamation" in [`FdTable`]'s docs).
    retired: Vec<SendPtr<OpenFile>>,
    /// Full batches waiting for their grace period.
    reclaim: OwnerReclaim<SendPtr<OpenFile>>,
}

/// What a close frees once it has let go of `alloc` (see [`FdTable::retire_locked`]).
#[derive(Default)]
struct Freed {
    /// Batches whose grace period has ended: freed now.
    now: Vec<Vec<SendPtr<OpenFile>>>,
    /// A description with a host descriptor: deferred alone.
    alone: Option<SendPtr<OpenFile>>,
}

/// Closed descriptions per deferred call (one under loom, whose models check each
/// description's own grace period).
const BATCH: usize = if cfg!(loom) { 1 } else { 32 };

impl Default for FdTable {
    fn default() -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        FdTable {
            id: NEXT.fetch_add(1, Relaxed),
            slots: Atomic::new(Slots::with_len(16)),
            alloc: LeafMutex::new(Alloc::default()),
            dir_keys: DirKeys::default(),
            #[cfg(loom)]
            broken: Broken::default(),
        }
    }
}

impl FdTable {
    fn slots<'g>(&self, g: &'g Guard) -> &'g Slots {
        // SAFETY: never null; a replaced array is freed after a grace period.
        unsafe { self.slots.load(Acquire, g).deref() }
    }

    /// The description behind `fd`, borrowed for the guard's life, with no write.
    #[inline]
    pub fn get_ref<'g>(&self, fd: Fd, g: &'g Guard) -> Result<&'g OpenFile> {
        let p = self.slot_ptr(fd, g);
        // SAFETY: a slot's count is dropped only after a grace period, and we hold `g`.
        unsafe { p.as_ref() }.ok_or(Errno::EBADF)
    }

    /// `fd`'s directory key ([`Desc::dir_key`]): as published in [`DirKeys`], with no
    /// guard, where it can be read so; otherwise from the slot, under a guard.
    #[inline(always)]
    pub(crate) fn dir_key(&self, fd: Fd) -> Option<DirKey> {
        let i = usize::try_from(fd.0).ok()?;
        match self.dir_keys.read(i) {
            Some(key) => key,
            None => self.dir_key_pinned(fd),
        }
    }

    #[inline(never)]
    fn dir_key_pinned(&self, fd: Fd) -> Option<DirKey> {
        let g = crossbeam_epoch::pin();
        self.get_ref(fd, &g).ok()?.dir_key()
    }

    /// The pointer in `fd`'s slot (null if none), as `Arc::into_raw` made it: a new `Arc`
    /// is made only from it, never from a `&OpenFile` (under Tree Borrows, the last `Arc`
    /// dropped would deallocate through that shared reference's tag).
    fn slot_ptr(&self, fd: Fd, g: &Guard) -> *mut OpenFile {
        usize::try_from(fd.0)
            .ok()
            .and_then(|i| self.slots(g).0.get(i))
            .map_or(ptr::null_mut(), |s| s.load(Acquire))
    }

    /// This table's number (see `id`).
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Whether `fd` still refers to `f` (the lock half of the close/lock race: see
    /// `filelock`, "Release"): a compare-and-swap of the slot with itself, so that it is
    /// ordered with a close's swap.
    pub(crate) fn still_maps(&self, fd: Fd, f: &OpenFile) -> bool {
        let g = crossbeam_epoch::pin();
        let Ok(i) = usize::try_from(fd.0) else {
            return false;
        };
        self.slots(&g).0.get(i).is_some_and(|s| {
            // The swap writes back the slot's own pointer, never one made from `f`: a close
            // frees the description through whatever pointer the slot holds, which must
            // keep the allocation's provenance (see `slot_ptr`).
            let cur = s.load(Acquire);
            std::ptr::eq(cur, f) && s.compare_exchange(cur, cur, AcqRel, Acquire).is_ok()
        })
    }

    /// The description behind `fd`, held for a call (see [`FileRef`]). `EBADF` if it was
    /// closed and its inode evicted meanwhile.
    pub fn get(&self, fd: Fd) -> Result<FileRef> {
        let g = crossbeam_epoch::pin();
        let p = self.slot_ptr(fd, &g);
        // SAFETY: a slot's count is dropped only after a grace period, and we hold `g`.
        let f = unsafe { p.as_ref() }.ok_or(Errno::EBADF)?;
        if !f.hold_inode() {
            return Err(Errno::EBADF);
        }
        // SAFETY: the slot's count keeps the count above zero while `g` is held, and `p`
        // is the slot's own pointer (see `slot_ptr`).
        Ok(FileRef(unsafe { crate::arc_counted(p) }))
    }

    /// The array, for a holder of `alloc`: only a holder of `alloc` replaces it, and a
    /// replaced array is freed a grace period later, so it is live while `alloc` is held,
    /// without a guard.
    fn slots_locked<'a>(&'a self, _alloc: &'a LeafMutexGuard<'_, Alloc>) -> &'a Slots {
        // SAFETY: see above; the borrow of the guard keeps `alloc` held for `'a`.
        unsafe {
            self.slots
                .load(Acquire, crossbeam_epoch::unprotected())
                .deref()
        }
    }

    /// Puts `f` in slot `i`, growing the array if needed; returns what was there. The
    /// caller holds `alloc` (`a`); a pin is taken only to retire the old array when it
    /// grows, so an open that fits pays none.
    fn put_locked(&self, a: &LeafMutexGuard<'_, Alloc>, i: usize, f: FileArc) -> *mut OpenFile {
        self.fit_locked(a, i);
        let key = f.dir_key();
        #[cfg(loom)]
        if self.broken.count_first_install_only {
            f.fd_refs.fetch_add(1, AcqRel);
            f.installed
                .store(true, std::sync::atomic::Ordering::Release);
            return self.dir_keys.update(i, key, || {
                self.slots_locked(a).0[i].swap(FileArc::into_raw(f) as *mut OpenFile, AcqRel)
            });
        }
        f.slot_added();
        self.dir_keys.update(i, key, || {
            self.slots_locked(a).0[i].swap(FileArc::into_raw(f) as *mut OpenFile, AcqRel)
        })
    }

    /// Installs a new description (a new open's) at the lowest free descriptor. As
    /// [`FdTable::insert`], but its first slot is recorded with plain stores (see
    /// [`NewFile`]), and the slot is stored, not swapped: it is empty (its bit is clear,
    /// and only a holder of `alloc` fills a slot).
    pub(crate) fn insert_new(&self, f: NewFile) -> Result<Fd> {
        let mut a = self.alloc.lock();
        let i = a.bits.lowest_free();
        if i >= MAX_FDS {
            // Never installed: its drop gives back what its creation took.
            return Err(Errno::EMFILE);
        }
        self.fit_locked(&a, i);
        let slot = &self.slots_locked(&a).0[i];
        debug_assert!(slot.load(Relaxed).is_null());
        self.dir_keys.update(i, f.dir_key(), || {
            slot.store(
                FileArc::into_raw(f.into_installed()) as *mut OpenFile,
                Release,
            )
        });
        a.bits.set(i);
        Ok(Fd(i as i32))
    }

    /// Makes the array long enough for slot `i` (see [`FdTable::put_locked`]).
    fn fit_locked(&self, a: &LeafMutexGuard<'_, Alloc>, i: usize) {
        let cur = self.slots_locked(a);
        if i >= cur.0.len() {
            let n = (i + 1).next_power_of_two().max(cur.0.len() * 2);
            let new = Slots::with_len(n);
            for (a, b) in cur.0.iter().zip(new.0.iter()) {
                b.store(a.load(Relaxed), Relaxed);
            }
            let g = crossbeam_epoch::pin();
            let old = self.slots.swap(Owned::new(new), AcqRel, &g);
            // SAFETY: unreachable now; readers hold guards. Dropping `Slots` frees the
            // array only; its pointers moved to the new one.
            unsafe { g.defer_destroy(old) };
        }
    }

    /// Takes the description `p` out of service after its slot was cleared, with
    /// `alloc` held and `g` pinned since before the slot was cleared: its slot's count
    /// joins the table's batch, and a full batch starts its grace period (see
    /// "Reclamation" above). Returns what the caller must free once it lets go of
    /// `alloc`: batches whose grace period has ended, and a description with a host
    /// descriptor, which goes alone so that the host descriptor closes a grace period
    /// after its last close, not whenever a batch fills.
    fn retire_locked(a: &mut Alloc, p: *mut OpenFile, g: &Guard) -> Freed {
        if p.is_null() {
            return Freed::default();
        }
        // SAFETY: `p` came from a slot, which owned one strong count.
        if unsafe { &*p }.data.load(Relaxed) >= 0 {
            return Freed {
                now: Vec::new(),
                alone: Some(SendPtr(p)),
            };
        }
        a.retired.push(SendPtr(p));
        if a.retired.len() < BATCH {
            return Freed::default();
        }
        let batch = std::mem::replace(&mut a.retired, Vec::with_capacity(BATCH));
        Freed {
            now: a.reclaim.retire(batch, g),
            alone: None,
        }
    }

    /// Hands `v` to the collector: each pointer owns a strong count, and left its slot
    /// before `g` was pinned or while it was.
    fn defer_drop(v: Vec<SendPtr<OpenFile>>, g: &Guard) {
        if v.is_empty() {
            return;
        }
        // SAFETY: every pointer in `v` left its slot before now and owns a strong count;
        // readers that loaded one hold guards pinned before this call.
        unsafe {
            g.defer_unchecked(move || {
                for p in v {
                    release(FileArc::from_raw(p.into_inner()));
                }
            })
        };
    }

    /// The rest of a close, once `alloc` is let go: the last slot of `p` releases the
    /// mount and the inode's hold at once ([`OpenFile::slot_removed`]); then what
    /// [`FdTable::retire_locked`] gave back is freed. The caller is pinned by `g` since
    /// before it cleared the slot, so `p` is not freed meanwhile: the batch that holds
    /// it cannot expire while `g` is held.
    fn put_slot(&self, p: *mut OpenFile, freed: Freed, g: &Guard) {
        if !p.is_null() {
            // SAFETY: see above: a retired description lives until `g` is unpinned.
            let f = unsafe { &*p };
            // POSIX: a close drops the process's record locks on the file. After the
            // slot's swap: the close half of the close/lock race (`filelock`, "Release").
            if f.inode.has_locks.load(Acquire) {
                crate::filelock::global()
                    .drop_owner(&f.inode, crate::filelock::Owner::Process(self.id));
            }
            f.slot_removed();
        }
        if !freed.now.is_empty() {
            Self::free_now(freed.now);
        }
        if let Some(p) = freed.alone {
            Self::defer_drop(vec![p], g);
        }
    }

    /// Frees batches whose grace period has ended (once per [`BATCH`] closes): out of
    /// line, so that the other closes pay only the test for them.
    #[inline(never)]
    fn free_now(now: Vec<Vec<SendPtr<OpenFile>>>) {
        for p in now.into_iter().flatten() {
            // SAFETY: its batch's grace period has ended (`OwnerReclaim`): no reader holds
            // it, and it owns the strong count its slot had.
            release(unsafe { FileArc::from_raw(p.into_inner()) });
        }
    }

    /// Installs `f` at the lowest free descriptor.
    pub fn insert(&self, f: FileArc) -> Result<Fd> {
        let mut a = self.alloc.lock();
        let i = a.bits.lowest_free();
        if i >= MAX_FDS {
            return Err(Errno::EMFILE);
        }
        let prev = self.put_locked(&a, i, f);
        debug_assert!(prev.is_null());
        a.bits.set(i);
        Ok(Fd(i as i32))
    }

    /// Closes `fd`.
    pub fn remove(&self, fd: Fd) -> Result<()> {
        let i = usize::try_from(fd.0).map_err(|_| Errno::EBADF)?;
        let g = crossbeam_epoch::pin();
        let mut a = self.alloc.lock();
        let p = self
            .slots(&g)
            .0
            .get(i)
            .map(|s| {
                self.dir_keys
                    .update(i, None, || s.swap(ptr::null_mut(), AcqRel))
            })
            .unwrap_or(ptr::null_mut());
        if p.is_null() {
            return Err(Errno::EBADF);
        }
        a.bits.clear(i);
        let freed = Self::retire_locked(&mut a, p, &g);
        drop(a);
        self.put_slot(p, freed, &g);
        Ok(())
    }

    /// `dup`.
    pub fn dup(&self, fd: Fd) -> Result<Fd> {
        let f = self.get(fd)?;
        self.insert(f.arc().clone())
    }

    /// `dup2`.
    pub fn dup2(&self, old: Fd, new: Fd) -> Result<Fd> {
        let held = self.get(old)?;
        let f = held.arc().clone();
        if old == new {
            return Ok(new);
        }
        let i = usize::try_from(new.0).map_err(|_| Errno::EBADF)?;
        if i >= MAX_FDS {
            return Err(Errno::EBADF);
        }
        let g = crossbeam_epoch::pin();
        let mut a = self.alloc.lock();
        let prev = self.put_locked(&a, i, f);
        a.bits.set(i);
        let freed = Self::retire_locked(&mut a, prev, &g);
        drop(a);
        self.put_slot(prev, freed, &g);
        Ok(new)
    }

    /// A copy with the same descriptions under the same numbers (`fork`).
    pub fn fork(&self) -> FdTable {
        let t = FdTable::default();
        let g = crossbeam_epoch::pin();
        let _l = self.alloc.lock();
        let mut tbits = t.alloc.lock();
        for (i, s) in self.slots(&g).0.iter().enumerate() {
            let p = s.load(Acquire);
            if !p.is_null() {
                // SAFETY: the slot's count keeps the count above zero; we hold `alloc`.
                let f = unsafe { crate::arc_counted(p) };
                t.put_locked(&tbits, i, f);
                tbits.bits.set(i);
            }
        }
        drop(tbits);
        t
    }
}

impl Drop for FdTable {
    fn drop(&mut self) {
        let g = crossbeam_epoch::pin();
        let mut rest = {
            let a = &mut *self.alloc.lock();
            let mut rest = std::mem::take(&mut a.retired);
            rest.extend(std::mem::take(&mut a.reclaim).into_pending());
            rest
        };
        for s in self.slots(&g).0.iter() {
            let p = s.swap(ptr::null_mut(), AcqRel);
            if !p.is_null() {
                rest.push(SendPtr(p));
                self.put_slot(p, Freed::default(), &g);
            }
        }
        Self::defer_drop(rest, &g);
        // SAFETY: the table is going away; no reader of it remains.
        unsafe {
            let old = self.slots.swap(crossbeam_epoch::Shared::null(), AcqRel, &g);
            g.defer_destroy(old);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The last reference to a description can be one that `dup` made through
    /// `FdTable::get`: its drop frees the description through that `Arc`'s pointer, which
    /// must be the slot's own. Made from a `&OpenFile`, it was a deallocation through a
    /// shared reference's tag, which Miri (Tree Borrows) reports.
    #[test]
    fn a_dup_can_hold_the_last_reference() {
        let p = crate::Vfs::new_memfs().process(crate::Creds::root());
        p.mkdir("/a", 0o755).unwrap();
        let up = p.open("/a", OFlags::RDONLY, 0).unwrap();
        let dup = p.dup(up).unwrap();
        p.close(up).unwrap();
        p.close(dup).unwrap();
        drop(p);
        // The deferred frees of the namespace just dropped run at the next one's drop.
        drop(crate::Vfs::new_memfs().process(crate::Creds::root()));
    }

    /// A record lock checks its descriptor still maps its description by swapping the slot
    /// with itself (`still_maps`); the close that follows frees the description through
    /// the slot's pointer, which must still be the allocation's own, not one made from a
    /// `&OpenFile` (Miri, Tree Borrows).
    #[test]
    fn a_close_after_a_record_lock_frees_through_the_slots_pointer() {
        use crate::{Flock, LockCmd, LockType};
        let p = crate::Vfs::new_memfs().process(crate::Creds::root());
        let fd = p.open("/f", OFlags::CREAT | OFlags::RDWR, 0o644).unwrap();
        p.fcntl_lock(fd, LockCmd::SetLk, &mut Flock::new(LockType::Write, 0, 1))
            .unwrap();
        p.close(fd).unwrap();
        drop(p);
        drop(crate::Vfs::new_memfs().process(crate::Creds::root()));
    }

    /// `fstatat` under a directory descriptor is answered from the path cache with the
    /// directory's key read with no guard (`DirKeys`). Once the number is closed, taken by
    /// a file, or given another directory by `dup2`, the answer is the one the number
    /// gives now, never the one cached under the directory it had.
    #[test]
    fn fstatat_follows_the_number_not_the_cache() {
        use crate::{AtFlags, Errno};
        let p = crate::Vfs::new_memfs().process(crate::Creds::root());
        p.mkdir("/d", 0o755).unwrap();
        p.write_file("/d/x", b"1").unwrap();
        p.mkdir("/e", 0o755).unwrap();
        p.mkdir("/e/x", 0o700).unwrap();
        let stat = |fd| p.fstatat(fd, "x", AtFlags::empty());
        let fd = p.open("/d", OFlags::RDONLY | OFlags::DIRECTORY, 0).unwrap();
        assert_eq!(stat(fd).unwrap().size, 1);
        assert!(
            crate::pathcache::cache_answers(1, || assert_eq!(stat(fd).unwrap().size, 1)),
            "no answer from the cache"
        );
        assert!(
            matches!(p.files.dir_keys.read(fd.0 as usize), Some(Some(_))),
            "no key published"
        );
        p.close(fd).unwrap();
        assert_eq!(stat(fd).err(), Some(Errno::EBADF));
        let f = p.open("/d/x", OFlags::RDONLY, 0).unwrap();
        assert_eq!(f, fd);
        assert_eq!(stat(fd).err(), Some(Errno::ENOTDIR));
        let d = p.open("/d", OFlags::RDONLY | OFlags::DIRECTORY, 0).unwrap();
        for _ in 0..3 {
            assert_eq!(stat(d).unwrap().size, 1);
        }
        let e = p.open("/e", OFlags::RDONLY | OFlags::DIRECTORY, 0).unwrap();
        p.dup2(e, d).unwrap();
        assert!(stat(d).unwrap().is_dir(), "found /d/x under /e's number");
        p.dup2(f, d).unwrap();
        assert_eq!(stat(d).err(), Some(Errno::ENOTDIR));
    }

    /// The lowest free number, the slow way.
    fn model_lowest(taken: &std::collections::BTreeSet<usize>) -> usize {
        (0..).find(|i| !taken.contains(i)).unwrap()
    }

    #[test]
    fn bits_skip_full_words_and_full_blocks() {
        let mut b = FdBits::default();
        for i in 0..64 * 64 * 3 + 5 {
            assert_eq!(b.lowest_free(), i);
            b.set(i);
        }
        b.assert_summary();
        // A hole deep inside full blocks is found, and so is the end after refilling it.
        b.clear(64 * 64 + 7);
        assert_eq!(b.lowest_free(), 64 * 64 + 7);
        b.set(64 * 64 + 7);
        assert_eq!(b.lowest_free(), 64 * 64 * 3 + 5);
        // A number set far past the end (dup2) leaves the gap free.
        b.set(1 << 18);
        assert!(b.is_set(1 << 18));
        assert_eq!(b.lowest_free(), 64 * 64 * 3 + 5);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        /// Any sequence of inserts (lowest free), `dup2`s (any number) and closes agrees
        /// with a set of taken numbers.
        #[test]
        #[cfg_attr(miri, ignore = "safe code only (FdBits has no unsafe); under Miri its model's scans took most of the Miri run")]
        fn bits_agree_with_a_set(ops in proptest::collection::vec((0u8..3, 0usize..9000), 1..400)) {
            let mut b = FdBits::default();
            let mut taken = std::collections::BTreeSet::new();
            for (op, n) in ops {
                match op {
                    0 => {
                        let i = b.lowest_free();
                        prop_assert_eq!(i, model_lowest(&taken));
                        b.set(i);
                        taken.insert(i);
                    }
                    1 => {
                        b.set(n);
                        taken.insert(n);
                    }
                    _ => {
                        let victim = taken.range(n..).next().copied();
                        if let Some(v) = victim {
                            b.clear(v);
                            taken.remove(&v);
                        }
                    }
                }
                prop_assert_eq!(b.lowest_free(), model_lowest(&taken));
                b.assert_summary();
                for &t in taken.iter().take(50) {
                    prop_assert!(b.is_set(t));
                }
            }
        }
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::memfs::{MemFs, MemFsOptions};
    use crate::types::mode::S_IFREG;
    use crate::types::Timespec;
    use loom::thread;

    /// A mount (not a namespace root, so its users are counted) and a file in it.
    fn setup() -> (Arc<Mount>, InodeArc) {
        let fs = MemFs::new(MemFsOptions {
            hash_buckets: 1,
            ..Default::default()
        });
        let base = Arc::new(Mount::new(1, fs.clone(), fs.root().clone(), None));
        let m = Arc::new(Mount::new(
            2,
            fs.clone(),
            fs.root().clone(),
            Some((base, fs.root().clone())),
        ));
        let i = fs
            .new_inode(S_IFREG | 0o644, 0, 0, 0, None, Timespec::default())
            .unwrap();
        (m, i)
    }

    /// One thread installs a description and closes it; another looks it up, reads it and
    /// `dup2`s it to another number. A lookup either fails or sees the whole description;
    /// the mount's user count is exactly the number of descriptions still installed.
    /// Returns whether any execution broke either.
    fn install_close_lookup(broken: Broken) -> bool {
        crate::sync::loom_violated(2, move || {
            let (m, inode) = setup();
            let mut t = FdTable::default();
            t.broken = broken;
            let t = Arc::new(t);
            let w = {
                let (t, m, inode) = (t.clone(), m.clone(), inode.clone());
                thread::spawn(move || {
                    let of = NewFile::new(&m, None, inode, OFlags::RDONLY).unwrap();
                    let fd = t.insert_new(of).unwrap();
                    assert_eq!(fd, Fd(0));
                    t.remove(fd).unwrap();
                })
            };
            let mut bad = false;
            let duped = {
                let g = crossbeam_epoch::pin();
                match t.get_ref(Fd(0), &g) {
                    Ok(f) => {
                        bad |= f.inode.ino != inode.ino || f.flags != OFlags::RDONLY;
                    }
                    Err(e) => bad |= e != Errno::EBADF,
                }
                drop(g);
                t.dup2(Fd(0), Fd(1)).is_ok()
            };
            w.join().unwrap();
            // Users counted wrong?
            bad |= m.users.sum() != i64::from(duped);
            if duped {
                t.remove(Fd(1)).unwrap();
                bad |= m.users.sum() != 0;
            }
            bad |= t.get(Fd(0)).err() != Some(Errno::EBADF);
            // Descriptions retired to the epoch are freed when loom tears the execution
            // down; the file system must not be torn down then (it would pin again).
            std::mem::forget(m);
            bad
        })
    }

    /// A writer puts one directory's description in slot 0, then another's over it, then
    /// closes it (`DirKeys::update`, as `put_locked` and `remove` call it), while a reader
    /// reads the slot's key with no guard (`DirKeys::read`). A key read is one the slot
    /// had, never one directory's dentry with the other's mount; after the close there is
    /// none. Returns whether any execution broke that.
    fn dir_keys_publish(broken_no_section: bool) -> bool {
        crate::sync::loom_violated(3, move || {
            let mut k = DirKeys::default();
            k.broken_no_section = broken_no_section;
            let k = Arc::new(k);
            let w = {
                let k = k.clone();
                thread::spawn(move || {
                    k.update(0, Some((0x100, 1)), || ());
                    k.update(0, Some((0x200, 2)), || ());
                    k.update(0, None, || ());
                })
            };
            let got = k.read(0).flatten();
            w.join().unwrap();
            let torn = !matches!(got, None | Some((0x100, 1)) | Some((0x200, 2)));
            torn || k.read(0).flatten().is_some()
        })
    }

    #[test]
    fn fd_table_dir_keys_publish() {
        assert!(!dir_keys_publish(false));
    }

    /// Twin: keys written with no write section are read torn.
    #[test]
    fn fd_table_dir_keys_without_a_write_section_fail() {
        assert!(
            dir_keys_publish(true),
            "the model missed a key read between its two words' stores"
        );
    }

    #[test]
    fn fd_table_install_close_lookup() {
        assert!(!install_close_lookup(Broken::default()));
    }

    /// Twin: counting a description only at its first install loses the count that a
    /// `dup2` racing the close of its last slot must move back.
    #[test]
    fn fd_table_counting_only_the_first_install_fails() {
        assert!(
            install_close_lookup(Broken {
                count_first_install_only: true
            }),
            "the model missed a re-install that is not counted"
        );
    }
}
