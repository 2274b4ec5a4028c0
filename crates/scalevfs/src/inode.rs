//! Inodes: attributes readable without a lock, and the per-type contents.
//!
//! # Attributes
//! Every attribute a `stat` returns is an atomic field. Writers hold [`Inode::attr_lock`]
//! and wrap their stores in the inode's [`SeqCount32`]; [`Inode::stat`] reads the fields with
//! relaxed loads and retries until the count is stable, so `stat` inside the lockless walk
//! takes no lock. It writes one thing, at most once per change: the mark that the change
//! time was read (bit 31 of its nanoseconds, by compare-and-swap, outside the lock and the
//! count), which makes the next change stamp finely (see `FileTimes`, "Multigrain change
//! times"). That bit is the one part of an attribute written without `attr_lock`.
//!
//! # Contents
//! - Directory: [`DirState`] under a mutex (Linux's `i_rwsem`): the children in cookie order
//!   and the dead flag. Every namespace change in the directory holds it.
//! - Regular file: [`FileData`] (sparse 4 KiB pages) under a reader-writer lock.
//! - Symlink: its target, immutable for the inode's life.
//!
//! # Lock order
//! ```text
//! DirState mutexes (several: sorted by address, see `lock_dirs`)
//!   FileData rwlock
//!     attr_lock
//! ```
//!
//! # Reclamation
//! Inodes are [`InodeArc`]s (triomphe's `Arc`: one count, no weak count). A dentry owns one
//! count through a raw pointer; when it lets go it defers the drop past an epoch grace
//! period, so a lockless reader that loaded the pointer under a guard may still read
//! attributes (and take a count with `crate::arc_counted`, which is sound because the
//! dentry's count is still there).

use crate::dentry::Dentry;
use crate::errno::{Errno, Result};
use crate::sync::effects::effect;
use crate::sync::Mutex;
use crate::sync::RwLock;
use crate::sync::{AtomicI64, AtomicU32, AtomicU64, SeqCount32};
use crate::types::{mode::*, Access, Creds, FileType, Stat, Timespec};
use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};

/// Size of a data page.
pub const PAGE: usize = 4096;
/// What each entry adds to a directory's `st_size` (tmpfs's `BOGO_DIRENT_SIZE`; an empty
/// directory counts `.` and `..`).
pub const DIRENT_SIZE: u64 = 20;
/// Maximum file size (like tmpfs on 64-bit: `MAX_LFS_FILESIZE`).
pub const MAX_FILE_SIZE: u64 = i64::MAX as u64;

/// An inode's three timestamps: seconds and nanoseconds kept apart, so that no padding
/// sits between an `i64` and a `u32` (12 bytes an inode). The fourth `u32` fills what would
/// be padding: the revalidation deadline of a file system with a TTL policy (see
/// [`Inode::expired`]).
///
/// # Multigrain change times
/// Changes are stamped with the coarse clock (see `Timespec::now_coarse`), as Linux stamps
/// them on tmpfs since 6.13, unless that would hide a change from someone who looked: a
/// `stat` that reads the change time sets [`QUERIED`] in its nanoseconds (one
/// read-modify-write per change at most: a `stat` that finds the bit set writes nothing),
/// and a change that finds the bit set and a coarse stamp no later than the change time
/// it replaces takes a fine-grained stamp instead ([`Inode::change_stamp`]). So a change
/// made after a `stat` always shows a new change time, and one nobody looked at costs a
/// read of the vDSO's page instead of the time-stamp counter. Every store of a time
/// writes nanoseconds without the bit, which clears it; [`FileTimes::load`] masks it.
/// The bit is set outside the attribute lock and the sequence counter: set on a change
/// time a racing change just replaced, it costs that change's successor one fine-grained
/// stamp it did not need, and nothing else.
struct FileTimes {
    sec: [AtomicI64; 3],
    nsec: [AtomicU32; 3],
    valid_until: AtomicU32,
    /// What a loom model's twin breaks (see `loom_models`).
    #[cfg(loom)]
    broken: std::sync::atomic::AtomicU8,
}

/// Loom twins of the multigrain protocol: the `stat` marks the change time with a plain
/// store of what it read (a lost update), or a change ignores the mark.
#[cfg(loom)]
const BROKEN_MARK_BY_STORE: u8 = 1;
#[cfg(loom)]
const BROKEN_IGNORE_MARK: u8 = 2;
/// Loom twin of [`Inode::drop_link`]'s check for other holders: a load instead of a
/// read-modify-write.
#[cfg(loom)]
const BROKEN_HOLDERS_BY_LOAD: u8 = 3;

/// Set in the change time's nanoseconds while a `stat` has read it since it was set (see
/// [`FileTimes`], "Multigrain change times"). Nanoseconds stay below 2^30.
const QUERIED: u32 = 1 << 31;

/// Which timestamp of [`FileTimes`].
const ATIME: usize = 0;
const MTIME: usize = 1;
const CTIME: usize = 2;

impl FileTimes {
    fn new(t: Timespec) -> FileTimes {
        FileTimes {
            sec: std::array::from_fn(|_| AtomicI64::new(t.sec)),
            nsec: std::array::from_fn(|_| AtomicU32::new(t.nsec)),
            valid_until: AtomicU32::new(0),
            #[cfg(loom)]
            broken: std::sync::atomic::AtomicU8::new(0),
        }
    }
    #[inline]
    fn load(&self, which: usize) -> Timespec {
        Timespec {
            sec: self.sec[which].load(Relaxed),
            nsec: self.nsec[which].load(Relaxed) & !QUERIED,
        }
    }

    /// The change time, and its nanoseconds as stored (with [`QUERIED`] if it is set).
    #[inline(always)]
    fn ctime_marked(&self) -> (Timespec, u32) {
        let nsec = self.nsec[CTIME].load(Relaxed);
        let t = Timespec {
            sec: self.sec[CTIME].load(Relaxed),
            nsec: nsec & !QUERIED,
        };
        (t, nsec)
    }

    /// Records that the change time whose nanoseconds were `read` (without the bit) was
    /// read (see "Multigrain change times"): a compare-and-swap, as Linux's, so that a change
    /// time a racing change already replaced is left unmarked (the change that follows
    /// still shows against what was read: its stamp is no earlier than the replacement's).
    #[cold]
    fn mark_queried(&self, read: u32) {
        #[cfg(loom)]
        if self.broken.load(Relaxed) == BROKEN_MARK_BY_STORE {
            self.nsec[CTIME].store(read | QUERIED, Relaxed);
            return;
        }
        let _ = self.nsec[CTIME].compare_exchange(read, read | QUERIED, Relaxed, Relaxed);
    }
    #[inline]
    fn store(&self, which: usize, t: Timespec) {
        self.sec[which].store(t.sec, Relaxed);
        // Under loom a swap: loom lets a plain store fall between the read and the write of
        // a racing read-modify-write (the mark), which no real machine does (tokio-rs/loom
        // issue #254); a swap is ordered as the store is.
        #[cfg(loom)]
        self.nsec[which].swap(t.nsec, Relaxed);
        #[cfg(not(loom))]
        self.nsec[which].store(t.nsec, Relaxed);
    }
}

