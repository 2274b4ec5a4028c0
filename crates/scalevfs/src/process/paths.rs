//! The working directory and paths back from dentries: chdir, getcwd, realpath.

use super::*;

impl Process {
    pub(super) fn set_cwd(&self, loc: Loc) {
        let _l = self.ctx_lock.lock();
        let g = crossbeam_epoch::pin();
        let old = self.ctx_ref(&g);
        let new = FsCtx {
            root: old.root.clone(),
            cwd: loc,
        };
        let ids = Ids::of(&new, self.creds_box(&g).id);
        let old = self
            .ids
            .set(ids, || self.ctx.swap(Owned::new(new), SeqCst, &g));
        // The old places stop counting now (see `mount`, "A published place"); readers
        // that loaded them hold their mounts themselves (`Process::held_ctx`).
        // SAFETY: non-null, and freed only after the grace period deferred below.
        let o = unsafe { old.deref() };
        o.cwd.release();
        o.root.release();
        // SAFETY: unreachable now; readers hold guards.
        unsafe { g.defer_destroy(old) };
    }

    /// `chdir(2)`.
    pub fn chdir(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = cpath_named(path.as_ref())?;
        let loc = self.at(Fd::CWD, path, |cx, start| {
            retry(cx.vfs, |locked| {
                let w = start.walk(cx, path, Flags::object(true), locked)?;
                let p = w.pos();
                let i = p.inode()?;
                if !i.is_dir() {
                    return Err(Fail::Err(Errno::ENOTDIR));
                }
                i.permission(cx.creds, Access::X_OK)?;
                // Dead since the walk found it: walk again.
                let d = DRef::try_get(p.d).ok_or(Fail::Retry)?;
                let loc = Loc::new(p.mnt.clone(), d);
                // The working directory counts as a user of its mount: confirm.
                w.confirm(cx)?;
                Ok(loc)
            })
        })?;
        self.set_cwd(loc);
        Ok(())
    }

    /// `fchdir(2)`.
    pub fn fchdir(&self, fd: impl Desc) -> Result<()> {
        let of = self.file(fd)?;
        let d = of.dir.clone().ok_or(Errno::ENOTDIR)?;
        let g = crossbeam_epoch::pin();
        of.inode.permission(self.creds_ref(&g), Access::X_OK)?;
        self.set_cwd(Loc::new(of.mnt.clone(), d));
        Ok(())
    }

    /// The absolute path of (`mnt`, `d`) as seen from the process root, or `ENOENT` if it
    /// was removed or is not under the root.
    pub(super) fn path_of(&self, mnt: &Arc<Mount>, d: DPtr<'_>, g: &Guard) -> Result<PathBuf> {
        let ctx = self.ctx_ref(g);
        'again: loop {
            let mut parts: Vec<Vec<u8>> = Vec::new();
            let (mut m, mut cur) = (mnt, d);
            loop {
                if cur == ctx.root.d.ptr() && Arc::ptr_eq(m, &ctx.root.mnt) {
                    break;
                }
                if cur == m.root.ptr() {
                    match &m.parent {
                        Some((pm, pd)) => {
                            m = pm;
                            cur = pd.ptr();
                            continue;
                        }
                        None => return Err(Errno::ENOENT),
                    }
                }
                let s = cur.seq.read_begin_spin();
                if cur.flags() & UNHASHED != 0 {
                    return Err(Errno::ENOENT);
                }
                let name = cur.name_vec(g);
                let Some(parent) = cur.get().parent(g) else {
                    return Err(Errno::ENOENT);
                };
                if cur.seq.read_retry(s) {
                    continue 'again;
                }
                parts.push(name);
                cur = parent;
            }
            let len = parts.iter().map(|p| p.len() + 1).sum::<usize>().max(1);
            // Linux builds the path in a page: one that does not fit (with its NUL) is
            // ENAMETOOLONG.
            if len >= limits::PATH_MAX {
                return Err(Errno::ENAMETOOLONG);
            }
            let mut out = Vec::with_capacity(len);
            for p in parts.iter().rev() {
                out.push(b'/');
                out.extend_from_slice(p);
            }
            if out.is_empty() {
                out.push(b'/');
            }
            return Ok(PathBuf::from(std::ffi::OsString::from_vec(out)));
        }
    }

    /// `getcwd(3)`.
    pub fn getcwd(&self) -> Result<PathBuf> {
        let g = crossbeam_epoch::pin();
        let cwd = &self.ctx_ref(&g).cwd;
        self.path_of(&cwd.mnt, cwd.d.ptr(), &g)
    }

    /// `realpath(3)`: the absolute path with no symlink, `.` or `..`.
    pub fn realpath(&self, path: impl AsRef<Path>) -> Result<PathBuf> {
        let path = cpath_named(path.as_ref())?;
        self.at(Fd::CWD, path, |cx, start| {
            let p = Self::resolve_unheld(cx, start, path, true)?;
            self.path_of(p.mnt, p.d, cx.guard)
        })
    }
}
