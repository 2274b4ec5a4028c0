//! Basic behaviour of the API, engine only. The kernel-compared suites are in
//! `semantics.rs` and `plans.rs`.

use scalevfs::*;

fn root() -> Process {
    Vfs::new_memfs().process(Creds::root())
}

#[test]
fn files_dirs_links() {
    let p = root();
    p.create_dir_all("/a/b/c").unwrap();
    p.write_file("/a/b/c/f", b"hello world").unwrap();
    assert_eq!(p.read_file("/a/b/c/f").unwrap(), b"hello world");
    let st = p.stat("/a/b/c/f").unwrap();
    assert_eq!(st.size, 11);
    assert_eq!(st.nlink, 1);
    assert_eq!(st.blocks, 8);
    assert_eq!(p.stat("/a/b").unwrap().nlink, 3);
    p.link("/a/b/c/f", "/a/g").unwrap();
    assert_eq!(p.stat("/a/g").unwrap().nlink, 2);
    assert_eq!(p.stat("/a/g").unwrap().ino, st.ino);
    p.symlink("b/c/f", "/a/s").unwrap();
    assert_eq!(p.readlink("/a/s").unwrap(), b"b/c/f");
    assert_eq!(p.stat("/a/s").unwrap().ino, st.ino);
    assert!(p.lstat("/a/s").unwrap().is_symlink());
    p.unlink("/a/b/c/f").unwrap();
    assert_eq!(p.stat("/a/g").unwrap().nlink, 1);
    assert_eq!(p.stat("/a/s"), Err(Errno::ENOENT));
    assert_eq!(p.stat("/a/b/c/f"), Err(Errno::ENOENT));
    assert_eq!(p.rmdir("/a/b"), Err(Errno::ENOTEMPTY));
    p.rmdir("/a/b/c").unwrap();
    assert_eq!(p.stat("/a/b").unwrap().nlink, 2);
    let mut names: Vec<_> = p
        .read_dir("/a")
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    names.sort();
    assert_eq!(names, vec![b"b".to_vec(), b"g".to_vec(), b"s".to_vec()]);
}

#[test]
fn rename_rules() {
    let p = root();
    p.create_dir_all("/x/y/z").unwrap();
    assert_eq!(p.rename("/x", "/x/y/z/w"), Err(Errno::EINVAL));
    p.write_file("/f", b"1").unwrap();
    assert_eq!(p.rename("/f", "/x"), Err(Errno::EISDIR));
    assert_eq!(p.rename("/x", "/f"), Err(Errno::ENOTDIR));
    assert_eq!(p.rename("/x/y", "/x"), Err(Errno::ENOTEMPTY));
    p.mkdir("/e", 0o755).unwrap();
    p.rename("/x/y", "/e").unwrap();
    assert!(p.stat("/e/z").unwrap().is_dir());
    assert_eq!(p.stat("/x").unwrap().nlink, 2);
    assert_eq!(
        p.renameat2(Fd::CWD, "/f", Fd::CWD, "/e", RenameFlags::NOREPLACE),
        Err(Errno::EEXIST)
    );
    p.renameat2(Fd::CWD, "/f", Fd::CWD, "/e", RenameFlags::EXCHANGE)
        .unwrap();
    assert!(p.stat("/f/z").unwrap().is_dir());
    assert!(p.stat("/e").unwrap().is_file());
}

#[test]
fn bad_input() {
    let p = root();
    assert_eq!(p.stat(""), Err(Errno::ENOENT));
    assert_eq!(p.stat("/a\0b"), Err(Errno::EINVAL));
    let long = "x".repeat(256);
    assert_eq!(p.mkdir(format!("/{long}"), 0o755), Err(Errno::ENAMETOOLONG));
    let deep = "/a".repeat(2048);
    assert_eq!(p.stat(&deep), Err(Errno::ENAMETOOLONG));
    p.symlink("loop", "/loop").unwrap();
    assert_eq!(p.stat("/loop"), Err(Errno::ELOOP));
    p.write_file("/file", b"").unwrap();
    assert_eq!(p.stat("/file/x"), Err(Errno::ENOTDIR));
    assert_eq!(p.stat("/file/"), Err(Errno::ENOTDIR));
    assert_eq!(p.open("/file/", OFlags::RDONLY, 0), Err(Errno::ENOTDIR));
}

#[test]
fn symlink_limit_is_forty() {
    let p = root();
    p.write_file("/t0", b"").unwrap();
    for i in 1..=41 {
        p.symlink(format!("t{}", i - 1), format!("/t{i}")).unwrap();
    }
    assert!(p.stat("/t40").is_ok());
    assert_eq!(p.stat("/t41"), Err(Errno::ELOOP));
}

