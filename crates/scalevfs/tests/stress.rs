//! Many threads doing random operations, renames of directories among them, while others
//! walk and stat; in check mode, so every lockless walk is repeated by the locked walk.
//! Afterwards every invariant of the tree must hold.

mod race;
mod scratch;

use race::*;
use scalevfs::*;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const NAMES: [&str; 4] = ["a", "b", "c", "d"];

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn pick<'a>(&mut self, s: &[&'a str]) -> &'a str {
        s[(self.next() % s.len() as u64) as usize]
    }
    fn path(&mut self) -> String {
        let depth = 1 + self.next() % 3;
        let mut p = String::new();
        for _ in 0..depth {
            p.push('/');
            p.push_str(self.pick(&NAMES));
        }
        p
    }
}

/// What Linux can return for each call of the mix (paths of `a`..`d` components under `/`,
/// one symlink `/s -> /a/b`, mounts anywhere): anything else fails the test.
const MKDIR: &[Errno] = &[Errno::ENOENT, Errno::EEXIST, Errno::ENOTDIR];
const RMDIR: &[Errno] = &[
    Errno::ENOENT,
    Errno::ENOTDIR,
    Errno::ENOTEMPTY,
    Errno::EBUSY,
];
const CREATE: &[Errno] = &[Errno::ENOENT, Errno::ENOTDIR, Errno::EISDIR];
const UNLINK: &[Errno] = &[Errno::ENOENT, Errno::ENOTDIR, Errno::EISDIR];
const RENAME: &[Errno] = &[
    Errno::ENOENT,
    Errno::ENOTDIR,
    Errno::EISDIR,
    Errno::ENOTEMPTY,
    Errno::EINVAL,
    Errno::EBUSY,
    Errno::EXDEV,
];
const EXCHANGE: &[Errno] = &[
    Errno::ENOENT,
    Errno::ENOTDIR,
    Errno::EINVAL,
    Errno::EBUSY,
    Errno::EXDEV,
];
const LINK: &[Errno] = &[
    Errno::ENOENT,
    Errno::EEXIST,
    Errno::ENOTDIR,
    Errno::EPERM,
    Errno::EXDEV,
];
const LOOKUP: &[Errno] = &[Errno::ENOENT, Errno::ENOTDIR];
const UMOUNT: &[Errno] = &[Errno::ENOENT, Errno::ENOTDIR, Errno::EINVAL, Errno::EBUSY];

/// Threads run random changes and lookups over a small namespace (renames of directories
/// among them, and open, chdir, mount and umount racing unlink and rmdir), in check mode
/// if `check`; then every invariant of the tree must hold.
fn run(threads: usize, iters: usize, check: bool) {
    run_on(Vfs::new_memfs(), threads, iters, check);
}

