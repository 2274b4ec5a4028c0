//! [`Process`]: a caller's view of a [`Vfs`] and the POSIX calls.
//!
//! # State and what protects it
//! - `ctx` (root and working directory) and `creds` are epoch-protected pointers to
//!   immutable values: calls load them under their guard with no lock and no write; `chdir`,
//!   `chroot`-like changes and `set_creds` publish a new value under `ctx_lock` and free the
//!   old one after a grace period. The old working directory stops counting as a user of
//!   its mount at once, so a call that starts from the working directory holds that mount
//!   itself (`held_ctx`; see `mount`, "A published place").
//! - `ids` (`KeyIds`): what a path-cache key takes from `ctx` and `creds`, as plain values
//!   under a sequence counter, for a cached `stat` that pins no epoch. Written under
//!   `ctx_lock`, in one write section with the publication of the `ctx` or `creds` they
//!   describe, so a caller that reads the ids and then `ctx` (or the other way round)
//!   never sees the older of the two after the newer.
//! - `umask` is an atomic.
//! - `files`, the descriptor table, is read without a lock under the epoch guard; its
//!   writers (open, close, dup) serialize on its allocation mutex (see `file`).
//!
//! # Lock order
//! ```text
//! ctx_lock
//! FdTable::alloc
//! Vfs mount lock                (mount, umount; a locked walk's confirm, holding nothing else)
//!   SuperBlock::rename_lock          (cross-directory renames of directories only)
//!     directory mutexes         (several: sorted by address, `DirLocks`)
//!       FileData rwlock
//!         inode attr_lock
//! ```
//!
//! # Holding and walking again
//! Every call that acts where its walk ended holds that mount (a `MountHold`, or its open
//! file or working directory) and confirms it against `umount` (see `walk`, "Holding a
//! position"). A locked walk whose find went away before the call took its reference
//! returns `Fail::Retry`, and `walk::retry` walks again.
//!
//! # Namespace changes
//! Create, unlink and rename lock only the directories they change (and the target
//! directory a rename replaces). Linux serializes every cross-directory rename on one
//! per-file-system mutex; here only a rename that moves a directory to another parent, or
//! replaces a directory in another parent, takes it (it keeps the ancestry stable for the
//! loop check). Renames of files across directories take just the two directory locks.

use crate::backend::{StoreAttr, SuperBlock};
use crate::dentry::{DPtr, DRef, Dentry, GaveUp, IPtr, MOUNTED, ROOT, UNHASHED};
use crate::errno::{host, Errno, Result};
use crate::file::{Desc, FdTable, FileRef, Handle, Loc, NewFile, OpenFile};
use crate::inode::InodeArc;
use crate::inode::{AttrUpdate, DirState, Inode, Times, MAX_FILE_SIZE};
use crate::mount::{Mount, MountHold, MountTable};
use crate::name::{check_len, Component};
use crate::pathcache;
use crate::sync::effects::{self, effect};
use crate::sync::{ns_changes, NsChange};
use crate::sync::{AtomicU64, AtomicUsize, Mutex, MutexGuard, SeqCount};
use crate::types::{limits, mode::*, *};
use crate::walk::{self, retry, with_walk, Ctx, Fail, Flags, Found, Last, Pos, Walked};
use crate::Vfs;
use crossbeam_epoch::{Atomic, Guard, Owned};
use std::ffi::OsStr;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::{Acquire, Relaxed, SeqCst};
use std::sync::Arc;

mod attr;
mod dir;
mod helpers;
mod locks;
mod mounts;
mod open;
mod paths;
mod rename;
mod xattr;

pub use xattr::XattrsOf;

struct FsCtx {
    root: Loc,
    cwd: Loc,
}

/// Credentials with an identity for the path cache: every value published gets a new id.
pub(crate) struct CredsBox {
    /// Shared with the path-cache entries made under these credentials (see
    /// `pathcache::Entry`), so that an open answered from the cache with no epoch guard
    /// checks permissions against them.
    pub(crate) creds: Arc<Creds>,
    pub(crate) id: u64,
}

impl CredsBox {
    fn new(creds: Creds) -> CredsBox {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        CredsBox {
            creds: Arc::new(creds),
            id: NEXT.fetch_add(1, Relaxed),
        }
    }
}

/// What a path-cache key takes from a process (`pathcache::Key`): the root, the working
/// directory, their mounts' ids and the credentials' id, as plain values that are compared,
/// never dereferenced, so a cached `stat` reads them with no epoch guard
/// ([`Process::stat_cached_by`]). Written with `ctx` and `creds`, under `ctx_lock`, in a
/// write section of `seq`; read under `seq`.
struct KeyIds {
    seq: SeqCount,
    root: AtomicUsize,
    root_mnt: AtomicU64,
    cwd: AtomicUsize,
    cwd_mnt: AtomicU64,
    creds: AtomicU64,
}

/// A consistent reading of [`KeyIds`].
#[derive(Clone, Copy)]
struct Ids {
    root: *const Dentry,
    root_mnt: u64,
    cwd: *const Dentry,
    cwd_mnt: u64,
    creds: u64,
}

impl Ids {
    fn of(ctx: &FsCtx, creds: u64) -> Ids {
        Ids {
            root: ctx.root.d.ptr().as_ptr(),
            root_mnt: ctx.root.mnt.id,
            cwd: ctx.cwd.d.ptr().as_ptr(),
            cwd_mnt: ctx.cwd.mnt.id,
            creds,
        }
    }
}

impl KeyIds {
    fn new(ids: Ids) -> KeyIds {
        KeyIds {
            seq: SeqCount::new(),
            root: AtomicUsize::new(ids.root as usize),
            root_mnt: AtomicU64::new(ids.root_mnt),
            cwd: AtomicUsize::new(ids.cwd as usize),
            cwd_mnt: AtomicU64::new(ids.cwd_mnt),
            creds: AtomicU64::new(ids.creds),
        }
    }

    /// Sets the ids, and runs `publish` (which publishes the context and credentials they
    /// were taken from) in the same write section, so that no reader sees the ids and the
    /// published values disagree; the caller holds `ctx_lock`.
    fn set<R>(&self, ids: Ids, publish: impl FnOnce() -> R) -> R {
        self.seq.write_begin();
        self.root.store(ids.root as usize, Relaxed);
        self.root_mnt.store(ids.root_mnt, Relaxed);
        self.cwd.store(ids.cwd as usize, Relaxed);
        self.cwd_mnt.store(ids.cwd_mnt, Relaxed);
        self.creds.store(ids.creds, Relaxed);
        let r = publish();
        self.seq.write_end();
        r
    }

    /// The ids as they were at one moment, or `None` while they change.
    #[inline(always)]
    fn get(&self) -> Option<Ids> {
        let s = self.seq.read_begin()?;
        let ids = Ids {
            root: self.root.load(Relaxed) as *const Dentry,
            root_mnt: self.root_mnt.load(Relaxed),
            cwd: self.cwd.load(Relaxed) as *const Dentry,
            cwd_mnt: self.cwd_mnt.load(Relaxed),
            creds: self.creds.load(Relaxed),
        };
        (!self.seq.read_retry(s)).then_some(ids)
    }
}

/// A caller: root, working directory, credentials, umask and descriptor table.
pub struct Process {
    vfs: Arc<Vfs>,
    ctx: Atomic<FsCtx>,
    creds: Atomic<CredsBox>,
    ids: KeyIds,
    umask: AtomicU32,
    pub(crate) files: FdTable,
    ctx_lock: Mutex<()>,
}

/// Checks a user path like [`cpath`] and hashes it for the path cache, in one pass. Inline:
/// three callers (stat, access and their `*at` forms), each a cached hit's first step, where
/// the call and its saved registers cost about a tenth of the hit.
#[inline(always)]
fn cpath_hashed(p: &Path) -> Result<(&[u8], u64)> {
    let b = p.as_os_str().as_bytes();
    if b.len() >= limits::PATH_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    let (h, nul) = crate::name::path_hash_nul(b);
    if nul {
        return Err(Errno::EINVAL);
    }
    Ok((b, h))
}

