//! A directory's readdir index: its children by cookie, in cookie order.
//!
//! # Mechanism
//! Cookies are handed out in increasing order (`DirState::alloc_cookie`), so a new child
//! always sorts last, and a child given a fresh cookie (a create over a negative entry, a
//! rename into the directory) moves to the end. The index is a vector of (cookie, child)
//! pairs in increasing cookie order. A removed child leaves a hole (its value taken) until
//! the holes outnumber the live entries; then one pass closes them up. So:
//! - adding a child with a fresh cookie is a push, and giving the last child a fresh cookie
//!   (W8's create over the negative entry its unlink left) is a store;
//! - a removal is a binary search and a store, and the compaction it may start is paid for
//!   by the removals since the last one (amortized O(1) per removal);
//! - a readdir from a cookie is a binary search, then a scan that skips holes.
//!
//! It replaces a `BTreeMap<u64, _>`, which allocated or freed a node as a directory's
//! only entries came and went and re-balanced on every re-key: about 440 instructions of
//! each create + unlink pair (callgrind, `examples/create_unlink_loop`).
//!
//! Memory: one word in the directory's state (so every inode, which has room for one,
//! stays in its allocator class); with the first child, a 32-byte header; then 16 bytes
//! per child, plus holes (at most as many as live entries, or 8) and the vector's spare
//! capacity, given back when the index fills a quarter of it or less.
//!
//! # What protects it
//! Nothing of its own: it lives in `DirState`, under its directory's lock.

/// Children by cookie, in cookie order (see the module docs). One word: an index with no
/// children has no allocation, and the index adds nothing to an inode (every inode has room
/// for a directory's state) beyond a pointer.
#[derive(Debug, Clone)]
pub struct CookieIndex<V> {
    inner: Option<Box<Inner<V>>>,
}

#[derive(Debug, Clone)]
struct Inner<V> {
    /// (cookie, child) in strictly increasing cookie order; `None` is a hole.
    slots: Vec<(u64, Option<V>)>,
    /// Entries that are not holes.
    live: usize,
}

impl<V> Default for CookieIndex<V> {
    fn default() -> Self {
        CookieIndex { inner: None }
    }
}

/// Holes always allowed before a compaction, however few the live entries.
const MIN_HOLES: usize = 8;

/// Slots an emptied index keeps for the next child (a directory whose only entries come
/// and go); past this it frees them.
const KEEP_EMPTY: usize = 16;

