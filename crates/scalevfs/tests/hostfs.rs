//! hostfs (exclusive policy) against the host kernel on the same tree.
//!
//! - Every object of a host tree reads the same through hostfs as through the kernel:
//!   `lstat` (all but `st_dev`), the names of each directory, file data, symlink text, and
//!   one inode for the two names of a hard link.
//! - Confinement: the engine resolves `..`, absolute symlinks and `/proc` magic links in
//!   its own namespace, rooted at the host directory. The oracle is the kernel's
//!   `openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)` from a descriptor of that
//!   directory, which resolves as if it were `/`: both must name the same object, or fail
//!   with the same errno.
//! - Every change fails as it does on a read-only bind mount of the tree (`EROFS`, or the
//!   errno Linux checks first). Needs root (`mount`); skipped otherwise.
//! - The rename attack: directories swapped on the host while paths are resolved through
//!   a writable hostfs reach nothing outside the root.
//!
//! hostfs's writes are checked by the differential cases and plans, run on hostfs with
//! `SCALEVFS_TEST_BACKEND=host` (see `tests/common/engine.rs`).

// hostfs is not built under loom (`--cfg loom` builds the lib's models only, but cargo
// compiles every test target).
#![cfg(not(loom))]

use rustix::fs::{self as rfs, AtFlags, Mode, OFlags, ResolveFlags};
use scalevfs::{
    AtFlags as AtF, Creds, Errno, HostFs, HostFsOptions, HostPolicy, OFlags as VO, Vfs, XattrFlags,
};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A fresh directory on a tmpfs (`/dev/shm`), removed when dropped.
mod scratch;
use scratch::Scratch;

/// The tree every test serves: directories, files with data, a hard link, a FIFO, and
/// symlinks that try to leave the tree.
fn build(root: &Path) {
    use std::os::unix::fs::symlink;
    let p = |s: &str| root.join(s);
    for d in ["a", "a/b", "a/b/c", "empty", "etc"] {
        std::fs::create_dir(p(d)).unwrap();
    }
    std::fs::write(p("f"), b"hello").unwrap();
    std::fs::write(p("a/big"), vec![7u8; 100_000]).unwrap();
    std::fs::write(p("a/b/c/deep"), b"deep").unwrap();
    std::fs::write(p("etc/passwd"), b"inside").unwrap();
    std::fs::hard_link(p("f"), p("a/hl")).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        p("fifo").as_path(),
        rustix::fs::FileType::Fifo,
        Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    symlink("f", p("rel")).unwrap();
    symlink("/etc/passwd", p("abs")).unwrap();
    symlink("../../../../../../..", p("a/up")).unwrap();
    symlink("/proc/self/root", p("proc")).unwrap();
    symlink("/proc/self/fd/0", p("magic")).unwrap();
    symlink("loop", p("loop")).unwrap();
    symlink("b/c", p("a/toc")).unwrap();
    symlink("/a/b/../../f", p("a/b/back")).unwrap();
    std::fs::set_permissions(
        p("a/b"),
        std::os::unix::fs::PermissionsExt::from_mode(0o711),
    )
    .unwrap();
}

fn serve(root: &Path) -> Arc<Vfs> {
    let opts = HostFsOptions {
        read_only: true,
        ..HostFsOptions::default()
    };
    Vfs::new(HostFs::new(root, opts).expect("hostfs over the tree"))
}

/// The host's `lstat` of `path` below `root`, as the engine reports it (the engine's
/// device number in place of the host's).
fn host_lstat(root: &Path, rel: &Path, dev: u64) -> scalevfs::Stat {
    let st = rfs::lstat(root.join(rel.strip_prefix("/").unwrap())).unwrap();
    let t = |s: i64, n: u64| scalevfs::Timespec {
        sec: s,
        nsec: n as u32,
    };
    scalevfs::Stat {
        dev,
        ino: st.st_ino,
        mode: st.st_mode,
        nlink: st.st_nlink as u32,
        uid: st.st_uid,
        gid: st.st_gid,
        rdev: st.st_rdev,
        size: st.st_size as u64,
        blksize: 0,
        blocks: st.st_blocks as u64,
        atime: t(st.st_atime, st.st_atime_nsec as u64),
        mtime: t(st.st_mtime, st.st_mtime_nsec as u64),
        ctime: t(st.st_ctime, st.st_ctime_nsec as u64),
    }
}

#[test]
fn every_object_reads_as_the_host_has_it() {
    let s = Scratch::new("tree");
    build(&s.0);
    let vfs = serve(&s.0);
    let p = vfs.process(Creds::root());
    let tree = p.walk_tree("/").unwrap();
    let dev = tree[0].1.dev;
    // Every host entry is there, and nothing else.
    let mut host_names = Vec::new();
    for e in walkdir(&s.0, Path::new("/")) {
        host_names.push(e);
    }
    let mut ours: Vec<PathBuf> = tree.iter().map(|(p, _)| p.clone()).collect();
    host_names.sort();
    ours.sort();
    assert_eq!(ours, host_names);
    for (path, st) in &tree {
        let mut want = host_lstat(&s.0, path, dev);
        want.blksize = st.blksize;
        // The host updated the root's and directories' atime while we listed them.
        want.atime = st.atime;
        assert_eq!(*st, want, "lstat of {}", path.display());
        let rel = s.0.join(path.strip_prefix("/").unwrap());
        match st.mode & 0o170000 {
            0o100000 => {
                assert_eq!(p.read_file(path).unwrap(), std::fs::read(&rel).unwrap());
            }
            0o120000 => {
                let t = std::fs::read_link(&rel).unwrap();
                assert_eq!(p.readlink(path).unwrap(), t.as_os_str().as_bytes());
            }
            _ => {}
        }
    }
    // The two names of a hard link are one inode.
    let (f, hl) = (p.stat("/f").unwrap(), p.stat("/a/hl").unwrap());
    assert_eq!((f.ino, f.nlink), (hl.ino, 2));
    // Partial reads at an offset, and past the end.
    let fd = p.open("/a/big", VO::RDONLY, 0).unwrap();
    let mut buf = [0u8; 10];
    assert_eq!(p.pread(fd, &mut buf, 99_995).unwrap(), 5);
    assert_eq!(p.pread(fd, &mut buf, 200_000).unwrap(), 0);
    p.close(fd).unwrap();
    // The FIFO is never opened on the host: a non-blocking read-only open succeeds in the
    // engine, and reading it is the engine's business.
    assert_eq!(p.lstat("/fifo").unwrap().mode & 0o170000, 0o010000);
}

/// The host entries below `root`, as absolute paths of the served tree.
fn walkdir(root: &Path, rel: &Path) -> Vec<PathBuf> {
    let mut out = vec![rel.to_path_buf()];
    let full = root.join(rel.strip_prefix("/").unwrap());
    if rfs::lstat(&full).unwrap().st_mode & 0o170000 == 0o040000 {
        for e in std::fs::read_dir(&full).unwrap() {
            out.extend(walkdir(root, &rel.join(e.unwrap().file_name())));
        }
    }
    out
}

/// What the kernel says a path names beneath `root` (as if it were `/`): its inode
/// number, or the errno.
fn kernel_in_root(root: &OwnedFd, path: &str, follow: bool) -> Result<u64, i32> {
    let flags = OFlags::PATH
        | OFlags::CLOEXEC
        | if follow {
            OFlags::empty()
        } else {
            OFlags::NOFOLLOW
        };
    let how = ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS;
    loop {
        match rfs::openat2(root, path, flags, Mode::empty(), how) {
            Ok(fd) => return Ok(rfs::fstat(&fd).unwrap().st_ino),
            // A `..` resolved while a rename ran anywhere on the system (the escape test,
            // in this binary) makes the kernel refuse rather than risk an escape: again.
            Err(rustix::io::Errno::AGAIN) => continue,
            Err(e) => return Err(e.raw_os_error()),
        }
    }
}

