//! The `std::fs`-shaped layer (`scalevfs::fs`) against `std::fs` itself on the host
//! kernel's tmpfs: one script of calls runs on both, and every answer (a value, or an
//! error's kind) must agree. A difference is ours to fix, unless the kernel side is the
//! odd one out, in which case the script is wrong.

use scalevfs::fs::{Fs, Metadata, Permissions};
use scalevfs::{Creds, Errno, Vfs};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// What a script sees: a value, or an error's kind.
type Seen = Result<String, io::ErrorKind>;

fn seen<T: std::fmt::Debug>(r: io::Result<T>) -> Seen {
    r.map(|v| format!("{v:?}")).map_err(|e| e.kind())
}

/// What `open_rw` does with a file it opened, the same on both sides: write `data`, seek to
/// 1, read the rest, read 2 bytes at 0, write a byte at 1; each answer described.
fn exercise<F: Read + Write + Seek>(
    f: &mut F,
    data: &[u8],
    read_at: impl FnOnce(&F, &mut [u8], u64) -> io::Result<usize>,
    write_at: impl FnOnce(&F, &[u8], u64) -> io::Result<usize>,
) -> String {
    let w = f.write(data).map_err(|e| e.kind());
    let s = f.seek(SeekFrom::Start(1)).map_err(|e| e.kind());
    let mut rest = Vec::new();
    let r = f.read_to_end(&mut rest).map(|_| rest).map_err(|e| e.kind());
    let mut two = [0; 2];
    let at = read_at(f, &mut two, 0)
        .map(|n| two[..n].to_vec())
        .map_err(|e| e.kind());
    let wat = write_at(f, b"Z", 1).map_err(|e| e.kind());
    format!("{w:?} {s:?} {r:?} {at:?} {wat:?}")
}

/// The parts of metadata both sides give alike (not times, device or inode numbers).
fn meta(m: &Metadata) -> String {
    format!(
        "dir={} file={} link={} len={} mode={:o} nlink={} ro={}",
        m.is_dir(),
        m.is_file(),
        m.is_symlink(),
        m.len(),
        m.mode(),
        m.nlink(),
        m.permissions().readonly()
    )
}

fn host_meta(m: &std::fs::Metadata) -> String {
    format!(
        "dir={} file={} link={} len={} mode={:o} nlink={} ro={}",
        m.is_dir(),
        m.is_file(),
        m.is_symlink(),
        m.len(),
        m.mode(),
        m.nlink(),
        m.permissions().readonly()
    )
}

/// The calls a script makes, on either side. Paths are relative to the side's root.
trait Side {
    fn write(&self, p: &str, data: &[u8]) -> Seen;
    fn read(&self, p: &str) -> Seen;
    fn read_to_string(&self, p: &str) -> Seen;
    fn meta(&self, p: &str) -> Seen;
    fn lmeta(&self, p: &str) -> Seen;
    fn exists(&self, p: &str) -> bool;
    fn try_exists(&self, p: &str) -> Seen;
    fn create_new(&self, p: &str) -> Seen;
    /// Opens with (read, write, append, truncate, create, create_new, mode), writes
    /// `data`, seeks to 1 and reads the rest; then reads 2 bytes at 0 and writes `Z` at
    /// offset 1 (positional).
    fn open_rw(&self, p: &str, o: [bool; 6], mode: u32, data: &[u8]) -> Seen;
    fn set_len(&self, p: &str, len: u64) -> Seen;
    fn mkdir(&self, p: &str) -> Seen;
    fn mkdir_all(&self, p: &str) -> Seen;
    fn builder(&self, p: &str, recursive: bool, mode: u32) -> Seen;
    fn remove_file(&self, p: &str) -> Seen;
    fn remove_dir(&self, p: &str) -> Seen;
    fn remove_dir_all(&self, p: &str) -> Seen;
    fn rename(&self, a: &str, b: &str) -> Seen;
    fn copy(&self, a: &str, b: &str) -> Seen;
    fn hard_link(&self, a: &str, b: &str) -> Seen;
    fn symlink(&self, target: &str, link: &str) -> Seen;
    fn read_link(&self, p: &str) -> Seen;
    fn canonicalize(&self, p: &str) -> Seen;
    fn chmod(&self, p: &str, mode: u32) -> Seen;
    /// The entries (name, path relative to the root, type, metadata), sorted.
    fn read_dir(&self, p: &str) -> Seen;
}

struct Host(PathBuf);

