//! hostfs: a host directory served by the engine, confined beneath it (read-only for now).
//!
//! The engine resolves every path itself, in its dentry cache, one component at a time:
//! `..` at the root stays at the root, and a symlink's text is resolved in the engine's
//! namespace, where an absolute target starts again at the caller's root. The host is
//! never asked to resolve a path. It is asked only what one directory holds, by
//! descriptor: [`FileSystem::load_dir`] opens the directory relative to its parent's
//! descriptor with `O_NOFOLLOW | O_DIRECTORY` (one component, never `..`), lists it, and
//! `fstatat(AT_SYMLINK_NOFOLLOW)`s and `readlinkat`s each entry. So nothing a symlink or a
//! `..` in the tree says can reach outside it, and `/proc` magic links are only ever read
//! as text. A regular file's data is opened the same way (`O_NOFOLLOW | O_NONBLOCK |
//! O_NOCTTY`, relative to its directory), and only when a caller reads it; devices,
//! FIFOs and sockets are never opened on the host.
//!
//! # Identity
//! An object is the host's (`st_dev`, `st_ino`): two names of one host inode (hard links)
//! are one engine inode, found through the inode cache ([`crate::icache`]), whose hit is
//! lock-free and whose miss is loaded by exactly one caller with no lock held. The engine
//! reports its own `st_dev` and the host's `st_ino`; for a host file system mounted inside
//! the source (another `st_dev`), the inode number carries that device's index in its top
//! 16 bits, so two devices' numbers never meet.
//!
//! # Policy and staleness
//! The *exclusive* policy: this process owns the tree, and nothing changes it behind the
//! engine (the mount is read-only, and so is the tree to everyone else). What was loaded
//! is kept without limit and never revalidated; a change made on the host after a
//! directory was loaded is not seen (a name created there stays missing, a removed one
//! stays visible until its data is read, which then fails with `ESTALE` if the name now
//! names another object). The *shared* policy (a TTL and the directory's mtime/ctime) and
//! writes through to the host are still to come (issue 10).
//!
//! # Reclamation
//! Nothing is evicted yet (bounded caches are still to come): every loaded object stays in
//! the inode cache, and every loaded directory keeps its descriptor, until the file system
//! is dropped with its last mount. `HostFs::new` raises the soft limit on open descriptors
//! to the hard one for this reason. An open file's data descriptor is closed with it.
//!
//! # What protects what
//! [`HostFs`] holds no lock of its own. The inode cache's shards are locked only briefly
//! by a miss (see `icache`); a node's directory descriptor is set once (`OnceLock`);
//! the table of host devices is a mutex taken only when an entry's device is not the
//! root's (a host mount inside the source). No lock is held across a host system call.

use crate::errno::{Errno, Result};
use crate::fs::{CacheOptions, FileSystem, SuperBlock};
use crate::icache::{InodeCache, InodeKey};
use crate::inode::{Contents, DirState, Inode};
use crate::types::{mode::*, Stat, StatFs, Timespec};
use parking_lot::Mutex;
use rustix::fs::{self as rfs, AtFlags, Mode, OFlags};
use std::ffi::CStr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, OnceLock};

/// Options of a [`HostFs`].
#[derive(Clone, Debug)]
pub struct HostFsOptions {
    /// The dentry hash's first size (see [`crate::MemFsOptions::hash_buckets`]).
    pub hash_buckets: usize,
    /// Cap on cached negative entries (see [`crate::MemFsOptions::max_negative`]).
    pub max_negative: Option<u64>,
}

impl Default for HostFsOptions {
    fn default() -> Self {
        HostFsOptions {
            hash_buckets: 256,
            max_negative: None,
        }
    }
}

/// Where a host object is: its directory's descriptor and its name there (the root has
/// none), and, for a directory, its own descriptor once it was opened.
struct HostNode {
    inode: Arc<Inode>,
    at: Option<(Arc<OwnedFd>, Box<[u8]>)>,
    dir: OnceLock<Arc<OwnedFd>>,
}

/// A host directory as a file system for the engine (see the module docs).
pub struct HostFs {
    id: u64,
    root_dev: u64,
    /// Host devices other than the root's, by index (an index is an inode number's top
    /// 16 bits).
    devs: Mutex<Vec<u64>>,
    nodes: InodeCache<HostNode>,
    root: Arc<Inode>,
    root_fd: Arc<OwnedFd>,
}

static NEXT_FS: AtomicU64 = AtomicU64::new(1);

/// Bits of an engine inode number that are the host's.
const INO_BITS: u32 = 48;

