//! The one place that names atomics for the engine's small protocols, and the protocols
//! themselves: a sequence counter ([`SeqCount`]), a reference count with a dead state
//! ([`RefCount`]), the namespace-change protocol ([`ChangeSeq`]), check mode's record of
//! mutations (`effects`), striped counters ([`StripedCounter`], on stripes owned by
//! threads, [`SharedCounter`], and [`BatchedCounter`] for counts compared with a limit),
//! per-user counts
//! ([`PerUserCounts`]) and a table of hashed locks ([`LockTable`]).
//!
//! Every other module takes its atomics from here. Under `--cfg loom` they come from loom,
//! so the models (here and in `dentry`, `name`, `walk`, `file`, `mount`) explore every
//! interleaving of the protocols; sizes shrink under loom (two counter stripes) so that the
//! models stay small and collisions likely.
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

//! # Namespace changes
//! [`ChangeSeq`] is a seqlock for many concurrent writers: `active` counts changes in
//! progress and `gen` counts finished ones. A change increments `active`, then makes its
//! stores; at its end it increments `gen`, then decrements `active`. A reader takes a
//! snapshot (`gen`, if `active` is zero), reads, and takes another: equal snapshots mean no
//! change was in progress while it read, and none finished. Parity would not do: two
//! overlapping changes leave a doubly bumped counter even while both are in progress.
//!
//! Only acquire/release orderings are relied on (loom checks them): a reader that sees a
//! change's store sees its `active` increment, or the decrement that follows its `gen`
//! increment, and so fails validation. That holds for a snapshot kept as long as one likes
//! (the path cache keeps them in entries): `gen` is 64 bits and never wraps in practice.
//!
//! | `active` | meaning |
//! |---|---|
//! | 0 | no change in progress; `gen` identifies the state |
//! | n > 0 | n changes between `begin` and `end`: no snapshot |
//!
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{
    fence, AtomicBool, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize,
};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    fence, AtomicBool, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize,
};

// The locks loom does not model (a file's bytes, hostfs's tables, per-user counts) are
// `PlainMutex` and `RwLock`: parking_lot's, or std's under Miri (`miri_locks`). Under loom,
// `Mutex` is loom's (below); otherwise it is `PlainMutex`.
#[cfg(not(loom))]
pub(crate) use PlainMutex as Mutex;

#[cfg(all(not(loom), not(miri)))]
pub(crate) use parking_lot::{MutexGuard, RwLockReadGuard, RwLockWriteGuard};

#[cfg(all(not(loom), miri))]
pub(crate) use miri_locks::{MutexGuard, RwLockReadGuard, RwLockWriteGuard};

#[cfg(not(miri))]
pub(crate) use parking_lot::{Mutex as PlainMutex, RwLock};

#[cfg(miri)]
pub(crate) use miri_locks::{Mutex as PlainMutex, RwLock};

/// Under Miri the engine's locks are std's, behind parking_lot's interface (no poisoning:
/// a panic while locked leaves the data as it was, which is what parking_lot does).
///
/// parking_lot_core 0.9 sleeps with `syscall(SYS_futex, &AtomicI32, ...)`; Miri since
/// rust-lang/rust#161734 checks the types of variadic arguments and rejects that call (the
/// prototype has `*mut u32`), so a test whose thread parks on a parking_lot lock fails under
/// Miri whatever the engine does. std's futex calls pass the right types. The engine's own
/// protocols are the same on either lock; what Miri checks is the engine's unsafe code.
#[cfg(miri)]
mod miri_locks {
    use std::sync::PoisonError;

    /// std's mutex with parking_lot's interface.
    #[derive(Debug, Default)]
    pub(crate) struct Mutex<T: ?Sized>(std::sync::Mutex<T>);

    pub(crate) type MutexGuard<'a, T> = std::sync::MutexGuard<'a, T>;

    impl<T> Mutex<T> {
        pub(crate) const fn new(v: T) -> Mutex<T> {
            Mutex(std::sync::Mutex::new(v))
        }
    }

    impl<T: ?Sized> Mutex<T> {
        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            self.0.lock().unwrap_or_else(PoisonError::into_inner)
        }

        pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
            match self.0.try_lock() {
                Ok(g) => Some(g),
                Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) => None,
            }
        }
    }

    /// std's readers-writer lock with parking_lot's interface.
    #[derive(Debug, Default)]
    pub(crate) struct RwLock<T: ?Sized>(std::sync::RwLock<T>);

    pub(crate) type RwLockReadGuard<'a, T> = std::sync::RwLockReadGuard<'a, T>;
    pub(crate) type RwLockWriteGuard<'a, T> = std::sync::RwLockWriteGuard<'a, T>;

    impl<T> RwLock<T> {
        pub(crate) const fn new(v: T) -> RwLock<T> {
            RwLock(std::sync::RwLock::new(v))
        }
    }

    impl<T: ?Sized> RwLock<T> {
        pub(crate) fn read(&self) -> RwLockReadGuard<'_, T> {
            self.0.read().unwrap_or_else(PoisonError::into_inner)
        }

        pub(crate) fn write(&self) -> RwLockWriteGuard<'_, T> {
            self.0.write().unwrap_or_else(PoisonError::into_inner)
        }
    }
}

/// A mutex for the protocols the loom models contend on (loom's, under loom; parking_lot's
/// otherwise), with parking_lot's interface.
#[cfg(loom)]
#[derive(Debug, Default)]
pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

#[cfg(loom)]
pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

#[cfg(loom)]
impl<T> Mutex<T> {
    pub(crate) fn new(v: T) -> Mutex<T> {
        Mutex(loom::sync::Mutex::new(v))
    }
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().expect("no panics while locked")
    }
}

/// A condition variable over [`Mutex`] (loom's, under loom; parking_lot's otherwise), with one
/// interface for both: [`Condvar::wait`] takes the guard and gives it back.
#[derive(Debug)]
pub(crate) struct Condvar(
    #[cfg(all(not(loom), not(miri)))] parking_lot::Condvar,
    #[cfg(all(not(loom), miri))] std::sync::Condvar,
    #[cfg(loom)] loom::sync::Condvar,
);

impl Default for Condvar {
    fn default() -> Condvar {
        #[cfg(all(not(loom), not(miri)))]
        return Condvar(parking_lot::Condvar::new());
        #[cfg(all(not(loom), miri))]
        return Condvar(std::sync::Condvar::new());
        #[cfg(loom)]
        return Condvar(loom::sync::Condvar::new());
    }
}

