//! A fixed number of renames a -> b -> a of a file (W9's loop), each thread in its own
//! directory, for instruction counts under callgrind:
//! `target/release/examples/rename_loop N [THREADS]`.

mod common;

use scalevfs::{Creds, Vfs};

fn main() {
    let p = Vfs::new_memfs().process(Creds::root());
    let setup = |p: &scalevfs::Process, i: usize| {
        let dir = format!("/d{i}");
        p.mkdir(&dir, 0o755).expect("mkdir");
        let (a, b) = (format!("{dir}/a"), format!("{dir}/b"));
        p.write_file(&a, b"").expect("create");
        (a, b)
    };
    common::run_threads(
        &p,
        common::count(),
        common::threads(),
        "renames",
        setup,
        |p, (a, b), k| {
            let (from, to) = if k % 2 == 0 { (a, b) } else { (b, a) };
            p.rename(from, to).expect("rename");
        },
    );
}
