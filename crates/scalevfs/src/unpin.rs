//! File-system calls on the miss path, made with no epoch guard pinned.
//!
//! # Mechanism
//! A path operation runs under one epoch guard, pinned by `Process::at` for the whole
//! operation. On the miss path a walk asks the file system for a directory's listing
//! ([`SuperBlock::load`](crate::backend::SuperBlock::load)) or an object's attributes (a
//! revalidation under a TTL). For hostfs, listing a large directory takes milliseconds; for
//! a SQL store, every miss is a round trip. Made under the guard, such a call holds the
//! epoch back for its whole length: nothing any thread retires meanwhile (the names a sweep
//! evicted, the objects a trim dropped, closed descriptions) can be freed until it ends,
//! and with several threads missing in turn the epoch hardly moves.
//!
//! So an operation that `at` runs through [`run`] may start again. When it needs such a
//! call, the call is not made: it is recorded in the operation's slot, with counted
//! references to everything it needs (the directory's dentry, the inodes, the file
//! system), and the operation fails with the internal errno [`Errno::RESTART`]. The
//! operation unwinds (it has changed nothing: every change an operation makes follows its
//! walks and the directory locks it takes, and a directory that needs loading is loaded
//! before it is locked), [`run`] lets the guard go with it, makes the call, and runs the
//! operation again, which finds the directory loaded. Linux's RCU walk leaves its
//! read-side section the same way, by `-ECHILD`, to call `d_revalidate` where it may sleep.
//!
//! Once a call is recorded, every further call of the same attempt records nothing and
//! fails the same way, so an attempt ends at its first miss.
//!
//! # Progress
//! What a call revalidated counts as fresh for the rest of the operation (with a TTL of
//! zero it would be due again at once, and the operation would never get through). A
//! sweep may unload a directory again between its load and the next attempt: after
//! [`MAX_ROUNDS`] rounds the operation runs unarmed, and makes its calls in place, under
//! its guard, as `SuperBlock::lock_dir` always could.
//!
//! # Where it applies
//! Only [`run`] arms a slot; a call made anywhere else (a readdir of an open directory, a
//! revalidation of an open file, a comparison walk in check mode, see [`aside`]) is made
//! in place. A nested `run` (an operation inside another's guard) arms its own slot: its
//! calls are made between its attempts, still pinned by the outer guard.
//!
//! # Fields outside locks
//! `ARMED` is this thread's pointer to the running attempt's slot, or null. [`run`] sets
//! it around each attempt and restores the previous value when the attempt ends, also by
//! unwinding; the slot lives in `run`'s (or `again`'s) frame and only its thread touches
//! it. After a call, the attempts that follow neither sweep the dentry cache nor defer
//! again for what the calls refreshed ([`restarted`], [`is_fresh`]).

use crate::errno::{Errno, Result};
use crate::inode::Inode;
use crate::inode::InodeArc;
use std::cell::{Cell, RefCell};

/// Attempts an operation makes with its calls deferred, before it makes them in place.
pub(crate) const MAX_ROUNDS: u32 = 8;

/// A call recorded for after the guard: it owns what it needs.
pub(crate) struct Call {
    /// The object the call refreshes: fresh for the rest of the operation once the call
    /// reports so.
    object: InodeArc,
    /// Makes the call, told whether it is the operation's first; `Ok(true)`: `object` is
    /// fresh.
    make: Box<MakeCall>,
}

/// What a [`Call`] runs: given its object and whether it is the operation's first call.
type MakeCall = dyn FnOnce(&Inode, bool) -> Result<bool>;

impl Call {
    /// A call to make with no guard pinned, on `object`.
    pub(crate) fn new(
        object: InodeArc,
        make: impl FnOnce(&Inode, bool) -> Result<bool> + 'static,
    ) -> Call {
        Call {
            object,
            make: Box::new(make),
        }
    }
}

/// The running operation's deferred call and the objects its calls refreshed. `run` makes
/// one for every operation: four words to make, and nothing to drop once its call is taken.
struct Slot {
    /// The call the running attempt recorded.
    call: Cell<Option<Call>>,
    /// Null in an operation's first attempt; after that the objects its calls refreshed,
    /// kept in `again`'s frame.
    fresh: *const RefCell<Vec<InodeArc>>,
}

thread_local! {
    static ARMED: Cell<*const Slot> = const { Cell::new(std::ptr::null()) };
}

/// Sets `ARMED` for a scope, and restores it when the scope ends (also by unwinding).
struct Armed(*const Slot);