impl Condvar {
    /// Lets go of `g`'s mutex, sleeps until a [`Condvar::notify_all`] (or spuriously), and
    /// takes the mutex again. The caller checks its condition in a loop.
    #[cfg(all(not(loom), not(miri)))]
    pub(crate) fn wait<'a, T>(&self, mut g: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.0.wait(&mut g);
        g
    }

    /// Lets go of `g`'s mutex, sleeps until a [`Condvar::notify_all`] (or spuriously), and
    /// takes the mutex again. The caller checks its condition in a loop.
    #[cfg(all(not(loom), miri))]
    pub(crate) fn wait<'a, T>(&self, g: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.0
            .wait(g)
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Lets go of `g`'s mutex, sleeps until a [`Condvar::notify_all`] (or spuriously), and
    /// takes the mutex again. The caller checks its condition in a loop.
    #[cfg(loom)]
    pub(crate) fn wait<'a, T>(&self, g: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.0.wait(g).expect("no panics while locked")
    }

    /// Wakes every waiter.
    pub(crate) fn notify_all(&self) {
        self.0.notify_all();
    }
}

use crossbeam_utils::CachePadded;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};

/// A sequence counter. See the module docs for the protocol.
///
/// 64 bits wide: a reader may keep a sampled count for as long as it likes (the path cache
/// keeps them in its entries), and a 32-bit count passes the same value again after 2^31
/// write sections.
#[derive(Debug, Default)]
pub struct SeqCount(AtomicU64);

impl SeqCount {
    /// A counter at zero (even: no writer).
    #[cfg(not(loom))]
    pub const fn new() -> SeqCount {
        SeqCount(AtomicU64::new(0))
    }

    /// A counter at zero (even: no writer).
    #[cfg(loom)]
    pub fn new() -> SeqCount {
        SeqCount(AtomicU64::new(0))
    }

    /// Samples the count, or `None` while a writer is active (the caller retries or falls
    /// back).
    #[inline]
    pub fn read_begin(&self) -> Option<u64> {
        let s = self.0.load(Acquire);
        if s & 1 == 0 {
            Some(s)
        } else {
            None
        }
    }

    /// Samples the count, spinning while a writer is active.
    #[inline]
    pub fn read_begin_spin(&self) -> u64 {
        loop {
            if let Some(s) = self.read_begin() {
                return s;
            }
            spin();
        }
    }

    /// Whether the values read since `read_begin` returned `start` may be inconsistent.
    #[inline]
    pub fn read_retry(&self, start: u64) -> bool {
        // Orders the relaxed field loads before the second count load.
        fence(Acquire);
        self.0.load(Relaxed) != start
    }

    /// The count as it is now, without waiting for a writer (odd while one is active).
    #[inline]
    pub fn raw(&self) -> u64 {
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

    /// Ends a write begun by [`SeqCount::write_begin`]. A load and a release store, not a
    /// read-modify-write (an atomic one costs tens of cycles: one per write section of an
    /// unlink, a create, a rename): the writers' lock makes this thread the count's only
    /// writer, and the release orders every store of the section before the even count,
    /// which is all a reader's `read_retry` asks of it. Unlike `write_begin`, nothing
    /// orders against the end but the count's readers.
    #[inline]
    pub fn write_end(&self) {
        let s = self.0.load(Relaxed);
        debug_assert!(s & 1 == 1, "seqcount write_end without write_begin");
        #[cfg(loom)]
        if BREAK_SEQ_END_RELEASE.with(|b| b.get()) {
            self.0.store(s + 1, Relaxed);
            return;
        }
        self.0.store(s + 1, Release);
    }

    /// Moves the count on by `n` write sections at once (tests of what a reader that kept
    /// an old sample sees after many writes).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn advance(&self, n: u64) {
        self.0.fetch_add(2 * n, SeqCst);
    }
}

/// A 32-bit [`SeqCount`], for counters whose readers never keep a sample beyond one
/// read (an inode's attributes: `stat` samples, copies and re-checks at once), where the
/// wider count would only cost space.
#[derive(Debug, Default)]
pub struct SeqCount32(AtomicU32);

impl SeqCount32 {
    /// A counter at zero.
    pub fn new() -> SeqCount32 {
        SeqCount32(AtomicU32::new(0))
    }

    /// Samples the count, spinning while a writer is active.
    #[inline]
    pub fn read_begin_spin(&self) -> u32 {
        loop {
            let s = self.0.load(Acquire);
            if s & 1 == 0 {
                return s;
            }
            spin();
        }
    }

    /// Whether the values read since `start` was sampled may be inconsistent.
    #[inline]
    pub fn read_retry(&self, start: u32) -> bool {
        fence(Acquire);
        self.0.load(Relaxed) != start
    }

    /// Starts a write; the caller holds the lock that serializes writers.
    #[inline]
    pub fn write_begin(&self) {
        // The lock makes this thread the only writer, so a load and a store do what an
        // RMW would (Linux's `s->sequence++; smp_wmb()`): the release fence orders the
        // odd count before every field store of the section, so a reader whose acquire
        // fence (`read_retry`) follows a load of any of them sees the count moved. Unlike
        // `SeqCount`'s, nothing orders against this count but its own readers.
        let s = self.0.load(Relaxed);
        debug_assert!(s & 1 == 0, "nested seqcount writer");
        self.0.store(s.wrapping_add(1), Relaxed);
        #[cfg(loom)]
        if BREAK_SEQ32_FENCE.with(|b| b.get()) {
            return;
        }
        fence(Release);
    }

    /// Ends a write (the caller still holds the writers' lock).
    #[inline]
    pub fn write_end(&self) {
        let s = self.0.load(Relaxed);
        debug_assert!(s & 1 == 1, "seqcount write_end without write_begin");
        self.0.store(s.wrapping_add(1), Release);
    }
}

#[cfg(loom)]
std::thread_local! {
    /// The loom model's broken twin of [`SeqCount32::write_begin`]: no release fence.
    static BREAK_SEQ32_FENCE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The loom model's broken twin of [`SeqCount::write_end`]: a relaxed store.
    static BREAK_SEQ_END_RELEASE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[inline]
fn spin() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}

/// The namespace-change protocol behind the path cache: a count of changes in progress
/// and a generation that every finished change moves on. See "Namespace changes" in the
/// module docs.
#[derive(Debug, Default)]
pub struct ChangeSeq {
    /// Changes in progress.
    active: AtomicU64,
    /// Changes finished.
    gen: AtomicU64,
}

