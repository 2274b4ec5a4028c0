//! The reference: real system calls (through rustix) on a fresh tmpfs directory.

use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{AtFlags, Mode, OFlags};

use super::{Access, Errno, Meta, OpResult, System, Target};

/// `statfs.f_type` of tmpfs.
const TMPFS_MAGIC: u64 = 0x0102_1994;

/// The kernel, rooted at a temporary directory that is removed when the last handle goes.
#[derive(Clone)]
pub struct Kernel {
    root: Arc<TempRoot>,
}

/// The benchmark's directory; the whole tree under it is removed on drop.
struct TempRoot {
    path: PathBuf,
    /// `path` as UTF-8, the prefix of every absolute path.
    prefix: String,
}

impl Drop for TempRoot {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            eprintln!("warning: could not remove {}: {e}", self.path.display());
        }
    }
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
        let pid = rustix::process::getpid().as_raw_nonzero();
        for n in 0..100 {
            let name = match n {
                0 => format!("scalevfs-bench.{pid}"),
                _ => format!("scalevfs-bench.{pid}.{n}"),
            };
            let path = parent.join(name);
            match rustix::fs::mkdir(&path, Mode::from_raw_mode(0o755)) {
                Ok(()) => {
                    let prefix = path
                        .to_str()
                        .ok_or_else(|| format!("{} is not UTF-8", path.display()))?
                        .to_owned();
                    let root = Arc::new(TempRoot { path, prefix });
                    return Ok((Kernel { root }, on_tmpfs));
                }
                Err(rustix::io::Errno::EXIST) => continue,
                Err(e) => return Err(format!("mkdir {}: {e}", path.display())),
            }
        }
        Err(format!(
            "no free name for a directory under {}",
            parent.display()
        ))
    }

    /// The benchmark directory.
    pub fn root(&self) -> &Path {
        &self.root.path
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

    const SYSTEM: System = System::Kernel;

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
}
