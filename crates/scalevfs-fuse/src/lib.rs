//! scalevfs-fuse: a scalevfs namespace served through FUSE, so ordinary programs can use it.
//!
//! The kernel speaks FUSE's inode protocol (node ids, lookup counts, file handles); the
//! engine speaks POSIX paths and descriptors. [`ScaleFs`] maps one onto the other without
//! engine support: a node is an engine `O_PATH` descriptor ([`nodes`]), an operation on a
//! name is the engine's `*at` call relative to the parent's descriptor, and each request
//! runs with its caller's credentials ([`creds`]). The FUSE library is fuser, built without
//! libfuse: as root it mounts with `mount(2)`, otherwise through `fusermount3`.
//!
//! [`mount`] serves in the foreground on several threads and unmounts on `SIGINT`,
//! `SIGTERM` or `SIGHUP`; [`spawn`] serves in the background (for tests and embedding).

mod convert;
mod creds;
mod files;
mod fs;
mod nodes;

use std::io;
use std::path::Path;
use std::sync::Arc;

use fuser::{Config, MountOption, SessionACL};
use nix::sys::signal::{SigSet, Signal};
use scalevfs::Vfs;

pub use creds::{parse_groups, CredGate, Who};
pub use fs::{FsOptions, NodeCount, ScaleFs};
pub use nodes::{NodeId, NodeTable, ObjKey};

/// How to mount.
#[derive(Clone, Debug)]
pub struct MountOptions {
    /// What the file system answers (timeouts, readdirplus).
    pub fs: FsOptions,
    /// Threads reading requests from the kernel (each with its own cloned `/dev/fuse`
    /// descriptor when more than one).
    pub threads: usize,
    /// Let users other than the one who mounted use the mount (FUSE `allow_other`; needs
    /// root or `user_allow_other` in /etc/fuse.conf). Implies `default_permissions`: the
    /// kernel checks permissions before the request reaches the engine.
    pub allow_other: bool,
    /// The source name shown in /proc/mounts.
    pub fsname: String,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            fs: FsOptions::default(),
            threads: std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 16)),
            allow_other: false,
            fsname: "scalevfs".into(),
        }
    }
}

/// Whether `name` can be a mount's fsname: a non-empty word without commas, backslashes or
/// white space (fusermount3 takes it inside a comma-separated option string; /proc/mounts
/// shows it in a space-separated line). `Err` says why not.
pub fn check_fsname(name: &str) -> Result<(), String> {
    match name.is_empty() || name.contains([',', '\\']) || name.contains(char::is_whitespace) {
        true => Err(format!(
            "fsname {name:?}: must be a non-empty word without commas, backslashes or spaces"
        )),
        false => Ok(()),
    }
}

