//! Through a real FUSE mount: basic operations and their errno, lookup counting with
//! `forget`, readdir while the directory changes, unmount while busy, other users, and
//! concurrent callers. Each test mounts its own fresh memfs; every test returns early, with a
//! message, when this machine cannot mount FUSE (no usable /dev/fuse, or neither root nor
//! fusermount3).

use std::collections::HashSet;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use scalevfs::Vfs;
use scalevfs_fuse::{FsOptions, MountOptions, NodeCount, ScaleFs};

struct Mounted {
    dir: PathBuf,
    session: Option<fuser::BackgroundSession>,
    nodes: NodeCount,
}

impl Mounted {
    fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    /// Unmounts and joins the server. A process that another test forks (`sh`, `mount`)
    /// holds copies of all of this process's descriptors until it execs, one of this
    /// mount's among them if the fork lands while this test has a file open: the unmount
    /// then fails with `EBUSY` for that moment. As root the unmount is retried for up to a
    /// second; a mount still busy after that is an error.
    fn unmount(mut self) -> std::io::Result<()> {
        let s = self.session.take().unwrap();
        let r = if is_root() {
            let mut tries = 0;
            loop {
                match nix::mount::umount(&self.dir) {
                    // The server sees the unmount and stops; `join` waits for it.
                    Ok(()) => break s.join(),
                    Err(nix::errno::Errno::EBUSY) if tries < 50 => {
                        tries += 1;
                        std::thread::sleep(std::time::Duration::from_millis(20));
                    }
                    Err(e) => break Err(e.into()),
                }
            }
        } else {
            s.umount_and_join()
        };
        let _ = fs::remove_dir(&self.dir);
        r
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            let _ = s.umount_and_join();
            let _ = fs::remove_dir(&self.dir);
        }
    }
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// A fresh memfs mounted on a new directory, or `None` (with a message) when FUSE cannot
/// be used here.
fn mount(name: &str, allow_other: bool) -> Option<Mounted> {
    mount_with(name, allow_other, Vfs::new_memfs(), FsOptions::default())
}

