//! Model-based random plans: proptest writes sequences of 20-40 operations over a tiny path
//! alphabet (`.`, `..`, `a`, `b`, `c`, a symlink `l` -> `a`, a self-loop `loop`, and `dangling`
//! -> `c`), with permission changes and switches between root and two users. Each plan runs on
//! the host kernel's tmpfs and on the engine; every result (value or errno) must match, and so
//! must the whole tree at the end (names, types, modes, owners, sizes, link counts, hard-link
//! identity, symlink targets, contents).
//!
//! `PROPTEST_CASES` sets the number of plans (default 3000: about 5 s in release, 40 s in debug).
//! A failing plan is shrunk (steps that do not matter become `Nop`) and printed with the first
//! difference between the traces. Needs root; skipped otherwise.

mod common;

use common::kernel::protections;
use common::oracle::{acc, at, o, rn, ty, Cred, Dir, Res, St, Sys, H, T, XT};
use common::{Outcome, Rec};
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};
use std::fmt;

/// A path made of alphabet components.
#[derive(Clone, PartialEq, Eq)]
struct P(Vec<u8>);

impl fmt::Debug for P {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = String::from_utf8_lossy(&self.0)
            .replace(N256, "<y*256>")
            .replace(N255, "<x*255>");
        write!(f, "{s:?}")
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Who {
    Root,
    U1000,
    U1001,
}

impl Who {
    fn cred(self) -> Cred {
        match self {
            Who::Root => Cred::root(),
            Who::U1000 => Cred::u1000(),
            Who::U1001 => Cred::u1001(),
        }
    }
}

#[derive(Clone)]
enum Op {
    /// Does nothing. The first alternative, so that shrinking turns irrelevant steps into it.
    Nop,
    Mkdir(P, u32),
    Rmdir(P),
    /// open(O_CREAT | ...) + close.
    Create(P, u32, u32),
    Unlink(P),
    Rename(P, P, u32),
    Link(P, P, bool),
    Symlink(&'static str, P),
    Stat(P),
    Lstat(P),
    Readlink(P),
    Chmod(P, u32),
    Chown(P, Option<u32>, Option<u32>),
    Truncate(P, u64),
    /// open(flags) + write + close.
    Write(P, u32, Vec<u8>),
    /// open(O_RDONLY) + read everything + close.
    Read(P),
    Readdir(P),
    Chdir(P),
    Getcwd,
    Access(P, u32, u32),
    Creds(Who),
    Umask(u32),
    /// Opens a descriptor kept for the `*Held` operations (closing the previous one).
    Hold(P, u32),
    FstatHeld,
    FchdirHeld,
    GetdentsHeld,
    /// mkdirat/statat/openat(O_CREAT) relative to the held descriptor.
    MkdirAtHeld(P),
    StatAtHeld(P),
    CreateAtHeld(P),
    CloseHeld,
    /// renameat/unlinkat relative to the held descriptor.
    RenameAtHeld(P, P),
    UnlinkAtHeld(P, u32),
    /// mknod of a regular file (type bits given or 0). No FIFOs: opening one would block.
    Mknod(P, u32),
    /// utimensat with one of a few time pairs (results only; times are not compared).
    Utimens(P, u8),
    /// fchmod/fchown/ftruncate/write/pwrite/lseek on the held descriptor (which may be a
    /// directory, `O_PATH`, read-only or removed: each has its errno).
    FchmodHeld(u32),
    FchownHeld(Option<u32>, Option<u32>),
    FtruncateHeld(u64),
    WriteHeld(Vec<u8>),
    PwriteHeld(Vec<u8>, u64),
    /// read of up to 16 bytes, after an lseek to the offset.
    ReadHeld(u64),
    /// linkat(held, old, AT_FDCWD, new, flags); an empty old name with `AT_EMPTY_PATH`.
    LinkAtHeld(P, P, u32),
    SymlinkAtHeld(&'static str, P),
    ReadlinkAtHeld(P),
    /// faccessat(held, path, mode, flags).
    AccessAtHeld(P, u32, u32),
    /// fchownat(held, path, uid, gid, flags), `AT_EMPTY_PATH` with an empty path.
    ChownAtHeld(P, Option<u32>, Option<u32>, u32),
    /// utimensat(held, path, times, flags).
    UtimensAtHeld(P, u8, u32),
    /// renameat2(held, old, held, new, flags).
    Rename2AtHeld(P, P, u32),
    /// setxattr/getxattr/listxattr/removexattr on a path (following a final symlink, or
    /// not) or on the held descriptor.
    Setxattr(XOn, &'static str, Vec<u8>, u32),
    Getxattr(XOn, &'static str, usize),
    Listxattr(XOn, usize),
    Removexattr(XOn, &'static str),
}

/// What an xattr call names.
#[derive(Clone, Debug)]
enum XOn {
    Path(P),
    LPath(P),
    Held,
}

const TIME_PAIRS: [[T; 2]; 5] = [
    [T::Now, T::Now],
    [T::Now, T::Omit],
    [T::Omit, T::Omit],
    [T::Set(1_000_000, 7), T::Omit],
    [T::Set(5, 0), T::Now],
];

/// One line per step (proptest prints failing inputs with `{:#?}`), modes in octal.
impl fmt::Debug for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Nop => write!(f, "Nop"),
            Op::Mkdir(p, m) => write!(f, "Mkdir({p:?}, {m:#o})"),
            Op::Rmdir(p) => write!(f, "Rmdir({p:?})"),
            Op::Create(p, fl, m) => write!(f, "Create({p:?}, {fl:#o}, {m:#o})"),
            Op::Unlink(p) => write!(f, "Unlink({p:?})"),
            Op::Rename(a, b, fl) => write!(f, "Rename({a:?}, {b:?}, {fl})"),
            Op::Link(a, b, fo) => write!(f, "Link({a:?}, {b:?}, follow={fo})"),
            Op::Symlink(t, p) => write!(f, "Symlink({t:?}, {p:?})"),
            Op::Stat(p) => write!(f, "Stat({p:?})"),
            Op::Lstat(p) => write!(f, "Lstat({p:?})"),
            Op::Readlink(p) => write!(f, "Readlink({p:?})"),
            Op::Chmod(p, m) => write!(f, "Chmod({p:?}, {m:#o})"),
            Op::Chown(p, u, g) => write!(f, "Chown({p:?}, {u:?}, {g:?})"),
            Op::Truncate(p, n) => write!(f, "Truncate({p:?}, {n})"),
            Op::Write(p, fl, d) => {
                write!(f, "Write({p:?}, {fl:#o}, {:?})", String::from_utf8_lossy(d))
            }
            Op::Read(p) => write!(f, "Read({p:?})"),
            Op::Readdir(p) => write!(f, "Readdir({p:?})"),
            Op::Chdir(p) => write!(f, "Chdir({p:?})"),
            Op::Getcwd => write!(f, "Getcwd"),
            Op::Access(p, m, fl) => write!(f, "Access({p:?}, {m}, {fl:#x})"),
            Op::Creds(w) => write!(f, "Creds({w:?})"),
            Op::Umask(m) => write!(f, "Umask({m:#o})"),
            Op::Hold(p, fl) => write!(f, "Hold({p:?}, {fl:#o})"),
            Op::FstatHeld => write!(f, "FstatHeld"),
            Op::FchdirHeld => write!(f, "FchdirHeld"),
            Op::GetdentsHeld => write!(f, "GetdentsHeld"),
            Op::MkdirAtHeld(p) => write!(f, "MkdirAtHeld({p:?})"),
            Op::StatAtHeld(p) => write!(f, "StatAtHeld({p:?})"),
            Op::CreateAtHeld(p) => write!(f, "CreateAtHeld({p:?})"),
            Op::CloseHeld => write!(f, "CloseHeld"),
            Op::RenameAtHeld(a, b) => write!(f, "RenameAtHeld({a:?}, {b:?})"),
            Op::UnlinkAtHeld(p, fl) => write!(f, "UnlinkAtHeld({p:?}, {fl:#x})"),
            Op::Mknod(p, m) => write!(f, "Mknod({p:?}, {m:#o})"),
            Op::Utimens(p, k) => write!(f, "Utimens({p:?}, {:?})", TIME_PAIRS[*k as usize]),
            Op::FchmodHeld(m) => write!(f, "FchmodHeld({m:#o})"),
            Op::FchownHeld(u, g) => write!(f, "FchownHeld({u:?}, {g:?})"),
            Op::FtruncateHeld(n) => write!(f, "FtruncateHeld({n})"),
            Op::WriteHeld(d) => write!(f, "WriteHeld({:?})", String::from_utf8_lossy(d)),
            Op::PwriteHeld(d, o) => {
                write!(f, "PwriteHeld({:?}, {o})", String::from_utf8_lossy(d))
            }
            Op::ReadHeld(o) => write!(f, "ReadHeld({o})"),
            Op::LinkAtHeld(a, b, fl) => write!(f, "LinkAtHeld({a:?}, {b:?}, {fl:#x})"),
            Op::SymlinkAtHeld(t, p) => write!(f, "SymlinkAtHeld({t:?}, {p:?})"),
            Op::ReadlinkAtHeld(p) => write!(f, "ReadlinkAtHeld({p:?})"),
            Op::AccessAtHeld(p, m, fl) => write!(f, "AccessAtHeld({p:?}, {m}, {fl:#x})"),
            Op::ChownAtHeld(p, u, g, fl) => write!(f, "ChownAtHeld({p:?}, {u:?}, {g:?}, {fl:#x})"),
            Op::UtimensAtHeld(p, k, fl) => {
                write!(
                    f,
                    "UtimensAtHeld({p:?}, {:?}, {fl:#x})",
                    TIME_PAIRS[*k as usize]
                )
            }
            Op::Rename2AtHeld(a, b, fl) => write!(f, "Rename2AtHeld({a:?}, {b:?}, {fl})"),
            Op::Setxattr(t, n, v, fl) => {
                write!(
                    f,
                    "Setxattr({t:?}, {n:?}, {:?}, {fl})",
                    String::from_utf8_lossy(v)
                )
            }
            Op::Getxattr(t, n, sz) => write!(f, "Getxattr({t:?}, {n:?}, {sz})"),
            Op::Listxattr(t, sz) => write!(f, "Listxattr({t:?}, {sz})"),
            Op::Removexattr(t, n) => write!(f, "Removexattr({t:?}, {n:?})"),
        }
    }
}

/// The longest allowed name, and one byte more.
const N255: &str = const_str_255();
const N256: &str = const_str_256();

const fn const_str_255() -> &'static str {
    const B: [u8; 255] = [b'x'; 255];
    match std::str::from_utf8(&B) {
        Ok(s) => s,
        Err(_) => panic!(),
    }
}

const fn const_str_256() -> &'static str {
    const B: [u8; 256] = [b'y'; 256];
    match std::str::from_utf8(&B) {
        Ok(s) => s,
        Err(_) => panic!(),
    }
}

fn comp() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        6 => Just("a"),
        6 => Just("b"),
        4 => Just("c"),
        1 => Just("."),
        2 => Just(".."),
        2 => Just("l"),
        1 => Just("loop"),
        1 => Just("dangling"),
        1 => Just(N255),
        1 => Just(N256),
    ]
}