/// The session's configuration; `InvalidInput` for an fsname [`check_fsname`] refuses.
fn config(opts: &MountOptions) -> io::Result<Config> {
    check_fsname(&opts.fsname).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let mut c = Config::default();
    c.mount_options = vec![
        MountOption::FSName(opts.fsname.clone()),
        MountOption::Subtype("scalevfs".into()),
        MountOption::RW,
    ];
    c.acl = if opts.allow_other {
        // Other users reach the mount: the kernel checks permissions first, from the
        // attributes, in its own order (as libfuse's passthrough examples do); the
        // engine's checks still run behind them.
        c.mount_options.push(MountOption::DefaultPermissions);
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    c.n_threads = Some(opts.threads.max(1));
    c.clone_fd = opts.threads > 1;
    Ok(c)
}

/// Mounts `fs` on `mountpoint` and serves it in the background until the returned session
/// is unmounted (`umount_and_join`) or dropped. `opts.fs` is not used: `fs` has its own.
pub fn spawn(
    fs: ScaleFs,
    mountpoint: &Path,
    opts: &MountOptions,
) -> io::Result<fuser::BackgroundSession> {
    fuser::Session::new(fs, mountpoint, &config(opts)?)?.spawn()
}

/// Mounts `vfs` on `mountpoint` and serves it on this thread and `opts.threads - 1` more
/// until it is unmounted: by `umount`/`fusermount3 -u`, or by `SIGINT`, `SIGTERM` or
/// `SIGHUP` to this process. The first signal unmounts normally; if the mount is busy, the
/// error is printed and a second signal detaches it (lazy unmount), after which serving
/// goes on until the last user lets go. `SIGUSR1` prints the namespace's statistics
/// ([`scalevfs::VfsStats`]) on standard error. `ready` runs once the mount is in place.
///
/// Blocks those signals in the calling thread (and so in the threads it starts): call it
/// before starting other threads.
pub fn mount(
    vfs: &Arc<Vfs>,
    mountpoint: &Path,
    opts: &MountOptions,
    ready: impl FnOnce(),
) -> io::Result<()> {
    let mut signals = SigSet::empty();
    for s in [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGUSR1,
    ] {
        signals.add(s);
    }
    signals.thread_block().map_err(io::Error::from)?;
    let fs = ScaleFs::new(vfs, opts.fs.clone()).map_err(io::Error::from)?;
    let mp = mountpoint.canonicalize()?;
    // As root, mount(2) here, to name the type fuse.scalevfs (fuser's own mount(2) says
    // "fuse"); otherwise fuser runs fusermount3, which passes the subtype on.
    let cfg = config(opts)?;
    let (se, mut unmounter) = if nix::unistd::geteuid().is_root() {
        let dev = mount_as_root(&mp, opts)?;
        match fuser::Session::from_fd(fs, dev, cfg.acl, cfg) {
            Ok(se) => (se, Unmounter::Syscall(mp.clone())),
            Err(e) => {
                let _ = nix::mount::umount2(&mp, nix::mount::MntFlags::MNT_DETACH);
                return Err(e);
            }
        }
    } else {
        let mut se = fuser::Session::new(fs, &mp, &cfg)?;
        let u = se.unmount_callable();
        (se, Unmounter::Fuser(u))
    };
    let stats = vfs.clone();
    std::thread::Builder::new()
        .name("scalevfs-signals".into())
        .spawn(move || {
            let mut asked = 0;
            while let Ok(sig) = signals.wait() {
                if sig == Signal::SIGUSR1 {
                    eprintln!("scalevfs mount: {}", stats.stats());
                    continue;
                }
                asked += 1;
                if asked == 1 {
                    match unmounter.unmount() {
                        Ok(()) => return,
                        Err(e) => eprintln!(
                            "scalevfs mount: {sig:?}: unmounting {}: {e}; \
                             signal again to detach it (lazy unmount)",
                            mp.display()
                        ),
                    }
                } else {
                    match lazy_unmount(&mp) {
                        Ok(()) => return,
                        Err(e) => eprintln!("scalevfs mount: detaching {}: {e}", mp.display()),
                    }
                }
            }
        })?;
    ready();
    se.run()
}

/// How [`mount`] unmounts: as it mounted.
enum Unmounter {
    /// fuser mounted (through fusermount3): fuser unmounts.
    Fuser(fuser::SessionUnmounter),
    /// We mounted with mount(2): umount(2) it.
    Syscall(std::path::PathBuf),
}

impl Unmounter {
    fn unmount(&mut self) -> io::Result<()> {
        match self {
            Unmounter::Fuser(u) => u.unmount(),
            Unmounter::Syscall(mp) => {
                nix::mount::umount2(mp.as_path(), nix::mount::MntFlags::empty())?;
                Ok(())
            }
        }
    }
}

/// The file system type [`mount`] shows in /proc/mounts (as fusermount3 does, from the
/// subtype).
pub const FS_TYPE: &str = "fuse.scalevfs";

/// Mounts a FUSE file system of type [`FS_TYPE`] on `mountpoint` with mount(2), as
/// fusermount3 would (`nosuid`, `nodev`, the directory's file type as the root's), and
/// returns the `/dev/fuse` descriptor that serves it. Needs root.
fn mount_as_root(mountpoint: &Path, opts: &MountOptions) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;
    // std opens with O_CLOEXEC.
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")?;
    let rootmode = std::fs::metadata(mountpoint)?.mode() & nix::libc::S_IFMT;
    let mut data = format!(
        "fd={},rootmode={rootmode:o},user_id={},group_id={}",
        dev.as_raw_fd(),
        nix::unistd::getuid(),
        nix::unistd::getgid()
    );
    if opts.allow_other {
        data.push_str(",allow_other,default_permissions");
    }
    nix::mount::mount(
        Some(opts.fsname.as_str()),
        mountpoint,
        Some(FS_TYPE),
        nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
        Some(data.as_str()),
    )?;
    Ok(dev.into())
}

