//! The path walk.
//!
//! # Fast walk
//! The walk a caller gets first is lockless (seed 003, Linux's RCU walk): under an epoch
//! guard it steps from dentry to dentry through the dentry hash, writing no shared memory
//! and taking no reference. Each step samples the child's sequence counter and then checks
//! that the parent's did not move since it was sampled, so every step is a decision the
//! locked walk could have made at that moment. Mount crossings and `..` are validated the
//! same way, and the walk's result carries the counters the caller re-checks after using
//! it (`stat`, `access` and `readlink` finish inside the guard and take no reference at
//! all; `open` takes its references, then validates).
//!
//! # Locked walk
//! The same code with `locked = true`: every lookup takes the directory's mutex, where the
//! answer is authoritative, and a miss caches a negative dentry. It is what runs when the
//! cache cannot answer; for memfs that is only a first lookup of a missing name.
//!
//! # Falling back
//! The fast walk never guesses. Whenever a counter moved, a chain lookup missed, or a
//! writer is active, it returns [`Fail::Retry`], and [`with_walk`] runs the whole operation
//! again in locked mode. The locked walk never returns `Retry`.
//!
//! # Check mode
//! With [`crate::Vfs::set_check_mode`], [`with_walk`] repeats each successful fast walk in
//! locked mode and panics if the two disagree while no namespace change happened in
//! between (a counter bumped by every change in check mode tells).
//!
//! # Lock order
//! The walk holds at most one lock at a time: a directory mutex during a locked lookup
//! (with a bucket lock nested inside, see `dentry`).

use crate::dentry::{Dentry, RcuLookup, MOUNTED};
use crate::errno::Errno;
use crate::inode::Inode;
use crate::mount::{key, Mount, MountTable};
use crate::name::{check_len, scan, Component};
use crate::types::limits::MAXSYMLINKS;
use crate::types::Creds;
use crate::Vfs;
use crossbeam_epoch::Guard;
use std::sync::atomic::Ordering::Acquire;
use std::sync::Arc;

/// Why a walk stopped without a result.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub(crate) enum Fail {
    /// The lockless walk could not validate what it saw: run again with locks.
    Retry,
    /// A validated error.
    Err(Errno),
}

impl From<Errno> for Fail {
    fn from(e: Errno) -> Fail {
        Fail::Err(e)
    }
}

/// What a walk needs from its caller.
pub(crate) struct Ctx<'g> {
    pub vfs: &'g Vfs,
    pub root_mnt: &'g Arc<Mount>,
    pub root: &'g Dentry,
    pub creds: &'g Creds,
    /// Identity of `creds` for the path cache; 0 for credentials that are not cached.
    pub creds_id: u64,
    pub guard: &'g Guard,
}

/// A place in the namespace: a mount, a dentry in it, the dentry's sequence count when it
/// was reached (fast mode), and its inode.
#[derive(Clone, Copy)]
pub(crate) struct Pos<'g> {
    pub mnt: &'g Arc<Mount>,
    pub d: &'g Dentry,
    pub seq: u32,
    pub inode: Option<&'g Inode>,
}

impl<'g> Pos<'g> {
    /// Stands on `d` in `mnt`, sampling its counter in fast mode.
    pub fn at(
        mnt: &'g Arc<Mount>,
        d: &'g Dentry,
        locked: bool,
        guard: &'g Guard,
    ) -> Result<Pos<'g>, Fail> {
        let seq = if locked {
            0
        } else {
            d.seq.read_begin().ok_or(Fail::Retry)?
        };
        Ok(Pos {
            mnt,
            d,
            seq,
            inode: d.inode(guard),
        })
    }

    /// The inode, which a position always has (the walk never stands on a negative entry).
    pub fn inode(&self) -> Result<&'g Inode, Fail> {
        self.inode.ok_or(Fail::Err(Errno::ENOENT))
    }

    fn same(&self, mnt: &Arc<Mount>, d: &Dentry) -> bool {
        std::ptr::eq(self.d, d) && Arc::ptr_eq(self.mnt, mnt)
    }
}

/// The last component of a walk that stops at the parent.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Last<'a> {
    /// An ordinary name.
    Normal(Component<'a>),
    /// `.`
    Dot,
    /// `..`
    DotDot,
    /// No component at all: the path was `/`.
    Root,
}

/// How to walk.
#[derive(Clone, Copy, Default)]
pub(crate) struct Flags {
    /// Follow a symlink in the last component.
    pub follow: bool,
    /// Stop at the parent of the last component.
    pub parent: bool,
}

