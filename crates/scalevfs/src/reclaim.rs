//! Memory freed by the owner that retired it, after a grace period.
//!
//! # Mechanism
//! crossbeam-epoch runs a deferred function on whichever thread collects the bag it sits
//! in. A batch of objects freed that way is freed, about half the time with two threads, on
//! a thread that did not allocate it: mimalloc takes such a free through the owning heap's
//! atomic free list (and the owner later walks that list on an allocation), and the
//! destructors write lines (the counts of what the objects hold) that sit in the other
//! thread's cache. With two threads each opening and closing its own files, that was
//! about 9% of each thread's time (W7), none of it at one thread.
//!
//! [`OwnerReclaim`] keeps each retired batch with its owner and hands the collector only a
//! marker: a two-word closure that raises the owner's `expired` watermark to the batch's
//! number. At its next retire (or [`OwnerReclaim::collect`]) the owner takes back, and
//! frees on its own thread, every batch numbered at or below the watermark.
//!
//! A watermark is enough, whatever order collectors run the markers in: a marker runs only
//! after every guard pinned before it was deferred is gone. Batch `n` left every shared
//! structure before its marker was deferred, and so did every batch `m < n` (its owner
//! retired it earlier). So once marker `n` has run, no reader can reach batches `1..=n`.
//!
//! What waits: as with a deferred function, a batch waits until its marker's bag is
//! collected, and then until its owner's next retire. Nothing but memory waits; what a
//! retire must do at once (counts given back, a host descriptor closed) is the caller's.
//!
//! # A thread as the owner
//! [`LocalRetire`] makes a thread the owner, for what a call drops when it unlinks a name (a
//! dentry's last count on an unlinked inode, `dentry::GaveUp`): items go into
//! the thread's current batch, which is retired (as above) when it holds
//! [`LocalRetire::BATCH`] items, and the batches whose grace period ended are dropped by
//! the same thread at that moment. Two threads each creating and unlinking files in a
//! directory of their own then free each their own inodes: through the collector, about
//! half of them were freed by the other thread, whose bag it collected, and each such
//! free read the inode's count line from the other CPU and gave the block back through
//! mimalloc's cross-thread list (`scripts/conflict-audit.sh w8-private`: most of the 0.8
//! lines per create and unlink the threads passed between them). What waits: up to
//! `BATCH - 1` items that no batch holds yet, and the batches whose markers have not run
//! or whose thread has not retired since, until the thread's next retire or its exit,
//! when its thread-local hands everything to the collector. An item is no more than the
//! memory of one inode (its contents are freed at its eviction, not here).
//!
//! [`FreeBatch`] does the same for objects retired in batches (a sweep's evicted dentries,
//! a trim's evicted inode-cache nodes): a dropped batch goes to its thread's own
//! `LocalRetire` of batches, each retired alone, and is freed by that thread at its next batch or [`flush`] once the
//! batch's marker has run. What waits: the batches whose markers have not run, or whose
//! thread has not dropped a batch or flushed since; a thread's exit hands them to the
//! collector. A batch whose objects hold more than memory goes to the collector instead
//! (`FreeBatch::to_collector`: an inode-cache node evicted alone, which may hold a removed
//! directory's host descriptor), so that nothing but memory waits for a thread that may
//! never drop another batch. A caller that needs a batch's objects gone before it goes on (hostfs's trim,
//! whose numbers name objects that the evicted dentries held) frees what expired first
//! ([`free_expired`]).
//!
//! # Locks and fields outside a lock
//! No lock of its own: the owner keeps it under whatever serializes its retires (the
//! descriptor table's `alloc`). `expired` lives outside that lock: markers raise it on any
//! thread (`fetch_max`, release), the owner reads it (acquire), so the owner's frees come
//! after every reader that could have reached the batch.
//!
//! # At the end
//! An owner that goes away hands whatever it still holds to the collector
//! ([`OwnerReclaim::into_pending`] gives it back for the caller to defer).
//!
//! # Flushing
//! [`flush`] is the engine's one way to hand this thread's deferred work to the collector
//! and collect (`Guard::flush`). A collect runs deferred functions, and some of them drop
//! what flushes again when dropped (a file system, through the last mount table that held
//! it): a flush from inside a collect would collect again, once per queued file system,
//! each a level deeper on the stack. So a flush on a thread already inside one is skipped;
//! the outer flush, or this thread's next pins, run what it would have. Its flag is a
//! thread-local written only by its own thread.

