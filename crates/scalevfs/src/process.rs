//! [`Process`]: a caller's view of a [`Vfs`] and the POSIX calls.
//!
//! # State and what protects it
//! - `ctx` (root and working directory) and `creds` are epoch-protected pointers to
//!   immutable values: calls load them under their guard with no lock and no write; `chdir`,
//!   `chroot`-like changes and `set_creds` publish a new value under `ctx_lock` and free the
//!   old one after a grace period.
//! - `umask` is an atomic.
//! - `files`, the descriptor table, is read without a lock under the epoch guard; its
//!   writers (open, close, dup) serialize on its allocation mutex (see `file`).
//!
//! # Lock order
//! ```text
//! ctx_lock
//! FdTable::alloc
//! Vfs mount lock                (mount, umount; a locked walk's confirm, holding nothing else)
//!   MemFs::rename_lock          (cross-directory renames of directories only)
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

use crate::dentry::{inode_arc, DPtr, DRef, Dentry, MOUNTED, ROOT, UNHASHED};
use crate::errno::{Errno, Result};
use crate::file::{Desc, FdTable, FileRef, Handle, Loc, OpenFile};
use crate::inode::{AttrUpdate, DirState, Inode, Times, MAX_FILE_SIZE};
use crate::memfs::MemFs;
use crate::mount::{Mount, MountHold, MountTable};
use crate::name::{check_len, Component};
use crate::pathcache;
use crate::sync::effects::{self, effect};
use crate::sync::{ns_changes, NsChange};
use crate::types::{limits, mode::*, *};
use crate::walk::{self, retry, with_walk, Ctx, Fail, Flags, Found, Last, Pos, Walked};
use crate::Vfs;
use crossbeam_epoch::{Atomic, Guard, Owned};
use parking_lot::{Mutex, MutexGuard};
use std::ffi::OsStr;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::{Acquire, Relaxed, SeqCst};
use std::sync::Arc;

struct FsCtx {
    root: Loc,
    cwd: Loc,
}

/// Credentials with an identity for the path cache: every value published gets a new id.
struct CredsBox {
    creds: Creds,
    id: u64,
}

impl CredsBox {
    fn new(creds: Creds) -> CredsBox {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        CredsBox {
            creds,
            id: NEXT.fetch_add(1, Relaxed),
        }
    }
}

/// A caller: root, working directory, credentials, umask and descriptor table.
pub struct Process {
    vfs: Arc<Vfs>,
    ctx: Atomic<FsCtx>,
    creds: Atomic<CredsBox>,
    umask: AtomicU32,
    files: FdTable,
    ctx_lock: Mutex<()>,
}

/// Checks a user path like [`cpath`] and hashes it for the path cache, in one pass.
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
    inode: &'a Arc<Inode>,
    flags: OFlags,
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
        let mut links = 0;
        walk::walk(
            cx,
            self.pos(locked, cx.guard)?,
            path,
            flags,
            locked,
            &mut links,
        )
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

fn now() -> Timespec {
    Timespec::now()
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
    dev: u64,
    gen: u64,
    ms: u64,
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
            inode: d.get().inode(cx.guard),
        },
        dev: h.dev,
        gen,
        ms,
    })
}

