//! A fixed number of stats of one path, for instruction counts under callgrind:
//! `valgrind --tool=callgrind target/release/examples/stat_loop 100000 /wis/a/b/c/file`
//! (instructions per stat = total / N, minus the set-up counted with N = 0). With a third
//! argument `at`, each stat is an `fstatat` of the file's name relative to a descriptor of
//! its directory (W3's call).

mod common;

use scalevfs::{AtFlags, Creds, OFlags, Vfs};

fn main() {
    let n = common::count();
    let path = common::arg(2).unwrap_or_else(|| "/wis/a/b/c/file".into());
    let p = Vfs::new_memfs().process(Creds::root());
    let dir = std::path::Path::new(&path)
        .parent()
        .expect("a path with a parent");
    p.create_dir_all(dir).expect("create the directories");
    p.write_file(&path, b"").expect("create the file");
    let at = common::arg(3).is_some_and(|a| a == "at");
    let fd = p
        .open(dir, OFlags::RDONLY | OFlags::DIRECTORY, 0)
        .expect("open the directory");
    let name = std::path::Path::new(&path)
        .file_name()
        .expect("a file name")
        .to_owned();
    let t = std::time::Instant::now();
    let mut sum = 0u64;
    for _ in 0..n {
        let st = match at {
            true => p.fstatat(fd, &name, AtFlags::empty()),
            false => p.stat(&path),
        };
        sum = sum.wrapping_add(st.expect("stat").ino);
    }
    let el = t.elapsed();
    if n > 0 {
        println!(
            "{n} stats of {path}: {:.1} ns/op (checksum {sum})",
            el.as_nanos() as f64 / n as f64
        );
    }
}
