//! The one place that names atomics for the engine's small protocols, and the protocols
//! themselves: a sequence counter ([`SeqCount`]), a reference count with a dead state
//! ([`RefCount`]), a striped counter ([`StripedCounter`]) and a table of hashed locks
//! ([`LockTable`]).
//!
//! Under `--cfg loom` the atomics of [`SeqCount`] and [`RefCount`] come from loom, so the
//! models in `tests` below explore every interleaving of the protocols.
//!
//! # Sequence counter
//! A writer holds the lock of the object it changes, makes the count odd
//! ([`SeqCount::write_begin`]), stores the fields with relaxed atomic stores, and makes it
//! even again ([`SeqCount::write_end`]). A reader samples an even count
//! ([`SeqCount::read_begin`]), loads the fields with relaxed atomic loads, and keeps what it
//! read only if [`SeqCount::read_retry`] says the count did not move. Every protected field
//! is itself an atomic, so a torn read is a stale value, never undefined behaviour; the
//! count only tells whether the set of values is consistent.
//!
//! | count | meaning |
//! |---|---|
//! | even | no writer; fields stable while it stays the same |
//! | odd | a writer is between `write_begin` and `write_end`; readers retry |
//!
//! # Reference count with a dead state
//! [`RefCount`] is one word: the count in the low bits and [`RefCount::DEAD`] above them.
//!
//! | state | meaning | transitions |
//! |---|---|---|
//! | `n > 0` | live, `n` holders | `get`/`try_get`: n+1; `put`: n-1 |
//! | `0` | no holder; may still be revived by `try_get` from a reader that found the object under an epoch guard | `try_get`: 1; `put`'s CAS: DEAD |
//! | `DEAD` | destruction is decided; `try_get` fails forever | none |
//!
//! `put` that drops the count to zero then tries `0 -> DEAD`; exactly one caller wins that
//! CAS and destroys the object (after a grace period), even when a reviver races with it.

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU32, AtomicU64};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU32, AtomicU64};

use crossbeam_utils::CachePadded;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};

/// A sequence counter. See the module docs for the protocol.
#[derive(Debug, Default)]
pub struct SeqCount(AtomicU32);

impl SeqCount {
    /// A counter at zero (even: no writer).
    #[cfg(not(loom))]
    pub const fn new() -> SeqCount {
        SeqCount(AtomicU32::new(0))
    }

    /// A counter at zero (even: no writer).
    #[cfg(loom)]
    pub fn new() -> SeqCount {
        SeqCount(AtomicU32::new(0))
    }

    /// Samples the count, or `None` while a writer is active (the caller retries or falls
    /// back).
    #[inline]
    pub fn read_begin(&self) -> Option<u32> {
        let s = self.0.load(Acquire);
        if s & 1 == 0 {
            Some(s)
        } else {
            None
        }
    }

    /// Samples the count, spinning while a writer is active.
    #[inline]
    pub fn read_begin_spin(&self) -> u32 {
        loop {
            if let Some(s) = self.read_begin() {
                return s;
            }
            std::hint::spin_loop();
        }
    }

    /// Whether the values read since `read_begin` returned `start` may be inconsistent.
    #[inline]
    pub fn read_retry(&self, start: u32) -> bool {
        // Orders the relaxed field loads before the second count load.
        fence(Acquire);
        self.0.load(Relaxed) != start
    }

    /// The count as it is now, without waiting for a writer (for validation only).
    #[inline]
    pub fn raw(&self) -> u32 {
        self.0.load(Acquire)
    }

    /// Starts a write. The caller holds the lock that serializes writers of this counter.
    #[inline]
    pub fn write_begin(&self) {
        // An RMW with SeqCst: stores made after it cannot be seen by a reader that still
        // sees the old even count, and it orders against `RefCount` CASes (see dentry docs).
        let prev = self.0.fetch_add(1, SeqCst);
        debug_assert!(prev & 1 == 0, "nested seqcount writer");
        fence(Release);
    }