#[test]
fn paths_never_leave_the_tree() {
    let s = Scratch::new("confine");
    build(&s.0);
    let vfs = serve(&s.0);
    let p = vfs.process(Creds::root());
    let root = rfs::open(&s.0, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
    let cases = [
        "/",
        "/..",
        "/../../..",
        "/a/../..",
        "/a/up",
        "/a/up/f",
        "/a/up/a/up/etc/passwd",
        "/abs",
        "/abs/",
        "/rel",
        "/a/toc/deep",
        "/a/b/back",
        "/proc",
        "/proc/x",
        "/magic",
        "/loop",
        "/loop/x",
        "/etc/passwd/..",
        "/f/",
        "/f/x",
        "/missing",
        "/a/b/c/../../../f",
        "a/up/../..",
        "../..",
    ];
    for path in cases {
        for follow in [true, false] {
            let want = kernel_in_root(&root, path, follow);
            let got = if follow { p.stat(path) } else { p.lstat(path) };
            let got = got.map(|st| st.ino).map_err(|e: Errno| e.raw());
            assert_eq!(got, want, "{path} (follow: {follow})");
        }
    }
    // Data behind a symlink that points outside comes from inside.
    assert_eq!(p.read_file("/abs").unwrap(), b"inside");
}

/// The errno of a host call, or 0.
fn host<T>(r: rustix::io::Result<T>) -> i32 {
    r.map_or_else(|e| e.raw_os_error(), |_| 0)
}

fn ours<T>(r: scalevfs::Result<T>) -> i32 {
    r.map_or_else(|e| e.raw(), |_| 0)
}

/// A read-only bind mount of `src` at a new directory; unmounted when dropped.
struct RoBind(Scratch);

impl RoBind {
    fn new(src: &Path) -> Option<RoBind> {
        let dst = Scratch::new("robind");
        let run = |args: &[&str]| {
            std::process::Command::new("mount")
                .args(args)
                .status()
                .is_ok_and(|s| s.success())
        };
        let d = dst.0.to_str().unwrap().to_string();
        if !run(&["--bind", src.to_str().unwrap(), &d]) {
            return None;
        }
        let b = RoBind(dst);
        run(&["-o", "remount,bind,ro", &d]).then_some(b)
    }
}

impl Drop for RoBind {
    /// Unmounts; if the mount is still busy (a descriptor of the hostfs that served it may
    /// be closed only when its epoch's deferred frees run), detaches it instead, so that no
    /// run leaves a mount behind.
    fn drop(&mut self) {
        let umount = |lazy: bool| {
            let mut c = std::process::Command::new("umount");
            if lazy {
                c.arg("-l");
            }
            c.arg(&self.0 .0).status().is_ok_and(|s| s.success())
        };
        if !umount(false) {
            umount(true);
        }
    }
}

#[test]
fn every_change_fails_as_on_a_read_only_mount() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: needs root to make a read-only bind mount");
        return;
    }
    let s = Scratch::new("ro");
    build(&s.0);
    let Some(ro) = RoBind::new(&s.0) else {
        eprintln!("skipped: mount --bind failed");
        return;
    };
    // A writable hostfs over the read-only host still reads: an open for reading opens
    // the host file for reading only (for writing, the host would refuse with EROFS).
    let w = serve_rw(&ro.0 .0).process(Creds::root());
    assert_eq!(w.read_file("/f").unwrap(), b"hello");
    let fd = w.open("/a/big", VO::RDONLY, 0).unwrap();
    assert_eq!(w.pread(fd, &mut [0u8; 4], 99_998).unwrap(), 2);
    let k = rfs::open(&ro.0 .0, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
    let vfs = serve(&s.0);
    let p = vfs.process(Creds::root());
    let u = vfs.process(Creds::user(1000, 1000, Vec::new()));
    let m = |x: u32| Mode::from_raw_mode(x);
    let o = |f: OFlags| -> i32 { host(rfs::openat(&k, "f", f, Mode::empty())) };
    let v = |f: VO| -> i32 { ours(p.open("/f", f, 0)) };
    let cases: Vec<(&str, i32, i32)> = vec![
        (
            "mkdir new",
            host(rfs::mkdirat(&k, "new", m(0o755))),
            ours(p.mkdir("/new", 0o755)),
        ),
        (
            "mkdir existing",
            host(rfs::mkdirat(&k, "a", m(0o755))),
            ours(p.mkdir("/a", 0o755)),
        ),
        (
            "mkdir dot",
            host(rfs::mkdirat(&k, "a/.", m(0o755))),
            ours(p.mkdir("/a/.", 0o755)),
        ),
        (
            "mkdir in a missing dir",
            host(rfs::mkdirat(&k, "nope/x", m(0o755))),
            ours(p.mkdir("/nope/x", 0o755)),
        ),
        (
            "mkdir under a file",
            host(rfs::mkdirat(&k, "f/x", m(0o755))),
            ours(p.mkdir("/f/x", 0o755)),
        ),
        (
            "symlink new",
            host(rfs::symlinkat("x", &k, "s")),
            ours(p.symlink("x", "/s")),
        ),
        (
            "symlink existing",
            host(rfs::symlinkat("x", &k, "f")),
            ours(p.symlink("x", "/f")),
        ),
        (
            "unlink existing",
            host(rfs::unlinkat(&k, "f", AtFlags::empty())),
            ours(p.unlink("/f")),
        ),
        (
            "unlink missing",
            host(rfs::unlinkat(&k, "missing", AtFlags::empty())),
            ours(p.unlink("/missing")),
        ),
        (
            "rmdir dot",
            host(rfs::unlinkat(&k, "a/.", AtFlags::REMOVEDIR)),
            ours(p.rmdir("/a/.")),
        ),
        (
            "rmdir dotdot",
            host(rfs::unlinkat(&k, "a/..", AtFlags::REMOVEDIR)),
            ours(p.rmdir("/a/..")),
        ),
        (
            "rmdir empty",
            host(rfs::unlinkat(&k, "empty", AtFlags::REMOVEDIR)),
            ours(p.rmdir("/empty")),
        ),
        (
            "rename",
            host(rfs::renameat(&k, "f", &k, "g")),
            ours(p.rename("/f", "/g")),
        ),
        (
            "rename missing",
            host(rfs::renameat(&k, "missing", &k, "g")),
            ours(p.rename("/missing", "/g")),
        ),
        (
            "link",
            host(rfs::linkat(&k, "f", &k, "l", AtFlags::empty())),
            ours(p.link("/f", "/l")),
        ),
        (
            "link onto existing",
            host(rfs::linkat(&k, "f", &k, "rel", AtFlags::empty())),
            ours(p.link("/f", "/rel")),
        ),
        (
            "chmod",
            host(rfs::chmodat(&k, "f", m(0o600), AtFlags::empty())),
            ours(p.chmod("/f", 0o600)),
        ),
        (
            "chown",
            host(rfs::chownat(&k, "f", None, None, AtFlags::empty())),
            ours(p.chown("/f", None, None)),
        ),
        (
            "truncate a file",
            host(
                rfs::openat(&k, "f", OFlags::PATH, Mode::empty()).and_then(|_| {
                    rustix::fs::ftruncate(rfs::openat(&k, "f", OFlags::WRONLY, Mode::empty())?, 0)
                }),
            ),
            ours(p.truncate("/f", 0)),
        ),
        ("open O_RDONLY", o(OFlags::RDONLY), v(VO::RDONLY)),
        ("open O_WRONLY", o(OFlags::WRONLY), v(VO::WRONLY)),
        ("open O_RDWR", o(OFlags::RDWR), v(VO::RDWR)),
        (
            "open O_TRUNC",
            o(OFlags::RDONLY | OFlags::TRUNC),
            v(VO::RDONLY | VO::TRUNC),
        ),
        (
            "open O_CREAT existing",
            o(OFlags::RDONLY | OFlags::CREATE),
            v(VO::RDONLY | VO::CREAT),
        ),
        (
            "open O_CREAT|O_EXCL existing",
            o(OFlags::RDONLY | OFlags::CREATE | OFlags::EXCL),
            v(VO::RDONLY | VO::CREAT | VO::EXCL),
        ),
        (
            "open O_CREAT missing",
            host(rfs::openat(
                &k,
                "newf",
                OFlags::WRONLY | OFlags::CREATE,
                m(0o644),
            )),
            ours(p.open("/newf", VO::WRONLY | VO::CREAT, 0o644)),
        ),
        (
            "open a directory O_RDWR",
            host(rfs::openat(&k, "a", OFlags::RDWR, Mode::empty())),
            ours(p.open("/a", VO::RDWR, 0)),
        ),
        (
            "access W_OK",
            host(rfs::accessat(
                &k,
                "f",
                rfs::Access::WRITE_OK,
                AtFlags::empty(),
            )),
            ours(p.access("/f", scalevfs::Access::W_OK)),
        ),
        (
            "access R_OK",
            host(rfs::accessat(
                &k,
                "f",
                rfs::Access::READ_OK,
                AtFlags::empty(),
            )),
            ours(p.access("/f", scalevfs::Access::R_OK)),
        ),
    ];
    // The user cases: the kernel side switches this thread's credentials.
    let as_user = |f: &dyn Fn() -> i32| -> i32 {
        rustix::thread::set_thread_res_gid(
            rustix::process::Gid::from_raw(1000),
            rustix::process::Gid::from_raw(1000),
            rustix::process::Gid::ROOT,
        )
        .unwrap();
        rustix::thread::set_thread_res_uid(
            rustix::process::Uid::from_raw(1000),
            rustix::process::Uid::from_raw(1000),
            rustix::process::Uid::ROOT,
        )
        .unwrap();
        let r = f();
        rustix::thread::set_thread_res_uid(
            rustix::process::Uid::ROOT,
            rustix::process::Uid::ROOT,
            rustix::process::Uid::ROOT,
        )
        .unwrap();
        rustix::thread::set_thread_res_gid(
            rustix::process::Gid::ROOT,
            rustix::process::Gid::ROOT,
            rustix::process::Gid::ROOT,
        )
        .unwrap();
        r
    };
    let mut cases = cases;
    cases.push((
        "access W_OK as a user",
        as_user(&|| {
            host(rfs::accessat(
                &k,
                "f",
                rfs::Access::WRITE_OK,
                AtFlags::empty(),
            ))
        }),
        ours(u.access("/f", scalevfs::Access::W_OK)),
    ));
    cases.push((
        "open O_WRONLY as a user",
        as_user(&|| host(rfs::openat(&k, "f", OFlags::WRONLY, Mode::empty()))),
        ours(u.open("/f", VO::WRONLY, 0)),
    ));
    cases.push((
        "open O_RDONLY|O_TRUNC as a user",
        as_user(&|| {
            host(rfs::openat(
                &k,
                "f",
                OFlags::RDONLY | OFlags::TRUNC,
                Mode::empty(),
            ))
        }),
        ours(u.open("/f", VO::RDONLY | VO::TRUNC, 0)),
    ));
    cases.push((
        "unlink as a user in a 0711 dir",
        as_user(&|| host(rfs::unlinkat(&k, "a/b/c", AtFlags::REMOVEDIR))),
        ours(u.rmdir("/a/b/c")),
    ));
    cases.push((
        "chmod as a user",
        as_user(&|| host(rfs::chmodat(&k, "f", m(0o600), AtFlags::empty()))),
        ours(u.chmod("/f", 0o600)),
    ));
    cases.push((
        "mkdir as a user in a 0711 dir",
        as_user(&|| host(rfs::mkdirat(&k, "a/b/x", m(0o755)))),
        ours(u.mkdir("/a/b/x", 0o755)),
    ));
    let wrong: Vec<String> = cases
        .iter()
        .filter(|(_, k, v)| k != v)
        .map(|(what, k, v)| {
            format!(
                "{what}: kernel {} scalevfs {}",
                Errno::from_raw(*k).name(),
                Errno::from_raw(*v).name()
            )
        })
        .collect();
    assert!(wrong.is_empty(), "{wrong:#?}");
    // Nothing changed on the host.
    assert_eq!(std::fs::read(s.0.join("f")).unwrap(), b"hello");
    assert!(!s.0.join("new").exists() && !s.0.join("newf").exists());
}