/// What a walk found.
pub(crate) enum Found<'a, 'g> {
    /// The object the path names.
    Final(Pos<'g>),
    /// The parent directory, the last component and whether the path had a trailing slash.
    Parent(Pos<'g>, Last<'a>, bool),
}

/// A walk's result and the counters to validate it against.
pub(crate) struct Walked<'a, 'g> {
    pub found: Found<'a, 'g>,
    locked: bool,
    mount_seq: u32,
}

impl<'a, 'g> Walked<'a, 'g> {
    /// Re-checks, after the caller used the result, that it still holds (fast mode).
    pub fn validate(&self, ctx: &Ctx<'g>) -> Result<(), Fail> {
        if self.locked {
            return Ok(());
        }
        let p = match &self.found {
            Found::Final(p) => p,
            Found::Parent(p, _, _) => p,
        };
        if p.d.seq.read_retry(p.seq) || ctx.vfs.mount_seq.read_retry(self.mount_seq) {
            return Err(Fail::Retry);
        }
        Ok(())
    }

    /// The final position (for walks without `parent`).
    pub fn pos(&self) -> Pos<'g> {
        match &self.found {
            Found::Final(p) => *p,
            Found::Parent(p, _, _) => *p,
        }
    }
}

/// The pending path segments: the user's path and the bodies of symlinks being followed.
struct Segments<'a> {
    inline: [&'a [u8]; 8],
    len: usize,
    spill: Vec<&'a [u8]>,
}

impl<'a> Segments<'a> {
    fn new(p: &'a [u8]) -> Self {
        let mut s = Segments {
            inline: [&[]; 8],
            len: 1,
            spill: Vec::new(),
        };
        s.inline[0] = p;
        s
    }
    #[inline]
    fn len(&self) -> usize {
        self.len
    }
    #[inline]
    fn top(&mut self) -> Option<&mut &'a [u8]> {
        match self.len {
            0 => None,
            n if n <= 8 => Some(&mut self.inline[n - 1]),
            _ => self.spill.last_mut(),
        }
    }
    fn pop(&mut self) {
        if self.len > 8 {
            self.spill.pop();
        }
        self.len -= 1;
    }
    fn push(&mut self, p: &'a [u8]) {
        if self.len < 8 {
            self.inline[self.len] = p;
        } else {
            self.spill.push(p);
        }
        self.len += 1;
    }
}

#[inline]
fn skip_slashes(p: &[u8]) -> &[u8] {
    let n = p.iter().take_while(|&&b| b == b'/').count();
    &p[n..]
}

/// Walks `path` from `start` (or from the root if it is absolute). `links` counts the
/// symlinks followed so far in this resolution, across restarts.
pub(crate) fn walk<'a, 'g: 'a>(
    ctx: &Ctx<'g>,
    start: Pos<'g>,
    path: &'a [u8],
    flags: Flags,
    locked: bool,
    links: &mut u32,
) -> Result<Walked<'a, 'g>, Fail> {
    let mount_seq = if locked {
        0
    } else {
        ctx.vfs.mount_seq.read_begin().ok_or(Fail::Retry)?
    };
    let r = walk_inner(ctx, start, path, flags, locked, links);
    if !locked && ctx.vfs.mount_seq.read_retry(mount_seq) {
        return Err(Fail::Retry);
    }
    Ok(Walked {
        found: r?,
        locked,
        mount_seq,
    })
}

