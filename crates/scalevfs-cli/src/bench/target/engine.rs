//! scalevfs itself: a `Process` over a fresh memfs `Vfs`, one forked `Process` per thread;
//! for W5-warm, over hostfs on a fresh host directory ([`HostDir`]).

use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Arc;

use scalevfs::{AtFlags, Creds, Fd, HostFs, HostFsOptions, OFlags, Process, Vfs};

use super::super::workloads::{Workload, W5_COLD_CAP};

use super::{Access, Errno, Meta, OpResult, System, Target};

/// Entries per `getdents` call: what glibc's 32 KiB `readdir` buffer holds of short names.
const READDIR_BATCH: usize = 1024;

/// The engine, acting as the caller's own uid and gid.
#[derive(Clone)]
pub struct Engine {
    proc: Arc<Process>,
    /// Keeps the file system alive for as long as any handle is.
    _vfs: Arc<Vfs>,
    /// For hostfs: the host directory, removed after the file system is dropped (fields
    /// drop in order).
    _host: Option<Arc<HostDir>>,
}

/// A fresh host directory for hostfs, on tmpfs where there is one (`/dev/shm`), removed
/// with its tree on drop.
pub struct HostDir {
    path: PathBuf,
}

impl HostDir {
    /// Where host directories are made: `/dev/shm` (tmpfs, as the kernel's reference
    /// directory is) if present, else the temporary directory.
    pub fn parent() -> PathBuf {
        let shm = PathBuf::from("/dev/shm");
        if shm.is_dir() {
            shm
        } else {
            std::env::temp_dir()
        }
    }

    fn new() -> Result<HostDir, String> {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = Self::parent().join(format!("scalevfs-bench-host-{}-{n}", std::process::id()));
        std::fs::create_dir(&path).map_err(|e| format!("mkdir {}: {e}", path.display()))?;
        Ok(HostDir { path })
    }
}

impl Drop for HostDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            eprintln!("warning: removing {}: {e}", self.path.display());
        }
    }
}

/// A directory open in one `Process`'s descriptor table; closed there on drop.
pub struct EngineDir {
    fd: Fd,
    proc: Arc<Process>,
}

impl Drop for EngineDir {
    fn drop(&mut self) {
        if let Err(e) = self.proc.close(self.fd) {
            eprintln!("warning: scalevfs close({}): {e}", self.fd.0);
        }
    }
}

impl Engine {
    /// A fresh memfs, used with the same ids as the kernel side runs with.
    pub fn new_memfs() -> Engine {
        Self::on(Vfs::new_memfs(), None)
    }

    /// hostfs over a fresh host directory.
    pub fn new_hostfs() -> Result<Engine, String> {
        Self::hostfs_with(HostFsOptions::default())
    }

    /// hostfs over a fresh host directory, with `opts`.
    pub fn hostfs_with(opts: HostFsOptions) -> Result<Engine, String> {
        let dir = HostDir::new()?;
        let fs = HostFs::new(&dir.path, opts)
            .map_err(|e| format!("hostfs over {}: {e}", dir.path.display()))?;
        Ok(Self::on(Vfs::new(fs), Some(Arc::new(dir))))
    }

    fn on(vfs: Arc<Vfs>, host: Option<Arc<HostDir>>) -> Engine {
        let creds = Creds::user(
            rustix::process::getuid().as_raw(),
            rustix::process::getgid().as_raw(),
            Vec::new(),
        );
        Engine {
            proc: Arc::new(vfs.process(creds)),
            _vfs: vfs,
            _host: host,
        }
    }
}

fn errno(e: scalevfs::Errno) -> Errno {
    Errno(e.raw())
}

fn meta(st: &scalevfs::Stat) -> Meta {
    Meta {
        ino: st.ino,
        mode: st.mode,
    }
}

impl Target for Engine {
    type Path = PathBuf;
    type Dir = EngineDir;

    fn system(&self) -> System {
        System::Scalevfs
    }

    fn fork(&self) -> Self {
        Engine {
            proc: Arc::new(self.proc.fork()),
            _vfs: Arc::clone(&self._vfs),
            _host: self._host.clone(),
        }
    }

    fn for_workload(&self, w: Workload) -> Result<Self, String> {
        match w {
            Workload::W5Warm => Engine::new_hostfs(),
            Workload::W5Shared => Engine::hostfs_with(HostFsOptions {
                policy: scalevfs::HostPolicy::Shared {
                    ttl: std::time::Duration::from_secs(1),
                },
                ..HostFsOptions::default()
            }),
            Workload::W5 | Workload::W5Lock => Engine::hostfs_with(HostFsOptions {
                max_inodes: Some(W5_COLD_CAP),
                one_lock: w == Workload::W5Lock,
                ..HostFsOptions::default()
            }),
            _ => Ok(self.clone()),
        }
    }

