//! The in-process peers: other Rust in-memory file systems, in the same harness.
//!
//! - `vfs`: the `vfs` crate's `MemoryFS` (one `RwLock` over a map of paths).
//! - `wasmer`: wasmer's `virtual-fs` `mem_fs::FileSystem` (one `RwLock` over an inode arena).
//!
//! Neither has descriptors, permissions or `access(2)`, so each runs only the workloads whose
//! operations it has ([`Target::supports`]):
//! - `fstatat(dir, p)` is the metadata of the path `dir/p`, joined in a buffer that the
//!   directory handle keeps (no allocation per call);
//! - a create is the crate's own create-and-open, then dropping the handle; `vfs` has no
//!   exclusive create, so its create truncates where the others fail with `EEXIST` (the
//!   workloads never create an existing name);
//! - readdir + `fstatat` is the crate's directory listing, then the metadata of each entry;
//! - `rename` exists only in `virtual-fs`, as an async call (run to completion on the calling
//!   thread: the memory file system never waits);
//! - reading a file exists only in `vfs` (`virtual-fs` files are tokio `AsyncRead`).
//!
//! Errors map onto the errno Linux would give where the crate says which error it was, and onto
//! `EIO` otherwise.

use std::cell::RefCell;
use std::io::{self, Read};
use std::path::PathBuf;
use std::sync::Arc;

use vfs::FileSystem as _;
use virtual_fs::FileSystem as _;

use super::super::workloads::Workload;
use super::{Access, Errno, Meta, OpResult, System, Target};

const ENOENT: Errno = Errno(2);
const ENOSYS: Errno = Errno(38);
const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;

/// Linux's errno for an `io::ErrorKind`, `EIO` where there is none.
fn io_errno(kind: io::ErrorKind) -> Errno {
    use io::ErrorKind as K;
    Errno(match kind {
        K::NotFound => 2,
        K::PermissionDenied => 13,
        K::AlreadyExists => 17,
        K::NotADirectory => 20,
        K::IsADirectory => 21,
        K::InvalidInput => 22,
        K::DirectoryNotEmpty => 39,
        K::Unsupported => 38,
        _ => 5,
    })
}

/// A directory handle of a peer: its path, and a buffer to join names onto it.
pub struct PeerDir<P> {
    path: P,
    buf: RefCell<P>,
}

// ---- vfs::MemoryFS ----

/// The `vfs` crate's `MemoryFS`; clones share it.
#[derive(Clone)]
pub struct VfsMem {
    fs: Arc<vfs::MemoryFS>,
}

impl VfsMem {
    /// An empty file system.
    pub fn new() -> VfsMem {
        VfsMem {
            fs: Arc::new(vfs::MemoryFS::new()),
        }
    }
}

fn vfs_errno(e: vfs::VfsError) -> Errno {
    use vfs::error::VfsErrorKind as K;
    match e.kind() {
        K::IoError(io) => io_errno(io.kind()),
        K::FileNotFound => ENOENT,
        K::InvalidPath => Errno(22),
        K::DirectoryExists | K::FileExists => Errno::EEXIST,
        K::NotSupported => ENOSYS,
        _ => Errno::EIO,
    }
}

fn vfs_meta(m: vfs::VfsMetadata) -> Meta {
    let mode = match m.file_type {
        vfs::VfsFileType::Directory => S_IFDIR | 0o755,
        vfs::VfsFileType::File => S_IFREG | 0o644,
    };
    Meta { ino: 0, mode }
}

impl Target for VfsMem {
    type Path = String;
    type Dir = PeerDir<String>;

    fn system(&self) -> System {
        System::Vfs
    }

    fn for_workload(&self, _: Workload) -> Result<Self, String> {
        Ok(VfsMem::new())
    }

    fn supports(&self, w: Workload) -> bool {
        use Workload as W;
        matches!(w, W::W1 | W::W3 | W::W4 | W::W7 | W::W8 | W::W12)
    }

    fn fork(&self) -> Self {
        self.clone()
    }

    fn path(&self, rel: &str) -> String {
        format!("/{rel}")
    }

    fn rel_path(&self, rel: &str) -> String {
        rel.to_owned()
    }

    #[inline]
    fn stat(&self, p: &String) -> OpResult<Meta> {
        self.fs.metadata(p).map(vfs_meta).map_err(vfs_errno)
    }

    fn access(&self, _p: &String, _mode: Access) -> OpResult<()> {
        Err(ENOSYS)
    }

