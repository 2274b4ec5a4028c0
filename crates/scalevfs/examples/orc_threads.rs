//! W7's loop on several threads, for profiles of what a second thread costs:
//! `orc_threads N [THREADS]` runs N open / read 64 bytes / close triples on each of THREADS
//! threads (default 2), each on a fork of one `Process`, over the same 254 files, thread
//! `i` starting `i / THREADS` of the way round, as W7 does. (`orc_loop` is the one-thread
//! loop whose instructions perf/icount-baseline.txt records.)
//!
//! With `disjoint`, each thread has 254 files of its own instead (`/w7-<i>/fNNN`, as deep),
//! so that the threads touch no common inode: comparing the two tells what the lines of a
//! file that both threads open in turn (its counts, its data lock) cost a second thread.

mod common;

use scalevfs::{Creds, OFlags, Vfs};

fn main() {
    let n = common::count();
    let threads = common::arg(2).and_then(|s| s.parse().ok()).unwrap_or(2);
    let p = Vfs::new_memfs().process(Creds::root());
    let disjoint = common::arg(3).is_some_and(|a| a == "disjoint");
    let trees: Vec<Vec<String>> = match disjoint {
        true => (0..threads)
            .map(|i| common::w7_files_in(&p, &format!("/w7-{i}")))
            .collect(),
        false => vec![common::w7_files(&p)],
    };
    let files = trees[0].len();
    common::run_threads(
        &p,
        n,
        threads,
        "open/read/close triples",
        |_, i| match disjoint {
            true => (&trees[i], 0, std::cell::Cell::new(0)),
            false => (&trees[0], i * files / threads, std::cell::Cell::new(0)),
        },
        |p, (paths, start, sum), k| {
            let mut buf = [0u8; 64];
            let path = &paths[(start + k as usize) % files];
            let fd = p.open(path, OFlags::RDONLY, 0).expect("open");
            let got = p.read(fd, &mut buf).expect("read");
            p.close(fd).expect("close");
            // Per thread: a shared sum would be a line both threads write.
            sum.set(std::hint::black_box(sum.get() + got));
        },
    );
}