use crate::inode::Inode;
use crate::inode::InodeArc;
use crate::sync::AtomicU64;
use crossbeam_epoch::Guard;
#[cfg(not(loom))]
use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::Ordering::{AcqRel, Acquire};
use std::sync::Arc;

/// Objects retired together and freed together after one grace period: one deferred
/// function for the batch instead of one per object (a `defer` cost four times as much
/// with a second thread pinning beside it). Dropping a batch made by [`FreeBatch::new`]
/// retires it to this thread (see "A thread as the owner"): its objects are freed by the
/// thread that took them out, at its next retire or [`flush`] once their grace period has
/// ended, not by whichever thread collects the bag (through the collector only when the
/// thread is going away, or under loom). One made by [`FreeBatch::to_collector`] goes to
/// the collector, for objects that hold more than memory (a host descriptor) and must not
/// wait for the thread's next batch, which an idle thread never drops.
pub(crate) struct FreeBatch<T: 'static> {
    frees: Frees<T>,
    /// Whether the collector frees it, not its thread.
    collector: bool,
}

impl<T: 'static> FreeBatch<T> {
    /// An empty batch whose objects `free` frees, on the thread that drops the batch.
    pub(crate) const fn new(free: unsafe fn(*mut T)) -> Self {
        FreeBatch {
            frees: Frees::none(free),
            collector: false,
        }
    }

    /// An empty batch whose objects `free` frees, on whichever thread collects it.
    pub(crate) const fn to_collector(free: unsafe fn(*mut T)) -> Self {
        FreeBatch {
            frees: Frees::none(free),
            collector: true,
        }
    }

    /// Adds `p` to the batch.
    ///
    /// # Safety
    /// `p` is out of every shared structure, so that no new reader can reach it; nobody
    /// else frees it; and `free(p)` is sound once every guard pinned before this call is
    /// gone.
    pub(crate) unsafe fn push(&mut self, p: *mut T) {
        self.frees.items.push(p);
    }
}

/// A retired batch's frees, made when it is dropped: by its thread once its grace period
/// has ended, or by the collector.
struct Frees<T: 'static> {
    items: Vec<*mut T>,
    free: unsafe fn(*mut T),
}

impl<T: 'static> Frees<T> {
    /// No objects yet.
    const fn none(free: unsafe fn(*mut T)) -> Self {
        Frees {
            items: Vec::new(),
            free,
        }
    }
}

// SAFETY: the items are out of every shared structure and only this batch frees them; a
// free may run on any thread (the collector ran them wherever it collected their bag).
unsafe impl<T: 'static> Send for Frees<T> {}

impl<T: 'static> Drop for Frees<T> {
    fn drop(&mut self) {
        for &p in &self.items {
            // SAFETY: each item was pushed under `FreeBatch::push`'s contract, and a
            // `Frees` is dropped only once every guard pinned before its batch was
            // retired is gone (its marker ran, or the collector runs it).
            unsafe { (self.free)(p) };
        }
    }
}

impl<T: 'static> Drop for FreeBatch<T> {
    fn drop(&mut self) {
        if self.frees.items.is_empty() {
            return;
        }
        let free = self.frees.free;
        let frees: Batch = Box::new(std::mem::replace(&mut self.frees, Frees::none(free)));
        let guard = crossbeam_epoch::pin();
        let frees = match self.collector {
            true => Some(frees),
            false => retire_batch_local(frees, &guard),
        };
        let Some(frees) = frees else {
            return;
        };
        // Every item was pushed under `push`'s contract, before this guard was pinned; the
        // deferred function runs after every guard pinned before it is gone.
        guard.defer(move || drop(frees));
    }
}

/// What a thread's dropped [`FreeBatch`]es hand it: each a batch's frees.
type Batch = Box<dyn Send>;

#[cfg(not(loom))]
thread_local! {
    /// This thread's retired batches of objects (see [`FreeBatch`]), each retired alone.
    static RETIRED_BATCHES: std::cell::RefCell<LocalRetire<Batch>> =
        std::cell::RefCell::new(LocalRetire::new());
}

