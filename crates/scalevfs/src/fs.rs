//! The engine as `std::fs` shapes it: [`File`], [`OpenOptions`], [`DirBuilder`],
//! [`ReadDir`] and [`DirEntry`], [`Metadata`] with [`SystemTime`]s, [`Permissions`], and the
//! free functions of `std::fs` as methods of [`Fs`], a process's view.
//!
//! `std::fs` acts for the calling OS process. Here every call acts for a [`Process`] (its
//! root, working directory, credentials and umask), which [`Process::fs`] borrows:
//!
//! ```
//! use scalevfs::{Creds, Vfs};
//! use std::io::{Read, Write};
//!
//! # fn main() -> std::io::Result<()> {
//! let vfs = Vfs::new_memfs();
//! let p = vfs.process(Creds::root());
//! let fs = p.fs();
//! fs.create_dir_all("/srv/data")?;
//! let mut f = fs.create("/srv/data/hello.txt")?;
//! f.write_all(b"hello")?;
//! drop(f); // closes it
//! assert!(fs.exists("/srv/data/hello.txt"));
//! fs.copy("/srv/data/hello.txt", "/srv/data/copy.txt")?;
//! let mut s = String::new();
//! fs.open("/srv/data/copy.txt")?.read_to_string(&mut s)?;
//! assert_eq!(s, "hello");
//! for entry in fs.read_dir("/srv/data")? {
//!     let entry = entry?;
//!     assert!(entry.file_type()?.is_file());
//!     println!("{} {:?}", entry.path().display(), entry.metadata()?.modified()?);
//! }
//! # Ok(())
//! # }
//! ```
//!
//! ## std::fs with only the import changed
//!
//! The module's free functions and `File::open`, `File::create`, `OpenOptions::new` and
//! `DirBuilder::new` act for one process-wide [`Process`], [`current()`], as `std::fs` acts
//! for the calling OS process (so its working directory is shared by all threads, as the
//! OS's is). Unless [`set_current`] named another first, it is root in a namespace of its
//! own: an empty in-memory file system (memfs) with a `/tmp` (mode `1777`), umask `022`.
//! Code written for `std::fs` then runs against the engine once its import is changed:
//!
//! ```
//! use scalevfs::fs::{self, File}; // was: use std::fs::{self, File};
//! use std::io::Write;
//!
//! # fn main() -> std::io::Result<()> {
//! fs::create_dir_all("/tmp/app/logs")?;
//! let mut f = File::create("/tmp/app/logs/today")?;
//! writeln!(f, "started")?;
//! for entry in fs::read_dir("/tmp/app/logs")? {
//!     let entry = entry?;
//!     assert_eq!(entry.file_name(), "today");
//!     assert_eq!(entry.metadata()?.len(), 8);
//! }
//! fs::rename("/tmp/app", "/tmp/app.old")?;
//! assert!(!fs::exists("/tmp/app")?);
//! fs::remove_dir_all("/tmp/app.old")?;
//! # Ok(())
//! # }
//! ```
//!
//! `examples/std_habits` runs one program both ways, on `std::fs` and here, and compares
//! what it saw.
//!
//! ## Errors
//!
//! Errors are [`std::io::Error`]s with the [`ErrorKind`](std::io::ErrorKind) Linux's errno
//! maps to, and the errno's name in their message ("No such file or directory (ENOENT)");
//! [`Errno::of`] gives the errno back. The POSIX calls of [`Process`] stay: both are
//! first-class, and a [`File`]'s [`Handle`] passes to any of them.
//!
//! This module owns no lock and no epoch-protected pointer: a [`File`] is a [`Handle`]
//! (an open file description, closed when the last reference goes) and the process that
//! acts through it. The current process is set once (a `OnceLock`) and never replaced.

pub use crate::FileType;
use crate::{
    AtFlags, Creds, DirEntry as RawEntry, Errno, Handle, OFlags, Process, Stat, Timespec, Vfs,
    Whence,
};
use std::ffi::OsString;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

/// The engine's errors, as `std::io` results.
type IoResult<T> = io::Result<T>;

/// How many entries [`ReadDir`] asks for at a time.
const DIR_BATCH: usize = 128;

/// The chunk [`Fs::copy`] reads and writes.
const COPY_CHUNK: usize = 64 << 10;

/// The process of [`current()`], once made or set.
static CURRENT: OnceLock<Process> = OnceLock::new();

/// The process the free functions of this module act for: the one [`set_current`] gave,
/// or else (made at the first call) root in a namespace of its own, an empty memfs with a
/// `/tmp` of mode `1777`, working directory `/`, umask `022`.
///
/// ```
/// scalevfs::fs::write("/tmp/note", "hi")?;
/// // The POSIX calls reach the same namespace.
/// assert_eq!(scalevfs::fs::current().stat("/tmp/note")?.size, 2);
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn current() -> &'static Process {
    CURRENT.get_or_init(|| {
        let p = Vfs::new_memfs().process(Creds::root());
        // A fresh namespace: neither call can fail.
        p.mkdir("/tmp", 0o777).expect("mkdir /tmp in a new memfs");
        p.chmod("/tmp", 0o1777).expect("chmod /tmp in a new memfs");
        p
    })
}

/// Makes `p` the process the free functions act for: any namespace (hostfs, mounts) and
/// any credentials. Only before the first use of [`current()`]; after it, `p` comes back
/// as the error, and the current process stays.
///
/// ```
/// use scalevfs::{Creds, Vfs};
/// let vfs = Vfs::new_memfs();
/// let me = vfs.process(Creds::root());
/// me.mkdir("/data", 0o755)?;
/// if scalevfs::fs::set_current(me).is_ok() {
///     assert!(scalevfs::fs::metadata("/data")?.is_dir());
/// }
/// # Ok::<(), std::io::Error>(())
/// ```
// The refused process comes back whole, as `OnceLock::set` gives back its value.
#[allow(clippy::result_large_err)]
pub fn set_current(p: Process) -> Result<(), Process> {
    CURRENT.set(p)
}

/// The current process's view.
fn cur() -> Fs<'static> {
    current().fs()
}

/// [`Fs::metadata`] for the [`current()`] process, as `std::fs::metadata`.
pub fn metadata(path: impl AsRef<Path>) -> IoResult<Metadata> {
    cur().metadata(path)
}

