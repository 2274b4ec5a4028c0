//! hostfs: a host directory served by the engine, confined beneath it.
//!
//! The engine resolves every path itself, in its dentry cache, one component at a time:
//! `..` at the root stays at the root, and a symlink's text is resolved in the engine's
//! namespace, where an absolute target starts again at the caller's root. The host is
//! never asked to resolve a path. It is asked only what one directory holds, by
//! descriptor: [`FileSystem::load_dir`] opens the directory relative to its parent's
//! descriptor with `O_NOFOLLOW | O_DIRECTORY` (one component, never `..`), lists it, and
//! `fstatat(AT_SYMLINK_NOFOLLOW)`s and `readlinkat`s each entry, and
//! [`FileSystem::lookup`] (in a directory too large for a capped cache) `fstatat`s one
//! name under the directory's descriptor. So nothing a symlink or a
//! `..` in the tree says can reach outside it, and `/proc` magic links are only ever read
//! as text. A regular file's data is opened the same way (`O_NOFOLLOW | O_NONBLOCK |
//! O_NOCTTY`, relative to its directory, checked to be the same inode), when a description
//! of it is opened; devices, FIFOs and sockets are never opened on the host.
//!
//! # Writes
//! Every change goes through to the host, after the engine's own checks (permissions,
//! `EEXIST`, `ENOTEMPTY`, sticky directories, loops) and before the dentry cache changes,
//! so a change the host refuses (`ENOSPC`, `EIO`, `EMLINK`, ...) changes nothing and its
//! errno is the caller's. Each is one host call on (directory descriptor, name), never a
//! path: `mkdirat`, `openat(O_CREAT | O_EXCL)`, `symlinkat`, `mknodat`,
//! `openat(O_TMPFILE)`, `unlinkat`, `renameat2` (with `RENAME_NOREPLACE` where the
//! engine found the target free, `RENAME_EXCHANGE` as asked), `linkat`; attributes by the
//! description's data descriptor where there is one (an unlinked file has no name), else by
//! name without following a final symlink (`fchownat`/`utimensat` with
//! `AT_SYMLINK_NOFOLLOW`; `chmod` through a descriptor opened `O_NOFOLLOW`, since not every
//! kernel has `fchmodat2`), else, for an object whose known names all went (held by an
//! `O_PATH` handle), by the descriptor kept for an open file; an object with none of these
//! (an unlinked symlink held by a handle) has only the engine's attributes to change.
//! Data: `pread`/`pwrite`/`ftruncate`/`fallocate`/`fsync` on the description's data
//! descriptor; `SEEK_DATA`/`SEEK_HOLE` ask the host.
//!
//! The engine's inode keeps the attributes callers see: mode, owner and times as the engine
//! set them (the host sets its own times for its own changes, within microseconds of
//! these), and size and blocks as the host reports them after a data change.
//!
//! # Extended attributes
//! Passed to the host object, after the engine's checks (`process::xattr`): by the
//! description's data descriptor, a directory's own, or a descriptor of a regular file
//! opened for the call (checked to be the object); a symlink or a special file, which is
//! never opened, by (directory descriptor, name) with Linux 6.13's `*xattrat` calls and
//! `AT_SYMLINK_NOFOLLOW`, so that they are reached without `/proc` (a server may run
//! chrooted). On an older host kernel those objects have none (`EOPNOTSUPP`). An open file
//! whose last name went, or a directory removed while open, is reached by a descriptor kept
//! from that removal to its eviction (`HostFs::kept`). The file is also opened again
//! through it (`/proc/self/fd`) for a new description: one made from an `O_PATH` handle,
//! or an open that took its hold just before a racing unlink took the name; and linked
//! again through it (`linkat` of that magic link), while the host still links it by names
//! hostfs never listed. What the host's file system keeps and refuses is its own: its
//! sizes, `ENOSPC`, `EOPNOTSUPP` where it has no such namespace, and its list order.
//!
//! # Ownership
//! What a caller creates belongs to the caller: the server `fchownat`s each new object to
//! the caller's uid and gid (then sets the exact mode, which the server's umask and a
//! set-gid directory may have changed on the host). A server that may not give files
//! away (not root, no `CAP_CHOWN`) leaves them its own on the host; the engine still
//! reports and enforces the caller's ownership for as long as the object stays cached,
//! and after a reload the host's owner is what is seen. Linking an `O_TMPFILE` file
//! needs `CAP_DAC_READ_SEARCH` on the host.
//!
//! # Identity
//! An object is the host's (`st_dev`, `st_ino`): two names of one host inode (hard links)
//! are one engine inode, found through the inode cache ([`crate::icache`]), whose hit is
//! lock-free and whose miss is loaded by exactly one caller with no lock held. The engine
//! reports its own `st_dev` and the host's `st_ino`; for a host file system mounted inside
//! the source (another `st_dev`), the inode number carries that device's index in its top
//! 16 bits, so two devices' numbers never meet. Each node keeps the names the engine knows
//! for it (a directory descriptor and a name each). When its last known name goes (unlink,
//! rmdir, a rename over it) or the engine evicts its inode (an unlinked file closed, an
//! `O_TMPFILE` file never linked, or a count the shared policy took from the host that
//! was lower than the truth), the node is marked dead and leaves the inode cache, because
//! the host may now give its number to a new object, and a node never outlives its engine
//! inode; a lookup that still finds a dead node takes it out and loads again. Since numbers
//! are reused, [`FileSystem::reuses_inode_numbers`] is true, and the FUSE frontend checks
//! that a node it finds by number is still the object.
//!
//! # Policy and staleness
//! [`Policy::Exclusive`]: this process owns the tree, and nothing else changes it while it
//! is served. What was loaded is kept without limit and never revalidated; a change made
//! on the host behind the engine after a directory was loaded is not seen (a name created
//! there stays missing, a removed one stays visible), and an object whose name now names
//! another fails with `ESTALE` when the engine opens it (its data, or a directory to
//! load). Nothing outside the root is reachable either way (`tests/hostfs.rs` swaps
//! directories on the host while resolving through hostfs).
//!
//! [`Policy::Shared`]: another writer may change the tree. What was loaded is trusted for
//! the TTL, then revalidated at its next use (`backend`, "Revalidation"):
//! - A directory's entries: the directory is `fstat`ed through its descriptor; if its host
//!   mtime and ctime are those of its last listing, the entries stay; else it is listed
//!   again, and the engine replaces the names that now name other objects, forgets the ones
//!   gone (an open file keeps its object), and adds the new ones. A change time within
//!   50 ms of now is not trusted (the host stamps times from a clock that ticks coarsely,
//!   so two changes in one tick leave one time): such a directory is listed again at its
//!   next revalidation.
//! - An object's attributes: `fstatat` of the name it was found by; if the name now names
//!   another object (or nothing), its directory is listed again. Each listing refreshes
//!   the attributes of the objects it finds.
//! - What a caller holds open (`fstat`, and FUSE's GETATTR, which goes through it): `fstat`
//!   of the description's host descriptor, or of a directory's own; else (`O_PATH`)
//!   `fstatat` of its first known name, if that still names it. An object the host no
//!   longer reaches keeps what the engine has: an open file whose names all went on the
//!   host shows its link count of 0.
//! - A directory moved on the host becomes a new directory to the engine (an engine
//!   directory has one dentry, whose children are its own); one removed is found empty
//!   and dead, like an rmdir'ed one, by a caller standing in it.
//! - A file's data is opened by its known names in turn, the one a revalidation last
//!   found naming it first, each checked to still name it (a name the host gave to another
//!   object, or took away, is skipped). If none does (`ESTALE`: the name was replaced
//!   after the walk checked it), what the engine knew expires, and the open walks again
//!   (up to 8 times), as Linux retries an NFS lookup. A walk that keeps finding the host's
//!   answers disowned by the host (a name listed as one object and revalidated as another,
//!   64 times in one call) ends with `ESTALE` too (`backend`, "Revalidation").
//!
//! What a caller can see: a change made on the host becomes visible at most one TTL after
//! it is made, plus one use (the use that finds the deadline past asks the host). Within
//! the TTL, the engine answers from its cache, as the exclusive policy does: names created
//! on the host may still be missing, removed ones still present, attributes as they were;
//! each answer was the host's at some moment within the last TTL. The engine's own changes
//! are seen by its callers at once, as always. Access times are the later of the engine's
//! and the host's, and a directory's access time is the engine's (the host's moves when
//! hostfs lists it); change times are the later of the two (the engine stamps its own
//! changes just after the host call). The lockless walk serves entries and attributes
//! within their deadlines, and falls back to the locked walk, which asks the host, for
//! anything past one. A TTL of zero asks the host at every use.

