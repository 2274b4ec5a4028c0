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
//! # Complete and loaded directories
//! memfs (`memfs`) keeps every directory complete in the dentry cache from its creation,
//! so a miss under the directory lock is authoritative and it is never asked what a
//! directory holds. A file system whose objects live elsewhere (a host directory, a SQL
//! store) says so ([`FileSystem::complete`] is false) and hands out directories marked
//! *unloaded* (`DirState::unloaded`). The first call that needs what one holds (a locked
//! lookup, a listing, or any change in it) loads it, all at once
//! ([`FileSystem::load_dir`]: for a store whose every miss is a round trip, one query per
//! directory instead of one per name). From then on the directory is complete like
//! memfs's: misses are authoritative (cached as negative entries), listings come from the
//! cache, and the fast walk serves it without locks.
//!
//! The load protocol ([`SuperBlock::load`]): under the directory lock, the first caller
//! sets `loading` and becomes the loader; it drops the lock and asks the file system with
//! no lock held; then it installs every entry under the lock, clears `unloaded`, and wakes
//! the others, who waited in a hashed wait table (`icache::Waiters`) without holding
//! anything. Nothing can change an unloaded directory meanwhile, since every change loads
//! first, so the answer needs no validation. A failed load is its caller's error; a
//! panicked one is ended by a guard; either way the directory stays unloaded and the next
//! caller loads again (loom: `fs::loom_models`; the directory mutex is `sync`'s, so
//! loom sees it).
//!
//! # Bounded caches
//! A file system that is not complete may cap its dentries ([`CacheOptions::max_dentries`];
//! hostfs's `max_dentries`/`max_inodes`). Past the cap, a *sweep* evicts names that nobody
//! uses, CLOCK-style: every dentry has a reference bit (`dentry::REFERENCED`), set at
//! creation and by any lookup that finds it clear (so a hot name costs no write, and memfs,
//! never swept, none at all); the sweep clears set bits and evicts names whose bit was
//! already clear, over the loaded directories, deepest first, until an eighth of the cap is
//! free (a second lap if the first only cleared bits). The sweep finds the directories by
//! their parents' children, and looks through a directory's children for subdirectories
//! only when it has some (`DirState::subdirs`, kept by the dentry hash beside `positive`,
//! and checked against the children in debug builds). It tells a directory from another
//! name by the dentry's own flag (`dentry::DIR`, kept with its inode pointer), so it reads
//! one line per child and no inode (reading each child's inode was half of a sweep's time
//! in a capped W5). There is no global lock on the
//! lookup path: the sweep takes one directory lock at a time, and a caller that finds a
//! sweep running goes on without it.
//! - A sweep evicts from the directories its own thread loaded first (`DirState::loader`,
//!   the loader's `sync::thread_tag`; both laps, down to the low mark), and from every
//!   directory only what still keeps the cache over its cap: the last eighth is the
//!   sweeping thread's to free, and a thread short of it sweeps again sooner rather than
//!   take another's names. The cap is the file system's, but the threads that load are the
//!   ones that sweep, and each evicts what it loaded, as Linux's shrinkers scan the LRU
//!   list of the node under pressure: threads that load trees of their own neither write
//!   each other's dentries and directory states at a sweep, nor free to each other's
//!   heaps, nor hand each other the numbers of objects to trim (hostfs keeps those per
//!   thread as well). A thread whose names are all in use, or that loaded nothing, still
//!   brings the cache back under its cap from everyone's.
//! - Only non-directories and negative entries are evicted ([`DHash::d_evict`]: one CAS
//!   from "only the hash holds it" to dead, so a name held by a walk, an open directory, a
//!   working directory or a thread's path cache stays). Directories stay cached, with their
//!   children swept: code that holds a directory's dentry without a reference may rely on
//!   it staying hashed, as before. So the cap bounds the names in directories, plus the
//!   directories themselves, plus what threads' path caches hold (2,048 per thread).
//! - A directory that loses a positive child is marked unloaded again: its next miss
//!   under the lock loads it, and the load skips the names still cached. The fast walk
//!   never trusted a chain miss, so it needs no change: it retries, and the locked walk
//!   loads.
//! - A directory that is open is not swept, so a listing read in pieces never sees an
//!   entry twice; nor is one loaded since the last sweep started (`DirState::loaded_at`), so
//!   a caller that loads two or three directories and then locks them (rename, rmdir) does
//!   not find the first unloaded by a sweep made for the next. Calls that lock directories
//!   without [`SuperBlock::lock_dir`] (rename, rmdir) check `unloaded` once they hold the
//!   locks, and load again if a sweep got there first.
//! - Sweeps run before a directory is locked through [`SuperBlock::lock_dir`], with no lock
//!   held; never inside a load.
//! - A sweep that frees nothing and leaves the cache over its cap, though it passed over no
//!   directory for being new (so all that is left is in use: the children of open
//!   directories, names held by walks or path caches) sets a floor (`sweep_floor`): the next sweep
//!   waits until the cache has grown by an eighth of the cap. Without it, while a directory
//!   larger than the cap was open, every locked call (two per missed lookup) ran a sweep
//!   over the whole cache that freed nothing. The next sweep that frees a name clears the
//!   floor, and so does the last close of a directory (whose children the floor counted
//!   as in use: a directory of a million names, listed and closed, does not stay cached
//!   until the cache grows past it).
//! - An evicted dentry's memory and its inode reference go after a grace period; the file
//!   system may then drop the object (hostfs trims its inode cache of objects only it
//!   holds). Loom: `dentry::loom_models::eviction_races_a_lockless_hold`, with the twin
//!   that checks the count and then drops.
//!
//! # Names one at a time
//! Loading a directory whole suits a store whose every miss is a round trip, but not a
//! directory larger than a capped cache: it would hold the whole directory past the cap
//! until a sweep, and after each sweep the next miss would list it whole again (a scan of
//! its names was quadratic). So a file system that can answer for one name
//! ([`FileSystem::looks_up_names`]; hostfs) does, where the cache is capped and keeps no
//! TTL (`SuperBlock::by_name`):
//! - A lookup ([`SuperBlock::lock_named`], from the locked walk) in a directory not loaded
//!   loads it whole as before, unless it holds more names than a quarter of the dentry
//!   cap ([`FileSystem::load_dir_within`]: hostfs counts the names as it reads them, and
//!   stops before it looks at any object): then nothing is installed, and the directory
//!   is marked `DirState::big`.
//!   In a big directory not loaded, a lookup of a name the cache does not hold asks
//!   [`FileSystem::lookup`] for that name alone and caches the answer (a positive entry,
//!   or a negative one); a listing or a change still loads the directory whole, and the
//!   load skips the names already cached. The sweep then keeps the cache within its cap.
//! - The ask follows the load protocol: one caller per directory at a time (`loading`),
//!   no lock held; for a file system whose lookups are slow
//!   ([`FileSystem::quick_lookups`] false) the call is made after the operation let its
//!   guard go (`unpin`); hostfs's (one `fstatat`) are made in place.
//! - The answer needs no validation for the reason a load's needs none: nothing changes
//!   a directory not loaded, nor one being loaded.
//! - A missing name whose negative entry the cap on negative entries refuses is kept as
//!   this thread's last answer ([`Absent`]), which the same thread may trust while the
//!   directory is still not loaded and no sweep has started since: the directory changes
//!   only once loaded, and is unloaded again only by a sweep that started after its load.
//!   Without it the operation, started again, would ask for ever.
//!
//! # Revalidation
//! A file system whose storage others may change (hostfs's shared policy) gives a TTL
//! ([`CacheOptions::ttl`]). Each inode then carries a deadline (`Inode::expired`, 32 bits
//! of a 10 ms clock since the [`SuperBlock`] was made, in what was padding), set when it is
//! loaded or revalidated: for a directory it covers its entries and attributes, for any
//! other object its attributes. A directory's listing sets the deadlines of the
//! non-directories it lists, never of a child directory, whose entries only its own
//! revalidation vouches for (`vouch`).
//! - The fast walk reads each deadline it relies on (the directories it searches, the
//!   object it ends at) and falls back when one is past; it never calls the file system,
//!   as Linux's RCU walk returns `-ECHILD` from `d_revalidate`. The clock is read only when
//!   the file system has a TTL: memfs and the exclusive policy pay a branch per
//!   component. A walk through such a file system is never kept in a path cache, whose
//!   entries no deadline covers (`walk::Walked::cacheable`).
//! - The locked walk revalidates: a directory through [`SuperBlock::load`], which, for a
//!   loaded directory past its deadline (or marked `DirState::stale`), asks
//!   [`FileSystem::revalidate_dir`] with the same protocol as a first load (one caller per
//!   directory sets `loading`, asks with no lock held, and installs the answer under the
//!   lock: `SuperBlock::reconcile` replaces, forgets and adds names); any other object
//!   through [`FileSystem::revalidate_attr`], by the name it was found by. A name that now
//!   names another object marks its directory stale, and the walk runs again: the
//!   directory's next lock lists it again, whatever its times say, so the retry makes
//!   progress. [`SuperBlock::lock_dir`] revalidates a directory past its deadline too.
//!   A file system that keeps contradicting itself (a listing that gives the name an
//!   object that its revalidation then disowns, round after round) would make the locked
//!   walk run again forever: each thread counts the directories it marks stale
//!   ([`stale_marks`]), and a locked walk that saw [`MAX_STALE_MARKS`] of them gives up with
//!   `ESTALE`, as Linux gives up on a name that NFS keeps finding stale.
//! - `fstat` of what a caller holds open revalidates its attributes past their deadline
//!   ([`FileSystem::revalidate_held`]); a directory's deadline stays, since it also covers
//!   the entries, which only a listing revalidates.
//! - While a revalidation is under way (`loading` set, the lock dropped), nothing changes
//!   the directory: `lock_dir` waits for it, and the calls that lock several directories
//!   themselves (rename, rmdir) check `SuperBlock::settled` once they hold them.
//! - A directory removed in storage is found so when its name goes (its link count, read
//!   by the file system in [`FileSystem::forget_name`]): it is then emptied and marked dead
//!   at its next use, and stats like an rmdir'ed one. A dead directory is never
//!   revalidated.
//! - Errors: a revalidation's error is the caller's; `ESTALE` (an object that left the
//!   file system's cache) is `ENOENT`, as for a removed directory.
//!
//! The trait stays crate-private until the host backend settles its shape: the methods to
//! come are the namespace changes and data I/O that such a file system must carry out
//! itself.
//!
//! # Lock order
//! `SuperBlock::rename_lock` is taken before any directory lock (see `process`), and is
//! dropped before a rename waits for a directory's load. A loader holds no lock while the
//! file system answers, and, inside a path operation, no epoch guard either: the load is
//! recorded and made between the operation's attempts (`unpin`; `SuperBlock::load`). A waiter checks `loading` under its wait queue's lock, taking the
//! directory lock inside it (wait queue, then directory); a loader never holds the
//! directory lock while it takes the wait queue's. The negative-entry count is striped
//! and its verdict cached in an atomic flag that each thread re-checks every `NEG_RECHECK`
//! admissions.
//!
//! # What protects each field
//! `DirState::unloaded`, `DirState::loading`, `DirState::stale`, `DirState::loaded_at`
//! and `DirState::big` are read and written only under the directory lock. [`Absent`] is
//! thread-local. An inode's deadline is a relaxed
//! atomic outside every lock: it is advice, read by the fast walk to decide whether to
//! fall back and written after each load or revalidation; a reader that sees an old value
//! either revalidates once more or answers from entries that were valid within the TTL. `sweeping` (one sweeper at a time), `sweeps`,
//! `sweep_floor` (written only by the sweeper) and `evicted` are atomics; a dentry's reference bit is set lock-free and cleared under its
//! parent's lock. The other fields of [`SuperBlock`] are immutable after it is made,
//! or atomic (the negative-entry count and flag), or locks themselves.
//!
//! # Reclamation
//! A `SuperBlock` lives as long as its last holder: the `Vfs` it is the root of, each
//! [`Mount`](crate::mount::Mount) of it, and each open file (through its mount). When it
//! goes, it tears its dentry hash down; the dentries wait for an epoch grace period like
//! any other (see `dentry`).

use crate::dentry::{DHash, DPtr, DRef, DeadBatch, Dentry, DIR, MOUNTED, ROOT, UNHASHED};
use crate::errno::{Errno, Result};
use crate::icache::Waiters;
use crate::inode::InodeArc;
use crate::inode::{DirState, Inode};
use crate::name::scan;
use crate::sync::StripedCounter;
use crate::sync::{Mutex, MutexGuard};
use crate::types::{StatFs, Timespec, XattrFlags};
use crate::unpin::{self, Call};
use crossbeam_epoch::Guard;
use std::cell::Cell;
use std::mem::ManuallyDrop;
use std::os::fd::BorrowedFd;
use std::ptr::NonNull;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;

/// What a directory holds, as a file system lists it: each entry's name and inode.
///
/// The names share one buffer, so that a listing of a thousand names is two allocations,
/// not a thousand and one (hostfs lists into it the buffer its `getdents64` pass filled):
/// a capped hostfs loads every directory it comes back to again, and each allocation made
/// there is one more free later, often on another thread.
#[derive(Default)]
pub(crate) struct Listing {
    /// The names' bytes (and whatever else the lister left between them).
    names: Vec<u8>,
    /// Each entry: where its name is in `names`, and its inode.
    entries: Vec<(std::ops::Range<usize>, InodeArc)>,
}

impl Listing {
    /// A listing whose entries name ranges of `names`.
    ///
    /// # Panics
    /// If a range is not within `names` (a bug of the caller's): here in debug builds, in
    /// [`Listing::for_each`] otherwise.
    pub(crate) fn over(
        names: Vec<u8>,
        entries: Vec<(std::ops::Range<usize>, InodeArc)>,
    ) -> Listing {
        // Indexing `names` checks each range again when the entries are handed out.
        debug_assert!(entries
            .iter()
            .all(|(at, _)| at.start <= at.end && at.end <= names.len()));
        Listing { names, entries }
    }

    /// Adds `name` (copied) naming `inode`.
    pub(crate) fn push(&mut self, name: &[u8], inode: InodeArc) {
        let start = self.names.len();
        self.names.extend_from_slice(name);
        self.entries.push((start..self.names.len(), inode));
    }

    /// How many entries there are.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Hands each entry's name and inode to `f`, in the order they were added.
    pub(crate) fn for_each(self, mut f: impl FnMut(&[u8], InodeArc)) {
        let Listing { names, entries } = self;
        for (at, inode) in entries {
            f(&names[at], inode);
        }
    }
}

impl FromIterator<(Vec<u8>, InodeArc)> for Listing {
    fn from_iter<I: IntoIterator<Item = (Vec<u8>, InodeArc)>>(iter: I) -> Listing {
        let mut l = Listing::default();
        for (name, inode) in iter {
            l.push(&name, inode);
        }
        l
    }
}