/// A directory's children and state. Protected by the directory inode's mutex.
#[derive(Default)]
pub struct DirState {
    /// Hashed children (positive and negative) by cookie (see `dirindex`). A child is here
    /// exactly while it is in the dentry hash; the hash owns it (see `dentry`).
    pub children: crate::dirindex::CookieIndex<NonNull<Dentry>>,
    /// The next cookie to hand out; cookies 0..=2 are the start, `.` and `..`.
    pub next_cookie: u64,
    /// Set by rmdir: nothing may be created here any more.
    pub dead: bool,
    /// Number of positive children (for emptiness checks).
    pub positive: u32,
    /// Number of children that are directories (so a sweep looks for subdirectories only
    /// where there are some; see `backend`, "Bounded caches"). Kept with `positive`, by
    /// the dentry hash's changes (`dentry`).
    pub subdirs: u32,
    /// The file system has not told what this directory holds yet: `children` is empty
    /// and means nothing until `SuperBlock::load` fills it (never set by memfs, whose
    /// directories are complete from their creation).
    pub unloaded: bool,
    /// A load of this directory is under way (its loader holds no lock; others wait).
    pub loading: bool,
    /// The file system found this directory changed behind the engine (a name it knew
    /// now names another object, or is gone): its next lock reloads it, whatever its
    /// deadline says (see `backend`, "Revalidation").
    pub stale: bool,
    /// How many sweeps of the cache had started when it was last loaded: the next sweep
    /// leaves its children alone, so a caller that loads two directories before it locks
    /// both does not see the first unloaded by the second's sweep (see `backend`, "Bounded
    /// caches"). 32 bits (compared with wrapping), so it fits beside the flags and a
    /// directory's state, and with it every inode, stays as large as before.
    pub loaded_at: u32,
    /// Found too large to load whole for a lookup (see `backend`, "Names one at a time"):
    /// while it is not loaded, a lookup here asks the file system for its one name.
    pub big: bool,
    /// The [`crate::sync::thread_tag`] of the thread that last loaded it: a sweep evicts
    /// the names of its own thread's directories first (see `backend`, "Bounded caches").
    pub loader: u8,
}

// SAFETY: the pointers are only dereferenced under an epoch guard or with the directory
// lock held, which keeps the pointees alive (see `dentry`).
unsafe impl Send for DirState {}

impl DirState {
    /// Hands out a cookie for a new child.
    pub fn alloc_cookie(&mut self) -> u64 {
        if self.next_cookie < 3 {
            self.next_cookie = 3;
        }
        let c = self.next_cookie;
        self.next_cookie += 1;
        c
    }
}

/// A regular file's data: sparse pages. A page is either written (its bytes) or reserved
/// by `fallocate` (no memory yet; it reads as zeros and counts as space used, and, like
/// tmpfs's not-uptodate pages, as a hole to `SEEK_DATA`/`SEEK_HOLE`). Every page in the map
/// is charged to the file system exactly once (see `memfs`, "Accounting").
///
/// The map is allocated at the first page: an empty file's data is one null pointer, and
/// its lock and it fit the 16 bytes that keep [`Contents`] at 24.
#[derive(Default)]
pub struct FileData {
    pages: Option<Box<Pages>>,
}

/// A file's pages by index.
type Pages = BTreeMap<u64, Option<Box<[u8; PAGE]>>>;

/// The pages of a file that has none.
static NO_PAGES: Pages = BTreeMap::new();

const P: u64 = PAGE as u64;

impl FileData {
    /// The pages (none yet: an empty map).
    #[inline]
    fn map(&self) -> &Pages {
        self.pages.as_deref().unwrap_or(&NO_PAGES)
    }

    /// The pages, to change: the map is allocated if the file has none yet.
    fn map_mut(&mut self) -> &mut Pages {
        self.pages.get_or_insert_with(Box::default)
    }

    /// Copies bytes at `off` into `buf`, up to `size`; holes read as zeros.
    pub fn read(&self, buf: &mut [u8], off: u64, size: u64) -> usize {
        if off >= size {
            return 0;
        }
        let n = buf.len().min((size - off) as usize);
        let mut done = 0;
        while done < n {
            let pos = off + done as u64;
            let idx = pos / P;
            let in_page = (pos % P) as usize;
            let chunk = (PAGE - in_page).min(n - done);
            match self.map().get(&idx) {
                Some(Some(p)) => {
                    buf[done..done + chunk].copy_from_slice(&p[in_page..in_page + chunk])
                }
                _ => buf[done..done + chunk].fill(0),
            }
            done += chunk;
        }
        n
    }

    /// Writes `data` at `off`, allocating pages. Returns the number of pages added to the
    /// map (a reserved page turning into a written one adds none).
    pub fn write(&mut self, data: &[u8], off: u64) -> u64 {
        if data.is_empty() {
            return 0;
        }
        let pages = self.map_mut();
        let mut added = 0;
        let mut done = 0;
        while done < data.len() {
            let pos = off + done as u64;
            let idx = pos / P;
            let in_page = (pos % P) as usize;
            let chunk = (PAGE - in_page).min(data.len() - done);
            let slot = pages.entry(idx).or_insert_with(|| {
                added += 1;
                None
            });
            let page = slot.get_or_insert_with(|| Box::new([0u8; PAGE]));
            page[in_page..in_page + chunk].copy_from_slice(&data[done..done + chunk]);
            done += chunk;
        }
        added
    }

    /// Cuts the data to `len` bytes: drops whole pages past it and zeroes the tail of the
    /// last one. Returns the number of pages freed.
    pub fn truncate(&mut self, len: u64) -> u64 {
        let Some(pages) = self.pages.as_deref_mut() else {
            return 0;
        };
        let gone = pages.split_off(&len.div_ceil(P));
        if len % P != 0 {
            if let Some(Some(p)) = pages.get_mut(&(len / P)) {
                p[(len % P) as usize..].fill(0);
            }
        }
        gone.len() as u64
    }