impl Host {
    fn at(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
    fn rel(&self, p: &Path) -> String {
        p.strip_prefix(&self.0).unwrap().display().to_string()
    }
}

impl Side for Host {
    fn write(&self, p: &str, data: &[u8]) -> Seen {
        seen(std::fs::write(self.at(p), data))
    }
    fn read(&self, p: &str) -> Seen {
        seen(std::fs::read(self.at(p)))
    }
    fn read_to_string(&self, p: &str) -> Seen {
        seen(std::fs::read_to_string(self.at(p)))
    }
    fn meta(&self, p: &str) -> Seen {
        std::fs::metadata(self.at(p))
            .map(|m| host_meta(&m))
            .map_err(|e| e.kind())
    }
    fn lmeta(&self, p: &str) -> Seen {
        std::fs::symlink_metadata(self.at(p))
            .map(|m| host_meta(&m))
            .map_err(|e| e.kind())
    }
    fn exists(&self, p: &str) -> bool {
        self.at(p).exists()
    }
    fn try_exists(&self, p: &str) -> Seen {
        seen(self.at(p).try_exists())
    }
    fn create_new(&self, p: &str) -> Seen {
        seen(std::fs::File::create_new(self.at(p)).map(|_| ()))
    }
    fn open_rw(&self, p: &str, o: [bool; 6], mode: u32, data: &[u8]) -> Seen {
        let r = (|| {
            let mut f = std::fs::OpenOptions::new()
                .read(o[0])
                .write(o[1])
                .append(o[2])
                .truncate(o[3])
                .create(o[4])
                .create_new(o[5])
                .mode(mode)
                .open(self.at(p))?;
            Ok(exercise(
                &mut f,
                data,
                |f, b, o| f.read_at(b, o),
                |f, b, o| f.write_at(b, o),
            ))
        })();
        r.map_err(|e: io::Error| e.kind())
    }
    fn set_len(&self, p: &str, len: u64) -> Seen {
        let f = std::fs::OpenOptions::new().write(true).open(self.at(p));
        seen(f.and_then(|f| f.set_len(len)))
    }
    fn mkdir(&self, p: &str) -> Seen {
        seen(std::fs::create_dir(self.at(p)))
    }
    fn mkdir_all(&self, p: &str) -> Seen {
        seen(std::fs::create_dir_all(self.at(p)))
    }
    fn builder(&self, p: &str, recursive: bool, mode: u32) -> Seen {
        seen(
            std::fs::DirBuilder::new()
                .recursive(recursive)
                .mode(mode)
                .create(self.at(p)),
        )
    }
    fn remove_file(&self, p: &str) -> Seen {
        seen(std::fs::remove_file(self.at(p)))
    }
    fn remove_dir(&self, p: &str) -> Seen {
        seen(std::fs::remove_dir(self.at(p)))
    }
    fn remove_dir_all(&self, p: &str) -> Seen {
        seen(std::fs::remove_dir_all(self.at(p)))
    }
    fn rename(&self, a: &str, b: &str) -> Seen {
        seen(std::fs::rename(self.at(a), self.at(b)))
    }
    fn copy(&self, a: &str, b: &str) -> Seen {
        seen(std::fs::copy(self.at(a), self.at(b)))
    }
    fn hard_link(&self, a: &str, b: &str) -> Seen {
        seen(std::fs::hard_link(self.at(a), self.at(b)))
    }
    fn symlink(&self, target: &str, link: &str) -> Seen {
        seen(std::os::unix::fs::symlink(target, self.at(link)))
    }
    fn read_link(&self, p: &str) -> Seen {
        seen(std::fs::read_link(self.at(p)))
    }
    fn canonicalize(&self, p: &str) -> Seen {
        std::fs::canonicalize(self.at(p))
            .map(|c| self.rel(&c))
            .map_err(|e| e.kind())
    }
    fn chmod(&self, p: &str, mode: u32) -> Seen {
        seen(std::fs::set_permissions(
            self.at(p),
            std::fs::Permissions::from_mode(mode),
        ))
    }
    fn read_dir(&self, p: &str) -> Seen {
        let r = (|| {
            let mut v = Vec::new();
            for e in std::fs::read_dir(self.at(p))? {
                let e = e?;
                let t = e.file_type()?;
                v.push(format!(
                    "{:?} {} dir={} file={} link={} {}",
                    e.file_name(),
                    self.rel(&e.path()),
                    t.is_dir(),
                    t.is_file(),
                    t.is_symlink(),
                    host_meta(&e.metadata()?)
                ));
            }
            v.sort();
            Ok(v.join("\n"))
        })();
        r.map_err(|e: io::Error| e.kind())
    }
}

struct Engine<'p>(Fs<'p>);