fn path() -> impl Strategy<Value = P> {
    let comps = prop_oneof![
        5 => prop::collection::vec(comp(), 1..=1),
        4 => prop::collection::vec(comp(), 2..=2),
        2 => prop::collection::vec(comp(), 3..=3),
        1 => prop::collection::vec(comp(), 4..=4),
    ];
    (any::<bool>(), comps, prop::bool::weighted(0.15)).prop_map(|(abs, comps, slash)| {
        let mut p = Vec::new();
        if abs {
            p.push(b'/');
        }
        p.extend_from_slice(comps.join("/").as_bytes());
        if slash {
            p.push(b'/');
        }
        P(p)
    })
}

fn modes(sticky_ok: bool) -> impl Strategy<Value = u32> {
    let mut v = vec![
        0o755, 0o700, 0o644, 0o600, 0o000, 0o777, 0o2775, 0o311, 0o4755, 0o444, 0o733,
    ];
    if sticky_ok {
        v.push(0o1777);
        v.push(0o1733);
    }
    prop::sample::select(v)
}

fn op() -> impl Strategy<Value = Op> {
    // With the host's symlink/regular/fifo protections on, sticky world-writable directories
    // bring in host policy that no file system implements; keep them out of the plans.
    let pr = protections();
    let sticky_ok = !(pr.symlinks || pr.regular || pr.fifos);
    let mut mkdir_modes = vec![0o755, 0o700, 0o777];
    if sticky_ok {
        mkdir_modes.push(0o1777);
    }
    let create_flags = prop::sample::select(vec![
        o::CREAT | o::WRONLY,
        o::CREAT | o::EXCL | o::WRONLY,
        o::CREAT | o::TRUNC | o::RDWR,
        o::CREAT | o::RDONLY,
        o::CREAT | o::NOFOLLOW | o::WRONLY,
        o::CREAT | o::DIRECTORY | o::RDONLY,
        o::RDONLY | o::DIRECTORY,
        o::PATH,
        o::WRONLY | o::TRUNC,
    ]);
    let write_flags = prop::sample::select(vec![
        o::WRONLY,
        o::WRONLY | o::APPEND,
        o::WRONLY | o::TRUNC,
        o::RDWR,
    ]);
    let hold_flags = prop::sample::select(vec![
        o::RDONLY | o::DIRECTORY,
        o::PATH,
        o::RDONLY,
        o::PATH | o::NOFOLLOW,
    ]);
    let target = prop::sample::select(vec![
        "a", "b", "c", "/a", "../a", ".", "..", "loop", "a/b", "missing", "l", "", "b/", "l/",
    ]);
    let id = prop::sample::select(vec![None, Some(0), Some(1000), Some(1001)]);
    let data = prop::collection::vec(prop::sample::select(b"abcde".to_vec()), 0..8);
    prop_oneof![
        1 => Just(Op::Nop),
        6 => (path(), prop::sample::select(mkdir_modes)).prop_map(|(p, m)| Op::Mkdir(p, m)),
        3 => path().prop_map(Op::Rmdir),
        6 => (path(), create_flags, prop::sample::select(vec![0o644, 0o600, 0o755, 0o000, 0o4777]))
            .prop_map(|(p, f, m)| Op::Create(p, f, m)),
        3 => path().prop_map(Op::Unlink),
        5 => (path(), path(), prop::sample::select(vec![0, 0, 0, rn::NOREPLACE, rn::EXCHANGE]))
            .prop_map(|(a, b, f)| Op::Rename(a, b, f)),
        3 => (path(), path(), prop::bool::weighted(0.3)).prop_map(|(a, b, f)| Op::Link(a, b, f)),
        2 => (target.clone(), path()).prop_map(|(t, p)| Op::Symlink(t, p)),
        4 => path().prop_map(Op::Stat),
        3 => path().prop_map(Op::Lstat),
        1 => path().prop_map(Op::Readlink),
        3 => (path(), modes(sticky_ok)).prop_map(|(p, m)| Op::Chmod(p, m)),
        1 => (path(), id.clone(), id.clone()).prop_map(|(p, u, g)| Op::Chown(p, u, g)),
        2 => (path(), prop::sample::select(vec![0u64, 1, 5, 4096, 4097, 10000]))
            .prop_map(|(p, n)| Op::Truncate(p, n)),
        3 => (path(), write_flags, data.clone()).prop_map(|(p, f, d)| Op::Write(p, f, d)),
        2 => path().prop_map(Op::Read),
        2 => path().prop_map(Op::Readdir),
        2 => path().prop_map(Op::Chdir),
        1 => Just(Op::Getcwd),
        2 => (
            path(),
            prop::sample::select(vec![acc::F_OK, acc::R_OK, acc::W_OK, acc::X_OK, 7]),
            prop::sample::select(vec![0, 0, at::EACCESS, at::SYMLINK_NOFOLLOW]),
        )
            .prop_map(|(p, m, f)| Op::Access(p, m, f)),
        3 => prop::sample::select(vec![Who::Root, Who::Root, Who::U1000, Who::U1001]).prop_map(Op::Creds),
        1 => prop::sample::select(vec![0o022, 0o077, 0o000, 0o027]).prop_map(Op::Umask),
        2 => (path(), hold_flags).prop_map(|(p, f)| Op::Hold(p, f)),
        1 => Just(Op::FstatHeld),
        1 => Just(Op::FchdirHeld),
        1 => Just(Op::GetdentsHeld),
        1 => path().prop_map(Op::MkdirAtHeld),
        1 => path().prop_map(Op::StatAtHeld),
        1 => path().prop_map(Op::CreateAtHeld),
        1 => Just(Op::CloseHeld),
        1 => (path(), path()).prop_map(|(a, b)| Op::RenameAtHeld(a, b)),
        1 => (path(), prop::sample::select(vec![0, at::REMOVEDIR])).prop_map(|(p, f)| Op::UnlinkAtHeld(p, f)),
        1 => (path(), prop::sample::select(vec![0o100600, 0o644])).prop_map(|(p, m)| Op::Mknod(p, m)),
        1 => (path(), 0u8..TIME_PAIRS.len() as u8).prop_map(|(p, k)| Op::Utimens(p, k)),
        1 => modes(sticky_ok).prop_map(Op::FchmodHeld),
        1 => (id.clone(), id.clone()).prop_map(|(u, g)| Op::FchownHeld(u, g)),
        1 => prop::sample::select(vec![0u64, 3, 4097]).prop_map(Op::FtruncateHeld),
        1 => data.clone().prop_map(Op::WriteHeld),
        1 => (data.clone(), prop::sample::select(vec![0u64, 2, 4095, 10000]))
            .prop_map(|(d, o)| Op::PwriteHeld(d, o)),
        1 => prop::sample::select(vec![0u64, 1, 4096]).prop_map(Op::ReadHeld),
        1 => (
            held_path(),
            path(),
            prop::sample::select(vec![0, at::SYMLINK_FOLLOW, at::EMPTY_PATH]),
        )
            .prop_map(|(a, b, f)| Op::LinkAtHeld(a, b, f)),
        1 => (target.clone(), path()).prop_map(|(t, p)| Op::SymlinkAtHeld(t, p)),
        1 => held_path().prop_map(Op::ReadlinkAtHeld),
        1 => (
            held_path(),
            prop::sample::select(vec![acc::F_OK, acc::R_OK, acc::W_OK, acc::X_OK]),
            prop::sample::select(vec![0, at::EACCESS, at::SYMLINK_NOFOLLOW]),
        )
            .prop_map(|(p, m, f)| Op::AccessAtHeld(p, m, f)),
        1 => (
            held_path(),
            id.clone(),
            id.clone(),
            prop::sample::select(vec![0, at::SYMLINK_NOFOLLOW, at::EMPTY_PATH]),
        )
            .prop_map(|(p, u, g, f)| Op::ChownAtHeld(p, u, g, f)),
        1 => (
            held_path(),
            0u8..TIME_PAIRS.len() as u8,
            prop::sample::select(vec![0, at::SYMLINK_NOFOLLOW, at::EMPTY_PATH]),
        )
            .prop_map(|(p, k, f)| Op::UtimensAtHeld(p, k, f)),
        1 => (held_path(), held_path(), prop::sample::select(vec![0, rn::NOREPLACE, rn::EXCHANGE]))
            .prop_map(|(a, b, f)| Op::Rename2AtHeld(a, b, f)),
        2 => (xon(), xname(), data.clone(), prop::sample::select(vec![0u32, 0, 1, 2]))
            .prop_map(|(t, n, v, f)| Op::Setxattr(t, n, v, f)),
        1 => (xon(), xname(), prop::sample::select(vec![0usize, 1, 64]))
            .prop_map(|(t, n, sz)| Op::Getxattr(t, n, sz)),
        1 => (xon(), prop::sample::select(vec![0usize, 7, 256]))
            .prop_map(|(t, sz)| Op::Listxattr(t, sz)),
        1 => (xon(), xname()).prop_map(|(t, n)| Op::Removexattr(t, n)),
    ]
}

