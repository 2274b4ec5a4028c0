//! W4 on one thread, phase by phase: build a tree of `DIRS` directories of `FILES` empty
//! files, stat every file by its absolute path, list every directory with getdents + fstatat,
//! and remove it all; `fstree DIRS FILES ROUNDS` does that `ROUNDS` times in one process
//! (default once). Each phase is its own non-inlined function, so that under callgrind its
//! inclusive cost divided by the operations it made is the cost of one operation, and with
//! `--cache-sim=yes` its cache misses:
//! `valgrind --tool=callgrind --cache-sim=yes target/release/examples/fstree 200 1000`.

mod common;

use std::os::unix::ffi::OsStrExt;
use std::time::Instant;

use scalevfs::{AtFlags, Creds, OFlags, Process, Vfs};

struct Tree {
    dirs: Vec<String>,
    files: Vec<String>,
    per_dir: usize,
}

#[inline(never)]
fn phase_create(p: &Process, t: &Tree) {
    for (d, dir) in t.dirs.iter().enumerate() {
        p.mkdir(dir, 0o755).expect("mkdir");
        for f in &t.files[d * t.per_dir..(d + 1) * t.per_dir] {
            let fd = p
                .open(f, OFlags::CREAT | OFlags::EXCL | OFlags::WRONLY, 0o644)
                .expect("create");
            p.close(fd).expect("close");
        }
    }
}

#[inline(never)]
fn phase_stat(p: &Process, t: &Tree) {
    for f in &t.files {
        std::hint::black_box(p.stat(f).expect("stat"));
    }
}

#[inline(never)]
fn phase_readdir(p: &Process, t: &Tree) {
    for dir in &t.dirs {
        let fd = p
            .open(dir, OFlags::RDONLY | OFlags::DIRECTORY, 0)
            .expect("open");
        loop {
            let batch = p.getdents(fd, 1024).expect("getdents");
            if batch.is_empty() {
                break;
            }
            for e in batch.iter().filter(|e| e.name != b"." && e.name != b"..") {
                let name = std::ffi::OsStr::from_bytes(&e.name);
                std::hint::black_box(
                    p.fstatat(fd, name, AtFlags::SYMLINK_NOFOLLOW)
                        .expect("fstatat"),
                );
            }
        }
        p.close(fd).expect("close");
    }
}

#[inline(never)]
fn phase_remove(p: &Process, t: &Tree) {
    for (d, dir) in t.dirs.iter().enumerate() {
        for f in &t.files[d * t.per_dir..(d + 1) * t.per_dir] {
            p.unlink(f).expect("unlink");
        }
        p.rmdir(dir).expect("rmdir");
    }
}

fn main() {
    let num = |i, default| {
        common::arg(i)
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    };
    let (dirs, per_dir, rounds): (usize, usize, usize) = (num(1, 200), num(2, 1000), num(3, 1));
    let p = Vfs::new_memfs().process(Creds::root());
    p.mkdir("/w4", 0o755).expect("mkdir");
    let mut t = Tree {
        dirs: Vec::new(),
        files: Vec::new(),
        per_dir,
    };
    for d in 0..dirs {
        t.dirs.push(format!("/w4/d{d}"));
        for f in 0..per_dir {
            t.files.push(format!("/w4/d{d}/f{f}"));
        }
    }
    let ops = (dirs * (per_dir + 1)) as f64;
    type Phase = fn(&Process, &Tree);
    let phases: [(&str, Phase); 4] = [
        ("create", phase_create),
        ("walk-stat", phase_stat),
        ("readdir-fstatat", phase_readdir),
        ("unlink", phase_remove),
    ];
    for (name, phase) in (0..rounds).flat_map(|_| phases) {
        let start = Instant::now();
        phase(&p, &t);
        let el = start.elapsed().as_secs_f64();
        let st = p.vfs().stats();
        let pc = scalevfs::path_cache_stats();
        println!(
            "{name:<16} {:>8.1} ns/op  (fallbacks to the locked walk so far: {}; path cache: {} hits, {} misses, {} inserts)",
            el * 1e9 / ops,
            st.fast_walk_fallbacks,
            pc.hits,
            pc.misses,
            pc.inserts
        );
    }
}