#[test]
fn permissions() {
    let vfs = Vfs::new_memfs();
    let r = vfs.process(Creds::root());
    r.mkdir("/d", 0o700).unwrap();
    r.write_file("/d/f", b"x").unwrap();
    let u = vfs.process(Creds::user(1000, 1000, vec![]));
    assert_eq!(u.stat("/d/f"), Err(Errno::EACCES));
    r.chmod("/d", 0o711).unwrap();
    assert!(u.stat("/d/f").is_ok());
    assert_eq!(u.open("/d/f", OFlags::WRONLY, 0), Err(Errno::EACCES));
    assert_eq!(u.unlink("/d/f"), Err(Errno::EACCES));
    r.mkdir("/tmp", 0o777).unwrap();
    r.chmod("/tmp", 0o1777).unwrap();
    r.write_file("/tmp/rootfile", b"").unwrap();
    assert_eq!(u.unlink("/tmp/rootfile"), Err(Errno::EPERM));
    u.write_file("/tmp/mine", b"").unwrap();
    assert_eq!(u.stat("/tmp/mine").unwrap().uid, 1000);
    u.unlink("/tmp/mine").unwrap();
}

#[test]
fn unlinked_open_file_keeps_data() {
    let p = root();
    let fd = p.open("/f", OFlags::RDWR | OFlags::CREAT, 0o644).unwrap();
    p.write(fd, b"data").unwrap();
    p.unlink("/f").unwrap();
    assert_eq!(p.fstat(fd).unwrap().nlink, 0);
    let mut b = [0u8; 4];
    assert_eq!(p.pread(fd, &mut b, 0).unwrap(), 4);
    assert_eq!(&b, b"data");
    p.close(fd).unwrap();
    // A new file of the same name is a new inode.
    p.write_file("/f", b"").unwrap();
    assert_eq!(p.stat("/f").unwrap().size, 0);
}

#[test]
fn cwd_and_dotdot() {
    let p = root();
    p.create_dir_all("/a/b").unwrap();
    p.chdir("/a/b").unwrap();
    assert_eq!(p.getcwd().unwrap(), std::path::PathBuf::from("/a/b"));
    p.write_file("rel", b"1").unwrap();
    assert!(p.stat("/a/b/rel").is_ok());
    assert!(p.stat("../../../../a/b/rel").is_ok());
    p.rename("/a", "/z").unwrap();
    assert_eq!(p.getcwd().unwrap(), std::path::PathBuf::from("/z/b"));
    assert_eq!(
        p.realpath("../b/./rel").unwrap(),
        std::path::PathBuf::from("/z/b/rel")
    );
}

#[test]
fn mounts() {
    let p = root();
    p.mkdir("/mnt", 0o755).unwrap();
    p.write_file("/mnt/under", b"").unwrap();
    let fs = MemFs::new(MemFsOptions::default());
    p.mount("/mnt", fs).unwrap();
    assert_eq!(p.stat("/mnt/under"), Err(Errno::ENOENT));
    p.write_file("/mnt/over", b"").unwrap();
    let dev_in = p.stat("/mnt/over").unwrap().dev;
    assert_ne!(dev_in, p.stat("/").unwrap().dev);
    assert_eq!(p.stat("/mnt/..").unwrap().ino, p.stat("/").unwrap().ino);
    assert_eq!(p.rename("/mnt/over", "/over"), Err(Errno::EXDEV));
    let fd = p.open("/mnt/over", OFlags::RDONLY, 0).unwrap();
    assert_eq!(p.umount("/mnt"), Err(Errno::EBUSY));
    p.close(fd).unwrap();
    assert_eq!(p.rmdir("/mnt"), Err(Errno::EBUSY));
    p.umount("/mnt").unwrap();
    assert!(p.stat("/mnt/under").is_ok());
    assert_eq!(p.umount("/mnt"), Err(Errno::EINVAL));
}

/// `copy_file_range` copies within one file system, through any of its mounts, and gives
/// `EXDEV` between two (as tmpfs does between instances). Not in semantics.rs: the kernel
/// oracle has one tmpfs.
#[test]
fn copy_file_range_stays_within_one_file_system() {
    let p = root();
    for d in ["/a", "/b", "/other"] {
        p.mkdir(d, 0o755).unwrap();
    }
    let fs = MemFs::new(MemFsOptions::default());
    p.mount("/a", fs.clone()).unwrap();
    p.mount("/b", fs).unwrap();
    p.mount("/other", MemFs::new(MemFsOptions::default()))
        .unwrap();
    p.write_file("/a/x", b"0123456789").unwrap();
    p.write_file("/top", b"abc").unwrap();
    let x = p.open("/a/x", OFlags::RDONLY, 0).unwrap();
    let flags = OFlags::WRONLY | OFlags::CREAT;
    let same = p.open("/b/y", flags, 0o644).unwrap();
    let other = p.open("/other/y", flags, 0o644).unwrap();
    let top = p.open("/top", OFlags::RDWR, 0).unwrap();
    let (mut off_in, mut off_out) = (3, 0);
    assert_eq!(
        p.copy_file_range(x, Some(&mut off_in), same, Some(&mut off_out), 4, 0),
        Ok(4)
    );
    assert_eq!((off_in, off_out), (7, 4));
    assert_eq!(
        p.read_file("/a/y").unwrap(),
        b"3456",
        "one file system, seen at /a too"
    );
    assert_eq!(
        p.copy_file_range(x, None, other, None, 4, 0),
        Err(Errno::EXDEV)
    );
    assert_eq!(
        p.copy_file_range(top, None, same, None, 4, 0),
        Err(Errno::EXDEV)
    );
    assert_eq!(
        p.copy_file_range(x, None, top, None, 4, 0),
        Err(Errno::EXDEV)
    );
    assert_eq!(p.read_file("/other/y").unwrap(), b"");
    assert_eq!(p.read_file("/top").unwrap(), b"abc");
}