/// `SCALEVFS_STRESS_SEED` (a number, default 0: the fixed seeds) changes every worker's
/// sequence of operations, and `SCALEVFS_STRESS_THREADS` overrides each race's thread
/// count, so that a soak can cover other interleavings than CI's:
/// `for s in $(seq 1 50); do SCALEVFS_STRESS_SEED=$s cargo test --release --test stress; done`.
fn knob(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// `SCALEVFS_STRESS_SEED`, 0 when unset.
fn seed() -> u64 {
    knob("SCALEVFS_STRESS_SEED").unwrap_or(0)
}

/// [`run`] on `vfs`.
fn run_on(vfs: Arc<Vfs>, threads: usize, iters: usize, check: bool) {
    let threads = knob("SCALEVFS_STRESS_THREADS").map_or(threads, |n| n.max(1) as usize);
    let seed = seed();
    vfs.set_check_mode(check);
    let p0 = vfs.process(Creds::root());
    p0.symlink("/a/b", "/s").unwrap();
    // At most eight mounts at a time: unbounded stacks would measure the mount table's
    // rebuild, not the races.
    let live = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let ws = (0..threads)
        .map(|t| {
            let p = p0.fork();
            let live = live.clone();
            worker(move |stop| {
                let mut r = Rng(0x9E37_79B9_7F4A_7C15
                    ^ ((t as u64 + 1) * 0x1234_5678_9ABC)
                    ^ seed.wrapping_mul(0xD1B5_4A32_D192_ED03));
                for _ in 0..iters {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let a = r.path();
                    let b = r.path();
                    match r.next() % 16 {
                        0 | 1 => drop(ok_or("mkdir", p.mkdir(&a, 0o755), MKDIR)),
                        2 => drop(ok_or("rmdir", p.rmdir(&a), RMDIR)),
                        3 => drop(ok_or("create", p.write_file(&a, b"x"), CREATE)),
                        4 => drop(ok_or("unlink", p.unlink(&a), UNLINK)),
                        5 | 6 => drop(ok_or("rename", p.rename(&a, &b), RENAME)),
                        7 => {
                            let ex = p.renameat2(Fd::CWD, &a, Fd::CWD, &b, RenameFlags::EXCHANGE);
                            ok_or("exchange", ex, EXCHANGE);
                        }
                        8 => drop(ok_or("link", p.link(&a, &b), LINK)),
                        9 => drop(ok_or("stat", p.stat(format!("/s{a}")), LOOKUP)),
                        10 => drop(ok_or("access", p.access(&a, Access::F_OK), LOOKUP)),
                        11 => drop(ok_or("lstat", p.lstat(&a), LOOKUP)),
                        12 => {
                            if let Some(fd) = ok_or("open", p.open(&a, OFlags::RDONLY, 0), LOOKUP) {
                                p.close(fd).unwrap();
                            }
                        }
                        13 => {
                            if ok_or("chdir", p.chdir(&a), LOOKUP).is_some() {
                                // The working directory may be removed meanwhile.
                                ok_or("stat ..", p.stat(".."), LOOKUP);
                                p.chdir("/").unwrap();
                            }
                        }
                        14 if live.load(Ordering::SeqCst) < 8 => {
                            // Small: a default hash has 2^17 buckets to allocate and free.
                            let fs = MemFs::new(MemFsOptions {
                                hash_buckets: 64,
                                ..Default::default()
                            });
                            if ok_or("mount", p.mount(&a, fs), LOOKUP).is_some() {
                                live.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                        _ => {
                            if ok_or("umount", p.umount(&a), UMOUNT).is_some() {
                                live.fetch_sub(1, Ordering::SeqCst);
                            }
                        }
                    }
                }
            })
        })
        .collect();
    race_for("stress", Duration::from_secs(900), ws);
    assert_eq!(vfs.check_failures(), 0);
    unmount_all(&p0);
    check_tree(&p0);
}

/// Takes down every mount the race left, innermost first. A mount hides the directory it
/// covers, and with it any names of a file that live there, so link counts can be checked
/// only on the bare tree. Nothing is in use any more, so only a submount may hold one up.
fn unmount_all(p: &Process) {
    loop {
        let all = p.walk_tree("/").unwrap();
        let dev: HashMap<_, _> = all
            .iter()
            .map(|(path, st)| (path.clone(), st.dev))
            .collect();
        let mut points: Vec<_> = all
            .iter()
            .filter(|(path, st)| path.parent().is_some_and(|up| dev[up] != st.dev))
            .map(|(path, _)| path.clone())
            .collect();
        if points.is_empty() {
            return;
        }
        // A mount stacked on another hides the first's own submounts: EBUSY until the walk
        // after this one finds them. Every round must take at least one mount down.
        points.sort_by_key(|path| std::cmp::Reverse(path.components().count()));
        let mut progress = false;
        for path in points {
            match p.umount(&path) {
                Ok(()) => progress = true,
                Err(Errno::EBUSY) => {}
                Err(e) => panic!("umount {path:?}: {e:?}"),
            }
        }
        assert!(progress, "no mount left can be unmounted: a user leaked");
    }
}

/// Link counts, directory link counts, and that every listed name resolves to what the
/// listing says.
fn check_tree(p: &Process) {
    let all = p.walk_tree("/").unwrap();
    // Inode numbers are per file system: a file is (device, inode number).
    let mut names_per_ino: HashMap<(u64, u64), u32> = HashMap::new();
    for (path, st) in &all {
        assert_eq!(
            p.lstat(path).unwrap().ino,
            st.ino,
            "{path:?} resolves elsewhere"
        );
        if st.is_dir() {
            let subdirs = p
                .read_dir(path)
                .unwrap()
                .iter()
                .filter(|e| e.file_type == FileType::Directory)
                .count();
            assert_eq!(st.nlink as usize, 2 + subdirs, "nlink of dir {path:?}");
            assert_eq!(st.size, 40 + 20 * p.read_dir(path).unwrap().len() as u64);
        } else {
            *names_per_ino.entry((st.dev, st.ino)).or_default() += 1;
        }
    }
    for (path, st) in &all {
        if !st.is_dir() {
            assert_eq!(
                st.nlink,
                names_per_ino[&(st.dev, st.ino)],
                "nlink of {path:?}"
            );
        }
    }
    // ".." of every directory is its parent.
    for (path, st) in &all {
        if st.is_dir() && path.as_os_str() != "/" {
            let parent = path.parent().unwrap();
            assert_eq!(
                p.stat(path.join("..")).unwrap().ino,
                p.stat(parent).unwrap().ino
            );
            let _ = st;
        }
    }
}

#[test]
fn racing_renames_check_mode() {
    run(4, 20_000, true);
}

#[test]
fn racing_renames_fast() {
    run(4, 50_000, false);
}

/// The same races over hostfs with a cache of four objects (names swept, and directories
/// loaded again, all the time), and under the shared policy with a TTL of zero (every use
/// revalidated): the walks that load and revalidate start their calls over with no guard
/// pinned (`unpin`) while renames, removals and sweeps race them. In check mode.
///
/// It found two races, both fixed: an `open(O_CREAT)` whose new file lost its name to a
/// racing unlink before the open reached the host file failed with `ESTALE` (hostfs now
/// stores the descriptor it keeps for an open file before the host call that removes the
/// name, and opens the data again through it); and before that, one run in six panicked
/// in `open_creat` on an object a cached name still linked but the engine had evicted
/// (see `tests/hostfs.rs`, `a_stale_name_of_an_evicted_object_is_looked_up_again`, for
/// its deterministic form). 5,000 operations per thread: a run of 30,000 did not finish
/// in ten minutes, its `check_tree` stats each sweeping and loading again with a cap of
/// four (not yet understood; the code before `unpin` was as slow).
#[test]
fn racing_renames_over_hostfs_check_mode() {
    for policy in [
        HostPolicy::Exclusive,
        HostPolicy::Shared {
            ttl: Duration::ZERO,
        },
    ] {
        // Named in the output, so that a failure says which policy it was under.
        eprintln!("racing renames over hostfs, {policy:?}");
        let dir = scratch::Scratch::new("stress");
        let opts = HostFsOptions {
            max_inodes: Some(4),
            policy,
            ..HostFsOptions::default()
        };
        let vfs = Vfs::new(HostFs::new(&dir.0, opts).unwrap());
        run_on(vfs.clone(), 4, 5_000, true);
        assert!(vfs.stats().unpinned_calls > 0, "{policy:?}");
    }
}

/// Readers stat a path that renames keep swapping: every successful stat sees one of the
/// two files, never a torn or missing state while the name provably exists.
#[test]
fn exchange_is_atomic_for_readers() {
    let vfs = Vfs::new_memfs();
    let p = vfs.process(Creds::root());
    p.mkdir("/d", 0o755).unwrap();
    p.write_file("/d/x", b"1").unwrap();
    p.mkdir("/d/y", 0o755).unwrap();
    let ino_x = p.stat("/d/x").unwrap().ino;
    let ino_y = p.stat("/d/y").unwrap().ino;
    let stop = Arc::new(AtomicBool::new(false));
    let w = {
        let p = p.fork();
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                p.renameat2(Fd::CWD, "/d/x", Fd::CWD, "/d/y", RenameFlags::EXCHANGE)
                    .unwrap();
            }
        })
    };
    for _ in 0..200_000 {
        let st = p.stat("/d/x").expect("x always exists");
        assert!(st.ino == ino_x || st.ino == ino_y);
        assert_eq!(st.is_dir(), st.ino == ino_y);
    }
    stop.store(true, Ordering::Relaxed);
    w.join().unwrap();
}

