//! Open files and the descriptor table.
//!
//! An [`OpenFile`] holds its inode (an `Arc`), its mount, and for directories its dentry
//! (for `*at` lookups, `fchdir` and `getdents`). A regular file's open does not pin its
//! dentry: unlinking the name turns the dentry negative while the file stays open, and the
//! inode is freed on the last close (tmpfs semantics for unlinked-but-open files).
//!
//! The descriptor table is a vector under a mutex; the lowest free number is handed out,
//! as POSIX requires.

use crate::dentry::DRef;
use crate::errno::{Errno, Result};
use crate::inode::Inode;
use crate::mount::Mount;
use crate::types::{Fd, OFlags};
use parking_lot::Mutex;
use std::sync::Arc;

/// A mount and a dentry in it, held with references (a working directory, a root, an
/// open directory).
pub(crate) struct Loc {
    pub mnt: Arc<Mount>,
    pub d: DRef,
}

impl Loc {
    pub fn new(mnt: Arc<Mount>, d: DRef) -> Loc {
        mnt.users.add(1);
        Loc { mnt, d }
    }
}

impl Clone for Loc {
    fn clone(&self) -> Loc {
        Loc::new(self.mnt.clone(), self.d.clone())
    }
}

impl Drop for Loc {
    fn drop(&mut self) {
        self.mnt.users.add(-1);
    }
}

/// An open file description.
pub struct OpenFile {
    pub(crate) mnt: Arc<Mount>,
    /// The dentry, for directories (and `O_PATH` descriptors of directories).
    pub(crate) dir: Option<DRef>,
    pub(crate) inode: Arc<Inode>,
    pub(crate) flags: OFlags,
    /// File position, or the readdir cookie for directories.
    pub(crate) pos: Mutex<u64>,
}

impl OpenFile {
    pub(crate) fn new(
        mnt: Arc<Mount>,
        dir: Option<DRef>,
        inode: Arc<Inode>,
        flags: OFlags,
    ) -> OpenFile {
        mnt.users.add(1);
        OpenFile {
            mnt,
            dir,
            inode,
            flags,
            pos: Mutex::new(0),
        }
    }

    /// Whether this is an `O_PATH` descriptor.
    pub(crate) fn is_path(&self) -> bool {
        self.flags.contains(OFlags::PATH)
    }
}

impl Drop for OpenFile {
    fn drop(&mut self) {
        self.mnt.users.add(-1);
    }
}

/// Most descriptors one process may hold (like `RLIMIT_NOFILE`).
pub const MAX_FDS: usize = 1 << 20;

/// A descriptor table.
#[derive(Default, Clone)]
pub(crate) struct FdTable {
    slots: Vec<Option<Arc<OpenFile>>>,
    /// No free slot below this index.
    low: usize,
}

impl FdTable {
    pub fn get(&self, fd: Fd) -> Result<Arc<OpenFile>> {
        usize::try_from(fd.0)
            .ok()
            .and_then(|i| self.slots.get(i))
            .and_then(|s| s.clone())
            .ok_or(Errno::EBADF)
    }

    pub fn insert(&mut self, f: Arc<OpenFile>) -> Result<Fd> {
        let mut i = self.low;
        while i < self.slots.len() && self.slots[i].is_some() {
            i += 1;
        }
        if i >= MAX_FDS {
            return Err(Errno::EMFILE);
        }
        if i == self.slots.len() {
            self.slots.push(None);
        }
        self.slots[i] = Some(f);
        self.low = i + 1;
        Ok(Fd(i as i32))
    }

    pub fn remove(&mut self, fd: Fd) -> Result<Arc<OpenFile>> {
        let i = usize::try_from(fd.0).map_err(|_| Errno::EBADF)?;
        let f = self
            .slots
            .get_mut(i)
            .and_then(|s| s.take())
            .ok_or(Errno::EBADF)?;
        self.low = self.low.min(i);
        while self.slots.last().is_some_and(|s| s.is_none()) {
            self.slots.pop();
        }
        Ok(f)
    }

    pub fn set(&mut self, fd: Fd, f: Arc<OpenFile>) -> Result<Option<Arc<OpenFile>>> {
        let i = usize::try_from(fd.0).map_err(|_| Errno::EBADF)?;
        if i >= MAX_FDS {
            return Err(Errno::EBADF);
        }
        if i >= self.slots.len() {
            self.slots.resize(i + 1, None);
        }
        Ok(self.slots[i].replace(f))
    }
}
