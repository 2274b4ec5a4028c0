//! [`ScaleFs`]: the FUSE operations, each mapped to the engine's `*at` calls.
//!
//! # Shape
//! One engine [`Process`] makes every call, through engine [`Handle`]s (open descriptions
//! that take no descriptor number, so no descriptor-table limit applies): one
//! `O_PATH | O_NOFOLLOW` handle per node the kernel knows (see [`crate::nodes`]) and one
//! per open file or directory (see [`crate::files`]: the FUSE file handle is its key
//! there). An operation on a name runs relative to the parent node's handle
//! (`openat(parent, name)`, `mkdirat`, `unlinkat`, `renameat2`, ...); an operation on a
//! node uses its handle with an empty path (`AT_EMPTY_PATH`) or reopens it
//! (`Process::reopen_handle`, like Linux's `/proc/self/fd/N`); extended attributes go
//! through `Process::xattrs_of` on the node's handle. Requests run with the
//! caller's credentials ([`crate::creds`]), and every permission check is the engine's.
//! When other users can reach the mount, [`crate::mount`] also asks the kernel for
//! `default_permissions`, so that the kernel's own checks come first, in the kernel's
//! order (what it sees and the engine cannot: the checks `may_delete` and `may_create`
//! make before looking at the target's type).
//!
//! # What the kernel guarantees that this relies on
//! - It sends `forget` for a node only when no request on that node is in flight, so a
//!   descriptor taken from the table stays open for the request that uses it.
//! - With no `FUSE_DONT_MASK`, it applies the caller's umask to `mknod`, `mkdir` and
//!   `create` modes itself; the engine process's umask is 0.
//! - `flush` is not implemented: fuser answers `ENOSYS`, and the kernel then stops
//!   sending it (`no_flush`), which saves a round trip on every `close`. The engine has no
//!   per-close work (no record locks yet, no write-back); `release` closes the handle.
//! - With `FUSE_HANDLE_KILLPRIV_V2` negotiated, the clearing of set-id bits on write,
//!   truncate and chown is left to the engine (which does it as Linux does), instead of
//!   arriving as `setattr` calls from the caller, who may not be allowed to `chmod`.
//! - Without atomic `O_TRUNC`, `open(O_TRUNC)` of an existing file arrives as `open`
//!   without the flag, then a `setattr` of size 0 with no file handle, after the kernel
//!   has taken write access (`ETXTBSY` for a running executable); the server truncates
//!   through a fresh write-only reopen as the caller, which checks write permission.
//!
//! # Lock order
//! ```text
//! CredGate (a request inside it)
//!   ScaleFs::nodes             (never held across an engine call)
//!   OpenFiles's per-user count shards (leaves)
//! ```

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, BsdFileFlags, CopyFileRangeFlags, FileAttr, FileHandle, Filesystem, FopenFlags,
    Generation, INodeNo, InitFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLock,
    ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use parking_lot::Mutex;
use scalevfs::{
    AtFlags, Creds, Fd, Handle, LockCmd, LockType, OFlags, Process, SetTime, Stat, Vfs, Whence,
};

use crate::convert::{self, attr, errno, estale};
use crate::creds::{CredGate, Inside, Who};
use crate::files::OpenFiles;
use crate::nodes::{NodeId, NodeTable, ObjKey};

type R<T> = Result<T, fuser::Errno>;

/// Answers `getxattr` or `listxattr`: the size asked for (`size` 0), or the bytes the
/// engine put in `buf`.
fn reply_xattr(reply: ReplyXattr, r: R<usize>, buf: &[u8], size: u32) {
    match r {
        Ok(n) if size == 0 => reply.size(n as u32),
        Ok(n) => reply.data(&buf[..n]),
        Err(e) => reply.error(e),
    }
}

