//! Plain data types of the POSIX API: flags, file types, stat buffers, times.
//!
//! Flag values are Linux's, so a FUSE or C frontend passes them through unchanged.

use std::ops::{BitAnd, BitOr, BitOrAssign};
use std::sync::atomic::Ordering::Relaxed;

macro_rules! flags {
    ($(#[$m:meta])* $name:ident : $t:ty { $($(#[$fm:meta])* $f:ident = $v:expr;)* }) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default, Debug)]
        pub struct $name(pub $t);
        impl $name {
            $($(#[$fm])* pub const $f: $name = $name($v);)*
            /// No flag set.
            pub const fn empty() -> Self { $name(0) }
            /// Whether every bit of `other` is set in `self`.
            pub const fn contains(self, other: Self) -> bool { self.0 & other.0 == other.0 }
            /// Whether any bit of `other` is set in `self`.
            pub const fn intersects(self, other: Self) -> bool { self.0 & other.0 != 0 }
            /// The raw bits.
            pub const fn bits(self) -> $t { self.0 }
        }
        impl BitOr for $name { type Output = Self; fn bitor(self, o: Self) -> Self { $name(self.0 | o.0) } }
        impl BitOrAssign for $name { fn bitor_assign(&mut self, o: Self) { self.0 |= o.0 } }
        impl BitAnd for $name { type Output = Self; fn bitand(self, o: Self) -> Self { $name(self.0 & o.0) } }
    };
}

flags! {
    /// `open(2)` flags, Linux values.
    OFlags: u32 {
        /// Open for reading only (the access mode is the low two bits).
        RDONLY = 0;
        /// Open for writing only.
        WRONLY = 0o1;
        /// Open for reading and writing.
        RDWR = 0o2;
        /// Mask of the access mode bits.
        ACCMODE = 0o3;
        /// Create the file if it does not exist.
        CREAT = 0o100;
        /// With `CREAT`, fail with `EEXIST` if the name exists.
        EXCL = 0o200;
        /// Accepted and ignored.
        NOCTTY = 0o400;
        /// Truncate a regular file to length 0.
        TRUNC = 0o1000;
        /// Every write appends.
        APPEND = 0o2000;
        /// Accepted and ignored: memfs never blocks.
        NONBLOCK = 0o4000;
        /// Accepted and ignored.
        DSYNC = 0o10000;
        /// Accepted and ignored.
        DIRECT = 0o40000;
        /// Accepted and ignored.
        LARGEFILE = 0o100000;
        /// Fail with `ENOTDIR` unless the path names a directory.
        DIRECTORY = 0o200000;
        /// Fail with `ELOOP` if the last component is a symlink.
        NOFOLLOW = 0o400000;
        /// Accepted and ignored.
        NOATIME = 0o1000000;
        /// Close on exec: recorded, no exec exists here.
        CLOEXEC = 0o2000000;
        /// Accepted and ignored.
        SYNC = 0o4010000;
        /// A descriptor that names a location only.
        PATH = 0o10000000;
        /// An unnamed regular file in the given directory (includes `DIRECTORY`).
        TMPFILE = 0o20200000;
    }
}

impl OFlags {
    /// Whether the access mode allows reading.
    pub fn readable(self) -> bool {
        matches!(self.0 & 3, 0 | 2)
    }
    /// Whether the access mode allows writing.
    pub fn writable(self) -> bool {
        matches!(self.0 & 3, 1 | 2)
    }
}

flags! {
    /// `*at(2)` flags, Linux values.
    AtFlags: u32 {
        /// Do not follow a final symlink.
        SYMLINK_NOFOLLOW = 0x100;
        /// `unlinkat`: remove a directory.
        REMOVEDIR = 0x200;
        /// `faccessat`: check with the effective ids (same bit as `REMOVEDIR`, as on Linux).
        EACCESS = 0x200;
        /// `linkat`: follow a final symlink in the old path.
        SYMLINK_FOLLOW = 0x400;
        /// An empty path names `dirfd` itself.
        EMPTY_PATH = 0x1000;
    }
}

flags! {
    /// `renameat2(2)` flags.
    RenameFlags: u32 {
        /// Fail with `EEXIST` if the new name exists.
        NOREPLACE = 1;
        /// Swap the two names atomically; both must exist.
        EXCHANGE = 2;
        /// Not supported (`EINVAL`).
        WHITEOUT = 4;
    }
}

flags! {
    /// `fallocate(2)` modes, Linux values. tmpfs (and so memfs) does space allocation (no
    /// bit), `KEEP_SIZE`, and `PUNCH_HOLE | KEEP_SIZE`; the other modes are `EOPNOTSUPP`.
    FallocFlags: u32 {
        /// Do not change the file size.
        KEEP_SIZE = 0x01;
        /// Free the range (with `KEEP_SIZE`).
        PUNCH_HOLE = 0x02;
        /// Remove the range, shifting what follows (not on tmpfs).
        COLLAPSE_RANGE = 0x08;
        /// Zero the range (not on tmpfs).
        ZERO_RANGE = 0x10;
        /// Insert a hole, shifting what follows (not on tmpfs).
        INSERT_RANGE = 0x20;
        /// Unshare shared blocks (not on tmpfs).
        UNSHARE_RANGE = 0x40;
        /// Zero the range by writing (not on tmpfs).
        WRITE_ZEROES = 0x80;
    }
}

flags! {
    /// `setxattr(2)` flags, Linux values; neither: create or replace.
    XattrFlags: u32 {
        /// Fail with `EEXIST` if the attribute exists.
        CREATE = 1;
        /// Fail with `ENODATA` unless the attribute exists.
        REPLACE = 2;
    }
}

flags! {
    /// `flock(2)` operations, Linux values: one of `SH`, `EX` or `UN`, with `NB` or not.
    /// Any other combination is `EINVAL`; `LOCK_MAND` (32) is accepted and ignored, as
    /// Linux does.
    FlockOp: u32 {
        /// A shared lock.
        SH = 1;
        /// An exclusive lock.
        EX = 2;
        /// Fail with `EWOULDBLOCK` instead of waiting.
        NB = 4;
        /// Drop the description's lock.
        UN = 8;
    }
}

/// A record lock's type (`l_type`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum LockType {
    /// `F_RDLCK`: shared; needs a description open for reading.
    Read,
    /// `F_WRLCK`: exclusive; needs a description open for writing.
    Write,
    /// `F_UNLCK`: remove (for `F_GETLK`'s answer: nothing conflicts).
    Unlock,
}

/// `struct flock`: a byte range and a lock type, for [`crate::Process::fcntl_lock`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Flock {
    /// The lock's type.
    pub typ: LockType,
    /// What `start` counts from: [`Whence::Set`], [`Whence::Cur`] (the description's
    /// offset) or [`Whence::End`] (the file's size); the others are `EINVAL`.
    pub whence: Whence,
    /// The first byte, from `whence`; may be negative from `Cur` or `End`.
    pub start: i64,
    /// How many bytes; 0 runs to the end of the file however it grows; negative counts
    /// back from `start` (the range `[start + len, start - 1]`).
    pub len: i64,
    /// For `F_GETLK`, the holder of a conflicting lock: its process's number
    /// ([`crate::Process::lock_owner_id`], or a frontend's pid), or -1 for an OFD lock.
    /// For the OFD commands it must be 0 (`EINVAL`); otherwise ignored.
    pub pid: i32,
}

impl Flock {
    /// A lock of `typ` on `len` bytes from `start` (from the start of the file).
    pub fn new(typ: LockType, start: i64, len: i64) -> Flock {
        Flock {
            typ,
            whence: Whence::Set,
            start,
            len,
            pid: 0,
        }
    }
}

/// `fcntl(2)`'s record-lock commands.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum LockCmd {
    /// `F_GETLK`: the first lock that would conflict, or `LockType::Unlock`.
    GetLk,
    /// `F_SETLK`: take or drop a lock of the process; `EAGAIN` on a conflict.
    SetLk,
    /// `F_SETLKW`: the same, waiting out conflicts (`EDEADLK` if that would deadlock).
    SetLkW,
    /// `F_OFD_GETLK`: as `GetLk`, for a lock of the description; and of
    /// [`LockType::Unlock`], the description's own first lock in the range (Linux 6.12).
    OfdGetLk,
    /// `F_OFD_SETLK`: a lock owned by the open file description, not the process.
    OfdSetLk,
    /// `F_OFD_SETLKW`: the same, waiting out conflicts.
    OfdSetLkW,
}

