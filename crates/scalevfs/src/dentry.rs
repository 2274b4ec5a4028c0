//! Dentries and the dentry hash: the name cache the lockless walk reads.
//!
//! # Layout
//! A [`Dentry`] keeps what the walk reads (sequence counter, flags, key hash, parent,
//! inode, chain link, name) in its first two cache lines, and what writers touch on other
//! paths (the reference count, the readdir cookie) on a third line of their own, so taking
//! a reference never invalidates a line a lookup reads (seed 000, part 2). A test checks the
//! offsets.
//!
//! # Lookup
//! The hash is a fixed array of chains of intrusive, epoch-protected pointers, keyed by
//! (parent address, name hash). [`DHash::lookup_rcu`] walks a chain under an epoch guard
//! with no lock and no write; a match is trusted only once the dentry's sequence counter
//! shows that parent, name and inode did not change while they were compared. A miss is
//! never trusted by the lockless walk (a dentry being moved between chains can hide
//! entries behind it): the walk falls back and [`DHash::lookup_locked`] repeats the lookup
//! under the chain's bucket lock, with the parent directory locked, where chains of that
//! parent cannot change.
//!
//! # Insertion
//! Only with the parent directory's mutex held: a new dentry is linked at the head of its
//! chain under the bucket lock, and into the parent's `DirState::children` under the
//! directory lock. Both memberships change together, under the directory lock.
//!
//! # Eviction and reclamation
//! The hash owns one reference on every hashed dentry; every dentry owns one on its parent.
//! Open directories, working directories and mounts own others. A dentry is unhashed
//! under its parent's lock (rmdir, a replaced rename target, a purged negative entry) and
//! its hash reference is dropped; the last [`RefCount::put`] wins the `0 -> DEAD` CAS and
//! the memory is freed after an epoch grace period, so lockless readers that still hold
//! the pointer read valid (stale) memory and are stopped by the sequence counter.
//!
//! A non-directory that is unlinked is not unhashed: it turns negative in place (its inode
//! pointer is cleared under the sequence counter), like Linux `d_delete`, so a create of
//! the same name reuses it. Open files hold the inode, not the dentry, so nothing is lost.
//!
//! # Flags word
//! | bit | meaning | written under |
//! |---|---|---|
//! | `ROOT` | root of its file system: `..` leaves through the mount | creation only |
//! | `MOUNTED` | a mount sits on this dentry | the mount table lock |
//! | `UNHASHED` | removed from the hash: deleted directory or replaced target | parent lock |
//!
//! # Lock order
//! ```text
//! parent directory mutex(es)   (inode::DirState, sorted by address)
//!   bucket lock                (DHash::locks, one at a time)
//! ```
//!
//! Fields outside any lock: `seq`, `flags`, `hash`, `parent`, `inode`, `next` and `name`
//! are written only under the parent directory's mutex (and `next` under the bucket
//! lock), inside a `seq` write section where readers care; readers use atomic loads under
//! an epoch guard.

use crate::inode::Inode;
use crate::name::{key_hash, Component, DName};
use crate::sync::{LockTable, RefCount, SeqCount};
use crossbeam_epoch::Guard;
use std::ptr::{self, NonNull};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64};
use std::sync::Arc;

/// Flag: root of its file system.
pub const ROOT: u32 = 1;
/// Flag: a mount sits here.
pub const MOUNTED: u32 = 2;
/// Flag: removed from the hash.
pub const UNHASHED: u32 = 4;

/// The fields written on paths other than lookup, on their own cache line.
#[repr(C, align(64))]
pub struct Cold {
    /// References; see the module docs.
    pub refs: RefCount,
    /// The readdir cookie in the parent; written under the parent's lock.
    pub cookie: AtomicU64,
}

