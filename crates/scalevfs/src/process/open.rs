//! Opening, and what is done with an open description: read, write, seek, sync, dup,
//! close.

use super::*;

/// What [`OpenIfUnmoved`] made of a hit.
enum Opened {
    /// The description, and the hit still stands.
    Ok(NewFile),
    /// `may_open`'s answer, and the hit still stands.
    Refused(Errno),
    /// A description made before the hit was found moved: to drop outside the probe.
    Stale(NewFile),
}

/// [`Process::open_cached_unpinned`]'s answer from a path-cache entry.
struct OpenIfUnmoved<'a> {
    unmoved: attr::Unmoved<'a>,
    flags: OFlags,
}

impl pathcache::ReadHit for OpenIfUnmoved<'_> {
    type Out = Opened;

    #[inline(always)]
    fn answer(&self, e: pathcache::EntryView<'_>) -> Option<Opened> {
        let creds = e.creds?;
        if e.mnt_idx != usize::MAX || e.inode.mode() & S_IFMT != S_IFREG {
            return None;
        }
        let mnt = self.unmoved.vfs.root_mount();
        if let Err(err) = Process::may_open(e.inode, &mnt.fs, self.flags, creds) {
            return self.unmoved.unmoved(e).then_some(Opened::Refused(err));
        }
        let of = NewFile::new(mnt, None, e.inode.clone(), self.flags)?;
        Some(if self.unmoved.unmoved(e) {
            Opened::Ok(of)
        } else {
            Opened::Stale(of)
        })
    }

    #[inline(always)]
    fn used(out: &Opened) -> bool {
        !matches!(out, Opened::Stale(_))
    }
}

/// How many times an open is tried again when its object was replaced behind the engine
/// (see `open_description`).
const STALE_RETRIES: u32 = 8;

impl Process {
    /// `open(2)`.
    pub fn open(&self, path: impl AsRef<Path>, flags: OFlags, mode: u32) -> Result<Fd> {
        self.openat(Fd::CWD, path, flags, mode)
    }

    /// `openat(2)`.
    pub fn openat(
        &self,
        dirfd: impl Desc,
        path: impl AsRef<Path>,
        flags: OFlags,
        mode: u32,
    ) -> Result<Fd> {
        let of = self.open_description(dirfd, path.as_ref(), flags, mode)?;
        self.files.insert_new(of)
    }

    /// `openat(2)`, returning the description as a [`Handle`] instead of installing it
    /// in the descriptor table: the same checks and effects (creation, truncation), but
    /// no descriptor number is taken, so `EMFILE` cannot happen. Dropping the handle
    /// closes it.
    pub fn openat_handle(
        &self,
        dirfd: impl Desc,
        path: impl AsRef<Path>,
        flags: OFlags,
        mode: u32,
    ) -> Result<Handle> {
        let of = self.open_description(dirfd, path.as_ref(), flags, mode)?;
        Ok(Handle::new_open(of))
    }