fn xon() -> impl Strategy<Value = XOn> {
    prop_oneof![
        3 => path().prop_map(XOn::Path),
        2 => path().prop_map(XOn::LPath),
        1 => Just(XOn::Held),
    ]
}

/// Names in the namespaces a caller may use (`trusted` is root's), one that is no
/// namespace, and one with nothing after its prefix.
fn xname() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "user.a",
        "user.a",
        "user.b",
        "trusted.t",
        "security.s",
        "bogus.x",
        "user.",
    ])
}

/// A path for a call relative to the held descriptor: mostly relative, sometimes empty
/// (for `AT_EMPTY_PATH`, and `ENOENT` without it).
fn held_path() -> impl Strategy<Value = P> {
    prop_oneof![
        6 => path(),
        1 => Just(P(Vec::new())),
    ]
}

/// Whether Linux's `fs.protected_hardlinks` would refuse this link for a reason no file system
/// semantics give (the caller neither owns the source nor may read and write it).
fn hardlink_protected(sys: &mut dyn Sys, creds: &Cred, old: &[u8], follow: bool) -> bool {
    if creds.euid == 0 || !protections().hardlinks {
        return false;
    }
    let flags = if follow { 0 } else { at::SYMLINK_NOFOLLOW };
    let Ok(st): Res<St> = sys.stat(Dir::Cwd, old, flags) else {
        return false;
    };
    if st.uid == creds.euid {
        return false;
    }
    let m = st.mode;
    let safe = m & ty::S_IFMT == ty::S_IFREG
        && m & 0o4000 == 0
        && m & 0o2010 != 0o2010
        && sys
            .access(Dir::Cwd, old, acc::R_OK | acc::W_OK, flags | at::EACCESS)
            .is_ok();
    !safe
}

