//! File locks: `flock(2)` and `fcntl(2)`'s record locks (`F_GETLK`, `F_SETLK`, `F_SETLKW`
//! and their OFD forms), with Linux's argument checks in its order. The records, the
//! waiting and the deadlock detection are `filelock`'s; this layer turns a call into a
//! request: its owner, its byte range, and how to tell that its descriptor was closed
//! while it ran.

use super::*;
use crate::file::FileRef;
use crate::filelock::{self, Owner, Rec, OFFSET_MAX};
use crate::types::{FlockOp, LockCmd, LockOwner, LockType, Whence};

/// `LOCK_MAND`: accepted and ignored (Linux warns once and returns 0).
const LOCK_MAND: u32 = 32;

impl Process {
    /// `flock(2)`: a shared ([`FlockOp::SH`]) or exclusive ([`FlockOp::EX`]) lock on the
    /// whole file, owned by the open file description: every descriptor and handle of the
    /// description shares it, and it goes with the description's last one, or with
    /// [`FlockOp::UN`]. With [`FlockOp::NB`], `EWOULDBLOCK` (`EAGAIN`) instead of waiting.
    /// A conversion drops the old lock before it waits for the new one, as on Linux. The
    /// locks are the engine's (on a hostfs mount too): they bind callers of this engine.
    ///
    /// ```
    /// use scalevfs::{Creds, Errno, FlockOp, OFlags, Vfs};
    /// let p = Vfs::new_memfs().process(Creds::root());
    /// let a = p.open("/db", OFlags::CREAT | OFlags::RDWR, 0o644)?;
    /// let b = p.open("/db", OFlags::RDWR, 0)?;
    /// p.flock(a, FlockOp::EX)?;
    /// assert_eq!(p.flock(b, FlockOp::SH | FlockOp::NB), Err(Errno::EAGAIN));
    /// p.close(a)?; // the description's last descriptor: its lock goes
    /// p.flock(b, FlockOp::SH | FlockOp::NB)?;
    /// # Ok::<(), Errno>(())
    /// ```
    pub fn flock(&self, fd: impl Desc, op: FlockOp) -> Result<()> {
        if op.0 & LOCK_MAND != 0 {
            return Ok(());
        }
        let want = match op.0 & !FlockOp::NB.0 {
            1 => Some(false),
            2 => Some(true),
            8 => None,
            _ => return Err(Errno::EINVAL),
        };
        let f = self.file(fd)?;
        if f.is_path() {
            return Err(Errno::EBADF);
        }
        let Owner::Desc(desc) = f.lock_owner() else {
            unreachable!("a description owns its flock locks")
        };
        filelock::global().flock(&f.inode, desc, want, !op.contains(FlockOp::NB), || {
            f.is_referenced()
        })
    }

    /// `fcntl(2)`'s record locks on `fd`: `F_GETLK`, `F_SETLK`, `F_SETLKW` (locks of this
    /// process: every descriptor of it shares them, and a close of any of its descriptors
    /// of the file drops them all) and `F_OFD_*` (locks of the open file description,
    /// dropped with its last descriptor). For `GetLk`, `lock` is filled in with the first
    /// conflicting lock, or its type set to [`LockType::Unlock`]. `SetLkW` fails with
    /// `EDEADLK` when waiting would close a cycle of processes waiting for each other, as
    /// Linux's detector finds them. `ENOLCK` past [`limits::LOCKS_PER_FILE`] records on one
    /// file.
    ///
    /// ```
    /// use scalevfs::{Creds, Errno, Flock, LockCmd, LockType, OFlags, Vfs};
    /// let vfs = Vfs::new_memfs();
    /// let (p, q) = (vfs.process(Creds::root()), vfs.process(Creds::root()));
    /// let a = p.open("/data", OFlags::CREAT | OFlags::RDWR, 0o644)?;
    /// p.fcntl_lock(a, LockCmd::SetLk, &mut Flock::new(LockType::Write, 0, 100))?;
    /// let b = q.open("/data", OFlags::RDWR, 0)?;
    /// let mut probe = Flock::new(LockType::Read, 50, 1);
    /// q.fcntl_lock(b, LockCmd::GetLk, &mut probe)?;
    /// assert_eq!((probe.typ, probe.start, probe.len), (LockType::Write, 0, 100));
    /// assert_eq!(probe.pid as u64, p.lock_owner_id());
    /// let mut past = Flock::new(LockType::Write, 100, 0);
    /// q.fcntl_lock(b, LockCmd::SetLk, &mut past)?; // bytes 100 and on are free
    /// # Ok::<(), Errno>(())
    /// ```
    pub fn fcntl_lock(&self, fd: Fd, cmd: LockCmd, lock: &mut Flock) -> Result<()> {
        let f = self.file(fd)?;
        let id = self.files.id();
        let (owner, pid) = if cmd.is_ofd() {
            (f.lock_owner(), -1)
        } else {
            (Owner::Process(id), id as i32 & i32::MAX)
        };
        self.record_lock(&f, owner, pid, cmd, lock, || match owner {
            Owner::Desc(_) => f.is_referenced(),
            _ => self.files.still_maps(fd, &f),
        })
    }