/// A working directory stops holding its mount the moment it stops being the working
/// directory, as on Linux: `umount` right after `chdir` away (or after the process that
/// was there is gone) succeeds, with no grace period to wait out. Before, the old
/// directory's count went with its memory, and this said `EBUSY`.
#[test]
fn leaving_a_mount_frees_it_at_once() {
    let p = root();
    p.mkdir("/mnt", 0o755).unwrap();
    p.mount("/mnt", MemFs::new(MemFsOptions::default()))
        .unwrap();
    p.mkdir("/mnt/d", 0o755).unwrap();
    p.chdir("/mnt/d").unwrap();
    assert_eq!(p.umount("/mnt"), Err(Errno::EBUSY));
    // A relative call from there works in the mount.
    p.write_file("f", b"x").unwrap();
    assert_eq!(p.stat("/mnt/d/f").unwrap().size, 1);
    p.chdir("/").unwrap();
    p.umount("/mnt").unwrap();

    p.mount("/mnt", MemFs::new(MemFsOptions::default()))
        .unwrap();
    let q = p.fork();
    q.chdir("/mnt").unwrap();
    assert_eq!(p.umount("/mnt"), Err(Errno::EBUSY));
    drop(q);
    p.umount("/mnt").unwrap();
}

#[test]
fn readdir_cookies_survive_changes() {
    let p = root();
    p.mkdir("/d", 0o755).unwrap();
    for i in 0..100 {
        p.write_file(format!("/d/f{i}"), b"").unwrap();
    }
    let fd = p.open("/d", OFlags::RDONLY | OFlags::DIRECTORY, 0).unwrap();
    let mut seen = std::collections::HashSet::new();
    let first = p.getdents(fd, 30).unwrap();
    for e in &first {
        assert!(seen.insert(e.name.clone()));
    }
    // Remove some unseen entries, add new ones: the survivors still appear exactly once.
    for i in 90..100 {
        p.unlink(format!("/d/f{i}")).unwrap();
    }
    for i in 0..20 {
        p.write_file(format!("/d/n{i}"), b"").unwrap();
    }
    loop {
        let v = p.getdents(fd, 7).unwrap();
        if v.is_empty() {
            break;
        }
        for e in v {
            assert!(seen.insert(e.name.clone()), "twice: {:?}", e.name);
        }
    }
    for i in 0..90 {
        assert!(seen.contains(format!("f{i}").as_bytes()), "missed f{i}");
    }
    p.close(fd).unwrap();
}

#[test]
fn check_mode_agrees() {
    let vfs = Vfs::new_memfs();
    vfs.set_check_mode(true);
    let p = vfs.process(Creds::root());
    p.create_dir_all("/a/b/c").unwrap();
    p.write_file("/a/b/c/f", b"").unwrap();
    p.symlink("/a/b", "/l").unwrap();
    for path in [
        "/a/b/c/f",
        "/l/c/f",
        "/a/../a/b",
        "/nope",
        "/a/b/c/f/x",
        "/l/../b",
    ] {
        let _ = p.stat(path);
        let _ = p.lstat(path);
        let _ = p.access(path, Access::R_OK);
    }
    assert_eq!(vfs.check_failures(), 0);
}