/// The rename attack of the kernel's openat2 selftest, through hostfs: a thread swaps
/// `root/a/c` with `outside/d` (`RENAME_EXCHANGE`) on the host in a loop, while readers,
/// each on a fresh hostfs every 16 resolutions (so directories keep being loaded mid-swap),
/// read `..`-heavy and symlink paths. The engine resolves `..` and symlinks in its own
/// namespace, and asks the host only what a directory holds, by descriptor; so whatever
/// was in `a/c` when it was loaded, nothing outside the root can be reached. Every read
/// must give the root's `secret` (never the outside ones), or fail with `ENOENT` or
/// `ESTALE`.
/// `SCALEVFS_ESCAPE_ROUNDS` sets the resolutions (default 20,000; `scripts/races-long.sh`
/// runs 400,000).
#[test]
fn no_escape_through_hostfs_while_directories_are_swapped() {
    let rounds: u64 = std::env::var("SCALEVFS_ESCAPE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let s = Scratch::new("escape");
    let (root, outside) = (s.0.join("root"), s.0.join("outside"));
    std::fs::create_dir_all(root.join("a/c")).unwrap();
    std::fs::create_dir_all(outside.join("d")).unwrap();
    std::fs::write(root.join("secret"), b"inside").unwrap();
    std::fs::write(outside.join("secret"), b"OUTSIDE").unwrap();
    std::fs::write(outside.join("d/secret"), b"OUTSIDE").unwrap();
    std::fs::write(s.0.join("secret"), b"OUTSIDE").unwrap();
    std::os::unix::fs::symlink("../../../../secret", root.join("a/c/up")).unwrap();
    std::os::unix::fs::symlink("/../../secret", root.join("a/abs")).unwrap();
    let paths = [
        "a/c/../../secret",
        "a/c/../../../secret",
        "a/c/../../../../../secret",
        "/a/c/../../secret",
        "a/abs",
        "a/c/up",
    ];
    let stop = std::sync::atomic::AtomicBool::new(false);
    let swaps = std::sync::atomic::AtomicU64::new(0);
    let (read, missing) = (
        std::sync::atomic::AtomicU64::new(0),
        std::sync::atomic::AtomicU64::new(0),
    );
    use std::sync::atomic::Ordering::SeqCst;
    std::thread::scope(|sc| {
        sc.spawn(|| {
            let a = std::fs::File::open(root.join("a")).unwrap();
            let o = std::fs::File::open(&outside).unwrap();
            while !stop.load(SeqCst) {
                rfs::renameat_with(&a, "c", &o, "d", rfs::RenameFlags::EXCHANGE).unwrap();
                swaps.fetch_add(1, SeqCst);
            }
        });
        let workers: Vec<_> = (0..2)
            .map(|w| {
                let (root, paths, read, missing, stop) = (&root, &paths, &read, &missing, &stop);
                sc.spawn(move || {
                    struct Stop<'a>(&'a std::sync::atomic::AtomicBool);
                    impl Drop for Stop<'_> {
                        fn drop(&mut self) {
                            self.0.store(true, SeqCst);
                        }
                    }
                    // Stops the swapper however this worker ends, so the test reports.
                    let _stop = Stop(stop);
                    let mut p = None;
                    for i in 0..rounds / 2 {
                        if i % 16 == 0 {
                            p = Some(serve_rw(root).process(Creds::root()));
                        }
                        let p = p.as_ref().unwrap();
                        let path = paths[(i as usize + w) % paths.len()];
                        match p.read_file(path) {
                            Ok(data) => {
                                assert_eq!(data, b"inside", "ESCAPED through {path}");
                                read.fetch_add(1, SeqCst);
                            }
                            // `ESTALE`: `a/c` was listed as one object and is another
                            // when opened to be loaded (the host changed it behind the
                            // engine, which the exclusive policy does not expect; see the
                            // hostfs module docs), as NFS says it.
                            Err(Errno::ENOENT | Errno::ESTALE) => {
                                missing.fetch_add(1, SeqCst);
                            }
                            Err(e) => panic!("{path}: {e:?}"),
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
    });
    eprintln!(
        "hostfs: {} resolutions ({} read inside, {} ENOENT or ESTALE), {} swaps, 0 escapes",
        read.load(SeqCst) + missing.load(SeqCst),
        read.load(SeqCst),
        missing.load(SeqCst),
        swaps.load(SeqCst)
    );
    assert!(swaps.load(SeqCst) > 0);
    assert!(read.load(SeqCst) > 0);
}

/// A writable hostfs over `root`.
fn serve_rw(root: &Path) -> Arc<Vfs> {
    Vfs::new(HostFs::new(root, HostFsOptions::default()).expect("hostfs over the tree"))
}

/// The inode cache's counters, through `Vfs::stats`: each host object is loaded once, with
/// one shard-lock acquisition per load and no other lock (W5's "zero global-lock
/// acquisitions per insert"), and a second walk of the tree loads nothing.
#[test]
fn inode_cache_counters_are_visible() {
    let s = Scratch::new("counters");
    build(&s.0);
    let vfs = serve(&s.0);
    let p = vfs.process(Creds::root());
    let objects = walkdir(&s.0, Path::new("/")).len() as u64;
    for rel in walkdir(&s.0, Path::new("/")) {
        p.lstat(&rel).unwrap();
    }
    let c = vfs
        .stats()
        .root_fs
        .inode_cache
        .expect("hostfs keeps an inode cache");
    // The root is inserted at creation; every other object is loaded by its directory's
    // load, once (hard links: one object, found again as a hit).
    assert!(
        c.loads >= objects.saturating_sub(2) && c.loads <= objects,
        "{c:?}, {objects} objects"
    );
    assert_eq!(c.shard_locks, c.loads, "{c:?}");
    for rel in walkdir(&s.0, Path::new("/")) {
        p.lstat(&rel).unwrap();
    }
    let again = vfs.stats().root_fs.inode_cache.unwrap();
    assert_eq!((again.loads, again.shard_locks), (c.loads, c.shard_locks));
    let line = format!("{}", vfs.stats());
    for key in ["icache_loads=", "dentries=", "dentry_evictions=", "sweeps="] {
        assert!(line.contains(key), "{key} in {line}");
    }
}

/// A host file system mounted inside the source (the confinement matrix's last case): its
/// objects are served, with their own device's index in the top 16 bits of the inode
/// number (so its numbers never meet the source's), `..` from its root and a symlink that
/// climbs out of it stay in the tree, and writes reach it. Needs root (`mount`); skipped
/// otherwise.
#[test]
fn a_mount_inside_the_source() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("a_mount_inside_the_source: SKIPPED (needs root to mount)");
        return;
    }
    let s = Scratch::new("inner-mount");
    let mnt = s.0.join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let ok = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "tmpfs"])
        .arg(&mnt)
        .status()
        .map(|st| st.success())
        .unwrap_or(false);
    assert!(ok, "mount -t tmpfs on {}", mnt.display());
    struct Umount(PathBuf);
    impl Drop for Umount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&self.0)
                .status();
        }
    }
    let _umount = Umount(mnt.clone());
    std::fs::write(mnt.join("file"), b"mounted").unwrap();
    std::os::unix::fs::symlink("../../../..", mnt.join("up")).unwrap();
    let vfs = serve_rw(&s.0);
    let p = vfs.process(Creds::root());
    assert_eq!(p.read_file("/mnt/file").unwrap(), b"mounted");
    let host = rfs::lstat(mnt.join("file")).unwrap();
    let ino = p.lstat("/mnt/file").unwrap().ino;
    assert_eq!(
        ino & ((1 << 48) - 1),
        host.st_ino,
        "the host's number below the index"
    );
    assert_ne!(ino >> 48, 0, "another device's objects carry its index");
    let root = p.stat("/").unwrap().ino;
    assert_eq!(p.stat("/mnt/..").unwrap().ino, root);
    assert_eq!(p.stat("/mnt/up").unwrap().ino, root);
    assert_eq!(p.stat("/mnt/up/mnt/file").unwrap().ino, ino);
    p.write_file("/mnt/new", b"written").unwrap();
    assert_eq!(std::fs::read(mnt.join("new")).unwrap(), b"written");
    p.rename("/mnt/new", "/mnt/renamed").unwrap();
    assert_eq!(std::fs::read(mnt.join("renamed")).unwrap(), b"written");
    // Across the two host file systems, as on the host: EXDEV.
    assert_eq!(p.rename("/mnt/renamed", "/out"), Err(Errno::EXDEV));
    assert_eq!(p.link("/mnt/renamed", "/out"), Err(Errno::EXDEV));
    assert!(std::fs::symlink_metadata(s.0.join("out")).is_err());
}

/// Four threads change two directories at once through one writable hostfs (creates,
/// writes, unlinks, renames within and across the directories, hard links, mkdir and
/// rmdir over a small set of names, so most calls race with another on the same name);
/// afterwards the host holds exactly what the engine shows: the same names, types, sizes,
/// link counts and hard links. Each change reaches the host under the engine's locks of the
/// directories it changes, so the host sees them in the engine's order.
#[test]
fn concurrent_changes_leave_the_host_as_the_engine_sees_it() {
    concurrent_changes("concurrent", HostFsOptions::default());
}

/// The same races with a cache of four objects: names are swept and directories loaded
/// again all the time, under the changes.
#[test]
fn concurrent_changes_with_a_tiny_cache() {
    concurrent_changes(
        "concurrent-tiny",
        HostFsOptions {
            max_inodes: Some(4),
            ..HostFsOptions::default()
        },
    );
}

