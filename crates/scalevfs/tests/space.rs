//! Space accounting under `max_bytes` (issue 9): every data page is charged once, when a
//! write or `fallocate` adds it, and uncharged once, when a truncate, a hole punch or the
//! inode's eviction (its last link and last open gone) frees it. `statfs` says what is in
//! use; a write is all or a short prefix, never a change and then an error.

use proptest::prelude::*;
use scalevfs::*;
use std::collections::HashMap;
use std::sync::Arc;

const PAGE: u64 = 4096;
const MIB: u64 = 1 << 20;

fn capped(bytes: u64) -> Process {
    Vfs::new(MemFs::new(MemFsOptions {
        max_bytes: Some(bytes),
        ..Default::default()
    }))
    .process(Creds::root())
}

/// Pages in use, as `statfs` says.
fn used(p: &Process) -> u64 {
    let s = p.statfs("/").unwrap();
    s.blocks - s.bfree
}

fn rw(p: &Process, path: &str) -> Fd {
    p.open(path, OFlags::RDWR | OFlags::CREAT, 0o644).unwrap()
}

/// Before: an unlinked-but-open file's pages were uncharged at the unlink, and a truncate
/// uncharged them again: the counter went negative, and every later write failed with
/// ENOSPC until a remount.
#[test]
fn truncate_after_unlink_does_not_uncharge_twice() {
    let p = capped(4 * MIB);
    let fd = rw(&p, "/f");
    assert_eq!(
        p.write(fd, &vec![1u8; 3 * MIB as usize]).unwrap(),
        3 * MIB as usize
    );
    assert_eq!(used(&p), 3 * MIB / PAGE);
    p.unlink("/f").unwrap();
    // Still open: still in use, as on tmpfs.
    assert_eq!(used(&p), 3 * MIB / PAGE);
    p.ftruncate(fd, 0).unwrap();
    assert_eq!(used(&p), 0);
    p.close(fd).unwrap();
    assert_eq!(used(&p), 0);
    p.write_file("/g", &vec![2u8; 3 * MIB as usize]).unwrap();
    assert_eq!(used(&p), 3 * MIB / PAGE);
}

/// Before: pages written to a file after its unlink were never uncharged.
#[test]
fn pages_written_after_unlink_come_back_at_close() {
    let p = capped(4 * MIB);
    let fd = rw(&p, "/f");
    p.write(fd, &[1u8; 100]).unwrap();
    p.unlink("/f").unwrap();
    p.pwrite(fd, &vec![3u8; 2 * MIB as usize], MIB).unwrap();
    assert_eq!(used(&p), 1 + 2 * MIB / PAGE);
    p.close(fd).unwrap();
    assert_eq!(used(&p), 0);
    assert_eq!(
        p.statfs("/").unwrap().ffree + 1,
        p.statfs("/").unwrap().files
    );
}

/// An eviction frees exactly the pages the file has, whatever its size says: reserved
/// pages of an empty file (`fallocate` with `KEEP_SIZE`), a sparse file with none, pages
/// a truncate freed before the last close, and pages written after the unlink. (An evicted
/// file with no blocks is not locked to be cleared: `MemFs::evict`.)
#[test]
fn eviction_frees_what_the_blocks_say() {
    let p = capped(64 * PAGE);
    // Reserved pages past the size: blocks, no bytes.
    let a = rw(&p, "/a");
    p.fallocate(a, FallocFlags::KEEP_SIZE, 0, 3 * PAGE).unwrap();
    assert_eq!((p.fstat(a).unwrap().size, used(&p)), (0, 3));
    // Sparse: a size and no blocks.
    let b = rw(&p, "/b");
    p.ftruncate(b, 10 * PAGE).unwrap();
    assert_eq!(p.fstat(b).unwrap().blocks, 0);
    // Pages, then none: a truncate frees them while the file is open.
    let c = rw(&p, "/c");
    p.write(c, &vec![7u8; 2 * PAGE as usize]).unwrap();
    p.truncate("/c", 0).unwrap();
    assert_eq!(used(&p), 3);
    // Pages written after the unlink, on a file that had none.
    let d = rw(&p, "/d");
    for f in ["/a", "/b", "/c", "/d"] {
        p.unlink(f).unwrap();
    }
    p.pwrite(d, &[1u8; 10], 5 * PAGE).unwrap();
    assert_eq!(used(&p), 4);
    for fd in [b, c, a] {
        p.close(fd).unwrap();
    }
    assert_eq!(used(&p), 1);
    p.close(d).unwrap();
    assert_eq!(used(&p), 0);
    let st = p.statfs("/").unwrap();
    assert_eq!(st.ffree + 1, st.files);
}