    /// Ends a write begun by [`SeqCount::write_begin`].
    #[inline]
    pub fn write_end(&self) {
        let prev = self.0.fetch_add(1, Release);
        debug_assert!(prev & 1 == 1, "seqcount write_end without write_begin");
    }

    /// Marks a change without storing anything under it (for example, "this name was
    /// reused"): invalidates every reader that sampled the count before.
    #[inline]
    pub fn bump(&self) {
        self.write_begin();
        self.write_end();
    }
}

/// A reference count with a dead state. See the module docs for the state table.
#[derive(Debug)]
pub struct RefCount(AtomicU64);

impl RefCount {
    /// The dead bit.
    pub const DEAD: u64 = 1 << 63;

    /// A count of `n` holders.
    pub fn new(n: u64) -> RefCount {
        RefCount(AtomicU64::new(n))
    }

    /// Adds a holder. The caller already holds a reference, so the object cannot be dead.
    #[inline]
    pub fn get(&self) {
        let prev = self.0.fetch_add(1, Relaxed);
        debug_assert!(prev & Self::DEAD == 0, "get on a dead object");
    }

    /// Adds a holder unless destruction has been decided. The caller found the object under
    /// an epoch guard, so its memory is valid even at count zero.
    #[inline]
    pub fn try_get(&self) -> bool {
        let mut cur = self.0.load(Relaxed);
        loop {
            if cur & Self::DEAD != 0 {
                return false;
            }
            match self.0.compare_exchange_weak(cur, cur + 1, SeqCst, Relaxed) {
                Ok(_) => return true,
                Err(now) => cur = now,
            }
        }
    }

    /// Drops a holder. Returns `true` to exactly one caller once the object is dead; that
    /// caller must destroy it (after a grace period).
    #[inline]
    #[must_use = "the caller that gets true must destroy the object"]
    pub fn put(&self) -> bool {
        let prev = self.0.fetch_sub(1, Release);
        debug_assert!(prev & !Self::DEAD > 0, "put on a zero count");
        if prev != 1 {
            return false;
        }
        fence(Acquire);
        self.0
            .compare_exchange(0, Self::DEAD, SeqCst, Relaxed)
            .is_ok()
    }

    /// The current count (without the dead bit); racy, for diagnostics and busy checks.
    pub fn count(&self) -> u64 {
        self.0.load(SeqCst) & !Self::DEAD
    }

    /// Whether destruction has been decided.
    pub fn is_dead(&self) -> bool {
        self.0.load(Acquire) & Self::DEAD != 0
    }
}

/// How many stripes [`StripedCounter`] and [`LockTable`] use by default. Twice the cores
/// of the machines we target keeps two threads off one line with high probability, while
/// summing stays cheap.
const STRIPES: usize = 64;

fn stripe_index() -> usize {
    use std::cell::Cell;
    thread_local! {
        static INDEX: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    INDEX.with(|c| {
        let v = c.get();
        if v != usize::MAX {
            return v;
        }
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let v = NEXT.fetch_add(1, Relaxed) % STRIPES;
        c.set(v);
        v
    })
}

/// A counter whose increments from different threads touch different cache lines; reading
/// it sums the stripes. Used for statistics that commuting operations all update (file and
/// block counts of a file system).
pub struct StripedCounter {
    stripes: Box<[CachePadded<std::sync::atomic::AtomicI64>]>,
}

impl Default for StripedCounter {
    fn default() -> Self {
        StripedCounter {
            stripes: (0..STRIPES).map(|_| CachePadded::new(0.into())).collect(),
        }
    }
}

impl StripedCounter {
    /// Adds `n` (may be negative) to this thread's stripe.
    #[inline]
    pub fn add(&self, n: i64) {
        self.stripes[stripe_index()].fetch_add(n, Relaxed);
    }

    /// The sum of all stripes; not a snapshot under concurrent updates.
    pub fn sum(&self) -> i64 {
        self.stripes.iter().map(|s| s.load(Relaxed)).sum()
    }
}

impl std::fmt::Debug for StripedCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StripedCounter({})", self.sum())
    }
}

