//! The systems a workload runs against, behind one trait.
//!
//! A workload is written once against [`Target`]. [`Kernel`] turns each call into a system call on
//! a fresh tmpfs directory; [`Engine`] turns it into a call on a `scalevfs::Process` over memfs.
//! The third system, scalevfs through FUSE, is the same [`Kernel`] code rooted at a FUSE mount of
//! a fresh memfs served from this process ([`Kernel::fuse_mounted`], [`fuse`]).
//!
//! Paths are prepared once, outside the timed loops, into each target's native form
//! ([`Target::Path`]): a NUL-terminated string for the kernel, so that a call neither copies nor
//! allocates, and a `PathBuf` for scalevfs, which takes `AsRef<Path>`.
//!
//! Every operation returns the raw errno on failure, a plain integer, so that the success path of
//! a timed loop carries nothing heavier than the result itself. Workloads add context on the error
//! path only.

use std::fmt;

use super::workloads::Workload;

mod engine;
#[cfg(test)]
mod fake;
pub mod fuse;
mod kernel;
#[cfg(feature = "peers")]
mod peers;

pub use engine::{Engine, HostDir};
#[cfg(test)]
pub use fake::Fake;
pub use kernel::Kernel;
#[cfg(feature = "peers")]
pub use peers::{VfsMem, WasmerMem};

/// Which system a figure was measured on.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum System {
    /// Real system calls on tmpfs.
    Kernel,
    /// A peer: the `vfs` crate's `MemoryFS`, in this process.
    Vfs,
    /// A peer: wasmer's `virtual-fs` `mem_fs`, in this process.
    Wasmer,
    /// The scalevfs engine over memfs, in this process.
    Scalevfs,
    /// The scalevfs engine over memfs, served through FUSE from this process and used with
    /// real system calls through the mount.
    Fuse,
    /// Not a file system: a loop that shares nothing between threads, measured beside each
    /// case so that its scale shows what the machine gave a second thread meanwhile (see
    /// `bench::control`).
    Control,
}

impl System {
    /// Every system, in table order.
    pub const ALL: [System; 6] = [
        System::Kernel,
        System::Vfs,
        System::Wasmer,
        System::Scalevfs,
        System::Fuse,
        System::Control,
    ];

    /// The name used in the table, the JSON records and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            System::Kernel => "kernel",
            System::Vfs => "vfs",
            System::Wasmer => "wasmer",
            System::Scalevfs => "scalevfs",
            System::Fuse => "fuse",
            System::Control => "control",
        }
    }

    /// Parses a command-line name. A peer left out of this build is refused, naming the
    /// feature that brings it.
    pub fn parse(s: &str) -> Result<System, String> {
        let sys = System::ALL
            .into_iter()
            .find(|sys| sys.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| {
                let names: Vec<_> = System::ALL.iter().map(|s| s.name()).collect();
                format!(
                    "unknown system {s:?} (expected one of {})",
                    names.join(", ")
                )
            })?;
        match sys.is_built() {
            true => Ok(sys),
            false => Err(format!(
                "{} is a peer, and this scalevfs was built without the `peers` feature \
                 (cargo install without --no-default-features brings it)",
                sys.name()
            )),
        }
    }

    /// Whether this is one of the in-process peers.
    pub fn is_peer(self) -> bool {
        matches!(self, System::Vfs | System::Wasmer)
    }

    /// Whether this build can measure the system: the peers need the `peers` feature.
    pub fn is_built(self) -> bool {
        !self.is_peer() || cfg!(feature = "peers")
    }
}

/// An errno from a target, with Linux numbering on both sides.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Errno(pub i32);

impl Errno {
    /// "Input/output error" (also: a short write in set-up).
    pub const EIO: Errno = Errno(5);
    /// "File exists".
    pub const EEXIST: Errno = Errno(17);
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Errno({})", self.0)
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", std::io::Error::from_raw_os_error(self.0))
    }
}

/// What a target's operations return.
pub type OpResult<T> = Result<T, Errno>;

/// The part of a `stat` result the workloads look at.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Meta {
    /// Inode number.
    pub ino: u64,
    /// Type and permission bits.
    pub mode: u32,
}

impl Meta {
    const S_IFMT: u32 = 0o170000;

    /// Whether this is a directory.
    pub fn is_dir(self) -> bool {
        self.mode & Self::S_IFMT == 0o040000
    }

    /// Whether this is a regular file.
    pub fn is_file(self) -> bool {
        self.mode & Self::S_IFMT == 0o100000
    }
}

/// `access(2)` mode bits (Linux values).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Access(pub u32);

