//! Extended attributes: `getxattr(2)`, `setxattr(2)`, `listxattr(2)` and `removexattr(2)`,
//! in their path, `l` (no final symlink followed), `f` (descriptor) and `*at` (Linux 6.13)
//! forms, plus [`Process::xattrs_of`] for a frontend that holds objects by `O_PATH`
//! descriptors.
//!
//! The checks are Linux 6.18's, in its order (`fs/xattr.c`, `security/commoncap.c`):
//! 1. the arguments: `setxattr`'s flags (`EINVAL`), the name (empty or longer than
//!    `XATTR_NAME_MAX`: `ERANGE`; a NUL in it, which a C caller cannot pass: `EINVAL`), the
//!    value's size (`E2BIG`);
//! 2. the path (or the descriptor: `EBADF`, also for `O_PATH`), then `EROFS` for a change;
//! 3. `security.capability` values (`cap_convert_nscap`): a v2 or v3 header or `EINVAL`
//!    (an empty value too: Linux 6.18 checks every size, where older kernels let an empty
//!    one through unchecked), then root or `EPERM`;
//! 4. `xattr_permission`: `trusted.` is root's (`EPERM` to change, `ENODATA` to read);
//!    `user.` only on regular files and directories (`EPERM`/`ENODATA`), and in a sticky
//!    directory only for its owner (`EPERM`); `security.` and `system.` need nothing here;
//!    any other name needs write (or read) permission on the object (`EACCES`);
//! 5. `security.` changes are root's (`EPERM`, `cap_inode_setxattr`);
//! 6. the namespace: a bare prefix (`user.`) is `EINVAL`; a name in no namespace the file
//!    system serves is `EOPNOTSUPP` (`system.`, so POSIX ACLs, are not served);
//! 7. the file system: `ENODATA`, `EEXIST`, `ENOSPC` (memfs: tmpfs's inode space).
//!
//! A change sets the object's ctime. `listxattr` needs no permission, and leaves `trusted.`
//! names out for everyone but root. A write, truncate, `fallocate` or `chown` of a memfs
//! file removes a non-empty `security.capability` (`kill_priv`, Linux's `killpriv`). The
//! buffer calls answer as Linux's: an empty buffer asks for the size; one too small is
//! `ERANGE`.

use super::*;
use crate::types::limits::{XATTR_LIST_MAX, XATTR_NAME_MAX, XATTR_SIZE_MAX};

/// The namespace of an attribute's name, as Linux's `xattr_permission` tells them apart.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Ns {
    User,
    Trusted,
    Security,
    /// `system.`: POSIX ACLs on Linux; not served here.
    System,
    /// No namespace Linux knows.
    Other,
}

fn ns_of(name: &[u8]) -> Ns {
    if name.starts_with(b"user.") {
        Ns::User
    } else if name.starts_with(b"trusted.") {
        Ns::Trusted
    } else if name.starts_with(b"security.") {
        Ns::Security
    } else if name.starts_with(b"system.") {
        Ns::System
    } else {
        Ns::Other
    }
}

/// `security.capability`, whose values `cap_convert_nscap` checks.
const CAPS: &[u8] = b"security.capability";
const CAP_REV_MASK: u32 = 0xff00_0000;
const CAP_REV2: u32 = 0x0200_0000;
const CAP_REV3: u32 = 0x0300_0000;
const CAP_EFFECTIVE: u32 = 1;
/// Sizes of a v2 and a v3 `security.capability` value.
const CAPS_V2: usize = 20;
const CAPS_V3: usize = 24;

/// The revision and magic word of a `security.capability` value, if it is a valid v2 or v3
/// one.
fn caps_rev(v: &[u8]) -> Option<(u32, u32)> {
    let magic = u32::from_le_bytes(v.get(..4)?.try_into().ok()?);
    if magic & !(CAP_REV_MASK | CAP_EFFECTIVE) != 0 {
        return None;
    }
    match (magic & CAP_REV_MASK, v.len()) {
        (CAP_REV2, CAPS_V2) => Some((CAP_REV2, magic)),
        (CAP_REV3, CAPS_V3) => Some((CAP_REV3, magic)),
        _ => None,
    }
}

/// Step 1 for a name: `ERANGE` (empty, or too long), `EINVAL` (a NUL in it).
fn check_name(name: &OsStr) -> Result<&[u8]> {
    let name = name.as_bytes();
    if name.is_empty() || name.len() > XATTR_NAME_MAX {
        return Err(Errno::ERANGE);
    }
    if crate::name::has_nul(name) {
        return Err(Errno::EINVAL);
    }
    Ok(name)
}