/// A name in the namespace: a (parent, name) -> inode binding, or a negative entry.
#[repr(C, align(64))]
pub struct Dentry {
    /// Bumped when parent, name or inode change, and when the dentry is unhashed.
    pub seq: SeqCount,
    /// `ROOT`, `MOUNTED`, `UNHASHED`.
    pub flags: AtomicU32,
    /// Key hash of (parent, name).
    pub hash: AtomicU64,
    /// The parent; null for a file system root. Owns a reference.
    pub parent: AtomicPtr<Dentry>,
    /// The inode (an `Arc<Inode>` turned raw), null for a negative entry.
    pub inode: AtomicPtr<Inode>,
    /// Next in the hash chain.
    pub next: AtomicPtr<Dentry>,
    /// The name.
    pub name: DName,
    /// Reference count and cookie.
    pub cold: Cold,
}

// SAFETY: all shared fields are atomics or epoch-managed; see the module docs.
unsafe impl Send for Dentry {}
// SAFETY: as above.
unsafe impl Sync for Dentry {}

impl Dentry {
    /// The flags.
    #[inline]
    pub fn flags(&self) -> u32 {
        self.flags.load(Acquire)
    }

    /// The inode, if positive. The reference is valid while `_guard` is held.
    #[inline]
    pub fn inode<'g>(&self, _guard: &'g Guard) -> Option<&'g Inode> {
        let p = self.inode.load(Acquire);
        // SAFETY: a dentry's inode is released only after a grace period (see `set_inode`),
        // and the caller holds a guard.
        unsafe { p.as_ref() }
    }

    /// The inode as a new `Arc`, if positive.
    pub fn inode_arc(&self, _guard: &Guard) -> Option<Arc<Inode>> {
        let p = self.inode.load(Acquire);
        if p.is_null() {
            return None;
        }
        // SAFETY: the dentry's own strong count is released only after a grace period,
        // and the caller holds a guard, so the count is at least one here.
        unsafe {
            Arc::increment_strong_count(p);
            Some(Arc::from_raw(p))
        }
    }

    /// The parent, if not a root. Valid while the guard is held.
    #[inline]
    pub fn parent<'g>(&self, _guard: &'g Guard) -> Option<&'g Dentry> {
        // SAFETY: the parent is owned by this dentry (a reference), released after a grace
        // period when it changes.
        unsafe { self.parent.load(Acquire).as_ref() }
    }

    /// Replaces the inode. The caller holds the parent's lock and is inside `seq`'s write
    /// section (or the dentry is not yet published).
    pub fn set_inode(&self, inode: Option<Arc<Inode>>, guard: &Guard) {
        let new = inode.map_or(ptr::null_mut(), |a| Arc::into_raw(a) as *mut Inode);
        let old = self.inode.swap(new, Release);
        if !old.is_null() {
            let old = SendPtr(old);
            // SAFETY: `old` came from `Arc::into_raw` and is no longer reachable from the
            // dentry; readers that loaded it hold guards, so the drop waits for them.
            unsafe {
                guard.defer_unchecked(move || drop(Arc::from_raw(old.into_inner())));
            }
        }
    }
}

use crate::SendPtr;

/// An owned reference to a dentry.
pub struct DRef(NonNull<Dentry>);

// SAFETY: `Dentry` is `Sync`; the reference count is atomic.
unsafe impl Send for DRef {}
// SAFETY: as above.
unsafe impl Sync for DRef {}

impl DRef {
    /// Takes a reference on a dentry reached under an epoch guard, unless it is dead.
    pub fn try_get(d: &Dentry) -> Option<DRef> {
        if d.cold.refs.try_get() {
            Some(DRef(NonNull::from(d)))
        } else {
            None
        }
    }

    /// Gives up ownership without dropping the count (the hash takes it).
    fn into_raw(self) -> NonNull<Dentry> {
        let p = self.0;
        std::mem::forget(self);
        p
    }

    /// Re-owns a count given up by [`DRef::into_raw`].
    ///
    /// # Safety
    /// `p` carries a count that the caller owns.
    unsafe fn from_raw(p: NonNull<Dentry>) -> DRef {
        DRef(p)
    }
}

impl std::ops::Deref for DRef {
    type Target = Dentry;
    #[inline]
    fn deref(&self) -> &Dentry {
        // SAFETY: a counted reference keeps the dentry from being destroyed.
        unsafe { self.0.as_ref() }
    }
}