/// Retires `item` to this thread's `key`, with `retire` (one of [`LocalRetire`]'s), and
/// drops the thread's items whose grace period has ended; gives `item` back if the
/// thread-local is gone (the thread is exiting) or in use (a drop of its expired items
/// retires again).
#[cfg(not(loom))]
fn retire_to<T: Send + 'static>(
    key: &'static std::thread::LocalKey<std::cell::RefCell<LocalRetire<T>>>,
    item: T,
    retire: impl FnOnce(&mut LocalRetire<T>, T) -> Vec<Vec<T>>,
) -> Option<T> {
    let mut slot = Some(item);
    let expired = key.try_with(|r| {
        let mut r = r.try_borrow_mut().ok()?;
        Some(retire(&mut r, slot.take()?))
    });
    // Dropped here, with the thread-local no longer borrowed.
    drop(expired);
    slot
}

/// Retires `batch` to this thread at once (see [`FreeBatch`]); gives it back as
/// [`retire_to`] does.
#[cfg(not(loom))]
fn retire_batch_local(batch: Batch, g: &Guard) -> Option<Batch> {
    retire_to(&RETIRED_BATCHES, batch, |r, b| r.retire_now(b, g))
}

/// Under loom, none: batches go to the collector (loom's threads share one thread-local).
#[cfg(loom)]
fn retire_batch_local(batch: Batch, _g: &Guard) -> Option<Batch> {
    Some(batch)
}

/// Frees this thread's retired batches (see [`FreeBatch`]) whose grace period has ended:
/// for a caller about to rely on their objects being gone (hostfs's trim, which lets an
/// object go only once its evicted names gave their references back).
#[cfg(not(loom))]
pub(crate) fn free_expired() {
    let expired = RETIRED_BATCHES.try_with(|r| Some(r.try_borrow_mut().ok()?.collect()));
    drop(expired);
}

/// Batches retired by one owner, freed by it once their grace period has ended (see the
/// module docs).
pub(crate) struct OwnerReclaim<T> {
    /// Retired batches, oldest first, each with its number.
    pending: VecDeque<(u64, Vec<T>)>,
    /// The number of the last batch retired (the first is 1).
    last: u64,
    /// The highest number whose marker has run: batches up to it are unreachable.
    expired: Arc<AtomicU64>,
    /// What a loom model's twin breaks: a batch counts as expired as soon as it is retired.
    #[cfg(loom)]
    pub broken_no_wait: bool,
}

/// Hands this thread's deferred work to the collector and collects, unless this thread is
/// already inside a flush (see "Flushing"). With ten thousand file systems queued (mount
/// churn while another thread held the epoch back), the nested flushes of their drops
/// overflowed a thread's stack.
#[cfg(not(loom))]
pub(crate) fn flush() {
    thread_local! {
        static FLUSHING: Cell<bool> = const { Cell::new(false) };
    }
    /// Clears the flag however the flush ends (a deferred function may panic).
    struct Flushing;
    impl Drop for Flushing {
        fn drop(&mut self) {
            let _ = FLUSHING.try_with(|f| f.set(false));
        }
    }
    // Already flushing, or the thread is going away (its handle hands its bag to the
    // collector then): nothing to do here.
    if FLUSHING.try_with(|f| f.replace(true)) != Ok(false) {
        return;
    }
    let _flushing = Flushing;
    let g = crossbeam_epoch::pin();
    seal_local(&g);
    g.flush();
    drop(g);
    // What this flush let expire, dropped now.
    seal_local(&crossbeam_epoch::pin());
}

/// Under loom, a plain flush: loom's threads share one OS thread, and so would the flag.
#[cfg(loom)]
pub(crate) fn flush() {
    crossbeam_epoch::pin().flush();
}

#[cfg(not(loom))]
thread_local! {
    /// This thread's retired inodes (see "A thread as the owner").
    static RETIRED_INODES: std::cell::RefCell<LocalRetire<InodeArc>> =
        std::cell::RefCell::new(LocalRetire::new());
}

