//! The inode cache: objects of file systems whose inodes live outside the dentry tree
//! (a host directory, later a SQL store), keyed by (file system, inode number), in front
//! of a backend whose every miss may be a slow round trip (seed 000, carried further).
//!
//! hostfs keeps its objects here (`hostfs::HostFs`); memfs needs no such cache, since
//! its inodes are owned by its dentries.
//!
//! # Mechanism
//! The key space is split over shards (a power of two, four per CPU); each shard has a
//! table of hash chains of [`Node`]s, which grows (see "Growth"), and one mutex for its
//! writers. Keys are hashed by groups of eight consecutive numbers, which share a shard
//! and a line of chain heads, so that threads loading different directories write
//! different lines (`InodeCache::hash`).
//! - **Hit:** lock-free. Under an epoch guard the chain is walked with acquire loads, and a
//!   reference is taken with "get unless zero" ([`Node::try_get`]). No lock, no write but
//!   the count.
//! - **Miss:** the shard lock is taken to look again and, if the key is still absent, to
//!   link a *new* node (Linux's `I_NEW`) holding the caller's reference; the lock is
//!   dropped and only then is the backend asked (`load`), with no lock held. The loader
//!   then publishes the value (`LIVE`) or the failure (`FAILED`, and unlinks the node).
//!   Exactly one caller loads a key at a time: every other caller finds the new node and
//!   waits for it (in a hashed wait table, like Linux's `bit_waitqueue`, so a node carries
//!   no wait queue). After a failure, waiters look again and one of them loads. A load that
//!   panics is a failure too: a guard fails its node as it unwinds, so no waiter is left
//!   asleep on a load that will never finish.
//! - **Eviction** ([`InodeCache::evict`]) takes the shard lock and succeeds only for a node
//!   nobody holds: it moves the count from 1 (the chain's own reference) to 0 with one
//!   CAS, so no reader can take a reference after it decided (get unless zero fails), and
//!   unlinks the node. A reader that finds a node at count 0 is looking at one being
//!   evicted or dropped: it waits the eviction out by taking and releasing the shard lock
//!   (the evictor holds it until the node is unlinked) and looks again, so it never
//!   returns an evicted object.
//! - **Sweep** ([`InodeCache::shrink`]): a CLOCK hand over shards. A shard's chains are
//!   searched lock-free for nodes to evict; only a chain that has one is searched again
//!   under the shard lock, one chain per hold, so a miss waits for one chain's sweep at
//!   most. The sweep's test of a node (the caller's `unused`: "nothing else holds the
//!   object") is asked again once the node is dead, since whoever held it until just
//!   before the CAS may have shared its object; a node that fails the second test is put
//!   back (its count from 0 to 1, under the lock that lookups that found it dead wait
//!   for). Loom: `lookup_races_a_sweep`, and `a_holder_shares_the_object_before_a_sweep`
//!   with its twin that asks once.
//! - There is no global lock anywhere: a load holds one shard lock, briefly (twice if it
//!   fails). The counters are striped per thread (`sync::StripedCounter`), so two threads
//!   that miss in different shards write no common cache line.
//!
//! # Growth
//! A shard's table starts at [`FIRST_CHAINS`] chains (an empty cache costs 2 KiB of
//! chains on two CPUs) and grows [`GROWTH`]-fold when an insert leaves more than
//! [`MAX_LOAD`] nodes per chain, under the shard lock, as the dentry hash grows
//! (`dentry`, "Growth"): each old chain's nodes move one by one, head first, to the heads
//! of the new table's chains; then the new table is published with a release swap and the
//! old one goes to the epoch collector. A node only ever points at a node moved before it
//! (or null), or at the untouched tail of its old chain, so a lock-free walk never meets a
//! cycle; but one standing on a moved node continues in a chain of the new table and may
//! miss. So a lock-free miss is never an answer: [`InodeCache::get_or_load`] looks again
//! under the shard lock before it links a node (it did so already, for racing loaders),
//! and [`InodeCache::get`] looks again under the lock before it says "absent". Under the
//! lock the table is the one in use and stable. A loom model races a grow with a `get`,
//! and fails when `get` trusts a lock-free miss. Tables never shrink.
//!
//! # References and reclamation
//! A node's count is the number of [`Cached`] handles plus one while it is linked in its
//! chain. The count reaches 0 for good exactly once: by the evictor's CAS, or by the last
//! put after a failed load unlinked the node. (A sweep whose second test fails puts a
//! node it killed back, from 0 to 1, under the shard lock and before unlinking it: nobody
//! holds a dead node, so no put can meet it.) Whoever takes it to 0 has the node unlinked already and
//! hands it to the epoch collector, since lock-free readers may still be walking over it;
//! its memory (and its value) goes after a grace period. Dropping the cache frees what is
//! left; a [`Cached`] borrows the cache, so none can outlive it.
//!
//! # Lock order
//! ```text
//! Shard::lock                 (never held across a backend call)
//!   wait table entry          (leaf; taken by a loader after it drops the shard lock)
//! ```
//!
//! # What protects each field outside its lock
//! - `Shard::table`, its chains and `Node::next`: written only under the shard lock,
//!   with release stores; read lock-free under an epoch guard with acquire loads.
//! - `Shard::linked`: changed only under the shard lock (relaxed; it only decides grows).
//! - The counters and `len`: striped, relaxed; sums are not snapshots.
//! - `Node::refs`: atomic; see "References".
//! - `Node::state` and `Node::value`: the value is set once by the loader, before it
//!   stores `LIVE` with release; readers read it only after an acquire load of `LIVE`.

use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::OnceLock;

use crossbeam_epoch::{self as epoch, Atomic, Guard, Owned, Shared};
use crossbeam_utils::CachePadded;

use crate::reclaim::FreeBatch;
use crate::sync::{AtomicU64, AtomicU8, AtomicUsize, BatchedCounter, Mutex, StripedCounter};

/// What names an inode: the file system's id and the inode number within it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct InodeKey {
    /// The file system (its instance id).
    pub fs: u64,
    /// The inode number.
    pub ino: u64,
}

/// Chains a shard's table starts with (a power of two): 8 shards of 32 on two CPUs, 2 KiB.
#[cfg(not(any(loom, miri)))]
const FIRST_CHAINS: usize = 32;
/// Under Miri, four: the tests that grow every table do it with a few hundred keys, where
/// Miri takes about a second per key and epoch pin.
#[cfg(all(miri, not(loom)))]
const FIRST_CHAINS: usize = 4;
/// Under loom, one chain per shard, so that the models' keys collide and a third key in a
/// shard grows its table.
#[cfg(loom)]
const FIRST_CHAINS: usize = 1;
/// Consecutive inode numbers that share a shard and a line of chain heads (see
/// `InodeCache::hash`): a line of eight-byte heads.
const GROUP: u64 = 8;
/// A shard's table grows once it holds more nodes than this per chain...
const MAX_LOAD: usize = 2;
/// ...to this many times its chains.
const GROWTH: usize = 4;

const NEW: u8 = 0;
const LIVE: u8 = 1;
const FAILED: u8 = 2;

struct Node<V> {
    key: InodeKey,
    next: Atomic<Node<V>>,
    /// Holders, plus one while linked.
    refs: AtomicU64,
    state: AtomicU8,
    value: OnceLock<V>,
}

impl<V> Node<V> {
    /// Takes a reference unless the count is 0 (being evicted, or unlinked and dying).
    fn try_get(&self) -> bool {
        let mut cur = self.refs.load(Relaxed);
        loop {
            if cur == 0 {
                return false;
            }
            match self
                .refs
                .compare_exchange_weak(cur, cur + 1, Acquire, Relaxed)
            {
                Ok(_) => return true,
                Err(now) => cur = now,
            }
        }
    }
}