fn concurrent_changes(scratch: &str, opts: HostFsOptions) {
    let s = Scratch::new(scratch);
    std::fs::create_dir(s.0.join("x")).unwrap();
    std::fs::create_dir(s.0.join("y")).unwrap();
    let vfs = Vfs::new(HostFs::new(&s.0, opts).expect("hostfs over the tree"));
    let rounds: u64 = std::env::var("SCALEVFS_HOSTFS_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    std::thread::scope(|sc| {
        for t in 0..4u64 {
            let p = vfs.process(Creds::root());
            sc.spawn(move || {
                let mut r = 0x9e37_79b9_7f4a_7c15u64 ^ (t + 1);
                let mut next = || {
                    r ^= r << 13;
                    r ^= r >> 7;
                    r ^= r << 17;
                    r
                };
                let name = |v: u64| format!("/{}/{}", ["x", "y"][(v & 1) as usize], (v >> 1) % 6);
                for _ in 0..rounds {
                    let (op, a, b) = (next() % 7, name(next()), name(next()));
                    // Errors are the races' (ENOENT, EEXIST, ENOTEMPTY, EISDIR, ...): only
                    // what is left in the end is checked.
                    let _ = match op {
                        0 => p.write_file(&a, &vec![b'w'; (next() % 5000) as usize]),
                        1 => p.unlink(&a),
                        2 => p.rename(&a, &b),
                        3 => p.link(&a, &b),
                        4 => p.mkdir(&a, 0o755),
                        5 => p.rmdir(&a),
                        _ => p.write_file(format!("{a}/f"), b"inner"),
                    };
                }
            });
        }
    });
    // The engine's tree, then the host's, as (path, type, size, nlink, ino) lines.
    let p = vfs.process(Creds::root());
    fn engine_tree(p: &scalevfs::Process, dir: &str, out: &mut Vec<String>) {
        let mut es = p.read_dir(dir).unwrap();
        es.sort_by(|a, b| a.name.cmp(&b.name));
        for e in es {
            let path = format!("{dir}/{}", String::from_utf8_lossy(&e.name));
            let st = p.lstat(&path).unwrap();
            let ino = st.ino & ((1 << 48) - 1);
            out.push(format!(
                "{path} {:o} {} {} {ino}",
                st.mode, st.size, st.nlink
            ));
            if st.mode & 0o170000 == 0o040000 {
                engine_tree(p, &path, out);
            }
        }
    }
    fn host_tree(root: &Path, dir: &str, out: &mut Vec<String>) {
        let mut es: Vec<_> = std::fs::read_dir(root.join(dir.trim_start_matches('/')))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        es.sort();
        for n in es {
            let path = format!("{dir}/{}", n.to_string_lossy());
            let st = rfs::lstat(root.join(path.trim_start_matches('/'))).unwrap();
            out.push(format!(
                "{path} {:o} {} {} {}",
                st.st_mode, st.st_size, st.st_nlink, st.st_ino
            ));
            if st.st_mode & 0o170000 == 0o040000 {
                host_tree(root, &path, out);
            }
        }
    }
    let (mut e, mut h) = (Vec::new(), Vec::new());
    for d in ["/x", "/y"] {
        engine_tree(&p, d, &mut e);
        host_tree(&s.0, d, &mut h);
    }
    assert!(!e.is_empty(), "the races left something to compare");
    assert_eq!(e, h, "engine (left) and host (right) differ");
}

/// With a cap on cached objects, a walk over more of them than it allows evicts unused
/// names and objects and loads directories again; every answer stays the host's, and the
/// caches stay near their caps (the cap, plus one directory's load before the next sweep,
/// plus the directories, which stay). A zero cap is refused.
#[test]
fn a_capped_cache_stays_near_its_cap() {
    let cap = 200;
    let (s, vfs) = scratch::capped_tree("capped", 4, 300, cap);
    let p = vfs.process(Creds::root());
    let mut peak = 0;
    for _ in 0..3 {
        for d in 0..4 {
            for f in 0..300 {
                let rel = format!("d{d}/f{f}");
                let want = rfs::lstat(s.0.join(&rel)).unwrap().st_ino;
                assert_eq!(p.lstat(format!("/{rel}")).unwrap().ino, want, "{rel}");
            }
            // This thread's path cache holds what it cached; a thread walking more names
            // than it keeps (2,048) lets them go the same way.
            scalevfs::clear_thread_cache();
            peak = peak.max(vfs.stats().root_fs.dentries);
        }
    }
    let st = vfs.stats().root_fs;
    assert!(st.dentry_evictions > 0, "{st:?}");
    assert!(peak <= cap + 301 + 4, "peak {peak} dentries");
    // An object goes once its names did, a grace period later. It is let go when a load
    // trims the inode cache, so at a load the cache holds the cap, the directory being
    // loaded, and the objects of the last sweep's names, still in their grace period
    // (alone, this test keeps 776). Other tests' pins can hold the epoch back longer: let
    // it pass, then load directories again until the inode cache is trimmed.
    let t0 = std::time::Instant::now();
    let mut round = 0;
    loop {
        crossbeam_epoch::pin().flush();
        let st = vfs.stats().root_fs;
        if st.inodes <= cap + 2 * 301 + 8 && st.inode_cache.unwrap().evictions > 0 {
            break;
        }
        assert!(t0.elapsed().as_secs() < 20, "{} objects cached", st.inodes);
        round += 1;
        p.lstat(format!("/d{}/f{}", round % 4, round % 300))
            .unwrap();
        scalevfs::clear_thread_cache();
    }
    for (max_dentries, max_inodes) in [(Some(0), None), (None, Some(0))] {
        let opts = HostFsOptions {
            max_dentries,
            max_inodes,
            ..HostFsOptions::default()
        };
        assert_eq!(HostFs::new(&s.0, opts).err(), Some(Errno::EINVAL));
    }
}

/// Lookups and listings on several threads while a cache of 50 objects is swept under
/// them all the time: every answer is the host's (the lockless walk retries when a name
/// it stands on is evicted, and never takes an evicted dentry for a missing name), and a
/// listing read in pieces returns each entry exactly once.
#[test]
fn lookups_and_listings_race_sweeps() {
    let s = Scratch::new("sweeps");
    let mut want = std::collections::HashMap::new();
    for d in 0..4 {
        std::fs::create_dir(s.0.join(format!("d{d}"))).unwrap();
        for f in 0..100 {
            let rel = format!("d{d}/f{f}");
            std::fs::write(s.0.join(&rel), b"").unwrap();
            want.insert(
                format!("/{rel}"),
                rfs::lstat(s.0.join(&rel)).unwrap().st_ino,
            );
        }
    }
    let opts = HostFsOptions {
        max_inodes: Some(50),
        ..HostFsOptions::default()
    };
    let vfs = Vfs::new(HostFs::new(&s.0, opts).unwrap());
    let rounds: u64 = std::env::var("SCALEVFS_HOSTFS_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    let want = &want;
    std::thread::scope(|sc| {
        for t in 0..3u64 {
            let p = vfs.process(Creds::root());
            sc.spawn(move || {
                let mut r = 0x2545_f491_4f6c_dd1du64 ^ (t + 1);
                for i in 0..rounds * 4 {
                    r ^= r << 13;
                    r ^= r >> 7;
                    r ^= r << 17;
                    let path = format!("/d{}/f{}", r % 4, (r >> 8) % 100);
                    assert_eq!(p.lstat(&path).map(|s| s.ino), Ok(want[&path]), "{path}");
                    let missing = format!("/d{}/g{}", r % 4, (r >> 8) % 100);
                    assert_eq!(p.lstat(&missing).err(), Some(Errno::ENOENT), "{missing}");
                    if i % 64 == 0 {
                        scalevfs::clear_thread_cache();
                    }
                }
            });
        }
        let p = vfs.process(Creds::root());
        sc.spawn(move || {
            for i in 0..rounds / 10 {
                let fd = p
                    .open(format!("/d{}", i % 4), VO::RDONLY | VO::DIRECTORY, 0)
                    .unwrap();
                let mut names = Vec::new();
                loop {
                    let part = p.getdents(fd, 9).unwrap();
                    if part.is_empty() {
                        break;
                    }
                    names.extend(part.into_iter().map(|e| e.name));
                }
                p.close(fd).unwrap();
                let n = names.len();
                names.sort();
                names.dedup();
                assert_eq!((names.len(), n), (102, 102), "each entry once");
            }
        });
    });
    let st = vfs.stats().root_fs;
    assert!(st.dentry_evictions > 0, "{st:?}");
}

/// hostfs under the shared policy with a TTL of `ttl_ms`.
fn serve_shared(root: &Path, ttl_ms: u64) -> Arc<Vfs> {
    let opts = HostFsOptions {
        policy: HostPolicy::Shared {
            ttl: std::time::Duration::from_millis(ttl_ms),
        },
        ..HostFsOptions::default()
    };
    Vfs::new(HostFs::new(root, opts).expect("hostfs over the tree"))
}

/// The names of `dir` through the engine, sorted.
fn engine_names(p: &scalevfs::Process, dir: &str) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = p
        .read_dir(dir)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    v.sort();
    v
}

/// The names of `dir` on the host, sorted.
fn host_names(dir: &Path) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().as_bytes().to_vec())
        .collect();
    v.sort();
    v
}

/// Every object through the engine reads as the host has it (lstat but `st_dev` and
/// atime, the names of each directory). The change time may be the engine's, which keeps
/// the later of its own and the host's (see `Inode::refresh`): its own changes stamp it
/// just after the host call did.
fn same_as_host(p: &scalevfs::Process, root: &Path) {
    let tree = p.walk_tree("/").unwrap();
    let dev = tree[0].1.dev;
    let mut ours: Vec<PathBuf> = tree.iter().map(|(p, _)| p.clone()).collect();
    let mut host = walkdir(root, Path::new("/"));
    ours.sort();
    host.sort();
    assert_eq!(ours, host);
    for (path, st) in &tree {
        let mut want = host_lstat(root, path, dev);
        want.blksize = st.blksize;
        want.atime = st.atime;
        assert!(st.ctime >= want.ctime, "ctime of {}", path.display());
        if st.ctime.sec - want.ctime.sec <= 1 {
            want.ctime = st.ctime;
        }
        assert_eq!(*st, want, "lstat of {}", path.display());
    }
}