/// Before: a write that failed with ENOSPC into the holes of a sparse file kept the pages
/// it had allocated (uncharged), and its data: 1,000 failed writes left a gigabyte resident.
#[test]
fn failed_writes_keep_no_pages() {
    let p = capped(MIB);
    p.write_file("/full", &vec![0u8; MIB as usize]).unwrap();
    let fd = rw(&p, "/sparse");
    // The holes are inside the file: a failed write must not keep what it allocated there.
    p.ftruncate(fd, 1000 * MIB).unwrap();
    for i in 0..1000u64 {
        assert_eq!(
            p.pwrite(fd, &[7u8; 4096], i * MIB),
            Err(Errno::ENOSPC),
            "write {i}"
        );
    }
    let st = p.fstat(fd).unwrap();
    assert_eq!((st.size, st.blocks), (1000 * MIB, 0));
    let mut b = [1u8; 16];
    assert_eq!(p.pread(fd, &mut b, 999 * MIB).unwrap(), 16);
    assert_eq!(b, [0u8; 16], "a failed write left its data");
    assert_eq!(used(&p), MIB / PAGE);
}

/// A write that runs out of space is cut short where the pages it could charge end, as
/// on tmpfs; one that cannot write a byte fails and changes nothing.
#[test]
fn writes_are_all_or_a_short_prefix() {
    let p = capped(4 * PAGE);
    let fd = rw(&p, "/f");
    p.write(fd, &[1u8; 2 * PAGE as usize]).unwrap();
    // Over the two existing pages, then two new ones, then a fifth that does not fit.
    let n = p.pwrite(fd, &[2u8; 5 * PAGE as usize], 0).unwrap();
    assert_eq!(n, 4 * PAGE as usize);
    assert_eq!(used(&p), 4);
    // Full: over existing data and past it, the existing part is written.
    assert_eq!(p.pwrite(fd, &[3u8; 100], 4 * PAGE - 50).unwrap(), 50);
    // Starting in a hole with no space left: an error, and nothing changed.
    let before = p.read_file("/f").unwrap();
    assert_eq!(p.pwrite(fd, &[4u8; 10], 10 * PAGE), Err(Errno::ENOSPC));
    assert_eq!(p.read_file("/f").unwrap(), before);
    assert_eq!(p.fstat(fd).unwrap().size, 4 * PAGE);
}

/// Before: `fallocate` reserved nothing, so a later write in the range could fail; tmpfs
/// refuses the whole range up front, or reserves all of it.
#[test]
fn fallocate_reserves_or_refuses_up_front() {
    let p = capped(8 * PAGE);
    let fd = rw(&p, "/f");
    assert_eq!(
        p.fallocate(fd, FallocFlags::empty(), 0, 9 * PAGE),
        Err(Errno::ENOSPC)
    );
    assert_eq!((used(&p), p.fstat(fd).unwrap().size), (0, 0));
    p.fallocate(fd, FallocFlags::empty(), 0, 6 * PAGE).unwrap();
    assert_eq!(used(&p), 6);
    p.write_file("/other", &vec![0u8; 2 * PAGE as usize])
        .unwrap();
    assert_eq!(p.write_file("/more", b"x"), Err(Errno::ENOSPC));
    // The reserved range is still writable in full.
    assert_eq!(p.pwrite(fd, &[5u8; 6 * 4096], 0).unwrap(), 6 * 4096);
    assert_eq!(used(&p), 8);
}