impl Engine<'_> {
    fn at(&self, p: &str) -> String {
        format!("/{p}")
    }
}

impl Side for Engine<'_> {
    fn write(&self, p: &str, data: &[u8]) -> Seen {
        seen(self.0.write(self.at(p), data))
    }
    fn read(&self, p: &str) -> Seen {
        seen(self.0.read(self.at(p)))
    }
    fn read_to_string(&self, p: &str) -> Seen {
        seen(self.0.read_to_string(self.at(p)))
    }
    fn meta(&self, p: &str) -> Seen {
        self.0
            .metadata(self.at(p))
            .map(|m| meta(&m))
            .map_err(|e| e.kind())
    }
    fn lmeta(&self, p: &str) -> Seen {
        self.0
            .symlink_metadata(self.at(p))
            .map(|m| meta(&m))
            .map_err(|e| e.kind())
    }
    fn exists(&self, p: &str) -> bool {
        self.0.exists(self.at(p))
    }
    fn try_exists(&self, p: &str) -> Seen {
        seen(self.0.try_exists(self.at(p)))
    }
    fn create_new(&self, p: &str) -> Seen {
        seen(self.0.create_new(self.at(p)).map(|_| ()))
    }
    fn open_rw(&self, p: &str, o: [bool; 6], mode: u32, data: &[u8]) -> Seen {
        let r = (|| {
            let mut f = self
                .0
                .options()
                .read(o[0])
                .write(o[1])
                .append(o[2])
                .truncate(o[3])
                .create(o[4])
                .create_new(o[5])
                .mode(mode)
                .open(self.at(p))?;
            Ok(exercise(
                &mut f,
                data,
                |f, b, o| f.read_at(b, o),
                |f, b, o| f.write_at(b, o),
            ))
        })();
        r.map_err(|e: io::Error| e.kind())
    }
    fn set_len(&self, p: &str, len: u64) -> Seen {
        let f = self.0.options().write(true).open(self.at(p));
        seen(f.and_then(|f| f.set_len(len)))
    }
    fn mkdir(&self, p: &str) -> Seen {
        seen(self.0.create_dir(self.at(p)))
    }
    fn mkdir_all(&self, p: &str) -> Seen {
        seen(self.0.create_dir_all(self.at(p)))
    }
    fn builder(&self, p: &str, recursive: bool, mode: u32) -> Seen {
        seen(
            self.0
                .dir_builder()
                .recursive(recursive)
                .mode(mode)
                .create(self.at(p)),
        )
    }
    fn remove_file(&self, p: &str) -> Seen {
        seen(self.0.remove_file(self.at(p)))
    }
    fn remove_dir(&self, p: &str) -> Seen {
        seen(self.0.remove_dir(self.at(p)))
    }
    fn remove_dir_all(&self, p: &str) -> Seen {
        seen(self.0.remove_dir_all(self.at(p)))
    }
    fn rename(&self, a: &str, b: &str) -> Seen {
        seen(self.0.rename(self.at(a), self.at(b)))
    }
    fn copy(&self, a: &str, b: &str) -> Seen {
        seen(self.0.copy(self.at(a), self.at(b)))
    }
    fn hard_link(&self, a: &str, b: &str) -> Seen {
        seen(self.0.hard_link(self.at(a), self.at(b)))
    }
    fn symlink(&self, target: &str, link: &str) -> Seen {
        seen(self.0.symlink(target, self.at(link)))
    }
    fn read_link(&self, p: &str) -> Seen {
        seen(self.0.read_link(self.at(p)))
    }
    fn canonicalize(&self, p: &str) -> Seen {
        self.0
            .canonicalize(self.at(p))
            .map(|c| c.strip_prefix("/").unwrap().display().to_string())
            .map_err(|e| e.kind())
    }
    fn chmod(&self, p: &str, mode: u32) -> Seen {
        seen(
            self.0
                .set_permissions(self.at(p), Permissions::from_mode(mode)),
        )
    }
    fn read_dir(&self, p: &str) -> Seen {
        let r = (|| {
            let mut v = Vec::new();
            for e in self.0.read_dir(self.at(p))? {
                let e = e?;
                let t = e.file_type()?;
                v.push(format!(
                    "{:?} {} dir={} file={} link={} {}",
                    e.file_name(),
                    e.path().strip_prefix("/").unwrap().display(),
                    t.is_dir(),
                    t.is_file(),
                    t.is_symlink(),
                    meta(&e.metadata()?)
                ));
            }
            v.sort();
            Ok(v.join("\n"))
        })();
        r.map_err(|e: io::Error| e.kind())
    }
}