/// A shard's array of hash chains (a power of two of them).
struct Table<V> {
    chains: Box<[Atomic<Node<V>>]>,
}

impl<V> Table<V> {
    fn new(n: usize) -> Table<V> {
        Table {
            chains: (0..n).map(|_| Atomic::null()).collect(),
        }
    }

    /// The chain of a key whose hash is `h` (its high half: the low one picks the shard).
    fn chain(&self, h: u64) -> &Atomic<Node<V>> {
        &self.chains[(h >> 32) as usize & (self.chains.len() - 1)]
    }
}

struct Shard<V> {
    lock: Mutex<()>,
    /// Never null; replaced only under the lock that guards the shard (see "Growth").
    table: Atomic<Table<V>>,
    /// Nodes linked in the table's chains; changed only under the lock that guards the
    /// shard, where it decides a grow.
    linked: AtomicUsize,
}

/// Counters of what the cache did (racy sums: for statistics and tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InodeCacheStats {
    /// Lookups answered by a live node, lock-free.
    pub hits: u64,
    /// Backend loads started (one per miss that found no node).
    pub loads: u64,
    /// Lookups that waited for another caller's load.
    pub waits: u64,
    /// Shard-lock acquisitions (a load takes one, a failed load a second, an eviction
    /// one, a sweep one per chain it evicts from; a hit none).
    pub shard_locks: u64,
    /// Nodes evicted.
    pub evictions: u64,
    /// Nodes the cache's own sweep ([`InodeCache::shrink`]) looked at to find them: each
    /// costs a read of the node and of what `unused` asks about. Evictions by key
    /// ([`InodeCache::evict_unused`]) search nothing.
    pub searched: u64,
    /// Acquisitions of the one cache-wide lock that the ablation's locked miss path takes
    /// in place of every shard lock ([`InodeCache::set_one_lock`]); 0 otherwise.
    pub global_locks: u64,
}

/// The counters, striped per thread: two threads that miss at once write no common line.
#[derive(Default)]
struct Counters {
    hits: StripedCounter,
    loads: StripedCounter,
    waits: StripedCounter,
    shard_locks: StripedCounter,
    evictions: StripedCounter,
    searched: StripedCounter,
    global_locks: StripedCounter,
}

/// The cache. See the module docs.
pub struct InodeCache<V: Send + Sync + 'static> {
    shards: Box<[CachePadded<Shard<V>>]>,
    waiters: Waiters,
    seed: u64,
    counters: Counters,
    /// Nodes not yet dead: linked ones, and failed loads' nodes still held.
    len: BatchedCounter,
    /// The shard a [`InodeCache::shrink`] looks at next (CLOCK's hand, over shards).
    hand: AtomicUsize,
    /// The ablation switch (see [`InodeCache::set_one_lock`]).
    one_lock: std::sync::atomic::AtomicBool,
    /// The lock every miss takes when `one_lock` is set.
    global: Mutex<()>,
    /// Protocol breakages the loom models switch on, to show that they catch them.
    #[cfg(loom)]
    broken: Broken,
}

/// What a loom model's twin breaks.
#[cfg(loom)]
#[derive(Clone, Copy, Default)]
struct Broken {
    /// The miss path links its node without looking again under the shard lock.
    no_second_look: bool,
    /// Eviction (by key or by sweep) checks the count, then stores 0 (instead of one CAS).
    evict_check_then_store: bool,
    /// [`InodeCache::get`] answers "absent" on a lock-free miss, without looking again
    /// under the shard lock.
    get_trusts_a_miss: bool,
    /// [`InodeCache::shrink`] evicts on its first `unused` answer, without asking again
    /// once the node is dead.
    no_second_unused: bool,
}

/// A reference to a cached object: dereferences to it, and keeps it from eviction until
/// dropped.
pub struct Cached<'a, V: Send + Sync + 'static> {
    cache: &'a InodeCache<V>,
    node: *const Node<V>,
}

// SAFETY: a `Cached` is a counted reference to a node whose value is `Send + Sync`; the
// count is atomic, and dropping it on another thread only decrements it and may defer the
// node's destruction to the epoch collector, which is thread-safe.
unsafe impl<V: Send + Sync + 'static> Send for Cached<'_, V> {}
// SAFETY: shared access gives `&V` only, and `V: Sync`.
unsafe impl<V: Send + Sync + 'static> Sync for Cached<'_, V> {}

impl<V: Send + Sync + 'static> Cached<'_, V> {
    fn node(&self) -> &Node<V> {
        // SAFETY: this handle holds a reference on the node, so its count is above 0 and
        // it is neither freed nor handed to the collector while the handle lives.
        unsafe { &*self.node }
    }

    /// The key it was cached under.
    pub fn key(&self) -> InodeKey {
        self.node().key
    }
}

impl<V: Send + Sync + 'static> std::ops::Deref for Cached<'_, V> {
    type Target = V;
    fn deref(&self) -> &V {
        self.node().value.get().expect("a handed-out node is live")
    }
}

impl<V: Send + Sync + 'static> Clone for Cached<'_, V> {
    fn clone(&self) -> Self {
        self.node().refs.fetch_add(1, Relaxed);
        Cached {
            cache: self.cache,
            node: self.node,
        }
    }
}

impl<V: Send + Sync + 'static> Drop for Cached<'_, V> {
    fn drop(&mut self) {
        self.cache.put(self.node);
    }
}

impl<V: Send + Sync + 'static> Default for InodeCache<V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<V: Send + Sync + 'static> InodeCache<V> {
    /// An empty cache with four shards per CPU (two under loom).
    pub fn new() -> Self {
        #[cfg(not(loom))]
        let n = std::thread::available_parallelism().map_or(4, |n| n.get()) * 4;
        #[cfg(loom)]
        let n = 2usize;
        let n = n.next_power_of_two();
        InodeCache {
            shards: (0..n)
                .map(|_| {
                    CachePadded::new(Shard {
                        lock: Mutex::new(()),
                        table: Atomic::new(Table::new(FIRST_CHAINS)),
                        linked: AtomicUsize::new(0),
                    })
                })
                .collect(),
            waiters: Waiters::new(n),
            seed: crate::name::name_key(),
            counters: Counters::default(),
            len: BatchedCounter::default(),
            hand: AtomicUsize::new(0),
            one_lock: std::sync::atomic::AtomicBool::new(false),
            global: Mutex::new(()),
            #[cfg(loom)]
            broken: Broken::default(),
        }
    }

    /// The key's hash, keyed per process (inode numbers come from the backend): the low
    /// half picks the shard, the high half the chain (see [`Table::chain`]).
    ///
    /// Both come from the number's group of [`GROUP`], and the chain from its place in the
    /// group too (turned by the group's hash): the eight numbers of a group are in one
    /// shard, in eight adjacent chains, whose heads share a cache line. A backend numbers the objects of a directory (made
    /// together) close together, and a listing loads them together; so a thread loading
    /// one directory writes few lines of chain heads, and another thread, loading another
    /// directory, other lines. With the number hashed whole, each insert wrote a random
    /// line that the other thread's inserts wrote too: a capped W5 at two threads spent
    /// about half as much again in the lookups and trims of this cache as the same run
    /// with a namespace per thread. Groups are hashed with the process's key, so numbers
    /// a backend chose to collide share at most a group's lines.
    #[inline]
    fn hash(&self, k: InodeKey) -> u64 {
        let group = ((k.ino / GROUP) ^ self.seed).wrapping_mul(0x9e37_79b9_7f4a_7c15)
            ^ k.fs.wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
        let group = group ^ (group >> 29);
        // The group's run of chains, and the number's place in it, turned by the group's
        // hash: the eight numbers of a group take the eight places, and numbers spaced by
        // a multiple of eight (all at one place of their groups) spread over all eight.
        let chain = (group >> 35) * GROUP + (k.ino + (group >> 32)) % GROUP;
        (group & 0xffff_ffff) | (chain << 32)
    }