/// Drops `inode`, a count a dentry gave up (readers that loaded the dentry's pointer may
/// still use it), after a grace period: on this thread, from its batch of retired inodes
/// (see "A thread as the owner"), or through the collector when the thread is going away
/// or is already inside a drop of that batch (and always under loom, whose threads share
/// one thread-local).
pub(crate) fn retire_inode(inode: InodeArc, guard: &Guard) {
    #[cfg(not(loom))]
    let Some(inode) = retire_local(inode, guard) else {
        return;
    };
    let p = crate::SendPtr(InodeArc::into_raw(inode) as *mut Inode);
    // SAFETY: the count is the caller's to give up; the deferred drop runs after every
    // guard pinned before this call (the readers') is gone.
    unsafe { guard.defer_unchecked(move || drop(InodeArc::from_raw(p.into_inner()))) };
}

/// [`retire_inode`] into this thread's batch; gives `inode` back if the thread-local is
/// gone (the thread is exiting) or in use (a drop of its expired batches retires again).
#[cfg(not(loom))]
fn retire_local(inode: InodeArc, guard: &Guard) -> Option<InodeArc> {
    retire_to(&RETIRED_INODES, inode, |r, i| r.retire(i, guard))
}

/// Retires this thread's batch of inodes now, however few it holds, and drops those
/// whose grace period has ended (for [`flush`]).
#[cfg(not(loom))]
fn seal_local(g: &Guard) {
    let expired = RETIRED_INODES.try_with(|r| Some(r.try_borrow_mut().ok()?.seal(g)));
    drop(expired);
    free_expired();
}

impl<T> Default for OwnerReclaim<T> {
    fn default() -> Self {
        OwnerReclaim {
            pending: VecDeque::new(),
            last: 0,
            expired: Arc::new(AtomicU64::new(0)),
            #[cfg(loom)]
            broken_no_wait: false,
        }
    }
}

impl<T: Send + 'static> OwnerReclaim<T> {
    /// Starts `batch`'s grace period, and returns the batches whose grace period has ended
    /// (`batch` itself at the earliest on a later call), oldest first, for the caller to
    /// free. Every item of `batch` must already be out of every shared structure, and `g`
    /// pinned since before the caller took it out.
    pub fn retire(&mut self, batch: Vec<T>, g: &Guard) -> Vec<Vec<T>> {
        if !batch.is_empty() {
            self.last += 1;
            let (n, expired) = (self.last, self.expired.clone());
            #[cfg(loom)]
            if self.broken_no_wait {
                expired.fetch_max(n, AcqRel);
            }
            g.defer(move || expired.fetch_max(n, AcqRel));
            self.pending.push_back((n, batch));
        }
        self.collect()
    }

    /// The batches whose grace period has ended, oldest first, for the caller to free.
    pub fn collect(&mut self) -> Vec<Vec<T>> {
        let Some(&(first, _)) = self.pending.front() else {
            return Vec::new();
        };
        let upto = self.expired.load(Acquire);
        if upto < first {
            return Vec::new();
        }
        let k = self.pending.partition_point(|&(n, _)| n <= upto);
        self.pending.drain(..k).map(|(_, b)| b).collect()
    }

    /// How many items wait for their grace period (one step per waiting batch).
    pub fn waiting(&self) -> usize {
        self.pending.iter().map(|(_, b)| b.len()).sum()
    }

    /// Everything still waiting, for an owner that goes away to hand to the collector.
    pub fn into_pending(self) -> Vec<T> {
        self.pending.into_iter().flat_map(|(_, b)| b).collect()
    }
}

/// A thread's retired items, freed by the thread once their grace period has ended (see
/// "A thread as the owner"). Kept in a thread-local; dropping it (at the thread's exit)
/// hands whatever it holds to the collector.
#[cfg(not(loom))]
pub(crate) struct LocalRetire<T: Send + 'static> {
    /// Items retired since the last batch was.
    current: Vec<T>,
    /// The retired batches.
    owner: OwnerReclaim<T>,
}

