//! The reference: real system calls (through rustix) on a fresh tmpfs directory.
//!
//! The same code, rooted at a FUSE mount of scalevfs instead of a tmpfs directory, is the
//! `fuse` system ([`Kernel::fuse_mounted`]): its figures differ from the kernel's only in what
//! serves the calls.

use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustix::fs::{AtFlags, Mode, OFlags};

use super::super::workloads::Workload;
use super::fuse::FuseMount;
use super::{Access, Errno, Meta, OpResult, System, Target};
use crate::bench::cleanup;

/// `statfs.f_type` of tmpfs.
const TMPFS_MAGIC: u64 = 0x0102_1994;

/// System calls under a directory: a fresh tmpfs directory (the `kernel` system) or a fresh
/// FUSE mount of scalevfs (the `fuse` system). The directory is removed, and the mount
/// unmounted, when the last handle goes.
#[derive(Clone)]
pub struct Kernel {
    root: Arc<Root>,
}

/// The benchmark's directory.
struct Root {
    path: PathBuf,
    /// `path` as UTF-8, the prefix of every absolute path.
    prefix: String,
    system: System,
    /// For `fuse`: the mount on `path`, which removes `path` once unmounted. Otherwise the
    /// whole tree under `path` is removed on drop.
    mount: Option<FuseMount>,
}

impl Root {
    fn new(path: PathBuf, system: System, mount: Option<FuseMount>) -> Result<Root, String> {
        let prefix = path
            .to_str()
            .ok_or_else(|| format!("{} is not UTF-8", path.display()))?
            .to_owned();
        Ok(Root {
            path,
            prefix,
            system,
            mount,
        })
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        match self.mount.take() {
            // Unmounts and removes the mountpoint; the tree goes with the file system.
            Some(m) => drop(m),
            None => {
                if let Err(e) = std::fs::remove_dir_all(&self.path) {
                    eprintln!("warning: could not remove {}: {e}", self.path.display());
                }
                cleanup::forget(&self.path);
            }
        }
    }
}

/// Creates a fresh directory `<stem>.<pid>[.<n>]` under `parent`, mode 0755.
pub fn fresh_dir(parent: &Path, stem: &str) -> Result<PathBuf, String> {
    let pid = rustix::process::getpid().as_raw_nonzero();
    for n in 0..100 {
        let name = match n {
            0 => format!("{stem}.{pid}"),
            _ => format!("{stem}.{pid}.{n}"),
        };
        let path = parent.join(name);
        match rustix::fs::mkdir(&path, Mode::from_raw_mode(0o755)) {
            Ok(()) => return Ok(path),
            Err(rustix::io::Errno::EXIST) => continue,
            Err(e) => return Err(format!("mkdir {}: {e}", path.display())),
        }
    }
    Err(format!(
        "no free name for a directory under {}",
        parent.display()
    ))
}

impl Kernel {
    /// Creates a fresh directory `scalevfs-bench.<pid>[.<n>]` under `parent`.
    ///
    /// Returns the kernel target and whether `parent` is on tmpfs.
    pub fn in_fresh_dir(parent: &Path) -> Result<(Kernel, bool), String> {
        let on_tmpfs = rustix::fs::statfs(parent)
            .map_err(|e| format!("statfs {}: {e}", parent.display()))?
            .f_type as u64
            == TMPFS_MAGIC;
        let path = fresh_dir(parent, "scalevfs-bench")?;
        cleanup::remove_tree_on_signal(&path);
        let root = match Root::new(path.clone(), System::Kernel, None) {
            Ok(r) => r,
            Err(e) => {
                cleanup::forget(&path);
                let _ = std::fs::remove_dir(&path);
                return Err(e);
            }
        };
        Ok((
            Kernel {
                root: Arc::new(root),
            },
            on_tmpfs,
        ))
    }

    /// The `fuse` system: a fresh memfs served through FUSE from this process, mounted on a
    /// fresh directory under `parent`, used with the same system calls as the kernel.
    /// `timeout` is the mount's entry and attribute timeout.
    pub fn fuse_mounted(parent: &Path, timeout: Duration) -> Result<Kernel, String> {
        let mount = FuseMount::new(parent, timeout)?;
        let root = Root::new(mount.path().to_owned(), System::Fuse, Some(mount))?;
        Ok(Kernel {
            root: Arc::new(root),
        })
    }

    /// The benchmark directory (for `fuse`, the mountpoint).
    pub fn root(&self) -> &Path {
        &self.root.path
    }

    /// For `fuse`, the mount.
    pub fn mount(&self) -> Option<&FuseMount> {
        self.root.mount.as_ref()
    }
}

fn errno(e: rustix::io::Errno) -> Errno {
    Errno(e.raw_os_error())
}

