//! A fixed number of stats of one path, for instruction counts under callgrind:
//! `valgrind --tool=callgrind target/release/examples/stat_loop 100000 /wis/a/b/c/file`
//! (instructions per stat = total / N, minus the set-up counted with N = 0).

mod common;

use scalevfs::{Creds, Vfs};

fn main() {
    let n = common::count();
    let path = common::arg(2).unwrap_or_else(|| "/wis/a/b/c/file".into());
    let p = Vfs::new_memfs().process(Creds::root());
    let dir = std::path::Path::new(&path)
        .parent()
        .expect("a path with a parent");
    p.create_dir_all(dir).expect("create the directories");
    p.write_file(&path, b"").expect("create the file");
    let t = std::time::Instant::now();
    let mut sum = 0u64;
    for _ in 0..n {
        sum = sum.wrapping_add(p.stat(&path).expect("stat").ino);
    }
    let el = t.elapsed();
    if n > 0 {
        println!(
            "{n} stats of {path}: {:.1} ns/op (checksum {sum})",
            el.as_nanos() as f64 / n as f64
        );
    }
}