/// The shared policy with a TTL of zero asks the host at every use, so every change made
/// on the host behind the engine shows at once: a new name (cached before as missing), a
/// removed one, a name replaced by another object, a rename, a chmod, a file's new size, a
/// directory removed with the names cached in it, and one moved elsewhere. The exclusive
/// policy, over the same changes, keeps what it loaded. Then the engine's own changes
/// still reach the host.
#[test]
fn the_shared_policy_sees_changes_made_behind_it() {
    let s = Scratch::new("shared");
    let r = |x: &str| s.0.join(x);
    for d in [
        "d", "gone", "gone/sub", "mv", "d/s1", "d/s1/m", "d/s2", "cw",
    ] {
        std::fs::create_dir(r(d)).unwrap();
    }
    for f in ["x", "d/y", "gone/sub/f", "mv/f", "grow", "d/s1/m/f"] {
        std::fs::write(r(f), b"1").unwrap();
    }
    let shared = serve_shared(&s.0, 0);
    let exclusive = serve_rw(&s.0);
    let (p, q) = (
        shared.process(Creds::root()),
        exclusive.process(Creds::root()),
    );
    for p in [&p, &q] {
        same_as_host(p, &s.0);
        assert_eq!(p.lstat("/n").err(), Some(Errno::ENOENT));
    }
    let old_x = p.lstat("/x").unwrap().ino;
    let p2 = shared.process(Creds::root());
    p2.chdir("/cw").unwrap();
    // Behind the engine.
    std::fs::write(r("n"), b"new").unwrap();
    std::fs::remove_file(r("x")).unwrap();
    std::fs::write(r("x2"), b"another").unwrap();
    std::fs::rename(r("x2"), r("x")).unwrap();
    std::fs::rename(r("d/y"), r("d/z")).unwrap();
    std::fs::set_permissions(
        r("d/z"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    std::fs::write(r("grow"), vec![9u8; 5000]).unwrap();
    std::fs::remove_dir_all(r("gone")).unwrap();
    std::fs::rename(r("mv"), r("d/moved")).unwrap();
    std::fs::rename(r("d/s1/m"), r("d/s2/m")).unwrap();
    std::fs::remove_dir(r("cw")).unwrap();
    // Shared: all of it, at once. A directory moved is found at its new place first,
    // while its old parent still lists it.
    assert_eq!(p.read_file("/d/s2/m/f").unwrap(), b"1");
    assert_eq!(p.lstat("/d/s1/m").err(), Some(Errno::ENOENT));
    assert_eq!(p.read_file("/d/s2/m/f").unwrap(), b"1");
    // A directory removed under a caller standing in it: as on Linux, it stats with no
    // link, and nothing can be made in it.
    assert_eq!(p2.stat(".").unwrap().nlink, 0);
    assert_eq!(p2.mkdir("x", 0o755).err(), Some(Errno::ENOENT));
    assert_eq!(p2.lstat("x").err(), Some(Errno::ENOENT));
    drop(p2);
    assert_eq!(p.read_file("/n").unwrap(), b"new");
    assert_ne!(p.lstat("/x").unwrap().ino, old_x);
    assert_eq!(p.read_file("/x").unwrap(), b"another");
    assert_eq!(p.lstat("/d/y").err(), Some(Errno::ENOENT));
    assert_eq!(p.lstat("/d/z").unwrap().mode & 0o7777, 0o600);
    assert_eq!(p.lstat("/grow").unwrap().size, 5000);
    assert_eq!(p.read_file("/grow").unwrap(), vec![9u8; 5000]);
    assert_eq!(p.lstat("/gone/sub/f").err(), Some(Errno::ENOENT));
    assert_eq!(p.lstat("/gone").err(), Some(Errno::ENOENT));
    assert_eq!(p.lstat("/mv").err(), Some(Errno::ENOENT));
    assert_eq!(p.read_file("/d/moved/f").unwrap(), b"1");
    assert_eq!(engine_names(&p, "/"), host_names(&s.0));
    assert_eq!(engine_names(&p, "/d"), host_names(&r("d")));
    same_as_host(&p, &s.0);
    assert!(shared.stats().root_fs.revalidations > 0);
    // Exclusive: what it loaded.
    assert_eq!(q.lstat("/n").err(), Some(Errno::ENOENT));
    assert_eq!(q.lstat("/d/y").unwrap().mode & 0o7777, 0o644);
    assert_eq!(q.lstat("/grow").unwrap().size, 1);
    assert!(q.lstat("/gone/sub/f").is_ok());
    assert_eq!(exclusive.stats().root_fs.revalidations, 0);
    drop(q);
    drop(exclusive);
    // The engine's own changes still reach the host, and read back.
    p.write_file("/d/made", b"made").unwrap();
    p.rename("/d/z", "/d/z2").unwrap();
    p.mkdir("/d/moved/sub", 0o755).unwrap();
    assert_eq!(std::fs::read(r("d/made")).unwrap(), b"made");
    assert!(r("d/z2").exists() && r("d/moved/sub").is_dir());
    same_as_host(&p, &s.0);
}

/// Within its TTL, the shared policy answers from the cache and never asks the host: a
/// name created on the host behind it stays missing, and a stat costs no revalidation.
/// (The TTL is an hour, so nothing here depends on timing.) Then, past a short TTL, the
/// change is seen.
#[test]
fn the_shared_policy_trusts_the_cache_within_its_ttl() {
    let s = Scratch::new("ttl");
    std::fs::write(s.0.join("f"), b"1").unwrap();
    let vfs = serve_shared(&s.0, 3_600_000);
    let p = vfs.process(Creds::root());
    assert_eq!(p.lstat("/n").err(), Some(Errno::ENOENT));
    assert!(p.lstat("/f").is_ok());
    let before = vfs.stats().root_fs.revalidations;
    std::fs::write(s.0.join("n"), b"new").unwrap();
    for _ in 0..100 {
        assert_eq!(p.lstat("/n").err(), Some(Errno::ENOENT));
        assert!(p.lstat("/f").is_ok());
    }
    assert_eq!(vfs.stats().root_fs.revalidations, before);
    // A TTL of 20 ms: past it, the new name shows, and a name replaced by another object
    // names the new one, also for a path this thread looked up many times (a path cache
    // that kept it would answer past its deadline).
    let vfs = serve_shared(&s.0, 20);
    let p = vfs.process(Creds::root());
    let old = p.lstat("/n").unwrap().ino;
    for _ in 0..10 {
        assert_eq!(p.lstat("/n").unwrap().ino, old);
    }
    std::fs::write(s.0.join("n2"), b"new").unwrap();
    std::fs::write(s.0.join("tmp"), b"replaced").unwrap();
    std::fs::rename(s.0.join("tmp"), s.0.join("n")).unwrap();
    let now = rfs::lstat(s.0.join("n")).unwrap().st_ino;
    std::thread::sleep(std::time::Duration::from_millis(40));
    assert_eq!(p.lstat("/n").unwrap().ino, now);
    assert_eq!(p.read_file("/n").unwrap(), b"replaced");
    assert!(p.lstat("/n2").is_ok());
}

/// An object known by two names opens by the one that still names it. Here `p` and `q`
/// are hard links of one file; the host then gives `p` to another file. Opening `q`
/// (checked and current) must read the first file: the engine opened the data by the
/// first name it had learnt, `p`, so every retry of the open failed with `ESTALE` (the
/// race test with a TTL found it as a name `tmp` left ahead of `a`). At TTL 0 too, where
/// the walk checks `q` before the open.
#[test]
fn an_object_opens_by_a_name_that_still_names_it() {
    for ttl_ms in [3_600_000, 0] {
        let s = Scratch::new(&format!("stale-first-name-{ttl_ms}"));
        let r = |x: &str| s.0.join(x);
        std::fs::create_dir(r("d")).unwrap();
        std::fs::write(r("d/p"), b"first").unwrap();
        std::fs::hard_link(r("d/p"), r("d/q")).unwrap();
        // The engine learns the names in the host's listing order: the first one listed
        // is the one the host then gives away.
        let order: Vec<String> = std::fs::read_dir(r("d"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        let (gone, kept) = (format!("d/{}", order[0]), format!("/d/{}", order[1]));
        let vfs = serve_shared(&s.0, ttl_ms);
        let p = vfs.process(Creds::root());
        assert_eq!(engine_names(&p, "/d"), [b"p".to_vec(), b"q".to_vec()]);
        std::fs::write(r("d/new"), b"second").unwrap();
        std::fs::rename(r("d/new"), r(&gone)).unwrap();
        assert_eq!(p.read_file(&kept).unwrap(), b"first", "ttl {ttl_ms} ms");
        let fd = p.open(&kept, VO::RDWR, 0).unwrap();
        p.write(fd, b"FIRST").unwrap();
        p.close(fd).unwrap();
        assert_eq!(std::fs::read(r(&kept[1..])).unwrap(), b"FIRST");
        assert_eq!(std::fs::read(r(&gone)).unwrap(), b"second");
    }
}

/// `fstat` of what a caller holds open revalidates too under the shared policy (and so
/// does FUSE's GETATTR, which goes through it): an open file's size and mode, one still
/// open after its name went on the host (its link count goes to 0), a directory's mode,
/// and an `O_PATH` file's mode, reached by its name. The exclusive policy keeps what it
/// loaded, and within a long TTL nothing is asked.
#[test]
fn the_shared_policy_revalidates_what_is_held_open() {
    let s = Scratch::new("held");
    let r = |x: &str| s.0.join(x);
    std::fs::create_dir(r("d")).unwrap();
    for f in ["f", "gone", "p"] {
        std::fs::write(r(f), b"1").unwrap();
    }
    let mode = |x: &str, m: u32| {
        std::fs::set_permissions(r(x), std::os::unix::fs::PermissionsExt::from_mode(m)).unwrap()
    };
    let shared = serve_shared(&s.0, 0);
    let exclusive = serve_rw(&s.0);
    let long = serve_shared(&s.0, 3_600_000);
    let open = |vfs: &Arc<Vfs>| {
        let p = vfs.process(Creds::root());
        let fds = [
            p.open("/f", VO::RDONLY, 0).unwrap(),
            p.open("/gone", VO::RDONLY, 0).unwrap(),
            p.open("/d", VO::RDONLY | VO::DIRECTORY, 0).unwrap(),
            p.open("/p", VO::PATH, 0).unwrap(),
        ];
        (p, fds)
    };
    let (ps, fs) = open(&shared);
    let (pe, fe) = open(&exclusive);
    let (pl, fl) = open(&long);
    let before = long.stats().root_fs.revalidations;
    let was = |x: &str| {
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(r(x)).unwrap().permissions())
            & 0o7777
    };
    let (f0, d0, p0) = (was("f"), was("d"), was("p"));
    // Behind the engine.
    std::fs::write(r("f"), vec![7u8; 3000]).unwrap();
    mode("f", 0o600);
    std::fs::remove_file(r("gone")).unwrap();
    mode("d", 0o700);
    mode("p", 0o640);
    let st = |p: &scalevfs::Process, fd| p.fstat(fd).unwrap();
    assert_eq!(st(&ps, fs[0]).size, 3000);
    assert_eq!(st(&ps, fs[0]).mode & 0o7777, 0o600);
    assert_eq!(st(&ps, fs[1]).nlink, 0);
    assert_eq!(st(&ps, fs[2]).mode & 0o7777, 0o700);
    assert_eq!(st(&ps, fs[3]).mode & 0o7777, 0o640);
    let empty = |p: &scalevfs::Process, fd| p.fstatat(fd, "", scalevfs::AtFlags::EMPTY_PATH);
    assert_eq!(empty(&ps, fs[3]).unwrap().mode & 0o7777, 0o640);
    for (p, f) in [(&pe, fe), (&pl, fl)] {
        assert_eq!(st(p, f[0]).size, 1);
        assert_eq!(st(p, f[0]).mode & 0o7777, f0);
        assert_eq!(st(p, f[1]).nlink, 1);
        assert_eq!(st(p, f[2]).mode & 0o7777, d0);
        assert_eq!(st(p, f[3]).mode & 0o7777, p0);
    }
    assert_eq!(long.stats().root_fs.revalidations, before);
}

/// A directory's listing refreshes what it lists, but a child directory's deadline also
/// covers the child's own entries, which only the child's revalidation can vouch for. So
/// relisting `/` must not make `/d`'s cached names good for another TTL: a name created in
/// `d` on the host shows once `d`'s TTL has passed, however recently `/` was listed.
#[test]
fn a_listing_does_not_vouch_for_the_entries_of_a_child_directory() {
    let s = Scratch::new("vouch");
    std::fs::create_dir(s.0.join("d")).unwrap();
    std::fs::write(s.0.join("d/x"), b"1").unwrap();
    let vfs = serve_shared(&s.0, 200);
    let p = vfs.process(Creds::root());
    assert_eq!(engine_names(&p, "/d"), [b"x".to_vec()]);
    assert_eq!(engine_names(&p, "/").len(), 1);
    std::fs::write(s.0.join("d/y"), b"1").unwrap();
    std::fs::write(s.0.join("z"), b"1").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    // `/` changed: listed again, and `d` found in it, the same directory.
    assert_eq!(engine_names(&p, "/").len(), 2);
    assert_eq!(engine_names(&p, "/d"), [b"x".to_vec(), b"y".to_vec()]);
}

/// The shared policy while the host changes the tree all the time (a TTL of zero, so
/// every use revalidates): files replaced, renamed back and forth, and directories
/// removed and made again, by a host thread; lookups, reads and listings through the
/// engine on three others. Every answer is one the host could have given at some moment:
/// `ENOENT` is the only error, a listing holds only names the host made, and a file's
/// data is one of the contents it ever had. No panic, no hang (a watchdog ends the test).
/// Once the host is quiet, the engine reads as the host has it.
#[test]
fn the_shared_policy_races_changes_on_the_host() {
    races_on_the_host("shared-race", 0);
}

/// The same with a TTL of 10 ms, so that what was loaded is trusted for a while between
/// changes: it found a parent's listing extending a child directory's deadline (see
/// `a_listing_does_not_vouch_for_the_entries_of_a_child_directory`); once quiet for more
/// than a TTL, the engine must read as the host has it.
#[test]
fn the_shared_policy_races_changes_on_the_host_with_a_ttl() {
    races_on_the_host("shared-race-ttl", 10);
}

fn races_on_the_host(scratch: &str, ttl_ms: u64) {
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
    let s = Scratch::new(scratch);
    let root = s.0.clone();
    for d in 0..3 {
        std::fs::create_dir(root.join(format!("d{d}"))).unwrap();
        std::fs::write(root.join(format!("d{d}/a")), b"A").unwrap();
    }
    let vfs = serve_shared(&root, ttl_ms);
    let stop = Arc::new(AtomicBool::new(false));
    let secs = std::env::var("SCALEVFS_RACE_SECS")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(2.0);
    let host = {
        let (root, stop) = (root.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Relaxed) {
                let d = root.join(format!("d{}", i % 3));
                let _ = std::fs::write(d.join("tmp"), if i % 2 == 0 { "B" } else { "CC" });
                let _ = std::fs::rename(d.join("tmp"), d.join("a"));
                let _ = std::fs::rename(d.join("a"), d.join("b"));
                let _ = std::fs::rename(d.join("b"), d.join("a"));
                if i % 7 == 0 {
                    let _ = std::fs::remove_dir_all(&d);
                    let _ = std::fs::create_dir(&d);
                    let _ = std::fs::write(d.join("tmp"), b"A");
                    let _ = std::fs::rename(d.join("tmp"), d.join("a"));
                }
                i += 1;
            }
        })
    };
    let names: [&[u8]; 3] = [b"a", b"b", b"tmp"];
    let readers: Vec<_> = (0..3)
        .map(|t| {
            let (vfs, stop) = (vfs.clone(), stop.clone());
            std::thread::spawn(move || {
                let p = vfs.process(Creds::root());
                let mut i = 0u64;
                while !stop.load(Relaxed) {
                    let d = format!("/d{}", (i + t) % 3);
                    match p.read_file(format!("{d}/a")) {
                        Ok(data) => {
                            assert!([&b"A"[..], b"B", b"CC"].contains(&&data[..]), "{data:?}")
                        }
                        Err(e) => assert_eq!(e, Errno::ENOENT),
                    }
                    match p.lstat(format!("{d}/b")) {
                        Ok(st) => assert_eq!(st.mode & 0o170000, 0o100000),
                        Err(e) => assert_eq!(e, Errno::ENOENT),
                    }
                    match p.read_dir(&d) {
                        Ok(list) => {
                            for e in list {
                                assert!(names.contains(&&e.name[..]), "{:?}", e.name);
                            }
                        }
                        Err(e) => assert_eq!(e, Errno::ENOENT),
                    }
                    i += 1;
                }
            })
        })
        .collect();
    let t0 = std::time::Instant::now();
    while t0.elapsed().as_secs_f64() < secs {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    stop.store(true, Relaxed);
    // The watchdog: every thread ends within 30 s of the stop.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    for h in readers.into_iter().chain([host]) {
        while !h.is_finished() {
            assert!(std::time::Instant::now() < deadline, "a thread hangs");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        h.join().unwrap();
    }
    // Quiet now: past one TTL, everything the engine answers is the host's.
    std::thread::sleep(std::time::Duration::from_millis(3 * ttl_ms));
    same_as_host(&vfs.process(Creds::root()), &root);
}

/// The shared policy with a cache capped at 10 objects: names are swept and directories
/// unloaded all the time, and a directory loaded again reconciles the names it kept with
/// what the host now holds (a kept name replaced or removed on the host is not trusted).
#[test]
fn the_shared_policy_with_a_tiny_cache() {
    let s = Scratch::new("shared-capped");
    let r = |x: &str| s.0.join(x);
    for d in 0..3 {
        std::fs::create_dir(r(&format!("d{d}"))).unwrap();
        for f in 0..20 {
            std::fs::write(r(&format!("d{d}/f{f}")), b"1").unwrap();
        }
    }
    let opts = HostFsOptions {
        max_inodes: Some(10),
        policy: HostPolicy::Shared {
            ttl: std::time::Duration::ZERO,
        },
        ..HostFsOptions::default()
    };
    let vfs = Vfs::new(HostFs::new(&s.0, opts).unwrap());
    let p = vfs.process(Creds::root());
    // Held open, so its name stays cached through every sweep.
    let fd = p.open("/d0/f0", VO::RDONLY, 0).unwrap();
    for round in 0..3 {
        same_as_host(&p, &s.0);
        for d in 0..3 {
            for f in (round..20).step_by(3) {
                let name = r(&format!("d{d}/f{f}"));
                if f % 2 == 0 {
                    std::fs::write(r("tmp"), format!("{round}")).unwrap();
                    std::fs::rename(r("tmp"), &name).unwrap();
                } else {
                    let _ = std::fs::remove_file(&name);
                }
            }
        }
        std::fs::write(r("d0/tmp"), b"new f0").unwrap();
        std::fs::rename(r("d0/tmp"), r("d0/f0")).unwrap();
        assert_eq!(p.read_file("/d0/f0").unwrap(), b"new f0");
    }
    same_as_host(&p, &s.0);
    p.close(fd).unwrap();
    // A name kept through sweeps (a directory's: directories are not evicted) and removed
    // on the host: once its parent is swept and loaded again, a listing does not show it,
    // even within the TTL (an hour here): a load reconciles what it kept.
    let opts = HostFsOptions {
        max_inodes: Some(10),
        policy: HostPolicy::Shared {
            ttl: std::time::Duration::from_secs(3600),
        },
        ..HostFsOptions::default()
    };
    let vfs = Vfs::new(HostFs::new(&s.0, opts).unwrap());
    let p = vfs.process(Creds::root());
    std::fs::create_dir(r("d1/sub")).unwrap();
    assert!(engine_names(&p, "/d1").contains(&b"sub".to_vec()));
    std::fs::remove_dir(r("d1/sub")).unwrap();
    for _ in 0..3 {
        for d in [0, 2] {
            for f in 0..20 {
                let _ = p.lstat(format!("/d{d}/f{f}"));
            }
        }
    }
    assert_eq!(engine_names(&p, "/d1"), host_names(&r("d1")));
    assert!(vfs.stats().root_fs.dentry_evictions > 0);
}

/// Extended attributes of a file held by an `O_PATH` handle (as the FUSE server holds every
/// object) once its last name went: hostfs keeps a descriptor of such a file from the
/// unlink (or the rename over it) to its eviction, since there is no name left to open it
/// by. Before, every call failed with `ESTALE`.
#[test]
fn xattrs_of_an_unlinked_file_held_by_a_path_handle() {
    let s = Scratch::new("xattrs-unlinked");
    let vfs = serve_rw(&s.0);
    let p = vfs.process(Creds::root());
    let none = XattrFlags::empty();
    for (file, gone) in [("/f", "unlink"), ("/g", "rename over")] {
        p.write_file(file, b"data").unwrap();
        p.setxattr(file, "user.a", b"1", none).unwrap();
        let h = p.open(file, VO::PATH, 0).unwrap();
        lose_last_name(&p, file, gone);
        let x = p.xattrs_of(h).unwrap();
        let mut buf = [0u8; 64];
        assert_eq!(x.get("user.a", &mut buf), Ok(1), "{gone}");
        x.set("user.b", b"22", none).unwrap();
        let n = x.list(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"user.b\0user.a\0", "{gone}");
        x.remove("user.a").unwrap();
        // The calls by descriptor refuse an `O_PATH` handle, as Linux's do.
        assert_eq!(p.fgetxattr(h, "user.b", &mut buf), Err(Errno::EBADF));
        p.close(h).unwrap();
    }
    assert_eq!(
        std::fs::read_dir(&s.0).unwrap().count(),
        1,
        "only /g is left"
    );
}

/// Takes the only name of `file` away: by `unlink`, or by a rename over it.
fn lose_last_name(p: &scalevfs::Process, file: &str, how: &str) {
    if how == "unlink" {
        p.unlink(file).unwrap();
    } else {
        p.write_file("/other", b"").unwrap();
        p.rename("/other", file).unwrap();
    }
}

/// A file whose last name went while an `O_PATH` handle held it opens again through the
/// handle, for reading and for writing, as Linux's `/proc/self/fd/N` does: hostfs finds
/// the host file by the descriptor it kept when the last name went. (The same path serves
/// an `open` that took its hold under the directory lock and lost the name to a racing
/// unlink before it opened the host file: `tests/stress.rs` over hostfs.) The kernel, on
/// the same kind of tree, is the oracle.
#[test]
fn an_unlinked_file_opens_again_by_its_handle() {
    let s = Scratch::new("reopen-unlinked");
    let vfs = serve_rw(&s.0);
    let p = vfs.process(Creds::root());
    for (file, gone) in [("/f", "unlink"), ("/g", "rename over")] {
        p.write_file(file, b"data").unwrap();
        let h = p.open(file, VO::PATH, 0).unwrap();
        lose_last_name(&p, file, gone);
        let w = p.reopen(h, VO::RDWR).unwrap();
        assert_eq!(p.pwrite(w, b"DA", 0), Ok(2), "{gone}");
        let r = p.reopen(h, VO::RDONLY).unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(p.pread(r, &mut buf, 0), Ok(4), "{gone}");
        assert_eq!(&buf[..4], b"DAta", "{gone}");
        assert_eq!(p.fstat(w).unwrap().nlink, 0, "{gone}");
        for fd in [w, r, h] {
            p.close(fd).unwrap();
        }
    }
    // The kernel: the same through `/proc/self/fd`.
    let k = s.0.join("k");
    std::fs::write(&k, b"data").unwrap();
    let h = rfs::open(&k, OFlags::PATH, Mode::empty()).unwrap();
    rfs::unlink(&k).unwrap();
    let proc_path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&h));
    let w = rfs::open(&proc_path, OFlags::RDWR, Mode::empty()).unwrap();
    assert_eq!(rustix::io::pwrite(&w, b"DA", 0), Ok(2));
    assert_eq!(rfs::fstat(&w).unwrap().st_nlink, 0);
}

