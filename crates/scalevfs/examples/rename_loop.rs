//! A fixed number of renames a -> b -> a of a file (W9's loop), each thread in its own
//! directory, for instruction counts under callgrind:
//! `target/release/examples/rename_loop N [THREADS]`.

/// As the `scalevfs` binary does (see ARCHITECTURE.md, "Allocation").
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use scalevfs::{Creds, Vfs};

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
                let (a, b) = (format!("{dir}/a"), format!("{dir}/b"));
                p.mkdir(&dir, 0o755).expect("mkdir");
                p.write_file(&a, b"").expect("create");
                barrier.wait();
                for k in 0..n {
                    let (from, to) = if k % 2 == 0 { (&a, &b) } else { (&b, &a) };
                    p.rename(from, to).expect("rename");
                }
            });
        }
    });
    if n > 0 {
        let el = t.elapsed().as_secs_f64();
        println!(
            "{threads} threads x {n} renames: {:.2}M renames/s total, {:.1} ns/rename per thread",
            (n * threads as u64) as f64 / el / 1e6,
            el * 1e9 / n as f64
        );
    }
}
