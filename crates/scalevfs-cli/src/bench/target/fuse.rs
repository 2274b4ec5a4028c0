//! The mount behind the `fuse` system: a fresh memfs served through FUSE by this process
//! (`scalevfs_fuse::spawn`), on a fresh directory under the temporary directory. The
//! benchmark reaches it with real system calls, through [`super::Kernel`] rooted at the
//! mountpoint.
//!
//! The mount uses `scalevfs mount`'s defaults: entry and attribute timeouts of 0 (unless
//! `--fuse-timeout` says otherwise), so that every path walk and every `stat` reaches the
//! engine (the kernel caches no lookup and no attribute), no READDIRPLUS, one server thread
//! per CPU (at least 2).

use std::path::{Path, PathBuf};
use std::time::Duration;

use scalevfs::Vfs;
use scalevfs_fuse::{FsOptions, MountOptions, ScaleFs};

use super::kernel::fresh_dir;
use crate::bench::cleanup;

/// `statfs.f_type` of a FUSE file system.
const FUSE_SUPER_MAGIC: u64 = 0x6573_5546;
/// `umount2`'s "not a mount point".
const EINVAL: i32 = 22;

/// Whether the `fuse` system can run here: as root, with `/dev/fuse` usable. `Err` says why
/// not.
pub fn usable() -> Result<(), String> {
    if !rustix::process::geteuid().is_root() {
        return Err("not running as root".into());
    }
    scalevfs_fuse::fuse_available()
}

/// A mounted memfs; unmounted, and its mountpoint removed, on drop.
pub struct FuseMount {
    dir: PathBuf,
    session: Option<fuser::BackgroundSession>,
    opts: MountOptions,
}

impl FuseMount {
    /// Mounts a fresh memfs on a new directory `scalevfs-bench-fuse.<pid>[.<n>]` under
    /// `parent`, with `timeout` as its entry and attribute timeout, and checks that the mount
    /// answers.
    pub fn new(parent: &Path, timeout: Duration) -> Result<FuseMount, String> {
        let dir = fresh_dir(parent, "scalevfs-bench-fuse")?;
        cleanup::unmount_on_signal(&dir);
        let opts = MountOptions {
            fs: FsOptions {
                entry_timeout: timeout,
                attr_timeout: timeout,
                ..FsOptions::default()
            },
            fsname: "scalevfs-bench".into(),
            ..MountOptions::default()
        };
        let vfs = Vfs::new_memfs();
        let session = ScaleFs::new(&vfs, opts.fs.clone())
            .map_err(|e| format!("serving memfs: {e}"))
            .and_then(|fs| {
                scalevfs_fuse::spawn(fs, &dir, &opts)
                    .map_err(|e| format!("mounting on {}: {e}", dir.display()))
            });
        let mut m = FuseMount {
            session: None,
            dir,
            opts,
        };
        // On failure, dropping `m` removes the directory.
        m.session = Some(session?);
        // The first call waits for the kernel's INIT exchange with the server.
        let fs_type = rustix::fs::statfs(&m.dir)
            .map_err(|e| format!("statfs {}: {e}", m.dir.display()))?
            .f_type as u64;
        if fs_type != FUSE_SUPER_MAGIC {
            return Err(format!(
                "{} is not a FUSE mount after mounting (f_type {fs_type:#x})",
                m.dir.display()
            ));
        }
        Ok(m)
    }

    /// The mountpoint.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The mount's settings, for the report.
    pub fn describe(&self) -> String {
        let fs = &self.opts.fs;
        format!(
            "{} server threads, entry timeout {} s, attr timeout {} s, readdirplus {}",
            self.opts.threads,
            fs.entry_timeout.as_secs_f64(),
            fs.attr_timeout.as_secs_f64(),
            if fs.readdirplus { "on" } else { "off" },
        )
    }

    /// Unmounts (detaching the mount if it is busy) and removes the mountpoint.
    fn unmount(&mut self) -> Result<(), String> {
        let mut problems = Vec::new();
        if let Some(s) = self.session.take() {
            if let Err(e) = s.umount_and_join() {
                problems.push(format!("unmounting: {e}"));
                match scalevfs_fuse::lazy_unmount(&self.dir) {
                    Ok(()) => problems.push("detached it instead (lazy unmount)".into()),
                    // Not mounted any more: the unmount happened, the join failed.
                    Err(e) if e.raw_os_error() == Some(EINVAL) => {}
                    Err(e) => problems.push(format!("detaching: {e}")),
                }
            }
        }
        if let Err(e) = std::fs::remove_dir(&self.dir) {
            problems.push(format!("removing it: {e}"));
        }
        cleanup::forget(&self.dir);
        match problems.is_empty() {
            true => Ok(()),
            false => Err(problems.join("; ")),
        }
    }
}

impl Drop for FuseMount {
    fn drop(&mut self) {
        if let Err(e) = self.unmount() {
            eprintln!("warning: FUSE mount {}: {e}", self.dir.display());
        }
    }
}