    /// The open description `openat` installs.
    pub(super) fn open_description(
        &self,
        dirfd: impl Desc,
        path: &Path,
        flags: OFlags,
        mode: u32,
    ) -> Result<NewFile> {
        let path = cpath_named(path)?;
        let mut flags = flags;
        if flags.contains(OFlags::CREAT) && flags.contains(OFlags::DIRECTORY) {
            // Linux `build_open_flags`: O_CREAT with O_DIRECTORY or O_TMPFILE is EINVAL.
            return Err(Errno::EINVAL);
        }
        if flags.contains(OFlags::PATH) {
            flags = flags & (OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC);
        }
        // An open of an existing object hashes the path once, for the path cache (here
        // with no guard, and in `open_existing`); a create's walk hashes what it needs.
        // (`contains`, not `intersects`: `O_TMPFILE` includes `O_DIRECTORY`'s bit.)
        let existing = !flags.contains(OFlags::CREAT) && !flags.contains(OFlags::TMPFILE);
        let hash = if existing {
            crate::name::path_hash(path)
        } else {
            0
        };
        if existing && !flags.contains(OFlags::TRUNC) && !self.vfs.check_mode() {
            if let Some(r) = self.open_cached_unpinned(dirfd, path, hash, flags) {
                let of = r?;
                match Self::open_stored_data(&of) {
                    Ok(()) => return Ok(of),
                    // Replaced behind the engine: the walks below ask again (see below).
                    Err(Errno::ESTALE) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        let mut tries = 0;
        loop {
            let r = self.at(dirfd, path, |cx, start| {
                if flags.contains(OFlags::TMPFILE) {
                    self.open_tmpfile(cx, start, path, flags, mode)
                } else if flags.contains(OFlags::CREAT) {
                    self.open_creat(cx, start, path, flags, mode)
                } else {
                    self.open_existing(cx, start, path, hash, flags)
                }
            });
            // A file system that revalidates (hostfs, shared policy) found the name naming
            // another object when it opened the data: the name was replaced behind the
            // engine after the walk checked it. `finish_open` expired what the engine knew
            // of it, so the next walk asks again, as Linux retries an NFS lookup on
            // `ESTALE` (`retry_estale`); a create is not tried again.
            match r {
                Err(Errno::ESTALE) if !flags.contains(OFlags::CREAT) && tries < STALE_RETRIES => {
                    tries += 1
                }
                r => return r,
            }
        }
    }

    /// Opens an existing object: the fast walk, then references, then validation.
    pub(super) fn open_existing(
        &self,
        cx: &Ctx<'_>,
        start: Start<'_>,
        path: &[u8],
        hash: u64,
        flags: OFlags,
    ) -> Result<NewFile> {
        let wf = Flags::object(!flags.contains(OFlags::NOFOLLOW));
        if cx.vfs.check_mode() {
            // Check mode covers open's walk: `with_walk` compares fast and locked.
            let _ = with_walk(cx.vfs, |locked| {
                let w = Self::walk_object(cx, start, path, wf.follow, locked)?;
                let p = w.pos();
                w.validate(cx)?;
                Ok((Arc::as_ptr(p.mnt) as usize, p.d.as_ptr() as usize))
            });
        }
        // The path cache first (check mode compares walks above, and leaves it alone).
        let whole = WholePath::new(cx, start, path, hash, wf.follow);
        if whole.cacheable && !cx.vfs.check_mode() {
            let answer = Self::open_cached(cx, &whole, path, flags);
            pathcache::count(answer.is_some());
            if let Some(r) = answer {
                let of = r?;
                self.finish_open(&of, cx.creds)?;
                return Ok(of);
            }
        }
        let of = retry(cx.vfs, |locked| {
            let w = Self::walk_object(cx, start, path, wf.follow, locked)?;
            let p = w.pos();
            let inode = p.inode()?;
            Self::may_open(inode, &p.mnt.fs, flags, cx.creds)?;
            let of = Self::open_pos(p, flags)?;
            // The open file counts as a user of its mount: confirm against umount.
            w.confirm(cx)?;
            if !locked && w.cacheable() {
                whole.record(cx, path, p, w.links);
            }
            Ok(of)
        })?;
        self.finish_open(&of, cx.creds)?;
        Ok(of)
    }

    /// `open_existing` from the path cache: the description (or the error) for a cached
    /// walk of `path` that is still valid once the description holds what it found, as
    /// the walk's own checks would be; `None`: not cached, or no longer valid.
    fn open_cached(
        cx: &Ctx<'_>,
        whole: &WholePath<'_>,
        path: &[u8],
        flags: OFlags,
    ) -> Option<Result<NewFile>> {
        let h = whole.probe(cx, path)?;
        let inode = h.pos.inode?;
        if let Err(e) = Self::may_open(&inode, &h.pos.mnt.fs, flags, cx.creds) {
            return h.still_valid(cx).then_some(Err(e));
        }
        let of = Self::open_pos(h.pos, flags).ok()?;
        // As `Walked::confirm`: the description counts as a user of its mount, so confirm
        // against umount (with the mount sequence the entry was checked at), then validate.
        let confirmed = h.pos.mnt.confirm(&cx.vfs.mount_sync, h.ms, false) && h.still_valid(cx);
        confirmed.then_some(Ok(of))
    }

    /// Takes the references an open file holds on what a walk found: the inode the walk
    /// saw (which a dentry cannot have released while the guard is held), and, for a
    /// directory, its dentry, unless it died meanwhile (`Retry`: walk again).
    pub(super) fn open_pos(p: Pos<'_>, flags: OFlags) -> std::result::Result<NewFile, Fail> {
        let inode = p.inode_arc()?;
        let dir = if inode.is_dir() {
            Some(DRef::try_get(p.d).ok_or(Fail::Retry)?)
        } else {
            None
        };
        // Evicted since the walk found it (unlinked and closed): walk again. Under a TTL the
        // name may still be cached (see `SuperBlock::release`): the next walk asks storage.
        // (The inode is read through the walk's pointer, which the guard keeps valid, so
        // the description takes the only new count.)
        NewFile::new(p.mnt, dir, inode, flags).ok_or_else(|| {
            if let Some(i) = p.inode.filter(|_| p.mnt.fs.revalidates()) {
                i.get().set_valid_until(0);
            }
            Fail::Retry
        })
    }

    /// Linux `may_open` for an existing object.
    pub(super) fn may_open(
        inode: &Inode,
        fs: &SuperBlock,
        flags: OFlags,
        creds: &Creds,
    ) -> Result<()> {
        let ty = inode.mode() & S_IFMT;
        if flags.contains(OFlags::DIRECTORY) && ty != S_IFDIR {
            return Err(Errno::ENOTDIR);
        }
        if ty == S_IFLNK {
            if flags.contains(OFlags::PATH) && flags.contains(OFlags::NOFOLLOW) {
                return Ok(());
            }
            return Err(Errno::ELOOP);
        }
        if flags.contains(OFlags::PATH) {
            return Ok(());
        }
        let (read, write) = acc_mode(flags);
        let write = write || flags.contains(OFlags::TRUNC);
        if ty == S_IFDIR && (write || flags.contains(OFlags::CREAT)) {
            return Err(Errno::EISDIR);
        }
        let mut mask = Access::F_OK;
        if read {
            mask |= Access::R_OK;
        }
        if write {
            mask |= Access::W_OK;
        }
        // A read-only mount (Linux `do_open`): `O_TRUNC` of a file is EROFS before the
        // permission check; opening one for writing, after it (`do_dentry_open`).
        if ty == S_IFREG && flags.contains(OFlags::TRUNC) {
            fs.want_write()?;
        }
        inode.permission(creds, mask)?;
        if ty == S_IFREG && write {
            fs.want_write()?;
        }
        // Only the owner (or root, as CAP_FOWNER) may keep reads from touching atime.
        if flags.contains(OFlags::NOATIME) && creds.uid != 0 && creds.uid != inode.uid() {
            return Err(Errno::EPERM);
        }
        match ty {
            S_IFCHR | S_IFBLK => Err(Errno::ENXIO),
            S_IFIFO if flags.writable() && flags.contains(OFlags::NONBLOCK) => Err(Errno::ENXIO),
            S_IFSOCK => Err(Errno::ENXIO),
            _ => Ok(()),
        }
    }

    /// Linux `may_create_in_sticky` with `fs.protected_regular = 0` and
    /// `fs.protected_fifos = 0` (Debian's defaults): an `O_CREAT` open that finds another
    /// user's non-regular object in a world-writable sticky directory is refused.
    pub(super) fn may_create_in_sticky(dir: &Inode, inode: &Inode, creds: &Creds) -> Result<()> {
        let dm = dir.mode();
        let ty = inode.mode() & S_IFMT;
        if dm & S_ISVTX == 0 || ty == S_IFREG || ty == S_IFIFO {
            return Ok(());
        }
        if inode.uid() == dir.uid() || inode.uid() == creds.uid {
            return Ok(());
        }
        if dm & 0o002 != 0 {
            return Err(Errno::EACCES);
        }
        Ok(())
    }

    /// What follows a successful open of an existing regular file: a stored file's data
    /// is opened (so it stays reachable if its names go), then `O_TRUNC`.
    pub(super) fn finish_open(&self, of: &OpenFile, creds: &Creds) -> Result<()> {
        // (`O_PATH` leaves nothing to do: it opens no data, and `O_TRUNC` was masked off.)
        Self::open_stored_data(of)?;
        if of.flags.contains(OFlags::TRUNC) && of.inode.mode() & S_IFMT == S_IFREG {
            // `O_RDONLY | O_TRUNC` truncates too, but not through a read-only descriptor.
            let fd = of.data_fd_if_open().filter(|_| of.flags.writable());
            self.truncate_inode(&of.mnt.fs, &of.inode, 0, creds, true, fd)?;
        }
        Ok(())
    }

    /// [`Process::finish_open`]'s first step, all of it for an open without `O_TRUNC`: a
    /// stored file's data is opened with the description (not for `O_PATH`).
    fn open_stored_data(of: &OpenFile) -> Result<()> {
        if of.is_path() || !matches!(of.inode.contents, crate::inode::Contents::Stored(_)) {
            return Ok(());
        }
        of.stored_fd().map(drop).inspect_err(|&e| {
            if e == Errno::ESTALE && of.mnt.fs.revalidates() {
                of.inode.set_valid_until(0);
            }
        })
    }

    /// `open` of an existing regular file answered by this thread's path cache with no
    /// epoch guard, as a cached `stat` is ([`Process::stat_cached_by`]): `None` when the cache
    /// has no valid entry for it, or the entry is not a regular file in the namespace's
    /// root mount (then the guarded path decides). Everything used is kept by the entry:
    /// the inode by its strong count, the credentials by theirs (those of the key, which
    /// is made of the process's current ones, see `pathcache::EntryView::creds`), and the
    /// mount is the namespace's, which the process keeps and which is never unmounted. The
    /// description is made, holding the inode, before the entry's counters are checked
    /// again, as `open_cached` does under a guard; a description made from a hit that no
    /// longer stands is handed out of the probe and dropped there.
    fn open_cached_unpinned(
        &self,
        dirfd: impl Desc,
        path: &[u8],
        hash: u64,
        flags: OFlags,
    ) -> Option<Result<NewFile>> {
        let follow = !flags.contains(OFlags::NOFOLLOW);
        let (key, unmoved) = self.cache_key(dirfd, path, follow)?;
        let (gen, ms) = (unmoved.gen, unmoved.ms);
        match pathcache::read_hit(&key, path, hash, gen, ms, OpenIfUnmoved { unmoved, flags })? {
            Opened::Ok(of) => Some(Ok(of)),
            Opened::Refused(e) => Some(Err(e)),
            Opened::Stale(of) => {
                drop(of);
                None
            }
        }
    }

    pub(super) fn open_creat(
        &self,
        cx: &Ctx<'_>,
        start: Start<'_>,
        path: &[u8],
        flags: OFlags,
        mode: u32,
    ) -> Result<NewFile> {
        let mut links = 0;
        let mut stale = 0;
        let mut start = start;
        let mut path: &[u8] = path;
        // Restarted with a symlink body when the last component is a symlink to follow, or
        // after a stale name.
        loop {
            let par = Self::parent_of(cx, start, path, &mut links)?;
            let (parent, trailing) = (par.pos, par.trailing);
            let c = match par.last {
                Last::Normal(c) => c,
                // Linux `do_open`: the name exists (it is a directory).
                _ if flags.contains(OFlags::EXCL) => return Err(Errno::EEXIST),
                _ => return Err(Errno::EISDIR),
            };
            if trailing {
                return Err(Errno::EISDIR);
            }
            let dirm = Self::dir_of(&parent)?;
            let dir_inode = parent.inode.as_deref().ok_or(Errno::ENOENT)?;
            let fs = &parent.mnt.fs;
            let mut st = fs.lock_dir(parent.d, dir_inode, dirm)?;
            let existing = if st.dead {
                None
            } else {
                fs.dcache.lookup_locked(&parent.d, &c, cx.guard)
            };
            if let Some(d) = existing {
                if let Some(ip) = d.get().inode_ptr(cx.guard) {
                    let inode = ip.get();
                    // Held under the directory lock, where the name still links it: a racing
                    // unlink cannot evict it any more. (With O_CREAT a directory is EISDIR
                    // below, so no dentry is needed.)
                    let Some(held) = NewFile::new(parent.mnt, None, ip.arc(), flags) else {
                        // Unless the link count was storage's and a writer behind the engine
                        // removed names it still caches (see `Inode::drop_link`): the name
                        // links an object the engine let go. Only a file system that
                        // revalidates gets here; the directory is listed again.
                        drop(st);
                        debug_assert!(fs.revalidates(), "a linked inode was evicted");
                        fs.mark_stale(dir_inode);
                        stale += 1;
                        if stale > STALE_RETRIES || !fs.revalidates() {
                            return Err(Errno::ESTALE);
                        }
                        continue;
                    };
                    drop(st);
                    if flags.contains(OFlags::EXCL) {
                        return Err(Errno::EEXIST);
                    }
                    if let Some(body) = inode.symlink_target() {
                        if flags.contains(OFlags::NOFOLLOW) {
                            Self::may_create_in_sticky(dir_inode, inode, cx.creds)?;
                            return Err(Errno::ELOOP);
                        }
                        links += 1;
                        if links > limits::MAXSYMLINKS {
                            return Err(Errno::ELOOP);
                        }
                        start = Start {
                            mnt: parent.mnt,
                            d: parent.d,
                        };
                        path = body;
                        continue;
                    }
                    if d.flags() & MOUNTED != 0 {
                        // A mount point: open what is mounted there.
                        let rest: &[u8] = c.bytes;
                        return self.open_existing(
                            cx,
                            Start {
                                mnt: parent.mnt,
                                d: parent.d,
                            },
                            rest,
                            crate::name::path_hash(rest),
                            flags,
                        );
                    }
                    Self::may_open(inode, fs, flags, cx.creds)?;
                    self.finish_open(&held, cx.creds)?;
                    return Ok(held);
                }
            }
            if st.dead {
                return Err(Errno::ENOENT);
            }
            check_len(&c)?;
            // Linux `lookup_open`: a create on a read-only mount is EROFS (its
            // `create_error`) once the name is known to be missing.
            fs.want_write()?;
            dir_inode.permission(cx.creds, Access::W_OK | Access::X_OK)?;
            let t = now();
            let m = S_IFREG | (mode & 0o7777 & !self.umask.load(Relaxed));
            let (uid, gid, m) = init_owner(dir_inode, cx.creds, m);
            let inode = fs.create(dir_inode, c.bytes, m, uid, gid, 0, None, t)?;
            Self::instantiate(fs, parent.d, &c, existing, inode.clone(), &mut st, cx.guard);
            // Held before the lock goes: the file is ours even if it is unlinked at once.
            let of = NewFile::new(parent.mnt, None, inode, flags).expect("a linked inode");
            drop(st);
            dir_inode.dir_changed(1, t);
            if matches!(of.inode.contents, crate::inode::Contents::Stored(_)) {
                of.stored_fd()?;
            }
            return Ok(of);
        }
    }

    pub(super) fn open_tmpfile(
        &self,
        cx: &Ctx<'_>,
        start: Start<'_>,
        path: &[u8],
        flags: OFlags,
        mode: u32,
    ) -> Result<NewFile> {
        if !acc_mode(flags).1 {
            return Err(Errno::EINVAL);
        }
        let (p, _hold) = Self::resolve(cx, start, path, true)?;
        let dir = p.inode.as_deref().ok_or(Errno::ENOENT)?;
        if !dir.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        p.mnt.fs.want_write()?;
        dir.permission(cx.creds, Access::W_OK | Access::X_OK)?;
        let m = S_IFREG | (mode & 0o7777 & !self.umask.load(Relaxed));
        let (uid, gid, m) = init_owner(dir, cx.creds, m);
        let inode = p.mnt.fs.tmpfile(dir, m, uid, gid, now())?;
        // No link: the creator's hold is the description's.
        inode.add_links(-1, None);
        let of = NewFile::with_hold(p.mnt, None, inode, flags);
        if matches!(of.inode.contents, crate::inode::Contents::Stored(_)) {
            if let Err(e) = of.stored_fd() {
                if e == Errno::ESTALE && of.mnt.fs.revalidates() {
                    of.inode.set_valid_until(0);
                }
                return Err(e);
            }
        }
        Ok(of)
    }

    /// Opens the object `fd` refers to again, with new `flags` (what Linux does through
    /// `/proc/self/fd/N`): an `O_PATH` descriptor becomes a readable or writable one after
    /// the usual permission checks, including for an unlinked file. Creation flags are
    /// ignored; `O_TRUNC` truncates. For frontends (FUSE) that name files by handle.
    pub fn reopen(&self, fd: impl Desc, flags: OFlags) -> Result<Fd> {
        let of = self.reopen_description(fd, flags)?;
        self.files.insert_new(of)
    }

    /// [`reopen`](Self::reopen), returning the new description as a [`Handle`] (see
    /// [`openat_handle`](Self::openat_handle)).
    pub fn reopen_handle(&self, fd: impl Desc, flags: OFlags) -> Result<Handle> {
        let of = self.reopen_description(fd, flags)?;
        Ok(Handle::new_open(of))
    }

    pub(super) fn reopen_description(&self, fd: impl Desc, flags: OFlags) -> Result<NewFile> {
        let old = self.file(fd)?;
        // Drop the creation bits (O_TMPFILE without its O_DIRECTORY part).
        let mut flags = OFlags(flags.0 & !(OFlags::CREAT.0 | OFlags::EXCL.0 | 0o20000000));
        if flags.contains(OFlags::PATH) {
            flags = flags & (OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC);
        }
        let g = crossbeam_epoch::pin();
        let creds = self.creds_ref(&g);
        let ty = old.inode.mode() & S_IFMT;
        if ty == S_IFLNK && !flags.contains(OFlags::PATH) {
            return Err(Errno::ELOOP);
        }
        Self::may_open(&old.inode, &old.mnt.fs, flags | OFlags::NOFOLLOW, creds)?;
        let of = NewFile::new(&old.mnt, old.dir.clone(), old.inode.clone(), flags)
            .expect("held by the old description");
        self.finish_open(&of, creds)?;
        Ok(of)
    }

    /// `close(2)`.
    pub fn close(&self, fd: Fd) -> Result<()> {
        self.files.remove(fd)
    }

    /// The description behind `fd` for I/O of `len` bytes at `pos` (the file position when
    /// `None`), checked in Linux's order: the access mode (`EBADF`), the range
    /// (`rw_verify_area`: `EINVAL` if it passes `i64::MAX`), then the kind (`EISDIR`).
    pub(super) fn io_file(
        &self,
        fd: impl Desc,
        write: bool,
        pos: Option<u64>,
        len: usize,
    ) -> Result<FileRef> {
        let f = self.file(fd)?;
        Self::io_mode(&f, write)?;
        Self::io_range(pos.unwrap_or_else(|| *f.pos.lock()), len)?;
        if f.inode.is_dir() {
            return Err(Errno::EISDIR);
        }
        Ok(f)
    }

    /// `EBADF` unless `f` was opened for the access (`write` or read), and not `O_PATH`.
    #[inline]
    fn io_mode(f: &OpenFile, write: bool) -> Result<()> {
        let allowed = if write {
            f.flags.writable()
        } else {
            f.flags.readable()
        };
        if f.is_path() || !allowed {
            return Err(Errno::EBADF);
        }
        Ok(())
    }

    /// `EINVAL` for I/O of `len` bytes at `pos` that would pass `i64::MAX`
    /// (`rw_verify_area`).
    #[inline]
    fn io_range(pos: u64, len: usize) -> Result<()> {
        if pos > i64::MAX as u64 || (pos as i64).checked_add(len as i64).is_none() {
            return Err(Errno::EINVAL);
        }
        Ok(())
    }

    pub(super) fn read_inode(f: &OpenFile, buf: &mut [u8], off: u64) -> Result<usize> {
        match &f.inode.contents {
            crate::inode::Contents::File(d) => {
                let n = {
                    let data = d.read();
                    data.read(buf, off, f.inode.size())
                };
                Self::read_accessed(f);
                Ok(n)
            }
            crate::inode::Contents::Stored(_) => {
                let fd = f.stored_fd()?;
                let n = loop {
                    match rustix::io::pread(fd, &mut *buf, off) {
                        Ok(n) => break n,
                        Err(rustix::io::Errno::INTR) => continue,
                        Err(e) => return Err(host(e)),
                    }
                };
                // The engine's times are the ones callers see (see `write_stored`).
                Self::read_accessed(f);
                Ok(n)
            }
            _ => Err(Errno::EINVAL),
        }
    }

    /// atime after a read of `f`, as `relatime` has it, stamped with the coarse clock as
    /// Linux stamps it (see `now`): a read reads no time-stamp counter.
    #[inline]
    fn read_accessed(f: &OpenFile) {
        if f.flags.contains(OFlags::NOATIME) {
            return;
        }
        let t = now();
        if f.inode.atime_due(t) {
            f.inode.read_accessed(t);
        }
    }

    pub(super) fn write_inode(
        &self,
        f: &OpenFile,
        buf: &[u8],
        off: Option<u64>,
    ) -> Result<(usize, u64)> {
        let g = crossbeam_epoch::pin();
        let creds = self.creds_ref(&g);
        let d = match &f.inode.contents {
            crate::inode::Contents::File(d) => d,
            crate::inode::Contents::Stored(lock) => {
                return Self::write_stored(f, lock, buf, off, creds);
            }
            _ => return Err(Errno::EINVAL),
        };
        let mut data = d.write();
        let size = f.inode.size();
        let (off, mut n) = Self::write_span(f, size, off, buf.len())?;
        if n == 0 {
            return Ok((0, off));
        }
        xattr::kill_priv(&f.mnt.fs, &f.inode);
        // The pages the write adds are charged before any byte changes. With too few left,
        // the write is cut short where the pages it could charge end (as tmpfs does, page
        // by page), or fails with ENOSPC if not one byte fits: never a change then an error,
        // and never a page kept without its charge.
        let need = data.missing_pages(off, off + n);
        let got = f.mnt.fs.charge_pages_up_to(need);
        if got < need {
            let limit = data.prefix_adding(off, off + n, got);
            if limit == off {
                f.mnt.fs.uncharge_pages(got);
                return Err(Errno::ENOSPC);
            }
            n = limit - off;
        }
        let end = off + n;
        let added = data.write(&buf[..n as usize], off);
        debug_assert_eq!(added, got, "pages added and charged differ");
        let t = now();
        let kill = write_kill_bits(&f.inode, creds);
        f.inode.update(&AttrUpdate {
            size: Some(size.max(end)),
            pages_delta: added as i64,
            perm: (kill != 0).then(|| f.inode.mode() & 0o7777 & !kill),
            times: Times::modify(t),
            ..Default::default()
        });
        Ok((n as usize, end))
    }

    /// Where a write of `len` bytes to `f` (now `size` bytes) goes: at `off`, or at the end
    /// for `O_APPEND` or a write at the file position; and how much of it, cut short at the
    /// maximum size (Linux `generic_write_checks_count`: `EFBIG` at or past it). 0 bytes
    /// for an empty write, which changes nothing.
    #[inline]
    fn write_span(f: &OpenFile, size: u64, off: Option<u64>, len: usize) -> Result<(u64, u64)> {
        let off = match off {
            Some(o) if !f.flags.contains(OFlags::APPEND) => o,
            _ => size,
        };
        if len == 0 {
            return Ok((off, 0));
        }
        if off >= MAX_FILE_SIZE {
            return Err(Errno::EFBIG);
        }
        Ok((off, (len as u64).min(MAX_FILE_SIZE - off)))
    }

    /// The set-id bits a change of a stored file's data by `creds` clears (Linux
    /// `file_remove_privs`), cleared in storage first: the new permission bits, if any
    /// went. The caller then sets them in the engine's inode with the size and times.
    pub(super) fn kill_stored(
        f: &OpenFile,
        fd: BorrowedFd<'_>,
        creds: &Creds,
    ) -> Result<Option<u32>> {
        let kill = write_kill_bits(&f.inode, creds);
        let perm = (kill != 0).then(|| f.inode.mode() & 0o7777 & !kill);
        if perm.is_some() {
            let attr = StoreAttr {
                perm,
                ..Default::default()
            };
            f.mnt.fs.store_attr(&f.inode, &attr, Some(fd))?;
        }
        Ok(perm)
    }

    /// A write to a stored file: through its data descriptor, then the engine's size,
    /// blocks and times follow (the blocks as storage reports them).
    fn write_stored(
        f: &OpenFile,
        lock: &crate::sync::Mutex<()>,
        buf: &[u8],
        off: Option<u64>,
        creds: &Creds,
    ) -> Result<(usize, u64)> {
        let fd = f.stored_fd()?;
        let _w = lock.lock();
        let size = f.inode.size();
        let (off, n) = Self::write_span(f, size, off, buf.len())?;
        if n == 0 {
            return Ok((0, off));
        }
        let n = n as usize;
        let perm = Self::kill_stored(f, fd, creds)?;
        let n = loop {
            match rustix::io::pwrite(fd, &buf[..n], off) {
                Ok(n) => break n,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(host(e)),
            }
        };
        let end = off + n as u64;
        let blocks = rustix::fs::fstat(fd).ok().map(|st| st.st_blocks as u64);
        f.inode.update(&AttrUpdate {
            size: Some(size.max(end)),
            blocks,
            perm,
            times: Times::modify(now()),
            ..Default::default()
        });
        Ok((n, end))
    }

    /// `read(2)`.
    pub fn read(&self, fd: impl Desc, buf: &mut [u8]) -> Result<usize> {
        if let Some(r) = self.read_pinned(fd, buf, None) {
            return r;
        }
        let f = self.io_file(fd, false, None, buf.len())?;
        let mut pos = f.pos.lock();
        let n = Self::read_inode(&f, buf, *pos)?;
        *pos += n as u64;
        Ok(n)
    }

    /// `pread(2)`.
    pub fn pread(&self, fd: impl Desc, buf: &mut [u8], off: u64) -> Result<usize> {
        // A negative offset is refused before the descriptor is looked at.
        if off > i64::MAX as u64 {
            return Err(Errno::EINVAL);
        }
        if let Some(r) = self.read_pinned(fd, buf, Some(off)) {
            return r;
        }
        let f = self.io_file(fd, false, Some(off), buf.len())?;
        Self::read_inode(&f, buf, off)
    }

    /// `read` (`off` is `None`: at the file position, which it advances) or `pread` of a
    /// file whose bytes the engine keeps (memfs), under one epoch pin and with no
    /// reference taken: the description found in the slot lives while the pin is held, as
    /// does its inode. `None` for any other file (hostfs's), whose read may block on the
    /// host and so runs on a held reference ([`Process::io_file`]), not under a pin.
    ///
    /// Without a hold, the inode may be evicted while the bytes are read: a concurrent
    /// close of its last description, the file unlinked, clears them. The clearing takes
    /// the contents' lock after the last hold went, so a read that saw it sees the
    /// eviction afterwards ([`Inode::evicted`](crate::inode::Inode)) and answers `EBADF`,
    /// as the held path does when its hold fails: the descriptor was closed meanwhile.
    /// (`buf` may then hold what the read saw, as POSIX allows of a failed read.)
    /// Checks are in [`Process::io_file`]'s order.
    #[inline]
    fn read_pinned(
        &self,
        fd: impl Desc,
        buf: &mut [u8],
        off: Option<u64>,
    ) -> Option<Result<usize>> {
        let g = crossbeam_epoch::pin();
        match fd.lookup(&self.files, &g) {
            Ok(f) => Self::read_found(f, buf, off),
            Err(e) => Some(Err(e)),
        }
    }

    /// [`Process::read_pinned`] once the description `f` was found: the caller's pin keeps
    /// `f` alive, and nothing else holds it.
    #[inline]
    pub(super) fn read_found(
        f: &OpenFile,
        buf: &mut [u8],
        off: Option<u64>,
    ) -> Option<Result<usize>> {
        let crate::inode::Contents::File(d) = &f.inode.contents else {
            return None;
        };
        if let Err(e) = Self::io_mode(f, false) {
            return Some(Err(e));
        }
        let mut at = off.is_none().then(|| f.pos.lock());
        let pos = off.unwrap_or_else(|| at.as_deref().copied().unwrap_or(0));
        if let Err(e) = Self::io_range(pos, buf.len()) {
            return Some(Err(e));
        }
        let n = {
            let data = d.read();
            data.read(buf, pos, f.inode.size())
        };
        if f.inode.evicted() {
            return Some(Err(Errno::EBADF));
        }
        Self::read_accessed(f);
        if let Some(p) = at.as_deref_mut() {
            *p += n as u64;
        }
        Some(Ok(n))
    }

    /// `write(2)`.
    pub fn write(&self, fd: impl Desc, buf: &[u8]) -> Result<usize> {
        let f = self.io_file(fd, true, None, buf.len())?;
        let mut pos = f.pos.lock();
        let (n, end) = self.write_inode(&f, buf, Some(*pos))?;
        *pos = end;
        Ok(n)
    }

    /// `pwrite(2)` (with `O_APPEND` it appends, as on Linux).
    pub fn pwrite(&self, fd: impl Desc, buf: &[u8], off: u64) -> Result<usize> {
        if off > i64::MAX as u64 {
            return Err(Errno::EINVAL);
        }
        // The range is checked at `off` even with O_APPEND, as on Linux.
        let f = self.io_file(fd, true, Some(off), buf.len())?;
        Ok(self.write_inode(&f, buf, Some(off))?.0)
    }

    /// `copy_file_range(2)`: copies up to `len` bytes from `fd_in` at `*off_in` (its file
    /// position when `None`) to `fd_out` at `*off_out` (likewise), advances the offsets or
    /// positions used by the bytes copied, and returns that count (0 at `fd_in`'s end).
    ///
    /// Checked in Linux's order: both descriptors open and not `O_PATH` (`EBADF`); `flags`
    /// 0 (`EINVAL`); neither a directory (`EISDIR`) and both regular files (`EINVAL`);
    /// `fd_in` readable and `fd_out` writable without `O_APPEND` (`EBADF`); one file system
    /// (`EXDEV`, as tmpfs gives between instances); the count cut at `fd_in`'s end; `fd_out`'s
    /// offset at the maximum size (`EFBIG`, and the count cut below it); overlapping ranges
    /// of one file (`EINVAL`); an offset past `i64::MAX`, a negative one (`EINVAL`). Linux
    /// 6.18 on tmpfs was the reference (tests/semantics.rs).
    ///
    /// The bytes move through the engine's own read and write in steps of at most 128 KiB
    /// (a stored file's through the host's `pread`/`pwrite`), as Linux splices tmpfs pages:
    /// a failure after the first step ends the copy short, and the count says how far it got.
    /// The writes update `fd_out`'s times and clear its set-id bits as `write` does.
    pub fn copy_file_range(
        &self,
        fd_in: impl Desc,
        off_in: Option<&mut u64>,
        fd_out: impl Desc,
        off_out: Option<&mut u64>,
        len: usize,
        flags: u32,
    ) -> Result<usize> {
        /// Linux `MAX_RW_COUNT`: one call moves at most this much.
        const MAX_RW_COUNT: u64 = (i32::MAX as u64) & !0xfff;
        const STEP: usize = 128 << 10;
        let fin = self.file(fd_in)?;
        let fout = self.file(fd_out)?;
        if fin.is_path() || fout.is_path() {
            return Err(Errno::EBADF);
        }
        if flags != 0 {
            return Err(Errno::EINVAL);
        }
        // generic_file_rw_checks.
        if fin.inode.is_dir() || fout.inode.is_dir() {
            return Err(Errno::EISDIR);
        }
        if fin.inode.file_type() != FileType::Regular || fout.inode.file_type() != FileType::Regular
        {
            return Err(Errno::EINVAL);
        }
        if !fin.flags.readable() || !fout.flags.writable() || fout.flags.contains(OFlags::APPEND) {
            return Err(Errno::EBADF);
        }
        // generic_copy_file_checks.
        if !Arc::ptr_eq(&fin.mnt.fs, &fout.mnt.fs) {
            return Err(Errno::EXDEV);
        }
        let pos_in = off_in
            .as_deref()
            .copied()
            .unwrap_or_else(|| *fin.pos.lock());
        let pos_out = off_out
            .as_deref()
            .copied()
            .unwrap_or_else(|| *fout.pos.lock());
        // As loff_t: an offset past i64::MAX is a negative one.
        let (pi, po) = (pos_in as i64, pos_out as i64);
        let size_in = fin.inode.size() as i64;
        let mut count = match pi >= size_in {
            true => 0,
            false => (len as u64).min((size_in as u64).wrapping_sub(pos_in)),
        };
        if po >= MAX_FILE_SIZE as i64 {
            return Err(Errno::EFBIG);
        }
        count = count.min(MAX_FILE_SIZE.wrapping_sub(pos_out));
        // The overlap test, in the C's unsigned arithmetic.
        if crate::inode::InodeArc::ptr_eq(&fin.inode, &fout.inode)
            && pos_out.wrapping_add(count) > pos_in
            && pos_out < pos_in.wrapping_add(count)
        {
            return Err(Errno::EINVAL);
        }
        // rw_verify_area, both ways, even for no bytes.
        if pi < 0 || po < 0 {
            return Err(Errno::EINVAL);
        }
        if count == 0 {
            return Ok(0);
        }
        let count = count.min(MAX_RW_COUNT);
        let mut buf = vec![0u8; STEP.min(count as usize)];
        let mut done = 0u64;
        while done < count {
            let want = buf.len().min((count - done) as usize);
            let step =
                Self::read_inode(&fin, &mut buf[..want], pos_in + done).and_then(|n| match n {
                    0 => Ok((0, 0)),
                    n => Ok((
                        n,
                        self.write_inode(&fout, &buf[..n], Some(pos_out + done))?.0,
                    )),
                });
            match step {
                Ok((0, _)) => break,
                Ok((read, written)) => {
                    done += written as u64;
                    if written < read {
                        break;
                    }
                }
                Err(e) if done == 0 => return Err(e),
                Err(_) => break,
            }
        }
        // Set, not added to, as Linux stores `pos_in` and `pos_out` back.
        match off_in {
            Some(o) => *o = pos_in + done,
            None => *fin.pos.lock() = pos_in + done,
        }
        match off_out {
            Some(o) => *o = pos_out + done,
            None => *fout.pos.lock() = pos_out + done,
        }
        Ok(done as usize)
    }

    /// `lseek(2)`, with `SEEK_DATA` and `SEEK_HOLE`, as tmpfs computes it: an offset that
    /// overflows is negative, hence `EINVAL`. On a directory the offset is a readdir cookie,
    /// and only `SEEK_SET` and `SEEK_CUR` apply.
    pub fn lseek(&self, fd: impl Desc, off: i64, whence: Whence) -> Result<u64> {
        let f = self.file(fd)?;
        if f.is_path() {
            return Err(Errno::EBADF);
        }
        let mut pos = f.pos.lock();
        let cur = *pos as i64;
        if f.inode.is_dir() {
            // Linux `offset_dir_llseek`.
            let new = match whence {
                Whence::Set => off,
                Whence::Cur => cur.wrapping_add(off),
                _ => return Err(Errno::EINVAL),
            };
            if new < 0 {
                return Err(Errno::EINVAL);
            }
            *pos = new as u64;
            return Ok(new as u64);
        }
        let size = f.inode.size() as i64;
        // Linux `generic_file_llseek_size` and `shmem_file_llseek`.
        let new = match whence {
            Whence::Set => off,
            Whence::Cur if off == 0 => return Ok(*pos),
            Whence::Cur => cur.wrapping_add(off),
            Whence::End => size.wrapping_add(off),
            Whence::Data | Whence::Hole => {
                if off < 0 {
                    return Err(Errno::ENXIO);
                }
                let data = whence == Whence::Data;
                let r = match &f.inode.contents {
                    crate::inode::Contents::File(d) => d.read().seek(off, size, data)?,
                    crate::inode::Contents::Stored(_) => {
                        // Storage knows its holes. The data descriptor's own offset is
                        // never used (reads and writes are positioned), so moving it is free.
                        let to = if data {
                            rustix::fs::SeekFrom::Data(off as u64)
                        } else {
                            rustix::fs::SeekFrom::Hole(off as u64)
                        };
                        rustix::fs::seek(f.stored_fd()?, to).map_err(host)? as i64
                    }
                    _ if off >= size => return Err(Errno::ENXIO),
                    _ if data => off,
                    _ => size,
                };
                if r < 0 {
                    // tmpfs's wrapped offset, handed back as it is (the position stays).
                    return Ok(r as u64);
                }
                r
            }
        };
        if new < 0 {
            return Err(Errno::EINVAL);
        }
        *pos = new as u64;
        Ok(new as u64)
    }

    /// `fsync(2)`: memfs holds everything in memory, so this only checks the descriptor;
    /// a stored file's data is synced in storage.
    pub fn fsync(&self, fd: impl Desc) -> Result<()> {
        self.sync(fd, false)
    }

    /// `fdatasync(2)`.
    pub fn fdatasync(&self, fd: impl Desc) -> Result<()> {
        self.sync(fd, true)
    }

    fn sync(&self, fd: impl Desc, data_only: bool) -> Result<()> {
        let f = self.file(fd)?;
        if f.is_path() {
            return Err(Errno::EBADF);
        }
        if let Some(fd) = f.data_fd_if_open() {
            let r = if data_only {
                rustix::fs::fdatasync(fd)
            } else {
                rustix::fs::fsync(fd)
            };
            r.map_err(host)?;
        }
        Ok(())
    }

    /// `dup(2)`.
    pub fn dup(&self, fd: Fd) -> Result<Fd> {
        self.files.dup(fd)
    }

    /// `dup2(2)`.
    pub fn dup2(&self, old: Fd, new: Fd) -> Result<Fd> {
        self.files.dup2(old, new)
    }
}
