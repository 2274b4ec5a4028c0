//! Directory changes: creating (mkdir, mknod, symlink, and the shared `create_at`),
//! `getdents`, unlink, rmdir and link. Rename has its own module.

use super::*;

impl Process {
    /// `mkdir(2)`.
    pub fn mkdir(&self, path: impl AsRef<Path>, mode: u32) -> Result<()> {
        self.mkdirat(Fd::CWD, path, mode)
    }

    /// `mkdirat(2)`.
    pub fn mkdirat(&self, dirfd: impl Desc, path: impl AsRef<Path>, mode: u32) -> Result<()> {
        let m = S_IFDIR | (mode & 0o1777 & !self.umask.load(Relaxed));
        self.create_at(dirfd, path.as_ref(), NewKind::Dir, m)
    }

    /// `mknodat(2)`: regular files, FIFOs, sockets and (for root) device nodes.
    pub fn mknodat(
        &self,
        dirfd: impl Desc,
        path: impl AsRef<Path>,
        mode: u32,
        dev: u64,
    ) -> Result<()> {
        let ty = match mode & S_IFMT {
            0 => S_IFREG,
            t @ (S_IFREG | S_IFIFO | S_IFSOCK | S_IFCHR | S_IFBLK) => t,
            S_IFDIR => return Err(Errno::EPERM),
            _ => return Err(Errno::EINVAL),
        };
        let m = ty | (mode & 0o7777 & !self.umask.load(Relaxed));
        self.create_at(dirfd, path.as_ref(), NewKind::Node(m, dev), m)
    }

    /// `symlink(2)`.
    pub fn symlink(&self, target: impl AsRef<Path>, linkpath: impl AsRef<Path>) -> Result<()> {
        self.symlinkat(target, Fd::CWD, linkpath)
    }

    /// `symlinkat(2)`.
    pub fn symlinkat(
        &self,
        target: impl AsRef<Path>,
        dirfd: impl Desc,
        linkpath: impl AsRef<Path>,
    ) -> Result<()> {
        let t = cpath_named(target.as_ref())?;
        self.create_at(
            dirfd,
            linkpath.as_ref(),
            NewKind::Symlink(t),
            S_IFLNK | 0o777,
        )
    }

    pub(super) fn create_at(
        &self,
        dirfd: impl Desc,
        path: &Path,
        kind: NewKind<'_>,
        mode: u32,
    ) -> Result<()> {
        let path = cpath_named(path)?;
        self.at(dirfd, path, |cx, start| {
            let mut links = 0;
            let par = Self::parent_of(cx, start, path, &mut links)?;
            let (parent, trailing) = (par.pos, par.trailing);
            let Last::Normal(c) = par.last else {
                return Err(Errno::EEXIST);
            };
            let dirm = Self::dir_of(&parent)?;
            let dir_inode = parent.inode.as_deref().ok_or(Errno::ENOENT)?;
            let fs = &parent.mnt.fs;
            let mut st = fs.lock_dir(parent.d, dir_inode, dirm)?;
            if st.dead {
                return Err(Errno::ENOENT);
            }
            check_len(&c)?;
            let existing = fs.dcache.lookup_locked(&parent.d, &c, cx.guard);
            if existing.is_some_and(|d| d.get().inode(cx.guard).is_some()) {
                return Err(Errno::EEXIST);
            }
            if trailing && !matches!(kind, NewKind::Dir) {
                return Err(Errno::ENOENT);
            }
            // Linux `filename_create`, then `vfs_mknod`: EROFS, EACCES, then EPERM.
            fs.want_write()?;
            dir_inode.permission(cx.creds, Access::W_OK | Access::X_OK)?;
            if let NewKind::Node(m, _) = kind {
                if (m & S_IFMT == S_IFCHR || m & S_IFMT == S_IFBLK) && cx.creds.uid != 0 {
                    return Err(Errno::EPERM);
                }
            }
            let t = now();
            let (uid, gid, mode) = init_owner(dir_inode, cx.creds, mode);
            let (rdev, target) = match kind {
                // Linux's `do_mknodat` passes the device number on for device nodes
                // only: a FIFO, socket or regular file has `st_rdev` 0.
                NewKind::Node(m, dev) if matches!(m & S_IFMT, S_IFCHR | S_IFBLK) => (dev, None),
                NewKind::Node(..) => (0, None),
                NewKind::Symlink(t) => (0, Some(t)),
                NewKind::Dir => (0, None),
            };
            let inode = fs.create(dir_inode, c.bytes, mode, uid, gid, rdev, target, t)?;
            Self::instantiate(fs, parent.d, &c, existing, inode, &mut st, cx.guard);
            drop(st);
            if matches!(kind, NewKind::Dir) {
                dir_inode.add_links(1, None);
            }
            dir_inode.dir_changed(1, t);
            Ok(())
        })
    }