//! # Reclamation
//! Without caps ([`HostFsOptions::max_dentries`], [`HostFsOptions::max_inodes`]), every
//! loaded object stays in the inode cache, and every loaded directory keeps its
//! descriptor, until its last name goes or the file system is dropped with its last mount.
//! With them, the engine's sweep (`backend`, "Bounded caches") evicts unused names of files,
//! symlinks and special files, and negative entries; an object goes from the inode cache
//! once only the cache holds it (no cached name, no open file, a grace period after its
//! last name went): `HostFs::trim` runs after each directory load and evicts such
//! objects until an eighth of the cap is free. It finds them by number: each sweep hands
//! the numbers of the objects whose names it evicted (`FileSystem::names_evicted`), which
//! wait for a grace period of their own (`reclaim::OwnerReclaim`, whose marker follows the
//! names' frees) and are then tried; the inode cache's own sweep, which must ask every
//! object it passes, searches only on a budget, for objects the numbers do not account
//! for. The names' cap is three quarters of the objects' cap, so that named objects leave
//! room for the others. Directories stay cached (their children are swept), and with them
//! their descriptors. So at a load the inode cache holds at most the cap, plus the
//! directory being loaded, plus the sweeps' objects still in their grace period, plus the
//! directories (past the cap plus an eighth, the search runs). `HostFs::new` raises the soft limit on open
//! descriptors to the hard one. An open description's data descriptor is closed with it.
//!
//! # Lock order, and what protects what
//! [`HostFs`] has four locks of its own. A node's `host` lock (a reader-writer lock, like
//! Linux's `i_rwsem` on the object) keeps its names on the host what its `names` say: whoever
//! reaches the object by a name (to open its data, a directory's descriptor, to change its
//! attributes, to link it) holds it for reading across that host call, one node at a time;
//! a change that moves or removes its names (a rename of it or over it, an unlink) holds
//! it for writing across the host call and the change of `names`, for at most two nodes,
//! taken in address order (`changing`), and lets go before a dead node leaves the cache
//! (`forget` waits for the lookups that hold the node). It is taken after the engine's
//! directory locks, and no engine lock is taken under it. The other three are leaves: a
//! node's `names` mutex (its known names, `dead`, and an `O_TMPFILE` file's descriptor),
//! never held across a host call but in `link` (whose source name must not go meanwhile);
//! the table of host devices, taken only when an entry's device is not the root's; and
//! `kept` (the descriptors of open files whose last name went, from that removal to their
//! eviction), never held across a host call (a caller copies the descriptor with `dup` and
//! lets go). The inode cache's shards are locked only briefly by a miss (see `icache`). A
//! node's directory descriptor is set once (`OnceLock`). Loads hold no lock across the
//! host. Changes are called by the engine with the directory locks of the directories they
//! change held (as Linux holds `i_rwsem` across a file system's `create` or `rename`), so
//! the host calls of a change are made under those engine locks, and two changes of one
//! directory reach the host in the order the engine made them.

use crate::backend::{CacheOptions, FileSystem, Listing, StoreAttr, SuperBlock};
use crate::errno::{host, Errno, Result};
use crate::icache::{Cached, InodeCache, InodeKey, Retired};
use crate::inode::InodeArc;
use crate::inode::{Contents, DirState, Inode};
use crate::reclaim::OwnerReclaim;
use crate::sync::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use crate::types::{mode::*, Stat, StatFs, Timespec, XattrFlags};
use crossbeam_utils::CachePadded;
use rustix::fs::{self as rfs, AtFlags, Mode, OFlags};
use smallvec::SmallVec;
use std::ffi::CStr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, OnceLock};

/// Options of a [`HostFs`].
#[derive(Clone, Debug)]
pub struct HostFsOptions {
    /// The dentry hash's first size (see [`crate::MemFsOptions::hash_buckets`]).
    pub hash_buckets: usize,
    /// Cap on cached negative entries (see [`crate::MemFsOptions::max_negative`]).
    pub max_negative: Option<u64>,
    /// Refuse every change with `EROFS`, as a read-only mount does; the host is then never
    /// written.
    pub read_only: bool,
    /// Cap on cached dentries (names, positive and negative): past it, unused ones are
    /// evicted (see "Reclamation"). `None`: the cap on inodes, if any; else no cap.
    pub max_dentries: Option<u64>,
    /// Cap on cached objects (the inode cache). An object stays cached while a cached name
    /// or an open file holds it, so the names are capped too: the dentry cap is at most
    /// three quarters of this (at least 1), leaving room for objects that no cached name
    /// holds. `None`: no cap. Zero is refused (`EINVAL`).
    pub max_inodes: Option<u64>,
    /// W5's ablation: every inode-cache miss takes one cache-wide lock instead of its
    /// shard's (see [`crate::icache::InodeCache::set_one_lock`]). For measurement only.
    pub one_lock: bool,
    /// Whether another writer may change the host directory while it is served (see the
    /// module docs, "Policy and staleness").
    pub policy: Policy,
}

/// How far hostfs trusts what it loaded from the host (see the module docs, "Policy and
/// staleness").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Policy {
    /// This process owns the tree: what was loaded is kept, and never asked again.
    #[default]
    Exclusive,
    /// Another writer may change the tree: what was loaded is trusted for `ttl` (rounded
    /// up to 10 ms), then revalidated at its next use, against the directory's mtime and
    /// ctime for a directory's entries, and by a new `fstatat` for an object's attributes.
    /// A `ttl` of zero asks the host at every use.
    Shared {
        /// How long a directory's entries and an object's attributes are trusted.
        ttl: std::time::Duration,
    },
}

impl Default for HostFsOptions {
    fn default() -> Self {
        HostFsOptions {
            hash_buckets: 256,
            max_negative: None,
            read_only: false,
            max_dentries: None,
            max_inodes: None,
            one_lock: false,
            policy: Policy::Exclusive,
        }
    }
}

/// A name of a host object: its directory's descriptor and the name there.
type HostName = (Arc<OwnedFd>, ShortName);

/// A name's bytes, inline up to 16 (most names): one allocation fewer per object loaded.
type ShortName = SmallVec<[u8; 16]>;

/// Where a host object is: the names the engine knows it by (none for the root; a hard
/// link in a directory not yet loaded is not known), and, for a directory, its own
/// descriptor once it was opened.
struct HostNode {
    inode: InodeArc,
    /// The known names. When the last goes (`remove`, a rename over it) the node is
    /// `dead`: the host may give its inode number to a new object, so the node leaves the
    /// inode cache, and a lookup that finds it anyway takes it out and loads again.
    names: Mutex<Names>,
    /// The names on the host: held for reading by whoever reaches the object by one of
    /// its names (`named`), for writing by the engine's changes that move or remove one
    /// (a rename of the object, or over it; an unlink) across the host call and the change
    /// of `names`. So a name read from `names` is the object's on the host for as long as
    /// it is used: before, an open by a name that a rename had just moved (with another
    /// object made under the old name) failed with `ESTALE`.
    host: RwLock<()>,
    dir: OnceLock<Arc<OwnedFd>>,
}

#[derive(Default)]
struct Names {
    /// Inline while there is one (a hard-linked file's others spill to the heap): a
    /// vector of its own was one more allocation, and one more free, per object loaded.
    list: SmallVec<[HostName; 1]>,
    dead: bool,
    /// The descriptor of a file made without a name (`O_TMPFILE`), until a link names it.
    anon: Option<OwnedFd>,
    /// A directory's host mtime and ctime when it was last listed (the shared policy): a
    /// revalidation that finds them unchanged keeps the cached entries.
    seen: Option<(Timespec, Timespec)>,
}

impl HostNode {
    fn new(inode: InodeArc, name: Option<HostName>) -> HostNode {
        HostNode {
            inode,
            names: Mutex::new(Names {
                list: name.into_iter().collect(),
                ..Names::default()
            }),
            host: RwLock::new(()),
            dir: OnceLock::new(),
        }
    }

    /// One of the object's names, and the hold that keeps it the object's on the host
    /// (see `host`) until it is dropped; `ENOENT` if it has none left (or is the root).
    fn named(&self) -> Result<(RwLockReadGuard<'_, ()>, HostName)> {
        let held = self.host.read();
        let n = self.names.lock();
        let (d, name) = n.list.first().ok_or(Errno::ENOENT)?;
        Ok((held, (d.clone(), name.clone())))
    }
}

fn same_name(n: &HostName, dir: &Arc<OwnedFd>, name: &[u8]) -> bool {
    Arc::ptr_eq(&n.0, dir) && &*n.1 == name
}

/// A host directory as a file system for the engine (see the module docs).
pub struct HostFs {
    id: u64,
    root_dev: u64,
    /// Host devices other than the root's, by index (an index is an inode number's top
    /// 16 bits).
    devs: Mutex<Vec<u64>>,
    nodes: InodeCache<HostNode>,
    root: InodeArc,
    root_fd: Arc<OwnedFd>,
    read_only: bool,
    /// [`HostFsOptions::max_inodes`].
    max_inodes: Option<usize>,
    /// The server's own ids: what the host gives a new object before `fchownat`.
    euid: u32,
    egid: u32,
    /// [`Policy::Shared`]: listings record the directory's times, and a listing refreshes
    /// the attributes of the objects it finds cached.
    shared: bool,
    /// Descriptors of regular files whose last name went while they were open, and of
    /// directories removed while open, by the address of their engine inode, from the
    /// removal to the eviction: what reaches such a file by the object rather than by a
    /// description (a FUSE request on its node, which holds it by an `O_PATH` handle) has no
    /// name left to open it by, and a removed directory's node leaves the inode cache with
    /// its own descriptor (its extended attributes and attributes are reached by this one).
    kept: Mutex<std::collections::HashMap<usize, OwnedFd>>,
    /// Numbers of objects whose names the dentry cache's sweeps evicted: what the trim
    /// evicts (see [`HostFs::trim`]). One list per thread tag (`sync::thread_tag`), the
    /// last for threads without one: a sweep adds to its thread's, and a trim takes from
    /// its thread's first, so a thread that loads a tree of its own evicts its own objects
    /// (it neither writes the lines of another thread's nor frees to its heap). Kept only
    /// with a cap on the inode cache, and at most about that many in all the lists
    /// together (see [`admit_swept`]).
    swept: Box<[CachePadded<Mutex<Swept>>]>,
}

/// What [`HostFs::swept`] holds. An evicted name gives its reference on its object back
/// a grace period after the sweep, so a sweep's numbers wait for a grace period of their
/// own (`waiting`, whose marker the sweep defers after its names' frees) before a trim
/// looks at them (`ready`).
#[derive(Default)]
struct Swept {
    /// Each sweep's numbers, in their grace period.
    waiting: OwnerReclaim<u64>,
    /// Numbers whose grace period has ended, oldest first, with how many trims found each
    /// still in use (its name's free not run yet, or a new name).
    ready: Vec<(u64, u8)>,
}

/// How many trims look again at a swept number that they found still in use.
const SWEPT_TRIES: u8 = 2;

impl Swept {
    /// Moves the numbers whose grace period has ended to `ready`.
    fn ripen(&mut self) {
        let batches = self.waiting.collect();
        self.add_ready(batches);
    }

    /// Appends `batches` (whose grace period has ended) to `ready`, untried.
    fn add_ready(&mut self, batches: Vec<Vec<u64>>) {
        for b in batches {
            self.ready.extend(b.into_iter().map(|i| (i, 0)));
        }
    }