/// Answers a request that returns nothing: success, or the errno.
fn reply_empty(reply: ReplyEmpty, r: R<()>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

trait EngineResult<T> {
    /// The engine's errno as the kernel's.
    fn ex(self) -> R<T>;
}

impl<T> EngineResult<T> for scalevfs::Result<T> {
    fn ex(self) -> R<T> {
        self.map_err(errno)
    }
}

/// How the file system answers the kernel.
#[derive(Clone, Debug)]
pub struct FsOptions {
    /// How long the kernel may trust a name lookup (0: every path walk asks again).
    pub entry_timeout: Duration,
    /// How long the kernel may trust attributes (0: every `stat` asks again).
    pub attr_timeout: Duration,
    /// Ask for `READDIRPLUS` (entries come with attributes and count as lookups).
    pub readdirplus: bool,
    /// Open files and directories each non-root user may hold through the mount (`None`:
    /// no limit but memory). Past it, opens fail with `ENFILE`; root is never limited.
    pub max_open_per_user: Option<u64>,
}

impl Default for FsOptions {
    fn default() -> Self {
        FsOptions {
            entry_timeout: Duration::ZERO,
            attr_timeout: Duration::ZERO,
            readdirplus: false,
            max_open_per_user: None,
        }
    }
}

/// A `setattr` request, gathered from fuser's argument list.
#[derive(Clone, Copy, Debug, Default)]
struct SetAttr {
    mode: Option<u32>,
    uid: Option<u32>,
    gid: Option<u32>,
    size: Option<u64>,
    atime: Option<TimeOrNow>,
    mtime: Option<TimeOrNow>,
    fh: Option<FileHandle>,
}

/// Entries asked of `getdents` per call while filling a readdir reply.
const DIRENT_BATCH: usize = 128;

const SEEK_SET: i32 = 0;
const SEEK_CUR: i32 = 1;
const SEEK_END: i32 = 2;
const SEEK_DATA: i32 = 3;
const SEEK_HOLE: i32 = 4;

fn key(st: &Stat) -> ObjKey {
    ObjKey {
        dev: st.dev,
        ino: st.ino,
    }
}

/// A node's handle, shared by the requests that use it.
type Node = Arc<Handle>;

/// The engine served through FUSE.
pub struct ScaleFs {
    p: Process,
    gate: CredGate,
    nodes: Arc<Mutex<NodeTable<Node>>>,
    files: OpenFiles,
    opts: FsOptions,
    /// The root file system reuses inode numbers (hostfs): a node found by (dev, ino) may
    /// be of an object that is gone.
    reuses_ino: bool,
}

/// Reads how many nodes a [`ScaleFs`] holds for the kernel, after the file system has moved
/// into its session (tests watch `forget` with it).
#[derive(Clone, Debug)]
pub struct NodeCount(Arc<Mutex<NodeTable<Node>>>);

impl NodeCount {
    /// Nodes the kernel holds, the root included.
    pub fn get(&self) -> usize {
        self.0.lock().len()
    }
}

impl std::fmt::Debug for ScaleFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScaleFs")
            .field("nodes", &self.nodes.lock().len())
            .field("opts", &self.opts)
            .finish()
    }
}

impl ScaleFs {
    /// Serves the namespace `vfs` from its root.
    pub fn new(vfs: &Arc<Vfs>, opts: FsOptions) -> scalevfs::Result<ScaleFs> {
        let p = vfs.process(Creds::root());
        p.umask(0);
        let root = p.openat_handle(Fd::CWD, "/", OFlags::PATH | OFlags::DIRECTORY, 0)?;
        let st = p.fstat(&root)?;
        Ok(ScaleFs {
            nodes: Arc::new(Mutex::new(NodeTable::new(Arc::new(root), key(&st)))),
            files: OpenFiles::new(opts.max_open_per_user),
            p,
            gate: CredGate::default(),
            opts,
            reuses_ino: vfs.root_fs().reuses_inode_numbers(),
        })
    }

    /// A reader of how many nodes the kernel holds.
    pub fn node_count(&self) -> NodeCount {
        NodeCount(self.nodes.clone())
    }

    /// The handle of node `ino`.
    fn node(&self, ino: INodeNo) -> R<Node> {
        self.nodes.lock().fd(NodeId(ino.0)).ok_or_else(estale)
    }

    /// Files `uid` holds open through the mount, when a per-user limit is set (else 0).
    pub fn open_files_of(&self, uid: u32) -> u64 {
        self.files.open_by(uid)
    }