/// Checks a user path: no NUL (`EINVAL`), shorter than `PATH_MAX` (`ENAMETOOLONG`).
fn cpath(p: &Path) -> Result<&[u8]> {
    let b = p.as_os_str().as_bytes();
    if b.len() >= limits::PATH_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    if crate::name::has_nul(b) {
        return Err(Errno::EINVAL);
    }
    Ok(b)
}

/// [`cpath`] for a path that must name something (Linux's `getname` without
/// `LOOKUP_EMPTY`): empty is `ENOENT`.
fn cpath_named(p: &Path) -> Result<&[u8]> {
    let b = cpath(p)?;
    if b.is_empty() {
        return Err(Errno::ENOENT);
    }
    Ok(b)
}

/// Where a walk starts.
#[derive(Clone, Copy)]
struct Start<'g> {
    mnt: &'g Arc<Mount>,
    d: DPtr<'g>,
}

/// What `AT_EMPTY_PATH` names: a description's object, or the working directory.
#[derive(Clone, Copy)]
struct Target<'a> {
    mnt: &'a Arc<Mount>,
    inode: &'a InodeArc,
    flags: OFlags,
    /// The description's data descriptor (a stored file's), if it has one.
    data: Option<BorrowedFd<'a>>,
}

/// The parent directory a walk that stops at the parent found, held (see `walk`, "Holding
/// a position") until the operation is done.
struct Parent<'a, 'g> {
    pos: Pos<'g>,
    last: Last<'a>,
    trailing: bool,
    _hold: MountHold<'g>,
}

impl<'g> Start<'g> {
    fn pos(&self, locked: bool, guard: &'g Guard) -> std::result::Result<Pos<'g>, Fail> {
        Pos::at(self.mnt, self.d, locked, guard)
    }

    /// A whole walk of `path` from here (a fresh symlink count).
    fn walk<'a>(
        &self,
        cx: &Ctx<'g>,
        path: &'a [u8],
        flags: Flags,
        locked: bool,
    ) -> std::result::Result<Walked<'a, 'g>, Fail>
    where
        'g: 'a,
    {
        self.walk_counting(cx, path, flags, locked, &mut 0)
    }

    /// A walk of `path` from here that counts the symlinks it follows in `links`.
    fn walk_counting<'a>(
        &self,
        cx: &Ctx<'g>,
        path: &'a [u8],
        flags: Flags,
        locked: bool,
        links: &mut u32,
    ) -> std::result::Result<Walked<'a, 'g>, Fail>
    where
        'g: 'a,
    {
        walk::walk(cx, self.pos(locked, cx.guard)?, path, flags, locked, links)
    }
}

/// A `stat` result whose equality, for check mode's comparison of a fast walk with a locked
/// one, is the identity of the object the walk found (device, inode number, file type): its
/// other attributes may change between the two walks without any namespace change (a write
/// changes the size and times), and both readings are right at their moments.
#[derive(Debug)]
struct StatOf(Stat);

impl PartialEq for StatOf {
    fn eq(&self, other: &StatOf) -> bool {
        let (a, b) = (&self.0, &other.0);
        a.dev == b.dev && a.ino == b.ino && a.mode & S_IFMT == b.mode & S_IFMT
    }
}

/// The stamp of a change made now: coarse (see `Timespec::now_coarse`); each inode it is
/// stored in makes it fine-grained where a coarse one would hide the change
/// (`Inode::change_stamp`).
fn now() -> Timespec {
    Timespec::now_coarse()
}

/// Several directory mutexes, locked in address order (seed 002: one global order, so two
/// renames can never wait on each other in a cycle).
struct DirLocks<'a> {
    /// The held locks in address order, `n` of them; fixed slots, so that taking the locks
    /// of a rename allocates nothing.
    held: [Option<(*const Mutex<DirState>, MutexGuard<'a, DirState>)>; MAX_LOCKED_DIRS],
    n: usize,
}

/// The most directories one operation locks together: a rename's two parents and the
/// directory it replaces.
const MAX_LOCKED_DIRS: usize = 3;

impl<'a> DirLocks<'a> {
    /// Locks `dirs` (at least one; duplicates allowed) in address order.
    fn lock(dirs: &[&'a Mutex<DirState>]) -> DirLocks<'a> {
        assert!(
            !dirs.is_empty() && dirs.len() <= MAX_LOCKED_DIRS,
            "1 to {MAX_LOCKED_DIRS} directories to lock"
        );
        let mut order = [dirs[0]; MAX_LOCKED_DIRS];
        order[..dirs.len()].copy_from_slice(dirs);
        let order = &mut order[..dirs.len()];
        order.sort_unstable_by_key(|m| *m as *const Mutex<DirState>);
        let mut locks = DirLocks {
            held: [None, None, None],
            n: 0,
        };
        for (k, &m) in order.iter().enumerate() {
            if k > 0 && std::ptr::eq(order[k - 1], m) {
                continue;
            }
            locks.held[locks.n] = Some((m as *const _, m.lock()));
            locks.n += 1;
        }
        locks
    }

    /// Whether every held directory is loaded and no other caller is loading or
    /// revalidating one (see `SuperBlock::settled`). A sweep of the cache may have
    /// unloaded one since the caller loaded it (`backend`, "Bounded caches"), and a
    /// revalidation drops the lock while the file system answers (`backend`, "Revalidation"): a
    /// caller that finds them unsettled drops the locks and loads again
    /// (`SuperBlock::ensure_loaded`) before it changes anything.
    fn settled(&self) -> bool {
        self.held[..self.n]
            .iter()
            .all(|h| h.as_ref().is_some_and(|(_, st)| SuperBlock::settled(st)))
    }

    fn idx(&self, m: &Mutex<DirState>) -> usize {
        self.held[..self.n]
            .iter()
            .position(|h| h.as_ref().is_some_and(|(p, _)| std::ptr::eq(*p, m)))
            .expect("directory not locked")
    }

    /// The state under a held slot's lock.
    fn slot<'s>(
        h: &'s mut Option<(*const Mutex<DirState>, MutexGuard<'a, DirState>)>,
    ) -> &'s mut DirState {
        &mut h.as_mut().expect("a held slot").1
    }

    fn get(&mut self, m: &Mutex<DirState>) -> &mut DirState {
        let i = self.idx(m);
        Self::slot(&mut self.held[i])
    }

    /// Two states at once; `None` for the second when both are the same directory.
    fn get2(
        &mut self,
        a: &Mutex<DirState>,
        b: &Mutex<DirState>,
    ) -> (&mut DirState, Option<&mut DirState>) {
        let (i, j) = (self.idx(a), self.idx(b));
        if i == j {
            return (Self::slot(&mut self.held[i]), None);
        }
        if i < j {
            let (x, y) = self.held.split_at_mut(j);
            (Self::slot(&mut x[i]), Some(Self::slot(&mut y[0])))
        } else {
            let (x, y) = self.held.split_at_mut(i);
            (Self::slot(&mut y[0]), Some(Self::slot(&mut x[j])))
        }
    }
}

/// Linux `check_sticky`: in a sticky directory only the file's owner, the directory's
/// owner or root may remove or rename an entry.
fn sticky_denies(dir: &Inode, victim: &Inode, creds: &Creds) -> bool {
    dir.mode() & S_ISVTX != 0
        && creds.uid != 0
        && victim.uid() != creds.uid
        && dir.uid() != creds.uid
}