impl<V: Copy> CookieIndex<V> {
    /// How many children (tests; `DirState` counts its positive ones itself).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.inner.as_ref().map_or(0, |i| i.live)
    }

    /// Whether there are none.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.inner.as_ref().map_or(true, |i| i.live == 0)
    }

    /// Puts `v` under cookie `c`; returns what was there.
    pub fn insert(&mut self, c: u64, v: V) -> Option<V> {
        let inner = self.inner.get_or_insert_with(|| {
            Box::new(Inner {
                slots: Vec::new(),
                live: 0,
            })
        });
        match inner.find(c) {
            Ok(i) => {
                let old = inner.slots[i].1.replace(v);
                if old.is_none() {
                    inner.live += 1;
                }
                old
            }
            Err(i) => {
                inner.slots.insert(i, (c, Some(v)));
                inner.live += 1;
                None
            }
        }
    }

    /// Takes the child under cookie `c` out.
    pub fn remove(&mut self, c: &u64) -> Option<V> {
        let inner = self.inner.as_mut()?;
        let old = inner.remove(*c)?;
        if inner.live == 0 && inner.slots.capacity() > KEEP_EMPTY {
            self.inner = None;
        }
        Some(old)
    }

    /// Moves the child under cookie `old` to cookie `new`, which is larger than every
    /// cookie here (a fresh one); returns whether there was one.
    pub fn rekey_to_end(&mut self, old: u64, new: u64) -> bool {
        let Some(inner) = self.inner.as_mut() else {
            return false;
        };
        debug_assert!(inner.slots.last().map_or(true, |s| s.0 < new));
        if let Some(last) = inner.slots.last_mut() {
            if last.0 == old && last.1.is_some() {
                last.0 = new;
                return true;
            }
        }
        match inner.remove(old) {
            Some(v) => {
                inner.slots.push((new, Some(v)));
                inner.live += 1;
                true
            }
            None => false,
        }
    }

    /// The children with cookies from `from` on, in cookie order.
    pub fn range_from(&self, from: u64) -> impl Iterator<Item = (&u64, &V)> {
        let slots = self.slots();
        let start = slots.partition_point(|s| s.0 < from);
        slots[start..]
            .iter()
            .filter_map(|(c, v)| v.as_ref().map(|v| (c, v)))
    }

    /// The children, in cookie order.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.slots().iter().filter_map(|(_, v)| v.as_ref())
    }

    /// Removes every child.
    pub fn clear(&mut self) {
        self.inner = None;
    }

    fn slots(&self) -> &[(u64, Option<V>)] {
        self.inner.as_ref().map_or(&[], |i| &i.slots)
    }

    /// Checks the invariants (tests).
    #[cfg(test)]
    fn check(&self) {
        let Some(i) = self.inner.as_ref() else { return };
        let s = &i.slots;
        assert!(s.windows(2).all(|w| w[0].0 < w[1].0), "cookie order");
        assert_eq!(s.iter().filter(|s| s.1.is_some()).count(), i.live);
        assert!(
            s.last().map_or(true, |s| s.1.is_some()),
            "a hole at the end"
        );
        assert!(s.len() - i.live <= i.live.max(MIN_HOLES), "too many holes");
        assert!(
            i.live > 0 || s.capacity() <= KEEP_EMPTY,
            "an empty index keeps memory"
        );
    }
}

impl<V: Copy> Inner<V> {
    /// Where cookie `c` is (`Ok`, hole or not) or would go (`Err`).
    #[inline]
    fn find(&self, c: u64) -> Result<usize, usize> {
        // The last entry first: a new child, or a re-key or removal of the newest one, is
        // the common case.
        match self.slots.last() {
            None => Err(0),
            Some(&(last, _)) if c > last => Err(self.slots.len()),
            Some(&(last, _)) if c == last => Ok(self.slots.len() - 1),
            Some(_) => self.slots.binary_search_by_key(&c, |s| s.0),
        }
    }