/// [`mount`] of a given namespace with given options.
fn mount_with(name: &str, allow_other: bool, vfs: Arc<Vfs>, o: FsOptions) -> Option<Mounted> {
    if let Err(why) = scalevfs_fuse::fuse_available() {
        eprintln!("skipping {name}: FUSE is not usable here: {why}");
        return None;
    }
    let dir = std::env::temp_dir().join(format!("scalevfs-fuse-{}-{name}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let fs = ScaleFs::new(&vfs, o).unwrap();
    let nodes = fs.node_count();
    let opts = MountOptions {
        threads: 4,
        allow_other,
        ..MountOptions::default()
    };
    let session = scalevfs_fuse::spawn(fs, &dir, &opts).expect("mount");
    Some(Mounted {
        dir,
        session: Some(session),
        nodes,
    })
}

fn errno_of(r: std::io::Result<impl Sized>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.raw_os_error().unwrap_or(-1),
    }
}

const ENOENT: i32 = 2;
const EEXIST: i32 = 17;
const ENOTDIR: i32 = 20;
const EISDIR: i32 = 21;
const EINVAL: i32 = 22;
const ENOTEMPTY: i32 = 39;
const ELOOP: i32 = 40;

#[test]
fn basic_operations_and_errno() {
    let Some(m) = mount("basic", false) else {
        return;
    };
    let f = m.path("a.txt");
    fs::write(&f, b"hello world").unwrap();
    assert_eq!(fs::read(&f).unwrap(), b"hello world");
    let md = fs::metadata(&f).unwrap();
    assert_eq!(md.len(), 11);
    assert_eq!(md.mode() & 0o777, 0o644 & !current_umask());

    // Partial writes, seeks and truncation.
    let mut h = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&f)
        .unwrap();
    h.seek(SeekFrom::Start(6)).unwrap();
    h.write_all(b"WORLD!").unwrap();
    h.set_len(8).unwrap();
    let mut s = String::new();
    h.seek(SeekFrom::Start(0)).unwrap();
    h.read_to_string(&mut s).unwrap();
    assert_eq!(s, "hello WO");
    drop(h);

    // Directories, renames, links.
    fs::create_dir(m.path("d")).unwrap();
    fs::rename(&f, m.path("d/b.txt")).unwrap();
    assert_eq!(errno_of(fs::metadata(&f)), ENOENT);
    fs::hard_link(m.path("d/b.txt"), m.path("h.txt")).unwrap();
    let (a, b) = (
        fs::metadata(m.path("d/b.txt")).unwrap(),
        fs::metadata(m.path("h.txt")).unwrap(),
    );
    assert_eq!((a.ino(), a.nlink()), (b.ino(), 2));
    std::os::unix::fs::symlink("d/b.txt", m.path("s")).unwrap();
    assert_eq!(fs::read_link(m.path("s")).unwrap(), Path::new("d/b.txt"));
    assert_eq!(fs::read(m.path("s")).unwrap(), b"hello WO");
    assert!(fs::symlink_metadata(m.path("s"))
        .unwrap()
        .file_type()
        .is_symlink());

    // Mode and times.
    fs::set_permissions(m.path("h.txt"), fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(
        fs::metadata(m.path("d/b.txt")).unwrap().mode() & 0o7777,
        0o600
    );

    // Listing.
    let mut names: Vec<String> = fs::read_dir(&m.dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["d", "h.txt", "s"]);

    // The engine's errno reaches the caller unchanged.
    assert_eq!(errno_of(fs::read(m.path("missing"))), ENOENT);
    assert_eq!(errno_of(fs::create_dir(m.path("d"))), EEXIST);
    assert_eq!(errno_of(fs::remove_dir(m.path("d"))), ENOTEMPTY);
    assert_eq!(errno_of(fs::remove_file(m.path("d"))), EISDIR);
    assert_eq!(errno_of(fs::remove_dir(m.path("h.txt"))), ENOTDIR);
    assert_eq!(errno_of(fs::metadata(m.path("h.txt/x"))), ENOTDIR);
    assert_eq!(
        errno_of(
            fs::OpenOptions::new()
                .read(true)
                .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
                .open(m.path("s"))
        ),
        ELOOP
    );
    assert_eq!(errno_of(fs::rename(m.path("d"), m.path("d/sub"))), EINVAL);
    let r = rustix::fs::renameat_with(
        rustix::fs::CWD,
        m.path("h.txt"),
        rustix::fs::CWD,
        m.path("s"),
        rustix::fs::RenameFlags::NOREPLACE,
    );
    assert_eq!(r.map_err(|e| e.raw_os_error()), Err(EEXIST));
    rustix::fs::renameat_with(
        rustix::fs::CWD,
        m.path("h.txt"),
        rustix::fs::CWD,
        m.path("s"),
        rustix::fs::RenameFlags::EXCHANGE,
    )
    .unwrap();
    assert!(fs::symlink_metadata(m.path("h.txt"))
        .unwrap()
        .file_type()
        .is_symlink());

    // Removal.
    fs::remove_file(m.path("d/b.txt")).unwrap();
    fs::remove_dir(m.path("d")).unwrap();
    fs::remove_file(m.path("s")).unwrap();
    fs::remove_file(m.path("h.txt")).unwrap();
    assert_eq!(fs::read_dir(&m.dir).unwrap().count(), 0);

    // FIFOs are made by the engine and opened by the kernel.
    rustix::fs::mknodat(
        rustix::fs::CWD,
        m.path("fifo"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    assert!(std::os::unix::fs::FileTypeExt::is_fifo(
        &fs::metadata(m.path("fifo")).unwrap().file_type()
    ));
    m.unmount().unwrap();
}

fn current_umask() -> u32 {
    let old = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o022));
    rustix::process::umask(old);
    old.bits()
}

#[test]
fn lookup_counts_and_forget() {
    let Some(m) = mount("forget", false) else {
        return;
    };
    fs::create_dir(m.path("d")).unwrap();
    for i in 0..200 {
        fs::write(m.path(&format!("d/f{i}")), b"x").unwrap();
    }
    // Hard links share a node.
    fs::hard_link(m.path("d/f0"), m.path("d/link")).unwrap();
    for i in 0..200 {
        fs::metadata(m.path(&format!("d/f{i}"))).unwrap();
    }
    let held = m.nodes.get();
    assert!(held >= 202, "root, d and 200 files: {held}");
    assert!(held <= 203, "one node per object, not per name: {held}");
    // A file that is open stays usable after its name is gone.
    let mut open = fs::File::open(m.path("d/f1")).unwrap();
    fs::remove_file(m.path("d/f1")).unwrap();
    if is_root() {
        // Evict the kernel's unused inodes: it forgets them, and the table lets them go.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            fs::write("/proc/sys/vm/drop_caches", "2").unwrap();
            if m.nodes.get() <= 5 || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let left = m.nodes.get();
        assert!(left <= 5, "nodes left after drop_caches: {left}");
    } else {
        eprintln!("lookup_counts_and_forget: not root; not evicting the kernel's inodes");
    }
    let mut s = String::new();
    open.read_to_string(&mut s).unwrap();
    assert_eq!(s, "x");
    drop(open);
    // Everything forgotten is still reachable by name.
    for i in (0..200).filter(|&i| i != 1) {
        assert_eq!(fs::read(m.path(&format!("d/f{i}"))).unwrap(), b"x");
    }
    assert_eq!(
        fs::metadata(m.path("d/link")).unwrap().ino(),
        fs::metadata(m.path("d/f0")).unwrap().ino()
    );
    m.unmount().unwrap();
}

#[test]
fn readdir_while_the_directory_changes() {
    let Some(m) = mount("readdir", false) else {
        return;
    };
    let d = m.path("d");
    fs::create_dir(&d).unwrap();
    let stable: HashSet<String> = (0..3000).map(|i| format!("stable-{i:05}")).collect();
    for n in &stable {
        fs::write(d.join(n), b"").unwrap();
    }
    for i in 0..500 {
        fs::write(d.join(format!("doomed-{i:05}")), b"").unwrap();
    }
    let mut seen = Vec::new();
    for (k, e) in fs::read_dir(&d).unwrap().enumerate() {
        seen.push(e.unwrap().file_name().into_string().unwrap());
        // Change the directory between reads: remove the doomed ones, add new ones.
        if k % 10 == 0 && k / 10 < 500 {
            let _ = fs::remove_file(d.join(format!("doomed-{:05}", k / 10)));
            fs::write(d.join(format!("new-{k:05}")), b"").unwrap();
        }
    }
    let mut once = HashSet::new();
    for n in &seen {
        assert!(once.insert(n.clone()), "{n} returned twice");
    }
    for n in &stable {
        assert!(
            once.contains(n),
            "{n} existed throughout and was not returned"
        );
    }
    m.unmount().unwrap();
}

#[test]
fn unmount_while_busy() {
    let Some(m) = mount("busy", false) else {
        return;
    };
    fs::write(m.path("f"), b"data").unwrap();
    let open = fs::File::open(m.path("f")).unwrap();
    if is_root() {
        let r = nix::mount::umount(&m.dir);
        assert_eq!(r, Err(nix::errno::Errno::EBUSY));
        // Still served.
        assert_eq!(fs::read(m.path("f")).unwrap(), b"data");
    }
    drop(open);
    m.unmount().unwrap();
}

#[test]
fn requests_run_as_their_callers() {
    if !is_root() {
        eprintln!("skipping requests_run_as_their_callers: needs root");
        return;
    }
    let Some(m) = mount("creds", true) else {
        return;
    };
    use std::os::unix::process::CommandExt;
    let nobody = 65534;
    fs::create_dir(m.path("closed")).unwrap();
    fs::set_permissions(m.path("closed"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::create_dir(m.path("open")).unwrap();
    fs::set_permissions(m.path("open"), fs::Permissions::from_mode(0o1777)).unwrap();
    let run = |script: &str| {
        std::process::Command::new("sh")
            .arg("-c")
            .arg(script)
            .uid(nobody)
            .gid(nobody)
            .current_dir("/")
            .output()
            .unwrap()
    };
    let out = run(&format!("touch {}/x", m.path("closed").display()));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("Permission denied"));
    let out = run(&format!("touch {}/x", m.path("open").display()));
    assert!(out.status.success(), "{out:?}");
    let md = fs::metadata(m.path("open/x")).unwrap();
    assert_eq!((md.uid(), md.gid()), (nobody, nobody));
    // Root's file in the sticky directory cannot be removed by nobody.
    fs::write(m.path("open/root-owned"), b"").unwrap();
    let out = run(&format!("rm -f {}/root-owned", m.path("open").display()));
    assert!(!out.status.success());
    assert!(m.path("open/root-owned").exists());
    m.unmount().unwrap();
}

#[test]
fn concurrent_callers() {
    let Some(m) = mount("concurrent", false) else {
        return;
    };
    let root = Arc::new(m.dir.clone());
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let root = root.clone();
            std::thread::spawn(move || {
                let d = root.join(format!("t{t}"));
                fs::create_dir(&d).unwrap();
                for i in 0..200 {
                    let p = d.join(format!("f{i}"));
                    let body = format!("{t}:{i}");
                    fs::write(&p, &body).unwrap();
                    assert_eq!(fs::read_to_string(&p).unwrap(), body);
                    let q = root.join(format!("t{t}/g{i}"));
                    fs::rename(&p, &q).unwrap();
                    if i % 2 == 0 {
                        fs::remove_file(&q).unwrap();
                    }
                }
                assert_eq!(fs::read_dir(&d).unwrap().count(), 100);
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(errno_of(fs::read(root.join("t0/f0"))), ENOENT);
    m.unmount().unwrap();
}

/// Runs `f` on a thread whose credentials (real, effective, saved and file system ids,
/// and groups) are nobody's; the raw per-thread calls leave the rest of the test root.
fn as_nobody<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    use rustix::process::{Gid, Uid};
    std::thread::scope(|s| {
        s.spawn(|| {
            let (u, g) = (Uid::from_raw(NOBODY), Gid::from_raw(NOBODY));
            rustix::thread::set_thread_groups(&[]).unwrap();
            rustix::thread::set_thread_res_gid(g, g, g).unwrap();
            rustix::thread::set_thread_res_uid(u, u, u).unwrap();
            f()
        })
        .join()
        .unwrap()
    })
}

/// A fresh host tmpfs, the reference a test compares the mount with; unmounted on drop.
struct HostTmpfs(PathBuf);

impl HostTmpfs {
    /// `None` (with a message) when tmpfs cannot be mounted here (not root).
    fn mount(name: &str) -> Option<HostTmpfs> {
        let dir =
            std::env::temp_dir().join(format!("scalevfs-tmpfs-{}-{name}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "tmpfs"])
            .arg(&dir)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = fs::remove_dir(&dir);
            eprintln!("skipping {name}: cannot mount tmpfs");
            return None;
        }
        Some(HostTmpfs(dir))
    }
}

/// A fresh mount and a fresh host tmpfs beside it, for a test that compares the two; `None`
/// (with a message) unless this machine can make both as root.
fn with_tmpfs(test: &str, allow_other: bool) -> Option<(Mounted, HostTmpfs)> {
    if !is_root() {
        eprintln!("skipping {test}: needs root");
        return None;
    }
    let m = mount(test, allow_other)?;
    let t = HostTmpfs::mount(test)?;
    Some((m, t))
}

impl Drop for HostTmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
        let _ = fs::remove_dir(&self.0);
    }
}

const NOBODY: u32 = 65534;
const ENFILE: i32 = 23;
const EDQUOT: i32 = 122;

/// One user cannot lock the others out: past its open-file limit it gets `ENFILE` (and
/// past its inode limit `EDQUOT`) while root still opens, lists and creates; its files
/// count until they are closed.
#[test]
fn per_user_limits_leave_root_a_way_in() {
    if !is_root() {
        eprintln!("skipping per_user_limits_leave_root_a_way_in: needs root");
        return;
    }
    let vfs = Vfs::new(scalevfs::MemFs::new(scalevfs::MemFsOptions {
        max_inodes_per_user: Some(8),
        ..Default::default()
    }));
    let o = FsOptions {
        max_open_per_user: Some(5),
        ..FsOptions::default()
    };
    let Some(m) = mount_with("limits", true, vfs, o) else {
        return;
    };
    fs::create_dir(m.path("pub")).unwrap();
    fs::set_permissions(m.path("pub"), fs::Permissions::from_mode(0o1777)).unwrap();
    let held = as_nobody(|| {
        let mut held = Vec::new();
        let mut err = 0;
        for i in 0..7 {
            match fs::File::create(m.path(&format!("pub/f{i}"))) {
                Ok(f) => held.push(f),
                Err(e) => {
                    err = e.raw_os_error().unwrap();
                    break;
                }
            }
        }
        assert_eq!((held.len(), err), (5, ENFILE), "the sixth open is refused");
        // A directory open counts too.
        assert_eq!(errno_of(fs::read_dir(m.path("pub"))), ENFILE);
        held
    });
    // Root gets in while nobody holds its limit.
    let mine: Vec<_> = (0..50)
        .map(|i| fs::File::create(m.path(&format!("pub/root{i}"))).unwrap())
        .collect();
    assert_eq!(fs::read_dir(m.path("pub")).unwrap().count(), 55);
    drop((mine, held));
    // Closed files stop counting (release arrives after close returns: wait for it).
    let deadline = Instant::now() + Duration::from_secs(10);
    as_nobody(|| loop {
        let opened: Vec<_> = (0..5)
            .filter_map(|i| fs::File::open(m.path(&format!("pub/f{i}"))).ok())
            .collect();
        if opened.len() == 5 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "nobody's closed files still count"
        );
        drop(opened);
        std::thread::sleep(Duration::from_millis(20));
    });
    // The inode limit: nobody owns 5 files; 3 more fit, the fourth is refused.
    as_nobody(|| {
        for i in 0..3 {
            fs::write(m.path(&format!("pub/g{i}")), b"").unwrap();
        }
        assert_eq!(errno_of(fs::write(m.path("pub/g3"), b"")), EDQUOT);
        assert_eq!(errno_of(fs::create_dir(m.path("pub/d"))), EDQUOT);
    });
    fs::write(m.path("pub/root-more"), b"").unwrap();
    m.unmount().unwrap();
}

/// Another user through the mount gets the kernel's permission order (the mount asks for
/// `default_permissions` with `allow_other`): each call's errno is what the same call on
/// the host's tmpfs, with the same tree, returns.
#[test]
fn other_users_get_the_kernels_permission_order() {
    let Some((m, tmpfs)) = with_tmpfs("other_users_get_the_kernels_permission_order", true) else {
        return;
    };
    let tmp = tmpfs.0.clone();
    let build = |root: &Path| {
        for (d, mode) in [("a", 0o700), ("w", 0o755), ("b", 0o755), ("s", 0o1777)] {
            fs::create_dir(root.join(d)).unwrap();
            fs::set_permissions(root.join(d), fs::Permissions::from_mode(mode)).unwrap();
        }
        fs::write(root.join("a/x"), b"x").unwrap();
        fs::write(root.join("w/f"), b"f").unwrap();
        fs::create_dir(root.join("w/d")).unwrap();
        fs::write(root.join("o"), b"o").unwrap();
        fs::write(root.join("s/rootfile"), b"r").unwrap();
        fs::set_permissions(root.join("o"), fs::Permissions::from_mode(0o644)).unwrap();
    };
    let run = |root: &Path| -> Vec<(&'static str, i32)> {
        let p = |r: &str| root.join(r);
        vec![
            ("stat a/.", errno_of(fs::metadata(p("a/.")))),
            ("stat a/x", errno_of(fs::metadata(p("a/x")))),
            ("rmdir w/f", errno_of(fs::remove_dir(p("w/f")))),
            ("unlink w/d", errno_of(fs::remove_file(p("w/d")))),
            ("unlink w/f", errno_of(fs::remove_file(p("w/f")))),
            ("unlink w/none", errno_of(fs::remove_file(p("w/none")))),
            ("mkdir b/.", errno_of(fs::create_dir(p("b/.")))),
            ("mkdir b/new", errno_of(fs::create_dir(p("b/new")))),
            ("mkdir w/f", errno_of(fs::create_dir(p("w/f")))),
            (
                "chmod o",
                errno_of(fs::set_permissions(
                    p("o"),
                    fs::Permissions::from_mode(0o777),
                )),
            ),
            (
                "chmod a/x",
                errno_of(fs::set_permissions(
                    p("a/x"),
                    fs::Permissions::from_mode(0o777),
                )),
            ),
            (
                "open o for write",
                errno_of(fs::OpenOptions::new().write(true).open(p("o"))),
            ),
            ("rename w/f b/f", errno_of(fs::rename(p("w/f"), p("b/f")))),
            ("link w/f s/l", errno_of(fs::hard_link(p("w/f"), p("s/l")))),
            (
                "symlink b/l",
                errno_of(std::os::unix::fs::symlink("x", p("b/l"))),
            ),
            (
                "unlink s/rootfile",
                errno_of(fs::remove_file(p("s/rootfile"))),
            ),
            ("create s/mine", errno_of(fs::write(p("s/mine"), b"m"))),
            ("read_dir a", errno_of(fs::read_dir(p("a")))),
        ]
    };
    build(&m.dir);
    build(&tmp);
    let fuse = as_nobody(|| run(&m.dir));
    let kernel = as_nobody(|| run(&tmp));
    drop(tmpfs);
    assert_eq!(fuse, kernel, "through FUSE (left) against tmpfs (right)");
    m.unmount().unwrap();
}

/// A running executable cannot be truncated, and a refused truncation changes nothing:
/// `open(O_RDONLY | O_TRUNC)` and `open(O_WRONLY)` of it fail with `ETXTBSY` and leave its
/// size, as on tmpfs. (With atomic `O_TRUNC` negotiated, the kernel sent the truncation
/// inside `open` before its own write-access check: the server emptied the file, the
/// kernel then said `ETXTBSY`, and the program died of `SIGSEGV` when it next paged in.)
#[test]
fn a_running_executable_is_not_truncated() {
    let Some((m, tmpfs)) = with_tmpfs("a_running_executable_is_not_truncated", false) else {
        return;
    };
    let sleep = ["/usr/bin/sleep", "/bin/sleep"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("a sleep binary");
    let run = |root: &Path| -> (i32, i32, u64, u64) {
        let exe = root.join("sleep");
        fs::copy(sleep, &exe).unwrap();
        fs::set_permissions(&exe, fs::Permissions::from_mode(0o755)).unwrap();
        let size = fs::metadata(&exe).unwrap().len();
        let mut child = std::process::Command::new(&exe).arg("30").spawn().unwrap();
        let trunc = errno_of(
            fs::OpenOptions::new()
                .read(true)
                .custom_flags(nix::fcntl::OFlag::O_TRUNC.bits())
                .open(&exe),
        );
        let write = errno_of(fs::OpenOptions::new().write(true).open(&exe));
        let after = fs::metadata(&exe).unwrap().len();
        child.kill().unwrap();
        child.wait().unwrap();
        (trunc, write, size, after)
    };
    let fuse = run(&m.dir);
    let kernel = run(&tmpfs.0);
    assert_eq!(kernel.0, ETXTBSY, "tmpfs: {kernel:?}");
    assert_eq!(fuse, kernel, "through FUSE (left) against tmpfs (right)");
    drop(tmpfs);
    m.unmount().unwrap();
}

const ETXTBSY: i32 = 26;

/// Extended attributes through the mount: the engine answers every name (FUSE's kernel side
/// passes them all through), with the engine's errors, and the buffer protocol (the size
/// asked with an empty buffer, `ERANGE` for one too small) survives the trip.
#[test]
fn extended_attributes() {
    use rustix::fs::{self as rfs, XattrFlags};
    let Some(m) = mount("xattrs", false) else {
        return;
    };
    let f = m.path("f");
    fs::write(&f, b"").unwrap();
    let none = XattrFlags::empty();
    rfs::setxattr(&f, "user.colour", b"green", none).unwrap();
    assert_eq!(rfs::getxattr_query(&f, "user.colour"), Ok(5));
    let mut buf = [0u8; 64];
    assert_eq!(rfs::getxattr(&f, "user.colour", &mut buf[..]), Ok(5));
    assert_eq!(&buf[..5], b"green");
    assert_eq!(
        rfs::getxattr(&f, "user.colour", &mut buf[..3]),
        Err(rustix::io::Errno::RANGE)
    );
    assert_eq!(
        rfs::getxattr(&f, "user.none", &mut buf[..]),
        Err(rustix::io::Errno::NODATA)
    );
    assert_eq!(
        rfs::setxattr(&f, "user.colour", b"red", XattrFlags::CREATE),
        Err(rustix::io::Errno::EXIST)
    );
    assert_eq!(
        rfs::setxattr(&f, "foo.bar", b"x", none),
        Err(rustix::io::Errno::OPNOTSUPP)
    );
    assert_eq!(
        rfs::setxattr(&f, "user.", b"x", none),
        Err(rustix::io::Errno::INVAL)
    );
    rfs::setxattr(&f, "user.a", b"", none).unwrap();
    let n = rfs::listxattr(&f, &mut buf[..]).unwrap();
    assert_eq!(&buf[..n], b"user.colour\0user.a\0");
    rfs::removexattr(&f, "user.colour").unwrap();
    assert_eq!(
        rfs::removexattr(&f, "user.colour"),
        Err(rustix::io::Errno::NODATA)
    );
    // A directory, and an open file by its descriptor.
    fs::create_dir(m.path("d")).unwrap();
    rfs::setxattr(m.path("d"), "user.d", b"dir", none).unwrap();
    let h = fs::File::open(&f).unwrap();
    assert_eq!(rfs::fgetxattr(&h, "user.a", &mut buf[..]), Ok(0));
    drop(h);
    // A symlink itself: user. is refused, trusted. is root's.
    std::os::unix::fs::symlink("f", m.path("l")).unwrap();
    assert_eq!(
        rfs::lsetxattr(m.path("l"), "user.a", b"x", none),
        Err(rustix::io::Errno::PERM)
    );
    if is_root() {
        rfs::lsetxattr(m.path("l"), "trusted.t", b"x", none).unwrap();
        let n = rfs::llistxattr(m.path("l"), &mut buf[..]).unwrap();
        assert_eq!(&buf[..n], b"trusted.t\0");
    }
    m.unmount().unwrap();
}

/// `fcntl` on a descriptor of the mount, with a `struct flock` of these values; the
/// `struct flock` after the call.
fn fcntl_lock(f: &fs::File, cmd: i32, typ: i16, start: i64, len: i64) -> Result<libc::flock, i32> {
    use std::os::fd::AsRawFd;
    // SAFETY: zeroes are a valid `struct flock`.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = typ;
    fl.l_start = start;
    fl.l_len = len;
    // SAFETY: a descriptor we hold, and a `struct flock` that outlives the call.
    let r = unsafe { libc::fcntl(f.as_raw_fd(), cmd, &mut fl as *mut libc::flock) };
    if r < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap());
    }
    Ok(fl)
}

