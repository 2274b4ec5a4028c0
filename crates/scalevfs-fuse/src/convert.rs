//! Conversions between the engine's types and the FUSE protocol's.
//!
//! Engine errors are Linux errno values and go to the kernel unchanged, but for `ENOSYS`:
//! to FUSE that means "this operation is not implemented", and the kernel stops asking
//! (after which `access`, for one, succeeds for everybody). Flag values are Linux's on both
//! sides; open flags are filtered to those an engine open understands.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{FileAttr, FileType as FuseType, INodeNo};
use scalevfs::{mode, FileType, OFlags, SetTime, Stat, Timespec};

use crate::nodes::NodeId;

/// The FUSE errno for an engine error: the same number, but `EOPNOTSUPP` for `ENOSYS`.
pub fn errno(e: scalevfs::Errno) -> fuser::Errno {
    if e == scalevfs::Errno::ENOSYS {
        return fuser::Errno::from_i32(scalevfs::Errno::EOPNOTSUPP.raw());
    }
    fuser::Errno::from_i32(e.raw())
}

/// `ESTALE`: a node or handle id the table does not know.
pub fn estale() -> fuser::Errno {
    fuser::Errno::from_i32(116)
}

/// The FUSE file type of an engine one.
pub fn file_type(t: FileType) -> FuseType {
    match t {
        FileType::Regular => FuseType::RegularFile,
        FileType::Directory => FuseType::Directory,
        FileType::Symlink => FuseType::Symlink,
        FileType::Fifo => FuseType::NamedPipe,
        FileType::CharDevice => FuseType::CharDevice,
        FileType::BlockDevice => FuseType::BlockDevice,
        FileType::Socket => FuseType::Socket,
    }
}

/// An engine time as a `SystemTime` (seconds may be negative).
pub fn system_time(t: Timespec) -> SystemTime {
    if t.sec >= 0 {
        UNIX_EPOCH + Duration::new(t.sec as u64, t.nsec)
    } else {
        UNIX_EPOCH - Duration::from_secs(t.sec.unsigned_abs()) + Duration::from_nanos(t.nsec as u64)
    }
}

/// A time fuser parsed from a `setattr` request, back as the (seconds, nanoseconds) pair the
/// kernel sent. fuser 0.18 turns a pre-epoch pair `(-s, n)` into `EPOCH - (s + n ns)` (where
/// `-s + n ns` was meant), so the inverse of *that* recovers the kernel's pair exactly.
pub fn timespec_from_request(t: SystemTime) -> Timespec {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Timespec {
            sec: d.as_secs() as i64,
            nsec: d.subsec_nanos(),
        },
        Err(e) => {
            let d = e.duration();
            Timespec {
                sec: -(d.as_secs() as i64),
                nsec: d.subsec_nanos(),
            }
        }
    }
}

/// A `setattr` time argument as an engine `utimensat` one.
pub fn set_time(t: Option<fuser::TimeOrNow>) -> SetTime {
    match t {
        None => SetTime::Omit,
        Some(fuser::TimeOrNow::Now) => SetTime::Now,
        Some(fuser::TimeOrNow::SpecificTime(t)) => SetTime::Set(timespec_from_request(t)),
    }
}

/// Linux `new_decode_dev`: the 32-bit device number FUSE carries, as (major, minor).
pub fn decode_fuse_dev(dev: u32) -> (u32, u32) {
    ((dev & 0xfff00) >> 8, (dev & 0xff) | ((dev >> 12) & 0xfff00))
}

/// Linux `new_encode_dev`.
pub fn encode_fuse_dev(major: u32, minor: u32) -> u32 {
    (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12)
}

/// glibc `makedev`: the `dev_t` the engine stores in `st_rdev`.
pub fn makedev(major: u32, minor: u32) -> u64 {
    let (ma, mi) = (major as u64, minor as u64);
    ((ma & 0xffff_f000) << 32) | ((ma & 0xfff) << 8) | ((mi & 0xffff_ff00) << 12) | (mi & 0xff)
}

