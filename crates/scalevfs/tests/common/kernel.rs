//! The oracle: the host kernel on a tmpfs directory that the test process has made its root.
//!
//! The first [`Kernel::session`] makes a fresh directory under `/dev/shm` (a tmpfs) and
//! `chroot`s the whole process into it, so kernel and engine see the same absolute paths. All
//! tests of a binary share that one root, so a session holds a global lock, and starts by
//! emptying `/`. Credentials are switched per thread (`setresuid` and friends are per thread at
//! the system-call level) with the saved uid kept at 0; dropping the session restores root,
//! the working directory and the umask, also when a case panics.

use super::oracle::{CopyArgs, Cred, Dir, Lk, Res, St, Sys, E, H, T, XT};
use rustix::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use rustix::fs::{self as rfs, AtFlags, Mode, OFlags, RenameFlags, Timespec, Timestamps, CWD};
use rustix::process::{Gid, Uid};
use std::ffi::CString;
use std::mem::MaybeUninit;
use std::sync::{Mutex, MutexGuard, OnceLock};

/// Why the kernel cannot be the oracle here, if it cannot.
static ROOTED: OnceLock<Result<(), String>> = OnceLock::new();
static LOCK: Mutex<()> = Mutex::new(());
static PROTECTIONS: OnceLock<Protections> = OnceLock::new();

/// The host's `fs.protected_*` sysctls, read before the chroot. They are host policy, not file
/// system semantics: cases and plans stay out of the situations they govern when they are on.
#[derive(Clone, Copy, Debug, Default)]
pub struct Protections {
    pub symlinks: bool,
    pub hardlinks: bool,
    pub regular: bool,
    pub fifos: bool,
}

/// The host's protections; all off when the kernel side does not run.
pub fn protections() -> Protections {
    available();
    PROTECTIONS.get().copied().unwrap_or_default()
}

fn read_protections() -> Protections {
    let on = |name: &str| {
        std::fs::read_to_string(format!("/proc/sys/fs/{name}"))
            .map(|v| v.trim() != "0")
            .unwrap_or(false)
    };
    Protections {
        symlinks: on("protected_symlinks"),
        hardlinks: on("protected_hardlinks"),
        regular: on("protected_regular"),
        fifos: on("protected_fifos"),
    }
}

fn chroot_once() -> Result<(), String> {
    if !rustix::process::geteuid().is_root() {
        return Err("not running as root: cannot chroot into a tmpfs directory".into());
    }
    let _ = PROTECTIONS.set(read_protections());
    let base = std::path::Path::new("/dev/shm");
    // Directories left by earlier runs whose process is gone.
    if let Ok(rd) = std::fs::read_dir(base) {
        for e in rd.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if let Some(pid) = name.strip_prefix("scalevfs-oracle-") {
                if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
    }
    let dir = base.join(format!("scalevfs-oracle-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    std::os::unix::fs::chroot(&dir).map_err(|e| format!("chroot {}: {e}", dir.display()))?;
    std::env::set_current_dir("/").map_err(|e| format!("chdir /: {e}"))?;
    Ok(())
}

/// Whether the kernel oracle is usable; prints why not, once, when it is not. Not being root
/// skips the differential tests; being root and failing to set up the chroot is an error, so a
/// broken CI machine cannot pass by skipping.
pub fn available() -> bool {
    match ROOTED.get_or_init(chroot_once) {
        Ok(()) => true,
        Err(why) if rustix::process::geteuid().is_root() => {
            panic!("differential tests: cannot set up the kernel oracle as root: {why}")
        }
        Err(why) => {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                eprintln!(
                    "\n*** differential tests SKIPPED: {why}.\n*** Run them as root \
                     (CI does) to compare the engine with the kernel's tmpfs.\n"
                )
            });
            false
        }
    }
}

fn errno(e: rustix::io::Errno) -> E {
    E(e.raw_os_error())
}

fn become_root() {
    rustix::thread::set_thread_res_uid(Uid::ROOT, Uid::ROOT, Uid::ROOT).expect("setresuid root");
    rustix::thread::set_thread_res_gid(Gid::ROOT, Gid::ROOT, Gid::ROOT).expect("setresgid root");
    rustix::thread::set_thread_groups(&[]).expect("setgroups");
}

/// Empties `/` and resets its mode and owner, the working directory and the umask.
fn reset_root() {
    become_root();
    rustix::process::chdir("/").expect("chdir /");
    rustix::process::umask(Mode::from_raw_mode(0o022));
    for e in std::fs::read_dir("/").expect("read_dir /") {
        let e = e.expect("dirent");
        let p = e.path();
        let r = if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            std::fs::remove_dir_all(&p)
        } else {
            std::fs::remove_file(&p)
        };
        r.unwrap_or_else(|err| panic!("reset: remove {}: {err}", p.display()));
    }
    rfs::chmod("/", Mode::from_raw_mode(0o1777)).expect("chmod /");
    rfs::chown("/", Some(Uid::ROOT), Some(Gid::ROOT)).expect("chown /");
    // `/` outlives the cases: its extended attributes go too.
    let mut names = vec![0u8; 64 * 1024];
    let n = rfs::llistxattr("/", &mut names[..]).expect("llistxattr /");
    for name in names[..n].split(|&b| b == 0).filter(|n| !n.is_empty()) {
        rfs::lremovexattr("/", name).expect("lremovexattr /");
    }
}

