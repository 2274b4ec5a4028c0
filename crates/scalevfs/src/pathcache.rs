//! The full-path cache: one probe per path instead of one per component (Tsai et al.,
//! SOSP 2015), in front of the lockless walk.
//!
//! # Mechanism
//! Each thread keeps a set-associative table (512 sets of 4 ways, least recently used out
//! first, each path with a second set to spill to: see "Two sets") from (namespace,
//! credentials, root and its mount, start directory and its mount, follow flag, path
//! bytes) to the dentry the fast walk reached, with the counters that made that walk
//! valid: the namespace-change *generation*, the mount sequence count and the final
//! dentry's sequence count. A hit is trusted only while all three are unchanged, so it
//! stands for a walk the locked walk could have made at this moment. The mounts are part
//! of the key because one file system mounted at two places has one root dentry: `..` from
//! it leads to different places. One path may be cached under several keys at once
//! (`stat` and `lstat` of it, or two start directories); they share a tag and its two sets,
//! each has a way of its own, and a probe or a new walk of it finds the way whose key and
//! path both match.
//!
//! The generation is [`crate::sync::ChangeSeq`]'s (one for the process, so a file system
//! mounted in several namespaces invalidates all of their caches). Every change that can
//! alter how an existing path resolves without touching its final dentry runs between its
//! `begin` and `end`: a rename, exchange or removal of a directory or a symlink, an unlink
//! of a symlink, a change of a directory's mode or owner (search permission). Mounts move
//! the mount sequence instead. No walk is inserted, and no entry answers, while such a
//! change is in progress, and one that finished moves the generation on: a thread that
//! has seen a change's effect can never get an answer from before it. Creating names and
//! unlinking or renaming non-directories are not such changes: no cached walk passes
//! *through* a name that did not exist or through a file, and the final dentry's own
//! counter catches a change of the name it caches.
//!
//! Only successful, validated fast walks are inserted; errors and negative results never
//! are.
//!
//! # Directories as prefixes
//! A walk to a directory is also the first part of every walk through it: a miss on
//! `dir/name` probes for `dir` (with `follow`, as an intermediate component is followed)
//! and, on a hit, walks `name` alone from the entry's dentry (`process`, `walk_object` and
//! `parent_of`); on a miss it walks to the parent and caches that under `dir`. An entry
//! records how many symlinks its walk followed, and the step starts its count there, so
//! `MAXSYMLINKS` bounds the whole resolution as the walk from the start would. The step's
//! answer stands only if the entry is still valid after it.
//!
//! # Admission
//! An insertion that would evict an entry (its set is full) is admitted only for a path
//! that missed once before, recently: a first miss only records the path's hash tag in a small per-thread
//! *ghost* table (the idea of 2Q and TinyLFU's doorkeeper). A walk over many distinct paths,
//! each used once (a tree walk, W4), then neither pays for an entry it will never use (the
//! references, the copy of the path) nor evicts the hot paths; a path used twice is cached
//! from its second walk.
//!
//! A walk that ends at a name a sweep may evict (a non-directory of a file system whose
//! dentry cache is capped: `SuperBlock::capped`) needs that second miss even for a free
//! way. An entry holds its final name, and a sweep cannot evict a held name: with the
//! first 2,048 walks of each thread cached as they came, W5's threads (stats cycling over
//! 16,000 host files each) held 2,048 names each for ever, and their sweeps tried and
//! failed to evict them at every lap (7.2 evictions tried per stat at two threads, 1.0
//! now).
//!
//! # Two sets
//! A path hashes to its own set and to an *other* set (other bits of the hash). A walk
//! admitted over a full own set (its second miss, see "Admission") goes to a free way of
//! its other set if there is one, and the own set is marked as *spilled*; only when both
//! are full does it evict the own set's least recently used way. A probe reads the own set
//! and, only if that one spilled, the other. With one set per path, a working set of a
//! thousand paths (W5-warm's) put more than four in about one set in twenty, and a set
//! cycled over by five paths in least-recently-used order misses every time (5.9% of
//! W5-warm's stats); with two, 2,048 ways hold it. A walk is in one place at most, since
//! an insertion looks for it in both first; a spilled mark is cleared only with the whole
//! table, so a probe never misses a walk it holds.
//!
//! # What protects each field
//! The table is thread-local: no lock. An entry holds a reference on its final dentry and,
//! for a relative path, on its start directory, so neither is freed (or its address
//! reused) while cached. It also holds a strong count on the inode the final dentry had
//! when the walk was validated: while the dentry's sequence count is the one recorded,
//! the dentry still points at that inode (a dentry's inode changes only in a write
//! section), so a hit may read the inode through the entry's own count. That is how a
//! cached `stat` runs with no epoch guard ([`read_hit`]): its key is made of values the
//! process publishes under a sequence counter (ids and addresses, compared and never
//! dereferenced), and everything it dereferences (the dentry's counter, the inode) is
//! kept by the entry, which only its own thread can drop. An entry also keeps the
//! credentials its walk was made with (a strong count on the process's `Arc`); the key
//! names them by an id that no other credentials ever get, so a hit under a process's
//! current key has that process's current credentials at hand with no guard, which is
//! how an `open` is answered with none ([`EntryView::creds`]). An entry's inode is at most
//! the memory of one inode kept past its unlink until the entry is replaced: its
//! contents go with their last hold as before (`Inode::holds`). The mounts are keyed by
//! their ids, never reused in a namespace.
//! The root needs no reference: a process's root is always its namespace's root dentry
//! (there is no `chroot`), which lives as long as the namespace, and the namespace's id
//! (never reused) is in the key. Nor does an absolute path's start, which is the root. So
//! an insertion writes no line that other threads share but its final dentry's count and
//! its credentials' count (shared only by threads that share one `Process`). It keeps the
//! final mount's index in the mount table snapshot, not the mount:
//! the index is used only while the mount sequence count is unchanged, so the snapshot it
//! indexes is still the current one. All counters are 64 bits: an entry may sit unused for
//! any number of changes and still never match a count it was not inserted at.