impl ChangeSeq {
    /// No change begun.
    #[cfg(not(loom))]
    pub const fn new() -> ChangeSeq {
        ChangeSeq {
            active: AtomicU64::new(0),
            gen: AtomicU64::new(0),
        }
    }

    /// No change begun.
    #[cfg(loom)]
    pub fn new() -> ChangeSeq {
        ChangeSeq {
            active: AtomicU64::new(0),
            gen: AtomicU64::new(0),
        }
    }

    /// Starts a change: from here until [`ChangeSeq::end`], no snapshot is taken, and one
    /// taken before stops validating once its reader has seen any store the change makes
    /// after this call.
    #[inline]
    pub fn begin(&self) {
        self.active.fetch_add(1, Relaxed);
        // The change's stores come after the count: whoever reads one of them (and then
        // runs an acquire fence, as every validation does) reads the count too.
        fence(Release);
    }

    /// Ends a change begun by [`ChangeSeq::begin`].
    #[inline]
    pub fn end(&self) {
        self.gen.fetch_add(1, Release);
        // Release: a reader that sees the count drop sees the generation move.
        self.active.fetch_sub(1, Release);
    }

    /// The generation if no change is in progress. Validating a snapshot is taking another
    /// one (after the reads it covers) and comparing.
    #[inline]
    pub fn snapshot(&self) -> Option<u64> {
        // Orders the caller's earlier reads before the count: a change whose store one of
        // them saw is counted below, or its end has moved the generation.
        fence(Acquire);
        // The count first: if it reads a finished change's decrement, the generation read
        // after it includes that change.
        if self.active.load(Acquire) != 0 {
            return None;
        }
        Some(self.gen.load(Acquire))
    }
}

/// The namespace's changes of resolution (see `pathcache`): one for the whole process, so
/// that a file system mounted in several namespaces invalidates all of them.
#[cfg(not(loom))]
pub(crate) fn ns_changes() -> &'static ChangeSeq {
    static NS: CachePadded<ChangeSeq> = CachePadded::new(ChangeSeq::new());
    &NS
}

/// The namespace's changes of resolution (see `pathcache`).
#[cfg(loom)]
pub(crate) fn ns_changes() -> &'static ChangeSeq {
    loom::lazy_static! {
        static ref NS: ChangeSeq = ChangeSeq::new();
    }
    &NS
}

/// A change of resolution in progress; ends when dropped. See [`ns_changes`].
pub(crate) struct NsChange(());

impl NsChange {
    /// Begins a change of how existing paths resolve.
    #[inline]
    pub(crate) fn begin() -> NsChange {
        ns_changes().begin();
        NsChange(())
    }
}

impl Drop for NsChange {
    #[inline]
    fn drop(&mut self) {
        ns_changes().end();
    }
}

/// Check mode's record of namespace mutations (see `walk`, "Check mode"). Every mutation
/// that can change what a walk, a `stat` identity or an `access` answer is bracketed by
/// [`effect`], tightly: the bracket opens after the mutation's locks are taken and closes
/// before they are released, so any walk that sees the mutation sees the bracket too.
/// Counting is on only while some namespace has check mode on: otherwise a bracket costs
/// one relaxed load.
pub(crate) mod effects {
    use super::*;

    struct Effects {
        /// Namespaces with check mode on.
        enabled: AtomicUsize,
        /// Brackets open now.
        active: AtomicU64,
        /// Brackets opened or closed so far.
        total: AtomicU64,
    }

    #[cfg(not(loom))]
    fn get() -> &'static Effects {
        static E: Effects = Effects {
            enabled: AtomicUsize::new(0),
            active: AtomicU64::new(0),
            total: AtomicU64::new(0),
        };
        &E
    }

    #[cfg(loom)]
    fn get() -> &'static Effects {
        loom::lazy_static! {
            static ref E: Effects = Effects {
                enabled: AtomicUsize::new(0),
                active: AtomicU64::new(0),
                total: AtomicU64::new(0),
            };
        }
        &E
    }

    /// A namespace turned check mode on (`true`) or off.
    pub(crate) fn enable(on: bool) {
        if on {
            get().enabled.fetch_add(1, SeqCst);
        } else {
            get().enabled.fetch_sub(1, SeqCst);
        }
    }

    /// Runs the mutation `f` inside a bracket.
    #[inline]
    pub(crate) fn effect<R>(f: impl FnOnce() -> R) -> R {
        let e = get();
        if e.enabled.load(Relaxed) == 0 {
            return f();
        }
        e.active.fetch_add(1, SeqCst);
        e.total.fetch_add(1, SeqCst);
        let r = f();
        e.total.fetch_add(1, SeqCst);
        e.active.fetch_sub(1, SeqCst);
        r
    }

    /// The brackets opened or closed so far, or `None` while one is open. Two equal
    /// readings mean no mutation happened in between.
    pub(crate) fn reading() -> Option<u64> {
        let e = get();
        if e.active.load(SeqCst) != 0 {
            return None;
        }
        // A bracket opened after the load above is counted here, or closes later and
        // moves `total` before the next reading.
        Some(e.total.load(SeqCst))
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

    /// Adds one to the count whatever it holds, and returns what it held: a loom twin's
    /// broken reviver (`get` would trip its debug assertion on a dead object first).
    #[cfg(all(test, loom))]
    pub(crate) fn increment_unchecked(&self) -> u64 {
        self.0.fetch_add(1, Relaxed)
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

    /// Decides destruction if `self` is the only holder (count 1): one CAS from 1 to dead,
    /// so no [`RefCount::try_get`] can succeed after it, and none that succeeded before is
    /// overlooked. The caller held that one count and gives it up with success; it must
    /// then destroy the object (after a grace period). On failure nothing changed.
    #[inline]
    pub fn try_kill_sole(&self) -> bool {
        self.0
            .compare_exchange(1, Self::DEAD, SeqCst, Relaxed)
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

/// How many stripes of a counter threads can own (it has one more, shared): twice the
/// CPUs, rounded up to a power of two (at most 64). Two threads then rarely share a line,
/// summing stays cheap, and a counter costs 128 B per stripe only as the machine has CPUs
/// to contend for it (640 B on 2 CPUs, not 8 KiB: a namespace holds several counters).
#[cfg(not(loom))]
fn stripes() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        (2 * cpus).next_power_of_two().min(64)
    })
}