/// Every change that alters how a cached path resolves must invalidate it.
#[test]
fn path_cache_invalidation() {
    let vfs = Vfs::new_memfs();
    let p = vfs.process(Creds::root());
    p.create_dir_all("/a/b").unwrap();
    p.write_file("/a/b/f", b"1").unwrap();
    let warm = |path: &str| {
        for _ in 0..3 {
            let _ = p.stat(path);
        }
    };
    // Rename of an intermediate directory.
    warm("/a/b/f");
    p.rename("/a", "/z").unwrap();
    assert_eq!(p.stat("/a/b/f"), Err(Errno::ENOENT));
    assert!(p.stat("/z/b/f").is_ok());
    // Removal and re-creation of an intermediate directory.
    p.mkdir("/e", 0o755).unwrap();
    p.write_file("/e/g", b"").unwrap();
    warm("/e/g");
    p.unlink("/e/g").unwrap();
    p.rmdir("/e").unwrap();
    assert_eq!(p.stat("/e/g"), Err(Errno::ENOENT));
    p.mkdir("/e", 0o755).unwrap();
    assert_eq!(p.stat("/e/g"), Err(Errno::ENOENT));
    // A symlink in the path, removed and pointed elsewhere.
    p.mkdir("/y", 0o755).unwrap();
    p.write_file("/y/f", b"22").unwrap();
    p.symlink("/z/b", "/s").unwrap();
    warm("/s/f");
    assert_eq!(p.stat("/s/f").unwrap().size, 1);
    p.unlink("/s").unwrap();
    p.symlink("/y", "/s").unwrap();
    assert_eq!(p.stat("/s/f").unwrap().size, 2);
    // Search permission taken away, and credentials changed.
    let u = vfs.process(Creds::user(1000, 1000, vec![]));
    u.stat("/z/b/f").unwrap();
    warm("/z/b/f");
    p.chmod("/z", 0o700).unwrap();
    assert_eq!(u.stat("/z/b/f"), Err(Errno::EACCES));
    p.chmod("/z", 0o755).unwrap();
    assert!(u.stat("/z/b/f").is_ok());
    u.set_creds(Creds::user(1001, 1001, vec![]));
    p.chmod("/z", 0o750).unwrap();
    assert_eq!(u.stat("/z/b/f"), Err(Errno::EACCES));
    // A mount over an intermediate directory.
    warm("/z/b/f");
    p.mount("/z", MemFs::new(MemFsOptions::default())).unwrap();
    assert_eq!(p.stat("/z/b/f"), Err(Errno::ENOENT));
    p.umount("/z").unwrap();
    assert!(p.stat("/z/b/f").is_ok());
    // The final name replaced by a rename of another file over it.
    p.write_file("/y/other", b"333").unwrap();
    warm("/y/f");
    p.rename("/y/other", "/y/f").unwrap();
    assert_eq!(p.stat("/y/f").unwrap().size, 3);
    // A relative path after chdir.
    p.chdir("/y").unwrap();
    assert_eq!(p.stat("f").unwrap().size, 3);
    p.chdir("/z/b").unwrap();
    assert_eq!(p.stat("f").unwrap().size, 1);
}

#[test]
fn reopen_path_descriptor() {
    let vfs = Vfs::new_memfs();
    let p = vfs.process(Creds::root());
    p.write_file("/f", b"abc").unwrap();
    let h = p.open("/f", OFlags::PATH, 0).unwrap();
    let mut b = [0u8; 3];
    assert_eq!(p.read(h, &mut b), Err(Errno::EBADF));
    let r = p.reopen(h, OFlags::RDWR).unwrap();
    p.unlink("/f").unwrap();
    assert_eq!(p.pread(r, &mut b, 0).unwrap(), 3);
    let w = p.reopen(h, OFlags::WRONLY | OFlags::TRUNC).unwrap();
    assert_eq!(p.fstat(w).unwrap().size, 0);
    let u = vfs.process(Creds::user(1000, 1000, vec![]));
    u.write_file("/mine", b"").unwrap();
    u.chmod("/mine", 0o200).unwrap();
    let hu = u.open("/mine", OFlags::PATH, 0).unwrap();
    assert_eq!(u.reopen(hu, OFlags::RDONLY), Err(Errno::EACCES));
    assert!(u.reopen(hu, OFlags::WRONLY).is_ok());
}