/// Record locks through the mount are the engine's: a lock an engine process holds stops a
/// client of the mount, a client's lock shows in the engine with the client's pid, a
/// client's close (FUSE's flush) drops its locks, and a client's `F_SETLKW` waits on a
/// thread of the server's until the engine's lock goes.
#[test]
fn record_locks_reach_the_engine() {
    use scalevfs::{Creds, Flock, LockCmd, LockType, OFlags};
    let vfs = Vfs::new_memfs();
    let Some(m) = mount_with("locks", false, vfs.clone(), FsOptions::default()) else {
        return;
    };
    fs::write(m.path("f"), b"0123456789abcdef").unwrap();
    let p = vfs.process(Creds::root());
    let fd = p.open("/f", OFlags::RDWR, 0).unwrap();
    p.fcntl_lock(fd, LockCmd::SetLk, &mut Flock::new(LockType::Write, 0, 10))
        .unwrap();
    let c = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.path("f"))
        .unwrap();
    let fl = fcntl_lock(&c, libc::F_GETLK, libc::F_WRLCK as i16, 5, 1).unwrap();
    assert_eq!(
        (fl.l_type as i32, fl.l_start, fl.l_len, fl.l_pid),
        (libc::F_WRLCK, 0, 10, 0),
        "the engine's lock, held by no pid of the kernel's"
    );
    assert_eq!(
        fcntl_lock(&c, libc::F_SETLK, libc::F_RDLCK as i16, 9, 1).unwrap_err(),
        libc::EAGAIN
    );
    fcntl_lock(&c, libc::F_SETLK, libc::F_WRLCK as i16, 10, 0).unwrap();
    // The client's lock, as the engine sees it.
    let mut probe = Flock::new(LockType::Read, 12, 1);
    p.fcntl_lock(fd, LockCmd::GetLk, &mut probe).unwrap();
    assert_eq!(
        (probe.typ, probe.start, probe.len, probe.pid),
        (LockType::Write, 10, 0, std::process::id() as i32)
    );
    // A close of any of the client's descriptors of the file drops its locks.
    let c2 = fs::File::open(m.path("f")).unwrap();
    drop(c2);
    let mut probe = Flock::new(LockType::Read, 12, 1);
    p.fcntl_lock(fd, LockCmd::GetLk, &mut probe).unwrap();
    assert_eq!(probe.typ, LockType::Unlock);
    // F_SETLKW waits for the engine's lock, without holding up the server.
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let r = fcntl_lock(&c, libc::F_SETLKW, libc::F_WRLCK as i16, 0, 1).map(|_| ());
        tx.send(r).unwrap();
        c
    });
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(rx.try_recv().is_err(), "F_SETLKW did not wait");
    assert_eq!(
        fs::read(m.path("f")).unwrap().len(),
        16,
        "the server still answers"
    );
    p.fcntl_lock(fd, LockCmd::SetLk, &mut Flock::new(LockType::Unlock, 0, 0))
        .unwrap();
    let got = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("F_SETLKW was never granted");
    assert_eq!(got, Ok(()));
    let c = waiter.join().unwrap();
    let mut probe = Flock::new(LockType::Read, 0, 1);
    p.fcntl_lock(fd, LockCmd::GetLk, &mut probe).unwrap();
    assert_eq!((probe.typ, probe.start, probe.len), (LockType::Write, 0, 1));
    drop(c);
    p.close(fd).unwrap();
}

