//! The system under test: a fresh `scalevfs` namespace as a [`Sys`]: memfs, or with
//! `SCALEVFS_TEST_BACKEND=host`, hostfs over the oracle's own tmpfs directory (emptied
//! after the kernel's turn), so that the same cases check hostfs's writes through to the
//! host against the kernel.

use super::oracle::{CopyArgs, Cred, Dir, Lk, Res, St, Sys, E, H, T, XT};
use scalevfs::{Access, Whence};
use scalevfs::{
    AtFlags, Creds, Errno, Fd, OFlags, Process, RenameFlags, SetTime, Timespec, Vfs, XattrFlags,
};
use std::ffi::OsStr;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;
use std::sync::Arc;

/// A fresh engine on the backend `SCALEVFS_TEST_BACKEND` names (`memfs`, the default, or
/// `host`), boxed for the runner.
pub fn new_sys() -> Box<dyn Sys> {
    match std::env::var("SCALEVFS_TEST_BACKEND").as_deref() {
        Err(_) | Ok("memfs") => Box::new(Engine::new()),
        #[cfg(not(loom))]
        Ok("host") => Box::new(Engine::on_host()),
        Ok(other) => panic!("SCALEVFS_TEST_BACKEND={other}: expected memfs or host"),
    }
}

pub struct Engine {
    p: Process,
    _vfs: Arc<Vfs>,
    fds: Vec<Option<Fd>>,
    /// hostfs: the oracle's directory, held while the engine stores files there.
    _root: Option<std::sync::MutexGuard<'static, ()>>,
    name: &'static str,
}

impl Engine {
    /// A fresh memfs as root, umask 022, in check mode: every lockless walk and path-cache
    /// answer is repeated by the locked walk and must agree (a disagreement panics, which
    /// the harness reports as a divergence).
    pub fn new() -> Engine {
        Self::with(Vfs::new_memfs(), None, "engine")
    }

    /// hostfs over the oracle's tmpfs directory, emptied, in check mode. With
    /// `SCALEVFS_TEST_HOST_CACHE=N`, its caches hold at most `N` objects, so that the cases
    /// run with names swept and directories loaded again all the time. With
    /// `SCALEVFS_TEST_HOST_TTL_MS=T`, it runs under the shared policy with a TTL of `T` ms
    /// (0: every use revalidates against the host).
    #[cfg(not(loom))]
    pub fn on_host() -> Engine {
        let root = super::kernel::empty_root().expect("the oracle ran, so root is available");
        let max_inodes = std::env::var("SCALEVFS_TEST_HOST_CACHE").ok().map(|v| {
            v.parse()
                .expect("SCALEVFS_TEST_HOST_CACHE: a number of objects")
        });
        let policy = match std::env::var("SCALEVFS_TEST_HOST_TTL_MS") {
            Ok(v) => scalevfs::HostPolicy::Shared {
                ttl: std::time::Duration::from_millis(
                    v.parse().expect("SCALEVFS_TEST_HOST_TTL_MS: milliseconds"),
                ),
            },
            Err(_) => scalevfs::HostPolicy::Exclusive,
        };
        let opts = scalevfs::HostFsOptions {
            max_inodes,
            policy,
            ..scalevfs::HostFsOptions::default()
        };
        let fs = scalevfs::HostFs::new(Path::new("/"), opts)
            .expect("hostfs over the oracle's directory");
        Self::with(Vfs::new(fs), Some(root), "hostfs")
    }

    fn with(
        vfs: Arc<Vfs>,
        root: Option<std::sync::MutexGuard<'static, ()>>,
        name: &'static str,
    ) -> Engine {
        vfs.set_check_mode(true);
        let p = vfs.process(Creds::root());
        Engine {
            p,
            _vfs: vfs,
            fds: Vec::new(),
            _root: root,
            name,
        }
    }

    fn fd(&self, h: H) -> Res<Fd> {
        match self.fds.get(h.0) {
            Some(Some(fd)) => Ok(*fd),
            _ => Err(E::EBADF),
        }
    }

    fn dir(&self, d: Dir) -> Res<Fd> {
        match d {
            Dir::Cwd => Ok(Fd::CWD),
            Dir::Fd(h) => self.fd(h),
        }
    }
}

fn path(p: &[u8]) -> &Path {
    Path::new(OsStr::from_bytes(p))
}

fn e(e: Errno) -> E {
    E(e.raw())
}

fn st(s: scalevfs::Stat) -> St {
    St {
        dev: s.dev,
        ino: s.ino,
        mode: s.mode,
        nlink: u64::from(s.nlink),
        uid: s.uid,
        gid: s.gid,
        size: s.size,
        blocks: s.blocks,
        rdev: s.rdev,
        atime: (s.atime.sec, s.atime.nsec),
        mtime: (s.mtime.sec, s.mtime.nsec),
        ctime: (s.ctime.sec, s.ctime.nsec),
    }
}