    fn cache_counters(&self) -> Option<String> {
        self._host.as_ref()?;
        let stats = self._vfs.stats();
        let fs = stats.root_fs;
        let c = fs.inode_cache?;
        let per = |n: u64| n as f64 / c.loads.max(1) as f64;
        Some(format!(
            "inode cache: {} loads (inserts), {} evictions ({:.2} nodes searched per \
             eviction); per insert {:.2} shard-lock and {:.2} global-lock acquisitions; {} \
             names swept; {} objects cached now; {} host listings and revalidations made \
             with no guard pinned",
            c.loads,
            c.evictions,
            c.searched as f64 / c.evictions.max(1) as f64,
            per(c.shard_locks),
            per(c.global_locks),
            fs.dentry_evictions,
            fs.inodes,
            stats.unpinned_calls
        ))
    }

    fn path(&self, rel: &str) -> PathBuf {
        PathBuf::from(format!("/{rel}"))
    }

    fn rel_path(&self, rel: &str) -> PathBuf {
        PathBuf::from(rel)
    }

    #[inline]
    fn stat(&self, p: &PathBuf) -> OpResult<Meta> {
        self.proc.stat(p).map(|st| meta(&st)).map_err(errno)
    }

    #[inline]
    fn access(&self, p: &PathBuf, mode: Access) -> OpResult<()> {
        self.proc.access(p, scalevfs::Access(mode.0)).map_err(errno)
    }

    fn open_dir(&self, p: &PathBuf) -> OpResult<EngineDir> {
        let fd = self
            .proc
            .open(p, OFlags::RDONLY | OFlags::DIRECTORY, 0)
            .map_err(errno)?;
        Ok(EngineDir {
            fd,
            proc: Arc::clone(&self.proc),
        })
    }

    #[inline]
    fn fstatat(&self, dir: &EngineDir, p: &PathBuf) -> OpResult<Meta> {
        debug_assert!(Arc::ptr_eq(&dir.proc, &self.proc), "dir of another Process");
        self.proc
            .fstatat(dir.fd, p, AtFlags::empty())
            .map(|st| meta(&st))
            .map_err(errno)
    }

    fn mkdir(&self, p: &PathBuf, mode: u32) -> OpResult<()> {
        self.proc.mkdir(p, mode).map_err(errno)
    }

    #[inline]
    fn create_close(&self, p: &PathBuf, mode: u32) -> OpResult<()> {
        let fd = self
            .proc
            .open(p, OFlags::CREAT | OFlags::EXCL | OFlags::WRONLY, mode)
            .map_err(errno)?;
        self.proc.close(fd).map_err(errno)
    }

    #[inline]
    fn unlink(&self, p: &PathBuf) -> OpResult<()> {
        self.proc.unlink(p).map_err(errno)
    }

    fn create_with(&self, p: &PathBuf, mode: u32, data: &[u8]) -> OpResult<()> {
        let fd = self
            .proc
            .open(p, OFlags::CREAT | OFlags::EXCL | OFlags::WRONLY, mode)
            .map_err(errno)?;
        let written = self.proc.write(fd, data);
        let closed = self.proc.close(fd);
        match written.map_err(errno)? {
            n if n == data.len() => closed.map_err(errno),
            _ => Err(Errno::EIO),
        }
    }

    #[inline]
    fn open_read_close(&self, p: &PathBuf, buf: &mut [u8]) -> OpResult<usize> {
        let fd = self.proc.open(p, OFlags::RDONLY, 0).map_err(errno)?;
        let read = self.proc.read(fd, buf);
        let closed = self.proc.close(fd);
        let n = read.map_err(errno)?;
        closed.map_err(errno)?;
        Ok(n)
    }

    #[inline]
    fn rename(&self, from: &PathBuf, to: &PathBuf) -> OpResult<()> {
        self.proc.rename(from, to).map_err(errno)
    }

    fn rmdir(&self, p: &PathBuf) -> OpResult<()> {
        self.proc.rmdir(p).map_err(errno)
    }

    fn readdir_fstatat(&self, p: &PathBuf) -> OpResult<usize> {
        let dir = self.open_dir(p)?;
        let mut n = 0;
        loop {
            let batch = self.proc.getdents(dir.fd, READDIR_BATCH).map_err(errno)?;
            if batch.is_empty() {
                return Ok(n);
            }
            for e in &batch {
                if e.name == b"." || e.name == b".." {
                    continue;
                }
                let name = std::ffi::OsStr::from_bytes(&e.name);
                self.proc
                    .fstatat(dir.fd, name, AtFlags::SYMLINK_NOFOLLOW)
                    .map_err(errno)?;
                n += 1;
            }
        }
    }
}