struct Plan {
    held: Option<H>,
}

impl Plan {
    fn dir(&self) -> Option<Dir> {
        self.held.map(Dir::Fd)
    }

    fn xt<'a>(&self, t: &'a XOn) -> Option<XT<'a>> {
        match t {
            XOn::Path(p) => Some(XT::Path(&p.0)),
            XOn::LPath(p) => Some(XT::LPath(&p.0)),
            XOn::Held => self.held.map(XT::Fd),
        }
    }

    fn step(&mut self, r: &mut Rec, op: &Op) {
        match op {
            Op::Nop => {}
            Op::Mkdir(p, m) => {
                let _ = r.mkdir(&p.0, *m);
            }
            Op::Rmdir(p) => {
                let _ = r.rmdir(&p.0);
            }
            Op::Create(p, f, m) => {
                let _ = r.touch(&p.0, *f, *m);
            }
            Op::Unlink(p) => {
                let _ = r.unlink(&p.0);
            }
            Op::Rename(a, b, f) => {
                let _ = r.rename2(&a.0, &b.0, *f);
            }
            Op::Link(a, b, follow) => {
                let creds = r.creds.clone();
                if hardlink_protected(r.sys, &creds, &a.0, *follow) {
                    r.log("link skipped: fs.protected_hardlinks");
                    return;
                }
                let f = if *follow { at::SYMLINK_FOLLOW } else { 0 };
                let _ = r.link_at(Dir::Cwd, &a.0, Dir::Cwd, &b.0, f);
            }
            Op::Symlink(t, p) => {
                let _ = r.symlink(t, &p.0);
            }
            Op::Stat(p) => {
                let _ = r.stat(&p.0);
            }
            Op::Lstat(p) => {
                let _ = r.lstat(&p.0);
            }
            Op::Readlink(p) => {
                let _ = r.readlink(&p.0);
            }
            Op::Chmod(p, m) => {
                let _ = r.chmod(&p.0, *m);
            }
            Op::Chown(p, u, g) => {
                let _ = r.chown(&p.0, *u, *g);
            }
            Op::Truncate(p, n) => {
                let _ = r.truncate(&p.0, *n);
            }
            Op::Write(p, f, d) => {
                if let Ok(h) = r.open(&p.0, *f, 0) {
                    let _ = r.write(h, d);
                    let _ = r.close(h);
                }
            }
            Op::Read(p) => {
                let _ = r.cat(&p.0);
            }
            Op::Readdir(p) => {
                let _ = r.readdir(&p.0);
            }
            Op::Chdir(p) => {
                let _ = r.chdir(&p.0);
            }
            Op::Getcwd => {
                let _ = r.getcwd();
            }
            Op::Access(p, m, f) => {
                let _ = r.access_at(Dir::Cwd, &p.0, *m, *f);
            }
            Op::Creds(w) => r.set_creds(&w.cred()),
            Op::Umask(m) => {
                let _ = r.umask(*m);
            }
            Op::Hold(p, f) => {
                if let Some(h) = self.held.take() {
                    let _ = r.close(h);
                }
                self.held = r.open(&p.0, *f, 0).ok();
            }
            Op::FstatHeld => {
                if let Some(h) = self.held {
                    let _ = r.fstat(h);
                }
            }
            Op::FchdirHeld => {
                if let Some(h) = self.held {
                    let _ = r.fchdir(h);
                }
            }
            Op::GetdentsHeld => {
                if let Some(h) = self.held {
                    let _ = r.lseek(h, 0, 0);
                    let _ = r.getdents(h);
                }
            }
            Op::MkdirAtHeld(p) => {
                if let Some(d) = self.dir() {
                    let _ = r.mkdir_at(d, &p.0, 0o755);
                }
            }
            Op::StatAtHeld(p) => {
                if let Some(d) = self.dir() {
                    let _ = r.stat_at(d, &p.0, 0);
                }
            }
            Op::CreateAtHeld(p) => {
                if let Some(d) = self.dir() {
                    if let Ok(h) = r.open_at(d, &p.0, o::CREAT | o::WRONLY, 0o644) {
                        let _ = r.close(h);
                    }
                }
            }
            Op::RenameAtHeld(a, b) => {
                if let Some(d) = self.dir() {
                    let _ = r.rename_at(d, &a.0, d, &b.0, 0);
                }
            }
            Op::UnlinkAtHeld(p, f) => {
                if let Some(d) = self.dir() {
                    let _ = r.unlink_at(d, &p.0, *f);
                }
            }
            Op::Mknod(p, m) => {
                let _ = r.mknod(&p.0, *m);
            }
            Op::Utimens(p, k) => {
                let _ = r.utimens(&p.0, TIME_PAIRS[*k as usize]);
            }
            Op::CloseHeld => {
                if let Some(h) = self.held.take() {
                    let _ = r.close(h);
                }
            }
            Op::FchmodHeld(m) => {
                if let Some(h) = self.held {
                    let _ = r.fchmod(h, *m);
                }
            }
            Op::FchownHeld(u, g) => {
                if let Some(h) = self.held {
                    let _ = r.fchown(h, *u, *g);
                }
            }
            Op::FtruncateHeld(n) => {
                if let Some(h) = self.held {
                    let _ = r.ftruncate(h, *n);
                }
            }
            Op::WriteHeld(d) => {
                if let Some(h) = self.held {
                    let _ = r.write(h, d);
                }
            }
            Op::PwriteHeld(d, off) => {
                if let Some(h) = self.held {
                    let _ = r.pwrite(h, d, *off);
                }
            }
            Op::ReadHeld(off) => {
                if let Some(h) = self.held {
                    let _ = r.lseek(h, *off as i64, 0);
                    let _ = r.read(h, 16);
                }
            }
            Op::LinkAtHeld(a, b, f) => {
                let Some(d) = self.dir() else { return };
                // The protection check below looks the source up from the working
                // directory; relative to a descriptor, only root links (never refused).
                if r.creds.euid != 0 && protections().hardlinks {
                    return;
                }
                let _ = r.link_at(d, &a.0, Dir::Cwd, &b.0, *f);
            }
            Op::SymlinkAtHeld(t, p) => {
                if let Some(d) = self.dir() {
                    let _ = r.symlink_at(t, d, &p.0);
                }
            }
            Op::ReadlinkAtHeld(p) => {
                if let Some(d) = self.dir() {
                    let _ = r.readlink_at(d, &p.0);
                }
            }
            Op::AccessAtHeld(p, m, f) => {
                if let Some(d) = self.dir() {
                    let _ = r.access_at(d, &p.0, *m, *f);
                }
            }
            Op::ChownAtHeld(p, u, g, f) => {
                if let Some(d) = self.dir() {
                    let _ = r.chown_at(d, &p.0, *u, *g, *f);
                }
            }
            Op::UtimensAtHeld(p, k, f) => {
                if let Some(d) = self.dir() {
                    let _ = r.utimens_at(d, &p.0, TIME_PAIRS[*k as usize], *f);
                }
            }
            Op::Rename2AtHeld(a, b, f) => {
                if let Some(d) = self.dir() {
                    let _ = r.rename_at(d, &a.0, d, &b.0, *f);
                }
            }
            Op::Setxattr(t, n, v, f) => {
                if let Some(t) = self.xt(t) {
                    let _ = r.setxattr(t, n, v, *f);
                }
            }
            Op::Getxattr(t, n, sz) => {
                if let Some(t) = self.xt(t) {
                    let _ = r.getxattr(t, n, *sz);
                }
            }
            Op::Listxattr(t, sz) => {
                if let Some(t) = self.xt(t) {
                    let _ = r.listxattr(t, *sz);
                }
            }
            Op::Removexattr(t, n) => {
                if let Some(t) = self.xt(t) {
                    let _ = r.removexattr(t, n);
                }
            }
        }
    }
}