/// The emptied `/` (the oracle's tmpfs directory), held for a system under test that stores
/// its files there (hostfs); `None` when not root.
pub fn empty_root() -> Option<MutexGuard<'static, ()>> {
    if !available() {
        return None;
    }
    let lock = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    reset_root();
    Some(lock)
}

/// The host kernel as a [`Sys`]. One at a time per process; see the module docs.
pub struct Kernel {
    fds: Vec<Option<OwnedFd>>,
    /// The global lock, or `None` for a view of `/` whose caller holds it.
    _lock: Option<MutexGuard<'static, ()>>,
}

impl Kernel {
    /// Takes the global lock and starts from an empty `/`. `None` when not root.
    pub fn session() -> Option<Kernel> {
        if !available() {
            return None;
        }
        let lock = LOCK.lock().unwrap_or_else(|p| p.into_inner());
        reset_root();
        Some(Kernel {
            fds: Vec::new(),
            _lock: Some(lock),
        })
    }

    /// The kernel's view of `/` as it is, for a caller that holds the global lock (from
    /// [`empty_root`]).
    pub fn view(_held: &MutexGuard<'static, ()>) -> Kernel {
        Kernel {
            fds: Vec::new(),
            _lock: None,
        }
    }

    fn fd(&self, h: H) -> Res<BorrowedFd<'_>> {
        match self.fds.get(h.0) {
            Some(Some(fd)) => Ok(fd.as_fd()),
            _ => Err(E::EBADF),
        }
    }

    fn dir(&self, d: Dir) -> Res<BorrowedFd<'_>> {
        match d {
            Dir::Cwd => Ok(CWD),
            Dir::Fd(h) => self.fd(h),
        }
    }
}

impl Drop for Kernel {
    fn drop(&mut self) {
        self.fds.clear();
        become_root();
        let _ = rustix::process::chdir("/");
        rustix::process::umask(Mode::from_raw_mode(0o022));
    }
}

fn ts(t: T) -> Timespec {
    match t {
        T::Now => Timespec {
            tv_sec: 0,
            tv_nsec: rfs::UTIME_NOW,
        },
        T::Omit => Timespec {
            tv_sec: 0,
            tv_nsec: rfs::UTIME_OMIT,
        },
        T::Set(s, n) => Timespec {
            tv_sec: s,
            tv_nsec: n.into(),
        },
    }
}