/// [`Fs::symlink_metadata`] for the [`current()`] process, as `std::fs::symlink_metadata`.
pub fn symlink_metadata(path: impl AsRef<Path>) -> IoResult<Metadata> {
    cur().symlink_metadata(path)
}

/// Whether `path` names an object, as `std::fs::exists`: `Ok(false)` for `ENOENT`, an
/// error when that cannot be told ([`Fs::try_exists`] for the [`current()`] process).
pub fn exists(path: impl AsRef<Path>) -> IoResult<bool> {
    cur().try_exists(path)
}

/// [`Fs::read`] for the [`current()`] process, as `std::fs::read`.
pub fn read(path: impl AsRef<Path>) -> IoResult<Vec<u8>> {
    cur().read(path)
}

/// [`Fs::read_to_string`] for the [`current()`] process, as `std::fs::read_to_string`.
pub fn read_to_string(path: impl AsRef<Path>) -> IoResult<String> {
    cur().read_to_string(path)
}

/// [`Fs::write`] for the [`current()`] process, as `std::fs::write`.
pub fn write(path: impl AsRef<Path>, contents: impl AsRef<[u8]>) -> IoResult<()> {
    cur().write(path, contents)
}

/// [`Fs::create_dir`] for the [`current()`] process, as `std::fs::create_dir`.
pub fn create_dir(path: impl AsRef<Path>) -> IoResult<()> {
    cur().create_dir(path)
}

/// [`Fs::create_dir_all`] for the [`current()`] process, as `std::fs::create_dir_all`.
pub fn create_dir_all(path: impl AsRef<Path>) -> IoResult<()> {
    cur().create_dir_all(path)
}

/// [`Fs::remove_file`] for the [`current()`] process, as `std::fs::remove_file`.
pub fn remove_file(path: impl AsRef<Path>) -> IoResult<()> {
    cur().remove_file(path)
}

/// [`Fs::remove_dir`] for the [`current()`] process, as `std::fs::remove_dir`.
pub fn remove_dir(path: impl AsRef<Path>) -> IoResult<()> {
    cur().remove_dir(path)
}

/// [`Fs::remove_dir_all`] for the [`current()`] process, as `std::fs::remove_dir_all`.
pub fn remove_dir_all(path: impl AsRef<Path>) -> IoResult<()> {
    cur().remove_dir_all(path)
}

/// [`Fs::rename`] for the [`current()`] process, as `std::fs::rename`.
pub fn rename(from: impl AsRef<Path>, to: impl AsRef<Path>) -> IoResult<()> {
    cur().rename(from, to)
}

/// [`Fs::copy`] for the [`current()`] process, as `std::fs::copy`.
pub fn copy(from: impl AsRef<Path>, to: impl AsRef<Path>) -> IoResult<u64> {
    cur().copy(from, to)
}

/// [`Fs::hard_link`] for the [`current()`] process, as `std::fs::hard_link`.
pub fn hard_link(original: impl AsRef<Path>, link: impl AsRef<Path>) -> IoResult<()> {
    cur().hard_link(original, link)
}

/// [`Fs::symlink`] for the [`current()`] process, as `std::os::unix::fs::symlink`.
pub fn symlink(original: impl AsRef<Path>, link: impl AsRef<Path>) -> IoResult<()> {
    cur().symlink(original, link)
}

/// [`Fs::read_link`] for the [`current()`] process, as `std::fs::read_link`.
pub fn read_link(path: impl AsRef<Path>) -> IoResult<PathBuf> {
    cur().read_link(path)
}

/// [`Fs::canonicalize`] for the [`current()`] process, as `std::fs::canonicalize`.
pub fn canonicalize(path: impl AsRef<Path>) -> IoResult<PathBuf> {
    cur().canonicalize(path)
}

/// [`Fs::set_permissions`] for the [`current()`] process, as `std::fs::set_permissions`.
pub fn set_permissions(path: impl AsRef<Path>, perm: Permissions) -> IoResult<()> {
    cur().set_permissions(path, perm)
}

/// [`Fs::read_dir`] for the [`current()`] process, as `std::fs::read_dir`.
pub fn read_dir(path: impl AsRef<Path>) -> IoResult<ReadDir<'static>> {
    cur().read_dir(path)
}

impl File<'static> {
    /// Opens a file for reading as the [`current()`] process, as `std::fs::File::open`.
    pub fn open(path: impl AsRef<Path>) -> IoResult<File<'static>> {
        cur().open(path)
    }

    /// Creates or truncates a file for writing as the [`current()`] process, as
    /// `std::fs::File::create`.
    pub fn create(path: impl AsRef<Path>) -> IoResult<File<'static>> {
        cur().create(path)
    }

    /// Creates a new file for reading and writing as the [`current()`] process, failing
    /// if the name is taken, as `std::fs::File::create_new`.
    pub fn create_new(path: impl AsRef<Path>) -> IoResult<File<'static>> {
        cur().create_new(path)
    }

    /// Options to open a file with as the [`current()`] process, as
    /// `std::fs::File::options`.
    pub fn options() -> OpenOptions<'static> {
        cur().options()
    }
}

impl OpenOptions<'static> {
    /// Options to open a file with as the [`current()`] process, nothing set, as
    /// `std::fs::OpenOptions::new`.
    #[allow(clippy::new_without_default)]
    pub fn new() -> OpenOptions<'static> {
        cur().options()
    }
}

impl DirBuilder<'static> {
    /// A builder of directories for the [`current()`] process, as
    /// `std::fs::DirBuilder::new`.
    #[allow(clippy::new_without_default)]
    pub fn new() -> DirBuilder<'static> {
        cur().dir_builder()
    }
}

impl Process {
    /// This process's view in the shape of `std::fs` (see the [`fs`](crate::fs) module).
    pub fn fs(&self) -> Fs<'_> {
        Fs { p: self }
    }
}

/// A process's file system, with `std::fs`'s functions as methods. Made by
/// [`Process::fs`]; it is a borrow, and costs nothing to make or copy.
#[derive(Clone, Copy)]
pub struct Fs<'p> {
    p: &'p Process,
}