/// Walks the path cache holds must not outlive a change to a directory or symlink they pass
/// through. Each path is stat'ed three times first, so that it is cached (a path is admitted
/// on its second miss); no check mode here, so a stale cache answer is what `stat` returns.
#[test]
fn cached_walks_do_not_survive_changes_on_their_way() {
    fn warm(p: &Process, path: &str) {
        for _ in 0..3 {
            p.stat(path).unwrap();
        }
    }
    let p = root();
    let u = p.fork();
    u.set_creds(Creds::user(1000, 1000, vec![]));
    p.create_dir_all("/a/b").unwrap();
    p.write_file("/a/b/f", b"x").unwrap();

    // Rename of a directory on the way.
    warm(&p, "/a/b/f");
    p.rename("/a", "/c").unwrap();
    assert_eq!(p.stat("/a/b/f"), Err(Errno::ENOENT));
    warm(&p, "/c/b/f");

    // Rename of the parent to another place, and a new directory in its old place.
    p.mkdir("/d", 0o755).unwrap();
    p.rename("/c/b", "/d/b").unwrap();
    p.mkdir("/c/b", 0o755).unwrap();
    assert_eq!(p.stat("/c/b/f"), Err(Errno::ENOENT));

    // A symlink on the way, replaced by one to elsewhere.
    p.create_dir_all("/e").unwrap();
    p.write_file("/e/f", b"yy").unwrap();
    p.symlink("d/b", "/l").unwrap();
    warm(&p, "/l/f");
    assert_eq!(p.stat("/l/f").unwrap().size, 1);
    p.unlink("/l").unwrap();
    p.symlink("e", "/l").unwrap();
    assert_eq!(p.stat("/l/f").unwrap().size, 2);

    // Search permission taken away from a directory on the way, for another user.
    warm(&u, "/d/b/f");
    p.chmod("/d", 0o700).unwrap();
    assert_eq!(u.stat("/d/b/f"), Err(Errno::EACCES));

    // Removal of a directory on the way, and a file in its place.
    warm(&p, "/e/f");
    p.unlink("/e/f").unwrap();
    p.rmdir("/e").unwrap();
    p.write_file("/e", b"").unwrap();
    assert_eq!(p.stat("/e/f"), Err(Errno::ENOTDIR));
}

/// `walk_tree` and `remove_dir_all` work relative to directory descriptors: a tree deeper
/// than PATH_MAX allows to name by path (3000 levels, 9000-byte paths) is walked and
/// removed. Before, both failed with ENAMETOOLONG past about 2000 levels.
#[test]
fn deep_trees_walk_and_remove() {
    let p = root();
    p.mkdir("/deep", 0o755).unwrap();
    let dir = OFlags::RDONLY | OFlags::DIRECTORY;
    let mut fd = p.open("/deep", dir, 0).unwrap();
    for _ in 0..3000 {
        p.mkdirat(fd, "dd", 0o755).unwrap();
        let sub = p.openat(fd, "dd", dir, 0).unwrap();
        p.close(fd).unwrap();
        fd = sub;
    }
    let f = p
        .openat(fd, "f", OFlags::CREAT | OFlags::WRONLY, 0o644)
        .unwrap();
    p.close(f).unwrap();
    p.close(fd).unwrap();
    let all = p.walk_tree("/deep").unwrap();
    assert_eq!(all.len(), 3002);
    let (deepest, st) = all.last().unwrap();
    assert!(deepest.as_os_str().len() > 9000);
    assert!(deepest.ends_with("dd/f") && st.is_file());
    p.remove_dir_all("/deep").unwrap();
    assert_eq!(p.stat("/deep"), Err(Errno::ENOENT));
    assert_eq!(
        p.statfs("/").unwrap().ffree + 1,
        p.statfs("/").unwrap().files
    );
}

/// Stacked mounts: umount takes the top one off and leaves the mount point marked while
/// another mount stays on it; once the last goes, the directory is plain again (rmdir
/// works).
#[test]
fn stacked_mounts_come_off_in_order() {
    let p = root();
    p.mkdir("/a", 0o755).unwrap();
    p.write_file("/a/under", b"0").unwrap();
    p.mkdir("/b", 0o755).unwrap();
    p.mount("/b", MemFs::new(MemFsOptions::default())).unwrap();
    p.mount("/a", MemFs::new(MemFsOptions::default())).unwrap();
    p.write_file("/a/one", b"1").unwrap();
    p.mount("/a", MemFs::new(MemFsOptions::default())).unwrap();
    p.write_file("/a/two", b"2").unwrap();
    assert_eq!(p.read_dir("/a").unwrap().len(), 1);
    p.umount("/a").unwrap();
    assert_eq!(p.read_file("/a/one").unwrap(), b"1");
    assert_eq!(p.stat("/a/two"), Err(Errno::ENOENT));
    assert_eq!(p.rmdir("/a"), Err(Errno::EBUSY));
    p.umount("/a").unwrap();
    assert_eq!(p.read_file("/a/under").unwrap(), b"0");
    p.unlink("/a/under").unwrap();
    p.rmdir("/a").unwrap();
    assert_eq!(p.rmdir("/b"), Err(Errno::EBUSY));
    p.umount("/b").unwrap();
    p.rmdir("/b").unwrap();
}

/// A file moved out of a directory no longer counts there: the directory can be removed.
#[test]
fn a_directory_emptied_by_renames_can_be_removed() {
    let p = root();
    p.mkdir("/s", 0o755).unwrap();
    p.mkdir("/t", 0o755).unwrap();
    p.write_file("/s/f", b"x").unwrap();
    p.mkdir("/s/d", 0o755).unwrap();
    p.rename("/s/f", "/t/f").unwrap();
    p.rename("/s/d", "/t/d").unwrap();
    p.rmdir("/s").unwrap();
    assert_eq!(p.rmdir("/t"), Err(Errno::ENOTEMPTY));
}

