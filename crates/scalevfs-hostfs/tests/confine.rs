//! Confinement beneath a host directory: a static matrix of cases (absolute symlinks, `..`
//! at the root, symlinks out of the tree, loops, `/proc` magic links, a mount point inside
//! the source), each resolved by both resolvers, and an escape race modelled on the
//! kernel's openat2 rename-attack selftest: a thread swaps a directory inside the tree with
//! one outside it (RENAME_EXCHANGE) while others resolve `..`-heavy paths.

use std::fs;
use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};

use rustix::fs::{Mode, OFlags, RenameFlags};
use rustix::io::Errno;
use scalevfs_hostfs::{fd_path, HostRoot, Resolver};

/// A fresh directory with `root/` (the tree served) and `outside/` beside it.
struct Tree {
    base: PathBuf,
}

impl Tree {
    fn new(name: &str) -> Tree {
        let base =
            std::env::temp_dir().join(format!("scalevfs-hostfs-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        fs::create_dir_all(base.join("root")).unwrap();
        fs::create_dir_all(base.join("outside")).unwrap();
        Tree { base }
    }
    fn root(&self) -> PathBuf {
        self.base.join("root")
    }
    fn outside(&self) -> PathBuf {
        self.base.join("outside")
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.base);
    }
}

/// Sets the flag when dropped.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, SeqCst);
    }
}

const RESOLVERS: [Resolver; 2] = [Resolver::Openat2, Resolver::Walk];

/// What an open gave: the path beneath the root it opened (`""` for the root itself), or
/// its errno. An open that lands outside the root fails the test at once.
fn outcome(root: &Path, r: Result<std::os::fd::OwnedFd, Errno>) -> Result<String, Errno> {
    let fd = r?;
    let p = String::from_utf8(fd_path(fd.as_fd()).unwrap()).unwrap();
    let root = root.canonicalize().unwrap();
    let root = root.to_str().unwrap();
    let rel = p
        .strip_prefix(root)
        .unwrap_or_else(|| panic!("ESCAPED: opened {p}, outside {root}"));
    Ok(rel.trim_start_matches('/').to_string())
}

fn ok(s: &str) -> Result<String, Errno> {
    Ok(s.to_string())
}

