//! open / read 64 bytes / close over 254 files in turn, for instruction counts under
//! callgrind (W7's loop): `orc_loop N` runs N triples (instructions per triple = total / N,
//! minus the set-up counted with N = 0). `orc_threads` runs it on several threads.

mod common;

use scalevfs::{Creds, OFlags, Vfs};

fn main() {
    let n = common::count();
    let p = Vfs::new_memfs().process(Creds::root());
    let paths = common::w7_files(&p);
    let mut buf = [0u8; 64];
    let t = std::time::Instant::now();
    let mut sum = 0usize;
    for i in 0..n as usize {
        let fd = p
            .open(&paths[i % paths.len()], OFlags::RDONLY, 0)
            .expect("open");
        sum += p.read(fd, &mut buf).expect("read");
        p.close(fd).expect("close");
    }
    let el = t.elapsed();
    if n > 0 {
        println!(
            "{n} open/read/close triples: {:.1} ns/op (checksum {sum})",
            el.as_nanos() as f64 / n as f64
        );
    }
}