#[cfg(not(loom))]
impl<T: Send + 'static> LocalRetire<T> {
    /// Items per batch: one marker deferred per this many items.
    pub const BATCH: usize = 64;

    /// An empty one.
    pub fn new() -> Self {
        LocalRetire {
            current: Vec::new(),
            owner: OwnerReclaim::default(),
        }
    }

    /// Retires `item`, which is out of every shared structure (no reader that pins from
    /// now on can reach it), with `g` pinned. Returns the batches whose grace period has
    /// ended, for the caller to drop once it no longer borrows `self` (dropping an item
    /// may run code that retires again).
    pub fn retire(&mut self, item: T, g: &Guard) -> Vec<Vec<T>> {
        self.current.push(item);
        if self.current.len() < Self::BATCH {
            return Vec::new();
        }
        let batch = std::mem::replace(&mut self.current, Vec::with_capacity(Self::BATCH));
        self.owner.retire(batch, g)
    }

    /// Retires the current batch whatever its size (nothing if it is empty), and returns
    /// the batches whose grace period has ended, as [`LocalRetire::retire`] does.
    pub fn seal(&mut self, g: &Guard) -> Vec<Vec<T>> {
        let batch = std::mem::take(&mut self.current);
        self.owner.retire(batch, g)
    }

    /// Retires `item` in a batch of its own, with the current batch (for items that are
    /// batches already: [`FreeBatch`]); returns as [`LocalRetire::retire`] does.
    pub fn retire_now(&mut self, item: T, g: &Guard) -> Vec<Vec<T>> {
        self.current.push(item);
        self.seal(g)
    }

    /// The batches whose grace period has ended, for the caller to drop.
    pub fn collect(&mut self) -> Vec<Vec<T>> {
        self.owner.collect()
    }

    /// How many items wait: in the current batch, and in retired ones.
    #[cfg(test)]
    pub fn waiting(&self) -> usize {
        self.current.len() + self.owner.waiting()
    }
}