impl Clone for DRef {
    fn clone(&self) -> DRef {
        self.cold.refs.get();
        DRef(self.0)
    }
}

impl Drop for DRef {
    fn drop(&mut self) {
        if self.cold.refs.put() {
            destroy(self.0);
        }
    }
}

impl PartialEq for DRef {
    fn eq(&self, o: &DRef) -> bool {
        self.0 == o.0
    }
}
impl Eq for DRef {}

impl std::fmt::Debug for DRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DRef({:p})", self.0)
    }
}

/// Frees a dead dentry after a grace period, releasing its inode and parent.
fn destroy(d: NonNull<Dentry>) {
    let guard = crossbeam_epoch::pin();
    let p = SendPtr(d.as_ptr());
    // SAFETY: the dentry is dead (we won the DEAD CAS) and unhashed, so no new reader can
    // find it; the deferred drop waits for readers that already have the pointer.
    unsafe {
        guard.defer_unchecked(move || {
            let b = Box::from_raw(p.into_inner());
            let inode = b.inode.load(Relaxed);
            if !inode.is_null() {
                drop(Arc::from_raw(inode));
            }
            let parent = b.parent.load(Relaxed);
            drop(b);
            if let Some(parent) = NonNull::new(parent) {
                drop(DRef::from_raw(parent));
            }
        });
    }
}

/// The dentry hash of one file system. See the module docs.
pub struct DHash {
    buckets: Box<[AtomicPtr<Dentry>]>,
    locks: LockTable,
    mask: usize,
}

/// A chain longer than this during a lockless lookup means concurrent moves: give up.
const MAX_CHAIN_STEPS: usize = 4096;

/// What a lockless lookup found.
pub enum RcuLookup<'g> {
    /// A validated match and the sequence count it was validated at.
    Found(&'g Dentry, u32),
    /// Nothing trustworthy: fall back to the locked lookup.
    Retry,
}

impl DHash {
    /// A table with `buckets` chains (rounded up to a power of two).
    pub fn new(buckets: usize) -> DHash {
        let n = buckets.next_power_of_two().max(16);
        DHash {
            // Buckets are packed eight to a line: padding each would cost 16x the memory,
            // and bucket heads are written only by inserts and removals.
            buckets: (0..n).map(|_| AtomicPtr::new(ptr::null_mut())).collect(),
            locks: LockTable::new((n / 64).clamp(64, 4096)),
            mask: n - 1,
        }
    }

    #[inline]
    fn head(&self, hash: u64) -> &AtomicPtr<Dentry> {
        &self.buckets[(hash as usize) & self.mask]
    }