/// A client's OFD locks through the mount are its open file description's: two
/// descriptions of one process conflict, a close of a duplicate leaves the lock (FUSE's
/// flush names the process, not the description), and the description's last close (FUSE's
/// release) drops it, which the kernel does not ask for: the server does.
#[test]
fn ofd_locks_go_with_the_last_close_of_their_description() {
    use scalevfs::{Creds, Flock, LockCmd, LockType, OFlags};
    let vfs = Vfs::new_memfs();
    let Some(m) = mount_with("ofd", false, vfs.clone(), FsOptions::default()) else {
        return;
    };
    fs::write(m.path("f"), b"0123456789").unwrap();
    let rw = || {
        fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(m.path("f"))
            .unwrap()
    };
    let (a, b) = (rw(), rw());
    fcntl_lock(&a, libc::F_OFD_SETLK, libc::F_WRLCK as i16, 0, 4).unwrap();
    assert_eq!(
        fcntl_lock(&b, libc::F_OFD_SETLK, libc::F_RDLCK as i16, 2, 1).unwrap_err(),
        libc::EAGAIN,
        "two descriptions of one process conflict"
    );
    let fl = fcntl_lock(&b, libc::F_OFD_GETLK, libc::F_RDLCK as i16, 0, 0).unwrap();
    assert_eq!(
        (fl.l_type as i32, fl.l_start, fl.l_len),
        (libc::F_WRLCK, 0, 4)
    );
    // A process-owned lock of the same process conflicts with it too.
    assert_eq!(
        fcntl_lock(&b, libc::F_SETLK, libc::F_WRLCK as i16, 3, 1).unwrap_err(),
        libc::EAGAIN
    );
    let p = vfs.process(Creds::root());
    let fd = p.open("/f", OFlags::RDWR, 0).unwrap();
    let held = |p: &scalevfs::Process| {
        let mut probe = Flock::new(LockType::Write, 0, 0);
        p.fcntl_lock(fd, LockCmd::GetLk, &mut probe).unwrap();
        (probe.typ, probe.start, probe.len)
    };
    assert_eq!(held(&p), (LockType::Write, 0, 4), "the engine sees it");
    // Closing a duplicate, or another description, flushes the process's locks only.
    drop(a.try_clone().unwrap());
    drop(b);
    assert_eq!(
        held(&p),
        (LockType::Write, 0, 4),
        "a flush dropped an OFD lock"
    );
    // The description's last close drops it: the kernel's release is asynchronous, so
    // wait a little for it.
    drop(a);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while held(&p).0 != LockType::Unlock {
        assert!(
            std::time::Instant::now() < deadline,
            "the OFD lock outlived its description"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    p.close(fd).unwrap();
}

/// A client killed while it waits in `F_SETLKW` stays (the kernel waits out a request the
/// server holds) until the engine's lock goes; then it is granted the lock, exits, and its
/// close (FUSE's flush) drops it: no lock outlives the client.
#[test]
fn a_killed_waiter_leaves_no_lock() {
    use scalevfs::{Creds, Flock, LockCmd, LockType, OFlags};
    if std::process::Command::new("python3")
        .arg("-c")
        .arg("pass")
        .status()
        .map_or(true, |s| !s.success())
    {
        eprintln!("no python3: skipped");
        return;
    }
    let vfs = Vfs::new_memfs();
    let Some(m) = mount_with("killed", false, vfs.clone(), FsOptions::default()) else {
        return;
    };
    fs::write(m.path("f"), b"x").unwrap();
    let p = vfs.process(Creds::root());
    let fd = p.open("/f", OFlags::RDWR, 0).unwrap();
    p.fcntl_lock(fd, LockCmd::SetLk, &mut Flock::new(LockType::Write, 0, 1))
        .unwrap();
    let mut child = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import fcntl, sys\nf = open(sys.argv[1], 'r+')\nprint('go', flush=True)\n\
             fcntl.lockf(f, fcntl.LOCK_EX, 1, 0)\nprint('granted', flush=True)",
        )
        .arg(m.path("f"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line, "go\n");
    std::thread::sleep(std::time::Duration::from_millis(300));
    child.kill().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(100));
    p.fcntl_lock(fd, LockCmd::SetLk, &mut Flock::new(LockType::Unlock, 0, 0))
        .unwrap();
    child.wait().unwrap();
    let mut probe = Flock::new(LockType::Write, 0, 1);
    p.fcntl_lock(fd, LockCmd::GetLk, &mut probe).unwrap();
    assert_eq!(
        probe.typ,
        LockType::Unlock,
        "the dead client's lock stayed: {probe:?}"
    );
    p.close(fd).unwrap();
}