impl<'p> Fs<'p> {
    /// The process this view acts for, for the POSIX calls.
    pub fn process(&self) -> &'p Process {
        self.p
    }

    /// Opens a file for reading (`std::fs::File::open`).
    pub fn open(&self, path: impl AsRef<Path>) -> IoResult<File<'p>> {
        self.options().read(true).open(path)
    }

    /// Creates a file, or truncates it, for writing (`std::fs::File::create`).
    ///
    /// ```
    /// # let vfs = scalevfs::Vfs::new_memfs();
    /// # let p = vfs.process(scalevfs::Creds::root());
    /// use std::io::Write;
    /// let mut f = p.fs().create("/a")?;
    /// f.write_all(b"abc")?;
    /// assert_eq!(f.metadata()?.len(), 3);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn create(&self, path: impl AsRef<Path>) -> IoResult<File<'p>> {
        self.options()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
    }

    /// Creates a new file for reading and writing; `AlreadyExists` if the name is taken
    /// (`std::fs::File::create_new`).
    pub fn create_new(&self, path: impl AsRef<Path>) -> IoResult<File<'p>> {
        self.options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
    }

    /// Options to open a file with, as `std::fs::OpenOptions::new()`.
    pub fn options(&self) -> OpenOptions<'p> {
        OpenOptions::with(self.p)
    }

    /// A builder of directories, as `std::fs::DirBuilder::new()`.
    pub fn dir_builder(&self) -> DirBuilder<'p> {
        DirBuilder {
            p: self.p,
            recursive: false,
            mode: 0o777,
        }
    }

    /// The metadata of the object `path` names, following symlinks.
    ///
    /// ```
    /// # let vfs = scalevfs::Vfs::new_memfs();
    /// # let p = vfs.process(scalevfs::Creds::root());
    /// let fs = p.fs();
    /// fs.write("/a", "abc")?;
    /// let m = fs.metadata("/a")?;
    /// assert!(m.is_file() && m.len() == 3);
    /// assert!(m.modified()? <= std::time::SystemTime::now());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn metadata(&self, path: impl AsRef<Path>) -> IoResult<Metadata> {
        Ok(Metadata(self.p.stat(path)?))
    }

    /// The metadata of `path` itself, a symlink's own if it is one.
    pub fn symlink_metadata(&self, path: impl AsRef<Path>) -> IoResult<Metadata> {
        Ok(Metadata(self.p.lstat(path)?))
    }

    /// Whether `path` names an object (following symlinks); any error, a denied search
    /// included, is `false`. See [`try_exists`](Self::try_exists) to tell them apart.
    ///
    /// ```
    /// # let vfs = scalevfs::Vfs::new_memfs();
    /// # let p = vfs.process(scalevfs::Creds::root());
    /// let fs = p.fs();
    /// assert!(fs.exists("/") && !fs.exists("/nothing"));
    /// ```
    pub fn exists(&self, path: impl AsRef<Path>) -> bool {
        self.p.stat(path).is_ok()
    }

    /// Whether `path` names an object: `Ok(false)` if it does not (`ENOENT`), an error if
    /// that cannot be told (a denied search, a symlink loop, a component that is not a
    /// directory...).
    ///
    /// ```
    /// # let vfs = scalevfs::Vfs::new_memfs();
    /// # let p = vfs.process(scalevfs::Creds::root());
    /// let fs = p.fs();
    /// fs.write("/f", "")?;
    /// assert!(!fs.try_exists("/nothing")?);
    /// assert!(fs.try_exists("/f/x").is_err()); // ENOTDIR
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn try_exists(&self, path: impl AsRef<Path>) -> IoResult<bool> {
        match self.p.stat(path) {
            Ok(_) => Ok(true),
            Err(Errno::ENOENT) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// The whole contents of a file.
    pub fn read(&self, path: impl AsRef<Path>) -> IoResult<Vec<u8>> {
        Ok(self.p.read_file(path)?)
    }

    /// The whole contents of a file as a string; `InvalidData` if it is not UTF-8.
    ///
    /// ```
    /// # let vfs = scalevfs::Vfs::new_memfs();
    /// # let p = vfs.process(scalevfs::Creds::root());
    /// let fs = p.fs();
    /// fs.write("/a", "text")?;
    /// assert_eq!(fs.read_to_string("/a")?, "text");
    /// fs.write("/b", [0xff])?;
    /// assert_eq!(fs.read_to_string("/b").unwrap_err().kind(), std::io::ErrorKind::InvalidData);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn read_to_string(&self, path: impl AsRef<Path>) -> IoResult<String> {
        String::from_utf8(self.read(path)?)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not valid UTF-8"))
    }

    /// Writes `contents` as the whole file, creating it (mode `0o666` less the umask) or
    /// truncating it.
    pub fn write(&self, path: impl AsRef<Path>, contents: impl AsRef<[u8]>) -> IoResult<()> {
        self.create(path)?.write_all(contents.as_ref())
    }

    /// Makes a directory (mode `0o777` less the umask).
    pub fn create_dir(&self, path: impl AsRef<Path>) -> IoResult<()> {
        Ok(self.p.mkdir(path, 0o777)?)
    }

    /// Makes a directory and every missing parent; a directory already there is fine.
    pub fn create_dir_all(&self, path: impl AsRef<Path>) -> IoResult<()> {
        Ok(self.p.create_dir_all(path)?)
    }

    /// Removes a name of a file that is not a directory.
    pub fn remove_file(&self, path: impl AsRef<Path>) -> IoResult<()> {
        Ok(self.p.unlink(path)?)
    }

    /// Removes an empty directory.
    pub fn remove_dir(&self, path: impl AsRef<Path>) -> IoResult<()> {
        Ok(self.p.rmdir(path)?)
    }

    /// Removes a directory and everything beneath it (symlinks are removed, not followed).
    pub fn remove_dir_all(&self, path: impl AsRef<Path>) -> IoResult<()> {
        Ok(self.p.remove_dir_all(path)?)
    }

    /// Renames `from` to `to`, replacing what `to` named (`rename(2)`).
    pub fn rename(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> IoResult<()> {
        Ok(self.p.rename(from, to)?)
    }

    /// Copies the contents and permission bits of the file `from` into `to` (created, or
    /// truncated), and returns the bytes copied. `InvalidInput` if `from` is not a
    /// regular file (or a symlink to one), as `std::fs::copy`.
    ///
    /// ```
    /// # let vfs = scalevfs::Vfs::new_memfs();
    /// # let p = vfs.process(scalevfs::Creds::root());
    /// let fs = p.fs();
    /// fs.write("/a", "abc")?;
    /// fs.set_permissions("/a", scalevfs::fs::Permissions::from_mode(0o640))?;
    /// assert_eq!(fs.copy("/a", "/b")?, 3);
    /// assert_eq!(fs.read("/b")?, b"abc");
    /// assert_eq!(fs.metadata("/b")?.permissions().mode(), 0o640);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn copy(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> IoResult<u64> {
        let src = self.open(from)?;
        let st = src.metadata()?;
        if !st.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the source path is neither a regular file nor a symlink to a regular file",
            ));
        }
        let perm = st.permissions();
        let dst = self
            .options()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(perm.mode())
            .open(to)?;
        dst.set_permissions(perm)?;
        // As std does on Linux: copy_file_range, and bytes through a buffer where it cannot
        // (between two file systems, EXDEV).
        let mut off = 0u64;
        loop {
            match self
                .p
                .copy_file_range(&src.h, None, &dst.h, None, 1 << 30, 0)
            {
                Ok(0) => return Ok(off),
                Ok(n) => off += n as u64,
                Err(Errno::EXDEV) if off == 0 => break,
                Err(e) => return Err(e.into()),
            }
        }
        let mut buf = vec![0; COPY_CHUNK.min(st.len() as usize + 1).max(1)];
        loop {
            let n = src.read_at(&mut buf, off)?;
            if n == 0 {
                return Ok(off);
            }
            dst.write_all_at(&buf[..n], off)?;
            off += n as u64;
        }
    }

    /// Makes `link` a new name of the file `original` (`link(2)`).
    pub fn hard_link(&self, original: impl AsRef<Path>, link: impl AsRef<Path>) -> IoResult<()> {
        Ok(self.p.link(original, link)?)
    }

    /// Makes `link` a symlink whose target is `original`
    /// (`std::os::unix::fs::symlink`).
    pub fn symlink(&self, original: impl AsRef<Path>, link: impl AsRef<Path>) -> IoResult<()> {
        Ok(self.p.symlink(original, link)?)
    }

    /// The target of the symlink `path`.
    pub fn read_link(&self, path: impl AsRef<Path>) -> IoResult<PathBuf> {
        Ok(PathBuf::from(OsString::from_vec(self.p.readlink(path)?)))
    }

    /// The absolute path of `path` with every symlink, `.` and `..` resolved; the object
    /// must exist.
    ///
    /// ```
    /// # let vfs = scalevfs::Vfs::new_memfs();
    /// # let p = vfs.process(scalevfs::Creds::root());
    /// let fs = p.fs();
    /// fs.create_dir_all("/a/b")?;
    /// fs.symlink("a/b", "/l")?;
    /// assert_eq!(fs.canonicalize("/l/../b/.")?, std::path::Path::new("/a/b"));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn canonicalize(&self, path: impl AsRef<Path>) -> IoResult<PathBuf> {
        Ok(self.p.realpath(path)?)
    }

    /// Sets the permission bits of the object `path` names (following symlinks).
    pub fn set_permissions(&self, path: impl AsRef<Path>, perm: Permissions) -> IoResult<()> {
        Ok(self.p.chmod(path, perm.0)?)
    }

    /// The entries of a directory, without `.` and `..`, read in batches as the iterator
    /// goes.
    ///
    /// ```
    /// # let vfs = scalevfs::Vfs::new_memfs();
    /// # let p = vfs.process(scalevfs::Creds::root());
    /// let fs = p.fs();
    /// fs.create_dir("/d")?;
    /// fs.write("/d/x", "1")?;
    /// fs.create_dir("/d/y")?;
    /// let mut names = fs
    ///     .read_dir("/d")?
    ///     .map(|e| e.map(|e| e.path()))
    ///     .collect::<std::io::Result<Vec<_>>>()?;
    /// names.sort();
    /// assert_eq!(names, ["/d/x", "/d/y"].map(std::path::PathBuf::from));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn read_dir(&self, path: impl AsRef<Path>) -> IoResult<ReadDir<'p>> {
        let path = path.as_ref();
        let dir =
            self.p
                .openat_handle(crate::Fd::CWD, path, OFlags::RDONLY | OFlags::DIRECTORY, 0)?;
        Ok(ReadDir {
            p: self.p,
            dir: Arc::new(dir),
            path: Arc::from(path),
            batch: Vec::new().into_iter(),
            done: false,
        })
    }
}