/// Under loom, two stripes: enough for the models' threads to land on different ones or the
/// same one, and few objects for the model to track.
#[cfg(loom)]
fn stripes() -> usize {
    2
}

/// Which stripe of every [`StripedCounter`] this thread owns: [`stripes`] stripes are
/// owned, each by at most one live thread at a time, which alone writes it, with a load and
/// a store (no read-modify-write: one costs tens of cycles, and a create + unlink made five
/// on counters). A thread takes the lowest free one at its first change of any counter and
/// gives it back when it exits (a thread-local destructor); past [`stripes`] live threads,
/// and on a thread whose destructors are running, changes go to the shared stripe, the
/// last one, by read-modify-write. The registry's mutex orders an exiting owner's last
/// stores before the next owner's first load. Under loom every change goes to the shared
/// stripe: the models' threads share one OS thread's thread-locals.
mod owned_stripe {
    use std::cell::Cell;

    /// Not assigned yet.
    const UNASSIGNED: usize = usize::MAX;
    /// The shared stripe (its index is the counter's stripe count less one).
    pub(super) const SHARED: usize = usize::MAX - 1;

    /// Bit `i`: stripe `i` is owned by a live thread.
    static OWNERS: std::sync::Mutex<u64> = std::sync::Mutex::new(0);

    /// One more than the highest stripe ever owned: the stripes past it were never written
    /// (a stripe given back keeps what its owner left in it). Only grows.
    static EVER_OWNED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    /// How many of the first stripes may hold something (see [`EVER_OWNED`]).
    #[inline]
    pub(super) fn ever_owned() -> usize {
        EVER_OWNED.load(std::sync::atomic::Ordering::Relaxed)
    }

    thread_local! {
        /// This thread's stripe, [`UNASSIGNED`] or [`SHARED`]. No destructor: readable
        /// while other thread-locals are destroyed.
        static INDEX: Cell<usize> = const { Cell::new(UNASSIGNED) };
        /// Gives the stripe back at the thread's exit.
        static RELEASE: Release = const { Release };
    }

    struct Release;

    impl Drop for Release {
        fn drop(&mut self) {
            let i = INDEX.with(|c| c.replace(SHARED));
            if i < 64 {
                *OWNERS.lock().unwrap_or_else(|e| e.into_inner()) &= !(1u64 << i);
            }
        }
    }

    /// This thread's owned stripe, or [`SHARED`].
    #[inline(always)]
    pub(super) fn index() -> usize {
        if cfg!(loom) {
            return SHARED;
        }
        let v = INDEX.with(|c| c.get());
        if v != UNASSIGNED {
            v
        } else {
            assign()
        }
    }

    #[cold]
    #[inline(never)]
    fn assign() -> usize {
        let mut owners = OWNERS.lock().unwrap_or_else(|e| e.into_inner());
        let free = !*owners;
        let i = free.trailing_zeros() as usize;
        // Owned only once the destructor that gives it back is registered (it cannot be
        // during this thread's own teardown).
        let i = if i < super::stripes() && RELEASE.try_with(|_| ()).is_ok() {
            *owners |= 1u64 << i;
            // Before this thread's first change of any counter (the caller makes it).
            EVER_OWNED.fetch_max(i + 1, std::sync::atomic::Ordering::Relaxed);
            i
        } else {
            SHARED
        };
        INDEX.with(|c| c.set(i));
        i
    }
}

/// A tag for the calling thread among those live now: its owned stripe (see
/// `owned_stripe`), below [`THREAD_TAG_NONE`], or [`THREAD_TAG_NONE`] for a thread that
/// owns none (past the stripe count, or exiting; always under loom). Two live threads never
/// share a tag below [`THREAD_TAG_NONE`]; a tag is reused once its thread exits. What a
/// cache uses to tell its own objects from other threads' (a sweep evicts its own first:
/// `backend`, "Bounded caches").
#[inline]
pub(crate) fn thread_tag() -> u8 {
    match owned_stripe::index() {
        i if i < THREAD_TAG_NONE as usize => i as u8,
        _ => THREAD_TAG_NONE,
    }
}

/// How many tags below [`THREAD_TAG_NONE`] [`thread_tag`] hands out (at most 64).
pub(crate) fn thread_tags() -> usize {
    stripes()
}

/// The [`thread_tag`] of a thread that owns no stripe.
pub(crate) const THREAD_TAG_NONE: u8 = u8::MAX;

/// The stripes of a counter: [`stripes`] that threads own (see `owned_stripe`), then one
/// shared by the threads that own none.
struct Stripes(Box<[CachePadded<AtomicI64>]>);

impl Default for Stripes {
    fn default() -> Self {
        Stripes(
            (0..=stripes())
                .map(|_| CachePadded::new(AtomicI64::new(0)))
                .collect(),
        )
    }
}

impl Stripes {
    /// This thread's own stripe (`Ok`), or the shared one (`Err`).
    #[inline]
    fn mine(&self) -> std::result::Result<&AtomicI64, &AtomicI64> {
        match self.0.get(owned_stripe::index()) {
            Some(s) => Ok(s),
            None => Err(&self.0[self.0.len() - 1]),
        }
    }

    /// The sum of all stripes; not a snapshot under concurrent updates.
    fn sum(&self) -> i64 {
        self.0
            .iter()
            .map(|s| s.load(Relaxed))
            .fold(0, i64::wrapping_add)
    }
}

/// A counter whose changes from different threads touch different cache lines and, on up
/// to [`stripes`] threads at a time, take no atomic read-modify-write (see `owned_stripe`);
/// reading it sums the stripes. Used for statistics that commuting operations all update
/// (a file system's inode and page counts without a limit, its negative entries, the
/// walk's counters); not where the sum synchronizes with something ([`SharedCounter`]).
#[derive(Default)]
pub struct StripedCounter(Stripes);

impl StripedCounter {
    /// Adds `n` (may be negative): to this thread's own stripe with a load and a store, or
    /// to the shared one.
    #[inline]
    pub fn add(&self, n: i64) {
        match self.0.mine() {
            // The owner is the stripe's only writer (see `owned_stripe`).
            Ok(s) => s.store(s.load(Relaxed).wrapping_add(n), Relaxed),
            Err(s) => {
                s.fetch_add(n, Relaxed);
            }
        }
    }

    /// The sum of all stripes; not a snapshot under concurrent updates.
    pub fn sum(&self) -> i64 {
        self.0.sum()
    }
}