    /// Opens a file or directory for `req`'s caller with `open`, counted against the
    /// caller's limit before anything is opened; returns its FUSE handle.
    fn open_file(&self, req: &Request, open: impl FnOnce() -> R<Handle>) -> R<FileHandle> {
        let ticket = self.files.charge(req.uid())?;
        let h = open()?;
        self.files.insert(h, ticket).map(FileHandle)
    }

    /// Runs the rest of the request as its caller.
    fn enter(&self, req: &Request) -> Inside<'_> {
        self.enter_as(&Who::of_request(req.uid(), req.gid(), req.pid()))
    }

    fn enter_as(&self, who: &Who) -> Inside<'_> {
        self.gate.enter(who, |w| self.p.set_creds(w.creds()))
    }

    /// Counts a lookup of the object behind `h` (a handle this call owns) and returns its
    /// attributes under its node id.
    fn remember(&self, h: Handle) -> R<FileAttr> {
        let st = self.p.fstat(&h).ex()?;
        let h = Arc::new(h);
        let stale = |old: &Node| self.reuses_ino && !old.same_object(&h);
        let (id, extra) = self.nodes.lock().remember(key(&st), h.clone(), stale);
        // Dropped here, outside the table lock.
        drop(extra);
        Ok(attr(id, &st))
    }

    /// `name` in the directory `parent`, as a node (one lookup counted).
    ///
    /// With entry timeouts of 0 the kernel looks up every component of every path it
    /// walks, mostly names it already holds; those cost a lockless `fstatat` and a table
    /// probe. Only a name whose object has no node is opened. On memfs inode numbers are
    /// never reused, so a node found by (dev, ino) is the object the name named; on a file
    /// system that reuses them (hostfs) every lookup opens the name, and `remember` checks
    /// that a node found is still of that object.
    fn lookup_in(&self, parent: &Handle, name: &OsStr) -> R<FileAttr> {
        let st = self
            .p
            .fstatat(parent, name, AtFlags::SYMLINK_NOFOLLOW)
            .ex()?;
        if !self.reuses_ino {
            let mut t = self.nodes.lock();
            if let Some(id) = t.find(key(&st)) {
                if t.add_lookup(id) {
                    return Ok(attr(id, &st));
                }
            }
        }
        let h = self
            .p
            .openat_handle(parent, name, OFlags::PATH | OFlags::NOFOLLOW, 0)
            .ex()?;
        self.remember(h)
    }

    /// The attributes of the node behind `fd`.
    fn attr_of(&self, ino: INodeNo, fd: &Handle) -> R<FileAttr> {
        let st = self.p.fstat(fd).ex()?;
        Ok(attr(NodeId(ino.0), &st))
    }

    fn reply_entry(&self, reply: ReplyEntry, r: R<FileAttr>) {
        match r {
            Ok(a) => reply.entry_with_ttls(
                &self.opts.attr_timeout,
                &self.opts.entry_timeout,
                &a,
                Generation(0),
            ),
            Err(e) => reply.error(e),
        }
    }

    fn forget_one(&self, ino: u64, n: u64) {
        let h = self.nodes.lock().forget(NodeId(ino), n);
        // Dropped here, outside the table lock (the last handle of an unlinked file
        // frees its data).
        drop(h);
    }

    fn do_setattr(&self, ino: INodeNo, a: SetAttr) -> R<FileAttr> {
        let node = self.node(ino)?;
        let node = &*node;
        let p = &self.p;
        let here = AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW;
        if let Some(m) = a.mode {
            p.fchmodat(node, "", m, AtFlags::EMPTY_PATH).ex()?;
        }
        if a.uid.is_some() || a.gid.is_some() {
            p.fchownat(node, "", a.uid, a.gid, here).ex()?;
        }
        if let Some(size) = a.size {
            match a.fh {
                Some(fh) => p.ftruncate(&*self.files.get(fh.0)?, size).ex()?,
                None => {
                    // truncate(2): the engine checks write permission on the reopen.
                    let h = p.reopen_handle(node, OFlags::WRONLY).ex()?;
                    p.ftruncate(&h, size).ex()?;
                }
            }
        }
        let times = [convert::set_time(a.atime), convert::set_time(a.mtime)];
        // truncate(2) arrives as size + "mtime now": the truncate already set mtime and
        // ctime, and a separate utimensat would wrongly ask for ownership.
        let truncate_touch = a.size.is_some() && times == [SetTime::Omit, SetTime::Now];
        if times != [SetTime::Omit, SetTime::Omit] && !truncate_touch {
            p.utimensat(node, "", times, here).ex()?;
        }
        self.attr_of(ino, node)
    }

    fn do_readdir(
        &self,
        fh: &Handle,
        offset: u64,
        mut add: impl FnMut(&scalevfs::DirEntry) -> bool,
    ) -> R<()> {
        self.p.lseek(fh, offset as i64, Whence::Set).ex()?;
        loop {
            let ents = self.p.getdents(fh, DIRENT_BATCH).ex()?;
            if ents.is_empty() {
                return Ok(());
            }
            for e in &ents {
                if add(e) {
                    // Full: the next call seeks to the last cookie sent.
                    return Ok(());
                }
            }
        }
    }

    fn do_fallocate(&self, fh: &Handle, offset: u64, length: u64, mode: i32) -> R<()> {
        self.p
            .fallocate(fh, scalevfs::FallocFlags(mode as u32), offset, length)
            .ex()
    }

    /// The engine's `copy_file_range` at explicit offsets (the kernel checked the flags).
    fn do_copy(&self, fin: &Handle, off_in: u64, fout: &Handle, off_out: u64, len: u64) -> R<u32> {
        let (mut off_in, mut off_out) = (off_in, off_out);
        // At most Linux's MAX_RW_COUNT moves per call, so the count fits a u32.
        let len = len.min(u32::MAX as u64) as usize;
        let n = self
            .p
            .copy_file_range(fin, Some(&mut off_in), fout, Some(&mut off_out), len, 0)
            .map_err(errno)?;
        Ok(n as u32)
    }
}