/// Detaches a mount now; it goes away when its last user lets go (`umount -l`).
pub fn lazy_unmount(mountpoint: &Path) -> io::Result<()> {
    match nix::mount::umount2(mountpoint, nix::mount::MntFlags::MNT_DETACH) {
        Ok(()) => Ok(()),
        Err(nix::errno::Errno::EPERM) => {
            let st = std::process::Command::new("fusermount3")
                .arg("-u")
                .arg("-z")
                .arg(mountpoint)
                .status()?;
            if st.success() {
                Ok(())
            } else {
                Err(io::Error::other(format!("fusermount3 -u -z: {st}")))
            }
        }
        Err(e) => Err(e.into()),
    }
}

/// Whether this process can mount FUSE file systems: `/dev/fuse` opens for reading and
/// writing, and either it runs as root or `fusermount3` is in `PATH`. `Err` names the cause
/// and what would remove it.
pub fn fuse_available() -> Result<(), String> {
    let dev = Path::new("/dev/fuse");
    if let Err(e) = std::fs::OpenOptions::new().read(true).write(true).open(dev) {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(dev)
            .ok()
            .map(|m| (m.mode(), m.uid(), m.gid()));
        return Err(explain_dev_fuse(&e, nix::unistd::geteuid().as_raw(), meta));
    }
    if nix::unistd::geteuid().is_root() {
        return Ok(());
    }
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("fusermount3").exists()));
    match found {
        true => Ok(()),
        false => Err(
            "not root, and fusermount3 (which mounts FUSE for users other than \
                      root) is not in PATH: install it (apt install fuse3), or mount as root"
                .into(),
        ),
    }
}

/// Why `/dev/fuse` did not open (`e`), for user `uid`, given the device's mode and owner.
fn explain_dev_fuse(e: &io::Error, uid: u32, meta: Option<(u32, u32, u32)>) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => "/dev/fuse does not exist: load the fuse module (modprobe \
                                    fuse), or give the container the device (--device /dev/fuse)"
            .into(),
        io::ErrorKind::PermissionDenied => {
            let how = meta.map_or(String::new(), |(mode, owner, group)| {
                format!(
                    " (it is mode {:04o}, owner {owner}, group {group})",
                    mode & 0o7777
                )
            });
            format!(
                "/dev/fuse: permission denied to uid {uid}{how}: mount as root, or give this \
                 user read and write access to /dev/fuse (Debian's fuse3 makes it 0666)"
            )
        }
        _ => format!("/dev/fuse: {e}"),
    }
}

/// Whether `mountpoint` can take a mount: it exists, is a directory, and nothing is mounted
/// on it yet (a second mount would hide the first, silently). `Err` says which, in words
/// that name the path.
pub fn check_mountpoint(mountpoint: &Path) -> Result<(), String> {
    let shown = mountpoint.display();
    let meta = std::fs::metadata(mountpoint).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => format!("{shown}: no such directory (create it first)"),
        _ => format!("{shown}: {e}"),
    })?;
    if !meta.is_dir() {
        return Err(format!(
            "{shown}: not a directory (a file system is mounted on a directory)"
        ));
    }
    let canonical = mountpoint
        .canonicalize()
        .map_err(|e| format!("{shown}: {e}"))?;
    let table = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
    match mounted_at(&table, &canonical) {
        None => Ok(()),
        Some((fstype, source)) => Err(format!(
            "{shown}: already a mount point ({fstype} from {source}); unmount it first \
             (umount, or fusermount3 -u), or mount somewhere else"
        )),
    }
}