fn set_time(t: T) -> SetTime {
    match t {
        T::Now => SetTime::Now,
        T::Omit => SetTime::Omit,
        T::Set(sec, nsec) => SetTime::Set(Timespec { sec, nsec }),
    }
}

impl Sys for Engine {
    fn name(&self) -> &'static str {
        self.name
    }
    fn host_tree(&mut self) -> Option<Vec<String>> {
        let held = self._root.as_ref()?;
        Some(super::oracle::tree_of(&mut super::kernel::Kernel::view(
            held,
        )))
    }
    fn is_oracle(&self) -> bool {
        false
    }

    fn set_creds(&mut self, c: &Cred) {
        self.p.set_creds(Creds {
            uid: c.euid,
            gid: c.egid,
            groups: c.groups.clone(),
            ruid: c.ruid,
            rgid: c.rgid,
        });
    }

    fn umask(&mut self, mask: u32) -> u32 {
        self.p.umask(mask)
    }

    fn open(&mut self, d: Dir, p: &[u8], flags: u32, mode: u32) -> Res<H> {
        let flags = OFlags(flags);
        let fd = match d {
            Dir::Cwd => self.p.open(path(p), flags, mode),
            d => self.p.openat(self.dir(d)?, path(p), flags, mode),
        }
        .map_err(e)?;
        self.fds.push(Some(fd));
        Ok(H(self.fds.len() - 1))
    }

    fn close(&mut self, h: H) -> Res<()> {
        let fd = self.fd(h)?;
        self.fds[h.0] = None;
        self.p.close(fd).map_err(e)
    }

    fn read(&mut self, h: H, n: usize) -> Res<Vec<u8>> {
        let mut buf = vec![0u8; n];
        let got = self.p.read(self.fd(h)?, &mut buf).map_err(e)?;
        buf.truncate(got);
        Ok(buf)
    }

    fn write(&mut self, h: H, data: &[u8]) -> Res<usize> {
        self.p.write(self.fd(h)?, data).map_err(e)
    }

    fn pread(&mut self, h: H, n: usize, off: u64) -> Res<Vec<u8>> {
        let mut buf = vec![0u8; n];
        let got = self.p.pread(self.fd(h)?, &mut buf, off).map_err(e)?;
        buf.truncate(got);
        Ok(buf)
    }

    fn pwrite(&mut self, h: H, data: &[u8], off: u64) -> Res<usize> {
        self.p.pwrite(self.fd(h)?, data, off).map_err(e)
    }

    fn lseek(&mut self, h: H, off: i64, whence: u32) -> Res<u64> {
        let w = match whence {
            0 => Whence::Set,
            1 => Whence::Cur,
            2 => Whence::End,
            3 => Whence::Data,
            4 => Whence::Hole,
            _ => return Err(E::EINVAL),
        };
        self.p.lseek(self.fd(h)?, off, w).map_err(e)
    }

    fn fstat(&mut self, h: H) -> Res<St> {
        self.p.fstat(self.fd(h)?).map(st).map_err(e)
    }

    fn copy_file_range(&mut self, c: CopyArgs) -> Res<(usize, Option<u64>, Option<u64>)> {
        let (mut off_in, mut off_out) = (c.off_in, c.off_out);
        let (fd_in, fd_out) = (self.fd(c.fd_in)?, self.fd(c.fd_out)?);
        let n = self
            .p
            .copy_file_range(
                fd_in,
                off_in.as_mut(),
                fd_out,
                off_out.as_mut(),
                c.len,
                c.flags,
            )
            .map_err(e)?;
        Ok((n, off_in, off_out))
    }

    fn fallocate(&mut self, h: H, mode: u32, off: u64, len: u64) -> Res<()> {
        self.p
            .fallocate(self.fd(h)?, scalevfs::FallocFlags(mode), off, len)
            .map_err(e)
    }

    fn ftruncate(&mut self, h: H, len: u64) -> Res<()> {
        self.p.ftruncate(self.fd(h)?, len).map_err(e)
    }

    fn fchmod(&mut self, h: H, mode: u32) -> Res<()> {
        self.p.fchmod(self.fd(h)?, mode).map_err(e)
    }

    fn fchown(&mut self, h: H, uid: Option<u32>, gid: Option<u32>) -> Res<()> {
        self.p.fchown(self.fd(h)?, uid, gid).map_err(e)
    }

    fn fchdir(&mut self, h: H) -> Res<()> {
        self.p.fchdir(self.fd(h)?).map_err(e)
    }

    fn getdents(&mut self, h: H) -> Res<Vec<(Vec<u8>, u8)>> {
        let fd = self.fd(h)?;
        let mut out = Vec::new();
        loop {
            let batch = self.p.getdents(fd, 7).map_err(e)?;
            if batch.is_empty() {
                return Ok(out);
            }
            out.extend(batch.into_iter().map(|d| (d.name, d.file_type.d_type())));
        }
    }

    fn mkdir(&mut self, d: Dir, p: &[u8], mode: u32) -> Res<()> {
        match d {
            Dir::Cwd => self.p.mkdir(path(p), mode),
            d => self.p.mkdirat(self.dir(d)?, path(p), mode),
        }
        .map_err(e)
    }

    fn mknod(&mut self, d: Dir, p: &[u8], mode: u32, dev: u64) -> Res<()> {
        self.p.mknodat(self.dir(d)?, path(p), mode, dev).map_err(e)
    }

    fn unlink(&mut self, d: Dir, p: &[u8], flags: u32) -> Res<()> {
        match (d, flags) {
            (Dir::Cwd, 0) => self.p.unlink(path(p)),
            (Dir::Cwd, 0x200) => self.p.rmdir(path(p)),
            (d, f) => self.p.unlinkat(self.dir(d)?, path(p), AtFlags(f)),
        }
        .map_err(e)
    }

    fn rename(&mut self, od: Dir, old: &[u8], nd: Dir, new: &[u8], flags: u32) -> Res<()> {
        match (od, nd, flags) {
            (Dir::Cwd, Dir::Cwd, 0) => self.p.rename(path(old), path(new)),
            _ => self.p.renameat2(
                self.dir(od)?,
                path(old),
                self.dir(nd)?,
                path(new),
                RenameFlags(flags),
            ),
        }
        .map_err(e)
    }

    fn link(&mut self, od: Dir, old: &[u8], nd: Dir, new: &[u8], flags: u32) -> Res<()> {
        match (od, nd, flags) {
            (Dir::Cwd, Dir::Cwd, 0) => self.p.link(path(old), path(new)),
            _ => self.p.linkat(
                self.dir(od)?,
                path(old),
                self.dir(nd)?,
                path(new),
                AtFlags(flags),
            ),
        }
        .map_err(e)
    }

    fn symlink(&mut self, target: &[u8], d: Dir, p: &[u8]) -> Res<()> {
        match d {
            Dir::Cwd => self.p.symlink(path(target), path(p)),
            d => self.p.symlinkat(path(target), self.dir(d)?, path(p)),
        }
        .map_err(e)
    }

    fn readlink(&mut self, d: Dir, p: &[u8]) -> Res<Vec<u8>> {
        match d {
            Dir::Cwd => self.p.readlink(path(p)),
            d => self.p.readlinkat(self.dir(d)?, path(p)),
        }
        .map_err(e)
    }

    fn stat(&mut self, d: Dir, p: &[u8], flags: u32) -> Res<St> {
        match (d, flags) {
            (Dir::Cwd, 0) => self.p.stat(path(p)),
            (Dir::Cwd, 0x100) => self.p.lstat(path(p)),
            (d, f) => self.p.fstatat(self.dir(d)?, path(p), AtFlags(f)),
        }
        .map(st)
        .map_err(e)
    }

    fn access(&mut self, d: Dir, p: &[u8], mode: u32, flags: u32) -> Res<()> {
        match (d, flags) {
            (Dir::Cwd, 0) => self.p.access(path(p), Access(mode)),
            (d, f) => self
                .p
                .faccessat(self.dir(d)?, path(p), Access(mode), AtFlags(f)),
        }
        .map_err(e)
    }

    fn chmod(&mut self, d: Dir, p: &[u8], mode: u32) -> Res<()> {
        match d {
            Dir::Cwd => self.p.chmod(path(p), mode),
            d => self
                .p
                .fchmodat(self.dir(d)?, path(p), mode, AtFlags::empty()),
        }
        .map_err(e)
    }

    fn chown(
        &mut self,
        d: Dir,
        p: &[u8],
        uid: Option<u32>,
        gid: Option<u32>,
        flags: u32,
    ) -> Res<()> {
        match (d, flags) {
            (Dir::Cwd, 0) => self.p.chown(path(p), uid, gid),
            (Dir::Cwd, 0x100) => self.p.lchown(path(p), uid, gid),
            (d, f) => self.p.fchownat(self.dir(d)?, path(p), uid, gid, AtFlags(f)),
        }
        .map_err(e)
    }

    fn truncate(&mut self, p: &[u8], len: u64) -> Res<()> {
        self.p.truncate(path(p), len).map_err(e)
    }

    fn utimens(&mut self, d: Dir, p: &[u8], times: [T; 2], flags: u32) -> Res<()> {
        self.p
            .utimensat(
                self.dir(d)?,
                path(p),
                [set_time(times[0]), set_time(times[1])],
                AtFlags(flags),
            )
            .map_err(e)
    }

    fn chdir(&mut self, p: &[u8]) -> Res<()> {
        self.p.chdir(path(p)).map_err(e)
    }

    fn getcwd(&mut self) -> Res<Vec<u8>> {
        self.p
            .getcwd()
            .map(|p| p.into_os_string().into_vec())
            .map_err(e)
    }

    fn getxattr(&mut self, t: XT<'_>, name: &[u8], size: usize) -> Res<(usize, Vec<u8>)> {
        let mut buf = vec![0u8; size];
        let name = OsStr::from_bytes(name);
        let n = match t {
            XT::Path(p) => self.p.getxattr(path(p), name, &mut buf),
            XT::LPath(p) => self.p.lgetxattr(path(p), name, &mut buf),
            XT::Fd(h) => self.p.fgetxattr(self.fd(h)?, name, &mut buf),
        }
        .map_err(e)?;
        buf.truncate(if size == 0 { 0 } else { n });
        Ok((n, buf))
    }

    fn setxattr(&mut self, t: XT<'_>, name: &[u8], value: &[u8], flags: u32) -> Res<()> {
        let (name, f) = (OsStr::from_bytes(name), XattrFlags(flags));
        match t {
            XT::Path(p) => self.p.setxattr(path(p), name, value, f),
            XT::LPath(p) => self.p.lsetxattr(path(p), name, value, f),
            XT::Fd(h) => self.p.fsetxattr(self.fd(h)?, name, value, f),
        }
        .map_err(e)
    }

    fn listxattr(&mut self, t: XT<'_>, size: usize) -> Res<(usize, Vec<u8>)> {
        let mut buf = vec![0u8; size];
        let n = match t {
            XT::Path(p) => self.p.listxattr(path(p), &mut buf),
            XT::LPath(p) => self.p.llistxattr(path(p), &mut buf),
            XT::Fd(h) => self.p.flistxattr(self.fd(h)?, &mut buf),
        }
        .map_err(e)?;
        buf.truncate(if size == 0 { 0 } else { n });
        Ok((n, buf))
    }

    fn removexattr(&mut self, t: XT<'_>, name: &[u8]) -> Res<()> {
        let name = OsStr::from_bytes(name);
        match t {
            XT::Path(p) => self.p.removexattr(path(p), name),
            XT::LPath(p) => self.p.lremovexattr(path(p), name),
            XT::Fd(h) => self.p.fremovexattr(self.fd(h)?, name),
        }
        .map_err(e)
    }

    fn flock(&mut self, h: H, op: u32) -> Res<()> {
        self.p.flock(self.fd(h)?, scalevfs::FlockOp(op)).map_err(e)
    }

    fn fcntl_lock(&mut self, h: H, cmd: i32, l: Lk) -> Res<Lk> {
        use scalevfs::{Flock, LockCmd, LockType};
        let fd = self.fd(h)?;
        // What a C frontend would map; values outside these are not engine inputs.
        let cmd = match cmd {
            5 => LockCmd::GetLk,
            6 => LockCmd::SetLk,
            7 => LockCmd::SetLkW,
            36 => LockCmd::OfdGetLk,
            37 => LockCmd::OfdSetLk,
            38 => LockCmd::OfdSetLkW,
            c => panic!("not a lock command: {c}"),
        };
        let typ = |t: i16| match t {
            0 => LockType::Read,
            1 => LockType::Write,
            2 => LockType::Unlock,
            t => panic!("not a lock type: {t}"),
        };
        let whence = match l.whence {
            0 => Whence::Set,
            1 => Whence::Cur,
            2 => Whence::End,
            3 => Whence::Data,
            4 => Whence::Hole,
            w => panic!("not a whence: {w}"),
        };
        let mut fl = Flock {
            typ: typ(l.typ),
            whence,
            start: l.start,
            len: l.len,
            pid: l.pid,
        };
        self.p.fcntl_lock(fd, cmd, &mut fl).map_err(e)?;
        let me = self.p.lock_owner_id() as i32;
        Ok(Lk {
            typ: match fl.typ {
                LockType::Read => 0,
                LockType::Write => 1,
                LockType::Unlock => 2,
            },
            whence: match fl.whence {
                Whence::Set => 0,
                Whence::Cur => 1,
                Whence::End => 2,
                Whence::Data => 3,
                Whence::Hole => 4,
            },
            start: fl.start,
            len: fl.len,
            pid: if fl.pid == me { Lk::ME } else { fl.pid },
        })
    }
}