impl LockCmd {
    /// Whether the lock is the description's (an OFD command).
    pub fn is_ofd(self) -> bool {
        matches!(
            self,
            LockCmd::OfdGetLk | LockCmd::OfdSetLk | LockCmd::OfdSetLkW
        )
    }
}

/// An owner of record locks named by a frontend (FUSE's `lock_owner`), with the pid that
/// `F_GETLK` reports for its locks; see [`crate::Process::fcntl_lock_as`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct LockOwner {
    /// The owner.
    pub id: u64,
    /// The pid reported for its locks.
    pub pid: i32,
}

flags! {
    /// `access(2)` mode bits.
    Access: u32 {
        /// Existence only.
        F_OK = 0;
        /// Execute / search.
        X_OK = 1;
        /// Write.
        W_OK = 2;
        /// Read.
        R_OK = 4;
    }
}

/// A file descriptor in a [`crate::Process`]'s table.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct Fd(pub i32);

impl Fd {
    /// The current working directory, for the `*at` calls.
    pub const CWD: Fd = Fd(-100);
}

/// File mode type bits (`S_IFMT` and friends).
pub mod mode {
    /// Mask of the type bits.
    pub const S_IFMT: u32 = 0o170000;
    /// Socket.
    pub const S_IFSOCK: u32 = 0o140000;
    /// Symbolic link.
    pub const S_IFLNK: u32 = 0o120000;
    /// Regular file.
    pub const S_IFREG: u32 = 0o100000;
    /// Block device.
    pub const S_IFBLK: u32 = 0o060000;
    /// Directory.
    pub const S_IFDIR: u32 = 0o040000;
    /// Character device.
    pub const S_IFCHR: u32 = 0o020000;
    /// FIFO.
    pub const S_IFIFO: u32 = 0o010000;
    /// Set-user-id.
    pub const S_ISUID: u32 = 0o4000;
    /// Set-group-id.
    pub const S_ISGID: u32 = 0o2000;
    /// Sticky.
    pub const S_ISVTX: u32 = 0o1000;
}