impl HostFs {
    /// Serves the host directory `source`, read-only.
    ///
    /// Errors: the host's for opening `source` (`ENOENT`, `ENOTDIR`, `EACCES`, ...);
    /// `EOVERFLOW` for a root inode number that needs more than 48 bits.
    #[allow(clippy::new_ret_no_self)]
    pub fn new(source: &Path, opts: HostFsOptions) -> Result<Arc<SuperBlock>> {
        let fd = rfs::open(
            source,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(host)?;
        let st = stat_of(rfs::fstat(&fd).map_err(host)?);
        if st.ino >> INO_BITS != 0 {
            return Err(Errno::EOVERFLOW);
        }
        raise_fd_limit();
        let root_fd = Arc::new(fd);
        let root = Arc::new(Inode::from_stat(&st, unloaded_dir()));
        let fs = HostFs {
            id: NEXT_FS.fetch_add(1, Relaxed),
            root_dev: st.dev,
            devs: Mutex::new(Vec::new()),
            nodes: InodeCache::new(),
            root: root.clone(),
            root_fd: root_fd.clone(),
        };
        let node = HostNode {
            inode: root,
            at: None,
            dir: OnceLock::from(root_fd),
        };
        drop(
            fs.nodes
                .get_or_load(fs.key(st.ino), || Ok::<_, Errno>(node))?,
        );
        let cache = CacheOptions {
            hash_buckets: opts.hash_buckets,
            max_negative: opts.max_negative,
        };
        Ok(SuperBlock::new(Box::new(fs), cache))
    }

    fn key(&self, ino: u64) -> InodeKey {
        InodeKey { fs: self.id, ino }
    }

    /// The engine's inode number for a host (device, inode); `EOVERFLOW` where it does not
    /// fit (an inode number past 48 bits, or more than 65,535 devices).
    fn ino_of(&self, dev: u64, ino: u64) -> Result<u64> {
        if ino >> INO_BITS != 0 {
            return Err(Errno::EOVERFLOW);
        }
        if dev == self.root_dev {
            return Ok(ino);
        }
        let mut devs = self.devs.lock();
        let i = match devs.iter().position(|&d| d == dev) {
            Some(i) => i,
            None => {
                devs.push(dev);
                devs.len() - 1
            }
        };
        if i + 1 >= 1 << (64 - INO_BITS) {
            return Err(Errno::EOVERFLOW);
        }
        Ok(ino | ((i as u64 + 1) << INO_BITS))
    }

    /// The descriptor of the directory whose engine inode is `dir`, opened now if it never
    /// was.
    fn dir_fd(&self, dir: &Inode) -> Result<Arc<OwnedFd>> {
        let node = self.nodes.get(self.key(dir.ino)).ok_or(Errno::ESTALE)?;
        if let Some(fd) = node.dir.get() {
            return Ok(fd.clone());
        }
        let (parent, name) = node.at.as_ref().ok_or(Errno::ESTALE)?;
        let fd = open_at(
            parent,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW,
            dir,
        )?;
        Ok(node.dir.get_or_init(|| Arc::new(fd)).clone())
    }
}

/// Opens `name` in `dir` with `flags` (plus `O_CLOEXEC | O_NOCTTY`), and checks that it is
/// still the object `expect` was loaded from: `ESTALE` if the name now names another.
fn open_at(dir: &OwnedFd, name: &[u8], flags: OFlags, expect: &Inode) -> Result<OwnedFd> {
    let fd = rfs::openat(
        dir,
        name,
        flags | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )
    .map_err(host)?;
    let st = rfs::fstat(&fd).map_err(host)?;
    if st.st_ino & ((1 << INO_BITS) - 1) != expect.ino & ((1 << INO_BITS) - 1) {
        return Err(Errno::ESTALE);
    }
    Ok(fd)
}

fn unloaded_dir() -> Contents {
    Contents::Dir(parking_lot::Mutex::new(DirState {
        unloaded: true,
        ..Default::default()
    }))
}

/// A host errno as the engine's (the same number).
fn host(e: rustix::io::Errno) -> Errno {
    Errno::from_raw(e.raw_os_error())
}

fn stat_of(st: rfs::Stat) -> Stat {
    let t = |sec: i64, nsec: i64| Timespec {
        sec,
        nsec: nsec as u32,
    };
    Stat {
        dev: st.st_dev,
        ino: st.st_ino,
        mode: st.st_mode,
        nlink: st.st_nlink as u32,
        uid: st.st_uid,
        gid: st.st_gid,
        rdev: st.st_rdev,
        size: st.st_size as u64,
        blksize: st.st_blksize as u32,
        blocks: st.st_blocks as u64,
        atime: t(st.st_atime, st.st_atime_nsec as i64),
        mtime: t(st.st_mtime, st.st_mtime_nsec as i64),
        ctime: t(st.st_ctime, st.st_ctime_nsec as i64),
    }
}

/// Raises the soft limit on open descriptors to the hard one: hostfs keeps one per loaded
/// directory.
fn raise_fd_limit() {
    let lim = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    if lim.current < lim.maximum {
        let new = rustix::process::Rlimit {
            current: lim.maximum,
            maximum: lim.maximum,
        };
        let _ = rustix::process::setrlimit(rustix::process::Resource::Nofile, new);
    }
}

impl FileSystem for HostFs {
    fn root_inode(&self) -> Arc<Inode> {
        self.root.clone()
    }