/// What the engine asks of a file system, beyond the dentry cache it keeps for it.
///
/// Each method is called with no engine lock held unless it says otherwise, and may be
/// called from any number of threads at once.
pub(crate) trait FileSystem: Send + Sync + 'static {
    /// The root directory's inode; called once, when the [`SuperBlock`] is made.
    fn root_inode(&self) -> InodeArc;

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
    ) -> Result<InodeArc>;

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

    /// Whether every directory is complete in the dentry cache from its creation, so the
    /// file system is never asked what one holds (memfs). Otherwise the directories it
    /// hands out are *unloaded* (`DirState::unloaded`) until their first use, when
    /// [`FileSystem::load_dir`] fills them.
    fn complete(&self) -> bool {
        true
    }

    /// What the unloaded directory `dir` holds: each entry's name (one component: not
    /// empty, no `/`, not `.` or `..`, at most `NAME_MAX` bytes) and inode; directories
    /// among them start unloaded. Called with no lock held, by one caller at a time per
    /// directory (the others wait for it); a failure is returned to that caller and the
    /// directory stays unloaded, so the next use asks again.
    ///
    /// Errors: whatever the file system's storage says (`EIO`, `EACCES`, `ENOMEM`, ...).
    fn load_dir(&self, dir: &Inode) -> Result<Listing> {
        let _ = dir;
        Err(crate::errno::Errno::EIO)
    }

    /// [`FileSystem::load_dir`], unless `dir` holds more than `max` names: then `None`,
    /// and the file system may tell so without looking at its objects (hostfs counts the
    /// names as it reads them, before it looks at any object). Called as `load_dir` is,
    /// by a lookup in a file system that [`FileSystem::looks_up_names`] (see "Names one
    /// at a time").
    ///
    /// Errors: those of `load_dir`.
    fn load_dir_within(&self, dir: &Inode, max: usize) -> Result<Option<Listing>> {
        let listing = self.load_dir(dir)?;
        Ok((listing.len() <= max).then_some(listing))
    }

    /// Whether the file system answers for one name at a time ([`FileSystem::lookup`]).
    /// The engine then asks it so, rather than load a whole directory, where its cache is
    /// capped and keeps no TTL (see "Names one at a time"). Read once.
    fn looks_up_names(&self) -> bool {
        false
    }

    /// What the name `name` in the directory `dir` is (`None`: nothing), for a file system
    /// that [`FileSystem::looks_up_names`]: `name` is one component (not empty, no `/` or
    /// NUL, not `.` or `..`, at most `NAME_MAX` bytes), and the inode returned is the one
    /// a listing of `dir` would give for it. Called with no lock held, by one caller at a
    /// time per directory (as [`FileSystem::load_dir`]), while `dir` is not loaded.
    ///
    /// Errors: storage's (`EIO`, `EACCES`, ...); `ENOSYS` if the file system does not look
    /// names up one at a time.
    fn lookup(&self, dir: &Inode, name: &[u8]) -> Result<Option<InodeArc>> {
        let _ = (dir, name);
        Err(Errno::ENOSYS)
    }

    /// Whether [`FileSystem::lookup`] is quick (a local system call or two: microseconds),
    /// so that the engine may ask it where the caller is, with its epoch guard pinned,
    /// rather than let the operation go and start again (see `unpin`). A store whose
    /// every answer is a round trip says no. Read once.
    fn quick_lookups(&self) -> bool {
        false
    }

    /// For a file system with a TTL policy ([`CacheOptions::ttl`]): whether the loaded
    /// directory `dir` changed in storage since it was last loaded or revalidated, and if
    /// so, all it holds now, as [`FileSystem::load_dir`] gives it (`None`: unchanged, and
    /// the cached entries stay). With `force`, a listing is wanted whatever storage's
    /// change marks say (a name the engine knew was found gone). The file system refreshes
    /// `dir`'s attributes, and those of the objects it lists, to what storage says. Called
    /// like `load_dir`: no lock held, one caller at a time per directory.
    ///
    /// Errors: storage's; `ENOENT` for a directory removed behind the engine.
    fn revalidate_dir(&self, dir: &Inode, force: bool) -> Result<Option<Listing>> {
        let _ = (dir, force);
        Ok(None)
    }

    /// For a file system with a TTL policy: refreshes the attributes of `inode` (not a
    /// directory), which the caller found as `name` in the loaded directory `dir`, from
    /// storage. `false`: `name` now names another object, or nothing, so `dir` is stale.
    /// Called with no lock held.
    ///
    /// Errors: storage's.
    fn revalidate_attr(&self, dir: &Inode, name: &[u8], inode: &Inode) -> Result<bool> {
        let _ = (dir, name, inode);
        Ok(true)
    }

    /// For a file system with a TTL policy: refreshes the attributes of `inode`, which a
    /// caller holds open (a descriptor or a handle; `fstat`), from storage. `data` is the
    /// description's data descriptor ([`FileSystem::open_data`]'s), if it has one. The
    /// object may have lost its names meanwhile and still be the object the caller holds:
    /// an object storage no longer reaches (no descriptor, and its name gone) keeps the
    /// attributes the engine has. Called with no lock held.
    ///
    /// Errors: storage's, for an object it still reaches.
    fn revalidate_held(&self, inode: &Inode, data: Option<BorrowedFd<'_>>) -> Result<()> {
        let _ = (inode, data);
        Ok(())
    }

    /// The name `name` of `victim` in `dir` went behind the engine's back (a revalidation
    /// found it gone or naming another object), and the engine forgot it. For a directory,
    /// the file system refreshes `victim`'s attributes if it can: a link count of zero
    /// tells the engine it was removed, not moved, so that a caller standing in it finds it
    /// empty and dead without asking again. Called with `dir`'s lock held; takes no
    /// directory lock.
    fn forget_name(&self, dir: &Inode, name: &[u8], victim: &Inode) {
        let _ = (dir, name, victim);
    }

    /// A sweep of the dentry cache evicted names of the inodes numbered `inos` (see
    /// [`SuperBlock::shrink`]): a file system with a cache of its own may let these objects
    /// go once nothing else holds them, and look at them before any other. Only a hint:
    /// an evicted name gives its reference on its inode back a grace period later, and a
    /// new lookup may name the object again meanwhile. Called after the sweep, with no
    /// lock held.
    fn names_evicted(&self, inos: Vec<u64>) {
        let _ = inos;
    }

    /// Whether nothing may change (a read-only mount: Linux `MS_RDONLY`). The call layer
    /// then refuses every change with `EROFS`, at the point where Linux's
    /// `mnt_want_write` would, and [`FileSystem::new_inode`] is never called.
    fn read_only(&self) -> bool {
        false
    }

    /// Opens the data of `inode`, a `Contents::Stored` regular file, for reading and, if
    /// `write`, for writing: a host descriptor the open description keeps until it is
    /// closed. Called with no lock held, when a description of the file is opened (not for
    /// `O_PATH`), so that its data stays reachable after its names go.
    ///
    /// Errors: the storage's (`EACCES`, `EIO`, `ESTALE` if the object is gone).
    fn open_data(&self, inode: &Inode, write: bool) -> Result<std::os::fd::OwnedFd> {
        let _ = (inode, write);
        Err(crate::errno::Errno::EIO)
    }

    /// The counters of the inode cache, for a file system that keeps one.
    fn inode_cache_stats(&self) -> Option<crate::icache::InodeCacheStats> {
        None
    }

    /// Whether an inode number may name a new object once the old one is gone (hostfs:
    /// the host's numbers), so that (`st_dev`, `st_ino`) identifies an object only while it
    /// exists. memfs never reuses one.
    fn reuses_inode_numbers(&self) -> bool {
        false
    }

    /// Whether the namespace and attributes live in storage that every change must reach
    /// (hostfs). If so the call layer calls [`FileSystem::create`] for every named create
    /// and the store hooks below ([`FileSystem::remove`], [`FileSystem::rename`],
    /// [`FileSystem::link`], [`FileSystem::set_attr`]) for every change, after each of its
    /// own checks passed and before the dentry cache changes; an error from the hook is the
    /// call's, and nothing changed. Read once, so a file system that keeps everything in
    /// the cache (memfs) pays a branch, not a call.
    fn writes_through(&self) -> bool {
        false
    }

    /// A new inode for `name` in the directory `dir` (`mkdir`, `mknod`, `symlink`,
    /// `open(O_CREAT)`), made in storage: see [`FileSystem::new_inode`] for the rest.
    /// Called with `dir`'s lock held, once the engine's checks passed (the name is free,
    /// the caller may write there).
    ///
    /// Errors: those of [`FileSystem::new_inode`], and the storage's (`ENOSPC`, `EIO`,
    /// `EEXIST` if storage holds a name the cache does not, ...).
    #[allow(clippy::too_many_arguments)]
    fn create(
        &self,
        dir: &Inode,
        name: &[u8],
        mode: u32,
        uid: u32,
        gid: u32,
        rdev: u64,
        target: Option<&[u8]>,
        now: Timespec,
    ) -> Result<InodeArc> {
        let _ = (dir, name);
        self.new_inode(mode, uid, gid, rdev, target, now)
    }

    /// A new regular file without a name, in `dir`'s file system (`O_TMPFILE`): see
    /// [`FileSystem::new_inode`]. A later `link` may give it one. Called with no lock held.
    fn tmpfile(
        &self,
        dir: &Inode,
        mode: u32,
        uid: u32,
        gid: u32,
        now: Timespec,
    ) -> Result<InodeArc> {
        let _ = dir;
        self.new_inode(mode, uid, gid, 0, None, now)
    }

    /// Removes `name`, which names `victim`, from `dir` in storage (`unlink`, or `rmdir`
    /// when `victim` is a directory, which the engine found empty). Called with `dir`'s
    /// lock held (and `victim`'s, for a directory) once every check passed.
    fn remove(&self, dir: &Inode, name: &[u8], victim: &Inode) -> Result<()> {
        let _ = (dir, name, victim);
        Ok(())
    }

    /// Renames `from` to `to` in storage: `moved` is what `from` names, `replaced` what
    /// `to` named (an empty directory if `moved` is one); with `exchange`, the two swap
    /// (`RENAME_EXCHANGE`, `replaced` present). Called with both directories' locks held
    /// (and a replaced directory's) once every check passed.
    fn rename(
        &self,
        from: (&Inode, &[u8]),
        to: (&Inode, &[u8]),
        moved: &Inode,
        replaced: Option<&Inode>,
        exchange: bool,
    ) -> Result<()> {
        let _ = (from, to, moved, replaced, exchange);
        Ok(())
    }

    /// Adds the name `name` in `dir` to `inode` in storage (`link`). Called with `dir`'s
    /// lock held once every check passed.
    fn link(&self, inode: &Inode, dir: &Inode, name: &[u8]) -> Result<()> {
        let _ = (inode, dir, name);
        Ok(())
    }

    /// Changes `inode`'s attributes in storage (`chmod`, `chown`, `utimensat`,
    /// `truncate`, and the set-id bits a write or a `chown` clears). `fd` is the data
    /// descriptor of the description the call came through, if it has one (the object
    /// may have no name left). Called before the engine's inode changes. Returns the
    /// 512-byte blocks the object uses after a size change, where storage reports them.
    fn set_attr(
        &self,
        inode: &Inode,
        attr: &StoreAttr,
        fd: Option<BorrowedFd<'_>>,
    ) -> Result<Option<u64>> {
        let _ = (inode, attr, fd);
        Ok(None)
    }
    /// The value of the extended attribute `name` of `inode`. `name` is whole (its
    /// namespace prefix included: `user.`, `trusted.` or `security.`, then at least one
    /// byte), at most `XATTR_NAME_MAX` bytes, without NUL; the call layer checked the
    /// caller's permissions, and holds the inode (`Inode::hold`). `fd` is the data
    /// descriptor of the description the call came through, if it has one. Called with no
    /// lock held.
    ///
    /// Errors: `ENODATA` (no such attribute); `EOPNOTSUPP` (the file system keeps none);
    /// the storage's.
    fn get_xattr(&self, inode: &Inode, name: &[u8], fd: Option<BorrowedFd<'_>>) -> Result<Vec<u8>> {
        let _ = (inode, name, fd);
        Err(Errno::EOPNOTSUPP)
    }

    /// Sets the extended attribute `name` of `inode` to `value` (at most
    /// `XATTR_SIZE_MAX` bytes; empty is a value): with `XattrFlags::CREATE` only if it
    /// does not exist, with `XattrFlags::REPLACE` only if it does. As
    /// [`FileSystem::get_xattr`] for the rest; the call layer also checked that the file
    /// system is writable, and changes the inode's ctime after a success.
    ///
    /// Errors: `EEXIST`, `ENODATA` (the flags' conditions); `ENOSPC` (no room);
    /// `EOPNOTSUPP`; the storage's.
    fn set_xattr(
        &self,
        inode: &Inode,
        name: &[u8],
        value: &[u8],
        flags: XattrFlags,
        fd: Option<BorrowedFd<'_>>,
    ) -> Result<()> {
        let _ = (inode, name, value, flags, fd);
        Err(Errno::EOPNOTSUPP)
    }

    /// Removes the extended attribute `name` of `inode`: as [`FileSystem::set_xattr`].
    ///
    /// Errors: `ENODATA` (no such attribute); `EOPNOTSUPP`; the storage's.
    fn remove_xattr(&self, inode: &Inode, name: &[u8], fd: Option<BorrowedFd<'_>>) -> Result<()> {
        let _ = (inode, name, fd);
        Err(Errno::EOPNOTSUPP)
    }

    /// The names of `inode`'s extended attributes, each followed by a NUL, in the order
    /// `listxattr` gives them (all of them: the call layer leaves out what the caller may
    /// not see). As [`FileSystem::get_xattr`] for the rest. A file system that keeps none
    /// lists none.
    ///
    /// Errors: the storage's.
    fn list_xattr(&self, inode: &Inode, fd: Option<BorrowedFd<'_>>) -> Result<Vec<u8>> {
        let _ = (inode, fd);
        Ok(Vec::new())
    }
}

/// An attribute change for storage ([`FileSystem::set_attr`]); `None` leaves one alone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct StoreAttr {
    /// Permission and set-id/sticky bits.
    pub(crate) perm: Option<u32>,
    /// Owner.
    pub(crate) uid: Option<u32>,
    /// Group.
    pub(crate) gid: Option<u32>,
    /// Size (a regular file's).
    pub(crate) size: Option<u64>,
    /// Access time, set explicitly (`utimensat`).
    pub(crate) atime: Option<Timespec>,
    /// Modification time, set explicitly (`utimensat`).
    pub(crate) mtime: Option<Timespec>,
}

/// Options of the dentry cache a [`SuperBlock`] keeps for its file system.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CacheOptions {
    /// The dentry hash's first size (see `MemFsOptions::hash_buckets`).
    pub(crate) hash_buckets: usize,
    /// Cap on cached negative entries; `None`: [`NEGATIVE_FLOOR`] plus one per inode.
    pub(crate) max_negative: Option<u64>,
    /// Cap on hashed dentries, for a file system that is not complete (see "Bounded
    /// caches"); `None`: no cap. memfs's dentries are its namespace and are never evicted.
    pub(crate) max_dentries: Option<u64>,
    /// How long what was loaded is trusted before it is revalidated (see "Revalidation");
    /// `None`: forever (the file system owns its storage). Ignored for a complete file
    /// system.
    pub(crate) ttl: Option<std::time::Duration>,
}

/// A load's or revalidation's error as the caller sees it, with a TTL policy: a directory
/// whose object left the file system (`ESTALE`: its last name went, found by another
/// revalidation) is gone, as a removed directory is to a caller still standing in it.
/// (Without a TTL, `ESTALE` tells of a change the file system did not expect.)
fn gone(e: Errno) -> Errno {
    if e == Errno::ESTALE {
        Errno::ENOENT
    } else {
        e
    }
}

/// What a directory's listing (a load or a revalidation, deadline `t`) vouches for in
/// `child`, an object it lists: its attributes, which the file system refreshed. A
/// directory's deadline also covers its own entries, which only its own revalidation can
/// vouch for, so a child directory's is left as it is (a new one's is 0: its first use
/// loads it, and the load sets it). Before this rule, relisting `/` made `/d`'s cached
/// names good for another TTL however stale they were.
fn vouch(child: &Inode, t: Option<u32>) {
    if let (Some(t), false) = (t, child.is_dir()) {
        child.set_valid_until(t);
    }
}

/// The monotonic clock in nanoseconds: `CLOCK_MONOTONIC_COARSE` (a read of the vDSO's
/// page, a few nanoseconds; it moves once per kernel tick, 1 to 10 ms, finer than a TTL's
/// 10 ms ticks), through the C library (whose vDSO call also runs under valgrind), or
/// `Instant` where the system calls are not real (Miri). Read only by file systems with a
/// TTL.
fn clock_ns() -> u64 {
    #[cfg(not(miri))]
    {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `t` is a valid, writable `timespec`, and the clock id a constant.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut t) };
        if rc == 0 {
            return t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64;
        }
        // A kernel without the coarse clock (before Linux 2.6.32): the precise one.
        static BASE: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        BASE.get_or_init(std::time::Instant::now)
            .elapsed()
            .as_nanos() as u64
    }
    #[cfg(miri)]
    {
        static BASE: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        BASE.get_or_init(std::time::Instant::now)
            .elapsed()
            .as_nanos() as u64
    }
}

/// The clock of TTL deadlines ticks every 10 ms.
const TICK: std::time::Duration = std::time::Duration::from_millis(10);

/// The negative entries a file system may cache whatever its size (see
/// [`crate::MemFsOptions::max_negative`]).
pub const NEGATIVE_FLOOR: u64 = 1024;

/// How often (in admissions per thread) the negative-entry count is re-summed.
const NEG_RECHECK: u32 = 64;

/// Wait queues for directory loads, per file system that loads (hashed by directory).
const LOAD_QUEUES: usize = 64;

static NEXT_SB: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// Directories this thread marked stale ([`SuperBlock::mark_stale`]), ever (wrapping).
    static STALE_MARKS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// How many directories this thread has marked stale so far (a wrapping count): a locked
/// walk compares it before and after its rounds (see "Revalidation").
pub(crate) fn stale_marks() -> u32 {
    STALE_MARKS.with(std::cell::Cell::get)
}

/// Directories a locked walk may see marked stale, by its own thread, before it gives up
/// with `ESTALE` (see "Revalidation"). A name the host changes again and again while one
/// call walks to it is rare; a file system that disowns its own answers does it at every
/// round.
pub(crate) const MAX_STALE_MARKS: u32 = 64;

/// A file-system instance as the engine holds it: what [`crate::Vfs::new`] and
/// [`crate::Process::mount`] take, and what [`crate::MemFs::new`] makes. Mounting one
/// instance at several places shares its files, as a bind mount does.
pub struct SuperBlock {
    /// Device number reported in `st_dev` (anonymous, like Linux's: major 0).
    pub dev: u64,
    /// The dentry hash.
    pub(crate) dcache: ManuallyDrop<DHash>,
    root: Option<DRef>,
    /// Serializes renames that move a directory to another parent (loop prevention).
    pub(crate) rename_lock: Mutex<()>,
    negatives: StripedCounter,
    negatives_full: AtomicBool,
    max_negative: Option<u64>,
    /// [`FileSystem::complete`], read once.
    complete: bool,
    /// [`FileSystem::read_only`], read once.
    read_only: bool,
    /// [`FileSystem::writes_through`], read once.
    stores: bool,
    /// [`FileSystem::reuses_inode_numbers`], read once.
    reuses_ino: bool,
    /// Whether a lookup in a directory not loaded asks the file system for the one name
    /// (see "Names one at a time"): [`FileSystem::looks_up_names`], a capped cache, no TTL.
    by_name: bool,
    /// [`FileSystem::quick_lookups`], read once.
    quick_lookups: bool,
    /// Where callers wait for another's load of a directory.
    loads: Waiters,
    /// [`CacheOptions::max_dentries`] (never set for a complete file system).
    max_dentries: Option<u64>,
    /// Set while a sweep runs: one sweeper at a time, and no caller waits for it.
    sweeping: AtomicBool,
    /// Dentries evicted by sweeps.
    evicted: AtomicU64,
    /// Sweeps started (see `DirState::loaded_at`).
    sweeps: AtomicU64,
    /// The dentry count a sweep waits for when the last one freed nothing and left the
    /// cache over its cap; 0 otherwise (see "Bounded caches").
    sweep_floor: AtomicU64,
    /// [`CacheOptions::ttl`] in ticks (see [`SuperBlock::ticks`]).
    ttl: Option<u32>,
    /// When the file system was made, on the monotonic clock ([`clock_ns`]): tick 0.
    born: u64,
    /// Revalidations that asked the file system (see "Revalidation").
    revalidations: AtomicU64,
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
    /// The inode cache's counters, for a file system that keeps one (hostfs).
    pub inode_cache: Option<crate::icache::InodeCacheStats>,
    /// Hashed dentries (positive and negative; the root is not hashed).
    pub dentries: u64,
    /// Dentries evicted to keep the cache within its cap.
    pub dentry_evictions: u64,
    /// Sweeps run to keep the cache within its cap.
    pub sweeps: u64,
    /// Revalidations that asked the file system, with a TTL policy (see `backend`,
    /// "Revalidation"): of a directory's entries, or of an object's attributes.
    pub revalidations: u64,
}