/// A padded table of mutexes chosen by hashing a key (seed 002's hashed locks): rarely
/// taken per-object locks without a lock word in every object.
pub struct LockTable {
    locks: Box<[CachePadded<parking_lot::Mutex<()>>]>,
}

impl LockTable {
    /// A table of `n` locks (rounded up to a power of two).
    pub fn new(n: usize) -> LockTable {
        let n = n.next_power_of_two();
        LockTable {
            locks: (0..n)
                .map(|_| CachePadded::new(parking_lot::Mutex::new(())))
                .collect(),
        }
    }

    /// The lock for `key`.
    #[inline]
    pub fn lock(&self, key: u64) -> parking_lot::MutexGuard<'_, ()> {
        self.locks[(key as usize) & (self.locks.len() - 1)].lock()
    }
}

impl std::fmt::Debug for LockTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LockTable({})", self.locks.len())
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::sync::atomic::AtomicU64 as LAtomicU64;
    use loom::sync::Arc;
    use loom::thread;

    /// A writer stores two fields that must always be equal; a reader that passes
    /// validation must never see them differ.
    #[test]
    fn seqcount_reader_never_sees_torn_pair() {
        loom::model(|| {
            let seq = Arc::new(SeqCount::new());
            let a = Arc::new(LAtomicU64::new(0));
            let b = Arc::new(LAtomicU64::new(0));
            let w = {
                let (seq, a, b) = (seq.clone(), a.clone(), b.clone());
                thread::spawn(move || {
                    for v in 1..=2 {
                        seq.write_begin();
                        a.store(v, Relaxed);
                        b.store(v, Relaxed);
                        seq.write_end();
                    }
                })
            };
            if let Some(s) = seq.read_begin() {
                let x = a.load(Relaxed);
                let y = b.load(Relaxed);
                if !seq.read_retry(s) {
                    assert_eq!(x, y, "validated read saw a torn pair");
                }
            }
            w.join().unwrap();
        });
    }

    /// The last putter races with a reviver (a lockless reader that found the object under
    /// an epoch guard): the object is destroyed exactly once, and never while the reviver
    /// holds a reference it got.
    #[test]
    fn refcount_dead_is_decided_once() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(|| {
            let rc = Arc::new(RefCount::new(1));
            let destroyed = Arc::new(LAtomicU64::new(0));
            let held = Arc::new(LAtomicU64::new(0));
            let putter = {
                let (rc, d) = (rc.clone(), destroyed.clone());
                let h = held.clone();
                thread::spawn(move || {
                    if rc.put() {
                        assert_eq!(h.load(SeqCst), 0, "destroyed while held");
                        d.fetch_add(1, SeqCst);
                    }
                })
            };
            if rc.try_get() {
                held.store(1, SeqCst);
                assert_eq!(destroyed.load(SeqCst), 0, "revived a destroyed object");
                held.store(0, SeqCst);
                if rc.put() {
                    destroyed.fetch_add(1, SeqCst);
                }
            }
            putter.join().unwrap();
            assert_eq!(destroyed.load(SeqCst), 1);
            assert!(rc.is_dead());
        });
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn seqcount_odd_blocks_readers() {
        let s = SeqCount::new();
        let r = s.read_begin().unwrap();
        s.write_begin();
        assert!(s.read_begin().is_none());
        s.write_end();
        assert!(s.read_retry(r));
        let r2 = s.read_begin().unwrap();
        assert!(!s.read_retry(r2));
    }

    #[test]
    fn refcount_states() {
        let r = RefCount::new(1);
        r.get();
        assert!(!r.put());
        assert!(r.put());
        assert!(r.is_dead());
        assert!(!r.try_get());
    }

    #[test]
    fn striped_counter_sums() {
        let c = std::sync::Arc::new(StripedCounter::default());
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        c.add(1);
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(c.sum(), 4000);
    }
}