#[test]
fn the_confinement_matrix() {
    let t = Tree::new("matrix");
    let r = t.root();
    fs::create_dir_all(r.join("a/b")).unwrap();
    fs::write(r.join("a/b/f"), b"f").unwrap();
    fs::write(t.outside().join("secret"), b"OUTSIDE").unwrap();
    let out_secret = t.outside().join("secret");
    for (name, target) in [
        ("up", "../../.."),
        ("esc", "../outside/secret"),
        ("abs", "/a/b/f"),
        ("absdir", "/a"),
        ("dirlink", "a"),
        ("loop", "loop2"),
        ("loop2", "loop"),
        ("dangling", "/a/new"),
        ("dangling2", "/a/new2"),
        ("proclink", "/proc/self/root/etc/passwd"),
    ] {
        symlink(target, r.join(name)).unwrap();
    }
    symlink(&out_secret, r.join("abs_out")).unwrap();
    let long_name = "x".repeat(300);
    let long_path = "a/".repeat(2048);
    let rd = OFlags::RDONLY;
    let cases: Vec<(&str, OFlags, Result<String, Errno>)> = vec![
        ("a/b/f", rd, ok("a/b/f")),
        ("/a/b/f", rd, ok("a/b/f")),
        ("../../a/b/f", rd, ok("a/b/f")),
        ("a/../../../a/b/f", rd, ok("a/b/f")),
        ("..", rd, ok("")),
        ("/", rd, ok("")),
        ("up", rd, ok("")),
        ("up/a/b/f", rd, ok("a/b/f")),
        ("esc", rd, Err(Errno::NOENT)),
        ("abs_out", rd, Err(Errno::NOENT)),
        ("up/outside/secret", rd, Err(Errno::NOENT)),
        ("abs", rd, ok("a/b/f")),
        ("absdir/b/f", rd, ok("a/b/f")),
        ("dirlink/", rd, ok("a")),
        ("dirlink", rd | OFlags::DIRECTORY, ok("a")),
        ("abs", rd | OFlags::DIRECTORY, Err(Errno::NOTDIR)),
        ("a/b/f", rd | OFlags::DIRECTORY, Err(Errno::NOTDIR)),
        (
            "dirlink",
            rd | OFlags::DIRECTORY | OFlags::NOFOLLOW,
            Err(Errno::NOTDIR),
        ),
        ("dirlink/b/../b/f", rd, ok("a/b/f")),
        ("loop", rd, Err(Errno::LOOP)),
        ("loop/x", rd, Err(Errno::LOOP)),
        ("a/b/f/x", rd, Err(Errno::NOTDIR)),
        ("a/b/f/", rd, Err(Errno::NOTDIR)),
        ("missing", rd, Err(Errno::NOENT)),
        ("a/missing/f", rd, Err(Errno::NOENT)),
        ("abs", rd | OFlags::NOFOLLOW, Err(Errno::LOOP)),
        ("abs", OFlags::PATH | OFlags::NOFOLLOW, ok("abs")),
        ("abs", OFlags::PATH, ok("a/b/f")),
        ("dangling", OFlags::WRONLY | OFlags::CREATE, ok("a/new")),
        (
            "dangling2",
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL,
            Err(Errno::EXIST),
        ),
        ("proclink", rd, Err(Errno::NOENT)),
        (&long_name, rd, Err(Errno::NAMETOOLONG)),
        (&long_path, rd, Err(Errno::NAMETOOLONG)),
        ("", rd, Err(Errno::NOENT)),
    ];
    for res in RESOLVERS {
        let h = HostRoot::with_resolver(&r, res).unwrap();
        for (path, flags, want) in &cases {
            let got = outcome(
                &r,
                h.open(Path::new(path), *flags, Mode::from_raw_mode(0o644)),
            );
            assert_eq!(&got, want, "{res:?}: open({path:.60}, {flags:?})");
        }
    }
    assert!(
        r.join("a/new").exists(),
        "O_CREAT through a dangling symlink creates its target"
    );
}

/// As root: `/proc` mounted inside the tree (magic links reachable), and a tmpfs mounted
/// inside the source. Magic links are never followed (`openat2` refuses with `ELOOP`; the
/// walker reads their text, which names something beneath the root); the mount is crossed,
/// and `..` from it comes back.
#[test]
fn magic_links_and_mounts_inside() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipping magic_links_and_mounts_inside: needs root");
        return;
    }
    let t = Tree::new("mounts");
    let r = t.root();
    fs::create_dir_all(r.join("proc")).unwrap();
    fs::create_dir_all(r.join("mnt")).unwrap();
    fs::create_dir_all(r.join("a")).unwrap();
    fs::write(r.join("a/f"), b"f").unwrap();
    let mount = |args: &[&str]| {
        std::process::Command::new("mount")
            .args(args)
            .status()
            .is_ok_and(|s| s.success())
    };
    let proc_dir = r.join("proc");
    let mnt_dir = r.join("mnt");
    if !mount(&["-t", "proc", "proc", proc_dir.to_str().unwrap()])
        || !mount(&["-t", "tmpfs", "tmpfs", mnt_dir.to_str().unwrap()])
    {
        eprintln!("skipping magic_links_and_mounts_inside: cannot mount");
        let _ = std::process::Command::new("umount").arg(&proc_dir).status();
        return;
    }
    fs::write(r.join("mnt/g"), b"g").unwrap();
    let rd = OFlags::RDONLY;
    for res in RESOLVERS {
        let h = HostRoot::with_resolver(&r, res).unwrap();
        let open = |p: &str| outcome(&r, h.open(Path::new(p), rd, Mode::empty()));
        for p in [
            "proc/self/root/etc/passwd",
            "proc/self/cwd",
            "proc/self/exe",
            "proc/1/root/etc/passwd",
        ] {
            // Whatever the answer, `outcome` fails the test if it opened outside.
            let got = open(p);
            let allowed = [
                Err(Errno::LOOP),
                Err(Errno::NOENT),
                Err(Errno::XDEV),
                Err(Errno::ACCESS),
            ];
            assert!(allowed.contains(&got), "{res:?}: {p}: {got:?}");
        }
        // A descriptor's magic link leads where the descriptor does: never followed.
        let outside = fs::File::open(t.outside()).unwrap();
        let p = format!("proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&outside));
        let got = open(&p);
        assert!(got.is_err(), "{res:?}: {p}: {got:?}");
        assert_eq!(open("mnt/g"), ok("mnt/g"), "{res:?}");
        assert_eq!(open("mnt/../a/f"), ok("a/f"), "{res:?}");
        assert_eq!(open("mnt/../../../a/f"), ok("a/f"), "{res:?}");
    }
    for d in [&mnt_dir, &proc_dir] {
        let _ = std::process::Command::new("umount").arg(d).status();
    }
}