impl SuperBlock {
    /// The engine's state for the file system `ops`, with an empty dentry cache but for
    /// the root.
    pub(crate) fn new(ops: Box<dyn FileSystem>, opts: CacheOptions) -> Arc<SuperBlock> {
        let id = NEXT_SB.fetch_add(1, Relaxed);
        let root = DHash::d_alloc_root(ops.root_inode());
        Arc::new(SuperBlock {
            dev: 0x100 + id,
            dcache: ManuallyDrop::new(DHash::new(opts.hash_buckets)),
            root: Some(root),
            rename_lock: Mutex::new(()),
            negatives: StripedCounter::default(),
            negatives_full: AtomicBool::new(false),
            max_negative: opts.max_negative,
            complete: ops.complete(),
            read_only: ops.read_only(),
            stores: ops.writes_through(),
            reuses_ino: ops.reuses_inode_numbers(),
            by_name: !ops.complete()
                && ops.looks_up_names()
                && opts.max_dentries.is_some()
                && opts.ttl.is_none(),
            quick_lookups: ops.quick_lookups(),
            // A complete file system never loads: one queue, never used.
            loads: Waiters::new(if ops.complete() { 1 } else { LOAD_QUEUES }),
            max_dentries: opts.max_dentries.filter(|_| !ops.complete()),
            sweeping: AtomicBool::new(false),
            evicted: AtomicU64::new(0),
            sweeps: AtomicU64::new(0),
            sweep_floor: AtomicU64::new(0),
            ttl: opts.ttl.filter(|_| !ops.complete()).map(|t| {
                // Rounded up to a tick, and at most the clock's range.
                let ticks = t.as_nanos().div_ceil(TICK.as_nanos());
                ticks.min(u32::MAX as u128) as u32
            }),
            born: if opts.ttl.is_some() { clock_ns() } else { 0 },
            revalidations: AtomicU64::new(0),
            ops,
        })
    }

    /// `EROFS` if the file system is read-only (Linux `mnt_want_write`): called by every
    /// change before it changes anything.
    #[inline]
    pub(crate) fn want_write(&self) -> Result<()> {
        if self.read_only {
            Err(Errno::EROFS)
        } else {
            Ok(())
        }
    }

    /// Whether the file system is read-only.
    pub fn read_only(&self) -> bool {
        self.read_only
    }

    /// Whether an inode number may name a new object once the old one is gone (see
    /// [`FileSystem::reuses_inode_numbers`]): a frontend that keys objects by (`st_dev`,
    /// `st_ino`) must then check that a key still names the object it knew.
    pub fn reuses_inode_numbers(&self) -> bool {
        self.reuses_ino
    }

    /// Opens a stored file's data (see [`FileSystem::open_data`]).
    pub(crate) fn open_data(&self, inode: &Inode, write: bool) -> Result<std::os::fd::OwnedFd> {
        self.ops.open_data(inode, write)
    }

