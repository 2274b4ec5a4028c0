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
        }
    };
}

errnos! {
    EPERM = 1, "Operation not permitted";
    ENOENT = 2, "No such file or directory";
    EIO = 5, "I/O error";
    ENXIO = 6, "No such device or address";
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
    ENAMETOOLONG = 36, "File name too long";
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

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", std::io::Error::from_raw_os_error(self.0))
    }
}

impl std::error::Error for Errno {}

impl From<Errno> for std::io::Error {
    fn from(e: Errno) -> Self {
        std::io::Error::from_raw_os_error(e.0)
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