impl Process {
    pub(crate) fn new(vfs: Arc<Vfs>, creds: Creds) -> Process {
        let root = Loc::new(vfs.root_mount().clone(), vfs.root_mount().root.clone());
        let ctx = FsCtx {
            cwd: root.clone(),
            root,
        };
        Process {
            vfs,
            ctx: Atomic::new(ctx),
            creds: Atomic::new(CredsBox::new(creds)),
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
        Process {
            vfs: self.vfs.clone(),
            ctx: Atomic::new(FsCtx {
                root: ctx.root.clone(),
                cwd: ctx.cwd.clone(),
            }),
            creds: Atomic::new(CredsBox::new(self.creds_ref(&g).clone())),
            umask: AtomicU32::new(self.umask.load(Relaxed)),
            files: self.files.fork(),
            ctx_lock: Mutex::new(()),
        }
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
        let old = self.creds.swap(Owned::new(CredsBox::new(c)), SeqCst, &g);
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
    fn at<R>(
        &self,
        dirfd: impl Desc,
        path: &[u8],
        f: impl FnOnce(&Ctx<'_>, Start<'_>) -> Result<R>,
    ) -> Result<R> {
        let guard = crossbeam_epoch::pin();
        let ctx = self.ctx_ref(&guard);
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
            creds_id: self.creds_box(&guard).id,
            guard: &guard,
        };
        f(&cx, start)
    }

    // ---------------------------------------------------------------- stat family

    /// `stat(2)`.
    pub fn stat(&self, path: impl AsRef<Path>) -> Result<Stat> {
        self.fstatat(Fd::CWD, path, AtFlags::empty())
    }

    /// `lstat(2)`.
    pub fn lstat(&self, path: impl AsRef<Path>) -> Result<Stat> {
        self.fstatat(Fd::CWD, path, AtFlags::SYMLINK_NOFOLLOW)
    }

    /// `fstat(2)`.
    pub fn fstat(&self, fd: impl Desc) -> Result<Stat> {
        let f = self.file(fd)?;
        Ok(f.inode.stat(f.mnt.dev()))
    }

    /// `fstatat(2)`: stat inside the lockless walk, with no reference taken.
    pub fn fstatat(
        &self,
        dirfd: impl Desc,
        path: impl AsRef<Path>,
        flags: AtFlags,
    ) -> Result<Stat> {
        // AT_NO_AUTOMOUNT (0x800) and the AT_STATX_SYNC_TYPE bits (0x6000) are accepted and
        // mean nothing here, as on Linux's tmpfs.
        if flags.0 & !(AtFlags::SYMLINK_NOFOLLOW.0 | AtFlags::EMPTY_PATH.0 | 0x800 | 0x6000) != 0 {
            return Err(Errno::EINVAL);
        }
        let (path, hash) = cpath_hashed(path.as_ref())?;
        if path.is_empty() {
            return self.empty_path(dirfd, flags, |f| Ok(f.inode.stat(f.mnt.dev())));
        }
        let wf = Flags::object(!flags.contains(AtFlags::SYMLINK_NOFOLLOW));
        self.at(dirfd, path, |cx, start| {
            Self::with_final(cx, start, path, hash, wf.follow, |i, dev| {
                Ok(StatOf(i.stat(dev)))
            })
        })
        .map(|s| s.0)
    }

    /// Resolves `path` to the object it names and runs `f` on its inode and device inside
    /// the epoch, taking no reference: from the path cache when it holds a still-valid
    /// walk, else by the lockless walk (whose validated result is cached), else by the
    /// locked walk.
    fn with_final<T: PartialEq + std::fmt::Debug>(
        cx: &Ctx<'_>,
        start: Start<'_>,
        path: &[u8],
        hash: u64,
        follow: bool,
        f: impl Fn(&Inode, u64) -> std::result::Result<T, Fail>,
    ) -> Result<T> {
        let vfs = cx.vfs;
        let key_start = if path.first() == Some(&b'/') {
            (cx.root, cx.root_mnt)
        } else {
            (start.d, start.mnt)
        };
        let key = pathcache::Key {
            vfs: vfs.id,
            creds: cx.creds_id,
            root: cx.root.as_ptr(),
            root_mnt: cx.root_mnt.id,
            start: key_start.0.as_ptr(),
            start_mnt: key_start.1.id,
            follow,
        };
        let cacheable = cx.creds_id != 0;
        let ns = ns_changes();
        let gen = ns.snapshot();
        let ms = vfs.mount_seq().read_begin();
        // One probe of the path cache; the answer holds if nothing it depends on moved.
        let probe = || {
            let answer = (|| {
                let h = cached(cx, &key, path, hash, gen?, ms?)?;
                let r = f(h.pos.inode?, h.dev);
                h.still_valid(cx).then_some(r)
            })();
            pathcache::count(answer.is_some());
            answer
        };
        let check = vfs.check_mode();
        if cacheable && !check {
            match probe() {
                Some(Ok(v)) => return Ok(v),
                Some(Err(Fail::Err(e))) => return Err(e),
                _ => {}
            }
        }
        with_walk(vfs, |locked| {
            // In check mode the cached answer is compared with the locked walk too.
            if !locked && cacheable && check {
                if let Some(r) = probe() {
                    return r;
                }
            }
            let w = start.walk(cx, path, Flags::object(follow), locked)?;
            let p = w.pos();
            let r = f(p.inode()?, p.mnt.dev())?;
            w.validate(cx)?;
            if let (false, true, Some(gen), Some(ms)) = (locked, cacheable, gen, ms) {
                if let Some(idx) = walk::mount_index(vfs, p.mnt, cx.guard) {
                    if ns.snapshot() == Some(gen) {
                        pathcache::insert(
                            key,
                            cx.root,
                            key_start.0,
                            path,
                            hash,
                            gen,
                            ms,
                            p.mnt.dev(),
                            idx,
                            p.d,
                            p.seq,
                        );
                    }
                }
            }
            Ok(r)
        })
    }

    /// `AT_EMPTY_PATH`: runs `f` on what `dirfd` refers to (the working directory for
    /// `Fd::CWD`, as an `O_PATH` description would).
    fn empty_path<R>(
        &self,
        dirfd: impl Desc,
        flags: AtFlags,
        f: impl FnOnce(Target<'_>) -> Result<R>,
    ) -> Result<R> {
        if !flags.contains(AtFlags::EMPTY_PATH) {
            return Err(Errno::ENOENT);
        }
        if dirfd.is_cwd() {
            let g = crossbeam_epoch::pin();
            let cwd = &self.ctx_ref(&g).cwd;
            let inode = cwd.d.inode_arc(&g).ok_or(Errno::ENOENT)?;
            return f(Target {
                mnt: &cwd.mnt,
                inode: &inode,
                flags: OFlags::PATH,
            });
        }
        let of = self.file(dirfd)?;
        f(Target {
            mnt: &of.mnt,
            inode: &of.inode,
            flags: of.flags,
        })
    }

    /// `access(2)`: checks with the real ids.
    pub fn access(&self, path: impl AsRef<Path>, mode: Access) -> Result<()> {
        self.faccessat(Fd::CWD, path, mode, AtFlags::empty())
    }

    /// `faccessat(2)`, with `AT_EACCESS` and `AT_SYMLINK_NOFOLLOW`. Finishes inside the
    /// lockless walk with no reference taken.
    pub fn faccessat(
        &self,
        dirfd: impl Desc,
        path: impl AsRef<Path>,
        mode: Access,
        flags: AtFlags,
    ) -> Result<()> {
        if mode.0 & !7 != 0
            || flags.0 & !(AtFlags::EACCESS.0 | AtFlags::SYMLINK_NOFOLLOW.0 | AtFlags::EMPTY_PATH.0)
                != 0
        {
            return Err(Errno::EINVAL);
        }
        let (path, hash) = cpath_hashed(path.as_ref())?;
        let real;
        let g = crossbeam_epoch::pin();
        let creds = self.creds_ref(&g);
        let creds = if flags.contains(AtFlags::EACCESS)
            || (creds.ruid == creds.uid && creds.rgid == creds.gid)
        {
            creds
        } else {
            real = Creds {
                uid: creds.ruid,
                gid: creds.rgid,
                ..creds.clone()
            };
            &real
        };
        if path.is_empty() {
            return self.empty_path(dirfd, flags, |f| f.inode.permission(creds, mode));
        }
        let wf = Flags::object(!flags.contains(AtFlags::SYMLINK_NOFOLLOW));
        self.at(dirfd, path, |cx, start| {
            let creds_id = if std::ptr::eq(creds, cx.creds) {
                cx.creds_id
            } else {
                0
            };
            let cx = Ctx {
                creds,
                creds_id,
                ..*cx
            };
            Self::with_final(&cx, start, path, hash, wf.follow, |i, _| {
                Ok(i.permission(creds, mode))
            })?
        })
    }

    /// `readlink(2)`.
    pub fn readlink(&self, path: impl AsRef<Path>) -> Result<Vec<u8>> {
        self.readlinkat(Fd::CWD, path)
    }

    /// `readlinkat(2)`. Finishes inside the lockless walk with no reference taken.
    pub fn readlinkat(&self, dirfd: impl Desc, path: impl AsRef<Path>) -> Result<Vec<u8>> {
        let (path, hash) = cpath_hashed(path.as_ref())?;
        if path.is_empty() {
            return self.empty_path(dirfd, AtFlags::EMPTY_PATH, |f| {
                f.inode
                    .symlink_target()
                    .map(|t| t.to_vec())
                    .ok_or(Errno::ENOENT)
            });
        }
        self.at(dirfd, path, |cx, start| {
            Self::with_final(cx, start, path, hash, false, |i, _| {
                let body = i.symlink_target().ok_or(Fail::Err(Errno::EINVAL))?;
                // Reading a link accesses it (relatime: at most once after each change).
                i.read_accessed(now());
                Ok(body.to_vec())
            })
        })
    }

    // ---------------------------------------------------------------- parents

    /// Resolves the parent of `path`'s last component (fast, then locked), held.
    fn parent_of<'a, 'g: 'a>(
        cx: &Ctx<'g>,
        start: Start<'g>,
        path: &'a [u8],
        links: &mut u32,
    ) -> Result<Parent<'a, 'g>> {
        if !cx.vfs.check_mode() {
            return Self::parent_of_inner(cx, start, path, links);
        }
        // Check mode: what the cache or the fast walk gave must be what the locked walk
        // gives, unless the namespace changed meanwhile.
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
        let locked = start.pos(true, cx.guard).and_then(|sp| {
            walk::walk(
                cx,
                sp,
                path,
                Flags {
                    follow: false,
                    parent: true,
                },
                true,
                &mut l2,
            )
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
        let split = match path.iter().rposition(|&b| b == b'/') {
            Some(i) if *links == 0 && cx.creds_id != 0 && i + 1 < path.len() => {
                let name = &path[i + 1..];
                let dir = if i == 0 { &path[..1] } else { &path[..i] };
                (name != b"." && name != b"..").then_some((dir, name))
            }
            _ => None,
        };
        let vfs = cx.vfs;
        let ns = ns_changes();
        let gen = ns.snapshot();
        let ms = vfs.mount_seq().read_begin();
        let key_start = |dir: &[u8]| {
            if dir[0] == b'/' {
                (cx.root, cx.root_mnt)
            } else {
                (start.d, start.mnt)
            }
        };
        let key = split.map(|(dir, _)| pathcache::Key {
            vfs: vfs.id,
            creds: cx.creds_id,
            root: cx.root.as_ptr(),
            root_mnt: cx.root_mnt.id,
            start: key_start(dir).0.as_ptr(),
            start_mnt: key_start(dir).1.id,
            follow: true,
        });
        let dir_hash = split.map_or(0, |(dir, _)| crate::name::path_hash(dir));
        if let (Some((dir, name)), Some(key), Some(gen), Some(ms)) = (split, &key, gen, ms) {
            if let Some(h) = cached(cx, key, dir, dir_hash, gen, ms) {
                let searchable = h
                    .pos
                    .inode
                    .is_some_and(|i| i.is_dir() && i.may_search(cx.creds).is_ok());
                if searchable {
                    if let Some(hold) = h.pos.mnt.hold(&vfs.mount_sync, ms, false) {
                        if h.still_valid(cx) {
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
        let (w, hold): (Walked<'a, 'g>, MountHold<'g>) = retry(|locked| {
            *links = base;
            let w = walk::walk(
                cx,
                start.pos(locked, cx.guard)?,
                path,
                Flags {
                    follow: false,
                    parent: true,
                },
                locked,
                links,
            )?;
            let hold = w.hold(cx)?;
            if let (false, Some((dir, _)), Some(key), Some(gen), Some(ms)) =
                (locked, split, key, gen, ms)
            {
                let p = w.pos();
                if let Some(idx) = walk::mount_index(vfs, p.mnt, cx.guard) {
                    if ns.snapshot() == Some(gen) {
                        pathcache::insert(
                            key,
                            cx.root,
                            key_start(dir).0,
                            dir,
                            dir_hash,
                            gen,
                            ms,
                            p.mnt.dev(),
                            idx,
                            p.d,
                            p.seq,
                        );
                    }
                }
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

    /// Resolves `path` to the object it names (fast, then locked), held.
    fn resolve<'g>(
        cx: &Ctx<'g>,
        start: Start<'g>,
        path: &[u8],
        follow: bool,
    ) -> Result<(Pos<'g>, MountHold<'g>)> {
        retry(|locked| {
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
        retry(|locked| {
            let w = start.walk(cx, path, Flags::object(follow), locked)?;
            w.validate(cx)?;
            Ok(w.pos())
        })
    }

    fn dir_of<'g>(p: &Pos<'g>) -> Result<&'g Mutex<DirState>> {
        p.inode.and_then(|i| i.dir()).ok_or(Errno::ENOTDIR)
    }

    // ---------------------------------------------------------------- create

    /// `mkdir(2)`.
    pub fn mkdir(&self, path: impl AsRef<Path>, mode: u32) -> Result<()> {
        self.mkdirat(Fd::CWD, path, mode)
    }

    /// `mkdirat(2)`.
    pub fn mkdirat(&self, dirfd: impl Desc, path: impl AsRef<Path>, mode: u32) -> Result<()> {
        let m = S_IFDIR | (mode & 0o1777 & !self.umask.load(Relaxed));
        self.create_at(dirfd, path.as_ref(), NewKind::Dir, m)
    }

    /// `mknodat(2)`: regular files, FIFOs, sockets and (for root) device nodes.
    pub fn mknodat(
        &self,
        dirfd: impl Desc,
        path: impl AsRef<Path>,
        mode: u32,
        dev: u64,
    ) -> Result<()> {
        let ty = match mode & S_IFMT {
            0 => S_IFREG,
            t @ (S_IFREG | S_IFIFO | S_IFSOCK | S_IFCHR | S_IFBLK) => t,
            S_IFDIR => return Err(Errno::EPERM),
            _ => return Err(Errno::EINVAL),
        };
        let m = ty | (mode & 0o7777 & !self.umask.load(Relaxed));
        self.create_at(dirfd, path.as_ref(), NewKind::Node(m, dev), m)
    }

    /// `symlink(2)`.
    pub fn symlink(&self, target: impl AsRef<Path>, linkpath: impl AsRef<Path>) -> Result<()> {
        self.symlinkat(target, Fd::CWD, linkpath)
    }

    /// `symlinkat(2)`.
    pub fn symlinkat(
        &self,
        target: impl AsRef<Path>,
        dirfd: impl Desc,
        linkpath: impl AsRef<Path>,
    ) -> Result<()> {
        let t = cpath(target.as_ref())?;
        if t.is_empty() {
            return Err(Errno::ENOENT);
        }
        self.create_at(
            dirfd,
            linkpath.as_ref(),
            NewKind::Symlink(t),
            S_IFLNK | 0o777,
        )
    }

    fn create_at(&self, dirfd: impl Desc, path: &Path, kind: NewKind<'_>, mode: u32) -> Result<()> {
        let path = cpath(path)?;
        if path.is_empty() {
            return Err(Errno::ENOENT);
        }
        self.at(dirfd, path, |cx, start| {
            let mut links = 0;
            let par = Self::parent_of(cx, start, path, &mut links)?;
            let (parent, trailing) = (par.pos, par.trailing);
            let Last::Normal(c) = par.last else {
                return Err(Errno::EEXIST);
            };
            let dirm = Self::dir_of(&parent)?;
            let dir_inode = parent.inode.ok_or(Errno::ENOENT)?;
            let fs = &parent.mnt.fs;
            if let NewKind::Node(m, _) = kind {
                if (m & S_IFMT == S_IFCHR || m & S_IFMT == S_IFBLK) && cx.creds.uid != 0 {
                    return Err(Errno::EPERM);
                }
            }
            let mut st = dirm.lock();
            if st.dead {
                return Err(Errno::ENOENT);
            }
            check_len(&c)?;
            let existing = fs.dcache.lookup_locked(&parent.d, &c, cx.guard);
            if existing.is_some_and(|d| d.get().inode(cx.guard).is_some()) {
                return Err(Errno::EEXIST);
            }
            if trailing && !matches!(kind, NewKind::Dir) {
                return Err(Errno::ENOENT);
            }
            dir_inode.permission(cx.creds, Access::W_OK | Access::X_OK)?;
            let t = now();
            let (uid, gid, mode) = init_owner(dir_inode, cx.creds, mode);
            let (rdev, target) = match kind {
                NewKind::Node(_, dev) => (dev, None),
                NewKind::Symlink(t) => (0, Some(t)),
                NewKind::Dir => (0, None),
            };
            let inode = fs.new_inode(mode, uid, gid, rdev, target, t)?;
            Self::instantiate(fs, parent.d, &c, existing, inode, &mut st, cx.guard);
            drop(st);
            if matches!(kind, NewKind::Dir) {
                dir_inode.add_links(1, None);
            }
            dir_inode.dir_changed(1, t);
            Ok(())
        })
    }

    /// Binds `c` in `parent` to `inode`: reuses a negative dentry or allocates one.
    fn instantiate(
        fs: &MemFs,
        parent: DPtr<'_>,
        c: &Component<'_>,
        existing: Option<DPtr<'_>>,
        inode: Arc<Inode>,
        st: &mut DirState,
        guard: &Guard,
    ) {
        match existing {
            Some(d) => {
                fs.dcache.d_instantiate(&d, inode, st, guard);
                fs.negative_gone(1);
            }
            None => {
                fs.dcache.d_alloc(parent, c, Some(inode), st);
            }
        }
    }

    // ---------------------------------------------------------------- open

    /// `open(2)`.
    pub fn open(&self, path: impl AsRef<Path>, flags: OFlags, mode: u32) -> Result<Fd> {
        self.openat(Fd::CWD, path, flags, mode)
    }

    /// `openat(2)`.
    pub fn openat(
        &self,
        dirfd: impl Desc,
        path: impl AsRef<Path>,
        flags: OFlags,
        mode: u32,
    ) -> Result<Fd> {
        let of = self.open_description(dirfd, path.as_ref(), flags, mode)?;
        self.files.insert(Arc::new(of))
    }

    /// `openat(2)`, returning the description as a [`Handle`] instead of installing it
    /// in the descriptor table: the same checks and effects (creation, truncation), but
    /// no descriptor number is taken, so `EMFILE` cannot happen. Dropping the handle
    /// closes it.
    pub fn openat_handle(
        &self,
        dirfd: impl Desc,
        path: impl AsRef<Path>,
        flags: OFlags,
        mode: u32,
    ) -> Result<Handle> {
        let of = self.open_description(dirfd, path.as_ref(), flags, mode)?;
        Ok(Handle::new(Arc::new(of)))
    }

    /// The open description `openat` installs.
    fn open_description(
        &self,
        dirfd: impl Desc,
        path: &Path,
        flags: OFlags,
        mode: u32,
    ) -> Result<OpenFile> {
        let path = cpath(path)?;
        if path.is_empty() {
            return Err(Errno::ENOENT);
        }
        let mut flags = flags;
        if flags.contains(OFlags::CREAT) && flags.contains(OFlags::DIRECTORY) {
            // Linux `build_open_flags`: O_CREAT with O_DIRECTORY or O_TMPFILE is EINVAL.
            return Err(Errno::EINVAL);
        }
        if flags.contains(OFlags::PATH) {
            flags = flags & (OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC);
        }
        self.at(dirfd, path, |cx, start| {
            if flags.contains(OFlags::TMPFILE) {
                self.open_tmpfile(cx, start, path, flags, mode)
            } else if flags.contains(OFlags::CREAT) {
                self.open_creat(cx, start, path, flags, mode)
            } else {
                self.open_existing(cx, start, path, flags)
            }
        })
    }

    /// Opens an existing object: the fast walk, then references, then validation.
    fn open_existing(
        &self,
        cx: &Ctx<'_>,
        start: Start<'_>,
        path: &[u8],
        flags: OFlags,
    ) -> Result<OpenFile> {
        let wf = Flags::object(!flags.contains(OFlags::NOFOLLOW));
        if cx.vfs.check_mode() {
            // Check mode covers open's walk: `with_walk` compares fast and locked.
            let _ = with_walk(cx.vfs, |locked| {
                let w = start.walk(cx, path, wf, locked)?;
                let p = w.pos();
                w.validate(cx)?;
                Ok((Arc::as_ptr(p.mnt) as usize, p.d.as_ptr() as usize))
            });
        }
        let of = retry(|locked| {
            let w = start.walk(cx, path, wf, locked)?;
            let p = w.pos();
            let inode = p.inode()?;
            Self::may_open(inode, flags, cx.creds)?;
            let of = Self::open_pos(p, flags, cx.guard)?;
            // The open file counts as a user of its mount: confirm against umount.
            w.confirm(cx)?;
            Ok(of)
        })?;
        self.finish_open(&of, cx.creds)?;
        Ok(of)
    }

    /// Takes the references an open file holds on what a walk found: the inode the walk
    /// saw (which a dentry cannot have released while the guard is held), and, for a
    /// directory, its dentry, unless it died meanwhile (`Retry`: walk again).
    fn open_pos(p: Pos<'_>, flags: OFlags, guard: &Guard) -> std::result::Result<OpenFile, Fail> {
        let inode = inode_arc(p.inode()?, guard);
        let dir = if inode.is_dir() {
            Some(DRef::try_get(p.d).ok_or(Fail::Retry)?)
        } else {
            None
        };
        // Evicted since the walk found it (unlinked and closed): walk again.
        OpenFile::new(p.mnt, dir, inode, flags).ok_or(Fail::Retry)
    }

    /// Linux `may_open` for an existing object.
    fn may_open(inode: &Inode, flags: OFlags, creds: &Creds) -> Result<()> {
        let ty = inode.mode() & S_IFMT;
        if flags.contains(OFlags::DIRECTORY) && ty != S_IFDIR {
            return Err(Errno::ENOTDIR);
        }
        if ty == S_IFLNK {
            if flags.contains(OFlags::PATH) && flags.contains(OFlags::NOFOLLOW) {
                return Ok(());
            }
            return Err(Errno::ELOOP);
        }
        if flags.contains(OFlags::PATH) {
            return Ok(());
        }
        let (read, write) = acc_mode(flags);
        let write = write || flags.contains(OFlags::TRUNC);
        if ty == S_IFDIR && (write || flags.contains(OFlags::CREAT)) {
            return Err(Errno::EISDIR);
        }
        let mut mask = Access::F_OK;
        if read {
            mask |= Access::R_OK;
        }
        if write {
            mask |= Access::W_OK;
        }
        inode.permission(creds, mask)?;
        // Only the owner (or root, as CAP_FOWNER) may keep reads from touching atime.
        if flags.contains(OFlags::NOATIME) && creds.uid != 0 && creds.uid != inode.uid() {
            return Err(Errno::EPERM);
        }
        match ty {
            S_IFCHR | S_IFBLK => Err(Errno::ENXIO),
            S_IFIFO if flags.writable() && flags.contains(OFlags::NONBLOCK) => Err(Errno::ENXIO),
            S_IFSOCK => Err(Errno::ENXIO),
            _ => Ok(()),
        }
    }

    /// Linux `may_create_in_sticky` with `fs.protected_regular = 0` and
    /// `fs.protected_fifos = 0` (Debian's defaults): an `O_CREAT` open that finds another
    /// user's non-regular object in a world-writable sticky directory is refused.
    fn may_create_in_sticky(dir: &Inode, inode: &Inode, creds: &Creds) -> Result<()> {
        let dm = dir.mode();
        let ty = inode.mode() & S_IFMT;
        if dm & S_ISVTX == 0 || ty == S_IFREG || ty == S_IFIFO {
            return Ok(());
        }
        if inode.uid() == dir.uid() || inode.uid() == creds.uid {
            return Ok(());
        }
        if dm & 0o002 != 0 {
            return Err(Errno::EACCES);
        }
        Ok(())
    }

    /// What follows a successful open of an existing regular file: `O_TRUNC`.
    fn finish_open(&self, of: &OpenFile, creds: &Creds) -> Result<()> {
        if of.flags.contains(OFlags::TRUNC) && !of.is_path() && of.inode.mode() & S_IFMT == S_IFREG
        {
            self.truncate_inode(&of.mnt.fs, &of.inode, 0, creds, true)?;
        }
        Ok(())
    }

    fn open_creat(
        &self,
        cx: &Ctx<'_>,
        start: Start<'_>,
        path: &[u8],
        flags: OFlags,
        mode: u32,
    ) -> Result<OpenFile> {
        let mut links = 0;
        let mut start = start;
        let mut path: &[u8] = path;
        // Restarted with a symlink body when the last component is a symlink to follow.
        loop {
            let par = Self::parent_of(cx, start, path, &mut links)?;
            let (parent, trailing) = (par.pos, par.trailing);
            let c = match par.last {
                Last::Normal(c) => c,
                // Linux `do_open`: the name exists (it is a directory).
                _ if flags.contains(OFlags::EXCL) => return Err(Errno::EEXIST),
                _ => return Err(Errno::EISDIR),
            };
            if trailing {
                return Err(Errno::EISDIR);
            }
            let dirm = Self::dir_of(&parent)?;
            let dir_inode = parent.inode.ok_or(Errno::ENOENT)?;
            let fs = &parent.mnt.fs;
            let mut st = dirm.lock();
            let existing = if st.dead {
                None
            } else {
                fs.dcache.lookup_locked(&parent.d, &c, cx.guard)
            };
            if let Some(d) = existing {
                if let Some(inode) = d.get().inode(cx.guard) {
                    // Held under the directory lock, where the name still links it: a racing
                    // unlink cannot evict it any more. (With O_CREAT a directory is EISDIR
                    // below, so no dentry is needed.)
                    let held = OpenFile::new(parent.mnt, None, inode_arc(inode, cx.guard), flags)
                        .expect("a linked inode can be held");
                    drop(st);
                    if flags.contains(OFlags::EXCL) {
                        return Err(Errno::EEXIST);
                    }
                    if let Some(body) = inode.symlink_target() {
                        if flags.contains(OFlags::NOFOLLOW) {
                            Self::may_create_in_sticky(dir_inode, inode, cx.creds)?;
                            return Err(Errno::ELOOP);
                        }
                        links += 1;
                        if links > limits::MAXSYMLINKS {
                            return Err(Errno::ELOOP);
                        }
                        start = Start {
                            mnt: parent.mnt,
                            d: parent.d,
                        };
                        path = body;
                        continue;
                    }
                    if d.flags() & MOUNTED != 0 {
                        // A mount point: open what is mounted there.
                        let rest: &[u8] = c.bytes;
                        return self.open_existing(
                            cx,
                            Start {
                                mnt: parent.mnt,
                                d: parent.d,
                            },
                            rest,
                            flags,
                        );
                    }
                    Self::may_open(inode, flags, cx.creds)?;
                    self.finish_open(&held, cx.creds)?;
                    return Ok(held);
                }
            }
            if st.dead {
                return Err(Errno::ENOENT);
            }
            check_len(&c)?;
            dir_inode.permission(cx.creds, Access::W_OK | Access::X_OK)?;
            let t = now();
            let m = S_IFREG | (mode & 0o7777 & !self.umask.load(Relaxed));
            let (uid, gid, m) = init_owner(dir_inode, cx.creds, m);
            let inode = fs.new_inode(m, uid, gid, 0, None, t)?;
            Self::instantiate(fs, parent.d, &c, existing, inode.clone(), &mut st, cx.guard);
            // Held before the lock goes: the file is ours even if it is unlinked at once.
            let of = OpenFile::new(parent.mnt, None, inode, flags).expect("a linked inode");
            drop(st);
            dir_inode.dir_changed(1, t);
            return Ok(of);
        }
    }

    fn open_tmpfile(
        &self,
        cx: &Ctx<'_>,
        start: Start<'_>,
        path: &[u8],
        flags: OFlags,
        mode: u32,
    ) -> Result<OpenFile> {
        if !acc_mode(flags).1 {
            return Err(Errno::EINVAL);
        }
        let (p, _hold) = Self::resolve(cx, start, path, true)?;
        let dir = p.inode.ok_or(Errno::ENOENT)?;
        if !dir.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        dir.permission(cx.creds, Access::W_OK | Access::X_OK)?;
        let m = S_IFREG | (mode & 0o7777 & !self.umask.load(Relaxed));
        let (uid, gid, m) = init_owner(dir, cx.creds, m);
        let inode = p.mnt.fs.new_inode(m, uid, gid, 0, None, now())?;
        // No link: the creator's hold is the description's.
        inode.add_links(-1, None);
        Ok(OpenFile::with_hold(p.mnt, None, inode, flags))
    }

    /// Opens the object `fd` refers to again, with new `flags` (what Linux does through
    /// `/proc/self/fd/N`): an `O_PATH` descriptor becomes a readable or writable one after
    /// the usual permission checks, including for an unlinked file. Creation flags are
    /// ignored; `O_TRUNC` truncates. For frontends (FUSE) that name files by handle.
    pub fn reopen(&self, fd: impl Desc, flags: OFlags) -> Result<Fd> {
        let of = self.reopen_description(fd, flags)?;
        self.files.insert(Arc::new(of))
    }

    /// [`reopen`](Self::reopen), returning the new description as a [`Handle`] (see
    /// [`openat_handle`](Self::openat_handle)).
    pub fn reopen_handle(&self, fd: impl Desc, flags: OFlags) -> Result<Handle> {
        let of = self.reopen_description(fd, flags)?;
        Ok(Handle::new(Arc::new(of)))
    }

    fn reopen_description(&self, fd: impl Desc, flags: OFlags) -> Result<OpenFile> {
        let old = self.file(fd)?;
        // Drop the creation bits (O_TMPFILE without its O_DIRECTORY part).
        let mut flags = OFlags(flags.0 & !(OFlags::CREAT.0 | OFlags::EXCL.0 | 0o20000000));
        if flags.contains(OFlags::PATH) {
            flags = flags & (OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC);
        }
        let g = crossbeam_epoch::pin();
        let creds = self.creds_ref(&g);
        let ty = old.inode.mode() & S_IFMT;
        if ty == S_IFLNK && !flags.contains(OFlags::PATH) {
            return Err(Errno::ELOOP);
        }
        Self::may_open(&old.inode, flags | OFlags::NOFOLLOW, creds)?;
        let of = OpenFile::new(&old.mnt, old.dir.clone(), old.inode.clone(), flags)
            .expect("held by the old description");
        self.finish_open(&of, creds)?;
        Ok(of)
    }

    /// `close(2)`.
    pub fn close(&self, fd: Fd) -> Result<()> {
        self.files.remove(fd)
    }

    // ---------------------------------------------------------------- data

    /// The description behind `fd` for I/O of `len` bytes at `pos` (the file position when
    /// `None`), checked in Linux's order: the access mode (`EBADF`), the range
    /// (`rw_verify_area`: `EINVAL` if it passes `i64::MAX`), then the kind (`EISDIR`).
    fn io_file(&self, fd: impl Desc, write: bool, pos: Option<u64>, len: usize) -> Result<FileRef> {
        let f = self.file(fd)?;
        let allowed = if write {
            f.flags.writable()
        } else {
            f.flags.readable()
        };
        if f.is_path() || !allowed {
            return Err(Errno::EBADF);
        }
        let pos = pos.unwrap_or_else(|| *f.pos.lock());
        if pos > i64::MAX as u64 || (pos as i64).checked_add(len as i64).is_none() {
            return Err(Errno::EINVAL);
        }
        if f.inode.is_dir() {
            return Err(Errno::EISDIR);
        }
        Ok(f)
    }

    fn read_inode(f: &OpenFile, buf: &mut [u8], off: u64) -> Result<usize> {
        match &f.inode.contents {
            crate::inode::Contents::File(d) => {
                let n = {
                    let data = d.read();
                    data.read(buf, off, f.inode.size())
                };
                if !f.flags.contains(OFlags::NOATIME) {
                    f.inode.read_accessed(now());
                }
                Ok(n)
            }
            _ => Err(Errno::EINVAL),
        }
    }

    fn write_inode(&self, f: &OpenFile, buf: &[u8], off: Option<u64>) -> Result<(usize, u64)> {
        let crate::inode::Contents::File(d) = &f.inode.contents else {
            return Err(Errno::EINVAL);
        };
        let g = crossbeam_epoch::pin();
        let creds = self.creds_ref(&g);
        let mut data = d.write();
        let size = f.inode.size();
        let off = match off {
            Some(o) if !f.flags.contains(OFlags::APPEND) => o,
            _ => size,
        };
        if buf.is_empty() {
            return Ok((0, off));
        }
        // Linux `generic_write_checks_count`: nothing at or past the maximum size, and a
        // write that would pass it is cut short there.
        if off >= MAX_FILE_SIZE {
            return Err(Errno::EFBIG);
        }
        let mut n = (buf.len() as u64).min(MAX_FILE_SIZE - off);
        // The pages the write adds are charged before any byte changes. With too few left,
        // the write is cut short where the pages it could charge end (as tmpfs does, page
        // by page), or fails with ENOSPC if not one byte fits: never a change then an error,
        // and never a page kept without its charge.
        let need = data.missing_pages(off, off + n);
        let got = f.mnt.fs.charge_pages_up_to(need);
        if got < need {
            let limit = data.prefix_adding(off, off + n, got);
            if limit == off {
                f.mnt.fs.uncharge_pages(got);
                return Err(Errno::ENOSPC);
            }
            n = limit - off;
        }
        let end = off + n;
        let added = data.write(&buf[..n as usize], off);
        debug_assert_eq!(added, got, "pages added and charged differ");
        let t = now();
        let kill = write_kill_bits(&f.inode, creds);
        f.inode.update(&AttrUpdate {
            size: Some(size.max(end)),
            pages_delta: added as i64,
            perm: (kill != 0).then(|| f.inode.mode() & 0o7777 & !kill),
            times: Times::modify(t),
            ..Default::default()
        });
        Ok((n as usize, end))
    }

    /// `read(2)`.
    pub fn read(&self, fd: impl Desc, buf: &mut [u8]) -> Result<usize> {
        let f = self.io_file(fd, false, None, buf.len())?;
        let mut pos = f.pos.lock();
        let n = Self::read_inode(&f, buf, *pos)?;
        *pos += n as u64;
        Ok(n)
    }

    /// `pread(2)`.
    pub fn pread(&self, fd: impl Desc, buf: &mut [u8], off: u64) -> Result<usize> {
        // A negative offset is refused before the descriptor is looked at.
        if off > i64::MAX as u64 {
            return Err(Errno::EINVAL);
        }
        let f = self.io_file(fd, false, Some(off), buf.len())?;
        Self::read_inode(&f, buf, off)
    }

    /// `write(2)`.
    pub fn write(&self, fd: impl Desc, buf: &[u8]) -> Result<usize> {
        let f = self.io_file(fd, true, None, buf.len())?;
        let mut pos = f.pos.lock();
        let (n, end) = self.write_inode(&f, buf, Some(*pos))?;
        *pos = end;
        Ok(n)
    }

    /// `pwrite(2)` (with `O_APPEND` it appends, as on Linux).
    pub fn pwrite(&self, fd: impl Desc, buf: &[u8], off: u64) -> Result<usize> {
        if off > i64::MAX as u64 {
            return Err(Errno::EINVAL);
        }
        // The range is checked at `off` even with O_APPEND, as on Linux.
        let f = self.io_file(fd, true, Some(off), buf.len())?;
        Ok(self.write_inode(&f, buf, Some(off))?.0)
    }

    /// `lseek(2)`, with `SEEK_DATA` and `SEEK_HOLE`, as tmpfs computes it: an offset that
    /// overflows is negative, hence `EINVAL`. On a directory the offset is a readdir cookie,
    /// and only `SEEK_SET` and `SEEK_CUR` apply.
    pub fn lseek(&self, fd: impl Desc, off: i64, whence: Whence) -> Result<u64> {
        let f = self.file(fd)?;
        if f.is_path() {
            return Err(Errno::EBADF);
        }
        let mut pos = f.pos.lock();
        let cur = *pos as i64;
        if f.inode.is_dir() {
            // Linux `offset_dir_llseek`.
            let new = match whence {
                Whence::Set => off,
                Whence::Cur => cur.wrapping_add(off),
                _ => return Err(Errno::EINVAL),
            };
            if new < 0 {
                return Err(Errno::EINVAL);
            }
            *pos = new as u64;
            return Ok(new as u64);
        }
        let size = f.inode.size() as i64;
        // Linux `generic_file_llseek_size` and `shmem_file_llseek`.
        let new = match whence {
            Whence::Set => off,
            Whence::Cur if off == 0 => return Ok(*pos),
            Whence::Cur => cur.wrapping_add(off),
            Whence::End => size.wrapping_add(off),
            Whence::Data | Whence::Hole => {
                if off < 0 {
                    return Err(Errno::ENXIO);
                }
                let data = whence == Whence::Data;
                let r = match &f.inode.contents {
                    crate::inode::Contents::File(d) => d.read().seek(off, size, data)?,
                    _ if off >= size => return Err(Errno::ENXIO),
                    _ if data => off,
                    _ => size,
                };
                if r < 0 {
                    // tmpfs's wrapped offset, handed back as it is (the position stays).
                    return Ok(r as u64);
                }
                r
            }
        };
        if new < 0 {
            return Err(Errno::EINVAL);
        }
        *pos = new as u64;
        Ok(new as u64)
    }

    // ---------------------------------------------------------------- directories

    /// Reads up to `max_entries` entries from a directory descriptor, starting at its
    /// position (a cookie). `.` and `..` come first. An empty result means the end. An
    /// entry that exists for the whole read is returned exactly once; entries created or
    /// renamed meanwhile may or may not appear.
    pub fn getdents(&self, fd: impl Desc, max_entries: usize) -> Result<Vec<DirEntry>> {
        let f = self.file(fd)?;
        if f.is_path() {
            return Err(Errno::EBADF);
        }
        let (Some(d), Some(dirm)) = (&f.dir, f.inode.dir()) else {
            return Err(Errno::ENOTDIR);
        };
        let mut pos = f.pos.lock();
        let g = crossbeam_epoch::pin();
        let mut out = Vec::new();
        let st = dirm.lock();
        if st.dead {
            return Err(Errno::ENOENT);
        }
        if *pos == 0 && out.len() < max_entries {
            out.push(DirEntry {
                ino: f.inode.ino,
                file_type: FileType::Directory,
                name: b".".to_vec(),
                cookie: 1,
            });
            *pos = 1;
        }
        if *pos == 1 && out.len() < max_entries {
            let ino = d
                .parent(&g)
                .and_then(|p| p.get().inode(&g))
                .map_or(f.inode.ino, |i| i.ino);
            out.push(DirEntry {
                ino,
                file_type: FileType::Directory,
                name: b"..".to_vec(),
                cookie: 2,
            });
            *pos = 2;
        }
        if out.len() < max_entries {
            for (&cookie, child) in st.children.range((*pos).max(3)..) {
                // SAFETY: children are hashed, and the hash's reference keeps them alive
                // while we hold the directory lock.
                let child = unsafe { child.as_ref() };
                let Some(ci) = child.inode(&g) else { continue };
                out.push(DirEntry {
                    ino: ci.ino,
                    file_type: ci.file_type(),
                    name: child.name.to_vec(&g),
                    cookie: cookie + 1,
                });
                *pos = cookie + 1;
                if out.len() >= max_entries {
                    break;
                }
            }
            if out.len() < max_entries {
                *pos = st.next_cookie.max(3);
            }
        }
        drop(st);
        if !f.flags.contains(OFlags::NOATIME) {
            f.inode.read_accessed(now());
        }
        Ok(out)
    }

    /// `rmdir(2)`.
    pub fn rmdir(&self, path: impl AsRef<Path>) -> Result<()> {
        self.unlinkat(Fd::CWD, path, AtFlags::REMOVEDIR)
    }

    /// `unlink(2)`.
    pub fn unlink(&self, path: impl AsRef<Path>) -> Result<()> {
        self.unlinkat(Fd::CWD, path, AtFlags::empty())
    }

    /// `unlinkat(2)`, with `AT_REMOVEDIR`.
    pub fn unlinkat(&self, dirfd: impl Desc, path: impl AsRef<Path>, flags: AtFlags) -> Result<()> {
        if flags.0 & !AtFlags::REMOVEDIR.0 != 0 {
            return Err(Errno::EINVAL);
        }
        let rmdir = flags.contains(AtFlags::REMOVEDIR);
        let path = cpath(path.as_ref())?;
        if path.is_empty() {
            return Err(Errno::ENOENT);
        }
        self.at(dirfd, path, |cx, start| {
            let mut links = 0;
            let par = Self::parent_of(cx, start, path, &mut links)?;
            let (parent, trailing) = (par.pos, par.trailing);
            let c = match (par.last, rmdir) {
                (Last::Normal(c), _) => c,
                (Last::Dot, true) => return Err(Errno::EINVAL),
                (Last::DotDot, true) => return Err(Errno::ENOTEMPTY),
                (_, true) => return Err(Errno::EBUSY),
                (_, false) => return Err(Errno::EISDIR),
            };
            let dirm = Self::dir_of(&parent)?;
            if rmdir {
                self.do_rmdir(cx, &parent, dirm, &c)
            } else {
                self.do_unlink(cx, &parent, dirm, &c, trailing)
            }
        })
    }

    fn do_unlink(
        &self,
        cx: &Ctx<'_>,
        parent: &Pos<'_>,
        dirm: &Mutex<DirState>,
        c: &Component<'_>,
        trailing: bool,
    ) -> Result<()> {
        let fs = &parent.mnt.fs;
        let dir_inode = parent.inode.ok_or(Errno::ENOENT)?;
        let mut st = dirm.lock();
        if st.dead {
            return Err(Errno::ENOENT);
        }
        check_len(c)?;
        let d = fs
            .dcache
            .lookup_locked(&parent.d, c, cx.guard)
            .ok_or(Errno::ENOENT)?;
        let victim = d.inode_arc(cx.guard).ok_or(Errno::ENOENT)?;
        if trailing {
            return Err(if victim.is_dir() {
                Errno::EISDIR
            } else {
                Errno::ENOTDIR
            });
        }
        may_delete(dir_inode, &d, &victim, false, cx.creds)?;
        if d.flags() & MOUNTED != 0 {
            return Err(Errno::EBUSY);
        }
        // Cached walks may pass through a symlink.
        let _ns = victim.symlink_target().is_some().then(NsChange::begin);
        if fs.negative_admit() {
            fs.dcache.d_delete(&d, &mut st, cx.guard);
        } else {
            fs.dcache.d_drop(d, &mut st);
        }
        drop(_ns);
        drop(st);
        let t = now();
        Self::drop_link(fs, &victim, t);
        dir_inode.dir_changed(-1, t);
        Ok(())
    }

    /// One link of `victim` went away; with the last, so does the link's hold (the inode
    /// is evicted unless open).
    fn drop_link(fs: &MemFs, victim: &Inode, t: Timespec) {
        if victim.add_links(-1, Some(t)) == 0 {
            fs.release(victim);
        }
    }

    /// Empties a directory being removed: drops its negative children and marks it dead.
    /// The caller holds its lock and checked that it has no positive child.
    fn kill_dir(fs: &MemFs, st: &mut DirState, guard: &Guard) {
        let negs: Vec<_> = st.children.values().copied().collect();
        for n in negs {
            // SAFETY: hashed children are alive while we hold the directory lock, and the
            // children map keeps their allocations' pointers.
            let nd = unsafe { DPtr::new(n) };
            debug_assert!(nd.get().inode(guard).is_none());
            fs.dcache.d_drop(nd, st);
            fs.negative_gone(1);
        }
        effect(|| st.dead = true);
    }

    fn do_rmdir(
        &self,
        cx: &Ctx<'_>,
        parent: &Pos<'_>,
        dirm: &Mutex<DirState>,
        c: &Component<'_>,
    ) -> Result<()> {
        let fs = &parent.mnt.fs;
        let dir_inode = parent.inode.ok_or(Errno::ENOENT)?;
        loop {
            // Find the victim under the parent lock, then lock both in address order.
            let (d, victim) = {
                let st = dirm.lock();
                if st.dead {
                    return Err(Errno::ENOENT);
                }
                check_len(c)?;
                let d = fs
                    .dcache
                    .lookup_locked(&parent.d, c, cx.guard)
                    .ok_or(Errno::ENOENT)?;
                let victim = d.inode_arc(cx.guard).ok_or(Errno::ENOENT)?;
                may_delete(dir_inode, &d, &victim, true, cx.creds)?;
                (d, victim)
            };
            let vdir = victim.dir().ok_or(Errno::ENOTDIR)?;
            let mut locks = DirLocks::lock(&[dirm, vdir]);
            if locks.get(dirm).dead
                || fs.dcache.lookup_locked(&parent.d, c, cx.guard) != Some(d)
                || !std::ptr::eq(d.inode.load(Acquire), &*victim)
            {
                continue;
            }
            if d.flags() & MOUNTED != 0 {
                return Err(Errno::EBUSY);
            }
            if locks.get(vdir).positive > 0 {
                return Err(Errno::ENOTEMPTY);
            }
            // Cached walks may pass through the directory (or `..` from it).
            let ns = NsChange::begin();
            Self::kill_dir(fs, locks.get(vdir), cx.guard);
            fs.dcache.d_drop(d, locks.get(dirm));
            drop(ns);
            drop(locks);
            let t = now();
            victim.add_links(-2, Some(t));
            fs.release(&victim);
            dir_inode.add_links(-1, None);
            dir_inode.dir_changed(-1, t);
            return Ok(());
        }
    }

    // ---------------------------------------------------------------- link, rename

    /// `link(2)`.
    pub fn link(&self, old: impl AsRef<Path>, new: impl AsRef<Path>) -> Result<()> {
        self.linkat(Fd::CWD, old, Fd::CWD, new, AtFlags::empty())
    }

    /// `linkat(2)`, with `AT_SYMLINK_FOLLOW` and `AT_EMPTY_PATH`.
    pub fn linkat(
        &self,
        olddirfd: impl Desc,
        old: impl AsRef<Path>,
        newdirfd: impl Desc,
        new: impl AsRef<Path>,
        flags: AtFlags,
    ) -> Result<()> {
        if flags.0 & !(AtFlags::SYMLINK_FOLLOW.0 | AtFlags::EMPTY_PATH.0) != 0 {
            return Err(Errno::EINVAL);
        }
        let old = cpath(old.as_ref())?;
        let new = cpath(new.as_ref())?;
        // The source: an inode and its mount.
        let (src_mnt, src, linkable_tmp) = if old.is_empty() {
            let (m, i, tmp) = self.empty_path(olddirfd, flags, |f| {
                Ok((
                    f.mnt.clone(),
                    f.inode.clone(),
                    f.flags.contains(OFlags::TMPFILE) && !f.flags.contains(OFlags::EXCL),
                ))
            })?;
            (m, i, tmp)
        } else {
            self.at(olddirfd, old, |cx, start| {
                let (p, _hold) =
                    Self::resolve(cx, start, old, flags.contains(AtFlags::SYMLINK_FOLLOW))?;
                let i = inode_arc(p.inode.ok_or(Errno::ENOENT)?, cx.guard);
                Ok((p.mnt.clone(), i, false))
            })?
        };
        if new.is_empty() {
            return Err(Errno::ENOENT);
        }
        self.at(newdirfd, new, |cx, start| {
            let mut links = 0;
            let par = Self::parent_of(cx, start, new, &mut links)?;
            let (parent, trailing) = (par.pos, par.trailing);
            let Last::Normal(c) = par.last else {
                return Err(Errno::EEXIST);
            };
            let dirm = Self::dir_of(&parent)?;
            let dir_inode = parent.inode.ok_or(Errno::ENOENT)?;
            let fs = &parent.mnt.fs;
            let mut st = dirm.lock();
            if st.dead {
                return Err(Errno::ENOENT);
            }
            check_len(&c)?;
            let existing = fs.dcache.lookup_locked(&parent.d, &c, cx.guard);
            if existing.is_some_and(|d| d.get().inode(cx.guard).is_some()) {
                return Err(Errno::EEXIST);
            }
            if trailing {
                return Err(Errno::ENOENT);
            }
            // Linux `do_linkat` order: EXDEV, protected hardlinks, then `vfs_link`.
            if !Arc::ptr_eq(parent.mnt, &src_mnt) {
                return Err(Errno::EXDEV);
            }
            Self::may_linkat(&src, cx.creds)?;
            dir_inode.permission(cx.creds, Access::W_OK | Access::X_OK)?;
            if src.is_dir() {
                return Err(Errno::EPERM);
            }
            let t = now();
            if !src.link_if_alive(linkable_tmp, t) {
                return Err(Errno::ENOENT);
            }
            Self::instantiate(fs, parent.d, &c, existing, src.clone(), &mut st, cx.guard);
            drop(st);
            dir_inode.dir_changed(1, t);
            Ok(())
        })
    }

    /// Linux `may_linkat` with `fs.protected_hardlinks = 1`.
    fn may_linkat(src: &Inode, creds: &Creds) -> Result<()> {
        if creds.uid == 0 || creds.uid == src.uid() {
            return Ok(());
        }
        let m = src.mode();
        let safe = m & S_IFMT == S_IFREG
            && m & S_ISUID == 0
            && m & (S_ISGID | 0o010) != (S_ISGID | 0o010)
            && src.permission(creds, Access::R_OK | Access::W_OK).is_ok();
        if safe {
            Ok(())
        } else {
            Err(Errno::EPERM)
        }
    }

    /// `rename(2)`.
    pub fn rename(&self, old: impl AsRef<Path>, new: impl AsRef<Path>) -> Result<()> {
        self.renameat2(Fd::CWD, old, Fd::CWD, new, RenameFlags::empty())
    }

    /// `renameat2(2)`, with `RENAME_NOREPLACE` and `RENAME_EXCHANGE`.
    pub fn renameat2(
        &self,
        olddirfd: impl Desc,
        old: impl AsRef<Path>,
        newdirfd: impl Desc,
        new: impl AsRef<Path>,
        flags: RenameFlags,
    ) -> Result<()> {
        if flags.0 & !(RenameFlags::NOREPLACE.0 | RenameFlags::EXCHANGE.0) != 0
            || flags.contains(RenameFlags::NOREPLACE | RenameFlags::EXCHANGE)
        {
            return Err(Errno::EINVAL);
        }
        let old = cpath(old.as_ref())?;
        let new = cpath(new.as_ref())?;
        if old.is_empty() || new.is_empty() {
            return Err(Errno::ENOENT);
        }
        self.at(olddirfd, old, |cx, old_start| {
            let mut links = 0;
            let par1 = Self::parent_of(cx, old_start, old, &mut links)?;
            let (p1, l1, t1) = (par1.pos, par1.last, par1.trailing);
            // The new side's start, looked at only after the old side resolved (as Linux).
            let held_new;
            let ctx = self.ctx_ref(cx.guard);
            let new_start = if new.first() == Some(&b'/') || newdirfd.is_cwd() {
                Start {
                    mnt: &ctx.cwd.mnt,
                    d: ctx.cwd.d.ptr(),
                }
            } else {
                held_new = self.file(newdirfd)?;
                match &held_new.dir {
                    Some(d) => Start {
                        mnt: &held_new.mnt,
                        d: d.ptr(),
                    },
                    None => return Err(Errno::ENOTDIR),
                }
            };
            let mut links = 0;
            let par2 = Self::parent_of(cx, new_start, new, &mut links)?;
            let (p2, l2, t2) = (par2.pos, par2.last, par2.trailing);
            // Linux `do_renameat2` order: EXDEV, the kinds of the last components, then
            // the lookups (where a name's length is checked).
            if !Arc::ptr_eq(p1.mnt, p2.mnt) {
                return Err(Errno::EXDEV);
            }
            let Last::Normal(c1) = l1 else {
                return Err(Errno::EBUSY);
            };
            let Last::Normal(c2) = l2 else {
                return Err(if flags.contains(RenameFlags::NOREPLACE) {
                    Errno::EEXIST
                } else {
                    Errno::EBUSY
                });
            };
            check_len(&c1)?;
            self.do_rename(cx, &p1, &c1, t1, &p2, &c2, t2, flags)
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn do_rename(
        &self,
        cx: &Ctx<'_>,
        p1: &Pos<'_>,
        c1: &Component<'_>,
        t1: bool,
        p2: &Pos<'_>,
        c2: &Component<'_>,
        t2: bool,
        flags: RenameFlags,
    ) -> Result<()> {
        let fs = &p1.mnt.fs;
        let g = cx.guard;
        let (d1m, d2m) = (Self::dir_of(p1)?, Self::dir_of(p2)?);
        let (i1, i2) = (
            p1.inode.ok_or(Errno::ENOENT)?,
            p2.inode.ok_or(Errno::ENOENT)?,
        );
        let cross = p1.d != p2.d;
        let exchange = flags.contains(RenameFlags::EXCHANGE);
        let mut rename_lock = None;
        loop {
            // Peek at both names under the parents' locks, to learn what else to lock.
            let (od, nd, oi, ni) = {
                let _l = DirLocks::lock(&[d1m, d2m]);
                let od = fs.dcache.lookup_locked(&p1.d, c1, g);
                let nd = fs.dcache.lookup_locked(&p2.d, c2, g);
                let oi = od.and_then(|d| d.inode_arc(g));
                let ni = nd.and_then(|d| d.inode_arc(g));
                (od, nd, oi, ni)
            };
            let old_dir = oi.as_ref().is_some_and(|i| i.is_dir());
            let new_dir = ni.as_ref().is_some_and(|i| i.is_dir());
            if cross && (old_dir || new_dir) && rename_lock.is_none() {
                rename_lock = Some(fs.rename_lock.lock());
                continue;
            }
            let victim_dir = if !exchange && new_dir {
                ni.as_ref().and_then(|i| i.dir())
            } else {
                None
            };
            // The victim's lock, or `d1m` again (a duplicate is locked once).
            let mut locks = DirLocks::lock(&[d1m, d2m, victim_dir.unwrap_or(d1m)]);
            // Everything must be as peeked, or we start again.
            let ptr_of = |i: &Option<Arc<Inode>>| i.as_ref().map_or(std::ptr::null(), Arc::as_ptr);
            if fs.dcache.lookup_locked(&p1.d, c1, g) != od
                || fs.dcache.lookup_locked(&p2.d, c2, g) != nd
                || od.is_some_and(|d| !std::ptr::eq(d.inode.load(Acquire), ptr_of(&oi)))
                || nd.is_some_and(|d| !std::ptr::eq(d.inode.load(Acquire), ptr_of(&ni)))
            {
                continue;
            }
            if locks.get(d1m).dead || locks.get(d2m).dead {
                return Err(Errno::ENOENT);
            }
            let (Some(od), Some(oi)) = (od, oi) else {
                return Err(Errno::ENOENT);
            };
            // Linux looks the new name up (and checks its length) after the old one.
            check_len(c2)?;
            let nd_pos = nd.filter(|_| ni.is_some());
            if flags.contains(RenameFlags::NOREPLACE) && nd_pos.is_some() {
                return Err(Errno::EEXIST);
            }
            if exchange {
                let Some(ni) = &ni else {
                    return Err(Errno::ENOENT);
                };
                if !ni.is_dir() && t2 {
                    return Err(Errno::ENOTDIR);
                }
            }
            if !old_dir && (t1 || (!exchange && t2)) {
                return Err(Errno::ENOTDIR);
            }
            // Loop checks, with the ancestry stable under the rename lock.
            if cross && rename_lock.is_some() {
                if is_ancestor(od, p2.d, g) {
                    return Err(Errno::EINVAL);
                }
                if let Some(nd) = nd_pos {
                    if is_ancestor(nd, p1.d, g) {
                        return Err(if exchange {
                            Errno::EINVAL
                        } else {
                            Errno::ENOTEMPTY
                        });
                    }
                }
            }
            if let Some(ni) = &ni {
                if Arc::ptr_eq(&oi, ni) {
                    return Ok(());
                }
            }
            may_delete(i1, &od, &oi, old_dir, cx.creds)?;
            match (&ni, nd_pos) {
                (Some(ni), Some(nd)) => may_delete(
                    i2,
                    &nd,
                    ni,
                    if exchange { new_dir } else { old_dir },
                    cx.creds,
                )?,
                _ => i2.permission(cx.creds, Access::W_OK | Access::X_OK)?,
            }
            if cross {
                if old_dir {
                    oi.permission(cx.creds, Access::W_OK)?;
                }
                if exchange && new_dir {
                    if let Some(ni) = &ni {
                        ni.permission(cx.creds, Access::W_OK)?;
                    }
                }
            }
            if od.flags() & MOUNTED != 0 || nd_pos.is_some_and(|d| d.flags() & MOUNTED != 0) {
                return Err(Errno::EBUSY);
            }
            // Cached walks may pass through a directory or symlink that moves or goes.
            let walks_through = |i: &Option<Arc<Inode>>| {
                i.as_ref()
                    .is_some_and(|i| i.is_dir() || i.symlink_target().is_some())
            };
            let _ns =
                (walks_through(&Some(oi.clone())) || walks_through(&ni)).then(NsChange::begin);
            let t = now();
            if exchange {
                let nd = nd_pos.expect("exchange target checked above");
                let (s1, s2) = locks.get2(d1m, d2m);
                fs.dcache.d_exchange(od, nd, s1, s2, g);
                drop(locks);
                if cross && old_dir != new_dir {
                    let (from, to) = if old_dir { (i1, i2) } else { (i2, i1) };
                    from.add_links(-1, None);
                    to.add_links(1, None);
                }
                oi.touch(Times::change(t));
                if let Some(ni) = &ni {
                    ni.touch(Times::change(t));
                }
                i1.touch(Times::modify(t));
                if cross {
                    i2.touch(Times::modify(t));
                }
                return Ok(());
            }
            // Remove what the destination held.
            let mut replaced_dir = false;
            if let Some(nd) = nd {
                match &ni {
                    Some(ni) => {
                        if let Some(vd) = victim_dir {
                            let vst = locks.get(vd);
                            if vst.positive > 0 {
                                return Err(Errno::ENOTEMPTY);
                            }
                            Self::kill_dir(fs, vst, g);
                            replaced_dir = true;
                        }
                        fs.dcache.d_drop(nd, locks.get(d2m));
                        if replaced_dir {
                            ni.add_links(-2, Some(t));
                            fs.release(ni);
                        } else {
                            Self::drop_link(fs, ni, t);
                        }
                    }
                    None => {
                        fs.dcache.d_drop(nd, locks.get(d2m));
                        fs.negative_gone(1);
                    }
                }
            }
            let (s1, s2) = locks.get2(d1m, d2m);
            fs.dcache.d_move(od, p2.d, c2, s1, s2, g);
            drop(locks);
            if old_dir && cross {
                i1.add_links(-1, None);
                if !replaced_dir {
                    i2.add_links(1, None);
                }
            } else if replaced_dir {
                i2.add_links(-1, None);
            }
            oi.touch(Times::change(t));
            let replaced = ni.is_some();
            if cross {
                i1.dir_changed(-1, t);
                i2.dir_changed(if replaced { 0 } else { 1 }, t);
            } else {
                i1.dir_changed(if replaced { -1 } else { 0 }, t);
            }
            return Ok(());
        }
    }

    // ---------------------------------------------------------------- attributes

    /// Resolves `path` (following the last symlink unless `nofollow`) and runs `f` on the
    /// inode and its file system.
    fn with_inode<R>(
        &self,
        dirfd: impl Desc,
        path: &Path,
        flags: AtFlags,
        f: impl FnOnce(&Arc<Inode>, &MemFs, &Creds) -> Result<R>,
    ) -> Result<R> {
        let path = cpath(path)?;
        if path.is_empty() {
            let g = crossbeam_epoch::pin();
            let creds = self.creds_ref(&g).clone();
            return self.empty_path(dirfd, flags, |of| f(of.inode, &of.mnt.fs, &creds));
        }
        self.at(dirfd, path, |cx, start| {
            let (p, _hold) =
                Self::resolve(cx, start, path, !flags.contains(AtFlags::SYMLINK_NOFOLLOW))?;
            let inode = inode_arc(p.inode.ok_or(Errno::ENOENT)?, cx.guard);
            f(&inode, &p.mnt.fs, cx.creds)
        })
    }

    fn with_fd<R>(
        &self,
        fd: impl Desc,
        f: impl FnOnce(&Arc<Inode>, &MemFs, &Creds) -> Result<R>,
    ) -> Result<R> {
        let of = self.file(fd)?;
        if of.is_path() {
            return Err(Errno::EBADF);
        }
        let g = crossbeam_epoch::pin();
        f(&of.inode, &of.mnt.fs, self.creds_ref(&g))
    }

    fn do_chmod(inode: &Inode, mode: u32, creds: &Creds) -> Result<()> {
        if creds.uid != 0 && creds.uid != inode.uid() {
            return Err(Errno::EPERM);
        }
        let mut m = mode & 0o7777;
        if creds.uid != 0 && !creds.in_group(inode.gid()) {
            m &= !S_ISGID;
        }
        let u = AttrUpdate {
            perm: Some(m),
            times: Times::change(now()),
            ..Default::default()
        };
        Self::setattr(inode, &u);
        Ok(())
    }

    /// `chmod(2)`.
    pub fn chmod(&self, path: impl AsRef<Path>, mode: u32) -> Result<()> {
        self.fchmodat(Fd::CWD, path, mode, AtFlags::empty())
    }

    /// `fchmod(2)`.
    pub fn fchmod(&self, fd: impl Desc, mode: u32) -> Result<()> {
        self.with_fd(fd, |i, _, c| Self::do_chmod(i, mode, c))
    }

    /// `fchmodat(2)`; `AT_SYMLINK_NOFOLLOW` on a symlink is `EOPNOTSUPP`, as on Linux.
    pub fn fchmodat(
        &self,
        dirfd: impl Desc,
        path: impl AsRef<Path>,
        mode: u32,
        flags: AtFlags,
    ) -> Result<()> {
        if flags.0 & !(AtFlags::SYMLINK_NOFOLLOW.0 | AtFlags::EMPTY_PATH.0) != 0 {
            return Err(Errno::EINVAL);
        }
        self.with_inode(dirfd, path.as_ref(), flags, |i, _, c| {
            if i.mode() & S_IFMT == S_IFLNK {
                return Err(Errno::EOPNOTSUPP);
            }
            Self::do_chmod(i, mode, c)
        })
    }

    fn do_chown(
        inode: &Inode,
        fs: &MemFs,
        uid: Option<u32>,
        gid: Option<u32>,
        creds: &Creds,
    ) -> Result<()> {
        let owner = creds.uid == inode.uid();
        if creds.uid != 0 {
            if uid.is_some_and(|u| u != inode.uid()) {
                return Err(Errno::EPERM);
            }
            if let Some(g) = gid {
                if g != inode.gid() && !(owner && creds.in_group(g)) {
                    return Err(Errno::EPERM);
                }
                if !owner {
                    return Err(Errno::EPERM);
                }
            }
            if uid.is_some() && !owner {
                return Err(Errno::EPERM);
            }
        }
        let mode = inode.mode();
        let mut kill = 0;
        if mode & S_IFMT != S_IFDIR {
            kill |= mode & S_ISUID;
            if mode & (S_ISGID | 0o010) == (S_ISGID | 0o010) {
                kill |= S_ISGID;
            }
        }
        if kill != 0 && creds.uid != 0 && !owner {
            return Err(Errno::EPERM);
        }
        let u = AttrUpdate {
            uid,
            gid,
            perm: (kill != 0).then_some(mode & 0o7777 & !kill),
            times: Times::change(now()),
            ..Default::default()
        };
        Self::setattr(inode, &u);
        if let Some(uid) = uid {
            fs.transfer_owner(inode, uid);
        }
        Ok(())
    }

    /// Applies a mode or owner change; for a directory it changes who may search it, so
    /// cached walks through it are invalidated.
    fn setattr(inode: &Inode, u: &AttrUpdate) {
        let _ns = inode.is_dir().then(NsChange::begin);
        inode.update(u);
    }

    /// `chown(2)`; `None` leaves an id unchanged.
    pub fn chown(&self, path: impl AsRef<Path>, uid: Option<u32>, gid: Option<u32>) -> Result<()> {
        self.fchownat(Fd::CWD, path, uid, gid, AtFlags::empty())
    }

    /// `lchown(2)`.
    pub fn lchown(&self, path: impl AsRef<Path>, uid: Option<u32>, gid: Option<u32>) -> Result<()> {
        self.fchownat(Fd::CWD, path, uid, gid, AtFlags::SYMLINK_NOFOLLOW)
    }

    /// `fchown(2)`.
    pub fn fchown(&self, fd: impl Desc, uid: Option<u32>, gid: Option<u32>) -> Result<()> {
        self.with_fd(fd, |i, fs, c| Self::do_chown(i, fs, uid, gid, c))
    }

    /// `fchownat(2)`.
    pub fn fchownat(
        &self,
        dirfd: impl Desc,
        path: impl AsRef<Path>,
        uid: Option<u32>,
        gid: Option<u32>,
        flags: AtFlags,
    ) -> Result<()> {
        if flags.0 & !(AtFlags::SYMLINK_NOFOLLOW.0 | AtFlags::EMPTY_PATH.0) != 0 {
            return Err(Errno::EINVAL);
        }
        self.with_inode(dirfd, path.as_ref(), flags, |i, fs, c| {
            Self::do_chown(i, fs, uid, gid, c)
        })
    }

    fn do_utimens(inode: &Inode, times: [SetTime; 2], creds: &Creds) -> Result<()> {
        if times == [SetTime::Omit, SetTime::Omit] {
            return Ok(());
        }
        let owner = creds.uid == 0 || creds.uid == inode.uid();
        let only_now = times.iter().all(|t| matches!(t, SetTime::Now));
        if !owner {
            if !only_now {
                return Err(Errno::EPERM);
            }
            inode.permission(creds, Access::W_OK)?;
        }
        let t = now();
        let pick = |s: SetTime| match s {
            SetTime::Now => Some(t),
            SetTime::Omit => None,
            SetTime::Set(v) => Some(v),
        };
        inode.touch(Times {
            atime: pick(times[0]),
            mtime: pick(times[1]),
            ctime: Some(t),
        });
        Ok(())
    }

    /// `utimensat(2)`: `times` is `[atime, mtime]`.
    pub fn utimensat(
        &self,
        dirfd: impl Desc,
        path: impl AsRef<Path>,
        times: [SetTime; 2],
        flags: AtFlags,
    ) -> Result<()> {
        if times == [SetTime::Omit, SetTime::Omit] {
            // Linux's `utimensat` returns before looking at the flags or the path.
            return Ok(());
        }
        if flags.0 & !(AtFlags::SYMLINK_NOFOLLOW.0 | AtFlags::EMPTY_PATH.0) != 0 {
            return Err(Errno::EINVAL);
        }
        // The times are checked once the path resolved (Linux `vfs_utimes`).
        let valid = times
            .iter()
            .all(|t| !matches!(t, SetTime::Set(v) if v.nsec >= 1_000_000_000));
        self.with_inode(dirfd, path.as_ref(), flags, |i, _, c| {
            if !valid {
                return Err(Errno::EINVAL);
            }
            Self::do_utimens(i, times, c)
        })
    }

    /// `futimens(3)`.
    pub fn futimens(&self, fd: impl Desc, times: [SetTime; 2]) -> Result<()> {
        if times == [SetTime::Omit, SetTime::Omit] {
            return Ok(());
        }
        let valid = times
            .iter()
            .all(|t| !matches!(t, SetTime::Set(v) if v.nsec >= 1_000_000_000));
        self.with_fd(fd, |i, _, c| {
            if !valid {
                return Err(Errno::EINVAL);
            }
            Self::do_utimens(i, times, c)
        })
    }

    fn truncate_inode(
        &self,
        fs: &MemFs,
        inode: &Inode,
        len: u64,
        creds: &Creds,
        always_touch: bool,
    ) -> Result<()> {
        let crate::inode::Contents::File(d) = &inode.contents else {
            return Err(if inode.is_dir() {
                Errno::EISDIR
            } else {
                Errno::EINVAL
            });
        };
        if len > MAX_FILE_SIZE {
            return Err(Errno::EFBIG);
        }
        let mut data = d.write();
        let size = inode.size();
        let freed = if len < size { data.truncate(len) } else { 0 };
        fs.uncharge_pages(freed);
        let t = now();
        let kill = write_kill_bits(inode, creds);
        let touch = always_touch || len != size;
        inode.update(&AttrUpdate {
            size: Some(len),
            pages_delta: -(freed as i64),
            perm: (kill != 0).then(|| inode.mode() & 0o7777 & !kill),
            times: if touch {
                Times::modify(t)
            } else {
                Times::default()
            },
            ..Default::default()
        });
        Ok(())
    }

    /// `fallocate(2)` as on tmpfs: allocation (`FallocFlags::empty()`, optionally
    /// `KEEP_SIZE`) reserves every page of the range up front, or fails with `ENOSPC`
    /// having reserved none, so that later writes there cannot fail for space; `PUNCH_HOLE |
    /// KEEP_SIZE` frees the pages wholly inside the range and zeroes the rest of it. Offsets
    /// and lengths are `loff_t`s: above `i64::MAX` they are negative. Errors in Linux's
    /// order (`vfs_fallocate`, then `shmem_fallocate`).
    pub fn fallocate(&self, fd: impl Desc, mode: FallocFlags, off: u64, len: u64) -> Result<()> {
        if off > i64::MAX as u64 || len == 0 || len > i64::MAX as u64 {
            return Err(Errno::EINVAL);
        }
        const MODE_MASK: u32 = 0x02 | 0x08 | 0x10 | 0x20 | 0x40 | 0x80;
        if mode.0 & !(MODE_MASK | FallocFlags::KEEP_SIZE.0) != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        let keep = mode.contains(FallocFlags::KEEP_SIZE);
        match mode.0 & MODE_MASK {
            0 | 0x10 | 0x40 => {}
            0x02 if keep => {}
            0x08 | 0x20 | 0x80 if !keep => {}
            _ => return Err(Errno::EOPNOTSUPP),
        }
        let f = self.file(fd)?;
        if f.is_path() || !f.flags.writable() {
            return Err(Errno::EBADF);
        }
        match f.inode.mode() & S_IFMT {
            S_IFIFO => return Err(Errno::ESPIPE),
            S_IFDIR => return Err(Errno::EISDIR),
            S_IFREG => {}
            _ => return Err(Errno::ENODEV),
        }
        let end = off + len;
        if end > MAX_FILE_SIZE {
            return Err(Errno::EFBIG);
        }
        let punch = mode.contains(FallocFlags::PUNCH_HOLE);
        if mode.0 & !(FallocFlags::KEEP_SIZE.0 | FallocFlags::PUNCH_HOLE.0) != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        let crate::inode::Contents::File(d) = &f.inode.contents else {
            return Err(Errno::ENODEV);
        };
        let fs = &f.mnt.fs;
        let mut data = d.write();
        let size = f.inode.size();
        let pages_delta = if punch {
            let freed = data.punch(off, end);
            fs.uncharge_pages(freed);
            -(freed as i64)
        } else {
            let need = data.missing_pages(off, end);
            // tmpfs reserves all of the range or none of it.
            if !fs.charge_pages(need) {
                return Err(Errno::ENOSPC);
            }
            let added = data.reserve(off, end);
            debug_assert_eq!(added, need);
            added as i64
        };
        let g = crossbeam_epoch::pin();
        let kill = write_kill_bits(&f.inode, self.creds_ref(&g));
        f.inode.update(&AttrUpdate {
            size: (!keep && end > size).then_some(end),
            pages_delta,
            perm: (kill != 0).then(|| f.inode.mode() & 0o7777 & !kill),
            times: Times::modify(now()),
            ..Default::default()
        });
        Ok(())
    }

    /// `truncate(2)`.
    pub fn truncate(&self, path: impl AsRef<Path>, len: u64) -> Result<()> {
        // A length past i64::MAX is a negative `off_t`: Linux refuses it before the path.
        if len > i64::MAX as u64 {
            return Err(Errno::EINVAL);
        }
        self.with_inode(Fd::CWD, path.as_ref(), AtFlags::empty(), |i, fs, c| {
            if i.is_dir() {
                return Err(Errno::EISDIR);
            }
            i.permission(c, Access::W_OK)?;
            self.truncate_inode(fs, i, len, c, true)
        })
    }

    /// `ftruncate(2)`.
    pub fn ftruncate(&self, fd: impl Desc, len: u64) -> Result<()> {
        // As `truncate`: before the descriptor is looked at.
        if len > i64::MAX as u64 {
            return Err(Errno::EINVAL);
        }
        let of = self.file(fd)?;
        if of.is_path() {
            return Err(Errno::EBADF);
        }
        if !of.flags.writable() || of.inode.mode() & S_IFMT != S_IFREG {
            return Err(Errno::EINVAL);
        }
        let g = crossbeam_epoch::pin();
        self.truncate_inode(&of.mnt.fs, &of.inode, len, self.creds_ref(&g), true)
    }

    // ---------------------------------------------------------------- cwd, paths

    fn set_cwd(&self, loc: Loc) {
        let _l = self.ctx_lock.lock();
        let g = crossbeam_epoch::pin();
        let old = self.ctx_ref(&g);
        let new = FsCtx {
            root: old.root.clone(),
            cwd: loc,
        };
        let old = self.ctx.swap(Owned::new(new), SeqCst, &g);
        // SAFETY: unreachable now; readers hold guards.
        unsafe { g.defer_destroy(old) };
    }

    /// `chdir(2)`.
    pub fn chdir(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = cpath(path.as_ref())?;
        if path.is_empty() {
            return Err(Errno::ENOENT);
        }
        let loc = self.at(Fd::CWD, path, |cx, start| {
            retry(|locked| {
                let w = start.walk(cx, path, Flags::object(true), locked)?;
                let p = w.pos();
                let i = p.inode()?;
                if !i.is_dir() {
                    return Err(Fail::Err(Errno::ENOTDIR));
                }
                i.permission(cx.creds, Access::X_OK)?;
                // Dead since the walk found it: walk again.
                let d = DRef::try_get(p.d).ok_or(Fail::Retry)?;
                let loc = Loc::new(p.mnt.clone(), d);
                // The working directory counts as a user of its mount: confirm.
                w.confirm(cx)?;
                Ok(loc)
            })
        })?;
        self.set_cwd(loc);
        Ok(())
    }

    /// `fchdir(2)`.
    pub fn fchdir(&self, fd: impl Desc) -> Result<()> {
        let of = self.file(fd)?;
        let d = of.dir.clone().ok_or(Errno::ENOTDIR)?;
        let g = crossbeam_epoch::pin();
        of.inode.permission(self.creds_ref(&g), Access::X_OK)?;
        self.set_cwd(Loc::new(of.mnt.clone(), d));
        Ok(())
    }

    /// The absolute path of (`mnt`, `d`) as seen from the process root, or `ENOENT` if it
    /// was removed or is not under the root.
    fn path_of(&self, mnt: &Arc<Mount>, d: DPtr<'_>, g: &Guard) -> Result<PathBuf> {
        let ctx = self.ctx_ref(g);
        'again: loop {
            let mut parts: Vec<Vec<u8>> = Vec::new();
            let (mut m, mut cur) = (mnt, d);
            loop {
                if cur == ctx.root.d.ptr() && Arc::ptr_eq(m, &ctx.root.mnt) {
                    break;
                }
                if cur == m.root.ptr() {
                    match &m.parent {
                        Some((pm, pd)) => {
                            m = pm;
                            cur = pd.ptr();
                            continue;
                        }
                        None => return Err(Errno::ENOENT),
                    }
                }
                let s = cur.seq.read_begin_spin();
                if cur.flags() & UNHASHED != 0 {
                    return Err(Errno::ENOENT);
                }
                let name = cur.name.to_vec(g);
                let Some(parent) = cur.get().parent(g) else {
                    return Err(Errno::ENOENT);
                };
                if cur.seq.read_retry(s) {
                    continue 'again;
                }
                parts.push(name);
                cur = parent;
            }
            let len = parts.iter().map(|p| p.len() + 1).sum::<usize>().max(1);
            // Linux builds the path in a page: one that does not fit (with its NUL) is
            // ENAMETOOLONG.
            if len >= limits::PATH_MAX {
                return Err(Errno::ENAMETOOLONG);
            }
            let mut out = Vec::with_capacity(len);
            for p in parts.iter().rev() {
                out.push(b'/');
                out.extend_from_slice(p);
            }
            if out.is_empty() {
                out.push(b'/');
            }
            return Ok(PathBuf::from(std::ffi::OsString::from_vec(out)));
        }
    }

    /// `getcwd(3)`.
    pub fn getcwd(&self) -> Result<PathBuf> {
        let g = crossbeam_epoch::pin();
        let cwd = &self.ctx_ref(&g).cwd;
        self.path_of(&cwd.mnt, cwd.d.ptr(), &g)
    }

    /// `realpath(3)`: the absolute path with no symlink, `.` or `..`.
    pub fn realpath(&self, path: impl AsRef<Path>) -> Result<PathBuf> {
        let path = cpath(path.as_ref())?;
        if path.is_empty() {
            return Err(Errno::ENOENT);
        }
        self.at(Fd::CWD, path, |cx, start| {
            let p = Self::resolve_unheld(cx, start, path, true)?;
            self.path_of(p.mnt, p.d, cx.guard)
        })
    }

    /// `statfs(2)`.
    pub fn statfs(&self, path: impl AsRef<Path>) -> Result<StatFs> {
        let path = cpath(path.as_ref())?;
        if path.is_empty() {
            return Err(Errno::ENOENT);
        }
        self.at(Fd::CWD, path, |cx, start| {
            Ok(Self::resolve_unheld(cx, start, path, true)?.mnt.fs.statfs())
        })
    }

    /// `fstatfs(2)`.
    pub fn fstatfs(&self, fd: impl Desc) -> Result<StatFs> {
        Ok(self.file(fd)?.mnt.fs.statfs())
    }

    /// `fsync(2)`: memfs holds everything in memory; checks the descriptor.
    pub fn fsync(&self, fd: impl Desc) -> Result<()> {
        let f = self.file(fd)?;
        if f.is_path() {
            return Err(Errno::EBADF);
        }
        Ok(())
    }

    /// `fdatasync(2)`.
    pub fn fdatasync(&self, fd: impl Desc) -> Result<()> {
        self.fsync(fd)
    }

    /// `dup(2)`.
    pub fn dup(&self, fd: Fd) -> Result<Fd> {
        self.files.dup(fd)
    }

    /// `dup2(2)`.
    pub fn dup2(&self, old: Fd, new: Fd) -> Result<Fd> {
        self.files.dup2(old, new)
    }

    // ---------------------------------------------------------------- mounts

    /// Mounts `fs` on the directory `path` (root only). `ENOENT` if the directory is
    /// removed (or its mount unmounted) before the mount is made.
    pub fn mount(&self, path: impl AsRef<Path>, fs: Arc<MemFs>) -> Result<()> {
        let path = cpath(path.as_ref())?;
        if path.is_empty() {
            return Err(Errno::ENOENT);
        }
        if self.creds().uid != 0 {
            return Err(Errno::EPERM);
        }
        self.at(Fd::CWD, path, |cx, start| {
            let (p, _hold) = Self::resolve(cx, start, path, true)?;
            let own = p.inode.ok_or(Errno::ENOENT)?.dir().ok_or(Errno::ENOTDIR)?;
            let d = DRef::try_get(p.d).ok_or(Errno::ENOENT)?;
            let _l = self.vfs.lock_mounts();
            let table = walk::mount_table(&self.vfs, cx.guard);
            if !Arc::ptr_eq(p.mnt, self.vfs.root_mount())
                && !table.all.iter().any(|m| Arc::ptr_eq(m, p.mnt))
            {
                return Err(Errno::ENOENT);
            }
            // rmdir and rename of the mount point hold its parent's lock (and rmdir its
            // own): under both, it is either gone or stays where it is until MOUNTED is set.
            let _locks = loop {
                let parent = d.parent(cx.guard);
                let parent_dir = parent
                    .and_then(|pd| pd.get().inode(cx.guard))
                    .and_then(|i| i.dir());
                let mut locks = DirLocks::lock(&[own, parent_dir.unwrap_or(own)]);
                if d.parent.load(Acquire) != parent.map_or(std::ptr::null_mut(), |x| x.as_ptr()) {
                    continue;
                }
                if locks.get(own).dead || d.flags() & UNHASHED != 0 {
                    return Err(Errno::ENOENT);
                }
                break locks;
            };
            let root = fs.root().clone();
            let m = Arc::new(Mount::new(
                self.vfs.next_mount_id(),
                fs,
                root,
                Some((p.mnt.clone(), d.clone())),
            ));
            let mut all = table.all.clone();
            all.push(m);
            effect(|| {
                self.vfs.mount_seq().write_begin();
                d.flags.fetch_or(MOUNTED, SeqCst);
                self.vfs.publish_mounts(MountTable::build(all), cx.guard);
                self.vfs.mount_seq().write_end();
            });
            Ok(())
        })
    }

    /// Unmounts the file system mounted at `path` (root only): `EBUSY` while files,
    /// working directories, operations or other mounts are inside it, `EINVAL` if `path`
    /// is not a mount.
    pub fn umount(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = cpath(path.as_ref())?;
        if path.is_empty() {
            return Err(Errno::ENOENT);
        }
        if self.creds().uid != 0 {
            return Err(Errno::EPERM);
        }
        self.at(Fd::CWD, path, |cx, start| {
            // No hold: it would count as a user of the very mount to detach.
            let p = Self::resolve_unheld(cx, start, path, true)?;
            if p.d != p.mnt.root.ptr() || p.mnt.parent.is_none() {
                return Err(Errno::EINVAL);
            }
            let target = p.mnt.clone();
            let _l = self.vfs.lock_mounts();
            let old = walk::mount_table(&self.vfs, cx.guard);
            if !old.all.iter().any(|m| Arc::ptr_eq(m, &target)) {
                return Err(Errno::EINVAL);
            }
            if old.all.iter().any(|m| {
                m.parent
                    .as_ref()
                    .is_some_and(|(pm, _)| Arc::ptr_eq(pm, &target))
            }) {
                return Err(Errno::EBUSY);
            }
            let all: Vec<_> = old
                .all
                .iter()
                .filter(|m| !Arc::ptr_eq(m, &target))
                .cloned()
                .collect();
            let (_, pd) = target.parent.as_ref().expect("checked above");
            let still_mounted = all
                .iter()
                .any(|m| m.parent.as_ref().is_some_and(|(_, d)| d == pd));
            effect(|| {
                self.vfs.mount_seq().write_begin();
                if !target.detach_if_unused() {
                    self.vfs.mount_seq().write_end();
                    return Err(Errno::EBUSY);
                }
                if !still_mounted {
                    pd.flags.fetch_and(!MOUNTED, SeqCst);
                }
                self.vfs.publish_mounts(MountTable::build(all), cx.guard);
                self.vfs.mount_seq().write_end();
                Ok(())
            })
        })
    }

    // ---------------------------------------------------------------- convenience

    /// Reads a whole file, like `std::fs::read`.
    pub fn read_file(&self, path: impl AsRef<Path>) -> Result<Vec<u8>> {
        let fd = self.open(path, OFlags::RDONLY, 0)?;
        let mut out = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        let r = loop {
            match self.read(fd, &mut buf) {
                Ok(0) => break Ok(out),
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) => break Err(e),
            }
        };
        self.close(fd)?;
        r
    }

    /// Reads a whole file as UTF-8 (`EINVAL` if it is not).
    pub fn read_to_string(&self, path: impl AsRef<Path>) -> Result<String> {
        String::from_utf8(self.read_file(path)?).map_err(|_| Errno::EINVAL)
    }

    /// Creates or truncates a file and writes `data`, like `std::fs::write`.
    pub fn write_file(&self, path: impl AsRef<Path>, data: &[u8]) -> Result<()> {
        let fd = self.open(path, OFlags::WRONLY | OFlags::CREAT | OFlags::TRUNC, 0o666)?;
        let mut done = 0;
        let r = loop {
            if done == data.len() {
                break Ok(());
            }
            match self.write(fd, &data[done..]) {
                Ok(n) => done += n,
                Err(e) => break Err(e),
            }
        };
        self.close(fd)?;
        r
    }

    /// Creates a directory and its missing parents, like `std::fs::create_dir_all`.
    pub fn create_dir_all(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        match self.mkdir(path, 0o777) {
            Ok(()) => return Ok(()),
            Err(Errno::EEXIST) => {
                return if self.stat(path)?.is_dir() {
                    Ok(())
                } else {
                    Err(Errno::EEXIST)
                };
            }
            Err(Errno::ENOENT) => {}
            Err(e) => return Err(e),
        }
        match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => self.create_dir_all(p)?,
            _ => return Err(Errno::ENOENT),
        }
        match self.mkdir(path, 0o777) {
            Err(Errno::EEXIST) if self.stat(path)?.is_dir() => Ok(()),
            r => r,
        }
    }

    /// Lists a directory without `.` and `..`, like `std::fs::read_dir`.
    pub fn read_dir(&self, path: impl AsRef<Path>) -> Result<Vec<DirEntry>> {
        let fd = self.open(path, OFlags::RDONLY | OFlags::DIRECTORY, 0)?;
        let mut out = Vec::new();
        let r = loop {
            match self.getdents(fd, 1024) {
                Ok(v) if v.is_empty() => break Ok(()),
                Ok(v) => out.extend(v.into_iter().filter(|e| e.name != b"." && e.name != b"..")),
                Err(e) => break Err(e),
            }
        };
        self.close(fd)?;
        r.map(|_| out)
    }

    /// Removes a directory and everything in it, like `std::fs::remove_dir_all`. Symlinks
    /// are removed, never followed. Works relative to directory descriptors, so the depth
    /// of the tree does not matter (no path is built).
    pub fn remove_dir_all(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        if !self.lstat(path)?.is_dir() {
            return self.unlink(path);
        }
        let dir = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW;
        let top = self.open(path, dir, 0)?;
        // One frame per open directory: its descriptor, the names left to remove in it, and
        // its own name in the frame below.
        let mut stack: Vec<(Fd, Vec<DirEntry>, Vec<u8>)> = Vec::new();
        let r = (|| {
            stack.push((top, self.list(top)?, Vec::new()));
            while let Some((fd, entries, _)) = stack.last_mut() {
                let fd = *fd;
                match entries.pop() {
                    Some(e) if e.file_type == FileType::Directory => {
                        let name = OsStr::from_bytes(&e.name);
                        let sub = self.openat(fd, name, dir, 0)?;
                        let list = self.list(sub);
                        stack.push((sub, Vec::new(), e.name));
                        stack.last_mut().expect("just pushed").1 = list?;
                    }
                    Some(e) => {
                        self.unlinkat(fd, OsStr::from_bytes(&e.name), AtFlags::empty())?;
                    }
                    None => {
                        let (fd, _, name) = stack.pop().expect("the frame in hand");
                        self.close(fd)?;
                        if let Some((parent, _, _)) = stack.last() {
                            self.unlinkat(*parent, OsStr::from_bytes(&name), AtFlags::REMOVEDIR)?;
                        }
                    }
                }
            }
            Ok(())
        })();
        for (fd, _, _) in stack.drain(..).rev() {
            let _ = self.close(fd);
        }
        r?;
        self.rmdir(path)
    }

    /// The entries of an open directory, without `.` and `..`.
    fn list(&self, fd: impl Desc) -> Result<Vec<DirEntry>> {
        let mut out = Vec::new();
        loop {
            let v = self.getdents(fd, 1024)?;
            if v.is_empty() {
                return Ok(out);
            }
            out.extend(v.into_iter().filter(|e| e.name != b"." && e.name != b".."));
        }
    }

    /// Every path under `path` (depth first, directories before their contents, names in
    /// order), with its `lstat`, like a recursive `read_dir`. Works relative to directory
    /// descriptors: the depth of the tree does not matter.
    pub fn walk_tree(&self, path: impl AsRef<Path>) -> Result<Vec<(PathBuf, Stat)>> {
        let root = path.as_ref().to_path_buf();
        let st = self.lstat(&root)?;
        let mut out = vec![(root.clone(), st)];
        if !st.is_dir() {
            return Ok(out);
        }
        let dir = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW;
        let top = self.open(&root, dir, 0)?;
        // One frame per open directory: its descriptor, its path, and the names left in it
        // (sorted, last first).
        let mut stack: Vec<(Fd, PathBuf, Vec<DirEntry>)> = Vec::new();
        let r = (|| {
            let mut kids = self.list(top)?;
            kids.sort_by(|a, b| b.name.cmp(&a.name));
            stack.push((top, root, kids));
            while let Some((fd, p, entries)) = stack.last_mut() {
                let fd = *fd;
                let Some(e) = entries.pop() else {
                    let (fd, _, _) = stack.pop().expect("the frame in hand");
                    self.close(fd)?;
                    continue;
                };
                let name = OsStr::from_bytes(&e.name);
                let child = p.join(name);
                let cs = self.fstatat(fd, name, AtFlags::SYMLINK_NOFOLLOW)?;
                out.push((child.clone(), cs));
                if cs.is_dir() {
                    let sub = self.openat(fd, name, dir, 0)?;
                    let mut kids = self.list(sub);
                    if let Ok(k) = &mut kids {
                        k.sort_by(|a, b| b.name.cmp(&a.name));
                    }
                    stack.push((sub, child, Vec::new()));
                    stack.last_mut().expect("just pushed").2 = kids?;
                }
            }
            Ok(())
        })();
        for (fd, _, _) in stack.drain(..).rev() {
            let _ = self.close(fd);
        }
        r.map(|()| out)
    }
}

/// Whether `a` is `b` or one of its ancestors. The caller holds the rename lock of their
/// file system, so directory parents do not change.
fn is_ancestor(a: DPtr<'_>, b: DPtr<'_>, g: &Guard) -> bool {
    let mut cur = Some(b);
    while let Some(c) = cur {
        if a == c {
            return true;
        }
        cur = c.get().parent(g);
    }
    false
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
        {
            let fs = &vfs.root_mount().fs;
            let g = crossbeam_epoch::pin();
            let root = fs.root().ptr();
            let dir = root.get().inode(&g).unwrap().dir().unwrap();
            let mut st = dir.lock();
            let a = fs.dcache.lookup_locked(&root, &scan(b"a"), &g).unwrap();
            fs.dcache.d_move(a, root, &scan(b"z"), &mut st, None, &g);
        }
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
}