    /// `FALLOC_FL_PUNCH_HOLE` over `[off, end)`: frees the pages wholly inside, zeroes the
    /// parts of the others. Returns the number of pages freed.
    pub fn punch(&mut self, off: u64, end: u64) -> u64 {
        let Some(pages) = self.pages.as_deref_mut() else {
            return 0;
        };
        if end <= off {
            return 0;
        }
        let (first_whole, end_whole) = (off.div_ceil(P), end / P);
        let mut freed = 0;
        if first_whole < end_whole {
            let inside: Vec<u64> = pages
                .range(first_whole..end_whole)
                .map(|(&i, _)| i)
                .collect();
            freed = inside.len() as u64;
            for i in inside {
                pages.remove(&i);
            }
        }
        // The partial pages at either end.
        for idx in [off / P, (end - 1) / P] {
            let (lo, hi) = ((idx * P).max(off), ((idx + 1) * P).min(end));
            if lo < hi && (lo > idx * P || hi < (idx + 1) * P) {
                if let Some(Some(p)) = pages.get_mut(&idx) {
                    p[(lo - idx * P) as usize..(hi - idx * P) as usize].fill(0);
                }
            }
        }
        freed
    }

    /// `fallocate` of `[off, end)`: reserves every page not in the map (no memory: a
    /// reserved page reads as zeros). The caller charged [`FileData::missing_pages`].
    pub fn reserve(&mut self, off: u64, end: u64) -> u64 {
        let mut added = 0;
        if end <= off {
            return 0;
        }
        let pages = self.map_mut();
        for idx in off / P..=(end - 1) / P {
            if let std::collections::btree_map::Entry::Vacant(v) = pages.entry(idx) {
                v.insert(None);
                added += 1;
            }
        }
        added
    }

    /// How many pages a write or reservation of `[off, end)` would add (the holes it
    /// covers).
    pub fn missing_pages(&self, off: u64, end: u64) -> u64 {
        if end <= off {
            return 0;
        }
        let (first, last) = (off / P, (end - 1) / P);
        (last - first + 1) - self.map().range(first..=last).count() as u64
    }

    /// The end of the longest prefix of `[off, end)` whose writing adds at most `n` pages.
    pub fn prefix_adding(&self, off: u64, end: u64, n: u64) -> u64 {
        let mut added = 0;
        let mut idx = off / P;
        loop {
            let start = (idx * P).max(off);
            if start >= end {
                return end;
            }
            if !self.map().contains_key(&idx) {
                if added == n {
                    return start;
                }
                added += 1;
            }
            idx += 1;
        }
    }

    /// Frees every page; returns how many there were.
    pub fn clear(&mut self) -> u64 {
        // An empty file's eviction (every create + unlink) has no map to free.
        self.pages.take().map_or(0, |m| m.len() as u64)
    }

    /// `SEEK_DATA` (`seek_data`) or `SEEK_HOLE` from `start` in a file of `size` bytes
    /// (`0 <= start`), computed as Linux `mapping_seek_hole_data` computes it over 4 KiB
    /// pages, wrap-around included: the page that ends at 2^63 rounds its end to a negative
    /// offset, so `SEEK_DATA` does not see it and `SEEK_HOLE` inside it answers that negative
    /// offset, which tmpfs hands back unchecked. Reserved pages are holes, as tmpfs's
    /// fallocated (not uptodate) ones are. `Err(ENXIO)` past the end or with no data.
    pub fn seek(&self, start: i64, size: i64, seek_data: bool) -> Result<i64> {
        if size <= start {
            return Err(Errno::ENXIO);
        }
        let clamp = |x: i64| if x > size { size } else { x };
        let mut start = start;
        let last = (size - 1) as u64 / P;
        for (&idx, page) in self.map().range(start as u64 / P..=last) {
            let pos = (idx * P) as i64;
            if start < pos {
                // A hole before this page: SEEK_HOLE is done; SEEK_DATA moves to the page.
                if !seek_data {
                    return Ok(clamp(start));
                }
                start = pos;
            }
            // `round_up(pos + 1, PAGE_SIZE)` in u64, then used as a signed offset.
            let end_of_page = (idx * P + 1).next_multiple_of(P) as i64;
            // Linux `folio_seek_hole_data`: a page with data keeps SEEK_DATA where it is
            // and moves SEEK_HOLE to its end; a reserved page the other way round.
            if seek_data != page.is_some() {
                start = end_of_page;
            }
            if start < end_of_page {
                return Ok(clamp(start));
            }
            if start >= size {
                break;
            }
        }
        if seek_data {
            return Err(Errno::ENXIO);
        }
        Ok(clamp(start))
    }
}

/// What kind of object an inode is, with its contents: 24 bytes, so that an inode is
/// 128 (see [`Inode`]). What only some objects need is behind a pointer: a directory's
/// state, and a file's map of pages once it has any ([`FileData`]).
pub enum Contents {
    /// A directory.
    Dir(Box<Mutex<DirState>>),
    /// A regular file.
    File(RwLock<FileData>),
    /// A symlink and its target.
    Symlink(Box<[u8]>),
    /// A FIFO, socket or device node: no contents but its device number (`st_rdev`; 0
    /// but for a device node).
    Special(u64),
    /// A regular file whose data its file system keeps (hostfs): read and written through
    /// the descriptor `FileSystem::open_data` gives each open description, never through
    /// pages of the engine's. The lock serializes the writes and truncations that change
    /// its size, so that an append's offset and the size the engine reports agree.
    Stored(Mutex<()>),
}

impl Contents {
    /// A directory's, in state `st`.
    pub fn dir(st: DirState) -> Contents {
        Contents::Dir(Box::new(Mutex::new(st)))
    }

    /// A new directory's: complete, with no entries.
    pub fn empty_dir() -> Contents {
        Contents::dir(DirState::default())
    }

    /// The contents of a new object of type `mode & S_IFMT` whose data the engine keeps
    /// (memfs's): `rdev` for a device node, `target` for a symlink.
    pub fn in_memory(mode: u32, rdev: u64, target: Option<&[u8]>) -> Contents {
        match mode & S_IFMT {
            S_IFDIR => Contents::empty_dir(),
            S_IFREG => Contents::File(RwLock::new(FileData::default())),
            S_IFLNK => Contents::Symlink(target.unwrap_or_default().into()),
            _ => Contents::Special(rdev),
        }
    }
}

/// A counted pointer to an inode: triomphe's `Arc`, which has no weak count, so that an
/// inode's last drop is one atomic read-modify-write, not two as with std's.
pub type InodeArc = triomphe::Arc<Inode>;

