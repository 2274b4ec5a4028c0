//! Attributes: the stat family, `access`, `readlink`, chmod, chown, times, truncate,
//! `fallocate` and `statfs`.

use super::*;

impl Process {
    /// `stat(2)`.
    pub fn stat(&self, path: impl AsRef<Path>) -> Result<Stat> {
        self.fstatat(Fd::CWD, path, AtFlags::empty())
    }

    /// `lstat(2)`.
    pub fn lstat(&self, path: impl AsRef<Path>) -> Result<Stat> {
        self.fstatat(Fd::CWD, path, AtFlags::SYMLINK_NOFOLLOW)
    }

    /// `fstat(2)`.
    pub fn fstat(&self, fd: impl Desc) -> Result<Stat> {
        let f = self.file(fd)?;
        f.mnt.fs.revalidate_held(&f.inode, f.data_fd_if_open())?;
        Ok(f.inode.stat(f.mnt.dev()))
    }

    /// `fstatat(2)`: stat inside the lockless walk, with no reference taken.
    pub fn fstatat(
        &self,
        dirfd: impl Desc,
        path: impl AsRef<Path>,
        flags: AtFlags,
    ) -> Result<Stat> {
        // AT_NO_AUTOMOUNT (0x800) and the AT_STATX_SYNC_TYPE bits (0x6000) are accepted and
        // mean nothing here, as on Linux's tmpfs.
        if flags.0 & !(AtFlags::SYMLINK_NOFOLLOW.0 | AtFlags::EMPTY_PATH.0 | 0x800 | 0x6000) != 0 {
            return Err(Errno::EINVAL);
        }
        let (path, hash) = cpath_hashed(path.as_ref())?;
        if path.is_empty() {
            return self.empty_path(dirfd, flags, |f| {
                f.mnt.fs.revalidate_held(f.inode, f.data)?;
                Ok(f.inode.stat(f.mnt.dev()))
            });
        }
        let wf = Flags::object(!flags.contains(AtFlags::SYMLINK_NOFOLLOW));
        if !self.vfs.check_mode() {
            if let Some(st) = self.stat_cached_by(dirfd, path, hash, wf.follow) {
                return Ok(st);
            }
        } else if let Some(r) = self.stat_cached_checked(dirfd, path, hash, wf.follow) {
            return r;
        }
        // The path cache was probed above (outside check mode), and missed.
        self.at(dirfd, path, |cx, start| {
            Self::with_final(cx, start, path, hash, wf.follow, true, |i, fs| {
                Ok(StatOf(i.stat(fs.dev)))
            })
        })
        .map(|s| s.0)
    }

    /// `fstatat(dirfd, path)` answered by this thread's path cache with no epoch guard, or
    /// `None` (then the guarded path decides). The key comes from [`Process::cache_key`],
    /// the inode from the entry's own strong count ([`pathcache::read_hit`]); the answer
    /// stands if, after the inode was read, the final dentry's sequence count, the
    /// namespace generation and the mount sequence are still those the entry was made at,
    /// as for a guarded hit ([`Cached::still_valid`]). In check mode see
    /// [`Process::stat_cached_checked`].
    #[inline(always)]
    fn stat_cached_by(
        &self,
        dirfd: impl Desc,
        path: &[u8],
        hash: u64,
        follow: bool,
    ) -> Option<Stat> {
        let (key, unmoved) = self.cache_key(dirfd, path, follow)?;
        pathcache::read_hit(&key, path, hash, unmoved.gen, unmoved.ms, unmoved)
    }

