//! W5's loop on one thread, for instruction counts under callgrind: `cold_tree N [CAP]`
//! stats N files over hostfs, cycling over a host tree of 16 directories of 1,000 files
//! (made in a fresh directory on `/dev/shm`, removed at the end), with the inode cache
//! capped at CAP objects (default 8,000, W5's cap: half the tree). Every directory the
//! cycle comes back to was swept meanwhile and is loaded again, so this counts the miss
//! path: the listing, the inode-cache inserts, the sweeps and the trims.

mod common;

use scalevfs::{Creds, HostFs, HostFsOptions, Vfs};

const DIRS: usize = 16;
const FILES: usize = 1000;

fn main() {
    let n = common::count();
    let cap: u64 = common::arg(2).and_then(|a| a.parse().ok()).unwrap_or(8000);
    let base = if std::path::Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "/tmp"
    };
    let root =
        std::path::PathBuf::from(format!("{base}/scalevfs-cold-tree-{}", std::process::id()));
    let mut paths = Vec::with_capacity(DIRS * FILES);
    for d in 0..DIRS {
        let dir = root.join(format!("d{d:02}"));
        std::fs::create_dir_all(&dir).expect("create the host tree");
        for f in 0..FILES {
            std::fs::write(dir.join(format!("f{f:03}")), b"").expect("create a host file");
            paths.push(format!("/d{d:02}/f{f:03}"));
        }
    }
    let opts = HostFsOptions {
        max_inodes: Some(cap),
        ..HostFsOptions::default()
    };
    let p =
        Vfs::new(HostFs::new(&root, opts).expect("hostfs over the tree")).process(Creds::root());
    let t = std::time::Instant::now();
    let mut sum = 0u64;
    for i in 0..n as usize {
        sum = sum.wrapping_add(p.stat(&paths[i % paths.len()]).expect("stat").ino);
    }
    let el = t.elapsed();
    drop(p);
    std::fs::remove_dir_all(&root).expect("remove the host tree");
    if n > 0 {
        println!(
            "{n} stats over {} host files, cache capped at {cap}: {:.1} ns/op (checksum {sum})",
            paths.len(),
            el.as_nanos() as f64 / n as f64
        );
    }
}