impl Access {
    /// `R_OK`.
    pub const READ: Access = Access(4);
}

/// One system, as the workloads see it.
///
/// A value is a handle for one thread: the harness calls [`Target::fork`] on each benchmark
/// thread and uses the result only there. Clones are for carrying a target into a workload's
/// closures.
pub trait Target: Clone + Send + Sync + 'static {
    /// A path prepared for this target.
    type Path: Clone + fmt::Debug + Send + Sync + 'static;
    /// An open directory, for the `*at` calls. Closed on drop. Used only with the handle that
    /// opened it.
    type Dir;

    /// Which system this is.
    fn system(&self) -> System;

    /// A handle for one more thread. For scalevfs this is `Process::fork`: per-thread state
    /// (the descriptor table) is not shared with the caller.
    fn fork(&self) -> Self;

    /// `rel` (relative, `/`-separated) anchored at the benchmark root: an absolute path.
    fn path(&self, rel: &str) -> Self::Path;

    /// `rel` as a relative path, for the `*at` calls.
    fn rel_path(&self, rel: &str) -> Self::Path;

    /// `stat(2)`.
    fn stat(&self, p: &Self::Path) -> OpResult<Meta>;

    /// `access(2)`.
    fn access(&self, p: &Self::Path, mode: Access) -> OpResult<()>;

    /// `open(p, O_RDONLY | O_DIRECTORY)`.
    fn open_dir(&self, p: &Self::Path) -> OpResult<Self::Dir>;

    /// `fstatat(dir, p, 0)`.
    fn fstatat(&self, dir: &Self::Dir, p: &Self::Path) -> OpResult<Meta>;

    /// `mkdir(2)`.
    fn mkdir(&self, p: &Self::Path, mode: u32) -> OpResult<()>;

    /// `open(p, O_CREAT | O_EXCL | O_WRONLY, mode)` followed by `close`.
    fn create_close(&self, p: &Self::Path, mode: u32) -> OpResult<()>;

    /// `unlink(2)`.
    fn unlink(&self, p: &Self::Path) -> OpResult<()>;

    /// `open(p, O_CREAT | O_EXCL | O_WRONLY, mode)`, one `write` of `data` (which must write it
    /// all), `close`. For set-up.
    fn create_with(&self, p: &Self::Path, mode: u32, data: &[u8]) -> OpResult<()>;

    /// `open(p, O_RDONLY)`, one `read` into `buf`, `close`: returns what `read` returned.
    fn open_read_close(&self, p: &Self::Path, buf: &mut [u8]) -> OpResult<usize>;

    /// `rename(2)`.
    fn rename(&self, from: &Self::Path, to: &Self::Path) -> OpResult<()>;

    /// `rmdir(2)`.
    fn rmdir(&self, p: &Self::Path) -> OpResult<()>;

    /// Opens the directory `p`, reads it to the end, and `fstatat`s every entry but `.` and
    /// `..` relative to it; returns how many entries it stat'ed. Any failing call fails the
    /// whole.
    fn readdir_fstatat(&self, p: &Self::Path) -> OpResult<usize>;

    /// The handle workload `w` builds its tree on. The same file system by default
    /// (workloads use disjoint subtrees); a peer returns an empty file system of its own, so
    /// that a peer's failure (a panic that poisons its lock) stays in the workload it
    /// happened in; scalevfs returns hostfs over a fresh host directory for W5-warm.
    fn for_workload(&self, w: Workload) -> Result<Self, String> {
        let _ = w;
        Ok(self.clone())
    }

    /// What this target's caches counted so far, for workloads that report it (W5): `None`
    /// for a system that keeps no such counters.
    fn cache_counters(&self) -> Option<String> {
        None
    }

    /// Whether this system can run `w` (all can run every workload unless they say so).
    fn supports(&self, w: Workload) -> bool {
        let _ = w;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::System;

    #[test]
    fn a_peer_is_accepted_only_when_built() {
        assert_eq!(System::Vfs.is_built(), cfg!(feature = "peers"));
        assert_eq!(System::Wasmer.is_built(), cfg!(feature = "peers"));
        for sys in System::ALL {
            assert!(sys.is_peer() || sys.is_built());
            let parsed = System::parse(&sys.name().to_uppercase());
            assert_eq!(parsed.as_ref().ok(), sys.is_built().then_some(&sys));
            if let Err(e) = parsed {
                assert!(e.contains("`peers` feature"), "{e}");
            }
        }
        assert!(System::parse("ext4")
            .unwrap_err()
            .contains("unknown system"));
    }
}