    /// The key's shard and hash.
    fn shard_of(&self, k: InodeKey) -> (&Shard<V>, u64) {
        let h = self.hash(k);
        (&self.shards[h as usize & (self.shards.len() - 1)], h)
    }

    /// The shard's table as of now: lock-free, possibly one a grow is emptying (a miss in
    /// it is no answer); under the lock that guards the shard, the one in use.
    fn table<'g>(shard: &Shard<V>, g: &'g Guard) -> &'g Table<V> {
        // SAFETY: the table is never null, and one replaced by a grow is freed only after
        // a grace period, which `g` holds off.
        unsafe { shard.table.load(Acquire, g).deref() }
    }

    /// The node for `k` in `chain`, if any.
    fn find<'g>(chain: &Atomic<Node<V>>, k: InodeKey, g: &'g Guard) -> Option<&'g Node<V>> {
        Self::nodes(chain, g).find(|n| n.key == k)
    }

    fn lock_shard<'s>(&'s self, s: &'s Shard<V>) -> crate::sync::MutexGuard<'s, ()> {
        if self.one_lock.load(Relaxed) {
            self.counters.global_locks.add(1);
            return self.global.lock();
        }
        self.counters.shard_locks.add(1);
        s.lock.lock()
    }

    /// The ablation switch of W5 (`scalevfs bench`): with `on`, every miss, eviction and
    /// shrink takes one cache-wide lock instead of its shard's, as the inode cache did
    /// before seed 000 split it (Linux's global `inode_hash_lock`). Hits stay lock-free.
    /// For measurement only: set it before the cache is shared (a miss that started under
    /// one mode and ends under the other would lock two different locks).
    pub fn set_one_lock(&self, on: bool) {
        self.one_lock.store(on, Relaxed);
    }

    /// Evicts nodes that nobody holds and that `unused` lets go, shard by shard from where
    /// the last call stopped (a CLOCK hand), until as many went as the cache held above
    /// `target` when the call began (the length is read once: its sum reads lines other
    /// threads keep writing) or every shard was looked at once; returns how many went.
    ///
    /// Each shard is searched lock-free, chain by chain; only a chain with a node to evict
    /// is searched again under the shard lock, one chain per hold, so a miss never waits
    /// for more than one chain's sweep. A node goes by the same one CAS as in
    /// [`InodeCache::evict`] (so a reader never gets an evicted node), and then `unused`
    /// is asked again: a caller that held the node before the CAS may have shared its
    /// object meanwhile (a first answer is only a hint), and a node that is no longer
    /// unused is put back. So `unused` must be a property that nobody can undo without
    /// holding the node ("nothing else holds the object"): once the node is dead, its answer
    /// stays. It sees only loaded nodes, lock-free or under the shard lock. A shard whose
    /// table grows during its sweep is left for the next call.
    pub fn shrink(&self, target: usize, unused: impl Fn(&V) -> bool) -> usize {
        self.shrink_searching(target, usize::MAX, unused)
    }

    /// [`InodeCache::shrink`], stopping also once it has looked at `max_search` nodes (a
    /// chain is searched whole): a budget, as Linux gives its shrinkers `nr_to_scan`, for a
    /// caller that expects few victims.
    pub fn shrink_searching(
        &self,
        target: usize,
        max_search: usize,
        unused: impl Fn(&V) -> bool,
    ) -> usize {
        let unused = Self::loaded_and(&unused);
        // How many to evict, read once: the length is striped, and its sum reads lines
        // other threads keep writing.
        let want = self.len().saturating_sub(target);
        let (mut gone, mut searched) = (0, 0);
        let mut retired = Retired::default();
        'shards: for _ in 0..self.shards.len() {
            if gone >= want {
                break;
            }
            let i = self.hand.fetch_add(1, Relaxed) & (self.shards.len() - 1);
            let shard = &self.shards[i];
            let g = epoch::pin();
            let table = Self::table(shard, &g);
            for chain in table.chains.iter() {
                if searched >= max_search {
                    break 'shards;
                }
                // Only a hint: checked again under the lock.
                let victim = Self::nodes(chain, &g).any(|n| {
                    searched += 1;
                    n.refs.load(Relaxed) == 1 && unused(n)
                });
                if !victim {
                    continue;
                }
                let _l = self.lock_shard(shard);
                if !std::ptr::eq(Self::table(shard, &g), table) {
                    break;
                }
                for n in Self::nodes(chain, &g) {
                    gone +=
                        usize::from(self.kill_unused(shard, chain, n, &unused, &g, &mut retired));
                }
                drop(_l);
                if gone >= want {
                    break 'shards;
                }
            }
        }
        self.counters
            .searched
            .add(i64::try_from(searched).unwrap_or(i64::MAX));
        gone
    }

    /// The nodes of `chain` as they are reached (lock-free: a grow or an eviction may cut
    /// the walk short; under the shard lock: every node linked in it). Removing the node
    /// just returned does not stop the walk, whose next link was read before.
    fn nodes<'g>(chain: &Atomic<Node<V>>, g: &'g Guard) -> impl Iterator<Item = &'g Node<V>> {
        let mut cur = chain.load(Acquire, g);
        std::iter::from_fn(move || {
            // SAFETY: nodes reachable from a chain under the guard are freed only after a
            // grace period (they are unlinked before they are handed to the collector).
            let n = unsafe { cur.as_ref() }?;
            cur = n.next.load(Acquire, g);
            Some(n)
        })
    }

    /// The cached object for `k`, if it is cached and loaded (waiting for a load in
    /// progress); never loads. A lock-free miss is looked at again under the shard lock,
    /// since a grow moving the shard's chains can hide a node from a lock-free walk.
    pub fn get(&self, k: InodeKey) -> Option<Cached<'_, V>> {
        loop {
            if let Lookup::Hit(c) = self.lookup(k) {
                return Some(c);
            }
            #[cfg(loom)]
            if self.broken.get_trusts_a_miss {
                return None;
            }
            let (shard, h) = self.shard_of(k);
            let _l = self.lock_shard(shard);
            let g = epoch::pin();
            Self::find(Self::table(shard, &g).chain(h), k, &g)?;
        }
    }

    /// The cached object for `k`, or the result of `load` (called with no lock held, by
    /// exactly one of the callers that miss on `k` at once; the others wait for it and
    /// share its object). A failed load caches nothing: its error goes to its caller, and
    /// each waiter looks again (and may load itself).
    pub fn get_or_load<E>(
        &self,
        k: InodeKey,
        load: impl FnOnce() -> Result<V, E>,
    ) -> Result<Cached<'_, V>, E> {
        let mut load = Some(load);
        loop {
            if let Lookup::Hit(c) = self.lookup(k) {
                return Ok(c);
            }
            let (shard, h) = self.shard_of(k);
            // Made before the shard lock is taken, so that the lock is held only to look
            // again and link (an allocation under it made the other thread wait longer, and
            // park more often, at two threads in W5).
            let fresh = Owned::new(Node {
                key: k,
                next: Atomic::null(),
                // The chain's reference and ours.
                refs: AtomicU64::new(2),
                state: AtomicU8::new(NEW),
                value: OnceLock::new(),
            });
            let node = {
                let _l = self.lock_shard(shard);
                let g = epoch::pin();
                let table = Self::table(shard, &g);
                let chain = table.chain(h);
                #[cfg(loom)]
                let look = !self.broken.no_second_look;
                #[cfg(not(loom))]
                let look = true;
                if look && Self::find(chain, k, &g).is_some() {
                    // Someone linked it after our look (or a grow hid it): go through the
                    // lookup again.
                    continue;
                }
                fresh.next.store(chain.load(Relaxed, &g), Relaxed);
                let node = fresh.into_shared(&g);
                chain.store(node, Release);
                self.len.add(1);
                if shard.linked.fetch_add(1, Relaxed) + 1 > MAX_LOAD * table.chains.len() {
                    self.grow(shard, table, &g);
                }
                node.as_raw()
            };
            self.counters.loads.add(1);
            // If `load` panics, the guard fails the node as it unwinds, so the waiters
            // look again instead of sleeping on a load that will never finish.
            let loading = Loading {
                mine: Some(Cached { cache: self, node }),
                h: h as usize,
            };
            let load = load.take().expect("a caller loads at most once");
            let r = load();
            let mine = loading.finish();
            return match r {
                Ok(v) => {
                    let n = mine.node();
                    if n.value.set(v).is_err() {
                        unreachable!("only the node's creator sets its value");
                    }
                    n.state.store(LIVE, Release);
                    self.waiters.wake(h as usize);
                    Ok(mine)
                }
                Err(e) => {
                    self.fail(mine, h as usize);
                    Err(e)
                }
            };
        }
    }

    /// Replaces `shard`'s table, `old`, by one with [`GROWTH`] times its chains (see
    /// "Growth"). The caller holds the lock that guards the shard.
    #[cold]
    fn grow(&self, shard: &Shard<V>, old: &Table<V>, g: &Guard) {
        let new = Owned::new(Table::new(old.chains.len() * GROWTH)).into_shared(g);
        // SAFETY: just made, and not yet published.
        let table = unsafe { new.deref() };
        for chain in old.chains.iter() {
            // Each chain moves head first, so the nodes still in it are its tail, untouched.
            loop {
                let cur = chain.load(Relaxed, g);
                // SAFETY: under the shard lock every node of the chain is linked and alive.
                let Some(n) = (unsafe { cur.as_ref() }) else {
                    break;
                };
                chain.store(n.next.load(Relaxed, g), Release);
                let to = table.chain(self.hash(n.key));
                n.next.store(to.load(Relaxed, g), Release);
                to.store(cur, Release);
            }
        }
        let old = shard.table.swap(new, Release, g);
        // SAFETY: unpublished now; lock-free readers that loaded it are inside a guard, and
        // its chains own no node (dropping a `Table` frees only its array).
        unsafe { g.defer_destroy(old) };
    }

    /// Unlinks a node whose load failed, wakes its waiters and drops the loader's
    /// reference (and, with it or the waiters' last one, the node).
    fn fail(&self, mine: Cached<'_, V>, h: usize) {
        let n = mine.node();
        let (shard, hash) = self.shard_of(n.key);
        {
            let _l = self.lock_shard(shard);
            let g = epoch::pin();
            Self::unlink(Self::table(shard, &g).chain(hash), mine.node, &g);
            shard.linked.fetch_sub(1, Relaxed);
            n.state.store(FAILED, Release);
        }
        self.waiters.wake(h);
        // The chain's reference: the node is unlinked.
        self.put(mine.node);
        drop(mine);
    }

    /// Removes `node` from `chain`. The caller holds the shard lock.
    fn unlink(chain: &Atomic<Node<V>>, node: *const Node<V>, g: &Guard) {
        let mut link = chain;
        loop {
            let cur = link.load(Acquire, g);
            // SAFETY: under the shard lock no node of this chain is unlinked by anyone else,
            // so every node reachable from it is linked and alive.
            let Some(c) = (unsafe { cur.as_ref() }) else {
                unreachable!("the node is in its chain");
            };
            if std::ptr::eq(c, node) {
                link.store(c.next.load(Acquire, g), Release);
                break;
            }
            link = &c.next;
        }
    }

    fn lookup(&self, k: InodeKey) -> Lookup<'_, V> {
        let (shard, h) = self.shard_of(k);
        loop {
            let g = epoch::pin();
            let Some(n) = Self::find(Self::table(shard, &g).chain(h), k, &g) else {
                return Lookup::Absent;
            };
            if !n.try_get() {
                // Being evicted (or a failed load's node, unlinked and dying): the evictor
                // holds the shard lock until the node is out of the chain.
                drop(g);
                drop(self.lock_shard(shard));
                continue;
            }
            let c = Cached {
                cache: self,
                node: n as *const Node<V>,
            };
            drop(g);
            match c.node().state.load(Acquire) {
                LIVE => {
                    self.counters.hits.add(1);
                    return Lookup::Hit(c);
                }
                NEW => {
                    self.counters.waits.add(1);
                    let n = c.node();
                    self.waiters
                        .wait(h as usize, || n.state.load(Acquire) != NEW);
                    if n.state.load(Acquire) == LIVE {
                        return Lookup::Hit(c);
                    }
                    // FAILED: the node is unlinked; look again.
                }
                _ => {}
            }
        }
    }

    /// `unused` for loaded nodes only (see [`InodeCache::shrink`]).
    fn loaded_and(unused: &impl Fn(&V) -> bool) -> impl Fn(&Node<V>) -> bool + '_ {
        move |n: &Node<V>| n.state.load(Acquire) == LIVE && n.value.get().is_some_and(unused)
    }

    /// Evicts `n`, linked in `chain` of `shard` (whose lock the caller holds), if nobody
    /// holds it and `unused` says so before and after the kill (see
    /// [`InodeCache::shrink`]); returns whether it went.
    fn kill_unused(
        &self,
        shard: &Shard<V>,
        chain: &Atomic<Node<V>>,
        n: &Node<V>,
        unused: &impl Fn(&Node<V>) -> bool,
        g: &Guard,
        retired: &mut Retired<V>,
    ) -> bool {
        if !(unused(n) && self.try_kill(n)) {
            return false;
        }
        #[cfg(loom)]
        let recheck = !self.broken.no_second_unused;
        #[cfg(not(loom))]
        let recheck = true;
        if recheck && !unused(n) {
            // Shared by a holder from before the kill: back to the chain's reference alone.
            // Lookups that found it dead are waiting for this lock, and look again.
            n.refs.store(1, Release);
            return false;
        }
        self.remove(shard, chain, n, g, retired);
        true
    }

    /// Evicts `k` as [`InodeCache::shrink`] would (if it is cached, loaded, nobody holds
    /// it, and `unused` lets it go before and after the kill), but found by its key: for a
    /// caller that knows which objects may have lost their last user. Returns whether it
    /// went. The node goes into `retired`, whose drop frees the batch after one grace
    /// period, so a caller that evicts many defers them once.
    pub fn evict_unused(
        &self,
        k: InodeKey,
        unused: impl Fn(&V) -> bool,
        retired: &mut Retired<V>,
    ) -> bool {
        let unused = Self::loaded_and(&unused);
        let (shard, h) = self.shard_of(k);
        let g = epoch::pin();
        // A lock-free hint first: a key still in use costs no lock.
        if !Self::find(Self::table(shard, &g).chain(h), k, &g)
            .is_some_and(|n| n.refs.load(Relaxed) == 1 && unused(n))
        {
            return false;
        }
        let _l = self.lock_shard(shard);
        let chain = Self::table(shard, &g).chain(h);
        let Some(n) = Self::find(chain, k, &g) else {
            return false;
        };
        self.kill_unused(shard, chain, n, &unused, &g, retired)
    }

    /// Evicts `k` if it is cached and nobody holds it; returns whether it did. A load in
    /// progress is held by its loader, so it is never evicted.
    pub fn evict(&self, k: InodeKey) -> bool {
        let (shard, h) = self.shard_of(k);
        let _l = self.lock_shard(shard);
        let g = epoch::pin();
        let chain = Self::table(shard, &g).chain(h);
        let Some(n) = Self::find(chain, k, &g) else {
            return false;
        };
        if !self.try_kill(n) {
            return false;
        }
        self.remove(shard, chain, n, &g, &mut Retired::to_collector());
        true
    }

    /// Takes `n`'s count from 1 (the chain's reference alone) straight to 0, in one CAS:
    /// no holder, and none can come after (`try_get` refuses 0). The one step that makes
    /// eviction safe against lock-free lookups; [`InodeCache::evict`] and
    /// [`InodeCache::shrink`] both go through it.
    fn try_kill(&self, n: &Node<V>) -> bool {
        #[cfg(loom)]
        if self.broken.evict_check_then_store {
            if n.refs.load(Acquire) != 1 {
                return false;
            }
            n.refs.store(0, Release);
            return true;
        }
        n.refs.compare_exchange(1, 0, AcqRel, Relaxed).is_ok()
    }

    /// Unlinks `n`, killed by [`InodeCache::try_kill`] under `shard`'s lock, from `chain`,
    /// and adds it to `retired`, which frees it after a grace period.
    fn remove(
        &self,
        shard: &Shard<V>,
        chain: &Atomic<Node<V>>,
        n: &Node<V>,
        g: &Guard,
        retired: &mut Retired<V>,
    ) {
        let p = n as *const Node<V>;
        Self::unlink(chain, p, g);
        shard.linked.fetch_sub(1, Relaxed);
        self.len.add(-1);
        self.counters.evictions.add(1);
        // SAFETY: the node is unlinked and its count is 0: nobody can reach it again but
        // readers already inside a guard, and nobody else frees it (`try_kill` let one
        // caller through); `free_node` frees a node so made.
        unsafe { retired.0.push(p.cast_mut()) };
    }

    /// Drops a reference; the one that takes the count to 0 (on an unlinked node) frees it
    /// after a grace period.
    fn put(&self, node: *const Node<V>) {
        // SAFETY: the caller holds a reference on the node, so it is not yet freed.
        let n = unsafe { &*node };
        if n.refs.fetch_sub(1, Release) == 1 {
            std::sync::atomic::fence(Acquire);
            let g = epoch::pin();
            self.len.add(-1);
            // SAFETY: the count reached 0 with the node unlinked (a linked node holds the
            // chain's reference), so only readers inside a guard can still reach it.
            unsafe { g.defer_destroy(Shared::from(node)) };
        }
    }

    /// Nodes in the cache, loads in progress included (racy).
    pub fn len(&self) -> usize {
        self.len.sum().max(0) as usize
    }

    /// Whether at most `limit` nodes are cached, as `len() <= limit` answers, but without
    /// reading what other threads' loads keep writing unless the count is near `limit`
    /// (see [`crate::sync::BatchedCounter`]).
    #[inline]
    pub fn len_at_most(&self, limit: usize) -> bool {
        self.len.at_most(limit as u64)
    }

    /// Whether the cache holds no node (racy).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The chains of every shard's table, summed (for the tests of growth).
    #[cfg(test)]
    fn chains(&self) -> usize {
        let g = epoch::pin();
        self.shards
            .iter()
            .map(|s| Self::table(s, &g).chains.len())
            .sum()
    }

    /// What the cache did so far.
    pub fn stats(&self) -> InodeCacheStats {
        let c = &self.counters;
        let n = |c: &StripedCounter| c.sum().max(0) as u64;
        InodeCacheStats {
            hits: n(&c.hits),
            loads: n(&c.loads),
            waits: n(&c.waits),
            shard_locks: n(&c.shard_locks),
            evictions: n(&c.evictions),
            searched: n(&c.searched),
            global_locks: n(&c.global_locks),
        }
    }
}