fn st(s: rfs::Stat) -> St {
    #[allow(clippy::unnecessary_cast)]
    St {
        dev: s.st_dev as u64,
        ino: s.st_ino as u64,
        mode: s.st_mode as u32,
        nlink: s.st_nlink as u64,
        uid: s.st_uid as u32,
        gid: s.st_gid as u32,
        size: s.st_size as u64,
        blocks: s.st_blocks as u64,
        rdev: s.st_rdev as u64,
        atime: (s.st_atime as i64, s.st_atime_nsec as u32),
        mtime: (s.st_mtime as i64, s.st_mtime_nsec as u32),
        ctime: (s.st_ctime as i64, s.st_ctime_nsec as u32),
    }
}

extern "C" {
    // rustix has no path-based truncate, and ftruncate(2) differs from truncate(2) (it updates
    // the times even when the size does not change). libc is linked by std anyway.
    fn truncate(path: *const std::ffi::c_char, length: i64) -> std::ffi::c_int;
    // rustix's mknodat cannot pass a type of 0 (which Linux takes as a regular file) or an
    // invalid type.
    fn mknodat(
        dirfd: std::ffi::c_int,
        path: *const std::ffi::c_char,
        mode: u32,
        dev: u64,
    ) -> std::ffi::c_int;
}