/// A counter on the same stripes whose every change is an atomic read-modify-write, so it
/// heads or continues a release sequence whichever thread makes it. Used where the sum
/// takes part in a protocol (a mount's users, which `umount`'s handshake sums between
/// fences).
#[derive(Default)]
pub struct SharedCounter(Stripes);

impl SharedCounter {
    /// Adds `n` (may be negative) to this thread's stripe.
    #[inline]
    pub fn add(&self, n: i64) {
        let (Ok(s) | Err(s)) = self.0.mine();
        s.fetch_add(n, Relaxed);
    }

    /// The sum of all stripes; not a snapshot under concurrent updates.
    pub fn sum(&self) -> i64 {
        self.0.sum()
    }
}

/// A count compared against a limit on every operation, whose comparison reads no line
/// that other threads keep writing until the count is near the limit (Linux's
/// `percpu_counter` and `__percpu_counter_compare`). Each thread keeps its changes in its
/// own stripe, with a load and a store, and moves them into a central value once they
/// reach [`BatchedCounter::BATCH`] either way; so every owned stripe holds less than a
/// batch, and [`BatchedCounter::at_most`] knows the count is under a limit from the
/// central value and the shared stripe alone (each written once per batch, or by threads
/// past the stripe count), while a [`StripedCounter`]'s sum reads every thread's stripe,
/// a line its owner wrote a moment ago: at two threads, one cache miss per read, and one
/// more for the owner's next change. Used for the sizes of the capped caches, which every
/// locked lookup compares with their caps.
#[derive(Default)]
pub struct BatchedCounter {
    central: CachePadded<AtomicI64>,
    stripes: Stripes,
}

impl BatchedCounter {
    /// How far an owned stripe may drift before its changes move to the central value.
    pub const BATCH: i64 = 32;

    /// Adds `n` (may be negative).
    #[inline]
    pub fn add(&self, n: i64) {
        match self.stripes.mine() {
            // The owner is the stripe's only writer (see `owned_stripe`); it leaves less
            // than a batch in it.
            Ok(s) => {
                let v = s.load(Relaxed).wrapping_add(n);
                if v.unsigned_abs() < Self::BATCH as u64 {
                    s.store(v, Relaxed);
                } else {
                    // Central first: a sum in between counts `v` twice, never not at all.
                    self.central.fetch_add(v, Relaxed);
                    s.store(0, Relaxed);
                }
            }
            Err(s) => {
                s.fetch_add(n, Relaxed);
            }
        }
    }

    /// The count: the central value and every stripe; not a snapshot under concurrent
    /// updates.
    pub fn sum(&self) -> i64 {
        self.central.load(Relaxed).wrapping_add(self.stripes.sum())
    }

    /// Whether the count ([`BatchedCounter::sum`], taken as 0 if negative) is at most
    /// `limit`: from the central value and the shared stripe when those, with every stripe
    /// ever owned a batch short of full, are at most `limit`; else by the sum.
    #[inline]
    pub fn at_most(&self, limit: u64) -> bool {
        let shared = self.stripes.0[self.stripes.0.len() - 1].load(Relaxed);
        let slack = owned_stripe::ever_owned() as i64 * (Self::BATCH - 1);
        let bound = self
            .central
            .load(Relaxed)
            .saturating_add(shared)
            .saturating_add(slack);
        bound <= 0 || (bound as u64) <= limit || self.sum().max(0) as u64 <= limit
    }
}

impl std::fmt::Debug for BatchedCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BatchedCounter({})", self.sum())
    }
}

impl std::fmt::Debug for StripedCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StripedCounter({})", self.sum())
    }
}

impl std::fmt::Debug for SharedCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedCounter({})", self.sum())
    }
}

/// A count of resources in use (a file system's inodes or data pages) against an optional
/// limit. Without a limit it is a [`StripedCounter`]: commuting charges touch different
/// lines. With one it is a single counter changed by compare-and-swap, so the limit is exact
/// and the count can never go below zero or above the limit.
pub struct UsageCounter {
    striped: StripedCounter,
    limited: CachePadded<AtomicU64>,
    max: Option<u64>,
}

impl UsageCounter {
    /// A counter at zero with at most `max` in use.
    pub fn new(max: Option<u64>) -> UsageCounter {
        UsageCounter {
            striped: StripedCounter::default(),
            limited: CachePadded::new(AtomicU64::new(0)),
            max,
        }
    }

    /// Charges `n` if the limit allows all of it; `false` (nothing charged) otherwise.
    #[inline]
    pub fn charge(&self, n: u64) -> bool {
        if n == 0 {
            return true;
        }
        let Some(max) = self.max else {
            self.striped.add(n as i64);
            return true;
        };
        self.limited
            .fetch_update(Relaxed, Relaxed, |used| {
                (used.checked_add(n)? <= max).then_some(used + n)
            })
            .is_ok()
    }

    /// Charges as many of `n` as the limit allows, and returns how many that was.
    #[inline]
    pub fn charge_up_to(&self, n: u64) -> u64 {
        let Some(max) = self.max else {
            self.striped.add(n as i64);
            return n;
        };
        let r = self.limited.fetch_update(Relaxed, Relaxed, |used| {
            let take = n.min(max.saturating_sub(used));
            (take > 0).then_some(used + take)
        });
        match r {
            Ok(used) => n.min(max - used),
            Err(_) => 0,
        }
    }

    /// Gives back `n` charged before.
    #[inline]
    pub fn uncharge(&self, n: u64) {
        if n == 0 {
            return;
        }
        if self.max.is_none() {
            self.striped.add(-(n as i64));
            return;
        }
        let prev = self.limited.fetch_sub(n, Relaxed);
        debug_assert!(prev >= n, "uncharged more than was charged");
    }

    /// How much is in use (a sum of stripes without a limit: not a snapshot under
    /// concurrent charges).
    pub fn used(&self) -> u64 {
        match self.max {
            Some(_) => self.limited.load(Relaxed),
            None => self.striped.sum().max(0) as u64,
        }
    }

    /// The limit.
    pub fn max(&self) -> Option<u64> {
        self.max
    }
}

impl std::fmt::Debug for UsageCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UsageCounter({}/{:?})", self.used(), self.max)
    }
}