    /// A new inode for `name` in `dir` (see [`FileSystem::create`]). Always inlined: for
    /// memfs it is a branch and the call it always was (callgrind: out of line, it cost
    /// create+close+unlink about 45 instructions).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(crate) fn create(
        &self,
        dir: &Inode,
        name: &[u8],
        mode: u32,
        uid: u32,
        gid: u32,
        rdev: u64,
        target: Option<&[u8]>,
        now: Timespec,
    ) -> Result<InodeArc> {
        if self.stores {
            self.ops
                .create(dir, name, mode, uid, gid, rdev, target, now)
        } else {
            self.ops.new_inode(mode, uid, gid, rdev, target, now)
        }
    }

    /// A new nameless regular file (see [`FileSystem::tmpfile`]).
    pub(crate) fn tmpfile(
        &self,
        dir: &Inode,
        mode: u32,
        uid: u32,
        gid: u32,
        now: Timespec,
    ) -> Result<InodeArc> {
        if self.stores {
            self.ops.tmpfile(dir, mode, uid, gid, now)
        } else {
            self.ops.new_inode(mode, uid, gid, 0, None, now)
        }
    }

    /// [`FileSystem::remove`], where the file system writes through.
    #[inline(always)]
    pub(crate) fn store_remove(&self, dir: &Inode, name: &[u8], victim: &Inode) -> Result<()> {
        if self.stores {
            self.ops.remove(dir, name, victim)
        } else {
            Ok(())
        }
    }

    /// [`FileSystem::rename`], where the file system writes through.
    #[inline]
    pub(crate) fn store_rename(
        &self,
        from: (&Inode, &[u8]),
        to: (&Inode, &[u8]),
        moved: &Inode,
        replaced: Option<&Inode>,
        exchange: bool,
    ) -> Result<()> {
        if self.stores {
            self.ops.rename(from, to, moved, replaced, exchange)
        } else {
            Ok(())
        }
    }

    /// [`FileSystem::link`], where the file system writes through.
    #[inline]
    pub(crate) fn store_link(&self, inode: &Inode, dir: &Inode, name: &[u8]) -> Result<()> {
        if self.stores {
            self.ops.link(inode, dir, name)
        } else {
            Ok(())
        }
    }

    /// [`FileSystem::set_attr`], where the file system writes through.
    #[inline]
    pub(crate) fn store_attr(
        &self,
        inode: &Inode,
        attr: &StoreAttr,
        fd: Option<BorrowedFd<'_>>,
    ) -> Result<Option<u64>> {
        if self.stores {
            self.ops.set_attr(inode, attr, fd)
        } else {
            Ok(None)
        }
    }

    /// Whether the file system writes every change through to storage
    /// ([`FileSystem::writes_through`]).
    pub(crate) fn writes_through(&self) -> bool {
        self.stores
    }

    /// Runs `op`, a call of the file system's extended-attribute methods, with a hold on
    /// `inode` (`Inode::hold`), so that the inode is not evicted meanwhile: an attribute
    /// set on it is then always seen by its eviction (the hold's release orders the two),
    /// and never set on an inode already evicted. `ENOENT` if it was evicted after the
    /// caller found it (its last name and description went meanwhile: the call comes
    /// after that removal).
    pub(crate) fn xattr_op<R>(
        &self,
        inode: &Inode,
        op: impl FnOnce(&dyn FileSystem) -> Result<R>,
    ) -> Result<R> {
        struct Hold<'a>(&'a SuperBlock, &'a Inode);
        impl Drop for Hold<'_> {
            fn drop(&mut self) {
                self.0.release(self.1);
            }
        }
        if !inode.hold() {
            return Err(Errno::ENOENT);
        }
        let _hold = Hold(self, inode);
        op(&*self.ops)
    }

    /// The root dentry.
    pub(crate) fn root(&self) -> &DRef {
        self.root.as_ref().expect("root present until drop")
    }

    /// A new inode (see [`FileSystem::new_inode`]), for the loom models, which build
    /// trees by hand.
    #[cfg(all(test, loom))]
    pub(crate) fn new_inode(
        &self,
        mode: u32,
        uid: u32,
        gid: u32,
        rdev: u64,
        target: Option<&[u8]>,
        now: Timespec,
    ) -> Result<InodeArc> {
        self.ops.new_inode(mode, uid, gid, rdev, target, now)
    }

    /// Gives back a hold on `inode`, evicting it with the last one.
    #[inline]
    pub(crate) fn release(&self, inode: &Inode) {
        if inode.release() {
            // A name the engine still caches may link it, where the link count was
            // storage's and another writer removed names behind the engine (see
            // `Inode::drop_link`): its next use must ask storage, not serve this object.
            if self.ttl.is_some() {
                inode.set_valid_until(0);
            }
            // No description is left to hold a lock; whatever a frontend owner left goes
            // with the inode, whose address may key a new one's (`filelock`, "Release").
            if inode.has_locks.load(std::sync::atomic::Ordering::Relaxed) {
                crate::filelock::global().purge(inode);
            }
            self.ops.evict(inode);
        } else if self.max_dentries.is_some()
            && inode.is_dir()
            && !inode.is_open()
            && self.sweep_floor.load(Relaxed) != 0
        {
            // A directory's last description went: its children may go now, which the
            // floor a sweep left may count as in use (see "Bounded caches").
            self.sweep_floor.store(0, Relaxed);
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
        // Under loom at every admission: the tick is a thread-local that outlives the
        // model's executions, so re-summing every `NEG_RECHECK`th would make them differ.
        if cfg!(loom) || tick % NEG_RECHECK == 0 {
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

    /// Locks the directory `d` (whose inode is `inode`, and `m` its state), first filling
    /// it from the file system if it was never loaded (see [`SuperBlock::load`]), or
    /// revalidating it if its TTL ran out (see "Revalidation"). For a complete file system
    /// (memfs) this is the lock and two branches.
    ///
    /// Errors: the load's.
    #[inline(always)]
    pub(crate) fn lock_dir<'i>(
        self: &Arc<Self>,
        d: DPtr<'_>,
        inode: &Inode,
        m: &'i Mutex<DirState>,
    ) -> Result<MutexGuard<'i, DirState>> {
        // With no lock held yet: the place to make room (memfs has no cap: one branch). Not
        // in an operation that started again after loading with no guard pinned (see
        // `unpin::restarted`): what it loaded must still be there when it gets to it.
        if self.max_dentries.is_some() && !unpin::restarted() {
            self.shrink();
        }
        let st = m.lock();
        // memfs never marks a directory unloaded and has no TTL.
        if !st.unloaded && (self.ttl.is_none() || !self.due(&st, inode)) {
            return Ok(st);
        }
        drop(st);
        self.lock_loaded(d, inode, m)
    }

    #[cold]
    #[inline(never)]
    fn lock_loaded<'i>(
        self: &Arc<Self>,
        d: DPtr<'_>,
        inode: &Inode,
        m: &'i Mutex<DirState>,
    ) -> Result<MutexGuard<'i, DirState>> {
        loop {
            self.load(d, inode)?;
            let st = m.lock();
            // A sweep of the cache can unload it again between the load and the lock
            // ("Bounded caches"), and a revalidation find it stale: then load again. A
            // deadline already past is not looked at here (a TTL of zero would never let
            // the caller through).
            if !st.unloaded && !st.loading && (st.dead || !st.stale) {
                return Ok(st);
            }
        }
    }

    /// Whether a locked lookup goes through [`SuperBlock::lock_named`] (see "Names one at
    /// a time"). Never for memfs.
    #[inline(always)]
    pub(crate) fn by_name(&self) -> bool {
        self.by_name
    }

    /// Locks the directory `d` (whose inode is `inode`, and `m` its state) for a lookup
    /// of `c`, on a file system that looks names up one at a time (see "Names one at a
    /// time"): as [`SuperBlock::lock_dir`], except that a directory not loaded is not
    /// loaded for it. If the cache does not hold `c` there, the file system is asked for
    /// `c` alone (with no lock held, after the operation let its guard go: see `unpin`),
    /// and its answer is cached; then the directory is locked and the cache answers. A
    /// directory being loaded is waited for. `Named::Absent`: `c` does not exist, and no
    /// negative entry records it (their cap was full).
    ///
    /// Errors: the file system's.
    #[cold]
    #[inline(never)]
    pub(crate) fn lock_named<'i>(
        self: &Arc<Self>,
        d: DPtr<'_>,
        inode: &Inode,
        m: &'i Mutex<DirState>,
        c: &crate::name::Component<'_>,
        guard: &Guard,
    ) -> Result<Named<'i>> {
        if !unpin::restarted() {
            self.shrink();
        }
        loop {
            let st = m.lock();
            if !st.loading {
                // Loaded, or its answer cached, or not to be asked (a name too long is
                // refused by the caller; a removed directory holds nothing): the cache.
                if !st.unloaded
                    || st.dead
                    || c.bytes.len() > crate::types::limits::NAME_MAX
                    || self.dcache.lookup_locked(&d, c, guard).is_some()
                {
                    return Ok(Named::Cached(st));
                }
                if !st.big {
                    // Loaded whole, unless it proves too large.
                    drop(st);
                    self.load_as(d, inode, false)?;
                    continue;
                }
                if self.absent(inode, c.bytes) {
                    return Ok(Named::Absent);
                }
                if self.quick_lookups {
                    // Asked here, under the caller's guard; a load under way is waited
                    // for with none (below).
                    drop(st);
                    self.load_name_now(d, inode, c.bytes, false)?;
                    continue;
                }
            }
            drop(st);
            self.load_name(d, inode, c.bytes)?;
        }
    }

    /// Whether this thread's last [`Absent`] answer is for `name` in `inode` (a directory
    /// not loaded, whose lock the caller holds) and still right: no sweep started since
    /// it came. A directory not loaded changes only once loaded, and becomes not loaded
    /// again only by a sweep that started after its load; so while no sweep has started,
    /// a directory found not loaded has not changed since the answer.
    fn absent(&self, inode: &Inode, name: &[u8]) -> bool {
        ABSENT.with(|a| {
            a.borrow().as_ref().is_some_and(|a| {
                std::ptr::eq(&*a.dir, inode)
                    && *a.name == *name
                    && a.sweeps == self.sweeps.load(Relaxed)
            })
        })
    }

    /// Asks the file system for `name` in the directory `d` (whose inode is `inode`), not
    /// loaded, and caches the answer (see [`SuperBlock::lock_named`]); or waits for the
    /// load under way there. As [`SuperBlock::load`], inside an operation that may start
    /// again the call is recorded and made after its guard went (`Errno::RESTART`).
    #[cold]
    fn load_name(self: &Arc<Self>, d: DPtr<'_>, inode: &Inode, name: &[u8]) -> Result<()> {
        let call = || {
            let held = DRef::try_get(d)?;
            let object = d.inode_arc(&crossbeam_epoch::pin())?;
            if !std::ptr::eq(&*object, inode) {
                return None;
            }
            let (fs, name) = (self.clone(), Box::<[u8]>::from(name));
            Some(Call::new(object, move |inode, first| {
                if first {
                    fs.shrink();
                }
                fs.load_name_now(held.ptr(), inode, &name, true)?;
                // Nothing is fresh: without a TTL nothing is due.
                Ok(false)
            }))
        };
        match unpin::defer(call) {
            Some(e) => Err(e),
            None => self.load_name_now(d, inode, name, true),
        }
    }

    /// [`SuperBlock::load_name`], made now: one caller at a time per directory asks (its
    /// `loading`, as a load's), the others wait. Nothing changes a directory not loaded
    /// (every change loads it first) nor one being loaded, so the answer is cached as
    /// given: a positive entry, or a negative one if the cap on them admits it, else this
    /// thread's [`Absent`] answer. Without `wait`, a load under way is not waited for (the
    /// caller holds a guard): this returns, and the caller finds it.
    fn load_name_now(&self, d: DPtr<'_>, inode: &Inode, name: &[u8], wait: bool) -> Result<()> {
        let m = inode.dir().ok_or(Errno::ENOTDIR)?;
        // As in `load_now`: the children installed own a count on `d`.
        let Some(_held) = DRef::try_get(d) else {
            return Err(Errno::ENOENT);
        };
        let c = scan(name);
        let key = load_key(m);
        loop {
            let mut st = m.lock();
            if !st.loading {
                if !st.unloaded
                    || st.dead
                    || self
                        .dcache
                        .lookup_locked(&d, &c, &crossbeam_epoch::pin())
                        .is_some()
                {
                    return Ok(());
                }
                st.loading = true;
                break;
            }
            drop(st);
            if !wait {
                return Ok(());
            }
            self.loads.wait(key, || !m.lock().loading);
        }
        let done = Loading {
            m,
            loads: &self.loads,
            key,
        };
        let found = self.ops.lookup(inode, name)?;
        let mut st = m.lock();
        if dropped(d) {
            // As in `load_now`: out of the namespace, it gets no children.
            st.unloaded = false;
            st.dead = true;
            return Ok(());
        }
        match found {
            Some(child) => {
                self.dcache.d_alloc(d, &c, Some(child), &mut st);
            }
            None if self.negative_admit() => {
                self.dcache.d_alloc(d, &c, None, &mut st);
            }
            None => {
                let sweeps = self.sweeps.load(Relaxed);
                let dir = d.inode_arc(&crossbeam_epoch::pin());
                if let Some(dir) = dir.filter(|i| std::ptr::eq(&**i, inode)) {
                    let name = name.into();
                    ABSENT.with(|a| *a.borrow_mut() = Some(Absent { dir, name, sweeps }));
                }
            }
        }
        drop(st);
        drop(done);
        Ok(())
    }

    /// Whether the loaded directory `inode` (whose state `st` the caller holds) must be
    /// revalidated before it is used, or waited for: only with a TTL. A directory the
    /// engine removed (`dead`) has nothing to revalidate: it holds nothing and never will,
    /// and a caller standing in it still stats it, as on Linux. Out of line: memfs never
    /// calls it, and its callers stay small enough to inline.
    #[cold]
    #[inline(never)]
    fn due(&self, st: &DirState, inode: &Inode) -> bool {
        st.loading || (!st.dead && (st.stale || inode.expired(self.ticks())))
    }

    /// Now, in ticks of 10 ms since the file system was made, plus one (so that a deadline
    /// of 0 is always past), saturating: a file system that lives past the clock's range
    /// (about 497 days) revalidates at every use from then on.
    pub(crate) fn ticks(&self) -> u32 {
        let t = clock_ns().saturating_sub(self.born) / TICK.as_nanos() as u64 + 1;
        t.min(u32::MAX as u64) as u32
    }

    /// The deadline of what is loaded at tick `start`; `None` without a TTL.
    fn deadline(&self, start: u32) -> Option<u32> {
        self.ttl.map(|t| start.saturating_add(t))
    }

    /// Whether what is cached of `inode` (of this file system) is past its deadline: never
    /// without a TTL. Read by the walk, which falls back (or revalidates) when it is. `now`
    /// is the walk's reading of the clock, taken at its first use (one reading per walk).
    #[inline]
    pub(crate) fn expired(&self, inode: &Inode, now: &mut Option<u32>) -> bool {
        self.ttl.is_some() && inode.expired(*now.get_or_insert_with(|| self.ticks()))
    }

    /// Whether this file system revalidates what it caches (a TTL policy): a walk through
    /// it must not be kept in a path cache, whose entries no deadline covers.
    #[inline]
    pub(crate) fn revalidates(&self) -> bool {
        self.ttl.is_some()
    }

    /// Fills the unloaded directory `d` from the file system, or, with a TTL, revalidates
    /// the loaded directory `d` if it is due; or waits for the caller that is doing so (one
    /// loader per directory). The loader holds no lock while the file system answers; it
    /// then installs every entry under the directory lock and marks the directory loaded.
    /// Nothing can change a directory being loaded meanwhile (every change locks it through
    /// [`SuperBlock::lock_dir`], or checks [`SuperBlock::settled`] once it holds its locks),
    /// so the answer is installed as given. A failed (or panicked) load leaves the
    /// directory as it was and wakes the waiters; one of them loads again.
    ///
    /// Inside an operation that may start again (`unpin`), the call is not made here: it
    /// is recorded, with counts on `d`, `inode` and this file system, and made once the
    /// operation has let its guard go; this returns `Errno::RESTART`. A directory this
    /// operation loaded or revalidated already counts as fresh, whatever its deadline.
    ///
    /// Errors: the file system's (see [`FileSystem::load_dir`]).
    #[cold]
    pub(crate) fn load(self: &Arc<Self>, d: DPtr<'_>, inode: &Inode) -> Result<()> {
        self.load_as(d, inode, true)
    }

    /// [`SuperBlock::load`], for a caller that needs all of the directory (`whole`: a
    /// listing, a change) or only wants one name found (a lookup, see "Names one at a
    /// time": a directory found too large is then not installed, and is marked `big`).
    fn load_as(self: &Arc<Self>, d: DPtr<'_>, inode: &Inode, whole: bool) -> Result<()> {
        let fresh = unpin::is_fresh(inode);
        if fresh {
            let m = inode.dir().ok_or(Errno::ENOTDIR)?;
            let st = m.lock();
            if Self::settled(&st) && !st.stale {
                return Ok(());
            }
        }
        match unpin::defer(|| self.load_call(d, inode, whole)) {
            Some(e) => Err(e),
            None => self.load_now(d, inode, fresh, whole),
        }
    }

    /// [`SuperBlock::load`] of `d` as a call for after the guard, holding what it needs;
    /// `None` if `d` died, or no longer has `inode` (then the load, made in place, finds
    /// out).
    fn load_call(self: &Arc<Self>, d: DPtr<'_>, inode: &Inode, whole: bool) -> Option<Call> {
        let held = DRef::try_get(d)?;
        let object = d.inode_arc(&crossbeam_epoch::pin())?;
        if !std::ptr::eq(&*object, inode) {
            return None;
        }
        let fs = self.clone();
        Some(Call::new(object, move |inode, first| {
            // Room first, as `lock_dir` makes it before a load in place (the attempts after
            // this call do not sweep, see `unpin::restarted`).
            if first {
                fs.shrink();
            }
            fs.load_now(held.ptr(), inode, false, whole)?;
            Ok(true)
        }))
    }

    /// [`SuperBlock::load`], made now; `fresh`: this operation revalidated `inode`
    /// already, so its deadline counts as met.
    fn load_now(&self, d: DPtr<'_>, inode: &Inode, fresh: bool, whole: bool) -> Result<()> {
        let m = inode.dir().ok_or(Errno::ENOTDIR)?;
        // The caller found `d` under a guard, or under a lock it has let go: a change may
        // have dropped it since (an rmdir, a revalidation that found its name gone) and,
        // with nobody holding it, killed it. Installed children own a count on their
        // parent, so it is held while they are installed; a dead one is gone from the
        // namespace, as a removed directory is.
        let Some(_held) = DRef::try_get(d) else {
            return Err(Errno::ENOENT);
        };
        let key = load_key(m);
        let (revalidate, force) = loop {
            let mut st = m.lock();
            if !st.loading {
                if st.unloaded {
                    // Too large to load for a lookup: it looks the name up alone.
                    if !whole && st.big {
                        return Ok(());
                    }
                    st.loading = true;
                    break (false, false);
                }
                if self.ttl.is_none() || (fresh && !st.stale) || !self.due(&st, inode) {
                    return Ok(());
                }
                st.loading = true;
                break (true, st.stale);
            }
            drop(st);
            self.loads.wait(key, || !m.lock().loading);
        };
        let done = Loading {
            m,
            loads: &self.loads,
            key,
        };
        let deadline = self.deadline(self.ticks());
        if revalidate {
            self.revalidations.fetch_add(1, Relaxed);
            // A directory found removed (when its name went, see `forget_name`) holds
            // nothing and never will: nothing to ask.
            let answer = if inode.nlink() == 0 {
                Some(Listing::default())
            } else {
                self.ops.revalidate_dir(inode, force).map_err(gone)?
            };
            let mut gone = Vec::new();
            let mut st = m.lock();
            // A dropped directory gets no new children (each would own a count on it):
            // what it held is forgotten with it.
            if let Some(entries) = answer.filter(|_| !dropped(d)) {
                self.reconcile(d, inode, &mut st, entries, deadline, &mut gone);
            }
            // Removed behind the engine (its entries are all forgotten now): dead, as an
            // rmdir'ed directory is, to a caller still standing in it.
            if inode.nlink() == 0 {
                st.dead = true;
            }
            st.stale = false;
            inode.set_valid_until(deadline.unwrap_or(0));
            drop(st);
            drop(done);
            // Directories whose names went: stale, so that their next use lists them again
            // (and fails with `ENOENT` if they were removed, or finds them where they
            // moved to). Marked with no lock held: directory locks nest only in address order.
            for dir in gone {
                self.mark_stale(&dir);
            }
            return Ok(());
        }
        let answer = if !whole && self.by_name {
            // A lookup takes at most a quarter of the cap (see "Names one at a time").
            let max = self.max_dentries.unwrap_or(0) / 4;
            self.ops
                .load_dir_within(inode, usize::try_from(max).unwrap_or(usize::MAX))
        } else {
            self.ops.load_dir(inode).map(Some)
        };
        let answer = answer.map_err(|e| match self.ttl {
            Some(_) => gone(e),
            None => e,
        })?;
        let mut st = m.lock();
        let Some(entries) = answer else {
            // Too large for the cache to hold for a lookup: nothing is installed, and
            // lookups here ask for their names alone.
            st.big = true;
            return Ok(());
        };
        if dropped(d) {
            // Taken out of the namespace while it was listed (its name went on the host):
            // it gets no children (each would own a count on it), and nothing more can be
            // made in it, as in a removed directory; a caller standing in it finds it
            // empty.
            st.unloaded = false;
            st.stale = false;
            st.dead = true;
            return Ok(());
        }
        // A directory unloaded by a sweep keeps the children someone held: those names
        // are cached already (and, this process owning the tree, still right). With a TTL
        // they may be stale: the listing is reconciled with them, as a revalidation's is.
        let kept = !st.children.is_empty();
        let mut gone = Vec::new();
        if kept && self.ttl.is_some() {
            self.reconcile(d, inode, &mut st, entries, deadline, &mut gone);
        } else {
            self.install(d, &mut st, entries, kept, deadline);
        }
        st.unloaded = false;
        st.stale = false;
        st.loaded_at = self.sweeps.load(Relaxed) as u32;
        st.loader = crate::sync::thread_tag();
        if let Some(t) = deadline {
            inode.set_valid_until(t);
        }
        drop(st);
        drop(done);
        for dir in gone {
            self.mark_stale(&dir);
        }
        Ok(())
    }

    /// Installs a first load's `entries` in `d` (whose state `st` the caller holds),
    /// skipping the names still cached if `kept` (see [`SuperBlock::load`]).
    fn install(
        &self,
        d: DPtr<'_>,
        st: &mut DirState,
        entries: Listing,
        kept: bool,
        deadline: Option<u32>,
    ) {
        let guard = crossbeam_epoch::pin();
        entries.for_each(|name, child| {
            vouch(&child, deadline);
            let c = scan(name);
            if kept && self.dcache.lookup_locked(&d, &c, &guard).is_some() {
                return;
            }
            self.dcache.d_alloc(d, &c, Some(child), st);
        });
    }

    /// Makes the cached entries of `d` (the directory `inode`, whose state `st` the caller
    /// holds) what the file system now lists (`entries`), after a revalidation found it
    /// changed: a name that now names another object, or a negative entry whose name now
    /// exists, is replaced; a name gone is forgotten (the file system is told, and an open
    /// file keeps its object); new names are added. A directory whose name went is pushed
    /// on `gone`, to be marked stale once `st` is released; a name with a mount on it
    /// stays (Linux would detach the mount).
    fn reconcile(
        &self,
        d: DPtr<'_>,
        inode: &Inode,
        st: &mut DirState,
        entries: Listing,
        deadline: Option<u32>,
        gone: &mut Vec<InodeArc>,
    ) {
        let guard = crossbeam_epoch::pin();
        // Ordered, so that new names get their cookies in a deterministic order (and loom
        // sees the same schedule for the same choices).
        let mut now: std::collections::BTreeMap<Vec<u8>, InodeArc> = Default::default();
        entries.for_each(|name, inode| {
            now.insert(name.to_vec(), inode);
        });
        let children: Vec<NonNull<Dentry>> = st.children.values().copied().collect();
        for p in children {
            // SAFETY: a child is alive while it is in `children`, which we read under the
            // directory lock we hold; the pointer is the hash's own.
            let c = unsafe { DPtr::new(p) };
            let name = c.get().name_vec(&guard);
            let cur = c.inode_arc(&guard);
            let new = now.remove(&name);
            let same = match (&cur, &new) {
                (Some(a), Some(b)) => InodeArc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            };
            if same {
                if let Some(n) = &new {
                    vouch(n, deadline);
                }
                continue;
            }
            if c.flags() & MOUNTED != 0 {
                continue;
            }
            // No path cache holds a walk through a file system with a TTL (see
            // `walk::Walked::cacheable`), so no namespace change is announced.
            self.dcache.d_drop(c, st);
            match &cur {
                None => self.negative_gone(1),
                Some(victim) => {
                    self.ops.forget_name(inode, &name, victim);
                    if victim.is_dir() {
                        gone.push(victim.clone());
                    }
                }
            }
            if let Some(n) = new {
                now.insert(name, n);
            }
        }
        for (name, child) in now {
            vouch(&child, deadline);
            self.dcache.d_alloc(d, &scan(&name), Some(child), st);
        }
    }

    /// Marks the directory `dir` stale: a name the caller found in it names another object
    /// now, or nothing (see [`FileSystem::revalidate_attr`]), or its own name went; its next
    /// lock lists it again.
    pub(crate) fn mark_stale(&self, dir: &Inode) {
        if let Some(m) = dir.dir() {
            m.lock().stale = true;
        }
        dir.set_valid_until(0);
        STALE_MARKS.with(|c| c.set(c.get().wrapping_add(1)));
    }

    /// Refreshes the attributes of `inode` (of this file system, not a directory), found as
    /// `name` in `dir`, whose deadline passed (see [`FileSystem::revalidate_attr`]);
    /// `false`: `name` names another object now, and `dir` is marked stale. An object the
    /// engine evicted (see [`SuperBlock::release`]) is never fresh: whatever `name` names
    /// on storage is loaded as a new object.
    ///
    /// Errors: the file system's.
    #[cold]
    pub(crate) fn revalidate_attr(&self, dir: &Inode, name: &[u8], inode: &Inode) -> Result<bool> {
        let start = self.ticks();
        self.revalidations.fetch_add(1, Relaxed);
        let mut fresh =
            !inode.evicted() && self.ops.revalidate_attr(dir, name, inode).map_err(gone)?;
        if fresh {
            inode.set_valid_until(self.deadline(start).unwrap_or(0));
            // Evicted meanwhile: the eviction's expiry may precede the deadline just set.
            fresh = !inode.evicted();
        }
        if !fresh {
            inode.set_valid_until(0);
            self.mark_stale(dir);
        }
        Ok(fresh)
    }

    /// Brings the attributes of `inode`, which the caller holds open (`data`: the
    /// description's data descriptor), up to date if its deadline passed: `fstat` and
    /// `fstatat(AT_EMPTY_PATH)` under a TTL policy, as NFS revalidates an open file's
    /// attributes once its attribute timeout passed. Nothing without a TTL. A directory's
    /// deadline also covers its entries, which only a listing revalidates, so its
    /// attributes are refreshed but its deadline stays.
    ///
    /// Errors: the file system's.
    #[inline]
    pub(crate) fn revalidate_held(
        &self,
        inode: &Inode,
        data: Option<BorrowedFd<'_>>,
    ) -> Result<()> {
        if self.ttl.is_none() {
            return Ok(());
        }
        self.revalidate_held_slow(inode, data)
    }

    #[cold]
    fn revalidate_held_slow(&self, inode: &Inode, data: Option<BorrowedFd<'_>>) -> Result<()> {
        let start = self.ticks();
        if !inode.expired(start) {
            return Ok(());
        }
        self.revalidations.fetch_add(1, Relaxed);
        self.ops.revalidate_held(inode, data)?;
        if !inode.is_dir() {
            inode.set_valid_until(self.deadline(start).unwrap_or(0));
        }
        Ok(())
    }

    /// Whether the dentry cache is capped ([`CacheOptions::max_dentries`]): its sweeps may
    /// evict the names nobody holds.
    #[inline]
    pub(crate) fn capped(&self) -> bool {
        self.max_dentries.is_some()
    }

    /// Whether a directory whose lock the caller holds (its state `st`) may be changed
    /// now: loaded, and not being loaded or revalidated by another caller (who dropped
    /// the lock while the file system answered). Calls that lock several directories
    /// without [`SuperBlock::lock_dir`] (rename, rmdir) check each, and load again
    /// ([`SuperBlock::ensure_loaded`]) if one is not.
    #[inline]
    pub(crate) fn settled(st: &DirState) -> bool {
        !st.unloaded && !st.loading
    }

    /// Brings the dentry cache back within its cap ([`CacheOptions::max_dentries`]) when
    /// it is over (and past the floor a sweep that could not left): a sweep evicts unused
    /// dentries until an eighth of the cap is free. Called
    /// before each directory lock taken through [`SuperBlock::lock_dir`] (every locked
    /// lookup, create, link, unlink and listing), with no lock held; if a sweep is already
    /// running, the caller goes on (nobody waits for a sweep). Not called by a load: a
    /// caller that loads several directories and then locks them all (rename, rmdir) makes
    /// no sweep in between. See "Bounded caches".
    #[cold]
    pub(crate) fn shrink(&self) {
        let Some(max) = self.max_dentries else {
            return;
        };
        // Before every locked lookup: the comparison reads no other thread's count unless
        // the cache is near its cap (see `sync::BatchedCounter`).
        if self
            .dcache
            .len_at_most(max.max(self.sweep_floor.load(Relaxed)))
            || self
                .sweeping
                .compare_exchange(false, true, Acquire, Relaxed)
                .is_err()
        {
            return;
        }
        /// Lets the next sweep run however this one ends.
        struct Sweeping<'a>(&'a AtomicBool);
        impl Drop for Sweeping<'_> {
            fn drop(&mut self) {
                self.0.store(false, Release);
            }
        }
        let _s = Sweeping(&self.sweeping);
        // CLOCK's second lap: a first pass over names all looked up since the last sweep
        // only clears their bits.
        // How many to evict, read once: the count is striped, and its sum reads every
        // other thread's stripe, each a line that thread keeps writing (read per child, it
        // was a cache miss per child at two threads).
        let mut pass = SweepPass {
            left: self.dcache.len().saturating_sub(max - max / 8),
            now: self.sweeps.fetch_add(1, Relaxed) + 1,
            ..SweepPass::default()
        };
        // The directories this thread loaded first, both laps, down to an eighth of the cap
        // free; then every directory, but only for what still keeps the cache over its cap
        // (the last eighth is this thread's to free, not the others'). A thread that loads
        // evicts what it loaded, so threads that load different trees neither write each
        // other's lines (the first lap over another's names clears each bit its owner set)
        // nor free to each other's heaps. Aimed at the low mark from everyone's, the laps
        // over every directory took half of W5's evictions at two threads.
        let me = crate::sync::thread_tag();
        if me != crate::sync::THREAD_TAG_NONE {
            pass.only = Some(me);
            let _ = self.sweep(&mut pass) || self.sweep(&mut pass);
            pass.only = None;
            // `left` started at the count less the low mark: what is left of it past an
            // eighth of the cap is what the count is still over the cap.
            pass.left = pass.left.saturating_sub(max / 8);
        }
        let _ = pass.left == 0 || self.sweep(&mut pass) || self.sweep(&mut pass);
        let (gone, recent) = (pass.gone, pass.recent);
        // The names' frees are deferred before the marker of their numbers (see
        // `FileSystem::names_evicted`), so that it runs after their grace period.
        drop(std::mem::take(&mut pass.dead));
        if !pass.inos.is_empty() {
            self.ops.names_evicted(pass.inos);
        }
        // Freed nothing, passed over no directory for being new, and still over the cap: all
        // that is left is in use. The next sweep waits for an eighth of the cap more (see
        // "Bounded caches").
        let after = self.dcache.len();
        let floor = match after > max && gone == 0 && !recent {
            true => after + (max / 8).max(1),
            false => 0,
        };
        self.sweep_floor.store(floor, Relaxed);
        // The evicted dentries are freed a grace period later, through this thread's
        // deferred-free bag; a sweep can fill several bags at once, more than the epoch's
        // collector frees per pin while the caches churn (a directory larger than the cap,
        // loaded at every use): hand them to the collector now, and let it collect.
        crate::reclaim::flush();
    }

    /// One CLOCK pass over the loaded directories (only those `pass.only`'s thread loaded,
    /// if it is set), deepest first (post-order),
    /// until `left` names went (counted down): in each directory, a child whose reference bit
    /// is set gets it cleared and stays; one whose bit is clear and that nobody uses (see
    /// [`DHash::d_evict`]) goes. A directory that loses a positive child is unloaded again:
    /// its next miss under the lock loads it. The children of a directory that is open are
    /// kept, so that a listing in progress never sees an entry twice. An explicit stack, so
    /// a deep tree cannot overflow the caller's. Each directory on the stack is held (so it
    /// stays while its subtree is swept), and no two are locked at once: directory locks are
    /// taken in address order elsewhere. A directory loaded since sweep `now - 1` started
    /// is passed over (see `DirState::loaded_at`), and sets `pass.recent`. Returns whether
    /// `pass.left` reached 0.
    fn sweep(&self, pass: &mut SweepPass) -> bool {
        let mut stack: Vec<(InodeArc, Vec<DRef>)> = Vec::new();
        stack.extend(Self::sweep_frame(self.root()));
        while let Some((inode, subdirs)) = stack.last_mut() {
            if let Some(d) = subdirs.pop() {
                if let Some(f) = Self::sweep_frame(&d) {
                    stack.push(f);
                }
                continue;
            }
            let inode = inode.clone();
            stack.pop();
            if self.evict_children(&inode, pass) {
                return true;
            }
        }
        false
    }

    /// A directory to sweep: its inode and its child directories, held.
    fn sweep_frame(d: &DRef) -> Option<(InodeArc, Vec<DRef>)> {
        let guard = crossbeam_epoch::pin();
        let inode = d.inode_arc(&guard)?;
        let st = inode.dir()?.lock();
        if st.loading {
            return None;
        }
        let is_dir = |&&p: &&NonNull<Dentry>| {
            // SAFETY: a child is alive while it is in `children`, which we read under the
            // directory lock; the pointer is the hash's own.
            unsafe { DPtr::new(p) }.is_dir_locked()
        };
        debug_assert_eq!(
            st.children.values().filter(is_dir).count(),
            st.subdirs as usize,
            "a directory's count of subdirectories"
        );
        // Most directories have none: their children are not looked at (the walk of a
        // directory's children, for a directory of a thousand files, was most of a sweep).
        let subdirs = if st.subdirs == 0 {
            Vec::new()
        } else {
            st.children
                .values()
                .filter(is_dir)
                // SAFETY: as above.
                .filter_map(|&p| DRef::try_get(unsafe { DPtr::new(p) }))
                .collect()
        };
        drop(st);
        Some((inode, subdirs))
    }

    /// The CLOCK step over one directory's children (see [`SuperBlock::sweep`]), counted in
    /// `pass`; returns whether `pass.left` reached 0.
    fn evict_children(&self, inode: &Inode, pass: &mut SweepPass) -> bool {
        let Some(m) = inode.dir() else {
            return false;
        };
        let mut st = m.lock();
        // Being loaded, or loaded since the last sweep started: left alone this time (and
        // `recent` says so). Open: left alone while it is.
        if st.loading || (pass.now as u32).wrapping_sub(st.loaded_at) <= 1 {
            pass.recent = true;
            return pass.left == 0;
        }
        if inode.is_open() || pass.only.is_some_and(|t| t != st.loader) {
            return pass.left == 0;
        }
        let children: Vec<NonNull<Dentry>> = st.children.values().copied().collect();
        let (mut positive, mut gone) = (false, 0);
        for p in children {
            if pass.left == 0 {
                break;
            }
            // SAFETY: as in `sweep_frame`; a child leaves `children` only under this lock,
            // which we hold.
            let c = unsafe { DPtr::new(p) };
            // Directories stay (see "Bounded caches"); their children are swept. The flags
            // alone tell, on the dentry's first line: no inode is read.
            if c.flags() & (DIR | MOUNTED) != 0 || c.clear_referenced() {
                continue;
            }
            if self.dcache.d_evict(c, &mut st, &mut pass.dead) {
                pass.left -= 1;
                gone += 1;
                // Read beside the count the eviction just killed: no inode is loaded.
                if let Some(ino) = c.ino_locked() {
                    pass.inos.push(ino);
                    positive = true;
                } else {
                    self.negative_gone(1);
                }
            }
        }
        if positive {
            st.unloaded = true;
        }
        self.evicted.fetch_add(gone, Relaxed);
        pass.gone += gone;
        pass.left == 0
    }

    /// Whether `inode` is a directory that is not loaded yet, or is being loaded or
    /// revalidated.
    pub(crate) fn needs_load(&self, inode: &Inode) -> bool {
        !self.complete && inode.dir().is_some_and(|m| !Self::settled(&m.lock()))
    }

    /// Makes sure the directory `d` is loaded (see [`SuperBlock::load`]), for callers
    /// that lock several directories at once.
    #[inline]
    pub(crate) fn ensure_loaded(self: &Arc<Self>, d: DPtr<'_>, inode: &Inode) -> Result<()> {
        if self.needs_load(inode) {
            self.load(d, inode)?;
        }
        Ok(())
    }

    /// What this file system holds (see [`FsStats`]).
    pub fn stats(&self) -> FsStats {
        let (inodes, data_pages) = self.ops.usage();
        FsStats {
            inodes,
            data_pages,
            negative_entries: self.negatives.sum().max(0) as u64,
            hash_buckets: self.dcache.buckets() as u64,
            inode_cache: self.ops.inode_cache_stats(),
            dentries: self.dcache.len(),
            dentry_evictions: self.evicted.load(Relaxed),
            sweeps: self.sweeps.load(Relaxed),
            revalidations: self.revalidations.load(Relaxed),
        }
    }

    /// What `statfs` reports.
    pub fn statfs(&self) -> StatFs {
        self.ops.statfs()
    }
}

