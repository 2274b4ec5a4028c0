//! The differential oracle: one trait, [`Sys`], over the host kernel and the engine, and a
//! recorder, [`Rec`], that turns every call into one normalised trace line.
//!
//! Two traces are equal when both systems returned the same errno or the same value for every
//! call. Values are normalised so that nothing system-specific leaks into them:
//! - inode numbers become labels (`#0`, `#1`, ...) in order of first appearance, so a trace shows
//!   which names are hard links of one inode, not the raw numbers. The label map is cleared after
//!   every call that can free an inode (unlink, rmdir, rename, close), because a system may reuse
//!   a freed number;
//! - timestamps never appear; a case states relations instead ("ctime changed across this call")
//!   with [`Rec::times`] and [`Rec::times_rel`];
//! - `st_dev` never appears.
//!
//! Flags and modes are Linux's raw values, the same numbers as `scalevfs::OFlags` and friends.

use std::collections::HashMap;
use std::fmt::{self, Write as _};

/// A Linux errno value.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct E(pub i32);

macro_rules! errnos {
    ($($n:ident = $v:expr),* $(,)?) => {
        impl E { $(pub const $n: E = E($v);)* }
        fn errno_name(v: i32) -> Option<&'static str> {
            match v { $($v => Some(stringify!($n)),)* _ => None }
        }
    };
}

errnos! {
    EPERM = 1, ENOENT = 2, EIO = 5, EBADF = 9, EAGAIN = 11, ENOMEM = 12, EACCES = 13,
    EFAULT = 14, EBUSY = 16, EEXIST = 17, EXDEV = 18, ENODEV = 19, ENOTDIR = 20, EISDIR = 21,
    EINVAL = 22, ENFILE = 23, EMFILE = 24, ETXTBSY = 26, EFBIG = 27, ENOSPC = 28, ESPIPE = 29,
    EROFS = 30, EMLINK = 31, ERANGE = 34, ENAMETOOLONG = 36, ENOSYS = 38, ENOTEMPTY = 39,
    ELOOP = 40, ENODATA = 61, EOVERFLOW = 75, EOPNOTSUPP = 95, E2BIG = 7, EDEADLK = 35,
    ENOLCK = 37,
}

impl fmt::Debug for E {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match errno_name(self.0) {
            Some(n) => f.write_str(n),
            None => write!(f, "E{}", self.0),
        }
    }
}

/// What every [`Sys`] call returns.
pub type Res<T> = Result<T, E>;

/// The arguments of one `copy_file_range(2)`.
#[derive(Clone, Copy, Debug)]
pub struct CopyArgs {
    pub fd_in: H,
    pub off_in: Option<u64>,
    pub fd_out: H,
    pub off_out: Option<u64>,
    pub len: usize,
    pub flags: u32,
}

/// `open(2)` flags (Linux values).
pub mod o {
    pub const RDONLY: u32 = 0;
    pub const WRONLY: u32 = 0o1;
    pub const RDWR: u32 = 0o2;
    pub const CREAT: u32 = 0o100;
    pub const EXCL: u32 = 0o200;
    pub const TRUNC: u32 = 0o1000;
    pub const APPEND: u32 = 0o2000;
    pub const DIRECTORY: u32 = 0o200000;
    pub const NOFOLLOW: u32 = 0o400000;
    pub const CLOEXEC: u32 = 0o2000000;
    pub const PATH: u32 = 0o10000000;
    pub const TMPFILE: u32 = 0o20200000;
}

/// `*at(2)` flags (Linux values).
pub mod at {
    pub const SYMLINK_NOFOLLOW: u32 = 0x100;
    pub const REMOVEDIR: u32 = 0x200;
    pub const EACCESS: u32 = 0x200;
    pub const SYMLINK_FOLLOW: u32 = 0x400;
    pub const EMPTY_PATH: u32 = 0x1000;
}

/// `renameat2(2)` flags.
pub mod rn {
    pub const NOREPLACE: u32 = 1;
    pub const EXCHANGE: u32 = 2;
}

/// `access(2)` modes.
pub mod acc {
    pub const F_OK: u32 = 0;
    pub const X_OK: u32 = 1;
    pub const W_OK: u32 = 2;
    pub const R_OK: u32 = 4;
}

/// File type bits.
pub mod ty {
    pub const S_IFMT: u32 = 0o170000;
    pub const S_IFLNK: u32 = 0o120000;
    pub const S_IFREG: u32 = 0o100000;
    pub const S_IFDIR: u32 = 0o040000;
    pub const S_IFIFO: u32 = 0o010000;
}

/// An open file, as an index into a system's own descriptor table. Both systems open files in
/// the same order, so equal handles name corresponding files.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct H(pub usize);

/// What an extended-attribute call names: a path (`getxattr`), a path whose final
/// symlink is not followed (`lgetxattr`), or a descriptor (`fgetxattr`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum XT<'a> {
    Path(&'a [u8]),
    LPath(&'a [u8]),
    Fd(H),
}

impl fmt::Display for XT<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            XT::Path(p) => write!(f, "{}", show(p)),
            XT::LPath(p) => write!(f, "l:{}", show(p)),
            XT::Fd(h) => write!(f, "fd{}", h.0),
        }
    }
}

/// The directory a relative path starts from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Dir {
    Cwd,
    Fd(H),
}

/// The identity a call is made with. Saved ids stay 0 on the kernel side so that the test thread
/// can become root again.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Cred {
    pub ruid: u32,
    pub euid: u32,
    pub rgid: u32,
    pub egid: u32,
    pub groups: Vec<u32>,
}