    /// [`Process::fcntl_lock`] for a frontend that names its callers' lock owners itself
    /// (the FUSE server: the kernel's `lock_owner` and pid). The record-lock commands take
    /// and test locks of `owner`; the OFD commands, of `h`'s description. `F_GETLK`
    /// reports a lock of an engine process with pid 0 (its number is no pid of the
    /// frontend's callers), a frontend owner's with its pid, an OFD lock's with -1. The
    /// frontend
    /// drops an owner's locks with [`Process::unlock_owner`] when the owner closes the file
    /// (FUSE's flush); what it leaves goes when the file is evicted.
    pub fn fcntl_lock_as(
        &self,
        h: &Handle,
        owner: LockOwner,
        cmd: LockCmd,
        lock: &mut Flock,
    ) -> Result<()> {
        let f = self.file(h)?;
        let (o, pid) = if cmd.is_ofd() {
            (f.lock_owner(), -1)
        } else {
            (Owner::Frontend(owner.id), owner.pid)
        };
        self.record_lock(&f, o, pid, cmd, lock, || f.is_referenced())
    }

    /// Drops every record lock that the frontend's `owner` holds on `h`'s file (the POSIX
    /// rule for a close, which a frontend applies when it learns of one). The owner's
    /// requests still waiting go on, as on Linux.
    pub fn unlock_owner(&self, h: &Handle, owner: u64) -> Result<()> {
        let f = self.file(h)?;
        filelock::global().drop_owner(&f.inode, Owner::Frontend(owner));
        Ok(())
    }

    /// This process's number as a lock owner: what `F_GETLK` reports as the `pid` of its
    /// record locks. Unique among the processes of this program, never reused; a
    /// [`Process::fork`] is another.
    pub fn lock_owner_id(&self) -> u64 {
        self.files.id()
    }

    fn record_lock(
        &self,
        f: &FileRef,
        owner: Owner,
        pid: i32,
        cmd: LockCmd,
        lock: &mut Flock,
        open: impl Fn() -> bool,
    ) -> Result<()> {
        // fcntl(2) on an O_PATH descriptor takes only the descriptor-flag commands.
        if f.is_path() {
            return Err(Errno::EBADF);
        }
        let get = matches!(cmd, LockCmd::GetLk | LockCmd::OfdGetLk);
        // fcntl_getlk: the type first (F_OFD_GETLK takes F_UNLCK: a probe for the
        // description's own locks); then the range; then an OFD pid.
        if cmd == LockCmd::GetLk && lock.typ == LockType::Unlock {
            return Err(Errno::EINVAL);
        }
        let (start, end) = byte_range(f, lock)?;
        // fcntl_setlk: the range, then the description's mode, then an OFD pid.
        if !get {
            let ok = match lock.typ {
                LockType::Read => f.flags.readable(),
                LockType::Write => f.flags.writable(),
                LockType::Unlock => true,
            };
            if !ok {
                return Err(Errno::EBADF);
            }
        }
        if cmd.is_ofd() && lock.pid != 0 {
            return Err(Errno::EINVAL);
        }
        let req = Rec {
            owner,
            write: lock.typ == LockType::Write,
            start,
            end,
            pid,
        };
        let locks = filelock::global();
        if get {
            match locks.test(&f.inode, &req, lock.typ == LockType::Unlock) {
                None => lock.typ = LockType::Unlock,
                Some(r) => {
                    lock.typ = if r.write {
                        LockType::Write
                    } else {
                        LockType::Read
                    };
                    lock.whence = Whence::Set;
                    lock.start = r.start as i64;
                    lock.len = if r.end == OFFSET_MAX {
                        0
                    } else {
                        (r.end - r.start + 1) as i64
                    };
                    lock.pid = match r.owner {
                        Owner::Desc(_) => -1,
                        // A frontend's callers know no engine process by number.
                        Owner::Process(_) if matches!(owner, Owner::Frontend(_)) => 0,
                        _ => r.pid,
                    };
                }
            }
            return Ok(());
        }
        let wait = matches!(cmd, LockCmd::SetLkW | LockCmd::OfdSetLkW);
        locks.set_posix(&f.inode, req, lock.typ == LockType::Unlock, wait, open)
    }
}

