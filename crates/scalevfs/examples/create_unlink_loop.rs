//! A fixed number of create + close + unlink pairs (W8's loop), each thread in its own
//! directory, for instruction counts under callgrind and for scaling experiments:
//! `target/release/examples/create_unlink_loop N [THREADS]`.

mod common;

use scalevfs::{Creds, OFlags, Vfs};

fn main() {
    let p = Vfs::new_memfs().process(Creds::root());
    let setup = |p: &scalevfs::Process, i: usize| {
        let dir = format!("/d{i}");
        p.mkdir(&dir, 0o755).expect("mkdir");
        format!("{dir}/f")
    };
    common::run_threads(
        &p,
        common::count(),
        common::threads(),
        "pairs",
        setup,
        |p, file, _| {
            let fd = p
                .open(file, OFlags::CREAT | OFlags::EXCL | OFlags::WRONLY, 0o644)
                .expect("create");
            p.close(fd).expect("close");
            p.unlink(file).expect("unlink");
        },
    );
}