/// The script: every call's answer, one line each, labelled.
fn script(s: &dyn Side) -> Vec<(String, Seen)> {
    let mut out = Vec::new();
    let mut log = |what: &str, r: Seen| out.push((what.to_string(), r));
    log("write f", s.write("f", b"hello"));
    log("read f", s.read("f"));
    log("meta f", s.meta("f"));
    log("read missing", s.read("missing"));
    log("write 0xff", s.write("bin", &[0xff, 0xfe]));
    log("string of bin", s.read_to_string("bin"));
    log("create_new f", s.create_new("f"));
    log("create_new g", s.create_new("g"));
    let o = |r, w, a, t, c, n| [r, w, a, t, c, n];
    for (name, opts) in [
        ("none", o(false, false, false, false, false, false)),
        ("read", o(true, false, false, false, false, false)),
        ("write", o(false, true, false, false, false, false)),
        ("rw", o(true, true, false, false, false, false)),
        ("append", o(false, false, true, false, false, false)),
        ("read append", o(true, false, true, false, false, false)),
        ("rw trunc", o(true, true, false, true, false, false)),
        ("read trunc", o(true, false, false, true, false, false)),
        ("read create", o(true, false, false, false, true, false)),
        (
            "append trunc create",
            o(false, false, true, true, true, false),
        ),
        ("write create", o(false, true, false, false, true, false)),
        ("rw create_new", o(true, true, false, false, false, true)),
    ] {
        for target in ["f", "new"] {
            let label = format!("open {name} {target}");
            log(&label, s.open_rw(target, opts, 0o640, b"xyz"));
            log(&format!("{label}: read"), s.read(target));
            log(&format!("{label}: meta"), s.meta(target));
        }
    }
    log("set_len f 10", s.set_len("f", 10));
    log("read f", s.read("f"));
    log("set_len f 2", s.set_len("f", 2));
    log("read f", s.read("f"));
    log("mkdir d", s.mkdir("d"));
    log("mkdir d again", s.mkdir("d"));
    log("mkdir f", s.mkdir("f"));
    log("mkdir a/b", s.mkdir("a/b"));
    log("mkdir_all a/b/c", s.mkdir_all("a/b/c"));
    log("mkdir_all a/b/c again", s.mkdir_all("a/b/c"));
    log("mkdir_all f/x", s.mkdir_all("f/x"));
    log("builder m/n 0o750", s.builder("m/n", true, 0o750));
    log("meta m", s.meta("m"));
    log("meta m/n", s.meta("m/n"));
    log("builder m/n again", s.builder("m/n", true, 0o750));
    log("builder m/n not recursive", s.builder("m/n", false, 0o750));
    log("builder over a file", s.builder("f", true, 0o755));
    log("try_exists f", s.try_exists("f"));
    log("try_exists missing", s.try_exists("missing"));
    log("try_exists f/x", s.try_exists("f/x"));
    log("exists f/x", Ok(s.exists("f/x").to_string()));
    log("exists d", Ok(s.exists("d").to_string()));
    log("copy f d/f2", s.copy("f", "d/f2"));
    log("chmod f 0o600", s.chmod("f", 0o600));
    log("copy f d/f3", s.copy("f", "d/f3"));
    log("meta d/f3", s.meta("d/f3"));
    log("copy over an existing file", s.copy("g", "d/f3"));
    log("copy d", s.copy("d", "d2"));
    log("copy missing", s.copy("missing", "d2"));
    log("copy into a file", s.copy("f", "f/x"));
    log("hard_link f h", s.hard_link("f", "h"));
    log("meta h", s.meta("h"));
    log("hard_link d dl", s.hard_link("d", "dl"));
    log("hard_link onto f", s.hard_link("g", "f"));
    log("symlink d/f2 l", s.symlink("d/f2", "l"));
    log("symlink dangling", s.symlink("nowhere", "dangling"));
    log("read_link l", s.read_link("l"));
    log("read_link f", s.read_link("f"));
    log("meta l", s.meta("l"));
    log("lmeta l", s.lmeta("l"));
    log("meta dangling", s.meta("dangling"));
    log("exists dangling", Ok(s.exists("dangling").to_string()));
    log("try_exists dangling", s.try_exists("dangling"));
    log("canonicalize l", s.canonicalize("l"));
    log("canonicalize a/b/../b/c", s.canonicalize("a/b/../b/c"));
    log("canonicalize dangling", s.canonicalize("dangling"));
    log("symlink loop", s.symlink("loop", "loop"));
    log("meta loop", s.meta("loop"));
    log("canonicalize loop", s.canonicalize("loop"));
    log("read_dir .", s.read_dir(""));
    log("read_dir d", s.read_dir("d"));
    log("read_dir f", s.read_dir("f"));
    log("read_dir missing", s.read_dir("missing"));
    log("read_dir l (to a file)", s.read_dir("l"));
    log("remove_file d", s.remove_file("d"));
    log("remove_dir d", s.remove_dir("d"));
    log("remove_dir f", s.remove_dir("f"));
    log("remove_file l", s.remove_file("l"));
    log("meta d/f2 after", s.meta("d/f2"));
    log("rename a a/b/x", s.rename("a", "a/b/x"));
    log("rename d m", s.rename("d", "m"));
    log("rename f d", s.rename("f", "d"));
    log("rename f g", s.rename("f", "g"));
    log("read g", s.read("g"));
    log("rename d m/n", s.rename("d", "m/n"));
    log("remove_dir_all a", s.remove_dir_all("a"));
    log("remove_dir_all missing", s.remove_dir_all("missing"));
    log("remove_dir_all g", s.remove_dir_all("g"));
    log("read_dir . at the end", s.read_dir(""));
    out
}