/// Before: punching a hole through the FUSE frontend wrote zeros (a 2 GiB sparse file
/// grew to 2 GiB on disk). The engine frees the pages.
#[test]
fn punching_a_hole_frees_pages() {
    let p = capped(64 * MIB);
    let fd = rw(&p, "/f");
    p.pwrite(fd, &vec![1u8; 16 * MIB as usize], 0).unwrap();
    let hole = FallocFlags::PUNCH_HOLE | FallocFlags::KEEP_SIZE;
    p.fallocate(fd, hole, PAGE / 2, 16 * MIB).unwrap();
    assert_eq!(used(&p), 1);
    assert_eq!(p.fstat(fd).unwrap().size, 16 * MIB);
    // A 2 GiB sparse file punched through stays empty.
    p.ftruncate(fd, 2048 * MIB).unwrap();
    p.fallocate(fd, hole, 0, 2048 * MIB).unwrap();
    assert_eq!((used(&p), p.fstat(fd).unwrap().blocks), (0, 0));
}

/// One step of the property test.
#[derive(Clone, Debug)]
enum Op {
    Write {
        file: usize,
        off: u64,
        len: usize,
    },
    Truncate {
        file: usize,
        len: u64,
    },
    Punch {
        file: usize,
        off: u64,
        len: u64,
    },
    Allocate {
        file: usize,
        off: u64,
        len: u64,
        keep: bool,
    },
    Unlink {
        file: usize,
    },
    Close {
        file: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let file = 0..4usize;
    let off = prop_oneof![0..64 * PAGE, Just(0), (0..64u64).prop_map(|p| p * PAGE)];
    prop_oneof![
        4 => (file.clone(), off.clone(), 1..(12 * PAGE as usize))
            .prop_map(|(file, off, len)| Op::Write { file, off, len }),
        1 => (file.clone(), 0..64 * PAGE).prop_map(|(file, len)| Op::Truncate { file, len }),
        1 => (file.clone(), off.clone(), 1..16 * PAGE)
            .prop_map(|(file, off, len)| Op::Punch { file, off, len }),
        1 => (file.clone(), off, 1..16 * PAGE, any::<bool>())
            .prop_map(|(file, off, len, keep)| Op::Allocate { file, off, len, keep }),
        1 => file.clone().prop_map(|file| Op::Unlink { file }),
        1 => file.prop_map(|file| Op::Close { file }),
    ]
}

/// The pages in use, recounted from every live file: the linked ones by path, the
/// unlinked-but-open ones through their descriptors (each inode once).
fn recount(p: &Process, open: &HashMap<usize, Fd>) -> u64 {
    let mut seen = HashMap::new();
    for (path, st) in p.walk_tree("/").unwrap() {
        if st.is_file() {
            seen.insert(st.ino, st.blocks);
            let _ = path;
        }
    }
    for fd in open.values() {
        let st = p.fstat(*fd).unwrap();
        seen.insert(st.ino, st.blocks);
    }
    seen.values().sum::<u64>() / (PAGE / 512)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(256)
    ))]

    /// After every step of a random sequence of writes, truncates, hole punches,
    /// allocations, unlinks and closes on four files under a 128 KiB cap: what `statfs`
    /// says is in use is what the files hold, never more than the cap, and every file's
    /// bytes are what the writes that succeeded put there (a failed write changed nothing).
    #[test]
    fn statfs_matches_a_recount_of_every_page(ops in proptest::collection::vec(op(), 1..60)) {
        let cap = 32 * PAGE;
        let p = capped(cap);
        let mut open: HashMap<usize, Fd> = HashMap::new();
        let mut model: HashMap<usize, Vec<u8>> = HashMap::new();
        let mut linked: HashMap<usize, bool> = HashMap::new();
        for (step, op) in ops.iter().enumerate() {
            let file = match op {
                Op::Write { file, .. } | Op::Truncate { file, .. } | Op::Punch { file, .. }
                | Op::Allocate { file, .. } | Op::Unlink { file } | Op::Close { file } => *file,
            };
            let path = format!("/f{file}");
            if !open.contains_key(&file) && !matches!(op, Op::Unlink { .. } | Op::Close { .. }) {
                let fd = p.open(&path, OFlags::RDWR | OFlags::CREAT, 0o644).unwrap();
                if !linked.get(&file).copied().unwrap_or(false) {
                    // A new file, or (after an unlink) a new one under the old name.
                    model.insert(file, Vec::new());
                    linked.insert(file, true);
                }
                open.insert(file, fd);
            }
            let data = model.entry(file).or_default();
            match op {
                Op::Write { off, len, .. } => {
                    let fd = open[&file];
                    let buf: Vec<u8> = (0..*len).map(|i| (i as u8) ^ (step as u8) | 1).collect();
                    match p.pwrite(fd, &buf, *off) {
                        Ok(n) => {
                            prop_assert!(n > 0 && n <= *len);
                            let end = *off as usize + n;
                            if data.len() < end {
                                data.resize(end, 0);
                            }
                            data[*off as usize..end].copy_from_slice(&buf[..n]);
                        }
                        Err(e) => prop_assert_eq!(e, Errno::ENOSPC),
                    }
                }
                Op::Truncate { len, .. } => {
                    p.ftruncate(open[&file], *len).unwrap();
                    data.resize(*len as usize, 0);
                }
                Op::Punch { off, len, .. } => {
                    let hole = FallocFlags::PUNCH_HOLE | FallocFlags::KEEP_SIZE;
                    p.fallocate(open[&file], hole, *off, *len).unwrap();
                    let end = ((*off + *len) as usize).min(data.len());
                    if (*off as usize) < end {
                        data[*off as usize..end].fill(0);
                    }
                }
                Op::Allocate { off, len, keep, .. } => {
                    let mode = if *keep { FallocFlags::KEEP_SIZE } else { FallocFlags::empty() };
                    match p.fallocate(open[&file], mode, *off, *len) {
                        Ok(()) => {
                            if !keep && data.len() < (*off + *len) as usize {
                                data.resize((*off + *len) as usize, 0);
                            }
                        }
                        Err(e) => prop_assert_eq!(e, Errno::ENOSPC),
                    }
                }
                Op::Unlink { .. } => {
                    if linked.get(&file).copied().unwrap_or(false) {
                        p.unlink(&path).unwrap();
                        linked.insert(file, false);
                    }
                }
                Op::Close { .. } => {
                    if let Some(fd) = open.remove(&file) {
                        p.close(fd).unwrap();
                    }
                    if !linked.get(&file).copied().unwrap_or(false) {
                        model.remove(&file);
                    }
                }
            }
            let in_use = used(&p);
            prop_assert!(in_use <= cap / PAGE, "step {}: {} pages in use", step, in_use);
            prop_assert_eq!(in_use, recount(&p, &open), "step {}: {:?}", step, op);
            if let (Some(fd), Some(data)) = (open.get(&file), model.get(&file)) {
                let mut got = vec![0u8; data.len() + 10];
                let n = p.pread(*fd, &mut got, 0).unwrap();
                prop_assert_eq!(&got[..n], &data[..], "step {}: contents of f{}", step, file);
            }
        }
        for (_, fd) in open.drain() {
            p.close(fd).unwrap();
        }
        for file in 0..4 {
            let _ = p.unlink(format!("/f{file}"));
        }
        prop_assert_eq!(used(&p), 0);
        prop_assert_eq!(p.statfs("/").unwrap().ffree + 1, p.statfs("/").unwrap().files);
    }
}

