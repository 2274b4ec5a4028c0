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
//! # Busy counting: the umount handshake
//! `users` counts open files, working directories and roots inside the mount, and every
//! operation in progress there (a [`MountHold`]), on striped lines. A namespace's root
//! mount, which cannot be unmounted, counts none of them ([`Mount::add_users`]). `umount`, under the
//! mount lock, opens a write section of the mount sequence counter, runs a `SeqCst` fence
//! and sums `users` ([`Mount::detach_if_unused`]); a holder increments `users`, runs a
//! `SeqCst` fence and reads the counter ([`Mount::confirm`]). One of the two fences comes
//! first, so either `umount` sees the holder, or the holder sees the counter moved. A
//! holder whose walk was lockless then backs off (the walk itself may be stale). A holder
//! whose walk was locked asks, under the mount lock, whether its mount was detached (like
//! Linux `legitimize_mnt`): only then does it back off and walk again, so mount churn
//! elsewhere never sends it round again.
//!
//! # A published place: the working directory
//! A process's working directory counts as one user of its mount for as long as it *is*
//! the working directory: `chdir` gives the count back the moment it publishes the new
//! one ([`Mount::release_published`]), so `chdir("/"); umount("/mnt")` never sees a stale
//! `EBUSY`, although the old value's memory waits a grace period for lockless readers. A
//! call that starts from the working directory therefore cannot lean on that count: it
//! loads the published place and holds its mount itself ([`hold_published`]), through the
//! same handshake. For the count a reader saw to be trusted, `chdir` orders its store
//! before its decrement (a fence), and `umount` orders its sum before detaching (a fence):
//! a reader whose walk began after an `umount` that saw the decrement also sees the new
//! working directory.
//!
//! # Lock order
//! ```text
//! Vfs mount lock
//!   directory mutexes (mount: the mount point's parent and itself, against rmdir/rename)
//! ```
//!
//! Fields outside a lock: `detached` is written and read under the mount lock; `users` is
//! atomic (see above).

use crate::backend::SuperBlock;
use crate::dentry::DRef;
use crate::sync::{fence, AtomicBool, Mutex, SeqCount, SharedCounter};
use std::collections::HashMap;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::Arc;

/// A mounted file system.
pub struct Mount {
    /// Unique id.
    pub id: u64,
    /// The file system.
    pub fs: Arc<SuperBlock>,
    /// The root dentry of this mount.
    pub root: DRef,
    /// The mount this one sits in, and the dentry it covers; `None` for the root mount.
    pub parent: Option<(Arc<Mount>, DRef)>,
    /// Open files, working directories and roots inside this mount, and operations in
    /// progress there; always 0 for a namespace's root mount, which is never unmounted and
    /// so counts nothing (see [`Mount::add_users`]).
    pub users: SharedCounter,
    /// Set by `umount` (under the mount lock): the mount is out of the table for good, and
    /// per-thread handles to it are dropped when next seen.
    pub detached: AtomicBool,
}

/// The mount table's lock and sequence counter: what the umount handshake runs on.
pub struct MountSync {
    /// Bumped around every change of the mount table; the lockless walk validates its
    /// mount crossings against it.
    pub seq: SeqCount,
    /// Serializes changes of the mount table (and `detached`).
    pub lock: Mutex<()>,
}

impl MountSync {
    /// No mount change yet.
    pub fn new() -> MountSync {
        MountSync {
            seq: SeqCount::new(),
            lock: Mutex::new(()),
        }
    }
}

impl Default for MountSync {
    fn default() -> Self {
        MountSync::new()
    }
}

impl Mount {
    /// A mount of `fs` rooted at `root`, sitting on `parent` (none for a namespace's root).
    pub fn new(
        id: u64,
        fs: Arc<SuperBlock>,
        root: DRef,
        parent: Option<(Arc<Mount>, DRef)>,
    ) -> Mount {
        Mount {
            id,
            fs,
            root,
            parent,
            users: SharedCounter::default(),
            detached: AtomicBool::new(false),
        }
    }