/// The start of every plan: the symlinks of the alphabet and, unless `base` is 0, a small tree.
/// Base 2 adds owners and permissions for the users.
fn prologue(r: &mut Rec, base: u8) {
    let pr = protections();
    let sticky_ok = !(pr.symlinks || pr.regular || pr.fifos);
    if !sticky_ok {
        r.chmod("/", 0o777).expect("chmod /");
    }
    r.symlink("a", "/l").expect("symlink l");
    r.symlink("loop", "/loop").expect("symlink loop");
    r.symlink("c", "/dangling").expect("symlink dangling");
    if base == 0 {
        return;
    }
    r.mkdir("/a", 0o755).expect("mkdir");
    r.mkdir("/a/b", 0o755).expect("mkdir");
    r.mkfile("/a/b/c", b"abc").expect("mkfile");
    r.mkfile("/a/c", b"c").expect("mkfile");
    r.mkfile("/b", b"b").expect("mkfile");
    r.link("/b", "/a/b/b").expect("link");
    r.symlink("b", "/a/l").expect("symlink");
    if base == 1 {
        return;
    }
    r.chown("/a", Some(1000), Some(1000)).expect("chown");
    r.chmod("/a", 0o711).expect("chmod");
    r.chmod("/a/b", if sticky_ok { 0o1777 } else { 0o777 })
        .expect("chmod");
    r.chown("/b", Some(1001), Some(1001)).expect("chown");
    r.chmod("/b", 0o640).expect("chmod");
    r.chown("/a/c", Some(1000), Some(1001)).expect("chown");
    r.chmod("/a/c", 0o2775).expect("chmod");
}

