//! Typed errno values, numbered as on Linux.
//!
//! Every fallible engine operation returns [`Result<T>`]; an [`Errno`] converts into
//! [`std::io::Error`] so callers can use `?` in ordinary I/O code.

use std::fmt;

/// A POSIX error number, with Linux numbering.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(i32);

/// The engine's result type.
pub type Result<T> = std::result::Result<T, Errno>;

macro_rules! errnos {
    ($($name:ident = $val:expr, $msg:expr;)*) => {
        impl Errno {
            $(#[doc = $msg] pub const $name: Errno = Errno($val);)*

            /// The symbolic name, e.g. `"ENOENT"`.
            pub fn name(self) -> &'static str {
                match self.0 {
                    $($val => stringify!($name),)*
                    _ => "E?",
                }
            }

            /// Linux's message, e.g. `"No such file or directory"`.
            fn message(self) -> Option<&'static str> {
                match self.0 {
                    $($val => Some($msg),)*
                    _ => None,
                }
            }
        }
    };
}

errnos! {
    EPERM = 1, "Operation not permitted";
    ENOENT = 2, "No such file or directory";
    EIO = 5, "I/O error";
    ENXIO = 6, "No such device or address";
    E2BIG = 7, "Argument list too long";
    EBADF = 9, "Bad file descriptor";
    EAGAIN = 11, "Resource temporarily unavailable";
    ENOMEM = 12, "Out of memory";
    EACCES = 13, "Permission denied";
    EFAULT = 14, "Bad address";
    EBUSY = 16, "Device or resource busy";
    EEXIST = 17, "File exists";
    EXDEV = 18, "Cross-device link";
    ENODEV = 19, "No such device";
    ENOTDIR = 20, "Not a directory";
    EISDIR = 21, "Is a directory";
    EINVAL = 22, "Invalid argument";
    ENFILE = 23, "Too many open files in system";
    EMFILE = 24, "Too many open files";
    ETXTBSY = 26, "Text file busy";
    EFBIG = 27, "File too large";
    ENOSPC = 28, "No space left on device";
    ESPIPE = 29, "Illegal seek";
    EROFS = 30, "Read-only file system";
    EMLINK = 31, "Too many links";
    ERANGE = 34, "Result too large";
    EDEADLK = 35, "Resource deadlock avoided";
    ENAMETOOLONG = 36, "File name too long";
    ENOLCK = 37, "No locks available";
    ENOSYS = 38, "Function not implemented";
    ENOTEMPTY = 39, "Directory not empty";
    ELOOP = 40, "Too many levels of symbolic links";
    ENODATA = 61, "No data available";
    EOVERFLOW = 75, "Value too large for defined data type";
    EOPNOTSUPP = 95, "Operation not supported";
    ESTALE = 116, "Stale file handle";
    EDQUOT = 122, "Disk quota exceeded";
}

impl Errno {
    /// Internal: the operation is to start again once its guard is let go, to make a call
    /// of the file system's with no guard pinned (see `unpin`). Never returned to a caller:
    /// `unpin::run` consumes it. Linux's kernel-internal `ERESTARTSYS` has the same number
    /// and the same kind of use.
    pub(crate) const RESTART: Errno = Errno(512);

    /// Wraps a raw Linux errno value.
    pub const fn from_raw(raw: i32) -> Errno {
        Errno(raw)
    }

    /// The raw Linux errno value.
    pub const fn raw(self) -> i32 {
        self.0
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", self.name(), self.0)
    }
}

/// The message and the name: "No such file or directory (ENOENT)".
impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.message() {
            Some(m) => write!(f, "{m} ({})", self.name()),
            None => write!(f, "{}", std::io::Error::from_raw_os_error(self.0)),
        }
    }
}

impl std::error::Error for Errno {}

impl Errno {
    /// The [`std::io::ErrorKind`] Rust's standard library gives this errno on Linux.
    pub fn kind(self) -> std::io::ErrorKind {
        std::io::Error::from_raw_os_error(self.0).kind()
    }

    /// The errno an I/O error carries: one made from an [`Errno`], or an OS error.
    ///
    /// ```
    /// use scalevfs::Errno;
    /// let e = std::io::Error::from(Errno::ENOTEMPTY);
    /// assert_eq!(e.kind(), std::io::ErrorKind::DirectoryNotEmpty);
    /// assert_eq!(e.to_string(), "Directory not empty (ENOTEMPTY)");
    /// assert_eq!(Errno::of(&e), Some(Errno::ENOTEMPTY));
    /// assert_eq!(Errno::of(&std::io::Error::from_raw_os_error(2)), Some(Errno::ENOENT));
    /// ```
    pub fn of(e: &std::io::Error) -> Option<Errno> {
        e.get_ref()
            .and_then(|inner| inner.downcast_ref::<Errno>())
            .copied()
            .or_else(|| e.raw_os_error().map(Errno))
    }
}

/// An I/O error of the errno's [`kind`](Errno::kind), whose message names it
/// ([`Errno::of`] gives it back). Its `raw_os_error()` is `None`: the error comes from
/// the engine, not from the OS.
impl From<Errno> for std::io::Error {
    fn from(e: Errno) -> Self {
        std::io::Error::new(e.kind(), e)
    }
}

impl From<rustix::io::Errno> for Errno {
    /// A host errno is the engine's: the same number.
    fn from(e: rustix::io::Errno) -> Self {
        Errno(e.raw_os_error())
    }
}

/// A host errno as the engine's (see the `From` impl), for `map_err`.
pub(crate) fn host(e: rustix::io::Errno) -> Errno {
    e.into()
}