    /// The path-cache key of a walk of `path` under `dirfd`, and the counters a hit is
    /// checked against, all read with no epoch guard; `None` if they cannot be now. An
    /// absolute or cwd-relative path takes the root or the working directory from
    /// [`KeyIds`]. Under a descriptor, the start is the one the guarded walk files its
    /// entry under (`WholePath::new`: the descriptor's dentry and mount), from the
    /// descriptor's directory key ([`Desc::dir_key`]), which takes no reference, and for
    /// the first descriptors and handles no guard either: it was the description's at a
    /// moment during the call, and an entry of this thread's path cache under that address
    /// holds that same directory (see `file::DirKeys`). Addresses in the key are only
    /// compared.
    #[inline(always)]
    pub(super) fn cache_key(
        &self,
        dirfd: impl Desc,
        path: &[u8],
        follow: bool,
    ) -> Option<(pathcache::Key, Unmoved<'_>)> {
        let (ids, start, start_mnt) = if dirfd.is_cwd() || path[0] == b'/' {
            let ids = self.ids.get()?;
            if path[0] == b'/' {
                (ids, ids.root, ids.root_mnt)
            } else {
                (ids, ids.cwd, ids.cwd_mnt)
            }
        } else {
            let (d, mnt) = dirfd.dir_key(&self.files)?;
            (self.ids.get()?, d as *const Dentry, mnt)
        };
        let vfs = &*self.vfs;
        let gen = ns_changes().snapshot()?;
        let ms = vfs.mount_seq().read_begin()?;
        let key = pathcache::Key {
            vfs: vfs.id,
            creds: ids.creds,
            root: ids.root,
            root_mnt: ids.root_mnt,
            start,
            start_mnt,
            follow,
        };
        Some((key, Unmoved { vfs, gen, ms }))
    }

    /// Check mode: if [`Process::stat_cached_by`] has an answer, it is compared with what
    /// the locked walk finds after it (the same object), unless the namespace changed
    /// meanwhile (`walk::compare`), and the call answers as the locked walk did, where it
    /// gave an answer: a disagreement that a change elsewhere excused is not the cached
    /// answer's to win.
    #[cold]
    fn stat_cached_checked(
        &self,
        dirfd: impl Desc,
        path: &[u8],
        hash: u64,
        follow: bool,
    ) -> Option<Result<Stat>> {
        let before = effects::reading();
        let st = self.stat_cached_by(dirfd, path, hash, follow)?;
        let locked = self
            .at(dirfd, path, |cx, start| {
                Ok((|| {
                    let w = start.walk(cx, path, Flags::object(follow), true)?;
                    let p = w.pos();
                    Ok(StatOf(p.inode()?.stat(p.mnt.dev())))
                })())
            })
            .unwrap_or_else(|e| Err(Fail::Err(e)));
        let answer = match &locked {
            Ok(s) => Ok(s.0),
            Err(Fail::Err(e)) if *e != Errno::RESTART => Err(*e),
            Err(_) => Ok(st),
        };
        walk::compare(&self.vfs, before, &Ok(StatOf(st)), locked);
        Some(answer)
    }

    /// Resolves `path` to the object it names and runs `f` on its inode and file system inside
    /// the epoch, taking no reference: from the path cache when it holds a still-valid
    /// walk, else by the lockless walk (whose validated result is cached), else by the
    /// locked walk. `probed`: the caller's own probe of the path cache for this walk just
    /// missed (`stat`'s, with no guard), so it is not probed again but in check mode.
    pub(super) fn with_final<T: PartialEq + std::fmt::Debug>(
        cx: &Ctx<'_>,
        start: Start<'_>,
        path: &[u8],
        hash: u64,
        follow: bool,
        probed: bool,
        f: impl Fn(&Inode, &SuperBlock) -> std::result::Result<T, Fail>,
    ) -> Result<T> {
        let vfs = cx.vfs;
        let whole = WholePath::new(cx, start, path, hash, follow);
        // One probe of the path cache; the answer holds if nothing it depends on moved.
        let probe = || {
            let answer = (|| {
                let h = whole.probe(cx, path)?;
                let r = f(h.pos.inode.as_deref()?, &h.pos.mnt.fs);
                h.still_valid(cx).then_some(r)
            })();
            pathcache::count(answer.is_some());
            answer
        };
        let check = vfs.check_mode();
        if whole.cacheable && !check && probed {
            pathcache::count(false);
        } else if whole.cacheable && !check {
            match probe() {
                Some(Ok(v)) => return Ok(v),
                Some(Err(Fail::Err(e))) => return Err(e),
                _ => {}
            }
        }
        with_walk(vfs, |locked| {
            // In check mode the cached answer is compared with the locked walk too.
            if !locked && whole.cacheable && check {
                if let Some(r) = probe() {
                    return r;
                }
            }
            let w = Self::walk_object(cx, start, path, follow, locked)?;
            let p = w.pos();
            let r = f(p.inode()?, &p.mnt.fs)?;
            w.validate(cx)?;
            if !locked && w.cacheable() {
                whole.record(cx, path, p, w.links);
            }
            Ok(r)
        })
    }