fn walk_inner<'a, 'g: 'a>(
    ctx: &Ctx<'g>,
    start: Pos<'g>,
    path: &'a [u8],
    flags: Flags,
    locked: bool,
    links: &mut u32,
) -> Result<Found<'a, 'g>, Fail> {
    let trailing = path.last() == Some(&b'/');
    let mut pos = if path.first() == Some(&b'/') {
        Pos::at(ctx.root_mnt, ctx.root, locked, ctx.guard)?
    } else {
        start
    };
    let mut segs = Segments::new(path);
    loop {
        // The next component, and whether it is the last one of the whole resolution.
        let (c, last, slash) = loop {
            let Some(top) = segs.top() else {
                // Exhausted: the path ended on a directory (`/`, or a symlink to one).
                return Ok(if flags.parent {
                    Found::Parent(pos, Last::Root, trailing)
                } else {
                    Found::Final(pos)
                });
            };
            let s = skip_slashes(top);
            if s.is_empty() {
                segs.pop();
                continue;
            }
            let c = scan(s);
            let after = &s[c.bytes.len()..];
            let rest = skip_slashes(after);
            *top = rest;
            let last = rest.is_empty() && segs.len() == 1;
            // A slash after the last component (in the path or a symlink body) asks for
            // a directory.
            break (c, last, last && (trailing || !after.is_empty()));
        };
        let dir = pos.inode()?;
        if !dir.is_dir() {
            return Err(validated(pos, locked, Errno::ENOTDIR));
        }
        if let Err(e) = dir.may_search(ctx.creds) {
            return Err(validated(pos, locked, e));
        }
        if last && flags.parent {
            let l = if c.is_dot() {
                Last::Dot
            } else if c.is_dotdot() {
                Last::DotDot
            } else {
                Last::Normal(c)
            };
            return Ok(Found::Parent(pos, l, slash));
        }
        if c.is_dot() {
            continue;
        }
        if c.is_dotdot() {
            pos = dotdot(ctx, pos, locked)?;
            continue;
        }
        let child = if locked {
            lookup_locked(ctx, pos, &c)?
        } else {
            lookup_fast(ctx, pos, &c)?
        };
        let Some(inode) = child.inode else {
            return Err(Fail::Err(Errno::ENOENT));
        };
        if let Some(body) = inode.symlink_target() {
            if !last || flags.follow || slash {
                *links += 1;
                if *links > MAXSYMLINKS {
                    return Err(validated(child, locked, Errno::ELOOP));
                }
                if body.is_empty() {
                    return Err(validated(child, locked, Errno::ENOENT));
                }
                if !locked && child.d.seq.read_retry(child.seq) {
                    return Err(Fail::Retry);
                }
                if segs.top().is_some_and(|t| t.is_empty()) {
                    segs.pop();
                }
                segs.push(body);
                if body[0] == b'/' {
                    pos = Pos::at(ctx.root_mnt, ctx.root, locked, ctx.guard)?;
                }
                continue;
            }
        }
        if last {
            if slash && !inode.is_dir() {
                return Err(validated(child, locked, Errno::ENOTDIR));
            }
            return Ok(Found::Final(child));
        }
        pos = child;
    }
}

/// Turns an error decided at `p` into a result the caller may trust: in fast mode only if
/// `p` did not change meanwhile.
#[inline]
fn validated(p: Pos<'_>, locked: bool, e: Errno) -> Fail {
    if !locked && p.d.seq.read_retry(p.seq) {
        Fail::Retry
    } else {
        Fail::Err(e)
    }
}

/// Looks `c` up in `pos` without locks, like Linux `lookup_fast` in RCU mode.
#[inline]
fn lookup_fast<'g>(ctx: &Ctx<'g>, pos: Pos<'g>, c: &Component<'_>) -> Result<Pos<'g>, Fail> {
    let RcuLookup::Found(d, seq) = pos.mnt.fs.dcache.lookup_rcu(pos.d, c, ctx.guard) else {
        return Err(Fail::Retry);
    };
    let inode = d.inode(ctx.guard);
    if pos.d.seq.read_retry(pos.seq) || d.seq.read_retry(seq) {
        return Err(Fail::Retry);
    }
    let p = Pos {
        mnt: pos.mnt,
        d,
        seq,
        inode,
    };
    if d.flags() & MOUNTED != 0 {
        return cross_mounts(ctx, p, false);
    }
    Ok(p)
}

/// Looks `c` up in `pos` under the directory lock, caching a negative entry on a miss.
fn lookup_locked<'g>(ctx: &Ctx<'g>, pos: Pos<'g>, c: &Component<'_>) -> Result<Pos<'g>, Fail> {
    let dir = pos.inode()?.dir().ok_or(Fail::Err(Errno::ENOTDIR))?;
    let fs = &pos.mnt.fs;
    let mut st = dir.lock();
    if st.dead {
        return Err(Fail::Err(Errno::ENOENT));
    }
    // Like Linux, a name's length is checked at the lookup in a live directory. A name
    // that long is never cached, so the fast walk always comes here for it.
    check_len(c)?;
    match fs.dcache.lookup_locked(pos.d, c, ctx.guard) {
        Some(d) => {
            let p = Pos {
                mnt: pos.mnt,
                d,
                seq: 0,
                inode: d.inode(ctx.guard),
            };
            drop(st);
            if d.flags() & MOUNTED != 0 {
                return cross_mounts(ctx, p, true);
            }
            Ok(p)
        }
        None => {
            if fs.negative_admit() {
                fs.dcache.d_alloc(pos.d, c, None, &mut st);
            }
            Err(Fail::Err(Errno::ENOENT))
        }
    }
}