impl Cred {
    pub fn root() -> Cred {
        Cred::user(0, 0, &[])
    }
    pub fn user(uid: u32, gid: u32, groups: &[u32]) -> Cred {
        Cred {
            ruid: uid,
            euid: uid,
            rgid: gid,
            egid: gid,
            groups: groups.to_vec(),
        }
    }
    /// The ordinary user of the cases: uid 1000, gid 1000, groups [1000].
    pub fn u1000() -> Cred {
        Cred::user(1000, 1000, &[1000])
    }
    /// A second ordinary user: uid 1001, gid 1001, groups [1001].
    pub fn u1001() -> Cred {
        Cred::user(1001, 1001, &[1001])
    }
}

/// The fields of `struct stat` that the oracle looks at.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct St {
    pub dev: u64,
    pub ino: u64,
    pub mode: u32,
    pub nlink: u64,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub blocks: u64,
    pub rdev: u64,
    pub atime: (i64, u32),
    pub mtime: (i64, u32),
    pub ctime: (i64, u32),
}

/// One `utimensat` time argument.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum T {
    Now,
    Omit,
    Set(i64, u32),
}

/// `struct flock`, Linux values.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Lk {
    pub typ: i16,
    pub whence: i16,
    pub start: i64,
    pub len: i64,
    pub pid: i32,
}

impl Lk {
    /// A holder's pid that is the caller's own process.
    pub const ME: i32 = -1000;

    pub fn new(typ: i16, start: i64, len: i64) -> Lk {
        Lk {
            typ,
            whence: 0,
            start,
            len,
            pid: 0,
        }
    }
}

impl fmt::Display for Lk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = match self.typ {
            0 => "RD",
            1 => "WR",
            2 => "UN",
            _ => "?",
        };
        let pid = match self.pid {
            Lk::ME => "me".to_string(),
            p => p.to_string(),
        };
        write!(
            f,
            "{t} w{} {}+{} pid {pid}",
            self.whence, self.start, self.len
        )
    }
}

/// A file system under test: the host kernel or the engine.
///
/// Paths are bytes. `Dir::Cwd` with no flags means the plain call (`open`, `stat`, `lstat`,
/// `rename`, ...), so both the plain and the `*at` entry points of the engine get exercised.
pub trait Sys {
    fn name(&self) -> &'static str;
    /// Whether this system is the oracle (the kernel).
    fn is_oracle(&self) -> bool;
    /// For a system that stores its files on the host (hostfs): the tree as the kernel sees
    /// it on the host now, in the lines of [`Rec::snapshot`].
    fn host_tree(&mut self) -> Option<Vec<String>> {
        None
    }
    fn set_creds(&mut self, c: &Cred);
    fn umask(&mut self, mask: u32) -> u32;

    fn open(&mut self, d: Dir, p: &[u8], flags: u32, mode: u32) -> Res<H>;
    fn close(&mut self, h: H) -> Res<()>;
    fn read(&mut self, h: H, n: usize) -> Res<Vec<u8>>;
    fn write(&mut self, h: H, data: &[u8]) -> Res<usize>;
    fn pread(&mut self, h: H, n: usize, off: u64) -> Res<Vec<u8>>;
    fn pwrite(&mut self, h: H, data: &[u8], off: u64) -> Res<usize>;
    /// `whence`: 0 set, 1 cur, 2 end.
    fn lseek(&mut self, h: H, off: i64, whence: u32) -> Res<u64>;
    fn fstat(&mut self, h: H) -> Res<St>;
    fn ftruncate(&mut self, h: H, len: u64) -> Res<()>;
    fn fallocate(&mut self, h: H, mode: u32, off: u64, len: u64) -> Res<()>;
    /// `copy_file_range(2)`: the count, and the offsets passed (as they are after the call).
    fn copy_file_range(&mut self, c: CopyArgs) -> Res<(usize, Option<u64>, Option<u64>)>;
    fn fchmod(&mut self, h: H, mode: u32) -> Res<()>;
    fn fchown(&mut self, h: H, uid: Option<u32>, gid: Option<u32>) -> Res<()>;
    fn fchdir(&mut self, h: H) -> Res<()>;
    /// Every entry of an open directory, `.` and `..` included, with its `d_type`.
    fn getdents(&mut self, h: H) -> Res<Vec<(Vec<u8>, u8)>>;

    fn mkdir(&mut self, d: Dir, p: &[u8], mode: u32) -> Res<()>;
    fn mknod(&mut self, d: Dir, p: &[u8], mode: u32, dev: u64) -> Res<()>;
    /// `unlink`/`rmdir` (flags 0 / `REMOVEDIR` with `Cwd`) or `unlinkat`.
    fn unlink(&mut self, d: Dir, p: &[u8], flags: u32) -> Res<()>;
    fn rename(&mut self, od: Dir, old: &[u8], nd: Dir, new: &[u8], flags: u32) -> Res<()>;
    fn link(&mut self, od: Dir, old: &[u8], nd: Dir, new: &[u8], flags: u32) -> Res<()>;
    fn symlink(&mut self, target: &[u8], d: Dir, p: &[u8]) -> Res<()>;
    fn readlink(&mut self, d: Dir, p: &[u8]) -> Res<Vec<u8>>;
    /// `stat` (flags 0), `lstat` (`SYMLINK_NOFOLLOW`) or `fstatat`.
    fn stat(&mut self, d: Dir, p: &[u8], flags: u32) -> Res<St>;
    fn access(&mut self, d: Dir, p: &[u8], mode: u32, flags: u32) -> Res<()>;
    fn chmod(&mut self, d: Dir, p: &[u8], mode: u32) -> Res<()>;
    /// `chown` (flags 0), `lchown` (`SYMLINK_NOFOLLOW`) or `fchownat`.
    fn chown(
        &mut self,
        d: Dir,
        p: &[u8],
        uid: Option<u32>,
        gid: Option<u32>,
        flags: u32,
    ) -> Res<()>;
    fn truncate(&mut self, p: &[u8], len: u64) -> Res<()>;
    fn utimens(&mut self, d: Dir, p: &[u8], times: [T; 2], flags: u32) -> Res<()>;
    fn chdir(&mut self, p: &[u8]) -> Res<()>;
    fn getcwd(&mut self) -> Res<Vec<u8>>;