    /// Counts `delta` more users of this mount: every count and uncount of `users` goes
    /// through here. A namespace's root mount (no parent; that never changes) is never
    /// unmounted (`umount` refuses it before it asks whether it is busy), so it counts
    /// nothing: an open and a close in it take no locked operation for their mount. One
    /// predicate on a field fixed at creation, so a count and its uncount always agree.
    #[inline]
    pub fn add_users(&self, delta: i64) {
        if self.parent.is_some() {
            self.users.add(delta);
        }
    }

    /// The device number of this mount.
    #[inline]
    pub fn dev(&self) -> u64 {
        self.fs.dev
    }

    /// The holder's half of the umount handshake: the caller already counts in `users`
    /// (a hold, an open file, a working directory) and learns whether the mount it found is
    /// still attached. `start` is the mount sequence sampled when its walk began; `locked`
    /// says what walk it was (see the module docs). `false`: give up the count and walk
    /// again.
    pub fn confirm(&self, sync: &MountSync, start: u64, locked: bool) -> bool {
        // Orders the caller's count before the sequence read; umount's fence is the other
        // half.
        fence(SeqCst);
        // An odd start was sampled inside a mount change: as good as moved.
        if start & 1 == 0 && !sync.seq.read_retry(start) {
            return true;
        }
        if !locked {
            return false;
        }
        let _l = sync.lock.lock();
        !self.detached.load(Relaxed)
    }

    /// Counts an operation in progress in this mount, then confirms it (see
    /// [`Mount::confirm`]); `None`: walk again. The root mount of a namespace is never
    /// unmounted, so holding it costs nothing.
    #[inline]
    pub fn hold<'a>(
        self: &'a Arc<Mount>,
        sync: &MountSync,
        start: u64,
        locked: bool,
    ) -> Option<MountHold<'a>> {
        if self.parent.is_none() {
            return Some(MountHold(None));
        }
        self.hold_counted(sync, start, locked)
    }

    #[inline(never)]
    fn hold_counted<'a>(
        self: &'a Arc<Mount>,
        sync: &MountSync,
        start: u64,
        locked: bool,
    ) -> Option<MountHold<'a>> {
        self.add_users(1);
        let h = MountHold(Some(self));
        self.confirm(sync, start, locked).then_some(h)
    }

    /// umount's half of the handshake: detaches the mount unless something counts as its
    /// user. The caller holds the mount lock and is inside a write section of the mount
    /// sequence.
    pub fn detach_if_unused(&self) -> bool {
        fence(SeqCst);
        if self.users.sum() != 0 {
            return false;
        }
        // Acquire for the decrements summed: what their owners published before them (a
        // new working directory, see `release_published`) is visible to every walk that
        // begins after this umount.
        fence(SeqCst);
        self.detached.store(true, Relaxed);
        true
    }

    /// Gives back the count of a place that was just replaced in its published slot (a
    /// working directory, by `chdir`). The caller's store of the replacement comes first;
    /// the fence orders it before the decrement (see "A published place").
    pub fn release_published(&self) {
        fence(SeqCst);
        self.add_users(-1);
    }
}

/// Loads a published place with `load` (which returns its mount and whatever else the
/// caller wants from the same load) and holds that mount against `umount` (see "A
/// published place"). A mount found detached was replaced before the load could see the
/// replacement: load again.
pub fn hold_published<'a, T>(
    sync: &MountSync,
    mut load: impl FnMut() -> (&'a Arc<Mount>, T),
) -> (T, MountHold<'a>) {
    loop {
        let start = sync.seq.raw();
        let (m, v) = load();
        if let Some(h) = m.hold(sync, start, true) {
            return (v, h);
        }
    }
}

/// An operation in progress in a mount, counted as one of its users until dropped (so
/// `umount` says `EBUSY` meanwhile); see [`Mount::hold`].
pub struct MountHold<'a>(Option<&'a Mount>);