/// The rename attack: `root/a/c` and `outside/d` are swapped with `RENAME_EXCHANGE` in a
/// loop while resolvers walk `a/c/../../secret` and deeper. Physically, `..` from a
/// directory that was just moved out leads outside; a confined resolution must never open
/// anything there. `SCALEVFS_ESCAPE_ROUNDS` sets the rounds per resolver (default 20,000;
/// `scripts/races-long.sh` runs 400,000).
#[test]
fn no_escape_while_directories_are_swapped() {
    let rounds: u64 = std::env::var("SCALEVFS_ESCAPE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let t = Tree::new("escape");
    let r = t.root();
    fs::create_dir_all(r.join("a/c")).unwrap();
    fs::create_dir_all(t.outside().join("d")).unwrap();
    fs::write(r.join("secret"), b"inside").unwrap();
    fs::write(r.join("a/secret"), b"inside").unwrap();
    fs::write(t.outside().join("secret"), b"OUTSIDE").unwrap();
    fs::write(t.base.join("secret"), b"OUTSIDE").unwrap();
    let paths = [
        "a/c/../../secret",
        "a/c/../secret",
        "a/c/../../../secret",
        "a/c/../../../../../secret",
        "/a/c/../../secret",
    ];
    for res in RESOLVERS {
        let h = HostRoot::with_resolver(&r, res).unwrap();
        let stop = AtomicBool::new(false);
        let swaps = AtomicU64::new(0);
        let (opened, failed) = (AtomicU64::new(0), AtomicU64::new(0));
        std::thread::scope(|s| {
            s.spawn(|| {
                let a = fs::File::open(r.join("a")).unwrap();
                let o = fs::File::open(t.outside()).unwrap();
                while !stop.load(SeqCst) {
                    rustix::fs::renameat_with(&a, "c", &o, "d", RenameFlags::EXCHANGE).unwrap();
                    swaps.fetch_add(1, SeqCst);
                }
            });
            let workers: Vec<_> = (0..2)
                .map(|w| {
                    let (h, opened, failed, stop) = (&h, &opened, &failed, &stop);
                    s.spawn(move || {
                        // Stops the swapper however this worker ends (a failed assertion
                        // included), so that the test reports instead of hanging.
                        let _stop = StopOnDrop(stop);
                        for i in 0..rounds / 2 {
                            let p = paths[(i as usize + w) % paths.len()];
                            match h.open(Path::new(p), OFlags::RDONLY, Mode::empty()) {
                                Ok(fd) => {
                                    let mut s = String::new();
                                    fs::File::from(fd).read_to_string(&mut s).unwrap();
                                    assert_eq!(s, "inside", "{res:?}: ESCAPED through {p}");
                                    opened.fetch_add(1, SeqCst);
                                }
                                // Mid-swap a component may be missing; never anything else.
                                Err(Errno::NOENT) => {
                                    failed.fetch_add(1, SeqCst);
                                }
                                Err(e) => panic!("{res:?}: {p}: {e:?}"),
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
            "{res:?}: {} resolutions ({} opened inside, {} ENOENT mid-swap), {} swaps, 0 escapes",
            opened.load(SeqCst) + failed.load(SeqCst),
            opened.load(SeqCst),
            failed.load(SeqCst),
            swaps.load(SeqCst)
        );
        assert!(swaps.load(SeqCst) > 0);
        assert!(opened.load(SeqCst) > 0);
    }
}