/// Linux `may_delete`, after the victim is known to exist.
fn may_delete(dir: &Inode, d: &Dentry, victim: &Inode, is_dir: bool, creds: &Creds) -> Result<()> {
    dir.permission(creds, Access::W_OK | Access::X_OK)?;
    if sticky_denies(dir, victim, creds) {
        return Err(Errno::EPERM);
    }
    if is_dir {
        if !victim.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        if d.flags() & ROOT != 0 {
            return Err(Errno::EBUSY);
        }
    } else if victim.is_dir() {
        return Err(Errno::EISDIR);
    }
    Ok(())
}

/// Owner, group and mode of a new inode in `dir` (Linux `inode_init_owner`).
fn init_owner(dir: &Inode, creds: &Creds, mut mode: u32) -> (u32, u32, u32) {
    let gid = if dir.mode() & S_ISGID != 0 {
        if mode & S_IFMT == S_IFDIR {
            mode |= S_ISGID;
        }
        dir.gid()
    } else {
        creds.gid
    };
    if mode & S_IFMT != S_IFDIR
        && mode & (S_ISGID | 0o010) == (S_ISGID | 0o010)
        && creds.uid != 0
        && !creds.in_group(gid)
    {
        mode &= !S_ISGID;
    }
    (creds.uid, gid, mode)
}

/// The set-id bits a write or truncate by a non-root caller clears (Linux
/// `should_remove_suid` with `setattr_should_drop_sgid`, 6.2 and later): set-user-id always;
/// set-group-id if the group may execute, or if the caller is not in the file's group.
fn write_kill_bits(inode: &Inode, creds: &Creds) -> u32 {
    let mode = inode.mode();
    if creds.uid == 0 || mode & S_IFMT != S_IFREG {
        return 0;
    }
    let mut k = mode & S_ISUID;
    if mode & S_ISGID != 0 && (mode & 0o010 != 0 || !creds.in_group(inode.gid())) {
        k |= S_ISGID;
    }
    k
}

/// The accesses an open's access mode asks for (Linux `ACC_MODE`): mode 3 asks for both,
/// and gives a descriptor that can do neither (`ioctl`-only, as on Linux).
fn acc_mode(flags: OFlags) -> (bool, bool) {
    match flags.0 & 3 {
        0 => (true, false),
        1 => (false, true),
        _ => (true, true),
    }
}

/// What kind of object a create makes.
enum NewKind<'a> {
    Dir,
    Node(u32, u64),
    Symlink(&'a [u8]),
}

/// A path-cache hit: where the cached walk ended, and what validates it.
struct Cached<'g> {
    pos: Pos<'g>,
    gen: u64,
    ms: u64,
    /// The symlinks the cached walk followed (where a walk continuing from it counts on).
    links: u32,
}

impl Cached<'_> {
    /// Whether nothing the cached walk depends on moved since the entry was made: the final
    /// dentry, the namespace generation and the mount table. Call after using the answer.
    #[inline(always)]
    fn still_valid(&self, cx: &Ctx<'_>) -> bool {
        !self.pos.d.seq.read_retry(self.pos.seq)
            && ns_changes().snapshot() == Some(self.gen)
            && !cx.vfs.mount_seq().read_retry(self.ms)
    }
}

/// `path` as a directory and a last name, for a walk that reaches the directory from the
/// path cache (or caches it): `None` for credentials that are not cached, one component,
/// a trailing slash, or a last `.` or `..`. The directory of `/name` is `/`.
#[inline(always)]
fn split_last<'a>(cx: &Ctx<'_>, path: &'a [u8]) -> Option<(&'a [u8], &'a [u8])> {
    let i = path.iter().rposition(|&b| b == b'/')?;
    if cx.creds_id() == 0 || i + 1 == path.len() {
        return None;
    }
    let name = &path[i + 1..];
    let dir = if i == 0 { &path[..1] } else { &path[..i] };
    (name != b"." && name != b"..").then_some((dir, name))
}

/// How the directory a [`Process::walk_object`] stepped from was reached, to be checked
/// again after the step's result is used: the directory's dentry and the sample of its
/// counter, the mount sequence, and for a path-cache hit the namespace generation (what
/// [`Cached::still_valid`] and `Walked::validate` check). Four words, not the whole parent
/// walk: with them an [`ObjectWalk`] is 128 bytes, which the compiler moves with a few
/// vector stores, where the 184 bytes it took with the parent's walk inside were a
/// `memcpy` call at each move (three per cold `stat`, 87 of its 1,705 instructions).
#[derive(Clone, Copy)]
struct ParentCheck<'g> {
    d: DPtr<'g>,
    seq: u64,
    ms: u64,
    /// The namespace generation a path-cache hit was made under; read only if `how` says
    /// the directory came from the cache.
    gen: u64,
}

/// Where the directory of a [`ParentCheck`] came from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ParentFrom {
    /// The path cache ([`Cached`]), which keeps only cacheable walks.
    Cache,
    /// A fast walk to the parent, cacheable or not (see `Walked::cacheable`).
    Walk { cacheable: bool },
}

impl<'g> ParentCheck<'g> {
    /// A path-cache hit's check.
    fn cached(h: &Cached<'g>) -> ParentCheck<'g> {
        ParentCheck {
            d: h.pos.d,
            seq: h.pos.seq,
            ms: h.ms,
            gen: h.gen,
        }
    }

    /// Whether the walk to the directory still holds (see [`Cached::still_valid`] and
    /// `Walked::validate`).
    #[inline]
    fn still_valid(&self, from: ParentFrom, cx: &Ctx<'_>) -> bool {
        !self.d.seq.read_retry(self.seq)
            && (from != ParentFrom::Cache || ns_changes().snapshot() == Some(self.gen))
            && !cx.vfs.mount_seq().read_retry(self.ms)
    }
}

/// A walk to an object ([`Process::walk_object`]): the walk (or its last step), the
/// symlinks the whole resolution followed, and how the step's directory was reached
/// (`None`: the walk was whole, or locked, and has nothing more to check).
struct ObjectWalk<'a, 'g> {
    w: Walked<'a, 'g>,
    parent: Option<ParentCheck<'g>>,
    links: u32,
    from: ParentFrom,
}

impl<'g> ObjectWalk<'_, 'g> {
    /// Where the walk ended.
    fn pos(&self) -> Pos<'g> {
        self.w.pos()
    }

    /// Whether the path cache may keep the whole walk (see `Walked::cacheable`): a
    /// directory reached from the cache was cacheable when it was cached.
    fn cacheable(&self) -> bool {
        self.w.cacheable
            && match (&self.parent, self.from) {
                (Some(_), ParentFrom::Walk { cacheable }) => cacheable,
                _ => true,
            }
    }

    /// `Walked::validate` for the whole walk: the step's and the directory's.
    fn validate(&self, cx: &Ctx<'g>) -> std::result::Result<(), Fail> {
        self.w.validate(cx)?;
        self.parent_valid(cx)
    }

    /// `Walked::confirm` for the whole walk.
    fn confirm(&self, cx: &Ctx<'g>) -> std::result::Result<(), Fail> {
        self.w.confirm(cx)?;
        self.parent_valid(cx)
    }

    fn parent_valid(&self, cx: &Ctx<'g>) -> std::result::Result<(), Fail> {
        match &self.parent {
            Some(p) if !p.still_valid(self.from, cx) => Err(Fail::Retry),
            _ => Ok(()),
        }
    }
}

/// A call's use of the path cache for a whole path (`stat`, `access`, `open` of an existing
/// object): its key, and the counters read before the probe and the walk, which an entry
/// records and a hit is checked against.
struct WholePath<'g> {
    key: pathcache::Key,
    /// The key's start: the root for an absolute path.
    start: DPtr<'g>,
    hash: u64,
    gen: Option<u64>,
    ms: Option<u64>,
    /// Whether the caller's credentials are cached (not a one-off `access` set).
    cacheable: bool,
}