/// A file system with a per-user inode limit of `n`, and root's process on it.
fn quota(n: u64) -> (Arc<SuperBlock>, Arc<Vfs>, Process) {
    let fs = MemFs::new(MemFsOptions {
        max_inodes_per_user: Some(n),
        ..Default::default()
    });
    let vfs = Vfs::new(fs.clone());
    let root = vfs.process(Creds::root());
    (fs, vfs, root)
}

/// Per-user inode limits (tmpfs's `usrquota_inode_hardlimit`): a user past the limit gets
/// `EDQUOT` from every call that makes an inode, and nothing is created; a hard link makes
/// none; an unlinked file counts until its last close; `chown` moves the count; root and
/// other users are never stopped by one user's count.
#[test]
fn per_user_inode_limit() {
    let (fs, vfs, root) = quota(3);
    root.mkdir("/pub", 0o755).unwrap();
    root.chmod("/pub", 0o1777).unwrap();
    let u = vfs.process(Creds::user(1000, 1000, vec![]));
    for i in 0..3 {
        u.write_file(format!("/pub/f{i}"), b"x").unwrap();
    }
    assert_eq!(fs.inodes_of(1000), 3);
    let before = root.statfs("/").unwrap().ffree;
    assert_eq!(
        u.open("/pub/g", OFlags::WRONLY | OFlags::CREAT, 0o644),
        Err(Errno::EDQUOT)
    );
    assert_eq!(u.mkdir("/pub/d", 0o755), Err(Errno::EDQUOT));
    assert_eq!(u.symlink("f0", "/pub/s"), Err(Errno::EDQUOT));
    assert_eq!(
        u.mknodat(Fd::CWD, "/pub/p", mode::S_IFIFO | 0o644, 0),
        Err(Errno::EDQUOT)
    );
    assert_eq!(
        u.open("/pub", OFlags::TMPFILE | OFlags::RDWR, 0o644),
        Err(Errno::EDQUOT)
    );
    assert_eq!(u.stat("/pub/g"), Err(Errno::ENOENT), "nothing was created");
    assert_eq!(root.statfs("/").unwrap().ffree, before, "nor counted");
    u.link("/pub/f0", "/pub/hard").unwrap();
    // Others are not stopped.
    let v = vfs.process(Creds::user(1001, 1001, vec![]));
    v.write_file("/pub/v", b"x").unwrap();
    root.write_file("/pub/r", b"x").unwrap();
    // An unlinked file counts until its last close.
    let fd = u.open("/pub/f1", OFlags::RDONLY, 0).unwrap();
    u.unlink("/pub/f1").unwrap();
    assert_eq!(u.mkdir("/pub/d", 0o755), Err(Errno::EDQUOT));
    u.close(fd).unwrap();
    assert_eq!(fs.inodes_of(1000), 2);
    u.mkdir("/pub/d", 0o755).unwrap();
    // chown moves the count, past the limit if root says so; root gives it back.
    root.chown("/pub/r", Some(1000), None).unwrap();
    // Root's count: /pub only.
    assert_eq!((fs.inodes_of(1000), fs.inodes_of(0)), (4, 1));
    assert_eq!(u.mkdir("/pub/e", 0o755), Err(Errno::EDQUOT));
    root.chown("/pub/r", Some(1001), None).unwrap();
    assert_eq!((fs.inodes_of(1000), fs.inodes_of(1001)), (3, 2));
    // A rename over a file evicts the victim and gives its count back.
    v.rename("/pub/r", "/pub/v").unwrap();
    assert_eq!(fs.inodes_of(1001), 1);
    // Removing everything leaves nothing counted.
    for name in ["f0", "hard", "f2", "v"] {
        root.unlink(format!("/pub/{name}")).unwrap();
    }
    root.rmdir("/pub/d").unwrap();
    assert_eq!((fs.inodes_of(1000), fs.inodes_of(1001)), (0, 0));
}

