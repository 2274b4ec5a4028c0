//! A directory larger than a capped cache, through hostfs: `big_dir [FILES] [CAP] [sweep]` makes
//! FILES empty files (default 20,000) in one host directory (in a fresh directory on
//! `/dev/shm`, removed at the end), serves it with the inode cache capped at CAP objects
//! (default 2,000; 0: no cap), and stats every file in order, twice. After each round it
//! prints the time per stat and what the caches hold: the objects (inodes) and names
//! (dentries) cached, the objects loaded from the host so far, and the sweeps. With
//! `sweep`, a file is made and removed in the root twice before the second round, so that
//! the cache is swept (two sweeps: the first passes over a directory loaded since the last
//! one started) whatever the first round left in it.
//!
//! What it shows: whether the cap holds while one directory's names are looked up, and
//! what a miss costs once the cache has let the directory's names go (see
//! `backend.rs`, "Names one at a time").

mod common;

use scalevfs::{Creds, HostFs, HostFsOptions, Vfs};

/// The host directory, removed when dropped (also as a panic unwinds).
struct Tree(std::path::PathBuf);

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn main() {
    let files: usize = common::arg(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000);
    let cap: u64 = common::arg(2).and_then(|a| a.parse().ok()).unwrap_or(2_000);
    let sweep = common::arg(3).is_some_and(|a| a == "sweep");
    let base = if std::path::Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "/tmp"
    };
    let tree = Tree(std::path::PathBuf::from(format!(
        "{base}/scalevfs-big-dir-{}",
        std::process::id()
    )));
    std::fs::create_dir_all(tree.0.join("d")).expect("make the host directory");
    for i in 0..files {
        std::fs::File::create(tree.0.join(format!("d/f{i}"))).expect("make a host file");
    }
    let opts = HostFsOptions {
        max_inodes: (cap > 0).then_some(cap),
        ..HostFsOptions::default()
    };
    let vfs = Vfs::new(HostFs::new(&tree.0, opts).expect("hostfs over the directory"));
    let p = vfs.process(Creds::root());
    let paths: Vec<String> = (0..files).map(|i| format!("/d/f{i}")).collect();
    println!("{files} host files in one directory, inode cache capped at {cap} (0: no cap)");
    for round in 0..2 {
        if round == 1 && sweep {
            for _ in 0..2 {
                p.write_file("/other", b"")
                    .expect("make a file in the root");
                p.unlink("/other").expect("remove it");
            }
        }
        let t = std::time::Instant::now();
        let mut sum = 0u64;
        for path in &paths {
            sum = sum.wrapping_add(p.stat(path).expect("stat").ino);
        }
        let el = t.elapsed();
        let st = vfs.stats().root_fs;
        let ic = st.inode_cache.expect("hostfs keeps an inode cache");
        println!(
            "round {round}: {:.0} ns per stat; {} objects and {} names cached, {} objects \
             loaded so far, {} sweeps (checksum {sum})",
            el.as_nanos() as f64 / files as f64,
            st.inodes,
            st.dentries,
            ic.loads,
            st.sweeps
        );
    }
}
