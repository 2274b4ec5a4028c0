//! Two threads that take turns, for `scripts/conflict-audit.sh`: which cache lines one
//! thread writes and the other then reads or writes (a line passed between CPUs).
//!
//! `conflict_audit CASE [WINDOW] [ROUNDS]`: two threads, each on a fork of one `Process`,
//! warm up together, then take turns: thread 0 runs WINDOW operations (default 1), then
//! thread 1 does, ROUNDS times each (default 6). Each turn starts and ends with a store to
//! a marker variable whose address the program prints first (`MARK <hex>`), so that a
//! memory trace (valgrind's lackey) can be cut into the turns. Cases:
//! - `w7-private`: open / read 64 bytes / close, each thread over 254 files of its own;
//! - `w7-shared`: the same, both threads over the same 254 files, thread 1 opening the
//!   file thread 0 opened in the turn before (the worst case of W7's `open_read_close`);
//! - `w8-private`: create (`O_CREAT`, mode 0644), close and unlink of one name, each
//!   thread in a directory of its own (W8's `private` case: `w8p/t<i>/n`);
//! - `w9-private`: rename of `a` to `b` and back, one rename per operation, each thread in
//!   a directory of its own (W9's `private` case);
//! - `w5`: `stat` over hostfs, each thread cycling over its own host tree of 16 x 1,000
//!   files, objects capped at 8,000 (W5's miss path; the tree is made in a fresh directory
//!   on `/dev/shm` and removed at the end).

mod common;

use scalevfs::{Creds, HostFs, HostFsOptions, OFlags, Process, Vfs};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;

/// Stored to at the start and end of every turn.
static MARK: AtomicU64 = AtomicU64::new(0);

/// W5's tree per thread: directories, files per directory.
const W5_TREE: (usize, usize) = (16, 1000);

/// One thread's operation `k`.
type Op = Box<dyn FnMut(usize) + Send>;

fn main() {
    let case = common::arg(1).unwrap_or_default();
    let window: usize = common::arg(2).and_then(|a| a.parse().ok()).unwrap_or(1);
    let rounds: u64 = common::arg(3).and_then(|a| a.parse().ok()).unwrap_or(6);
    let mut host = None;
    let (p, warmup, files): (Process, usize, [Vec<String>; 2]) = match case.as_str() {
        "w7-private" | "w7-shared" => {
            let p = Vfs::new_memfs().process(Creds::root());
            let own = common::w7_files_in(&p, "/w7-0");
            let other = match case.as_str() {
                "w7-private" => common::w7_files_in(&p, "/w7-1"),
                _ => own.clone(),
            };
            (p, 3000, [own, other])
        }
        "w8-private" => {
            let p = Vfs::new_memfs().process(Creds::root());
            let dirs = ["/w8p/t0", "/w8p/t1"].map(|d| {
                p.mkdir("/w8p", 0o755)
                    .or_else(|e| match e {
                        scalevfs::Errno::EEXIST => Ok(()),
                        e => Err(e),
                    })
                    .expect("mkdir /w8p");
                p.mkdir(d, 0o755).expect("mkdir");
                vec![format!("{d}/n")]
            });
            (p, 3000, dirs)
        }
        "w9-private" => {
            let p = Vfs::new_memfs().process(Creds::root());
            p.mkdir("/w9p", 0o755).expect("mkdir /w9p");
            let dirs = ["/w9p/t0", "/w9p/t1"].map(|d| {
                p.mkdir(d, 0o755).expect("mkdir");
                p.write_file(format!("{d}/a"), b"").expect("create");
                vec![format!("{d}/a"), format!("{d}/b")]
            });
            (p, 3000, dirs)
        }
        "w5" => {
            let (root, vfs, trees) = w5_trees();
            host = Some((root, vfs.clone()));
            (
                vfs.process(Creds::root()),
                W5_TREE.0 * W5_TREE.1 + 500,
                trees,
            )
        }
        _ => {
            eprintln!("usage: conflict_audit w7-private|w7-shared|w8-private|w9-private|w5 [WINDOW] [ROUNDS]");
            std::process::exit(2);
        }
    };
    println!("MARK {:x}", &MARK as *const AtomicU64 as usize);
    let barrier = std::sync::Barrier::new(2);
    std::thread::scope(|s| {
        for (t, paths) in files.iter().enumerate() {
            let (barrier, p, case) = (&barrier, &p, case.as_str());
            s.spawn(move || {
                let mut op = operation(case, p.fork(), paths.clone());
                // Thread 1 starts where thread 0 will have been a turn before (w7-shared:
                // the file thread 0 just opened).
                let mut k = 0;
                for _ in 0..warmup {
                    op(k);
                    k += 1;
                }
                let turn_start = k;
                for r in 0..rounds {
                    for turn in 0..2 {
                        barrier.wait();
                        if turn == t {
                            MARK.store(1 + 2 * r + turn as u64, SeqCst);
                            for i in 0..window {
                                op(turn_start + r as usize * window + i);
                            }
                            MARK.store(0, SeqCst);
                        }
                    }
                }
                barrier.wait();
                k
            });
        }
    });
    drop(p);
    if let Some((root, vfs)) = host {
        drop(vfs);
        std::fs::remove_dir_all(&root).expect("remove the host tree");
    }
}

/// Thread's operation: open/read/close for the W7 cases, create/close/unlink for W8, a
/// rename for W9, stat for W5.
fn operation(case: &str, p: Process, paths: Vec<String>) -> Op {
    match case {
        "w8-private" => Box::new(move |k| {
            let path = &paths[k % paths.len()];
            let flags = OFlags::WRONLY | OFlags::CREAT;
            let fd = p.open(path, flags, 0o644).expect("create");
            p.close(fd).expect("close");
            p.unlink(path).expect("unlink");
        }),
        "w9-private" => Box::new(move |k| {
            let (from, to) = (&paths[k % 2], &paths[(k + 1) % 2]);
            p.rename(from, to).expect("rename");
        }),
        "w5" => Box::new(move |k| {
            p.stat(&paths[k % paths.len()]).expect("stat");
        }),
        _ => Box::new(move |k| {
            let mut buf = [0u8; 64];
            let fd = p
                .open(&paths[k % paths.len()], OFlags::RDONLY, 0)
                .expect("open");
            p.read(fd, &mut buf).expect("read");
            p.close(fd).expect("close");
        }),
    }
}

/// W5's host trees, one per thread, under one hostfs capped as W5 is (half of one tree).
fn w5_trees() -> (std::path::PathBuf, Arc<Vfs>, [Vec<String>; 2]) {
    let root = std::path::PathBuf::from(format!(
        "/dev/shm/scalevfs-conflict-audit-{}",
        std::process::id()
    ));
    let tree = |t: usize| -> Vec<String> {
        let mut paths = Vec::new();
        for d in 0..W5_TREE.0 {
            let dir = root.join(format!("t{t}/d{d:02}"));
            std::fs::create_dir_all(&dir).expect("create the host tree");
            for f in 0..W5_TREE.1 {
                std::fs::write(dir.join(format!("f{f:03}")), b"").expect("create a host file");
                paths.push(format!("/t{t}/d{d:02}/f{f:03}"));
            }
        }
        paths
    };
    let trees = [tree(0), tree(1)];
    let opts = HostFsOptions {
        max_inodes: Some((W5_TREE.0 * W5_TREE.1 / 2) as u64),
        ..HostFsOptions::default()
    };
    let vfs = Vfs::new(HostFs::new(&root, opts).expect("hostfs over the tree"));
    (root, vfs, trees)
}
