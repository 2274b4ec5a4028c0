//! A fresh host directory for hostfs's tests, removed at the end, and a capped hostfs over
//! a tree made in one. Shared by the test binaries that need them (`mod scratch;`).
#![allow(dead_code)]

use scalevfs::{HostFs, HostFsOptions, Vfs};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A fresh directory under `/dev/shm` (a tmpfs; `/tmp` without it), removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let base = if Path::new("/dev/shm").is_dir() {
            "/dev/shm"
        } else {
            "/tmp"
        };
        let p = PathBuf::from(format!(
            "{base}/scalevfs-hostfs-{tag}-{}-{n}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `dirs` directories `d<i>` of `files` empty files `f<j>` each, in a fresh scratch
/// directory, served by hostfs with its inode cache capped at `cap` (and its names at the
/// default share of that).
pub fn capped_tree(tag: &str, dirs: usize, files: usize, cap: u64) -> (Scratch, Arc<Vfs>) {
    let s = Scratch::new(tag);
    for d in 0..dirs {
        std::fs::create_dir(s.0.join(format!("d{d}"))).unwrap();
        for f in 0..files {
            std::fs::write(s.0.join(format!("d{d}/f{f}")), b"").unwrap();
        }
    }
    let opts = HostFsOptions {
        max_inodes: Some(cap),
        ..HostFsOptions::default()
    };
    let vfs = Vfs::new(HostFs::new(&s.0, opts).unwrap());
    (s, vfs)
}