impl Drop for MountHold<'_> {
    #[inline]
    fn drop(&mut self) {
        if let Some(m) = self.0 {
            m.add_users(-1);
        }
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
/// would bounce it. Instead each thread has, per mount, one [`MountHandle`] (which owns one
/// `Arc<Mount>`), and an open file holds an `Arc` of its thread's handle: the count it
/// touches is that thread's. The thread's table holds its handles weakly: a handle lives
/// while files the thread opened in that mount are open, and nothing in a thread-local
/// table keeps a mount (or its file system) alive after its namespace is dropped.
pub struct MountRef(Arc<MountHandle>);

/// One thread's hold on a mount; see [`MountRef`].
pub struct MountHandle {
    mnt: Arc<Mount>,
}

impl MountRef {
    /// A reference to `m` through this thread's handle.
    #[cfg(loom)]
    pub fn new(m: &Arc<Mount>) -> MountRef {
        // Loom runs its threads on one OS thread: no per-thread table.
        MountRef(Arc::new(MountHandle { mnt: m.clone() }))
    }

    /// A reference to `m` through this thread's handle.
    #[cfg(not(loom))]
    #[inline]
    pub fn new(m: &Arc<Mount>) -> MountRef {
        use std::cell::RefCell;
        use std::sync::Weak;
        type Table = Vec<(*const Mount, Weak<MountHandle>)>;
        thread_local! {
            static HANDLES: RefCell<Table> = const { RefCell::new(Vec::new()) };
        }
        let fresh = || Arc::new(MountHandle { mnt: m.clone() });
        let found = HANDLES.try_with(|h| {
            let mut h = h.borrow_mut();
            let key = Arc::as_ptr(m);
            if let Some(x) = h
                .iter()
                .find(|(k, _)| *k == key)
                .and_then(|(_, w)| w.upgrade())
            {
                return x;
            }
            // The dead (and this mount's, if dead) go; the table stays as small as the set of
            // mounts this thread has files open in.
            h.retain(|(_, w)| w.strong_count() > 0);
            let x = fresh();
            h.push((key, Arc::downgrade(&x)));
            x
        });
        MountRef(found.unwrap_or_else(|_| fresh()))
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

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::memfs::{MemFs, MemFsOptions};
    use loom::thread;

    /// A mount of a small file system on the root of another, and the table's lock and
    /// counter.
    fn setup() -> (Arc<MountSync>, Arc<Mount>) {
        let opts = || MemFsOptions {
            hash_buckets: 1,
            ..Default::default()
        };
        let base = MemFs::new(opts());
        let root = Arc::new(Mount::new(1, base.clone(), base.root().clone(), None));
        let fs = MemFs::new(opts());
        let m = Arc::new(Mount::new(
            2,
            fs.clone(),
            fs.root().clone(),
            Some((root, base.root().clone())),
        ));
        (Arc::new(MountSync::new()), m)
    }

    /// How a holder takes its hold: the real protocol, or broken ones.
    #[derive(Clone, Copy)]
    enum Holder {
        Real {
            locked: bool,
        },
        /// Before issue 8, a locked walk counted itself in and confirmed nothing.
        NoConfirm,
        /// Counts in and reads the counter without a fence between.
        NoFence,
    }

    /// umount races with a holder whose walk found the mount in the table (`attached`) and
    /// then takes its hold. Both may not succeed: a mount that umount detached is held by
    /// nobody. Returns whether some execution broke that (a panic inside a model would
    /// unwind through loom objects outside their execution).
    fn handshake_model(how: Holder) -> bool {
        let broken = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        let seen = broken.clone();
        b.check(move || {
            let (sync, m) = setup();
            let attached = Arc::new(AtomicBool::new(true));
            let u = {
                let (sync, m, attached) = (sync.clone(), m.clone(), attached.clone());
                thread::spawn(move || {
                    let _l = sync.lock.lock();
                    sync.seq.write_begin();
                    let ok = m.detach_if_unused();
                    if ok {
                        attached.store(false, SeqCst);
                    }
                    sync.seq.write_end();
                    ok
                })
            };
            // The holder's walk: the mount sequence when it began, then the crossing.
            let start = sync.seq.raw();
            let (held, hold) = if attached.load(SeqCst) {
                match how {
                    Holder::Real { locked } => {
                        let h = m.hold(&sync, start, locked);
                        (h.is_some(), h)
                    }
                    Holder::NoConfirm => {
                        m.users.add(1);
                        (true, None)
                    }
                    Holder::NoFence => {
                        m.users.add(1);
                        (start & 1 == 0 && sync.seq.raw() == start, None)
                    }
                }
            } else {
                (false, None)
            };
            let detached = u.join().unwrap();
            if held && detached {
                seen.store(true, std::sync::atomic::Ordering::SeqCst);
            }
            drop(hold);
        });
        broken.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The protocol between a call that starts from the working directory and `chdir`:
    /// the real one, or broken ones.
    #[derive(Clone, Copy, PartialEq)]
    enum Reader {
        /// The call loads the working directory and holds its mount (`hold_published`),
        /// as `Process::held_ctx` does; `chdir` gives the count back with
        /// `release_published`.
        Held,
        /// The call trusts the working directory's own count, which `chdir` now gives back
        /// at once.
        Trusting,
        /// `chdir` gives the count back without ordering its store before it.
        UnfencedChdir,
    }

    /// `chdir` moves a process's working directory out of a mount and gives its count back
    /// at once; `umount` races with it and with a call that starts from the working
    /// directory. The call working in the mount and `umount` detaching it may not both
    /// happen. Returns whether some execution broke that.
    fn published_model(how: Reader) -> bool {
        let broken = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        let seen = broken.clone();
        b.check(move || {
            let (sync, m) = setup();
            let root = m.parent.as_ref().expect("a submount").0.clone();
            // The working directory, in `m` (0) or at the root (1), and its count.
            let cwd = Arc::new(crate::sync::AtomicUsize::new(0));
            m.users.add(1);
            let c = {
                let (m, cwd) = (m.clone(), cwd.clone());
                thread::spawn(move || {
                    cwd.swap(1, SeqCst);
                    if how == Reader::UnfencedChdir {
                        m.users.add(-1);
                    } else {
                        m.release_published();
                    }
                })
            };
            let u = {
                let (sync, m) = (sync.clone(), m.clone());
                thread::spawn(move || {
                    let _l = sync.lock.lock();
                    sync.seq.write_begin();
                    let ok = m.detach_if_unused();
                    sync.seq.write_end();
                    ok
                })
            };
            let (in_m, hold) = match how {
                Reader::Held | Reader::UnfencedChdir => {
                    let (in_m, h) = hold_published(&sync, || {
                        if cwd.load(SeqCst) == 0 {
                            (&m, true)
                        } else {
                            (&root, false)
                        }
                    });
                    (in_m, Some(h))
                }
                Reader::Trusting => (cwd.load(SeqCst) == 0, None),
            };
            let detached = u.join().unwrap();
            c.join().unwrap();
            if in_m && detached {
                seen.store(true, std::sync::atomic::Ordering::SeqCst);
            }
            drop(hold);
        });
        broken.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// A call starting from a working directory that `chdir` is moving out of a mount
    /// holds that mount against `umount`.
    #[test]
    fn working_directory_against_chdir_and_umount() {
        assert!(!published_model(Reader::Held));
    }

    /// The model catches a call that trusts the working directory's count.
    #[test]
    fn working_directory_trusted_fails() {
        assert!(published_model(Reader::Trusting));
    }

    /// And a `chdir` that gives its count back before its store is ordered.
    #[test]
    fn working_directory_unfenced_chdir_fails() {
        assert!(published_model(Reader::UnfencedChdir));
    }

    /// The umount handshake, for a lockless walk's hold.
    #[test]
    fn umount_handshake_fast() {
        assert!(!handshake_model(Holder::Real { locked: false }));
    }

    /// The umount handshake, for a locked walk's hold (issue 8, defect 6).
    #[test]
    fn umount_handshake_locked() {
        assert!(!handshake_model(Holder::Real { locked: true }));
    }

    /// The model catches the locked walk's old behaviour.
    #[test]
    fn umount_handshake_without_confirm_fails() {
        assert!(handshake_model(Holder::NoConfirm));
    }

    /// And a holder that does not order its count before its read.
    #[test]
    fn umount_handshake_without_fence_fails() {
        assert!(handshake_model(Holder::NoFence));
    }
}