fn meta(st: &rustix::fs::Stat) -> Meta {
    Meta {
        ino: st.st_ino,
        mode: st.st_mode,
    }
}

impl Target for Kernel {
    type Path = CString;
    type Dir = OwnedFd;

    fn system(&self) -> System {
        self.root.system
    }

    /// Through FUSE (every call a round trip to this process, at a few thousand calls per
    /// second), W4's trees would take minutes; W12 is the engine's memory, measured in-process.
    fn supports(&self, w: Workload) -> bool {
        // W5-warm compares hostfs with the kernel on a host directory: not a FUSE figure.
        self.root.system == System::Kernel
            || !matches!(
                w,
                Workload::W4
                    | Workload::W5
                    | Workload::W5Lock
                    | Workload::W5Warm
                    | Workload::W5Shared
                    | Workload::W12
            )
    }

    fn fork(&self) -> Self {
        self.clone()
    }

    fn path(&self, rel: &str) -> CString {
        let p = match rel {
            "" => self.root.prefix.clone(),
            _ => format!("{}/{rel}", self.root.prefix),
        };
        CString::new(p).expect("benchmark paths contain no NUL")
    }

    fn rel_path(&self, rel: &str) -> CString {
        CString::new(rel).expect("benchmark paths contain no NUL")
    }

    #[inline]
    fn stat(&self, p: &CString) -> OpResult<Meta> {
        rustix::fs::stat(p.as_c_str())
            .map(|st| meta(&st))
            .map_err(errno)
    }

    #[inline]
    fn access(&self, p: &CString, mode: Access) -> OpResult<()> {
        rustix::fs::access(p.as_c_str(), rustix::fs::Access::from_bits_retain(mode.0))
            .map_err(errno)
    }

    fn open_dir(&self, p: &CString) -> OpResult<OwnedFd> {
        rustix::fs::open(
            p.as_c_str(),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(errno)
    }

    #[inline]
    fn fstatat(&self, dir: &OwnedFd, p: &CString) -> OpResult<Meta> {
        rustix::fs::statat(dir, p.as_c_str(), AtFlags::empty())
            .map(|st| meta(&st))
            .map_err(errno)
    }

    fn mkdir(&self, p: &CString, mode: u32) -> OpResult<()> {
        rustix::fs::mkdir(p.as_c_str(), Mode::from_raw_mode(mode)).map_err(errno)
    }

    #[inline]
    fn create_close(&self, p: &CString, mode: u32) -> OpResult<()> {
        // Dropping the descriptor closes it; close(2) on tmpfs does not fail.
        rustix::fs::open(
            p.as_c_str(),
            OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY,
            Mode::from_raw_mode(mode),
        )
        .map(drop)
        .map_err(errno)
    }

    #[inline]
    fn unlink(&self, p: &CString) -> OpResult<()> {
        rustix::fs::unlink(p.as_c_str()).map_err(errno)
    }

    fn create_with(&self, p: &CString, mode: u32, data: &[u8]) -> OpResult<()> {
        let fd = rustix::fs::open(
            p.as_c_str(),
            OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::CLOEXEC,
            Mode::from_raw_mode(mode),
        )
        .map_err(errno)?;
        match rustix::io::write(&fd, data) {
            Ok(n) if n == data.len() => Ok(()),
            Ok(_) => Err(Errno::EIO),
            Err(e) => Err(errno(e)),
        }
    }

    #[inline]
    fn open_read_close(&self, p: &CString, buf: &mut [u8]) -> OpResult<usize> {
        // Dropping the descriptor closes it.
        let fd = rustix::fs::open(p.as_c_str(), OFlags::RDONLY, Mode::empty()).map_err(errno)?;
        rustix::io::read(&fd, buf).map_err(errno)
    }

    #[inline]
    fn rename(&self, from: &CString, to: &CString) -> OpResult<()> {
        rustix::fs::rename(from.as_c_str(), to.as_c_str()).map_err(errno)
    }

    fn rmdir(&self, p: &CString) -> OpResult<()> {
        rustix::fs::unlinkat(rustix::fs::CWD, p.as_c_str(), AtFlags::REMOVEDIR).map_err(errno)
    }

    fn readdir_fstatat(&self, p: &CString) -> OpResult<usize> {
        let fd = self.open_dir(p)?;
        let mut dir = rustix::fs::Dir::read_from(&fd).map_err(errno)?;
        let mut n = 0;
        while let Some(entry) = dir.read() {
            let entry = entry.map_err(errno)?;
            let name = entry.file_name();
            if name == c"." || name == c".." {
                continue;
            }
            rustix::fs::statat(&fd, name, AtFlags::SYMLINK_NOFOLLOW).map_err(errno)?;
            n += 1;
        }
        Ok(n)
    }
}