    fn open_dir(&self, p: &String) -> OpResult<PeerDir<String>> {
        match self.stat(p)? {
            m if m.is_dir() => Ok(PeerDir {
                path: p.clone(),
                buf: RefCell::new(String::with_capacity(p.len() + 64)),
            }),
            _ => Err(Errno(20)),
        }
    }

    #[inline]
    fn fstatat(&self, dir: &PeerDir<String>, p: &String) -> OpResult<Meta> {
        let mut buf = dir.buf.borrow_mut();
        buf.clear();
        buf.push_str(&dir.path);
        buf.push('/');
        buf.push_str(p);
        self.stat(&buf)
    }

    fn mkdir(&self, p: &String, _mode: u32) -> OpResult<()> {
        self.fs.create_dir(p).map_err(vfs_errno)
    }

    #[inline]
    fn create_close(&self, p: &String, _mode: u32) -> OpResult<()> {
        self.fs.create_file(p).map(drop).map_err(vfs_errno)
    }

    #[inline]
    fn unlink(&self, p: &String) -> OpResult<()> {
        self.fs.remove_file(p).map_err(vfs_errno)
    }

    fn create_with(&self, p: &String, _mode: u32, data: &[u8]) -> OpResult<()> {
        let mut f = self.fs.create_file(p).map_err(vfs_errno)?;
        std::io::Write::write_all(&mut f, data).map_err(|e| io_errno(e.kind()))
    }

    #[inline]
    fn open_read_close(&self, p: &String, buf: &mut [u8]) -> OpResult<usize> {
        let mut f = self.fs.open_file(p).map_err(vfs_errno)?;
        f.read(buf).map_err(|e| io_errno(e.kind()))
    }

    fn rename(&self, _from: &String, _to: &String) -> OpResult<()> {
        Err(ENOSYS)
    }

    fn rmdir(&self, p: &String) -> OpResult<()> {
        self.fs.remove_dir(p).map_err(vfs_errno)
    }

    fn readdir_fstatat(&self, p: &String) -> OpResult<usize> {
        let dir = self.open_dir(p)?;
        let mut n = 0;
        for name in self.fs.read_dir(p).map_err(vfs_errno)? {
            self.fstatat(&dir, &name)?;
            n += 1;
        }
        Ok(n)
    }
}

// ---- virtual_fs::mem_fs ----

/// wasmer's `virtual-fs` memory file system; clones share it.
#[derive(Clone)]
pub struct WasmerMem {
    fs: Arc<virtual_fs::mem_fs::FileSystem>,
}

impl WasmerMem {
    /// An empty file system.
    pub fn new() -> WasmerMem {
        WasmerMem {
            fs: Arc::new(virtual_fs::mem_fs::FileSystem::default()),
        }
    }
}

fn wasmer_errno(e: virtual_fs::FsError) -> Errno {
    use virtual_fs::FsError as F;
    match e {
        F::EntryNotFound => ENOENT,
        F::AlreadyExists => Errno::EEXIST,
        F::BaseNotDirectory => Errno(20),
        F::NotAFile => Errno(21),
        F::PermissionDenied => Errno(13),
        F::DirectoryNotEmpty => Errno(39),
        F::InvalidInput => Errno(22),
        F::Unsupported => ENOSYS,
        _ => Errno::EIO,
    }
}

fn wasmer_meta(m: virtual_fs::Metadata) -> Meta {
    let mode = match m.is_dir() {
        true => S_IFDIR | 0o755,
        false => S_IFREG | 0o644,
    };
    Meta { ino: 0, mode }
}

impl Target for WasmerMem {
    type Path = PathBuf;
    type Dir = PeerDir<PathBuf>;

    fn system(&self) -> System {
        System::Wasmer
    }

    fn for_workload(&self, _: Workload) -> Result<Self, String> {
        Ok(WasmerMem::new())
    }

    fn supports(&self, w: Workload) -> bool {
        use Workload as W;
        matches!(w, W::W1 | W::W3 | W::W4 | W::W8 | W::W9 | W::W12)
    }

    fn fork(&self) -> Self {
        self.clone()
    }

    fn path(&self, rel: &str) -> PathBuf {
        PathBuf::from(format!("/{rel}"))
    }

    fn rel_path(&self, rel: &str) -> PathBuf {
        PathBuf::from(rel)
    }

    #[inline]
    fn stat(&self, p: &PathBuf) -> OpResult<Meta> {
        self.fs.metadata(p).map(wasmer_meta).map_err(wasmer_errno)
    }