/// Ends a load (of a directory, or of one name in it) however it ends: clears `loading`
/// and wakes the waiters, also when the file system panics.
struct Loading<'a> {
    m: &'a Mutex<DirState>,
    loads: &'a Waiters,
    key: usize,
}

impl Drop for Loading<'_> {
    fn drop(&mut self) {
        self.m.lock().loading = false;
        self.loads.wake(self.key);
    }
}

/// The wait-queue key of a directory's loads: its state's address.
fn load_key(m: &Mutex<DirState>) -> usize {
    m as *const Mutex<DirState> as usize >> 6
}

/// A name that a lookup of one name found absent in a directory not loaded, when no
/// negative entry could record it (the cap on negative entries was full): what the
/// operation that asked learns when it runs again (see "Names one at a time").
struct Absent {
    /// The directory, held so that its address names it while this is kept.
    dir: InodeArc,
    name: Box<[u8]>,
    /// Sweeps started when the answer came ([`SuperBlock::sweeps`]).
    sweeps: u64,
}

thread_local! {
    /// This thread's last [`Absent`] answer.
    static ABSENT: std::cell::RefCell<Option<Absent>> = const { std::cell::RefCell::new(None) };
}

/// What [`SuperBlock::lock_named`] found.
pub(crate) enum Named<'i> {
    /// The directory locked: look the name up in the cache, which is right for it.
    Cached(MutexGuard<'i, DirState>),
    /// The name does not exist, and no entry records it.
    Absent,
}

/// One sweep's counts, carried through its CLOCK passes ([`SuperBlock::sweep`]).
#[derive(Default)]
struct SweepPass {
    /// Names still to evict.
    left: u64,
    /// This sweep's number (see `DirState::loaded_at`).
    now: u64,
    /// The numbers of the inodes whose names went.
    inos: Vec<u64>,
    /// Names evicted.
    gone: u64,
    /// Whether a directory was passed over for being new (being loaded, or loaded since the
    /// last sweep started).
    recent: bool,
    /// The dentries evicted, freed together after a grace period.
    dead: DeadBatch,
    /// Only the directories that the thread of this tag loaded (`DirState::loader`).
    only: Option<u8>,
}

impl Drop for SuperBlock {
    fn drop(&mut self) {
        // SAFETY: the dentry hash is not used again: this is the file system's drop.
        let dcache = unsafe { ManuallyDrop::take(&mut self.dcache) };
        tear_down(Box::new(Remains {
            dcache,
            _root: self.root.take(),
            next: std::ptr::null_mut(),
        }));
        // The dentries torn down wait for a grace period: hand them to the collector now,
        // rather than leave them in this thread's bag until it next defers enough.
        crate::reclaim::flush();
    }
}

/// What a file system leaves to tear down when it goes: its dentry hash and its root.
struct Remains {
    dcache: DHash,
    /// Held to be dropped after the hash is torn down.
    _root: Option<DRef>,
    /// The next in this thread's queue of file systems to tear down ([`tear_down`]).
    next: *mut Remains,
}

thread_local! {
    /// Whether this thread is tearing a file system down ([`tear_down`]). A `Cell` with no
    /// destructor: readable while the thread's other thread-locals are being destroyed.
    static TEARING_DOWN: Cell<bool> = const { Cell::new(false) };
    /// File systems dropped during this thread's teardown of another, to tear down after
    /// it (a list through `Remains::next`; no destructor either).
    static QUEUED: Cell<*mut Remains> = const { Cell::new(std::ptr::null_mut()) };
}

/// Tears `r` down, and the file systems dropped meanwhile, one after the other. A
/// teardown pins, and a pin may collect, which runs deferred drops of mount tables and so
/// of other file systems: torn down in place, each would nest a level deeper. That is
/// bounded by `reclaim::flush`'s guard for its flushes, but not on a thread that is
/// exiting: once crossbeam's thread-local handle is gone, every pin registers a new
/// participant, whose first pin collects (a thread whose path cache, destroyed last,
/// dropped its entries with 3,000 file systems queued overflowed its stack). So a file
/// system dropped inside a teardown is queued, and the outer one tears it down after its
/// own.
fn tear_down(r: Box<Remains>) {
    if TEARING_DOWN.with(|t| t.replace(true)) {
        let p = Box::into_raw(r);
        // SAFETY: `p` is the box's, and this thread's queue owns it from now on.
        QUEUED.with(|q| unsafe {
            (*p).next = q.get();
            q.set(p);
        });
        return;
    }
    /// Clears the flag however the teardowns end.
    struct Done;
    impl Drop for Done {
        fn drop(&mut self) {
            TEARING_DOWN.with(|t| t.set(false));
        }
    }
    let _done = Done;
    let mut next = Some(r);
    while let Some(r) = next {
        r.dcache.teardown();
        // The hash's table and the root go here: their pins may queue more.
        drop(r);
        next = QUEUED.with(|q| {
            let p = q.get();
            // SAFETY: a queued pointer came from `Box::into_raw` above and is taken once.
            (!p.is_null()).then(|| unsafe {
                q.set((*p).next);
                Box::from_raw(p)
            })
        });
    }
}

impl std::fmt::Debug for SuperBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SuperBlock(dev {:#x})", self.dev)
    }
}

/// Whether `d` was taken out of the namespace (unhashed: by an rmdir, an eviction, or a
/// revalidation that found its name gone); a file system root is not in the hash, and
/// stays.
fn dropped(d: DPtr<'_>) -> bool {
    d.flags() & (UNHASHED | ROOT) == UNHASHED
}

/// The methods a test file system leaves at their simplest: no accounting, no limits, never
/// complete (every miss asks it).
#[cfg(test)]
macro_rules! test_fs_accounting {
    () => {
        fn evict(&self, _: &Inode) {}
        fn transfer_owner(&self, _: &Inode, _: u32) {}
        fn inodes_of(&self, _: u32) -> u64 {
            0
        }
        fn charge_pages(&self, n: u64, _: bool) -> u64 {
            n
        }
        fn uncharge_pages(&self, _: u64) {}
        fn usage(&self) -> (u64, u64) {
            (0, 0)
        }
        fn statfs(&self) -> StatFs {
            StatFs::default()
        }
        fn complete(&self) -> bool {
            false
        }
    };
}

/// `new_inode` of a test file system that creates nothing (the loom models').
#[cfg(all(test, loom))]
macro_rules! test_fs_read_only {
    () => {
        fn new_inode(
            &self,
            _: u32,
            _: u32,
            _: u32,
            _: u64,
            _: Option<&[u8]>,
            _: Timespec,
        ) -> Result<InodeArc> {
            Err(Errno::EROFS)
        }
    };
}

#[cfg(all(test, not(loom)))]
mod tests {
    //! The fill-on-miss path, on a file system whose directories start unloaded: a fixed
    //! tree served from a table, with switches to hold, fail or panic a load.
    use super::*;
    use crate::inode::{Contents, FileData};
    use crate::sync::RwLock;
    use crate::types::mode::*;
    use crate::{Creds, Vfs};
    use std::collections::HashMap;
    use std::sync::atomic::AtomicUsize;
    use std::sync::atomic::Ordering::SeqCst;
    use std::sync::mpsc;

    /// What a test sees of its file system.
    #[derive(Default)]
    struct Probe {
        /// Loads per directory inode number.
        loads: Mutex<HashMap<u64, usize>>,
        /// The next load of this directory fails with `EIO` (`1`) or panics (`2`).
        fault: Mutex<Option<(u64, u8)>>,
        /// The next load of this directory says it started, checks that the directory's
        /// lock is free, then waits for the receiver.
        hold: Mutex<Option<Hold>>,
        /// Listings and revalidations asked with an epoch guard pinned on the caller's
        /// thread.
        pinned: AtomicUsize,
        /// Revalidations asked (directories and attributes).
        revalidations: AtomicUsize,
        /// Every revalidation of an object's attributes answers that its name names
        /// another object now (a backend that keeps answering stale).
        always_stale: std::sync::atomic::AtomicBool,
        /// Lookups of one name asked ([`FileSystem::lookup`]).
        lookups: AtomicUsize,
        /// The numbers [`FileSystem::names_evicted`] was given, in order.
        evicted: Mutex<Vec<u64>>,
    }

    impl Probe {
        /// Counts a call, and whether it came with a guard pinned.
        fn call(&self) {
            if crossbeam_epoch::is_pinned() {
                self.pinned.fetch_add(1, SeqCst);
            }
        }
    }

    /// A held load: the directory, where it says it started, what lets it go on.
    type Hold = (u64, mpsc::Sender<()>, mpsc::Receiver<()>);

    /// `/a/b/c` and `/a/x` (files), `/a/b`, `/d` and `/s` (directories; `/d` empty), and
    /// `/s/l`, a symlink to `../a/b`.
    struct TreeFs {
        dirs: HashMap<u64, Vec<(&'static str, u64, u32)>>,
        next: AtomicU64,
        probe: Arc<Probe>,
        /// Whether it looks names up one at a time (`Some`), and if so whether quickly.
        by_name: Option<bool>,
    }

    impl TreeFs {
        /// The object numbered `ino`, of type `mode`, as a load or a lookup gives it.
        fn object(ino: u64, mode: u32) -> InodeArc {
            // Stored a while ago: an access now is due to touch atime (relatime).
            let t = Timespec {
                sec: Timespec::now().sec - 10,
                nsec: 0,
            };
            if mode & S_IFMT == S_IFDIR {
                dir_inode(ino)
            } else if mode & S_IFMT == S_IFLNK {
                let body = Contents::Symlink(LINK_TARGET.into());
                // atime = mtime = ctime: a first follow is due to touch atime.
                InodeArc::new(Inode::new(ino, mode, 0, 0, body, t))
            } else {
                let data = Contents::File(RwLock::new(FileData::default()));
                InodeArc::new(Inode::new(ino, mode, 0, 0, data, t))
            }
        }
    }

    const ROOT: u64 = 1;
    const A: u64 = 2;
    const B: u64 = 3;
    const D: u64 = 4;
    const S: u64 = 5;
    /// The body of every symlink of the tree (`/s/l`).
    const LINK_TARGET: &[u8] = b"../a/b";

    fn dir_inode(ino: u64) -> InodeArc {
        let st = DirState {
            unloaded: true,
            ..Default::default()
        };
        InodeArc::new(Inode::new(
            ino,
            S_IFDIR | 0o755,
            0,
            0,
            Contents::dir(st),
            Timespec::now(),
        ))
    }

    impl FileSystem for TreeFs {
        fn root_inode(&self) -> InodeArc {
            dir_inode(ROOT)
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
            let contents = Contents::in_memory(mode, rdev, target);
            let ino = self.next.fetch_add(1, SeqCst);
            Ok(InodeArc::new(Inode::new(
                ino, mode, uid, gid, contents, now,
            )))
        }
        test_fs_accounting!();
        fn names_evicted(&self, inos: Vec<u64>) {
            self.probe.evicted.lock().extend(inos);
        }
        fn revalidate_dir(&self, _: &Inode, _: bool) -> Result<Option<Listing>> {
            self.probe.call();
            self.probe.revalidations.fetch_add(1, SeqCst);
            Ok(None)
        }
        fn revalidate_attr(&self, _: &Inode, _: &[u8], _: &Inode) -> Result<bool> {
            self.probe.call();
            self.probe.revalidations.fetch_add(1, SeqCst);
            Ok(!self.probe.always_stale.load(SeqCst))
        }
        fn load_dir(&self, dir: &Inode) -> Result<Listing> {
            self.probe.call();
            *self.probe.loads.lock().entry(dir.ino).or_default() += 1;
            let fault = self.probe.fault.lock().take_if(|(ino, _)| *ino == dir.ino);
            match fault {
                Some((_, 1)) => return Err(Errno::EIO),
                Some(_) => panic!("a load that panics"),
                None => {}
            }
            let hold = self.probe.hold.lock().take_if(|(ino, ..)| *ino == dir.ino);
            if let Some((_, started, go)) = hold {
                assert!(
                    dir.dir().unwrap().try_lock().is_some(),
                    "the directory's lock is held across its load"
                );
                started.send(()).unwrap();
                go.recv().unwrap();
            }
            Ok(self.dirs[&dir.ino]
                .iter()
                .map(|&(name, ino, mode)| (name.as_bytes().to_vec(), Self::object(ino, mode)))
                .collect())
        }
        fn looks_up_names(&self) -> bool {
            self.by_name.is_some()
        }
        fn quick_lookups(&self) -> bool {
            self.by_name == Some(true)
        }
        fn lookup(&self, dir: &Inode, name: &[u8]) -> Result<Option<InodeArc>> {
            assert!(self.by_name.is_some(), "asked for a name one at a time");
            if self.by_name == Some(false) {
                self.probe.call();
            }
            self.probe.lookups.fetch_add(1, SeqCst);
            Ok(self.dirs[&dir.ino]
                .iter()
                .find(|e| e.0.as_bytes() == name)
                .map(|&(_, ino, mode)| Self::object(ino, mode)))
        }
    }

    fn tree() -> (Arc<Vfs>, Arc<Probe>) {
        tree_ttl(None, None)
    }