impl Armed {
    #[inline]
    fn set(slot: *const Slot) -> Armed {
        Armed(ARMED.with(|a| a.replace(slot)))
    }
}

impl Drop for Armed {
    #[inline]
    fn drop(&mut self) {
        ARMED.with(|a| a.set(self.0));
    }
}

/// The running attempt's slot, if it is armed.
fn slot<'a>() -> Option<&'a Slot> {
    let p = ARMED.with(Cell::get);
    // SAFETY: `ARMED` is non-null only while `run`'s attempt runs on this thread, and then
    // points to the slot in `run`'s (or `again`'s) frame, which outlives the attempt; the
    // callers use the reference within the attempt.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// The running attempt's list of refreshed objects, if it is armed and follows a call.
fn fresh<'a>() -> Option<&'a RefCell<Vec<InodeArc>>> {
    let p = slot()?.fresh;
    // SAFETY: a non-null `fresh` points to the list in `again`'s frame, which outlives
    // every attempt `again` runs (see `slot`).
    (!p.is_null()).then(|| unsafe { &*p })
}

/// Whether a call the running operation made refreshed `object` (then its deadline counts
/// as met for the rest of the operation). Always `false` outside an armed attempt.
pub(crate) fn is_fresh(object: &Inode) -> bool {
    fresh().is_some_and(|l| l.borrow().iter().any(|o| std::ptr::eq(&**o, object)))
}

/// Whether the running attempt is armed and follows a call it made: then it does not
/// sweep the dentry cache (`SuperBlock::lock_dir`), which could unload what the calls
/// loaded before the attempt gets to it. The operation's first call sweeps instead, before
/// it loads; an operation loads at most [`MAX_ROUNDS`] directories after that sweep, and
/// the next operation's sweep brings the cache back within its cap.
pub(crate) fn restarted() -> bool {
    fresh().is_some()
}

/// If the running operation is armed: records the call `make` builds and returns
/// `Errno::RESTART`, for the caller to return at once; or returns it with nothing recorded
/// if this attempt recorded a call already. `None`: make the call in place (not armed, or
/// `make` could not hold what the call needs).
pub(crate) fn defer(make: impl FnOnce() -> Option<Call>) -> Option<Errno> {
    let slot = slot()?;
    let recorded = slot.call.take();
    let call = match recorded {
        Some(c) => c,
        None => make()?,
    };
    slot.call.set(Some(call));
    Some(Errno::RESTART)
}

/// Runs `attempt` until it ends without asking for a call (see the module docs): between
/// attempts, with no guard of `attempt`'s pinned, makes the call it recorded, and counts
/// it with `count`. The result is `attempt`'s, or the call's error. An attempt that
/// recorded a call and still succeeded (a check-mode comparison that swallowed its
/// restart) keeps its result; the call is made anyway, as a cache fill.
#[inline(always)]
pub(crate) fn run<R>(mut attempt: impl FnMut() -> Result<R>, count: impl FnMut()) -> Result<R> {
    let slot = Slot {
        call: Cell::new(None),
        fresh: std::ptr::null(),
    };
    let r = {
        let _a = Armed::set(&slot);
        attempt()
    };
    // Moved out, so that nothing is left to drop in the common case.
    match slot.call.into_inner() {
        None => r,
        Some(call) => again(call, r, attempt, count),
    }
}

/// [`run`] after its first attempt recorded `call`.
#[cold]
#[inline(never)]
fn again<R>(
    mut call: Call,
    mut r: Result<R>,
    mut attempt: impl FnMut() -> Result<R>,
    mut count: impl FnMut(),
) -> Result<R> {
    let fresh = RefCell::new(Vec::new());
    let slot = Slot {
        call: Cell::new(None),
        fresh: &fresh,
    };
    let mut rounds = 0;
    loop {
        let made = (call.make)(&call.object, rounds == 0);
        count();
        if r.as_ref().err() != Some(&Errno::RESTART) {
            return r;
        }
        if made? {
            fresh.borrow_mut().push(call.object);
        }
        rounds += 1;
        r = {
            let _a = Armed::set(if rounds < MAX_ROUNDS {
                &slot
            } else {
                std::ptr::null()
            });
            attempt()
        };
        match slot.call.take() {
            Some(c) => call = c,
            None => return r,
        }
    }
}

/// Runs `f` unarmed: its calls are made in place (for walks whose answer is compared,
/// not used: check mode's second walk).
pub(crate) fn aside<T>(f: impl FnOnce() -> T) -> T {
    let _a = Armed::set(std::ptr::null());
    f()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::inode::Contents;
    use crate::types::Timespec;
    use std::rc::Rc;

    fn object() -> InodeArc {
        let now = Timespec::now();
        InodeArc::new(Inode::new(2, 0o10644, 0, 0, Contents::Special(0), now))
    }

    /// [`run`], checking that it counts each call it makes once (in `made` of the tests'
    /// calls).
    fn go<R>(attempt: impl FnMut() -> Result<R>) -> Result<R> {
        let before = MADE.with(Cell::get);
        let counted = Cell::new(0);
        let r = run(attempt, || counted.set(counted.get() + 1));
        assert_eq!(counted.get(), MADE.with(Cell::get) - before);
        r
    }

    thread_local! {
        /// Calls made by this thread's tests (their `make` closures).
        static MADE: Cell<u32> = const { Cell::new(0) };
    }

    /// An attempt that needs a call on `o` unless it is fresh: records it (counting it in
    /// `made`) if armed, else makes it in place (counted in `in_place`).
    fn needs(o: &InodeArc, made: &Rc<Cell<u32>>, in_place: &Cell<u32>) -> Result<()> {
        if is_fresh(o) {
            return Ok(());
        }
        let m = made.clone();
        let call = || {
            Some(Call::new(o.clone(), move |_, _| {
                MADE.with(|c| c.set(c.get() + 1));
                m.set(m.get() + 1);
                Ok(true)
            }))
        };
        match defer(call) {
            Some(e) => Err(e),
            None => {
                in_place.set(in_place.get() + 1);
                Ok(())
            }
        }
    }

    #[test]
    fn a_call_is_made_between_attempts_and_counts_as_fresh() {
        let o = object();
        let made = Rc::new(Cell::new(0));
        let in_place = Cell::new(0);
        let mut attempts = 0;
        let r = go(|| {
            attempts += 1;
            assert!(!ARMED.with(Cell::get).is_null());
            needs(&o, &made, &in_place)?;
            // A second need in the same attempt after the first was satisfied: fresh.
            needs(&o, &made, &in_place)
        });
        assert_eq!(r, Ok(()));
        assert_eq!((attempts, made.get(), in_place.get()), (2, 1, 0));
        assert!(ARMED.with(Cell::get).is_null());
    }

    #[test]
    fn a_recorded_call_ends_the_attempt_at_its_next_need() {
        let (a, b) = (object(), object());
        let made = Rc::new(Cell::new(0));
        let in_place = Cell::new(0);
        let mut attempts = 0;
        go(|| {
            attempts += 1;
            // Swallows its restart (as a buggy caller would); the next need fails the
            // same way instead of recording another call.
            let _ = needs(&a, &made, &in_place);
            needs(&b, &made, &in_place)
        })
        .unwrap();
        assert_eq!((attempts, made.get(), in_place.get()), (3, 2, 0));
    }

    #[test]
    fn an_operation_that_keeps_needing_calls_makes_them_in_place_after_max_rounds() {
        let made = Rc::new(Cell::new(0));
        let in_place = Cell::new(0);
        let mut attempts = 0;
        go(|| {
            attempts += 1;
            // A new object each time: never fresh (a sweep unloading it again).
            needs(&object(), &made, &in_place)
        })
        .unwrap();
        assert_eq!(attempts, MAX_ROUNDS + 1);
        assert_eq!((made.get(), in_place.get()), (MAX_ROUNDS, 1));
    }

    #[test]
    fn a_failed_call_fails_the_operation_and_aside_is_unarmed() {
        let o = object();
        let r: Result<()> = go(|| {
            assert!(aside(|| ARMED.with(Cell::get).is_null()));
            let fail = |_: &Inode, _| {
                MADE.with(|c| c.set(c.get() + 1));
                Err(Errno::EIO)
            };
            match defer(|| Some(Call::new(o.clone(), fail))) {
                Some(e) => Err(e),
                None => Ok(()),
            }
        });
        assert_eq!(r, Err(Errno::EIO));
    }

    #[test]
    fn nested_runs_restore_the_outer_slot() {
        let o = object();
        let made = Rc::new(Cell::new(0));
        let in_place = Cell::new(0);
        // The outer operation makes no call of its own: the inner one makes and counts it.
        let outer_calls = Cell::new(0);
        run(
            || {
                let outer = ARMED.with(Cell::get);
                go(|| needs(&o, &made, &in_place))?;
                assert_eq!(ARMED.with(Cell::get), outer);
                Ok(())
            },
            || outer_calls.set(outer_calls.get() + 1),
        )
        .unwrap();
        assert_eq!((made.get(), outer_calls.get()), (1, 0));
    }
}
