//! `scalevfs mount`: a fresh namespace served through FUSE.
//!
//! In the foreground by default: Ctrl-C (or `SIGTERM`, `SIGHUP`) unmounts and exits; while
//! the mount is busy, a second signal detaches it. `--daemon` runs the same command again
//! in the background (its own process group, working directory `/`, no terminal) and
//! returns once the mount is in place, or with the error that prevented it.
//!
//! Before mounting it checks what would make the mount fail or mislead, and says so by
//! cause: a mountpoint that is missing, not a directory or already mounted on; no access to
//! `/dev/fuse`; no `fusermount3` for a user other than root.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use scalevfs::{HostFs, HostFsOptions, HostPolicy, MemFs, MemFsOptions, Vfs};
use scalevfs_fuse::{FsOptions, MountOptions};

/// What the mount serves.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// An in-memory file system (memfs), empty at mount, gone at unmount.
    Mem,
    /// A host directory (`--source`), confined beneath it; changes write through to it.
    /// With `--policy exclusive` (the default) this process must own the tree while it is
    /// mounted; with `--policy shared`, others may change it too.
    Host,
}

/// How far `--backend host` trusts what it loaded from the host.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum PolicyArg {
    /// This process owns the tree: what was loaded is cached without limit, never asked
    /// again (a change made on the host behind the mount is not seen).
    Exclusive,
    /// Others may change the tree: what was loaded is trusted for --ttl seconds, then
    /// checked against the host (a directory's mtime and ctime, an object's attributes).
    Shared,
}

/// Options of `scalevfs mount`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Directory to mount on.
    mountpoint: PathBuf,
    /// The file system to serve.
    #[arg(long, value_enum, default_value = "mem")]
    backend: Backend,
    /// The host directory `--backend host` serves.
    #[arg(long, value_name = "DIR", required_if_eq("backend", "host"))]
    source: Option<PathBuf>,
    /// Serve read-only (every change fails with EROFS).
    #[arg(long)]
    read_only: bool,
    /// --backend host: keep at most N host objects cached; past it, names nobody uses are
    /// swept and directories loaded again from the host when next needed [default: no cap].
    #[arg(long, value_name = "N")]
    cache_objects: Option<u64>,
    /// --backend host: whether others may change the host directory while it is mounted.
    #[arg(long, value_enum, default_value = "exclusive")]
    policy: PolicyArg,
    /// --policy shared: seconds a directory's entries and an object's attributes are
    /// trusted before they are checked against the host again (rounded up to 10 ms; 0: at
    /// every use).
    #[arg(long, value_name = "SECS", default_value_t = 1.0)]
    ttl: f64,
    /// Seconds the kernel may cache a name lookup (0: every path walk reaches the engine).
    #[arg(long, value_name = "SECS", default_value_t = 0.0)]
    entry_timeout: f64,
    /// Seconds the kernel may cache attributes (0: every stat reaches the engine).
    #[arg(long, value_name = "SECS", default_value_t = 0.0)]
    attr_timeout: f64,
    /// Threads serving requests [default: the number of CPUs, at least 2].
    #[arg(long)]
    threads: Option<usize>,
    /// Let other users use the mount (needs root, or user_allow_other in /etc/fuse.conf).
    #[arg(long)]
    allow_other: bool,
    /// Answer directory reads with attributes (READDIRPLUS).
    #[arg(long)]
    readdirplus: bool,
    /// Maximum bytes of file data (ENOSPC beyond).
    #[arg(long, value_name = "BYTES")]
    max_bytes: Option<u64>,
    /// Maximum number of files (ENOSPC beyond).
    #[arg(long, value_name = "N")]
    max_inodes: Option<u64>,
    /// Maximum number of files each user but root may own (EDQUOT beyond).
    #[arg(long, value_name = "N")]
    max_inodes_per_user: Option<u64>,
    /// Maximum open files and directories each user but root may hold through the mount
    /// (ENFILE beyond). Root always gets in.
    #[arg(long, value_name = "N")]
    max_open_per_user: Option<u64>,
    /// The source name shown in /proc/mounts and by df [default: scalevfs].
    #[arg(long, value_name = "NAME")]
    fsname: Option<String>,
    /// mount(8)-style options, comma-separated, applied after the flags above: ro, rw,
    /// allow_other, fsname=NAME, entry_timeout=SECS, attr_timeout=SECS, threads=N.
    #[arg(short = 'o', value_name = "OPTS", action = clap::ArgAction::Append)]
    options: Vec<String>,
    /// Serve in the background; return once mounted.
    #[arg(long)]
    daemon: bool,
    /// Print "ready" (or "error: ...") on standard output once mounted (used by --daemon).
    #[arg(long, hide = true)]
    notify_ready: bool,
}