/// Step 6: `EINVAL` for a bare prefix, `EOPNOTSUPP` outside the served namespaces.
fn served(name: &[u8], ns: Ns) -> Result<()> {
    let prefix = match ns {
        Ns::User => 5,
        Ns::Trusted => 8,
        Ns::Security => 9,
        Ns::System | Ns::Other => return Err(Errno::EOPNOTSUPP),
    };
    if name.len() == prefix {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// Steps 4 to 6 for a change (`setxattr`, `removexattr`) of `name` on `inode`.
fn may_change(inode: &Inode, name: &[u8], creds: &Creds) -> Result<()> {
    let root = creds.uid == 0;
    let ns = ns_of(name);
    match ns {
        Ns::Security | Ns::System => {}
        Ns::Trusted if !root => return Err(Errno::EPERM),
        Ns::Trusted => {}
        Ns::User | Ns::Other => {
            if ns == Ns::User {
                let ty = inode.mode() & S_IFMT;
                if ty != S_IFREG && ty != S_IFDIR {
                    return Err(Errno::EPERM);
                }
                let sticky = ty == S_IFDIR && inode.mode() & S_ISVTX != 0;
                if sticky && !root && creds.uid != inode.uid() {
                    return Err(Errno::EPERM);
                }
            }
            inode.permission(creds, Access::W_OK)?;
        }
    }
    if ns == Ns::Security && !root && name != CAPS {
        return Err(Errno::EPERM);
    }
    served(name, ns)
}

/// Steps 4 and 6 for a read (`getxattr`) of `name` on `inode`.
fn may_read(inode: &Inode, name: &[u8], creds: &Creds) -> Result<()> {
    let ns = ns_of(name);
    match ns {
        Ns::Security | Ns::System => {}
        Ns::Trusted if creds.uid != 0 => return Err(Errno::ENODATA),
        Ns::Trusted => {}
        Ns::User | Ns::Other => {
            let ty = inode.mode() & S_IFMT;
            if ns == Ns::User && ty != S_IFREG && ty != S_IFDIR {
                return Err(Errno::ENODATA);
            }
            inode.permission(creds, Access::R_OK)?;
        }
    }
    served(name, ns)
}

/// A `security.capability` value as a reader sees it (`cap_inode_getsecurity`): a v3
/// value whose root is uid 0 reads as v2; a value that is neither is `EINVAL`.
fn caps_for_reader(v: Vec<u8>) -> Result<Vec<u8>> {
    match caps_rev(&v) {
        Some((CAP_REV2, _)) => Ok(v),
        Some((_, magic)) if v[CAPS_V2..] == [0; 4] => {
            let mut out = (CAP_REV2 | (magic & CAP_EFFECTIVE)).to_le_bytes().to_vec();
            out.extend_from_slice(&v[4..CAPS_V2]);
            Ok(out)
        }
        Some(_) => Ok(v),
        None => Err(Errno::EINVAL),
    }
}

/// Copies `v` into `buf` as the buffer calls answer: the size for an empty buffer, `ERANGE`
/// for one too small.
fn answer(v: &[u8], buf: &mut [u8]) -> Result<usize> {
    if buf.is_empty() {
        return Ok(v.len());
    }
    let dst = buf.get_mut(..v.len()).ok_or(Errno::ERANGE)?;
    dst.copy_from_slice(v);
    Ok(v.len())
}

/// What `listxattr` shows the caller of the file system's list: every name but `trusted.`
/// ones for anyone but root.
fn visible(list: Vec<u8>, creds: &Creds) -> Vec<u8> {
    if creds.uid == 0 {
        return list;
    }
    let mut out = Vec::with_capacity(list.len());
    for name in list.split_inclusive(|&b| b == 0) {
        if !name.starts_with(b"trusted.") {
            out.extend_from_slice(name);
        }
    }
    out
}

/// Linux's `killpriv` (`security_inode_killpriv`): a write, a truncate, an `fallocate` or a
/// `chown` of a file removes its `security.capability`, if it has a non-empty one
/// (`cap_inode_need_killpriv`), and that removal sets ctime. For memfs; a file system that
/// writes through (hostfs) has the host do it, as the host's own write or `chown` does.
/// Costs a byte's load for an inode that never had an extended attribute.
pub(super) fn kill_priv(fs: &SuperBlock, inode: &Inode) {
    if !inode.has_xattrs.load(std::sync::atomic::Ordering::Relaxed) || fs.writes_through() {
        return;
    }
    let removed = fs.xattr_op(inode, |ops| match ops.get_xattr(inode, CAPS, None) {
        Ok(v) if !v.is_empty() => ops.remove_xattr(inode, CAPS, None),
        _ => Err(Errno::ENODATA),
    });
    if removed.is_ok() {
        inode.touch(Times::change(now()));
    }
}

/// What the calls do once they have the object.
impl Process {
    fn xattr_get(
        inode: &Inode,
        fs: &SuperBlock,
        c: &Creds,
        fd: Option<BorrowedFd<'_>>,
        name: &[u8],
    ) -> Result<Vec<u8>> {
        may_read(inode, name, c)?;
        let v = fs.xattr_op(inode, |ops| ops.get_xattr(inode, name, fd))?;
        if name == CAPS {
            return caps_for_reader(v);
        }
        Ok(v)
    }

    fn xattr_set(
        inode: &Inode,
        fs: &SuperBlock,
        c: &Creds,
        fd: Option<BorrowedFd<'_>>,
        (name, value, flags): (&[u8], &[u8], XattrFlags),
    ) -> Result<()> {
        fs.want_write()?;
        if name == CAPS {
            let (rev, _) = caps_rev(value).ok_or(Errno::EINVAL)?;
            if c.uid != 0 {
                return Err(Errno::EPERM);
            }
            if rev == CAP_REV3 && value[CAPS_V2..] == [0xff; 4] {
                return Err(Errno::EINVAL);
            }
        }
        may_change(inode, name, c)?;
        fs.xattr_op(inode, |ops| ops.set_xattr(inode, name, value, flags, fd))?;
        inode.touch(Times::change(now()));
        Ok(())
    }

    fn xattr_remove(
        inode: &Inode,
        fs: &SuperBlock,
        c: &Creds,
        fd: Option<BorrowedFd<'_>>,
        name: &[u8],
    ) -> Result<()> {
        fs.want_write()?;
        may_change(inode, name, c)?;
        if name == CAPS && c.uid != 0 {
            return Err(Errno::EPERM);
        }
        fs.xattr_op(inode, |ops| ops.remove_xattr(inode, name, fd))?;
        inode.touch(Times::change(now()));
        Ok(())
    }

    fn xattr_list(
        inode: &Inode,
        fs: &SuperBlock,
        c: &Creds,
        fd: Option<BorrowedFd<'_>>,
    ) -> Result<Vec<u8>> {
        let list = fs.xattr_op(inode, |ops| ops.list_xattr(inode, fd))?;
        Ok(visible(list, c))
    }

    /// Step 1 of `setxattr`: flags, name and size.
    fn set_args<'n>(name: &'n OsStr, value: &[u8], flags: XattrFlags) -> Result<&'n [u8]> {
        if flags.0 & !(XattrFlags::CREATE.0 | XattrFlags::REPLACE.0) != 0 {
            return Err(Errno::EINVAL);
        }
        let name = check_name(name)?;
        if value.len() > XATTR_SIZE_MAX {
            return Err(Errno::E2BIG);
        }
        Ok(name)
    }

    /// `*at` flags: only `AT_SYMLINK_NOFOLLOW` and `AT_EMPTY_PATH`.
    fn xattr_at_flags(flags: AtFlags) -> Result<()> {
        if flags.0 & !(AtFlags::SYMLINK_NOFOLLOW.0 | AtFlags::EMPTY_PATH.0) != 0 {
            return Err(Errno::EINVAL);
        }
        Ok(())
    }

    /// Runs `f` on what `dirfd` and `path` name, as the `*at` calls resolve it: an empty
    /// path with `AT_EMPTY_PATH` is `dirfd` itself, which must be an open descriptor and
    /// not an `O_PATH` one (`EBADF`, as Linux 6.18's: not even `AT_FDCWD`).
    fn xattr_at<R>(
        &self,
        dirfd: impl Desc,
        path: &Path,
        flags: AtFlags,
        f: impl FnOnce(&InodeArc, &SuperBlock, &Creds, Option<BorrowedFd<'_>>) -> Result<R>,
    ) -> Result<R> {
        if path.as_os_str().is_empty() && flags.contains(AtFlags::EMPTY_PATH) {
            return self.with_fd(dirfd, f);
        }
        self.with_inode(dirfd, path, flags, f)
    }

    /// `getxattrat(2)` (Linux 6.13): the value of the extended attribute `name` of what
    /// `dirfd` and `path` name, into `buf`; returns its size. An empty `buf` asks for the
    /// size only; a `buf` too small is `ERANGE`. `flags`: `AT_SYMLINK_NOFOLLOW`,
    /// `AT_EMPTY_PATH`.
    ///
    /// Errors: `ERANGE` (an empty name, or longer than `XATTR_NAME_MAX`), `ENODATA` (no
    /// such attribute, or a `trusted.` one and the caller is not root), `EACCES`,
    /// `EOPNOTSUPP` (a namespace not served: only `user.`, `trusted.` and `security.`
    /// are), `EINVAL` (a bare prefix, a NUL in the name, unknown flags), and the path's.
    pub fn getxattrat(
        &self,
        dirfd: impl Desc,
        path: impl AsRef<Path>,
        flags: AtFlags,
        name: impl AsRef<OsStr>,
        buf: &mut [u8],
    ) -> Result<usize> {
        Self::xattr_at_flags(flags)?;
        let name = check_name(name.as_ref())?;
        let v = self.xattr_at(dirfd, path.as_ref(), flags, |i, fs, c, fd| {
            Self::xattr_get(i, fs, c, fd, name)
        })?;
        answer(&v, buf)
    }

    /// `getxattr(2)`: see [`Process::getxattrat`].
    ///
    /// ```
    /// use scalevfs::{Creds, Vfs, XattrFlags};
    /// let p = Vfs::new_memfs().process(Creds::root());
    /// p.write_file("/notes", b"")?;
    /// p.setxattr("/notes", "user.colour", b"green", XattrFlags::empty())?;
    /// let mut buf = [0u8; 16];
    /// let n = p.getxattr("/notes", "user.colour", &mut buf)?;
    /// assert_eq!(&buf[..n], b"green");
    /// assert_eq!(p.getxattr("/notes", "user.colour", &mut [])?, 5); // the size only
    /// # Ok::<(), scalevfs::Errno>(())
    /// ```
    pub fn getxattr(
        &self,
        path: impl AsRef<Path>,
        name: impl AsRef<OsStr>,
        buf: &mut [u8],
    ) -> Result<usize> {
        self.getxattrat(Fd::CWD, path, AtFlags::empty(), name, buf)
    }

    /// `lgetxattr(2)`: [`Process::getxattr`] of a final symlink itself.
    pub fn lgetxattr(
        &self,
        path: impl AsRef<Path>,
        name: impl AsRef<OsStr>,
        buf: &mut [u8],
    ) -> Result<usize> {
        self.getxattrat(Fd::CWD, path, AtFlags::SYMLINK_NOFOLLOW, name, buf)
    }

    /// `fgetxattr(2)`; `EBADF` for an `O_PATH` descriptor, as on Linux.
    pub fn fgetxattr(
        &self,
        fd: impl Desc,
        name: impl AsRef<OsStr>,
        buf: &mut [u8],
    ) -> Result<usize> {
        let name = check_name(name.as_ref())?;
        let v = self.with_fd(fd, |i, fs, c, fd| Self::xattr_get(i, fs, c, fd, name))?;
        answer(&v, buf)
    }

    /// `setxattrat(2)` (Linux 6.13): sets the extended attribute `name` of what `dirfd` and
    /// `path` name to `value`: with [`XattrFlags::CREATE`] only if it does not exist
    /// (`EEXIST`), with [`XattrFlags::REPLACE`] only if it does (`ENODATA`). An empty
    /// value is a value, except for `security.capability`.
    ///
    /// Errors: `EINVAL` (unknown flags, a bare prefix, a NUL in the name, a
    /// `security.capability` value that is not a v2 or v3 one), `ERANGE` (the name),
    /// `E2BIG` (a value over `XATTR_SIZE_MAX`), `EROFS`, `EPERM` (`trusted.` and
    /// `security.` are root's; `user.` only on regular files and directories, and a sticky
    /// directory's only for its owner), `EACCES` (no write permission, for `user.`),
    /// `EOPNOTSUPP`, `ENOSPC`, and the path's.
    pub fn setxattrat(
        &self,
        dirfd: impl Desc,
        path: impl AsRef<Path>,
        flags: AtFlags,
        name: impl AsRef<OsStr>,
        value: &[u8],
        how: XattrFlags,
    ) -> Result<()> {
        Self::xattr_at_flags(flags)?;
        let name = Self::set_args(name.as_ref(), value, how)?;
        self.xattr_at(dirfd, path.as_ref(), flags, |i, fs, c, fd| {
            Self::xattr_set(i, fs, c, fd, (name, value, how))
        })
    }

    /// `setxattr(2)`: see [`Process::setxattrat`].
    pub fn setxattr(
        &self,
        path: impl AsRef<Path>,
        name: impl AsRef<OsStr>,
        value: &[u8],
        how: XattrFlags,
    ) -> Result<()> {
        self.setxattrat(Fd::CWD, path, AtFlags::empty(), name, value, how)
    }

    /// `lsetxattr(2)`: [`Process::setxattr`] of a final symlink itself.
    pub fn lsetxattr(
        &self,
        path: impl AsRef<Path>,
        name: impl AsRef<OsStr>,
        value: &[u8],
        how: XattrFlags,
    ) -> Result<()> {
        self.setxattrat(Fd::CWD, path, AtFlags::SYMLINK_NOFOLLOW, name, value, how)
    }

    /// `fsetxattr(2)`; `EBADF` for an `O_PATH` descriptor. The descriptor's access mode
    /// does not matter, as on Linux: the object's permissions do.
    pub fn fsetxattr(
        &self,
        fd: impl Desc,
        name: impl AsRef<OsStr>,
        value: &[u8],
        how: XattrFlags,
    ) -> Result<()> {
        let name = Self::set_args(name.as_ref(), value, how)?;
        self.with_fd(fd, |i, fs, c, fd| {
            Self::xattr_set(i, fs, c, fd, (name, value, how))
        })
    }

    /// `removexattrat(2)` (Linux 6.13): removes the extended attribute `name`.
    ///
    /// Errors: `ENODATA` (no such attribute), and those of [`Process::setxattrat`] but
    /// the value's.
    pub fn removexattrat(
        &self,
        dirfd: impl Desc,
        path: impl AsRef<Path>,
        flags: AtFlags,
        name: impl AsRef<OsStr>,
    ) -> Result<()> {
        Self::xattr_at_flags(flags)?;
        let name = check_name(name.as_ref())?;
        self.xattr_at(dirfd, path.as_ref(), flags, |i, fs, c, fd| {
            Self::xattr_remove(i, fs, c, fd, name)
        })
    }

    /// `removexattr(2)`: see [`Process::removexattrat`].
    pub fn removexattr(&self, path: impl AsRef<Path>, name: impl AsRef<OsStr>) -> Result<()> {
        self.removexattrat(Fd::CWD, path, AtFlags::empty(), name)
    }

    /// `lremovexattr(2)`: [`Process::removexattr`] of a final symlink itself.
    pub fn lremovexattr(&self, path: impl AsRef<Path>, name: impl AsRef<OsStr>) -> Result<()> {
        self.removexattrat(Fd::CWD, path, AtFlags::SYMLINK_NOFOLLOW, name)
    }

    /// `fremovexattr(2)`; `EBADF` for an `O_PATH` descriptor.
    pub fn fremovexattr(&self, fd: impl Desc, name: impl AsRef<OsStr>) -> Result<()> {
        let name = check_name(name.as_ref())?;
        self.with_fd(fd, |i, fs, c, fd| Self::xattr_remove(i, fs, c, fd, name))
    }

    /// `listxattrat(2)` (Linux 6.13): the names of the extended attributes of what `dirfd`
    /// and `path` name, each followed by a NUL, into `buf`; returns the list's size. An
    /// empty `buf` asks for the size only; one too small is `ERANGE` (`E2BIG` if it held
    /// `XATTR_LIST_MAX` bytes or more). Needs no permission on the object; `trusted.`
    /// names are listed for root only.
    ///
    /// ```
    /// use scalevfs::{Creds, Vfs, XattrFlags};
    /// let p = Vfs::new_memfs().process(Creds::root());
    /// p.mkdir("/d", 0o755)?;
    /// p.setxattr("/d", "user.a", b"1", XattrFlags::empty())?;
    /// p.setxattr("/d", "user.b", b"2", XattrFlags::empty())?;
    /// let mut buf = vec![0u8; p.listxattr("/d", &mut [])?];
    /// let n = p.listxattr("/d", &mut buf)?;
    /// assert_eq!(&buf[..n], b"user.b\0user.a\0"); // tmpfs's order
    /// # Ok::<(), scalevfs::Errno>(())
    /// ```
    pub fn listxattrat(
        &self,
        dirfd: impl Desc,
        path: impl AsRef<Path>,
        flags: AtFlags,
        buf: &mut [u8],
    ) -> Result<usize> {
        Self::xattr_at_flags(flags)?;
        let list = self.xattr_at(dirfd, path.as_ref(), flags, |i, fs, c, fd| {
            Self::xattr_list(i, fs, c, fd)
        })?;
        list_answer(&list, buf)
    }

    /// `listxattr(2)`: see [`Process::listxattrat`].
    pub fn listxattr(&self, path: impl AsRef<Path>, buf: &mut [u8]) -> Result<usize> {
        self.listxattrat(Fd::CWD, path, AtFlags::empty(), buf)
    }

    /// `llistxattr(2)`: [`Process::listxattr`] of a final symlink itself.
    pub fn llistxattr(&self, path: impl AsRef<Path>, buf: &mut [u8]) -> Result<usize> {
        self.listxattrat(Fd::CWD, path, AtFlags::SYMLINK_NOFOLLOW, buf)
    }

    /// `flistxattr(2)`; `EBADF` for an `O_PATH` descriptor.
    pub fn flistxattr(&self, fd: impl Desc, buf: &mut [u8]) -> Result<usize> {
        let list = self.with_fd(fd, |i, fs, c, fd| Self::xattr_list(i, fs, c, fd))?;
        list_answer(&list, buf)
    }

    /// The extended attributes of what the descriptor `fd` refers to, which may be an
    /// `O_PATH` descriptor: what Linux reaches through `/proc/self/fd/N` (there is no
    /// `/proc` here). For a frontend that holds every object by such a descriptor, as the
    /// FUSE server does. The checks are those of the calls above, with the process's
    /// credentials at each call.
    ///
    /// Errors: `EBADF` (not an open descriptor).
    pub fn xattrs_of(&self, fd: impl Desc) -> Result<XattrsOf<'_>> {
        Ok(XattrsOf {
            p: self,
            file: self.file(fd)?,
        })
    }
}