#[cfg(not(loom))]
impl<T: Send + 'static> Drop for LocalRetire<T> {
    fn drop(&mut self) {
        let mut rest = std::mem::take(&mut self.current);
        rest.extend(std::mem::take(&mut self.owner).into_pending());
        if rest.is_empty() {
            return;
        }
        // Every item is out of every shared structure already; a deferral made now runs
        // after every guard pinned before it, and so before any of them, is gone.
        crossbeam_epoch::pin().defer(move || drop(rest));
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Pins, flushes (which seals this thread's bag and tries to advance the epoch) and
    /// collects, `n` times; returns every item handed back.
    fn churn(r: &mut OwnerReclaim<u32>, n: usize) -> Vec<u32> {
        let mut got = Vec::new();
        for _ in 0..n {
            let g = crossbeam_epoch::pin();
            g.flush();
            drop(g);
            got.extend(r.collect().into_iter().flatten());
        }
        got
    }

    /// Churns until `want` items came back: other tests of this binary pin the same
    /// collector and can hold the epoch back for a while, so no fixed count is enough.
    fn churn_until(r: &mut OwnerReclaim<u32>, want: usize) -> Vec<u32> {
        let start = std::time::Instant::now();
        let mut got = Vec::new();
        while got.len() < want && start.elapsed() < std::time::Duration::from_secs(60) {
            got.extend(churn(r, 1));
            std::thread::yield_now();
        }
        got
    }

    /// A batch comes back only after a guard pinned before its retire is gone, and then it
    /// does come back; batches come back in order, each once.
    #[test]
    fn a_batch_waits_for_guards_older_than_it_and_no_longer() {
        let mut r = OwnerReclaim::default();
        let old = crossbeam_epoch::pin();
        {
            let g = crossbeam_epoch::pin();
            assert!(r.retire(vec![1, 2], &g).is_empty());
            assert!(r.retire(vec![3], &g).is_empty());
            assert!(
                r.retire(Vec::new(), &g).is_empty(),
                "an empty batch is no batch"
            );
        }
        assert!(
            churn(&mut r, 50).is_empty(),
            "freed under a guard older than it"
        );
        assert_eq!(r.waiting(), 3);
        drop(old);
        let mut got = churn_until(&mut r, 3);
        // A later batch, retired after the first two expired.
        let g = crossbeam_epoch::pin();
        got.extend(r.retire(vec![4], &g).into_iter().flatten());
        drop(g);
        got.extend(churn_until(&mut r, 1));
        assert_eq!(got, vec![1, 2, 3, 4]);
        assert_eq!(r.waiting(), 0);
    }

    /// Markers run on another thread raise the watermark the owner reads.
    #[test]
    fn markers_collected_elsewhere_free_on_the_owner() {
        let mut r = OwnerReclaim::default();
        {
            let g = crossbeam_epoch::pin();
            r.retire(vec![7], &g);
            // Seal this thread's bag so that another thread's collect can run the marker.
            g.flush();
        }
        std::thread::spawn(|| {
            for _ in 0..50 {
                crossbeam_epoch::pin().flush();
            }
        })
        .join()
        .unwrap();
        assert_eq!(churn_until(&mut r, 1), vec![7]);
    }

    /// A batch's objects are freed after every guard pinned before its drop is gone, not
    /// before; each exactly once; and by the thread that dropped the batch, though
    /// another thread collects its marker. A batch that a thread still holds when it
    /// exits goes to the collector, and is freed all the same.
    #[test]
    fn a_free_batch_is_freed_by_its_thread_after_older_guards_and_once() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        use std::sync::Mutex;
        use std::thread::ThreadId;
        static FREED: AtomicUsize = AtomicUsize::new(0);
        static BY: Mutex<Vec<ThreadId>> = Mutex::new(Vec::new());
        /// Frees a boxed number, counting it and the thread.
        unsafe fn free(p: *mut u64) {
            // SAFETY: the test pushes pointers from `Box::into_raw`, once each.
            drop(unsafe { Box::from_raw(p) });
            BY.lock().unwrap().push(std::thread::current().id());
            FREED.fetch_add(1, SeqCst);
        }
        fn batch_of(n: u64) -> FreeBatch<u64> {
            let mut batch = FreeBatch::new(free);
            for k in 0..n {
                // SAFETY: a fresh box that nothing else reaches or frees.
                unsafe { batch.push(Box::into_raw(Box::new(k))) };
            }
            batch
        }
        /// Flushes on this thread until `n` objects in all were freed (or 60 s passed:
        /// other tests' pins can hold the epoch back).
        fn flush_until(n: usize) {
            let start = std::time::Instant::now();
            while FREED.load(SeqCst) < n && start.elapsed() < std::time::Duration::from_secs(60) {
                flush();
                std::thread::yield_now();
            }
        }
        let owner = std::thread::spawn(|| {
            let old = crossbeam_epoch::pin();
            drop(batch_of(3));
            // Another thread collects (and runs the batch's marker, once it may).
            let other = || {
                std::thread::spawn(|| {
                    for _ in 0..50 {
                        crossbeam_epoch::pin().flush();
                    }
                })
                .join()
                .unwrap()
            };
            other();
            for _ in 0..50 {
                flush();
            }
            assert_eq!(FREED.load(SeqCst), 0, "freed under a guard older than it");
            drop(old);
            other();
            flush_until(3);
            assert_eq!(FREED.load(SeqCst), 3);
            let me = std::thread::current().id();
            assert!(
                BY.lock().unwrap().iter().all(|&t| t == me),
                "freed by another thread"
            );
            // An empty batch retires nothing.
            drop(FreeBatch::<u64>::new(free));
            for _ in 0..50 {
                flush();
            }
            assert_eq!(FREED.load(SeqCst), 3);
        });
        owner.join().unwrap();
        // Held when its thread exits: handed to the collector.
        let old = crossbeam_epoch::pin();
        std::thread::spawn(|| drop(batch_of(2))).join().unwrap();
        assert_eq!(FREED.load(SeqCst), 3, "freed under a guard older than it");
        drop(old);
        flush_until(5);
        assert_eq!(FREED.load(SeqCst), 5);
    }

    /// What an owner that goes away still holds comes back whole.
    #[test]
    fn into_pending_returns_every_waiting_item() {
        let mut r = OwnerReclaim::default();
        let hold = crossbeam_epoch::pin();
        r.retire(vec![1, 2], &hold);
        r.retire(vec![3], &hold);
        assert_eq!(r.into_pending(), vec![1, 2, 3]);
    }

    /// An item that records, when dropped, the thread that dropped it.
    struct Tracked(Arc<std::sync::Mutex<Vec<std::thread::ThreadId>>>);

    impl Drop for Tracked {
        fn drop(&mut self) {
            self.0.lock().unwrap().push(std::thread::current().id());
        }
    }

    /// A thread's retired items come back to it (and it drops them) only once a guard
    /// pinned before their retire is gone, and then they do; none is dropped by another
    /// thread.
    #[test]
    fn a_thread_drops_what_it_retired_after_the_grace_period() {
        let log = Arc::new(std::sync::Mutex::new(Vec::new()));
        let me = std::thread::spawn(move || {
            let batch = LocalRetire::<Tracked>::BATCH;
            let mut r = LocalRetire::new();
            let retire = |r: &mut LocalRetire<Tracked>, n: usize| -> usize {
                let mut back = 0;
                for _ in 0..n {
                    let g = crossbeam_epoch::pin();
                    let got = r.retire(Tracked(log.clone()), &g);
                    back += got.iter().map(Vec::len).sum::<usize>();
                    drop(got);
                    g.flush();
                }
                back
            };
            let old = crossbeam_epoch::pin();
            assert_eq!(retire(&mut r, 3 * batch), 0, "dropped under an older guard");
            assert_eq!(r.waiting(), 3 * batch);
            assert!(log.lock().unwrap().is_empty());
            drop(old);
            // More retires seal more batches, and collect the expired ones.
            let start = std::time::Instant::now();
            let mut back = 0;
            while back < 3 * batch && start.elapsed() < std::time::Duration::from_secs(60) {
                back += retire(&mut r, batch);
                std::thread::yield_now();
            }
            assert!(back >= 3 * batch, "{back} items came back");
            // What is dropped so far, before `r` hands the rest to the collector (whose
            // drops may run on any thread).
            let so_far = log.lock().unwrap().clone();
            (std::thread::current().id(), so_far)
        })
        .join()
        .unwrap();
        let (me, dropped) = me;
        assert!(dropped.len() >= 3 * LocalRetire::<Tracked>::BATCH);
        assert!(dropped.iter().all(|&t| t == me));
    }

    /// What a thread still holds when it exits (a batch not yet full, and retired batches)
    /// goes to the collector, which drops all of it.
    #[test]
    fn a_thread_that_exits_hands_its_items_to_the_collector() {
        let dropped = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = dropped.clone();
        let n = LocalRetire::<Tracked>::BATCH + 10;
        std::thread::spawn(move || {
            let mut r = LocalRetire::new();
            let hold = crossbeam_epoch::pin();
            for _ in 0..n {
                assert!(r.retire(Tracked(log.clone()), &hold).is_empty());
            }
            assert_eq!(r.waiting(), n);
        })
        .join()
        .unwrap();
        let start = std::time::Instant::now();
        while dropped.lock().unwrap().len() < n
            && start.elapsed() < std::time::Duration::from_secs(60)
        {
            crossbeam_epoch::pin().flush();
            std::thread::yield_now();
        }
        assert_eq!(dropped.lock().unwrap().len(), n);
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::sync::{AtomicBool, AtomicUsize};
    use loom::sync::Arc;
    use loom::thread;
    use std::sync::atomic::Ordering::Release;

    /// A reader loads a slot under a guard and uses what it found; the owner empties the
    /// slot, retires the object, and frees whatever comes back. Returns whether any
    /// execution freed the object while the reader still used it.
    fn reader_against_owner(broken_no_wait: bool) -> bool {
        crate::sync::loom_violated(2, move || {
            // The object: 1 in the slot; freeing it sets `freed`.
            let slot = Arc::new(AtomicUsize::new(1));
            let freed = Arc::new(AtomicBool::new(false));
            let reader = {
                let (slot, freed) = (slot.clone(), freed.clone());
                thread::spawn(move || {
                    let g = crossbeam_epoch::pin();
                    let bad = slot.load(Acquire) == 1 && freed.load(Acquire);
                    drop(g);
                    bad
                })
            };
            let mut r = OwnerReclaim::default();
            r.broken_no_wait = broken_no_wait;
            let free = |batches: Vec<Vec<usize>>| {
                if batches.into_iter().flatten().next().is_some() {
                    freed.store(true, Release);
                }
            };
            {
                let g = crossbeam_epoch::pin();
                slot.store(0, Release);
                free(r.retire(vec![1], &g));
            }
            for _ in 0..2 {
                crossbeam_epoch::pin().flush();
                free(r.collect());
            }
            let bad = reader.join().unwrap();
            drop(r.into_pending());
            bad
        })
    }

    #[test]
    fn owner_reclaim_waits_for_readers() {
        assert!(!reader_against_owner(false));
    }

    /// Twin: a batch freed at its retire, without waiting for its marker, is freed under a
    /// reader that loaded it before the slot was emptied.
    #[test]
    fn owner_reclaim_without_the_marker_frees_under_a_reader() {
        assert!(
            reader_against_owner(true),
            "the model missed a free under a reader"
        );
    }
}