    /// `getxattr` with a buffer of `size` bytes: the count returned, and the bytes.
    fn getxattr(&mut self, t: XT<'_>, name: &[u8], size: usize) -> Res<(usize, Vec<u8>)>;
    fn setxattr(&mut self, t: XT<'_>, name: &[u8], value: &[u8], flags: u32) -> Res<()>;
    /// `listxattr` with a buffer of `size` bytes: the count returned, and the bytes.
    fn listxattr(&mut self, t: XT<'_>, size: usize) -> Res<(usize, Vec<u8>)>;
    fn removexattr(&mut self, t: XT<'_>, name: &[u8]) -> Res<()>;

    /// `flock(2)` with Linux's operation bits.
    fn flock(&mut self, h: H, op: u32) -> Res<()>;
    /// `fcntl(2)` with a record-lock command (`F_GETLK`, ...; Linux values) and a
    /// `struct flock` of Linux values; the `struct flock` after the call, with a holder's
    /// pid given as [`Lk::ME`] when it is this process.
    fn fcntl_lock(&mut self, h: H, cmd: i32, l: Lk) -> Res<Lk>;
}

/// A path for a trace line: escaped, and shortened when long.
pub fn show(p: &[u8]) -> String {
    if p.len() <= 64 {
        format!("\"{}\"", p.escape_ascii())
    } else {
        format!(
            "\"{}...{}\"[{} bytes]",
            p[..24].escape_ascii(),
            p[p.len() - 16..].escape_ascii(),
            p.len()
        )
    }
}

fn show_res<T>(r: &Res<T>, ok: impl FnOnce(&T) -> String) -> String {
    match r {
        Ok(v) => ok(v),
        Err(e) => format!("Err({e:?})"),
    }
}

fn type_char(mode: u32) -> char {
    match mode & ty::S_IFMT {
        ty::S_IFREG => 'f',
        ty::S_IFDIR => 'd',
        ty::S_IFLNK => 'l',
        ty::S_IFIFO => 'p',
        0o020000 => 'c',
        0o060000 => 'b',
        0o140000 => 's',
        _ => '?',
    }
}

fn dtype_char(t: u8) -> char {
    match t {
        0 => 'u',
        t => type_char(u32::from(t) << 12),
    }
}

/// A timestamp relation across a call.
fn rel(before: (i64, u32), after: (i64, u32)) -> &'static str {
    match after.cmp(&before) {
        std::cmp::Ordering::Equal => "same",
        std::cmp::Ordering::Greater => "later",
        std::cmp::Ordering::Less => "EARLIER",
    }
}

/// Records every call made through it as one normalised line.
pub struct Rec<'a> {
    pub sys: &'a mut dyn Sys,
    pub trace: Vec<String>,
    ids: HashMap<(u64, u64), usize>,
    /// The creds in force, restored by [`Rec::as_root`] callers when they are done.
    pub creds: Cred,
}

/// Fields left out of the comparison, from `ORACLE_IGNORE` (comma-separated: `dirsize`,
/// `blocks`). Only for triage, to see past one known divergence; CI leaves it unset.
fn ignored(field: &str) -> bool {
    static IGNORE: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    IGNORE
        .get_or_init(|| {
            std::env::var("ORACLE_IGNORE")
                .unwrap_or_default()
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect()
        })
        .iter()
        .any(|f| f == field)
}

/// Renders a stat with inode labels.
fn st_line(ids: &mut HashMap<(u64, u64), usize>, s: &St) -> String {
    let n = ids.len();
    let id = *ids.entry((s.dev, s.ino)).or_insert(n);
    let dir = s.mode & ty::S_IFMT == ty::S_IFDIR;
    let size = if dir && ignored("dirsize") {
        "-".to_string()
    } else {
        s.size.to_string()
    };
    let blocks = if ignored("blocks") {
        "-".to_string()
    } else {
        s.blocks.to_string()
    };
    // The device number only where it is not 0: it is 0 for all but device nodes.
    let rdev = if s.rdev != 0 {
        format!(" rd={:#x}", s.rdev)
    } else {
        String::new()
    };
    format!(
        "{} {:04o} n={} u={} g={} sz={size} bl={blocks}{rdev} #{id}",
        type_char(s.mode),
        s.mode & 0o7777,
        s.nlink,
        s.uid,
        s.gid,
    )
}

impl<'a> Rec<'a> {
    pub fn new(sys: &'a mut dyn Sys) -> Rec<'a> {
        Rec {
            sys,
            trace: Vec::new(),
            ids: HashMap::new(),
            creds: Cred::root(),
        }
    }

    pub fn is_oracle(&self) -> bool {
        self.sys.is_oracle()
    }

    /// Adds a line to the trace.
    pub fn log(&mut self, line: impl Into<String>) {
        self.trace.push(line.into());
    }

    fn unit(&mut self, what: String, r: Res<()>) -> Res<()> {
        self.log(format!("{what} -> {}", show_res(&r, |_| "Ok".into())));
        r
    }

    /// A call that may free an inode: forget the inode labels.
    fn freeing(&mut self, what: String, r: Res<()>) -> Res<()> {
        if r.is_ok() {
            self.ids.clear();
        }
        self.unit(what, r)
    }

    fn stat_res(&mut self, what: String, r: Res<St>) -> Res<St> {
        let line = match &r {
            Ok(s) => st_line(&mut self.ids, s),
            Err(e) => format!("Err({e:?})"),
        };
        self.log(format!("{what} -> {line}"));
        r
    }

    /// Asserts an outcome the case's author expects. Only the kernel is held to it: a case whose
    /// expectation the kernel does not meet is a wrong case. The engine is judged by the trace.
    pub fn expect<T: fmt::Debug>(&mut self, what: &str, got: &Res<T>, want: Result<(), E>) {
        if !self.is_oracle() {
            return;
        }
        let ok = match (got, want) {
            (Ok(_), Ok(())) => true,
            (Err(g), Err(w)) => *g == w,
            _ => false,
        };
        assert!(
            ok,
            "wrong case: the kernel gave {got:?} for {what}, the case expects {want:?}\ntrace:\n{}",
            self.trace.join("\n")
        );
    }

    /// Checks the outcome of the call just recorded against the case's expectation (see
    /// [`Rec::expect`]), and passes it on.
    pub fn want<T: fmt::Debug>(&mut self, got: Res<T>, want: Result<(), E>) -> Res<T> {
        let what = self.trace.last().cloned().unwrap_or_default();
        self.expect(&what, &got, want);
        got
    }

    /// Like [`Rec::expect`], for a boolean fact about the kernel's results.
    pub fn expect_that(&mut self, what: &str, fact: bool) {
        if self.is_oracle() {
            assert!(
                fact,
                "wrong case: on the kernel, not true: {what}\ntrace:\n{}",
                self.trace.join("\n")
            );
        }
    }

    pub fn set_creds(&mut self, c: &Cred) {
        self.log(format!(
            "creds r={}:{} e={}:{} groups={:?}",
            c.ruid, c.rgid, c.euid, c.egid, c.groups
        ));
        self.sys.set_creds(c);
        self.creds = c.clone();
    }

    pub fn as_root(&mut self) {
        self.set_creds(&Cred::root());
    }

    pub fn umask(&mut self, m: u32) -> u32 {
        let old = self.sys.umask(m);
        self.log(format!("umask({m:04o}) -> {old:04o}"));
        old
    }

    pub fn open_at(&mut self, d: Dir, p: impl AsRef<[u8]>, flags: u32, mode: u32) -> Res<H> {
        let p = p.as_ref();
        let r = self.sys.open(d, p, flags, mode);
        self.log(format!(
            "open({d:?}, {}, {flags:#o}, {mode:04o}) -> {}",
            show(p),
            show_res(&r, |h| format!("fd{}", h.0))
        ));
        r
    }

    pub fn open(&mut self, p: impl AsRef<[u8]>, flags: u32, mode: u32) -> Res<H> {
        self.open_at(Dir::Cwd, p, flags, mode)
    }

    pub fn close(&mut self, h: H) -> Res<()> {
        let r = self.sys.close(h);
        self.freeing(format!("close(fd{})", h.0), r)
    }

    /// open + close; the result of the open.
    pub fn touch(&mut self, p: impl AsRef<[u8]>, flags: u32, mode: u32) -> Res<()> {
        let p = p.as_ref();
        let r = self.sys.open(Dir::Cwd, p, flags, mode);
        let r = r.map(|h| {
            let c = self.sys.close(h);
            assert!(c.is_ok(), "close after open failed on {}", self.sys.name());
        });
        if r.is_ok() {
            self.ids.clear();
        }
        self.unit(format!("touch({}, {flags:#o}, {mode:04o})", show(p)), r)
    }

    /// Creates (or truncates) a regular file with the given contents.
    pub fn mkfile(&mut self, p: impl AsRef<[u8]>, data: &[u8]) -> Res<()> {
        let p = p.as_ref();
        let r = (|| {
            let h = self
                .sys
                .open(Dir::Cwd, p, o::CREAT | o::WRONLY | o::TRUNC, 0o644)?;
            let w = self.sys.write(h, data);
            self.sys.close(h)?;
            match w? {
                n if n == data.len() => Ok(()),
                _ => Err(E::EIO),
            }
        })();
        if r.is_ok() {
            self.ids.clear();
        }
        self.unit(format!("mkfile({}, {} bytes)", show(p), data.len()), r)
    }

    /// open O_RDONLY, read everything, close.
    pub fn cat(&mut self, p: impl AsRef<[u8]>) -> Res<Vec<u8>> {
        let p = p.as_ref();
        let r = self.read_all(p);
        self.log(format!(
            "cat({}) -> {}",
            show(p),
            show_res(&r, |v| format!("{:?}", v.escape_ascii().to_string()))
        ));
        r
    }

    fn read_all(&mut self, p: &[u8]) -> Res<Vec<u8>> {
        let h = self.sys.open(Dir::Cwd, p, o::RDONLY, 0)?;
        let mut out = Vec::new();
        let r = loop {
            match self.sys.read(h, 4096) {
                Ok(b) if b.is_empty() => break Ok(out),
                Ok(b) => out.extend_from_slice(&b),
                Err(e) => break Err(e),
            }
        };
        self.sys.close(h)?;
        r
    }

    pub fn read(&mut self, h: H, n: usize) -> Res<Vec<u8>> {
        let r = self.sys.read(h, n);
        self.log(format!(
            "read(fd{}, {n}) -> {}",
            h.0,
            show_res(&r, |v| format!("{:?}", v.escape_ascii().to_string()))
        ));
        r
    }

    pub fn write(&mut self, h: H, data: &[u8]) -> Res<usize> {
        let r = self.sys.write(h, data);
        self.log(format!(
            "write(fd{}, {} bytes) -> {}",
            h.0,
            data.len(),
            show_res(&r, |n| n.to_string())
        ));
        r
    }

    pub fn pread(&mut self, h: H, n: usize, off: u64) -> Res<Vec<u8>> {
        let r = self.sys.pread(h, n, off);
        self.log(format!(
            "pread(fd{}, {n}, {off}) -> {}",
            h.0,
            show_res(&r, |v| format!("{:?}", v.escape_ascii().to_string()))
        ));
        r
    }

    pub fn pwrite(&mut self, h: H, data: &[u8], off: u64) -> Res<usize> {
        let r = self.sys.pwrite(h, data, off);
        self.log(format!(
            "pwrite(fd{}, {} bytes, {off}) -> {}",
            h.0,
            data.len(),
            show_res(&r, |n| n.to_string())
        ));
        r
    }

    pub fn lseek(&mut self, h: H, off: i64, whence: u32) -> Res<u64> {
        let r = self.sys.lseek(h, off, whence);
        self.log(format!(
            "lseek(fd{}, {off}, {whence}) -> {}",
            h.0,
            show_res(&r, |n| n.to_string())
        ));
        r
    }

    pub fn fstat(&mut self, h: H) -> Res<St> {
        let r = self.sys.fstat(h);
        self.stat_res(format!("fstat(fd{})", h.0), r)
    }

    pub fn ftruncate(&mut self, h: H, len: u64) -> Res<()> {
        let r = self.sys.ftruncate(h, len);
        self.unit(format!("ftruncate(fd{}, {len})", h.0), r)
    }

    pub fn copy_file_range(
        &mut self,
        (fd_in, off_in): (H, Option<u64>),
        (fd_out, off_out): (H, Option<u64>),
        len: usize,
        flags: u32,
    ) -> Res<(usize, Option<u64>, Option<u64>)> {
        let c = CopyArgs {
            fd_in,
            off_in,
            fd_out,
            off_out,
            len,
            flags,
        };
        let r = self.sys.copy_file_range(c);
        self.log(format!(
            "copy_file_range(fd{}, {off_in:?}, fd{}, {off_out:?}, {len}, {flags:#x}) -> {}",
            fd_in.0,
            fd_out.0,
            show_res(&r, |(n, i, o)| format!("{n} (offsets {i:?}, {o:?})"))
        ));
        r
    }

    pub fn fallocate(&mut self, h: H, mode: u32, off: u64, len: u64) -> Res<()> {
        let r = self.sys.fallocate(h, mode, off, len);
        self.unit(format!("fallocate(fd{}, {mode:#x}, {off}, {len})", h.0), r)
    }

    pub fn fchmod(&mut self, h: H, mode: u32) -> Res<()> {
        let r = self.sys.fchmod(h, mode);
        self.unit(format!("fchmod(fd{}, {mode:04o})", h.0), r)
    }

    pub fn fchown(&mut self, h: H, uid: Option<u32>, gid: Option<u32>) -> Res<()> {
        let r = self.sys.fchown(h, uid, gid);
        self.unit(format!("fchown(fd{}, {uid:?}, {gid:?})", h.0), r)
    }

    pub fn fchdir(&mut self, h: H) -> Res<()> {
        let r = self.sys.fchdir(h);
        self.unit(format!("fchdir(fd{})", h.0), r)
    }

    /// Entries of an open directory, in the system's order but compared as a sorted list.
    pub fn getdents(&mut self, h: H) -> Res<Vec<(Vec<u8>, u8)>> {
        let r = self.sys.getdents(h);
        let line = show_res(&r, |v| {
            let mut v = v.clone();
            v.sort();
            dents_line(&v)
        });
        self.log(format!("getdents(fd{}) -> {line}", h.0));
        r
    }

    /// Sorted names (without `.` and `..`) and types of a directory: open, getdents, close.
    pub fn readdir(&mut self, p: impl AsRef<[u8]>) -> Res<Vec<(Vec<u8>, u8)>> {
        let p = p.as_ref();
        let r = readdir_raw(self.sys, p);
        self.log(format!(
            "readdir({}) -> {}",
            show(p),
            show_res(&r, |v| dents_line(v))
        ));
        r
    }

    pub fn mkdir_at(&mut self, d: Dir, p: impl AsRef<[u8]>, mode: u32) -> Res<()> {
        let p = p.as_ref();
        let r = self.sys.mkdir(d, p, mode);
        self.unit(format!("mkdir({d:?}, {}, {mode:04o})", show(p)), r)
    }

    pub fn mkdir(&mut self, p: impl AsRef<[u8]>, mode: u32) -> Res<()> {
        self.mkdir_at(Dir::Cwd, p, mode)
    }

    pub fn mknod(&mut self, p: impl AsRef<[u8]>, mode: u32) -> Res<()> {
        self.mknod_dev(p, mode, 0)
    }

    /// `mknod` with a device number.
    pub fn mknod_dev(&mut self, p: impl AsRef<[u8]>, mode: u32, dev: u64) -> Res<()> {
        let p = p.as_ref();
        let r = self.sys.mknod(Dir::Cwd, p, mode, dev);
        self.unit(format!("mknod({}, {mode:o}, {dev:#x})", show(p)), r)
    }

    pub fn unlink_at(&mut self, d: Dir, p: impl AsRef<[u8]>, flags: u32) -> Res<()> {
        let p = p.as_ref();
        let r = self.sys.unlink(d, p, flags);
        self.freeing(format!("unlinkat({d:?}, {}, {flags:#x})", show(p)), r)
    }

    pub fn unlink(&mut self, p: impl AsRef<[u8]>) -> Res<()> {
        self.unlink_at(Dir::Cwd, p, 0)
    }

    pub fn rmdir(&mut self, p: impl AsRef<[u8]>) -> Res<()> {
        self.unlink_at(Dir::Cwd, p, at::REMOVEDIR)
    }

    pub fn rename_at(
        &mut self,
        od: Dir,
        old: impl AsRef<[u8]>,
        nd: Dir,
        new: impl AsRef<[u8]>,
        flags: u32,
    ) -> Res<()> {
        let (old, new) = (old.as_ref(), new.as_ref());
        let r = self.sys.rename(od, old, nd, new, flags);
        self.freeing(
            format!(
                "rename({od:?}, {}, {nd:?}, {}, {flags})",
                show(old),
                show(new)
            ),
            r,
        )
    }

    pub fn rename(&mut self, old: impl AsRef<[u8]>, new: impl AsRef<[u8]>) -> Res<()> {
        self.rename_at(Dir::Cwd, old, Dir::Cwd, new, 0)
    }

    pub fn rename2(&mut self, old: impl AsRef<[u8]>, new: impl AsRef<[u8]>, flags: u32) -> Res<()> {
        self.rename_at(Dir::Cwd, old, Dir::Cwd, new, flags)
    }

    pub fn link_at(
        &mut self,
        od: Dir,
        old: impl AsRef<[u8]>,
        nd: Dir,
        new: impl AsRef<[u8]>,
        flags: u32,
    ) -> Res<()> {
        let (old, new) = (old.as_ref(), new.as_ref());
        let r = self.sys.link(od, old, nd, new, flags);
        self.unit(
            format!(
                "link({od:?}, {}, {nd:?}, {}, {flags:#x})",
                show(old),
                show(new)
            ),
            r,
        )
    }

    pub fn link(&mut self, old: impl AsRef<[u8]>, new: impl AsRef<[u8]>) -> Res<()> {
        self.link_at(Dir::Cwd, old, Dir::Cwd, new, 0)
    }

    pub fn symlink_at(&mut self, target: impl AsRef<[u8]>, d: Dir, p: impl AsRef<[u8]>) -> Res<()> {
        let (target, p) = (target.as_ref(), p.as_ref());
        let r = self.sys.symlink(target, d, p);
        self.unit(format!("symlink({}, {d:?}, {})", show(target), show(p)), r)
    }

    pub fn symlink(&mut self, target: impl AsRef<[u8]>, p: impl AsRef<[u8]>) -> Res<()> {
        self.symlink_at(target, Dir::Cwd, p)
    }

    pub fn readlink_at(&mut self, d: Dir, p: impl AsRef<[u8]>) -> Res<Vec<u8>> {
        let p = p.as_ref();
        let r = self.sys.readlink(d, p);
        self.log(format!(
            "readlink({d:?}, {}) -> {}",
            show(p),
            show_res(&r, |v| show(v))
        ));
        r
    }

    pub fn readlink(&mut self, p: impl AsRef<[u8]>) -> Res<Vec<u8>> {
        self.readlink_at(Dir::Cwd, p)
    }

    pub fn getxattr(&mut self, t: XT<'_>, name: impl AsRef<[u8]>, size: usize) -> Res<Vec<u8>> {
        let name = name.as_ref();
        let r = self.sys.getxattr(t, name, size);
        self.log(format!(
            "getxattr({t}, {}, {size}) -> {}",
            show(name),
            show_res(&r, |(n, v)| format!("{n} {}", show(v)))
        ));
        r.map(|(_, v)| v)
    }

    pub fn setxattr(
        &mut self,
        t: XT<'_>,
        name: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        flags: u32,
    ) -> Res<()> {
        let (name, value) = (name.as_ref(), value.as_ref());
        let r = self.sys.setxattr(t, name, value, flags);
        self.unit(
            format!("setxattr({t}, {}, {}, {flags})", show(name), show(value)),
            r,
        )
    }

    /// `listxattr`; the names are shown sorted when the call is asked to `sort` (a system
    /// may list them in another order than the kernel's tmpfs, as hostfs over another
    /// file system would).
    pub fn listxattr(&mut self, t: XT<'_>, size: usize) -> Res<Vec<u8>> {
        let r = self.sys.listxattr(t, size);
        self.log(format!(
            "listxattr({t}, {size}) -> {}",
            show_res(&r, |(n, v)| format!("{n} {}", show(v)))
        ));
        r.map(|(_, v)| v)
    }

    pub fn removexattr(&mut self, t: XT<'_>, name: impl AsRef<[u8]>) -> Res<()> {
        let name = name.as_ref();
        let r = self.sys.removexattr(t, name);
        self.unit(format!("removexattr({t}, {})", show(name)), r)
    }

    pub fn flock(&mut self, h: H, op: u32) -> Res<()> {
        let r = self.sys.flock(h, op);
        self.unit(format!("flock(fd{}, {op:#x})", h.0), r)
    }

    /// `fcntl(h, cmd, l)`; the answer is logged (and compared) whole.
    pub fn fcntl_lock(&mut self, h: H, cmd: i32, l: Lk) -> Res<Lk> {
        let r = self.sys.fcntl_lock(h, cmd, l);
        self.log(format!(
            "fcntl(fd{}, {cmd}, {l}) -> {}",
            h.0,
            show_res(&r, |l| l.to_string())
        ));
        r
    }

    /// `fcntl(h, cmd, l)`, its answer unused (the log has it).
    pub fn lk(&mut self, h: H, cmd: i32, l: Lk) -> Res<()> {
        self.fcntl_lock(h, cmd, l).map(|_| ())
    }

    pub fn stat_at(&mut self, d: Dir, p: impl AsRef<[u8]>, flags: u32) -> Res<St> {
        let p = p.as_ref();
        let r = self.sys.stat(d, p, flags);
        self.stat_res(format!("statat({d:?}, {}, {flags:#x})", show(p)), r)
    }

    pub fn stat(&mut self, p: impl AsRef<[u8]>) -> Res<St> {
        self.stat_at(Dir::Cwd, p, 0)
    }

    pub fn lstat(&mut self, p: impl AsRef<[u8]>) -> Res<St> {
        self.stat_at(Dir::Cwd, p, at::SYMLINK_NOFOLLOW)
    }

    pub fn access_at(&mut self, d: Dir, p: impl AsRef<[u8]>, mode: u32, flags: u32) -> Res<()> {
        let p = p.as_ref();
        let r = self.sys.access(d, p, mode, flags);
        self.unit(format!("access({d:?}, {}, {mode}, {flags:#x})", show(p)), r)
    }

    pub fn access(&mut self, p: impl AsRef<[u8]>, mode: u32) -> Res<()> {
        self.access_at(Dir::Cwd, p, mode, 0)
    }

    pub fn chmod(&mut self, p: impl AsRef<[u8]>, mode: u32) -> Res<()> {
        let p = p.as_ref();
        let r = self.sys.chmod(Dir::Cwd, p, mode);
        self.unit(format!("chmod({}, {mode:04o})", show(p)), r)
    }

    pub fn chown_at(
        &mut self,
        d: Dir,
        p: impl AsRef<[u8]>,
        uid: Option<u32>,
        gid: Option<u32>,
        flags: u32,
    ) -> Res<()> {
        let p = p.as_ref();
        let r = self.sys.chown(d, p, uid, gid, flags);
        self.unit(
            format!("chown({d:?}, {}, {uid:?}, {gid:?}, {flags:#x})", show(p)),
            r,
        )
    }

    pub fn chown(&mut self, p: impl AsRef<[u8]>, uid: Option<u32>, gid: Option<u32>) -> Res<()> {
        self.chown_at(Dir::Cwd, p, uid, gid, 0)
    }

    pub fn lchown(&mut self, p: impl AsRef<[u8]>, uid: Option<u32>, gid: Option<u32>) -> Res<()> {
        self.chown_at(Dir::Cwd, p, uid, gid, at::SYMLINK_NOFOLLOW)
    }

    pub fn truncate(&mut self, p: impl AsRef<[u8]>, len: u64) -> Res<()> {
        let p = p.as_ref();
        let r = self.sys.truncate(p, len);
        self.unit(format!("truncate({}, {len})", show(p)), r)
    }

    pub fn utimens_at(
        &mut self,
        d: Dir,
        p: impl AsRef<[u8]>,
        times: [T; 2],
        flags: u32,
    ) -> Res<()> {
        let p = p.as_ref();
        let r = self.sys.utimens(d, p, times, flags);
        self.unit(
            format!("utimensat({d:?}, {}, {times:?}, {flags:#x})", show(p)),
            r,
        )
    }

    pub fn utimens(&mut self, p: impl AsRef<[u8]>, times: [T; 2]) -> Res<()> {
        self.utimens_at(Dir::Cwd, p, times, 0)
    }

    pub fn chdir(&mut self, p: impl AsRef<[u8]>) -> Res<()> {
        let p = p.as_ref();
        let r = self.sys.chdir(p);
        self.unit(format!("chdir({})", show(p)), r)
    }

    pub fn getcwd(&mut self) -> Res<Vec<u8>> {
        let r = self.sys.getcwd();
        self.log(format!("getcwd() -> {}", show_res(&r, |v| show(v))));
        r
    }

    /// The timestamps of a path (lstat), not recorded; the base of a later [`Rec::times_rel`].
    /// Sleeps first so that the call under test lands on a later clock tick.
    pub fn times(&mut self, p: impl AsRef<[u8]>) -> St {
        let s = self
            .sys
            .stat(Dir::Cwd, p.as_ref(), at::SYMLINK_NOFOLLOW)
            .unwrap_or_else(|e| panic!("times({}): {e:?}", show(p.as_ref())));
        std::thread::sleep(std::time::Duration::from_millis(TICK_MS));
        s
    }

    /// `p`'s times with no sleep after (see [`Rec::times`]): for a change that must show
    /// right after a stat read them (multigrain timestamps).
    pub fn times_at_once(&mut self, p: impl AsRef<[u8]>) -> St {
        self.sys
            .stat(Dir::Cwd, p.as_ref(), at::SYMLINK_NOFOLLOW)
            .unwrap_or_else(|e| panic!("times_at_once({}): {e:?}", show(p.as_ref())))
    }

    /// Records how atime, mtime and ctime of `p` moved since `before` (same / later).
    pub fn times_rel(&mut self, label: &str, p: impl AsRef<[u8]>, before: &St) {
        let p = p.as_ref();
        let line = match self.sys.stat(Dir::Cwd, p, at::SYMLINK_NOFOLLOW) {
            Ok(s) => format!(
                "a={} m={} c={}",
                rel(before.atime, s.atime),
                rel(before.mtime, s.mtime),
                rel(before.ctime, s.ctime)
            ),
            Err(e) => format!("Err({e:?})"),
        };
        self.log(format!("times[{label}]({}) -> {line}", show(p)));
    }

    /// Records only the mtime/ctime relations (for calls where atime follows mount options).
    pub fn mc_rel(&mut self, label: &str, p: impl AsRef<[u8]>, before: &St) {
        let p = p.as_ref();
        let line = match self.sys.stat(Dir::Cwd, p, at::SYMLINK_NOFOLLOW) {
            Ok(s) => format!(
                "m={} c={}",
                rel(before.mtime, s.mtime),
                rel(before.ctime, s.ctime)
            ),
            Err(e) => format!("Err({e:?})"),
        };
        self.log(format!("mctimes[{label}]({}) -> {line}", show(p)));
    }

    /// The whole tree under `/`, walked as root, appended to the trace (see [`tree_lines`]).
    pub fn snapshot(&mut self) {
        let saved = self.creds.clone();
        self.sys.set_creds(&Cred::root());
        let lines = tree_lines(self.sys);
        self.sys.set_creds(&saved);
        for l in lines {
            self.log(format!("tree {l}"));
        }
    }
}

/// The lines of [`Rec::snapshot`] for `sys`, as root.
pub fn tree_of(sys: &mut dyn Sys) -> Vec<String> {
    sys.set_creds(&Cred::root());
    tree_lines(sys)
        .into_iter()
        .map(|l| format!("tree {l}"))
        .collect()
}

/// Whether the host kernel stamps tmpfs times with multigrain timestamps (Linux 6.13 and
/// later): a change made right after a stat read the times shows in them, within a tick.
pub fn multigrain_kernel() -> bool {
    // uname(2), not /proc: the test process is chrooted into a tmpfs directory.
    // SAFETY: `u` is a writable `utsname`; `uname` fills it with NUL-terminated fields.
    let release = unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut u) != 0 {
            return false;
        }
        std::ffi::CStr::from_ptr(u.release.as_ptr())
            .to_string_lossy()
            .into_owned()
    };
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (6, 13)
}

/// Long enough for the kernel's coarse clock to tick (HZ is at least 100).
pub const TICK_MS: u64 = 11;

fn dents_line(v: &[(Vec<u8>, u8)]) -> String {
    let mut s = String::from("[");
    for (i, (n, t)) in v.iter().enumerate() {
        if i > 0 {
            s.push(' ');
        }
        let _ = write!(s, "{}:{}", n.escape_ascii(), dtype_char(*t));
    }
    s.push(']');
    s
}

/// Sorted entries of a directory, without `.` and `..`.
pub fn readdir_raw(sys: &mut dyn Sys, p: &[u8]) -> Res<Vec<(Vec<u8>, u8)>> {
    let h = sys.open(Dir::Cwd, p, o::RDONLY | o::DIRECTORY, 0)?;
    let r = sys.getdents(h);
    sys.close(h)?;
    let mut v: Vec<_> = r?
        .into_iter()
        .filter(|(n, _)| n != b"." && n != b"..")
        .collect();
    v.sort();
    Ok(v)
}

fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = dir.to_vec();
    if p.last() != Some(&b'/') {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

/// Every name under `/` in sorted order with its type, permissions, link count, owner, size,
/// blocks, an inode label that shows hard links (labels are given in walk order, so two systems
/// with the same structure give the same labels), symlink target and file contents. Must be
/// called as root.
pub fn tree_lines(sys: &mut dyn Sys) -> Vec<String> {
    let mut ids = HashMap::new();
    let mut out = Vec::new();
    let mut stack = vec![b"/".to_vec()];
    while let Some(dir) = stack.pop() {
        let st = sys.stat(Dir::Cwd, &dir, at::SYMLINK_NOFOLLOW);
        out.push(format!(
            "{} {}",
            show(&dir),
            show_res(&st, |s| st_line(&mut ids, s))
        ));
        let ents = match readdir_raw(sys, &dir) {
            Ok(e) => e,
            Err(e) => {
                out.push(format!("{} readdir Err({e:?})", show(&dir)));
                continue;
            }
        };
        let mut subdirs = Vec::new();
        for (name, dt) in ents {
            let p = join(&dir, &name);
            let st = sys.stat(Dir::Cwd, &p, at::SYMLINK_NOFOLLOW);
            let mut line = format!(
                "{} d_type={} {}",
                show(&p),
                dtype_char(dt),
                show_res(&st, |s| st_line(&mut ids, s))
            );
            match st {
                Ok(s) if s.mode & ty::S_IFMT == ty::S_IFDIR => subdirs.push(p),
                Ok(s) if s.mode & ty::S_IFMT == ty::S_IFLNK => {
                    let t = sys.readlink(Dir::Cwd, &p);
                    let _ = write!(line, " -> {}", show_res(&t, |t| show(t)));
                }
                Ok(s) if s.mode & ty::S_IFMT == ty::S_IFREG => {
                    let h = sys.open(Dir::Cwd, &p, o::RDONLY | o::NOFOLLOW, 0);
                    let data = h.and_then(|h| {
                        let d = sys.pread(h, 1 << 16, 0);
                        sys.close(h)?;
                        d
                    });
                    let _ = write!(
                        line,
                        " data={}",
                        show_res(&data, |d| format!("{:?}", d.escape_ascii().to_string()))
                    );
                }
                _ => {}
            }
            out.push(line);
        }
        // Pop in sorted order.
        stack.extend(subdirs.into_iter().rev());
    }
    out
}

/// The first place where two traces differ, with context, or `None`.
pub fn diff(a_name: &str, a: &[String], b_name: &str, b: &[String]) -> Option<String> {
    let first = (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i))?;
    let mut s = String::new();
    let lo = first.saturating_sub(12);
    let _ = writeln!(s, "traces differ at line {first}:");
    for (i, line) in a.iter().enumerate().take(first).skip(lo) {
        let _ = writeln!(s, "   {i:>3}  {line}");
    }
    let _ = writeln!(
        s,
        " ! {:>3}  {a_name:>6}: {}",
        first,
        a.get(first).map_or("<end>", |l| l.as_str())
    );
    let _ = writeln!(
        s,
        " ! {:>3}  {b_name:>6}: {}",
        first,
        b.get(first).map_or("<end>", |l| l.as_str())
    );
    let rest = a.len().max(b.len()) - first - 1;
    let extra = (first + 1..a.len().max(b.len()))
        .filter(|&i| a.get(i) != b.get(i))
        .count();
    let _ = writeln!(
        s,
        "   ({rest} more lines, {extra} of them different; next kernel lines:)"
    );
    for l in a.iter().skip(first + 1).take(6) {
        let _ = writeln!(s, "        {l}");
    }
    if std::env::var_os("ORACLE_FULL").is_some() {
        let _ = writeln!(s, "   all lines after the first difference:");
        for i in first + 1..a.len().max(b.len()) {
            match (a.get(i), b.get(i)) {
                (x, y) if x == y => {
                    let _ = writeln!(s, "   {i:>3}  {}", x.map_or("", |l| l.as_str()));
                }
                (x, y) => {
                    let _ = writeln!(
                        s,
                        " ! {i:>3}  {a_name:>6}: {}",
                        x.map_or("<end>", |l| l.as_str())
                    );
                    let _ = writeln!(
                        s,
                        " ! {i:>3}  {b_name:>6}: {}",
                        y.map_or("<end>", |l| l.as_str())
                    );
                }
            }
        }
    }
    Some(s)
}