/// Descriptors of this process, other than `O_PATH` ones, open on `path` (read from
/// `/proc/self/fd` and `/proc/self/fdinfo`).
fn data_descriptors_of(path: &Path) -> usize {
    const O_PATH: u32 = 0o10000000;
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return 0;
    };
    dir.filter_map(|e| e.ok())
        .filter(|e| std::fs::read_link(e.path()).is_ok_and(|l| l == path))
        .filter(|e| {
            let info = Path::new("/proc/self/fdinfo").join(e.file_name());
            std::fs::read_to_string(info).is_ok_and(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("flags:"))
                    .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())
                    .is_some_and(|f| f & O_PATH == 0)
            })
        })
        .count()
}

/// Waits (up to 10 s, flushing this thread's epoch garbage) until no data descriptor of
/// this process is open on `path`; fails naming `after`.
fn wait_for_no_descriptor_of(path: &Path, after: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while data_descriptors_of(path) != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the host descriptor outlived {after}"
        );
        crossbeam_epoch::pin().flush();
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// A closed file's host descriptor is closed a grace period after its last close, not
/// whenever the table's batch of closed descriptions fills (`FdTable::retire_locked`): a
/// host descriptor held on keeps an unlinked file's space, and counts against the server's
/// descriptor limit.
#[test]
fn a_closed_files_host_descriptor_closes_soon() {
    let s = Scratch::new("data-fd-closes");
    let vfs = serve_rw(&s.0);
    let p = vfs.process(Creds::root());
    let host = s.0.join("f");
    let all_closed = |what: &str| {
        wait_for_no_descriptor_of(&host, &format!("its file's close ({what})"));
    };
    p.write_file("/f", b"data").unwrap();
    all_closed("write_file");
    let fd = p.open("/f", VO::RDONLY, 0).unwrap();
    let mut buf = [0u8; 8];
    assert_eq!(p.read(fd, &mut buf), Ok(4));
    assert_eq!(
        data_descriptors_of(&host),
        1,
        "the open file's host descriptor"
    );
    p.close(fd).unwrap();
    all_closed("open, read, close");
}

