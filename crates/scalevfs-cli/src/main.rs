//! The `scalevfs` command: `bench`, `mount`.

mod bench;
mod mount;

/// The engine frees memory after epoch grace periods, on whichever thread collects the
/// garbage; glibc malloc serializes such cross-thread frees on its arena locks (W8 then
/// does not scale at all). A scalable allocator is what a multi-threaded user of the
/// engine should link; the command does.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::process::ExitCode;

/// mimalloc's `mi_option_page_full_retain` (its place in `mi_option_e`, mimalloc.h of the
/// mimalloc 3 that libmimalloc-sys 0.1.49 builds; the test below checks it by the option's
/// default).
const MI_OPTION_PAGE_FULL_RETAIN: libmimalloc_sys::mi_option_t = 36;

/// Keeps each thread's full allocator pages its own. mimalloc 3 *abandons* a thread's
/// full pages past two per size class, so that other threads may take them over; every
/// later free into such a page, by its own thread too, takes the cross-thread path (an
/// atomic push, then an attempt to reclaim the page). The engine's caches fill pages and
/// free into them at every eviction: in W5 at two threads that path was about 300
/// instructions a stat (callgrind, `examples/cold_tree`), and none at one thread, where
/// the runs are on the main thread. With a retain of -1 a full page stays in its thread's
/// full queue (mimalloc 2's way), and two threads run W5 in the same instructions per stat
/// as one. Threads started after this call get it: every thread that runs a workload or
/// serves a mount.
fn keep_full_pages() {
    // SAFETY: `mi_option_set` takes no pointer; this binary's allocator is mimalloc (see
    // `ALLOC`), which reads the option when it sets up each thread's heap.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PAGE_FULL_RETAIN, -1) };
}

use clap::{Parser, Subcommand};

/// scalevfs: a user-space VFS engine with a lockless path walk.
#[derive(Parser, Debug)]
#[command(name = "scalevfs", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the workloads of docs/WORKLOADS.md against the kernel (tmpfs), scalevfs, and scalevfs
    /// through FUSE, side by side.
    Bench(bench::Args),
    /// Mount a scalevfs namespace through FUSE and serve it until unmounted.
    Mount(mount::Args),
}

fn main() -> ExitCode {
    keep_full_pages();
    let cli = Cli::parse();
    match cli.command {
        Command::Bench(args) => match bench::run(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("scalevfs bench: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Mount(args) => match mount::run(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("scalevfs mount: {e}");
                ExitCode::FAILURE
            }
        },
    }
}

#[cfg(test)]
mod tests {
    /// `MI_OPTION_PAGE_FULL_RETAIN` is the option whose default is 2, between two whose
    /// defaults are 0 (`page_reclaim_on_free`) and 4 (`page_max_candidates`): a mimalloc
    /// whose options moved would fail here rather than have `keep_full_pages` set another.
    #[test]
    fn the_full_page_option_is_the_one_named() {
        let k = super::MI_OPTION_PAGE_FULL_RETAIN;
        // SAFETY: `mi_option_get` takes no pointer.
        let got = unsafe { [k - 1, k, k + 1].map(|o| libmimalloc_sys::mi_option_get(o)) };
        assert_eq!(got, [0, 2, 4]);
    }
}