    fn access(&self, _p: &PathBuf, _mode: Access) -> OpResult<()> {
        Err(ENOSYS)
    }

    fn open_dir(&self, p: &PathBuf) -> OpResult<PeerDir<PathBuf>> {
        match self.stat(p)? {
            m if m.is_dir() => Ok(PeerDir {
                path: p.clone(),
                buf: RefCell::new(PathBuf::with_capacity(p.as_os_str().len() + 64)),
            }),
            _ => Err(Errno(20)),
        }
    }

    #[inline]
    fn fstatat(&self, dir: &PeerDir<PathBuf>, p: &PathBuf) -> OpResult<Meta> {
        let mut buf = dir.buf.borrow_mut();
        buf.clear();
        buf.push(&dir.path);
        buf.push(p);
        self.stat(&buf)
    }

    fn mkdir(&self, p: &PathBuf, _mode: u32) -> OpResult<()> {
        self.fs.create_dir(p).map_err(wasmer_errno)
    }

    #[inline]
    fn create_close(&self, p: &PathBuf, _mode: u32) -> OpResult<()> {
        self.fs
            .new_open_options()
            .write(true)
            .create_new(true)
            .open(p)
            .map(drop)
            .map_err(wasmer_errno)
    }

    #[inline]
    fn unlink(&self, p: &PathBuf) -> OpResult<()> {
        self.fs.remove_file(p).map_err(wasmer_errno)
    }

    fn create_with(&self, _p: &PathBuf, _mode: u32, _data: &[u8]) -> OpResult<()> {
        Err(ENOSYS)
    }

    fn open_read_close(&self, _p: &PathBuf, _buf: &mut [u8]) -> OpResult<usize> {
        Err(ENOSYS)
    }

    #[inline]
    fn rename(&self, from: &PathBuf, to: &PathBuf) -> OpResult<()> {
        block_on(self.fs.rename(from, to)).map_err(wasmer_errno)
    }

    fn rmdir(&self, p: &PathBuf) -> OpResult<()> {
        self.fs.remove_dir(p).map_err(wasmer_errno)
    }

    fn readdir_fstatat(&self, p: &PathBuf) -> OpResult<usize> {
        let mut n = 0;
        for entry in self.fs.read_dir(p).map_err(wasmer_errno)? {
            let entry = entry.map_err(wasmer_errno)?;
            self.stat(&entry.path)?;
            n += 1;
        }
        Ok(n)
    }
}

/// Polls `f` to completion on this thread. The memory file system's futures are ready at their
/// first poll; a pending one is polled again after a yield.
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    use std::task::{Context, Poll, Waker};
    let mut f = std::pin::pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basics<T: Target>(t: &T) {
        t.mkdir(&t.path("d"), 0o755).unwrap();
        t.create_close(&t.path("d/f"), 0o644).unwrap();
        assert!(t.stat(&t.path("d/f")).unwrap().is_file());
        assert!(t.stat(&t.path("d")).unwrap().is_dir());
        assert_eq!(t.stat(&t.path("d/g")), Err(ENOENT));
        let dir = t.open_dir(&t.path("d")).unwrap();
        assert!(t.fstatat(&dir, &t.rel_path("f")).unwrap().is_file());
        assert_eq!(t.readdir_fstatat(&t.path("d")), Ok(1));
        t.unlink(&t.path("d/f")).unwrap();
        assert_eq!(t.stat(&t.path("d/f")), Err(ENOENT));
        t.rmdir(&t.path("d")).unwrap();
    }

    #[test]
    fn vfs_memoryfs_does_what_the_workloads_ask() {
        let t = VfsMem::new();
        basics(&t);
        t.create_with(&t.path("x"), 0o644, b"hello").unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(t.open_read_close(&t.path("x"), &mut buf), Ok(5));
        assert_eq!(&buf[..5], b"hello");
    }

    #[test]
    fn wasmer_mem_fs_does_what_the_workloads_ask() {
        let t = WasmerMem::new();
        basics(&t);
        t.create_close(&t.path("a"), 0o644).unwrap();
        assert_eq!(t.create_close(&t.path("a"), 0o644), Err(Errno::EEXIST));
        t.rename(&t.path("a"), &t.path("b")).unwrap();
        assert!(t.stat(&t.path("b")).unwrap().is_file());
        assert_eq!(t.stat(&t.path("a")), Err(ENOENT));
    }
}