/// A directory removed while it is open keeps a descriptor of its own on the host
/// (`HostFs::kept`), by which its extended attributes are still reached, until its last
/// close, and not after: held on, it would count against the server's descriptor limit.
#[test]
fn a_removed_open_directorys_descriptor_goes_with_its_last_close() {
    let s = Scratch::new("removed-dir-fd");
    let vfs = serve_rw(&s.0);
    let p = vfs.process(Creds::root());
    p.mkdir("/e", 0o755).unwrap();
    let d = p.open("/e", VO::RDONLY | VO::DIRECTORY, 0).unwrap();
    p.fsetxattr(d, "user.a", b"1", XattrFlags::empty()).unwrap();
    p.rmdir("/e").unwrap();
    let gone = PathBuf::from(format!("{} (deleted)", s.0.join("e").display()));
    // The kept one, and the node's own until the node it left with is freed.
    assert!(
        data_descriptors_of(&gone) >= 1,
        "the removed directory's own"
    );
    let mut buf = [0u8; 16];
    assert_eq!(p.fgetxattr(d, "user.a", &mut buf), Ok(1));
    assert_eq!(p.flistxattr(d, &mut buf), Ok(7));
    p.close(d).unwrap();
    wait_for_no_descriptor_of(&gone, "the directory's last close");
}

/// A cached name can outlive its object under the shared policy: the engine's link count
/// is the host's as last seen, and a name removed on the host may stay cached for its TTL.
/// Here `a` and `b` are hard links; `b` goes on the host; a revalidation of `a` then sees
/// one link, and the engine's unlink of `a` takes the count to 0, so the object is
/// evicted while the cached name `b` still links it. Opening `b` (with and without
/// `O_CREAT`) must ask the host again and answer as it does now, never hang or panic:
/// - `b` stays gone: `ENOENT`, and `O_CREAT` makes a new file. Before daff384 the open
///   with `O_CREAT` panicked.
/// - `b` is made again on the host (`relinked`), so the count was lower than the truth and
///   the host still names the evicted object: its node stayed in hostfs's cache with the
///   evicted inode, every listing of `d` gave that inode back for `b`, every walk found it
///   evicted and listed `d` again, and the open never returned (with `O_CREAT`: `ESTALE`).
///   Now the node goes with the inode, and `b` is loaded as a new object.
#[test]
fn a_stale_name_of_an_evicted_object_is_looked_up_again() {
    for (relinked, creat) in [(false, false), (false, true), (true, false), (true, true)] {
        let s = Scratch::new(&format!("stale-evicted-{relinked}-{creat}"));
        let r = |x: &str| s.0.join(x);
        std::fs::create_dir(r("d")).unwrap();
        std::fs::write(r("d/a"), b"1").unwrap();
        std::fs::hard_link(r("d/a"), r("d/b")).unwrap();
        // Old enough a change time for `d`'s first listing to be trusted (see hostfs).
        std::thread::sleep(std::time::Duration::from_millis(100));
        let vfs = serve_shared(&s.0, 200);
        let p = vfs.process(Creds::root());
        let d = p.open("/d", VO::RDONLY | VO::DIRECTORY, 0).unwrap();
        let a = p.openat(d, "a", VO::RDONLY, 0).unwrap();
        assert_eq!(p.fstatat(d, "b", AtF::SYMLINK_NOFOLLOW).unwrap().nlink, 2);
        // Past the TTL, a walk through `d` revalidates its entries, unchanged on the
        // host, without listing it: `d` is good for another TTL, the file is not.
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert_eq!(p.fstatat(d, "x", AtF::empty()).err(), Some(Errno::ENOENT));
        std::fs::remove_file(r("d/b")).unwrap();
        // `fstat` of the open `a` revalidates the file: one link.
        assert_eq!(p.fstat(a).unwrap().nlink, 1);
        if relinked {
            std::fs::hard_link(r("d/a"), r("d/b")).unwrap();
        }
        p.close(a).unwrap();
        p.unlinkat(d, "a", AtF::empty()).unwrap();
        // On another thread, so that a hang fails the test.
        let (tx, rx) = std::sync::mpsc::channel();
        let q = p.fork();
        std::thread::spawn(move || {
            let r = if creat {
                q.openat(d, "b", VO::RDWR | VO::CREAT, 0o644)
            } else {
                q.openat(d, "b", VO::RDONLY, 0)
            };
            let n = r.and_then(|fd| {
                let n = q.fstat(fd).map(|st| st.nlink);
                q.close(fd).unwrap();
                n
            });
            tx.send(n).unwrap();
        });
        let case = format!("relinked {relinked}, O_CREAT {creat}");
        let got = rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("{case}: the open of `b` never returned"));
        let want = if relinked || creat {
            Ok(1)
        } else {
            Err(Errno::ENOENT)
        };
        assert_eq!(got, want, "{case}");
    }
}

/// hostfs opens a file's data by one of its names. Two threads create-or-open `/d/f`
/// while a third renames it away, so the name an open read from the file's node can be
/// moved (and given to a new file) before the open reaches the host: that open failed
/// with `ENOENT` (or `ESTALE`: the name named another object), which Linux never returns
/// for an `O_CREAT` open of a name in a directory that exists. It failed in every one of
/// five runs before the fix. Now a rename of the file waits for the opens using its names, and an
/// open that finds the name moved uses the new one.
#[test]
fn opens_by_name_race_renames_of_that_name() {
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
    let s = Scratch::new("open-rename-race");
    std::fs::create_dir(s.0.join("d")).unwrap();
    let vfs = Vfs::new(HostFs::new(&s.0, HostFsOptions::default()).unwrap());
    let p = vfs.process(Creds::root());
    let stop = Arc::new(AtomicBool::new(false));
    let openers: Vec<_> = (0..2)
        .map(|_| {
            let (q, stop) = (p.fork(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Relaxed) {
                    let fd = q.open("/d/f", VO::WRONLY | VO::CREAT, 0o644);
                    q.close(fd.expect("an O_CREAT open of /d/f")).unwrap();
                }
            })
        })
        .collect();
    let q = p.fork();
    let mover = std::thread::spawn(move || {
        let rename = || match q.rename("/d/f", "/d/g") {
            Ok(()) => 1,
            Err(e) => {
                assert_eq!(e, Errno::ENOENT);
                0
            }
        };
        let mut moved: u32 = (0..20_000).map(|_| rename()).sum();
        // On a loaded machine the openers may not have run at all during those renames
        // (each a microsecond or two when the name is missing): the race needs at least
        // one name moved, so go on until one is.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while moved == 0 && std::time::Instant::now() < deadline {
            std::thread::yield_now();
            moved += rename();
        }
        moved
    });
    let moved = mover.join();
    stop.store(true, Relaxed);
    for t in openers {
        t.join().unwrap();
    }
    assert!(moved.unwrap() > 0);
}