    /// How many numbers it holds, waiting or ready.
    fn len(&self) -> usize {
        self.waiting.waiting() + self.ready.len()
    }
}

/// Adds a sweep's numbers `inos` to list `mine` of `lists` ([`HostFs::swept`]), as many as
/// leave all the lists together holding at most `cap`: the others' lengths are read first,
/// each under its own lock and never two locks at once, so sweeps on other threads at the
/// same moment may pass the cap by one batch each. The marker of the batch is deferred
/// after the sweep's frees (on this thread), so it runs after their grace period.
fn admit_swept(lists: &[CachePadded<Mutex<Swept>>], mine: usize, cap: usize, inos: Vec<u64>) {
    let others: usize = (lists.iter().enumerate())
        .filter(|&(i, _)| i != mine)
        .map(|(_, l)| l.lock().len())
        .sum();
    let sw = &mut *lists[mine].lock();
    sw.ripen();
    let room = cap.saturating_sub(sw.len() + others);
    let batch: Vec<u64> = inos.into_iter().take(room).collect();
    let ready = sw.waiting.retire(batch, &crossbeam_epoch::pin());
    sw.add_ready(ready);
}

static NEXT_FS: AtomicU64 = AtomicU64::new(1);

/// Bits of an engine inode number that are the host's.
const INO_BITS: u32 = 48;

impl HostFs {
    /// Serves the host directory `source`.
    ///
    /// Errors: the host's for opening `source` (`ENOENT`, `ENOTDIR`, `EACCES`, ...);
    /// `EOVERFLOW` for a root inode number that needs more than 48 bits.
    #[allow(clippy::new_ret_no_self)]
    pub fn new(source: &Path, opts: HostFsOptions) -> Result<Arc<SuperBlock>> {
        if opts.max_dentries == Some(0) || opts.max_inodes == Some(0) {
            return Err(Errno::EINVAL);
        }
        let fd = rfs::open(
            source,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(host)?;
        let st = stat_of(rfs::fstat(&fd).map_err(host)?);
        if st.ino >> INO_BITS != 0 {
            return Err(Errno::EOVERFLOW);
        }
        raise_fd_limit();
        let root_fd = Arc::new(fd);
        let root = InodeArc::new(Inode::from_stat(&st, unloaded_dir()));
        let fs = HostFs {
            id: NEXT_FS.fetch_add(1, Relaxed),
            root_dev: st.dev,
            devs: Mutex::new(Vec::new()),
            nodes: InodeCache::new(),
            root: root.clone(),
            root_fd: root_fd.clone(),
            read_only: opts.read_only,
            max_inodes: opts.max_inodes.map(|n| n.min(usize::MAX as u64) as usize),
            euid: rustix::process::geteuid().as_raw(),
            egid: rustix::process::getegid().as_raw(),
            shared: matches!(opts.policy, Policy::Shared { .. }),
            kept: Mutex::new(std::collections::HashMap::new()),
            swept: (0..=crate::sync::thread_tags())
                .map(|_| CachePadded::new(Mutex::new(Swept::default())))
                .collect(),
        };
        let node = HostNode {
            dir: OnceLock::from(root_fd),
            ..HostNode::new(root, None)
        };
        drop(
            fs.nodes
                .get_or_load(fs.key(st.ino), || Ok::<_, Errno>(node))?,
        );
        fs.nodes.set_one_lock(opts.one_lock);
        // Names hold their objects, so the names' cap leaves a quarter of the objects' cap
        // to objects without a cached name (open files, names in their grace period, the
        // sweeps' numbers waiting for the trim): with both caps equal, the named objects
        // alone kept the inode cache at its cap, and every trim searched all of it in
        // vain.
        let names_cap = opts.max_inodes.map(|i| (i - i / 4).max(1));
        let max_dentries = match (opts.max_dentries, names_cap) {
            (Some(d), Some(i)) => Some(d.min(i)),
            (d, i) => d.or(i),
        };
        let cache = CacheOptions {
            hash_buckets: opts.hash_buckets,
            max_negative: opts.max_negative,
            max_dentries,
            ttl: match opts.policy {
                Policy::Exclusive => None,
                Policy::Shared { ttl } => Some(ttl),
            },
        };
        Ok(SuperBlock::new(Box::new(fs), cache))
    }

    fn key(&self, ino: u64) -> InodeKey {
        InodeKey { fs: self.id, ino }
    }

    /// The engine's inode number for a host (device, inode); `EOVERFLOW` where it does not
    /// fit (an inode number past 48 bits, or more than 65,535 devices).
    fn ino_of(&self, dev: u64, ino: u64) -> Result<u64> {
        if ino >> INO_BITS != 0 {
            return Err(Errno::EOVERFLOW);
        }
        if dev == self.root_dev {
            return Ok(ino);
        }
        let mut devs = self.devs.lock();
        let i = match devs.iter().position(|&d| d == dev) {
            Some(i) => i,
            None => {
                devs.push(dev);
                devs.len() - 1
            }
        };
        if i + 1 >= 1 << (64 - INO_BITS) {
            return Err(Errno::EOVERFLOW);
        }
        Ok(ino | ((i as u64 + 1) << INO_BITS))
    }

    /// The node of the engine inode `inode`: `ESTALE` if it left the cache (its names all
    /// went) and the number now names another object.
    fn node_of(&self, inode: &Inode) -> Result<Cached<'_, HostNode>> {
        let node = self.nodes.get(self.key(inode.ino)).ok_or(Errno::ESTALE)?;
        if !std::ptr::eq(&*node.inode, inode) {
            return Err(Errno::ESTALE);
        }
        Ok(node)
    }

    /// The descriptor of the directory whose engine inode is `dir`, opened now if it never
    /// was.
    fn dir_fd(&self, dir: &Inode) -> Result<Arc<OwnedFd>> {
        let node = self.node_of(dir)?;
        if let Some(fd) = node.dir.get() {
            return Ok(fd.clone());
        }
        let (held, (parent, name)) = node.named()?;
        let fd = open_at(
            &parent,
            &name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW,
            dir.ino,
        )?;
        drop(held);
        Ok(node.dir.get_or_init(|| Arc::new(fd)).clone())
    }