/// Options to open a file with, as `std::fs::OpenOptions` (and its Unix extension's
/// `mode` and `custom_flags`). Made by [`Fs::options`].
///
/// ```
/// # let vfs = scalevfs::Vfs::new_memfs();
/// # let p = vfs.process(scalevfs::Creds::root());
/// use std::io::Write;
/// let fs = p.fs();
/// let mut log = fs.options().append(true).create(true).mode(0o600).open("/log")?;
/// log.write_all(b"one\n")?;
/// let mut log = fs.options().append(true).open("/log")?;
/// log.write_all(b"two\n")?;
/// assert_eq!(fs.read_to_string("/log")?, "one\ntwo\n");
/// assert_eq!(fs.metadata("/log")?.permissions().mode(), 0o600);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct OpenOptions<'p> {
    p: &'p Process,
    read: bool,
    write: bool,
    append: bool,
    truncate: bool,
    create: bool,
    create_new: bool,
    mode: u32,
    custom_flags: u32,
}

impl<'p> OpenOptions<'p> {
    fn with(p: &'p Process) -> OpenOptions<'p> {
        OpenOptions {
            p,
            read: false,
            write: false,
            append: false,
            truncate: false,
            create: false,
            create_new: false,
            mode: 0o666,
            custom_flags: 0,
        }
    }

    /// Open for reading.
    pub fn read(&mut self, on: bool) -> &mut Self {
        self.read = on;
        self
    }

    /// Open for writing.
    pub fn write(&mut self, on: bool) -> &mut Self {
        self.write = on;
        self
    }

    /// Open for writing at the end (`O_APPEND`); implies writing.
    pub fn append(&mut self, on: bool) -> &mut Self {
        self.append = on;
        self
    }

    /// Truncate to length 0 (`O_TRUNC`); needs writing.
    pub fn truncate(&mut self, on: bool) -> &mut Self {
        self.truncate = on;
        self
    }

    /// Create the file if it is missing (`O_CREAT`); needs writing or appending.
    pub fn create(&mut self, on: bool) -> &mut Self {
        self.create = on;
        self
    }

    /// Create the file, failing with `AlreadyExists` if the name is taken
    /// (`O_CREAT | O_EXCL`; a symlink is not followed); needs writing or appending.
    pub fn create_new(&mut self, on: bool) -> &mut Self {
        self.create_new = on;
        self
    }

    /// The permission bits of a file this creates (less the umask); `0o666` unless set.
    pub fn mode(&mut self, mode: u32) -> &mut Self {
        self.mode = mode;
        self
    }

    /// More `open(2)` flags (such as `O_NOFOLLOW`); the access mode bits are ignored.
    pub fn custom_flags(&mut self, flags: u32) -> &mut Self {
        self.custom_flags = flags;
        self
    }

    /// The `open(2)` flags these options stand for; `InvalidInput` for a combination
    /// `std::fs::OpenOptions` refuses too.
    fn flags(&self) -> IoResult<OFlags> {
        let invalid = |m| Err(io::Error::new(io::ErrorKind::InvalidInput, m));
        let acc = match (self.read, self.write, self.append) {
            (true, false, false) => OFlags::RDONLY,
            (false, true, false) => OFlags::WRONLY,
            (true, true, false) => OFlags::RDWR,
            (false, _, true) => OFlags::WRONLY | OFlags::APPEND,
            (true, _, true) => OFlags::RDWR | OFlags::APPEND,
            (false, false, false) => return invalid("neither read, write nor append is set"),
        };
        let writes = self.write || self.append;
        let creation = match (self.create, self.truncate, self.create_new) {
            (false, false, false) => OFlags::empty(),
            _ if !writes => return invalid("create or truncate without write"),
            (_, true, _) if self.append => return invalid("truncate with append"),
            (_, _, true) => OFlags::CREAT | OFlags::EXCL,
            (true, false, false) => OFlags::CREAT,
            (false, true, false) => OFlags::TRUNC,
            (true, true, false) => OFlags::CREAT | OFlags::TRUNC,
        };
        Ok(acc | creation | OFlags(self.custom_flags & !OFlags::ACCMODE.0))
    }

    /// Opens `path` with these options.
    pub fn open(&self, path: impl AsRef<Path>) -> IoResult<File<'p>> {
        let flags = self.flags()?;
        let h = self
            .p
            .openat_handle(crate::Fd::CWD, path, flags, self.mode & 0o7777)?;
        Ok(File { p: self.p, h })
    }
}

