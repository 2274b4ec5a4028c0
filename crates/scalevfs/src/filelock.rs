//! File locks: `flock(2)` locks and `fcntl(2)` record locks, both the process-owned
//! ("POSIX") kind and the open-file-description ("OFD") kind. Advisory, as on Linux: they
//! bind only callers that ask for them. The engine keeps them for every file system, so a
//! hostfs file's locks are the engine's, not the host's.
//!
//! # Mechanism
//! The records of a file live in seed 002's padded table of hashed locks ([`LockTable`]),
//! keyed by the address of the file's [`Inode`]: a call locks the one slot of its file and
//! nothing else, so two callers locking unrelated files share no lock and no line. A file
//! has two lists, as on Linux, which never conflict with each other:
//! - `flock` records: (description, shared or exclusive). A description holds at most one;
//!   a conversion drops the old lock before it waits for the new one, as Linux does.
//! - record locks: byte ranges `[start, end]` (inclusive; `end` = `i64::MAX` for "to the
//!   end of the file, however it grows"), each of one owner: a process's descriptor table
//!   ([`Owner::Process`]), a frontend's owner ([`Owner::Frontend`], FUSE's `lock_owner`), or
//!   a description ([`Owner::Desc`], an OFD lock). One owner's records never overlap, and
//!   two of its records of one type are never adjacent: a request merges with them, and
//!   splits records of the other type, as Linux's `posix_lock_inode` does.
//!
//! A request that conflicts either fails (`EAGAIN`) or waits on the slot's condition
//! variable ([`LockTable::wait`]); every change that can let a waiter in (an unlock, a
//! downgrade, a close) wakes the slot's waiters, and each checks again.
//!
//! ## Deadlock detection
//! Linux's: a process-owned request that would wait on a lock of another process-owned
//! owner follows the chain "what is that owner waiting for" through the waits-for edges of
//! every blocked waiter (`waits`, one global list, taken only on the blocking path), at most
//! ten steps; if the chain comes back to the requester, the request fails with `EDEADLK`.
//! A waiter records its edge when its blocker is not an OFD lock (Linux's
//! `__locks_insert_block`); an OFD request is never refused for a deadlock (Linux's
//! detector cannot name an OFD lock's owner either). `flock` waits are not checked, as on
//! Linux.
//!
//! ## Release
//! - A close of a descriptor drops its process's record locks on the file (POSIX's rule,
//!   whichever descriptor took them); a frontend drops its owner's ([`Locks::drop_owner`]:
//!   FUSE's flush).
//! - The last reference to a description (descriptor or handle) drops its `flock` and OFD
//!   locks.
//! - An inode's eviction drops whatever is left ([`Locks::purge`]), and so does the drop of
//!   its memory (a file system torn down with its files cached evicts nothing): no record
//!   outlives its inode, so an address is never reused as a key with records still under
//!   it.
//!
//! A close must not pay for this: it reads `Inode::has_locks` and looks at the table only
//! if it is set. That flag is set by every request that adds a record and cleared when the
//! file's records are gone, both under the slot. A request racing a close of the same
//! descriptor (or the last close of its description) is the one race that needs care, and
//! is Linux's "close/fcntl race". Each side makes a read-modify-write on the one word they
//! share (the descriptor's slot in its table, or the description's reference count), then
//! reads the other's word:
//! - the request stores the flag (under the file's slot), then, once it has let go of the
//!   slot, checks its descriptor with a read-modify-write (a compare-and-swap of the slot
//!   with itself; `fetch_add(0)` of the count), and if it is gone takes the slot again to
//!   undo its record (Linux's `fcntl_setlk` does the same, and answers a process's
//!   request `EBADF`; a description's lock succeeds, as Linux's final close drops it
//!   there). The check is made outside the
//!   slot because it pins the epoch, and a pin may run deferred drops: an inode's drop
//!   purges its records, and takes a slot;
//! - the close swaps the slot out (or decrements the count), then loads the flag.
//!
//! Read-modify-writes of one word are totally ordered, and each reads the one before it.
//! If the request's comes first, the close's reads from it and so sees the flag: the close
//! drops the record under the slot. If the close's comes first, the request sees the
//! descriptor gone, and undoes its record. A plain load on
//! the request's side would not do: it could read the count from before the close, while
//! the close's load of the flag reads from before the store (store buffering); `SeqCst`
//! loads and stores would, but loom models them as acquire/release only, and a fence on
//! every close would cost the close path. The close path pays nothing new: it already
//! made that read-modify-write, and the flag's load is a plain load on x86. Loom models
//! both halves (`loom_models` below), and fails when the check is a load.
//!
//! # Lock order
//! A slot of the table, then `waits` (a leaf, taken only by a request about to wait). A
//! caller holds one slot at a time, and calls nothing outside this module while it holds it.
//!
//! # Fields outside a lock
//! `Inode::has_locks`, described above. Everything else is inside a slot or `waits`.