    fn tree_of(
        dirs: HashMap<u64, Vec<(&'static str, u64, u32)>>,
        max_dentries: Option<u64>,
    ) -> (Arc<Vfs>, Arc<Probe>) {
        tree_with(dirs, max_dentries, None)
    }

    fn tree_with(
        dirs: HashMap<u64, Vec<(&'static str, u64, u32)>>,
        max_dentries: Option<u64>,
        ttl: Option<std::time::Duration>,
    ) -> (Arc<Vfs>, Arc<Probe>) {
        let probe = Arc::new(Probe::default());
        let fs = TreeFs {
            dirs,
            next: AtomicU64::new(100_000),
            probe: probe.clone(),
            by_name: None,
        };
        let opts = CacheOptions {
            hash_buckets: 256,
            max_negative: None,
            max_dentries,
            ttl,
        };
        (Vfs::new(SuperBlock::new(Box::new(fs), opts)), probe)
    }

    /// The tree of [`tree`], with `/a` holding also `f0` to `f199`, looked up one name at
    /// a time (quickly or not), its cache capped at `max_dentries` and its negative entries
    /// at `max_negative`.
    fn tree_by_name(
        quick: bool,
        max_dentries: u64,
        max_negative: Option<u64>,
    ) -> (Arc<Vfs>, Arc<Probe>) {
        let (dir, file) = (S_IFDIR | 0o755, S_IFREG | 0o644);
        let mut a = vec![("b", B, dir), ("x", 10, file)];
        for i in 0..200u64 {
            let name: &'static str = Box::leak(format!("f{i}").into_boxed_str());
            a.push((name, 1000 + i, file));
        }
        let probe = Arc::new(Probe::default());
        let fs = TreeFs {
            dirs: HashMap::from([
                (ROOT, vec![("a", A, dir), ("d", D, dir)]),
                (A, a),
                (B, vec![("c", 11, file)]),
                (D, vec![]),
            ]),
            next: AtomicU64::new(100_000),
            probe: probe.clone(),
            by_name: Some(quick),
        };
        let opts = CacheOptions {
            hash_buckets: 256,
            max_negative,
            max_dentries: Some(max_dentries),
            ttl: None,
        };
        (Vfs::new(SuperBlock::new(Box::new(fs), opts)), probe)
    }

    /// Loads of whole directories so far.
    fn all_loads(probe: &Probe) -> usize {
        probe.loads.lock().values().sum()
    }

    /// With a capped cache, a lookup asks for its one name (with no guard pinned, unless
    /// the file system says its lookups are quick) and caches the answer, positive or
    /// negative; nothing loads a whole directory but a listing or a change, which then
    /// adds what was not cached.
    #[test]
    fn a_capped_cache_asks_for_one_name() {
        for quick in [false, true] {
            // A cap of 400: `/a` (202 names) is more than a quarter of it.
            let (vfs, probe) = tree_by_name(quick, 400, None);
            let p = vfs.process(Creds::root());
            let lookups = || probe.lookups.load(SeqCst);
            assert_eq!(p.stat("/a/x").unwrap().ino, 10);
            // `/` is loaded whole; `/a` is listed once, found too large, and not kept.
            assert_eq!((lookups(), all_loads(&probe)), (1, 2));
            assert_eq!(vfs.root_fs().stats().dentries, 3, "a, d and x");
            assert_eq!(p.stat("/a/x").unwrap().ino, 10);
            assert_eq!(p.stat("/a/b/c").unwrap().ino, 11);
            assert_eq!(
                (lookups(), all_loads(&probe)),
                (2, 3),
                "b alone; `/a/b` whole"
            );
            assert_eq!(p.stat("/a/nope").unwrap_err(), Errno::ENOENT);
            assert_eq!(p.stat("/a/nope").unwrap_err(), Errno::ENOENT);
            assert_eq!(p.stat("/a/b/c/d").unwrap_err(), Errno::ENOTDIR);
            assert_eq!(
                lookups(),
                3,
                "one lookup of the missing name, then its entry"
            );
            if !quick {
                assert_eq!(probe.pinned.load(SeqCst), 0, "a lookup asked under a guard");
            }
            // A listing loads the directory whole, once, and lists each name once.
            let mut names: Vec<Vec<u8>> = p
                .read_dir("/a")
                .unwrap()
                .into_iter()
                .map(|e| e.name)
                .collect();
            names.sort();
            assert_eq!(names.len(), 202);
            names.dedup();
            assert_eq!(names.len(), 202, "a name listed twice");
            assert_eq!(all_loads(&probe), 4);
            p.mkdir("/a/new", 0o755).unwrap();
            assert!(p.stat("/a/new").unwrap().is_dir());
            assert_eq!(p.stat("/a/f199").unwrap().ino, 1199);
            assert_eq!((lookups(), all_loads(&probe)), (3, 4));
        }
    }

    /// A lookup of one name found missing when the cap on negative entries is full is
    /// answered `ENOENT` and asked once per call, though no entry records it; the answer
    /// is not trusted once a sweep has started since (the sweep may have unloaded the
    /// directory after a load and a change). Breaking either (asking again, or trusting
    /// the answer across a sweep) fails the counts.
    #[test]
    fn a_missing_name_with_no_room_for_its_entry_is_asked_once() {
        for quick in [false, true] {
            let (vfs, probe) = tree_by_name(quick, 400, Some(0));
            let p = vfs.process(Creds::root());
            let sb = vfs.root_fs().clone();
            assert_eq!(p.stat("/a/x").unwrap().ino, 10);
            // The verdict on the negative cap is re-summed every `NEG_RECHECK` admissions.
            for i in 0..2 * NEG_RECHECK {
                assert_eq!(p.stat(format!("/a/none{i}")).unwrap_err(), Errno::ENOENT);
            }
            assert!(sb.negatives_full.load(Relaxed));
            let before = probe.lookups.load(SeqCst);
            assert_eq!(p.stat("/a/zz").unwrap_err(), Errno::ENOENT);
            assert_eq!(
                probe.lookups.load(SeqCst),
                before + 1,
                "asked more than once"
            );
            // Its answer is this thread's last: the next call trusts it; another name's
            // answer replaces it.
            assert_eq!(p.stat("/a/zz").unwrap_err(), Errno::ENOENT);
            assert_eq!(probe.lookups.load(SeqCst), before + 1);
            assert_eq!(p.stat("/a/yy").unwrap_err(), Errno::ENOENT);
            assert_eq!(p.stat("/a/zz").unwrap_err(), Errno::ENOENT);
            assert_eq!(
                probe.lookups.load(SeqCst),
                before + 3,
                "no entry, so asked again"
            );
            // The answer stays this thread's while no sweep starts; a sweep voids it.
            let a = p.stat("/a").unwrap();
            let dir = {
                let guard = crossbeam_epoch::pin();
                let root = sb.root().ptr();
                let d = sb.dcache.lookup_locked(&root, &scan(b"a"), &guard).unwrap();
                d.inode_arc(&guard).unwrap()
            };
            assert_eq!(dir.ino, a.ino);
            assert!(sb.absent(&dir, b"zz"));
            sb.sweeps.fetch_add(1, Relaxed);
            assert!(!sb.absent(&dir, b"zz"), "an answer trusted across a sweep");
        }
    }

    /// The tree of [`tree`], capped at `max_dentries`, with a TTL.
    fn tree_ttl(
        max_dentries: Option<u64>,
        ttl: Option<std::time::Duration>,
    ) -> (Arc<Vfs>, Arc<Probe>) {
        let (dir, file) = (S_IFDIR | 0o755, S_IFREG | 0o644);
        tree_with(
            HashMap::from([
                (ROOT, vec![("a", A, dir), ("d", D, dir), ("s", S, dir)]),
                (S, vec![("l", 12, S_IFLNK | 0o777)]),
                (A, vec![("b", B, dir), ("x", 10, file)]),
                (B, vec![("c", 11, file)]),
                (D, vec![]),
            ]),
            max_dentries,
            ttl,
        )
    }

    /// A file system that answers every revalidation of an object with "its name names
    /// another object now", and every listing with the same names, as a store that keeps
    /// answering stale would: with a TTL of zero, each walk to `/a/x` lists `/a` again and
    /// finds `x` stale again. The call ends with `ESTALE` after a bounded number of rounds,
    /// as Linux gives up on a name that NFS keeps finding stale, instead of walking again
    /// forever (it did: the locked walk retried without bound).
    #[test]
    #[cfg_attr(
        miri,
        ignore = "64 rounds of walks, loads and revalidations against a 20-second deadline; the walk's code runs under Miri in the other tests"
    )]
    fn a_backend_that_keeps_answering_stale_gets_estale_not_a_hang() {
        let (vfs, probe) = tree_ttl(None, Some(std::time::Duration::ZERO));
        let p = vfs.process(Creds::root());
        assert!(p.stat("/a/x").is_ok(), "a fresh answer is served");
        probe.always_stale.store(true, SeqCst);
        let (tx, rx) = mpsc::channel();
        let worker = std::thread::spawn(move || {
            let _ = tx.send((
                p.stat("/a/x").map(|_| ()),
                p.open("/a/x", crate::OFlags::RDONLY, 0).map(|_| ()),
            ));
        });
        let got = rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("a call on an always-stale name came back within 20 s");
        worker.join().unwrap();
        assert_eq!(got, (Err(Errno::ESTALE), Err(Errno::ESTALE)));
        // And a name that is fine again is served again.
        probe.always_stale.store(false, SeqCst);
        let p = vfs.process(Creds::root());
        assert!(p.stat("/a/x").is_ok());
    }

    /// `/w0` .. `/w3`, each holding `f0` .. `f63` (files numbered `1000 * (w + 1) + f`)
    /// and the directory `sub` (numbered `1000 * (w + 1) + 999`, empty).
    fn wide(max_dentries: Option<u64>) -> (Arc<Vfs>, Arc<Probe>) {
        wide_of(4, 64, max_dentries)
    }

    /// `wide` with `n` directories of `files` files (fewer than 999) each.
    fn wide_of(n: u64, files: u64, max_dentries: Option<u64>) -> (Arc<Vfs>, Arc<Probe>) {
        let (dir, file) = (S_IFDIR | 0o755, S_IFREG | 0o644);
        let mut dirs = HashMap::new();
        let mut top = Vec::new();
        for w in 0..n {
            let ino = 100 + w;
            top.push((&*format!("w{w}").leak(), ino, dir));
            let mut files: Vec<(&'static str, u64, u32)> = (0..files)
                .map(|f| (&*format!("f{f}").leak(), 1000 * (w + 1) + f, file))
                .collect();
            files.push(("sub", 1000 * (w + 1) + 999, dir));
            dirs.insert(1000 * (w + 1) + 999, vec![]);
            dirs.insert(ino, files);
        }
        dirs.insert(ROOT, top);
        tree_of(dirs, max_dentries)
    }

    /// With a cap on dentries, walks over more names than it allows evict unused ones
    /// (CLOCK: a name looked up since the last sweep stays once more) and load the
    /// directories again on their next miss; every answer stays right, and the cache stays
    /// near its cap. Directories are never evicted, only their children.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "hundreds of walks and loads; eviction's unsafe code runs under Miri in dentry::tests"
    )]
    fn a_capped_cache_evicts_unused_names_and_loads_them_again() {
        let (vfs, probe) = wide(Some(40));
        let p = vfs.process(Creds::root());
        for round in 0..3 {
            for w in 0..4u64 {
                for f in 0..64u64 {
                    let st = p.stat(format!("/w{w}/f{f}")).unwrap();
                    assert_eq!(st.ino, 1000 * (w + 1) + f, "round {round}");
                }
                assert_eq!(p.stat(format!("/w{w}/nope")), Err(Errno::ENOENT));
                assert_eq!(
                    p.stat(format!("/w{w}/sub")).unwrap().ino,
                    1000 * (w + 1) + 999
                );
                // This thread's path cache holds the names it cached (up to 2,048 per
                // thread): let them go, as a thread walking more names than that does.
                crate::clear_thread_cache();
            }
        }
        let s = vfs.stats().root_fs;
        // The cap, plus what one load adds before the next sweep (65 names), plus the
        // directories (never evicted).
        assert!(s.dentries <= 40 + 66 + 8, "{} dentries", s.dentries);
        assert!(s.dentry_evictions > 0);
        // Each directory was loaded again after its names were swept.
        assert!(loads(&probe, 100) > 1, "{} loads", loads(&probe, 100));
        // The file system was told the numbers of the objects whose names went: files'
        // (directories stay), one per positive name evicted; the rest were the negative
        // entries (one per directory and round).
        let evicted = std::mem::take(&mut *probe.evicted.lock());
        assert!(!evicted.is_empty());
        for &ino in &evicted {
            assert!(ino >= 1000 && ino % 1000 < 64, "evicted {ino}");
        }
        let told = evicted.len() as u64;
        assert!(told <= s.dentry_evictions && s.dentry_evictions <= told + 12);
        // Listings are whole after reloads.
        let mut want: Vec<String> = (0..64).map(|f| format!("f{f}")).collect();
        want.push("sub".into());
        want.sort();
        assert_eq!(names(&p, "/w2"), want);
    }

