//! scalevfs-fuse: a scalevfs namespace served through FUSE, so ordinary programs can use it.
//!
//! The kernel speaks FUSE's inode protocol (node ids, lookup counts, file handles); the
//! engine speaks POSIX paths and descriptors. [`ScaleFs`] maps one onto the other without
//! engine support: a node is an engine `O_PATH` descriptor ([`nodes`]), an operation on a
//! name is the engine's `*at` call relative to the parent's descriptor, and each request
//! runs with its caller's credentials ([`creds`]). The FUSE library is fuser, built without
//! libfuse: as root it mounts with `mount(2)`, otherwise through `fusermount3`.
//!
//! [`mount`] serves in the foreground on several threads and unmounts on `SIGINT`,
//! `SIGTERM` or `SIGHUP`; [`spawn`] serves in the background (for tests and embedding).

mod convert;
mod creds;
mod files;
mod fs;
mod nodes;

use std::io;
use std::path::Path;
use std::sync::Arc;

use fuser::{Config, MountOption, SessionACL};
use nix::sys::signal::{SigSet, Signal};
use scalevfs::Vfs;

pub use creds::{parse_groups, CredGate, Who};
pub use fs::{FsOptions, NodeCount, ScaleFs};
pub use nodes::{NodeId, NodeTable, ObjKey};

/// How to mount.
#[derive(Clone, Debug)]
pub struct MountOptions {
    /// What the file system answers (timeouts, readdirplus).
    pub fs: FsOptions,
    /// Threads reading requests from the kernel (each with its own cloned `/dev/fuse`
    /// descriptor when more than one).
    pub threads: usize,
    /// Let users other than the one who mounted use the mount (FUSE `allow_other`; needs
    /// root or `user_allow_other` in /etc/fuse.conf). Implies `default_permissions`: the
    /// kernel checks permissions before the request reaches the engine.
    pub allow_other: bool,
    /// The source name shown in /proc/mounts.
    pub fsname: String,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            fs: FsOptions::default(),
            threads: std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 16)),
            allow_other: false,
            fsname: "scalevfs".into(),
        }
    }
}

fn config(opts: &MountOptions) -> Config {
    let mut c = Config::default();
    c.mount_options = vec![
        MountOption::FSName(opts.fsname.clone()),
        MountOption::Subtype("scalevfs".into()),
        MountOption::RW,
    ];
    c.acl = if opts.allow_other {
        // Other users reach the mount: the kernel checks permissions first, from the
        // attributes, in its own order (as libfuse's passthrough examples do); the
        // engine's checks still run behind them.
        c.mount_options.push(MountOption::DefaultPermissions);
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    c.n_threads = Some(opts.threads.max(1));
    c.clone_fd = opts.threads > 1;
    c
}

/// Mounts `fs` on `mountpoint` and serves it in the background until the returned session
/// is unmounted (`umount_and_join`) or dropped. `opts.fs` is not used: `fs` has its own.
pub fn spawn(
    fs: ScaleFs,
    mountpoint: &Path,
    opts: &MountOptions,
) -> io::Result<fuser::BackgroundSession> {
    fuser::Session::new(fs, mountpoint, &config(opts))?.spawn()
}

/// Mounts `vfs` on `mountpoint` and serves it on this thread and `opts.threads - 1` more
/// until it is unmounted: by `umount`/`fusermount3 -u`, or by `SIGINT`, `SIGTERM` or
/// `SIGHUP` to this process. The first signal unmounts normally; if the mount is busy, the
/// error is printed and a second signal detaches it (lazy unmount), after which serving
/// goes on until the last user lets go. `SIGUSR1` prints the namespace's statistics
/// ([`scalevfs::VfsStats`]) on standard error. `ready` runs once the mount is in place.
///
/// Blocks those signals in the calling thread (and so in the threads it starts): call it
/// before starting other threads.
pub fn mount(
    vfs: &Arc<Vfs>,
    mountpoint: &Path,
    opts: &MountOptions,
    ready: impl FnOnce(),
) -> io::Result<()> {
    let mut signals = SigSet::empty();
    for s in [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGUSR1,
    ] {
        signals.add(s);
    }
    signals.thread_block().map_err(io::Error::from)?;
    let fs = ScaleFs::new(vfs, opts.fs.clone()).map_err(io::Error::from)?;
    let mut se = fuser::Session::new(fs, mountpoint, &config(opts))?;
    let mut unmounter = se.unmount_callable();
    let mp = mountpoint.canonicalize()?;
    let stats = vfs.clone();
    std::thread::Builder::new()
        .name("scalevfs-signals".into())
        .spawn(move || {
            let mut asked = 0;
            while let Ok(sig) = signals.wait() {
                if sig == Signal::SIGUSR1 {
                    eprintln!("scalevfs mount: {}", stats.stats());
                    continue;
                }
                asked += 1;
                if asked == 1 {
                    match unmounter.unmount() {
                        Ok(()) => return,
                        Err(e) => eprintln!(
                            "scalevfs mount: {sig:?}: unmounting {}: {e}; \
                             signal again to detach it (lazy unmount)",
                            mp.display()
                        ),
                    }
                } else {
                    match lazy_unmount(&mp) {
                        Ok(()) => return,
                        Err(e) => eprintln!("scalevfs mount: detaching {}: {e}", mp.display()),
                    }
                }
            }
        })?;
    ready();
    se.run()
}

/// Detaches a mount now; it goes away when its last user lets go (`umount -l`).
pub fn lazy_unmount(mountpoint: &Path) -> io::Result<()> {
    match nix::mount::umount2(mountpoint, nix::mount::MntFlags::MNT_DETACH) {
        Ok(()) => Ok(()),
        Err(nix::errno::Errno::EPERM) => {
            let st = std::process::Command::new("fusermount3")
                .arg("-u")
                .arg("-z")
                .arg(mountpoint)
                .status()?;
            if st.success() {
                Ok(())
            } else {
                Err(io::Error::other(format!("fusermount3 -u -z: {st}")))
            }
        }
        Err(e) => Err(e.into()),
    }
}

/// Whether this machine can mount FUSE file systems here: `/dev/fuse` opens, and either we
/// are root or `fusermount3` is installed. `Err` says why not.
pub fn fuse_available() -> Result<(), String> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map_err(|e| format!("/dev/fuse: {e}"))?;
    if nix::unistd::geteuid().is_root() {
        return Ok(());
    }
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("fusermount3").exists()));
    if found {
        Ok(())
    } else {
        Err("not root and no fusermount3 in PATH".into())
    }
}