/// An inode. Shared as an [`InodeArc`].
///
/// 128 bytes with the `InodeArc`'s count (the 8 bytes before the inode), served from
/// mimalloc's 128-byte class, whose blocks are 128-byte aligned (a test checks it): two
/// lines, one pair for the hardware's adjacent-line prefetch, and no line shared with
/// another inode. Laid out in declaration order (`repr(C)`):
/// - line 0: what is written often (the count and `holds`, which an open and its close
///   each write, and the start of `contents`, whose lock every read and write of the data
///   takes), then what `stat` reads and hardly anything writes (`nlink`, `ino`, `blocks`);
/// - line 1: the mode, owner and group (the walk's permission and type checks: the type is
///   read from the mode, see [`Inode::is_dir`]), the size (`read`'s check) and the times,
///   which an open, a read and a close of the file do not write, and the sequence count
///   of the attributes.
///
/// So the walk and `read` read a line that opens and closes on other threads do not take
/// from them (with `holds` beside the attributes, two threads opening one file took that
/// line from each other on every open and close), and `stat` reads both. (It was 168 bytes
/// in mimalloc's 192-byte class, its lines not paired, until the directory's state and the
/// file's page map moved behind pointers and the device number into `Contents::Special`.)
#[repr(C)]
pub struct Inode {
    /// Holds on the inode's contents: one while it has links, one per open description. At
    /// zero it is evicted (its pages freed and uncharged) and cannot be held again; see
    /// [`Inode::hold`].
    holds: AtomicU32,
    /// Serializes attribute writers (and so the writers of `seq`): a leaf lock, over
    /// stores only.
    attr_lock: crate::sync::LeafLock,
    /// Whether the file system was ever given an extended attribute for this inode (set
    /// under its file system's xattr lock, while the setter holds the inode: see
    /// `memfs`, "Extended attributes"), so that an eviction looks for them only then. It
    /// sits in what was padding after `holds`.
    pub(crate) has_xattrs: crate::sync::AtomicBool,
    /// Whether the file-lock table may hold records for this inode (`filelock`): set and
    /// cleared under the inode's slot of that table, read without it by a close, which
    /// looks for locks to drop only then. Also in padding.
    pub(crate) has_locks: crate::sync::AtomicBool,
    /// The contents.
    pub contents: Contents,
    /// The owner this inode is counted against in its file system's per-user inode
    /// counts, or [`NO_QUOTA`] (no per-user limit, or evicted). Moved by compare-and-swap
    /// on `chown` and swapped out at eviction, so each count is given back exactly once.
    pub(crate) quota_uid: AtomicU32,
    nlink: AtomicU32,
    /// Inode number, unique within its file system for the inode's life.
    pub ino: u64,
    blocks: AtomicU64,
    seq: SeqCount32,
    mode: AtomicU32,
    uid: AtomicU32,
    gid: AtomicU32,
    size: AtomicU64,
    times: FileTimes,
}

/// No file-lock record outlives its inode: a file system torn down with its inodes still
/// cached (a dropped `Vfs`) evicts none of them, and a new inode may get the address that
/// keys the records (`filelock`, "Release"). Not under loom, whose models make their own
/// tables.
#[cfg(not(loom))]
impl Drop for Inode {
    fn drop(&mut self) {
        if self.has_locks.load(std::sync::atomic::Ordering::Relaxed) {
            crate::filelock::global().purge(self);
        }
    }
}

/// `Inode::quota_uid` when the inode is counted against no one.
pub(crate) const NO_QUOTA: u32 = u32::MAX;

/// Which timestamps an update touches.
#[derive(Clone, Copy, Default, Debug)]
pub struct Times {
    /// Set atime.
    pub atime: Option<Timespec>,
    /// Set mtime.
    pub mtime: Option<Timespec>,
    /// Set ctime.
    pub ctime: Option<Timespec>,
}

impl Times {
    /// mtime and ctime to `t` (a change of contents).
    pub fn modify(t: Timespec) -> Times {
        Times {
            atime: None,
            mtime: Some(t),
            ctime: Some(t),
        }
    }
    /// ctime only (a change of status).
    pub fn change(t: Timespec) -> Times {
        Times {
            atime: None,
            mtime: None,
            ctime: Some(t),
        }
    }
}

/// An attribute update, applied under the attribute lock in one sequence-counter section.
#[derive(Default, Debug)]
pub struct AttrUpdate {
    /// New permission bits and set-id/sticky bits (the type bits are kept).
    pub perm: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New size (the caller changed the data).
    pub size: Option<u64>,
    /// Pages added (positive) or freed (negative).
    pub pages_delta: i64,
    /// The 512-byte blocks in use, as storage reports them (a stored file's).
    pub blocks: Option<u64>,
    /// Timestamps.
    pub times: Times,
}

impl Inode {
    /// A new inode with `nlink` 1 (2 for a directory) and all times `now`; a device
    /// node's number is in its `contents` ([`Contents::Special`]).
    pub fn new(
        ino: u64,
        mode: u32,
        uid: u32,
        gid: u32,
        contents: Contents,
        now: Timespec,
    ) -> Inode {
        // The type bits of `mode` never change after this (`refresh` and `set_mode` keep
        // them), and they say what `contents` holds, so that `is_dir` and
        // `symlink_target` may ask the mode instead of loading `contents`.
        debug_assert_eq!(
            mode & S_IFMT == S_IFDIR,
            matches!(contents, Contents::Dir(_)),
            "mode {mode:o}: mode and contents disagree"
        );
        debug_assert_eq!(
            mode & S_IFMT == S_IFLNK,
            matches!(contents, Contents::Symlink(_)),
            "mode {mode:o}: mode and contents disagree"
        );
        let size = match &contents {
            Contents::Symlink(t) => t.len() as u64,
            Contents::Dir(_) => 2 * DIRENT_SIZE,
            _ => 0,
        };
        let nlink = if matches!(contents, Contents::Dir(_)) {
            2
        } else {
            1
        };
        let i = Inode {
            ino,
            seq: SeqCount32::new(),
            // The creator's hold: the new inode's first link, or its `O_TMPFILE` description.
            holds: AtomicU32::new(1),
            mode: AtomicU32::new(mode),
            uid: AtomicU32::new(uid),
            quota_uid: AtomicU32::new(NO_QUOTA),
            gid: AtomicU32::new(gid),
            nlink: AtomicU32::new(nlink),
            size: AtomicU64::new(size),
            blocks: AtomicU64::new(0),
            times: FileTimes::new(now),
            attr_lock: crate::sync::LeafLock::new(()),
            has_xattrs: crate::sync::AtomicBool::new(false),
            has_locks: crate::sync::AtomicBool::new(false),
            contents,
        };
        // tmpfs keeps a symlink body of 128 bytes or more (with its NUL) in a page.
        if let Contents::Symlink(t) = &i.contents {
            if t.len() >= 128 {
                i.blocks.store((PAGE / 512) as u64, Relaxed);
            }
        }
        i
    }

