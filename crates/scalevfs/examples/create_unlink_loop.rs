//! A fixed number of create + close + unlink pairs in one directory (W8's loop), for
//! instruction counts under callgrind:
//! `valgrind --tool=callgrind target/release/examples/create_unlink_loop 100000`.

use scalevfs::{Creds, OFlags, Vfs};

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let p = Vfs::new_memfs().process(Creds::root());
    p.mkdir("/d", 0o755).expect("mkdir");
    let t = std::time::Instant::now();
    for _ in 0..n {
        let fd = p
            .open("/d/f", OFlags::CREAT | OFlags::EXCL | OFlags::WRONLY, 0o644)
            .expect("create");
        p.close(fd).expect("close");
        p.unlink("/d/f").expect("unlink");
    }
    if n > 0 {
        println!(
            "{n} pairs: {:.1} ns/pair",
            t.elapsed().as_nanos() as f64 / n as f64
        );
    }
}