/// The type of a file, as in `st_mode & S_IFMT` and `d_type`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum FileType {
    /// Regular file.
    Regular,
    /// Directory.
    Directory,
    /// Symbolic link.
    Symlink,
    /// FIFO.
    Fifo,
    /// Character device.
    CharDevice,
    /// Block device.
    BlockDevice,
    /// Socket.
    Socket,
}

impl FileType {
    /// The type of a full `st_mode`, if its type bits are valid.
    pub fn from_mode(m: u32) -> Option<FileType> {
        Some(match m & mode::S_IFMT {
            mode::S_IFREG => FileType::Regular,
            mode::S_IFDIR => FileType::Directory,
            mode::S_IFLNK => FileType::Symlink,
            mode::S_IFIFO => FileType::Fifo,
            mode::S_IFCHR => FileType::CharDevice,
            mode::S_IFBLK => FileType::BlockDevice,
            mode::S_IFSOCK => FileType::Socket,
            _ => return None,
        })
    }

    /// The `S_IF*` bits of this type.
    pub fn mode_bits(self) -> u32 {
        match self {
            FileType::Regular => mode::S_IFREG,
            FileType::Directory => mode::S_IFDIR,
            FileType::Symlink => mode::S_IFLNK,
            FileType::Fifo => mode::S_IFIFO,
            FileType::CharDevice => mode::S_IFCHR,
            FileType::BlockDevice => mode::S_IFBLK,
            FileType::Socket => mode::S_IFSOCK,
        }
    }

    /// Whether it is a directory.
    pub fn is_dir(self) -> bool {
        self == FileType::Directory
    }

    /// Whether it is a regular file.
    pub fn is_file(self) -> bool {
        self == FileType::Regular
    }

    /// Whether it is a symbolic link.
    pub fn is_symlink(self) -> bool {
        self == FileType::Symlink
    }

    /// The `d_type` value (`DT_*`).
    pub fn d_type(self) -> u8 {
        (self.mode_bits() >> 12) as u8
    }
}

/// A point in time: seconds and nanoseconds since the epoch.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct Timespec {
    /// Seconds since 1970-01-01 UTC.
    pub sec: i64,
    /// Nanoseconds, `0..1_000_000_000`.
    pub nsec: u32,
}