    /// `AT_EMPTY_PATH`: runs `f` on what `dirfd` refers to (the working directory for
    /// `Fd::CWD`, as an `O_PATH` description would).
    pub(super) fn empty_path<R>(
        &self,
        dirfd: impl Desc,
        flags: AtFlags,
        f: impl FnOnce(Target<'_>) -> Result<R>,
    ) -> Result<R> {
        if !flags.contains(AtFlags::EMPTY_PATH) {
            return Err(Errno::ENOENT);
        }
        if dirfd.is_cwd() {
            let g = crossbeam_epoch::pin();
            let (ctx, _cwd) = self.held_ctx(&g);
            let cwd = &ctx.cwd;
            let inode = cwd.d.inode_arc(&g).ok_or(Errno::ENOENT)?;
            return f(Target {
                mnt: &cwd.mnt,
                inode: &inode,
                flags: OFlags::PATH,
                data: None,
            });
        }
        let of = self.file(dirfd)?;
        f(Target {
            mnt: &of.mnt,
            inode: &of.inode,
            flags: of.flags,
            data: of.data_fd_if_open(),
        })
    }

    /// `access(2)`: checks with the real ids.
    pub fn access(&self, path: impl AsRef<Path>, mode: Access) -> Result<()> {
        self.faccessat(Fd::CWD, path, mode, AtFlags::empty())
    }

    /// `faccessat(2)`, with `AT_EACCESS` and `AT_SYMLINK_NOFOLLOW`. Finishes inside the
    /// lockless walk with no reference taken.
    pub fn faccessat(
        &self,
        dirfd: impl Desc,
        path: impl AsRef<Path>,
        mode: Access,
        flags: AtFlags,
    ) -> Result<()> {
        if mode.0 & !7 != 0
            || flags.0 & !(AtFlags::EACCESS.0 | AtFlags::SYMLINK_NOFOLLOW.0 | AtFlags::EMPTY_PATH.0)
                != 0
        {
            return Err(Errno::EINVAL);
        }
        let (path, hash) = cpath_hashed(path.as_ref())?;
        // Linux checks with the real ids unless AT_EACCESS asks for the effective ones.
        let checked = |creds: &Creds| {
            (!flags.contains(AtFlags::EACCESS)
                && (creds.ruid != creds.uid || creds.rgid != creds.gid))
                .then(|| Creds {
                    uid: creds.ruid,
                    gid: creds.rgid,
                    ..creds.clone()
                })
        };
        if path.is_empty() {
            let g = crossbeam_epoch::pin();
            let creds = self.creds_ref(&g);
            let real = checked(creds);
            let creds = real.as_ref().unwrap_or(creds);
            return self.empty_path(dirfd, flags, |f| {
                Self::may_access(f.inode, &f.mnt.fs, creds, mode)
            });
        }
        let wf = Flags::object(!flags.contains(AtFlags::SYMLINK_NOFOLLOW));
        // The credentials come from the operation's own guard (`at`), which it lets go
        // between attempts (see `unpin`).
        self.at(dirfd, path, |cx, start| {
            let real = checked(cx.creds);
            let (creds, cached_creds) = match &real {
                Some(r) => (r, None),
                None => (cx.creds, cx.cached_creds),
            };
            let cx = Ctx {
                creds,
                cached_creds,
                ..*cx
            };
            Self::with_final(&cx, start, path, hash, wf.follow, false, |i, fs| {
                Ok(Self::may_access(i, fs, creds, mode))
            })?
        })
    }

    /// `readlink(2)`.
    pub fn readlink(&self, path: impl AsRef<Path>) -> Result<Vec<u8>> {
        self.readlinkat(Fd::CWD, path)
    }

    /// `readlinkat(2)`. Finishes inside the lockless walk with no reference taken.
    pub fn readlinkat(&self, dirfd: impl Desc, path: impl AsRef<Path>) -> Result<Vec<u8>> {
        let (path, hash) = cpath_hashed(path.as_ref())?;
        if path.is_empty() {
            return self.empty_path(dirfd, AtFlags::EMPTY_PATH, |f| {
                f.inode
                    .symlink_target()
                    .map(|t| t.to_vec())
                    .ok_or(Errno::ENOENT)
            });
        }
        self.at(dirfd, path, |cx, start| {
            Self::with_final(cx, start, path, hash, false, false, |i, _| {
                let body = i.symlink_target().ok_or(Fail::Err(Errno::EINVAL))?;
                // Reading a link accesses it (relatime: at most once after each change).
                i.read_accessed(now());
                Ok(body.to_vec())
            })
        })
    }

    /// Linux `do_faccessat`: the mode is checked first; then `W_OK` on anything but a
    /// device, FIFO or socket of a read-only mount is `EROFS` ("SuS v2 requires we report
    /// a read only fs too").
    fn may_access(inode: &Inode, fs: &SuperBlock, creds: &Creds, mode: Access) -> Result<()> {
        inode.permission(creds, mode)?;
        if mode.0 & Access::W_OK.0 != 0
            && matches!(inode.mode() & S_IFMT, S_IFREG | S_IFDIR | S_IFLNK)
        {
            fs.want_write()?;
        }
        Ok(())
    }

    /// Resolves `path` (following the last symlink unless `nofollow`) and runs `f` on the
    /// inode and its file system.
    pub(super) fn with_inode<R>(
        &self,
        dirfd: impl Desc,
        path: &Path,
        flags: AtFlags,
        f: impl FnOnce(&InodeArc, &SuperBlock, &Creds, Option<BorrowedFd<'_>>) -> Result<R>,
    ) -> Result<R> {
        let path = cpath(path)?;
        if path.is_empty() {
            let g = crossbeam_epoch::pin();
            let creds = self.creds_ref(&g).clone();
            return self.empty_path(dirfd, flags, |of| f(of.inode, &of.mnt.fs, &creds, of.data));
        }
        let mut f = Some(f);
        self.at(dirfd, path, |cx, start| {
            let (p, _hold) =
                Self::resolve(cx, start, path, !flags.contains(AtFlags::SYMLINK_NOFOLLOW))?;
            let inode = p.inode.ok_or(Errno::ENOENT)?.arc();
            // Reached once: an attempt that gets here does not start again (what `f` asks
            // of the file system it asks in place).
            let f = f.take().expect("`at` runs an attempt after a complete one");
            crate::unpin::aside(|| f(&inode, &p.mnt.fs, cx.creds, None))
        })
    }

    pub(super) fn with_fd<R>(
        &self,
        fd: impl Desc,
        f: impl FnOnce(&InodeArc, &SuperBlock, &Creds, Option<BorrowedFd<'_>>) -> Result<R>,
    ) -> Result<R> {
        let of = self.file(fd)?;
        if of.is_path() {
            return Err(Errno::EBADF);
        }
        self.on_file(&of, f)
    }

    /// Runs `f` on the object of the description `of`, with the caller's credentials and
    /// the description's data descriptor.
    pub(super) fn on_file<R>(
        &self,
        of: &FileRef,
        f: impl FnOnce(&InodeArc, &SuperBlock, &Creds, Option<BorrowedFd<'_>>) -> Result<R>,
    ) -> Result<R> {
        let g = crossbeam_epoch::pin();
        f(
            &of.inode,
            &of.mnt.fs,
            self.creds_ref(&g),
            of.data_fd_if_open(),
        )
    }

    pub(super) fn do_chmod(
        inode: &Inode,
        fs: &SuperBlock,
        fd: Option<BorrowedFd<'_>>,
        mode: u32,
        creds: &Creds,
    ) -> Result<()> {
        if creds.uid != 0 && creds.uid != inode.uid() {
            return Err(Errno::EPERM);
        }
        let mut m = mode & 0o7777;
        if creds.uid != 0 && !creds.in_group(inode.gid()) {
            m &= !S_ISGID;
        }
        let u = AttrUpdate {
            perm: Some(m),
            times: Times::change(now()),
            ..Default::default()
        };
        Self::setattr(fs, inode, &u, fd)
    }

    /// `chmod(2)`.
    pub fn chmod(&self, path: impl AsRef<Path>, mode: u32) -> Result<()> {
        self.fchmodat(Fd::CWD, path, mode, AtFlags::empty())
    }

    /// `fchmod(2)`.
    pub fn fchmod(&self, fd: impl Desc, mode: u32) -> Result<()> {
        self.with_fd(fd, |i, fs, c, fd| {
            fs.want_write()?;
            Self::do_chmod(i, fs, fd, mode, c)
        })
    }

    /// `fchmodat(2)`; `AT_SYMLINK_NOFOLLOW` on a symlink is `EOPNOTSUPP`, as on Linux.
    pub fn fchmodat(
        &self,
        dirfd: impl Desc,
        path: impl AsRef<Path>,
        mode: u32,
        flags: AtFlags,
    ) -> Result<()> {
        if flags.0 & !(AtFlags::SYMLINK_NOFOLLOW.0 | AtFlags::EMPTY_PATH.0) != 0 {
            return Err(Errno::EINVAL);
        }
        self.with_inode(dirfd, path.as_ref(), flags, |i, fs, c, fd| {
            // Linux `chmod_common`: EROFS, then `notify_change`'s checks.
            fs.want_write()?;
            if i.mode() & S_IFMT == S_IFLNK {
                return Err(Errno::EOPNOTSUPP);
            }
            Self::do_chmod(i, fs, fd, mode, c)
        })
    }

    pub(super) fn do_chown(
        inode: &Inode,
        fs: &SuperBlock,
        fd: Option<BorrowedFd<'_>>,
        uid: Option<u32>,
        gid: Option<u32>,
        creds: &Creds,
    ) -> Result<()> {
        let owner = creds.uid == inode.uid();
        if creds.uid != 0 {
            if uid.is_some_and(|u| u != inode.uid()) {
                return Err(Errno::EPERM);
            }
            if let Some(g) = gid {
                if g != inode.gid() && !(owner && creds.in_group(g)) {
                    return Err(Errno::EPERM);
                }
                if !owner {
                    return Err(Errno::EPERM);
                }
            }
            if uid.is_some() && !owner {
                return Err(Errno::EPERM);
            }
        }
        let mode = inode.mode();
        let mut kill = 0;
        if mode & S_IFMT != S_IFDIR {
            kill |= mode & S_ISUID;
            if mode & (S_ISGID | 0o010) == (S_ISGID | 0o010) {
                kill |= S_ISGID;
            }
        }
        if kill != 0 && creds.uid != 0 && !owner {
            return Err(Errno::EPERM);
        }
        let u = AttrUpdate {
            uid,
            gid,
            perm: (kill != 0).then_some(mode & 0o7777 & !kill),
            times: Times::change(now()),
            ..Default::default()
        };
        Self::setattr(fs, inode, &u, fd)?;
        if let Some(uid) = uid {
            fs.transfer_owner(inode, uid);
        }
        if mode & S_IFMT != S_IFDIR {
            xattr::kill_priv(fs, inode);
        }
        Ok(())
    }

    /// Applies a mode or owner change, in storage first where the file system writes
    /// through; for a directory it changes who may search it, so cached walks through it
    /// are invalidated.
    pub(super) fn setattr(
        fs: &SuperBlock,
        inode: &Inode,
        u: &AttrUpdate,
        fd: Option<BorrowedFd<'_>>,
    ) -> Result<()> {
        let attr = StoreAttr {
            perm: u.perm,
            uid: u.uid,
            gid: u.gid,
            ..Default::default()
        };
        fs.store_attr(inode, &attr, fd)?;
        let _ns = inode.is_dir().then(NsChange::begin);
        inode.update(u);
        Ok(())
    }

    /// `chown(2)`; `None` leaves an id unchanged.
    pub fn chown(&self, path: impl AsRef<Path>, uid: Option<u32>, gid: Option<u32>) -> Result<()> {
        self.fchownat(Fd::CWD, path, uid, gid, AtFlags::empty())
    }

    /// `lchown(2)`.
    pub fn lchown(&self, path: impl AsRef<Path>, uid: Option<u32>, gid: Option<u32>) -> Result<()> {
        self.fchownat(Fd::CWD, path, uid, gid, AtFlags::SYMLINK_NOFOLLOW)
    }

    /// `fchown(2)`.
    pub fn fchown(&self, fd: impl Desc, uid: Option<u32>, gid: Option<u32>) -> Result<()> {
        self.with_fd(fd, |i, fs, c, fd| {
            fs.want_write()?;
            Self::do_chown(i, fs, fd, uid, gid, c)
        })
    }

    /// `fchownat(2)`.
    pub fn fchownat(
        &self,
        dirfd: impl Desc,
        path: impl AsRef<Path>,
        uid: Option<u32>,
        gid: Option<u32>,
        flags: AtFlags,
    ) -> Result<()> {
        if flags.0 & !(AtFlags::SYMLINK_NOFOLLOW.0 | AtFlags::EMPTY_PATH.0) != 0 {
            return Err(Errno::EINVAL);
        }
        self.with_inode(dirfd, path.as_ref(), flags, |i, fs, c, fd| {
            fs.want_write()?;
            Self::do_chown(i, fs, fd, uid, gid, c)
        })
    }

    pub(super) fn do_utimens(
        inode: &Inode,
        fs: &SuperBlock,
        fd: Option<BorrowedFd<'_>>,
        times: [SetTime; 2],
        creds: &Creds,
    ) -> Result<()> {
        if times == [SetTime::Omit, SetTime::Omit] {
            return Ok(());
        }
        let owner = creds.uid == 0 || creds.uid == inode.uid();
        let only_now = times.iter().all(|t| matches!(t, SetTime::Now));
        if !owner {
            if !only_now {
                return Err(Errno::EPERM);
            }
            inode.permission(creds, Access::W_OK)?;
        }
        // The stamp is chosen before storage is told (it stores what `UTIME_NOW` means).
        let t = inode.change_stamp(now());
        let pick = |s: SetTime| match s {
            SetTime::Now => Some(t),
            SetTime::Omit => None,
            SetTime::Set(v) => Some(v),
        };
        let (atime, mtime) = (pick(times[0]), pick(times[1]));
        let attr = StoreAttr {
            atime,
            mtime,
            ..Default::default()
        };
        fs.store_attr(inode, &attr, fd)?;
        inode.touch(Times {
            atime,
            mtime,
            ctime: Some(t),
        });
        Ok(())
    }

    /// `utimensat(2)`: `times` is `[atime, mtime]`.
    pub fn utimensat(
        &self,
        dirfd: impl Desc,
        path: impl AsRef<Path>,
        times: [SetTime; 2],
        flags: AtFlags,
    ) -> Result<()> {
        if times == [SetTime::Omit, SetTime::Omit] {
            // Linux's `utimensat` returns before looking at the flags or the path.
            return Ok(());
        }
        if flags.0 & !(AtFlags::SYMLINK_NOFOLLOW.0 | AtFlags::EMPTY_PATH.0) != 0 {
            return Err(Errno::EINVAL);
        }
        // The times are checked once the path resolved (Linux `vfs_utimes`).
        let valid = times
            .iter()
            .all(|t| !matches!(t, SetTime::Set(v) if v.nsec >= 1_000_000_000));
        self.with_inode(dirfd, path.as_ref(), flags, |i, fs, c, fd| {
            if !valid {
                return Err(Errno::EINVAL);
            }
            // Linux `vfs_utimes`: EROFS after the times are checked.
            fs.want_write()?;
            Self::do_utimens(i, fs, fd, times, c)
        })
    }

    /// `futimens(3)`.
    pub fn futimens(&self, fd: impl Desc, times: [SetTime; 2]) -> Result<()> {
        if times == [SetTime::Omit, SetTime::Omit] {
            return Ok(());
        }
        let valid = times
            .iter()
            .all(|t| !matches!(t, SetTime::Set(v) if v.nsec >= 1_000_000_000));
        self.with_fd(fd, |i, fs, c, fd| {
            if !valid {
                return Err(Errno::EINVAL);
            }
            fs.want_write()?;
            Self::do_utimens(i, fs, fd, times, c)
        })
    }

    pub(super) fn truncate_inode(
        &self,
        fs: &SuperBlock,
        inode: &Inode,
        len: u64,
        creds: &Creds,
        always_touch: bool,
        fd: Option<BorrowedFd<'_>>,
    ) -> Result<()> {
        let d = match &inode.contents {
            _ if len > MAX_FILE_SIZE && inode.mode() & S_IFMT == S_IFREG => {
                return Err(Errno::EFBIG)
            }
            crate::inode::Contents::File(d) => d,
            crate::inode::Contents::Stored(lock) => {
                let _w = lock.lock();
                let size = inode.size();
                let kill = write_kill_bits(inode, creds);
                let perm = (kill != 0).then(|| inode.mode() & 0o7777 & !kill);
                let attr = StoreAttr {
                    size: Some(len),
                    perm,
                    ..Default::default()
                };
                let blocks = fs.store_attr(inode, &attr, fd)?;
                let touch = always_touch || len != size;
                inode.update(&AttrUpdate {
                    size: Some(len),
                    blocks,
                    perm,
                    times: if touch {
                        Times::modify(now())
                    } else {
                        Times::default()
                    },
                    ..Default::default()
                });
                return Ok(());
            }
            _ if inode.is_dir() => return Err(Errno::EISDIR),
            _ => return Err(Errno::EINVAL),
        };
        let mut data = d.write();
        xattr::kill_priv(fs, inode);
        let size = inode.size();
        let freed = if len < size { data.truncate(len) } else { 0 };
        fs.uncharge_pages(freed);
        let t = now();
        let kill = write_kill_bits(inode, creds);
        let touch = always_touch || len != size;
        inode.update(&AttrUpdate {
            size: Some(len),
            pages_delta: -(freed as i64),
            perm: (kill != 0).then(|| inode.mode() & 0o7777 & !kill),
            times: if touch {
                Times::modify(t)
            } else {
                Times::default()
            },
            ..Default::default()
        });
        Ok(())
    }

    /// `fallocate(2)` as on tmpfs: allocation (`FallocFlags::empty()`, optionally
    /// `KEEP_SIZE`) reserves every page of the range up front, or fails with `ENOSPC`
    /// having reserved none, so that later writes there cannot fail for space; `PUNCH_HOLE |
    /// KEEP_SIZE` frees the pages wholly inside the range and zeroes the rest of it. Offsets
    /// and lengths are `loff_t`s: above `i64::MAX` they are negative. Errors in Linux's
    /// order (`vfs_fallocate`, then `shmem_fallocate`).
    pub fn fallocate(&self, fd: impl Desc, mode: FallocFlags, off: u64, len: u64) -> Result<()> {
        if off > i64::MAX as u64 || len == 0 || len > i64::MAX as u64 {
            return Err(Errno::EINVAL);
        }
        const MODE_MASK: u32 = 0x02 | 0x08 | 0x10 | 0x20 | 0x40 | 0x80;
        if mode.0 & !(MODE_MASK | FallocFlags::KEEP_SIZE.0) != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        let keep = mode.contains(FallocFlags::KEEP_SIZE);
        match mode.0 & MODE_MASK {
            0 | 0x10 | 0x40 => {}
            0x02 if keep => {}
            0x08 | 0x20 | 0x80 if !keep => {}
            _ => return Err(Errno::EOPNOTSUPP),
        }
        let f = self.file(fd)?;
        if f.is_path() || !f.flags.writable() {
            return Err(Errno::EBADF);
        }
        match f.inode.mode() & S_IFMT {
            S_IFIFO => return Err(Errno::ESPIPE),
            S_IFDIR => return Err(Errno::EISDIR),
            S_IFREG => {}
            _ => return Err(Errno::ENODEV),
        }
        let end = off + len;
        if end > MAX_FILE_SIZE {
            return Err(Errno::EFBIG);
        }
        let punch = mode.contains(FallocFlags::PUNCH_HOLE);
        if mode.0 & !(FallocFlags::KEEP_SIZE.0 | FallocFlags::PUNCH_HOLE.0) != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        let d = match &f.inode.contents {
            crate::inode::Contents::File(d) => d,
            crate::inode::Contents::Stored(lock) => {
                // Storage allocates (or punches) its own blocks, with its own errors.
                let fd = f.stored_fd()?;
                let _w = lock.lock();
                let g = crossbeam_epoch::pin();
                let perm = Self::kill_stored(&f, fd, self.creds_ref(&g))?;
                let m = rustix::fs::FallocateFlags::from_bits_retain(mode.0);
                rustix::fs::fallocate(fd, m, off, len).map_err(host)?;
                let st = rustix::fs::fstat(fd).map_err(host)?;
                f.inode.update(&AttrUpdate {
                    size: Some(st.st_size as u64),
                    blocks: Some(st.st_blocks as u64),
                    perm,
                    times: Times::modify(now()),
                    ..Default::default()
                });
                return Ok(());
            }
            _ => return Err(Errno::ENODEV),
        };
        let fs = &f.mnt.fs;
        let mut data = d.write();
        xattr::kill_priv(fs, &f.inode);
        let size = f.inode.size();
        let pages_delta = if punch {
            let freed = data.punch(off, end);
            fs.uncharge_pages(freed);
            -(freed as i64)
        } else {
            let need = data.missing_pages(off, end);
            // tmpfs reserves all of the range or none of it.
            if !fs.charge_pages(need) {
                return Err(Errno::ENOSPC);
            }
            let added = data.reserve(off, end);
            debug_assert_eq!(added, need);
            added as i64
        };
        let g = crossbeam_epoch::pin();
        let kill = write_kill_bits(&f.inode, self.creds_ref(&g));
        f.inode.update(&AttrUpdate {
            size: (!keep && end > size).then_some(end),
            pages_delta,
            perm: (kill != 0).then(|| f.inode.mode() & 0o7777 & !kill),
            times: Times::modify(now()),
            ..Default::default()
        });
        Ok(())
    }

    /// `truncate(2)`.
    pub fn truncate(&self, path: impl AsRef<Path>, len: u64) -> Result<()> {
        // A length past i64::MAX is a negative `off_t`: Linux refuses it before the path.
        if len > i64::MAX as u64 {
            return Err(Errno::EINVAL);
        }
        self.with_inode(Fd::CWD, path.as_ref(), AtFlags::empty(), |i, fs, c, fd| {
            // Linux `vfs_truncate`: EISDIR, EINVAL, EROFS, then the permission.
            if i.is_dir() {
                return Err(Errno::EISDIR);
            }
            if i.mode() & S_IFMT != S_IFREG {
                return Err(Errno::EINVAL);
            }
            fs.want_write()?;
            i.permission(c, Access::W_OK)?;
            self.truncate_inode(fs, i, len, c, true, fd)
        })
    }

    /// `ftruncate(2)`.
    pub fn ftruncate(&self, fd: impl Desc, len: u64) -> Result<()> {
        // As `truncate`: before the descriptor is looked at.
        if len > i64::MAX as u64 {
            return Err(Errno::EINVAL);
        }
        let of = self.file(fd)?;
        if of.is_path() {
            return Err(Errno::EBADF);
        }
        if !of.flags.writable() || of.inode.mode() & S_IFMT != S_IFREG {
            return Err(Errno::EINVAL);
        }
        let g = crossbeam_epoch::pin();
        let fd = of.data_fd_if_open();
        self.truncate_inode(&of.mnt.fs, &of.inode, len, self.creds_ref(&g), true, fd)
    }

    /// `statfs(2)`.
    pub fn statfs(&self, path: impl AsRef<Path>) -> Result<StatFs> {
        let path = cpath_named(path.as_ref())?;
        self.at(Fd::CWD, path, |cx, start| {
            Ok(Self::resolve_unheld(cx, start, path, true)?.mnt.fs.statfs())
        })
    }

    /// `fstatfs(2)`.
    pub fn fstatfs(&self, fd: impl Desc) -> Result<StatFs> {
        Ok(self.file(fd)?.mnt.fs.statfs())
    }
}

/// The counters a path-cache hit was checked at, to check it against again once what it
/// answers has been read ([`Unmoved::unmoved`]); as a [`pathcache::ReadHit`], the answer
/// for `stat` (see [`Process::stat_cached_by`]): the inode's attributes, if they have not
/// moved since.
pub(super) struct Unmoved<'a> {
    pub(super) vfs: &'a Vfs,
    /// The namespace generation and the mount sequence the hit was checked at.
    pub(super) gen: u64,
    pub(super) ms: u64,
}

impl Unmoved<'_> {
    /// Whether the hit `e` still stands, after what was read of it: its final dentry's
    /// count, the namespace generation and the mount sequence are those it was made at
    /// (as a guarded hit's `Cached::still_valid`).
    #[inline(always)]
    pub(super) fn unmoved(&self, e: pathcache::EntryView<'_>) -> bool {
        !e.d.seq.read_retry(e.seq)
            && ns_changes().snapshot() == Some(self.gen)
            && !self.vfs.mount_seq().read_retry(self.ms)
    }
}

impl pathcache::ReadHit for Unmoved<'_> {
    type Out = Stat;

    #[inline(always)]
    fn answer(&self, e: pathcache::EntryView<'_>) -> Option<Stat> {
        let st = e.inode.stat(e.dev);
        self.unmoved(e).then_some(st)
    }
}
