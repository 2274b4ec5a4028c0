//! A host directory for scalevfs, confined beneath it.
//!
//! This crate is the first piece of the host backend (issue 10): path resolution inside a
//! host directory that never leaves it, whatever symlinks and `..` say and whatever renames
//! race with it. The engine does not use it yet; the backend trait that will is still to
//! come.
//!
//! # Semantics
//! [`HostRoot::open`] resolves a path as if the directory were `/` (a `chroot`, or
//! `openat2`'s `RESOLVE_IN_ROOT`): `..` at the root stays at the root, an absolute symlink
//! starts again at the root, and "magic links" (`/proc/<pid>/fd/*`, `/proc/<pid>/root`,
//! ...) are never followed. Every other answer is the host kernel's: its errno passes
//! through unchanged (`ENOENT`, `ENOTDIR`, `ELOOP` after 40 links, `EACCES`, `ENOSPC`, ...).
//! Special files are opened only when asked for; `O_NOCTTY` and `O_CLOEXEC` are always set.
//!
//! # Two resolvers
//! - [`Resolver::Openat2`]: one `openat2(root, path, RESOLVE_IN_ROOT |
//!   RESOLVE_NO_MAGICLINKS)` call. The kernel refuses a walk that a concurrent rename or
//!   mount could have moved outside (`EAGAIN`); the call is retried a bounded number of
//!   times and then handed to the walker, which needs no retry.
//! - [`Resolver::Walk`], where the kernel has no `openat2` (before Linux 5.6): one
//!   component at a time from held directory descriptors. Each step is
//!   `openat(dir, name, O_PATH | O_NOFOLLOW)`, so the kernel never follows a symlink or `..`
//!   for it; symlinks are read (`readlinkat`) and their text is resolved by the walker, and
//!   `..` pops the walker's own stack of directories, so it can never rise above the root,
//!   even when a directory it stands in is moved elsewhere meanwhile (it then resolves
//!   `..` by where it came from, not by where the directory is now). Magic links are
//!   read as text, which cannot name anything outside.
//!
//! # What protects what
//! No locks and no shared state: a [`HostRoot`] is an open descriptor of the directory and
//! the choice of resolver; it can be used from any number of threads.

use std::collections::VecDeque;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{self as rfs, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// Longest path accepted, with its terminating NUL (Linux `PATH_MAX`).
pub const PATH_MAX: usize = 4096;
/// Symlinks followed in one resolution before `ELOOP` (Linux `MAXSYMLINKS`).
pub const MAX_SYMLINKS: u32 = 40;
/// `EAGAIN`s from `openat2` (a rename or mount raced with a `..`) before the walker takes
/// over.
const OPENAT2_TRIES: u32 = 16;

/// How paths are resolved beneath the root (see the crate docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolver {
    /// The kernel's `openat2` with `RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS`.
    Openat2,
    /// The per-component walker from held directory descriptors.
    Walk,
}

/// A host directory, and the resolution of paths beneath it.
#[derive(Debug)]
pub struct HostRoot {
    root: OwnedFd,
    resolver: Resolver,
}

impl HostRoot {
    /// The directory `dir`, with `openat2` where the kernel has it and the walker
    /// otherwise.
    pub fn new(dir: &Path) -> Result<HostRoot, Errno> {
        let root = rfs::open(
            dir,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let probe = rfs::openat2(
            &root,
            ".",
            OFlags::PATH | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
        );
        let resolver = match probe {
            Err(Errno::NOSYS) => Resolver::Walk,
            _ => Resolver::Openat2,
        };
        Ok(HostRoot { root, resolver })
    }

    /// The directory `dir`, with the given resolver (for tests, and to compare the two).
    pub fn with_resolver(dir: &Path, resolver: Resolver) -> Result<HostRoot, Errno> {
        let mut r = HostRoot::new(dir)?;
        r.resolver = resolver;
        Ok(r)
    }

    /// The resolver in use.
    pub fn resolver(&self) -> Resolver {
        self.resolver
    }

    /// The root directory (an `O_PATH` descriptor).
    pub fn root(&self) -> BorrowedFd<'_> {
        self.root.as_fd()
    }

    /// Opens `path`, resolved beneath the root (see the crate docs), with `open(2)`'s
    /// `flags` and `mode`. `O_NOFOLLOW` applies to the last component, as in `open(2)`.
    pub fn open(&self, path: &Path, flags: OFlags, mode: Mode) -> Result<OwnedFd, Errno> {
        let p = path.as_os_str().as_bytes();
        if p.is_empty() {
            return Err(Errno::NOENT);
        }
        if p.len() >= PATH_MAX {
            return Err(Errno::NAMETOOLONG);
        }
        if p.contains(&0) {
            return Err(Errno::INVAL);
        }
        let flags = if flags.contains(OFlags::PATH) {
            // `open(2)` ignores other flags with `O_PATH`; `openat2` refuses them.
            flags & (OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW) | OFlags::CLOEXEC
        } else {
            flags | OFlags::CLOEXEC | OFlags::NOCTTY
        };
        // `open(2)` ignores the mode unless it creates; `openat2` refuses one (`EINVAL`).
        // (`OFlags::TMPFILE` includes `O_DIRECTORY`'s bit: test it whole.)
        let mode = if flags.contains(OFlags::CREATE) || flags.contains(OFlags::TMPFILE) {
            mode
        } else {
            Mode::empty()
        };
        if self.resolver == Resolver::Openat2 {
            for _ in 0..OPENAT2_TRIES {
                match rfs::openat2(
                    &self.root,
                    path,
                    flags,
                    mode,
                    ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
                ) {
                    Err(Errno::AGAIN) => continue,
                    r => return r,
                }
            }
        }
        self.walk(p, flags, mode)
    }