use crate::dentry::{DPtr, DRef, Dentry, IPtr};
use crate::inode::InodeArc;
use crate::name::path_hash;
use crate::types::Creds;
use std::cell::RefCell;
use std::sync::Arc;

/// Ways per set: a set's tags and entry pointers fill one 64-byte line.
const WAYS: usize = 4;
/// Sets per thread: 2,048 entries, room for a working set of a thousand hot paths (W5's),
/// with a second set for each path (see "Two sets"). An empty table is 32 KiB; entries are
/// allocated as cached. A table of 1,024 sets (4,096 entries) was tried: an entry holds its
/// dentry and inode, and in a capped hostfs (W5) 4,096 entries a thread held most of the
/// cap, and its trim searched 2.3 nodes per eviction instead of 0.02. A larger table waits
/// for entries that do not pin a capped file system's objects.
const SETS: usize = 512;
/// Every path cached is shorter than this: callers pass only paths that passed the
/// `ENAMETOOLONG` check (the copy is made once, on insertion).
const MAX_PATH: usize = crate::types::limits::PATH_MAX;
/// Ghost slots per thread: the tags of recent misses that were not admitted.
const GHOST_SLOTS: usize = 1024;

/// What identifies a walk, beside the path.
#[derive(Clone, Copy, Eq)]
pub(crate) struct Key {
    pub vfs: u64,
    pub creds: u64,
    pub root: *const Dentry,
    /// The id of the root's mount.
    pub root_mnt: u64,
    pub start: *const Dentry,
    /// The id of the start directory's mount.
    pub start_mnt: u64,
    pub follow: bool,
}

/// Field by field with no branch between the fields: the derived comparison was merged
/// by the compiler into a call to `memcmp` of the six words, out of line on some callers'
/// hit paths.
impl PartialEq for Key {
    #[inline(always)]
    fn eq(&self, o: &Key) -> bool {
        let words = (self.vfs ^ o.vfs)
            | (self.creds ^ o.creds)
            | (self.root as u64 ^ o.root as u64)
            | (self.root_mnt ^ o.root_mnt)
            | (self.start as u64 ^ o.start as u64)
            | (self.start_mnt ^ o.start_mnt);
        (words == 0) & (self.follow == o.follow)
    }
}

struct Entry {
    key: Key,
    path: Box<[u8]>,
    gen: u64,
    mount_seq: u64,
    mnt_idx: usize,
    d: DRef,
    seq: u64,
    /// The final dentry's inode when the walk was validated, and its file system's device
    /// number: while `seq` still holds, the dentry points at this inode, so a hit reads
    /// it through this strong count, with no epoch guard ([`read_hit`]).
    inode: InodeArc,
    dev: u64,
    /// The symlinks the walk followed: a walk that continues from this one (the rest of a
    /// longer path, see `process::Process::walk_object`) starts its count here, so that
    /// `MAXSYMLINKS` bounds the whole resolution as it would the walk from the start.
    links: u32,
    /// A relative path's start directory (see "What protects each field").
    _start: Option<DRef>,
    /// The credentials of the walk (those the key's `creds` id names; see
    /// [`EntryView::creds`]).
    creds: Option<Arc<Creds>>,
}

/// One set: the ways' path hashes (0 for an empty way) beside their entries, so a probe
/// reads one line before it touches an entry. Way 0 is the most recently used.
#[derive(Default)]
#[repr(align(64))]
struct Set {
    tags: [u64; WAYS],
    ways: [Option<Box<Entry>>; WAYS],
}

impl Set {
    /// The way holding the walk of `path` (whose hash is `hash`) under `key`, at whatever
    /// counts. The same path may be cached under several keys (`stat` and `lstat`, two
    /// start directories), each in a way of its own.
    #[inline(always)]
    fn find(&self, hash: u64, key: &Key, path: &[u8]) -> Option<(usize, &Entry)> {
        for i in 0..WAYS {
            if self.tags[i] != hash {
                continue;
            }
            if let Some(e) = self.ways[i].as_deref() {
                if e.key == *key && crate::name::bytes_eq(&e.path, path) {
                    return Some((i, e));
                }
            }
        }
        None
    }

    /// A free way, if the set has one.
    #[inline(always)]
    fn free_way(&self) -> Option<usize> {
        self.ways.iter().position(Option::is_none)
    }

    /// Moves way `i` to the front (most recently used).
    /// (Swaps, not `rotate_right`: over at most three steps, the generic rotation's
    /// `memmove` costs more than the moves.)
    #[inline(always)]
    fn promote(&mut self, i: usize) {
        for j in (0..i).rev() {
            self.tags.swap(j, j + 1);
            self.ways.swap(j, j + 1);
        }
    }
}

/// A thread's table: its sets, and which of them have spilled (see "Two sets").
struct Sets {
    sets: [Set; SETS],
    /// A bit per set, set when a walk whose own set it is was placed in its other set
    /// instead; cleared only with every way ([`clear_thread_cache`]).
    spilled: [u64; SETS / 64],
}

impl Sets {
    /// Whether walks whose own set is `s` may live in their other one.
    #[inline(always)]
    fn spilled(&self, s: usize) -> bool {
        self.spilled[s / 64] & (1 << (s % 64)) != 0
    }

    /// Marks set `s` as spilled: a walk whose own set it is now lives in its other one.
    #[inline]
    fn mark_spilled(&mut self, s: usize) {
        self.spilled[s / 64] |= 1 << (s % 64);
    }
}

/// A new, empty table.
#[inline(never)]
fn new_sets() -> Box<Sets> {
    Box::new(Sets {
        sets: std::array::from_fn(|_| Set::default()),
        spilled: [0; SETS / 64],
    })
}

/// What this thread's path cache did (see [`thread_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathCacheStats {
    /// Probes that answered.
    pub hits: u64,
    /// Probes that did not (no entry, or one no longer valid).
    pub misses: u64,
    /// Walks recorded.
    pub inserts: u64,
}