fn play(base: u8, ops: &[Op]) -> Outcome {
    // Each plan before it runs, for a plan that never ends (a hang prints no failure):
    // `SCALEVFS_PLAN_TRACE=1 cargo test ... -- --nocapture`, and the last one printed.
    if std::env::var_os("SCALEVFS_PLAN_TRACE").is_some() {
        eprintln!("plan: base = {base}, ops = {ops:?}");
    }
    common::run("plan", &|r: &mut Rec| {
        prologue(r, base);
        let mut plan = Plan { held: None };
        for op in ops {
            plan.step(r, op);
        }
        let _ = r.getcwd();
        r.as_root();
        r.umask(0o022);
    })
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000)
}

fn config() -> Config {
    Config {
        cases: cases(),
        // The working directory is gone after the chroot; found plans are printed instead.
        failure_persistence: Some(Box::new(FileFailurePersistence::Off)),
        max_shrink_iters: 4000,
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn random_plans_match_tmpfs(base in 0u8..3, ops in prop::collection::vec(op(), 20..=40)) {
        match play(base, &ops) {
            Outcome::Skipped | Outcome::Same => {}
            Outcome::Differs(report) => prop_assert!(false, "{}", report),
        }
    }
}

/// A fixed plan, so a broken harness shows up even with PROPTEST_CASES=0.
#[test]
fn fixed_plan_matches_tmpfs() {
    let ops = vec![
        Op::Mkdir(p("a"), 0o755),
        Op::Mkdir(p("l/b"), 0o755),
        Op::Create(p("/a/b/../c"), o::CREAT | o::WRONLY, 0o644),
        Op::Write(p("a/c"), o::WRONLY | o::APPEND, b"abc".to_vec()),
        Op::Link(p("a/c"), p("b"), false),
        Op::Rename(p("a/b"), p("c"), 0),
        Op::Rename(p("b"), p("c/b"), rn::NOREPLACE),
        Op::Creds(Who::U1000),
        Op::Mkdir(p("/b"), 0o700),
        Op::Chdir(p("b")),
        Op::Getcwd,
        Op::Create(p("../dangling"), o::CREAT | o::WRONLY, 0o600),
        Op::Creds(Who::U1001),
        Op::Stat(p("/b/..")),
        Op::Access(p("/c/b"), acc::W_OK, 0),
        Op::Creds(Who::Root),
        Op::Hold(p("/a"), o::RDONLY | o::DIRECTORY),
        Op::Rename(p("/a"), p("/c/a"), rn::EXCHANGE),
        Op::MkdirAtHeld(p("x")),
        Op::GetdentsHeld,
        Op::Stat(p("loop/.")),
        Op::Readlink(p("l")),
        Op::Truncate(p("c/b"), 4097),
        Op::Read(p("/c/b")),
    ];
    assert_plan(0, &ops);
}

/// A plan found by a campaign (after some 424,000 plans on hostfs) that never ended, on every
/// backend: `Hold(".")` in the removed working directory (the 9th, 12th, 21st and 31st steps
/// alone still hang) walked again and again to the evicted directory. See
/// `removed_directory_can_be_opened` in the semantics suite.
#[test]
fn open_in_a_removed_working_directory_plan() {
    let ops = vec![
        Op::MkdirAtHeld(p("a")),
        Op::Symlink("missing", p("/a")),
        Op::Truncate(p("/b"), 0),
        Op::FstatHeld,
        Op::Write(p("c/b/"), 0o2001, b"ceecab".to_vec()),
        Op::Readlink(p("c")),
        Op::Rename(p("b/a/b/<x*255>"), p("b"), 0),
        Op::Read(p("/b/a")),
        Op::Mkdir(p("c"), 0o777),
        Op::Lstat(p("b/b")),
        Op::Readdir(p("/../../")),
        Op::Chdir(p("/./c")),
        Op::Readlink(p("/a/a")),
        Op::CreateAtHeld(p("/b")),
        Op::Hold(p("a"), 0),
        Op::Truncate(p("/a/.."), 10000),
        Op::Rmdir(p("/l")),
        Op::UnlinkAtHeld(p("a/l"), 0),
        Op::GetdentsHeld,
        Op::UnlinkAtHeld(p("<x*255>"), 0),
        Op::Rmdir(p("/c")),
        Op::Symlink("../a", p("l")),
        Op::Chmod(p("a/c"), 0o1733),
        Op::Write(p("dangling/<y*256>/c/c"), 0o1001, b"eade".to_vec()),
        Op::Chown(p("/a/c"), Some(1001), Some(0)),
        Op::Rmdir(p("/b")),
        Op::FchdirHeld,
        Op::Unlink(p("a/c/b")),
        Op::Truncate(p("/l"), 4096),
        Op::Readlink(p("/c")),
        Op::Hold(p("."), 0o200000),
        Op::Rename(p("b"), p("l/a/a"), 1),
        Op::Lstat(p("b/l/l")),
        Op::Getcwd,
    ];
    assert_plan(2, &ops);
}

/// A path as a failing plan prints it (`P`'s `Debug`: the long names as placeholders).
fn p(s: &str) -> P {
    P(s.replace("<x*255>", N255)
        .replace("<y*256>", N256)
        .into_bytes())
}

/// Plays a fixed plan; panics with the report if the engine and the kernel differ.
fn assert_plan(base: u8, ops: &[Op]) {
    match play(base, ops) {
        Outcome::Skipped | Outcome::Same => {}
        Outcome::Differs(report) => panic!("{report}"),
    }
}