use std::collections::HashMap;
use std::sync::atomic::Ordering::{Relaxed, Release};

use crate::errno::{Errno, Result};
use crate::inode::Inode;
use crate::locktable::LockTable;
use crate::sync::{AtomicU64, Mutex};
use crate::types::limits;

/// The largest offset a record lock can name (`OFFSET_MAX`): a record ending here runs to
/// the end of the file, however it grows.
pub(crate) const OFFSET_MAX: u64 = i64::MAX as u64;

/// Linux's `MAX_DEADLK_ITERATIONS`: how far the detector follows a chain of waiters.
const MAX_DEADLK_ITERATIONS: usize = 10;

/// Who owns a lock.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub(crate) enum Owner {
    /// A process's descriptor table, by its number (`FdTable::id`).
    Process(u64),
    /// An owner named by a frontend (FUSE's `lock_owner`).
    Frontend(u64),
    /// An open file description, by its address: an OFD lock, or a `flock` lock.
    Desc(usize),
}

impl Owner {
    fn is_ofd(self) -> bool {
        matches!(self, Owner::Desc(_))
    }
}

/// One record lock.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Rec {
    pub owner: Owner,
    pub write: bool,
    pub start: u64,
    /// Inclusive; [`OFFSET_MAX`] for the end of the file.
    pub end: u64,
    /// What `F_GETLK` reports as its holder.
    pub pid: i32,
}

impl Rec {
    fn overlaps(&self, start: u64, end: u64) -> bool {
        self.start <= end && start <= self.end
    }

    /// Whether `self` and `r` cannot both be held: two owners, a shared byte, a writer.
    fn conflicts(&self, r: &Rec) -> bool {
        self.owner != r.owner && (self.write || r.write) && self.overlaps(r.start, r.end)
    }

    /// Whether `self` overlaps `[start, end]` or touches it end to end.
    fn touches(&self, start: u64, end: u64) -> bool {
        self.start <= end.saturating_add(1) && start <= self.end.saturating_add(1)
    }
}

/// One file's locks.
#[derive(Default, Debug)]
struct FileLocks {
    posix: Vec<Rec>,
    /// (description, exclusive).
    flock: Vec<(usize, bool)>,
    /// Record-lock requests waiting on this file with an edge in `waits`, so that a
    /// release here looks at `waits` only when one may name it.
    edges: u32,
}

impl FileLocks {
    fn is_empty(&self) -> bool {
        self.posix.is_empty() && self.flock.is_empty() && self.edges == 0
    }
}

/// The files of one slot, by inode address.
#[derive(Default)]
pub(crate) struct Files(HashMap<usize, FileLocks>);

/// A blocked request's edge in the waits-for graph: `waiter` waits for a lock of `blocker`
/// on the file at `file`. Linux's: the edge goes when the blocker lets go of a lock there
/// (the waiter, woken, finds its blocker again and records a new edge if it must wait
/// again), and when the request ends. A stale edge, one whose blocker let go but whose
/// waiter has not run yet, would make the detector see cycles that are not there.
struct Wait {
    waiter: Owner,
    blocker: Owner,
    file: usize,
    ticket: u64,
}

/// The engine's file locks. See the module docs.
pub(crate) struct Locks {
    table: LockTable<Files>,
    waits: Mutex<Vec<Wait>>,
    tickets: AtomicU64,
}

/// The engine's one table (inode addresses are unique in the process).
#[cfg(not(loom))]
pub(crate) fn global() -> &'static Locks {
    static LOCKS: std::sync::OnceLock<Locks> = std::sync::OnceLock::new();
    LOCKS.get_or_init(Locks::new)
}