thread_local! {
    static STATS: std::cell::Cell<PathCacheStats> = const {
        std::cell::Cell::new(PathCacheStats { hits: 0, misses: 0, inserts: 0 })
    };
    /// The sets, allocated at the thread's first insertion (a constant initializer keeps
    /// each access to a flag test: no lazy initialization on the hit path).
    static TABLE: RefCell<Option<Box<Sets>>> = const { RefCell::new(None) };
    /// The tags of recent misses that were not admitted (see "Admission").
    static GHOSTS: RefCell<[u32; GHOST_SLOTS]> = const { RefCell::new([0; GHOST_SLOTS]) };
}

/// `hash`'s ghost slot and tag: other bits than the slot index, and never 0 (an empty ghost).
fn ghost(hash: u64) -> (usize, u32) {
    (
        ((hash >> 8) as usize) % GHOST_SLOTS,
        (hash >> 32) as u32 | 1,
    )
}

/// A cached walk's result: where it ended and the sequence count to validate against.
pub(crate) struct Hit {
    /// The mount, as an index into the mount table snapshot that was current at insertion
    /// (`usize::MAX` for the root mount); valid while the mount sequence is unchanged.
    pub mnt_idx: usize,
    /// The final dentry (a pointer from the entry's reference).
    pub d: *mut Dentry,
    pub seq: u64,
    /// The symlinks the cached walk followed.
    pub links: u32,
}

impl Hit {
    /// The final dentry.
    ///
    /// # Safety
    /// The caller holds an epoch guard for `'g` (the entry's reference may go when the
    /// thread's next insertion evicts it, the memory not before a grace period).
    pub(crate) unsafe fn dentry<'g>(&self) -> DPtr<'g> {
        // SAFETY: the pointer came from a `DRef` (the allocation's provenance), and the
        // caller's guard keeps it allocated.
        unsafe { DPtr::from_raw(self.d) }.expect("a cached dentry")
    }
}

/// Looks `path` up; `hash` is its [`path_hash`]. `gen` (a namespace-change snapshot) and
/// `mount_seq` are the current values, read by the caller under its epoch guard.
#[inline(always)]
pub(crate) fn lookup(key: &Key, path: &[u8], hash: u64, gen: u64, mount_seq: u64) -> Option<Hit> {
    probe(key, path, hash, gen, mount_seq, Locate)
}

/// What a hit found by [`read_hit`] answers: a type rather than a closure, so that its
/// method can be forced inline on every hit path (a closure was left out of line on some).
pub(crate) trait ReadHit {
    type Out;
    /// Reads the answer from the entry (`e`), then checks the counters (the final
    /// dentry's against its count at insertion; the namespace generation; the mount
    /// sequence): `None` if one moved. Must not call into this module, nor drop what might
    /// (a reference it took is handed out in `Out` instead).
    fn answer(&self, e: EntryView<'_>) -> Option<Self::Out>;

    /// Whether `out` is a hit the caller uses, which is counted as one; an answer handed
    /// out only to be dropped is not.
    #[inline(always)]
    fn used(_out: &Self::Out) -> bool {
        true
    }
}

/// What a hit's [`ReadHit::answer`] may read of its entry, all kept alive by the entry's
/// own references while the answer runs.
#[derive(Clone, Copy)]
pub(crate) struct EntryView<'a> {
    /// The final dentry's inode when the walk was validated (see `Entry::inode`).
    pub inode: &'a InodeArc,
    /// Its file system's device number.
    pub dev: u64,
    /// The final dentry, and its sequence count at insertion.
    pub d: &'a Dentry,
    pub seq: u64,
    /// The final mount, as [`Hit::mnt_idx`]: `usize::MAX` for the namespace's root mount.
    pub mnt_idx: usize,
    /// The credentials the walk was made with. The key holds their id, which no other
    /// credentials ever have (`process::CredsBox`), and a process's key carries the id of
    /// its current credentials: so on a hit under a process's key these are that
    /// process's credentials, as current as the key was read. `None` only if the walk had
    /// none to keep (no entry is made then).
    pub creds: Option<&'a Arc<Creds>>,
}

/// Looks `path` up like [`lookup`] and, on a hit, answers with `h` from the entry's inode,
/// with no epoch guard: the entry's own counts keep the dentry and the inode allocated
/// while `h` runs (only this thread can drop the entry, and `h` does not call into this
/// module). A hit that `h` accepts is counted and its way promoted; anything else is left
/// for the guarded path to count.
#[inline(always)]
pub(crate) fn read_hit<H: ReadHit>(
    key: &Key,
    path: &[u8],
    hash: u64,
    gen: u64,
    mount_seq: u64,
    h: H,
) -> Option<H::Out> {
    let r = probe(key, path, hash, gen, mount_seq, Answer(h))?;
    if H::used(&r) {
        count(true);
    }
    Some(r)
}

/// What a probe makes of the current entry it found, if it accepts it: a type rather than
/// a closure, whose method is forced inline (see [`ReadHit`]).
trait OnEntry {
    type Out;
    fn read(self, e: &Entry) -> Option<Self::Out>;
}

/// [`lookup`]'s: where the cached walk ended.
struct Locate;

impl OnEntry for Locate {
    type Out = Hit;

    #[inline(always)]
    fn read(self, e: &Entry) -> Option<Hit> {
        Some(Hit {
            mnt_idx: e.mnt_idx,
            d: e.d.ptr().as_ptr(),
            seq: e.seq,
            links: e.links,
        })
    }
}

/// [`read_hit`]'s: the caller's answer from the entry's inode.
struct Answer<H>(H);

impl<H: ReadHit> OnEntry for Answer<H> {
    type Out = H::Out;

    #[inline(always)]
    fn read(self, e: &Entry) -> Option<H::Out> {
        self.0.answer(EntryView {
            inode: &e.inode,
            dev: e.dev,
            d: &e.d,
            seq: e.seq,
            mnt_idx: e.mnt_idx,
            creds: e.creds.as_ref(),
        })
    }
}

