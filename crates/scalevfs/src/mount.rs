//! Mounts and the mount table.
//!
//! # Mechanism
//! The table is an immutable snapshot behind an epoch-protected pointer: the walk loads it
//! under its guard and looks up (parent mount, mountpoint dentry) with no lock and no
//! write. Each entry points straight at the *top* of the mount stack on that dentry, so a
//! crossing is one lookup however many mounts are stacked. `mount` and `umount` build a new
//! snapshot under [`crate::Vfs`]'s mount mutex, bump the mount sequence counter around the
//! swap (the lockless walk validates against it), and free the old snapshot after a grace
//! period. A dentry with a mount on it carries the `MOUNTED` flag, so the walk looks in the
//! table only there.
//!
//! # Busy counting
//! `users` counts open files, working directories and roots inside the mount, on striped
//! lines. `umount` bumps the mount sequence counter (a `SeqCst` RMW) before it sums
//! `users`; a holder increments `users` (then a `SeqCst` fence) before it validates the
//! counter. So either `umount` sees the holder, or the holder sees the changed counter and
//! backs off.

use crate::dentry::DRef;
use crate::memfs::MemFs;
use crate::sync::StripedCounter;
use std::collections::HashMap;
use std::sync::Arc;

/// A mounted file system.
pub struct Mount {
    /// Unique id.
    pub id: u64,
    /// The file system.
    pub fs: Arc<MemFs>,
    /// The root dentry of this mount.
    pub root: DRef,
    /// The mount this one sits in, and the dentry it covers; `None` for the root mount.
    pub parent: Option<(Arc<Mount>, DRef)>,
    /// Open files, working directories and roots inside this mount.
    pub users: StripedCounter,
    /// Set by `umount`: per-thread handles to it are dropped when next seen.
    pub detached: std::sync::atomic::AtomicBool,
}

impl Mount {
    /// The device number of this mount.
    #[inline]
    pub fn dev(&self) -> u64 {
        self.fs.dev
    }
}

impl std::fmt::Debug for Mount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Mount({}, {:?})", self.id, self.fs)
    }
}

/// A reference to a mount for open files that writes no line shared between threads.
///
/// `Arc<Mount>` keeps one count for everyone: every `open` and `close` on every thread
/// would bounce it. Instead each thread keeps, per mount, one [`MountHandle`] (which owns
/// one `Arc<Mount>`), and an open file holds an `Arc` of its thread's handle: the count it
/// touches is that thread's. Handles of detached mounts are dropped from the thread's
/// table when next looked up, or when the thread exits.
pub struct MountRef(Arc<MountHandle>);

/// One thread's hold on a mount; see [`MountRef`].
pub struct MountHandle {
    mnt: Arc<Mount>,
}

impl MountRef {
    /// A reference to `m` through this thread's handle.
    pub fn new(m: &Arc<Mount>) -> MountRef {
        use std::cell::RefCell;
        use std::sync::atomic::Ordering::Relaxed;
        thread_local! {
            static HANDLES: RefCell<Vec<Arc<MountHandle>>> = const { RefCell::new(Vec::new()) };
        }
        let found = HANDLES.try_with(|h| {
            let mut h = h.borrow_mut();
            h.retain(|x| !x.mnt.detached.load(Relaxed));
            if let Some(x) = h.iter().find(|x| Arc::ptr_eq(&x.mnt, m)) {
                return x.clone();
            }
            let x = Arc::new(MountHandle { mnt: m.clone() });
            h.push(x.clone());
            x
        });
        MountRef(found.unwrap_or_else(|_| Arc::new(MountHandle { mnt: m.clone() })))
    }
}

impl std::ops::Deref for MountRef {
    type Target = Arc<Mount>;
    #[inline]
    fn deref(&self) -> &Arc<Mount> {
        &self.0.mnt
    }
}

/// Key of a mount point: (address of the parent mount, address of the covered dentry).
pub type MountKey = (usize, usize);

/// An immutable snapshot of the mount table.
#[derive(Default)]
pub struct MountTable {
    /// Top of the stack at each mount point.
    pub top: HashMap<MountKey, Arc<Mount>>,
    /// Every mount but the root, in mount order.
    pub all: Vec<Arc<Mount>>,
}

/// The key of `(mnt, d)`.
#[inline]
pub fn key(mnt: &Mount, d: &crate::dentry::Dentry) -> MountKey {
    (mnt as *const Mount as usize, d as *const _ as usize)
}

impl MountTable {
    /// Builds the snapshot for `all`, computing the top of each stack.
    pub fn build(all: Vec<Arc<Mount>>) -> MountTable {
        let mut direct: HashMap<MountKey, Arc<Mount>> = HashMap::new();
        for m in &all {
            if let Some((p, d)) = &m.parent {
                direct.insert(key(p, d), m.clone());
            }
        }
        let mut top = HashMap::new();
        for (k, m) in &direct {
            let mut t = m.clone();
            while let Some(up) = direct.get(&key(&t, &t.root)) {
                t = up.clone();
            }
            top.insert(*k, t);
        }
        MountTable { top, all }
    }
}