/// Why [`File::try_lock`] did not take its lock, as `std::fs::TryLockError`.
#[derive(Debug)]
pub enum TryLockError {
    /// Another open file holds a lock that conflicts.
    WouldBlock,
    /// The call failed.
    Error(std::io::Error),
}

impl std::fmt::Display for TryLockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TryLockError::WouldBlock => {
                f.write_str("lock acquisition failed because the operation would block")
            }
            TryLockError::Error(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for TryLockError {}

impl From<TryLockError> for std::io::Error {
    fn from(e: TryLockError) -> std::io::Error {
        match e {
            TryLockError::WouldBlock => Errno::EAGAIN.into(),
            TryLockError::Error(e) => e,
        }
    }
}

fn try_lock(r: crate::Result<()>) -> Result<(), TryLockError> {
    match r {
        Ok(()) => Ok(()),
        Err(Errno::EAGAIN) => Err(TryLockError::WouldBlock),
        Err(e) => Err(TryLockError::Error(e.into())),
    }
}

/// An open file, as `std::fs::File`: [`Read`], [`Write`] and [`Seek`] through its own
/// position, `read_at`/`write_at` at any offset. Dropping it closes it. Made by
/// [`Fs::open`], [`Fs::create`] and [`OpenOptions::open`].
///
/// ```
/// # let vfs = scalevfs::Vfs::new_memfs();
/// # let p = vfs.process(scalevfs::Creds::root());
/// use std::io::{Read, Seek, SeekFrom, Write};
/// let mut f = p.fs().options().read(true).write(true).create(true).open("/f")?;
/// f.write_all(b"hello world")?;
/// f.seek(SeekFrom::Start(6))?;
/// let mut s = String::new();
/// f.read_to_string(&mut s)?;
/// assert_eq!(s, "world");
/// f.write_at(b"W", 6)?;
/// let mut buf = [0; 5];
/// f.read_exact_at(&mut buf, 6)?;
/// assert_eq!(&buf, b"World");
/// f.set_len(5)?;
/// assert_eq!(f.metadata()?.len(), 5);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct File<'p> {
    p: &'p Process,
    h: Handle,
}

impl<'p> File<'p> {
    /// The open file description, for the POSIX calls ([`Process::read`], `fstat`...).
    pub fn handle(&self) -> &Handle {
        &self.h
    }

    /// The file's metadata (`fstat`).
    pub fn metadata(&self) -> IoResult<Metadata> {
        Ok(Metadata(self.p.fstat(&self.h)?))
    }

    /// Sets the length: cut, or extended with zeros (`ftruncate`). The file must be open
    /// for writing.
    pub fn set_len(&self, len: u64) -> IoResult<()> {
        Ok(self.p.ftruncate(&self.h, len)?)
    }

    /// Makes the file's data and metadata durable (`fsync`).
    pub fn sync_all(&self) -> IoResult<()> {
        Ok(self.p.fsync(&self.h)?)
    }