/// Under loom each model makes its own table; the engine's paths that reach the global one
/// (a close of a locked file) are not modelled.
#[cfg(loom)]
pub(crate) fn global() -> &'static Locks {
    unreachable!("loom models make their own Locks")
}

fn key(inode: &Inode) -> usize {
    inode as *const Inode as usize
}

impl Locks {
    pub(crate) fn new() -> Locks {
        Locks {
            table: LockTable::new(),
            waits: Mutex::new(Vec::new()),
            tickets: AtomicU64::new(0),
        }
    }

    /// `F_GETLK`: the first record that conflicts with `req`, if any; with `unlock`
    /// (`F_OFD_GETLK` of `F_UNLCK`, Linux 6.12's probe), the first of `req`'s owner's own
    /// records that overlaps it.
    pub(crate) fn test(&self, inode: &Inode, req: &Rec, unlock: bool) -> Option<Rec> {
        let k = key(inode);
        let g = self.table.lock(k as u64);
        let mut recs = g.0.get(&k)?.posix.iter();
        if unlock {
            recs.find(|r| r.owner == req.owner && r.overlaps(req.start, req.end))
        } else {
            recs.find(|r| r.conflicts(req))
        }
        .copied()
    }

    /// `F_SETLK`/`F_SETLKW` (and their OFD forms): takes `req` (a read or write lock) or,
    /// with `unlock`, removes the owner's locks in its range. `wait`: wait for conflicting
    /// locks to go instead of failing with `EAGAIN`; `EDEADLK` if waiting would deadlock.
    /// `open` says whether the descriptor the request came through is still open; checked
    /// after the record is stored (see "Release" in the module docs).
    pub(crate) fn set_posix(
        &self,
        inode: &Inode,
        req: Rec,
        unlock: bool,
        wait: bool,
        open: impl Fn() -> bool,
    ) -> Result<()> {
        let k = key(inode);
        let mut g = self.table.lock(k as u64);
        let mut ticket = None;
        let res = loop {
            let found = match g.0.get_mut(&k) {
                Some(fl) if !unlock => {
                    let b = fl.posix.iter().find(|r| r.conflicts(&req)).map(|b| b.owner);
                    b.map(|b| (b, fl))
                }
                _ => None,
            };
            if let Some((blocker, fl)) = found {
                if !wait {
                    break Err(Errno::EAGAIN);
                }
                if let Err(e) = self.note_wait(fl, k, &mut ticket, req.owner, blocker) {
                    break Err(e);
                }
                g = self.table.wait(k as u64, g);
                continue;
            }
            if unlock && !g.0.contains_key(&k) {
                break Ok(());
            }
            let fl = g.0.entry(k).or_default();
            match apply(&mut fl.posix, &req, unlock) {
                Err(e) => break Err(e),
                Ok(changed) => {
                    if !unlock {
                        inode.has_locks.store(true, Release);
                    }
                    if changed {
                        self.release_edges(fl, k, Some(req.owner));
                        self.table.wake(k as u64);
                    }
                    break Ok(());
                }
            }
        };
        if let (Some(t), Some(fl)) = (ticket, g.0.get_mut(&k)) {
            // Under the slot: once this request holds its lock, no edge may say it waits.
            self.forget_edge(fl, t);
        }
        tidy(&mut g, k, inode);
        drop(g);
        // Outside the slot: `open` may pin the epoch, and a pin may run deferred drops,
        // an inode's among them, whose purge takes a slot (perhaps this one).
        if res.is_ok() && !unlock && !open() {
            // The descriptor was closed meanwhile; its close may not have seen this
            // record. Undo it, as Linux's fcntl_setlk does.
            let mut g = self.table.lock(k as u64);
            if let Some(fl) = g.0.get_mut(&k) {
                let _ = apply(&mut fl.posix, &req, true);
                self.release_edges(fl, k, Some(req.owner));
                self.table.wake(k as u64);
            }
            tidy(&mut g, k, inode);
            // Linux's fcntl_setlk tells the process: EBADF. It does not check a
            // description's (OFD) lock, which its final close drops: success.
            if matches!(req.owner, Owner::Process(_)) {
                return Err(Errno::EBADF);
            }
        }
        res
    }