/// A name removed and created again while a directory is being read shows up later in
/// the same read (it gets a new place at the end, as on tmpfs), and nothing is listed
/// twice.
#[test]
fn a_name_created_again_during_readdir_comes_later() {
    let p = root();
    p.mkdir("/d", 0o755).unwrap();
    for i in 0..10 {
        p.write_file(format!("/d/f{i}"), b"").unwrap();
    }
    let fd = p.open("/d", OFlags::RDONLY | OFlags::DIRECTORY, 0).unwrap();
    let mut seen: Vec<Vec<u8>> = p
        .getdents(fd, 7)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert!(seen.contains(&b"f0".to_vec()));
    p.unlink("/d/f0").unwrap();
    p.write_file("/d/f0", b"again").unwrap();
    loop {
        let v = p.getdents(fd, 100).unwrap();
        if v.is_empty() {
            break;
        }
        seen.extend(v.into_iter().map(|e| e.name));
    }
    p.close(fd).unwrap();
    let f0 = seen.iter().filter(|n| n.as_slice() == b"f0").count();
    assert_eq!(f0, 2, "listed before and again after being created anew");
    assert_eq!(seen.len(), 2 + 10 + 1);
}

/// Descriptors: `dup2` onto a far number grows the table; onto itself it does nothing;
/// beyond the limit it is EBADF; `fork` shares the descriptions (and their offsets).
#[test]
fn descriptor_numbers_and_sharing() {
    let p = root();
    p.write_file("/f", b"0123456789").unwrap();
    let fd = p.open("/f", OFlags::RDONLY, 0).unwrap();
    for far in [1024, 5000, 70000] {
        assert_eq!(p.dup2(fd, Fd(far)), Ok(Fd(far)));
        let mut b = [0u8; 2];
        assert_eq!(p.pread(Fd(far), &mut b, 3).unwrap(), 2);
        assert_eq!(&b, b"34");
    }
    assert_eq!(p.dup2(fd, fd), Ok(fd));
    assert!(p.fstat(fd).is_ok());
    assert_eq!(p.dup2(fd, Fd(1 << 20)), Err(Errno::EBADF));
    let q = p.fork();
    let mut b = [0u8; 3];
    assert_eq!(q.read(fd, &mut b).unwrap(), 3);
    // The offset is the description's: the parent sees it moved.
    assert_eq!(p.lseek(fd, 0, Whence::Cur), Ok(3));
    assert_eq!(p.dup(fd), Ok(Fd(1)));
}

/// The table holds at most 2^20 descriptors (like `RLIMIT_NOFILE`): the next open is
/// `EMFILE`, `dup2` past it `EBADF`; a number freed anywhere is the next one handed out,
/// and filling it again is linear (each open finds the lowest free number in O(1)
/// amortised time; a slot-by-slot scan would make this quadratic and time out).
#[test]
fn descriptor_table_limit_and_lowest_free() {
    const MAX: i32 = 1 << 20;
    let p = root();
    p.write_file("/f", b"x").unwrap();
    let fd = p.open("/f", OFlags::PATH, 0).unwrap();
    assert_eq!(fd, Fd(0));
    for want in 1..MAX {
        assert_eq!(p.dup(fd), Ok(Fd(want)));
    }
    assert_eq!(p.dup(fd), Err(Errno::EMFILE));
    assert_eq!(p.open("/f", OFlags::RDONLY, 0), Err(Errno::EMFILE));
    assert_eq!(p.dup2(fd, Fd(MAX)), Err(Errno::EBADF));
    for hole in [MAX - 1, 70000, 4095, 64, 63, 1] {
        p.close(Fd(hole)).unwrap();
    }
    for want in [1, 63, 64, 4095, 70000, MAX - 1] {
        assert_eq!(p.open("/f", OFlags::RDONLY, 0), Ok(Fd(want)));
    }
    assert_eq!(p.dup(fd), Err(Errno::EMFILE));
    // Close every other one, then reopen: each gets the lowest free number.
    for i in (2..MAX).step_by(2) {
        p.close(Fd(i)).unwrap();
    }
    for i in (2..MAX).step_by(2) {
        assert_eq!(p.dup(fd), Ok(Fd(i)));
    }
}