    /// Takes the child under `c` out, leaving a hole (or none, at the end), and compacts or
    /// shrinks when the holes or the spare capacity call for it.
    fn remove(&mut self, c: u64) -> Option<V> {
        let i = self.find(c).ok()?;
        let old = self.slots[i].1.take()?;
        self.live -= 1;
        if i + 1 == self.slots.len() {
            // Holes at the end go at once: nothing after them needs their places.
            while matches!(self.slots.last(), Some((_, None))) {
                self.slots.pop();
            }
        }
        if self.slots.len() - self.live > self.live.max(MIN_HOLES) {
            self.slots.retain(|s| s.1.is_some());
        }
        // Spare capacity goes back once the index fills a quarter of it or less.
        let cap = self.slots.capacity();
        if cap > KEEP_EMPTY && self.slots.len() <= cap / 4 {
            self.slots.shrink_to(self.slots.len() * 2);
        }
        Some(old)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[derive(Debug, Clone)]
    enum Op {
        /// A child with a fresh cookie.
        Push,
        /// Insert at an existing or past cookie (an exchange, or an arbitrary key).
        Insert(u64),
        /// Remove the n-th cookie handed out (present or not).
        Remove(usize),
        /// Re-key the n-th cookie handed out to a fresh one.
        Rekey(usize),
        /// Readdir from the n-th cookie handed out.
        Range(usize),
        Clear,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => Just(Op::Push),
            1 => (0u64..64).prop_map(Op::Insert),
            4 => any::<usize>().prop_map(Op::Remove),
            2 => any::<usize>().prop_map(Op::Rekey),
            1 => any::<usize>().prop_map(Op::Range),
            1 => Just(Op::Clear),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Every operation agrees with a `BTreeMap` that does the same, and the
        /// invariants hold after each.
        #[test]
        #[cfg_attr(miri, ignore = "the module has no unsafe code; four cases took five minutes of the Miri run")]
        fn agrees_with_a_btreemap(ops in proptest::collection::vec(op(), 0..300)) {
            let mut ix = CookieIndex::default();
            let mut model = BTreeMap::new();
            let mut next = 64u64;
            let mut v = 0u32;
            for op in ops {
                let nth = |n: usize| 64 + (n as u64 % (next - 63));
                match op {
                    Op::Push => {
                        v += 1;
                        prop_assert_eq!(ix.insert(next, v), model.insert(next, v));
                        next += 1;
                    }
                    Op::Insert(c) => {
                        // Below every pushed cookie: the middle-insert path.
                        v += 1;
                        prop_assert_eq!(ix.insert(c, v), model.insert(c, v));
                    }
                    Op::Remove(n) => {
                        let c = nth(n);
                        prop_assert_eq!(ix.remove(&c), model.remove(&c));
                    }
                    Op::Rekey(n) => {
                        let c = nth(n);
                        let had = model.remove(&c);
                        if let Some(x) = had {
                            model.insert(next, x);
                        }
                        prop_assert_eq!(ix.rekey_to_end(c, next), had.is_some());
                        next += 1;
                    }
                    Op::Range(n) => {
                        let c = nth(n);
                        let a: Vec<_> = ix.range_from(c).map(|(&k, &v)| (k, v)).collect();
                        let b: Vec<_> = model.range(c..).map(|(&k, &v)| (k, v)).collect();
                        prop_assert_eq!(a, b);
                    }
                    Op::Clear => {
                        ix.clear();
                        model.clear();
                    }
                }
                ix.check();
                prop_assert_eq!(ix.len(), model.len());
                prop_assert_eq!(ix.is_empty(), model.is_empty());
                let a: Vec<_> = ix.values().copied().collect();
                let b: Vec<_> = model.values().copied().collect();
                prop_assert_eq!(a, b);
            }
        }
    }

    #[test]
    fn the_last_child_rekeyed_in_place_keeps_one_slot() {
        // W8's steady state: one negative entry re-keyed by every create.
        let mut ix = CookieIndex::default();
        ix.insert(3, 'a');
        for c in 4..1000 {
            assert!(ix.rekey_to_end(c - 1, c));
            assert_eq!(ix.slots().len(), 1);
        }
        assert_eq!(ix.range_from(0).collect::<Vec<_>>(), vec![(&999, &'a')]);
    }

    #[test]
    #[cfg_attr(miri, ignore = "100,000 entries; the module has no unsafe code")]
    fn removals_give_memory_back() {
        let mut ix = CookieIndex::default();
        for c in 0..100_000u64 {
            ix.insert(c, c);
        }
        for c in 0..99_990u64 {
            assert_eq!(ix.remove(&c), Some(c));
        }
        ix.check();
        assert_eq!(ix.len(), 10);
        let cap = ix.inner.as_ref().unwrap().slots.capacity();
        assert!(cap <= 64, "capacity {cap}");
        assert_eq!(ix.values().count(), 10);
    }

    #[test]
    #[cfg_attr(miri, ignore = "a quadratic check; the module has no unsafe code")]
    fn removing_from_the_front_compacts() {
        let mut ix = CookieIndex::default();
        for c in 0..1000u64 {
            ix.insert(c, c);
        }
        for c in 0..900u64 {
            ix.remove(&c);
            ix.check();
        }
        assert!(ix.slots().len() <= 200);
        assert_eq!(ix.range_from(950).count(), 50);
        assert_eq!(ix.remove(&5), None);
    }
}