    /// Binds `c` in `parent` to `inode`: reuses a negative dentry or allocates one.
    pub(super) fn instantiate(
        fs: &SuperBlock,
        parent: DPtr<'_>,
        c: &Component<'_>,
        existing: Option<DPtr<'_>>,
        inode: InodeArc,
        st: &mut DirState,
        guard: &Guard,
    ) {
        match existing {
            Some(d) => {
                fs.dcache.d_instantiate(&d, inode, st, guard);
                fs.negative_gone(1);
            }
            None => {
                fs.dcache.d_alloc(parent, c, Some(inode), st);
            }
        }
    }

    /// Reads up to `max_entries` entries from a directory descriptor, starting at its
    /// position (a cookie). `.` and `..` come first. An empty result means the end. An
    /// entry that exists for the whole read is returned exactly once; entries created or
    /// renamed meanwhile may or may not appear.
    pub fn getdents(&self, fd: impl Desc, max_entries: usize) -> Result<Vec<DirEntry>> {
        let f = self.file(fd)?;
        if f.is_path() {
            return Err(Errno::EBADF);
        }
        let (Some(d), Some(dirm)) = (&f.dir, f.inode.dir()) else {
            return Err(Errno::ENOTDIR);
        };
        let mut pos = f.pos.lock();
        let g = crossbeam_epoch::pin();
        let mut out = Vec::new();
        let st = f.mnt.fs.lock_dir(d.ptr(), &f.inode, dirm)?;
        if st.dead {
            return Err(Errno::ENOENT);
        }
        if *pos == 0 && out.len() < max_entries {
            out.push(DirEntry {
                ino: f.inode.ino,
                file_type: FileType::Directory,
                name: b".".to_vec(),
                cookie: 1,
            });
            *pos = 1;
        }
        if *pos == 1 && out.len() < max_entries {
            let ino = d
                .parent(&g)
                .and_then(|p| p.get().inode(&g))
                .map_or(f.inode.ino, |i| i.ino);
            out.push(DirEntry {
                ino,
                file_type: FileType::Directory,
                name: b"..".to_vec(),
                cookie: 2,
            });
            *pos = 2;
        }
        if out.len() < max_entries {
            for (&cookie, child) in st.children.range_from((*pos).max(3)) {
                // SAFETY: children are hashed, and the hash's reference keeps them alive
                // while we hold the directory lock.
                let child = unsafe { child.as_ref() };
                let Some(ci) = child.inode(&g) else { continue };
                out.push(DirEntry {
                    ino: ci.ino,
                    file_type: ci.file_type(),
                    name: child.name_vec(&g),
                    cookie: cookie + 1,
                });
                *pos = cookie + 1;
                if out.len() >= max_entries {
                    break;
                }
            }
            if out.len() < max_entries {
                *pos = st.next_cookie.max(3);
            }
        }
        drop(st);
        if !f.flags.contains(OFlags::NOATIME) {
            f.inode.read_accessed(now());
        }
        Ok(out)
    }

    /// `rmdir(2)`.
    pub fn rmdir(&self, path: impl AsRef<Path>) -> Result<()> {
        self.unlinkat(Fd::CWD, path, AtFlags::REMOVEDIR)
    }

    /// `unlink(2)`.
    pub fn unlink(&self, path: impl AsRef<Path>) -> Result<()> {
        self.unlinkat(Fd::CWD, path, AtFlags::empty())
    }

    /// `unlinkat(2)`, with `AT_REMOVEDIR`.
    pub fn unlinkat(&self, dirfd: impl Desc, path: impl AsRef<Path>, flags: AtFlags) -> Result<()> {
        if flags.0 & !AtFlags::REMOVEDIR.0 != 0 {
            return Err(Errno::EINVAL);
        }
        let rmdir = flags.contains(AtFlags::REMOVEDIR);
        let path = cpath_named(path.as_ref())?;
        self.at(dirfd, path, |cx, start| {
            let mut links = 0;
            let par = Self::parent_of(cx, start, path, &mut links)?;
            let (parent, trailing) = (par.pos, par.trailing);
            let c = match (par.last, rmdir) {
                (Last::Normal(c), _) => c,
                (Last::Dot, true) => return Err(Errno::EINVAL),
                (Last::DotDot, true) => return Err(Errno::ENOTEMPTY),
                (_, true) => return Err(Errno::EBUSY),
                (_, false) => return Err(Errno::EISDIR),
            };
            let dirm = Self::dir_of(&parent)?;
            // Linux `do_rmdir`/`do_unlinkat`: EROFS before the name is looked up.
            parent.mnt.fs.want_write()?;
            if rmdir {
                self.do_rmdir(cx, &parent, dirm, &c)
            } else {
                self.do_unlink(cx, &parent, dirm, &c, trailing)
            }
        })
    }