    /// An inode as its file system reports it (a host `stat`): every attribute from `st`
    /// but the device, which is the engine's, and the device number, which is the
    /// `contents`' (the caller's [`Contents::Special`]).
    pub fn from_stat(st: &Stat, contents: Contents) -> Inode {
        let i = Inode::new(st.ino, st.mode, st.uid, st.gid, contents, st.ctime);
        i.nlink.store(st.nlink, Relaxed);
        i.size.store(st.size, Relaxed);
        i.blocks.store(st.blocks, Relaxed);
        i.times.store(ATIME, st.atime);
        i.times.store(MTIME, st.mtime);
        i
    }

    /// Whether what the engine caches of this object (its attributes; for a directory,
    /// also its entries) is past its deadline at `now`, in the ticks of its file system's
    /// clock (`fs::SuperBlock::ticks`). Only a file system with a TTL policy sets deadlines;
    /// for the others the field is never read. Racy by design: a deadline read just
    /// before another thread extends it sends the caller to revalidate once more.
    #[inline]
    pub(crate) fn expired(&self, now: u32) -> bool {
        now >= self.times.valid_until.load(Relaxed)
    }

    /// Sets the deadline of [`Inode::expired`].
    pub(crate) fn set_valid_until(&self, t: u32) {
        self.times.valid_until.store(t, Relaxed);
    }

    /// Replaces the attributes with `st`, as the file system now reports them (a
    /// revalidation). The type bits, the inode number and the device number stay: the
    /// caller checked that `st` is still this object. Two times are the engine's as much
    /// as storage's: the access time (the engine updates it for what it serves from its
    /// cache, such as a symlink's text, which storage never sees read) and the change time
    /// (which the engine sets for changes it need not send, such as a `chown` to the same
    /// owner), so each keeps the later of the two; storage cannot move a change time back.
    /// A directory keeps the engine's access time: storage's moves when the file system
    /// lists it to revalidate.
    pub(crate) fn refresh(&self, st: &Stat) {
        let _g = self.attr_lock.lock();
        effect(|| {
            self.seq.write_begin();
            let m = self.mode.load(Relaxed);
            self.mode.store((m & S_IFMT) | (st.mode & 0o7777), Relaxed);
            self.uid.store(st.uid, Relaxed);
            self.gid.store(st.gid, Relaxed);
            self.nlink.store(st.nlink, Relaxed);
            self.size.store(st.size, Relaxed);
            self.blocks.store(st.blocks, Relaxed);
            if !self.is_dir() {
                self.times
                    .store(ATIME, st.atime.max(self.times.load(ATIME)));
            }
            self.times.store(MTIME, st.mtime);
            self.times
                .store(CTIME, st.ctime.max(self.times.load(CTIME)));
            self.seq.write_end();
        });
    }

    /// The link count.
    #[inline]
    pub fn nlink(&self) -> u32 {
        self.nlink.load(Relaxed)
    }

    /// The full mode (type and permission bits).
    #[inline]
    pub fn mode(&self) -> u32 {
        self.mode.load(Relaxed)
    }

    /// The file type.
    #[inline]
    pub fn file_type(&self) -> FileType {
        FileType::from_mode(self.mode()).unwrap_or(FileType::Regular)
    }

    /// Whether this is a directory. Read from the mode's type bits, which never change and
    /// agree with `contents` (see [`Inode::new`]): the mode sits on the line that `stat`
    /// and the permission checks read, while `contents` is on the line an open and a close
    /// write, so a walk that only asks the type never loads that line.
    #[inline]
    pub fn is_dir(&self) -> bool {
        self.mode() & S_IFMT == S_IFDIR
    }

    /// The owner.
    #[inline]
    pub fn uid(&self) -> u32 {
        self.uid.load(Relaxed)
    }

    /// The group.
    #[inline]
    pub fn gid(&self) -> u32 {
        self.gid.load(Relaxed)
    }

    /// The size in bytes.
    #[inline]
    pub fn size(&self) -> u64 {
        self.size.load(Relaxed)
    }

    /// Whether the inode has blocks in use (`st_blocks` is not 0). For an engine-kept file
    /// (`Contents::File`) this says whether it has pages: every change of its pages moves
    /// `blocks` by the same count, under the data lock.
    #[inline]
    pub(crate) fn has_blocks(&self) -> bool {
        self.blocks.load(Relaxed) != 0
    }

    /// The device number (`st_rdev`): a device node's, 0 for every other object.
    pub fn rdev(&self) -> u64 {
        match self.contents {
            Contents::Special(rdev) => rdev,
            _ => 0,
        }
    }

    /// The directory state, for directories.
    #[inline]
    pub fn dir(&self) -> Option<&Mutex<DirState>> {
        match &self.contents {
            Contents::Dir(d) => Some(d),
            _ => None,
        }
    }

    /// Whether this is a directory that was removed (`DirState::dead`, final once set).
    /// Takes the directory's lock: the caller holds none of its own.
    pub(crate) fn dir_is_dead(&self) -> bool {
        self.dir().is_some_and(|st| st.lock().dead)
    }

    /// The symlink target, for symlinks. The type is asked of the mode first (see
    /// [`Inode::is_dir`]): a walk asks this of every object it reaches, nearly all of them
    /// not symlinks, and their `contents` line is then never loaded.
    #[inline]
    pub fn symlink_target(&self) -> Option<&[u8]> {
        if self.mode() & S_IFMT != S_IFLNK {
            return None;
        }
        match &self.contents {
            Contents::Symlink(t) => Some(t),
            _ => None,
        }
    }

    /// A consistent copy of the attributes, without a lock.
    #[inline(always)]
    pub fn stat(&self, dev: u64) -> Stat {
        loop {
            let s = self.seq.read_begin_spin();
            let (ctime, ctime_nsec) = self.times.ctime_marked();
            let mode = self.mode.load(Relaxed);
            let st = Stat {
                dev,
                ino: self.ino,
                mode,
                nlink: self.nlink.load(Relaxed),
                uid: self.uid.load(Relaxed),
                gid: self.gid.load(Relaxed),
                // `rdev` is 0 for every other object already (`Process::mknodat`, as
                // Linux's `do_mknodat`); asked of the mode, which is loaded anyway, it
                // costs a cached stat 13 instructions fewer (BENCHMARKS.md).
                rdev: if matches!(mode & S_IFMT, S_IFCHR | S_IFBLK) {
                    self.rdev()
                } else {
                    0
                },
                size: self.size.load(Relaxed),
                blksize: PAGE as u32,
                blocks: self.blocks.load(Relaxed),
                atime: self.times.load(ATIME),
                mtime: self.times.load(MTIME),
                ctime,
            };
            if !self.seq.read_retry(s) {
                if ctime_nsec & QUERIED == 0 {
                    self.times.mark_queried(ctime_nsec);
                }
                return st;
            }
        }
    }