/// Per-user counts against one limit (a mount's open files per user, a file system's
/// inodes per owner), for limits that stop one user from exhausting what all share. Root
/// is never refused: as Linux's quota code ignores hard limits for `CAP_SYS_RESOURCE`
/// and `alloc_empty_file` lets `CAP_SYS_ADMIN` past `file-max`, the caller says whether
/// to enforce. The counts are sharded by uid behind padded mutexes (each a leaf lock held
/// for one map operation), so users do not contend with each other.
pub struct PerUserCounts {
    limit: u64,
    shards: Box<[CachePadded<UserShard>]>,
}

/// Counts of the users whose uids fall in one shard.
type UserShard = PlainMutex<std::collections::HashMap<u32, u64>>;

impl PerUserCounts {
    /// Counts at zero, each user allowed `limit`.
    pub fn new(limit: u64) -> PerUserCounts {
        PerUserCounts {
            limit,
            shards: (0..16)
                .map(|_| CachePadded::new(Default::default()))
                .collect(),
        }
    }

    fn shard(&self, uid: u32) -> &UserShard {
        &self.shards[uid as usize % self.shards.len()]
    }

    /// Counts one more for `uid`; with `enforce`, only if that stays within the limit
    /// (`false`, nothing counted, otherwise).
    pub fn charge(&self, uid: u32, enforce: bool) -> bool {
        let mut m = self.shard(uid).lock();
        let n = m.entry(uid).or_insert(0);
        if enforce && *n >= self.limit {
            if *n == 0 {
                m.remove(&uid);
            }
            return false;
        }
        *n += 1;
        true
    }

    /// Gives back one counted for `uid` before.
    pub fn uncharge(&self, uid: u32) {
        let mut m = self.shard(uid).lock();
        match m.get_mut(&uid) {
            Some(n) if *n > 1 => *n -= 1,
            Some(_) => {
                m.remove(&uid);
            }
            None => debug_assert!(false, "uncharged uid {uid} more than was charged"),
        }
    }

    /// What `uid` holds.
    pub fn count(&self, uid: u32) -> u64 {
        self.shard(uid).lock().get(&uid).copied().unwrap_or(0)
    }

    /// The limit.
    pub fn limit(&self) -> u64 {
        self.limit
    }
}

impl std::fmt::Debug for PerUserCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PerUserCounts(limit {})", self.limit)
    }
}

/// A lock at a leaf of the lock order, over a few loads and stores: no holder takes
/// another lock, calls out or waits (a dentry hash chain's walk or link, an inode's
/// attribute write section). A spin lock whose release is a store (`spin`'s), where
/// `parking_lot`'s mutex releases with an atomic read-modify-write: tens of cycles at each
/// of the several such locks a create, an unlink or a rename takes (`scripts/icount.sh
/// --atomics`). A waiter yields to the scheduler between tries, so that a holder that was
/// preempted gets the CPU. Under loom, loom's mutex, which its models interleave.
pub(crate) type LeafLock = LeafMutex<()>;
/// A held [`LeafLock`].
pub(crate) type LeafGuard<'a> = LeafMutexGuard<'a, ()>;

/// A [`LeafLock`] over a value (a descriptor table's allocation state).
#[cfg(not(loom))]
pub(crate) type LeafMutex<T> = spin::mutex::SpinMutex<T, spin::relax::Yield>;
/// See the other [`LeafMutex`].
#[cfg(loom)]
pub(crate) type LeafMutex<T> = Mutex<T>;

/// A held [`LeafMutex`].
#[cfg(not(loom))]
pub(crate) type LeafMutexGuard<'a, T> = spin::mutex::SpinMutexGuard<'a, T>;
/// A held [`LeafMutex`].
#[cfg(loom)]
pub(crate) type LeafMutexGuard<'a, T> = MutexGuard<'a, T>;

/// A padded table of locks chosen by hashing a key (seed 002's hashed locks): rarely
/// taken per-object locks without a lock word in every object. They are [`LeafLock`]s.
pub struct LockTable {
    locks: Box<[CachePadded<LeafLock>]>,
}

impl LockTable {
    /// A table of `n` locks (rounded up to a power of two).
    pub fn new(n: usize) -> LockTable {
        let n = n.next_power_of_two();
        LockTable {
            locks: (0..n)
                .map(|_| CachePadded::new(LeafLock::new(())))
                .collect(),
        }
    }

    /// How many locks the table has (a power of two).
    pub(crate) fn len(&self) -> usize {
        self.locks.len()
    }

    /// The lock for `index` (taken modulo the table's size: indexes that are equal modulo
    /// [`LockTable::len`] share a lock).
    #[inline]
    pub(crate) fn lock(&self, index: usize) -> LeafGuard<'_> {
        self.locks[self.slot(index)].lock()
    }

    /// Which of the table's locks `index` takes.
    #[inline]
    pub(crate) fn slot(&self, index: usize) -> usize {
        index & (self.locks.len() - 1)
    }
}

impl std::fmt::Debug for LockTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LockTable({})", self.locks.len())
    }
}

