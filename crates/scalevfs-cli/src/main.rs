//! The `scalevfs` command: `bench`, `mount`.

mod bench;
mod mount;

/// The engine frees memory after epoch grace periods, on whichever thread collects the
/// garbage; glibc malloc serializes such cross-thread frees on its arena locks (W8 then
/// does not scale at all). A scalable allocator is what a multi-threaded user of the
/// engine should link; the command links mimalloc, asked as `scalevfs-alloc` asks it.
#[global_allocator]
static ALLOC: scalevfs_alloc::Alloc = scalevfs_alloc::Alloc;

use std::process::ExitCode;

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
    scalevfs_alloc::keep_full_pages();
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