/// An open refused because the table is full gives back what the new description took:
/// the mount it was on is not left in use (so `umount` works), and an unlinked file's
/// space comes back at its last close as usual, whether the refused open was an `O_CREAT`
/// or of an existing name.
#[test]
fn an_open_refused_for_a_full_table_takes_nothing() {
    let vfs = Vfs::new(MemFs::new(MemFsOptions::default()));
    let p = vfs.process(Creds::root());
    p.mkdir("/m", 0o755).unwrap();
    let m = MemFs::new(MemFsOptions {
        max_bytes: Some(1 << 20),
        ..Default::default()
    });
    p.mount("/m", m).unwrap();
    p.write_file("/m/f", &[7u8; 8192]).unwrap();
    let base = p.open("/", OFlags::PATH, 0).unwrap();
    while p.dup(base).is_ok() {}
    assert_eq!(p.open("/m/f", OFlags::RDONLY, 0), Err(Errno::EMFILE));
    assert_eq!(
        p.open("/m/g", OFlags::RDWR | OFlags::CREAT, 0o644),
        Err(Errno::EMFILE)
    );
    assert!(
        p.stat("/m/g").is_ok(),
        "the create happened before the table was full"
    );
    p.unlink("/m/f").unwrap();
    p.unlink("/m/g").unwrap();
    assert_eq!(
        p.statfs("/m").unwrap().blocks,
        p.statfs("/m").unwrap().bfree
    );
    p.close(Fd(1)).unwrap();
    p.umount("/m").unwrap();
}

/// A process that goes away closes its descriptors: an unlinked file it held open is
/// freed (its space and its inode come back).
#[test]
fn dropping_a_process_closes_its_files() {
    let vfs = Vfs::new(MemFs::new(MemFsOptions {
        max_bytes: Some(1 << 20),
        ..Default::default()
    }));
    let p = vfs.process(Creds::root());
    let q = p.fork();
    let fd = q.open("/f", OFlags::RDWR | OFlags::CREAT, 0o644).unwrap();
    q.write(fd, &[1u8; 10000]).unwrap();
    q.unlink("/f").unwrap();
    let st = p.statfs("/").unwrap();
    assert_eq!(st.blocks - st.bfree, 3);
    drop(q);
    let st = p.statfs("/").unwrap();
    assert_eq!((st.blocks - st.bfree, st.files - st.ffree), (0, 1));
}

/// The path cache answers a repeated stat (it is a cache, not only a correct one), and a
/// mount over a directory on the way takes effect at once.
#[test]
fn path_cache_answers_and_mounts_take_effect() {
    let p = root();
    p.mkdir("/a", 0o755).unwrap();
    p.write_file("/a/f", b"x").unwrap();
    p.stat("/a/f").unwrap();
    // The namespace-change generation is the process's: a rename made by a test running
    // beside this one invalidates every cached walk, so a round may miss once; a round
    // with no change in it is answered from the cache ten times out of ten.
    let answered = (0..100).any(|_| {
        let before = path_cache_stats();
        for _ in 0..10 {
            p.stat("/a/f").unwrap();
        }
        path_cache_stats().hits - before.hits == 10
    });
    assert!(answered, "{:?}", path_cache_stats());
    p.mount("/a", MemFs::new(MemFsOptions::default())).unwrap();
    assert_eq!(p.stat("/a/f"), Err(Errno::ENOENT));
    p.umount("/a").unwrap();
    assert!(p.stat("/a/f").is_ok());
}

/// A handle is an open description with no number: every descriptor call takes it, no
/// table's limit applies to it, cloning it shares the description (like `dup`), and
/// dropping the last one closes it (an unlinked file's space comes back, the mount can go).
#[test]
fn handles_work_like_descriptors_without_a_table() {
    let vfs = Vfs::new(MemFs::new(MemFsOptions {
        max_bytes: Some(1 << 20),
        ..Default::default()
    }));
    let p = vfs.process(Creds::root());
    p.mkdir("/m", 0o755).unwrap();
    p.mount("/m", MemFs::new(MemFsOptions::default())).unwrap();
    let dir = p
        .openat_handle(Fd::CWD, "/m", OFlags::PATH | OFlags::DIRECTORY, 0)
        .unwrap();
    p.mkdirat(&dir, "d", 0o755).unwrap();
    let h = p
        .openat_handle(&dir, "d/f", OFlags::RDWR | OFlags::CREAT, 0o644)
        .unwrap();
    assert_eq!(p.write(&h, b"hello"), Ok(5));
    let h2 = h.clone();
    assert_eq!(
        p.lseek(&h2, 0, Whence::Cur),
        Ok(5),
        "a clone shares the position"
    );
    assert_eq!(p.pread(&h2, &mut [0u8; 5], 0), Ok(5));
    assert_eq!(p.fstat(&h).unwrap().size, 5);
    drop(h);
    assert_eq!(p.fstat(&h2).unwrap().size, 5, "the clone keeps it open");
    // The mount is in use while a handle on it lives.
    assert_eq!(p.umount("/m"), Err(Errno::EBUSY));
    drop((dir, h2));
    p.umount("/m").unwrap();

    // No descriptor slot is taken, so a full table does not stop a handle.
    let fd = p.open("/", OFlags::PATH, 0).unwrap();
    while p.dup(fd).is_ok() {}
    assert_eq!(p.open("/", OFlags::PATH, 0), Err(Errno::EMFILE));
    let h = p
        .openat_handle(Fd::CWD, "/big", OFlags::RDWR | OFlags::CREAT, 0o644)
        .unwrap();
    let ro = p.reopen_handle(&h, OFlags::RDONLY).unwrap();
    p.write(&h, &[1u8; 10000]).unwrap();
    p.unlink("/big").unwrap();
    assert_eq!(p.write(&ro, b"x"), Err(Errno::EBADF), "reopened read-only");
    let st = p.statfs("/").unwrap();
    assert_eq!(st.blocks - st.bfree, 3);
    drop(h);
    assert_eq!(
        p.read(&ro, &mut [0u8; 4]),
        Ok(4),
        "still open through the reopen"
    );
    drop(ro);
    let st = p.statfs("/").unwrap();
    assert_eq!(
        st.blocks - st.bfree,
        0,
        "the last handle freed the unlinked file"
    );
}

