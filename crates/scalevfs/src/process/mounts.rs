//! `mount` and `umount` (root only), and their handshake with walks in progress.

use super::*;

impl Process {
    /// Mounts `fs` on the directory `path` (root only). `ENOENT` if the directory is
    /// removed (or its mount unmounted) before the mount is made.
    pub fn mount(&self, path: impl AsRef<Path>, fs: Arc<SuperBlock>) -> Result<()> {
        let path = cpath_named(path.as_ref())?;
        if self.creds().uid != 0 {
            return Err(Errno::EPERM);
        }
        self.at(Fd::CWD, path, |cx, start| {
            let (p, _hold) = Self::resolve(cx, start, path, true)?;
            let own = p
                .inode
                .as_deref()
                .ok_or(Errno::ENOENT)?
                .dir()
                .ok_or(Errno::ENOTDIR)?;
            let d = DRef::try_get(p.d).ok_or(Errno::ENOENT)?;
            let _l = self.vfs.lock_mounts();
            let table = walk::mount_table(&self.vfs, cx.guard);
            if !Arc::ptr_eq(p.mnt, self.vfs.root_mount())
                && !table.all.iter().any(|m| Arc::ptr_eq(m, p.mnt))
            {
                return Err(Errno::ENOENT);
            }
            // rmdir and rename of the mount point hold its parent's lock (and rmdir its
            // own): under both, it is either gone or stays where it is until MOUNTED is set.
            let _locks = loop {
                let parent = d.parent(cx.guard);
                let parent_dir = parent
                    .and_then(|pd| pd.get().inode(cx.guard))
                    .and_then(|i| i.dir());
                let mut locks = DirLocks::lock(&[own, parent_dir.unwrap_or(own)]);
                if d.parent.load(Acquire) != parent.map_or(std::ptr::null_mut(), |x| x.as_ptr()) {
                    continue;
                }
                if locks.get(own).dead || d.flags() & UNHASHED != 0 {
                    return Err(Errno::ENOENT);
                }
                break locks;
            };
            let root = fs.root().clone();
            let m = Arc::new(Mount::new(
                self.vfs.next_mount_id(),
                fs.clone(),
                root,
                Some((p.mnt.clone(), d.clone())),
            ));
            let mut all = table.all.clone();
            all.push(m);
            effect(|| {
                self.vfs.mount_seq().write_begin();
                d.flags.fetch_or(MOUNTED, SeqCst);
                self.vfs.publish_mounts(MountTable::build(all), cx.guard);
                self.vfs.mount_seq().write_end();
            });
            Ok(())
        })
    }

    /// Unmounts the file system mounted at `path` (root only): `EBUSY` while files,
    /// working directories, operations or other mounts are inside it, `EINVAL` if `path`
    /// is not a mount.
    pub fn umount(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = cpath_named(path.as_ref())?;
        if self.creds().uid != 0 {
            return Err(Errno::EPERM);
        }
        self.at(Fd::CWD, path, |cx, start| {
            // No hold: it would count as a user of the very mount to detach.
            let p = Self::resolve_unheld(cx, start, path, true)?;
            if p.d != p.mnt.root.ptr() || p.mnt.parent.is_none() {
                return Err(Errno::EINVAL);
            }
            let target = p.mnt.clone();
            let _l = self.vfs.lock_mounts();
            let old = walk::mount_table(&self.vfs, cx.guard);
            if !old.all.iter().any(|m| Arc::ptr_eq(m, &target)) {
                return Err(Errno::EINVAL);
            }
            if old.all.iter().any(|m| {
                m.parent
                    .as_ref()
                    .is_some_and(|(pm, _)| Arc::ptr_eq(pm, &target))
            }) {
                return Err(Errno::EBUSY);
            }
            let all: Vec<_> = old
                .all
                .iter()
                .filter(|m| !Arc::ptr_eq(m, &target))
                .cloned()
                .collect();
            let (_, pd) = target.parent.as_ref().expect("checked above");
            let still_mounted = all
                .iter()
                .any(|m| m.parent.as_ref().is_some_and(|(_, d)| d == pd));
            effect(|| {
                self.vfs.mount_seq().write_begin();
                if !target.detach_if_unused() {
                    self.vfs.mount_seq().write_end();
                    return Err(Errno::EBUSY);
                }
                if !still_mounted {
                    pd.flags.fetch_and(!MOUNTED, SeqCst);
                }
                self.vfs.publish_mounts(MountTable::build(all), cx.guard);
                self.vfs.mount_seq().write_end();
                Ok(())
            })
        })
    }
}