    pub(super) fn do_unlink(
        &self,
        cx: &Ctx<'_>,
        parent: &Pos<'_>,
        dirm: &Mutex<DirState>,
        c: &Component<'_>,
        trailing: bool,
    ) -> Result<()> {
        let fs = &parent.mnt.fs;
        let dir_inode = parent.inode.as_deref().ok_or(Errno::ENOENT)?;
        let mut st = fs.lock_dir(parent.d, dir_inode, dirm)?;
        if st.dead {
            return Err(Errno::ENOENT);
        }
        check_len(c)?;
        let d = fs
            .dcache
            .lookup_locked(&parent.d, c, cx.guard)
            .ok_or(Errno::ENOENT)?;
        // Borrowed, not counted: the dentry's own count is given up only after a grace
        // period (`Dentry::set_inode`), and `cx.guard` is held until the call returns. (A
        // count taken and given back here cost two atomic read-modify-writes.)
        let victim = d.inode_ptr(cx.guard).ok_or(Errno::ENOENT)?.get();
        if trailing {
            return Err(if victim.is_dir() {
                Errno::EISDIR
            } else {
                Errno::ENOTDIR
            });
        }
        may_delete(dir_inode, &d, victim, false, cx.creds)?;
        if d.flags() & MOUNTED != 0 {
            return Err(Errno::EBUSY);
        }
        fs.store_remove(dir_inode, c.bytes, victim)?;
        // Cached walks may pass through a symlink.
        let _ns = victim.symlink_target().is_some().then(NsChange::begin);
        let gave_up = if fs.negative_admit() {
            fs.dcache.d_delete(&d, &mut st)
        } else {
            // Its count goes with the dentry, a grace period after its unhashing.
            fs.dcache.d_drop(d, &mut st);
            GaveUp::NONE
        };
        drop(_ns);
        drop(st);
        gave_up.retire(cx.guard);
        let t = now();
        Self::drop_link(fs, victim, t);
        dir_inode.dir_changed(-1, t);
        Ok(())
    }

    /// One link of `victim` went away; with the last, so does the link's hold (the inode
    /// is evicted unless open).
    pub(super) fn drop_link(fs: &SuperBlock, victim: &Inode, t: Timespec) {
        if victim.drop_link(t) {
            fs.release(victim);
        }
    }

    /// Empties a directory being removed: drops its negative children and marks it dead.
    /// The caller holds its lock and checked that it has no positive child.
    pub(super) fn kill_dir(fs: &SuperBlock, st: &mut DirState) {
        let n = fs
            .dcache
            .d_drop_negatives(st, &mut crate::dentry::DeadBatch::default());
        fs.negative_gone(n as i64);
        effect(|| st.dead = true);
    }

    pub(super) fn do_rmdir(
        &self,
        cx: &Ctx<'_>,
        parent: &Pos<'_>,
        dirm: &Mutex<DirState>,
        c: &Component<'_>,
    ) -> Result<()> {
        let fs = &parent.mnt.fs;
        let dir_inode = parent.inode.as_deref().ok_or(Errno::ENOENT)?;
        loop {
            // Find the victim under the parent lock, then lock both in address order.
            let (d, victim) = {
                let st = fs.lock_dir(parent.d, dir_inode, dirm)?;
                if st.dead {
                    return Err(Errno::ENOENT);
                }
                check_len(c)?;
                let d = fs
                    .dcache
                    .lookup_locked(&parent.d, c, cx.guard)
                    .ok_or(Errno::ENOENT)?;
                let victim = d.inode_arc(cx.guard).ok_or(Errno::ENOENT)?;
                may_delete(dir_inode, &d, &victim, true, cx.creds)?;
                (d, victim)
            };
            let vdir = victim.dir().ok_or(Errno::ENOTDIR)?;
            // Its emptiness is known only once it is loaded.
            fs.ensure_loaded(d, &victim)?;
            let mut locks = DirLocks::lock(&[dirm, vdir]);
            if locks.get(dirm).dead
                || !locks.settled()
                || fs.dcache.lookup_locked(&parent.d, c, cx.guard) != Some(d)
                || !std::ptr::eq(d.inode.load(Acquire), &*victim)
            {
                continue;
            }
            if d.flags() & MOUNTED != 0 {
                return Err(Errno::EBUSY);
            }
            if locks.get(vdir).positive > 0 {
                return Err(Errno::ENOTEMPTY);
            }
            fs.store_remove(dir_inode, c.bytes, &victim)?;
            // Cached walks may pass through the directory (or `..` from it).
            let ns = NsChange::begin();
            Self::kill_dir(fs, locks.get(vdir));
            fs.dcache.d_drop(d, locks.get(dirm));
            drop(ns);
            drop(locks);
            let t = now();
            victim.add_links(-2, Some(t));
            fs.release(&victim);
            dir_inode.add_links(-1, None);
            dir_inode.dir_changed(-1, t);
            return Ok(());
        }
    }