impl Filesystem for ScaleFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Each is optional; the kernel refuses what it does not have.
        // Not `FUSE_ATOMIC_O_TRUNC`: with it the kernel sends `O_TRUNC` inside `open` before
        // it checks write access (`handle_truncate`), so `open(O_RDONLY | O_TRUNC)` of a
        // running executable would empty it here and then fail with `ETXTBSY`. Without it,
        // the truncation arrives as a `setattr` after the kernel's check.
        if config
            .add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV_V2)
            .is_err()
        {
            let _ = config.add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV);
        }
        let _ = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
        // Record locks go to the engine (`getlk`, `setlk`, and `flush` for the close that
        // drops an owner's). Not `FUSE_FLOCK_LOCKS`: fuser does not pass a request's
        // `FUSE_LK_FLOCK` bit, so a `flock` could not be told from a record lock; without
        // it the kernel keeps `flock` locks for the mount itself, with their own semantics.
        let _ = config.add_capabilities(InitFlags::FUSE_POSIX_LOCKS);
        if self.opts.readdirplus {
            let _ = config.add_capabilities(InitFlags::FUSE_DO_READDIRPLUS);
        }
        Ok(())
    }

    fn destroy(&mut self) {
        let nodes = self.nodes.lock().drain();
        drop(nodes);
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let _g = self.enter(req);
        let r = self.node(parent).and_then(|p| self.lookup_in(&p, name));
        self.reply_entry(reply, r);
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.forget_one(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.node(ino).and_then(|fd| self.attr_of(ino, &fd)) {
            Ok(a) => reply.attr(&self.opts.attr_timeout, &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let _g = self.enter(req);
        let a = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
            fh,
        };
        match self.do_setattr(ino, a) {
            Ok(a) => reply.attr(&self.opts.attr_timeout, &a),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self
            .node(ino)
            .and_then(|fd| self.p.readlinkat(&*fd, "").ex())
        {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let _g = self.enter(req);
        let (mode, dev) = convert::mknod_args(mode, rdev);
        let r = self.node(parent).and_then(|p| {
            self.p.mknodat(&*p, name, mode, dev).ex()?;
            self.lookup_in(&p, name)
        });
        self.reply_entry(reply, r);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let _g = self.enter(req);
        let r = self.node(parent).and_then(|p| {
            self.p.mkdirat(&*p, name, mode).ex()?;
            self.lookup_in(&p, name)
        });
        self.reply_entry(reply, r);
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _g = self.enter(req);
        reply_empty(
            reply,
            self.node(parent)
                .and_then(|p| self.p.unlinkat(&*p, name, AtFlags::empty()).ex()),
        )
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _g = self.enter(req);
        reply_empty(
            reply,
            self.node(parent)
                .and_then(|p| self.p.unlinkat(&*p, name, AtFlags::REMOVEDIR).ex()),
        )
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        let _g = self.enter(req);
        let r = self.node(parent).and_then(|p| {
            self.p.symlinkat(target, &*p, link_name).ex()?;
            self.lookup_in(&p, link_name)
        });
        self.reply_entry(reply, r);
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let _g = self.enter(req);
        let r = self.node(parent).and_then(|p| {
            let np = self.node(newparent)?;
            self.p
                .renameat2(
                    &*p,
                    name,
                    &*np,
                    newname,
                    scalevfs::RenameFlags(flags.bits()),
                )
                .ex()
        });
        reply_empty(reply, r)
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let _g = self.enter(req);
        let r = self.node(ino).and_then(|fd| {
            let np = self.node(newparent)?;
            self.p
                .linkat(&*fd, "", &*np, newname, AtFlags::EMPTY_PATH)
                .ex()?;
            // The kernel counts the reply as a lookup of the node it already holds.
            if !self.nodes.lock().add_lookup(NodeId(ino.0)) {
                return Err(estale());
            }
            self.attr_of(ino, &fd)
        });
        self.reply_entry(reply, r);
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let _g = self.enter(req);
        let r = self.node(ino).and_then(|fd| {
            self.open_file(req, || {
                self.p
                    .reopen_handle(&*fd, convert::open_flags(flags.0))
                    .ex()
            })
        });
        match r {
            Ok(fh) => reply.opened(fh, FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let mut buf = vec![0u8; size as usize];
        let r = self
            .files
            .get(fh.0)
            .and_then(|f| self.p.pread(&*f, &mut buf, offset).ex());
        match r {
            Ok(n) => reply.data(&buf[..n]),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        // Page-cache writeback carries no caller; it must not clear set-id bits.
        let _g = if write_flags.contains(WriteFlags::FUSE_WRITE_CACHE) {
            self.enter_as(&Who::root())
        } else {
            self.enter(req)
        };
        let r = self
            .files
            .get(fh.0)
            .and_then(|f| self.p.pwrite(&*f, data, offset).ex());
        match r {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(e),
        }
    }

    /// The file's last close: its engine description goes, with its OFD locks.
    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        flush: bool,
        reply: ReplyEmpty,
    ) {
        if let Ok(f) = self.files.get(fh.0) {
            if let (true, Some(owner)) = (flush, lock_owner) {
                let _ = self.p.unlock_owner(&f, owner.0);
            }
            // The description's own (OFD) locks: see `files`.
            for owner in f.unflushed_lock_owners() {
                let _ = self.p.unlock_owner(&f, owner);
            }
        }
        reply_empty(reply, self.files.remove(fh.0))
    }

    /// A close(2) of a descriptor of the file: POSIX drops its owner's record locks.
    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        let r = self.files.get(fh.0).and_then(|f| {
            f.lock_owner_flushed(lock_owner.0);
            self.p.unlock_owner(&f, lock_owner.0).ex()
        });
        reply_empty(reply, r)
    }

    fn getlk(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        reply: ReplyLock,
    ) {
        let owner = convert::lock_owner(lock_owner, pid);
        let r = self.files.get(fh.0).and_then(|f| {
            let mut fl = convert::flock(start, end, typ)?;
            self.p
                .fcntl_lock_as(&f, owner, LockCmd::GetLk, &mut fl)
                .ex()?;
            Ok(fl)
        });
        match r {
            // Nothing conflicts: the kernel wants the range it asked about.
            Ok(fl) if fl.typ == LockType::Unlock => reply.locked(start, end, convert::F_UNLCK, 0),
            Ok(fl) => {
                let (s, e, t) = convert::flock_reply(&fl);
                // An engine process's number, or -1 for an OFD lock, is no pid of the
                // kernel's: 0 then.
                reply.locked(s, e, t, u32::try_from(fl.pid).unwrap_or(0))
            }
            Err(e) => reply.error(e),
        }
    }

    /// `F_SETLK`, and `F_SETLKW` (`sleep`): a request that must wait does so on a thread of
    /// its own, so that waiters never take the server's threads from the requests that
    /// would let them in.
    fn setlk(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        let owner = convert::lock_owner(lock_owner, pid);
        let f = match self.files.get(fh.0) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        let mut fl = match convert::flock(start, end, typ) {
            Ok(fl) => fl,
            Err(e) => return reply.error(e),
        };
        if fl.typ != LockType::Unlock {
            f.lock_owner_used(lock_owner.0);
        }
        match self.p.fcntl_lock_as(&f, owner, LockCmd::SetLk, &mut fl) {
            Err(scalevfs::Errno::EAGAIN) if sleep => {
                let h: Handle = (*f).clone();
                let p = self.p.fork();
                std::thread::spawn(move || {
                    // A client killed while it waits stays until this reply (the kernel
                    // waits out a request the server has), then closes its files: its
                    // flush drops what it was granted. fuser passes no FUSE_INTERRUPT, so
                    // a signal that is not fatal does not end the wait with EINTR.
                    let r = p.fcntl_lock_as(&h, owner, LockCmd::SetLkW, &mut fl);
                    reply_empty(reply, r.ex());
                });
            }
            r => reply_empty(reply, r.ex()),
        }
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let r = self.files.get(fh.0).and_then(|f| {
            if datasync {
                self.p.fdatasync(&*f).ex()
            } else {
                self.p.fsync(&*f).ex()
            }
        });
        reply_empty(reply, r)
    }

    fn opendir(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let _g = self.enter(req);
        let flags = OFlags(convert::open_flags(flags.0).0 & !OFlags::ACCMODE.0) | OFlags::DIRECTORY;
        let r = self
            .node(ino)
            .and_then(|fd| self.open_file(req, || self.p.reopen_handle(&*fd, flags).ex()));
        match r {
            Ok(fh) => reply.opened(fh, FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let f = match self.files.get(fh.0) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        let r = self.do_readdir(&f, offset, |e| {
            reply.add(
                INodeNo(e.ino),
                e.cookie,
                convert::file_type(e.file_type),
                OsStr::from_bytes(&e.name),
            )
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let _g = self.enter(req);
        let (node, f) = match self.node(ino).and_then(|n| Ok((n, self.files.get(fh.0)?))) {
            Ok(x) => x,
            Err(e) => return reply.error(e),
        };
        let dir = match self.p.fstat(&*node) {
            Ok(st) => st,
            Err(e) => return reply.error(errno(e)),
        };
        let ttl = self.opts.entry_timeout.min(self.opts.attr_timeout);
        let r = self.do_readdir(&f, offset, |e| {
            let name = OsStr::from_bytes(&e.name);
            if e.name == b"." || e.name == b".." {
                // The kernel does not link these (no lookup is counted): plain entries.
                let a = attr(NodeId(e.ino), &dir);
                return reply.add(INodeNo(e.ino), e.cookie, name, &ttl, &a, Generation(0));
            }
            match self.lookup_in(&node, name) {
                Ok(a) => {
                    let id = a.ino;
                    let full = reply.add(INodeNo(e.ino), e.cookie, name, &ttl, &a, Generation(0));
                    if full {
                        // Not sent: take back the lookup it counted.
                        self.forget_one(id.0, 1);
                    }
                    full
                }
                // Gone since getdents: leave it out.
                Err(e) if e == fuser::Errno::ENOENT => false,
                // Not searchable by the caller: an entry without a node (node id 0).
                Err(_) => {
                    let mut a = attr(NodeId(0), &dir);
                    a.kind = convert::file_type(e.file_type);
                    reply.add(INodeNo(0), e.cookie, name, &ttl, &a, Generation(0))
                }
            }
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        reply_empty(reply, self.files.remove(fh.0))
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn statfs(&self, _req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        match self.node(ino).and_then(|fd| self.p.fstatfs(&*fd).ex()) {
            Ok(s) => reply.statfs(
                s.blocks,
                s.bfree,
                s.bavail,
                s.files,
                s.ffree,
                s.bsize as u32,
                s.namelen as u32,
                s.frsize as u32,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let _g = self.enter(req);
        let mut buf = vec![0u8; size as usize];
        let r = self.node(ino).and_then(|fd| {
            self.p
                .xattrs_of(&*fd)
                .and_then(|x| x.get(name, &mut buf))
                .ex()
        });
        reply_xattr(reply, r, &buf, size)
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let _g = self.enter(req);
        let how = scalevfs::XattrFlags(flags as u32);
        reply_empty(
            reply,
            self.node(ino).and_then(|fd| {
                self.p
                    .xattrs_of(&*fd)
                    .and_then(|x| x.set(name, value, how))
                    .ex()
            }),
        )
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let _g = self.enter(req);
        let mut buf = vec![0u8; size as usize];
        let r = self
            .node(ino)
            .and_then(|fd| self.p.xattrs_of(&*fd).and_then(|x| x.list(&mut buf)).ex());
        reply_xattr(reply, r, &buf, size)
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _g = self.enter(req);
        reply_empty(
            reply,
            self.node(ino)
                .and_then(|fd| self.p.xattrs_of(&*fd).and_then(|x| x.remove(name)).ex()),
        )
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let _g = self.enter(req);
        let mode = scalevfs::Access(mask.bits() as u32);
        reply_empty(
            reply,
            self.node(ino)
                .and_then(|fd| self.p.faccessat(&*fd, "", mode, AtFlags::EMPTY_PATH).ex()),
        )
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let _g = self.enter(req);
        let flags = convert::open_flags(flags) | OFlags::CREAT;
        let r = self.node(parent).and_then(|p| {
            let ticket = self.files.charge(req.uid())?;
            let h = self.p.openat_handle(&*p, name, flags, mode).ex()?;
            let node = self
                .p
                .reopen_handle(&h, OFlags::PATH | OFlags::NOFOLLOW)
                .ex()?;
            let a = self.remember(node)?;
            Ok((a, self.files.insert(h, ticket)?))
        });
        match r {
            Ok((a, fh)) => {
                let ttl = self.opts.entry_timeout.min(self.opts.attr_timeout);
                reply.created(&ttl, &a, Generation(0), FileHandle(fh), FopenFlags::empty())
            }
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let _g = self.enter(req);
        let r = self
            .files
            .get(fh.0)
            .and_then(|f| self.do_fallocate(&f, offset, length, mode));
        reply_empty(reply, r)
    }

    fn lseek(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        let whence = match whence {
            SEEK_SET => Whence::Set,
            SEEK_CUR => Whence::Cur,
            SEEK_END => Whence::End,
            SEEK_DATA => Whence::Data,
            SEEK_HOLE => Whence::Hole,
            _ => return reply.error(fuser::Errno::EINVAL),
        };
        let r = self
            .files
            .get(fh.0)
            .and_then(|f| self.p.lseek(&*f, offset, whence).ex());
        match r {
            Ok(o) => reply.offset(o as i64),
            Err(e) => reply.error(e),
        }
    }

    fn copy_file_range(
        &self,
        req: &Request,
        _ino_in: INodeNo,
        fh_in: FileHandle,
        offset_in: u64,
        _ino_out: INodeNo,
        fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        let _g = self.enter(req);
        let r = self.files.get(fh_in.0).and_then(|fin| {
            let fout = self.files.get(fh_out.0)?;
            self.do_copy(&fin, offset_in, &fout, offset_out, len)
        });
        match r {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }
}
