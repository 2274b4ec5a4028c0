//! Stats over the files of a tree, each in turn, for instruction counts under callgrind
//! (W5-warm's loop, on memfs): `stat_tree N [FILES]` stats N times, cycling over FILES
//! files (default 1,024) in 16 directories. The per-thread path cache holds 2,048 entries
//! in sets of 4, so most of these stats are hits; the paths of a full set walk.

mod common;

use scalevfs::{Creds, Vfs};

fn main() {
    let n = common::count();
    let files: usize = common::arg(2).and_then(|a| a.parse().ok()).unwrap_or(1024);
    let p = Vfs::new_memfs().process(Creds::root());
    let mut paths = Vec::with_capacity(files);
    for i in 0..files {
        let d = format!("/w5/d{:02}", i % 16);
        if i < 16 {
            p.create_dir_all(&d).expect("create the directories");
        }
        let f = format!("{d}/f{:04}", i / 16);
        p.write_file(&f, b"").expect("create the file");
        paths.push(f);
    }
    let t = std::time::Instant::now();
    let mut sum = 0u64;
    for i in 0..n as usize {
        sum = sum.wrapping_add(p.stat(&paths[i % files]).expect("stat").ino);
    }
    let el = t.elapsed();
    if n > 0 {
        println!(
            "{n} stats over {files} files: {:.1} ns/op (checksum {sum})",
            el.as_nanos() as f64 / n as f64
        );
    }
}