    /// The per-component walker (see the crate docs).
    fn walk(&self, path: &[u8], flags: OFlags, mode: Mode) -> Result<OwnedFd, Errno> {
        let follow_last = !flags.contains(OFlags::NOFOLLOW);
        // Directories from the root (not included) to where the walk stands.
        let mut stack: Vec<OwnedFd> = Vec::new();
        let mut pending: VecDeque<Vec<u8>> = VecDeque::new();
        push_front(&mut pending, path);
        let mut links = 0u32;
        while let Some(c) = pending.pop_front() {
            let last = pending.is_empty();
            let cur = stack.last().map_or(self.root.as_fd(), |d| d.as_fd());
            match c.as_slice() {
                b"." | b".." => {
                    if c == b".." {
                        stack.pop();
                    }
                    if last {
                        let cur = stack.last().map_or(self.root.as_fd(), |d| d.as_fd());
                        return rfs::openat(cur, ".", flags, mode);
                    }
                }
                name if !last => {
                    let fd = rfs::openat(
                        cur,
                        name,
                        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                        Mode::empty(),
                    )?;
                    match rfs::fstat(&fd).map(|s| FileType::from_raw_mode(s.st_mode))? {
                        FileType::Symlink => {
                            links += 1;
                            if links > MAX_SYMLINKS {
                                return Err(Errno::LOOP);
                            }
                            let target = rfs::readlinkat(&fd, "", Vec::new())?;
                            if target.as_bytes().first() == Some(&b'/') {
                                stack.clear();
                            }
                            push_front(&mut pending, target.as_bytes());
                        }
                        FileType::Directory => stack.push(fd),
                        _ => return Err(Errno::NOTDIR),
                    }
                }
                name => {
                    let mut opened = None;
                    match rfs::openat(cur, name, flags | OFlags::NOFOLLOW, mode) {
                        Ok(fd) => {
                            // `O_PATH | O_NOFOLLOW` opens a symlink itself: follow it if asked.
                            let is_link = flags.contains(OFlags::PATH)
                                && follow_last
                                && rfs::fstat(&fd).map(|s| FileType::from_raw_mode(s.st_mode))?
                                    == FileType::Symlink;
                            if !is_link {
                                return Ok(fd);
                            }
                        }
                        // Perhaps a symlink, which `open` would follow: with `O_NOFOLLOW` the
                        // kernel refuses one with `ELOOP`, or with `ENOTDIR` under
                        // `O_DIRECTORY` (its type check comes first).
                        Err(e @ (Errno::LOOP | Errno::NOTDIR)) if follow_last => {
                            opened = Some(e);
                        }
                        Err(e) => return Err(e),
                    }
                    // Each link followed, and each look again, counts against the limit, so
                    // a name that keeps changing cannot keep the walk going.
                    links += 1;
                    if links > MAX_SYMLINKS {
                        return Err(Errno::LOOP);
                    }
                    let target = match rfs::readlinkat(cur, name, Vec::new()) {
                        Ok(t) => t,
                        // Not a symlink: `ENOTDIR` was the answer. After `ELOOP`, it was
                        // replaced by a non-link meanwhile: walk this component again.
                        Err(Errno::INVAL) if opened == Some(Errno::NOTDIR) => {
                            return Err(Errno::NOTDIR)
                        }
                        Err(Errno::INVAL) => {
                            pending.push_front(c);
                            continue;
                        }
                        Err(e) => return Err(e),
                    };
                    if target.as_bytes().first() == Some(&b'/') {
                        stack.clear();
                    }
                    push_front(&mut pending, target.as_bytes());
                }
            }
        }
        // Only "/" (or a path of slashes) leaves nothing to open: the root itself.
        rfs::openat(&self.root, ".", flags, mode)
    }
}

/// Puts `path`'s components in front of `pending`. A trailing slash becomes a final `.`,
/// so that the last name must be a directory (a symlink to one is followed).
fn push_front(pending: &mut VecDeque<Vec<u8>>, path: &[u8]) {
    let mut comps: Vec<Vec<u8>> = path
        .split(|&b| b == b'/')
        .filter(|c| !c.is_empty())
        .map(|c| c.to_vec())
        .collect();
    if path.last() == Some(&b'/') && !comps.is_empty() {
        comps.push(b".".to_vec());
    }
    for c in comps.into_iter().rev() {
        pending.push_front(c);
    }
}

/// Where the kernel says descriptor `fd` leads (its `/proc/self/fd` link), for tests and
/// diagnostics.
pub fn fd_path(fd: BorrowedFd<'_>) -> Result<Vec<u8>, Errno> {
    use std::os::fd::AsRawFd;
    let link = format!("/proc/self/fd/{}", fd.as_raw_fd());
    rfs::readlink(link.as_str(), Vec::new()).map(|c| c.into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_and_trailing_slashes() {
        let mut q = VecDeque::new();
        push_front(&mut q, b"//a//b/");
        assert_eq!(q, [b"a".to_vec(), b"b".to_vec(), b".".to_vec()]);
        push_front(&mut q, b"x/y");
        assert_eq!(q[0], b"x");
        assert_eq!(q[1], b"y");
        assert_eq!(q[2], b"a");
        let mut q = VecDeque::new();
        push_front(&mut q, b"/");
        assert!(q.is_empty());
    }
}