/// `d1/a` and `d2/c` are hard links on the host; the engine has listed only `d1`, so
/// hostfs knows the object by `a` alone. An open description of it outlives the unlink of
/// `a`, and the object, still linked as `c`, is linked again through the description
/// (`linkat` with `AT_EMPTY_PATH`, as root). Linux links it; hostfs, which had let its
/// node go with the last name it knew, failed with `ESTALE`, and now links it by the
/// descriptor it kept for the open file. The kernel runs the same calls as the oracle.
#[test]
fn an_open_file_whose_known_names_went_is_linked_again() {
    let s = Scratch::new("link-kept");
    let r = |x: &str| s.0.join(x);
    let lay_out = |top: &str| {
        std::fs::create_dir_all(r(&format!("{top}/d1"))).unwrap();
        std::fs::create_dir_all(r(&format!("{top}/d2"))).unwrap();
        std::fs::write(r(&format!("{top}/d1/a")), b"1").unwrap();
        std::fs::hard_link(r(&format!("{top}/d1/a")), r(&format!("{top}/d2/c"))).unwrap();
    };
    // The kernel.
    lay_out("k");
    let fd = rfs::open(r("k/d1/a").as_path(), OFlags::RDONLY, Mode::empty()).unwrap();
    std::fs::remove_file(r("k/d1/a")).unwrap();
    let want = rfs::linkat(
        &fd,
        "",
        rfs::CWD,
        r("k/d1/b").as_path(),
        AtFlags::EMPTY_PATH,
    )
    .map_err(|e| e.raw_os_error());
    // The engine, over its own copy.
    lay_out("e/top");
    let vfs = Vfs::new(HostFs::new(&r("e/top"), HostFsOptions::default()).unwrap());
    let p = vfs.process(Creds::root());
    let fd = p.open("/d1/a", VO::RDONLY, 0).unwrap();
    p.unlink("/d1/a").unwrap();
    let got = p
        .linkat(fd, "", scalevfs::Fd::CWD, "/d1/b", AtF::EMPTY_PATH)
        .map_err(|e| e.raw());
    assert_eq!(got, want);
    if want.is_ok() {
        use std::os::unix::fs::MetadataExt;
        let c = std::fs::metadata(r("e/top/d2/c")).unwrap();
        let b = std::fs::metadata(r("e/top/d1/b")).unwrap();
        assert_eq!((b.ino(), b.nlink()), (c.ino(), 2));
        assert_eq!(p.stat("/d1/b").unwrap().nlink, 2);
    }
}

/// A file and a symlink, each opened `O_PATH` (the symlink with `O_NOFOLLOW`), lose their
/// only name; then their owner is changed through the handle (`fchownat` with
/// `AT_EMPTY_PATH`, as root). Linux changes the unlinked object's owner, since the handle
/// holds it. The kernel runs the same calls as the oracle.
#[test]
fn an_unlinked_object_held_by_a_path_handle_gets_its_new_owner() {
    let s = Scratch::new("chown-unlinked");
    let r = |x: &str| s.0.join(x);
    let lay_out = |top: &str| {
        std::fs::create_dir_all(r(top)).unwrap();
        std::fs::write(r(&format!("{top}/f")), b"1").unwrap();
        std::os::unix::fs::symlink("f", r(&format!("{top}/l"))).unwrap();
    };
    lay_out("k");
    lay_out("e");
    let vfs = Vfs::new(HostFs::new(&r("e"), HostFsOptions::default()).unwrap());
    let p = vfs.process(Creds::root());
    for (name, nofollow) in [("f", false), ("l", true)] {
        let mut kflags = OFlags::PATH;
        let mut eflags = VO::PATH;
        if nofollow {
            kflags |= OFlags::NOFOLLOW;
            eflags |= VO::NOFOLLOW;
        }
        let kfd = rfs::open(r(&format!("k/{name}")).as_path(), kflags, Mode::empty()).unwrap();
        std::fs::remove_file(r(&format!("k/{name}"))).unwrap();
        let want = rfs::chownat(
            &kfd,
            "",
            Some(rfs::Uid::from_raw(1234)),
            Some(rfs::Gid::from_raw(4321)),
            AtFlags::EMPTY_PATH,
        )
        .map_err(|e| e.raw_os_error());
        let want_owner = want.map(|()| {
            let st = rfs::fstat(&kfd).unwrap();
            (st.st_uid, st.st_gid)
        });
        let efd = p.open(format!("/{name}"), eflags, 0).unwrap();
        p.unlink(format!("/{name}")).unwrap();
        let got = p
            .fchownat(efd, "", Some(1234), Some(4321), AtF::EMPTY_PATH)
            .map_err(|e| e.raw());
        let got_owner = got.map(|()| {
            let st = p.fstat(efd).unwrap();
            (st.uid, st.gid)
        });
        assert_eq!(got_owner, want_owner, "{name}");
    }
}

/// A host directory whose listing takes several reads (`HostFs::list` reads 32 KiB of
/// entries at a time): 600 names of 200 bytes and 600 short ones, about 145 KiB. Every name
/// is listed once, and each is the object the host has under it.
#[test]
fn a_listing_of_many_reads_has_every_name_once() {
    let s = Scratch::new("biglist");
    let d = s.0.join("d");
    std::fs::create_dir(&d).unwrap();
    for i in 0..600 {
        std::fs::write(d.join(format!("{i:0>200}")), i.to_string()).unwrap();
        std::fs::write(d.join(format!("s{i}")), b"").unwrap();
    }
    let vfs = serve_rw(&s.0);
    let p = vfs.process(Creds::root());
    let names = engine_names(&p, "/d");
    assert_eq!(names.len(), 1200);
    assert_eq!(names, host_names(&d));
    for i in [0, 299, 599] {
        let path = format!("/d/{i:0>200}");
        assert_eq!(p.read_file(&path).unwrap(), i.to_string().as_bytes());
        let ino = std::os::unix::fs::MetadataExt::ino(
            &std::fs::metadata(d.join(format!("{i:0>200}"))).unwrap(),
        );
        assert_eq!(p.stat(&path).unwrap().ino, ino);
    }
    // A capped cache counts a directory's names as it reads them for a lookup (see
    // `a_directory_larger_than_the_cache_is_looked_up_name_by_name`): a lookup loads at
    // most a quarter of the names' cap, which is three quarters of the objects' cap. At
    // 6,400 objects that is exactly 1,200 names, so the directory is loaded whole; at 6,396
    // it is 1,199, one too few, and only the name looked up is cached. Either way a
    // listing gives every name once.
    for (cap, whole) in [(6400, true), (6396, false)] {
        let opts = HostFsOptions {
            max_inodes: Some(cap),
            ..HostFsOptions::default()
        };
        let vfs = Vfs::new(HostFs::new(&s.0, opts).unwrap());
        let p = vfs.process(Creds::root());
        assert!(p.stat("/d").unwrap().is_dir());
        let before = vfs.stats().root_fs.dentries;
        assert_eq!(p.stat("/d/s599").unwrap().size, 0);
        let cached = vfs.stats().root_fs.dentries - before;
        assert_eq!(cached, if whole { 1200 } else { 1 }, "cap {cap}");
        assert_eq!(engine_names(&p, "/d"), host_names(&d), "cap {cap}");
    }
}

/// A directory fifteen times larger than the cache: its names counted once, found too
/// many, then each lookup asks the host for its one name, so the cache stays within its cap however
/// many of its names are looked up, and each object is loaded once per lookup that
/// missed (loading the directory whole at every miss after a sweep was quadratic, and a
/// first load kept all 3,000 objects cached under a cap of 200). A listing still gives every name once, and a change in the
/// directory works.
#[test]
fn a_directory_larger_than_the_cache_is_looked_up_name_by_name() {
    let cap = 200;
    let files = 3000;
    let (s, vfs) = scratch::capped_tree("bigdir", 1, files, cap);
    let p = vfs.process(Creds::root());
    let mut peak = 0;
    for round in 0..2 {
        for f in 0..files {
            let rel = format!("d0/f{f}");
            let want = rfs::lstat(s.0.join(&rel)).unwrap().st_ino;
            assert_eq!(p.lstat(format!("/{rel}")).unwrap().ino, want, "{rel}");
            assert_eq!(p.lstat(format!("/d0/g{f}")).unwrap_err(), Errno::ENOENT);
            if f % 100 == 0 {
                scalevfs::clear_thread_cache();
                peak = peak.max(vfs.stats().root_fs.dentries);
            }
        }
        let st = vfs.stats().root_fs;
        let loads = st.inode_cache.unwrap().loads;
        // Each file at most once a round (the count that found `d0` too large looked at
        // no object), and the root and d0.
        assert!(
            loads <= (round + 1) * files as u64 + 2,
            "{loads} objects loaded"
        );
    }
    assert!(peak <= cap + cap / 8 + 2, "peak {peak} dentries, cap {cap}");
    let names = engine_names(&p, "/d0");
    assert_eq!(names.len(), files);
    assert_eq!(names, host_names(&s.0.join("d0")));
    p.write_file("/d0/new", b"x").unwrap();
    assert_eq!(p.read_file("/d0/new").unwrap(), b"x");
    p.unlink("/d0/f7").unwrap();
    assert_eq!(p.lstat("/d0/f7").unwrap_err(), Errno::ENOENT);
    assert!(!s.0.join("d0/f7").exists());
}