/// The latest fine-grained change stamp handed out, in nanoseconds since the epoch (see
/// [`Timespec::now_coarse`]): one word for the process, read by every change and written
/// only by a change that needed a fine-grained stamp (Linux's `mg_floor`). Relaxed: a stamp
/// orders changes by the clock, not memory; a thread that sees another's change through
/// any synchronization sees its floor too.
static CHANGE_FLOOR: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

/// `t` (nanoseconds) raised to `floor`, unless the floor is a second or more ahead of it
/// (the wall clock was set back: see [`Timespec::now_coarse`]).
#[inline]
fn at_floor(t: i64, floor: i64) -> i64 {
    if floor > t && floor - t < 1_000_000_000 {
        floor
    } else {
        t
    }
}

impl Timespec {
    /// The current real time.
    pub fn now() -> Timespec {
        Self::clock(libc::CLOCK_REALTIME).unwrap_or_else(|| {
            let d = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            Timespec {
                sec: d.as_secs() as i64,
                nsec: d.subsec_nanos(),
            }
        })
    }

    /// The time a change is stamped with, as Linux stamps it on a file system with
    /// multigrain timestamps (tmpfs since 6.13): the wall clock as of the kernel's last
    /// tick (`CLOCK_REALTIME_COARSE`, a read of the vDSO's page with no time-stamp counter:
    /// about 7 ns here against 29 for the fine clock), at most one tick (1 to 10 ms) behind
    /// [`Timespec::now`], or the latest fine-grained stamp handed out if that is later (the
    /// *floor*), so that a change stamped coarsely is never older than one stamped finely
    /// before it. Where a tick matters, because someone has read an inode's change time
    /// since it was set, the inode asks for a fine-grained stamp instead
    /// ([`Timespec::now_fine_change`], from `Inode`'s change-time stores). [`Timespec::now`]
    /// where the coarse clock is missing (or under Miri).
    ///
    /// A floor more than a second ahead of the coarse clock is ignored: the wall clock was
    /// set back, and stamps follow it (Linux keeps its floor on the monotonic clock for the
    /// same reason).
    #[inline]
    pub(crate) fn now_coarse() -> Timespec {
        let c = Self::clock(libc::CLOCK_REALTIME_COARSE).unwrap_or_else(Timespec::now);
        let n = c.as_nanos();
        let raised = at_floor(n, CHANGE_FLOOR.load(Relaxed));
        if raised == n {
            c
        } else {
            Timespec::from_nanos(raised)
        }
    }

    /// A fine-grained stamp for a change whose coarse stamp would not tell it apart from
    /// the change before it (see [`Timespec::now_coarse`]): the wall clock now, or the
    /// floor if another thread has just handed out a later one; it becomes the floor.
    pub(crate) fn now_fine_change() -> Timespec {
        let t = Timespec::now().as_nanos();
        Timespec::from_nanos(at_floor(t, CHANGE_FLOOR.fetch_max(t, Relaxed)))
    }

    /// Nanoseconds since the epoch (a signed 64-bit count lasts until 2262).
    #[inline]
    fn as_nanos(self) -> i64 {
        self.sec
            .saturating_mul(1_000_000_000)
            .saturating_add(self.nsec as i64)
    }

    #[inline]
    fn from_nanos(n: i64) -> Timespec {
        Timespec {
            sec: n.div_euclid(1_000_000_000),
            nsec: n.rem_euclid(1_000_000_000) as u32,
        }
    }

    /// `clock_gettime(id)` as read from the vDSO, with no conversion (`SystemTime`'s
    /// subtraction of the epoch cost about 60 instructions per call); `None` if the clock
    /// is missing, and always under Miri, which has no such clocks.
    #[inline]
    fn clock(id: libc::clockid_t) -> Option<Timespec> {
        #[cfg(not(miri))]
        {
            let mut t = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: `t` is a valid, writable `timespec`, and `id` a clock id.
            if unsafe { libc::clock_gettime(id, &mut t) } == 0 {
                return Some(Timespec {
                    sec: t.tv_sec,
                    nsec: t.tv_nsec as u32,
                });
            }
        }
        let _ = id;
        None
    }
}

/// One timestamp argument of `utimensat`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SetTime {
    /// `UTIME_NOW`.
    Now,
    /// `UTIME_OMIT`.
    Omit,
    /// An explicit time.
    Set(Timespec),
}