impl<'g> WholePath<'g> {
    /// Reads the counters; `hash` is `path`'s [`crate::name::path_hash`].
    #[inline(always)]
    fn new(cx: &Ctx<'g>, start: Start<'g>, path: &[u8], hash: u64, follow: bool) -> Self {
        let (kd, km) = if path.first() == Some(&b'/') {
            (cx.root, cx.root_mnt)
        } else {
            (start.d, start.mnt)
        };
        WholePath {
            key: pathcache::Key {
                vfs: cx.vfs.id,
                creds: cx.creds_id(),
                root: cx.root.as_ptr(),
                root_mnt: cx.root_mnt.id,
                start: kd.as_ptr(),
                start_mnt: km.id,
                follow,
            },
            start: kd,
            hash,
            gen: ns_changes().snapshot(),
            ms: cx.vfs.mount_seq().read_begin(),
            cacheable: cx.creds_id() != 0,
        }
    }

    /// The cached walk of `path`, if there is one: use it, then check
    /// [`Cached::still_valid`].
    #[inline(always)]
    fn probe(&self, cx: &Ctx<'g>, path: &[u8]) -> Option<Cached<'g>> {
        if !self.cacheable {
            return None;
        }
        cached(cx, &self.key, path, self.hash, self.gen?, self.ms?)
    }

    /// Records a validated fast walk of `path` that ended at `p` after following `links`
    /// symlinks, if nothing it depends on moved since the counters were read.
    fn record(&self, cx: &Ctx<'g>, path: &[u8], p: Pos<'g>, links: u32) {
        let (true, Some(gen), Some(ms)) = (self.cacheable, self.gen, self.ms) else {
            return;
        };
        // An entry holds its final name against the sweeps of a capped cache: a walk to a
        // name they may evict is cached only once it is walked again (see "Admission").
        let capped = || p.d.flags() & crate::dentry::DIR == 0 && p.mnt.fs.capped();
        let Some(at) = pathcache::admission(self.hash, &self.key, path, capped) else {
            return;
        };
        if let (Some(idx), Some(inode)) = (walk::mount_index(cx.vfs, p.mnt, cx.guard), p.inode) {
            if ns_changes().snapshot() == Some(gen) {
                pathcache::insert(
                    self.key,
                    cx.root,
                    self.start,
                    path,
                    self.hash,
                    gen,
                    ms,
                    idx,
                    p.d,
                    p.seq,
                    inode,
                    p.mnt.dev(),
                    links,
                    cx.cached_creds.map(|b| &b.creds),
                    at,
                );
            }
        }
    }
}

/// Looks `path` up in the path cache under `key`; `gen` and `ms` are the namespace-change
/// snapshot and the mount sequence read before. The answer is to be used, then checked
/// with [`Cached::still_valid`].
#[inline(always)]
fn cached<'g>(
    cx: &Ctx<'g>,
    key: &pathcache::Key,
    path: &[u8],
    hash: u64,
    gen: u64,
    ms: u64,
) -> Option<Cached<'g>> {
    let h = pathcache::lookup(key, path, hash, gen, ms)?;
    // SAFETY: `cx.guard` is held for the caller's whole call.
    let d: DPtr<'g> = unsafe { h.dentry() };
    let mnt = walk::mount_at(cx.vfs, h.mnt_idx, cx.guard)?;
    Some(Cached {
        pos: Pos {
            mnt,
            d,
            seq: h.seq,
            inode: d.get().inode_ptr(cx.guard),
        },
        gen,
        ms,
        links: h.links,
    })
}

impl Process {
    pub(crate) fn new(vfs: Arc<Vfs>, creds: Creds) -> Process {
        let root = Loc::new(vfs.root_mount().clone(), vfs.root_mount().root.clone());
        let ctx = FsCtx {
            cwd: root.clone(),
            root,
        };
        let creds = CredsBox::new(creds);
        Process {
            vfs,
            ids: KeyIds::new(Ids::of(&ctx, creds.id)),
            ctx: Atomic::new(ctx),
            creds: Atomic::new(creds),
            umask: AtomicU32::new(0o022),
            files: FdTable::default(),
            ctx_lock: Mutex::new(()),
        }
    }

    /// The namespace this process lives in.
    pub fn vfs(&self) -> &Arc<Vfs> {
        &self.vfs
    }

    /// A copy of this process: same root, working directory, credentials and umask, and
    /// the same open file descriptions under the same numbers (like `fork`).
    pub fn fork(&self) -> Process {
        let g = crossbeam_epoch::pin();
        let ctx = self.ctx_ref(&g);
        let ctx = FsCtx {
            root: ctx.root.clone(),
            cwd: ctx.cwd.clone(),
        };
        let creds = CredsBox::new(self.creds_ref(&g).clone());
        Process {
            vfs: self.vfs.clone(),
            ids: KeyIds::new(Ids::of(&ctx, creds.id)),
            ctx: Atomic::new(ctx),
            creds: Atomic::new(creds),
            umask: AtomicU32::new(self.umask.load(Relaxed)),
            files: self.files.fork(),
            ctx_lock: Mutex::new(()),
        }
    }