/// Nodes evicted by one call, freed together after one grace period (see
/// `reclaim::FreeBatch`), by the thread that drops it.
pub struct Retired<V: Send + Sync + 'static>(FreeBatch<Node<V>>);

impl<V: Send + Sync + 'static> Retired<V> {
    /// A batch that the collector frees, on whichever thread: for a node evicted alone
    /// ([`InodeCache::evict`]: hostfs forgets an object whose last name went), whose value
    /// may hold a host descriptor (a removed directory's) that must not wait for this
    /// thread's next batch.
    fn to_collector() -> Self {
        Retired(FreeBatch::to_collector(free_node::<V>))
    }
}

impl<V: Send + Sync + 'static> Default for Retired<V> {
    fn default() -> Self {
        Retired(FreeBatch::new(free_node::<V>))
    }
}

/// Frees an evicted node.
///
/// # Safety
/// `p` is unlinked with a count of 0 (`InodeCache::remove`), a grace period has passed
/// since, and it is the pointer `Owned::new` gave when the node was linked.
unsafe fn free_node<V>(p: *mut Node<V>) {
    // SAFETY: the caller's contract.
    drop(unsafe { Shared::from(p as *const Node<V>).into_owned() });
}

impl<V: Send + Sync + 'static> Drop for InodeCache<V> {
    fn drop(&mut self) {
        // No `Cached` is alive (each borrows the cache), and no reader: free every node,
        // and every shard's table.
        let g = epoch::pin();
        for s in self.shards.iter() {
            let table = s.table.swap(Shared::null(), Relaxed, &g);
            // SAFETY: `&mut self`: nobody else can reach the table; it was never null.
            let table = unsafe { table.into_owned() };
            for c in table.chains.iter() {
                let mut cur = c.swap(Shared::null(), Relaxed, &g);
                while !cur.is_null() {
                    // SAFETY: `&mut self`: nobody else can reach the nodes, and each is
                    // linked in exactly one chain, so each is freed once.
                    let owned = unsafe { cur.into_owned() };
                    let next = owned.next.load(Relaxed, &g);
                    drop(owned);
                    cur = next;
                }
            }
        }
    }
}