    /// Finds the child `c` of `parent` with no lock and no write. See the module docs.
    #[inline]
    pub fn lookup_rcu<'g>(
        &self,
        parent: &Dentry,
        c: &Component<'_>,
        guard: &'g Guard,
    ) -> RcuLookup<'g> {
        let pkey = parent as *const Dentry as usize;
        let key = key_hash(pkey, c.hash);
        let mut p = self.head(key).load(Acquire);
        let mut steps = 0;
        while !p.is_null() {
            // SAFETY: chain members are freed only after a grace period; we hold a guard.
            let d: &'g Dentry = unsafe { &*p };
            if d.hash.load(Relaxed) == key {
                let Some(s) = d.seq.read_begin() else {
                    return RcuLookup::Retry;
                };
                if d.parent.load(Relaxed) as usize == pkey
                    && d.name.eq(c.bytes, guard)
                    && d.flags.load(Relaxed) & UNHASHED == 0
                {
                    if d.seq.read_retry(s) {
                        return RcuLookup::Retry;
                    }
                    return RcuLookup::Found(d, s);
                }
            }
            steps += 1;
            if steps > MAX_CHAIN_STEPS {
                return RcuLookup::Retry;
            }
            p = d.next.load(Acquire);
        }
        RcuLookup::Retry
    }

    /// Finds the child `c` of `parent`; the caller holds `parent`'s directory lock, so the
    /// answer (including "none") is authoritative.
    pub fn lookup_locked<'g>(
        &self,
        parent: &Dentry,
        c: &Component<'_>,
        guard: &'g Guard,
    ) -> Option<&'g Dentry> {
        let pkey = parent as *const Dentry as usize;
        let key = key_hash(pkey, c.hash);
        let _b = self.locks.lock(key);
        let mut p = self.head(key).load(Acquire);
        while !p.is_null() {
            // SAFETY: as in `lookup_rcu`; the bucket lock also keeps the chain fixed.
            let d: &'g Dentry = unsafe { &*p };
            if d.hash.load(Relaxed) == key
                && d.parent.load(Relaxed) as usize == pkey
                && d.name.eq(c.bytes, guard)
            {
                return Some(d);
            }
            p = d.next.load(Acquire);
        }
        None
    }

    fn link(&self, d: &Dentry) {
        let key = d.hash.load(Relaxed);
        let _b = self.locks.lock(key);
        let head = self.head(key);
        d.next.store(head.load(Relaxed), Relaxed);
        head.store(d as *const Dentry as *mut Dentry, Release);
    }

    fn unlink(&self, d: &Dentry) {
        let key = d.hash.load(Relaxed);
        let _b = self.locks.lock(key);
        let me = d as *const Dentry as *mut Dentry;
        let mut link = self.head(key);
        loop {
            let p = link.load(Relaxed);
            assert!(!p.is_null(), "dentry missing from its hash chain");
            if p == me {
                // Readers standing on `d` keep following its old `next`.
                link.store(d.next.load(Relaxed), Release);
                return;
            }
            // SAFETY: chain members are alive while linked; we hold the bucket lock.
            link = unsafe { &(*p).next };
        }
    }

    /// Creates a hashed child of `parent` named `name`, positive if `inode` is given.
    /// Returns it (the hash owns the new count). The caller holds `parent`'s directory
    /// lock and `dir` is that lock's state.
    pub fn d_alloc(
        &self,
        parent: &Dentry,
        name: &Component<'_>,
        inode: Option<Arc<Inode>>,
        dir: &mut crate::inode::DirState,
    ) -> NonNull<Dentry> {
        let key = key_hash(parent as *const Dentry as usize, name.hash);
        // The parent is hashed (or a root) and its directory lock is held: it is live.
        parent.cold.refs.get();
        let positive = inode.is_some();
        let cookie = dir.alloc_cookie();
        let d = Box::new(Dentry {
            seq: SeqCount::new(),
            flags: AtomicU32::new(0),
            hash: AtomicU64::new(key),
            parent: AtomicPtr::new(parent as *const Dentry as *mut Dentry),
            inode: AtomicPtr::new(inode.map_or(ptr::null_mut(), |a| Arc::into_raw(a) as *mut _)),
            next: AtomicPtr::new(ptr::null_mut()),
            name: DName::new(name.bytes),
            cold: Cold {
                refs: RefCount::new(1),
                cookie: AtomicU64::new(cookie),
            },
        });
        let p = NonNull::from(Box::leak(d));
        // SAFETY: just allocated and leaked; freed only through `destroy`.
        let dr = unsafe { p.as_ref() };
        self.link(dr);
        dir.children.insert(cookie, p);
        if positive {
            dir.positive += 1;
        }
        p
    }

    /// Makes a file system root dentry (unhashed, no parent, flag `ROOT`), owning `inode`.
    pub fn d_alloc_root(inode: Arc<Inode>) -> DRef {
        let d = Box::new(Dentry {
            seq: SeqCount::new(),
            flags: AtomicU32::new(ROOT),
            hash: AtomicU64::new(0),
            parent: AtomicPtr::new(ptr::null_mut()),
            inode: AtomicPtr::new(Arc::into_raw(inode) as *mut _),
            next: AtomicPtr::new(ptr::null_mut()),
            name: DName::new(b"/"),
            cold: Cold {
                refs: RefCount::new(1),
                cookie: AtomicU64::new(0),
            },
        });
        DRef(NonNull::from(Box::leak(d)))
    }

    /// Turns a negative child positive (create over a negative entry). The caller holds the
    /// parent's lock.
    pub fn d_instantiate(
        &self,
        d: &Dentry,
        inode: Arc<Inode>,
        dir: &mut crate::inode::DirState,
        guard: &Guard,
    ) {
        d.seq.write_begin();
        d.set_inode(Some(inode), guard);
        d.seq.write_end();
        // A new entry gets a fresh cookie, so an open readdir sees it at the end.
        self.recookie(d, dir);
        dir.positive += 1;
    }

    fn recookie(&self, d: &Dentry, dir: &mut crate::inode::DirState) {
        let old = d.cold.cookie.load(Relaxed);
        let p = dir
            .children
            .remove(&old)
            .expect("child missing from its directory");
        let c = dir.alloc_cookie();
        d.cold.cookie.store(c, Relaxed);
        dir.children.insert(c, p);
    }

    /// Unlink of a non-directory: the child turns negative in place. The caller holds the
    /// parent's lock.
    pub fn d_delete(&self, d: &Dentry, dir: &mut crate::inode::DirState, guard: &Guard) {
        d.seq.write_begin();
        d.set_inode(None, guard);
        d.seq.write_end();
        dir.positive -= 1;
    }

    /// Removes a child from the hash and its directory and drops the hash's reference. The
    /// caller holds the parent's lock.
    pub fn d_drop(&self, d: &Dentry, dir: &mut crate::inode::DirState) {
        d.seq.write_begin();
        d.flags.fetch_or(UNHASHED, Release);
        self.unlink(d);
        d.seq.write_end();
        dir.children.remove(&d.cold.cookie.load(Relaxed));
        if !d.inode.load(Relaxed).is_null() {
            dir.positive -= 1;
        }
        // SAFETY: the hash owned one count on every hashed dentry; it gives it up here.
        drop(unsafe { DRef::from_raw(NonNull::from(d)) });
    }

    /// Moves a hashed child to (`new_parent`, `name`). The caller holds both parents'
    /// locks (`from` and `to` are their states; the same state when the parent does not
    /// change) and has removed whatever was at the destination.
    pub fn d_move(
        &self,
        d: &Dentry,
        new_parent: &Dentry,
        name: &Component<'_>,
        from: &mut crate::inode::DirState,
        to: Option<&mut crate::inode::DirState>,
        guard: &Guard,
    ) {
        let positive = !d.inode.load(Relaxed).is_null();
        d.seq.write_begin();
        self.unlink(d);
        let old_parent = d.parent.load(Relaxed);
        let newp = new_parent as *const Dentry as *mut Dentry;
        if old_parent != newp {
            // The new parent's directory lock is held and it is live.
            new_parent.cold.refs.get();
            d.parent.store(newp, Release);
            if let Some(op) = NonNull::new(old_parent) {
                // SAFETY: the moved dentry owned a count on its old parent.
                let old = unsafe { DRef::from_raw(op) };
                let old = SendPtr(old.into_raw().as_ptr());
                // SAFETY: the count is dropped after a grace period, so a reader that read
                // the old parent pointer still finds it alive.
                unsafe {
                    guard.defer_unchecked(move || {
                        drop(DRef::from_raw(NonNull::new_unchecked(old.into_inner())))
                    });
                }
            }
        }
        // SAFETY: we hold the parent locks and are inside the write section.
        unsafe { d.name.set(name.bytes, guard) };
        d.hash.store(key_hash(newp as usize, name.hash), Relaxed);
        self.link(d);
        d.seq.write_end();
        let cookie = d.cold.cookie.load(Relaxed);
        let p = from
            .children
            .remove(&cookie)
            .expect("moved child not in its directory");
        if positive {
            from.positive -= 1;
        }
        let to = match to {
            Some(t) => t,
            None => from,
        };
        let c = to.alloc_cookie();
        d.cold.cookie.store(c, Relaxed);
        to.children.insert(c, p);
        if positive {
            to.positive += 1;
        }
    }

    /// Swaps the names of two hashed dentries (`RENAME_EXCHANGE`). Both write sections are
    /// open at once, so no reader sees either name half-moved. The caller holds both
    /// parents' locks (`sa`, `sb`: the states of `a`'s and `b`'s parents; `sb` is `None`
    /// when they share a parent).
    pub fn d_exchange(
        &self,
        a: &Dentry,
        b: &Dentry,
        sa: &mut crate::inode::DirState,
        sb: Option<&mut crate::inode::DirState>,
        guard: &Guard,
    ) {
        a.seq.write_begin();
        b.seq.write_begin();
        self.unlink(a);
        self.unlink(b);
        let (pa, pb) = (a.parent.load(Relaxed), b.parent.load(Relaxed));
        // Each keeps owning one count on a parent: the counts swap along with the pointers.
        a.parent.store(pb, Release);
        b.parent.store(pa, Release);
        let (na, nb) = (a.name.to_vec(guard), b.name.to_vec(guard));
        // SAFETY: both parents are locked and both write sections are open.
        unsafe {
            a.name.set(&nb, guard);
            b.name.set(&na, guard);
        }
        let (ha, hb) = (a.hash.load(Relaxed), b.hash.load(Relaxed));
        a.hash.store(hb, Relaxed);
        b.hash.store(ha, Relaxed);
        self.link(a);
        self.link(b);
        // Each takes the other's place in the readdir order.
        let (ca, cb) = (a.cold.cookie.load(Relaxed), b.cold.cookie.load(Relaxed));
        a.cold.cookie.store(cb, Relaxed);
        b.cold.cookie.store(ca, Relaxed);
        let (pa_ptr, pb_ptr) = (NonNull::from(a), NonNull::from(b));
        match sb {
            None => {
                sa.children.insert(ca, pb_ptr);
                sa.children.insert(cb, pa_ptr);
            }
            Some(sb) => {
                sa.children.insert(ca, pb_ptr);
                sb.children.insert(cb, pa_ptr);
            }
        }
        b.seq.write_end();
        a.seq.write_end();
    }

    /// Drops every dentry of a file system being torn down. The caller guarantees that no
    /// other thread changes this file system any more (it is unmounted and unreachable).
    pub fn teardown(&self) {
        let guard = crossbeam_epoch::pin();
        let mut all = Vec::new();
        for b in self.buckets.iter() {
            let mut p = b.swap(ptr::null_mut(), Acquire);
            while let Some(d) = NonNull::new(p) {
                all.push(d);
                // SAFETY: linked dentries are alive until their hash count is dropped below.
                p = unsafe { d.as_ref() }.next.load(Acquire);
            }
        }
        for d in &all {
            // SAFETY: as above.
            let dr = unsafe { d.as_ref() };
            dr.flags.fetch_or(UNHASHED, Release);
            if let Some(i) = dr.inode(&guard) {
                if let Some(dir) = i.dir() {
                    let mut st = dir.lock();
                    st.children.clear();
                    st.dead = true;
                    st.positive = 0;
                }
            }
        }
        for d in all {
            // SAFETY: each hashed dentry carried the hash's count.
            drop(unsafe { DRef::from_raw(d) });
        }
    }
}

impl std::fmt::Debug for DHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DHash({} buckets)", self.mask + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn lookup_fields_apart_from_refcount() {
        // The walk reads the first two lines; references are taken on the third.
        assert_eq!(offset_of!(Dentry, seq), 0);
        assert!(offset_of!(Dentry, next) < 64);
        assert!(offset_of!(Dentry, inode) < 64);
        assert!(offset_of!(Dentry, parent) < 64);
        assert!(offset_of!(Dentry, hash) < 64);
        assert!(offset_of!(Dentry, name) + size_of::<DName>() <= 128);
        assert_eq!(offset_of!(Dentry, cold) % 64, 0);
        assert!(offset_of!(Dentry, cold) >= 128);
        assert_eq!(size_of::<Dentry>(), 192);
    }
}