/// What `stat(2)` returns.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Stat {
    /// Device of the containing file system (one per mount).
    pub dev: u64,
    /// Inode number, stable for the file's life.
    pub ino: u64,
    /// Type and permission bits.
    pub mode: u32,
    /// Hard link count.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Device number for device nodes.
    pub rdev: u64,
    /// Size in bytes.
    pub size: u64,
    /// Preferred I/O size.
    pub blksize: u32,
    /// 512-byte blocks allocated.
    pub blocks: u64,
    /// Last access.
    pub atime: Timespec,
    /// Last data modification.
    pub mtime: Timespec,
    /// Last status change.
    pub ctime: Timespec,
}

impl Stat {
    /// The file type.
    pub fn file_type(&self) -> Option<FileType> {
        FileType::from_mode(self.mode)
    }
    /// Whether this is a directory.
    pub fn is_dir(&self) -> bool {
        self.mode & mode::S_IFMT == mode::S_IFDIR
    }
    /// Whether this is a regular file.
    pub fn is_file(&self) -> bool {
        self.mode & mode::S_IFMT == mode::S_IFREG
    }
    /// Whether this is a symbolic link.
    pub fn is_symlink(&self) -> bool {
        self.mode & mode::S_IFMT == mode::S_IFLNK
    }
}

/// What `statfs(2)` returns.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct StatFs {
    /// File system magic (`TMPFS_MAGIC` for memfs).
    pub fs_type: u64,
    /// Block size.
    pub bsize: u64,
    /// Total blocks.
    pub blocks: u64,
    /// Free blocks.
    pub bfree: u64,
    /// Free blocks for unprivileged users.
    pub bavail: u64,
    /// Total inodes.
    pub files: u64,
    /// Free inodes.
    pub ffree: u64,
    /// Maximum name length.
    pub namelen: u64,
    /// Fragment size.
    pub frsize: u64,
}

/// `lseek(2)` origin.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Whence {
    /// From the start.
    Set,
    /// From the current position.
    Cur,
    /// From the end.
    End,
    /// The next offset at or after the given one that holds data.
    Data,
    /// The next hole at or after the given offset.
    Hole,
}

/// One directory entry, as `getdents` returns it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct DirEntry {
    /// Inode number.
    pub ino: u64,
    /// File type.
    pub file_type: FileType,
    /// The name, one component.
    pub name: Vec<u8>,
    /// The cookie to resume after this entry (what `telldir` would return).
    pub cookie: u64,
}

/// The identity a caller acts as.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Creds {
    /// Effective (and file-system) user id.
    pub uid: u32,
    /// Effective group id.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
    /// Real user id (used by `access` without `AT_EACCESS`).
    pub ruid: u32,
    /// Real group id.
    pub rgid: u32,
}

impl Creds {
    /// The superuser.
    pub fn root() -> Creds {
        Creds::user(0, 0, Vec::new())
    }

    /// An ordinary user, with real ids equal to effective ids.
    pub fn user(uid: u32, gid: u32, groups: Vec<u32>) -> Creds {
        Creds {
            uid,
            gid,
            groups,
            ruid: uid,
            rgid: gid,
        }
    }

    /// Whether the caller is in `gid` (effective or supplementary).
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
}

/// Limits, as Linux has them.
pub mod limits {
    /// Maximum path length including the terminating NUL.
    pub const PATH_MAX: usize = 4096;
    /// Maximum length of one name.
    pub const NAME_MAX: usize = 255;
    /// Maximum symlinks followed in one resolution.
    pub const MAXSYMLINKS: u32 = 40;
    /// Maximum length of an extended attribute's name, its namespace prefix included
    /// (`ERANGE` beyond).
    pub const XATTR_NAME_MAX: usize = 255;
    /// Maximum size of an extended attribute's value (`E2BIG` beyond).
    pub const XATTR_SIZE_MAX: usize = 65536;
    /// Maximum size of a list of extended attribute names that `listxattr` returns.
    pub const XATTR_LIST_MAX: usize = 65536;
    /// Maximum record locks (`fcntl`'s, all owners) on one file: a request that would need
    /// more fails with `ENOLCK` and changes nothing. Linux has no fixed bound (it fails the
    /// same way when it cannot allocate); this one keeps a request's work bounded.
    pub const LOCKS_PER_FILE: usize = 4096;
}