    /// Applies `u` under the attribute lock.
    pub fn update(&self, u: &AttrUpdate) {
        let _g = self.attr_lock.lock();
        self.update_locked(u);
    }

    /// Applies `u`; the caller holds the attribute lock.
    fn update_locked(&self, u: &AttrUpdate) {
        if u.perm.is_some() || u.uid.is_some() || u.gid.is_some() {
            // Who may search, read or write changes: check mode must know.
            effect(|| self.apply(u));
        } else {
            self.apply(u);
        }
    }

    fn apply(&self, u: &AttrUpdate) {
        self.seq.write_begin();
        if let Some(p) = u.perm {
            let m = self.mode.load(Relaxed);
            self.mode.store((m & S_IFMT) | (p & 0o7777), Relaxed);
        }
        if let Some(v) = u.uid {
            self.uid.store(v, Relaxed);
        }
        if let Some(v) = u.gid {
            self.gid.store(v, Relaxed);
        }
        if let Some(v) = u.size {
            self.size.store(v, Relaxed);
        }
        if let Some(b) = u.blocks {
            self.blocks.store(b, Relaxed);
        }
        if u.pages_delta != 0 {
            let b = self.blocks.load(Relaxed) as i64 + u.pages_delta * (PAGE as i64 / 512);
            self.blocks.store(b.max(0) as u64, Relaxed);
        }
        self.store_times(&u.times);
        self.seq.write_end();
    }

    /// Stores `t`. Its change time is a change's stamp, made fine-grained if need be
    /// ([`Inode::change_stamp`]); an access or modification time that the caller gave the
    /// same stamp (`Times::modify`, `utimensat`'s `UTIME_NOW`) takes the same one.
    fn store_times(&self, t: &Times) {
        let (mut atime, mut mtime) = (t.atime, t.mtime);
        if let Some(c) = t.ctime {
            let stamp = self.stamp_change(c);
            if stamp != c {
                for v in [&mut atime, &mut mtime] {
                    if *v == Some(c) {
                        *v = Some(stamp);
                    }
                }
            }
        }
        if let Some(v) = atime {
            self.times.store(ATIME, v);
        }
        if let Some(v) = mtime {
            self.times.store(MTIME, v);
        }
    }

    /// The stamp a change made at `t` (a coarse stamp: `Timespec::now_coarse`) gives this
    /// inode's change time: `t`, unless a `stat` read the change time since it was set
    /// and `t` is no later than it, so that the change would not show; then a
    /// fine-grained stamp (see [`FileTimes`], "Multigrain change times"). Called under the
    /// attribute lock, or before taking it by a change that must tell storage its times
    /// first (`utimensat`); the stamp is then stored as it is, unless a racing change
    /// stored a later one meanwhile.
    #[inline]
    pub fn change_stamp(&self, t: Timespec) -> Timespec {
        #[cfg(loom)]
        if self.times.broken.load(Relaxed) == BROKEN_IGNORE_MARK {
            return t;
        }
        // The mark alone first: an unread change time (the common case) needs no more.
        if self.times.nsec[CTIME].load(Relaxed) & QUERIED == 0 {
            return t;
        }
        let (cur, nsec) = self.times.ctime_marked();
        if nsec & QUERIED == 0 || t > cur {
            t
        } else {
            Timespec::now_fine_change()
        }
    }

    /// Stores the change time of a change made at `t`, as [`Inode::change_stamp`] makes it,
    /// and returns it; the caller holds the attribute lock, in a sequence-counter section.
    #[inline]
    fn stamp_change(&self, t: Timespec) -> Timespec {
        let stamp = self.change_stamp(t);
        self.times.store(CTIME, stamp);
        stamp
    }

    /// A directory gained (`delta > 0`) or lost entries at time `t`: size, mtime, ctime.
    pub fn dir_changed(&self, delta: i64, t: Timespec) {
        let _g = self.attr_lock.lock();
        self.seq.write_begin();
        let s = self.size.load(Relaxed) as i64 + delta * DIRENT_SIZE as i64;
        self.size.store(s.max(0) as u64, Relaxed);
        let t = self.stamp_change(t);
        self.times.store(MTIME, t);
        self.seq.write_end();
    }

    /// Sets timestamps.
    pub fn touch(&self, t: Times) {
        self.update(&AttrUpdate {
            times: t,
            ..Default::default()
        });
    }

    /// Takes a hold on the contents (for an open description or a new first link), unless
    /// the inode was evicted. Like a reference count with a dead state: zero is final.
    pub fn hold(&self) -> bool {
        self.holds
            .fetch_update(Acquire, Relaxed, |n| (n > 0).then_some(n + 1))
            .is_ok()
    }

    /// Whether the inode was evicted (its holds reached zero, which is final). A reader
    /// that read the contents without a hold of its own (`Process::read_pinned`) checks
    /// this after it let go of the contents' lock: an eviction whose clearing it saw, it
    /// sees here (the clearing takes that lock after the last hold went).
    #[inline]
    pub(crate) fn evicted(&self) -> bool {
        self.holds.load(Acquire) == 0
    }

    /// Whether an open description holds the inode (more holds than its links' one; racy:
    /// the cache's sweep reads it with the directory's lock held, which a listing takes
    /// after its description's hold).
    pub(crate) fn is_open(&self) -> bool {
        self.holds.load(Acquire) > 1
    }

    /// Gives a hold back; `true` for the last one: the caller evicts the inode
    /// (`SuperBlock::release`, which calls the file system's `evict`).
    #[must_use = "the caller of the last release evicts the inode"]
    pub fn release(&self) -> bool {
        let prev = self.holds.fetch_sub(1, AcqRel);
        debug_assert!(prev > 0, "released an evicted inode");
        prev == 1
    }

    /// Adds `delta` to the link count and sets ctime.
    pub fn add_links(&self, delta: i32, now: Option<Timespec>) -> u32 {
        let _g = self.attr_lock.lock();
        self.seq.write_begin();
        let n = (self.nlink.load(Relaxed) as i64 + delta as i64).max(0) as u32;
        self.nlink.store(n, Relaxed);
        if let Some(t) = now {
            self.stamp_change(t);
        }
        self.seq.write_end();
        n
    }