    /// Waits for and takes an exclusive lock on the whole file (`flock(LOCK_EX)`), as
    /// `std::fs::File::lock`. The lock is the open file's: a [`File::try_clone`] shares it,
    /// and it goes when the last of them is dropped, or with [`File::unlock`].
    ///
    /// ```
    /// use scalevfs::fs::{File, TryLockError};
    /// let a = File::create("/tmp/lock-doc")?;
    /// let b = File::open("/tmp/lock-doc")?;
    /// a.lock()?;
    /// assert!(matches!(b.try_lock_shared(), Err(TryLockError::WouldBlock)));
    /// drop(a);
    /// b.try_lock_shared()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn lock(&self) -> IoResult<()> {
        Ok(self.p.flock(&self.h, crate::FlockOp::EX)?)
    }

    /// Waits for and takes a shared lock on the whole file (`flock(LOCK_SH)`), as
    /// `std::fs::File::lock_shared`.
    pub fn lock_shared(&self) -> IoResult<()> {
        Ok(self.p.flock(&self.h, crate::FlockOp::SH)?)
    }

    /// Takes an exclusive lock if no other open file holds one (`flock(LOCK_EX |
    /// LOCK_NB)`), as `std::fs::File::try_lock`.
    pub fn try_lock(&self) -> Result<(), TryLockError> {
        try_lock(
            self.p
                .flock(&self.h, crate::FlockOp::EX | crate::FlockOp::NB),
        )
    }

    /// Takes a shared lock if no other open file holds an exclusive one (`flock(LOCK_SH |
    /// LOCK_NB)`), as `std::fs::File::try_lock_shared`.
    pub fn try_lock_shared(&self) -> Result<(), TryLockError> {
        try_lock(
            self.p
                .flock(&self.h, crate::FlockOp::SH | crate::FlockOp::NB),
        )
    }

    /// Drops this open file's lock (`flock(LOCK_UN)`), as `std::fs::File::unlock`.
    pub fn unlock(&self) -> IoResult<()> {
        Ok(self.p.flock(&self.h, crate::FlockOp::UN)?)
    }

    /// Makes the file's data durable (`fdatasync`).
    pub fn sync_data(&self) -> IoResult<()> {
        Ok(self.p.fdatasync(&self.h)?)
    }

    /// Sets the permission bits (`fchmod`).
    pub fn set_permissions(&self, perm: Permissions) -> IoResult<()> {
        Ok(self.p.fchmod(&self.h, perm.0)?)
    }

    /// Another reference to the same open file (`dup`): one position, one set of flags.
    pub fn try_clone(&self) -> IoResult<File<'p>> {
        Ok(File {
            p: self.p,
            h: self.h.clone(),
        })
    }

    /// Reads at `off` without moving the position (`pread`).
    pub fn read_at(&self, buf: &mut [u8], off: u64) -> IoResult<usize> {
        Ok(self.p.pread(&self.h, buf, off)?)
    }

    /// Writes at `off` without moving the position (`pwrite`; at the end with `O_APPEND`).
    pub fn write_at(&self, buf: &[u8], off: u64) -> IoResult<usize> {
        Ok(self.p.pwrite(&self.h, buf, off)?)
    }

    /// Fills `buf` from `off`; `UnexpectedEof` if the file ends first.
    pub fn read_exact_at(&self, mut buf: &mut [u8], mut off: u64) -> IoResult<()> {
        while !buf.is_empty() {
            match self.read_at(buf, off)? {
                0 => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "failed to fill whole buffer",
                    ))
                }
                n => {
                    buf = &mut buf[n..];
                    off += n as u64;
                }
            }
        }
        Ok(())
    }

    /// Writes all of `buf` from `off`.
    pub fn write_all_at(&self, mut buf: &[u8], mut off: u64) -> IoResult<()> {
        while !buf.is_empty() {
            match self.write_at(buf, off)? {
                0 => return Err(io::ErrorKind::WriteZero.into()),
                n => {
                    buf = &buf[n..];
                    off += n as u64;
                }
            }
        }
        Ok(())
    }
}

impl std::fmt::Debug for File<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("File").field("handle", &self.h).finish()
    }
}

impl Read for &File<'_> {
    fn read(&mut self, buf: &mut [u8]) -> IoResult<usize> {
        Ok(self.p.read(&self.h, buf)?)
    }
}

impl Read for File<'_> {
    fn read(&mut self, buf: &mut [u8]) -> IoResult<usize> {
        (&*self).read(buf)
    }
}

impl Write for &File<'_> {
    fn write(&mut self, buf: &[u8]) -> IoResult<usize> {
        Ok(self.p.write(&self.h, buf)?)
    }

    /// Nothing to flush: a write is in the file when it returns.
    fn flush(&mut self) -> IoResult<()> {
        Ok(())
    }
}

impl Write for File<'_> {
    fn write(&mut self, buf: &[u8]) -> IoResult<usize> {
        (&*self).write(buf)
    }

    fn flush(&mut self) -> IoResult<()> {
        Ok(())
    }
}

impl Seek for &File<'_> {
    fn seek(&mut self, pos: SeekFrom) -> IoResult<u64> {
        let (off, whence) = match pos {
            SeekFrom::Start(n) => (
                i64::try_from(n).map_err(|_| io::Error::from(Errno::EINVAL))?,
                Whence::Set,
            ),
            SeekFrom::Current(n) => (n, Whence::Cur),
            SeekFrom::End(n) => (n, Whence::End),
        };
        Ok(self.p.lseek(&self.h, off, whence)?)
    }
}

impl Seek for File<'_> {
    fn seek(&mut self, pos: SeekFrom) -> IoResult<u64> {
        (&*self).seek(pos)
    }
}

/// Builds directories, as `std::fs::DirBuilder` (with its Unix extension's `mode`). Made
/// by [`Fs::dir_builder`].
///
/// ```
/// # let vfs = scalevfs::Vfs::new_memfs();
/// # let p = vfs.process(scalevfs::Creds::root());
/// let fs = p.fs();
/// fs.dir_builder().recursive(true).mode(0o750).create("/a/b/c")?;
/// assert_eq!(fs.metadata("/a/b/c")?.permissions().mode(), 0o750);
/// // An existing directory is fine when recursive, an error otherwise.
/// fs.dir_builder().recursive(true).create("/a/b")?;
/// let e = fs.dir_builder().create("/a/b").unwrap_err();
/// assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct DirBuilder<'p> {
    p: &'p Process,
    recursive: bool,
    mode: u32,
}

impl DirBuilder<'_> {
    /// Make missing parents too, and accept a directory already there.
    pub fn recursive(&mut self, on: bool) -> &mut Self {
        self.recursive = on;
        self
    }

    /// The permission bits of each directory this makes (less the umask); `0o777`
    /// unless set.
    pub fn mode(&mut self, mode: u32) -> &mut Self {
        self.mode = mode;
        self
    }

    /// Makes the directory `path`.
    pub fn create(&self, path: impl AsRef<Path>) -> IoResult<()> {
        let path = path.as_ref();
        if !self.recursive {
            return Ok(self.p.mkdir(path, self.mode)?);
        }
        self.create_all(path)
    }

    fn create_all(&self, path: &Path) -> IoResult<()> {
        if path.as_os_str().is_empty() {
            return Ok(());
        }
        match self.p.mkdir(path, self.mode) {
            Ok(()) => return Ok(()),
            Err(Errno::ENOENT) => {}
            // Taken: fine if it is a directory (or a symlink to one).
            Err(e) => {
                return match self.p.stat(path) {
                    Ok(st) if st.is_dir() => Ok(()),
                    _ => Err(e.into()),
                }
            }
        }
        match path.parent() {
            Some(parent) => self.create_all(parent)?,
            None => return Err(Errno::ENOENT.into()),
        }
        match self.p.mkdir(path, self.mode) {
            Ok(()) => Ok(()),
            // Made by another caller meanwhile.
            Err(e) => match self.p.stat(path) {
                Ok(st) if st.is_dir() => Ok(()),
                _ => Err(e.into()),
            },
        }
    }
}