    /// Finds or makes the node for `ino` (`make` runs only on a miss) and records `name`
    /// as one of its names. A dead node found under the key (its names went, and the host
    /// reused the number) is taken out of the cache first.
    fn adopt(
        &self,
        ino: u64,
        (dir, name): (&Arc<OwnedFd>, &[u8]),
        make: impl Fn() -> Result<HostNode>,
    ) -> Result<Cached<'_, HostNode>> {
        loop {
            let node = self.nodes.get_or_load(self.key(ino), &make)?;
            {
                let mut names = node.names.lock();
                if !names.dead {
                    // Copied only when new: most lookups find the name known.
                    if !names.list.iter().any(|n| same_name(n, dir, name)) {
                        names.list.push((dir.clone(), ShortName::from_slice(name)));
                    }
                    drop(names);
                    return Ok(node);
                }
            }
            drop(node);
            self.forget(ino);
        }
    }

    /// Puts the new object `inode` (numbered `ino`) in the inode cache under `name`, or,
    /// for an `O_TMPFILE` file, with its descriptor `anon`. A live node found under the
    /// number stood for an object that went behind the engine's back: it is stale, and is
    /// taken out first.
    fn insert_new(
        &self,
        ino: u64,
        inode: &InodeArc,
        name: Option<HostName>,
        anon: Option<OwnedFd>,
    ) -> Result<()> {
        let anon = Mutex::new(anon);
        loop {
            let node = self.nodes.get_or_load(self.key(ino), || {
                let node = HostNode::new(inode.clone(), name.clone());
                node.names.lock().anon = anon.lock().take();
                Ok::<_, Errno>(node)
            })?;
            if InodeArc::ptr_eq(&node.inode, inode) {
                return Ok(());
            }
            node.names.lock().dead = true;
            drop(node);
            self.forget(ino);
        }
    }

    /// The index of the calling thread's list in [`HostFs::swept`].
    fn my_swept(&self) -> usize {
        (crate::sync::thread_tag() as usize).min(self.swept.len() - 1)
    }

    /// One list's part of [`HostFs::trim`]: evicts the objects its ready numbers name that
    /// only the cache holds, until `gone` reaches `want`; a number still in use gets two
    /// more tries at later trims (most are names whose free has not run yet: the collector
    /// runs it after the grace period, maybe after the marker); dropped numbers are left to
    /// the inode cache's own sweep.
    fn trim_from(
        &self,
        list: &Mutex<Swept>,
        want: usize,
        gone: &mut usize,
        retired: &mut Retired<HostNode>,
        cap: usize,
    ) {
        let ready = {
            let sw = &mut *list.lock();
            sw.ripen();
            std::mem::take(&mut sw.ready)
        };
        if ready.is_empty() {
            return;
        }
        let mut ready = ready.into_iter();
        let mut again = Vec::new();
        for (ino, tries) in ready.by_ref() {
            if self.nodes.evict_unused(self.key(ino), only_cached, retired) {
                *gone += 1;
                if *gone >= want {
                    break;
                }
            } else if tries < SWEPT_TRIES {
                again.push((ino, tries + 1));
            }
        }
        // What this trim did not need, and what it tries again, wait for the next trim,
        // before the newer numbers.
        let mut rest: Vec<(u64, u8)> = ready.collect();
        rest.append(&mut again);
        if !rest.is_empty() {
            let sw = &mut *list.lock();
            rest.append(&mut sw.ready);
            rest.truncate(cap);
            sw.ready = rest;
        }
    }

    /// Keeps the inode cache near [`HostFsOptions::max_inodes`]: past it, objects that
    /// only the cache holds (no cached name, no open file) go, until an eighth of the cap
    /// is free from this thread's own swept numbers, or back under the cap from the other
    /// threads'. Called after loads, with no lock held.
    ///
    /// What goes first are the objects whose names the sweeps evicted, found by number once
    /// the sweep's grace period has ended, as Linux puts an inode on its LRU when its last reference
    /// goes: most of the cache's objects are still named, and the inode cache's own sweep
    /// (`InodeCache::shrink`), which must ask each object it passes, read two cold lines
    /// per object (the most costly step of a capped W5). That sweep runs only if the
    /// numbers were not enough and the cache is an eighth over its cap.
    fn trim(&self) {
        let Some(cap) = self.max_inodes else {
            return;
        };
        // After every load: the comparison reads no other thread's count unless the cache
        // is near its cap.
        if self.nodes.len_at_most(cap) {
            return;
        }
        let len = self.nodes.len();
        if len <= cap {
            return;
        }
        let target = cap - cap / 8;
        let want = len - target;
        let mut gone = 0;
        let mut retired = Retired::default();
        // The evicted names this thread's sweeps retired give their references on their
        // objects back when the thread frees them (`reclaim::FreeBatch`): free those whose
        // grace period has ended, so that the numbers ripe below find their objects unused.
        crate::reclaim::free_expired();
        // This thread's list first, down to the low mark; then the others', only for what
        // keeps the cache over its cap (as a dentry sweep leaves other threads' names:
        // `SuperBlock::shrink`), so that a thread frees what it loaded, to its own heap.
        let mine = self.my_swept();
        let n = self.swept.len();
        for k in 0..n {
            let goal = if k == 0 { want } else { len - cap };
            if gone >= goal {
                break;
            }
            self.trim_from(
                &self.swept[(mine + k) % n],
                goal,
                &mut gone,
                &mut retired,
                cap,
            );
        }
        let pending: usize = self.swept.iter().map(|sw| sw.lock().len()).sum();
        // The inode cache's own sweep only for what the swept numbers cannot account for
        // (objects that lost their last user otherwise: a close, a forgotten name), and on
        // a budget: the numbers still waiting name objects whose names are in their grace
        // period, which that sweep could not take either (while a thread loads a directory
        // it stays pinned, by the walk's guard, so at two threads a few thousand names
        // wait), and with directories as large as the cap, the names of the directory just
        // loaded and of the last sweep keep the cache over its cap whatever it searches.
        // The budget: four nodes searched per object over the cap that the numbers do not
        // account for.
        let excess = self
            .nodes
            .len()
            .saturating_sub(pending)
            .saturating_sub(cap + cap / 8);
        if gone < want && excess > 0 {
            self.nodes
                .shrink_searching(target, excess.saturating_mul(4).max(16), only_cached);
        }
    }

    /// What the directory `fd` holds: each entry's name and engine inode, found in the
    /// inode cache or loaded. With the shared policy, an object found cached gets the
    /// attributes the host reports now, and one whose type changed under its number is a
    /// new object (the old node is taken out). Then the cache is trimmed to its cap.
    /// `None` if the directory holds more than `max` names: then no object was looked at.
    fn list(&self, fd: &Arc<OwnedFd>, max: usize) -> Result<Option<Listing>> {
        let Some((names, count)) = Self::names(fd, max)? else {
            return Ok(None);
        };
        let mut out = Vec::with_capacity(count);
        let mut start = 0;
        for name in names.split_inclusive(|&b| b == 0) {
            let at = start..start + name.len() - 1;
            start += name.len();
            let name = CStr::from_bytes_with_nul(name).map_err(|_| Errno::EIO)?;
            // Removed on the host since the listing: not there.
            if let Some(inode) = self.entry(fd, name)? {
                out.push((at, inode));
            }
        }
        self.trim();
        Ok(Some(Listing::over(names, out)))
    }

    /// [`HostFs::list`] with no limit, for a load or a revalidation that takes the
    /// directory whole.
    fn list_all(&self, fd: &Arc<OwnedFd>) -> Result<Listing> {
        // No directory holds more than `usize::MAX` names.
        self.list(fd, usize::MAX)?.ok_or(Errno::EOVERFLOW)
    }

    /// The names the directory `fd` holds (`.` and `..` left out), each followed by its
    /// NUL, and how many there are, read with `getdents64` on a descriptor of its own
    /// (the directory's is shared, and with it its offset); `None` as soon as there are
    /// more than `max`. One pass both counts and lists: counting first and listing after read the directory twice (two
    /// `openat` and four `getdents64` a load, where one and two do), about 5% of a cold
    /// stat's time in W5, where every directory is loaded again.
    fn names(fd: &OwnedFd, max: usize) -> Result<Option<(Vec<u8>, usize)>> {
        let dir = rfs::openat(
            fd,
            c".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(host)?;
        // The names are copied out of one buffer that `getdents64` refills: `rfs::Dir` made
        // a `CString` of every name (about 300 instructions an entry).
        let mut buf: Vec<u8> = Vec::with_capacity(LIST_BUF);
        let mut list = rfs::RawDir::new(&dir, buf.spare_capacity_mut());
        let (mut names, mut count) = (Vec::new(), 0);
        while let Some(e) = list.next() {
            let e = e.map_err(host)?;
            let name = e.file_name().to_bytes_with_nul();
            if matches!(name, b".\0" | b"..\0") {
                continue;
            }
            count += 1;
            if count > max {
                return Ok(None);
            }
            names.extend_from_slice(name);
        }
        Ok(Some((names, count)))
    }

    /// The descriptor of the directory `dir`, for a first load; with the shared policy,
    /// its times are recorded first, so that a change made while it is listed shows at the
    /// next revalidation.
    fn to_load(&self, dir: &Inode) -> Result<Arc<OwnedFd>> {
        let fd = self.dir_fd(dir)?;
        if self.shared {
            let st = stat_of(rfs::fstat(&*fd).map_err(host)?);
            self.node_of(dir)?.names.lock().seen = settled_times(&st);
        }
        Ok(fd)
    }

    /// The engine inode of `name` in the directory `fd`, found in the inode cache or
    /// loaded; `None` if the host has no such name. With the shared policy, an object found
    /// cached gets the attributes the host reports now, and one whose type changed under
    /// its number is a new object (the old node is taken out).
    fn entry(&self, fd: &Arc<OwnedFd>, name: &CStr) -> Result<Option<InodeArc>> {
        let st = match rfs::statat(&**fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => stat_of(st),
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(e) => return Err(host(e)),
        };
        let ino = self.ino_of(st.dev, st.ino)?;
        loop {
            let node = self.adopt(ino, (fd, name.to_bytes()), || {
                self.load_node(fd, name, &st, ino)
            })?;
            if !self.shared {
                return Ok(Some(node.inode.clone()));
            }
            // A directory has one name: one found under a second was moved on the host.
            // It becomes a new directory to the engine (an engine directory has one
            // dentry, whose cached children are its own), and the old one, gone from
            // the inode cache, is found gone by whoever still stands in it.
            let moved = node.inode.is_dir() && node.names.lock().list.len() > 1;
            if !moved && node.inode.mode() & S_IFMT == st.mode & S_IFMT {
                node.inode.refresh(&st);
                return Ok(Some(node.inode.clone()));
            }
            node.names.lock().dead = true;
            drop(node);
            self.forget(ino);
        }
    }

    /// Before the last known name of the open regular file or directory `victim` goes: a
    /// descriptor of it, to keep until its eviction (see `kept`). `None` for anything
    /// else, or when the server may not open it.
    fn to_keep(&self, victim: &Inode) -> Option<OwnedFd> {
        let ty = victim.mode() & S_IFMT;
        if (ty != S_IFREG && ty != S_IFDIR) || !victim.is_open() {
            return None;
        }
        let node = self.node_of(victim).ok()?;
        // The caller holds the node's `host` lock for writing (`changing`): the names are
        // read without it (so not by `HostNode::named`, nor `dir_fd`, which use it).
        let (dir, name) = {
            let names = node.names.lock();
            match names.list.as_slice() {
                [only] => only.clone(),
                _ => return None,
            }
        };
        if ty == S_IFDIR {
            // Its own descriptor, if it was ever opened, is the object's.
            return match node.dir.get() {
                Some(fd) => rustix::io::dup(&**fd).ok(),
                None => {
                    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW;
                    open_at(&dir, &name, flags, victim.ino).ok()
                }
            };
        }
        let open = |f| {
            open_at(
                &dir,
                &name,
                f | OFlags::NOFOLLOW | OFlags::NONBLOCK,
                victim.ino,
            )
        };
        match open(OFlags::RDONLY) {
            Err(Errno::EACCES) => open(OFlags::WRONLY),
            r => r,
        }
        .ok()
    }

    /// A new descriptor of the open file `inode` for reading (or writing, if `write`),
    /// by the descriptor kept since its last name went (see `kept`): reopened through
    /// `/proc/self/fd`, which names that very object, as Linux reopens a file by its
    /// magic link. `err` if none is kept (the file has another name the caller may find
    /// again), or if `/proc` is not mounted.
    fn reopen_kept(&self, inode: &Inode, write: bool, err: Errno) -> Result<OwnedFd> {
        let fd = self.dup_kept(inode, err)?;
        let path = magic_link(&fd);
        let open = |acc: OFlags| {
            let flags = acc | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
            rfs::open(&path, flags, Mode::empty()).map_err(host)
        };
        open_for(write, open).map_err(|e| if e == Errno::ENOENT { err } else { e })
    }

    /// A copy of the descriptor kept for `inode` (see `kept`), so that no lock is held
    /// across the host call that uses it; `err` if none is kept.
    fn dup_kept(&self, inode: &Inode, err: Errno) -> Result<OwnedFd> {
        let kept = self.kept.lock();
        let fd = kept.get(&kept_key(inode)).ok_or(err)?;
        rustix::io::dup(fd).map_err(host)
    }

    /// Makes `call`, a host call that may take the last name of `victim`: a descriptor of
    /// `victim`, if it is an open file (`to_keep`), is kept before the call, so that
    /// whoever finds the name gone on the host (an `open_data` racing the removal) finds
    /// the descriptor; if the call fails, the name stays and the descriptor goes.
    fn removing(
        &self,
        victim: Option<&Inode>,
        call: impl FnOnce() -> rustix::io::Result<()>,
    ) -> Result<()> {
        let kept = victim.and_then(|v| {
            let fd = self.to_keep(v)?;
            self.kept.lock().insert(kept_key(v), fd);
            Some(v)
        });
        call().map_err(|e| {
            if let Some(v) = kept {
                let fd = self.kept.lock().remove(&kept_key(v));
                drop(fd);
            }
            host(e)
        })
    }

    /// Takes the (dead) node of `ino` out of the cache, waiting out the brief holds of
    /// lookups that found it.
    fn forget(&self, ino: u64) {
        let key = self.key(ino);
        while !self.nodes.evict(key) {
            match self.nodes.get(key) {
                Some(n) if n.names.lock().dead => {}
                // Gone, or already replaced by a live node.
                _ => return,
            }
            std::thread::yield_now();
        }
    }

    /// `name` in `dir` was just found to name `inode`: it goes first among the node's
    /// names, so that the object's data is opened by it (the walk that found the object
    /// came by it) before any name the host may have given to another object since.
    fn promote(&self, inode: &Inode, dir: &Arc<OwnedFd>, name: &[u8]) {
        let Ok(node) = self.node_of(inode) else {
            return;
        };
        let mut names = node.names.lock();
        if let Some(i) = names.list.iter().position(|n| same_name(n, dir, name)) {
            names.list[..=i].rotate_right(1);
        }
    }

    /// `name` in `dir` no longer names `inode`: drop it from the node's names, and with the
    /// last, the node from the cache.
    fn unname(&self, inode: &Inode, dir: &Arc<OwnedFd>, name: &[u8]) {
        self.let_go(inode, |names| {
            names.list.retain(|n| !same_name(n, dir, name))
        });
    }

    /// Applies `change` to `inode`'s names; if none is left, the node is dead and leaves
    /// the cache (the host may give its number to a new object).
    fn let_go(&self, inode: &Inode, change: impl FnOnce(&mut Names)) {
        let Ok(node) = self.node_of(inode) else {
            return;
        };
        let dead = change_names(&node, change);
        drop(node);
        if dead {
            self.forget(inode.ino);
        }
    }
}