    /// A walk to a name that a sweep may evict is cached only at its second miss: each
    /// path-cache entry holds its name, so a thread walking names once each (a tree walk)
    /// would otherwise fill its 2,048 ways with names the sweeps can never take, and the
    /// cache would stay that far over its cap (here 256 names and 6 directories against a
    /// cap of 40: the test fails with every first walk cached). A name walked again is
    /// cached, and answered from the path cache after that.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "hundreds of walks and loads; eviction's unsafe code runs under Miri in dentry::tests"
    )]
    fn first_walks_of_names_a_sweep_may_evict_are_not_cached() {
        let (vfs, _probe) = wide(Some(40));
        // A thread of its own: its path cache starts empty.
        std::thread::scope(|s| {
            s.spawn(|| {
                let p = vfs.process(Creds::root());
                for w in 0..4u64 {
                    for f in 0..64u64 {
                        assert_eq!(
                            p.stat(format!("/w{w}/f{f}")).unwrap().ino,
                            1000 * (w + 1) + f
                        );
                    }
                }
                // The sweeps of the last load's own lock calls ran; one more lookup that
                // misses runs one after it.
                assert_eq!(p.stat("/w0/nope"), Err(Errno::ENOENT));
                let s = vfs.stats().root_fs;
                assert!(s.dentry_evictions > 0, "{s:?}");
                // The cap, plus what one load adds before the next sweep (65 names), plus
                // the directories (never evicted).
                assert!(s.dentries <= 40 + 66 + 8, "{} dentries", s.dentries);
                // Walked a second and a third time, a name is cached and answered.
                for _ in 0..2 {
                    assert_eq!(p.stat("/w3/f63").unwrap().ino, 4063);
                }
                assert!(crate::pathcache::cache_answers(1, || {
                    assert_eq!(p.stat("/w3/f63").unwrap().ino, 4063);
                }));
            });
        });
    }

    /// Every call a path operation makes to the file system on its miss path (a listing,
    /// and with a TTL a revalidation) is made with no epoch guard pinned (see `unpin`), for
    /// reads and changes alike, with a TTL of zero (every use revalidates) and with a cap
    /// that has sweeps unload directories between uses; and the answers are right.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "a few hundred operations; `unpin` is covered by its own tests"
    )]
    fn the_miss_path_calls_the_file_system_with_no_guard_pinned() {
        use crate::OFlags;
        for (cap, ttl) in [
            (None, None),
            (Some(2), None),
            (None, Some(std::time::Duration::ZERO)),
            (Some(2), Some(std::time::Duration::ZERO)),
        ] {
            let (vfs, probe) = tree_ttl(cap, ttl);
            let p = vfs.process(Creds::root());
            for round in 0..3 {
                assert_eq!(p.stat("/a/b/c").unwrap().ino, 11);
                assert_eq!(p.stat("/s/l/c").unwrap().ino, 11);
                assert_eq!(p.readlink("/s/l").unwrap(), LINK_TARGET);
                assert_eq!(p.stat("/a/nope").unwrap_err(), Errno::ENOENT);
                assert_eq!(p.stat("/a/x/y").unwrap_err(), Errno::ENOTDIR);
                p.access("/a/x", crate::Access::R_OK).unwrap();
                let fd = p.open("/a/b/c", OFlags::RDONLY, 0).unwrap();
                p.close(fd).unwrap();
                // Changes (in directories loaded once: the test's table does not hold
                // what the engine creates, so a capped cache would lose it).
                if cap.is_some() {
                    crate::clear_thread_cache();
                    continue;
                }
                let new = format!("/d/n{round}");
                p.mkdir(&new, 0o755).unwrap();
                p.rename(&new, "/a/b/m").unwrap();
                p.rmdir("/a/b/m").unwrap();
                let f = p
                    .open("/d/f", OFlags::CREAT | OFlags::WRONLY, 0o644)
                    .unwrap();
                p.close(f).unwrap();
                p.unlink("/d/f").unwrap();
                crate::clear_thread_cache();
            }
            let loads: usize = probe.loads.lock().values().sum();
            let revalidations = probe.revalidations.load(SeqCst);
            assert!(loads >= 4, "{cap:?} {ttl:?}: {loads} loads");
            assert!(ttl.is_none() || revalidations > 0, "{cap:?} {ttl:?}");
            // Every call was made between attempts, and counted.
            assert_eq!(
                vfs.stats().unpinned_calls as usize,
                loads + revalidations,
                "{cap:?} {ttl:?}"
            );
            assert_eq!(
                probe.pinned.load(SeqCst),
                0,
                "{cap:?} {ttl:?}: calls made pinned, of {loads} loads and {revalidations} revalidations"
            );
        }
    }

    /// Without a cap nothing is ever evicted, and each directory is loaded once.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "hundreds of walks and loads; eviction's unsafe code runs under Miri in dentry::tests"
    )]
    fn an_uncapped_cache_evicts_nothing() {
        let (vfs, probe) = wide(None);
        let p = vfs.process(Creds::root());
        for _ in 0..2 {
            for w in 0..4u64 {
                for f in 0..64u64 {
                    p.stat(format!("/w{w}/f{f}")).unwrap();
                }
            }
        }
        let s = vfs.stats().root_fs;
        assert_eq!((s.dentry_evictions, loads(&probe, 100)), (0, 1));
        assert_eq!(s.dentries, 4 + 4 * 65);
    }

    /// File systems dropped by the collector do not flush the collector from inside its
    /// collect, one level deeper per queued file system: with the epoch held back by a
    /// pinned thread while a mount point churns, thousands of file systems queue up, and
    /// the thread that collects them once the epoch moves must not run out of stack. (It
    /// did, in `races::umount_never_detaches_a_mount_in_use` under load: 243 nested
    /// collects on a 2 MiB stack.)
    #[test]
    #[cfg_attr(
        miri,
        ignore = "thousands of mounts; the flush guard is safe code over crossbeam's flush"
    )]
    fn file_systems_dropped_by_a_collect_do_not_collect_again_inside_it() {
        let (vfs, p) = queue_file_systems(3000);
        // A thread as `std::thread::spawn` makes them (2 MiB): about 240 nested collects
        // overflowed one. (A smaller stack would also have to hold whatever other tests'
        // deferred drops this thread's collects run.)
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(|| {
                for _ in 0..64 {
                    crate::reclaim::flush();
                }
            })
            .unwrap()
            .join()
            .unwrap();
        drop(p);
        drop(vfs);
    }

    /// Leaves `n` unmounted file systems in the collector's queue, each in a bag of its
    /// own (a thread held the epoch back while they were unmounted); returns the namespace
    /// they were mounted in, and a process of it.
    fn queue_file_systems(n: usize) -> (Arc<Vfs>, crate::Process) {
        let (release, released) = mpsc::channel::<()>();
        let (pinned, is_pinned) = mpsc::channel();
        let holder = std::thread::spawn(move || {
            let _g = crossbeam_epoch::pin();
            pinned.send(()).unwrap();
            released.recv().unwrap();
        });
        is_pinned.recv().unwrap();
        let vfs = Vfs::new_memfs();
        let p = vfs.process(Creds::root());
        p.mkdir("/m", 0o755).unwrap();
        for _ in 0..n {
            p.mount("/m", crate::MemFs::new(crate::MemFsOptions::default()))
                .unwrap();
            p.umount("/m").unwrap();
            crossbeam_epoch::pin().flush();
        }
        release.send(()).unwrap();
        holder.join().unwrap();
        (vfs, p)
    }

    /// A thread that pins while it exits, after crossbeam's thread-local handle went (as a
    /// thread's path cache does when it drops its entries, if it was made before the
    /// thread's first pin), collects at every pin. With file systems queued, each one's
    /// teardown pinned and collected the next, a level deeper each: 7,228 frames
    /// overflowed a test thread in CI. They are torn down one after another now
    /// (`tear_down`). The exiting thread's stack is that of `std::thread::spawn` (2 MiB).
    #[test]
    #[cfg_attr(miri, ignore = "thousands of mounts")]
    fn an_exiting_thread_tears_queued_file_systems_down_one_by_one() {
        let (vfs, p) = queue_file_systems(3000);
        /// Pins when dropped.
        struct PinsAtExit;
        impl Drop for PinsAtExit {
            fn drop(&mut self) {
                drop(crossbeam_epoch::pin());
            }
        }
        thread_local! {
            static LAST: PinsAtExit = const { PinsAtExit };
        }
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(|| {
                // Made before crossbeam's handle, so destroyed after it.
                LAST.with(|_| {});
                drop(crossbeam_epoch::pin());
            })
            .unwrap()
            .join()
            .unwrap();
        drop(p);
        drop(vfs);
    }

    /// A sweep evicts the names of directories its own thread loaded before anyone
    /// else's: a thread that keeps loading directories (here the main thread, over `/w1`
    /// to `/w7`) sweeps its own, and the directory another live thread loaded (`/w0`)
    /// keeps its names, though nobody looked at them since. With one CLOCK over every
    /// directory, `/w0`, early in the sweep's order, lost its names at every other sweep
    /// (the test fails).
    #[test]
    #[cfg_attr(
        miri,
        ignore = "hundreds of walks and loads; eviction's unsafe code runs under Miri in dentry::tests"
    )]
    fn a_sweep_evicts_its_own_threads_names_first() {
        // Eight directories of 32 files (33 names each), names capped at 120: `/w0` and the
        // two directories the sweeping thread loaded last fit, and each sweep finds more
        // than it needs in that thread's older directories.
        let (vfs, probe, evicted) = sweep_beside_a_loader(8, 120, 4);
        let s = vfs.stats().root_fs;
        assert!(s.sweeps > 2 && s.dentry_evictions > 0, "{s:?}");
        assert!(!evicted.is_empty());
        let theirs: Vec<u64> = evicted.into_iter().filter(|i| i / 1000 == 1).collect();
        assert!(
            theirs.is_empty(),
            "the other thread's names went: {theirs:?}"
        );
        assert_eq!(loads(&probe, 100), 1, "/w0 loaded again");
    }

    /// One thread loads `/w0` of [`wide_of`]`(dirs, 32, Some(cap))` and stays alive while
    /// another stats `/w1`.. `rounds` times over, sweeping as it goes; returns the
    /// namespace, its probe and the numbers the sweeps evicted. Both threads need a tag of
    /// their own, and other tests' threads may hold every one for a while: an attempt in
    /// which either had none is made again.
    fn sweep_beside_a_loader(
        dirs: u64,
        cap: u64,
        rounds: usize,
    ) -> (Arc<Vfs>, Arc<Probe>, Vec<u64>) {
        use crate::sync::{thread_tag, THREAD_TAG_NONE};
        for _ in 0..200 {
            let (vfs, probe) = wide_of(dirs, 32, Some(cap));
            let (loaded, done) = (mpsc::channel(), mpsc::channel::<()>());
            let tagged = std::thread::scope(|s| {
                let (vfs, tx, rx) = (&vfs, loaded.0, done.1);
                let loader = s.spawn(move || {
                    let p = vfs.process(Creds::root());
                    for f in 0..32u64 {
                        assert_eq!(p.stat(format!("/w0/f{f}")).unwrap().ino, 1000 + f);
                    }
                    // Its path cache would hold the names.
                    crate::clear_thread_cache();
                    tx.send(()).unwrap();
                    // Alive (so its tag is its own) until the other has swept.
                    rx.recv().unwrap();
                    thread_tag() != THREAD_TAG_NONE
                });
                let sweeper = s.spawn(move || {
                    loaded.1.recv().unwrap();
                    stat_wide(&vfs.process(Creds::root()), rounds, 1..dirs, 32);
                    done.0.send(()).unwrap();
                    thread_tag() != THREAD_TAG_NONE
                });
                loader.join().unwrap() && sweeper.join().unwrap()
            });
            if tagged {
                let evicted = std::mem::take(&mut *probe.evicted.lock());
                return (vfs, probe, evicted);
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        panic!("no attempt had two threads with tags of their own");
    }

    /// A sweep takes from other threads' names only what keeps the cache over its cap, not
    /// what its own low mark (an eighth of the cap free) still wants: with its own older
    /// directories just short of that mark, the sweeping thread leaves the other thread's
    /// `/w0` alone and sweeps more often instead. Aimed at the low mark from everyone's
    /// (the test fails), its laps over every directory evicted `/w0`'s names: half of
    /// W5's evictions at two threads were another thread's.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "hundreds of walks and loads; eviction's unsafe code runs under Miri in dentry::tests"
    )]
    fn a_sweep_leaves_other_threads_names_once_under_the_cap() {
        // Four directories of 32 files (33 names each), names capped at 80 (the low mark
        // 70): the sweeping thread's `/w1` to `/w3` over four rounds give each sweep enough
        // to get under the cap, not always enough to get to the mark.
        let (vfs, _probe, evicted) = sweep_beside_a_loader(4, 80, 4);
        let s = vfs.stats().root_fs;
        assert!(s.sweeps > 2 && s.dentry_evictions > 0, "{s:?}");
        let theirs: Vec<u64> = evicted.into_iter().filter(|i| i / 1000 == 1).collect();
        assert!(
            theirs.is_empty(),
            "the other thread's names went: {theirs:?}"
        );
    }

    /// [`wide`] with a cap of 40 names, a process, and `/w0` open as a directory.
    fn wide_with_w0_open() -> (Arc<Vfs>, crate::Process, crate::Fd) {
        let (vfs, _) = wide(Some(40));
        let p = vfs.process(Creds::root());
        let fd = p
            .open("/w0", crate::OFlags::RDONLY | crate::OFlags::DIRECTORY, 0)
            .unwrap();
        (vfs, p, fd)
    }

    /// A directory that is open keeps its children, so a listing read in pieces while
    /// sweeps run returns each entry exactly once; a file that is open stays itself.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "hundreds of walks and loads; eviction's unsafe code runs under Miri in dentry::tests"
    )]
    fn an_open_directory_keeps_its_children_through_sweeps() {
        let (vfs, p, fd) = wide_with_w0_open();
        let file = p.open("/w1/f3", crate::OFlags::RDONLY, 0).unwrap();
        let before = p.fstat(file).unwrap();
        let mut seen = Vec::new();
        loop {
            let part = p.getdents(fd, 5).unwrap();
            if part.is_empty() {
                break;
            }
            seen.extend(part.into_iter().map(|e| String::from_utf8(e.name).unwrap()));
            assert!(seen.len() <= 67, "entries seen again: {seen:?}");
            // Sweeps between the pieces.
            for w in 0..4u64 {
                for f in 0..64u64 {
                    p.stat(format!("/w{w}/f{f}")).unwrap();
                }
                crate::clear_thread_cache();
            }
        }
        let n = seen.len();
        seen.sort();
        seen.dedup();
        assert_eq!((seen.len(), n), (67, 67), "each entry once");
        assert!(vfs.stats().root_fs.dentry_evictions > 0);
        assert_eq!(p.fstat(file).unwrap().ino, before.ino);
        assert_eq!(p.stat("/w1/f3").unwrap().ino, before.ino);
        p.close(fd).unwrap();
        p.close(file).unwrap();
    }

    /// A sweep that can evict nothing (what is over the cap is an open directory's
    /// children) is not run again at every locked call: the next waits until the cache is
    /// an eighth of the cap past where it ended. Once the directory is closed, the next
    /// locked call sweeps, and the cache keeps the bound it has without the floor.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "hundreds of walks and loads; eviction's unsafe code runs under Miri in dentry::tests"
    )]
    fn a_sweep_that_frees_nothing_is_not_run_again_at_every_call() {
        let (vfs, p, fd) = wide_with_w0_open();
        // Loads /w0: 65 names, over the cap, all kept while it is open.
        while !p.getdents(fd, 100).unwrap().is_empty() {}
        let before = vfs.stats().root_fs;
        assert!(before.dentries > 40, "{before:?}");
        let lookups = 200;
        for k in 0..lookups {
            assert_eq!(p.stat(format!("/w0/nope{k}")), Err(Errno::ENOENT));
        }
        let after = vfs.stats().root_fs;
        let swept = after.sweeps - before.sweeps;
        // An eighth of the cap is 5: at most one sweep per 5 names added.
        let added = after.dentries.saturating_sub(before.dentries);
        assert!(
            swept <= added / 5 + 1,
            "{swept} sweeps for {lookups} lookups that added {added} names"
        );
        p.close(fd).unwrap();
        // The last close of the directory clears the floor: the next locked call (a lookup
        // that adds one name, far from the floor) sweeps, and the names go (then the lookup
        // loads /w0 again: the cap plus one load).
        assert_eq!(p.stat("/w0/one-more"), Err(Errno::ENOENT));
        let closed = vfs.stats().root_fs;
        assert!(closed.sweeps > after.sweeps, "{closed:?}");
        assert!(
            closed.dentry_evictions > after.dentry_evictions,
            "{closed:?}"
        );
        assert!(closed.dentries <= 40 + 66, "{closed:?}");
        stat_wide(&p, 2, 0..4, 64);
        let s = vfs.stats().root_fs;
        // As in `a_capped_cache_evicts_unused_names_and_loads_them_again`: the cap, one
        // load, the directories.
        assert!(s.dentries <= 40 + 66 + 8, "{s:?}");
        assert!(s.sweeps > after.sweeps, "{s:?}");
    }

    /// `rounds` times, stats files `f0` to `f<files - 1>` of directories `/w<dirs>` of a
    /// [`wide_of`] tree, checks their numbers, and lets this thread's path cache go after
    /// each directory (as a thread walking more names than it holds does).
    fn stat_wide(p: &crate::Process, rounds: usize, dirs: std::ops::Range<u64>, files: u64) {
        for round in 0..rounds {
            for w in dirs.clone() {
                for f in 0..files {
                    let st = p.stat(format!("/w{w}/f{f}")).unwrap();
                    assert_eq!(st.ino, 1000 * (w + 1) + f, "round {round}");
                }
                crate::clear_thread_cache();
            }
        }
    }

    fn loads(p: &Probe, ino: u64) -> usize {
        p.loads.lock().get(&ino).copied().unwrap_or(0)
    }

    fn names(p: &crate::Process, dir: &str) -> Vec<String> {
        let mut v: Vec<String> = p
            .read_dir(dir)
            .unwrap()
            .into_iter()
            .map(|e| String::from_utf8(e.name).unwrap())
            .filter(|n| n != "." && n != "..")
            .collect();
        v.sort();
        v
    }

    /// Each directory is asked once, on its first use; after that misses are answered by
    /// the cache (negative entries), and listings come from the cache.
    #[test]
    fn each_directory_is_loaded_once_on_first_use() {
        let (vfs, probe) = tree();
        let p = vfs.process(Creds::root());
        assert_eq!(p.stat("/a/b/c").unwrap().ino, 11);
        assert_eq!(
            (loads(&probe, ROOT), loads(&probe, A), loads(&probe, B)),
            (1, 1, 1)
        );
        assert_eq!(p.stat("/a/b/c").unwrap().ino, 11);
        assert_eq!(p.stat("/a/nope"), Err(Errno::ENOENT));
        assert_eq!(p.stat("/a/nope"), Err(Errno::ENOENT));
        assert_eq!(names(&p, "/a"), ["b", "x"]);
        assert_eq!(
            (loads(&probe, ROOT), loads(&probe, A), loads(&probe, B)),
            (1, 1, 1)
        );
        assert_eq!(loads(&probe, D), 0, "a directory passed by is not loaded");
        assert!(names(&p, "/d").is_empty());
        assert_eq!(loads(&probe, D), 1);
    }

    /// Every call that changes a directory loads it first, so what it held survives the
    /// change: creating, linking and removing in unloaded directories.
    #[test]
    fn changes_load_the_directory_first() {
        let (vfs, probe) = tree();
        let p = vfs.process(Creds::root());
        p.stat("/a").unwrap();
        assert_eq!(loads(&probe, A), 0);
        p.write_file("/a/new", b"x").unwrap();
        assert_eq!(names(&p, "/a"), ["b", "new", "x"]);
        let (vfs, _) = tree();
        let p = vfs.process(Creds::root());
        p.mkdir("/a/m", 0o755).unwrap();
        assert_eq!(names(&p, "/a"), ["b", "m", "x"]);
        let (vfs, _) = tree();
        let p = vfs.process(Creds::root());
        p.stat("/a/b").unwrap();
        p.link("/a/x", "/a/b/y").unwrap();
        assert_eq!(names(&p, "/a/b"), ["c", "y"]);
        let (vfs, _) = tree();
        let p = vfs.process(Creds::root());
        p.unlink("/a/x").unwrap();
        assert_eq!(names(&p, "/a"), ["b"]);
    }

    /// A directory's emptiness is known only once it is loaded: rmdir and a rename over it
    /// load it first.
    #[test]
    fn an_unloaded_directory_is_not_taken_for_empty() {
        let (vfs, probe) = tree();
        let p = vfs.process(Creds::root());
        p.stat("/a/b").unwrap();
        assert_eq!(loads(&probe, B), 0);
        assert_eq!(p.rmdir("/a/b"), Err(Errno::ENOTEMPTY));
        let (vfs, probe) = tree();
        let p = vfs.process(Creds::root());
        p.mkdir("/e", 0o755).unwrap();
        p.stat("/a/b").unwrap();
        assert_eq!(p.rename("/e", "/a/b"), Err(Errno::ENOTEMPTY));
        assert_eq!(loads(&probe, B), 1);
        // `/d` is empty once loaded: replaced.
        p.rename("/a/b", "/d").unwrap();
        assert_eq!(loads(&probe, D), 1);
        assert_eq!(names(&p, "/d"), ["c"]);
    }

    /// One caller loads a directory while the others wait for it, and it holds no lock
    /// while the file system answers: the load checks that the directory's lock is free,
    /// and calls in other directories go on meanwhile.
    #[test]
    fn one_loader_per_directory_and_no_lock_held_across_it() {
        let (vfs, probe) = tree();
        let p = vfs.process(Creds::root());
        p.stat("/d").unwrap();
        let (started_tx, started) = mpsc::channel();
        let (go, go_rx) = mpsc::channel();
        *probe.hold.lock() = Some((A, started_tx, go_rx));
        let done = Arc::new(AtomicUsize::new(0));
        std::thread::scope(|s| {
            let loader = {
                let (vfs, done) = (vfs.clone(), done.clone());
                s.spawn(move || {
                    let p = vfs.process(Creds::root());
                    assert_eq!(p.stat("/a/b/c").unwrap().ino, 11);
                    done.fetch_add(1, SeqCst);
                })
            };
            started.recv().unwrap();
            let waiters: Vec<_> = (0..4)
                .map(|_| {
                    let (vfs, done) = (vfs.clone(), done.clone());
                    s.spawn(move || {
                        let p = vfs.process(Creds::root());
                        assert_eq!(p.stat("/a/x").unwrap().ino, 10);
                        done.fetch_add(1, SeqCst);
                    })
                })
                .collect();
            // Elsewhere, the namespace goes on while `/a` is being loaded.
            p.mkdir("/d/e", 0o755).unwrap();
            assert_eq!(names(&p, "/d"), ["e"]);
            assert_eq!(
                done.load(SeqCst),
                0,
                "nobody got past the load before it ended"
            );
            go.send(()).unwrap();
            loader.join().unwrap();
            for w in waiters {
                w.join().unwrap();
            }
        });
        assert_eq!(done.load(SeqCst), 5);
        assert_eq!(loads(&probe, A), 1);
    }

    /// A failed load is the caller's error, and the next use asks again; a load that
    /// panics leaves the directory as unloaded, not stuck in its load.
    #[test]
    fn failed_and_panicked_loads_are_tried_again() {
        let (vfs, probe) = tree();
        let p = vfs.process(Creds::root());
        *probe.fault.lock() = Some((A, 1));
        assert_eq!(p.stat("/a/x"), Err(Errno::EIO));
        assert_eq!(p.stat("/a/x").unwrap().ino, 10);
        assert_eq!(loads(&probe, A), 2);
        *probe.fault.lock() = Some((B, 2));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| p.stat("/a/b/c")));
        assert!(r.is_err());
        assert_eq!(p.stat("/a/b/c").unwrap().ino, 11);
        assert_eq!(loads(&probe, B), 2);
    }

    /// A locked walk that follows a symlink whose atime is due touches it itself. The fast
    /// walk leaves that write to the locked one (it writes nothing shared), so when the
    /// first walk to reach the link is the locked one (here: its directory was not loaded,
    /// which the fast walk cannot trust), a locked walk that asked to walk again instead
    /// would ask forever (a mutant of `walk_inner` did, and no test saw it).
    #[test]
    fn a_locked_walk_touches_a_symlink_it_follows() {
        let (vfs, _) = tree();
        let p = vfs.process(Creds::root());
        assert_eq!(p.stat("/s/l/c").unwrap().ino, 11);
        let l = p.lstat("/s/l").unwrap();
        assert!(
            (l.atime.sec, l.atime.nsec) > (l.mtime.sec, l.mtime.nsec),
            "the follow touched atime: {l:?}"
        );
        assert_eq!(
            vfs.stats().locked_rewalks,
            0,
            "the locked walk never walked again"
        );
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    //! The directory-load protocol ([`SuperBlock::load`]) under loom: two callers race to
    //! load one unloaded directory. The file system is asked once (twice when its first
    //! answer fails), and every caller that returns `Ok` finds the directory loaded with
    //! its entry in the cache.
    use super::*;
    use crate::dentry::RcuLookup;
    use crate::inode::Contents;
    use crate::sync::AtomicUsize;
    use crate::types::mode::*;
    use loom::thread;
    use std::sync::atomic::Ordering::SeqCst;

    /// A root directory, unloaded, holding one file `x`; its first answer fails if
    /// `fail_first`.
    struct OneDir {
        loads: Arc<AtomicUsize>,
        fail_first: bool,
    }

    fn inode(ino: u64, mode: u32, contents: Contents) -> InodeArc {
        InodeArc::new(Inode::new(ino, mode, 0, 0, contents, Timespec::default()))
    }

    impl FileSystem for OneDir {
        fn root_inode(&self) -> InodeArc {
            let st = DirState {
                unloaded: true,
                ..Default::default()
            };
            inode(1, S_IFDIR | 0o755, Contents::dir(st))
        }
        test_fs_read_only!();
        test_fs_accounting!();
        fn load_dir(&self, _: &Inode) -> Result<Listing> {
            if self.loads.fetch_add(1, SeqCst) == 0 && self.fail_first {
                return Err(Errno::EIO);
            }
            let mut l = Listing::default();
            l.push(b"x", inode(2, S_IFREG | 0o644, Contents::Special(0)));
            Ok(l)
        }
    }

    /// How a caller loads: the real protocol, or a broken twin that does not claim the
    /// load (`loading`) before it drops the lock.
    #[derive(Clone, Copy, PartialEq)]
    enum Loader {
        Real,
        Unclaimed,
    }

    /// The broken twin: checks `unloaded`, then loads with no claim.
    fn load_unclaimed(sb: &SuperBlock, d: DPtr<'_>, inode: &Inode) -> Result<()> {
        let m = inode.dir().expect("a directory");
        if !m.lock().unloaded {
            return Ok(());
        }
        let entries = sb.ops.load_dir(inode)?;
        let mut st = m.lock();
        entries.for_each(|name, child| {
            sb.dcache.d_alloc(d, &scan(name), Some(child), &mut st);
        });
        st.unloaded = false;
        Ok(())
    }

    /// One caller: loads the root (as `how` says); `false` if it returned `Ok` without
    /// finding the directory loaded and `x` cached.
    fn call(sb: &Arc<SuperBlock>, how: Loader) -> bool {
        let root = sb.root().clone();
        let inode = root.ptr().get().inode_arc(&crossbeam_epoch::pin()).unwrap();
        let r = match how {
            Loader::Real => sb.load(root.ptr(), &inode),
            Loader::Unclaimed => load_unclaimed(sb, root.ptr(), &inode),
        };
        if r.is_err() {
            return true;
        }
        let loaded = !inode.dir().unwrap().lock().unloaded;
        let g = crossbeam_epoch::pin();
        let found = matches!(
            sb.dcache.lookup_rcu(&root.ptr(), &scan(b"x"), &g),
            RcuLookup::Found(..)
        );
        loaded && found
    }

    /// Two callers load the root; returns the number of loads, and whether some caller
    /// returned `Ok` without finding the directory loaded and `x` cached.
    fn race(how: Loader, fail_first: bool) -> (usize, usize, bool) {
        let (most, least) = (
            std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0)),
            std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(usize::MAX)),
        );
        let wrong = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (most2, least2, wrong2) = (most.clone(), least.clone(), wrong.clone());
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(move || {
            let loads = Arc::new(AtomicUsize::new(0));
            let fs = OneDir {
                loads: loads.clone(),
                fail_first,
            };
            let opts = CacheOptions {
                hash_buckets: 1,
                max_negative: None,
                max_dentries: None,
                ttl: None,
            };
            let sb = SuperBlock::new(Box::new(fs), opts);
            let t = {
                let sb = sb.clone();
                thread::spawn(move || call(&sb, how))
            };
            let ok_here = call(&sb, how);
            let ok_there = t.join().unwrap();
            if !(ok_here && ok_there) {
                wrong2.store(true, std::sync::atomic::Ordering::SeqCst);
            }
            let n = loads.load(SeqCst);
            most2.fetch_max(n, std::sync::atomic::Ordering::SeqCst);
            least2.fetch_min(n, std::sync::atomic::Ordering::SeqCst);
            // Tearing the hash down would defer frees while loom ends the execution (its
            // collector would pin again then): leak the file system instead.
            std::mem::forget(sb);
        });
        (
            least.load(std::sync::atomic::Ordering::SeqCst),
            most.load(std::sync::atomic::Ordering::SeqCst),
            wrong.load(std::sync::atomic::Ordering::SeqCst),
        )
    }

    /// One loader: the file system is asked once, whoever wins, and both callers find the
    /// directory loaded.
    #[test]
    fn one_load_per_directory() {
        assert_eq!(race(Loader::Real, false), (1, 1, false));
    }

    /// A failed load leaves the directory unloaded; the other caller (waiting, or coming
    /// after) loads it again, and a caller told `Ok` finds it loaded.
    #[test]
    fn a_failed_load_is_tried_again() {
        let (least, most, wrong) = race(Loader::Real, true);
        assert!(!wrong);
        assert_eq!(
            (least, most),
            (2, 2),
            "one failure, then one load that works"
        );
    }

    /// The model catches loaders that do not claim the load: two of them ask the file
    /// system.
    #[test]
    fn unclaimed_loads_fail() {
        let (_, most, _) = race(Loader::Unclaimed, false);
        assert_eq!(most, 2);
    }

    /// A loaded directory under a TTL of zero (every use revalidates) whose storage
    /// holds `x`, and `y` once `host_y` is set: the revalidation protocol's file system.
    struct Revalidated {
        host_y: Arc<crate::sync::AtomicBool>,
    }

    impl FileSystem for Revalidated {
        fn root_inode(&self) -> InodeArc {
            inode(1, S_IFDIR | 0o755, Contents::empty_dir())
        }
        test_fs_read_only!();
        test_fs_accounting!();
        fn revalidate_dir(&self, _: &Inode, _: bool) -> Result<Option<Listing>> {
            let mut v = vec![(
                b"x".to_vec(),
                inode(2, S_IFREG | 0o644, Contents::Special(0)),
            )];
            if self.host_y.load(SeqCst) {
                v.push((
                    b"y".to_vec(),
                    inode(3, S_IFREG | 0o644, Contents::Special(0)),
                ));
            }
            Ok(Some(v.into_iter().collect()))
        }
    }

    /// A change that locks its directory itself (as rename and rmdir do), makes `y` in
    /// storage and then in the cache, racing a revalidation of the directory. With
    /// `check`, it first waits for the directory to be settled (`SuperBlock::settled`,
    /// loading again when it is not), as the real callers do; without, it is the broken
    /// twin. Returns whether `y` could end up missing from the cache after both finished:
    /// a revalidation that listed storage before the change and reconciled after it
    /// would take `y` out.
    fn change_races_revalidation(check: bool) -> bool {
        let lost = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let lost2 = lost.clone();
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(move || {
            let host_y = Arc::new(crate::sync::AtomicBool::new(false));
            let fs = Revalidated {
                host_y: host_y.clone(),
            };
            let opts = CacheOptions {
                hash_buckets: 1,
                max_negative: None,
                max_dentries: None,
                ttl: Some(std::time::Duration::ZERO),
            };
            let sb = SuperBlock::new(Box::new(fs), opts);
            let t = {
                let sb = sb.clone();
                thread::spawn(move || {
                    let root = sb.root().clone();
                    let inode = root.ptr().get().inode_arc(&crossbeam_epoch::pin()).unwrap();
                    sb.load(root.ptr(), &inode).unwrap();
                })
            };
            let root = sb.root().clone();
            let inode = root.ptr().get().inode_arc(&crossbeam_epoch::pin()).unwrap();
            let m = inode.dir().unwrap();
            loop {
                let mut st = m.lock();
                if check && !SuperBlock::settled(&st) {
                    drop(st);
                    sb.ensure_loaded(root.ptr(), &inode).unwrap();
                    continue;
                }
                host_y.store(true, SeqCst);
                sb.dcache
                    .d_alloc(root.ptr(), &scan(b"y"), Some(inode_of_y()), &mut st);
                break;
            }
            t.join().unwrap();
            let g = crossbeam_epoch::pin();
            let st = m.lock();
            if sb
                .dcache
                .lookup_locked(&root.ptr(), &scan(b"y"), &g)
                .is_none()
            {
                lost2.store(true, std::sync::atomic::Ordering::SeqCst);
            }
            drop(st);
            drop(g);
            std::mem::forget(sb);
        });
        lost.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn inode_of_y() -> InodeArc {
        inode(3, S_IFREG | 0o644, Contents::Special(0))
    }

    /// A big directory (see "Names one at a time"), not loaded, whose storage holds `y`
    /// once `y` is set; its lookups are quick.
    struct Big {
        y: Arc<crate::sync::AtomicBool>,
    }

    impl FileSystem for Big {
        fn root_inode(&self) -> InodeArc {
            let st = DirState {
                unloaded: true,
                big: true,
                ..Default::default()
            };
            inode(1, S_IFDIR | 0o755, Contents::dir(st))
        }
        test_fs_read_only!();
        test_fs_accounting!();
        fn load_dir(&self, _: &Inode) -> Result<Listing> {
            Ok(self
                .lookup_y()
                .into_iter()
                .map(|i| (b"y".to_vec(), i))
                .collect())
        }
        fn looks_up_names(&self) -> bool {
            true
        }
        fn quick_lookups(&self) -> bool {
            true
        }
        fn lookup(&self, _: &Inode, name: &[u8]) -> Result<Option<InodeArc>> {
            assert_eq!(name, b"y");
            Ok(self.lookup_y())
        }
    }

    impl Big {
        fn lookup_y(&self) -> Option<InodeArc> {
            self.y.load(SeqCst).then(inode_of_y)
        }
    }

    /// A lookup of `y` alone in a big directory races a change that loads the directory
    /// whole, creates `y` (in storage, then in the cache: over a negative entry, or as a
    /// new one), and then has a sweep evict `y` and unload the directory again. With
    /// `claim`, the lookup is `SuperBlock::load_name_now`; without, it is the broken twin
    /// that asks storage without claiming the directory (`loading`), and installs its
    /// answer if, under the lock, the directory is still not loaded and `y` not cached.
    /// Returns whether the cache could end up saying `y` does not exist: a negative entry,
    /// or a loaded directory without it.
    fn name_lookup_races_a_change(claim: bool) -> bool {
        let wrong = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let wrong2 = wrong.clone();
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(move || {
            let y = Arc::new(crate::sync::AtomicBool::new(false));
            let fs = Big { y: y.clone() };
            let opts = CacheOptions {
                hash_buckets: 1,
                max_negative: None,
                max_dentries: Some(1000),
                ttl: None,
            };
            let sb = SuperBlock::new(Box::new(fs), opts);
            assert!(sb.by_name);
            let root = sb.root().clone();
            let inode = root.ptr().get().inode_arc(&crossbeam_epoch::pin()).unwrap();
            let t = {
                let (sb, root, inode) = (sb.clone(), root.clone(), inode.clone());
                thread::spawn(move || {
                    if claim {
                        sb.load_name_now(root.ptr(), &inode, b"y", true).unwrap();
                        return;
                    }
                    let found = sb.ops.lookup(&inode, b"y").unwrap();
                    let mut st = inode.dir().unwrap().lock();
                    let g = crossbeam_epoch::pin();
                    let c = scan(b"y");
                    if st.unloaded && sb.dcache.lookup_locked(&root.ptr(), &c, &g).is_none() {
                        sb.dcache.d_alloc(root.ptr(), &c, found, &mut st);
                    }
                })
            };
            let m = inode.dir().unwrap();
            {
                let mut st = sb.lock_dir(root.ptr(), &inode, m).unwrap();
                y.store(true, SeqCst);
                let g = crossbeam_epoch::pin();
                match sb.dcache.lookup_locked(&root.ptr(), &scan(b"y"), &g) {
                    Some(d) => sb.dcache.d_instantiate(d.get(), inode_of_y(), &mut st, &g),
                    None => {
                        sb.dcache
                            .d_alloc(root.ptr(), &scan(b"y"), Some(inode_of_y()), &mut st);
                    }
                }
            }
            {
                // The sweep: `y` goes, and the directory is not loaded any more.
                let mut st = m.lock();
                let g = crossbeam_epoch::pin();
                if let Some(d) = sb.dcache.lookup_locked(&root.ptr(), &scan(b"y"), &g) {
                    let mut dead = DeadBatch::default();
                    if sb.dcache.d_evict(d, &mut st, &mut dead) {
                        st.unloaded = true;
                    }
                }
            }
            t.join().unwrap();
            let g = crossbeam_epoch::pin();
            let st = m.lock();
            let says_absent = match sb.dcache.lookup_locked(&root.ptr(), &scan(b"y"), &g) {
                Some(d) => d.get().inode_ptr(&g).is_none(),
                None => !st.unloaded,
            };
            if says_absent {
                wrong2.store(true, std::sync::atomic::Ordering::SeqCst);
            }
            drop(st);
            drop(g);
            std::mem::forget(sb);
        });
        wrong.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// A lookup of one name claims its directory as a load does: a change made while it
    /// asks waits for it, so its answer never outlives the change.
    #[test]
    fn a_name_lookup_and_a_change_agree() {
        assert!(!name_lookup_races_a_change(true));
    }

    /// The model catches a lookup that does not claim the directory: its answer, given
    /// before the change, is installed after the change and a sweep.
    #[test]
    fn an_unclaimed_name_lookup_fails() {
        assert!(name_lookup_races_a_change(false));
    }

    /// A change waits out a revalidation in progress: what it made stays cached.
    #[test]
    fn a_change_waits_out_a_revalidation() {
        assert!(!change_races_revalidation(true));
    }

    /// The model catches a change that does not: the revalidation's older listing takes
    /// the new name out.
    #[test]
    fn a_change_that_ignores_revalidation_fails() {
        assert!(change_races_revalidation(false));
    }
}

#[cfg(all(test, loom))]
mod xattr_loom_models {
    //! An extended attribute set ([`SuperBlock::xattr_op`]) races the release of the
    //! inode's last hold, which evicts it (memfs). Whatever the interleaving, once both
    //! are done nothing of the attribute is left: the inode space is all free again. The
    //! broken twin calls the file system without a hold, as a set that checked the inode
    //! and then stored would: it can store an attribute on an inode already evicted, and
    //! that attribute's space is never given back.
    use super::*;
    use crate::memfs::{MemFs, MemFsOptions};
    use crate::types::mode::*;
    use loom::thread;

    /// Whether some interleaving leaves inode space charged.
    fn leaks(held: bool) -> bool {
        let leaked = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let leaked2 = leaked.clone();
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(move || {
            let sb = MemFs::new(MemFsOptions {
                max_inodes: Some(4),
                hash_buckets: 1,
                ..Default::default()
            });
            let inode = sb
                .new_inode(S_IFREG | 0o644, 0, 0, 0, None, Timespec::default())
                .unwrap();
            let t = {
                let (sb, inode) = (sb.clone(), inode.clone());
                thread::spawn(move || {
                    let set = |ops: &dyn FileSystem| {
                        ops.set_xattr(&inode, b"user.a", b"v", XattrFlags::empty(), None)
                    };
                    let _ = if held {
                        sb.xattr_op(&inode, set)
                    } else {
                        set(&*sb.ops)
                    };
                })
            };
            // The last link goes: the inode's creator hold is its only one.
            sb.release(&inode);
            t.join().unwrap();
            // The root's 1,024 bytes of the 4,096 are all that may be left.
            if sb.statfs().ffree != 3 {
                leaked2.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        });
        leaked.load(std::sync::atomic::Ordering::SeqCst)
    }

    #[test]
    fn a_set_racing_eviction_leaves_nothing() {
        assert!(!leaks(true));
    }

    #[test]
    fn a_set_without_a_hold_leaks() {
        assert!(leaks(false));
    }
}