/// A load in progress: fails its node if dropped before [`Loading::finish`] (the load
/// panicked).
struct Loading<'a, V: Send + Sync + 'static> {
    mine: Option<Cached<'a, V>>,
    h: usize,
}

impl<'a, V: Send + Sync + 'static> Loading<'a, V> {
    fn finish(mut self) -> Cached<'a, V> {
        self.mine.take().expect("finished once")
    }
}

impl<V: Send + Sync + 'static> Drop for Loading<'_, V> {
    fn drop(&mut self) {
        if let Some(mine) = self.mine.take() {
            mine.cache.fail(mine, self.h);
        }
    }
}

enum Lookup<'a, V: Send + Sync + 'static> {
    Hit(Cached<'a, V>),
    Absent,
}

/// A hashed table of wait queues for loads in progress: a waiter sleeps on the entry of its
/// key's hash until the loader's change of state is visible. The loader changes the state
/// first, then takes the entry's lock and wakes all; a waiter checks the state under that
/// lock before it sleeps, so no wake-up is lost. Under loom, waiters yield in a loop (loom
/// explores every interleaving of the state change and the check).
/// One wait queue: a lock and a condition variable.
#[cfg(not(loom))]
type WaitQueue = (Mutex<()>, crate::sync::Condvar);

pub(crate) struct Waiters {
    #[cfg(not(loom))]
    queues: Box<[CachePadded<WaitQueue>]>,
}

impl Waiters {
    pub(crate) fn new(n: usize) -> Waiters {
        #[cfg(loom)]
        let _ = n;
        Waiters {
            #[cfg(not(loom))]
            queues: (0..n.next_power_of_two())
                .map(|_| CachePadded::new(Default::default()))
                .collect(),
        }
    }

    #[cfg(not(loom))]
    pub(crate) fn wait(&self, h: usize, done: impl Fn() -> bool) {
        let (m, cv) = &*self.queues[h & (self.queues.len() - 1)];
        let mut l = m.lock();
        while !done() {
            l = cv.wait(l);
        }
    }

    #[cfg(not(loom))]
    pub(crate) fn wake(&self, h: usize) {
        let (m, cv) = &*self.queues[h & (self.queues.len() - 1)];
        drop(m.lock());
        cv.notify_all();
    }

