//! The open-file table: FUSE file handles and the engine descriptions behind them, and
//! the per-user limit on open files.
//!
//! # Mechanism
//! A file handle is a key into a [`sharded_slab::Slab`] of engine [`Handle`]s: insert,
//! lookup and removal are lock-free and O(1), and there is no limit below what memory
//! allows. These are not POSIX descriptors: they take no number in any engine descriptor
//! table, so neither the engine's `RLIMIT_NOFILE`-like limit nor the lowest-free-number
//! rule applies to them. A key carries a generation, so a stale handle finds nothing
//! rather than another file.
//!
//! One user must not be able to exhaust what all users share. With a limit configured
//! ([`FsOptions::max_open_per_user`](crate::FsOptions)), each non-root user may hold that
//! many open files and directories through the mount; past it, `open`, `create` and
//! `opendir` fail with `ENFILE`, as Linux's `alloc_empty_file` does at `file-max` for
//! callers without `CAP_SYS_ADMIN`. Root is never counted, so it always gets in. A
//! [`Ticket`] is taken before the engine opens anything (so a refused open truncates
//! and creates nothing) and travels with the handle, so `release` gives back exactly
//! what `open` took.
//!
//! Record locks through the mount belong either to a process (POSIX locks; FUSE's flush,
//! sent by every close(2), names the process and drops them) or to an open file
//! description (OFD locks), which no flush names and for which the kernel sends nothing at
//! the last close: the lock owner is the kernel's `struct file`, one per file handle here.
//! So each open file notes the owners that set locks through it, forgets an owner when
//! that owner flushes it, and at release drops the locks of the owners left: by then every
//! process that held the file has closed it and flushed, so only the description's own
//! owner can be left.
//!
//! # Lock order
//! Each entry's list of lock owners is behind a leaf mutex (no other lock is taken while
//! it is held); the per-user counts ([`PerUserCounts`]) take leaf locks.
//!
//! What protects each field outside its lock: the slab is internally synchronized; an
//! entry's handle and ticket are immutable once inserted, and the entry is dropped when
//! the last reader lets go.

use std::ops::Deref;
use std::sync::Arc;

use parking_lot::Mutex;

use scalevfs::sync::PerUserCounts;
use scalevfs::Handle;

/// An open file: the engine's description, the count it holds for its user, and the lock
/// owners that set record locks through it and have not flushed it since.
struct Open {
    h: Handle,
    _ticket: Ticket,
    owners: Mutex<Vec<u64>>,
}

/// One open file counted against a user, given back when dropped.
pub struct Ticket(Option<(u32, Arc<PerUserCounts>)>);

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Some((uid, pu)) = &self.0 {
            pu.uncharge(*uid);
        }
    }
}

/// The open files of a mount, keyed by FUSE file handle.
pub struct OpenFiles {
    slab: sharded_slab::Slab<Open>,
    per_user: Option<Arc<PerUserCounts>>,
}

impl std::fmt::Debug for OpenFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenFiles")
            .field("limit", &self.per_user.as_ref().map(|p| p.limit()))
            .finish()
    }
}

/// A looked-up open file, borrowed from the table for one request.
pub struct FileGuard<'a>(sharded_slab::Entry<'a, Open>);

impl Deref for FileGuard<'_> {
    type Target = Handle;
    fn deref(&self) -> &Handle {
        &self.0.h
    }
}

impl FileGuard<'_> {
    /// Notes that `owner` sets a record lock through this file (before the engine is asked,
    /// so that a granted lock is always noted).
    pub fn lock_owner_used(&self, owner: u64) {
        let mut v = self.0.owners.lock();
        if !v.contains(&owner) {
            v.push(owner);
        }
    }

    /// Notes that `owner` flushed this file: a close(2) by a process, whose record locks
    /// then go.
    pub fn lock_owner_flushed(&self, owner: u64) {
        self.0.owners.lock().retain(|&o| o != owner);
    }

    /// The owners that set record locks through this file and never flushed it since. At
    /// the file's release these are its open file description's own (OFD locks): every
    /// process that held a descriptor of it has closed that descriptor, and flushed.
    pub fn unflushed_lock_owners(&self) -> Vec<u64> {
        std::mem::take(&mut *self.0.owners.lock())
    }
}

impl OpenFiles {
    /// A table; with `limit`, each non-root user may hold at most that many open files.
    pub fn new(limit: Option<u64>) -> OpenFiles {
        OpenFiles {
            slab: sharded_slab::Slab::new(),
            per_user: limit.map(|limit| Arc::new(PerUserCounts::new(limit))),
        }
    }

    /// Counts one more open file for `uid`, before anything is opened: `ENFILE` when the
    /// user is at the limit.
    pub fn charge(&self, uid: u32) -> Result<Ticket, fuser::Errno> {
        let Some(pu) = self.per_user.as_ref().filter(|_| uid != 0) else {
            return Ok(Ticket(None));
        };
        if !pu.charge(uid, true) {
            return Err(fuser::Errno::ENFILE);
        }
        Ok(Ticket(Some((uid, pu.clone()))))
    }

    /// Files `uid` holds open (for tests and statistics).
    pub fn open_by(&self, uid: u32) -> u64 {
        self.per_user.as_ref().map_or(0, |pu| pu.count(uid))
    }

    /// Stores an opened file; returns its handle. `ENFILE` only if the slab is full
    /// (billions of entries).
    pub fn insert(&self, h: Handle, ticket: Ticket) -> Result<u64, fuser::Errno> {
        self.slab
            .insert(Open {
                h,
                _ticket: ticket,
                owners: Mutex::new(Vec::new()),
            })
            .map(|k| k as u64)
            .ok_or(fuser::Errno::ENFILE)
    }

    /// The open file `fh`, or `EBADF`.
    pub fn get(&self, fh: u64) -> Result<FileGuard<'_>, fuser::Errno> {
        usize::try_from(fh)
            .ok()
            .and_then(|k| self.slab.get(k))
            .map(FileGuard)
            .ok_or(fuser::Errno::EBADF)
    }

    /// Closes `fh` (the description goes when the last request using it ends). `EBADF`
    /// if there is no such handle.
    pub fn remove(&self, fh: u64) -> Result<(), fuser::Errno> {
        let k = usize::try_from(fh).map_err(|_| fuser::Errno::EBADF)?;
        if self.slab.remove(k) {
            Ok(())
        } else {
            Err(fuser::Errno::EBADF)
        }
    }
}