    /// The root and working directory, with the working directory's mount held against
    /// `umount` while the caller uses them: `chdir` gives the old one's count back at
    /// once, so a caller that loaded it must hold the mount itself (free for the
    /// namespace's root mount). See `mount`, "A published place".
    fn held_ctx<'g>(&self, g: &'g Guard) -> (&'g FsCtx, MountHold<'g>) {
        crate::mount::hold_published(&self.vfs.mount_sync, || {
            let ctx = self.ctx_ref(g);
            (&ctx.cwd.mnt, ctx)
        })
    }

    fn ctx_ref<'g>(&self, g: &'g Guard) -> &'g FsCtx {
        // SAFETY: never null; replaced values are freed after a grace period.
        unsafe { self.ctx.load(Acquire, g).deref() }
    }

    fn creds_box<'g>(&self, g: &'g Guard) -> &'g CredsBox {
        // SAFETY: as `ctx_ref`.
        unsafe { self.creds.load(Acquire, g).deref() }
    }

    fn creds_ref<'g>(&self, g: &'g Guard) -> &'g Creds {
        &self.creds_box(g).creds
    }

    /// Replaces the credentials.
    pub fn set_creds(&self, c: Creds) {
        let _l = self.ctx_lock.lock();
        let g = crossbeam_epoch::pin();
        let new = CredsBox::new(c);
        let old = self.ids.set(Ids::of(self.ctx_ref(&g), new.id), || {
            self.creds.swap(Owned::new(new), SeqCst, &g)
        });
        // SAFETY: unreachable now; readers hold guards.
        unsafe { g.defer_destroy(old) };
    }

    /// The credentials.
    pub fn creds(&self) -> Creds {
        let g = crossbeam_epoch::pin();
        self.creds_ref(&g).clone()
    }

    /// Sets the umask; returns the old one.
    pub fn umask(&self, mask: u32) -> u32 {
        self.umask.swap(mask & 0o777, SeqCst)
    }

    fn file(&self, fd: impl Desc) -> Result<FileRef> {
        fd.hold(&self.files)
    }

    /// Runs `f` with a walk context and the start position for `path` relative to `dirfd`.
    ///
    /// `f` may run more than once: when its walk needs the file system (a directory to
    /// load, attributes to revalidate), it stops with `Errno::RESTART` and is run again
    /// once the call is made, with no guard pinned (see `unpin`). Everything `f` changes
    /// follows its walks and its directory locks, so a stopped attempt changed nothing.
    fn at<R>(
        &self,
        dirfd: impl Desc,
        path: &[u8],
        mut f: impl FnMut(&Ctx<'_>, Start<'_>) -> Result<R>,
    ) -> Result<R> {
        crate::unpin::run(
            || self.at_once(dirfd, path, &mut f),
            || self.vfs.counters.unpinned.add(1),
        )
    }

    /// One attempt of [`Process::at`], under its own guard.
    #[inline(always)]
    fn at_once<R>(
        &self,
        dirfd: impl Desc,
        path: &[u8],
        f: &mut impl FnMut(&Ctx<'_>, Start<'_>) -> Result<R>,
    ) -> Result<R> {
        let guard = crossbeam_epoch::pin();
        let (ctx, _cwd) = self.held_ctx(&guard);
        let start = if path.first() == Some(&b'/') || dirfd.is_cwd() {
            Start {
                mnt: &ctx.cwd.mnt,
                d: ctx.cwd.d.ptr(),
            }
        } else {
            let held = dirfd.lookup(&self.files, &guard)?;
            match &held.dir {
                Some(d) => Start {
                    mnt: &held.mnt,
                    d: d.ptr(),
                },
                None if path.is_empty() => Start {
                    mnt: &held.mnt,
                    d: ctx.cwd.d.ptr(), // unused: empty paths are handled by the caller
                },
                None => return Err(Errno::ENOTDIR),
            }
        };
        let cx = Ctx {
            vfs: &self.vfs,
            root_mnt: &ctx.root.mnt,
            root: ctx.root.d.ptr(),
            creds: self.creds_ref(&guard),
            cached_creds: Some(self.creds_box(&guard)),
            guard: &guard,
        };
        f(&cx, start)
    }

    // ---------------------------------------------------------------- parents

    /// Resolves the parent of `path`'s last component (fast, then locked), held.
    #[inline(always)]
    fn parent_of<'a, 'g: 'a>(
        cx: &Ctx<'g>,
        start: Start<'g>,
        path: &'a [u8],
        links: &mut u32,
    ) -> Result<Parent<'a, 'g>> {
        if !cx.vfs.check_mode() {
            return Self::parent_of_inner(cx, start, path, links);
        }
        Self::parent_of_checked(cx, start, path, links)
    }

    /// [`Process::parent_of`] in check mode: what the cache or the fast walk gave must be
    /// what the locked walk gives, unless the namespace changed meanwhile. Out of line,
    /// so that the common call pays no frame for it (30 instructions a call when it was
    /// inline).
    #[cold]
    #[inline(never)]
    fn parent_of_checked<'a, 'g: 'a>(
        cx: &Ctx<'g>,
        start: Start<'g>,
        path: &'a [u8],
        links: &mut u32,
    ) -> Result<Parent<'a, 'g>> {
        let before = effects::reading();
        let base = *links;
        let r = Self::parent_of_inner(cx, start, path, links);
        let summary = |p: &Pos<'_>, l: &Last<'_>, t: bool| {
            let name: &[u8] = match l {
                Last::Normal(c) => c.bytes,
                Last::Dot => b".",
                Last::DotDot => b"..",
                Last::Root => b"/",
            };
            (
                Arc::as_ptr(p.mnt) as usize,
                p.d.as_ptr() as usize,
                name.to_vec(),
                t,
            )
        };
        let fast = r
            .as_ref()
            .map(|p| summary(&p.pos, &p.last, p.trailing))
            .map_err(|e| *e);
        let mut l2 = base;
        // Unarmed: a load this walk needs is made in place (see `unpin`).
        let locked = crate::unpin::aside(|| {
            start
                .walk_counting(cx, path, Flags::parent(), true, &mut l2)
                .map(|w| match w.found {
                    Found::Parent(p, l, t) => summary(&p, &l, t),
                    Found::Final(_) => unreachable!("a parent walk stops at the parent"),
                })
        });
        walk::compare(cx.vfs, before, &fast, locked);
        r
    }

    fn parent_of_inner<'a, 'g: 'a>(
        cx: &Ctx<'g>,
        start: Start<'g>,
        path: &'a [u8],
        links: &mut u32,
    ) -> Result<Parent<'a, 'g>> {
        // The parent of "dir/name" is what a full walk of "dir" reaches: try the path cache
        // under that key (not for restarts through symlink bodies, which count links).
        let split = (*links == 0).then(|| split_last(cx, path)).flatten();
        let prefix =
            split.map(|(dir, _)| WholePath::new(cx, start, dir, crate::name::path_hash(dir), true));
        if let (Some((dir, name)), Some(prefix)) = (split, &prefix) {
            if let Some(h) = prefix.probe(cx, dir) {
                let searchable = h
                    .pos
                    .inode
                    .is_some_and(|i| i.is_dir() && i.may_search(cx.creds).is_ok());
                if searchable {
                    if let Some(hold) = h.pos.mnt.hold(&cx.vfs.mount_sync, h.ms, false) {
                        if h.still_valid(cx) {
                            *links = h.links;
                            return Ok(Parent {
                                pos: h.pos,
                                last: Last::Normal(crate::name::scan(name)),
                                trailing: false,
                                _hold: hold,
                            });
                        }
                    }
                }
            }
        }
        let base = *links;
        let (w, hold): (Walked<'a, 'g>, MountHold<'g>) = retry(cx.vfs, |locked| {
            *links = base;
            let w = start.walk_counting(cx, path, Flags::parent(), locked, links)?;
            let hold = w.hold(cx)?;
            if let (false, true, Some((dir, _)), Some(prefix)) =
                (locked, w.cacheable, split, &prefix)
            {
                prefix.record(cx, dir, w.pos(), *links);
            }
            Ok((w, hold))
        })?;
        match w.found {
            Found::Parent(pos, last, trailing) => Ok(Parent {
                pos,
                last,
                trailing,
                _hold: hold,
            }),
            Found::Final(_) => unreachable!("a parent walk stops at the parent"),
        }
    }

    /// A walk of `path` to the object it names, for a caller that uses what it finds and
    /// then validates ([`ObjectWalk::validate`]). In fast mode, a path of a directory and a
    /// name is walked as the directory (from the path cache, or by a fast walk to the
    /// parent that is then cached under the directory's path) and one step more: a cold
    /// path in a warm directory (a tree walk, `ls -l`) costs one component, not one per
    /// component. Otherwise, and in locked mode, the whole path is walked.
    fn walk_object<'a, 'g: 'a>(
        cx: &Ctx<'g>,
        start: Start<'g>,
        path: &'a [u8],
        follow: bool,
        locked: bool,
    ) -> std::result::Result<ObjectWalk<'a, 'g>, Fail> {
        // A name in `/` is one step from the root already; and a walk that starts on a
        // file system that revalidates is never cached (`Walked::cacheable`), so its
        // directory would never be found in the cache.
        if let Some((dir, name)) = (!locked).then(|| split_last(cx, path)).flatten() {
            let first = if path[0] == b'/' {
                cx.root_mnt
            } else {
                start.mnt
            };
            if dir != b"/" && !first.fs.revalidates() {
                return Self::walk_by_parent(cx, start, path, dir, name, follow);
            }
        }
        let mut links = 0;
        let w = start.walk_counting(cx, path, Flags::object(follow), locked, &mut links)?;
        Ok(ObjectWalk {
            w,
            parent: None,
            links,
            from: ParentFrom::Cache,
        })
    }

    /// [`Process::walk_object`]'s fast walk of `path` = `dir` + `/` + `name`.
    fn walk_by_parent<'a, 'g: 'a>(
        cx: &Ctx<'g>,
        start: Start<'g>,
        path: &'a [u8],
        dir: &'a [u8],
        name: &'a [u8],
        follow: bool,
    ) -> std::result::Result<ObjectWalk<'a, 'g>, Fail> {
        let prefix = WholePath::new(cx, start, dir, crate::name::path_hash(dir), true);
        let (pos, mut links, check, from) = match prefix.probe(cx, dir) {
            Some(h) => (h.pos, h.links, ParentCheck::cached(&h), ParentFrom::Cache),
            None => {
                let mut links = 0;
                let w = start.walk_counting(cx, path, Flags::parent(), false, &mut links)?;
                w.validate(cx)?;
                let pos = w.pos();
                if w.cacheable {
                    prefix.record(cx, dir, pos, links);
                }
                let check = ParentCheck {
                    d: pos.d,
                    seq: pos.seq,
                    ms: w.mount_seq(),
                    gen: 0,
                };
                let from = ParentFrom::Walk {
                    cacheable: w.cacheable,
                };
                (pos, links, check, from)
            }
        };
        // The step's answer, an error included, stands only if the parent's walk still
        // does: it is the locked walk's only while both hold.
        match walk::walk(cx, pos, name, Flags::object(follow), false, &mut links) {
            Ok(w) => Ok(ObjectWalk {
                w,
                parent: Some(check),
                links,
                from,
            }),
            Err(Fail::Err(e)) if check.still_valid(from, cx) => Err(Fail::Err(e)),
            Err(_) => Err(Fail::Retry),
        }
    }

    /// Resolves `path` to the object it names (fast, then locked), held.
    fn resolve<'g>(
        cx: &Ctx<'g>,
        start: Start<'g>,
        path: &[u8],
        follow: bool,
    ) -> Result<(Pos<'g>, MountHold<'g>)> {
        retry(cx.vfs, |locked| {
            let w = start.walk(cx, path, Flags::object(follow), locked)?;
            let h = w.hold(cx)?;
            Ok((w.pos(), h))
        })
    }

    /// Resolves `path` to the object it names (fast, then locked), without a hold: for
    /// callers that only read what they find.
    fn resolve_unheld<'g>(
        cx: &Ctx<'g>,
        start: Start<'g>,
        path: &[u8],
        follow: bool,
    ) -> Result<Pos<'g>> {
        retry(cx.vfs, |locked| {
            let w = start.walk(cx, path, Flags::object(follow), locked)?;
            w.validate(cx)?;
            Ok(w.pos())
        })
    }

    fn dir_of<'g>(p: &Pos<'g>) -> Result<&'g Mutex<DirState>> {
        p.inode
            .map(IPtr::get)
            .and_then(Inode::dir)
            .ok_or(Errno::ENOTDIR)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // SAFETY: we are the last user of this process's pointers.
        unsafe {
            let g = crossbeam_epoch::unprotected();
            let c = self.ctx.load(Relaxed, g);
            if !c.is_null() {
                drop(c.into_owned());
            }
            let c = self.creds.load(Relaxed, g);
            if !c.is_null() {
                drop(c.into_owned());
            }
        }
    }
}