/// The mount table as of now.
#[inline]
pub(crate) fn mount_table<'g>(vfs: &Vfs, guard: &'g Guard) -> &'g MountTable {
    let t = vfs.mounts.load(Acquire, guard);
    // SAFETY: the table pointer is never null after `Vfs::new`, and old tables are freed
    // only after a grace period.
    unsafe { t.deref() }
}

/// The index of `mnt` in the current mount table (`usize::MAX` for the root mount), as the
/// path cache records it.
pub(crate) fn mount_index(vfs: &Vfs, mnt: &Arc<Mount>, guard: &Guard) -> Option<usize> {
    if Arc::ptr_eq(mnt, vfs.root_mount()) {
        return Some(usize::MAX);
    }
    mount_table(vfs, guard)
        .all
        .iter()
        .position(|m| Arc::ptr_eq(m, mnt))
}

/// The mount at `idx` of the current table (see [`mount_index`]).
pub(crate) fn mount_at<'g>(vfs: &'g Vfs, idx: usize, guard: &'g Guard) -> Option<&'g Arc<Mount>> {
    if idx == usize::MAX {
        return Some(vfs.root_mount());
    }
    mount_table(vfs, guard).all.get(idx)
}

/// Moves from a mount point to the root of the top mount on it.
fn cross_mounts<'g>(ctx: &Ctx<'g>, p: Pos<'g>, locked: bool) -> Result<Pos<'g>, Fail> {
    match mount_table(ctx.vfs, ctx.guard).top.get(&key(p.mnt, p.d)) {
        Some(m) => Pos::at(m, &m.root, locked, ctx.guard),
        None => Ok(p),
    }
}

/// `..`: up one level, leaving mounts at their roots, never above the caller's root.
fn dotdot<'g>(ctx: &Ctx<'g>, mut pos: Pos<'g>, locked: bool) -> Result<Pos<'g>, Fail> {
    loop {
        if pos.same(ctx.root_mnt, ctx.root) {
            return Ok(pos);
        }
        if std::ptr::eq(pos.d, &*pos.mnt.root) {
            match &pos.mnt.parent {
                Some((pm, pd)) => {
                    pos = Pos::at(pm, pd, locked, ctx.guard)?;
                    continue;
                }
                None => return Ok(pos),
            }
        }
        let Some(parent) = pos.d.parent(ctx.guard) else {
            return Ok(pos);
        };
        if !locked && pos.d.seq.read_retry(pos.seq) {
            return Err(Fail::Retry);
        }
        let up = Pos::at(pos.mnt, parent, locked, ctx.guard)?;
        if parent.flags() & MOUNTED != 0 {
            return cross_mounts(ctx, up, locked);
        }
        return Ok(up);
    }
}

/// Runs `op` with the fast walk, and again with the locked walk if it asks to retry. In
/// check mode, a fast result is compared with a locked one.
pub(crate) fn with_walk<T: PartialEq + std::fmt::Debug>(
    vfs: &Vfs,
    mut op: impl FnMut(bool) -> Result<T, Fail>,
) -> Result<T, Errno> {
    let check = vfs.check_mode();
    let before = if check { vfs.change_count() } else { 0 };
    match op(false) {
        Err(Fail::Retry) => {}
        Err(Fail::Err(e)) => {
            if check {
                compare(vfs, before, &Err(e), op(true));
            }
            return Err(e);
        }
        Ok(v) => {
            if check {
                let r: Result<T, Errno> = Ok(v);
                compare(vfs, before, &r, op(true));
                return r;
            }
            return Ok(v);
        }
    }
    match op(true) {
        Ok(v) => Ok(v),
        Err(Fail::Err(e)) => Err(e),
        Err(Fail::Retry) => unreachable!("the locked walk never asks to retry"),
    }
}

/// Check mode: panics if a fast result and a locked one disagree while no namespace change
/// happened since `before`.
pub(crate) fn compare<T: PartialEq + std::fmt::Debug>(
    vfs: &Vfs,
    before: u64,
    fast: &Result<T, Errno>,
    locked: Result<T, Fail>,
) {
    let locked = match locked {
        Ok(v) => Ok(v),
        Err(Fail::Err(e)) => Err(e),
        Err(Fail::Retry) => unreachable!("the locked walk never asks to retry"),
    };
    // `u64::MAX` says a change was in progress at one of the two readings: not judged.
    let unchanged = before != u64::MAX && vfs.change_count() == before;
    if unchanged && *fast != locked {
        vfs.record_check_failure();
        panic!("check mode: fast walk gave {fast:?}, locked walk gave {locked:?}");
    }
}