    /// Takes one link away and sets ctime; `true` if that was the last (from one to none):
    /// the caller gives the links' hold back. A count already at zero stays there and
    /// answers `false`, so the hold is given back once: a file system that revalidates
    /// refreshes the count from storage, and another writer may have removed names the
    /// engine still caches, so the engine can unlink more names than its count says.
    ///
    /// The last link of an inode that nothing else holds (no open description, no handle)
    /// gets no new change time: its caller evicts it, and nothing can read it again. This
    /// saves the load of the line the times are on, in every unlink of a file nobody has
    /// open. The caller has already changed the name (its dentry's sequence counter moved),
    /// and an open that found the inode by that name takes its hold, then checks the
    /// counter ([`NewFile::new`](crate::file::NewFile) and the path cache's open). The
    /// check here is a read-modify-write of `holds`, not a load ([`Inode::others_hold`]):
    /// an open whose hold comes after it in `holds`' order synchronizes with it, so sees
    /// the moved counter and gives up; one whose hold comes before is counted here, and
    /// the change time is set. (With a load, each side could miss the other's write: the
    /// open would succeed on an inode whose unlink left its change time as it was: the
    /// loom model `unlink_beside_an_open` has a twin with a load, which fails that way.)
    pub fn drop_link(&self, now: Timespec) -> bool {
        let _g = self.attr_lock.lock();
        self.seq.write_begin();
        let n = self.nlink.load(Relaxed);
        self.nlink.store(n.saturating_sub(1), Relaxed);
        if n != 1 || self.others_hold() {
            self.stamp_change(now);
        }
        self.seq.write_end();
        n == 1
    }

    /// Whether anything but the links holds the contents (an open description, a handle):
    /// read by a read-modify-write, which comes before or after every hold in `holds`'
    /// order (see [`Inode::drop_link`]).
    #[inline]
    fn others_hold(&self) -> bool {
        #[cfg(loom)]
        if self.times.broken.load(Relaxed) == BROKEN_HOLDERS_BY_LOAD {
            return self.holds.load(Acquire) > 1;
        }
        self.holds.fetch_add(0, AcqRel) > 1
    }

    /// Adds a link unless the inode has none left (it was unlinked meanwhile), except for a
    /// linkable `O_TMPFILE` inode (`tmpfile`). Sets ctime. Returns whether it linked.
    pub fn link_if_alive(&self, tmpfile: bool, now: Timespec) -> bool {
        let _g = self.attr_lock.lock();
        let n = self.nlink.load(Relaxed);
        // A first link takes a hold of its own (the caller's description keeps the inode
        // from being evicted meanwhile).
        if n == 0 && (!tmpfile || !self.hold()) {
            return false;
        }
        self.seq.write_begin();
        self.nlink.store(n + 1, Relaxed);
        self.stamp_change(now);
        self.seq.write_end();
        true
    }

    /// Updates atime on read the way `relatime` does: only when atime is not newer than
    /// mtime or ctime, or is more than a day old.
    pub fn read_accessed(&self, now: Timespec) {
        if self.atime_due(now) {
            let _g = self.attr_lock.lock();
            self.seq.write_begin();
            self.times.store(ATIME, now);
            self.seq.write_end();
        }
    }

    /// Whether an access at `now` updates atime under `relatime` (see
    /// [`Inode::read_accessed`]); reads only. An atime already at `now` is not due (as in
    /// Linux's `atime_needs_update`): with coarse stamps, reads in the tick of a write would
    /// otherwise each store the same atime again.
    #[inline]
    pub fn atime_due(&self, now: Timespec) -> bool {
        let a = self.times.load(ATIME);
        a != now
            && (a <= self.times.load(MTIME)
                || a <= self.times.load(CTIME)
                || now.sec - a.sec >= 24 * 3600)
    }

    /// Checks `mask` (a combination of `R_OK`, `W_OK`, `X_OK`) against the mode for
    /// `creds`, like Linux `generic_permission`; uid 0 overrides as `CAP_DAC_OVERRIDE` and
    /// `CAP_DAC_READ_SEARCH` do.
    #[inline]
    pub fn permission(&self, creds: &Creds, mask: Access) -> Result<()> {
        let mode = self.mode.load(Relaxed);
        let m = mask.bits() & 7;
        if creds.uid == 0 {
            // Root may read and write anything, search any directory, and execute a file
            // only if some execute bit is set.
            if m & 1 == 0 || mode & S_IFMT == S_IFDIR || mode & 0o111 != 0 {
                return Ok(());
            }
            return Err(Errno::EACCES);
        }
        let bits = if creds.uid == self.uid.load(Relaxed) {
            (mode >> 6) & 7
        } else if creds.in_group(self.gid.load(Relaxed)) {
            (mode >> 3) & 7
        } else {
            mode & 7
        };
        if bits & m == m {
            Ok(())
        } else {
            Err(Errno::EACCES)
        }
    }

    /// Search permission on a directory, the check done for every component of a walk.
    #[inline]
    pub fn may_search(&self, creds: &Creds) -> Result<()> {
        let mode = self.mode.load(Relaxed);
        // Fast path: everyone may search.
        if mode & 0o001 != 0 && mode & 0o111 == 0o111 {
            return Ok(());
        }
        self.permission(creds, Access::X_OK)
    }
}

impl std::fmt::Debug for Inode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Inode({}, {:o})", self.ino, self.mode())
    }
}

