//! A fixed number of create + close + unlink pairs (W8's loop), each thread in its own
//! directory, for instruction counts under callgrind and for scaling experiments:
//! `target/release/examples/create_unlink_loop N [THREADS]`.

/// As the `scalevfs` binary does (see ARCHITECTURE.md, "Allocation").
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use scalevfs::{Creds, OFlags, Vfs};

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let threads: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(1);
    let p = Vfs::new_memfs().process(Creds::root());
    let barrier = std::sync::Barrier::new(threads);
    let t = std::time::Instant::now();
    std::thread::scope(|s| {
        for i in 0..threads {
            let p = p.fork();
            let barrier = &barrier;
            s.spawn(move || {
                let dir = format!("/d{i}");
                let file = format!("{dir}/f");
                p.mkdir(&dir, 0o755).expect("mkdir");
                barrier.wait();
                for _ in 0..n {
                    let fd = p
                        .open(&file, OFlags::CREAT | OFlags::EXCL | OFlags::WRONLY, 0o644)
                        .expect("create");
                    p.close(fd).expect("close");
                    p.unlink(&file).expect("unlink");
                }
            });
        }
    });
    if n > 0 {
        let el = t.elapsed().as_secs_f64();
        println!(
            "{threads} threads x {n} pairs: {:.2}M pairs/s total, {:.1} ns/pair per thread",
            (n * threads as u64) as f64 / el / 1e6,
            el * 1e9 / n as f64
        );
    }
}