    /// Removes the edges of requests waiting on this file for `blocker` (any blocker for
    /// `None`): it let go of a lock here. The caller holds the file's slot and wakes it.
    fn release_edges(&self, fl: &mut FileLocks, k: usize, blocker: Option<Owner>) {
        if fl.edges == 0 {
            return;
        }
        let mut w = self.waits.lock();
        let before = w.len();
        w.retain(|e| !(e.file == k && blocker.map_or(true, |b| e.blocker == b)));
        fl.edges -= (before - w.len()) as u32;
    }

    /// Removes the edge `ticket` if it is still there. The caller holds the file's slot.
    fn forget_edge(&self, fl: &mut FileLocks, ticket: u64) {
        if fl.edges == 0 {
            return;
        }
        let mut w = self.waits.lock();
        if let Some(i) = w.iter().position(|e| e.ticket == ticket) {
            w.swap_remove(i);
            fl.edges -= 1;
        }
    }

    /// Before a request waits on a lock of `blocker`: refuses it if the wait would close a
    /// cycle (`EDEADLK`), and records (or moves) the requester's edge. The caller holds its
    /// file's slot.
    fn note_wait(
        &self,
        fl: &mut FileLocks,
        k: usize,
        ticket: &mut Option<u64>,
        me: Owner,
        blocker: Owner,
    ) -> Result<()> {
        if let Some(t) = ticket.take() {
            self.forget_edge(fl, t);
        }
        if blocker.is_ofd() {
            return Ok(());
        }
        let mut w = self.waits.lock();
        if !me.is_ofd() && deadlocked(&w, me, blocker) {
            return Err(Errno::EDEADLK);
        }
        let t = self.tickets.fetch_add(1, Relaxed);
        w.push(Wait {
            waiter: me,
            blocker,
            file: k,
            ticket: t,
        });
        fl.edges += 1;
        *ticket = Some(t);
        Ok(())
    }

    /// `flock(2)` for the description at `desc`: `Some(exclusive)` takes a lock, `None`
    /// drops the one it has. `wait`: wait instead of failing with `EAGAIN` (`LOCK_NB`'s
    /// `EWOULDBLOCK`). `open` as in [`Locks::set_posix`], for the description.
    pub(crate) fn flock(
        &self,
        inode: &Inode,
        desc: usize,
        want: Option<bool>,
        wait: bool,
        open: impl Fn() -> bool,
    ) -> Result<()> {
        let k = key(inode);
        let mut g = self.table.lock(k as u64);
        if let Some(fl) = g.0.get_mut(&k) {
            if let Some(i) = fl.flock.iter().position(|&(d, _)| d == desc) {
                if Some(fl.flock[i].1) == want {
                    return Ok(());
                }
                // A conversion drops the old lock first, and may lose it (Linux does so).
                fl.flock.swap_remove(i);
                self.table.wake(k as u64);
            }
        }
        let res = match want {
            None => Ok(()),
            Some(excl) => loop {
                let busy =
                    g.0.get(&k)
                        .is_some_and(|fl| fl.flock.iter().any(|&(d, x)| d != desc && (x || excl)));
                if !busy {
                    g.0.entry(k).or_default().flock.push((desc, excl));
                    inode.has_locks.store(true, Release);
                    break Ok(());
                }
                if !wait {
                    break Err(Errno::EAGAIN);
                }
                g = self.table.wait(k as u64, g);
            },
        };
        tidy(&mut g, k, inode);
        drop(g);
        // Outside the slot, as in `set_posix`.
        if res.is_ok() && want.is_some() && !open() {
            let mut g = self.table.lock(k as u64);
            if let Some(fl) = g.0.get_mut(&k) {
                fl.flock.retain(|&(d, _)| d != desc);
                self.table.wake(k as u64);
            }
            tidy(&mut g, k, inode);
        }
        res
    }

    /// Drops every lock `owner` holds on the file: a close's record locks (a process or a
    /// frontend owner), or a description's `flock` and OFD locks at its last reference.
    /// The owner's requests still waiting go on, as on Linux (and are undone when granted
    /// if their own descriptor was the one closed).
    pub(crate) fn drop_owner(&self, inode: &Inode, owner: Owner) {
        let k = key(inode);
        let mut g = self.table.lock(k as u64);
        if let Some(fl) = g.0.get_mut(&k) {
            let before = fl.posix.len() + fl.flock.len();
            fl.posix.retain(|r| r.owner != owner);
            if let Owner::Desc(d) = owner {
                fl.flock.retain(|&(x, _)| x != d);
            }
            if fl.posix.len() + fl.flock.len() != before {
                self.release_edges(fl, k, Some(owner));
                self.table.wake(k as u64);
            }
        }
        tidy(&mut g, k, inode);
    }