/// The namespace's statistics follow what it holds and how its walks went: inodes and pages
/// as files come and go, a negative entry and one fallback to the locked walk for the first
/// lookup of a missing name, and none for the second (the negative entry answers it
/// lock-free).
#[test]
fn stats_follow_the_namespace() {
    let vfs = Vfs::new_memfs();
    let p = vfs.process(Creds::root());
    let s0 = vfs.stats();
    assert_eq!(s0.root_fs.inodes, 1, "the root");
    assert_eq!(s0.root_fs.data_pages, 0);
    assert_eq!(s0.root_fs.negative_entries, 0);
    assert_eq!(
        s0.root_fs.hash_buckets,
        MemFsOptions::default().hash_buckets as u64
    );
    p.mkdir("/d", 0o755).unwrap();
    for i in 0..10 {
        p.write_file(format!("/d/f{i}"), &[7u8; 4096 * 3]).unwrap();
    }
    let s1 = vfs.stats();
    assert_eq!(s1.root_fs.inodes, 12);
    assert_eq!(s1.root_fs.data_pages, 30);
    let before = vfs.stats();
    assert_eq!(p.stat("/d/nope").unwrap_err(), Errno::ENOENT);
    let after = vfs.stats();
    assert_eq!(after.fast_walk_fallbacks, before.fast_walk_fallbacks + 1);
    assert_eq!(after.root_fs.negative_entries, 1);
    assert_eq!(p.stat("/d/nope").unwrap_err(), Errno::ENOENT);
    assert_eq!(vfs.stats().fast_walk_fallbacks, after.fast_walk_fallbacks);
    for i in 0..10 {
        p.unlink(format!("/d/f{i}")).unwrap();
    }
    let s2 = vfs.stats();
    assert_eq!(s2.root_fs.inodes, 2);
    assert_eq!(s2.root_fs.data_pages, 0);
}

/// `..` that lands on a mount point crosses into what is mounted there, as Linux's
/// `follow_dotdot` followed by `handle_mounts`: a working directory kept under `/a` after
/// a file system is mounted on `/a` sees the mounted root as its `..`, fast and locked.
#[test]
fn dotdot_onto_a_mount_point_crosses_into_the_mount() {
    let vfs = Vfs::new_memfs();
    let p = vfs.process(Creds::root());
    p.create_dir_all("/a/b").unwrap();
    p.chdir("/a/b").unwrap();
    let covered = p.stat("..").unwrap();
    p.mount("/a", MemFs::new(MemFsOptions::default())).unwrap();
    let mounted = p.stat("/a").unwrap();
    assert_ne!(mounted.dev, covered.dev);
    for _ in 0..3 {
        let up = p.stat("..").unwrap();
        assert_eq!((up.dev, up.ino), (mounted.dev, mounted.ino));
        let up = p.stat("../.").unwrap();
        assert_eq!((up.dev, up.ino), (mounted.dev, mounted.ino));
    }
}

/// `Handle::same_object` tells whether two handles hold one object: true for two opens of
/// one file (also by another name, a hard link, and a clone), false for another file and
/// for a new file that took a removed one's name.
#[test]
fn handles_know_their_object() {
    let p = root();
    p.write_file("/f", b"x").unwrap();
    p.write_file("/g", b"y").unwrap();
    p.link("/f", "/hl").unwrap();
    let open = |path: &str| p.openat_handle(Fd::CWD, path, OFlags::RDONLY, 0).unwrap();
    let (f, f2, hl, g) = (open("/f"), open("/f"), open("/hl"), open("/g"));
    assert!(f.same_object(&f2));
    assert!(f.same_object(&hl));
    assert!(f.same_object(&f.clone()));
    assert!(!f.same_object(&g));
    assert!(!g.same_object(&f));
    p.unlink("/f").unwrap();
    p.write_file("/f", b"z").unwrap();
    assert!(!f.same_object(&open("/f")));
}