/// `chown` racing with the eviction of the same inode gives every count back exactly once:
/// at the end, with everything removed, no user has any inode counted.
#[test]
fn chown_racing_eviction_counts_once() {
    let (fs, vfs, root) = quota(1 << 20);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let rounds = if cfg!(miri) { 20 } else { 100_000 };
    std::thread::scope(|s| {
        let chowner = vfs.process(Creds::root());
        let stop = &stop;
        s.spawn(move || {
            let mut i = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                i = i.wrapping_add(1);
                let _ = chowner.chown("/f", Some(2000 + i % 3), None);
                if let Ok(fd) = chowner.open("/f", OFlags::PATH, 0) {
                    let _ = chowner.fchown(fd, Some(2000 + (i + 1) % 3), None);
                    chowner.close(fd).unwrap();
                }
            }
        });
        for _ in 0..rounds {
            let fd = root
                .open("/f", OFlags::RDWR | OFlags::CREAT, 0o644)
                .unwrap();
            root.fchown(fd, Some(2000), None).unwrap();
            root.unlink("/f").unwrap();
            root.close(fd).unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    for uid in [0, 2000, 2001, 2002] {
        assert_eq!(fs.inodes_of(uid), 0, "uid {uid}");
    }
}

/// Extended attributes take from the inode space, as on tmpfs since Linux 6.6 (checked on
/// this machine's kernel with `nr_inodes=3`: the same answers): 1,024 bytes an inode, 40
/// plus the name and value an attribute; what an attribute frees, a create can use; an
/// evicted inode gives its attributes' space back.
#[test]
fn xattrs_share_the_inode_space() {
    let p = Vfs::new(MemFs::new(MemFsOptions {
        max_inodes: Some(3),
        ..Default::default()
    }))
    .process(Creds::root());
    let ffree = |p: &Process| p.statfs("/").unwrap().ffree;
    p.write_file("/f", b"").unwrap();
    assert_eq!(ffree(&p), 1);
    let none = XattrFlags::empty();
    assert_eq!(
        p.setxattr("/f", "user.a", &[1; 1000], none),
        Err(Errno::ENOSPC)
    );
    p.setxattr("/f", "user.a", &[1; 900], none).unwrap();
    assert_eq!(ffree(&p), 0);
    assert_eq!(p.write_file("/g", b""), Err(Errno::ENOSPC));
    // A replacement is charged before the old value is given back.
    assert_eq!(
        p.setxattr("/f", "user.a", &[2; 900], none),
        Err(Errno::ENOSPC)
    );
    p.setxattr("/f", "user.a", &[2; 10], none).unwrap();
    p.removexattr("/f", "user.a").unwrap();
    p.write_file("/g", b"").unwrap();
    assert_eq!(ffree(&p), 0);
    assert_eq!(p.statfs("/").unwrap().files, 3);
    // Unlinking a file frees its attributes with it.
    p.unlink("/g").unwrap();
    p.setxattr("/f", "user.b", &[3; 900], none).unwrap();
    p.unlink("/f").unwrap();
    assert_eq!(ffree(&p), 2);
    p.write_file("/h", b"").unwrap();
    p.write_file("/i", b"").unwrap();
    assert_eq!(ffree(&p), 0);
}

/// An open, unlinked file keeps its attributes until its last close, which frees them.
#[test]
fn xattrs_of_an_open_unlinked_file_go_at_its_last_close() {
    let p = Vfs::new(MemFs::new(MemFsOptions {
        max_inodes: Some(4),
        ..Default::default()
    }))
    .process(Creds::root());
    let fd = rw(&p, "/f");
    p.fsetxattr(fd, "user.a", &[1; 2000], XattrFlags::empty())
        .unwrap();
    p.unlink("/f").unwrap();
    let mut buf = [0u8; 4096];
    assert_eq!(p.fgetxattr(fd, "user.a", &mut buf), Ok(2000));
    // 4,096 bytes: the root, the file and its 2,046-byte attribute leave 1 inode.
    assert_eq!(p.statfs("/").unwrap().ffree, 0);
    p.close(fd).unwrap();
    assert_eq!(p.statfs("/").unwrap().ffree, 3);
}

/// Sets race with the unlinks that evict their files: whichever wins, no attribute outlives
/// its inode, so once every file is gone the whole inode space is free again (a set that
/// stored an attribute on an inode already evicted would keep its space for ever).
#[test]
fn xattr_sets_racing_unlinks_leak_nothing() {
    let p = Arc::new(
        Vfs::new(MemFs::new(MemFsOptions {
            max_inodes: Some(1 << 20),
            ..Default::default()
        }))
        .process(Creds::root()),
    );
    let before = p.statfs("/").unwrap().ffree;
    let rounds = 20_000;
    // The setters follow the file the main thread is on.
    let current = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let setters: Vec<_> = (0..2)
        .map(|t| {
            let (p, current, done) = (p.clone(), current.clone(), done.clone());
            std::thread::spawn(move || {
                let name = format!("user.{t}");
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    let i = current.load(std::sync::atomic::Ordering::Relaxed);
                    let _ = p.setxattr(format!("/f{i}"), &name, &[7; 300], XattrFlags::empty());
                }
            })
        })
        .collect();
    for i in 0..rounds {
        p.write_file(format!("/f{i}"), b"").unwrap();
        current.store(i, std::sync::atomic::Ordering::Relaxed);
        std::thread::yield_now();
        p.unlink(format!("/f{i}")).unwrap();
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    for s in setters {
        s.join().unwrap();
    }
    assert_eq!(p.statfs("/").unwrap().ffree, before);
}