/// Runs `f` over every interleaving loom finds within `preemption_bound`; returns whether
/// any execution saw a violation (`f` returns true). Violations are recorded rather than
/// panicked on, so that a broken twin's model ends cleanly and its test can require the
/// violation (a panic inside a model aborts the process as loom tears it down).
#[cfg(all(test, loom))]
pub(crate) fn loom_violated(
    preemption_bound: usize,
    f: impl Fn() -> bool + Sync + Send + 'static,
) -> bool {
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s = seen.clone();
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(preemption_bound);
    b.check(move || {
        if f() {
            s.store(true, SeqCst);
        }
    });
    seen.load(SeqCst)
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::sync::atomic::AtomicU64 as LAtomicU64;
    use loom::sync::Arc;
    use loom::thread;
    use std::sync::atomic::Ordering::{Acquire, Relaxed};

    /// What the path cache needs of a namespace-change protocol (the real one, and the one
    /// it replaced, to show that the model catches the latter).
    trait Changes: Send + Sync + 'static {
        fn new() -> Self;
        fn begin(&self);
        fn end(&self);
        fn snapshot(&self) -> Option<u64>;
    }

    impl Changes for ChangeSeq {
        fn new() -> Self {
            ChangeSeq::new()
        }
        fn begin(&self) {
            ChangeSeq::begin(self)
        }
        fn end(&self) {
            ChangeSeq::end(self)
        }
        fn snapshot(&self) -> Option<u64> {
            ChangeSeq::snapshot(self)
        }
    }

    /// The protocol before issue 8: one generation, bumped before and after each change,
    /// and compared as it is.
    struct TwoBumps(LAtomicU64);

    impl Changes for TwoBumps {
        fn new() -> Self {
            TwoBumps(LAtomicU64::new(0))
        }
        fn begin(&self) {
            self.0.fetch_add(1, SeqCst);
        }
        fn end(&self) {
            self.0.fetch_add(1, SeqCst);
        }
        fn snapshot(&self) -> Option<u64> {
            fence(Acquire);
            Some(self.0.load(Acquire))
        }
    }

    /// One renamer and one reader. The renamer moves `/a` away (the path `/a/b/f` stops
    /// resolving: `gone` goes 0 -> 1) inside a change. The reader walks the path and caches
    /// the result under its snapshot; then it sees the rename's effect; then it probes the
    /// cache. A hit must never answer from before the effect it has seen.
    fn stale_hit_model<C: Changes>() {
        loom::model(|| {
            let ns = Arc::new(C::new());
            let gone = Arc::new(LAtomicU64::new(0));
            let w = {
                let (ns, gone) = (ns.clone(), gone.clone());
                thread::spawn(move || {
                    ns.begin();
                    gone.store(1, Relaxed);
                    ns.end();
                })
            };
            // The walk, validated before it is cached.
            let mut cache = None;
            if let Some(g) = ns.snapshot() {
                let v = gone.load(Relaxed);
                if ns.snapshot() == Some(g) {
                    cache = Some((g, v));
                }
            }
            // A later operation sees the rename (its validation orders what follows).
            let seen = gone.load(Relaxed);
            if let Some((g, v)) = cache {
                if ns.snapshot() == Some(g) {
                    let answer = v;
                    if ns.snapshot() == Some(g) && seen == 1 {
                        assert_eq!(answer, 1, "a cached walk from before a change it has seen");
                    }
                }
            }
            w.join().unwrap();
        });
    }

    /// The path-cache invalidation protocol (issue 8, defect 3).
    #[test]
    fn change_seq_no_stale_hit() {
        stale_hit_model::<ChangeSeq>();
    }

    /// The protocol it replaced fails the same model.
    #[test]
    #[should_panic(expected = "a cached walk from before a change it has seen")]
    fn two_bumps_gives_a_stale_hit() {
        stale_hit_model::<TwoBumps>();
    }

    /// Two overlapping changes: no snapshot is taken while either is in progress, and a
    /// snapshot from before both never validates after either.
    #[test]
    fn change_seq_overlapping_changes() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(|| {
            let ns = Arc::new(ChangeSeq::new());
            let x = Arc::new(LAtomicU64::new(0));
            let hs: Vec<_> = (0..2)
                .map(|_| {
                    let (ns, x) = (ns.clone(), x.clone());
                    thread::spawn(move || {
                        ns.begin();
                        x.fetch_add(1, Relaxed);
                        ns.end();
                    })
                })
                .collect();
            if let Some(g) = ns.snapshot() {
                let v = x.load(Relaxed);
                let v2 = x.load(Relaxed);
                if ns.snapshot() == Some(g) {
                    assert_eq!(v, v2, "a validated read saw a change happen");
                }
            }
            for h in hs {
                h.join().unwrap();
            }
            assert_eq!(ns.snapshot(), Some(2));
        });
    }

    /// The writer's side and the validation of both sequence counters, for one model of
    /// their readers.
    trait Seq: Send + Sync + 'static {
        fn new() -> Self;
        fn write_begin(&self);
        fn write_end(&self);
        fn retry(&self, start: u64) -> bool;
    }

    impl Seq for SeqCount {
        fn new() -> Self {
            SeqCount::new()
        }
        fn write_begin(&self) {
            SeqCount::write_begin(self)
        }
        fn write_end(&self) {
            SeqCount::write_end(self)
        }
        fn retry(&self, start: u64) -> bool {
            self.read_retry(start)
        }
    }

    impl Seq for SeqCount32 {
        fn new() -> Self {
            SeqCount32::new()
        }
        fn write_begin(&self) {
            SeqCount32::write_begin(self)
        }
        fn write_end(&self) {
            SeqCount32::write_end(self)
        }
        fn retry(&self, start: u64) -> bool {
            self.read_retry(start as u32)
        }
    }

    /// A writer stores two fields that must always be equal, twice; a reader samples with
    /// `begin` (`None`: a writer is active, it gives up), reads, and validates. Returns
    /// whether some execution passed validation with the two fields different.
    fn reader_saw_torn_pair<C: Seq>(begin: fn(&C) -> Option<u64>) -> bool {
        let torn = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let t = torn.clone();
        loom::model(move || {
            let seq = Arc::new(C::new());
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
            if let Some(s) = begin(&seq) {
                let x = a.load(Relaxed);
                let y = b.load(Relaxed);
                if !seq.retry(s) && x != y {
                    t.store(true, std::sync::atomic::Ordering::SeqCst);
                }
            }
            w.join().unwrap();
        });
        torn.load(std::sync::atomic::Ordering::SeqCst)
    }

    #[test]
    fn seqcount_reader_never_sees_torn_pair() {
        assert!(
            !reader_saw_torn_pair::<SeqCount>(SeqCount::read_begin),
            "validated read saw a torn pair"
        );
    }

    /// `SeqCount32`'s writer stores its count (its writers hold a lock) where `SeqCount`'s
    /// adds to it: the release fence after the odd store is what keeps a reader from
    /// validating a torn pair. Without it, the model finds one.
    #[test]
    fn seqcount32_without_its_release_fence_fails() {
        BREAK_SEQ32_FENCE.with(|b| b.set(true));
        let torn = reader_saw_torn_pair::<SeqCount32>(|c| Some(c.read_begin_spin() as u64));
        BREAK_SEQ32_FENCE.with(|b| b.set(false));
        assert!(
            torn,
            "the model missed the torn pair of a writer with no fence"
        );
    }

    /// `SeqCount`'s writer ends its section with a store (its writers hold a lock), not an
    /// add: the store's release is what keeps a reader that sees the even count from
    /// reading the section's fields as they were before it. A relaxed store, and the
    /// model finds a torn pair.
    #[test]
    fn seqcount_without_its_release_end_fails() {
        BREAK_SEQ_END_RELEASE.with(|b| b.set(true));
        let torn = reader_saw_torn_pair::<SeqCount>(SeqCount::read_begin);
        BREAK_SEQ_END_RELEASE.with(|b| b.set(false));
        assert!(
            torn,
            "the model missed the torn pair of a writer whose end is relaxed"
        );
    }

    /// The spinning readers of both counters (`read_begin_spin`, then `read_retry`), as
    /// `stat` uses `SeqCount32` for an inode's attributes and the locked rename path uses
    /// `SeqCount`.
    #[test]
    fn spinning_readers_never_see_a_torn_pair() {
        assert!(
            !reader_saw_torn_pair::<SeqCount>(|c| Some(c.read_begin_spin())),
            "SeqCount"
        );
        assert!(
            !reader_saw_torn_pair::<SeqCount32>(|c| Some(c.read_begin_spin() as u64)),
            "SeqCount32"
        );
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

    /// Check mode's brackets: while a mutation runs, `reading` says so (`None`), and once it
    /// is done the reading differs from the one before (other tests' mutations may open
    /// brackets of their own meanwhile, which only make readings `None` or larger).
    #[test]
    fn effects_bracket_each_mutation() {
        effects::enable(true);
        let before = effects::reading();
        let inside = effects::effect(effects::reading);
        let after = effects::reading();
        effects::enable(false);
        assert_eq!(inside, None, "a mutation in progress reads as none");
        if let (Some(b), Some(a)) = (before, after) {
            assert!(a > b, "a finished mutation moves the reading: {b} -> {a}");
        }
    }

    /// Every change counts once, whatever mix of owned and shared stripes made it: more
    /// threads than there are owned stripes add at once (the rest go to the shared stripe),
    /// then waves of short-lived threads take over the stripes the first gave back at
    /// exit, each adding to values a former owner left, and decrementing what other threads
    /// added. Exact once all have joined. (A stripe written by two threads at once with a
    /// load and a store would lose changes here.)
    #[test]
    fn striped_counter_counts_every_change() {
        let c = std::sync::Arc::new(StripedCounter::default());
        let threads = 4 * stripes() + 3;
        let adds = if cfg!(miri) { 100 } else { 20_000i64 };
        let run = |n: i64| {
            let hs: Vec<_> = (0..threads)
                .map(|t| {
                    let c = c.clone();
                    std::thread::spawn(move || {
                        for i in 0..adds {
                            c.add(if (i + t as i64) % 3 == 0 { -n } else { n });
                        }
                    })
                })
                .collect();
            hs.into_iter().for_each(|h| h.join().unwrap());
        };
        run(1);
        let once = c.sum();
        for _ in 0..3 {
            run(1);
        }
        assert_eq!(c.sum(), 4 * once);
        run(-4);
        assert_eq!(c.sum(), 0, "{c:?}");
    }

    /// A thread gives its stripe back at exit: one thread after another, more of them own
    /// a stripe than there are stripes, which only stripes given back allow. Other tests'
    /// threads may hold every stripe for a while (they are few, and short-lived), so a
    /// thread that finds none owned is followed by another after a pause.
    #[test]
    fn striped_counter_stripes_go_back_at_exit() {
        let c = std::sync::Arc::new(StripedCounter::default());
        let (mut owners, mut threads) = (0, 0);
        while owners <= 2 * stripes() && threads < 2000 {
            let c2 = c.clone();
            let owned = std::thread::spawn(move || {
                c2.add(1);
                owned_stripe::index() < stripes()
            })
            .join()
            .unwrap();
            threads += 1;
            if owned {
                owners += 1;
            } else {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        assert!(
            owners > 2 * stripes(),
            "{owners} of {threads} threads owned a stripe"
        );
        let owned: i64 = c.0 .0[..stripes()].iter().map(|s| s.load(Relaxed)).sum();
        assert_eq!(owned, owners as i64, "{c:?}");
        assert_eq!(c.sum(), threads as i64);
    }

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

    /// The 32-bit counter's contract, as the 64-bit one's: a write section between a
    /// sample and its check makes the check fail, and a sample taken after it holds.
    /// (A race test rarely lands a writer between `stat`'s two reads; this states what
    /// `read_retry` must answer when one does.)
    #[test]
    fn seqcount32_retries_after_a_write() {
        let s = SeqCount32::new();
        let r = s.read_begin_spin();
        assert!(!s.read_retry(r));
        s.write_begin();
        s.write_end();
        assert!(s.read_retry(r), "a write came between");
        let r2 = s.read_begin_spin();
        assert_eq!(r2, r + 2);
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

        // Only a sole holder can decide destruction; a second holder stops it.
        let r = RefCount::new(1);
        assert!(r.try_get());
        assert!(!r.try_kill_sole());
        assert_eq!(r.count(), 2);
        assert!(!r.put());
        assert!(r.try_kill_sole());
        assert!(r.is_dead());
        assert!(!r.try_get());
        assert!(!r.try_kill_sole());
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

    /// `at_most` answers what the sum answers, at every limit near the count: after one
    /// thread's few changes (still in its stripe, under a batch: a comparison of the
    /// central value alone would say "under" at any limit), and after many threads', more
    /// than there are stripes, adding and taking away (some in the shared stripe).
    #[test]
    fn batched_counter_compares_as_its_sum() {
        let c = std::sync::Arc::new(BatchedCounter::default());
        let check = |c: &BatchedCounter| {
            let sum = c.sum();
            for limit in (sum - 3).max(0)..sum + 3 {
                assert_eq!(
                    c.at_most(limit as u64),
                    sum <= limit,
                    "{c:?} at most {limit}"
                );
            }
        };
        c.add(BatchedCounter::BATCH / 2);
        check(&c);
        c.add(2 * BatchedCounter::BATCH + 1);
        check(&c);
        let threads = 2 * stripes() + 3;
        // Multiples of 4: every thread takes away as often.
        let adds = if cfg!(miri) { 48 } else { 5_000i64 };
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for i in 0..adds {
                        c.add(if (i + t as i64) % 4 == 0 { -3 } else { 2 });
                    }
                })
            })
            .collect();
        hs.into_iter().for_each(|h| h.join().unwrap());
        check(&c);
        let owned = &c.stripes.0[..stripes()];
        assert!(
            owned
                .iter()
                .all(|s| s.load(Relaxed).abs() < BatchedCounter::BATCH),
            "every owned stripe holds less than a batch: {owned:?}"
        );
        let per_thread: i64 = (0..adds)
            .map(|i| if i % 4 == 0 { -3 } else { 2 })
            .sum::<i64>();
        assert_eq!(
            c.sum(),
            BatchedCounter::BATCH / 2 + 2 * BatchedCounter::BATCH + 1 + threads as i64 * per_thread
        );
        c.add(-c.sum());
        check(&c);
        assert!(c.at_most(0));
    }
}