/// The file system type and source of the topmost mount on `path` in a mountinfo table
/// (proc(5)), if any.
fn mounted_at(table: &str, path: &Path) -> Option<(String, String)> {
    use std::os::unix::ffi::OsStrExt;
    let want = path.as_os_str().as_bytes();
    table.lines().rev().find_map(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        let point = unescape_mountinfo(fields.get(4)?);
        let sep = fields.iter().position(|f| *f == "-")?;
        let fstype = unescape_mountinfo(fields.get(sep + 1)?);
        let source = unescape_mountinfo(fields.get(sep + 2)?);
        (point == want).then(|| {
            (
                String::from_utf8_lossy(&fstype).into_owned(),
                String::from_utf8_lossy(&source).into_owned(),
            )
        })
    })
}

/// Undoes mountinfo's escapes: space, tab, newline and backslash are written as `\ooo`.
fn unescape_mountinfo(field: &str) -> Vec<u8> {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_fsname_is_one_word() {
        assert_eq!(check_fsname("scalevfs-tree.1"), Ok(()));
        for bad in ["", "a,b", "a\\b", "a b", "a\tb"] {
            let e = check_fsname(bad).unwrap_err();
            assert!(e.contains("without commas"), "{bad:?}: {e}");
        }
        let opts = MountOptions {
            fsname: "a,b".into(),
            ..MountOptions::default()
        };
        assert_eq!(
            config(&opts).err().map(|e| e.kind()),
            Some(io::ErrorKind::InvalidInput)
        );
    }

    #[test]
    fn dev_fuse_failures_name_their_cause() {
        let missing = io::Error::from(io::ErrorKind::NotFound);
        assert!(explain_dev_fuse(&missing, 1000, None).contains("modprobe fuse"));
        let denied = io::Error::from(io::ErrorKind::PermissionDenied);
        let why = explain_dev_fuse(&denied, 1000, Some((0o20600, 0, 0)));
        assert!(
            why.starts_with("/dev/fuse: permission denied to uid 1000"),
            "{why}"
        );
        assert!(why.contains("mode 0600, owner 0, group 0"), "{why}");
        let other = io::Error::from_raw_os_error(nix::libc::ENXIO);
        assert!(explain_dev_fuse(&other, 0, None).starts_with("/dev/fuse: "));
    }

    #[test]
    fn mountinfo_is_read_with_its_escapes() {
        let table = "22 1 0:21 / /proc rw,nosuid - proc proc rw\n\
                     40 22 0:39 / /tmp/a\\040b rw - tmpfs my\\134src rw\n\
                     41 40 0:40 / /tmp/a\\040b rw shared:1 - fuse.scalevfs scalevfs rw\n";
        assert_eq!(
            mounted_at(table, Path::new("/tmp/a b")),
            Some(("fuse.scalevfs".into(), "scalevfs".into())),
            "the topmost mount"
        );
        assert_eq!(
            mounted_at(table, Path::new("/proc")),
            Some(("proc".into(), "proc".into()))
        );
        assert_eq!(mounted_at(table, Path::new("/tmp/a")), None);
        assert_eq!(mounted_at(table, Path::new("/tmp")), None);
        assert_eq!(unescape_mountinfo("my\\134src"), b"my\\src");
        assert_eq!(unescape_mountinfo("a\\9b\\"), b"a\\9b\\", "not an escape");
    }

    #[test]
    fn a_mountpoint_must_be_a_directory_not_yet_mounted() {
        let dir = std::env::temp_dir().join(format!("scalevfs-mp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("f");
        std::fs::write(&file, b"x").unwrap();
        assert_eq!(check_mountpoint(&dir), Ok(()));
        let e = check_mountpoint(&file).unwrap_err();
        assert!(
            e.ends_with("not a directory (a file system is mounted on a directory)"),
            "{e}"
        );
        let e = check_mountpoint(&dir.join("none")).unwrap_err();
        assert!(e.contains("no such directory"), "{e}");
        // /proc is a mount point wherever this runs.
        let e = check_mountpoint(Path::new("/proc")).unwrap_err();
        assert!(
            e.starts_with("/proc: already a mount point (proc from "),
            "{e}"
        );
        // Through a symlink, the mount point is still recognized.
        let link = dir.join("l");
        std::os::unix::fs::symlink("/proc", &link).unwrap();
        assert!(check_mountpoint(&link)
            .unwrap_err()
            .contains("already a mount point"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