/// What [`lookup`] and [`read_hit`] share: finds the current entry for `path` under `key`
/// and, if `on` accepts it, promotes its way and returns what `on` made of it.
#[inline(always)]
fn probe<O: OnEntry>(
    key: &Key,
    path: &[u8],
    hash: u64,
    gen: u64,
    mount_seq: u64,
    on: O,
) -> Option<O::Out> {
    debug_assert!(path.len() < MAX_PATH, "callers check the length first");
    // SAFETY: the borrow ends within this call.
    let mut t = unsafe { table() }?.borrow_mut();
    let sets = t.as_mut()?;
    let own = set_of(hash);
    // [`locate`]'s search, written out here with the answer read in each set: finding the
    // way with `locate` and indexing it again, or a helper that told "not here" from its
    // answer, cost a hit 4-9 instructions more (the answer, a whole `Stat` for `stat`,
    // moved once more).
    if let Some((i, e)) = sets.sets[own].find(hash, key, path) {
        if e.gen != gen || e.mount_seq != mount_seq {
            return None;
        }
        let r = on.read(e)?;
        if i != 0 {
            sets.sets[own].promote(i);
        }
        return Some(r);
    }
    if !sets.spilled(own) {
        return None;
    }
    let other = sets_of(hash).1;
    let (i, e) = sets.sets[other].find(hash, key, path)?;
    if e.gen != gen || e.mount_seq != mount_seq {
        return None;
    }
    let r = on.read(e)?;
    if i != 0 {
        sets.sets[other].promote(i);
    }
    Some(r)
}

/// The set and way holding the walk of `path` (whose hash is `hash`) under `key`, at
/// whatever counts: in its own set or, if that one spilled, in its other one (see "Two
/// sets"). A walk is in one place at most: every insertion looks here first.
#[inline(always)]
fn locate(t: &Sets, hash: u64, key: &Key, path: &[u8]) -> Option<(usize, usize)> {
    let own = set_of(hash);
    if let Some((i, _)) = t.sets[own].find(hash, key, path) {
        return Some((own, i));
    }
    if !t.spilled(own) {
        return None;
    }
    let other = sets_of(hash).1;
    let (i, _) = t.sets[other].find(hash, key, path)?;
    Some((other, i))
}

/// This thread's table, reached through a pointer that a closure of one line hands out,
/// so that a probe is inlined into its caller: a closure the size of a probe kept
/// `try_with` out of line, and its answer (a whole `Stat` for `stat`) was written to memory
/// there and copied twice on its way to the caller's result.
///
/// # Safety
/// The caller lets go of the reference before it returns.
#[inline(always)]
unsafe fn table<'a>() -> Option<&'a RefCell<Option<Box<Sets>>>> {
    let t = TABLE
        .try_with(|t| t as *const RefCell<Option<Box<Sets>>>)
        .ok()?;
    // SAFETY: this thread's own table: `try_with` succeeded, so its destructor has not
    // run, and it runs only when this thread exits (or after a destructor that is running
    // now returns), so not before the caller lets go of the reference.
    Some(unsafe { &*t })
}

/// The two sets `hash` may live in: its own, and the one it goes to when its own is full
/// (see "Two sets"); they are picked by other bits of the hash.
#[inline(always)]
fn sets_of(hash: u64) -> (usize, usize) {
    ((hash as usize) % SETS, ((hash >> 32) as usize) % SETS)
}

/// The set of `hash`'s own.
#[inline(always)]
fn set_of(hash: u64) -> usize {
    sets_of(hash).0
}

/// Where [`insert`] puts a walk [`admission`] admitted as `at`: the way it found, or for
/// an eviction, a free way of the walk's other set if it has one (marking the own set as
/// spilled), else the own set's least recently used way.
fn place(t: &mut Sets, hash: u64, at: Admitted) -> (&mut Set, usize) {
    if let Some(i) = at.way {
        return (&mut t.sets[at.set], i);
    }
    // An eviction is admitted in the walk's own set (`at.set`).
    let other = sets_of(hash).1;
    if let Some(i) = t.sets[other].free_way() {
        t.mark_spilled(at.set);
        return (&mut t.sets[other], i);
    }
    (&mut t.sets[at.set], WAYS - 1)
}

/// Where an admitted walk goes (see [`admission`]): a set, and in it the way of the walk's
/// own stale entry or a free way, or (`None`) the set's least recently used, which makes
/// it an eviction.
#[derive(Clone, Copy)]
pub(crate) struct Admitted {
    set: usize,
    way: Option<usize>,
}

/// Whether a walk of `path` (whose [`path_hash`] is `hash`) under `key` is to be recorded
/// (see "Admission"), and where: its set holds its stale entry or has a free way, or the
/// path missed once before, recently (for a walk to a name a sweep may evict, as
/// `holds_a_capped_name` tells, only the last two). A first miss only records the path's
/// tag in the ghost table, and gets `None`. Inline, and asked before anything else of the recording,
/// so that a walk of a path seen once (a tree walk, W4) costs two table lookups and no
/// call; [`insert`] takes the answer and does not search the set again.
#[inline(always)]
pub(crate) fn admission(
    hash: u64,
    key: &Key,
    path: &[u8],
    holds_a_capped_name: impl FnOnce() -> bool,
) -> Option<Admitted> {
    let own = set_of(hash);
    let placed = TABLE
        .try_with(|t| match t.borrow().as_ref() {
            // Made at the first insertion: every way is free.
            None => (!holds_a_capped_name()).then_some((own, 0)),
            Some(t) => locate(t, hash, key, path).or_else(|| {
                let way = t.sets[own].free_way()?;
                (!holds_a_capped_name()).then_some((own, way))
            }),
        })
        .ok()?;
    if let Some((set, way)) = placed {
        return Some(Admitted {
            set,
            way: Some(way),
        });
    }
    let seen = GHOSTS
        .try_with(|g| {
            let mut g = g.borrow_mut();
            let (i, tag) = ghost(hash);
            let seen = g[i] == tag;
            g[i] = if seen { 0 } else { tag };
            seen
        })
        .unwrap_or(false);
    seen.then_some(Admitted {
        set: own,
        way: None,
    })
}