#[test]
fn the_std_shaped_layer_answers_as_std_on_the_kernel() {
    let base = Path::new("/dev/shm").join(format!("scalevfs-std-api-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir(&base).unwrap();
    // Both sides create with the same umask (the engine's default).
    let old = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o022));
    let host = script(&Host(base.clone()));
    rustix::process::umask(old);
    let _ = std::fs::remove_dir_all(&base);
    let vfs = Vfs::new_memfs();
    let p = vfs.process(Creds::root());
    let engine = script(&Engine(p.fs()));
    let mut diffs = Vec::new();
    for ((what, h), (_, e)) in host.iter().zip(&engine) {
        if h != e {
            diffs.push(format!("{what}:\n  kernel: {h:?}\n  engine: {e:?}"));
        }
    }
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

/// Errors carry the errno: by kind, by name in the message, and back through `Errno::of`.
#[test]
fn errors_name_their_errno() {
    let vfs = Vfs::new_memfs();
    let p = vfs.process(Creds::root());
    let fs = p.fs();
    let e = fs.metadata("/missing").unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound);
    assert_eq!(e.to_string(), "No such file or directory (ENOENT)");
    assert_eq!(Errno::of(&e), Some(Errno::ENOENT));
    fs.write("/f", "").unwrap();
    let e = fs.create_dir("/f/d").unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotADirectory);
    assert!(e.to_string().contains("ENOTDIR"), "{e}");
    // `?` into a boxed error keeps the message.
    let boxed = || -> Result<(), Box<dyn std::error::Error>> {
        fs.remove_dir("/")?;
        Ok(())
    };
    assert!(boxed().unwrap_err().to_string().contains("(EBUSY)"));
}

/// A `File` closes on drop, also when `?` returns early: the descriptor table is not
/// touched at all, and an unlinked file's data goes with its last `File`.
#[test]
fn files_close_on_drop() {
    let vfs = Vfs::new_memfs();
    let p = vfs.process(Creds::root());
    let fs = p.fs();
    let before = p.open("/", scalevfs::OFlags::RDONLY, 0).unwrap();
    p.close(before).unwrap();
    let early = || -> io::Result<()> {
        let _f = fs.create("/f")?;
        fs.open("/missing")?;
        Ok(())
    };
    assert!(early().is_err());
    let f = fs.options().read(true).write(true).open("/f").unwrap();
    (&f).write_all(&[7; 10000]).unwrap();
    let g = fs.open("/f").unwrap();
    fs.remove_file("/f").unwrap();
    (&g).write_all(b"x").unwrap_err(); // opened for reading only
    drop(f);
    assert_eq!(g.metadata().unwrap().nlink(), 0);
    assert_eq!(g.metadata().unwrap().len(), 10000);
    assert!(vfs.root_fs().stats().data_pages > 0);
    drop(g);
    assert_eq!(
        vfs.root_fs().stats().data_pages,
        0,
        "the data went with the last File"
    );
    // The lowest descriptor is the one the first `open` got: no `File` took a slot.
    let after = p.open("/", scalevfs::OFlags::RDONLY, 0).unwrap();
    assert_eq!(after, before);
}