    /// `link(2)`.
    pub fn link(&self, old: impl AsRef<Path>, new: impl AsRef<Path>) -> Result<()> {
        self.linkat(Fd::CWD, old, Fd::CWD, new, AtFlags::empty())
    }

    /// `linkat(2)`, with `AT_SYMLINK_FOLLOW` and `AT_EMPTY_PATH`.
    pub fn linkat(
        &self,
        olddirfd: impl Desc,
        old: impl AsRef<Path>,
        newdirfd: impl Desc,
        new: impl AsRef<Path>,
        flags: AtFlags,
    ) -> Result<()> {
        if flags.0 & !(AtFlags::SYMLINK_FOLLOW.0 | AtFlags::EMPTY_PATH.0) != 0 {
            return Err(Errno::EINVAL);
        }
        let old = cpath(old.as_ref())?;
        // As in `renameat2`: the new name's faults are reported after the source resolved.
        let new = cpath_named(new.as_ref());
        // The source: an inode and its mount.
        let (src_mnt, src, linkable_tmp) = if old.is_empty() {
            let (m, i, tmp) = self.empty_path(olddirfd, flags, |f| {
                Ok((
                    f.mnt.clone(),
                    f.inode.clone(),
                    f.flags.contains(OFlags::TMPFILE) && !f.flags.contains(OFlags::EXCL),
                ))
            })?;
            (m, i, tmp)
        } else {
            self.at(olddirfd, old, |cx, start| {
                let (p, _hold) =
                    Self::resolve(cx, start, old, flags.contains(AtFlags::SYMLINK_FOLLOW))?;
                let i = p.inode.ok_or(Errno::ENOENT)?.arc();
                Ok((p.mnt.clone(), i, false))
            })?
        };
        let new = new?;
        self.at(newdirfd, new, |cx, start| {
            let mut links = 0;
            let par = Self::parent_of(cx, start, new, &mut links)?;
            let (parent, trailing) = (par.pos, par.trailing);
            let Last::Normal(c) = par.last else {
                return Err(Errno::EEXIST);
            };
            let dirm = Self::dir_of(&parent)?;
            let dir_inode = parent.inode.as_deref().ok_or(Errno::ENOENT)?;
            let fs = &parent.mnt.fs;
            let mut st = fs.lock_dir(parent.d, dir_inode, dirm)?;
            if st.dead {
                return Err(Errno::ENOENT);
            }
            check_len(&c)?;
            let existing = fs.dcache.lookup_locked(&parent.d, &c, cx.guard);
            if existing.is_some_and(|d| d.get().inode(cx.guard).is_some()) {
                return Err(Errno::EEXIST);
            }
            if trailing {
                return Err(Errno::ENOENT);
            }
            // Linux `filename_create`: EROFS once the new name is known to be free.
            fs.want_write()?;
            // Linux `do_linkat` order: EXDEV, protected hardlinks, then `vfs_link`.
            if !Arc::ptr_eq(parent.mnt, &src_mnt) {
                return Err(Errno::EXDEV);
            }
            Self::may_linkat(&src, cx.creds)?;
            dir_inode.permission(cx.creds, Access::W_OK | Access::X_OK)?;
            if src.is_dir() {
                return Err(Errno::EPERM);
            }
            let t = now();
            if !src.link_if_alive(linkable_tmp, t) {
                return Err(Errno::ENOENT);
            }
            if let Err(e) = fs.store_link(&src, dir_inode, c.bytes) {
                // Storage refused (EMLINK, ENOSPC, EIO): the link count goes back (with an
                // `O_TMPFILE` file's first link, the hold it took; its description still
                // holds it).
                Self::drop_link(fs, &src, t);
                return Err(e);
            }
            Self::instantiate(fs, parent.d, &c, existing, src.clone(), &mut st, cx.guard);
            drop(st);
            dir_inode.dir_changed(1, t);
            Ok(())
        })
    }

    /// Linux `may_linkat` with `fs.protected_hardlinks = 1`.
    pub(super) fn may_linkat(src: &Inode, creds: &Creds) -> Result<()> {
        if creds.uid == 0 || creds.uid == src.uid() {
            return Ok(());
        }
        let m = src.mode();
        let safe = m & S_IFMT == S_IFREG
            && m & S_ISUID == 0
            && m & (S_ISGID | 0o010) != (S_ISGID | 0o010)
            && src.permission(creds, Access::R_OK | Access::W_OK).is_ok();
        if safe {
            Ok(())
        } else {
            Err(Errno::EPERM)
        }
    }
}