/// Records a validated fast walk of `path`, whose [`path_hash`] is `hash`, where
/// [`admission`] put it (`at`; nothing else touches this thread's table in between).
/// `gen` and `mount_seq` must have been read before the walk started, and the caller has
/// checked that neither moved until after the walk was validated.
#[allow(clippy::too_many_arguments)]
pub(crate) fn insert(
    key: Key,
    root: DPtr<'_>,
    start: DPtr<'_>,
    path: &[u8],
    hash: u64,
    gen: u64,
    mount_seq: u64,
    mnt_idx: usize,
    d: DPtr<'_>,
    seq: u64,
    inode: IPtr<'_>,
    dev: u64,
    links: u32,
    creds: Option<&Arc<Creds>>,
    at: Admitted,
) {
    debug_assert_eq!(hash, path_hash(path));
    debug_assert!(path.len() < MAX_PATH, "callers check the length first");
    let Some(dr) = DRef::try_get(d) else {
        return;
    };
    let start = if start == root {
        None
    } else {
        match DRef::try_get(start) {
            Some(s) => Some(s),
            None => return,
        }
    };
    let e = Box::new(Entry {
        key,
        path: path.into(),
        gen,
        mount_seq,
        mnt_idx,
        d: dr,
        seq,
        inode: inode.arc(),
        dev,
        links,
        _start: start,
        creds: creds.cloned(),
    });
    let old = TABLE
        .try_with(|t| {
            let mut t = t.borrow_mut();
            let sets = t.get_or_insert_with(new_sets);
            let (set, i) = place(sets, hash, at);
            set.tags[i] = hash;
            let old = set.ways[i].replace(e);
            set.promote(i);
            old
        })
        .ok()
        .flatten();
    let _ = STATS.try_with(|s| {
        let mut v = s.get();
        v.inserts += 1;
        s.set(v);
    });
    // References are dropped outside the borrow: a drop may pin the epoch.
    drop(old);
}

/// This thread's path-cache counters since it started (each thread has its own cache).
pub fn thread_stats() -> PathCacheStats {
    STATS.try_with(|s| s.get()).unwrap_or_default()
}

/// Whether `calls` (which make their own checks) were answered from this thread's path
/// cache `n` times, at one of a hundred tries (tests). The namespace-change generation is
/// the process's: a rename made by a test running beside the caller invalidates every
/// cached walk, so one try may miss; the next is answered from the cache again.
#[cfg(test)]
pub(crate) fn cache_answers(n: u64, mut calls: impl FnMut()) -> bool {
    (0..100).any(|_| {
        let before = thread_stats().hits;
        calls();
        thread_stats().hits == before + n
    })
}

/// Counts a probe's outcome (the caller validated the answer: a hit is one it used).
#[inline]
pub(crate) fn count(hit: bool) {
    let _ = STATS.try_with(|s| {
        let mut v = s.get();
        if hit {
            v.hits += 1;
        } else {
            v.misses += 1;
        }
        s.set(v);
    });
}