#[cfg(all(test, not(loom)))]
mod layout_tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// The `InodeArc` header (one count) precedes the inode in its allocation.
    const ARC_HEADER: usize = 8;

    /// The allocation is 128 bytes, and what the walk and `read` check (type, permission
    /// bits, owner, group, size) is on line 1, off line 0, which the reference counts
    /// and the contents' locks write ("Inode" above).
    #[test]
    #[cfg_attr(
        miri,
        ignore = "under Miri the locks are std's (sync.rs, `miri_locks`), of other sizes"
    )]
    fn counts_and_attributes_do_not_share_a_line() {
        assert_eq!(size_of::<Contents>(), 24);
        assert_eq!(ARC_HEADER + size_of::<Inode>(), 128);
        for (name, field) in [
            ("seq", offset_of!(Inode, seq)),
            ("mode", offset_of!(Inode, mode)),
            ("uid", offset_of!(Inode, uid)),
            ("gid", offset_of!(Inode, gid)),
            ("size", offset_of!(Inode, size)),
            ("times", offset_of!(Inode, times)),
        ] {
            assert!(ARC_HEADER + field >= 64, "{name} at {field}");
        }
        // What an open, a read and a close write: with the `InodeArc`'s count, on line 0.
        for (name, field, size) in [
            ("holds", offset_of!(Inode, holds), 4),
            ("the start of contents", offset_of!(Inode, contents), 8),
        ] {
            assert!(ARC_HEADER + field + size <= 64, "{name} at {field}");
        }
    }

    /// mimalloc serves an inode's allocation (128 bytes, 8-aligned) 128-byte aligned, so
    /// that its two lines are "Inode"'s line 0 and line 1, as a pair.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "Miri's allocator gives a block only the alignment asked for"
    )]
    fn mimalloc_serves_inodes_as_a_line_pair() {
        let layout = std::alloc::Layout::from_size_align(
            ARC_HEADER + size_of::<Inode>(),
            std::mem::align_of::<Inode>(),
        );
        crate::assert_binary_allocator_aligns(layout.unwrap(), 128);
    }

    /// The type bits of the mode must say what the contents hold: `is_dir` and
    /// `symlink_target` ask the mode. An inode built with a directory's mode and a file's
    /// contents is refused where debug assertions are on (the `checked` profile).
    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "mode and contents disagree")]
    fn a_mode_that_disagrees_with_the_contents_is_refused() {
        let t = Timespec { sec: 5, nsec: 0 };
        let _ = Inode::new(7, S_IFDIR | 0o755, 0, 0, Contents::Special(0), t);
    }

    /// A symlink and a directory are told by their modes, whatever else they hold.
    #[test]
    fn the_type_is_read_from_the_mode() {
        let t = Timespec { sec: 5, nsec: 0 };
        let link = Inode::new(
            7,
            S_IFLNK | 0o777,
            0,
            0,
            Contents::Symlink(b"x".to_vec().into()),
            t,
        );
        assert_eq!(link.symlink_target(), Some(&b"x"[..]));
        assert!(!link.is_dir());
        let file = Inode::new(8, S_IFREG | 0o644, 0, 0, Contents::Special(0), t);
        assert_eq!(file.symlink_target(), None);
        assert!(!file.is_dir());
        let dir = Inode::new(9, S_IFDIR | 0o755, 0, 0, Contents::empty_dir(), t);
        assert!(dir.is_dir() && dir.dir().is_some());
        assert_eq!(dir.symlink_target(), None);
    }

    /// Unlinks past the count (names a writer behind the engine removed, still cached)
    /// give the links' hold back once: the count stays at zero and says so.
    #[test]
    fn the_last_link_goes_once() {
        let t = Timespec { sec: 5, nsec: 0 };
        let i = Inode::new(7, S_IFREG | 0o644, 0, 0, Contents::Special(0), t);
        i.add_links(1, None);
        assert!(!i.drop_link(t));
        assert!(i.drop_link(t));
        assert!(!i.drop_link(t));
        assert_eq!(i.nlink(), 0);
        assert!(i.release());
        assert!(!i.hold());
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    /// A file with all times `t`, whose protocols break as `broken` says (0: none).
    fn model_file(t: Timespec, broken: u8) -> InodeArc {
        let i = InodeArc::new(Inode::new(
            2,
            S_IFREG | 0o644,
            0,
            0,
            Contents::Special(0),
            t,
        ));
        i.times.broken.store(broken, Relaxed);
        i
    }

    /// The multigrain protocol (see [`FileTimes`]): a `stat` reads the change time and marks
    /// it read, outside the attribute lock, while one change runs beside it and another
    /// starts after the `stat` returned. The coarse clock gives both changes the stamp
    /// `T2`, the latest it handed out. Then no `stat` sees a change time that no change
    /// stored (a torn or lost mark), and the change that followed the `stat` shows in the
    /// change time. Returns whether any execution broke either.
    fn stat_beside_changes(broken: u8) -> bool {
        const T: Timespec = Timespec { sec: 100, nsec: 0 };
        const T2: Timespec = Timespec {
            sec: 101,
            nsec: 500,
        };
        crate::sync::loom_violated(3, move || {
            let i = model_file(T, broken);
            let a = {
                let i = i.clone();
                thread::spawn(move || i.stat(0).ctime)
            };
            let b = {
                let i = i.clone();
                thread::spawn(move || i.touch(Times::change(T2)))
            };
            // The change below starts after the `stat` returned (the join orders them).
            let read = a.join().unwrap();
            let before = i.stat(0).ctime;
            let mut bad = before != T && before != T2;
            i.touch(Times::change(T2));
            b.join().unwrap();
            bad |= i.stat(0).ctime == read;
            bad
        })
    }

    /// An unlink of a file's last name beside an open of it by that name (the path cache's
    /// open: a hold, then the name's sequence counter checked, as `NewFile::new` and
    /// `OpenIfUnmoved` do). The unlink changes the name, then drops the link, and gives the
    /// links' hold back. If the open succeeds, it has the file open across the unlink, so
    /// the unlink must have set its change time. Returns whether any execution broke that.
    fn unlink_and_open(broken: u8) -> bool {
        const T: Timespec = Timespec { sec: 100, nsec: 0 };
        const T2: Timespec = Timespec { sec: 101, nsec: 0 };
        crate::sync::loom_violated(3, move || {
            let i = model_file(T, broken);
            // The name's counter, as the open's walk (or cache entry) recorded it.
            let name = Arc::new(crate::sync::SeqCount::default());
            let start = name.read_begin().unwrap();
            let unlink = {
                let (i, name) = (i.clone(), name.clone());
                thread::spawn(move || {
                    name.write_begin();
                    name.write_end();
                    if i.drop_link(T2) {
                        let _ = i.release();
                    }
                })
            };
            let opened = i.hold() && {
                let unmoved = !name.read_retry(start);
                if !unmoved {
                    let _ = i.release();
                }
                unmoved
            };
            unlink.join().unwrap();
            opened && i.stat(0).ctime != T2
        })
    }

    #[test]
    fn unlink_beside_an_open() {
        assert!(!unlink_and_open(0));
    }

    /// Twin: other holders read by a load can miss the open's hold while the open misses
    /// the unlink's name change.
    #[test]
    fn unlink_reading_holders_by_a_load_fails() {
        assert!(
            unlink_and_open(BROKEN_HOLDERS_BY_LOAD),
            "the model missed an open file whose unlink left its change time"
        );
    }

    #[test]
    fn multigrain_stat_beside_changes() {
        assert!(!stat_beside_changes(0));
    }

    /// Twin: a mark stored as what the `stat` read, not or-ed in, can put back the
    /// nanoseconds a racing change replaced.
    #[test]
    fn multigrain_mark_by_store_fails() {
        assert!(
            stat_beside_changes(BROKEN_MARK_BY_STORE),
            "the model missed a lost update of the change time"
        );
    }

    /// Twin: a change that ignores the mark can store the very stamp a `stat` just read.
    #[test]
    fn multigrain_ignoring_the_mark_fails() {
        assert!(
            stat_beside_changes(BROKEN_IGNORE_MARK),
            "the model missed a change that does not show"
        );
    }
}