fn last_errno() -> E {
    E(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
}

impl Sys for Kernel {
    fn name(&self) -> &'static str {
        "kernel"
    }
    fn is_oracle(&self) -> bool {
        true
    }

    fn set_creds(&mut self, c: &Cred) {
        become_root();
        if *c == Cred::root() {
            return;
        }
        let groups: Vec<Gid> = c.groups.iter().map(|&g| Gid::from_raw(g)).collect();
        rustix::thread::set_thread_groups(&groups).expect("setgroups");
        rustix::thread::set_thread_res_gid(Gid::from_raw(c.rgid), Gid::from_raw(c.egid), Gid::ROOT)
            .expect("setresgid");
        rustix::thread::set_thread_res_uid(Uid::from_raw(c.ruid), Uid::from_raw(c.euid), Uid::ROOT)
            .expect("setresuid");
    }

    fn umask(&mut self, mask: u32) -> u32 {
        rustix::process::umask(Mode::from_raw_mode(mask)).as_raw_mode()
    }

    fn open(&mut self, d: Dir, p: &[u8], flags: u32, mode: u32) -> Res<H> {
        let mut oflags = OFlags::from_bits_retain(flags) | OFlags::CLOEXEC;
        // Safety net: opening a FIFO blocks until the other end opens, which would hang the
        // whole suite. Cases keep away from it; if one does not, it gets O_NONBLOCK here and a
        // visible difference instead of a hang.
        let follow = if oflags.contains(OFlags::NOFOLLOW) {
            AtFlags::SYMLINK_NOFOLLOW
        } else {
            AtFlags::empty()
        };
        if let Ok(s) = rfs::statat(self.dir(d)?, p, follow) {
            if s.st_mode & 0o170000 == 0o010000 {
                oflags |= OFlags::NONBLOCK;
            }
        }
        let fd = rfs::openat(self.dir(d)?, p, oflags, Mode::from_raw_mode(mode)).map_err(errno)?;
        self.fds.push(Some(fd));
        Ok(H(self.fds.len() - 1))
    }

    fn close(&mut self, h: H) -> Res<()> {
        match self.fds.get_mut(h.0).and_then(Option::take) {
            Some(fd) => {
                drop(fd);
                Ok(())
            }
            None => Err(E::EBADF),
        }
    }

    fn read(&mut self, h: H, n: usize) -> Res<Vec<u8>> {
        let mut buf = vec![0u8; n];
        let got = rustix::io::read(self.fd(h)?, &mut buf[..]).map_err(errno)?;
        buf.truncate(got);
        Ok(buf)
    }

    fn write(&mut self, h: H, data: &[u8]) -> Res<usize> {
        rustix::io::write(self.fd(h)?, data).map_err(errno)
    }

    fn pread(&mut self, h: H, n: usize, off: u64) -> Res<Vec<u8>> {
        let mut buf = vec![0u8; n];
        let got = rustix::io::pread(self.fd(h)?, &mut buf[..], off).map_err(errno)?;
        buf.truncate(got);
        Ok(buf)
    }

    fn pwrite(&mut self, h: H, data: &[u8], off: u64) -> Res<usize> {
        rustix::io::pwrite(self.fd(h)?, data, off).map_err(errno)
    }

    fn lseek(&mut self, h: H, off: i64, whence: u32) -> Res<u64> {
        let pos = match whence {
            0 => rfs::SeekFrom::Start(off as u64),
            1 => rfs::SeekFrom::Current(off),
            2 => rfs::SeekFrom::End(off),
            3 => rfs::SeekFrom::Data(off as u64),
            4 => rfs::SeekFrom::Hole(off as u64),
            _ => panic!("lseek: whence {whence} cannot be passed through rustix"),
        };
        rfs::seek(self.fd(h)?, pos).map_err(errno)
    }

    fn fstat(&mut self, h: H) -> Res<St> {
        rfs::fstat(self.fd(h)?).map(st).map_err(errno)
    }

    fn copy_file_range(&mut self, c: CopyArgs) -> Res<(usize, Option<u64>, Option<u64>)> {
        let (mut off_in, mut off_out) = (c.off_in.map(|o| o as i64), c.off_out.map(|o| o as i64));
        let ptr = |o: &mut Option<i64>| o.as_mut().map_or(std::ptr::null_mut(), |o| o as *mut i64);
        let (fd_in, fd_out) = (
            self.fd(c.fd_in)?.as_raw_fd(),
            self.fd(c.fd_out)?.as_raw_fd(),
        );
        // SAFETY: the offsets point at live locals (or are null), and the descriptors are
        // this test's own open files.
        let n = unsafe {
            libc::copy_file_range(
                fd_in,
                ptr(&mut off_in),
                fd_out,
                ptr(&mut off_out),
                c.len,
                c.flags,
            )
        };
        if n < 0 {
            return Err(E(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(0)));
        }
        Ok((
            n as usize,
            off_in.map(|o| o as u64),
            off_out.map(|o| o as u64),
        ))
    }

    fn fallocate(&mut self, h: H, mode: u32, off: u64, len: u64) -> Res<()> {
        let mode = rfs::FallocateFlags::from_bits_retain(mode);
        rfs::fallocate(self.fd(h)?, mode, off, len).map_err(errno)
    }

    fn ftruncate(&mut self, h: H, len: u64) -> Res<()> {
        rfs::ftruncate(self.fd(h)?, len).map_err(errno)
    }

    fn fchmod(&mut self, h: H, mode: u32) -> Res<()> {
        rfs::fchmod(self.fd(h)?, Mode::from_raw_mode(mode)).map_err(errno)
    }

    fn fchown(&mut self, h: H, uid: Option<u32>, gid: Option<u32>) -> Res<()> {
        rfs::fchown(self.fd(h)?, uid.map(Uid::from_raw), gid.map(Gid::from_raw)).map_err(errno)
    }

    fn fchdir(&mut self, h: H) -> Res<()> {
        rustix::process::fchdir(self.fd(h)?).map_err(errno)
    }

    fn getdents(&mut self, h: H) -> Res<Vec<(Vec<u8>, u8)>> {
        let fd = self.fd(h)?;
        let mut buf = vec![MaybeUninit::<u8>::uninit(); 8192];
        let mut dir = rfs::RawDir::new(fd, &mut buf);
        let mut out = Vec::new();
        while let Some(e) = dir.next() {
            let e = e.map_err(errno)?;
            let t = (e.file_type().as_raw_mode() >> 12) as u8;
            out.push((e.file_name().to_bytes().to_vec(), t));
        }
        Ok(out)
    }

    fn mkdir(&mut self, d: Dir, p: &[u8], mode: u32) -> Res<()> {
        rfs::mkdirat(self.dir(d)?, p, Mode::from_raw_mode(mode)).map_err(errno)
    }

    fn mknod(&mut self, d: Dir, p: &[u8], mode: u32, dev: u64) -> Res<()> {
        let dirfd = self.dir(d)?.as_raw_fd();
        let c = CString::new(p).map_err(|_| E::EINVAL)?;
        // SAFETY: `c` is a valid NUL-terminated string that outlives the call; `dirfd` is open
        // (or AT_FDCWD) for the duration of the call.
        let r = unsafe { mknodat(dirfd, c.as_ptr(), mode, dev) };
        if r == 0 {
            Ok(())
        } else {
            Err(last_errno())
        }
    }

    fn unlink(&mut self, d: Dir, p: &[u8], flags: u32) -> Res<()> {
        rfs::unlinkat(self.dir(d)?, p, AtFlags::from_bits_retain(flags)).map_err(errno)
    }

    fn rename(&mut self, od: Dir, old: &[u8], nd: Dir, new: &[u8], flags: u32) -> Res<()> {
        rfs::renameat_with(
            self.dir(od)?,
            old,
            self.dir(nd)?,
            new,
            RenameFlags::from_bits_retain(flags),
        )
        .map_err(errno)
    }

    fn link(&mut self, od: Dir, old: &[u8], nd: Dir, new: &[u8], flags: u32) -> Res<()> {
        rfs::linkat(
            self.dir(od)?,
            old,
            self.dir(nd)?,
            new,
            AtFlags::from_bits_retain(flags),
        )
        .map_err(errno)
    }

    fn symlink(&mut self, target: &[u8], d: Dir, p: &[u8]) -> Res<()> {
        rfs::symlinkat(target, self.dir(d)?, p).map_err(errno)
    }

    fn readlink(&mut self, d: Dir, p: &[u8]) -> Res<Vec<u8>> {
        rfs::readlinkat(self.dir(d)?, p, Vec::new())
            .map(|c| c.into_bytes())
            .map_err(errno)
    }

    fn stat(&mut self, d: Dir, p: &[u8], flags: u32) -> Res<St> {
        rfs::statat(self.dir(d)?, p, AtFlags::from_bits_retain(flags))
            .map(st)
            .map_err(errno)
    }

    fn access(&mut self, d: Dir, p: &[u8], mode: u32, flags: u32) -> Res<()> {
        rfs::accessat(
            self.dir(d)?,
            p,
            rfs::Access::from_bits_retain(mode),
            AtFlags::from_bits_retain(flags),
        )
        .map_err(errno)
    }

    fn chmod(&mut self, d: Dir, p: &[u8], mode: u32) -> Res<()> {
        rfs::chmodat(self.dir(d)?, p, Mode::from_raw_mode(mode), AtFlags::empty()).map_err(errno)
    }

    fn chown(
        &mut self,
        d: Dir,
        p: &[u8],
        uid: Option<u32>,
        gid: Option<u32>,
        flags: u32,
    ) -> Res<()> {
        rfs::chownat(
            self.dir(d)?,
            p,
            uid.map(Uid::from_raw),
            gid.map(Gid::from_raw),
            AtFlags::from_bits_retain(flags),
        )
        .map_err(errno)
    }

    fn truncate(&mut self, p: &[u8], len: u64) -> Res<()> {
        let c = CString::new(p).map_err(|_| E::EINVAL)?;
        // Lengths past i64::MAX reach the kernel as the negative numbers they are there.
        let len = len as i64;
        // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
        let r = unsafe { truncate(c.as_ptr(), len) };
        if r == 0 {
            Ok(())
        } else {
            Err(last_errno())
        }
    }

    fn utimens(&mut self, d: Dir, p: &[u8], times: [T; 2], flags: u32) -> Res<()> {
        let t = Timestamps {
            last_access: ts(times[0]),
            last_modification: ts(times[1]),
        };
        rfs::utimensat(self.dir(d)?, p, &t, AtFlags::from_bits_retain(flags)).map_err(errno)
    }

    fn chdir(&mut self, p: &[u8]) -> Res<()> {
        rustix::process::chdir(p).map_err(errno)
    }

    fn getcwd(&mut self) -> Res<Vec<u8>> {
        rustix::process::getcwd(Vec::new())
            .map(|c| c.into_bytes())
            .map_err(errno)
    }

    fn getxattr(&mut self, t: XT<'_>, name: &[u8], size: usize) -> Res<(usize, Vec<u8>)> {
        let mut buf = vec![0u8; size];
        // rustix answers an empty buffer with 0: the size is asked for by the query calls.
        let n = match (t, size) {
            (XT::Path(p), 0) => rfs::getxattr_query(p, name),
            (XT::LPath(p), 0) => rfs::lgetxattr_query(p, name),
            (XT::Fd(h), 0) => rfs::fgetxattr_query(self.fd(h)?, name),
            (XT::Path(p), _) => rfs::getxattr(p, name, &mut buf[..]),
            (XT::LPath(p), _) => rfs::lgetxattr(p, name, &mut buf[..]),
            (XT::Fd(h), _) => rfs::fgetxattr(self.fd(h)?, name, &mut buf[..]),
        }
        .map_err(errno)?;
        buf.truncate(if size == 0 { 0 } else { n });
        Ok((n, buf))
    }

    fn setxattr(&mut self, t: XT<'_>, name: &[u8], value: &[u8], flags: u32) -> Res<()> {
        let f = rfs::XattrFlags::from_bits_retain(flags);
        match t {
            XT::Path(p) => rfs::setxattr(p, name, value, f),
            XT::LPath(p) => rfs::lsetxattr(p, name, value, f),
            XT::Fd(h) => rfs::fsetxattr(self.fd(h)?, name, value, f),
        }
        .map_err(errno)
    }

    fn listxattr(&mut self, t: XT<'_>, size: usize) -> Res<(usize, Vec<u8>)> {
        let mut buf = vec![0u8; size];
        let n = match (t, size) {
            (XT::Path(p), 0) => rfs::listxattr_query(p),
            (XT::LPath(p), 0) => rfs::llistxattr_query(p),
            (XT::Fd(h), 0) => rfs::flistxattr_query(self.fd(h)?),
            (XT::Path(p), _) => rfs::listxattr(p, &mut buf[..]),
            (XT::LPath(p), _) => rfs::llistxattr(p, &mut buf[..]),
            (XT::Fd(h), _) => rfs::flistxattr(self.fd(h)?, &mut buf[..]),
        }
        .map_err(errno)?;
        buf.truncate(if size == 0 { 0 } else { n });
        Ok((n, buf))
    }

    fn removexattr(&mut self, t: XT<'_>, name: &[u8]) -> Res<()> {
        match t {
            XT::Path(p) => rfs::removexattr(p, name),
            XT::LPath(p) => rfs::lremovexattr(p, name),
            XT::Fd(h) => rfs::fremovexattr(self.fd(h)?, name),
        }
        .map_err(errno)
    }

    fn flock(&mut self, h: H, op: u32) -> Res<()> {
        let fd = self.fd(h)?.as_raw_fd();
        // SAFETY: a plain system call on a descriptor this table owns.
        let r = unsafe { libc::flock(fd, op as i32) };
        if r < 0 {
            return Err(E(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(0)));
        }
        Ok(())
    }

    fn fcntl_lock(&mut self, h: H, cmd: i32, l: Lk) -> Res<Lk> {
        let fd = self.fd(h)?.as_raw_fd();
        // SAFETY: zeroes are a valid `struct flock`.
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = l.typ;
        fl.l_whence = l.whence;
        fl.l_start = l.start;
        fl.l_len = l.len;
        fl.l_pid = l.pid;
        // SAFETY: `fl` is a `struct flock` that outlives the call.
        let r = unsafe { libc::fcntl(fd, cmd, &mut fl as *mut libc::flock) };
        if r < 0 {
            return Err(E(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(0)));
        }
        let me = std::process::id() as i32;
        Ok(Lk {
            typ: fl.l_type,
            whence: fl.l_whence,
            start: fl.l_start,
            len: fl.l_len,
            pid: if fl.l_pid == me { Lk::ME } else { fl.l_pid },
        })
    }
}