/// Empties this thread's table (tests; and a way to release the references it holds).
pub fn clear_thread_cache() {
    let old: Vec<_> = TABLE
        .try_with(|t| {
            let mut t = t.borrow_mut();
            let Some(t) = t.as_mut() else {
                return Vec::new();
            };
            let old = t
                .sets
                .iter_mut()
                .flat_map(|s| s.ways.iter_mut().map(Option::take))
                .collect();
            t.spilled = [0; SETS / 64];
            for s in t.sets.iter_mut() {
                s.tags = [0; WAYS];
            }
            old
        })
        .unwrap_or_default();
    drop(old);
    // What the entries held may now wait for a grace period: let it go.
    crate::reclaim::flush();
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{ghost, set_of, sets_of, thread_stats, PathCacheStats};
    use crate::dentry::RcuLookup;
    use crate::name::{path_hash, scan};
    use crate::{Creds, Errno, Vfs};

    /// Runs `f` on a new thread, whose path cache and counters start empty.
    fn on_fresh_thread(f: impl FnOnce() + Send) {
        std::thread::scope(|s| s.spawn(f).join().unwrap());
    }

    /// What `round` saw, run on a fresh thread with a process of its own until a round in
    /// which no other test moved the namespace-change counter (it is process-wide):
    /// `round` returns what it saw and whether the counter moved only as it did itself.
    fn quiet_round<T: Send>(
        vfs: &std::sync::Arc<Vfs>,
        round: impl Fn(&crate::Process) -> (T, bool) + Sync,
    ) -> T {
        for _ in 0..20 {
            let (saw, quiet) = std::thread::scope(|s| {
                s.spawn(|| round(&vfs.process(Creds::root())))
                    .join()
                    .unwrap()
            });
            if quiet {
                return saw;
            }
        }
        panic!("the namespace never stayed quiet for a round");
    }

    /// `n` names ("n<i>", children of the root) whose paths share their own set, not the
    /// root's; the last one's sets (own, other) also pass `last`.
    fn names_sharing_a_set(n: usize, last: impl Fn((usize, usize)) -> bool) -> Vec<String> {
        let root_set = set_of(path_hash(b"/"));
        let mut by_set = std::collections::HashMap::<usize, Vec<String>>::new();
        (0..32768)
            .find_map(|i| {
                let name = format!("n{i}");
                let sets = sets_of(path_hash(format!("/{name}").as_bytes()));
                if sets.0 == root_set {
                    return None;
                }
                let v = by_set.entry(sets.0).or_default();
                if v.len() + 1 < n || last(sets) {
                    v.push(name);
                }
                (v.len() == n).then(|| v.clone())
            })
            .expect("names share a set")
    }

    /// The namespace-change counter now.
    fn gen() -> Option<u64> {
        crate::sync::ns_changes().snapshot()
    }

    /// What `round` (reads only) gave in an attempt during which no other test changed the
    /// namespace (the counter is process-wide, and a change empties every thread's
    /// entries). `setup(i)` runs before attempt `i` and may change the namespace itself.
    fn undisturbed<T>(mut setup: impl FnMut(usize), mut round: impl FnMut(usize) -> T) -> T {
        for i in 0..20 {
            setup(i);
            let g0 = gen();
            let saw = round(i);
            if g0.is_some() && gen() == g0 {
                return saw;
            }
        }
        panic!("the namespace never stayed quiet for a round");
    }

    /// The counters `f` moved on this thread.
    fn counted(f: impl FnOnce()) -> PathCacheStats {
        let a = thread_stats();
        f();
        let b = thread_stats();
        PathCacheStats {
            hits: b.hits - a.hits,
            misses: b.misses - a.misses,
            inserts: b.inserts - a.inserts,
        }
    }

    fn stats(hits: u64, misses: u64, inserts: u64) -> PathCacheStats {
        PathCacheStats {
            hits,
            misses,
            inserts,
        }
    }

    /// `fstatat` under a directory descriptor answers from the cache after its first walk
    /// (with no reference on the description), and never for a path a change altered: a
    /// rename of a directory on the way, a descriptor number reused for another directory,
    /// a directory on the way that the caller may no longer search.
    #[test]
    fn fstatat_under_a_descriptor_is_cached_and_follows_changes() {
        for check in [false, true] {
            fstatat_under_a_descriptor(check);
        }
    }

    /// One run of the test above; with `check`, each cached answer is also compared with
    /// the locked walk (check mode).
    fn fstatat_under_a_descriptor(check: bool) {
        use crate::{AtFlags, OFlags};
        let vfs = Vfs::new_memfs();
        vfs.set_check_mode(check);
        let root = vfs.process(Creds::root());
        root.mkdir("/d", 0o755).unwrap();
        root.mkdir("/d/a", 0o755).unwrap();
        root.write_file("/d/a/f", b"x").unwrap();
        root.mkdir("/e", 0o755).unwrap();
        root.write_file("/e/f", b"y").unwrap();
        let (df, ef) = (
            root.stat("/d/a/f").unwrap().ino,
            root.stat("/e/f").unwrap().ino,
        );
        on_fresh_thread(|| {
            let p = vfs.process(Creds::user(1000, 1000, vec![]));
            let at = |fd, path: &str| p.fstatat(fd, path, AtFlags::empty()).map(|s| s.ino);
            let fd = p.open("/d", OFlags::RDONLY | OFlags::DIRECTORY, 0).unwrap();
            // Two entries: the walk, and its directory `a` (a prefix for other names in it).
            let walk = || counted(|| assert_eq!(at(fd, "a/f"), Ok(df)));
            let first = undisturbed(|_| super::clear_thread_cache(), |_| walk());
            assert_eq!(first, stats(0, 1, 2));
            assert_eq!(undisturbed(|_| (), |_| (walk(), walk()).1), stats(1, 0, 0));
            root.rename("/d/a", "/d/b").unwrap();
            assert_eq!(at(fd, "a/f"), Err(Errno::ENOENT));
            assert_eq!(at(fd, "b/f"), Ok(df));
            assert_eq!(at(fd, "b/f"), Ok(df));
            // The number, closed and given to another directory, starts from that one.
            assert_eq!(at(fd, "f"), Err(Errno::ENOENT));
            p.close(fd).unwrap();
            let fd2 = p.open("/e", OFlags::RDONLY | OFlags::DIRECTORY, 0).unwrap();
            assert_eq!(fd2, fd);
            assert_eq!(at(fd2, "f"), Ok(ef));
            assert_eq!(at(fd2, "f"), Ok(ef));
            // A directory on the way closed to the caller: no cached answer.
            root.chmod("/d/b", 0o700).unwrap();
            let fd3 = p.open("/d", OFlags::RDONLY | OFlags::DIRECTORY, 0).unwrap();
            assert_eq!(at(fd3, "b/f"), Err(Errno::EACCES));
            root.chmod("/d/b", 0o755).unwrap();
            let walk = || counted(|| assert_eq!(at(fd3, "b/f"), Ok(df)));
            assert_eq!(undisturbed(|_| (), |_| (walk(), walk()).1), stats(1, 0, 0));
            // Another name in `b` is walked from `b`'s entry: one step, one insert. Each
            // attempt has a new name, never walked before.
            let step = undisturbed(
                |i| root.write_file(format!("/d/b/g{i}"), b"z").unwrap(),
                |i| {
                    let dg = root.stat(format!("/d/b/g{i}")).unwrap().ino;
                    assert_eq!(at(fd3, "b/f"), Ok(df));
                    counted(|| assert_eq!(at(fd3, &format!("b/g{i}")), Ok(dg)))
                },
            );
            assert_eq!(step, stats(0, 1, 1));
            assert_eq!(at(fd3, "b/missing"), Err(Errno::ENOENT));
            root.chmod("/d/b", 0o700).unwrap();
            assert_eq!(at(fd3, "b/f"), Err(Errno::EACCES));
            assert_eq!(at(fd3, "b/h"), Err(Errno::EACCES));
            // Not a directory.
            let file = p.open("/e/f", OFlags::RDONLY, 0).unwrap();
            assert_eq!(at(file, "x"), Err(Errno::ENOTDIR));
        });
    }

    /// Each probe counts one hit or one miss, and each walk recorded one insert; a path
    /// cached once answers from then on; `clear_thread_cache` empties the table.
    #[test]
    fn probes_are_counted_and_clearing_empties_the_table() {
        let vfs = Vfs::new_memfs();
        vfs.process(Creds::root()).write_file("/f", b"x").unwrap();
        // Another test's namespace change empties every thread's entries: such a round is
        // run again.
        let saw = quiet_round(&vfs, |p| {
            let stat = |path: &str, ok: bool| counted(|| assert_eq!(p.stat(path).is_ok(), ok));
            let g0 = gen();
            let mut saw = vec![stat("/f", true), stat("/f", true), stat("/f", true)];
            super::clear_thread_cache();
            saw.push(stat("/f", true));
            saw.push(stat("/none", false));
            saw.push(stat("/none", false));
            (saw, gen() == g0 && g0.is_some())
        });
        let (hit, fill) = (stats(1, 0, 0), stats(0, 1, 1));
        // An empty slot takes the walk at its first miss; errors are never cached.
        let want = [fill, hit, hit, fill, stats(0, 1, 0), stats(0, 1, 0)];
        assert_eq!(saw, want);
    }

    /// Admission and replacement: a walk that would evict another path's entry (its set
    /// is full) is recorded only at its second recent miss, and another path's miss (in
    /// another ghost slot, or in the same slot with another tag) does not count for it;
    /// what it evicts is the set's least recently used entry.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "searches 32k hashes for colliding names; no unsafe code"
    )]
    fn a_path_that_would_evict_is_admitted_at_its_second_miss() {
        // Seven names in one set (not the root's): `a` and three fillers fill it; `b`, `c`
        // and `d` compete for it. `d` has `b`'s ghost slot and another tag; the others have
        // ghost slots of their own. `b`'s tag is even, so a tag that lost its low bit
        // would be the empty ghost.
        let named: Vec<(String, u64)> = (0..32768)
            .map(|i| {
                let n = format!("n{i}");
                let h = path_hash(format!("/{n}").as_bytes());
                (n, h)
            })
            .collect();
        let root_set = set_of(path_hash(b"/"));
        let pick = || {
            for (b, hb) in named.iter().filter(|(_, h)| (h >> 32) % 2 == 0) {
                let (ib, tb) = ghost(*hb);
                if set_of(*hb) == root_set {
                    continue;
                }
                let same = |h: u64| set_of(h) == set_of(*hb);
                // Other sets that can be filled with names of their own (not the root's,
                // nor this one).
                let apart = |h: u64| ![root_set, set_of(*hb)].contains(&sets_of(h).1);
                if !apart(*hb) {
                    continue;
                }
                let Some((d, _)) = named
                    .iter()
                    .find(|(_, h)| same(*h) && apart(*h) && ghost(*h).0 == ib && ghost(*h).1 != tb)
                else {
                    continue;
                };
                let mut used = vec![ib];
                let mut others = Vec::new();
                for (n, h) in named.iter().filter(|(_, h)| same(*h)) {
                    // The first is `c`, the third `f1`, which are admitted over the full
                    // set below: their other sets must be ones the test can fill.
                    let fits = ![0, 2].contains(&others.len()) || apart(*h);
                    if others.len() < 5 && fits && !used.contains(&ghost(*h).0) {
                        used.push(ghost(*h).0);
                        others.push(n.clone());
                    }
                }
                if let [c, a, f1, f2, f3] = &others[..] {
                    return [a, f1, f2, f3, b, c, d].map(|n| n.clone());
                }
            }
            panic!("no names share a set so");
        };
        let [a, f1, f2, f3, b, c, d] = pick();
        // A walk admitted over a full set goes to its other set if that one has room (see
        // `spills_to_its_other_set`): fill the other sets of `b`, `c`, `d` and `f1` first,
        // with names of their own, so that admission here must evict.
        let hash = |n: &str| path_hash(format!("/{n}").as_bytes());
        let own = set_of(hash(&a));
        let mut fillers: Vec<String> = Vec::new();
        for x in [&b, &c, &d, &f1].map(|n| sets_of(hash(n)).1) {
            if x == own || fillers.iter().any(|n| set_of(hash(n)) == x) {
                continue;
            }
            fillers.extend(
                named
                    .iter()
                    .filter(|(_, h)| set_of(*h) == x)
                    .take(4)
                    .map(|(n, _)| n.clone()),
            );
        }
        let vfs = Vfs::new_memfs();
        for n in [&a, &f1, &f2, &f3, &b, &c, &d].into_iter().chain(&fillers) {
            vfs.process(Creds::root())
                .write_file(format!("/{n}"), b"x")
                .unwrap();
        }
        let saw = quiet_round(&vfs, |p| {
            let stat = |n: &String| counted(|| assert!(p.stat(format!("/{n}")).is_ok()));
            let g0 = gen();
            let mut saw: Vec<_> = fillers.iter().map(stat).collect();
            saw.extend([&a, &f1, &f2, &f3].map(stat));
            saw.extend([&b, &c, &a, &d, &b, &b, &b, &f1, &f1, &a, &f3, &f2].map(stat));
            (saw, gen() == g0 && g0.is_some())
        });
        let (hit, fill, ghost) = (stats(1, 0, 0), stats(0, 1, 1), stats(0, 1, 0));
        let want = [
            // The other sets fill, and a set with room admits at once.
            vec![fill; fillers.len() + 4],
            vec![
                ghost, // b's first miss only leaves a ghost,
                ghost, // which does not admit c;
                hit,   // a was not evicted;
                ghost, // d leaves its tag in b's ghost slot,
                ghost, // which does not admit b;
                fill,  // b's next miss is admitted,
                hit,   // and answers.
                ghost, // f1, the least recently used, was evicted and starts over,
                fill,  // and is admitted in f2's place;
                hit,   // a, used since, stays,
                hit,   // and so does f3;
                ghost, // f2 was evicted.
            ],
        ]
        .concat();
        assert_eq!(saw, want);
    }

    /// A walk admitted over a full set goes to its other set while that one has room (see
    /// "Two sets"), evicting nobody, and is answered there; its own set's walks stay. A
    /// round in which another test changed the namespace (the counter is process-wide)
    /// is run again.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "searches 32k hashes for colliding names; no unsafe code"
    )]
    fn spills_to_its_other_set() {
        let root_set = set_of(path_hash(b"/"));
        // The fifth name, the one that spills, must have an other set apart.
        let names = names_sharing_a_set(5, |(own, other)| ![own, root_set].contains(&other));
        let vfs = Vfs::new_memfs();
        let p0 = vfs.process(Creds::root());
        for n in &names {
            p0.write_file(format!("/{n}"), b"x").unwrap();
        }
        let saw = quiet_round(&vfs, |p| {
            let stat = |n: &str| counted(|| assert!(p.stat(format!("/{n}")).is_ok()));
            let g0 = gen();
            let mut saw: Vec<_> = names.iter().map(|n| stat(n)).collect();
            saw.push(stat(&names[4]));
            saw.extend(names.iter().map(|n| stat(n)));
            (saw, gen() == g0 && g0.is_some())
        });
        let (hit, fill) = (stats(1, 0, 0), stats(0, 1, 1));
        let want = [
            vec![fill; 4],
            // The fifth leaves a ghost, then is admitted into its other set.
            vec![stats(0, 1, 0), fill],
            // All five are there.
            vec![hit; 5],
        ]
        .concat();
        assert_eq!(saw, want);
    }

    /// A relative path's entry holds a reference on its start directory, so that no other
    /// directory can take its address (and match the key) while the entry lives; an
    /// absolute path's entry holds none on the root, which lives as long as the namespace.
    /// Letting go of the entries gives the reference back.
    #[test]
    fn a_relative_entry_holds_its_start_directory() {
        let vfs = Vfs::new_memfs();
        let p0 = vfs.process(Creds::root());
        p0.mkdir("/d", 0o755).unwrap();
        p0.write_file("/d/f", b"x").unwrap();
        let fs = &vfs.root_mount().fs;
        let g = crossbeam_epoch::pin();
        let RcuLookup::Found(d, _) = fs.dcache.lookup_rcu(&fs.root().ptr(), &scan(b"d"), &g) else {
            panic!("/d is cached");
        };
        let d = crate::dentry::DRef::try_get(d).unwrap();
        drop(g);
        let root = fs.root();
        let saw = quiet_round(&vfs, |p| {
            let dfd = p
                .open("/d", crate::OFlags::RDONLY | crate::OFlags::DIRECTORY, 0)
                .unwrap();
            // The open cached "/d" (an entry holding /d as its final): start empty.
            super::clear_thread_cache();
            let g0 = gen();
            let (d0, r0) = (d.cold.refs.count(), root.cold.refs.count());
            let rel = || assert!(p.fstatat(dfd, "f", crate::AtFlags::empty()).is_ok());
            let rel_inserts = counted(rel).inserts;
            let d_held = d.cold.refs.count() - d0;
            let abs_inserts = counted(|| assert!(p.stat("/d/f").is_ok())).inserts;
            let root_held = root.cold.refs.count() - r0;
            let quiet = gen() == g0 && g0.is_some();
            super::clear_thread_cache();
            let d_left = d.cold.refs.count() - d0;
            p.close(dfd).unwrap();
            (
                vec![rel_inserts, d_held, abs_inserts, root_held, d_left],
                quiet,
            )
        });
        // The relative walk's entry holds its start; the absolute walk and its directory
        // `/d` (under the root, as a prefix) hold no root; clearing gives `/d` back.
        assert_eq!(saw, [1, 1, 2, 0, 0]);
    }

    /// A walk recorded again after its entry went stale (a namespace change) goes back
    /// into its own way: in a full set it is admitted at once and evicts nobody. The same
    /// path under another key (`lstat` against `stat`) is another entry, beside the first,
    /// never in its place. Other tests in this binary change the namespace too (the counter
    /// is process-wide), so a round that saw a change it did not make is run again.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "searches 32k hashes for colliding names; no unsafe code"
    )]
    fn a_stale_entry_is_replaced_in_its_own_way() {
        let names = names_sharing_a_set(4, |_| true);
        let [a, f1, f2, f3] = [&names[0], &names[1], &names[2], &names[3]];
        let vfs = Vfs::new_memfs();
        let p0 = vfs.process(Creds::root());
        for n in &names {
            p0.write_file(format!("/{n}"), b"x").unwrap();
        }
        p0.mkdir("/z", 0o755).unwrap();
        let saw = quiet_round(&vfs, |p| {
            let mut saw = Vec::new();
            let stat = |n: &str| counted(|| assert!(p.stat(format!("/{n}")).is_ok()));
            let lstat = |n: &str| counted(|| assert!(p.lstat(format!("/{n}")).is_ok()));
            let g0 = gen();
            saw.push(stat(a));
            saw.push(lstat(a));
            saw.push(stat(a));
            saw.push(lstat(a));
            saw.push(stat(f1));
            saw.push(stat(f2));
            saw.push(stat(f3));
            let mut quiet = gen() == g0 && g0.is_some();
            // A directory's mode changes how paths through it resolve.
            p.chmod("/z", 0o700).unwrap();
            let g1 = gen();
            saw.push(stat(a));
            saw.push(lstat(a));
            saw.push(stat(f1));
            saw.push(stat(f2));
            for _ in 0..2 {
                saw.push(stat(a));
                saw.push(lstat(a));
                saw.push(stat(f1));
                saw.push(stat(f2));
            }
            quiet &= gen() == g1 && g1 != g0 && g1.is_some();
            (saw, quiet)
        });
        let (hit, fill) = (stats(1, 0, 0), stats(0, 1, 1));
        let want = [
            // stat and lstat of `a` are two entries; the set fills up, and a
            // fifth walk is not admitted at its first miss.
            fill,
            fill,
            hit,
            hit,
            fill,
            fill,
            stats(0, 1, 0),
            // Each stale entry is replaced in its own way, at its first miss.
            fill,
            fill,
            fill,
            fill, // And all four are there.
            hit,
            hit,
            hit,
            hit,
            hit,
            hit,
            hit,
            hit,
        ];
        assert_eq!(saw, want);
    }

    /// Issue 8, defect 8: entries kept a 32-bit dentry count. A file rename bumps only the
    /// renamed dentry's count, so an entry left unused while its dentry passed 2^31 more
    /// write sections matched again and answered for the old name. Counts are 64 bits now.
    #[test]
    fn an_entry_never_matches_a_count_it_was_not_made_at() {
        let vfs = Vfs::new_memfs();
        let p = vfs.process(Creds::root());
        p.write_file("/f", b"x").unwrap();
        for _ in 0..3 {
            p.stat("/f").unwrap();
        }
        let fs = &vfs.root_mount().fs;
        let g = crossbeam_epoch::pin();
        let RcuLookup::Found(d, _) = fs.dcache.lookup_rcu(&fs.root().ptr(), &scan(b"f"), &g) else {
            panic!("/f is cached");
        };
        p.rename("/f", "/g").unwrap();
        // With the rename's section, 2^31 sections in all: a 32-bit count is back where
        // the entry recorded it.
        d.seq.advance((1 << 31) - 1);
        drop(g);
        assert_eq!(p.stat("/f"), Err(Errno::ENOENT));
        assert!(p.stat("/g").is_ok());
    }
}