/// Threads sharing one process open, use, dup2 and close descriptors while others use
/// them through `fstatat` and `read`: lookups are lockless, so closes race with uses.
/// Every call either works or fails with EBADF (a descriptor closed under it); the
/// mount's user count returns to zero, so it can be unmounted afterwards.
#[test]
fn shared_descriptor_table() {
    let vfs = Vfs::new_memfs();
    let p = Arc::new(vfs.process(Creds::root()));
    p.mkdir("/m", 0o755).unwrap();
    p.mount("/m", MemFs::new(MemFsOptions::default())).unwrap();
    p.mkdir("/m/d", 0o755).unwrap();
    p.write_file("/m/d/x", b"hello").unwrap();
    let hs: Vec<_> = (0..4)
        .map(|t| {
            let p = p.clone();
            std::thread::spawn(move || {
                let mut r = Rng((0x1234_5678 + t) ^ seed() << 32);
                for _ in 0..20_000 {
                    let fd = Fd((r.next() % 8) as i32);
                    match r.next() % 5 {
                        0 => {
                            let _ = p.open("/m/d", OFlags::RDONLY | OFlags::DIRECTORY, 0);
                        }
                        1 => {
                            let _ = p.open("/m/d/x", OFlags::RDONLY, 0);
                        }
                        2 => match p.close(fd) {
                            Ok(()) | Err(Errno::EBADF) => {}
                            Err(e) => panic!("close: {e:?}"),
                        },
                        3 => match p.dup2(fd, Fd((r.next() % 8) as i32)) {
                            Ok(_) | Err(Errno::EBADF) => {}
                            Err(e) => panic!("dup2: {e:?}"),
                        },
                        _ => match p.fstatat(fd, "x", AtFlags::empty()) {
                            Ok(st) => assert_eq!(st.size, 5),
                            Err(Errno::EBADF) | Err(Errno::ENOTDIR) => {}
                            Err(e) => panic!("fstatat: {e:?}"),
                        },
                    }
                    let mut b = [0u8; 5];
                    match p.pread(fd, &mut b, 0) {
                        Ok(n) => assert!(n == 5 && &b == b"hello" || n == 0),
                        Err(Errno::EBADF) | Err(Errno::EISDIR) => {}
                        Err(e) => panic!("pread: {e:?}"),
                    }
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    assert_eq!(p.umount("/m"), Err(Errno::EBUSY));
    for fd in 0..(1 << 17) {
        let _ = p.close(Fd(fd));
    }
    p.umount("/m").unwrap();
}

/// One thread, check mode, random namespace changes, and after each change a stat,
/// lstat and access of every path in a small set: any path-cache or fast-walk answer that
/// the locked walk would not give panics (no concurrent change can excuse it here).
#[test]
fn check_mode_sees_every_change() {
    let names = ["a", "b", "l", "..", "."];
    let mut paths = Vec::new();
    for x in names {
        paths.push(format!("/{x}"));
        for y in names {
            paths.push(format!("/{x}/{y}"));
            for z in ["a", "b", "l"] {
                paths.push(format!("{x}/{y}/{z}"));
            }
        }
    }
    for seed in 1..=20u64 {
        let vfs = Vfs::new_memfs();
        vfs.set_check_mode(true);
        let p = vfs.process(Creds::root());
        let u = vfs.process(Creds::user(1000, 1000, vec![]));
        let mut r = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        for _ in 0..300 {
            let a = r.path();
            let b = r.path();
            let _ = match r.next() % 9 {
                0 | 1 => p.mkdir(&a, 0o755),
                2 => p.rmdir(&a),
                3 => p.rename(&a, &b),
                4 => p.symlink(&b[1..], &a),
                5 => p.unlink(&a),
                6 => p.chmod(&a, if r.next() % 2 == 0 { 0o700 } else { 0o755 }),
                7 => p.write_file(&a, b"x"),
                _ => p.chdir(&a),
            };
            for path in &paths {
                let _ = p.stat(path);
                let _ = p.lstat(path);
                let _ = u.stat(path);
                let _ = u.access(path, Access::X_OK);
            }
        }
        assert_eq!(vfs.check_failures(), 0);
    }
}

/// The dentry hash grows (fourfold, several times) while two threads create in their own
/// directories and two others stat names already created: no stat of an existing name
/// fails, no create is lost, and every directory lists what was made in it.
#[test]
fn nothing_is_lost_while_the_dentry_hash_grows() {
    use std::sync::atomic::AtomicUsize;
    let vfs = Vfs::new(MemFs::new(MemFsOptions {
        hash_buckets: 16,
        ..MemFsOptions::default()
    }));
    let per_writer = if cfg!(debug_assertions) {
        20_000
    } else {
        100_000
    };
    let made = [AtomicUsize::new(0), AtomicUsize::new(0)];
    let first = vfs.stats().root_fs.hash_buckets;
    std::thread::scope(|s| {
        for (w, made) in made.iter().enumerate() {
            let p = vfs.process(Creds::root());
            s.spawn(move || {
                p.mkdir(format!("/w{w}"), 0o755).unwrap();
                for i in 0..per_writer {
                    let fd = p
                        .open(format!("/w{w}/f{i}"), OFlags::CREAT | OFlags::WRONLY, 0o644)
                        .unwrap();
                    p.close(fd).unwrap();
                    made.store(i + 1, Ordering::Release);
                }
            });
        }
        for r in 0..2u64 {
            let p = vfs.process(Creds::root());
            let made = &made;
            s.spawn(move || {
                let mut rng = Rng((0x9E37_79B9 + r) ^ seed() << 32);
                loop {
                    let done: Vec<usize> = made.iter().map(|m| m.load(Ordering::Acquire)).collect();
                    if done.iter().all(|&d| d == per_writer) {
                        break;
                    }
                    let w = (rng.next() % 2) as usize;
                    if done[w] == 0 {
                        continue;
                    }
                    let i = rng.next() as usize % done[w];
                    let path = format!("/w{w}/f{i}");
                    if let Err(e) = p.stat(&path) {
                        panic!("{path}: {e:?}, with {} made", done[w]);
                    }
                }
            });
        }
    });
    let st = vfs.stats().root_fs;
    assert!(
        st.hash_buckets >= 16 * first,
        "the table grew: {first} -> {}",
        st.hash_buckets
    );
    let p = vfs.process(Creds::root());
    for w in 0..2 {
        assert_eq!(p.read_dir(format!("/w{w}")).unwrap().len(), per_writer);
        for i in 0..per_writer {
            p.lstat(format!("/w{w}/f{i}")).unwrap();
        }
    }
}