impl Args {
    /// Applies the `-o` options onto the flags they name, in order; an unknown option or a
    /// bad value is refused.
    fn apply_options(&mut self) -> Result<(), String> {
        const KNOWN: &str =
            "ro, rw, allow_other, fsname=NAME, entry_timeout=SECS, attr_timeout=SECS, threads=N";
        let opts = std::mem::take(&mut self.options);
        for opt in opts.iter().flat_map(|o| o.split(',')) {
            let (key, value) = match opt.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (opt, None),
            };
            let bad = |why: &str| format!("-o {opt}: {why}");
            let number = |v: Option<&str>| -> Result<f64, String> {
                let v = v.ok_or_else(|| bad("needs a value"))?;
                v.parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s >= 0.0)
                    .ok_or_else(|| bad("not a number of seconds"))
            };
            match (key, value) {
                ("", None) => {}
                ("ro", None) => self.read_only = true,
                ("rw", None) => self.read_only = false,
                ("allow_other", None) => self.allow_other = true,
                ("fsname", Some(v)) if !v.is_empty() => self.fsname = Some(v.to_owned()),
                ("entry_timeout", v) => self.entry_timeout = number(v)?,
                ("attr_timeout", v) => self.attr_timeout = number(v)?,
                ("threads", Some(v)) => {
                    self.threads = Some(
                        v.parse::<usize>()
                            .ok()
                            .filter(|&n| n >= 1)
                            .ok_or_else(|| bad("not a thread count of at least 1"))?,
                    )
                }
                _ => return Err(bad(&format!("unknown option (known: {KNOWN})"))),
            }
        }
        match &self.fsname {
            Some(n) => scalevfs_fuse::check_fsname(n),
            None => Ok(()),
        }
    }
}

fn secs(s: f64, what: &str) -> Result<Duration, String> {
    Duration::try_from_secs_f64(s).map_err(|e| format!("--{what} {s}: {e}"))
}

/// Runs `scalevfs mount`.
pub fn run(mut args: Args) -> Result<(), String> {
    args.apply_options()?;
    // The causes first, in their own words: what mount(2) or fusermount3 would report
    // instead is an errno about the mountpoint, or a mount stacked silently on another.
    scalevfs_fuse::check_mountpoint(&args.mountpoint)?;
    scalevfs_fuse::fuse_available().map_err(|why| format!("cannot mount FUSE here: {why}"))?;
    if args.daemon {
        return daemonize(&args);
    }
    let notify = args.notify_ready;
    let r = serve(&args);
    if let (true, Err(e)) = (notify, &r) {
        println!("error: {e}");
    }
    r
}

fn serve(args: &Args) -> Result<(), String> {
    let opts = MountOptions {
        fs: FsOptions {
            entry_timeout: secs(args.entry_timeout, "entry-timeout")?,
            attr_timeout: secs(args.attr_timeout, "attr-timeout")?,
            readdirplus: args.readdirplus,
            max_open_per_user: args.max_open_per_user,
        },
        threads: args.threads.unwrap_or(MountOptions::default().threads),
        allow_other: args.allow_other,
        fsname: args
            .fsname
            .clone()
            .unwrap_or(MountOptions::default().fsname),
    };
    let vfs = match args.backend {
        Backend::Mem => {
            if args.source.is_some()
                || args.read_only
                || args.cache_objects.is_some()
                || args.policy != PolicyArg::Exclusive
            {
                return Err(
                    "--source, --read-only, --cache-objects and --policy are for --backend host"
                        .into(),
                );
            }
            Vfs::new(MemFs::new(MemFsOptions {
                max_bytes: args.max_bytes,
                max_inodes: args.max_inodes,
                max_inodes_per_user: args.max_inodes_per_user,
                ..MemFsOptions::default()
            }))
        }
        Backend::Host => {
            if args.max_bytes.is_some()
                || args.max_inodes.is_some()
                || args.max_inodes_per_user.is_some()
            {
                return Err(
                    "--max-bytes, --max-inodes and --max-inodes-per-user are memfs's: \
                     the host directory has its own limits"
                        .into(),
                );
            }
            let src = args
                .source
                .as_deref()
                .ok_or("--backend host needs --source DIR")?;
            let policy = match args.policy {
                PolicyArg::Exclusive => HostPolicy::Exclusive,
                PolicyArg::Shared => HostPolicy::Shared {
                    ttl: secs(args.ttl, "ttl")?,
                },
            };
            let opts = HostFsOptions {
                read_only: args.read_only,
                max_inodes: args.cache_objects,
                policy,
                ..HostFsOptions::default()
            };
            Vfs::new(HostFs::new(src, opts).map_err(|e| format!("{}: {e}", src.display()))?)
        }
    };
    let mp = &args.mountpoint;
    scalevfs_fuse::mount(&vfs, mp, &opts, || {
        if args.notify_ready {
            println!("ready");
        } else {
            eprintln!(
                "scalevfs: serving {} ({} threads); Ctrl-C unmounts",
                mp.display(),
                opts.threads
            );
        }
    })
    .map_err(|e| format!("mounting on {}: {e}", mp.display()))
}