/// `listxattr`'s answer: as [`answer`], but a list too big for `XATTR_LIST_MAX` bytes of
/// buffer is `E2BIG`.
fn list_answer(list: &[u8], buf: &mut [u8]) -> Result<usize> {
    match answer(list, buf) {
        Err(Errno::ERANGE) if buf.len() >= XATTR_LIST_MAX => Err(Errno::E2BIG),
        r => r,
    }
}

/// The extended attributes of one object a [`Process`] holds open, `O_PATH` included
/// ([`Process::xattrs_of`]). Each method is the `f` call of its name, with the same checks
/// and errors.
pub struct XattrsOf<'p> {
    p: &'p Process,
    file: FileRef,
}

impl XattrsOf<'_> {
    fn run<R>(
        &self,
        f: impl FnOnce(&InodeArc, &SuperBlock, &Creds, Option<BorrowedFd<'_>>) -> Result<R>,
    ) -> Result<R> {
        self.p.on_file(&self.file, f)
    }

    /// As [`Process::fgetxattr`].
    pub fn get(&self, name: impl AsRef<OsStr>, buf: &mut [u8]) -> Result<usize> {
        let name = check_name(name.as_ref())?;
        let v = self.run(|i, fs, c, fd| Process::xattr_get(i, fs, c, fd, name))?;
        answer(&v, buf)
    }

    /// As [`Process::fsetxattr`].
    pub fn set(&self, name: impl AsRef<OsStr>, value: &[u8], how: XattrFlags) -> Result<()> {
        let name = Process::set_args(name.as_ref(), value, how)?;
        self.run(|i, fs, c, fd| Process::xattr_set(i, fs, c, fd, (name, value, how)))
    }

    /// As [`Process::fremovexattr`].
    pub fn remove(&self, name: impl AsRef<OsStr>) -> Result<()> {
        let name = check_name(name.as_ref())?;
        self.run(|i, fs, c, fd| Process::xattr_remove(i, fs, c, fd, name))
    }

    /// As [`Process::flistxattr`].
    pub fn list(&self, buf: &mut [u8]) -> Result<usize> {
        let list = self.run(|i, fs, c, fd| Process::xattr_list(i, fs, c, fd))?;
        list_answer(&list, buf)
    }
}