    #[cfg(loom)]
    pub(crate) fn wait(&self, _h: usize, done: impl Fn() -> bool) {
        while !done() {
            loom::thread::yield_now();
        }
    }

    #[cfg(loom)]
    pub(crate) fn wake(&self, _h: usize) {}
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize as StdAtomicUsize;
    use std::sync::atomic::Ordering::SeqCst;
    use std::sync::Barrier;
    use std::time::Duration;

    fn key(ino: u64) -> InodeKey {
        InodeKey { fs: 7, ino }
    }

    /// A group of eight consecutive numbers shares a shard and one run of eight chains (a
    /// line of heads); groups spread evenly over the shards and chains, whether the
    /// numbers are dense or strided (numbers a backend hands out in steps of a power of
    /// two, as some do by allocation unit).
    #[test]
    #[cfg_attr(
        miri,
        ignore = "400,000 hashes, and no unsafe code: the hash is plain arithmetic"
    )]
    fn groups_share_a_line_and_spread() {
        let c = InodeCache::<u64>::new();
        let shards = c.shards.len();
        let chains = 1024usize;
        let place = |ino: u64| {
            let h = c.hash(key(ino));
            (h as usize & (shards - 1), (h >> 32) as usize & (chains - 1))
        };
        for base in [0u64, 8, 4096, 1 << 40] {
            let (shard, chain) = place(base);
            let run = chain / 8;
            let mut places: Vec<usize> = (0..8)
                .map(|i| {
                    let (s, ch) = place(base + i);
                    assert_eq!((s, ch / 8), (shard, run), "one shard, one run of chains");
                    ch % 8
                })
                .collect();
            places.sort_unstable();
            assert_eq!(places, (0..8).collect::<Vec<_>>(), "eight places, one each");
        }
        for stride in [1u64, 3, 8, 64, 1024, 4096] {
            let n = 64 * 1024;
            let (mut per_shard, mut per_chain) = (vec![0usize; shards], vec![0usize; chains]);
            for i in 0..n {
                let (s, ch) = place(i * stride);
                per_shard[s] += 1;
                per_chain[ch] += 1;
            }
            let mean = n as usize / shards;
            assert!(
                per_shard
                    .iter()
                    .all(|&k| k > mean * 3 / 4 && k < mean * 5 / 4),
                "stride {stride}: {per_shard:?}"
            );
            // 64 per chain on average, by groups of eight at most: no chain past 4x.
            let most = per_chain.iter().max().copied().unwrap_or(0);
            assert!(
                most < 4 * n as usize / chains,
                "stride {stride}: a chain of {most}"
            );
        }
    }

    #[test]
    fn loads_once_then_hits_without_a_lock() {
        let c = InodeCache::<String>::new();
        assert!(c.get(key(1)).is_none());
        let a = c
            .get_or_load(key(1), || Ok::<_, ()>("one".to_string()))
            .unwrap();
        assert_eq!(&*a, "one");
        let locks = c.stats().shard_locks;
        let b = c
            .get_or_load(key(1), || -> Result<String, ()> { panic!("loaded twice") })
            .unwrap();
        assert_eq!(&*b, "one");
        assert_eq!(c.stats().shard_locks, locks, "a hit takes no lock");
        assert_eq!(c.stats().loads, 1);
        assert_eq!(c.stats().hits, 1);
        assert_eq!(c.len(), 1);
        // Keys of other file systems are other inodes.
        let other = c
            .get_or_load(InodeKey { fs: 8, ino: 1 }, || Ok::<_, ()>("other".into()))
            .unwrap();
        assert_eq!(&*other, "other");
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn a_held_object_is_not_evicted() {
        let c = InodeCache::<u64>::new();
        let a = c.get_or_load(key(1), || Ok::<_, ()>(10)).unwrap();
        let a2 = a.clone();
        assert!(!c.evict(key(1)), "held twice");
        drop(a);
        assert!(!c.evict(key(1)), "still held");
        drop(a2);
        assert!(c.evict(key(1)));
        assert!(!c.evict(key(1)), "gone");
        assert!(c.get(key(1)).is_none());
        assert_eq!(c.len(), 0);
        assert_eq!(c.stats().evictions, 1);
        // Loaded again after eviction.
        let b = c.get_or_load(key(1), || Ok::<_, ()>(11)).unwrap();
        assert_eq!(*b, 11);
    }

    #[test]
    fn a_failed_load_caches_nothing() {
        let c = InodeCache::<u64>::new();
        assert_eq!(c.get_or_load(key(3), || Err("EIO")).err(), Some("EIO"));
        assert!(c.get(key(3)).is_none());
        assert_eq!(c.len(), 0);
        assert_eq!(*c.get_or_load(key(3), || Ok::<_, &str>(3)).unwrap(), 3);
    }

    /// Many threads miss on one key while its load is slow: one loads, the others wait for
    /// it and share its object; nobody holds a lock during the load. The loader stays in
    /// its load until the main thread has loaded a key of the same shard and woken the same
    /// wait queue, which would block (and the loader's wait time out) if either lock were
    /// held across the load.
    #[test]
    fn one_loader_per_key_and_no_lock_held_across_the_load() {
        use std::sync::mpsc::channel;
        let c = InodeCache::<u64>::new();
        let loads = StdAtomicUsize::new(0);
        let go = Barrier::new(9);
        let (in_load_tx, in_load) = channel::<()>();
        let (done_tx, done) = channel::<()>();
        let (in_load_tx, done) = (
            std::sync::Mutex::new(in_load_tx),
            std::sync::Mutex::new(done),
        );
        let (shard5, h5) = c.shard_of(key(5));
        let h5 = h5 as usize;
        let same_shard = (100..)
            .map(key)
            .find(|&k| std::ptr::eq(c.shard_of(k).0, shard5))
            .unwrap();
        std::thread::scope(|s| {
            let mut ts = Vec::new();
            for _ in 0..8 {
                ts.push(s.spawn(|| {
                    go.wait();
                    let v = c
                        .get_or_load(key(5), || {
                            loads.fetch_add(1, SeqCst);
                            in_load_tx.lock().unwrap().send(()).unwrap();
                            let r = done.lock().unwrap().recv_timeout(Duration::from_secs(20));
                            assert!(r.is_ok(), "a lock was held across the load");
                            Ok::<_, ()>(55)
                        })
                        .unwrap();
                    *v
                }));
            }
            go.wait();
            in_load.recv().unwrap();
            assert_eq!(*c.get_or_load(same_shard, || Ok::<_, ()>(7)).unwrap(), 7);
            c.waiters.wake(h5);
            done_tx.send(()).unwrap();
            for t in ts {
                assert_eq!(t.join().unwrap(), 55);
            }
        });
        assert_eq!(loads.load(SeqCst), 1);
    }

    /// Tables grow with what they hold: a hundred thousand keys leave at most
    /// [`MAX_LOAD`] nodes per chain (no shard keeps its first table), every key is found
    /// again, and sweeping them all leaves the tables grown but empty.
    #[test]
    fn tables_grow_and_every_key_stays_found() {
        let c = InodeCache::<u64>::new();
        let first = c.chains();
        let n = if cfg!(miri) { 120 } else { 100_000 };
        for i in 0..n {
            drop(c.get_or_load(key(i), || Ok::<_, ()>(i)).unwrap());
        }
        assert_eq!(c.len(), n as usize);
        assert!(c.chains() > first, "{} chains, as at first", c.chains());
        assert!(
            c.chains() * MAX_LOAD >= n as usize,
            "{} chains for {n} nodes",
            c.chains()
        );
        let locks = c.stats().shard_locks;
        for i in 0..n {
            assert_eq!(c.get(key(i)).map(|v| *v), Some(i), "key {i}");
        }
        assert_eq!(c.stats().shard_locks, locks, "hits take no lock");
        assert!(c.get(key(n)).is_none());
        assert_eq!(c.shrink(0, |_| true), n as usize);
        assert!(c.is_empty());
        assert_eq!(c.stats().evictions, n);
    }

    /// Lookups racing the grows of the tables they read: no key cached before is ever
    /// reported absent by `get`, and no racing load is made twice.
    #[test]
    fn gets_race_grows() {
        let c = InodeCache::<u64>::new();
        let old = if cfg!(miri) { 8 } else { 1_000 };
        for i in 0..old {
            drop(c.get_or_load(key(i), || Ok::<_, ()>(i)).unwrap());
        }
        let n = if cfg!(miri) { 120 } else { 200_000 };
        let loads = StdAtomicUsize::new(0);
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in old..n {
                    drop(
                        c.get_or_load(key(i), || {
                            loads.fetch_add(1, SeqCst);
                            Ok::<_, ()>(i)
                        })
                        .unwrap(),
                    );
                }
            });
            s.spawn(|| {
                for i in old..n {
                    drop(
                        c.get_or_load(key(i), || {
                            loads.fetch_add(1, SeqCst);
                            Ok::<_, ()>(i)
                        })
                        .unwrap(),
                    );
                }
            });
            for round in 0.. {
                for i in 0..old {
                    assert_eq!(c.get(key(i)).map(|v| *v), Some(i), "round {round}");
                }
                if c.len() >= n as usize {
                    break;
                }
                // Under Miri, let the loaders run (its scheduler would spin this loop).
                #[cfg(miri)]
                std::thread::yield_now();
            }
        });
        assert_eq!(loads.load(SeqCst), (n - old) as usize);
    }

    /// A load that panics fails its node as it unwinds: the waiters look again and one of
    /// them loads, instead of sleeping for ever. (Threads are not scoped, so that a
    /// stranded waiter fails the test by its deadline instead of hanging it.)
    #[test]
    fn a_panicking_load_does_not_strand_its_waiters() {
        use std::sync::Arc;
        let c = Arc::new(InodeCache::<u64>::new());
        let attempts = Arc::new(StdAtomicUsize::new(0));
        let go = Arc::new(Barrier::new(4));
        let ts: Vec<_> = (0..4)
            .map(|_| {
                let (c, attempts, go) = (c.clone(), attempts.clone(), go.clone());
                std::thread::spawn(move || {
                    go.wait();
                    let v = *c
                        .get_or_load(key(11), || {
                            let n = attempts.fetch_add(1, SeqCst);
                            std::thread::sleep(Duration::from_millis(20));
                            if n == 0 {
                                panic!("backend panicked");
                            }
                            Ok::<_, ()>(11)
                        })
                        .unwrap();
                    v
                })
            })
            .collect();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !ts.iter().all(|t| t.is_finished()) {
            assert!(
                std::time::Instant::now() < deadline,
                "waiters stranded by a panicked load"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let got: Vec<_> = ts.into_iter().map(|t| t.join()).collect();
        assert_eq!(got.iter().filter(|r| r.is_err()).count(), 1, "one panicked");
        assert!(got.iter().flatten().all(|&v| v == 11));
        assert_eq!(attempts.load(SeqCst), 2, "the panic, then one load for all");
        assert_eq!(c.len(), 1);
    }

    /// Loads that fail while others wait: every waiter looks again, one loads, and nobody
    /// gets an object from a failed load.
    #[test]
    fn waiters_of_a_failed_load_load_again() {
        let c = InodeCache::<u64>::new();
        let attempts = StdAtomicUsize::new(0);
        let go = Barrier::new(6);
        std::thread::scope(|s| {
            for _ in 0..6 {
                s.spawn(|| {
                    go.wait();
                    loop {
                        let r = c.get_or_load(key(9), || {
                            let n = attempts.fetch_add(1, SeqCst);
                            std::thread::sleep(Duration::from_millis(20));
                            if n < 3 {
                                Err(n)
                            } else {
                                Ok(99)
                            }
                        });
                        if let Ok(v) = r {
                            assert_eq!(*v, 99);
                            break;
                        }
                    }
                });
            }
        });
        assert_eq!(
            attempts.load(SeqCst),
            4,
            "three failures, then one load for all"
        );
    }

    /// Lookups, loads and evictions racing on a few keys: a lookup never returns an
    /// evicted object, every object is the one its key's load made, and the count of
    /// nodes is right at the end.
    #[test]
    fn lookups_race_evictions() {
        let c = InodeCache::<(u64, u64)>::new();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let gen = StdAtomicUsize::new(0);
        std::thread::scope(|s| {
            for t in 0..3u64 {
                let (c, stop, gen) = (&c, &stop, &gen);
                s.spawn(move || {
                    let mut i = t;
                    while !stop.load(SeqCst) {
                        let k = i % 4;
                        i += 1;
                        let v = c
                            .get_or_load(key(k), || {
                                Ok::<_, ()>((k, gen.fetch_add(1, SeqCst) as u64))
                            })
                            .unwrap();
                        assert_eq!(v.0, k);
                        assert_eq!(v.key(), key(k));
                        let again = c.get(key(k)).map(|a| a.1);
                        // Held by `v`: not evicted meanwhile, so the same object.
                        assert_eq!(again, Some(v.1));
                    }
                });
            }
            s.spawn(|| {
                let rounds = if cfg!(miri) { 300 } else { 20_000u64 };
                for i in 0..rounds {
                    c.evict(key(i % 4));
                }
                stop.store(true, SeqCst);
            });
        });
        for k in 0..4 {
            c.evict(key(k));
        }
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn values_are_dropped_once() {
        let drops = std::sync::Arc::new(StdAtomicUsize::new(0));
        struct D(std::sync::Arc<StdAtomicUsize>);
        impl Drop for D {
            fn drop(&mut self) {
                self.0.fetch_add(1, SeqCst);
            }
        }
        {
            let c = InodeCache::<D>::new();
            for i in 0..10 {
                drop(
                    c.get_or_load(key(i), || Ok::<_, ()>(D(drops.clone())))
                        .unwrap(),
                );
            }
            for i in 0..5 {
                assert!(c.evict(key(i)));
            }
        }
        // Evicted ones go after a grace period, freed by this thread (`reclaim::FreeBatch`)
        // at its flush. Other tests running in parallel hold pins that keep the global
        // epoch back, so flush until all ten are gone (or ten seconds pass), then a while
        // longer: a value dropped twice would show.
        let t0 = std::time::Instant::now();
        while drops.load(SeqCst) < 10 && t0.elapsed() < std::time::Duration::from_secs(10) {
            crate::reclaim::flush();
            std::thread::yield_now();
        }
        for _ in 0..64 {
            crate::reclaim::flush();
        }
        assert_eq!(drops.load(SeqCst), 10);
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::sync::atomic::AtomicUsize as LAtomicUsize;
    use loom::sync::Arc;
    use loom::thread;
    use std::sync::atomic::Ordering::SeqCst;

    /// A model and its twin: the first test runs the model on the protocol as built and
    /// must find no violation; the twin breaks it with one `Broken` switch and must find
    /// one.
    macro_rules! model_and_twin {
        ($(#[$ok_doc:meta])* $ok:ident, $(#[$twin_doc:meta])* $twin:ident, $model:ident, $flag:ident) => {
            $(#[$ok_doc])*
            #[test]
            fn $ok() {
                assert!(!$model(Broken::default()));
            }

            $(#[$twin_doc])*
            #[test]
            fn $twin() {
                assert!($model(Broken {
                    $flag: true,
                    ..Broken::default()
                }));
            }
        };
    }

    fn key(ino: u64) -> InodeKey {
        InodeKey { fs: 1, ino }
    }

    fn cache(broken: Broken) -> Arc<InodeCache<u64>> {
        let mut c = InodeCache::new();
        c.broken = broken;
        Arc::new(c)
    }

    /// Two callers miss on one key at once: exactly one loads, and both get its object.
    /// Runs `f` over every interleaving (preemption bound 3, as the dentry hash's and mount
    /// handshake's models); see `sync::loom_violated`.
    fn violated(f: impl Fn() -> bool + Sync + Send + 'static) -> bool {
        crate::sync::loom_violated(3, f)
    }

    /// Two callers miss on one key at once: violated if both load (or either gets another
    /// object than the load made).
    fn two_loaders(broken: Broken) -> bool {
        violated(move || {
            let c = cache(broken);
            let loads = Arc::new(LAtomicUsize::new(0));
            let load = |loads: &LAtomicUsize| {
                loads.fetch_add(1, SeqCst);
                Ok::<_, ()>(7)
            };
            let t = {
                let (c, loads) = (c.clone(), loads.clone());
                thread::spawn(move || *c.get_or_load(key(1), || load(&loads)).unwrap() == 7)
            };
            let mine = *c.get_or_load(key(1), || load(&loads)).unwrap() == 7;
            let theirs = t.join().unwrap();
            let n = loads.load(SeqCst);
            std::mem::forget(Arc::try_unwrap(c).ok());
            n != 1 || !mine || !theirs
        })
    }

    model_and_twin! {
        one_loader_per_inode,
        /// Twin: without the second look under the shard lock, both callers link a node and
        /// load.
        one_loader_without_second_look_fails,
        two_loaders,
        no_second_look
    }

    /// A lookup racing a `kill` of the same key (an eviction by key, or a sweep): violated
    /// if the lookup holds the object and the kill says it went anyway.
    fn lookup_vs(broken: Broken, kill: fn(&InodeCache<u64>) -> bool) -> bool {
        violated(move || {
            let c = cache(broken);
            drop(c.get_or_load(key(1), || Ok::<_, ()>(1)).unwrap());
            let t = {
                let c = c.clone();
                thread::spawn(move || kill(&c))
            };
            let got = c.get(key(1));
            let wrong = got.as_ref().is_some_and(|v| **v != 1);
            let held = got.is_some();
            let killed = t.join().unwrap();
            // After a broken eviction the handle's count is wrong: leak it.
            std::mem::forget(got);
            std::mem::forget(Arc::try_unwrap(c).ok());
            wrong || (held && killed)
        })
    }

    fn lookup_vs_evict(broken: Broken) -> bool {
        lookup_vs(broken, |c| c.evict(key(1)))
    }

    /// The sweep finds its victims by walking the shard's chains, not by key: a path to
    /// the kill of its own.
    fn lookup_vs_shrink(broken: Broken) -> bool {
        lookup_vs(broken, |c| c.shrink(0, |_| true) == 1)
    }

    model_and_twin! {
        lookup_races_eviction,
        /// Twin: an eviction that checks the count and then stores 0 lets a lookup take a
        /// reference in between.
        eviction_without_cas_fails,
        lookup_vs_evict,
        evict_check_then_store
    }

    /// An eviction by key that asks `unused` (hostfs's trim of the sweeps' numbers).
    fn lookup_vs_evict_unused(broken: Broken) -> bool {
        lookup_vs(broken, |c| {
            c.evict_unused(key(1), |_| true, &mut Retired::default())
        })
    }

    model_and_twin! {
        lookup_races_an_eviction_by_number,
        /// Twin: an eviction by key that checks the count and then stores 0 lets a lookup
        /// take a reference in between.
        an_eviction_by_number_without_cas_fails,
        lookup_vs_evict_unused,
        evict_check_then_store
    }

    model_and_twin! {
        lookup_races_a_sweep,
        /// Twin: a sweep that checks the count and then stores 0 lets a lookup take a
        /// reference in between.
        a_sweep_without_cas_fails,
        lookup_vs_shrink,
        evict_check_then_store
    }

    /// `get` of a cached key races the load whose insert grows its shard's table (under
    /// loom a shard starts with one chain, so the third key of a shard grows it): violated
    /// if `get` says the key is absent, or the table did not grow.
    fn get_vs_grow(broken: Broken) -> bool {
        violated(move || {
            let c = cache(broken);
            let shard = c.shard_of(key(1)).0;
            let mut same = (2..)
                .map(key)
                .filter(|&k| std::ptr::eq(c.shard_of(k).0, shard));
            let (k2, k3) = (same.next().unwrap(), same.next().unwrap());
            drop(c.get_or_load(key(1), || Ok::<_, ()>(1)).unwrap());
            drop(c.get_or_load(k2, || Ok::<_, ()>(2)).unwrap());
            let before = c.chains();
            let t = {
                let c = c.clone();
                thread::spawn(move || drop(c.get_or_load(k3, || Ok::<_, ()>(3)).unwrap()))
            };
            let found = c.get(key(1)).map(|v| *v);
            t.join().unwrap();
            let grew = c.chains() > before;
            std::mem::forget(Arc::try_unwrap(c).ok());
            found != Some(1) || !grew
        })
    }

    model_and_twin! {
        a_get_races_a_grow,
        /// Twin: a `get` that trusts its lock-free miss can walk off a moved node into the new
        /// table and report a cached key absent.
        a_get_trusting_a_miss_fails_under_a_grow,
        get_vs_grow,
        get_trusts_a_miss
    }

    /// A holder shares the object (here: sets `shared`) while a sweep decides: violated if
    /// the sweep evicted the node after the object was shared. The sweep's test is "not
    /// shared", as hostfs's is "nobody else holds the engine inode".
    fn shrink_vs_sharing(broken: Broken) -> bool {
        kill_vs_sharing(broken, |c, shared| {
            c.shrink(0, |_| shared.load(SeqCst) == 0) == 1
        })
    }

    /// The same against an eviction by key (hostfs's trim of the sweeps' numbers), which
    /// asks again after its kill through the same step.
    fn evict_unused_vs_sharing(broken: Broken) -> bool {
        kill_vs_sharing(broken, |c, shared| {
            c.evict_unused(
                key(1),
                |_| shared.load(SeqCst) == 0,
                &mut Retired::default(),
            )
        })
    }

    /// A holder shares the object while `kill` (which asks "not shared") decides.
    fn kill_vs_sharing(broken: Broken, kill: fn(&InodeCache<u64>, &LAtomicUsize) -> bool) -> bool {
        violated(move || {
            let c = cache(broken);
            drop(c.get_or_load(key(1), || Ok::<_, ()>(1)).unwrap());
            let shared = Arc::new(LAtomicUsize::new(0));
            let t = {
                let (c, shared) = (c.clone(), shared.clone());
                thread::spawn(move || kill(&c, &shared))
            };
            if let Some(h) = c.get(key(1)) {
                shared.store(1, SeqCst);
                drop(h);
            }
            let evicted = t.join().unwrap();
            std::mem::forget(Arc::try_unwrap(c).ok());
            evicted && shared.load(SeqCst) == 1
        })
    }

    model_and_twin! {
        a_holder_shares_the_object_before_a_sweep,
        /// Twin: a sweep that evicts on its first answer can decide before the holder gets the
        /// node, and kill it after the holder shared the object and let go.
        a_sweep_asking_once_evicts_a_shared_object,
        shrink_vs_sharing,
        no_second_unused
    }

    model_and_twin! {
        a_holder_shares_the_object_before_an_eviction_by_number,
        /// Twin: an eviction by key that evicts on its first answer kills a node whose object
        /// was shared meanwhile.
        an_eviction_by_number_asking_once_evicts_a_shared_object,
        evict_unused_vs_sharing,
        no_second_unused
    }
}