/// glibc `major` and `minor`.
pub fn split_dev(dev: u64) -> (u32, u32) {
    let major = ((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0xfff);
    let minor = ((dev >> 12) & 0xffff_ff00) | (dev & 0xff);
    (major as u32, minor as u32)
}

/// An engine `Stat` as FUSE attributes of node `id`. For objects on the primary device the
/// id is the inode number; fuser sends `attr.ino` as both the node id and `st_ino`.
pub fn attr(id: NodeId, st: &Stat) -> FileAttr {
    let kind = st
        .file_type()
        .map(file_type)
        .unwrap_or(FuseType::RegularFile);
    let (ma, mi) = split_dev(st.rdev);
    FileAttr {
        ino: INodeNo(id.0),
        size: st.size,
        blocks: st.blocks,
        atime: system_time(st.atime),
        mtime: system_time(st.mtime),
        ctime: system_time(st.ctime),
        crtime: system_time(st.ctime),
        kind,
        perm: (st.mode & 0o7777) as u16,
        nlink: st.nlink,
        uid: st.uid,
        gid: st.gid,
        rdev: encode_fuse_dev(ma, mi),
        blksize: st.blksize,
        flags: 0,
    }
}

/// The `mode` of a FUSE `mknod` with its type bits checked, and its device number for the
/// engine.
pub fn mknod_args(mode_in: u32, rdev: u32) -> (u32, u64) {
    let t = mode_in & mode::S_IFMT;
    let dev = if t == mode::S_IFCHR || t == mode::S_IFBLK {
        let (ma, mi) = decode_fuse_dev(rdev);
        makedev(ma, mi)
    } else {
        0
    };
    (mode_in, dev)
}

/// The open flags the kernel sends (`open`, `create`, `opendir`), filtered to those an
/// engine open understands: the access mode and the status flags. The kernel has dropped
/// `O_CREAT`, `O_EXCL` and `O_NOCTTY` from `open` (kept for `create`); `O_TRUNC` arrives
/// only with atomic `O_TRUNC`; `FMODE_EXEC` and other internal bits are dropped.
pub fn open_flags(raw: i32) -> OFlags {
    let keep = OFlags::ACCMODE.0
        | OFlags::CREAT.0
        | OFlags::EXCL.0
        | OFlags::TRUNC.0
        | OFlags::APPEND.0
        | OFlags::NONBLOCK.0
        | OFlags::SYNC.0
        | OFlags::DIRECT.0
        | OFlags::LARGEFILE.0
        | OFlags::DIRECTORY.0
        | OFlags::NOFOLLOW.0
        | OFlags::NOATIME.0;
    OFlags(raw as u32 & keep)
}

/// Linux's `l_type` values.
pub(crate) const F_RDLCK: i32 = 0;
pub(crate) const F_WRLCK: i32 = 1;
pub(crate) const F_UNLCK: i32 = 2;

/// A FUSE lock request (an inclusive range, `end` = `OFFSET_MAX` for the end of the file,
/// and Linux's `l_type`) as the engine's `struct flock`.
pub(crate) fn flock(start: u64, end: u64, typ: i32) -> Result<scalevfs::Flock, fuser::Errno> {
    use scalevfs::LockType;
    let typ = match typ {
        F_RDLCK => LockType::Read,
        F_WRLCK => LockType::Write,
        F_UNLCK => LockType::Unlock,
        _ => return Err(fuser::Errno::EINVAL),
    };
    const OFFSET_MAX: u64 = i64::MAX as u64;
    if start > OFFSET_MAX || end < start {
        return Err(fuser::Errno::EINVAL);
    }
    let len = if end >= OFFSET_MAX {
        0
    } else {
        (end - start + 1) as i64
    };
    Ok(scalevfs::Flock::new(typ, start as i64, len))
}

/// The kernel's lock owner of a request, and its caller's pid.
pub(crate) fn lock_owner(owner: fuser::LockOwner, pid: u32) -> scalevfs::LockOwner {
    scalevfs::LockOwner {
        id: owner.0,
        pid: pid as i32,
    }
}

/// The engine's answer to `F_GETLK` as FUSE's (start, inclusive end, `l_type`).
pub(crate) fn flock_reply(fl: &scalevfs::Flock) -> (u64, u64, i32) {
    use scalevfs::LockType;
    let start = fl.start as u64;
    let end = if fl.len == 0 {
        i64::MAX as u64
    } else {
        start + fl.len as u64 - 1
    };
    let typ = match fl.typ {
        LockType::Read => F_RDLCK,
        LockType::Write => F_WRLCK,
        LockType::Unlock => F_UNLCK,
    };
    (start, end, typ)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_requests_convert_and_bad_ones_are_refused() {
        use scalevfs::LockType;
        let fl = flock(5, 14, F_WRLCK).unwrap();
        assert_eq!((fl.typ, fl.start, fl.len), (LockType::Write, 5, 10));
        assert_eq!(flock_reply(&fl), (5, 14, F_WRLCK));
        let eof = flock(7, i64::MAX as u64, F_RDLCK).unwrap();
        assert_eq!((eof.typ, eof.start, eof.len), (LockType::Read, 7, 0));
        assert_eq!(flock_reply(&eof), (7, i64::MAX as u64, F_RDLCK));
        assert_eq!(flock(0, 0, F_UNLCK).unwrap().typ, LockType::Unlock);
        assert_eq!(flock(0, 1, 3).unwrap_err(), fuser::Errno::EINVAL);
        assert_eq!(flock(5, 4, F_RDLCK).unwrap_err(), fuser::Errno::EINVAL);
        assert_eq!(
            flock(1 << 63, u64::MAX, F_RDLCK).unwrap_err(),
            fuser::Errno::EINVAL
        );
    }

    #[test]
    fn errno_passes_through() {
        for e in [
            scalevfs::Errno::ENOENT,
            scalevfs::Errno::EACCES,
            scalevfs::Errno::ENOTEMPTY,
            scalevfs::Errno::ELOOP,
            scalevfs::Errno::EXDEV,
            scalevfs::Errno::ENAMETOOLONG,
            scalevfs::Errno::EOPNOTSUPP,
        ] {
            assert_eq!(errno(e).code(), e.raw(), "{e:?}");
        }
        assert_eq!(estale().code(), 116);
        // ENOSYS would switch the operation off for the whole mount.
        assert_eq!(errno(scalevfs::Errno::ENOSYS).code(), 95);
    }

    #[test]
    fn device_numbers_round_trip() {
        for (ma, mi) in [(0, 0), (1, 3), (8, 1), (259, 7), (4095, 255), (12, 1 << 19)] {
            let fuse = encode_fuse_dev(ma, mi);
            assert_eq!(decode_fuse_dev(fuse), (ma, mi));
            assert_eq!(split_dev(makedev(ma, mi)), (ma, mi));
        }
        // glibc: makedev(8, 1) == 0x801; the kernel's new_encode_dev(8:1) == 0x801 too.
        assert_eq!(makedev(8, 1), 0x801);
        assert_eq!(encode_fuse_dev(8, 1), 0x801);
        let (m, dev) = mknod_args(mode::S_IFCHR | 0o644, encode_fuse_dev(1, 3));
        assert_eq!((m, dev), (mode::S_IFCHR | 0o644, makedev(1, 3)));
        assert_eq!(mknod_args(mode::S_IFIFO | 0o600, 99).1, 0);
    }

    #[test]
    fn times_round_trip() {
        for t in [
            Timespec { sec: 0, nsec: 0 },
            Timespec {
                sec: 1_700_000_000,
                nsec: 123_456_789,
            },
            Timespec {
                sec: -5,
                nsec: 250_000_000,
            },
        ] {
            let st = system_time(t);
            // What the kernel reads back from fuser's encoding of `st` is `t`.
            let back = match st.duration_since(UNIX_EPOCH) {
                Ok(d) => (d.as_secs() as i64, d.subsec_nanos()),
                Err(e) => {
                    let d = e.duration();
                    if d.subsec_nanos() == 0 {
                        (-(d.as_secs() as i64), 0)
                    } else {
                        (-(d.as_secs() as i64) - 1, 1_000_000_000 - d.subsec_nanos())
                    }
                }
            };
            assert_eq!(back, (t.sec, t.nsec));
        }
        // fuser's parse of the kernel pair (-5, 250ms): EPOCH - 5.25s; we recover (-5, 250ms).
        let parsed = UNIX_EPOCH - Duration::new(5, 250_000_000);
        assert_eq!(
            timespec_from_request(parsed),
            Timespec {
                sec: -5,
                nsec: 250_000_000
            }
        );
        assert_eq!(set_time(None), SetTime::Omit);
        assert_eq!(set_time(Some(fuser::TimeOrNow::Now)), SetTime::Now);
    }

    #[test]
    fn attributes() {
        let st = Stat {
            dev: 1,
            ino: 42,
            mode: mode::S_IFREG | 0o4755,
            nlink: 2,
            uid: 7,
            gid: 8,
            size: 10,
            blksize: 4096,
            blocks: 8,
            ..Default::default()
        };
        let a = attr(NodeId(42), &st);
        assert_eq!(a.ino, INodeNo(42));
        assert_eq!(a.kind, FuseType::RegularFile);
        assert_eq!(a.perm, 0o4755);
        assert_eq!((a.nlink, a.uid, a.gid, a.size, a.blocks), (2, 7, 8, 10, 8));
        let dir = Stat {
            mode: mode::S_IFDIR | 0o1777,
            ..st
        };
        assert_eq!(attr(NodeId(1), &dir).kind, FuseType::Directory);
    }

    #[test]
    fn open_flags_are_filtered() {
        const FMODE_EXEC: i32 = 0o40;
        let f = open_flags(OFlags::RDWR.0 as i32 | OFlags::APPEND.0 as i32 | FMODE_EXEC);
        assert_eq!(f, OFlags::RDWR | OFlags::APPEND);
        let c = open_flags((OFlags::WRONLY | OFlags::CREAT | OFlags::EXCL).0 as i32);
        assert_eq!(c, OFlags::WRONLY | OFlags::CREAT | OFlags::EXCL);
        assert!(!open_flags(OFlags::PATH.0 as i32).contains(OFlags::PATH));
    }
}