/// Starts this command again in the background and waits for its mount.
fn daemonize(args: &Args) -> Result<(), String> {
    let mp = args
        .mountpoint
        .canonicalize()
        .map_err(|e| format!("{}: {e}", args.mountpoint.display()))?;
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("mount").arg(&mp).arg("--notify-ready");
    let backend = match args.backend {
        Backend::Mem => "mem",
        Backend::Host => "host",
    };
    if let Some(src) = &args.source {
        // The daemon runs in `/`: a relative source must not change meaning.
        let src = src
            .canonicalize()
            .map_err(|e| format!("{}: {e}", src.display()))?;
        cmd.arg("--source").arg(src);
    }
    let policy = match args.policy {
        PolicyArg::Exclusive => "exclusive",
        PolicyArg::Shared => "shared",
    };
    cmd.args(["--backend", backend])
        .args(["--policy", policy, "--ttl", &args.ttl.to_string()])
        .args(["--entry-timeout", &args.entry_timeout.to_string()])
        .args(["--attr-timeout", &args.attr_timeout.to_string()]);
    if let Some(t) = args.threads {
        cmd.args(["--threads", &t.to_string()]);
    }
    if let Some(name) = &args.fsname {
        cmd.arg("--fsname").arg(name);
    }
    if let Some(b) = args.max_bytes {
        cmd.args(["--max-bytes", &b.to_string()]);
    }
    for (v, flag) in [
        (args.max_inodes, "--max-inodes"),
        (args.max_inodes_per_user, "--max-inodes-per-user"),
        (args.max_open_per_user, "--max-open-per-user"),
        (args.cache_objects, "--cache-objects"),
    ] {
        if let Some(n) = v {
            cmd.args([flag, &n.to_string()]);
        }
    }
    for (on, flag) in [
        (args.allow_other, "--allow-other"),
        (args.readdirplus, "--readdirplus"),
        (args.read_only, "--read-only"),
    ] {
        if on {
            cmd.arg(flag);
        }
    }
    use std::os::unix::process::CommandExt;
    let mut child = cmd
        .current_dir("/")
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting the daemon: {e}"))?;
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        let _ = BufReader::new(out).read_line(&mut line);
    }
    match line.trim_end() {
        "ready" => {
            eprintln!("scalevfs: serving {} (pid {})", mp.display(), child.id());
            Ok(())
        }
        l => {
            let st = child.wait().map_err(|e| e.to_string())?;
            let why = l.strip_prefix("error: ").unwrap_or(l);
            Err(format!("the daemon exited ({st}): {why}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn parsed(argv: &[&str]) -> Result<Args, String> {
        let argv = ["mount", "/mnt"].into_iter().chain(argv.iter().copied());
        let mut args = Cli::try_parse_from(argv).map_err(|e| e.to_string())?.args;
        args.apply_options()?;
        Ok(args)
    }

    #[test]
    fn o_options_set_the_flags_they_name_in_order() {
        let a = parsed(&[
            "-o",
            "ro,allow_other",
            "-o",
            "fsname=tree,entry_timeout=1.5,attr_timeout=2,threads=3",
        ])
        .unwrap();
        assert!(a.read_only && a.allow_other);
        assert_eq!(a.fsname.as_deref(), Some("tree"));
        assert_eq!(
            (a.entry_timeout, a.attr_timeout, a.threads),
            (1.5, 2.0, Some(3))
        );
        let a = parsed(&["--read-only", "-o", "rw"]).unwrap();
        assert!(!a.read_only, "-o applies after the flags");
        let a = parsed(&["-o", "ro,rw,,"]).unwrap();
        assert!(!a.read_only, "in order; empty options are nothing");
        let a = parsed(&[]).unwrap();
        assert!(!a.read_only && !a.allow_other && a.fsname.is_none());
    }

    #[test]
    fn o_options_unknown_or_out_of_range_are_refused() {
        for (opts, why) in [
            ("noatime", "unknown option"),
            ("ro=1", "unknown option"),
            ("fsname=", "unknown option"),
            ("entry_timeout", "needs a value"),
            ("entry_timeout=-1", "not a number of seconds"),
            ("attr_timeout=inf", "not a number of seconds"),
            ("attr_timeout=NaN", "not a number of seconds"),
            ("threads=0", "at least 1"),
            ("threads=x", "at least 1"),
            ("fsname=a\\b", "without commas"),
        ] {
            let e = parsed(&["-o", opts]).err().unwrap_or_default();
            assert!(e.contains(why), "-o {opts}: {e}");
        }
        let e = parsed(&["--fsname", "a,b"]).unwrap_err();
        assert!(e.contains("without commas"), "{e}");
        let e = parsed(&["--fsname", "a b"]).unwrap_err();
        assert!(e.contains("without commas"), "{e}");
    }
}
