//! std::fs-style helpers built on the POSIX calls: read and write whole files, create and
//! remove trees, list and walk directories.

use super::*;

impl Process {
    /// Reads a whole file, like `std::fs::read`.
    pub fn read_file(&self, path: impl AsRef<Path>) -> Result<Vec<u8>> {
        let fd = self.open(path, OFlags::RDONLY, 0)?;
        let mut out = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        let r = loop {
            match self.read(fd, &mut buf) {
                Ok(0) => break Ok(out),
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) => break Err(e),
            }
        };
        self.close(fd)?;
        r
    }

    /// Reads a whole file as UTF-8 (`EINVAL` if it is not).
    pub fn read_to_string(&self, path: impl AsRef<Path>) -> Result<String> {
        String::from_utf8(self.read_file(path)?).map_err(|_| Errno::EINVAL)
    }

    /// Creates or truncates a file and writes `data`, like `std::fs::write`.
    pub fn write_file(&self, path: impl AsRef<Path>, data: &[u8]) -> Result<()> {
        let fd = self.open(path, OFlags::WRONLY | OFlags::CREAT | OFlags::TRUNC, 0o666)?;
        let mut done = 0;
        let r = loop {
            if done == data.len() {
                break Ok(());
            }
            match self.write(fd, &data[done..]) {
                Ok(n) => done += n,
                Err(e) => break Err(e),
            }
        };
        self.close(fd)?;
        r
    }

    /// Creates a directory and its missing parents, like `std::fs::create_dir_all`.
    pub fn create_dir_all(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        match self.mkdir(path, 0o777) {
            Ok(()) => return Ok(()),
            Err(Errno::EEXIST) => {
                return if self.stat(path)?.is_dir() {
                    Ok(())
                } else {
                    Err(Errno::EEXIST)
                };
            }
            Err(Errno::ENOENT) => {}
            Err(e) => return Err(e),
        }
        match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => self.create_dir_all(p)?,
            _ => return Err(Errno::ENOENT),
        }
        match self.mkdir(path, 0o777) {
            Err(Errno::EEXIST) if self.stat(path)?.is_dir() => Ok(()),
            r => r,
        }
    }

    /// Lists a directory without `.` and `..`, like `std::fs::read_dir`.
    pub fn read_dir(&self, path: impl AsRef<Path>) -> Result<Vec<DirEntry>> {
        let fd = self.open(path, OFlags::RDONLY | OFlags::DIRECTORY, 0)?;
        let mut out = Vec::new();
        let r = loop {
            match self.getdents(fd, 1024) {
                Ok(v) if v.is_empty() => break Ok(()),
                Ok(v) => out.extend(v.into_iter().filter(|e| e.name != b"." && e.name != b"..")),
                Err(e) => break Err(e),
            }
        };
        self.close(fd)?;
        r.map(|_| out)
    }

    /// Removes a directory and everything in it, like `std::fs::remove_dir_all`. Symlinks
    /// are removed, never followed (`path` itself included); any other object that is not
    /// a directory is `ENOTDIR`, as with std. Works relative to directory descriptors, so
    /// the depth of the tree does not matter (no path is built).
    pub fn remove_dir_all(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        match self.lstat(path)?.file_type() {
            Some(FileType::Directory) => {}
            Some(FileType::Symlink) => return self.unlink(path),
            _ => return Err(Errno::ENOTDIR),
        }
        let dir = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW;
        let top = self.open(path, dir, 0)?;
        // One frame per open directory: its descriptor, the names left to remove in it, and
        // its own name in the frame below.
        let mut stack: Vec<(Fd, Vec<DirEntry>, Vec<u8>)> = Vec::new();
        let r = (|| -> Result<()> {
            stack.push((top, self.list(top)?, Vec::new()));
            while let Some((fd, entries, _)) = stack.last_mut() {
                let fd = *fd;
                match entries.pop() {
                    Some(e) if e.file_type == FileType::Directory => {
                        let name = OsStr::from_bytes(&e.name);
                        let sub = self.openat(fd, name, dir, 0)?;
                        let list = self.list(sub);
                        stack.push((sub, Vec::new(), e.name));
                        stack.last_mut().expect("just pushed").1 = list?;
                    }
                    Some(e) => {
                        self.unlinkat(fd, OsStr::from_bytes(&e.name), AtFlags::empty())?;
                    }
                    None => {
                        let (fd, _, name) = stack.pop().expect("the frame in hand");
                        self.close(fd)?;
                        if let Some((parent, _, _)) = stack.last() {
                            self.unlinkat(*parent, OsStr::from_bytes(&name), AtFlags::REMOVEDIR)?;
                        }
                    }
                }
            }
            Ok(())
        })();
        for (fd, _, _) in stack.drain(..).rev() {
            let _ = self.close(fd);
        }
        r?;
        self.rmdir(path)
    }

    /// The entries of an open directory, without `.` and `..`.
    pub(super) fn list(&self, fd: impl Desc) -> Result<Vec<DirEntry>> {
        let mut out = Vec::new();
        loop {
            let v = self.getdents(fd, 1024)?;
            if v.is_empty() {
                return Ok(out);
            }
            out.extend(v.into_iter().filter(|e| e.name != b"." && e.name != b".."));
        }
    }

    /// Every path under `path` (depth first, directories before their contents, names in
    /// order), with its `lstat`, like a recursive `read_dir`. Works relative to directory
    /// descriptors: the depth of the tree does not matter.
    pub fn walk_tree(&self, path: impl AsRef<Path>) -> Result<Vec<(PathBuf, Stat)>> {
        let root = path.as_ref().to_path_buf();
        let st = self.lstat(&root)?;
        let mut out = vec![(root.clone(), st)];
        if !st.is_dir() {
            return Ok(out);
        }
        let dir = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW;
        let top = self.open(&root, dir, 0)?;
        // One frame per open directory: its descriptor, its path, and the names left in it
        // (sorted, last first).
        let mut stack: Vec<(Fd, PathBuf, Vec<DirEntry>)> = Vec::new();
        let r = (|| {
            let mut kids = self.list(top)?;
            kids.sort_by(|a, b| b.name.cmp(&a.name));
            stack.push((top, root, kids));
            while let Some((fd, p, entries)) = stack.last_mut() {
                let fd = *fd;
                let Some(e) = entries.pop() else {
                    let (fd, _, _) = stack.pop().expect("the frame in hand");
                    self.close(fd)?;
                    continue;
                };
                let name = OsStr::from_bytes(&e.name);
                let child = p.join(name);
                let cs = self.fstatat(fd, name, AtFlags::SYMLINK_NOFOLLOW)?;
                out.push((child.clone(), cs));
                if cs.is_dir() {
                    let sub = self.openat(fd, name, dir, 0)?;
                    let mut kids = self.list(sub);
                    if let Ok(k) = &mut kids {
                        k.sort_by(|a, b| b.name.cmp(&a.name));
                    }
                    stack.push((sub, child, Vec::new()));
                    stack.last_mut().expect("just pushed").2 = kids?;
                }
            }
            Ok(())
        })();
        for (fd, _, _) in stack.drain(..).rev() {
            let _ = self.close(fd);
        }
        r.map(|()| out)
    }
}