/// The entries of a directory, as `std::fs::ReadDir`: made by [`Fs::read_dir`], it holds
/// the directory open and reads its entries in batches. `.` and `..` are left out.
pub struct ReadDir<'p> {
    p: &'p Process,
    dir: Arc<Handle>,
    path: Arc<Path>,
    batch: std::vec::IntoIter<RawEntry>,
    done: bool,
}

impl<'p> Iterator for ReadDir<'p> {
    type Item = IoResult<DirEntry<'p>>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(e) = self.batch.next() {
                if e.name == b"." || e.name == b".." {
                    continue;
                }
                return Some(Ok(DirEntry {
                    p: self.p,
                    dir: self.dir.clone(),
                    parent: self.path.clone(),
                    raw: e,
                }));
            }
            if self.done {
                return None;
            }
            match self.p.getdents(&*self.dir, DIR_BATCH) {
                Ok(v) if v.is_empty() => {
                    self.done = true;
                    return None;
                }
                Ok(v) => self.batch = v.into_iter(),
                Err(e) => {
                    self.done = true;
                    return Some(Err(e.into()));
                }
            }
        }
    }
}

impl std::fmt::Debug for ReadDir<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ReadDir").field(&self.path).finish()
    }
}

/// One entry of a directory, as `std::fs::DirEntry`.
pub struct DirEntry<'p> {
    p: &'p Process,
    dir: Arc<Handle>,
    parent: Arc<Path>,
    raw: RawEntry,
}

impl DirEntry<'_> {
    /// The entry's name, one component.
    pub fn file_name(&self) -> OsString {
        OsString::from_vec(self.raw.name.clone())
    }

    /// The path given to [`Fs::read_dir`] joined with the entry's name.
    pub fn path(&self) -> PathBuf {
        self.parent
            .join(std::ffi::OsStr::from_bytes(&self.raw.name))
    }

    /// The entry's type, from the directory itself (no `stat`); a symlink is a symlink.
    pub fn file_type(&self) -> IoResult<FileType> {
        Ok(self.raw.file_type)
    }

    /// The entry's inode number.
    pub fn ino(&self) -> u64 {
        self.raw.ino
    }

    /// The metadata of the object the entry names, a symlink's own if it is one (`fstatat`
    /// in the directory read, with `AT_SYMLINK_NOFOLLOW`): `NotFound` if the name went
    /// since the directory was read.
    pub fn metadata(&self) -> IoResult<Metadata> {
        let name = std::ffi::OsStr::from_bytes(&self.raw.name);
        Ok(Metadata(self.p.fstatat(
            &*self.dir,
            name,
            AtFlags::SYMLINK_NOFOLLOW,
        )?))
    }
}

impl std::fmt::Debug for DirEntry<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("DirEntry").field(&self.path()).finish()
    }
}

/// What `stat` tells of an object, as `std::fs::Metadata` (with its Unix extension's
/// fields as methods); [`stat`](Self::stat) gives all of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Metadata(pub Stat);

impl Metadata {
    /// The whole `stat` buffer.
    pub fn stat(&self) -> &Stat {
        &self.0
    }

    /// The object's type.
    pub fn file_type(&self) -> FileType {
        // A valid `Stat` has a valid type.
        FileType::from_mode(self.0.mode).unwrap_or(FileType::Regular)
    }

    /// Whether it is a directory.
    pub fn is_dir(&self) -> bool {
        self.file_type().is_dir()
    }

    /// Whether it is a regular file.
    pub fn is_file(&self) -> bool {
        self.file_type().is_file()
    }

    /// Whether it is a symlink (only [`Fs::symlink_metadata`] can say so).
    pub fn is_symlink(&self) -> bool {
        self.file_type().is_symlink()
    }

    /// The size in bytes.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> u64 {
        self.0.size
    }

    /// The permission bits (and set-id and sticky bits).
    pub fn permissions(&self) -> Permissions {
        Permissions(self.0.mode & 0o7777)
    }

    /// The last data modification.
    pub fn modified(&self) -> IoResult<SystemTime> {
        Ok(self.0.mtime.into())
    }

    /// The last access.
    pub fn accessed(&self) -> IoResult<SystemTime> {
        Ok(self.0.atime.into())
    }

    /// The creation time: `Unsupported`, since the engine does not record it.
    pub fn created(&self) -> IoResult<SystemTime> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "creation time is not available",
        ))
    }

    /// The full mode: type and permission bits.
    pub fn mode(&self) -> u32 {
        self.0.mode
    }

    /// The owner.
    pub fn uid(&self) -> u32 {
        self.0.uid
    }

    /// The group.
    pub fn gid(&self) -> u32 {
        self.0.gid
    }

    /// The inode number.
    pub fn ino(&self) -> u64 {
        self.0.ino
    }

    /// The device of the file system the object is on (one per mount).
    pub fn dev(&self) -> u64 {
        self.0.dev
    }

    /// The number of hard links.
    pub fn nlink(&self) -> u64 {
        self.0.nlink.into()
    }
}

/// Permission bits, as `std::fs::Permissions` (with its Unix extension's `mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Permissions(u32);

impl Permissions {
    /// Permissions of the mode bits `mode` (the type bits are dropped).
    pub fn from_mode(mode: u32) -> Permissions {
        Permissions(mode & 0o7777)
    }

    /// The bits.
    pub fn mode(&self) -> u32 {
        self.0
    }

    /// Sets the bits.
    pub fn set_mode(&mut self, mode: u32) {
        self.0 = mode & 0o7777;
    }

    /// Whether no one may write: no write bit is set. (As in `std`, this says nothing of
    /// whether the caller may write: root may, whatever the bits.)
    pub fn readonly(&self) -> bool {
        self.0 & 0o222 == 0
    }