/// The inclusive byte range of `lock` on `f`, as Linux's `flock_to_posix_lock` computes
/// it: `EINVAL` for a bad `whence` or a range that starts before byte 0, `EOVERFLOW` for
/// one that ends past `OFFSET_MAX`.
fn byte_range(f: &FileRef, lock: &Flock) -> Result<(u64, u64)> {
    let base: i64 = match lock.whence {
        Whence::Set => 0,
        Whence::Cur => i64::try_from(*f.pos.lock()).map_err(|_| Errno::EOVERFLOW)?,
        Whence::End => i64::try_from(f.inode.size()).map_err(|_| Errno::EOVERFLOW)?,
        Whence::Data | Whence::Hole => return Err(Errno::EINVAL),
    };
    if lock.start > i64::MAX - base {
        return Err(Errno::EOVERFLOW);
    }
    let mut start = base + lock.start;
    if start < 0 {
        return Err(Errno::EINVAL);
    }
    let end;
    if lock.len > 0 {
        if lock.len - 1 > i64::MAX - start {
            return Err(Errno::EOVERFLOW);
        }
        // Linux's order of terms: `start + len` alone can pass `i64::MAX`.
        end = start + (lock.len - 1);
    } else if lock.len < 0 {
        end = start - 1;
        start += lock.len;
        if start < 0 {
            return Err(Errno::EINVAL);
        }
    } else {
        end = i64::MAX;
    }
    Ok((start as u64, end as u64))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::{Creds, Vfs};

    /// The close/lock race, in the order that loses: the request holds its description,
    /// and the descriptor is closed before the lock is in place. No lock may outlive the
    /// close. A process's lock answers `EBADF`, as Linux's `fcntl_setlk` does; a
    /// description's (OFD, flock) succeeds, as on Linux, where the final close drops it.
    #[test]
    fn a_lock_set_on_a_description_closed_meanwhile_is_undone() {
        let vfs = Vfs::new_memfs();
        let (p, q) = (vfs.process(Creds::root()), vfs.process(Creds::root()));
        let fd = p.open("/f", OFlags::CREAT | OFlags::RDWR, 0o644).unwrap();
        let f = p.file(fd).unwrap(); // the request's reference, taken before the close
        p.close(fd).unwrap();
        let g = q.open("/f", OFlags::RDWR, 0).unwrap();
        let free = || {
            let mut probe = Flock::new(LockType::Write, 0, 0);
            q.fcntl_lock(g, LockCmd::GetLk, &mut probe).unwrap();
            probe.typ == LockType::Unlock
        };
        let mut fl = Flock::new(LockType::Write, 0, 1);
        let mine = Owner::Process(p.files.id());
        let r = p.record_lock(&f, mine, 1, LockCmd::SetLk, &mut fl, || {
            p.files.still_maps(fd, &f)
        });
        assert_eq!(r, Err(Errno::EBADF));
        assert!(free(), "a process's lock outlived the close");
        let mut fl = Flock::new(LockType::Write, 0, 1);
        let ofd = f.lock_owner();
        p.record_lock(&f, ofd, -1, LockCmd::OfdSetLk, &mut fl, || {
            f.is_referenced()
        })
        .unwrap();
        assert!(free(), "an OFD lock outlived its description");
        let Owner::Desc(desc) = ofd else {
            unreachable!("a description owns its OFD locks")
        };
        filelock::global()
            .flock(&f.inode, desc, Some(true), false, || f.is_referenced())
            .unwrap();
        q.flock(g, FlockOp::EX | FlockOp::NB)
            .expect("a flock lock outlived its description");
    }
}
