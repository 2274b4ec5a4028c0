//! `renameat2`: the rename protocol (which locks, in which order, the loop check under
//! the rename lock, and the namespace-change brackets for the path cache).

use super::*;

impl Process {
    /// `rename(2)`.
    pub fn rename(&self, old: impl AsRef<Path>, new: impl AsRef<Path>) -> Result<()> {
        self.renameat2(Fd::CWD, old, Fd::CWD, new, RenameFlags::empty())
    }

    /// `renameat2(2)`, with `RENAME_NOREPLACE` and `RENAME_EXCHANGE`.
    pub fn renameat2(
        &self,
        olddirfd: impl Desc,
        old: impl AsRef<Path>,
        newdirfd: impl Desc,
        new: impl AsRef<Path>,
        flags: RenameFlags,
    ) -> Result<()> {
        if flags.0 & !(RenameFlags::NOREPLACE.0 | RenameFlags::EXCHANGE.0) != 0
            || flags.contains(RenameFlags::NOREPLACE | RenameFlags::EXCHANGE)
        {
            return Err(Errno::EINVAL);
        }
        let old = cpath_named(old.as_ref())?;
        // Linux reads both names first, but reports what is wrong with the new one (empty,
        // too long) only after the old one's parent resolved (`do_renameat2`).
        let new = cpath_named(new.as_ref());
        self.at(olddirfd, old, |cx, old_start| {
            let mut links = 0;
            let par1 = Self::parent_of(cx, old_start, old, &mut links)?;
            let (p1, l1, t1) = (par1.pos, par1.last, par1.trailing);
            let new = new?;
            // The new side's start, looked at only after the old side resolved (as Linux).
            let held_new;
            let (ctx, _cwd) = self.held_ctx(cx.guard);
            let new_start = if new.first() == Some(&b'/') || newdirfd.is_cwd() {
                Start {
                    mnt: &ctx.cwd.mnt,
                    d: ctx.cwd.d.ptr(),
                }
            } else {
                held_new = self.file(newdirfd)?;
                match &held_new.dir {
                    Some(d) => Start {
                        mnt: &held_new.mnt,
                        d: d.ptr(),
                    },
                    None => return Err(Errno::ENOTDIR),
                }
            };
            let mut links = 0;
            let par2 = Self::parent_of(cx, new_start, new, &mut links)?;
            let (p2, l2, t2) = (par2.pos, par2.last, par2.trailing);
            // Linux `do_renameat2` order: EXDEV, the kinds of the last components, then
            // the lookups (where a name's length is checked).
            if !Arc::ptr_eq(p1.mnt, p2.mnt) {
                return Err(Errno::EXDEV);
            }
            let Last::Normal(c1) = l1 else {
                return Err(Errno::EBUSY);
            };
            let Last::Normal(c2) = l2 else {
                return Err(if flags.contains(RenameFlags::NOREPLACE) {
                    Errno::EEXIST
                } else {
                    Errno::EBUSY
                });
            };
            // Then `mnt_want_write`: EROFS before the lookups.
            p1.mnt.fs.want_write()?;
            self.do_rename(cx, &p1, &c1, t1, &p2, &c2, t2, flags)
        })
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn do_rename(
        &self,
        cx: &Ctx<'_>,
        p1: &Pos<'_>,
        c1: &Component<'_>,
        t1: bool,
        p2: &Pos<'_>,
        c2: &Component<'_>,
        t2: bool,
        flags: RenameFlags,
    ) -> Result<()> {
        let fs = &p1.mnt.fs;
        let g = cx.guard;
        let (d1m, d2m) = (Self::dir_of(p1)?, Self::dir_of(p2)?);
        let (i1, i2) = (
            p1.inode.as_deref().ok_or(Errno::ENOENT)?,
            p2.inode.as_deref().ok_or(Errno::ENOENT)?,
        );
        let cross = p1.d != p2.d;
        let exchange = flags.contains(RenameFlags::EXCHANGE);
        fs.ensure_loaded(p1.d, i1)?;
        fs.ensure_loaded(p2.d, i2)?;
        let mut rename_lock = None;
        loop {
            // Peek at both names under the parents' locks, to learn what else to lock.
            let peek = DirLocks::lock(&[d1m, d2m]);
            let od = fs.dcache.lookup_locked(&p1.d, c1, g);
            let nd = fs.dcache.lookup_locked(&p2.d, c2, g);
            let oi = od.and_then(|d| d.inode_arc(g));
            let ni = nd.and_then(|d| d.inode_arc(g));
            let old_dir = oi.as_ref().is_some_and(|i| i.is_dir());
            let new_dir = ni.as_ref().is_some_and(|i| i.is_dir());
            if cross && (old_dir || new_dir) && rename_lock.is_none() {
                // The rename lock comes before any directory's.
                drop(peek);
                rename_lock = Some(fs.rename_lock.lock());
                continue;
            }
            let victim_dir = if !exchange && new_dir {
                ni.as_ref().and_then(|i| i.dir())
            } else {
                None
            };
            let mut locks = match victim_dir {
                // Nothing more to lock: the peek's locks are the rename's, never let go, so
                // what it saw stands (a rename in one directory, W9's, looks each name up
                // once and locks once).
                None => peek,
                Some(vd) => {
                    drop(peek);
                    // A directory replaced must be empty, which is known only once it is
                    // loaded; no lock is held while it loads.
                    if let (Some(d), Some(i)) = (nd, ni.as_deref()) {
                        if fs.needs_load(i) {
                            rename_lock = None;
                            fs.ensure_loaded(d, i)?;
                            continue;
                        }
                    }
                    let locks = DirLocks::lock(&[d1m, d2m, vd]);
                    // Everything must be as peeked, or we start again.
                    let ptr_of = |i: &Option<InodeArc>| {
                        i.as_ref().map_or(std::ptr::null(), InodeArc::as_ptr)
                    };
                    if fs.dcache.lookup_locked(&p1.d, c1, g) != od
                        || fs.dcache.lookup_locked(&p2.d, c2, g) != nd
                        || od.is_some_and(|d| !std::ptr::eq(d.inode.load(Acquire), ptr_of(&oi)))
                        || nd.is_some_and(|d| !std::ptr::eq(d.inode.load(Acquire), ptr_of(&ni)))
                    {
                        continue;
                    }
                    locks
                }
            };
            // Load again, with no lock held, what a sweep unloaded or another caller is
            // loading (see `DirLocks::settled`).
            if !locks.settled() {
                drop(locks);
                rename_lock = None;
                fs.ensure_loaded(p1.d, i1)?;
                fs.ensure_loaded(p2.d, i2)?;
                continue;
            }
            // Linux's lookups, old name first: a removed parent is ENOENT before the name's
            // length is checked (ENAMETOOLONG), and both come before the new name's.
            if locks.get(d1m).dead {
                return Err(Errno::ENOENT);
            }
            check_len(c1)?;
            let (Some(od), Some(oi), false) = (od, oi, locks.get(d2m).dead) else {
                return Err(Errno::ENOENT);
            };
            // Linux looks the new name up (and checks its length) after the old one.
            check_len(c2)?;
            let nd_pos = nd.filter(|_| ni.is_some());
            if flags.contains(RenameFlags::NOREPLACE) && nd_pos.is_some() {
                return Err(Errno::EEXIST);
            }
            if exchange {
                let Some(ni) = &ni else {
                    return Err(Errno::ENOENT);
                };
                if !ni.is_dir() && t2 {
                    return Err(Errno::ENOTDIR);
                }
            }
            if !old_dir && (t1 || (!exchange && t2)) {
                return Err(Errno::ENOTDIR);
            }
            // Loop checks, with the ancestry stable under the rename lock.
            if cross && rename_lock.is_some() {
                if is_ancestor(od, p2.d, g) {
                    return Err(Errno::EINVAL);
                }
                if let Some(nd) = nd_pos {
                    if is_ancestor(nd, p1.d, g) {
                        return Err(if exchange {
                            Errno::EINVAL
                        } else {
                            Errno::ENOTEMPTY
                        });
                    }
                }
            }
            if let Some(ni) = &ni {
                if InodeArc::ptr_eq(&oi, ni) {
                    return Ok(());
                }
            }
            may_delete(i1, &od, &oi, old_dir, cx.creds)?;
            match (&ni, nd_pos) {
                (Some(ni), Some(nd)) => may_delete(
                    i2,
                    &nd,
                    ni,
                    if exchange { new_dir } else { old_dir },
                    cx.creds,
                )?,
                _ => i2.permission(cx.creds, Access::W_OK | Access::X_OK)?,
            }
            if cross {
                if old_dir {
                    oi.permission(cx.creds, Access::W_OK)?;
                }
                if exchange && new_dir {
                    if let Some(ni) = &ni {
                        ni.permission(cx.creds, Access::W_OK)?;
                    }
                }
            }
            if od.flags() & MOUNTED != 0 || nd_pos.is_some_and(|d| d.flags() & MOUNTED != 0) {
                return Err(Errno::EBUSY);
            }
            // Linux: the file system's `rename` finds a replaced directory not empty,
            // after the VFS's checks.
            if let (Some(vd), Some(_)) = (victim_dir, &ni) {
                if locks.get(vd).positive > 0 {
                    return Err(Errno::ENOTEMPTY);
                }
            }
            fs.store_rename((i1, c1.bytes), (i2, c2.bytes), &oi, ni.as_deref(), exchange)?;
            // Cached walks may pass through a directory or symlink that moves or goes.
            let walks_through = |i: &Inode| i.is_dir() || i.symlink_target().is_some();
            let _ns = (walks_through(&oi) || ni.as_deref().is_some_and(walks_through))
                .then(NsChange::begin);
            let t = now();
            if exchange {
                let nd = nd_pos.expect("exchange target checked above");
                let (s1, s2) = locks.get2(d1m, d2m);
                fs.dcache.d_exchange(od, nd, s1, s2, g);
                drop(locks);
                if cross && old_dir != new_dir {
                    let (from, to) = if old_dir { (i1, i2) } else { (i2, i1) };
                    from.add_links(-1, None);
                    to.add_links(1, None);
                }
                oi.touch(Times::change(t));
                if let Some(ni) = &ni {
                    ni.touch(Times::change(t));
                }
                i1.touch(Times::modify(t));
                if cross {
                    i2.touch(Times::modify(t));
                }
                return Ok(());
            }
            // Remove what the destination held.
            let mut replaced_dir = false;
            if let Some(nd) = nd {
                match &ni {
                    Some(ni) => {
                        if let Some(vd) = victim_dir {
                            let vst = locks.get(vd);
                            debug_assert_eq!(vst.positive, 0, "checked above");
                            Self::kill_dir(fs, vst);
                            replaced_dir = true;
                        }
                        fs.dcache.d_drop(nd, locks.get(d2m));
                        if replaced_dir {
                            ni.add_links(-2, Some(t));
                            fs.release(ni);
                        } else {
                            Self::drop_link(fs, ni, t);
                        }
                    }
                    None => {
                        fs.dcache.d_drop(nd, locks.get(d2m));
                        fs.negative_gone(1);
                    }
                }
            }
            let (s1, s2) = locks.get2(d1m, d2m);
            fs.dcache.d_move(od, p2.d, c2, s1, s2, g);
            drop(locks);
            if old_dir && cross {
                i1.add_links(-1, None);
                if !replaced_dir {
                    i2.add_links(1, None);
                }
            } else if replaced_dir {
                i2.add_links(-1, None);
            }
            oi.touch(Times::change(t));
            let replaced = ni.is_some();
            if cross {
                i1.dir_changed(-1, t);
                i2.dir_changed(if replaced { 0 } else { 1 }, t);
            } else {
                i1.dir_changed(if replaced { -1 } else { 0 }, t);
            }
            return Ok(());
        }
    }
}

/// Whether `a` is `b` or one of its ancestors. The caller holds the rename lock of their
/// file system, so directory parents do not change.
fn is_ancestor(a: DPtr<'_>, b: DPtr<'_>, g: &Guard) -> bool {
    let mut cur = Some(b);
    while let Some(c) = cur {
        if a == c {
            return true;
        }
        cur = c.get().parent(g);
    }
    false
}