    /// Clears every write bit, or sets them all.
    pub fn set_readonly(&mut self, on: bool) {
        if on {
            self.0 &= !0o222;
        } else {
            self.0 |= 0o222;
        }
    }
}

impl From<Timespec> for SystemTime {
    fn from(t: Timespec) -> SystemTime {
        let nsec = Duration::from_nanos(t.nsec.into());
        if t.sec >= 0 {
            SystemTime::UNIX_EPOCH + Duration::from_secs(t.sec as u64) + nsec
        } else {
            SystemTime::UNIX_EPOCH - Duration::from_secs(t.sec.unsigned_abs()) + nsec
        }
    }
}

impl TryFrom<SystemTime> for Timespec {
    type Error = Errno;

    /// `EOVERFLOW` for a time whose seconds do not fit an `i64`.
    fn try_from(t: SystemTime) -> Result<Timespec, Errno> {
        let (sec, nsec) = match t.duration_since(SystemTime::UNIX_EPOCH) {
            Ok(d) => (i64::try_from(d.as_secs()), d.subsec_nanos()),
            Err(e) => {
                // Before the epoch: whole seconds down, nanoseconds up.
                let d = e.duration();
                let (s, n) = (d.as_secs(), d.subsec_nanos());
                match n {
                    0 => (i64::try_from(s).map(|s| -s), 0),
                    n => (i64::try_from(s + 1).map(|s| -s), 1_000_000_000 - n),
                }
            }
        };
        Ok(Timespec {
            sec: sec.map_err(|_| Errno::EOVERFLOW)?,
            nsec,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Creds, Vfs};

    /// `copy` within one file system goes through `copy_file_range`; across two it falls
    /// back to reading and writing, and both copy the bytes and the permissions.
    #[test]
    fn copy_works_within_and_across_file_systems() {
        let p = Vfs::new_memfs().process(Creds::root());
        let fs = p.fs();
        fs.create_dir("/m").unwrap();
        p.mount("/m", crate::MemFs::new(crate::MemFsOptions::default()))
            .unwrap();
        let data: Vec<u8> = (0..20_000u32).map(|i| (i % 253) as u8).collect();
        fs.write("/src", &data).unwrap();
        fs.set_permissions("/src", Permissions::from_mode(0o640))
            .unwrap();
        for to in ["/same", "/m/other"] {
            assert_eq!(fs.copy("/src", to).unwrap(), data.len() as u64, "{to}");
            assert_eq!(fs.read(to).unwrap(), data, "{to}");
            assert_eq!(
                fs.metadata(to).unwrap().permissions().mode() & 0o7777,
                0o640
            );
        }
        // Over a longer file: truncated first.
        fs.write("/m/long", vec![1u8; 30_000]).unwrap();
        fs.copy("/src", "/m/long").unwrap();
        assert_eq!(fs.read("/m/long").unwrap(), data);
    }

    #[test]
    fn times_convert_both_ways_around_the_epoch() {
        for (sec, nsec) in [
            (0, 0),
            (1, 5),
            (-1, 0),
            (-1, 999_999_999),
            (-2, 1),
            (1 << 40, 7),
        ] {
            let t = Timespec { sec, nsec };
            let s: SystemTime = t.into();
            assert_eq!(Timespec::try_from(s).unwrap(), t, "{sec} {nsec}");
        }
        let t: SystemTime = Timespec {
            sec: -1,
            nsec: 500_000_000,
        }
        .into();
        assert_eq!(
            SystemTime::UNIX_EPOCH.duration_since(t).unwrap(),
            Duration::from_millis(500)
        );
    }

    #[test]
    fn open_options_refuse_what_std_refuses() {
        let vfs = Vfs::new_memfs();
        let p = vfs.process(Creds::root());
        let fs = p.fs();
        let kind = |o: &OpenOptions| o.open("/x").unwrap_err().kind();
        assert_eq!(kind(&fs.options()), io::ErrorKind::InvalidInput);
        assert_eq!(
            kind(fs.options().read(true).create(true)),
            io::ErrorKind::InvalidInput
        );
        assert_eq!(
            kind(fs.options().read(true).truncate(true)),
            io::ErrorKind::InvalidInput
        );
        assert_eq!(
            kind(fs.options().append(true).truncate(true).create(true)),
            io::ErrorKind::InvalidInput
        );
        assert_eq!(kind(fs.options().read(true)), io::ErrorKind::NotFound);
        // Nothing was made by a refused open.
        assert!(!fs.exists("/x"));
        fs.options()
            .write(true)
            .create_new(true)
            .open("/x")
            .unwrap();
        assert_eq!(
            kind(fs.options().write(true).create_new(true)),
            io::ErrorKind::AlreadyExists
        );
        // create_new does not follow a symlink, even a dangling one.
        fs.symlink("/nowhere", "/l").unwrap();
        let e = fs
            .options()
            .write(true)
            .create_new(true)
            .open("/l")
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert!(!fs.exists("/nowhere"));
    }

    /// The current process is made once, is the same for every thread, and cannot be
    /// replaced once used. (The only test of this binary that touches it.)
    #[test]
    fn the_current_process_is_made_once_and_kept() {
        write("/tmp/mine", "x").unwrap();
        let other = Vfs::new_memfs().process(Creds::root());
        assert!(set_current(other).is_err());
        let seen = std::thread::spawn(|| read_to_string("/tmp/mine").unwrap())
            .join()
            .unwrap();
        assert_eq!(seen, "x");
        let tmp = metadata("/tmp").unwrap();
        assert_eq!(tmp.permissions().mode(), 0o1777);
        assert!(exists("/tmp/mine").unwrap() && !exists("/tmp/theirs").unwrap());
        assert_eq!(
            exists("/tmp/mine/x").unwrap_err().kind(),
            io::ErrorKind::NotADirectory
        );
        let mut f = File::options().append(true).open("/tmp/mine").unwrap();
        f.write_all(b"y").unwrap();
        DirBuilder::new()
            .recursive(true)
            .create("/tmp/a/b")
            .unwrap();
        assert_eq!(
            OpenOptions::new()
                .read(true)
                .open("/tmp/a")
                .unwrap()
                .metadata()
                .unwrap()
                .file_type(),
            FileType::Directory
        );
        assert_eq!(read("/tmp/mine").unwrap(), b"xy");
        remove_dir_all("/tmp/a").unwrap();
        remove_file("/tmp/mine").unwrap();
    }
}