    /// Drops whatever is left of the file's locks: it is being evicted, and no description
    /// of it is left.
    pub(crate) fn purge(&self, inode: &Inode) {
        let k = key(inode);
        let mut g = self.table.lock(k as u64);
        if let Some(mut fl) = g.0.remove(&k) {
            self.release_edges(&mut fl, k, None);
            self.table.wake(k as u64);
        }
        inode.has_locks.store(false, Relaxed);
    }

    /// The file's record locks, sorted (for tests).
    #[cfg(all(test, loom))]
    pub(crate) fn records(&self, inode: &Inode) -> Vec<Rec> {
        let k = key(inode);
        let g = self.table.lock(k as u64);
        let mut v = g.0.get(&k).map(|f| f.posix.clone()).unwrap_or_default();
        v.sort_by_key(|r| (r.start, r.end));
        v
    }
}

/// Forgets a file with no locks left, and clears its flag. The caller holds its slot.
fn tidy(g: &mut Files, k: usize, inode: &Inode) {
    if g.0.get(&k).is_some_and(FileLocks::is_empty) {
        g.0.remove(&k);
        inode.has_locks.store(false, Relaxed);
    }
}

/// Whether `blocker`'s chain of waits leads back to `me` within Linux's bound.
fn deadlocked(waits: &[Wait], me: Owner, blocker: Owner) -> bool {
    let mut o = blocker;
    for _ in 0..=MAX_DEADLK_ITERATIONS {
        match waits.iter().find(|w| w.waiter == o) {
            Some(w) if w.blocker == me => return true,
            Some(w) => o = w.blocker,
            None => return false,
        }
    }
    false
}