    fn new_inode(
        &self,
        _: u32,
        _: u32,
        _: u32,
        _: u64,
        _: Option<&[u8]>,
        _: Timespec,
    ) -> Result<Arc<Inode>> {
        // Every create checks `read_only` first; none reaches here.
        Err(Errno::EROFS)
    }

    fn evict(&self, _: &Inode) {}

    fn transfer_owner(&self, _: &Inode, _: u32) {}

    fn inodes_of(&self, _: u32) -> u64 {
        0
    }

    fn charge_pages(&self, _: u64, _: bool) -> u64 {
        0
    }

    fn uncharge_pages(&self, _: u64) {}

    fn usage(&self) -> (u64, u64) {
        (self.nodes.len() as u64, 0)
    }

    fn statfs(&self) -> StatFs {
        match rfs::fstatfs(&*self.root_fd) {
            Ok(s) => StatFs {
                fs_type: s.f_type as u64,
                bsize: s.f_bsize as u64,
                blocks: s.f_blocks,
                bfree: s.f_bfree,
                bavail: s.f_bavail,
                files: s.f_files,
                ffree: s.f_ffree,
                namelen: s.f_namelen as u64,
                frsize: s.f_frsize as u64,
            },
            Err(_) => StatFs::default(),
        }
    }

    fn complete(&self) -> bool {
        false
    }

    fn read_only(&self) -> bool {
        true
    }

    fn load_dir(&self, dir: &Inode) -> Result<Vec<(Vec<u8>, Arc<Inode>)>> {
        let fd = self.dir_fd(dir)?;
        let mut list = rfs::Dir::read_from(&*fd).map_err(host)?;
        let mut out = Vec::new();
        while let Some(e) = list.read() {
            let e = e.map_err(host)?;
            let name = e.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let st = match rfs::statat(&*fd, e.file_name(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => stat_of(st),
                // Removed on the host since the listing: not there.
                Err(rustix::io::Errno::NOENT) => continue,
                Err(e) => return Err(host(e)),
            };
            let ino = self.ino_of(st.dev, st.ino)?;
            let node = self.nodes.get_or_load(self.key(ino), || {
                self.load_node(&fd, e.file_name(), &st, ino)
            })?;
            out.push((name.to_vec(), node.inode.clone()));
        }
        Ok(out)
    }

    fn open_data(&self, inode: &Inode) -> Result<OwnedFd> {
        let node = self.nodes.get(self.key(inode.ino)).ok_or(Errno::ESTALE)?;
        let (parent, name) = node.at.as_ref().ok_or(Errno::EISDIR)?;
        open_at(
            parent,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK,
            inode,
        )
    }
}

impl HostFs {
    /// The engine's object for the host entry `name` of `dir`, whose `fstatat` is `st`.
    fn load_node(&self, dir: &Arc<OwnedFd>, name: &CStr, st: &Stat, ino: u64) -> Result<HostNode> {
        let contents = match st.mode & S_IFMT {
            S_IFDIR => unloaded_dir(),
            S_IFREG => Contents::Stored,
            S_IFLNK => {
                let t = rfs::readlinkat(dir.as_fd(), name, Vec::new()).map_err(host)?;
                Contents::Symlink(t.into_bytes().into())
            }
            _ => Contents::Special,
        };
        let mut st = *st;
        st.ino = ino;
        let inode = Arc::new(Inode::from_stat(&st, contents));
        Ok(HostNode {
            inode,
            at: Some((dir.clone(), name.to_bytes().into())),
            dir: OnceLock::new(),
        })
    }
}