/// Applies `change` to `node`'s names; `true` if none is left: the node is dead, and the
/// caller takes it out of the cache ([`HostFs::forget`]) once it holds nothing of it.
fn change_names(node: &HostNode, change: impl FnOnce(&mut Names)) -> bool {
    let mut names = node.names.lock();
    change(&mut names);
    names.dead = names.list.is_empty();
    names.dead
}

/// Holds the host locks (see `HostNode::host`) of the nodes `a` and `b` for writing, for
/// a change that moves or removes their names on the host: in address order, the only
/// order in which two are ever held, and once if they are one node.
fn changing<'n>(
    a: Option<&'n HostNode>,
    b: Option<&'n HostNode>,
) -> [Option<RwLockWriteGuard<'n, ()>>; 2] {
    let (a, b) = match (a, b) {
        (Some(x), Some(y)) if std::ptr::eq(x, y) => (Some(x), None),
        (Some(x), Some(y)) if (x as *const HostNode) > (y as *const HostNode) => (Some(y), Some(x)),
        pair => pair,
    };
    let first = a.map(|n| n.host.write());
    [first, b.map(|n| n.host.write())]
}

/// The magic link of the descriptor `fd` (`/proc/self/fd/N`), which names its very object:
/// Linux opens or links a file through it whatever names the file has left.
fn magic_link(fd: &OwnedFd) -> String {
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

/// Whether only the inode cache's node holds the engine's inode: no dentry (a destroyed
/// one gives its count back only after a grace period), no open file, no caller. Once the
/// node is dead nobody can take a share of the inode, so the answer stays, as
/// `InodeCache::shrink` and `evict_unused` require (they ask again after the kill).
fn only_cached(n: &HostNode) -> bool {
    InodeArc::strong_count(&n.inode) == 1
}

/// `name` in `dir` no longer names `node`'s object: drops it from the known names; `true`
/// if it was the last (see [`change_names`]).
fn drop_name(node: &HostNode, dir: &Arc<OwnedFd>, name: &[u8]) -> bool {
    change_names(node, |names| {
        names.list.retain(|n| !same_name(n, dir, name))
    })
}

/// The key of `inode`'s entry in `HostFs::kept`: its address, unique until its eviction,
/// which takes the entry out.
fn kept_key(inode: &Inode) -> usize {
    inode as *const Inode as usize
}

/// Opens a file's data with `open` for reading, or for writing if `write`: read-write if
/// the server may, else write-only. The engine checked the caller's access; the server may
/// still lack read access on the host (a write-only file of a server that is not root).
fn open_for(write: bool, open: impl Fn(OFlags) -> Result<OwnedFd>) -> Result<OwnedFd> {
    if !write {
        return open(OFlags::RDONLY);
    }
    match open(OFlags::RDWR) {
        Err(Errno::EACCES) => open(OFlags::WRONLY),
        r => r,
    }
}

/// Sets the mode of the entry `name` of `dir` (of type `ty`, engine inode number `ino`).
/// `chmod` has no `*at` form that leaves a final symlink alone on every kernel, so the
/// object is opened (`O_NOFOLLOW`, checked to be `ino`) and changed by descriptor; devices
/// and sockets, which are never opened, and files the server may not open are changed by
/// name, which follows a symlink only if the host swapped one in behind the engine (see
/// the module docs, "Policy").
fn chmod_at(dir: &OwnedFd, name: &[u8], ty: u32, ino: u64, m: Mode) -> Result<()> {
    let open = |f: OFlags| open_at(dir, name, f | OFlags::NOFOLLOW | OFlags::NONBLOCK, ino);
    let fd = match ty {
        S_IFDIR => Some(open(OFlags::RDONLY | OFlags::DIRECTORY)),
        S_IFREG | S_IFIFO => Some(match open(OFlags::RDONLY) {
            Err(Errno::EACCES) => open(OFlags::WRONLY),
            r => r,
        }),
        _ => None,
    };
    match fd {
        Some(Ok(fd)) => rfs::fchmod(&fd, m).map_err(host),
        Some(Err(Errno::EACCES)) | None => {
            rfs::chmodat(dir, name, m, AtFlags::empty()).map_err(host)
        }
        Some(Err(e)) => Err(e),
    }
}

/// Opens `name` in `dir` with `flags` (plus `O_CLOEXEC | O_NOCTTY`), and checks that it is
/// still the object whose engine inode number is `ino`: `ESTALE` if the name now names
/// another.
fn open_at(dir: &OwnedFd, name: &[u8], flags: OFlags, ino: u64) -> Result<OwnedFd> {
    let fd = rfs::openat(
        dir,
        name,
        flags | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )
    .map_err(host)?;
    let st = rfs::fstat(&fd).map_err(host)?;
    if st.st_ino & ((1 << INO_BITS) - 1) != ino & ((1 << INO_BITS) - 1) {
        return Err(Errno::ESTALE);
    }
    Ok(fd)
}

/// A directory's (mtime, ctime), if they may stand for its contents: not when the later of
/// them is within [`TIME_GRAIN`] of now (or ahead of it), since the host stamps times from
/// a clock that ticks coarsely, so two changes in one tick leave the same times; a
/// directory changed that recently is listed again at its next revalidation. (NFS clients
/// distrust a recent change time the same way.)
fn settled_times(st: &Stat) -> Option<(Timespec, Timespec)> {
    let now = Timespec::now();
    let last = st.mtime.max(st.ctime);
    let grain_ns = TIME_GRAIN.as_nanos() as i128;
    let age =
        (now.sec as i128 - last.sec as i128) * 1_000_000_000 + now.nsec as i128 - last.nsec as i128;
    (age > grain_ns).then_some((st.mtime, st.ctime))
}

/// How recent a directory's change time must not be for it to be trusted (see
/// [`settled_times`]): well past a kernel tick (1 to 10 ms).
const TIME_GRAIN: std::time::Duration = std::time::Duration::from_millis(50);

fn unloaded_dir() -> Contents {
    Contents::dir(DirState {
        unloaded: true,
        ..Default::default()
    })
}

fn stat_of(st: rfs::Stat) -> Stat {
    let t = |sec: i64, nsec: i64| Timespec {
        sec,
        nsec: nsec as u32,
    };
    Stat {
        dev: st.st_dev,
        ino: st.st_ino,
        mode: st.st_mode,
        nlink: st.st_nlink as u32,
        uid: st.st_uid,
        gid: st.st_gid,
        rdev: st.st_rdev,
        size: st.st_size as u64,
        blksize: st.st_blksize as u32,
        blocks: st.st_blocks as u64,
        atime: t(st.st_atime, st.st_atime_nsec as i64),
        mtime: t(st.st_mtime, st.st_mtime_nsec as i64),
        ctime: t(st.st_ctime, st.st_ctime_nsec as i64),
    }
}

/// Raises the soft limit on open descriptors to the hard one: hostfs keeps one per loaded
/// directory.
fn raise_fd_limit() {
    let lim = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    if lim.current < lim.maximum {
        let new = rustix::process::Rlimit {
            current: lim.maximum,
            maximum: lim.maximum,
        };
        let _ = rustix::process::setrlimit(rustix::process::Resource::Nofile, new);
    }
}

impl FileSystem for HostFs {
    fn root_inode(&self) -> InodeArc {
        self.root.clone()
    }

    fn new_inode(
        &self,
        _: u32,
        _: u32,
        _: u32,
        _: u64,
        _: Option<&[u8]>,
        _: Timespec,
    ) -> Result<InodeArc> {
        // Only `O_TMPFILE` asks for an inode without a name, and the call layer refuses it
        // on a file system that writes through.
        Err(Errno::EOPNOTSUPP)
    }

    /// The engine let go of an object with no link left (its last name went while it was
    /// open, or an `O_TMPFILE` file was closed unlinked): its number is the host's to reuse.
    fn evict(&self, inode: &Inode) {
        // The node goes with the engine's inode, even with names left: under the shared
        // policy the engine's link count is the host's as last seen, so it can reach 0
        // while the host still names the object. A node left in the cache would give the
        // evicted inode to every later listing, which the walk finds evicted (never
        // fresh) and lists again, forever; without it the name is loaded as a new object.
        self.let_go(inode, |names| {
            names.anon = None;
            names.list.clear();
        });
        let kept = self.kept.lock().remove(&kept_key(inode));
        drop(kept);
    }

    fn transfer_owner(&self, _: &Inode, _: u32) {}

    fn inodes_of(&self, _: u32) -> u64 {
        0
    }

    fn charge_pages(&self, n: u64, _: bool) -> u64 {
        // The host's space is the host's: a write that does not fit fails there (ENOSPC).
        n
    }

    fn uncharge_pages(&self, _: u64) {}

    fn usage(&self) -> (u64, u64) {
        (self.nodes.len() as u64, 0)
    }

    fn statfs(&self) -> StatFs {
        match rfs::fstatfs(&*self.root_fd) {
            Ok(s) => StatFs {
                fs_type: s.f_type as u64,
                bsize: s.f_bsize as u64,
                blocks: s.f_blocks,
                bfree: s.f_bfree,
                bavail: s.f_bavail,
                files: s.f_files,
                ffree: s.f_ffree,
                namelen: s.f_namelen as u64,
                frsize: s.f_frsize as u64,
            },
            Err(_) => StatFs::default(),
        }
    }

    fn complete(&self) -> bool {
        false
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    fn writes_through(&self) -> bool {
        true
    }

    fn reuses_inode_numbers(&self) -> bool {
        true
    }

    fn inode_cache_stats(&self) -> Option<crate::icache::InodeCacheStats> {
        Some(self.nodes.stats())
    }

    fn load_dir(&self, dir: &Inode) -> Result<Listing> {
        let fd = self.to_load(dir)?;
        self.list_all(&fd)
    }

    fn load_dir_within(&self, dir: &Inode, max: usize) -> Result<Option<Listing>> {
        let fd = self.to_load(dir)?;
        self.list(&fd, max)
    }

    fn looks_up_names(&self) -> bool {
        true
    }

    /// One `fstatat` (and a `openat` of the directory, the first time).
    fn quick_lookups(&self) -> bool {
        true
    }

    fn lookup(&self, dir: &Inode, name: &[u8]) -> Result<Option<InodeArc>> {
        let fd = self.dir_fd(dir)?;
        // A component holds no NUL (the walk refuses a path with one).
        let name = std::ffi::CString::new(name).map_err(|_| Errno::EINVAL)?;
        let found = self.entry(&fd, &name)?;
        self.trim();
        Ok(found)
    }

    fn revalidate_dir(&self, dir: &Inode, force: bool) -> Result<Option<Listing>> {
        let fd = self.dir_fd(dir)?;
        let st = stat_of(rfs::fstat(&*fd).map_err(host)?);
        let node = self.node_of(dir)?;
        if st.mode & S_IFMT != S_IFDIR {
            return Err(Errno::ESTALE);
        }
        dir.refresh(&st);
        if st.nlink == 0 {
            // Removed on the host: it holds nothing (and listing it would fail).
            return Ok(Some(Listing::default()));
        }
        let times = settled_times(&st);
        if std::mem::replace(&mut node.names.lock().seen, times) == times
            && times.is_some()
            && !force
        {
            return Ok(None);
        }
        drop(node);
        self.list_all(&fd).map(Some)
    }

    fn revalidate_attr(&self, dir: &Inode, name: &[u8], inode: &Inode) -> Result<bool> {
        let fd = self.dir_fd(dir)?;
        let st = match rfs::statat(&*fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => stat_of(st),
            Err(rustix::io::Errno::NOENT) => return Ok(false),
            Err(e) => return Err(host(e)),
        };
        if self.ino_of(st.dev, st.ino)? != inode.ino || st.mode & S_IFMT != inode.mode() & S_IFMT {
            return Ok(false);
        }
        inode.refresh(&st);
        self.promote(inode, &fd, name);
        Ok(true)
    }

    fn revalidate_held(&self, inode: &Inode, data: Option<BorrowedFd<'_>>) -> Result<()> {
        // The object itself when there is a descriptor of it (an open file's, a
        // directory's own); else its first known name, if that still names it.
        let found = match data {
            Some(fd) => rfs::fstat(fd).map(stat_of),
            None => {
                let Ok(node) = self.node_of(inode) else {
                    return Ok(());
                };
                if let Some(fd) = node.dir.get() {
                    rfs::fstat(&**fd).map(stat_of)
                } else {
                    let Some((dir, name)) = node.names.lock().list.first().cloned() else {
                        return Ok(());
                    };
                    drop(node);
                    rfs::statat(&*dir, &*name, AtFlags::SYMLINK_NOFOLLOW).map(stat_of)
                }
            }
        };
        match found {
            Ok(st) if self.ino_of(st.dev, st.ino)? == inode.ino => {
                inode.refresh(&st);
                Ok(())
            }
            // The name went to another object, or the object left the host: what the
            // engine has is all there is.
            Ok(_) | Err(rustix::io::Errno::NOENT | rustix::io::Errno::STALE) => Ok(()),
            Err(e) => Err(host(e)),
        }
    }

    fn names_evicted(&self, inos: Vec<u64>) {
        let Some(cap) = self.max_inodes else {
            return;
        };
        admit_swept(&self.swept, self.my_swept(), cap, inos);
    }

    fn forget_name(&self, dir: &Inode, name: &[u8], victim: &Inode) {
        if victim.is_dir() {
            let own = self.node_of(victim).ok().and_then(|n| n.dir.get().cloned());
            if let Some(Ok(st)) = own.map(|fd| rfs::fstat(&*fd)) {
                victim.refresh(&stat_of(st));
            }
        }
        let fd = self.node_of(dir).ok().and_then(|n| n.dir.get().cloned());
        if let Some(fd) = fd {
            self.unname(victim, &fd, name);
        }
    }

    fn open_data(&self, inode: &Inode, write: bool) -> Result<OwnedFd> {
        // The caller holds the object; its last name may have gone since it took the hold
        // (an unlink racing an open, between the directory lock and this call), and with
        // it the node: the descriptor kept for it then reaches it.
        let node = match self.node_of(inode) {
            Ok(node) => node,
            Err(e) => return self.reopen_kept(inode, write, e),
        };
        // No engine change moves a name of the object on the host while they are tried.
        let held = node.host.read();
        let names: Vec<HostName> = {
            let names = node.names.lock();
            match (names.list.is_empty(), &names.anon) {
                (false, _) => names.list.to_vec(),
                // Read-write, like every `O_TMPFILE` descriptor.
                (true, Some(anon)) => return rustix::io::dup(anon).map_err(host),
                (true, None) => Vec::new(),
            }
        };
        // Each known name in turn, the last one checked first: a name the host gave to
        // another object (`ESTALE`) or took away (`ENOENT`) may be one the engine has not
        // revalidated yet, and the object may still be reachable by another. Before this,
        // a stale first name failed every retry of the open although the walk had just
        // checked the name it came by (see `promote`).
        let mut err = Errno::ENOENT;
        for (dir, name) in &names {
            let open = |acc| {
                open_at(
                    dir,
                    name,
                    acc | OFlags::NOFOLLOW | OFlags::NONBLOCK,
                    inode.ino,
                )
            };
            match open_for(write, open) {
                Err(e @ (Errno::ESTALE | Errno::ENOENT)) => {
                    if e == Errno::ESTALE {
                        err = e;
                    }
                }
                r => return r,
            }
        }
        drop(held);
        drop(node);
        self.reopen_kept(inode, write, err)
    }

    fn create(
        &self,
        dir: &Inode,
        name: &[u8],
        mode: u32,
        uid: u32,
        gid: u32,
        rdev: u64,
        target: Option<&[u8]>,
        now: Timespec,
    ) -> Result<InodeArc> {
        let dfd = self.dir_fd(dir)?;
        let perm = Mode::from_raw_mode(mode & 0o7777);
        let contents = match mode & S_IFMT {
            S_IFDIR => {
                rfs::mkdirat(&*dfd, name, perm).map_err(host)?;
                // New and empty: complete from the start, nothing to load.
                Contents::empty_dir()
            }
            S_IFREG => {
                let flags = OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW;
                drop(rfs::openat(&*dfd, name, flags | OFlags::CLOEXEC, perm).map_err(host)?);
                Contents::Stored(crate::sync::Mutex::new(()))
            }
            S_IFLNK => {
                let t = target.unwrap_or_default();
                rfs::symlinkat(t, &*dfd, name).map_err(host)?;
                Contents::Symlink(t.into())
            }
            ty => {
                let kind = rfs::FileType::from_raw_mode(ty);
                rfs::mknodat(&*dfd, name, kind, perm, rdev).map_err(host)?;
                Contents::Special(rdev)
            }
        };
        // From here the object exists on the host: a failure takes it away again.
        let made = || -> Result<Stat> {
            let is_link = mode & S_IFMT == S_IFLNK;
            // The server's umask, and a set-gid parent, shaped what the host made: the
            // owner is set first (a chown clears set-id bits), then the mode.
            if uid != self.euid || gid != self.egid {
                match rfs::chownat(
                    &*dfd,
                    name,
                    Some(rustix::fs::Uid::from_raw(uid)),
                    Some(rustix::fs::Gid::from_raw(gid)),
                    AtFlags::SYMLINK_NOFOLLOW,
                ) {
                    // A server that may not give files away keeps them (see the module
                    // docs); the engine still reports the caller's ownership.
                    Ok(()) | Err(rustix::io::Errno::PERM) => {}
                    Err(e) => return Err(host(e)),
                }
            }
            let st = stat_of(rfs::statat(&*dfd, name, AtFlags::SYMLINK_NOFOLLOW).map_err(host)?);
            if !is_link && st.mode & 0o7777 != mode & 0o7777 {
                chmod_at(&dfd, name, mode & S_IFMT, st.ino, perm)?;
            }
            Ok(st)
        };
        let st = match made() {
            Ok(st) => st,
            Err(e) => {
                let flags = if mode & S_IFMT == S_IFDIR {
                    AtFlags::REMOVEDIR
                } else {
                    AtFlags::empty()
                };
                let _ = rfs::unlinkat(&*dfd, name, flags);
                return Err(e);
            }
        };
        let ino = self.ino_of(st.dev, st.ino)?;
        let inode = InodeArc::new(Inode::new(ino, mode, uid, gid, contents, now));
        self.insert_new(ino, &inode, Some((dfd, ShortName::from_slice(name))), None)?;
        Ok(inode)
    }

    fn tmpfile(
        &self,
        dir: &Inode,
        mode: u32,
        uid: u32,
        gid: u32,
        now: Timespec,
    ) -> Result<InodeArc> {
        let dfd = self.dir_fd(dir)?;
        let perm = Mode::from_raw_mode(mode & 0o7777);
        let flags = OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC;
        let fd = rfs::openat(&*dfd, ".", flags, perm).map_err(host)?;
        if uid != self.euid || gid != self.egid {
            let (u, g) = (rfs::Uid::from_raw(uid), rfs::Gid::from_raw(gid));
            match rfs::fchown(&fd, Some(u), Some(g)) {
                Ok(()) | Err(rustix::io::Errno::PERM) => {}
                Err(e) => return Err(host(e)),
            }
        }
        rfs::fchmod(&fd, perm).map_err(host)?;
        let st = stat_of(rfs::fstat(&fd).map_err(host)?);
        let ino = self.ino_of(st.dev, st.ino)?;
        let contents = Contents::Stored(crate::sync::Mutex::new(()));
        let inode = InodeArc::new(Inode::new(ino, mode, uid, gid, contents, now));
        self.insert_new(ino, &inode, None, Some(fd))?;
        Ok(inode)
    }

    fn remove(&self, dir: &Inode, name: &[u8], victim: &Inode) -> Result<()> {
        let dfd = self.dir_fd(dir)?;
        let flags = if victim.is_dir() {
            AtFlags::REMOVEDIR
        } else {
            AtFlags::empty()
        };
        let node = self.node_of(victim).ok();
        let held = changing(node.as_deref(), None);
        self.removing(Some(victim), || rfs::unlinkat(&*dfd, name, flags))?;
        let dead = node.as_deref().is_some_and(|n| drop_name(n, &dfd, name));
        drop(held);
        drop(node);
        if dead {
            self.forget(victim.ino);
        }
        Ok(())
    }

    fn rename(
        &self,
        from: (&Inode, &[u8]),
        to: (&Inode, &[u8]),
        moved: &Inode,
        replaced: Option<&Inode>,
        exchange: bool,
    ) -> Result<()> {
        let ofd = self.dir_fd(from.0)?;
        let nfd = self.dir_fd(to.0)?;
        let flags = if exchange {
            rfs::RenameFlags::EXCHANGE
        } else if replaced.is_none() {
            rfs::RenameFlags::NOREPLACE
        } else {
            rfs::RenameFlags::empty()
        };
        let victim = replaced.filter(|_| !exchange);
        // The names of both objects change on the host and in their nodes as one step for
        // whoever reaches them by name.
        let mnode = self.node_of(moved).ok();
        let onode = replaced.and_then(|o| self.node_of(o).ok());
        let held = changing(mnode.as_deref(), onode.as_deref());
        self.removing(victim, || {
            rfs::renameat_with(&*ofd, from.1, &*nfd, to.1, flags)
        })?;
        let rename_in = |node: Option<&HostNode>, old: (&Arc<OwnedFd>, &[u8]), new: HostName| {
            if let Some(node) = node {
                let mut names = node.names.lock();
                names.list.retain(|n| !same_name(n, old.0, old.1));
                names.list.push(new);
            }
        };
        rename_in(
            mnode.as_deref(),
            (&ofd, from.1),
            (nfd.clone(), ShortName::from_slice(to.1)),
        );
        let dead = match onode.as_deref() {
            Some(other) if exchange => {
                rename_in(
                    Some(other),
                    (&nfd, to.1),
                    (ofd.clone(), ShortName::from_slice(from.1)),
                );
                None
            }
            Some(other) => drop_name(other, &nfd, to.1).then_some(other.inode.ino),
            None => None,
        };
        drop(held);
        drop((mnode, onode));
        if let Some(ino) = dead {
            self.forget(ino);
        }
        Ok(())
    }

    fn link(&self, inode: &Inode, dir: &Inode, name: &[u8]) -> Result<()> {
        let dfd = self.dir_fd(dir)?;
        let Ok(node) = self.node_of(inode) else {
            // Every name hostfs knew for the object went (an unlink, a rename over it)
            // while the engine still counts links (names hostfs never listed, or a count
            // the shared policy took from the host). An open file is linked by the
            // descriptor kept for it, through `/proc/self/fd` (Linux `linkat` of a magic
            // link, which needs no privilege); else the link fails as if that removal had
            // come first. The object gets no node back: it is still reached by that
            // descriptor, and a listing that finds the new name loads it as a new node.
            let fd = self.dup_kept(inode, Errno::ENOENT)?;
            return rfs::linkat(
                rfs::CWD,
                magic_link(&fd),
                &*dfd,
                name,
                AtFlags::SYMLINK_FOLLOW,
            )
            .map_err(host);
        };
        // The source name stays the object's until the link is made.
        let _held = node.host.read();
        let mut names = node.names.lock();
        match (names.list.first(), &names.anon) {
            (Some((sdir, sname)), _) => {
                rfs::linkat(&**sdir, &**sname, &*dfd, name, AtFlags::empty()).map_err(host)?
            }
            // An `O_TMPFILE` file's first name (the server needs CAP_DAC_READ_SEARCH).
            (None, Some(anon)) => {
                rfs::linkat(anon, "", &*dfd, name, AtFlags::EMPTY_PATH).map_err(host)?
            }
            (None, None) => return Err(Errno::ENOENT),
        }
        names.anon = None;
        names.list.push((dfd, ShortName::from_slice(name)));
        Ok(())
    }

    fn set_attr(
        &self,
        inode: &Inode,
        attr: &StoreAttr,
        fd: Option<BorrowedFd<'_>>,
    ) -> Result<Option<u64>> {
        // By descriptor (`Err`): the description's data descriptor when there is one (the
        // object may have no name left), or the root's own; or else by name (`Ok`), never
        // following a final symlink; or else, for an object whose known names all went
        // (held open, or by an `O_PATH` handle), by the descriptor kept for an open
        // regular file. An object with neither (a symlink or a special file held by a
        // handle) is named by nothing hostfs knows on the host: the engine's attributes are
        // all there is to change, as Linux changes an unlinked inode's.
        let root = std::ptr::eq(inode, &*self.root);
        let node;
        let kept;
        let (_held, at) = match fd.or_else(|| root.then(|| self.root_fd.as_fd())) {
            Some(fd) => (None, Some(Err(fd))),
            None => {
                node = self.node_of(inode).ok();
                match node.as_ref().and_then(|n| n.named().ok()) {
                    Some((held, name)) => (Some(held), Some(Ok(name))),
                    None => match self.dup_kept(inode, Errno::ENOENT) {
                        Ok(fd) => {
                            kept = fd;
                            (None, Some(Err(kept.as_fd())))
                        }
                        Err(_) => (None, None),
                    },
                }
            }
        };
        let Some(at) = at else {
            return Ok(None);
        };
        if attr.uid.is_some() || attr.gid.is_some() {
            let (u, g) = (
                attr.uid.map(rustix::fs::Uid::from_raw),
                attr.gid.map(rustix::fs::Gid::from_raw),
            );
            match &at {
                Err(fd) => rfs::fchown(fd, u, g),
                Ok((d, n)) => rfs::chownat(&**d, &**n, u, g, AtFlags::SYMLINK_NOFOLLOW),
            }
            .map_err(host)?;
        }
        if let Some(p) = attr.perm {
            let m = Mode::from_raw_mode(p & 0o7777);
            match &at {
                Err(fd) => rfs::fchmod(fd, m).map_err(host),
                Ok((d, n)) => chmod_at(d, n, inode.mode() & S_IFMT, inode.ino, m),
            }?;
        }
        if attr.atime.is_some() || attr.mtime.is_some() {
            let ts = |t: Option<Timespec>| match t {
                Some(t) => rfs::Timespec {
                    tv_sec: t.sec,
                    tv_nsec: t.nsec as _,
                },
                None => rfs::Timespec {
                    tv_sec: 0,
                    tv_nsec: rfs::UTIME_OMIT,
                },
            };
            let times = rfs::Timestamps {
                last_access: ts(attr.atime),
                last_modification: ts(attr.mtime),
            };
            match &at {
                Err(fd) => rfs::futimens(fd, &times),
                Ok((d, n)) => rfs::utimensat(&**d, &**n, &times, AtFlags::SYMLINK_NOFOLLOW),
            }
            .map_err(host)?;
        }
        let Some(len) = attr.size else {
            return Ok(None);
        };
        let opened;
        let fd = match (fd, &at) {
            (Some(fd), _) => fd,
            (None, Err(fd)) => *fd,
            (None, Ok((dir, name))) => {
                opened = open_at(
                    dir,
                    name,
                    OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK,
                    inode.ino,
                )?;
                opened.as_fd()
            }
        };
        rfs::ftruncate(fd, len).map_err(host)?;
        Ok(rfs::fstat(fd).ok().map(|st| st.st_blocks as u64))
    }

    /// Extended attributes go to the host object: through the description's data
    /// descriptor, a directory's own, or a regular file's opened by name for the call
    /// (checked to be the object); a symlink or a special file, which is never opened, by
    /// (directory descriptor, name) with Linux 6.13's `*xattrat` calls and
    /// `AT_SYMLINK_NOFOLLOW` (one component, never followed). On an older host kernel such
    /// objects have no extended attributes through hostfs (`EOPNOTSUPP`).
    fn get_xattr(&self, inode: &Inode, name: &[u8], fd: Option<BorrowedFd<'_>>) -> Result<Vec<u8>> {
        let name = xattr_name(name)?;
        let get = |buf: &mut Vec<u8>| self.on_host(inode, fd, |o| o.get(&name, buf));
        // Most values are small: a second call, with room for the largest, only if not.
        let mut buf = vec![0u8; 256];
        let n = match get(&mut buf) {
            Err(Errno::ERANGE) => {
                buf = vec![0u8; crate::types::limits::XATTR_SIZE_MAX];
                get(&mut buf)?
            }
            r => r?,
        };
        buf.truncate(n);
        Ok(buf)
    }

    fn set_xattr(
        &self,
        inode: &Inode,
        name: &[u8],
        value: &[u8],
        flags: XattrFlags,
        fd: Option<BorrowedFd<'_>>,
    ) -> Result<()> {
        let name = xattr_name(name)?;
        self.on_host(inode, fd, |o| o.set(&name, value, flags.bits()))
    }

    fn remove_xattr(&self, inode: &Inode, name: &[u8], fd: Option<BorrowedFd<'_>>) -> Result<()> {
        let name = xattr_name(name)?;
        self.on_host(inode, fd, |o| o.remove(&name))
    }

    fn list_xattr(&self, inode: &Inode, fd: Option<BorrowedFd<'_>>) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; crate::types::limits::XATTR_LIST_MAX];
        let n = self.on_host(inode, fd, |o| o.list(&mut buf))?;
        buf.truncate(n);
        Ok(buf)
    }
}

fn xattr_name(name: &[u8]) -> Result<std::ffi::CString> {
    std::ffi::CString::new(name).map_err(|_| Errno::EINVAL)
}

/// Bytes of `getdents64` output a listing reads at a time (`HostFs::list`): room for 117
/// entries of the longest names (280 bytes each), and for over a thousand short ones.
const LIST_BUF: usize = 32 * 1024;

/// How an extended-attribute call reaches a host object (see `HostFs::on_host`).
enum HostObj<'a> {
    /// A descriptor of the object itself.
    Fd(BorrowedFd<'a>),
    /// An entry of a directory, not followed if a symlink.
    At(BorrowedFd<'a>, &'a CStr),
}

/// Linux 6.13's `*xattrat` system calls (the same numbers on every architecture), which
/// the C library does not wrap yet, and their `struct xattr_args`.
mod xattrat {
    pub const SET: libc::c_long = 463;
    pub const GET: libc::c_long = 464;
    pub const LIST: libc::c_long = 465;
    pub const REMOVE: libc::c_long = 466;
    #[repr(C)]
    pub struct Args {
        pub value: u64,
        pub size: u32,
        pub flags: u32,
    }
}

/// A raw system call's answer: the count, or the errno (`ENOSYS` from a kernel without the
/// call is `EOPNOTSUPP`: the object has none through hostfs).
fn sys_result(r: libc::c_long) -> Result<usize> {
    if r >= 0 {
        return Ok(r as usize);
    }
    match std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
    {
        libc::ENOSYS => Err(Errno::EOPNOTSUPP),
        e => Err(Errno::from_raw(e)),
    }
}

impl HostObj<'_> {
    fn get(&self, name: &CStr, buf: &mut [u8]) -> Result<usize> {
        match *self {
            HostObj::Fd(fd) => rfs::fgetxattr(fd, name, buf).map_err(host),
            HostObj::At(dir, entry) => {
                let mut args = xattrat::Args {
                    value: buf.as_mut_ptr() as u64,
                    size: buf.len() as u32,
                    flags: 0,
                };
                // SAFETY: the pointers are to a live descriptor number, NUL-terminated
                // strings and `args`, whose buffer is `buf`'s, all valid for the call.
                let r = unsafe {
                    libc::syscall(
                        xattrat::GET,
                        dir.as_raw_fd(),
                        entry.as_ptr(),
                        libc::AT_SYMLINK_NOFOLLOW,
                        name.as_ptr(),
                        &mut args as *mut xattrat::Args,
                        std::mem::size_of::<xattrat::Args>(),
                    )
                };
                sys_result(r)
            }
        }
    }

    fn set(&self, name: &CStr, value: &[u8], flags: u32) -> Result<()> {
        match *self {
            HostObj::Fd(fd) => {
                rfs::fsetxattr(fd, name, value, rfs::XattrFlags::from_bits_retain(flags))
                    .map_err(host)
            }
            HostObj::At(dir, entry) => {
                let args = xattrat::Args {
                    value: value.as_ptr() as u64,
                    size: value.len() as u32,
                    flags,
                };
                // SAFETY: as in `get`; the kernel only reads `value`.
                let r = unsafe {
                    libc::syscall(
                        xattrat::SET,
                        dir.as_raw_fd(),
                        entry.as_ptr(),
                        libc::AT_SYMLINK_NOFOLLOW,
                        name.as_ptr(),
                        &args as *const xattrat::Args,
                        std::mem::size_of::<xattrat::Args>(),
                    )
                };
                sys_result(r).map(drop)
            }
        }
    }

    fn remove(&self, name: &CStr) -> Result<()> {
        match *self {
            HostObj::Fd(fd) => rfs::fremovexattr(fd, name).map_err(host),
            HostObj::At(dir, entry) => {
                // SAFETY: as in `get`.
                let r = unsafe {
                    libc::syscall(
                        xattrat::REMOVE,
                        dir.as_raw_fd(),
                        entry.as_ptr(),
                        libc::AT_SYMLINK_NOFOLLOW,
                        name.as_ptr(),
                    )
                };
                sys_result(r).map(drop)
            }
        }
    }

    fn list(&self, buf: &mut [u8]) -> Result<usize> {
        match *self {
            HostObj::Fd(fd) => rfs::flistxattr(fd, buf).map_err(host),
            HostObj::At(dir, entry) => {
                // SAFETY: as in `get`; the kernel writes at most `buf.len()` bytes.
                let r = unsafe {
                    libc::syscall(
                        xattrat::LIST,
                        dir.as_raw_fd(),
                        entry.as_ptr(),
                        libc::AT_SYMLINK_NOFOLLOW,
                        buf.as_mut_ptr(),
                        buf.len(),
                    )
                };
                sys_result(r)
            }
        }
    }
}

impl HostFs {
    /// Runs `f` on the host object of `inode` (see `get_xattr`).
    fn on_host<R>(
        &self,
        inode: &Inode,
        fd: Option<BorrowedFd<'_>>,
        f: impl FnOnce(HostObj<'_>) -> Result<R>,
    ) -> Result<R> {
        if let Some(fd) = fd {
            return f(HostObj::Fd(fd));
        }
        if inode.is_dir() {
            return match self.dir_fd(inode) {
                Ok(dir) => f(HostObj::Fd(dir.as_fd())),
                // Removed while open: its node left the cache (see `kept`).
                Err(e) => f(HostObj::Fd(self.dup_kept(inode, e)?.as_fd())),
            };
        }
        let node = self.node_of(inode);
        let named = node.as_ref().map_err(|e| *e).and_then(|n| n.named());
        let (_held, (dir, name)) = match named {
            Ok(n) => n,
            Err(e) => {
                // A file whose last name went while it was open (see `kept`).
                let fd = self.dup_kept(inode, e)?;
                return f(HostObj::Fd(fd.as_fd()));
            }
        };
        if inode.mode() & S_IFMT == S_IFREG {
            let open = |flags| {
                open_at(
                    &dir,
                    &name,
                    flags | OFlags::NOFOLLOW | OFlags::NONBLOCK,
                    inode.ino,
                )
            };
            let file = match open(OFlags::RDONLY) {
                Err(Errno::EACCES) => open(OFlags::WRONLY),
                r => r,
            }?;
            return f(HostObj::Fd(file.as_fd()));
        }
        let entry = xattr_name(&name)?;
        f(HostObj::At(dir.as_fd(), &entry))
    }
}

impl HostFs {
    /// The engine's object for the host entry `name` of `dir`, whose `fstatat` is `st`.
    fn load_node(&self, dir: &Arc<OwnedFd>, name: &CStr, st: &Stat, ino: u64) -> Result<HostNode> {
        let contents = match st.mode & S_IFMT {
            S_IFDIR => unloaded_dir(),
            S_IFREG => Contents::Stored(crate::sync::Mutex::new(())),
            S_IFLNK => {
                let t = rfs::readlinkat(dir.as_fd(), name, Vec::new()).map_err(host)?;
                Contents::Symlink(t.into_bytes().into())
            }
            _ => Contents::Special(st.rdev),
        };
        let mut st = *st;
        st.ino = ino;
        Ok(HostNode::new(
            InodeArc::new(Inode::from_stat(&st, contents)),
            None,
        ))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{admit_swept, Swept};
    use crate::sync::Mutex;
    use crossbeam_utils::CachePadded;

    /// The numbers waiting for a trim stay within the inode cache's cap in all the lists
    /// together, however many threads' lists the sweeps fill (each list alone within the
    /// cap would let them hold the cap once per thread).
    #[test]
    fn swept_numbers_stay_within_the_cap_in_all_lists() {
        let lists: Box<[CachePadded<Mutex<Swept>>]> = (0..5)
            .map(|_| CachePadded::new(Mutex::new(Swept::default())))
            .collect();
        let cap = 100;
        for round in 0..3u64 {
            for mine in 0..lists.len() {
                let inos = (0..60)
                    .map(|i| 1000 * round + 100 * mine as u64 + i)
                    .collect();
                admit_swept(&lists, mine, cap, inos);
            }
        }
        let total: usize = lists.iter().map(|l| l.lock().len()).sum();
        assert_eq!(total, cap);
        // The first list's first batch went in whole; the next list took what was left.
        assert_eq!(lists[0].lock().len(), 60);
        assert_eq!(lists[1].lock().len(), 40);
    }
}