impl std::fmt::Debug for Process {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Process({:?})", self.creds())
    }
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn ok<T: Send + Sync>() {}
    ok::<Process>();
    ok::<Vfs>();
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::name::scan;
    use crate::pathcache::cache_answers;

    /// Moves the root's child `a` to `z` in the dentry hash directly: the effect of a
    /// rename, without the rename's namespace-change brackets around it.
    fn move_a_to_z(vfs: &Vfs) {
        let fs = &vfs.root_mount().fs;
        let g = crossbeam_epoch::pin();
        let root = fs.root().ptr();
        let dir = root.get().inode(&g).unwrap().dir().unwrap();
        let mut st = dir.lock();
        let a = fs.dcache.lookup_locked(&root, &scan(b"a"), &g).unwrap();
        fs.dcache.d_move(a, root, &scan(b"z"), &mut st, None, &g);
    }

    /// Issue 8, defect 3, without the race: a directory rename is in progress (its change
    /// begun, its `d_move` done, its end not yet reached) when a thread that has seen the
    /// move stats the old path. Walks made while the change was in progress must not
    /// answer now. In check mode the engine judges the answer itself: a stale cached one
    /// panics there (mutations are bracketed tightly, so the finished `d_move` excuses
    /// nothing), which is how check mode sees this defect.
    fn stale_answer_mid_rename(check: bool) {
        let vfs = Vfs::new_memfs();
        vfs.set_check_mode(check);
        let p = vfs.process(Creds::root());
        p.create_dir_all("/a/b").unwrap();
        p.write_file("/a/b/f", b"x").unwrap();
        let change = NsChange::begin();
        // Walks during the change (twice: a path is cached from its second miss).
        for _ in 0..3 {
            p.stat("/a/b/f").unwrap();
        }
        // The rename's effect, inside its change.
        move_a_to_z(&vfs);
        // Seen: the new name resolves.
        p.stat("/z/b/f").unwrap();
        assert_eq!(
            p.stat("/a/b/f"),
            Err(Errno::ENOENT),
            "an answer from before the move"
        );
        drop(change);
        assert_eq!(p.stat("/a/b/f"), Err(Errno::ENOENT));
        assert_eq!(vfs.check_failures(), 0);
    }

    #[test]
    fn no_stale_answer_mid_rename() {
        stale_answer_mid_rename(false);
    }

    #[test]
    fn check_mode_sees_a_stale_answer_mid_rename() {
        stale_answer_mid_rename(true);
    }

    /// A path cached before a rename of one of its directories is not answered after it:
    /// the rename's namespace change invalidates every thread's cached paths (the final
    /// dentry did not change, so nothing else would).
    #[test]
    fn a_rename_of_an_ancestor_invalidates_cached_paths() {
        let p = Vfs::new_memfs().process(Creds::root());
        p.create_dir_all("/a/b").unwrap();
        p.write_file("/a/b/f", b"x").unwrap();
        p.stat("/a/b/f").unwrap();
        assert!(
            cache_answers(1, || {
                p.stat("/a/b/f").unwrap();
            }),
            "the path was cached"
        );
        p.rename("/a", "/z").unwrap();
        assert_eq!(p.stat("/a/b/f"), Err(Errno::ENOENT));
        assert!(p.stat("/z/b/f").is_ok());
    }

    /// A removed directory reached after its eviction (the working directory, a child's
    /// `..`) opens as a description that holds nothing: opening, re-opening and closing it
    /// neither evicts it again nor leaves anything charged, and re-creating the name works.
    #[test]
    fn a_removed_directory_opens_without_a_hold() {
        use crate::memfs::{MemFs, MemFsOptions};
        let fs = MemFs::new(MemFsOptions {
            max_inodes: Some(8),
            ..Default::default()
        });
        let p = Vfs::new(fs.clone()).process(Creds::root());
        let free = fs.statfs().ffree;
        p.mkdir("/a", 0o755).unwrap();
        p.mkdir("/a/b", 0o755).unwrap();
        p.chdir("/a/b").unwrap();
        p.rmdir("/a/b").unwrap();
        p.rmdir("/a").unwrap();
        assert_eq!(
            fs.statfs().ffree,
            free,
            "each removal evicted its directory"
        );
        let dot = p.open(".", OFlags::RDONLY | OFlags::DIRECTORY, 0).unwrap();
        let up = p.open("..", OFlags::RDONLY, 0).unwrap();
        let again = p
            .openat(dot, "..", OFlags::RDONLY | OFlags::DIRECTORY, 0)
            .unwrap();
        let g = crossbeam_epoch::pin();
        for fd in [dot, up, again] {
            let f = p.files.get_ref(fd, &g).unwrap();
            assert!(f.inode.evicted() && !f.held);
        }
        drop(g);
        assert_eq!(p.fstat(up).unwrap().nlink, 0);
        assert_eq!(p.getdents(up, 4096).unwrap_err(), Errno::ENOENT);
        let dup = p.dup(up).unwrap();
        for fd in [dot, up, again, dup] {
            p.close(fd).unwrap();
        }
        p.chdir("/").unwrap();
        assert_eq!(fs.statfs().ffree, free, "closing evicted nothing again");
        p.mkdir("/a", 0o755).unwrap();
        assert_eq!(fs.statfs().ffree, free - 1);
    }

    /// `stat` answered by the path cache with no epoch guard (`stat_cached_by`) follows the
    /// working directory, the credentials and the file: after `chdir` a relative path is
    /// looked up from the new directory, after `set_creds` the new credentials' search
    /// permission decides, and the attributes, an unlink and a new file under the name
    /// all show at once.
    /// `read` and `pread` of a memfs file run on the description found under their pin,
    /// with no reference of their own (`read_pinned`). A close of the file's last
    /// description, the file unlinked, evicts it and clears its bytes meanwhile: the read
    /// must then answer `EBADF` (the descriptor was closed), never the cleared bytes.
    #[test]
    fn a_pinned_read_of_an_evicted_file_is_ebadf() {
        let p = Vfs::new_memfs().process(Creds::root());
        p.write_file("/f", &[7u8; 5000]).unwrap();
        let fd = p.open("/f", OFlags::RDONLY, 0).unwrap();
        let mut buf = [0u8; 100];
        assert_eq!(p.pread(fd, &mut buf, 4900), Ok(100));
        assert_eq!(buf, [7u8; 100]);
        p.unlink("/f").unwrap();
        let g = crossbeam_epoch::pin();
        let f = p.files.get_ref(fd, &g).unwrap();
        assert_eq!(Process::read_found(f, &mut buf, None), Some(Ok(100)));
        assert!(!f.inode.evicted());
        p.close(fd).unwrap();
        assert!(f.inode.evicted(), "the last close evicts the unlinked file");
        assert_eq!(
            Process::read_found(f, &mut buf, Some(0)),
            Some(Err(Errno::EBADF))
        );
        assert_eq!(
            Process::read_found(f, &mut buf, None),
            Some(Err(Errno::EBADF))
        );
        drop(g);
        assert_eq!(p.read(fd, &mut buf), Err(Errno::EBADF));
    }

    #[test]
    fn a_guardless_cached_stat_follows_chdir_creds_and_the_file() {
        let p = Vfs::new_memfs().process(Creds::root());
        p.create_dir_all("/a").unwrap();
        p.create_dir_all("/b").unwrap();
        p.write_file("/a/f", b"1").unwrap();
        p.write_file("/b/f", b"22").unwrap();
        p.write_file("/f", b"4444").unwrap();
        p.chmod("/b", 0o700).unwrap();
        let size = |p: &Process, path: &str| p.stat(path).map(|s| s.size);
        // Cached relative to `/`: answering it after the `chdir` would be the old place's.
        for _ in 0..3 {
            assert_eq!(size(&p, "f"), Ok(4));
        }
        p.chdir("/a").unwrap();
        for _ in 0..2 {
            assert_eq!(size(&p, "f"), Ok(1));
        }
        let calls = || {
            assert_eq!(size(&p, "f"), Ok(1));
            assert_eq!(size(&p, "/b/f"), Ok(2));
            assert_eq!(size(&p, "/b/f"), Ok(2));
        };
        assert!(cache_answers(2, calls), "answered from the cache");
        p.chdir("/b").unwrap();
        assert_eq!(size(&p, "f"), Ok(2), "relative to the new directory");
        assert_eq!(size(&p, "f"), Ok(2));
        p.chdir("/a").unwrap();
        assert_eq!(size(&p, "f"), Ok(1), "and back");
        p.set_creds(Creds::user(1000, 1000, vec![]));
        assert_eq!(size(&p, "/b/f"), Err(Errno::EACCES), "the new credentials");
        assert_eq!(size(&p, "f"), Ok(1));
        p.set_creds(Creds::root());
        assert_eq!(size(&p, "/b/f"), Ok(2));
        assert!(cache_answers(1, || assert_eq!(size(&p, "/b/f"), Ok(2))));
        p.truncate("/b/f", 5).unwrap();
        assert_eq!(size(&p, "/b/f"), Ok(5), "the inode as it is now");
        let ino = p.stat("/b/f").unwrap().ino;
        p.unlink("/b/f").unwrap();
        assert_eq!(size(&p, "/b/f"), Err(Errno::ENOENT));
        p.write_file("/b/f", b"333").unwrap();
        let st = p.stat("/b/f").unwrap();
        assert_eq!((st.size, st.ino == ino), (3, false), "the new file");
        assert_eq!(size(&p, "/b/f"), Ok(3));
    }

    /// An `open` answered from the path cache with no guard (`open_cached_unpinned`)
    /// checks the file's permissions against the credentials the process has now: those
    /// kept by the entry are always the key's, and a `set_creds` changes the key.
    #[test]
    fn a_guardless_cached_open_checks_the_current_credentials() {
        let vfs = Vfs::new_memfs();
        let root = vfs.process(Creds::root());
        root.write_file("/f", b"x").unwrap();
        root.chown("/f", None, Some(1000)).unwrap();
        root.chmod("/f", 0o640).unwrap();
        let q = vfs.process(Creds::user(1000, 1000, vec![]));
        let open = |how: OFlags| q.open("/f", how, 0).and_then(|fd| q.close(fd));
        for _ in 0..2 {
            assert_eq!(open(OFlags::RDONLY), Ok(()), "the group may read");
        }
        let calls = || {
            assert_eq!(open(OFlags::RDONLY), Ok(()));
            assert_eq!(open(OFlags::WRONLY), Err(Errno::EACCES), "but not write");
        };
        assert!(cache_answers(2, calls), "both answered from the cache");
        q.set_creds(Creds::user(1001, 1001, vec![]));
        for _ in 0..3 {
            assert_eq!(
                open(OFlags::RDONLY),
                Err(Errno::EACCES),
                "others may not read"
            );
        }
        q.set_creds(Creds::user(1001, 1001, vec![1000]));
        for _ in 0..3 {
            assert_eq!(open(OFlags::RDONLY), Ok(()), "a supplementary group may");
        }
        root.chmod("/f", 0o600).unwrap();
        assert_eq!(
            open(OFlags::RDONLY),
            Err(Errno::EACCES),
            "the mode as it is now"
        );
        root.chmod("/f", 0o640).unwrap();
        assert!(cache_answers(1, || assert_eq!(
            open(OFlags::RDONLY),
            Ok(())
        )));
        // The name replaced while its file is still open (so the entry's inode can still
        // be held): the name's new file, and after an unlink, none.
        let size = || {
            let fd = q.open("/f", OFlags::RDONLY, 0)?;
            let st = q.fstat(fd);
            q.close(fd)?;
            st.map(|s| s.size)
        };
        let keep = root.open("/f", OFlags::RDONLY, 0).unwrap();
        root.write_file("/g", b"yy").unwrap();
        root.chown("/g", None, Some(1000)).unwrap();
        root.chmod("/g", 0o640).unwrap();
        root.rename("/g", "/f").unwrap();
        assert_eq!(size(), Ok(2), "the file renamed over the name");
        assert_eq!(size(), Ok(2));
        let keep2 = root.open("/f", OFlags::RDONLY, 0).unwrap();
        root.unlink("/f").unwrap();
        assert_eq!(size(), Err(Errno::ENOENT), "unlinked, though open");
        root.close(keep).unwrap();
        root.close(keep2).unwrap();
        // An `O_DIRECTORY` open files its walk under the path's own hash (`O_TMPFILE`
        // includes `O_DIRECTORY`'s bit, and once made the open take it for a create's),
        // so a `stat` of the same path finds it.
        root.mkdir("/d", 0o755).unwrap();
        for _ in 0..2 {
            let fd = root
                .open("/d", OFlags::RDONLY | OFlags::DIRECTORY, 0)
                .unwrap();
            root.close(fd).unwrap();
        }
        assert!(
            cache_answers(1, || {
                root.stat("/d").unwrap();
            }),
            "the open's entry"
        );
    }

    /// `open` of an existing object answers from the path cache, and every change that
    /// would alter its walk or its checks is seen: a rename of an ancestor, an unlink and
    /// re-create of the file, a directory's search permission, the file's own mode, and a
    /// mount on an ancestor.
    #[test]
    fn open_answers_from_the_path_cache_and_sees_every_change() {
        let vfs = Vfs::new_memfs();
        let p = vfs.process(Creds::root());
        p.create_dir_all("/a/b").unwrap();
        p.write_file("/a/b/f", b"1").unwrap();
        p.chmod("/a/b/f", 0o644).unwrap();
        let q = vfs.process(Creds::user(1000, 1000, vec![]));
        let read = |p: &Process, path: &str| -> Result<Vec<u8>> {
            let fd = p.open(path, OFlags::RDONLY, 0)?;
            let mut buf = [0u8; 8];
            let n = p.read(fd, &mut buf)?;
            p.close(fd)?;
            Ok(buf[..n].to_vec())
        };
        for _ in 0..2 {
            assert_eq!(read(&q, "/a/b/f").unwrap(), b"1");
        }
        assert!(
            cache_answers(1, || assert_eq!(read(&q, "/a/b/f").unwrap(), b"1")),
            "the open was answered from the cache"
        );
        // The file's own mode: checked again on every open.
        p.chmod("/a/b/f", 0o600).unwrap();
        assert_eq!(read(&q, "/a/b/f"), Err(Errno::EACCES));
        p.chmod("/a/b/f", 0o644).unwrap();
        assert_eq!(read(&q, "/a/b/f").unwrap(), b"1");
        // Unlinked and created again: the new file.
        p.unlink("/a/b/f").unwrap();
        assert_eq!(read(&q, "/a/b/f"), Err(Errno::ENOENT));
        p.write_file("/a/b/f", b"2").unwrap();
        assert_eq!(read(&q, "/a/b/f").unwrap(), b"2");
        assert_eq!(read(&q, "/a/b/f").unwrap(), b"2");
        // A directory's search permission.
        p.chmod("/a", 0o700).unwrap();
        assert_eq!(read(&q, "/a/b/f"), Err(Errno::EACCES));
        p.chmod("/a", 0o755).unwrap();
        assert_eq!(read(&q, "/a/b/f").unwrap(), b"2");
        // A rename of an ancestor.
        p.rename("/a", "/z").unwrap();
        assert_eq!(read(&q, "/a/b/f"), Err(Errno::ENOENT));
        assert_eq!(read(&q, "/z/b/f").unwrap(), b"2");
        assert_eq!(read(&q, "/z/b/f").unwrap(), b"2");
        // A mount on an ancestor hides the file; its umount shows it again.
        p.mount("/z/b", crate::MemFs::new(Default::default()))
            .unwrap();
        assert_eq!(read(&q, "/z/b/f"), Err(Errno::ENOENT));
        p.umount("/z/b").unwrap();
        assert_eq!(read(&q, "/z/b/f").unwrap(), b"2");
    }

    /// A fast walk's answer is checked again after its caller used it: once the final
    /// dentry has changed (here: moved to another name), `validate` and `confirm` (the
    /// handshake of a caller that holds the mount, then `validate`) refuse it, so the
    /// caller walks again instead of answering from a dentry that moved under it.
    #[test]
    fn a_fast_answer_is_checked_again_after_use() {
        let vfs = Vfs::new_memfs();
        let p = vfs.process(Creds::root());
        p.create_dir_all("/a").unwrap();
        p.at(Fd::CWD, b"/a", |cx, start| {
            let w = match start.walk(cx, b"/a", Flags::object(true), false) {
                Ok(w) => w,
                Err(f) => panic!("the fast walk of a quiet tree failed: {f:?}"),
            };
            assert_eq!(w.validate(cx), Ok(()));
            assert_eq!(w.confirm(cx), Ok(()));
            move_a_to_z(&vfs);
            assert_eq!(w.validate(cx), Err(Fail::Retry));
            assert_eq!(w.confirm(cx), Err(Fail::Retry));
            Ok(())
        })
        .unwrap();
    }

    /// Check mode catches a wrong answer: a directory is moved behind the path cache's back
    /// (its dentry moved with no namespace change, which only a bug would do), so the cached
    /// path answers stale; the locked walk disagrees and no mutation excuses it.
    ///
    /// Check mode excuses a disagreement when any mutation ran meanwhile, and the mutations
    /// it counts are the whole process's (`sync::effects`): another test mutating on its
    /// own thread at that moment excuses this one's, and the call then gives the locked
    /// walk's answer (in the `checked` profile that was most runs of the suite). So the
    /// scenario is tried until one try is caught, and every try that is not must have
    /// given the locked walk's answer, never the stale one.
    #[test]
    fn check_mode_catches_a_stale_answer() {
        for attempt in 0..100 {
            let vfs = Vfs::new_memfs();
            vfs.set_check_mode(true);
            let p = vfs.process(Creds::root());
            p.create_dir_all("/a/b").unwrap();
            p.write_file("/a/b/f", b"x").unwrap();
            for _ in 0..3 {
                p.stat("/a/b/f").unwrap();
            }
            move_a_to_z(&vfs);
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| p.stat("/a/b/f")));
            vfs.set_check_mode(false);
            match r {
                Err(_) => {
                    assert_eq!(vfs.check_failures(), 1);
                    return;
                }
                Ok(r) => assert_eq!(
                    r,
                    Err(Errno::ENOENT),
                    "try {attempt}: check mode let a stale answer through"
                ),
            }
        }
        panic!("check mode excused the stale answer in 100 tries");
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::{Ids, KeyIds};
    use crate::sync::AtomicU64;
    use loom::sync::Arc;
    use loom::thread;
    use std::sync::atomic::Ordering::{Acquire, Release};

    fn ids(creds: u64) -> Ids {
        Ids {
            root: std::ptr::null(),
            root_mnt: 1,
            cwd: std::ptr::null(),
            cwd_mnt: 1,
            creds,
        }
    }

    /// One `set_creds` (ids 1 -> 2, published 1 -> 2) against a caller that reads the
    /// ids, as a cached `stat` does, and the published value, as a guarded call does, in
    /// the order `ids_first` says. It may never see the two disagree in the order it read
    /// them: ids newer than what is published after them, or a published value newer
    /// than the ids read after it. `inside` chooses the real protocol (publish inside the
    /// ids' write section) or the broken one (publish after it).
    fn model(inside: bool, ids_first: bool) {
        loom::model(move || {
            let k = Arc::new(KeyIds::new(ids(1)));
            let published = Arc::new(AtomicU64::new(1));
            let w = {
                let (k, published) = (k.clone(), published.clone());
                thread::spawn(move || {
                    if inside {
                        k.set(ids(2), || published.store(2, Release));
                    } else {
                        k.set(ids(2), || ());
                        published.store(2, Release);
                    }
                })
            };
            if ids_first {
                if let Some(i) = k.get() {
                    let p = published.load(Acquire);
                    assert!(p >= i.creds, "ids {} read before published {p}", i.creds);
                }
            } else {
                let p = published.load(Acquire);
                if let Some(i) = k.get() {
                    assert!(i.creds >= p, "published {p} read before ids {}", i.creds);
                }
            }
            w.join().unwrap();
        });
    }

    #[test]
    fn loom_key_ids_agree_with_what_is_published() {
        model(true, true);
        model(true, false);
    }

    #[test]
    #[should_panic(expected = "read before published")]
    fn loom_key_ids_published_outside_their_section_disagree() {
        model(false, true);
    }
}
#[cfg(all(test, not(loom)))]
mod layout_tests {
    /// An [`super::ObjectWalk`] is moved by value three times in a cold `stat`; at 128
    /// bytes or less the compiler moves it with a few vector stores, past that with a
    /// `memcpy` call each (see [`super::ParentCheck`]).
    #[test]
    fn an_object_walk_fits_in_128_bytes() {
        let n = std::mem::size_of::<
            std::result::Result<super::ObjectWalk<'_, '_>, crate::walk::Fail>,
        >();
        assert!(n <= 128, "{n}");
    }
}