/// Applies `req` to one file's record locks: its owner's records in the range are replaced
/// (merged with those of the same type that overlap or touch it; split where another type
/// sticks out), or with `unlock` removed. Returns whether another owner could now get in
/// (a record of the owner shrank or changed type). `ENOLCK` (nothing changed) past
/// [`limits::LOCKS_PER_FILE`] records.
///
/// The list is kept in Linux's order, which `F_GETLK` shows when several locks conflict:
/// each owner's records together and sorted by start, the owners in the order they came.
fn apply(v: &mut Vec<Rec>, req: &Rec, unlock: bool) -> Result<bool> {
    let at = v
        .iter()
        .position(|r| r.owner == req.owner)
        .unwrap_or(v.len());
    let (mut start, mut end) = (req.start, req.end);
    let mut mine = Vec::new();
    let mut changed = false;
    for r in v.iter().filter(|r| r.owner == req.owner) {
        if !r.touches(req.start, req.end) {
            mine.push(*r);
        } else if !unlock && r.write == req.write {
            start = start.min(r.start);
            end = end.max(r.end);
        } else if !r.overlaps(req.start, req.end) {
            // Touches end to end, of the other type: stays as it is.
            mine.push(*r);
        } else {
            changed = true;
            if r.start < req.start {
                mine.push(Rec {
                    end: req.start - 1,
                    ..*r
                });
            }
            if r.end > req.end {
                mine.push(Rec {
                    start: req.end + 1,
                    ..*r
                });
            }
        }
    }
    if !unlock {
        mine.push(Rec { start, end, ..*req });
    }
    mine.sort_unstable_by_key(|r| r.start);
    let others = v.iter().filter(|r| r.owner != req.owner).count();
    if others + mine.len() > limits::LOCKS_PER_FILE {
        return Err(Errno::ENOLCK);
    }
    // Everything before `at` is another owner's.
    let after: Vec<Rec> = v[at..]
        .iter()
        .filter(|r| r.owner != req.owner)
        .copied()
        .collect();
    v.truncate(at);
    v.extend(mine);
    v.extend(after);
    Ok(changed)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn rec(owner: u64, write: bool, start: u64, end: u64) -> Rec {
        Rec {
            owner: Owner::Process(owner),
            write,
            start,
            end,
            pid: owner as i32,
        }
    }

    /// A byte-by-byte model of one owner's locks: `None`, `Some(false)` read, `Some(true)`.
    fn model(v: &[Rec], owner: u64, len: u64) -> Vec<Option<bool>> {
        (0..len)
            .map(|b| {
                v.iter()
                    .find(|r| r.owner == Owner::Process(owner) && r.start <= b && b <= r.end)
                    .map(|r| r.write)
            })
            .collect()
    }

    #[test]
    fn merges_splits_and_unlocks_as_linux() {
        let mut v = Vec::new();
        apply(&mut v, &rec(1, false, 0, 9), false).unwrap();
        apply(&mut v, &rec(1, false, 10, 19), false).unwrap();
        assert_eq!(
            v,
            vec![rec(1, false, 0, 19)],
            "adjacent, same type: one record"
        );
        assert!(apply(&mut v, &rec(1, true, 5, 7), false).unwrap());
        v.sort_by_key(|r| r.start);
        assert_eq!(
            v,
            vec![
                rec(1, false, 0, 4),
                rec(1, true, 5, 7),
                rec(1, false, 8, 19)
            ]
        );
        assert!(apply(&mut v, &rec(1, false, 0, 19), true).unwrap());
        assert!(v.is_empty());
        // To the end of the file.
        apply(&mut v, &rec(1, true, 100, OFFSET_MAX), false).unwrap();
        apply(&mut v, &rec(1, true, 0, 99), false).unwrap();
        assert_eq!(v, vec![rec(1, true, 0, OFFSET_MAX)]);
        apply(&mut v, &rec(1, true, 50, 50), true).unwrap();
        v.sort_by_key(|r| r.start);
        assert_eq!(v, vec![rec(1, true, 0, 49), rec(1, true, 51, OFFSET_MAX)]);
    }

    proptest::proptest! {
        // This module has no unsafe code: under Miri, a few cases only.
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(
            if cfg!(miri) { 4 } else { 256 }))]
        /// Random requests of two owners against a byte model: one owner's records never
        /// overlap, same-type neighbours are merged, and every byte has the type the last
        /// request over it gave; the other owner's records are untouched.
        #[test]
        fn agrees_with_a_byte_model(ops in proptest::collection::vec(
            (0u64..2, 0u8..3, 0u64..40, 1u64..12), 1..60)) {
            let len = 64;
            let mut v: Vec<Rec> = Vec::new();
            let mut bytes = [vec![None; len as usize], vec![None; len as usize]];
            for (o, t, s, l) in ops {
                let r = rec(o, t == 1, s, s + l - 1);
                apply(&mut v, &r, t == 2).unwrap();
                for b in s..s + l {
                    bytes[o as usize][b as usize] = (t != 2).then_some(t == 1);
                }
                for o in 0..2 {
                    proptest::prop_assert_eq!(&model(&v, o, len), &bytes[o as usize]);
                    let mut mine: Vec<_> =
                        v.iter().filter(|r| r.owner == Owner::Process(o)).collect();
                    mine.sort_by_key(|r| r.start);
                    for w in mine.windows(2) {
                        proptest::prop_assert!(w[0].end < w[1].start, "overlap {:?}", w);
                        proptest::prop_assert!(
                            w[0].end + 1 < w[1].start || w[0].write != w[1].write,
                            "not merged {:?}", w);
                    }
                }
            }
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "4,096 records, quadratic; no unsafe code here")]
    fn too_many_records_is_enolck_and_changes_nothing() {
        let mut v = Vec::new();
        for i in 0..limits::LOCKS_PER_FILE as u64 {
            apply(&mut v, &rec(1, true, 2 * i, 2 * i), false).unwrap();
        }
        let before = v.clone();
        let next = 2 * limits::LOCKS_PER_FILE as u64;
        assert_eq!(
            apply(&mut v, &rec(1, true, next, next), false),
            Err(Errno::ENOLCK)
        );
        // Splitting a record in two needs one more, too.
        let mut w = vec![rec(1, true, 0, 10)];
        w.extend(
            before[1..]
                .iter()
                .map(|r| rec(1, true, r.start + 20, r.end + 20)),
        );
        assert_eq!(apply(&mut w, &rec(1, true, 5, 5), true), Err(Errno::ENOLCK));
        assert_eq!(v, before);
        // Merging needs none.
        apply(&mut v, &rec(1, true, 1, 1), false).unwrap();
        assert_eq!(v.len(), limits::LOCKS_PER_FILE - 1);
    }

    #[test]
    fn the_detector_follows_chains_up_to_linux_bound() {
        let p = Owner::Process;
        let chain = |n: u64| -> Vec<Wait> {
            (1..n)
                .map(|i| Wait {
                    waiter: p(i),
                    blocker: p(i + 1),
                    file: 0,
                    ticket: i,
                })
                .collect()
        };
        // 1 waits for 2, ..., n-1 waits for n; n asking to wait for 1 closes the cycle.
        assert!(deadlocked(&chain(5), p(5), p(1)));
        assert!(!deadlocked(&chain(5), p(6), p(1)));
        assert!(deadlocked(&chain(12), p(12), p(1)));
        assert!(
            !deadlocked(&chain(13), p(13), p(1)),
            "past ten steps: not seen"
        );
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    //! The close/lock race (see "Release" in the module docs), on a description's
    //! reference count standing in for a descriptor table's slot: a request on one thread
    //! adds a lock and checks the description is still referenced; the last close on
    //! another drops the reference, then looks at the flag. In every interleaving no record
    //! outlives the close. With the request's check made a plain load, both models fail
    //! (a record left after the close; checked by hand, 2026-11-25).
    use super::*;
    use loom::sync::atomic::AtomicU32;
    use loom::sync::Arc;
    use std::sync::atomic::Ordering::{AcqRel, Acquire};

    fn special() -> Inode {
        let t = crate::types::Timespec::default();
        Inode::new(
            1,
            crate::types::mode::S_IFIFO | 0o644,
            0,
            0,
            crate::inode::Contents::Special(0),
            t,
        )
    }

    fn model(use_flock: bool) {
        loom::model(move || {
            let locks = Arc::new(Locks::new());
            let inode = Arc::new(special());
            let refs = Arc::new(AtomicU32::new(1));
            let (l2, i2, r2) = (locks.clone(), inode.clone(), refs.clone());
            let closer = loom::thread::spawn(move || {
                if r2.fetch_sub(1, AcqRel) == 1 && i2.has_locks.load(Acquire) {
                    l2.drop_owner(&i2, Owner::Desc(1));
                }
            });
            let open = || refs.fetch_add(0, AcqRel) > 0;
            if use_flock {
                locks.flock(&inode, 1, Some(true), false, open).unwrap();
            } else {
                let req = Rec {
                    owner: Owner::Desc(1),
                    write: true,
                    start: 0,
                    end: OFFSET_MAX,
                    pid: -1,
                };
                locks.set_posix(&inode, req, false, false, open).unwrap();
            }
            closer.join().unwrap();
            assert!(
                locks.records(&inode).is_empty(),
                "a record outlived the close"
            );
            let k = key(&inode);
            assert!(locks.table.lock(k as u64).0.get(&k).is_none());
            assert!(!inode.has_locks.load(Relaxed));
        });
    }

    #[test]
    fn no_ofd_lock_outlives_a_racing_close() {
        model(false);
    }

    #[test]
    fn no_flock_outlives_a_racing_close() {
        model(true);
    }

    /// A waiter and an unlocker: the unlock's wake-up is never lost (loom reports a waiter
    /// left asleep as a deadlock). Without the wake-up in `flock`'s unlock, loom reports
    /// `deadlock; threads = [(Id(0), Blocked), (Id(1), Blocked)]` (checked by hand,
    /// 2026-11-25; not kept as a test: loom aborts the process on a deadlock).
    #[test]
    fn an_unlock_wakes_its_waiter() {
        loom::model(|| {
            let locks = Arc::new(Locks::new());
            let inode = Arc::new(special());
            locks.flock(&inode, 1, Some(true), false, || true).unwrap();
            let (l2, i2) = (locks.clone(), inode.clone());
            let waiter = loom::thread::spawn(move || l2.flock(&i2, 2, Some(true), true, || true));
            locks.flock(&inode, 1, None, false, || true).unwrap();
            waiter.join().unwrap().unwrap();
            let k = key(&inode);
            assert_eq!(locks.table.lock(k as u64).0[&k].flock, vec![(2, true)]);
            locks.drop_owner(&inode, Owner::Desc(2));
            assert!(!inode.has_locks.load(Relaxed));
        });
    }
}
