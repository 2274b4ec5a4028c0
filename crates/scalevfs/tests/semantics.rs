//! Hand-written semantic cases, each run on the host kernel's tmpfs and on the engine, compared
//! call by call (results, errno, normalised stat) and by a final snapshot of the whole tree.
//!
//! The kernel is the oracle: a case whose expectation (`ok!`, `err!`) the kernel does not meet
//! is a wrong case. Needs root (the kernel side chroots into a tmpfs directory); skipped
//! otherwise.

#![allow(unused_must_use)]

mod common;

use common::oracle::{acc, at, o, rn, Cred, Dir, E, T};
use common::Rec;

macro_rules! case {
    ($(#[$m:meta])* $name:ident, |$r:ident| $body:block) => {
        $(#[$m])*
        #[test]
        fn $name() {
            common::check(stringify!($name), |$r: &mut Rec| $body);
        }
    };
}

/// The call must succeed on the kernel.
macro_rules! ok {
    ($r:ident . $($c:tt)+) => {{
        let res = $r.$($c)+;
        $r.want(res, Ok(()))
    }};
}

/// The call must fail with this errno on the kernel.
macro_rules! err {
    ($e:ident, $r:ident . $($c:tt)+) => {{
        let res = $r.$($c)+;
        $r.want(res, Err(E::$e))
    }};
}

/// `/d` (dir 0755), `/f` (file "hello"), `/ld` -> d, `/lf` -> f, `/dangling` -> missing.
fn base(r: &mut Rec) {
    ok!(r.mkdir("/d", 0o755));
    ok!(r.mkfile("/f", b"hello"));
    ok!(r.symlink("d", "/ld"));
    ok!(r.symlink("f", "/lf"));
    ok!(r.symlink("missing", "/dangling"));
}

fn u1000() -> Cred {
    Cred::u1000()
}
fn u1001() -> Cred {
    Cred::u1001()
}

// ---------------------------------------------------------------------------------------------
// Empty paths, NUL, over-long names and paths

case!(empty_path_is_enoent_everywhere, |r| {
    base(r);
    err!(ENOENT, r.stat(""));
    err!(ENOENT, r.lstat(""));
    err!(ENOENT, r.open("", o::RDONLY, 0));
    err!(ENOENT, r.open("", o::CREAT | o::WRONLY, 0o644));
    err!(ENOENT, r.mkdir("", 0o755));
    err!(ENOENT, r.rmdir(""));
    err!(ENOENT, r.unlink(""));
    err!(ENOENT, r.rename("", "/x"));
    err!(ENOENT, r.rename("/f", ""));
    err!(ENOENT, r.link("", "/x"));
    err!(ENOENT, r.link("/f", ""));
    err!(ENOENT, r.symlink("f", ""));
    err!(ENOENT, r.symlink("", "/x"));
    err!(ENOENT, r.readlink(""));
    err!(ENOENT, r.access("", acc::F_OK));
    err!(ENOENT, r.chmod("", 0o644));
    err!(ENOENT, r.chown("", Some(0), Some(0)));
    err!(ENOENT, r.truncate("", 0));
    err!(ENOENT, r.chdir(""));
    err!(ENOENT, r.utimens("", [T::Now, T::Now]));
});

case!(empty_path_with_dirfd, |r| {
    base(r);
    let d = ok!(r.open("/d", o::RDONLY | o::DIRECTORY, 0)).unwrap();
    let f = ok!(r.open("/f", o::RDONLY, 0)).unwrap();
    err!(ENOENT, r.stat_at(Dir::Fd(d), "", 0));
    ok!(r.stat_at(Dir::Fd(d), "", at::EMPTY_PATH));
    ok!(r.stat_at(Dir::Fd(f), "", at::EMPTY_PATH));
    ok!(r.stat_at(Dir::Fd(f), "", at::EMPTY_PATH | at::SYMLINK_NOFOLLOW));
    ok!(r.chown_at(Dir::Fd(f), "", Some(1000), Some(1000), at::EMPTY_PATH));
    ok!(r.stat("/f"));
    err!(ENOTDIR, r.stat_at(Dir::Fd(f), "x", 0));
    err!(ENOTDIR, r.open_at(Dir::Fd(f), "x", o::RDONLY, 0));
    ok!(r.stat_at(Dir::Fd(f), "/d", 0));
    r.close(d);
    r.close(f);
});

case!(empty_path_is_cwd_fd_with_empty_path_flag, |r| {
    base(r);
    ok!(r.chdir("/d"));
    ok!(r.stat_at(Dir::Cwd, "", at::EMPTY_PATH));
    err!(ENOENT, r.stat_at(Dir::Cwd, "", 0));
});

/// The kernel cannot be given an embedded NUL (a C string ends there), so this runs on the
/// engine alone: the engine must refuse it with EINVAL rather than truncate the path.
#[test]
fn embedded_nul_is_einval_engine_only() {
    let mut eng = common::engine::Engine::new();
    let mut r = Rec::new(&mut eng);
    r.mkdir("/a", 0o755).unwrap();
    r.mkfile("/a/b", b"x").unwrap();
    let p: &[u8] = b"/a\0/b";
    assert_eq!(r.stat(p).unwrap_err(), E::EINVAL);
    assert_eq!(r.lstat(p).unwrap_err(), E::EINVAL);
    assert_eq!(r.open(p, o::RDONLY, 0).unwrap_err(), E::EINVAL);
    assert_eq!(
        r.open(b"/a/c\0", o::CREAT | o::WRONLY, 0o644).unwrap_err(),
        E::EINVAL
    );
    assert_eq!(r.mkdir(b"/x\0y", 0o755).unwrap_err(), E::EINVAL);
    assert_eq!(r.unlink(p).unwrap_err(), E::EINVAL);
    assert_eq!(r.rmdir(b"/a\0").unwrap_err(), E::EINVAL);
    assert_eq!(r.rename(p, "/z").unwrap_err(), E::EINVAL);
    assert_eq!(r.rename("/a/b", b"/z\0").unwrap_err(), E::EINVAL);
    assert_eq!(r.link("/a/b", b"/z\0").unwrap_err(), E::EINVAL);
    assert_eq!(r.symlink(b"a\0b", "/s").unwrap_err(), E::EINVAL);
    assert_eq!(r.symlink("a", b"/s\0").unwrap_err(), E::EINVAL);
    assert_eq!(r.access(p, acc::F_OK).unwrap_err(), E::EINVAL);
    assert_eq!(r.chmod(p, 0o600).unwrap_err(), E::EINVAL);
    assert_eq!(r.truncate(p, 0).unwrap_err(), E::EINVAL);
    assert_eq!(r.chdir(b"/a\0").unwrap_err(), E::EINVAL);
    assert_eq!(r.readlink(b"\0").unwrap_err(), E::EINVAL);
    // Nothing was created or truncated by any of those.
    assert_eq!(r.readdir("/").unwrap().len(), 1);
    assert_eq!(r.cat("/a/b").unwrap(), b"x");
}

fn name(n: usize) -> Vec<u8> {
    vec![b'n'; n]
}

case!(name_max_255_ok_256_enametoolong, |r| {
    base(r);
    let n255 = [b"/d/".as_slice(), &name(255)].concat();
    let n256 = [b"/d/".as_slice(), &name(256)].concat();
    ok!(r.mkdir(&n255, 0o755));
    ok!(r.stat(&n255));
    ok!(r.touch(
        [n255.as_slice(), b"/f"].concat(),
        o::CREAT | o::WRONLY,
        0o644
    ));
    err!(ENAMETOOLONG, r.mkdir(&n256, 0o755));
    err!(ENAMETOOLONG, r.stat(&n256));
    err!(ENAMETOOLONG, r.lstat(&n256));
    err!(ENAMETOOLONG, r.open(&n256, o::CREAT | o::WRONLY, 0o644));
    err!(ENAMETOOLONG, r.symlink("f", &n256));
    err!(ENAMETOOLONG, r.link("/f", &n256));
    err!(ENAMETOOLONG, r.rename("/f", &n256));
    // The old name is looked up before the new name's length matters.
    err!(ENOENT, r.rename("/missing", &n256));
    err!(
        ENOENT,
        r.rename("/missing", [b"/".as_slice(), &name(256)].concat())
    );
    err!(ENOENT, r.link("/missing", &n256));
    r.rename(&n256, "/missing");
    // In a removed directory every lookup is ENOENT, long names included.
    ok!(r.mkdir("/gone", 0o755));
    ok!(r.chdir("/gone"));
    ok!(r.rmdir("/gone"));
    err!(ENOENT, r.stat(name(256)));
    err!(ENOENT, r.link(name(256), "/x"));
    err!(ENOENT, r.mkdir(name(256), 0o755));
    err!(ENOENT, r.rename(name(256), "/x"));
    err!(ENOENT, r.rename(name(256), "a"));
    err!(ENOENT, r.rename("/f", name(256)));
    err!(ENOENT, r.link("/f", name(256)));
    err!(ENOENT, r.symlink("f", name(256)));
    err!(ENOENT, r.unlink(name(256)));
    err!(ENOENT, r.rmdir(name(256)));
    err!(ENOENT, r.open(name(256), o::CREAT | o::WRONLY, 0o644));
    err!(ENOENT, r.access(name(256), acc::F_OK));
    ok!(r.chdir("/"));
    r.symlink(&n256, "/target_may_have_long_names");
    r.stat("/target_may_have_long_names");
    err!(ENAMETOOLONG, r.unlink(&n256));
    err!(ENAMETOOLONG, r.rmdir(&n256));
    err!(ENAMETOOLONG, r.access(&n256, acc::F_OK));
    // A long name in the middle of the path.
    err!(ENAMETOOLONG, r.stat([n256.as_slice(), b"/x"].concat()));
    // A missing directory earlier in the path is found first.
    err!(ENOENT, r.stat([b"/nope/".as_slice(), &name(256)].concat()));
    // A long name after a file.
    r.stat([b"/f/".as_slice(), &name(256)].concat());
    ok!(r.readdir("/d"));
});

case!(long_name_under_unsearchable_dir, |r| {
    base(r);
    ok!(r.chmod("/d", 0o700));
    r.set_creds(&u1000());
    err!(EACCES, r.stat([b"/d/".as_slice(), &name(256)].concat()));
    err!(EACCES, r.stat([b"/d/".as_slice(), &name(255)].concat()));
});

case!(path_max, |r| {
    base(r);
    // "./" repeated, then "f": exactly 4095 bytes is fine, 4096 is ENAMETOOLONG.
    let mut p = b"./".repeat(2047);
    p.push(b'f');
    assert_eq!(p.len(), 4095);
    ok!(r.stat(&p));
    let mut q = b"/".to_vec();
    q.extend_from_slice(&p);
    assert_eq!(q.len(), 4096);
    err!(ENAMETOOLONG, r.stat(&q));
    err!(ENAMETOOLONG, r.lstat(&q));
    err!(ENAMETOOLONG, r.open(&q, o::RDONLY, 0));
    err!(ENAMETOOLONG, r.mkdir(&q, 0o755));
    err!(ENAMETOOLONG, r.unlink(&q));
    err!(ENAMETOOLONG, r.rename(&q, "/x"));
    err!(ENAMETOOLONG, r.access(&q, acc::F_OK));
    let long = b"/".repeat(5000);
    err!(ENAMETOOLONG, r.stat(&long));
    let slashes = [b"/".repeat(4093).as_slice(), b"d"].concat();
    ok!(r.stat(&slashes));
    // Creating a new name at the limit.
    let mut c = b"./".repeat(2046);
    c.extend_from_slice(b"abc");
    assert_eq!(c.len(), 4095);
    ok!(r.mkdir(&c, 0o700));
    c.push(b'd');
    err!(ENAMETOOLONG, r.mkdir(&c, 0o700));
    ok!(r.chdir("/d"));
    let mut rel = b"../".repeat(1365);
    assert_eq!(rel.len(), 4095);
    ok!(r.stat(&rel));
    rel.push(b'f');
    err!(ENAMETOOLONG, r.stat(&rel));
});

case!(symlink_target_length, |r| {
    base(r);
    let t4095 = b"x".repeat(4095);
    ok!(r.symlink(&t4095, "/long"));
    ok!(r.lstat("/long"));
    ok!(r.readlink("/long"));
    err!(ENAMETOOLONG, r.symlink(b"x".repeat(4096), "/toolong"));
    // A long target made of short names: following it works (with name limits per component).
    let t = b"d/../".repeat(800);
    ok!(r.symlink([t.as_slice(), b"f"].concat(), "/far"));
    ok!(r.stat("/far"));
    // Short and page-backed symlinks differ in st_blocks on tmpfs.
    ok!(r.symlink(b"y".repeat(127), "/s127"));
    ok!(r.symlink(b"y".repeat(128), "/s128"));
    ok!(r.symlink(b"y".repeat(129), "/s129"));
    ok!(r.lstat("/s127"));
    ok!(r.lstat("/s128"));
    ok!(r.lstat("/s129"));
});

// ---------------------------------------------------------------------------------------------
// Symlinks: loops, the 40 limit, following rules

// The 40-link limit bounds the whole resolution, the links followed to reach a directory
// included: the engine may reach `/l39` from its path cache (a stat of `/l39/x` caches it)
// and walk only the last name, and must still count the 39 links behind it.
case!(
    symlink_limit_counts_the_links_behind_a_cached_directory,
    |r| {
        ok!(r.mkdir("/d0", 0o755));
        ok!(r.symlink("d0", "/l1"));
        for i in 2..=39 {
            ok!(r.symlink(&format!("l{}", i - 1), &format!("/l{i}")));
        }
        ok!(r.mkfile("/d0/y", b"y"));
        ok!(r.symlink("y", "/d0/x"));
        ok!(r.symlink("x", "/d0/x2"));
        ok!(r.symlink("/d0/y", "/d0/abs"));
        // 39 links to the directory, one more to the file: 40, the limit.
        for _ in 0..3 {
            ok!(r.stat("/l39/x"));
            ok!(r.stat("/l39/y"));
            ok!(r.lstat("/l39/x2"));
            err!(ELOOP, r.stat("/l39/x2"));
            ok!(r.stat("/l39/abs"));
            err!(ELOOP, r.access("/l39/x2", acc::F_OK));
            ok!(r.access("/l39/x", acc::F_OK));
            err!(ELOOP, r.open("/l39/x2", o::RDONLY, 0));
            ok!(r.open("/l39/x", o::RDONLY, 0));
            err!(ELOOP, r.open("/l39/x2", o::CREAT | o::WRONLY, 0o644));
            ok!(r.open("/l39/x", o::CREAT | o::WRONLY, 0o644));
        }
        // Through 38 links, two more are allowed.
        ok!(r.stat("/l38/x2"));
        ok!(r.open("/l38/x2", o::RDONLY, 0));
    }
);

case!(symlink_loops, |r| {
    ok!(r.symlink("loop", "/loop"));
    ok!(r.symlink("b", "/a"));
    ok!(r.symlink("a", "/b"));
    err!(ELOOP, r.stat("/loop"));
    ok!(r.lstat("/loop"));
    ok!(r.readlink("/loop"));
    err!(ELOOP, r.stat("/a"));
    err!(ELOOP, r.stat("/loop/x"));
    err!(ELOOP, r.lstat("/loop/x"));
    err!(ELOOP, r.lstat("/loop/"));
    err!(ELOOP, r.open("/loop", o::RDONLY, 0));
    err!(ELOOP, r.open("/loop", o::CREAT | o::WRONLY, 0o644));
    err!(
        EEXIST,
        r.open("/loop", o::CREAT | o::EXCL | o::WRONLY, 0o644)
    );
    err!(EEXIST, r.mkdir("/loop", 0o755));
    err!(ELOOP, r.mkdir("/loop/x", 0o755));
    err!(ELOOP, r.chdir("/loop"));
    err!(ELOOP, r.access("/a", acc::F_OK));
    ok!(r.access_at(Dir::Cwd, "/a", acc::F_OK, at::SYMLINK_NOFOLLOW));
    err!(ELOOP, r.chmod("/loop", 0o600));
    err!(ELOOP, r.truncate("/loop", 0));
    err!(
        ELOOP,
        r.link_at(Dir::Cwd, "/loop", Dir::Cwd, "/h", at::SYMLINK_FOLLOW)
    );
    ok!(r.link("/loop", "/h"));
    ok!(r.lstat("/h"));
    err!(ELOOP, r.stat("/h"));
    ok!(r.rename("/loop", "/loop2"));
    ok!(r.unlink("/loop2"));
    ok!(r.unlink("/a"));
});

case!(
    /// l1 -> l2/a, l2 -> l3/a, ..., l12 -> d: each link is followed while the rest of the
    /// link that named it (`/a`) is still pending, so thirteen path segments are pending at
    /// once (past the walk's eight inline slots) and must come back in order: `/l1/f` is
    /// `/d` followed by eleven `a`s, then `f`.
    nested_symlinks_resume_each_pending_rest, |r| {
    ok!(r.mkdir("/d", 0o755));
    let mut dir = String::from("/d");
    for _ in 0..11 {
        dir.push_str("/a");
        ok!(r.mkdir(dir.as_str(), 0o755));
    }
    ok!(r.mkfile(format!("{dir}/f").as_str(), b"deep"));
    for k in 1..12 {
        ok!(r.symlink(format!("l{}/a", k + 1).as_str(), format!("/l{k}").as_str()));
    }
    ok!(r.symlink("d", "/l12"));
    ok!(r.stat("/l1/f"));
    ok!(r.stat("/l1"));
    ok!(r.stat("/l5/a/a/a/a/f"));
    err!(ENOENT, r.stat("/l5/f"));
});

case!(
    /// l0 -> f, l1 -> l0, ... : following l(k) follows k+1 links. 40 is allowed, 41 is ELOOP.
    forty_symlinks_exactly, |r| {
    ok!(r.mkfile("/f", b"x"));
    ok!(r.symlink("f", "/l0"));
    for i in 1..=41 {
        ok!(r.symlink(format!("l{}", i - 1), format!("/l{i}")));
    }
    ok!(r.stat("/l38"));
    ok!(r.stat("/l39"));
    err!(ELOOP, r.stat("/l40"));
    err!(ELOOP, r.stat("/l41"));
    ok!(r.lstat("/l41"));
    ok!(r.cat("/l39"));
    err!(ELOOP, r.open("/l40", o::RDONLY, 0));
    err!(ELOOP, r.access("/l40", acc::R_OK));
});

case!(
    /// Links followed in the middle of a path count toward the same 40.
    forty_symlinks_across_components, |r| {
    ok!(r.mkdir("/dir", 0o755));
    ok!(r.mkfile("/dir/f", b"x"));
    ok!(r.symlink("dir", "/d0"));
    for i in 1..20 {
        ok!(r.symlink(format!("d{}", i - 1), format!("/d{i}")));
    }
    // /d19 costs 20 links.
    ok!(r.symlink("f", "/dir/y0"));
    for i in 1..=40 {
        ok!(r.symlink(format!("y{}", i - 1), format!("/dir/y{i}")));
    }
    ok!(r.stat("/d19/y19"));
    err!(ELOOP, r.stat("/d19/y20"));
    ok!(r.lstat("/d19/y20"));
    // Links followed by chdir are not charged to later calls.
    ok!(r.chdir("/d19"));
    ok!(r.stat("y20"));
    ok!(r.stat("y39"));
    err!(ELOOP, r.stat("y40"));
});

case!(symlink_resolution_relative_absolute, |r| {
    base(r);
    ok!(r.mkdir("/d/e", 0o755));
    ok!(r.mkfile("/d/e/g", b"g"));
    ok!(r.symlink("../f", "/d/up"));
    ok!(r.symlink("/d/e", "/d/abs"));
    ok!(r.symlink(".", "/d/dot"));
    ok!(r.symlink("..", "/d/dotdot"));
    ok!(r.symlink("e/g", "/d/eg"));
    ok!(r.stat("/d/up"));
    ok!(r.cat("/d/up"));
    ok!(r.stat("/d/abs/g"));
    ok!(r.stat("/d/dot/dot/dot/e"));
    ok!(r.stat("/d/dotdot/d/dotdot/f"));
    ok!(r.stat("/d/eg"));
    ok!(r.stat("/ld/abs/../e/g"));
    // ".." after a symlink goes to the parent of the target, not of the link.
    ok!(r.stat("/d/abs/../e"));
    ok!(r.stat("/d/abs/.."));
    ok!(r.symlink("/../../..", "/rootlink"));
    ok!(r.stat("/rootlink/f"));
    ok!(r.chdir("/d/abs"));
    ok!(r.getcwd());
    ok!(r.chdir("/ld"));
    ok!(r.getcwd());
});

case!(symlink_target_with_trailing_slash, |r| {
    base(r);
    ok!(r.symlink("f/", "/fs"));
    ok!(r.symlink("d/", "/ds"));
    ok!(r.symlink("nothing/", "/ns"));
    err!(ENOTDIR, r.stat("/fs"));
    ok!(r.lstat("/fs"));
    err!(ENOTDIR, r.open("/fs", o::WRONLY, 0));
    err!(ENOTDIR, r.open("/fs", o::RDONLY, 0));
    err!(ENOTDIR, r.access("/fs", acc::F_OK));
    err!(ENOTDIR, r.truncate("/fs", 0));
    err!(ENOTDIR, r.chdir("/fs"));
    ok!(r.stat("/ds"));
    ok!(r.chdir("/ds"));
    ok!(r.getcwd());
    err!(EISDIR, r.open("/ns", o::CREAT | o::WRONLY, 0o644));
    ok!(r.mkdir("/nothing", 0o755));
    ok!(r.stat("/ns"));
    err!(
        ENOTDIR,
        r.link_at(Dir::Cwd, "/fs", Dir::Cwd, "/h", at::SYMLINK_FOLLOW)
    );
    ok!(r.readdir("/"));
});

// A slash after a link's last component asks for a directory at the end of whatever that
// link leads to, through further links: Linux keeps `LOOKUP_DIRECTORY` to the end of the
// walk. (Found by the random plans on hostfs: `truncate` through such a chain cut a file.)
case!(trailing_slash_in_a_body_holds_through_further_links, |r| {
    base(r);
    ok!(r.symlink("f", "/sf"));
    ok!(r.symlink("sf/", "/c1"));
    ok!(r.symlink("lf/", "/c2"));
    ok!(r.symlink("ld/", "/c3"));
    ok!(r.symlink("d/../lf/", "/c4"));
    ok!(r.symlink("c1", "/c5"));
    for c in ["/c1", "/c2", "/c4", "/c5"] {
        err!(ENOTDIR, r.truncate(c, 0));
        err!(ENOTDIR, r.stat(c));
        ok!(r.lstat(c));
        err!(ENOTDIR, r.open(c, o::WRONLY | o::TRUNC, 0));
        err!(ENOTDIR, r.open(c, o::RDONLY, 0));
        r.open(c, o::CREAT | o::WRONLY, 0o644);
        err!(ENOTDIR, r.access(c, acc::F_OK));
        err!(ENOTDIR, r.chdir(c));
        r.link_at(Dir::Cwd, c, Dir::Cwd, "/h", at::SYMLINK_FOLLOW);
        r.chmod(c, 0o600);
        r.utimens(c, [T::Now, T::Now]);
    }
    ok!(r.stat("/c3"));
    ok!(r.chdir("/c3"));
    ok!(r.chdir("/"));
    // The file is whole.
    assert_eq!(r.cat("/f").unwrap(), b"hello");
});

case!(dangling_and_empty_targets, |r| {
    base(r);
    err!(ENOENT, r.stat("/dangling"));
    ok!(r.lstat("/dangling"));
    err!(ENOENT, r.stat("/dangling/x"));
    err!(ENOENT, r.open("/dangling", o::RDONLY, 0));
    err!(ENOENT, r.chdir("/dangling"));
    err!(ENOENT, r.access("/dangling", acc::F_OK));
    err!(ENOENT, r.mkdir("/dangling/x", 0o755));
    // mkdir does not create through a dangling link.
    err!(EEXIST, r.mkdir("/dangling", 0o755));
    err!(ENOENT, r.symlink("", "/empty"));
});

case!(readlink_rules, |r| {
    base(r);
    err!(EINVAL, r.readlink("/f"));
    err!(EINVAL, r.readlink("/d"));
    err!(ENOENT, r.readlink("/missing"));
    err!(ENOTDIR, r.readlink("/f/"));
    err!(ENOTDIR, r.readlink("/lf/"));
    err!(EINVAL, r.readlink("/ld/"));
    ok!(r.readlink("/ld"));
    ok!(r.readlink("/dangling"));
    ok!(r.readlink("/d/../ld"));
    let d = ok!(r.open("/", o::RDONLY | o::DIRECTORY, 0)).unwrap();
    ok!(r.readlink_at(Dir::Fd(d), "lf"));
    let s = ok!(r.open("/lf", o::PATH | o::NOFOLLOW, 0)).unwrap();
    ok!(r.readlink_at(Dir::Fd(s), ""));
    r.close(s);
    r.close(d);
});

// ---------------------------------------------------------------------------------------------
// Non-directory components and trailing slashes

case!(enotdir_components, |r| {
    base(r);
    err!(ENOTDIR, r.stat("/f/x"));
    err!(ENOTDIR, r.stat("/f/."));
    err!(ENOTDIR, r.stat("/f/.."));
    err!(ENOTDIR, r.stat("/lf/x"));
    err!(ENOTDIR, r.lstat("/f/x"));
    err!(ENOTDIR, r.open("/f/x", o::RDONLY, 0));
    err!(ENOTDIR, r.open("/f/x", o::CREAT | o::WRONLY, 0o644));
    err!(ENOTDIR, r.mkdir("/f/x", 0o755));
    err!(ENOTDIR, r.rmdir("/f/x"));
    err!(ENOTDIR, r.unlink("/f/x"));
    err!(ENOTDIR, r.rename("/f/x", "/y"));
    err!(ENOTDIR, r.rename("/d", "/f/x"));
    err!(ENOTDIR, r.link("/f", "/f/x"));
    err!(ENOTDIR, r.symlink("f", "/f/x"));
    err!(ENOTDIR, r.chdir("/f"));
    err!(ENOTDIR, r.chdir("/lf"));
    err!(ENOTDIR, r.access("/f/", acc::F_OK));
    err!(ENOENT, r.stat("/missing/x"));
    err!(ENOENT, r.mkdir("/missing/x", 0o755));
    err!(ENOTDIR, r.open("/f", o::RDONLY | o::DIRECTORY, 0));
    err!(ENOTDIR, r.open("/lf", o::RDONLY | o::DIRECTORY, 0));
    ok!(r.open("/ld", o::RDONLY | o::DIRECTORY, 0));
});

case!(trailing_slash_lookup, |r| {
    base(r);
    ok!(r.stat("/d/"));
    ok!(r.stat("/d//"));
    ok!(r.stat("/d/."));
    ok!(r.stat("/d/./"));
    err!(ENOTDIR, r.stat("/f/"));
    err!(ENOTDIR, r.lstat("/f/"));
    ok!(r.lstat("/ld/"));
    ok!(r.lstat("/ld"));
    err!(ENOTDIR, r.lstat("/lf/"));
    err!(ENOENT, r.lstat("/dangling/"));
    err!(ENOENT, r.stat("/missing/"));
    err!(ENOTDIR, r.open("/f/", o::RDONLY, 0));
    ok!(r.open("/d/", o::RDONLY, 0));
    err!(ENOTDIR, r.access("/lf/", acc::F_OK));
    err!(ENOTDIR, r.chmod("/f/", 0o600));
    err!(ENOTDIR, r.truncate("/f/", 0));
});

case!(trailing_slash_create, |r| {
    base(r);
    ok!(r.mkdir("/n1/", 0o755));
    ok!(r.mkdir("/n2//", 0o755));
    err!(EEXIST, r.mkdir("/f/", 0o755));
    err!(EEXIST, r.mkdir("/ld/", 0o755));
    err!(EEXIST, r.mkdir("/dangling/", 0o755));
    err!(EISDIR, r.open("/new/", o::CREAT | o::WRONLY, 0o644));
    err!(EISDIR, r.open("/f/", o::CREAT | o::WRONLY, 0o644));
    err!(EISDIR, r.open("/d/", o::CREAT | o::RDONLY, 0o644));
    err!(
        EISDIR,
        r.open("/new/", o::CREAT | o::EXCL | o::WRONLY, 0o644)
    );
    r.symlink("f", "/s/");
    r.symlink("f", "/d/");
    r.link("/f", "/h/");
    r.link("/f/", "/h");
    r.mknod("/fifo/", ty_fifo() | 0o644);
    ok!(r.readdir("/"));
});

fn ty_fifo() -> u32 {
    common::oracle::ty::S_IFIFO
}

case!(trailing_slash_remove, |r| {
    base(r);
    ok!(r.mkdir("/e", 0o755));
    err!(ENOTDIR, r.unlink("/f/"));
    err!(EISDIR, r.unlink("/d"));
    err!(EISDIR, r.unlink("/d/"));
    err!(ENOENT, r.unlink("/missing/"));
    r.unlink("/lf/");
    r.unlink("/ld/");
    r.rmdir("/ld/");
    err!(ENOTDIR, r.rmdir("/ld"));
    err!(ENOTDIR, r.rmdir("/f"));
    err!(ENOTDIR, r.rmdir("/f/"));
    ok!(r.rmdir("/e/"));
    ok!(r.mkdir("/e", 0o755));
    ok!(r.rmdir("/e//"));
    ok!(r.lstat("/ld"));
    ok!(r.lstat("/lf"));
});

case!(rmdir_dot_and_dotdot, |r| {
    base(r);
    ok!(r.mkdir("/d/e", 0o755));
    err!(EINVAL, r.rmdir("/d/."));
    err!(EINVAL, r.rmdir("/d/e/."));
    err!(ENOTEMPTY, r.rmdir("/d/e/.."));
    err!(ENOTEMPTY, r.rmdir("/d/.."));
    err!(EBUSY, r.rmdir("/"));
    ok!(r.chdir("/d/e"));
    err!(EINVAL, r.rmdir("."));
    err!(ENOTEMPTY, r.rmdir(".."));
    r.rmdir("/d/e/..");
    ok!(r.rmdir("/d/e"));
    err!(EISDIR, r.unlink("/"));
    err!(EISDIR, r.unlink("."));
    err!(EISDIR, r.unlink(".."));
    r.mkdir(".", 0o755);
    r.mkdir("..", 0o755);
    r.mkdir("/", 0o755);
});

case!(trailing_slash_rename, |r| {
    base(r);
    ok!(r.mkdir("/e", 0o755));
    ok!(r.rename("/d", "/x/"));
    ok!(r.rename("/x/", "/y"));
    ok!(r.rename("/y/", "/z/"));
    err!(ENOTDIR, r.rename("/f", "/g/"));
    err!(ENOTDIR, r.rename("/f/", "/g"));
    err!(ENOTDIR, r.rename("/z", "/f/"));
    ok!(r.rename("/z", "/e/"));
    r.rename("/ld/", "/q");
    r.rename("/lf", "/q2/");
    ok!(r.readdir("/"));
});

// ---------------------------------------------------------------------------------------------
// Permissions

case!(search_permission_on_every_directory, |r| {
    ok!(r.mkdir("/a", 0o755));
    ok!(r.mkdir("/a/b", 0o700));
    ok!(r.mkdir("/a/b/c", 0o777));
    ok!(r.chmod("/a/b/c", 0o777));
    ok!(r.mkfile("/a/b/c/f", b"x"));
    ok!(r.chmod("/a/b/c/f", 0o666));
    r.set_creds(&u1000());
    ok!(r.stat("/a/b"));
    err!(EACCES, r.stat("/a/b/c"));
    err!(EACCES, r.stat("/a/b/c/f"));
    err!(EACCES, r.stat("/a/b/missing"));
    err!(EACCES, r.stat("/a/b/c/missing/x"));
    err!(EACCES, r.open("/a/b/c/f", o::RDONLY, 0));
    err!(EACCES, r.open("/a/b/c/new", o::CREAT | o::WRONLY, 0o644));
    err!(EACCES, r.chdir("/a/b"));
    err!(EACCES, r.access("/a/b/c/f", acc::F_OK));
    err!(EACCES, r.readlink("/a/b/c/f"));
    err!(EACCES, r.mkdir("/a/b/c/x", 0o755));
    err!(EACCES, r.unlink("/a/b/c/f"));
    err!(EACCES, r.readdir("/a/b"));
    err!(EACCES, r.access("/a/b", acc::X_OK));
    ok!(r.access("/a/b", acc::F_OK));
    r.as_root();
    ok!(r.stat("/a/b/c/f"));
    ok!(r.chmod("/a/b", 0o711));
    r.set_creds(&u1000());
    ok!(r.stat("/a/b/c/f"));
    err!(EACCES, r.readdir("/a/b"));
    ok!(r.readdir("/a/b/c"));
    ok!(r.chdir("/a/b/c"));
    ok!(r.getcwd());
    ok!(r.stat("f"));
    ok!(r.stat(".."));
    ok!(r.mkfile("g", b"mine"));
    ok!(r.stat("g"));
});

case!(dir_read_without_search, |r| {
    ok!(r.mkdir("/d", 0o755));
    ok!(r.mkfile("/d/f", b"x"));
    ok!(r.chmod("/d", 0o744));
    r.set_creds(&u1000());
    ok!(r.readdir("/d"));
    err!(EACCES, r.stat("/d/f"));
    err!(EACCES, r.stat("/d/."));
    err!(EACCES, r.open("/d/f", o::RDONLY, 0));
    r.as_root();
    ok!(r.chmod("/d", 0o733));
    r.set_creds(&u1000());
    err!(EACCES, r.readdir("/d"));
    ok!(r.stat("/d/f"));
    ok!(r.touch("/d/new", o::CREAT | o::WRONLY, 0o600));
    ok!(r.unlink("/d/new"));
});

case!(write_permission_on_parent, |r| {
    ok!(r.mkdir("/d", 0o755));
    ok!(r.mkfile("/d/f", b"x"));
    ok!(r.chmod("/d/f", 0o666));
    ok!(r.mkdir("/d/sub", 0o777));
    ok!(r.chmod("/d/sub", 0o777));
    r.set_creds(&u1000());
    err!(EACCES, r.open("/d/new", o::CREAT | o::WRONLY, 0o644));
    err!(EACCES, r.mkdir("/d/new", 0o755));
    err!(EACCES, r.symlink("f", "/d/new"));
    err!(EACCES, r.mknod("/d/new", 0o100644));
    err!(EACCES, r.unlink("/d/f"));
    err!(EACCES, r.rmdir("/d/sub"));
    err!(EACCES, r.rename("/d/f", "/d/g"));
    err!(EACCES, r.rename("/d/f", "/d/sub/f"));
    err!(EACCES, r.link("/d/f", "/d/g"));
    ok!(r.link("/d/f", "/d/sub/g"));
    // An existing file can still be opened for writing (no parent write needed).
    ok!(r.mkfile("/d/f", b"y"));
    ok!(r.touch("/d/f", o::CREAT | o::WRONLY, 0o644));
    err!(
        EEXIST,
        r.touch("/d/f", o::CREAT | o::EXCL | o::WRONLY, 0o644)
    );
    // Errors that outrank the permission check, or not.
    r.mkdir("/d/f", 0o755);
    r.mkdir("/d/missing/x", 0o755);
    r.unlink("/d/missing");
    r.rmdir("/d/missing");
    r.rmdir("/d/f");
});

case!(errno_precedence, |r| {
    ok!(r.mkdir("/ro", 0o755));
    ok!(r.mkdir("/ro/full", 0o777));
    ok!(r.mkfile("/ro/full/x", b""));
    ok!(r.mkdir("/ro/empty", 0o777));
    ok!(r.mkfile("/ro/f", b""));
    ok!(r.mkdir("/rw", 0o777));
    ok!(r.chmod("/rw", 0o777));
    ok!(r.mkdir("/rw/full", 0o755));
    ok!(r.mkfile("/rw/full/x", b""));
    ok!(r.mkdir("/rw/empty", 0o755));
    ok!(r.mkfile("/rw/f", b""));
    r.set_creds(&u1000());
    err!(EEXIST, r.mkdir("/ro/f", 0o755));
    err!(EEXIST, r.symlink("x", "/ro/f"));
    err!(EEXIST, r.link("/rw/f", "/ro/f"));
    err!(EACCES, r.rmdir("/ro/full"));
    err!(EACCES, r.rmdir("/ro/empty"));
    err!(ENOENT, r.rmdir("/ro/none"));
    err!(EACCES, r.unlink("/ro/f"));
    err!(EACCES, r.unlink("/ro/full"));
    err!(EACCES, r.rename("/ro/f", "/rw/g"));
    err!(EACCES, r.rename("/rw/f", "/ro/f"));
    err!(EACCES, r.rename("/rw/empty", "/ro/full"));
    err!(EACCES, r.rename("/rw/f", "/ro/full"));
    // With write access on both parents, the kind of the target decides.
    err!(ENOTEMPTY, r.rmdir("/rw/full"));
    err!(EISDIR, r.unlink("/rw/full"));
    r.rename("/rw/f", "/rw/full");
    r.rename("/rw/full", "/rw/f");
    // Moving a directory it does not own (needs write on it to update "..").
    r.rename("/rw/full", "/rw/empty");
    r.rename("/rw/empty", "/rw/full");
    r.as_root();
    ok!(r.chmod("/ro", 0o555));
    ok!(r.mkfile("/ro/rootmade", b""));
    err!(ENOTEMPTY, r.rmdir("/ro/full"));
});

case!(file_permission_classes, |r| {
    ok!(r.mkfile("/own", b"o"));
    ok!(r.chown("/own", Some(1000), Some(1000)));
    ok!(r.chmod("/own", 0o070));
    ok!(r.mkfile("/grp", b"g"));
    ok!(r.chown("/grp", Some(0), Some(1000)));
    ok!(r.chmod("/grp", 0o640));
    ok!(r.mkfile("/oth", b"x"));
    ok!(r.chmod("/oth", 0o604));
    ok!(r.mkfile("/none", b"n"));
    ok!(r.chmod("/none", 0o600));
    r.set_creds(&u1000());
    // The owner class applies to the owner even when the group class would allow more.
    err!(EACCES, r.open("/own", o::RDONLY, 0));
    err!(EACCES, r.access("/own", acc::R_OK));
    ok!(r.cat("/grp"));
    err!(EACCES, r.open("/grp", o::WRONLY, 0));
    err!(EACCES, r.access("/grp", acc::W_OK));
    ok!(r.cat("/oth"));
    err!(EACCES, r.cat("/none"));
    err!(EACCES, r.truncate("/none", 0));
    err!(EACCES, r.truncate("/grp", 0));
    err!(EACCES, r.open("/oth", o::RDWR, 0));
    err!(EACCES, r.open("/oth", o::RDONLY | o::TRUNC, 0));
    ok!(r.open("/none", o::PATH, 0));
    r.set_creds(&u1001());
    err!(EACCES, r.cat("/grp"));
    err!(EACCES, r.cat("/own"));
    ok!(r.cat("/oth"));
    r.set_creds(&Cred::user(1001, 1001, &[1001, 1000]));
    ok!(r.cat("/grp"));
});

case!(access_as_root, |r| {
    ok!(r.mkfile("/f", b"x"));
    ok!(r.chmod("/f", 0o644));
    ok!(r.mkfile("/x", b"x"));
    ok!(r.chmod("/x", 0o100));
    ok!(r.mkfile("/n", b"x"));
    ok!(r.chmod("/n", 0o000));
    ok!(r.mkdir("/d", 0o000));
    err!(EACCES, r.access("/f", acc::X_OK));
    err!(EACCES, r.access("/f", acc::X_OK | acc::R_OK));
    ok!(r.access("/x", acc::X_OK));
    ok!(r.access("/n", acc::R_OK | acc::W_OK));
    err!(EACCES, r.access("/n", acc::X_OK));
    ok!(r.access("/d", acc::R_OK | acc::W_OK | acc::X_OK));
    ok!(r.cat("/n"));
    ok!(r.mkfile("/d/inside", b"root"));
    ok!(r.readdir("/d"));
    err!(EINVAL, r.access("/f", 8));
    err!(EACCES, r.access_at(Dir::Cwd, "/f", acc::X_OK, at::EACCESS));
    ok!(r.access_at(Dir::Cwd, "/x", acc::X_OK, at::EACCESS));
});

case!(access_real_vs_effective_ids, |r| {
    ok!(r.mkfile("/rootonly", b"x"));
    ok!(r.chmod("/rootonly", 0o600));
    ok!(r.mkfile("/useronly", b"x"));
    ok!(r.chown("/useronly", Some(1000), Some(1000)));
    ok!(r.chmod("/useronly", 0o600));
    // A set-uid-root program run by 1000: access() asks about the real user.
    r.set_creds(&Cred {
        ruid: 1000,
        euid: 0,
        rgid: 1000,
        egid: 0,
        groups: vec![1000],
    });
    err!(EACCES, r.access("/rootonly", acc::R_OK));
    ok!(r.access_at(Dir::Cwd, "/rootonly", acc::R_OK, at::EACCESS));
    ok!(r.access("/useronly", acc::R_OK | acc::W_OK));
    ok!(r.cat("/rootonly"));
    // The other way round: effective 1000, real root.
    r.set_creds(&Cred {
        ruid: 0,
        euid: 1000,
        rgid: 0,
        egid: 1000,
        groups: vec![1000],
    });
    ok!(r.access("/rootonly", acc::R_OK));
    err!(
        EACCES,
        r.access_at(Dir::Cwd, "/rootonly", acc::R_OK, at::EACCESS)
    );
    err!(EACCES, r.cat("/rootonly"));
    // Real 1000, effective 1001.
    r.set_creds(&Cred {
        ruid: 1000,
        euid: 1001,
        rgid: 1000,
        egid: 1001,
        groups: vec![1001],
    });
    ok!(r.access("/useronly", acc::R_OK));
    err!(
        EACCES,
        r.access_at(Dir::Cwd, "/useronly", acc::R_OK, at::EACCESS)
    );
    err!(EACCES, r.cat("/useronly"));
});

case!(access_through_symlinks, |r| {
    base(r);
    ok!(r.chmod("/f", 0o600));
    r.set_creds(&u1000());
    err!(EACCES, r.access("/lf", acc::R_OK));
    ok!(r.access_at(Dir::Cwd, "/lf", acc::R_OK, at::SYMLINK_NOFOLLOW));
    ok!(r.access("/lf", acc::F_OK));
    err!(ENOENT, r.access("/dangling", acc::F_OK));
    ok!(r.access_at(Dir::Cwd, "/dangling", acc::F_OK, at::SYMLINK_NOFOLLOW));
});

// ---------------------------------------------------------------------------------------------
// Sticky directories

/// `/t` is a sticky, world-writable directory owned by root; `/t/u1000` and `/t/dir1000` belong
/// to user 1000.
fn sticky(r: &mut Rec) {
    ok!(r.mkdir("/t", 0o777));
    ok!(r.chmod("/t", 0o1777));
    r.set_creds(&u1000());
    ok!(r.mkfile("/t/u1000", b"mine"));
    ok!(r.chmod("/t/u1000", 0o666));
    ok!(r.mkdir("/t/dir1000", 0o777));
    r.set_creds(&u1001());
    ok!(r.mkfile("/t/u1001", b"other"));
}

case!(sticky_unlink_by_non_owner, |r| {
    sticky(r);
    r.set_creds(&u1001());
    err!(EPERM, r.unlink("/t/u1000"));
    err!(EPERM, r.rmdir("/t/dir1000"));
    err!(EPERM, r.rename("/t/u1000", "/t/stolen"));
    err!(EPERM, r.rename("/t/u1001", "/t/u1000"));
    err!(EPERM, r.rename2("/t/u1001", "/t/u1000", rn::EXCHANGE));
    ok!(r.cat("/t/u1000"));
    ok!(r.mkfile("/t/u1000", b"overwritten through open is allowed"));
    ok!(r.rename("/t/u1001", "/t/u1001b"));
    ok!(r.unlink("/t/u1001b"));
    r.set_creds(&u1000());
    ok!(r.rename("/t/u1000", "/t/moved"));
    ok!(r.rmdir("/t/dir1000"));
    r.as_root();
    ok!(r.unlink("/t/moved"));
});

case!(
    /// Linux's `may_create_in_sticky`: O_CREAT on an existing file in a sticky, world-writable
    /// directory that neither the caller nor the directory's owner owns is EACCES. For regular
    /// files and FIFOs the `fs.protected_regular`/`protected_fifos` sysctls decide (host policy,
    /// left out here); for anything else, such as a symlink opened with O_NOFOLLOW, it always
    /// applies, before the ELOOP.
    sticky_creat_on_foreign_symlink, |r| {
    sticky(r);
    r.set_creds(&u1001());
    ok!(r.symlink("u1000", "/t/link1001"));
    r.set_creds(&u1000());
    err!(EACCES, r.open("/t/link1001", o::CREAT | o::NOFOLLOW | o::WRONLY, 0o644));
    err!(ELOOP, r.open("/t/link1001", o::NOFOLLOW | o::WRONLY, 0));
    err!(EEXIST, r.open("/t/link1001", o::CREAT | o::EXCL | o::WRONLY, 0o644));
    // No capability overrides it.
    r.as_root();
    err!(EACCES, r.open("/t/link1001", o::CREAT | o::NOFOLLOW | o::WRONLY, 0o644));
    r.set_creds(&u1001());
    err!(ELOOP, r.open("/t/link1001", o::CREAT | o::NOFOLLOW | o::WRONLY, 0o644));
    // Not world-writable: no restriction.
    r.as_root();
    ok!(r.chmod("/t", 0o1775));
    r.set_creds(&u1000());
    err!(ELOOP, r.open("/t/link1001", o::CREAT | o::NOFOLLOW | o::WRONLY, 0o644));
});

case!(sticky_dir_owner_may_unlink, |r| {
    ok!(r.mkdir("/t", 0o777));
    ok!(r.chown("/t", Some(1001), Some(1001)));
    ok!(r.chmod("/t", 0o1777));
    r.set_creds(&u1000());
    ok!(r.mkfile("/t/f", b"x"));
    r.set_creds(&u1001());
    ok!(r.rename("/t/f", "/t/g"));
    ok!(r.unlink("/t/g"));
    r.set_creds(&u1000());
    ok!(r.mkfile("/t/h", b"x"));
    r.set_creds(&Cred::user(1002, 1002, &[1002]));
    err!(EPERM, r.unlink("/t/h"));
});

// ---------------------------------------------------------------------------------------------
// rename

case!(rename_into_own_subtree, |r| {
    ok!(r.mkdir("/a", 0o755));
    ok!(r.mkdir("/a/b", 0o755));
    ok!(r.mkdir("/a/b/c", 0o755));
    ok!(r.symlink("a", "/la"));
    err!(EINVAL, r.rename("/a", "/a/x"));
    err!(EINVAL, r.rename("/a", "/a/b/x"));
    err!(EINVAL, r.rename("/a", "/a/b/c"));
    err!(EINVAL, r.rename("/a", "/la/x"));
    err!(EINVAL, r.rename("/a/b", "/a/b/c/d"));
    err!(ENOTEMPTY, r.rename("/a/b/c", "/a"));
    err!(ENOTEMPTY, r.rename("/a/b", "/a"));
    err!(EINVAL, r.rename2("/a", "/a/b", rn::EXCHANGE));
    err!(EINVAL, r.rename2("/a/b", "/a", rn::EXCHANGE));
    err!(EINVAL, r.rename2("/a", "/a/x", rn::NOREPLACE));
    err!(EBUSY, r.rename("/a/b/.", "/x"));
    err!(EBUSY, r.rename("/a/b/..", "/x"));
    err!(EBUSY, r.rename("/a/b", "/a/b/c/.."));
    err!(EBUSY, r.rename("/", "/x"));
    err!(EBUSY, r.rename("/a", "/"));
    ok!(r.rename("/a/b/c", "/c"));
    ok!(r.rename("/a", "/c/a"));
    ok!(r.stat("/c/a/b"));
});

case!(rename_kind_mismatch, |r| {
    ok!(r.mkdir("/d", 0o755));
    ok!(r.mkdir("/e", 0o755));
    ok!(r.mkdir("/full", 0o755));
    ok!(r.mkfile("/full/x", b""));
    ok!(r.mkfile("/f", b"f"));
    ok!(r.mkfile("/g", b"g"));
    ok!(r.symlink("e", "/le"));
    err!(ENOTEMPTY, r.rename("/d", "/full"));
    err!(ENOTDIR, r.rename("/d", "/f"));
    err!(EISDIR, r.rename("/f", "/d"));
    err!(ENOTDIR, r.rename("/d", "/le"));
    err!(ENOENT, r.rename("/missing", "/d"));
    err!(ENOENT, r.rename("/f", "/missing/x"));
    ok!(r.stat("/e"));
    ok!(r.rename("/d", "/e"));
    err!(ENOENT, r.stat("/d"));
    ok!(r.stat("/e"));
    ok!(r.rename("/f", "/g"));
    ok!(r.cat("/g"));
    ok!(r.rename("/g", "/le"));
    ok!(r.lstat("/le"));
    ok!(r.rename("/full", "/e"));
    ok!(r.readdir("/e"));
});

case!(rename_over_file_with_open_fd, |r| {
    ok!(r.mkfile("/f", b"new"));
    ok!(r.mkfile("/g", b"old"));
    let h = ok!(r.open("/g", o::RDONLY, 0)).unwrap();
    ok!(r.rename("/f", "/g"));
    ok!(r.fstat(h));
    ok!(r.read(h, 10));
    ok!(r.cat("/g"));
    ok!(r.close(h));
});

case!(rename_noreplace_and_exchange, |r| {
    ok!(r.mkdir("/p1", 0o755));
    ok!(r.mkdir("/p2", 0o755));
    ok!(r.mkdir("/p1/d", 0o755));
    ok!(r.mkdir("/p1/d/sub", 0o755));
    ok!(r.mkfile("/p2/f", b"file"));
    ok!(r.mkfile("/p2/g", b"gee"));
    err!(EEXIST, r.rename2("/p2/f", "/p2/g", rn::NOREPLACE));
    err!(EEXIST, r.rename2("/p1/d", "/p2/f", rn::NOREPLACE));
    err!(
        EINVAL,
        r.rename2("/p2/f", "/p2/g", rn::NOREPLACE | rn::EXCHANGE)
    );
    err!(EINVAL, r.rename2("/p2/f", "/p2/g", 8));
    ok!(r.rename2("/p2/g", "/p2/h", rn::NOREPLACE));
    err!(ENOENT, r.rename2("/p2/f", "/p2/none", rn::EXCHANGE));
    err!(ENOENT, r.rename2("/p2/none", "/p2/f", rn::EXCHANGE));
    ok!(r.stat("/p1"));
    ok!(r.stat("/p2"));
    // A file and a directory in different parents trade places.
    ok!(r.rename2("/p1/d", "/p2/f", rn::EXCHANGE));
    ok!(r.stat("/p1"));
    ok!(r.stat("/p2"));
    ok!(r.cat("/p1/d"));
    ok!(r.stat("/p2/f/sub"));
    ok!(r.stat("/p2/f/sub/../.."));
    ok!(r.rename2("/p2/f", "/p2/f", rn::EXCHANGE));
    ok!(r.rename2("/p1/d", "/p2/h", rn::EXCHANGE));
    ok!(r.cat("/p1/d"));
    ok!(r.cat("/p2/h"));
    ok!(r.rename2("/p1", "/p2", rn::EXCHANGE));
    ok!(r.readdir("/p1"));
    err!(EEXIST, r.rename2("/p2/d", "/p2/d", rn::NOREPLACE));
});

case!(rename_to_itself_and_hard_links, |r| {
    ok!(r.mkfile("/f", b"x"));
    ok!(r.link("/f", "/h"));
    ok!(r.mkdir("/d", 0o755));
    let f0 = r.times("/f");
    let root0 = r.times("/");
    ok!(r.rename("/f", "/f"));
    ok!(r.rename("/f", "/./f"));
    ok!(r.rename("/d", "/d/"));
    ok!(r.rename("/f", "/h"));
    ok!(r.stat("/f"));
    ok!(r.stat("/h"));
    r.mc_rel("no-op renames", "/f", &f0);
    r.mc_rel("no-op renames", "/", &root0);
    err!(EEXIST, r.rename2("/f", "/h", rn::NOREPLACE));
    ok!(r.rename2("/f", "/h", rn::EXCHANGE));
    ok!(r.readdir("/"));
});

case!(rename_dir_nlink_across_parents, |r| {
    ok!(r.mkdir("/p1", 0o755));
    ok!(r.mkdir("/p2", 0o755));
    ok!(r.mkdir("/p1/d", 0o755));
    ok!(r.mkdir("/p1/e", 0o755));
    ok!(r.mkdir("/p2/x", 0o755));
    ok!(r.stat("/p1"));
    ok!(r.stat("/p2"));
    ok!(r.rename("/p1/d", "/p2/d"));
    ok!(r.stat("/p1"));
    ok!(r.stat("/p2"));
    ok!(r.stat("/p2/d/.."));
    // Over an empty directory in another parent.
    ok!(r.rename("/p1/e", "/p2/x"));
    ok!(r.stat("/p1"));
    ok!(r.stat("/p2"));
    ok!(r.stat("/p2/x"));
    // Within one parent.
    ok!(r.rename("/p2/x", "/p2/d"));
    ok!(r.stat("/p2"));
    ok!(r.readdir("/p2"));
});

case!(rename_dir_needs_write_on_itself_when_moving_parents, |r| {
    ok!(r.mkdir("/p1", 0o777));
    ok!(r.mkdir("/p2", 0o777));
    ok!(r.chmod("/p1", 0o777));
    ok!(r.chmod("/p2", 0o777));
    ok!(r.mkdir("/p1/d", 0o755));
    ok!(r.mkfile("/p1/f", b""));
    r.set_creds(&u1000());
    err!(EACCES, r.rename("/p1/d", "/p2/d"));
    ok!(r.rename("/p1/d", "/p1/d2"));
    ok!(r.rename("/p1/f", "/p2/f"));
    err!(EACCES, r.rename2("/p1/d2", "/p2/f", rn::EXCHANGE));
});

case!(rename_symlinks_not_followed, |r| {
    base(r);
    ok!(r.rename("/ld", "/ld2"));
    ok!(r.lstat("/ld2"));
    ok!(r.stat("/d"));
    ok!(r.rename("/dangling", "/d/dangling"));
    ok!(r.readlink("/d/dangling"));
    ok!(r.rename("/f", "/lf"));
    ok!(r.lstat("/lf"));
});

// ---------------------------------------------------------------------------------------------
// link

case!(link_rules_and_counts, |r| {
    base(r);
    err!(EPERM, r.link("/d", "/d2"));
    err!(EPERM, r.link("/ld/.", "/d2"));
    err!(EEXIST, r.link("/f", "/d"));
    err!(EEXIST, r.link("/f", "/lf"));
    err!(EEXIST, r.link("/f", "/dangling"));
    err!(ENOENT, r.link("/missing", "/x"));
    ok!(r.link("/f", "/h1"));
    ok!(r.link("/h1", "/d/h2"));
    ok!(r.stat("/f"));
    ok!(r.stat("/h1"));
    ok!(r.stat("/d/h2"));
    ok!(r.unlink("/f"));
    ok!(r.stat("/h1"));
    // link() does not follow a symlink; linkat with SYMLINK_FOLLOW does.
    ok!(r.link("/lf", "/hl"));
    ok!(r.lstat("/hl"));
    ok!(r.lstat("/lf"));
    ok!(r.link("/ld", "/hld"));
    ok!(r.lstat("/hld"));
    ok!(r.mkfile("/f", b"again"));
    ok!(r.link_at(Dir::Cwd, "/lf", Dir::Cwd, "/hf", at::SYMLINK_FOLLOW));
    ok!(r.lstat("/hf"));
    ok!(r.stat("/f"));
    err!(
        EPERM,
        r.link_at(Dir::Cwd, "/ld", Dir::Cwd, "/x", at::SYMLINK_FOLLOW)
    );
    err!(
        ENOENT,
        r.link_at(Dir::Cwd, "/dangling", Dir::Cwd, "/x", at::SYMLINK_FOLLOW)
    );
    ok!(r.link("/dangling", "/hdangling"));
    err!(EINVAL, r.link_at(Dir::Cwd, "/f", Dir::Cwd, "/x", 0x100));
    ok!(r.unlink("/hl"));
    ok!(r.lstat("/lf"));
});

case!(link_count_zero_while_open, |r| {
    ok!(r.mkfile("/f", b"data"));
    ok!(r.link("/f", "/g"));
    let h = ok!(r.open("/f", o::RDWR, 0)).unwrap();
    ok!(r.unlink("/f"));
    ok!(r.fstat(h));
    ok!(r.unlink("/g"));
    ok!(r.fstat(h));
    ok!(r.pread(h, 10, 0));
    ok!(r.pwrite(h, b"more", 4));
    ok!(r.fstat(h));
    ok!(r.readdir("/"));
    ok!(r.close(h));
});

case!(link_with_dirfds, |r| {
    ok!(r.mkdir("/a", 0o755));
    ok!(r.mkdir("/b", 0o755));
    ok!(r.mkfile("/a/f", b"x"));
    let a = ok!(r.open("/a", o::RDONLY | o::DIRECTORY, 0)).unwrap();
    let b = ok!(r.open("/b", o::PATH | o::DIRECTORY, 0)).unwrap();
    ok!(r.link_at(Dir::Fd(a), "f", Dir::Fd(b), "g", 0));
    ok!(r.rename_at(Dir::Fd(b), "g", Dir::Fd(a), "h", 0));
    ok!(r.symlink_at("h", Dir::Fd(a), "s"));
    ok!(r.stat_at(Dir::Fd(a), "s", 0));
    ok!(r.stat_at(Dir::Fd(a), "s", at::SYMLINK_NOFOLLOW));
    ok!(r.mkdir_at(Dir::Fd(b), "sub", 0o700));
    ok!(r.unlink_at(Dir::Fd(b), "sub", at::REMOVEDIR));
    err!(EISDIR, r.unlink_at(Dir::Fd(a), "..", 0));
    err!(EINVAL, r.unlink_at(Dir::Fd(a), "h", 0x100));
    ok!(r.unlink_at(Dir::Fd(a), "h", 0));
    let f = ok!(r.open("/a/f", o::RDONLY, 0)).unwrap();
    err!(ENOTDIR, r.unlink_at(Dir::Fd(f), "x", 0));
    // An absolute path ignores the dirfd.
    ok!(r.stat_at(Dir::Fd(f), "/a/f", 0));
    ok!(r.access_at(Dir::Fd(a), "f", acc::R_OK, 0));
    ok!(r.readlink_at(Dir::Fd(a), "s"));
    ok!(r.chown_at(Dir::Fd(a), "s", Some(7), Some(7), at::SYMLINK_NOFOLLOW));
    ok!(r.lstat("/a/s"));
    ok!(r.utimens_at(Dir::Fd(a), "f", [T::Set(5, 5), T::Set(6, 6)], 0));
    r.close(a);
    r.close(b);
    r.close(f);
});

case!(dirfd_not_a_directory, |r| {
    base(r);
    let f = ok!(r.open("/f", o::RDONLY, 0)).unwrap();
    let l = ok!(r.open("/ld", o::PATH | o::NOFOLLOW, 0)).unwrap();
    let d = ok!(r.open("/d", o::RDONLY | o::DIRECTORY, 0)).unwrap();
    let (f, l, d) = (Dir::Fd(f), Dir::Fd(l), Dir::Fd(d));
    err!(ENOTDIR, r.stat_at(f, "x", 0));
    err!(ENOTDIR, r.stat_at(l, "x", 0));
    ok!(r.stat_at(f, "/f", 0));
    err!(ENOTDIR, r.mkdir_at(f, "x", 0o755));
    err!(ENOTDIR, r.symlink_at("t", f, "x"));
    err!(ENOTDIR, r.readlink_at(f, "x"));
    err!(ENOTDIR, r.open_at(l, "x", o::CREAT | o::WRONLY, 0o644));
    // The old parent is resolved before the new parent, both before the last components.
    err!(ENOENT, r.rename_at(f, "/missing/x", f, "y", 0));
    err!(ENOTDIR, r.rename_at(d, "missing", f, "y", 0));
    err!(ENOTDIR, r.rename_at(d, "../f", f, "y", 0));
    err!(ENOTDIR, r.rename_at(f, "x", d, "y", 0));
    r.rename_at(f, "/f", l, "/g", 0);
    err!(ENOENT, r.link_at(f, "/missing", f, "y", 0));
    err!(ENOENT, r.link_at(d, "missing", f, "y", 0));
    err!(ENOTDIR, r.link_at(d, "../g", f, "y", 0));
    err!(ENOTDIR, r.unlink_at(f, "x", 0));
    ok!(r.unlink_at(l, "/g", 0));
});

// ---------------------------------------------------------------------------------------------
// open

case!(open_creat_excl, |r| {
    base(r);
    err!(EEXIST, r.open("/f", o::CREAT | o::EXCL | o::WRONLY, 0o644));
    err!(EEXIST, r.open("/d", o::CREAT | o::EXCL | o::RDONLY, 0o644));
    err!(EEXIST, r.open("/lf", o::CREAT | o::EXCL | o::WRONLY, 0o644));
    err!(
        EEXIST,
        r.open("/dangling", o::CREAT | o::EXCL | o::WRONLY, 0o644)
    );
    ok!(r.touch("/new", o::CREAT | o::EXCL | o::WRONLY, 0o640));
    ok!(r.stat("/new"));
    err!(ENOENT, r.stat("/missing"));
    // O_EXCL without O_CREAT is ignored for regular files.
    ok!(r.touch("/f", o::EXCL | o::RDONLY, 0));
});

case!(open_creat_on_dot_dotdot_and_root, |r| {
    base(r);
    ok!(r.chdir("/d"));
    err!(EEXIST, r.open(".", o::CREAT | o::EXCL | o::WRONLY, 0o644));
    err!(EEXIST, r.open("..", o::CREAT | o::EXCL | o::WRONLY, 0o644));
    err!(EEXIST, r.open("/", o::CREAT | o::EXCL | o::RDONLY, 0o644));
    err!(
        EEXIST,
        r.open("/d/.", o::CREAT | o::EXCL | o::RDONLY, 0o644)
    );
    err!(
        EEXIST,
        r.open("/d/..", o::CREAT | o::EXCL | o::RDONLY, 0o644)
    );
    err!(EISDIR, r.open(".", o::CREAT | o::WRONLY, 0o644));
    err!(EISDIR, r.open("..", o::CREAT | o::RDONLY, 0o644));
    err!(EISDIR, r.open("/", o::CREAT | o::RDONLY, 0o644));
    err!(
        ENOTDIR,
        r.open("/f/.", o::CREAT | o::EXCL | o::WRONLY, 0o644)
    );
    err!(
        ENOENT,
        r.open("/missing/.", o::CREAT | o::EXCL | o::WRONLY, 0o644)
    );
    err!(EISDIR, r.open("/ld/.", o::CREAT | o::WRONLY, 0o644));
});

case!(open_creat_through_dangling_symlink, |r| {
    base(r);
    ok!(r.symlink("/d/target", "/dl"));
    ok!(r.symlink("nodir/x", "/bad"));
    ok!(r.touch("/dangling", o::CREAT | o::WRONLY, 0o600));
    ok!(r.stat("/missing"));
    ok!(r.lstat("/dangling"));
    ok!(r.touch("/dl", o::CREAT | o::WRONLY, 0o644));
    ok!(r.stat("/d/target"));
    err!(ENOENT, r.open("/bad", o::CREAT | o::WRONLY, 0o644));
    err!(
        ELOOP,
        r.open("/dl", o::CREAT | o::WRONLY | o::NOFOLLOW, 0o644)
    );
    ok!(r.symlink("gone", "/g2"));
    err!(
        ELOOP,
        r.open("/g2", o::CREAT | o::WRONLY | o::NOFOLLOW, 0o644)
    );
    ok!(r.symlink("tdir/", "/slash"));
    r.open("/slash", o::CREAT | o::WRONLY, 0o644);
    ok!(r.readdir("/"));
});

case!(open_nofollow_and_directory, |r| {
    base(r);
    err!(ELOOP, r.open("/lf", o::RDONLY | o::NOFOLLOW, 0));
    err!(ELOOP, r.open("/ld", o::RDONLY | o::NOFOLLOW, 0));
    r.open("/ld", o::RDONLY | o::NOFOLLOW | o::DIRECTORY, 0);
    ok!(r.open("/ld/", o::RDONLY | o::NOFOLLOW, 0));
    ok!(r.open("/ld/.", o::RDONLY | o::NOFOLLOW, 0));
    ok!(r.open("/f", o::RDONLY | o::NOFOLLOW, 0));
    err!(ENOTDIR, r.open("/f", o::RDONLY | o::DIRECTORY, 0));
    err!(ENOTDIR, r.open("/lf", o::RDONLY | o::DIRECTORY, 0));
    ok!(r.open("/ld", o::RDONLY | o::DIRECTORY, 0));
    err!(ENOENT, r.open("/dangling", o::RDONLY | o::DIRECTORY, 0));
    err!(
        EINVAL,
        r.open("/newdir", o::CREAT | o::DIRECTORY | o::RDONLY, 0o755)
    );
    err!(
        EINVAL,
        r.open("/d", o::CREAT | o::DIRECTORY | o::RDONLY, 0o755)
    );
    let p = ok!(r.open("/lf", o::PATH | o::NOFOLLOW, 0)).unwrap();
    ok!(r.fstat(p));
    err!(EBADF, r.read(p, 1));
    let q = ok!(r.open("/d", o::PATH, 0)).unwrap();
    ok!(r.fchdir(q));
    ok!(r.getcwd());
    ok!(r.fstat(q));
    err!(EBADF, r.getdents(q));
});

// A removed directory can still be reached (the working directory, `..` of one, an open
// descriptor) and opened: Linux keeps the dentry and its inode while anything refers to them.
// What is opened is dead: no listing, no new names, no links.
case!(removed_directory_can_be_opened, |r| {
    ok!(r.mkdir("/rm", 0o755));
    ok!(r.mkdir("/rm/sub", 0o755));
    ok!(r.chdir("/rm/sub"));
    ok!(r.rmdir("/rm/sub"));
    let d = ok!(r.open(".", o::RDONLY | o::DIRECTORY, 0)).unwrap();
    let st = ok!(r.fstat(d)).unwrap();
    r.expect_that("a removed directory has no links", st.nlink == 0);
    err!(ENOENT, r.getdents(d));
    err!(ENOENT, r.mkdir_at(Dir::Fd(d), "x", 0o755));
    err!(
        ENOENT,
        r.open_at(Dir::Fd(d), "x", o::CREAT | o::WRONLY, 0o644)
    );
    r.stat_at(Dir::Fd(d), "..", 0);
    ok!(r.open(".", o::RDONLY, 0));
    ok!(r.open(".", o::PATH, 0));
    ok!(r.open("./", o::RDONLY, 0));
    // Its parent is removed too: reached through `..`, and opened there.
    ok!(r.rmdir("/rm"));
    let up = ok!(r.open("..", o::RDONLY | o::DIRECTORY, 0)).unwrap();
    let st = ok!(r.fstat(up)).unwrap();
    r.expect_that("the removed parent has no links", st.nlink == 0);
    err!(ENOENT, r.getdents(up));
    r.fchmod(up, 0o700);
    r.fchown(up, Some(1000), None);
    let st = ok!(r.fstat(up)).unwrap();
    r.expect_that("the removed parent was changed", st.mode & 0o7777 == 0o700);
    ok!(r.chdir(".."));
    ok!(r.open(".", o::RDONLY, 0));
    err!(ENOENT, r.getcwd());
    ok!(r.fchdir(d));
    ok!(r.open(".", o::RDONLY | o::DIRECTORY, 0));
    ok!(r.chdir("/"));
    // Opened again through the descriptors, after every other way to it is gone.
    ok!(r.open_at(Dir::Fd(d), ".", o::RDONLY, 0));
    ok!(r.open_at(Dir::Fd(up), ".", o::RDONLY | o::DIRECTORY, 0));
    ok!(r.open_at(Dir::Fd(d), "..", o::RDONLY, 0));
    ok!(r.close(d));
    ok!(r.close(up));
    ok!(r.mkdir("/rm", 0o755));
    ok!(r.readdir("/rm"));
});

// rename and link read both names first but report the new name's faults (empty, longer
// than PATH_MAX) only after the old name's walk: the old side's errno wins.
case!(two_path_calls_report_the_old_side_first, |r| {
    base(r);
    let too_long = [b"/".as_slice(), &b"a/".repeat(2100)].concat();
    let f = ok!(r.open("/f", o::RDONLY, 0)).unwrap();
    err!(ENOTDIR, r.rename_at(Dir::Fd(f), "a", Dir::Fd(f), "", 0));
    err!(ENOTDIR, r.rename("/f/x", ""));
    err!(ENOENT, r.rename("/missing/x", ""));
    err!(ENOENT, r.rename("/missing/x", &too_long));
    err!(ENOTDIR, r.rename("/f/x", &too_long));
    err!(ENOENT, r.rename("", "/f/x"));
    err!(ENOENT, r.rename("/d/missing", ""));
    err!(ENAMETOOLONG, r.rename("/f", &too_long));
    err!(ENOTDIR, r.link_at(Dir::Fd(f), "a", Dir::Cwd, "", 0));
    err!(ENOENT, r.link("/missing", ""));
    err!(ENOENT, r.link("/missing", &too_long));
    err!(ENOTDIR, r.link("/f/x", &too_long));
    err!(ENAMETOOLONG, r.link("/f", &too_long));
    err!(ENOENT, r.link("/f", ""));
    ok!(r.close(f));
});

case!(open_directory_for_writing, |r| {
    base(r);
    err!(EISDIR, r.open("/d", o::WRONLY, 0));
    err!(EISDIR, r.open("/d", o::RDWR, 0));
    err!(EISDIR, r.open("/ld", o::WRONLY, 0));
    err!(EISDIR, r.open("/d", o::CREAT | o::WRONLY, 0o644));
    err!(EISDIR, r.open("/d", o::CREAT | o::RDONLY, 0o644));
    err!(EISDIR, r.open("/d", o::RDONLY | o::TRUNC, 0));
    err!(EISDIR, r.open("/", o::RDWR, 0));
    err!(EISDIR, r.truncate("/d", 0));
    let h = ok!(r.open("/d", o::RDONLY, 0)).unwrap();
    err!(EISDIR, r.read(h, 10));
    err!(EBADF, r.write(h, b"x"));
    err!(EINVAL, r.ftruncate(h, 0));
});

case!(open_trunc_append_and_access_modes, |r| {
    ok!(r.mkfile("/f", b"0123456789"));
    let f0 = r.times("/f");
    ok!(r.touch("/f", o::WRONLY | o::TRUNC, 0));
    ok!(r.stat("/f"));
    r.mc_rel("O_TRUNC", "/f", &f0);
    let f1 = r.times("/f");
    ok!(r.touch("/f", o::WRONLY | o::TRUNC, 0));
    r.mc_rel("O_TRUNC of an empty file", "/f", &f1);
    ok!(r.mkfile("/f", b"abc"));
    ok!(r.touch("/f", o::RDONLY | o::TRUNC, 0));
    ok!(r.stat("/f"));
    ok!(r.mkfile("/f", b"abc"));
    let a = ok!(r.open("/f", o::WRONLY | o::APPEND, 0)).unwrap();
    ok!(r.write(a, b"def"));
    ok!(r.lseek(a, 0, 0));
    ok!(r.write(a, b"ghi"));
    ok!(r.pwrite(a, b"XY", 0));
    ok!(r.close(a));
    ok!(r.cat("/f"));
    let w = ok!(r.open("/f", o::WRONLY, 0)).unwrap();
    err!(EBADF, r.read(w, 1));
    ok!(r.write(w, b"W"));
    let rd = ok!(r.open("/f", o::RDONLY, 0)).unwrap();
    err!(EBADF, r.write(rd, b"x"));
    err!(EINVAL, r.ftruncate(rd, 0));
    ok!(r.read(rd, 4));
    ok!(r.lseek(rd, 0, 1));
    ok!(r.lseek(rd, -2, 2));
    ok!(r.read(rd, 100));
    ok!(r.read(rd, 100));
    err!(EINVAL, r.lseek(rd, -100, 1));
    ok!(r.lseek(rd, 100, 0));
    ok!(r.read(rd, 100));
    ok!(r.close(w));
    ok!(r.close(rd));
    err!(EBADF, r.close(rd));
});

case!(open_creat_mode_and_umask, |r| {
    ok!(r.touch("/a", o::CREAT | o::WRONLY, 0o777));
    ok!(r.mkdir("/da", 0o777));
    r.umask(0o027);
    ok!(r.touch("/b", o::CREAT | o::WRONLY, 0o777));
    ok!(r.mkdir("/db", 0o777));
    ok!(r.mknod("/nb", 0o100777));
    ok!(r.mknod("/pb", ty_fifo() | 0o666));
    ok!(r.symlink("a", "/sb"));
    r.umask(0);
    ok!(r.touch("/c", o::CREAT | o::WRONLY, 0o7777));
    ok!(r.mkdir("/dc", 0o7777));
    ok!(r.touch("/e", o::CREAT | o::WRONLY, 0o10644));
    r.umask(0o777);
    ok!(r.touch("/z", o::CREAT | o::WRONLY, 0o777));
    ok!(r.mkdir("/dz", 0o777));
    ok!(r.cat("/z"));
    r.umask(0o022);
    // An existing file keeps its mode.
    ok!(r.touch("/a", o::CREAT | o::WRONLY, 0o600));
    r.set_creds(&u1000());
    r.umask(0o002);
    ok!(r.touch("/u", o::CREAT | o::WRONLY, 0o6777));
    ok!(r.mkdir("/du", 0o7777));
    r.umask(0o022);
    ok!(r.stat("/z"));
});

case!(o_tmpfile, |r| {
    ok!(r.mkdir("/d", 0o755));
    ok!(r.mkfile("/f", b""));
    let h = ok!(r.open("/d", o::TMPFILE | o::RDWR, 0o640)).unwrap();
    ok!(r.fstat(h));
    ok!(r.write(h, b"anonymous"));
    ok!(r.fstat(h));
    ok!(r.readdir("/d"));
    ok!(r.stat("/d"));
    ok!(r.link_at(Dir::Fd(h), "", Dir::Cwd, "/d/named", at::EMPTY_PATH));
    ok!(r.fstat(h));
    ok!(r.cat("/d/named"));
    ok!(r.close(h));
    err!(EINVAL, r.open("/d", o::TMPFILE | o::RDONLY, 0o600));
    err!(ENOTDIR, r.open("/f", o::TMPFILE | o::RDWR, 0o600));
    err!(ENOENT, r.open("/missing", o::TMPFILE | o::RDWR, 0o600));
    let x = ok!(r.open("/d", o::TMPFILE | o::WRONLY | o::EXCL, 0o600)).unwrap();
    err!(
        ENOENT,
        r.link_at(Dir::Fd(x), "", Dir::Cwd, "/d/never", at::EMPTY_PATH)
    );
    ok!(r.close(x));
    ok!(r.readdir("/d"));
});

case!(mknod_kinds, |r| {
    ok!(r.mknod("/reg", 0o100640));
    ok!(r.mknod("/zero", 0o640));
    ok!(r.mknod("/fifo", ty_fifo() | 0o644));
    err!(EEXIST, r.mknod("/fifo", ty_fifo() | 0o644));
    r.mknod("/dir", 0o040755);
    r.mknod("/bad", 0o170644);
    ok!(r.stat("/reg"));
    ok!(r.stat("/fifo"));
    ok!(r.readdir("/"));
    ok!(r.unlink("/fifo"));
});

// A name looked up under a directory whose walk is cached (each directory is stat'ed
// first, so the name's walk is one step from it): every kind of answer that step gives.
case!(one_step_from_a_cached_directory, |r| {
    base(r);
    ok!(r.symlink("/f", "/d/lf"));
    ok!(r.symlink("/d", "/d/ld"));
    ok!(r.symlink("nowhere", "/d/dangling"));
    ok!(r.symlink("lp", "/d/lp"));
    ok!(r.mkfile("/d/x", b"x"));
    ok!(r.mkdir("/d/sub", 0o700));
    ok!(r.mkfile("/d/sub/y", b"y"));
    ok!(r.stat("/d"));
    ok!(r.stat("/d/x"));
    ok!(r.stat("/d/lf"));
    ok!(r.lstat("/d/lf"));
    ok!(r.stat("/d/ld"));
    err!(ENOENT, r.stat("/d/dangling"));
    ok!(r.lstat("/d/dangling"));
    err!(ELOOP, r.stat("/d/lp"));
    err!(ENOENT, r.stat("/d/missing"));
    err!(ENOENT, r.stat("/d/missing"));
    ok!(r.stat("/f"));
    err!(ENOTDIR, r.stat("/f/x"));
    ok!(r.stat("/d/ld/x"));
    r.set_creds(&u1000());
    ok!(r.stat("/d/sub"));
    err!(EACCES, r.stat("/d/sub/y"));
    err!(EACCES, r.stat("/d/sub/y"));
    r.as_root();
    ok!(r.chmod("/d/sub", 0o701));
    r.set_creds(&u1000());
    ok!(r.stat("/d/sub/y"));
    r.as_root();
    ok!(r.unlink("/d/x"));
    err!(ENOENT, r.stat("/d/x"));
    ok!(r.rename("/d/sub", "/d/x"));
    ok!(r.stat("/d/x/y"));
    err!(ENOENT, r.stat("/d/sub/y"));
});

// A device number is kept for device nodes only (Linux's `do_mknodat` passes it on for
// those, and 0 for a FIFO, socket or regular file), and `stat` reports it.
case!(mknod_device_numbers, |r| {
    let dev = (8 << 8) | 17; // makedev(8, 17)
    ok!(r.mknod_dev("/reg", 0o100644, dev));
    ok!(r.mknod_dev("/fifo", ty_fifo() | 0o644, dev));
    ok!(r.mknod_dev("/sock", 0o140644, dev));
    ok!(r.mknod_dev("/chr", 0o020644, dev));
    ok!(r.mknod_dev("/blk", 0o060644, (1 << 8) | 3));
    for p in ["/reg", "/fifo", "/sock", "/chr", "/blk"] {
        ok!(r.lstat(p));
    }
    // A hard link and a rename keep it.
    ok!(r.link("/chr", "/chr2"));
    ok!(r.rename("/blk", "/blk2"));
    ok!(r.lstat("/chr2"));
    ok!(r.lstat("/blk2"));
});

// ---------------------------------------------------------------------------------------------
// Directories: nlink, readdir, "..", cwd

case!(dir_nlink_counts, |r| {
    ok!(r.stat("/"));
    ok!(r.mkdir("/d", 0o755));
    ok!(r.stat("/"));
    ok!(r.stat("/d"));
    ok!(r.mkdir("/d/a", 0o755));
    ok!(r.mkdir("/d/b", 0o755));
    ok!(r.mkfile("/d/f", b""));
    ok!(r.symlink("a", "/d/l"));
    ok!(r.stat("/d"));
    ok!(r.stat("/d/a"));
    ok!(r.rmdir("/d/a"));
    ok!(r.stat("/d"));
    ok!(r.unlink("/d/f"));
    ok!(r.stat("/d"));
    let h = ok!(r.open("/d/b", o::RDONLY, 0)).unwrap();
    ok!(r.rmdir("/d/b"));
    ok!(r.fstat(h));
    ok!(r.stat("/d"));
    err!(ENOENT, r.getdents(h));
    ok!(r.close(h));
    err!(ENOTEMPTY, r.rmdir("/d"));
    ok!(r.unlink("/d/l"));
    ok!(r.rmdir("/d"));
    ok!(r.stat("/"));
});

case!(readdir_after_changes, |r| {
    ok!(r.mkdir("/d", 0o755));
    for n in ["a", "b", "c", "e", "g"] {
        ok!(r.mkfile(format!("/d/{n}"), n.as_bytes()));
    }
    ok!(r.mkdir("/d/sub", 0o755));
    ok!(r.symlink("a", "/d/sym"));
    ok!(r.mknod("/d/pipe", ty_fifo() | 0o600));
    ok!(r.readdir("/d"));
    ok!(r.unlink("/d/b"));
    ok!(r.unlink("/d/e"));
    ok!(r.rename("/d/g", "/d/h"));
    ok!(r.rename("/d/a", "/top"));
    ok!(r.readdir("/d"));
    let h = ok!(r.open("/d", o::RDONLY | o::DIRECTORY, 0)).unwrap();
    ok!(r.getdents(h));
    ok!(r.getdents(h));
    ok!(r.lseek(h, 0, 0));
    ok!(r.getdents(h));
    ok!(r.close(h));
    ok!(r.readdir("/"));
    ok!(r.mkdir("/empty", 0o755));
    ok!(r.readdir("/empty"));
    err!(ENOTDIR, r.readdir("/top"));
});

case!(dotdot_at_root_stays_at_root, |r| {
    ok!(r.mkdir("/d", 0o755));
    ok!(r.stat("/"));
    ok!(r.stat("/.."));
    ok!(r.stat("/../.."));
    ok!(r.stat("/../../d"));
    ok!(r.stat("/d/../../../d"));
    ok!(r.stat("//..//d/"));
    ok!(r.chdir(".."));
    ok!(r.getcwd());
    ok!(r.chdir("/../../.."));
    ok!(r.getcwd());
    ok!(r.chdir("d"));
    ok!(r.chdir("../.."));
    ok!(r.getcwd());
    ok!(r.symlink("../../..", "/d/up"));
    ok!(r.stat("/d/up/d"));
    ok!(r.chdir("/d/up"));
    ok!(r.getcwd());
    ok!(r.readdir("/.."));
});

case!(chdir_getcwd, |r| {
    base(r);
    ok!(r.mkdir("/d/e", 0o755));
    ok!(r.getcwd());
    ok!(r.chdir("/d/e"));
    ok!(r.getcwd());
    ok!(r.stat("."));
    ok!(r.stat(".."));
    ok!(r.mkfile("rel", b"relative"));
    ok!(r.stat("/d/e/rel"));
    ok!(r.rename("/d", "/renamed"));
    ok!(r.getcwd());
    ok!(r.stat("rel"));
    ok!(r.chdir(".."));
    ok!(r.getcwd());
    ok!(r.chdir("e"));
    ok!(r.unlink("rel"));
    ok!(r.rmdir("/renamed/e"));
    err!(ENOENT, r.getcwd());
    ok!(r.stat("."));
    err!(ENOENT, r.touch("x", o::CREAT | o::WRONLY, 0o644));
    err!(ENOENT, r.mkdir("x", 0o755));
    r.stat("..");
    r.chdir("..");
    r.getcwd();
    ok!(r.chdir("/"));
    err!(ENOTDIR, r.chdir("/f"));
    err!(ENOENT, r.chdir("/missing"));
    err!(ENOENT, r.chdir("/ld"));
    ok!(r.symlink("renamed", "/lr"));
    ok!(r.chdir("/lr"));
    ok!(r.getcwd());
    let d = ok!(r.open("/renamed", o::RDONLY | o::DIRECTORY, 0)).unwrap();
    ok!(r.fchdir(d));
    ok!(r.getcwd());
    let f = ok!(r.open("/f", o::RDONLY, 0)).unwrap();
    err!(ENOTDIR, r.fchdir(f));
});

case!(chdir_needs_search_permission, |r| {
    ok!(r.mkdir("/d", 0o700));
    ok!(r.mkdir("/open", 0o755));
    ok!(r.mkdir("/open/in", 0o755));
    ok!(r.chmod("/open/in", 0o777));
    r.set_creds(&u1000());
    err!(EACCES, r.chdir("/d"));
    ok!(r.chdir("/open/in"));
    r.as_root();
    ok!(r.chmod("/open", 0o700));
    r.set_creds(&u1000());
    ok!(r.stat("."));
    // ".." is looked up in the working directory, which is searchable.
    ok!(r.stat(".."));
    err!(EACCES, r.stat("../in"));
    err!(EACCES, r.stat("/open/in"));
    ok!(r.getcwd());
    err!(EACCES, r.mkdir("/open/in/y", 0o755));
    ok!(r.mkdir("x", 0o755));
});

// ---------------------------------------------------------------------------------------------
// chmod, chown, setgid

case!(chmod_rules, |r| {
    ok!(r.mkfile("/f", b"x"));
    ok!(r.chown("/f", Some(1000), Some(1000)));
    ok!(r.mkfile("/rootf", b"x"));
    r.set_creds(&u1001());
    err!(EPERM, r.chmod("/f", 0o777));
    err!(EPERM, r.chmod("/rootf", 0o777));
    r.set_creds(&u1000());
    let f0 = r.times("/f");
    ok!(r.chmod("/f", 0o4755));
    r.mc_rel("chmod", "/f", &f0);
    ok!(r.stat("/f"));
    ok!(r.chmod("/f", 0o1644));
    ok!(r.stat("/f"));
    // Set-group-id is dropped when the caller is not in the file's group.
    r.as_root();
    ok!(r.chown("/f", None, Some(0)));
    r.set_creds(&u1000());
    ok!(r.chmod("/f", 0o2755));
    ok!(r.stat("/f"));
    ok!(r.chmod("/f", 0o170777));
    ok!(r.stat("/f"));
    r.as_root();
    ok!(r.chmod("/rootf", 0o7777));
    ok!(r.stat("/rootf"));
    ok!(r.symlink("rootf", "/l"));
    ok!(r.chmod("/l", 0o600));
    ok!(r.lstat("/l"));
    ok!(r.stat("/l"));
    let h = ok!(r.open("/f", o::RDONLY, 0)).unwrap();
    ok!(r.fchmod(h, 0o640));
    r.set_creds(&u1001());
    err!(EPERM, r.fchmod(h, 0o777));
});

case!(chown_rules, |r| {
    ok!(r.mkfile("/f", b"x"));
    ok!(r.chown("/f", Some(1000), Some(1000)));
    r.set_creds(&u1000());
    err!(EPERM, r.chown("/f", Some(1001), None));
    err!(EPERM, r.chown("/f", None, Some(1001)));
    err!(EPERM, r.chown("/f", Some(0), Some(0)));
    ok!(r.chown("/f", Some(1000), None));
    ok!(r.chown("/f", None, Some(1000)));
    ok!(r.chown("/f", None, None));
    r.set_creds(&Cred::user(1000, 1000, &[1000, 1002]));
    ok!(r.chown("/f", None, Some(1002)));
    ok!(r.stat("/f"));
    ok!(r.chown("/f", Some(1000), Some(1000)));
    r.set_creds(&u1001());
    err!(EPERM, r.chown("/f", None, Some(1001)));
    // Changing nothing needs no ownership.
    ok!(r.chown("/f", None, None));
    r.as_root();
    ok!(r.chown("/f", Some(1001), Some(1002)));
    ok!(r.stat("/f"));
    let f0 = r.times("/f");
    ok!(r.chown("/f", None, None));
    r.mc_rel("chown(-1, -1)", "/f", &f0);
    ok!(r.symlink("f", "/l"));
    ok!(r.lchown("/l", Some(5), Some(6)));
    ok!(r.lstat("/l"));
    ok!(r.stat("/l"));
    ok!(r.chown("/l", Some(7), Some(8)));
    ok!(r.lstat("/l"));
    ok!(r.stat("/l"));
    let h = ok!(r.open("/f", o::RDONLY, 0)).unwrap();
    ok!(r.fchown(h, Some(9), None));
    ok!(r.fstat(h));
});

case!(chown_clears_setid_bits, |r| {
    for (n, m) in [
        ("/su", 0o4755),
        ("/sg", 0o2755),
        ("/sgnx", 0o2745),
        ("/both", 0o6777),
        ("/sticky", 0o1755),
    ] {
        ok!(r.mkfile(n, b"x"));
        ok!(r.chmod(n, m));
        ok!(r.chown(n, Some(1000), Some(1000)));
        ok!(r.stat(n));
    }
    ok!(r.mkdir("/dir", 0o755));
    ok!(r.chmod("/dir", 0o6755));
    ok!(r.chown("/dir", Some(1000), Some(1000)));
    ok!(r.stat("/dir"));
    ok!(r.chmod("/su", 0o4755));
    ok!(r.chown("/su", None, None));
    ok!(r.stat("/su"));
    r.set_creds(&u1000());
    ok!(r.chmod("/both", 0o6777));
    ok!(r.stat("/both"));
    ok!(r.chown("/both", Some(1000), Some(1000)));
    ok!(r.stat("/both"));
});

case!(write_and_truncate_clear_setid_bits, |r| {
    ok!(r.mkfile("/f", b"x"));
    ok!(r.chown("/f", Some(1000), Some(1000)));
    ok!(r.chmod("/f", 0o6777));
    ok!(r.mkfile("/g", b"x"));
    ok!(r.chown("/g", Some(1000), Some(1000)));
    ok!(r.chmod("/g", 0o6777));
    ok!(r.mkfile("/rootw", b"x"));
    ok!(r.chmod("/rootw", 0o6777));
    // Root writes keep the bits.
    let h = ok!(r.open("/rootw", o::WRONLY, 0)).unwrap();
    ok!(r.write(h, b"root"));
    ok!(r.stat("/rootw"));
    r.set_creds(&u1000());
    let h = ok!(r.open("/f", o::WRONLY, 0)).unwrap();
    ok!(r.stat("/f"));
    ok!(r.write(h, b"user"));
    ok!(r.stat("/f"));
    ok!(r.truncate("/g", 100));
    ok!(r.stat("/g"));
    let h = ok!(r.open("/rootw", o::WRONLY | o::TRUNC, 0)).unwrap();
    ok!(r.stat("/rootw"));
    ok!(r.fstat(h));
});

case!(setgid_directory_inheritance, |r| {
    ok!(r.mkdir("/g", 0o777));
    ok!(r.chown("/g", Some(0), Some(500)));
    ok!(r.chmod("/g", 0o2777));
    ok!(r.stat("/g"));
    r.set_creds(&u1000());
    ok!(r.touch("/g/f", o::CREAT | o::WRONLY, 0o2755));
    ok!(r.stat("/g/f"));
    ok!(r.mkdir("/g/sub", 0o755));
    ok!(r.stat("/g/sub"));
    ok!(r.mkdir("/g/sub/deeper", 0o700));
    ok!(r.stat("/g/sub/deeper"));
    ok!(r.symlink("f", "/g/s"));
    ok!(r.lstat("/g/s"));
    ok!(r.mknod("/g/p", ty_fifo() | 0o2770));
    ok!(r.stat("/g/p"));
    r.set_creds(&Cred::user(1001, 1001, &[1001, 500]));
    ok!(r.touch("/g/f2", o::CREAT | o::WRONLY, 0o2755));
    ok!(r.stat("/g/f2"));
    r.as_root();
    ok!(r.touch("/g/rootf", o::CREAT | o::WRONLY, 0o2755));
    ok!(r.stat("/g/rootf"));
    // A file moved in keeps its group.
    ok!(r.mkfile("/outside", b""));
    ok!(r.rename("/outside", "/g/moved"));
    ok!(r.stat("/g/moved"));
});

// ---------------------------------------------------------------------------------------------
// truncate, sizes, blocks

case!(truncate_sizes_and_blocks, |r| {
    ok!(r.mkfile("/f", b""));
    ok!(r.stat("/f"));
    ok!(r.truncate("/f", 10000));
    ok!(r.stat("/f"));
    ok!(r.truncate("/f", 3));
    ok!(r.cat("/f"));
    ok!(r.mkfile("/g", b"a"));
    ok!(r.stat("/g"));
    let h = ok!(r.open("/g", o::RDWR, 0)).unwrap();
    ok!(r.pwrite(h, b"z", 100_000));
    ok!(r.fstat(h));
    ok!(r.pread(h, 4, 99_998));
    ok!(r.ftruncate(h, 4096));
    ok!(r.fstat(h));
    ok!(r.ftruncate(h, 4097));
    ok!(r.fstat(h));
    ok!(r.ftruncate(h, 0));
    ok!(r.fstat(h));
    ok!(r.write(h, &[7u8; 9000]));
    ok!(r.fstat(h));
    ok!(r.symlink("g", "/lg"));
    ok!(r.truncate("/lg", 5));
    ok!(r.stat("/g"));
    ok!(r.lstat("/lg"));
    err!(ENOENT, r.truncate("/missing", 0));
    err!(EISDIR, r.truncate("/", 0));
    ok!(r.mkdir("/d", 0o755));
    ok!(r.stat("/d"));
    ok!(r.stat("/"));
});

case!(truncate_times, |r| {
    ok!(r.mkfile("/f", b"12345"));
    let t0 = r.times("/f");
    ok!(r.truncate("/f", 5));
    r.mc_rel("truncate to the same size", "/f", &t0);
    let t1 = r.times("/f");
    ok!(r.truncate("/f", 2));
    r.mc_rel("truncate shorter", "/f", &t1);
    let h = ok!(r.open("/f", o::WRONLY, 0)).unwrap();
    let t2 = r.times("/f");
    ok!(r.ftruncate(h, 2));
    r.mc_rel("ftruncate to the same size", "/f", &t2);
});

// ---------------------------------------------------------------------------------------------
// Timestamps

case!(times_create_unlink_link_rename, |r| {
    ok!(r.mkdir("/d", 0o755));
    ok!(r.mkdir("/e", 0o755));
    let d0 = r.times("/d");
    ok!(r.mkfile("/d/f", b"x"));
    r.times_rel("create", "/d", &d0);
    let d1 = r.times("/d");
    let f1 = r.times("/d/f");
    ok!(r.link("/d/f", "/d/h"));
    r.times_rel("link: parent", "/d", &d1);
    r.times_rel("link: file", "/d/f", &f1);
    let d2 = r.times("/d");
    let e2 = r.times("/e");
    let f2 = r.times("/d/f");
    ok!(r.rename("/d/h", "/e/h"));
    r.times_rel("rename: old parent", "/d", &d2);
    r.times_rel("rename: new parent", "/e", &e2);
    r.times_rel("rename: file", "/d/f", &f2);
    let d3 = r.times("/d");
    let f3 = r.times("/d/f");
    ok!(r.unlink("/e/h"));
    r.times_rel("unlink: other link", "/d/f", &f3);
    r.times_rel("unlink: unrelated dir", "/d", &d3);
    let d4 = r.times("/d");
    err!(EEXIST, r.mkdir("/d/f", 0o755));
    err!(ENOENT, r.unlink("/d/none"));
    r.times_rel("failed calls", "/d", &d4);
    let d5 = r.times("/d");
    ok!(r.mkdir("/d/sub", 0o755));
    r.times_rel("mkdir", "/d", &d5);
    let d6 = r.times("/d");
    ok!(r.rmdir("/d/sub"));
    r.times_rel("rmdir", "/d", &d6);
    let d7 = r.times("/d");
    ok!(r.symlink("x", "/d/s"));
    r.times_rel("symlink", "/d", &d7);
    let s7 = r.times("/d/s");
    ok!(r.rename("/d/s", "/d/s2"));
    r.times_rel("rename in place: link", "/d/s2", &s7);
});

case!(times_read_write_stat, |r| {
    ok!(r.mkfile("/f", b"data"));
    let t0 = r.times("/f");
    ok!(r.stat("/f"));
    ok!(r.access("/f", acc::R_OK));
    err!(EINVAL, r.readlink("/f"));
    r.times_rel("stat, access", "/f", &t0);
    let t1 = r.times("/f");
    ok!(r.cat("/f"));
    r.times_rel("first read after write", "/f", &t1);
    let t2 = r.times("/f");
    ok!(r.cat("/f"));
    r.times_rel("second read", "/f", &t2);
    let t3 = r.times("/f");
    let h = ok!(r.open("/f", o::WRONLY, 0)).unwrap();
    r.times_rel("open for write", "/f", &t3);
    ok!(r.write(h, b"D"));
    r.times_rel("write", "/f", &t3);
    let t4 = r.times("/f");
    ok!(r.write(h, b""));
    r.times_rel("empty write", "/f", &t4);
    ok!(r.close(h));
    ok!(r.mkdir("/d", 0o755));
    let d0 = r.times("/d");
    ok!(r.readdir("/d"));
    r.times_rel("readdir", "/d", &d0);
    let d1 = r.times("/d");
    ok!(r.readdir("/d"));
    r.times_rel("readdir again", "/d", &d1);
    let d2 = r.times("/d");
    ok!(r.stat("/d/."));
    r.times_rel("lookup", "/d", &d2);
});

// Multigrain timestamps (Linux 6.13 and later; tmpfs has them): a change made right after a
// stat read an inode's times shows in them, even within one tick of the coarse clock, and a
// change stamped coarsely is never older than one stamped finely before it. No sleeps: each
// change follows its stat at once. Skipped where the kernel stamps coarsely (older than
// 6.13), since then the kernel answers "same" by chance of the tick.
case!(times_change_right_after_stat, |r| {
    if !common::multigrain_kernel() {
        return;
    }
    ok!(r.mkdir("/d", 0o755));
    ok!(r.mkfile("/d/f", b"x"));
    let h = ok!(r.open("/d/f", o::WRONLY, 0)).unwrap();
    for i in 0..20 {
        let f0 = r.times_at_once("/d/f");
        ok!(r.chmod("/d/f", if i % 2 == 0 { 0o600 } else { 0o644 }));
        r.mc_rel("chmod right after stat", "/d/f", &f0);
        let f1 = r.times_at_once("/d/f");
        ok!(r.write(h, b"y"));
        r.mc_rel("write right after stat", "/d/f", &f1);
        let d0 = r.times_at_once("/d");
        ok!(r.mkfile(format!("/d/n{i}"), b""));
        r.mc_rel("create right after stat", "/d", &d0);
        // Not checked: Linux stamps a directory an unlink (or rmdir, or link) changes with
        // the child's new change time, so right after a stat of the directory in one tick
        // the kernel can leave its times as they were. The engine stamps the directory by
        // its own rule, so the unlink shows.
        ok!(r.unlink(format!("/d/n{i}")));
        // A new file nobody has looked at is stamped coarsely, but not before the fine stamp
        // the write above gave /d/f.
        let f2 = r.times_at_once("/d/f");
        ok!(r.mkfile(format!("/e{i}"), b""));
        let e = r.times_at_once(format!("/e{i}"));
        r.log(format!("new file not older: {}", e.ctime >= f2.ctime));
    }
    ok!(r.close(h));
});

// An unlink sets the change time of what it unlinks, as long as anything can still see it:
// a file open elsewhere, or one with another name. (When the last name of a file nothing
// holds goes, the engine skips the stamp: nothing can read it again.) Each change follows a
// stat, so a multigrain clock gives it a later stamp even within one tick.
case!(unlink_sets_the_ctime_of_what_can_still_be_seen, |r| {
    ok!(r.mkfile("/f", b"x"));
    let h = ok!(r.open("/f", o::RDONLY, 0)).unwrap();
    let before = r.sys.fstat(h).unwrap();
    ok!(r.unlink("/f"));
    let after = r.sys.fstat(h).unwrap();
    r.log(format!(
        "open file: nlink {}, ctime later: {}",
        after.nlink,
        after.ctime > before.ctime
    ));
    ok!(r.close(h));
    ok!(r.mkfile("/g", b"x"));
    ok!(r.link("/g", "/g2"));
    let before = r.times_at_once("/g2");
    ok!(r.unlink("/g"));
    let after = r.times_at_once("/g2");
    r.log(format!(
        "other name: nlink {}, ctime later: {}",
        after.nlink,
        after.ctime > before.ctime
    ));
});

case!(utimensat_rules, |r| {
    ok!(r.mkfile("/f", b"x"));
    ok!(r.utimens("/f", [T::Set(1_000_000, 5), T::Set(2_000_000, 999_999_999)]));
    ok!(r.stat("/f"));
    let s = r.sys.stat(Dir::Cwd, b"/f", 0).unwrap();
    r.log(format!("explicit times: a={:?} m={:?}", s.atime, s.mtime));
    let t0 = r.times("/f");
    ok!(r.utimens("/f", [T::Omit, T::Now]));
    r.times_rel("omit, now", "/f", &t0);
    let t1 = r.times("/f");
    ok!(r.utimens("/f", [T::Omit, T::Omit]));
    r.times_rel("omit, omit", "/f", &t1);
    err!(EINVAL, r.utimens("/f", [T::Set(0, 1_000_000_000), T::Omit]));
    ok!(r.utimens("/f", [T::Set(-1, 0), T::Set(0, 0)]));
    let s = r.sys.stat(Dir::Cwd, b"/f", 0).unwrap();
    r.log(format!("old times: a={:?} m={:?}", s.atime, s.mtime));
    ok!(r.symlink("f", "/l"));
    ok!(r.utimens_at(
        Dir::Cwd,
        "/l",
        [T::Set(7, 7), T::Set(8, 8)],
        at::SYMLINK_NOFOLLOW
    ));
    let s = r.sys.stat(Dir::Cwd, b"/l", at::SYMLINK_NOFOLLOW).unwrap();
    r.log(format!("link times: a={:?} m={:?}", s.atime, s.mtime));
    let s = r.sys.stat(Dir::Cwd, b"/f", 0).unwrap();
    r.log(format!("target times: a={:?} m={:?}", s.atime, s.mtime));
    // Permissions: "now" needs write access or ownership; explicit times need ownership.
    ok!(r.chmod("/f", 0o666));
    ok!(r.mkfile("/ro", b""));
    ok!(r.chmod("/ro", 0o644));
    r.set_creds(&u1000());
    ok!(r.utimens("/f", [T::Now, T::Now]));
    err!(EPERM, r.utimens("/f", [T::Set(1, 0), T::Now]));
    err!(EPERM, r.utimens("/f", [T::Omit, T::Set(1, 0)]));
    ok!(r.utimens("/f", [T::Omit, T::Omit]));
    // Only "now" for both times is allowed on write access alone.
    err!(EPERM, r.utimens("/f", [T::Now, T::Omit]));
    err!(EPERM, r.utimens("/f", [T::Omit, T::Now]));
    err!(EACCES, r.utimens("/ro", [T::Now, T::Now]));
    // Only "now" for both counts as "now" for the write-access rule.
    err!(EPERM, r.utimens("/ro", [T::Now, T::Omit]));
    err!(ENOENT, r.utimens("/missing", [T::Now, T::Now]));
    err!(
        EINVAL,
        r.utimens_at(Dir::Cwd, "/f", [T::Now, T::Now], 0x400)
    );
});

// ---------------------------------------------------------------------------------------------
// Whole-tree mixes

case!(deep_tree_and_removal, |r| {
    let mut p = String::new();
    for i in 0..20 {
        p.push_str(&format!("/d{i}"));
        ok!(r.mkdir(&p, 0o755));
        ok!(r.mkfile(format!("{p}/f"), format!("{i}").as_bytes()));
    }
    ok!(r.stat(&p));
    ok!(r.chdir(&p));
    ok!(r.getcwd());
    ok!(r.stat("../../../../f"));
    ok!(r.rename("/d0/d1", "/moved"));
    ok!(r.getcwd());
    err!(ENOTEMPTY, r.rmdir("/moved"));
    ok!(r.chdir("/"));
    ok!(r.rename("/moved/d2/d3", "/d0/d1"));
    ok!(r.readdir("/d0"));
    ok!(r.readdir("/d0/d1"));
});

case!(many_entries_in_one_directory, |r| {
    ok!(r.mkdir("/big", 0o755));
    for i in 0..300 {
        ok!(r.touch(format!("/big/file-{i:03}"), o::CREAT | o::WRONLY, 0o644));
    }
    ok!(r.stat("/big"));
    for i in (0..300).step_by(3) {
        ok!(r.unlink(format!("/big/file-{i:03}")));
    }
    for i in (1..300).step_by(7) {
        r.rename(format!("/big/file-{i:03}"), format!("/big/r-{i:03}"));
    }
    ok!(r.readdir("/big"));
    ok!(r.stat("/big"));
});

// ---------------------------------------------------------------------------------------------
// The kernel's errno, in the kernel's order (issue 9): where several errors apply, the one
// the kernel checks first.

const O_NOATIME: u32 = 0o1000000;
const SEEK_SET: u32 = 0;
const SEEK_CUR: u32 = 1;
const SEEK_END: u32 = 2;
const SEEK_DATA: u32 = 3;
const SEEK_HOLE: u32 = 4;
const AT_STATX_DONT_SYNC: u32 = 0x4000;
const AT_STATX_FORCE_SYNC: u32 = 0x2000;

// A descriptor number closed and taken again by another directory, then by a file:
// `fstatat` under it finds names in what the number refers to now, never in what a
// cached answer was found under before (the engine reads the directory of the first
// descriptors with no guard: `file::DirKeys`).
case!(fstatat_under_a_reused_descriptor_number, |r| {
    base(r);
    ok!(r.mkfile("/d/x", b"1"));
    ok!(r.mkdir("/e", 0o755));
    ok!(r.mkdir("/e/x", 0o700));
    let d = ok!(r.open("/d", o::RDONLY | o::DIRECTORY, 0)).unwrap();
    for _ in 0..3 {
        ok!(r.stat_at(Dir::Fd(d), "x", 0));
    }
    ok!(r.close(d));
    err!(EBADF, r.stat_at(Dir::Fd(d), "x", 0));
    let e = ok!(r.open("/e", o::RDONLY | o::DIRECTORY, 0)).unwrap();
    for _ in 0..3 {
        ok!(r.stat_at(Dir::Fd(e), "x", 0));
    }
    ok!(r.close(e));
    let p = ok!(r.open("/d", o::PATH, 0)).unwrap();
    ok!(r.stat_at(Dir::Fd(p), "x", 0));
    ok!(r.close(p));
    let f = ok!(r.open("/f", o::RDONLY, 0)).unwrap();
    err!(ENOTDIR, r.stat_at(Dir::Fd(f), "x", 0));
    ok!(r.close(f));
    err!(EBADF, r.stat_at(Dir::Fd(f), "x", 0));
});

case!(fstatat_unknown_flag_bits, |r| {
    base(r);
    r.stat_at(Dir::Cwd, "/f", AT_STATX_DONT_SYNC);
    r.stat_at(Dir::Cwd, "/f", AT_STATX_FORCE_SYNC);
    r.stat_at(Dir::Cwd, "/f", 0x8000);
    r.stat_at(Dir::Cwd, "/f", 0x1);
    r.stat_at(Dir::Cwd, "/missing", 0x8000);
});

case!(open_with_both_access_bits, |r| {
    base(r);
    r.open("/f", 3, 0);
    r.open("/d", 3, 0);
    r.open("/missing", 3 | o::CREAT, 0o644);
});

case!(truncate_to_a_negative_length, |r| {
    base(r);
    r.truncate("/missing", 1 << 63);
    r.truncate("/f", 1 << 63);
    r.truncate("/d", 1 << 63);
    let h = r.open("/f", o::RDWR, 0).unwrap();
    r.ftruncate(h, 1 << 63);
    let ro = r.open("/f", o::RDONLY, 0).unwrap();
    r.ftruncate(ro, 1 << 63);
    r.ftruncate(ro, 1);
});

case!(io_at_the_end_of_the_offset_range, |r| {
    base(r);
    let a = r.open("/f", o::WRONLY | o::APPEND, 0).unwrap();
    r.pwrite(a, &[7u8; 9000], (1 << 63) - 4);
    r.pwrite(a, b"x", (1 << 63) - 1);
    let h = r.open("/f", o::RDWR, 0).unwrap();
    r.pread(h, 10, (1 << 63) - 1);
    r.pread(h, 0, (1 << 63) - 1);
    r.pwrite(h, b"xy", (1 << 63) - 1);
    r.pwrite(h, b"", (1 << 63) - 1);
    ok!(r.stat("/f"));
});

case!(utimensat_bad_times_and_a_missing_path, |r| {
    base(r);
    r.utimens("/missing", [T::Set(0, 1_000_000_000), T::Omit]);
    r.utimens("/missing/x", [T::Omit, T::Set(0, 2_000_000_000)]);
    r.utimens("/f", [T::Set(0, 1_000_000_000), T::Omit]);
    r.utimens("/f/x", [T::Set(0, 1_000_000_000), T::Omit]);
});

case!(rename_exchange_with_an_over_long_new_path, |r| {
    let long = format!("/{}", "a/".repeat(2047));
    r.rename2("/missing/x", &long, rn::EXCHANGE);
    r.rename2("/missing/x", &long, 0);
    r.rename2(&long, "/missing/x", rn::EXCHANGE);
});

case!(lseek_on_a_directory, |r| {
    base(r);
    let d = r.open("/d", o::RDONLY | o::DIRECTORY, 0).unwrap();
    r.lseek(d, 4096, SEEK_END);
    r.lseek(d, 0, SEEK_END);
    r.lseek(d, 0, SEEK_DATA);
    r.lseek(d, 0, SEEK_HOLE);
    r.lseek(d, 5, SEEK_SET);
    r.lseek(d, -1, SEEK_CUR);
});

case!(lseek_at_the_end_of_the_offset_range, |r| {
    base(r);
    let h = r.open("/f", o::RDWR, 0).unwrap();
    r.lseek(h, i64::MAX, SEEK_SET);
    r.lseek(h, i64::MAX, SEEK_CUR);
    r.lseek(h, 1, SEEK_CUR);
    r.lseek(h, 0, SEEK_SET);
    r.lseek(h, i64::MAX, SEEK_END);
    r.lseek(h, -6, SEEK_END);
    // Data in the last page of the offset range.
    r.pwrite(h, b"z", (i64::MAX - 10) as u64);
    r.lseek(h, i64::MAX - 2, SEEK_HOLE);
    r.lseek(h, i64::MAX - 2, SEEK_DATA);
    r.lseek(h, i64::MAX - 20, SEEK_DATA);
    r.lseek(h, 0, SEEK_HOLE);
    r.lseek(h, 4096, SEEK_DATA);
    r.lseek(h, 5000, SEEK_HOLE);
    // Data up to the last byte of the offset range.
    r.pwrite(h, b"z", (i64::MAX - 1) as u64);
    r.lseek(h, i64::MAX - 2, SEEK_HOLE);
    r.lseek(h, i64::MAX - 2, SEEK_DATA);
    r.lseek(h, i64::MAX - 5000, SEEK_HOLE);
    r.lseek(h, i64::MAX - 5000, SEEK_DATA);
    r.lseek(h, 1, SEEK_DATA);
});

case!(write_by_a_non_member_clears_setgid, |r| {
    ok!(r.mkfile("/g", b"data"));
    ok!(r.chmod("/g", 0o2666));
    ok!(r.mkfile("/gx", b"data"));
    ok!(r.chmod("/gx", 0o2676));
    ok!(r.mkfile("/u", b"data"));
    ok!(r.chmod("/u", 0o4666));
    r.set_creds(&u1000());
    for p in ["/g", "/gx", "/u"] {
        let h = r.open(p, o::WRONLY, 0).unwrap();
        ok!(r.write(h, b"more"));
        ok!(r.close(h));
    }
    r.as_root();
    ok!(r.stat("/g"));
    ok!(r.stat("/gx"));
    ok!(r.stat("/u"));
});

case!(o_noatime_on_another_users_file, |r| {
    base(r);
    ok!(r.chmod("/f", 0o644));
    r.set_creds(&u1000());
    err!(EPERM, r.open("/f", o::RDONLY | O_NOATIME, 0));
    ok!(r.mkfile("/mine", b"x"));
    let h = r.open("/mine", o::RDONLY | O_NOATIME, 0);
    if let Ok(h) = h {
        ok!(r.close(h));
    }
    r.as_root();
    let h = r.open("/f", o::RDONLY | O_NOATIME, 0);
    if let Ok(h) = h {
        ok!(r.close(h));
    }
});

case!(symlink_atime_on_follow_and_readlink, |r| {
    base(r);
    let nap = || std::thread::sleep(std::time::Duration::from_millis(30));
    nap();
    let t0 = r.sys.stat(Dir::Cwd, b"/lf", at::SYMLINK_NOFOLLOW).unwrap();
    ok!(r.readlink("/lf"));
    let t1 = r.sys.stat(Dir::Cwd, b"/lf", at::SYMLINK_NOFOLLOW).unwrap();
    r.log(format!(
        "readlink: atime {}",
        if t1.atime != t0.atime {
            "changed"
        } else {
            "same"
        }
    ));
    ok!(r.symlink("d", "/ld2"));
    nap();
    let t0 = r.sys.stat(Dir::Cwd, b"/ld2", at::SYMLINK_NOFOLLOW).unwrap();
    ok!(r.stat("/ld2/"));
    let t1 = r.sys.stat(Dir::Cwd, b"/ld2", at::SYMLINK_NOFOLLOW).unwrap();
    r.log(format!(
        "followed: atime {}",
        if t1.atime != t0.atime {
            "changed"
        } else {
            "same"
        }
    ));
});

case!(getcwd_deeper_than_path_max, |r| {
    let name = "n".repeat(200);
    for _ in 0..25 {
        ok!(r.mkdir(&name, 0o755));
        ok!(r.chdir(&name));
    }
    r.getcwd();
    ok!(r.chdir(".."));
    ok!(r.stat("."));
});

// ---------------------------------------------------------------------------------------------
// fallocate (tmpfs: allocation and hole punching)

const FALLOC_KEEP_SIZE: u32 = 0x01;
const FALLOC_PUNCH_HOLE: u32 = 0x02;
const FALLOC_COLLAPSE_RANGE: u32 = 0x08;
const FALLOC_ZERO_RANGE: u32 = 0x10;
const FALLOC_INSERT_RANGE: u32 = 0x20;

case!(fallocate_modes_and_errors, |r| {
    base(r);
    let h = r.open("/f", o::RDWR, 0).unwrap();
    for mode in [
        0x04,
        FALLOC_PUNCH_HOLE,
        FALLOC_ZERO_RANGE,
        FALLOC_ZERO_RANGE | FALLOC_KEEP_SIZE,
        FALLOC_COLLAPSE_RANGE,
        FALLOC_INSERT_RANGE,
        FALLOC_COLLAPSE_RANGE | FALLOC_KEEP_SIZE,
        FALLOC_PUNCH_HOLE | FALLOC_ZERO_RANGE | FALLOC_KEEP_SIZE,
        0x100,
    ] {
        r.fallocate(h, mode, 0, 4096);
    }
    r.fallocate(h, 0, 0, 0);
    r.fallocate(h, 0, 1 << 63, 10);
    r.fallocate(h, 0, 10, 1 << 63);
    r.fallocate(h, 0, (1 << 63) - 10, 100);
    r.fallocate(h, FALLOC_PUNCH_HOLE | FALLOC_KEEP_SIZE, 0, 0);
    let ro = r.open("/f", o::RDONLY, 0).unwrap();
    r.fallocate(ro, 0, 0, 10);
    let p = r.open("/f", o::PATH, 0).unwrap();
    r.fallocate(p, 0, 0, 10);
    let d = r.open("/d", o::RDONLY | o::DIRECTORY, 0).unwrap();
    r.fallocate(d, 0, 0, 10);
    let a = r.open("/f", o::WRONLY | o::APPEND, 0).unwrap();
    r.fallocate(a, 0, 0, 10);
    ok!(r.stat("/f"));
});

// ---------------------------------------------------------------------------------------------
// copy_file_range (tmpfs: the splice fallback within one file system)

case!(copy_file_range_copies_and_moves_the_offsets, |r| {
    ok!(r.mkfile("/src", b"0123456789abcdefghij"));
    let i = r.open("/src", o::RDONLY, 0).unwrap();
    let out = r.open("/dst", o::RDWR | o::CREAT, 0o644).unwrap();
    let t0 = r.times("/dst");
    std::thread::sleep(std::time::Duration::from_millis(20));
    // Explicit offsets: the positions stay.
    ok!(r.copy_file_range((i, Some(2)), (out, Some(0)), 5, 0));
    r.times_rel("copy_file_range", "/dst", &t0);
    r.lseek(i, 0, SEEK_CUR);
    r.lseek(out, 0, SEEK_CUR);
    // The file positions: both move.
    ok!(r.copy_file_range((i, None), (out, None), 7, 0));
    r.lseek(i, 0, SEEK_CUR);
    r.lseek(out, 0, SEEK_CUR);
    // Cut at the source's end; then nothing past it.
    ok!(r.copy_file_range((i, None), (out, Some(30)), 100, 0));
    ok!(r.copy_file_range((i, Some(20)), (out, Some(0)), 10, 0));
    ok!(r.copy_file_range((i, Some(1000)), (out, Some(0)), 10, 0));
    ok!(r.copy_file_range((i, Some(0)), (out, Some(0)), 0, 0));
    // Past the destination's end: a hole between.
    ok!(r.copy_file_range((i, Some(0)), (out, Some(10_000)), 4, 0));
    ok!(r.fstat(out));
    ok!(r.cat("/dst"));
    r.lseek(out, 0, SEEK_HOLE);
    // One file, ranges apart: allowed; touching: refused.
    ok!(r.copy_file_range((out, Some(0)), (out, Some(100)), 10, 0));
    r.copy_file_range((out, Some(0)), (out, Some(5)), 10, 0);
    r.copy_file_range((out, Some(5)), (out, Some(0)), 10, 0);
    ok!(r.copy_file_range((out, Some(0)), (out, Some(10)), 10, 0));
    ok!(r.copy_file_range((out, Some(0)), (out, Some(0)), 0, 0));
    ok!(r.cat("/dst"));
});

case!(copy_file_range_errors, |r| {
    base(r);
    ok!(r.mkfile("/g", b""));
    let f = r.open("/f", o::RDWR, 0).unwrap();
    let g = r.open("/g", o::RDWR, 0).unwrap();
    let ro = r.open("/f", o::RDONLY, 0).unwrap();
    let wo = r.open("/g", o::WRONLY, 0).unwrap();
    let app = r.open("/g", o::WRONLY | o::APPEND, 0).unwrap();
    let path = r.open("/f", o::PATH, 0).unwrap();
    let d = r.open("/d", o::RDONLY | o::DIRECTORY, 0).unwrap();
    for flags in [1, 2, 0x8000_0000] {
        r.copy_file_range((f, Some(0)), (g, Some(0)), 5, flags);
    }
    // flags before the descriptors; the kind before the access mode.
    r.copy_file_range((path, Some(0)), (g, Some(0)), 5, 1);
    r.copy_file_range((path, Some(0)), (g, Some(0)), 5, 0);
    r.copy_file_range((f, Some(0)), (path, Some(0)), 5, 0);
    r.copy_file_range((d, Some(0)), (g, Some(0)), 5, 0);
    r.copy_file_range((f, Some(0)), (d, Some(0)), 5, 0);
    r.copy_file_range((d, Some(0)), (ro, Some(0)), 5, 0);
    r.copy_file_range((wo, Some(0)), (g, Some(0)), 5, 0);
    r.copy_file_range((f, Some(0)), (ro, Some(0)), 5, 0);
    r.copy_file_range((f, Some(0)), (app, Some(0)), 5, 0);
    r.copy_file_range((f, None), (app, None), 5, 0);
    // Offsets: a sum past i64::MAX; a negative one; the maximum size.
    r.copy_file_range((f, Some(i64::MAX as u64 - 2)), (g, Some(0)), 5, 0);
    r.copy_file_range((f, Some(0)), (g, Some(i64::MAX as u64 - 2)), 5, 0);
    r.copy_file_range((f, Some(0)), (g, Some(i64::MAX as u64)), 0, 0);
    r.copy_file_range((f, Some(0)), (g, Some(i64::MAX as u64 - 5)), 5, 0);
    r.copy_file_range((f, Some(1 << 63)), (g, Some(0)), 5, 0);
    r.copy_file_range((f, Some(0)), (g, Some(1 << 63)), 5, 0);
    r.copy_file_range((f, Some(0)), (g, Some(u64::MAX)), 0, 0);
    r.copy_file_range((f, Some(0)), (g, Some(0)), usize::MAX, 0);
    ok!(r.fstat(g));
    ok!(r.pread(g, 8, 0));
    r.pread(g, 8, i64::MAX as u64 - 6);
    ok!(r.pread(g, 4, i64::MAX as u64 - 4));
});

case!(copy_file_range_in_steps, |r| {
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    ok!(r.mkfile("/big", &data));
    let i = r.open("/big", o::RDONLY, 0).unwrap();
    let out = r
        .open("/copy", o::WRONLY | o::CREAT | o::TRUNC, 0o600)
        .unwrap();
    ok!(r.copy_file_range((i, Some(1)), (out, None), 299_990, 0));
    r.lseek(out, 0, SEEK_CUR);
    ok!(r.fstat(out));
    let back = r.open("/copy", o::RDONLY, 0).unwrap();
    for off in [0, 4095, 131_071, 131_072, 262_143, 299_980] {
        ok!(r.pread(back, 16, off));
    }
});

case!(fallocate_allocates_and_punches, |r| {
    ok!(r.mkfile("/f", b""));
    let h = r.open("/f", o::RDWR, 0).unwrap();
    let t0 = r.times("/f");
    std::thread::sleep(std::time::Duration::from_millis(20));
    ok!(r.fallocate(h, 0, 4096, 3 * 4096));
    r.times_rel("fallocate", "/f", &t0);
    ok!(r.fstat(h));
    ok!(r.fallocate(h, FALLOC_KEEP_SIZE, 100_000, 10));
    ok!(r.fstat(h));
    // Reserved pages read as zeros and are holes to SEEK_DATA.
    ok!(r.pread(h, 8, 5000));
    r.lseek(h, 0, SEEK_DATA);
    r.lseek(h, 0, SEEK_HOLE);
    ok!(r.pwrite(h, &[9u8; 10000], 2000));
    ok!(r.fstat(h));
    r.lseek(h, 0, SEEK_DATA);
    r.lseek(h, 3000, SEEK_HOLE);
    // A hole through the middle: whole pages freed, the partial ones zeroed.
    ok!(r.fallocate(h, FALLOC_PUNCH_HOLE | FALLOC_KEEP_SIZE, 3000, 6000));
    ok!(r.fstat(h));
    ok!(r.pread(h, 20, 2990));
    ok!(r.pread(h, 20, 8990));
    r.lseek(h, 0, SEEK_HOLE);
    r.lseek(h, 4096, SEEK_DATA);
    // Punching past the end changes nothing, and the size stays.
    ok!(r.fallocate(h, FALLOC_PUNCH_HOLE | FALLOC_KEEP_SIZE, 50_000, 100_000));
    ok!(r.fstat(h));
    ok!(r.cat("/f"));
});

// ---------------------------------------------------------------------------------------------
// Extended attributes

use common::oracle::XT;

const XCREATE: u32 = 1;
const XREPLACE: u32 = 2;

case!(xattrs_set_get_list_remove, |r| {
    base(r);
    let f = XT::Path(b"/f");
    ok!(r.listxattr(f, 0));
    let t0 = r.times("/f");
    std::thread::sleep(std::time::Duration::from_millis(20));
    ok!(r.setxattr(f, "user.colour", "green", 0));
    r.times_rel("setxattr", "/f", &t0);
    ok!(r.getxattr(f, "user.colour", 0));
    ok!(r.getxattr(f, "user.colour", 64));
    ok!(r.getxattr(f, "user.colour", 5));
    err!(ERANGE, r.getxattr(f, "user.colour", 4));
    err!(ENODATA, r.getxattr(f, "user.shape", 64));
    // Flags: create only, replace only, either.
    err!(EEXIST, r.setxattr(f, "user.colour", "red", XCREATE));
    err!(ENODATA, r.setxattr(f, "user.shape", "round", XREPLACE));
    ok!(r.setxattr(f, "user.colour", "blue", XREPLACE));
    ok!(r.setxattr(f, "user.shape", "", XCREATE));
    ok!(r.getxattr(f, "user.shape", 16));
    ok!(r.getxattr(f, "user.colour", 16));
    // Listed in tmpfs's order, whatever the order of the sets.
    for n in [
        "user.b",
        "user.zz",
        "user.a",
        "user.B",
        "trusted.t",
        "security.s",
    ] {
        ok!(r.setxattr(f, n, n, 0));
    }
    ok!(r.listxattr(f, 0));
    ok!(r.listxattr(f, 4096));
    err!(ERANGE, r.listxattr(f, 10));
    let t1 = r.times("/f");
    std::thread::sleep(std::time::Duration::from_millis(20));
    ok!(r.removexattr(f, "user.b"));
    r.times_rel("removexattr", "/f", &t1);
    err!(ENODATA, r.removexattr(f, "user.b"));
    ok!(r.listxattr(f, 4096));
    // Directories have them too; a hard link shares them, a rename keeps them.
    ok!(r.setxattr(XT::Path(b"/d"), "user.dir", "yes", 0));
    ok!(r.link("/f", "/d/g"));
    ok!(r.getxattr(XT::Path(b"/d/g"), "user.colour", 64));
    ok!(r.rename("/d", "/e"));
    ok!(r.getxattr(XT::Path(b"/e"), "user.dir", 64));
    ok!(r.listxattr(XT::Path(b"/e/g"), 4096));
    // A path follows a final symlink; the l calls stay on it.
    ok!(r.getxattr(XT::Path(b"/lf"), "user.colour", 64));
    err!(ENODATA, r.getxattr(XT::LPath(b"/lf"), "user.colour", 64));
    ok!(r.listxattr(XT::LPath(b"/lf"), 4096));
    err!(ENOENT, r.getxattr(XT::Path(b"/dangling"), "user.a", 64));
    err!(ENOENT, r.getxattr(XT::Path(b"/nope"), "user.a", 64));
    err!(ENOTDIR, r.setxattr(XT::Path(b"/f/x"), "user.a", "1", 0));
    err!(ENOENT, r.listxattr(XT::Path(b""), 64));
});

case!(xattr_names_sizes_and_flags, |r| {
    base(r);
    let f = XT::Path(b"/f");
    let long = |n: usize| {
        let mut v = b"user.".to_vec();
        v.resize(n, b'a');
        v
    };
    ok!(r.setxattr(f, long(255), "x", 0));
    err!(ERANGE, r.setxattr(f, long(256), "x", 0));
    err!(ERANGE, r.getxattr(f, long(256), 64));
    err!(ERANGE, r.removexattr(f, long(256)));
    err!(ERANGE, r.setxattr(f, "", "x", 0));
    err!(ERANGE, r.getxattr(f, "", 64));
    ok!(r.setxattr(f, "user.big", vec![7u8; 65536], 0));
    ok!(r.getxattr(f, "user.big", 0));
    err!(E2BIG, r.setxattr(f, "user.big", vec![7u8; 65537], 0));
    err!(EINVAL, r.setxattr(f, "user.a", "x", 4));
    err!(EINVAL, r.setxattr(f, "user.a", "x", XCREATE | XREPLACE | 8));
    // Both flags: the attribute must exist (replace) and must not (create).
    err!(ENODATA, r.setxattr(f, "user.both", "x", XCREATE | XREPLACE));
    ok!(r.setxattr(f, "user.both", "x", 0));
    err!(EEXIST, r.setxattr(f, "user.both", "x", XCREATE | XREPLACE));
    // A bare prefix, a name in no namespace, and system. (POSIX ACLs aside).
    err!(EINVAL, r.setxattr(f, "user.", "x", 0));
    err!(EINVAL, r.getxattr(f, "user.", 64));
    err!(EOPNOTSUPP, r.setxattr(f, "foo.bar", "x", 0));
    err!(EOPNOTSUPP, r.getxattr(f, "foo.bar", 64));
    err!(EOPNOTSUPP, r.removexattr(f, "foo.bar"));
    err!(EOPNOTSUPP, r.setxattr(f, "system.foo", "x", 0));
    err!(EOPNOTSUPP, r.getxattr(f, "user", 64));
    // The arguments are checked before the path is looked up.
    err!(EINVAL, r.setxattr(XT::Path(b"/nope"), "user.a", "x", 4));
    err!(ERANGE, r.setxattr(XT::Path(b"/nope"), "", "x", 0));
    err!(
        E2BIG,
        r.setxattr(XT::Path(b"/nope"), "user.a", vec![0u8; 65537], 0)
    );
    err!(ERANGE, r.getxattr(XT::Path(b"/nope"), long(300), 64));
    err!(ENOENT, r.setxattr(XT::Path(b"/nope"), "foo.bar", "x", 0));
    ok!(r.listxattr(f, 0));
});

case!(xattr_namespaces_and_permissions, |r| {
    base(r);
    ok!(r.mknod("/fifo", 0o010644));
    ok!(r.mkfile("/mine", b""));
    ok!(r.chown("/mine", Some(1000), Some(1000)));
    ok!(r.mkfile("/shut", b""));
    ok!(r.chmod("/shut", 0o000));
    ok!(r.mkdir("/sticky", 0o1777));
    ok!(r.setxattr(XT::Path(b"/f"), "user.u", "1", 0));
    ok!(r.setxattr(XT::Path(b"/f"), "trusted.t", "2", 0));
    ok!(r.setxattr(XT::Path(b"/f"), "security.s", "3", 0));
    ok!(r.setxattr(XT::Path(b"/shut"), "user.u", "4", 0));
    // user. is for regular files and directories only, even for root.
    err!(EPERM, r.setxattr(XT::LPath(b"/lf"), "user.u", "1", 0));
    err!(EPERM, r.setxattr(XT::Path(b"/fifo"), "user.u", "1", 0));
    err!(ENODATA, r.getxattr(XT::Path(b"/fifo"), "user.u", 64));
    // trusted. and security. on a symlink itself, for root.
    ok!(r.setxattr(XT::LPath(b"/lf"), "trusted.t", "5", 0));
    ok!(r.listxattr(XT::LPath(b"/lf"), 4096));
    ok!(r.setxattr(XT::Path(b"/fifo"), "security.s", "6", 0));

    r.set_creds(&u1000());
    // trusted. is root's: refused to change, absent to read and to list.
    err!(EPERM, r.setxattr(XT::Path(b"/mine"), "trusted.t", "1", 0));
    err!(ENODATA, r.getxattr(XT::Path(b"/f"), "trusted.t", 64));
    err!(EPERM, r.removexattr(XT::Path(b"/f"), "trusted.t"));
    ok!(r.listxattr(XT::Path(b"/f"), 4096));
    // security. can be read by anyone, changed by root only.
    ok!(r.getxattr(XT::Path(b"/f"), "security.s", 64));
    err!(EPERM, r.setxattr(XT::Path(b"/mine"), "security.s", "1", 0));
    err!(EPERM, r.removexattr(XT::Path(b"/f"), "security.s"));
    // user. needs write permission to change, read permission to read; listing needs none.
    err!(EACCES, r.setxattr(XT::Path(b"/f"), "user.v", "1", 0));
    err!(EACCES, r.removexattr(XT::Path(b"/f"), "user.u"));
    err!(EACCES, r.removexattr(XT::Path(b"/f"), "user.none"));
    ok!(r.getxattr(XT::Path(b"/f"), "user.u", 64));
    err!(EACCES, r.getxattr(XT::Path(b"/shut"), "user.u", 64));
    ok!(r.listxattr(XT::Path(b"/shut"), 4096));
    ok!(r.setxattr(XT::Path(b"/mine"), "user.v", "1", 0));
    ok!(r.removexattr(XT::Path(b"/mine"), "user.v"));
    // Permission comes before the namespace: EACCES, not EINVAL or EOPNOTSUPP.
    err!(EACCES, r.setxattr(XT::Path(b"/f"), "user.", "1", 0));
    err!(EACCES, r.setxattr(XT::Path(b"/f"), "foo.bar", "1", 0));
    err!(EOPNOTSUPP, r.setxattr(XT::Path(b"/f"), "system.x", "1", 0));
    err!(EACCES, r.getxattr(XT::Path(b"/shut"), "foo.bar", 64));
    // A sticky directory's user. attributes are its owner's.
    err!(EPERM, r.setxattr(XT::Path(b"/sticky"), "user.u", "1", 0));
    err!(ENODATA, r.getxattr(XT::Path(b"/sticky"), "user.u", 64));
    // Search permission on the way still applies.
    r.set_creds(&Cred::root());
    ok!(r.chmod("/d", 0o700));
    ok!(r.mkfile("/d/in", b""));
    r.set_creds(&u1000());
    err!(EACCES, r.getxattr(XT::Path(b"/d/in"), "user.u", 64));
    err!(EACCES, r.listxattr(XT::Path(b"/d/in"), 64));
});

case!(xattrs_through_descriptors, |r| {
    base(r);
    ok!(r.chmod("/f", 0o666));
    let ro = r.open("/f", o::RDONLY, 0).unwrap();
    // The object's permissions count, not the descriptor's access mode.
    ok!(r.setxattr(XT::Fd(ro), "user.a", "1", 0));
    ok!(r.getxattr(XT::Fd(ro), "user.a", 64));
    ok!(r.listxattr(XT::Fd(ro), 64));
    let p = r.open("/f", o::PATH, 0).unwrap();
    err!(EBADF, r.getxattr(XT::Fd(p), "user.a", 64));
    err!(EBADF, r.setxattr(XT::Fd(p), "user.a", "2", 0));
    err!(EBADF, r.listxattr(XT::Fd(p), 64));
    err!(EBADF, r.removexattr(XT::Fd(p), "user.a"));
    // The name is checked before the descriptor.
    err!(ERANGE, r.getxattr(XT::Fd(p), "", 64));
    let d = r.open("/d", o::RDONLY | o::DIRECTORY, 0).unwrap();
    ok!(r.setxattr(XT::Fd(d), "user.d", "dir", 0));
    ok!(r.getxattr(XT::Path(b"/d"), "user.d", 64));
    // An unlinked file keeps its attributes while it is open.
    ok!(r.unlink("/f"));
    ok!(r.getxattr(XT::Fd(ro), "user.a", 64));
    ok!(r.setxattr(XT::Fd(ro), "user.b", "2", 0));
    ok!(r.removexattr(XT::Fd(ro), "user.a"));
    ok!(r.listxattr(XT::Fd(ro), 64));
    // A new file by the old name starts with none.
    ok!(r.mkfile("/f", b""));
    ok!(r.listxattr(XT::Path(b"/f"), 64));
    ok!(r.close(ro));
    ok!(r.close(p));
    ok!(r.close(d));
});

// A directory removed while it is open keeps its attributes for its descriptors, as an
// unlinked file does (hostfs once answered ESTALE, the directory gone from its cache).
case!(xattrs_of_a_removed_directory_held_open, |r| {
    ok!(r.mkdir("/e", 0o755));
    let d = r.open("/e", o::RDONLY | o::DIRECTORY, 0).unwrap();
    ok!(r.setxattr(XT::Fd(d), "user.d", "dir", 0));
    ok!(r.rmdir("/e"));
    ok!(r.listxattr(XT::Fd(d), 64));
    ok!(r.getxattr(XT::Fd(d), "user.d", 64));
    ok!(r.setxattr(XT::Fd(d), "user.e", "2", 0));
    ok!(r.removexattr(XT::Fd(d), "user.d"));
    ok!(r.listxattr(XT::Fd(d), 64));
    ok!(r.fchmod(d, 0o700));
    ok!(r.fchown(d, Some(1000), Some(1000)));
    ok!(r.fstat(d));
    ok!(r.close(d));
    // One never given an attribute (the plan that found it).
    ok!(r.mkdir("/c", 0o755));
    let c = r.open("/c", o::RDONLY | o::DIRECTORY, 0).unwrap();
    ok!(r.rmdir("/c"));
    ok!(r.listxattr(XT::Fd(c), 0));
    ok!(r.close(c));
});

case!(xattr_security_capability, |r| {
    ok!(r.mkfile("/f", b""));
    ok!(r.chmod("/f", 0o666));
    let f = XT::Path(b"/f");
    let caps = |magic: u32, root: Option<u32>| {
        let mut v = magic.to_le_bytes().to_vec();
        v.extend((0..16u8).collect::<Vec<_>>());
        if let Some(id) = root {
            v.extend(id.to_le_bytes());
        }
        v
    };
    ok!(r.setxattr(f, "security.capability", caps(0x0200_0001, None), 0));
    ok!(r.getxattr(f, "security.capability", 64));
    // A v3 value whose root is uid 0 reads back as v2; another root stays v3.
    ok!(r.setxattr(f, "security.capability", caps(0x0300_0001, Some(0)), 0));
    ok!(r.getxattr(f, "security.capability", 64));
    ok!(r.getxattr(f, "security.capability", 0));
    ok!(r.setxattr(f, "security.capability", caps(0x0300_0000, Some(5)), 0));
    ok!(r.getxattr(f, "security.capability", 64));
    // Not a v2 or v3 value: wrong size, unknown flags or revision, an invalid root.
    err!(EINVAL, r.setxattr(f, "security.capability", b"abc", 0));
    err!(
        EINVAL,
        r.setxattr(f, "security.capability", caps(0x0300_0003, Some(5)), 0)
    );
    err!(
        EINVAL,
        r.setxattr(f, "security.capability", caps(0x0100_0000, None), 0)
    );
    err!(
        EINVAL,
        r.setxattr(f, "security.capability", caps(0x0200_0000, Some(0)), 0)
    );
    err!(
        EINVAL,
        r.setxattr(
            f,
            "security.capability",
            caps(0x0300_0000, Some(u32::MAX)),
            0
        )
    );
    r.set_creds(&u1000());
    err!(EINVAL, r.setxattr(f, "security.capability", b"abc", 0));
    err!(
        EPERM,
        r.setxattr(f, "security.capability", caps(0x0200_0000, None), 0)
    );
    err!(EPERM, r.removexattr(f, "security.capability"));
    // An empty value has no header either (Linux 6.18; older kernels took it unchecked).
    err!(EINVAL, r.setxattr(f, "security.capability", b"", 0));
    r.set_creds(&Cred::root());
    err!(EINVAL, r.setxattr(f, "security.capability", b"", 0));
    ok!(r.getxattr(f, "security.capability", 64));
    ok!(r.listxattr(f, 64));
    ok!(r.removexattr(f, "security.capability"));
});

case!(
    xattr_security_capability_goes_with_a_change_of_contents_or_owner,
    |r| {
        ok!(r.mkfile("/f", b""));
        ok!(r.chmod("/f", 0o666));
        let f = XT::Path(b"/f");
        let caps = || {
            let mut v = 0x0200_0000u32.to_le_bytes().to_vec();
            v.extend([0u8; 16]);
            v
        };
        let h = r.open("/f", o::RDWR, 0).unwrap();
        ok!(r.setxattr(f, "user.keep", "1", 0));
        // A write of nothing, chmod and utimensat leave it.
        ok!(r.setxattr(f, "security.capability", caps(), 0));
        ok!(r.write(h, b""));
        ok!(r.chmod("/f", 0o666));
        ok!(r.utimens("/f", [T::Now, T::Now]));
        ok!(r.getxattr(f, "security.capability", 64));
        // A write takes it, and sets ctime.
        let t0 = r.times("/f");
        std::thread::sleep(std::time::Duration::from_millis(20));
        ok!(r.write(h, b"x"));
        r.times_rel("write", "/f", &t0);
        err!(ENODATA, r.getxattr(f, "security.capability", 64));
        // So do a truncate to the same size, fallocate and chown (to the same owner too).
        ok!(r.setxattr(f, "security.capability", caps(), 0));
        let t1 = r.times("/f");
        std::thread::sleep(std::time::Duration::from_millis(20));
        ok!(r.truncate("/f", 1));
        r.times_rel("same-size truncate", "/f", &t1);
        err!(ENODATA, r.getxattr(f, "security.capability", 64));
        ok!(r.setxattr(f, "security.capability", caps(), 0));
        ok!(r.fallocate(h, 0, 0, 100));
        err!(ENODATA, r.getxattr(f, "security.capability", 64));
        ok!(r.setxattr(f, "security.capability", caps(), 0));
        ok!(r.chown("/f", Some(0), Some(0)));
        err!(ENODATA, r.getxattr(f, "security.capability", 64));
        // By another user's write too.
        ok!(r.setxattr(f, "security.capability", caps(), 0));
        r.set_creds(&u1000());
        let u = r.open("/f", o::WRONLY, 0).unwrap();
        ok!(r.pwrite(u, b"y", 0));
        r.set_creds(&Cred::root());
        err!(ENODATA, r.getxattr(f, "security.capability", 64));
        // An empty value cannot be set, so a write finds nothing to take.
        err!(EINVAL, r.setxattr(f, "security.capability", b"", 0));
        ok!(r.write(h, b"z"));
        err!(ENODATA, r.getxattr(f, "security.capability", 64));
        ok!(r.listxattr(f, 128));
        ok!(r.close(h));
        ok!(r.close(u));
    }
);

// ---------------------------------------------------------------------------------------------
// File locks: flock(2) and fcntl(2)'s record locks. One test process: the second owner is a
// second open file description (flock, OFD locks), which is what can conflict within one
// process on Linux. Locks between processes and deadlock detection: tests/locks.rs.

use common::oracle::Lk;

const LOCK_SH: u32 = 1;
const LOCK_EX: u32 = 2;
const LOCK_NB: u32 = 4;
const LOCK_UN: u32 = 8;
const LOCK_MAND: u32 = 32;
const F_GETLK: i32 = 5;
const F_SETLK: i32 = 6;
const F_SETLKW: i32 = 7;
const F_OFD_GETLK: i32 = 36;
const F_OFD_SETLK: i32 = 37;
const F_OFD_SETLKW: i32 = 38;
const RD: i16 = 0;
const WR: i16 = 1;
const UN: i16 = 2;

fn lk(typ: i16, start: i64, len: i64) -> Lk {
    Lk::new(typ, start, len)
}

case!(flock_conflicts_conversions_and_release, |r| {
    base(r);
    let a = r.open("/f", o::RDWR, 0).unwrap();
    let b = r.open("/f", o::RDONLY, 0).unwrap();
    ok!(r.flock(a, LOCK_EX));
    err!(EAGAIN, r.flock(b, LOCK_SH | LOCK_NB));
    err!(EAGAIN, r.flock(b, LOCK_EX | LOCK_NB));
    ok!(r.flock(a, LOCK_EX));
    ok!(r.flock(a, LOCK_SH));
    ok!(r.flock(b, LOCK_SH | LOCK_NB));
    // A conversion that cannot be granted has already dropped the old lock.
    err!(EAGAIN, r.flock(a, LOCK_EX | LOCK_NB));
    ok!(r.flock(b, LOCK_EX | LOCK_NB));
    err!(EAGAIN, r.flock(a, LOCK_SH | LOCK_NB));
    // The last close of a description drops its lock.
    ok!(r.close(b));
    ok!(r.flock(a, LOCK_EX | LOCK_NB));
    ok!(r.flock(a, LOCK_UN));
    ok!(r.flock(a, LOCK_UN | LOCK_NB));
    // Bad operations, before the descriptor is looked at; LOCK_MAND is ignored.
    for op in [0, 3, LOCK_SH | LOCK_UN, LOCK_EX | LOCK_UN, LOCK_NB, 16, 64] {
        err!(EINVAL, r.flock(a, op));
    }
    ok!(r.flock(a, LOCK_MAND));
    ok!(r.flock(a, LOCK_MAND | LOCK_EX));
    ok!(r.close(a));
    // Any descriptor but O_PATH: write-only, a directory.
    let w = r.open("/f", o::WRONLY, 0).unwrap();
    ok!(r.flock(w, LOCK_EX | LOCK_NB));
    let d = r.open("/d", o::RDONLY | o::DIRECTORY, 0).unwrap();
    ok!(r.flock(d, LOCK_EX | LOCK_NB));
    let d2 = r.open("/d", o::RDONLY | o::DIRECTORY, 0).unwrap();
    err!(EAGAIN, r.flock(d2, LOCK_SH | LOCK_NB));
    let p = r.open("/f", o::PATH, 0).unwrap();
    err!(EBADF, r.flock(p, LOCK_SH));
    err!(EBADF, r.flock(p, LOCK_UN));
    // flock and record locks are separate: neither sees the other.
    ok!(r.lk(w, F_OFD_SETLK, lk(WR, 0, 0)));
    let v = r.open("/f", o::RDWR, 0).unwrap();
    ok!(r.flock(w, LOCK_UN));
    ok!(r.flock(v, LOCK_EX | LOCK_NB));
    err!(EAGAIN, r.lk(v, F_OFD_SETLK, lk(RD, 0, 1)));
    for h in [w, d, d2, p, v] {
        ok!(r.close(h));
    }
});

case!(fcntl_lock_arguments_in_linux_order, |r| {
    base(r);
    let a = r.open("/f", o::RDONLY, 0).unwrap();
    let w = r.open("/f", o::WRONLY, 0).unwrap();
    // The description's mode.
    err!(EBADF, r.lk(a, F_SETLK, lk(WR, 0, 1)));
    err!(EBADF, r.lk(w, F_SETLK, lk(RD, 0, 1)));
    err!(EBADF, r.lk(a, F_OFD_SETLKW, lk(WR, 0, 1)));
    ok!(r.lk(a, F_SETLK, lk(UN, 0, 1)));
    ok!(r.lk(w, F_OFD_SETLK, lk(UN, 0, 1)));
    // F_GETLK of F_UNLCK.
    err!(EINVAL, r.lk(a, F_GETLK, lk(UN, 0, 1)));
    // F_OFD_GETLK of F_UNLCK looks for the description's own locks (Linux 6.12).
    ok!(r.fcntl_lock(a, F_OFD_GETLK, lk(UN, 0, 1)));
    // Ranges: before byte 0 is EINVAL, past OFFSET_MAX is EOVERFLOW; both before the mode.
    err!(EINVAL, r.lk(a, F_SETLK, lk(RD, -1, 1)));
    err!(EINVAL, r.lk(a, F_SETLK, lk(WR, -1, 1)));
    err!(EINVAL, r.lk(a, F_GETLK, lk(RD, 0, -1)));
    err!(EINVAL, r.lk(a, F_SETLK, lk(RD, 2, -3)));
    err!(EOVERFLOW, r.lk(a, F_SETLK, lk(RD, i64::MAX, 2)));
    err!(EOVERFLOW, r.lk(a, F_SETLK, lk(WR, 2, i64::MAX)));
    err!(EOVERFLOW, r.lk(a, F_GETLK, lk(RD, 2, i64::MAX)));
    ok!(r.lk(a, F_SETLK, lk(RD, 1, i64::MAX)));
    ok!(r.lk(a, F_SETLK, lk(RD, i64::MAX, 1)));
    ok!(r.lk(a, F_SETLK, lk(RD, i64::MAX, 0)));
    ok!(r.lk(a, F_SETLK, lk(UN, 0, 0)));
    // From the end (the file is 5 bytes) and from the offset.
    let end = |start, len| Lk {
        whence: SEEK_END as i16,
        ..lk(RD, start, len)
    };
    err!(EINVAL, r.lk(a, F_SETLK, end(-6, 1)));
    err!(EOVERFLOW, r.lk(a, F_SETLK, end(i64::MAX, 1)));
    ok!(r.lk(a, F_SETLK, end(-5, 2)));
    ok!(r.lseek(a, 3, SEEK_SET));
    let cur = |start, len| Lk {
        whence: SEEK_CUR as i16,
        ..lk(RD, start, len)
    };
    err!(EINVAL, r.lk(a, F_SETLK, cur(-4, 1)));
    ok!(r.lk(a, F_SETLK, cur(0, -1)));
    ok!(r.fcntl_lock(w, F_OFD_GETLK, lk(WR, 0, 0)));
    ok!(r.fcntl_lock(w, F_OFD_GETLK, lk(WR, 2, 1)));
    // Only SEEK_SET, SEEK_CUR and SEEK_END.
    for whence in [SEEK_DATA, SEEK_HOLE] {
        let l = Lk {
            whence: whence as i16,
            ..lk(RD, 0, 1)
        };
        err!(EINVAL, r.lk(a, F_SETLK, l));
        err!(EINVAL, r.lk(a, F_GETLK, l));
    }
    // The OFD commands want l_pid 0, checked after the range and the mode.
    let pid5 = Lk {
        pid: 5,
        ..lk(RD, 0, 1)
    };
    err!(EINVAL, r.lk(a, F_OFD_SETLK, pid5));
    err!(EINVAL, r.lk(a, F_OFD_GETLK, pid5));
    err!(EBADF, r.lk(w, F_OFD_SETLK, pid5));
    err!(EINVAL, r.lk(a, F_OFD_SETLK, Lk { start: -1, ..pid5 }));
    ok!(r.lk(a, F_SETLK, pid5));
    ok!(r.lk(a, F_GETLK, pid5));
    // O_PATH descriptors take no lock command; a directory takes read locks.
    let p = r.open("/f", o::PATH, 0).unwrap();
    err!(EBADF, r.lk(p, F_GETLK, lk(RD, 0, 1)));
    err!(EBADF, r.lk(p, F_SETLK, lk(UN, 0, 1)));
    err!(EBADF, r.lk(p, F_OFD_SETLK, lk(RD, 0, 1)));
    let d = r.open("/d", o::RDONLY | o::DIRECTORY, 0).unwrap();
    ok!(r.lk(d, F_SETLK, lk(RD, 0, 0)));
    err!(EBADF, r.lk(d, F_SETLK, lk(WR, 0, 0)));
    ok!(r.fcntl_lock(d, F_GETLK, lk(WR, 0, 0)));
    for h in [a, w, p, d] {
        ok!(r.close(h));
    }
});

case!(
    fcntl_process_and_ofd_locks_merge_split_conflict_and_go,
    |r| {
        base(r);
        let a = r.open("/f", o::RDWR, 0).unwrap();
        let b = r.open("/f", o::RDWR, 0).unwrap();
        let c = r.open("/f", o::RDWR, 0).unwrap();
        // Two descriptors of one process: one owner; its locks merge.
        ok!(r.lk(a, F_SETLK, lk(WR, 0, 10)));
        ok!(r.lk(b, F_SETLKW, lk(WR, 5, 10)));
        ok!(r.fcntl_lock(c, F_OFD_GETLK, lk(WR, 0, 0)));
        ok!(r.fcntl_lock(a, F_GETLK, lk(WR, 0, 0)));
        // An unlock splits, a read lock inside a write lock splits it in three.
        ok!(r.lk(a, F_SETLK, lk(UN, 3, 2)));
        ok!(r.fcntl_lock(c, F_OFD_GETLK, lk(WR, 0, 1)));
        ok!(r.fcntl_lock(c, F_OFD_GETLK, lk(WR, 3, 2)));
        ok!(r.fcntl_lock(c, F_OFD_GETLK, lk(WR, 10, 1)));
        ok!(r.lk(a, F_SETLK, lk(RD, 6, 2)));
        ok!(r.fcntl_lock(c, F_OFD_GETLK, lk(RD, 6, 2)));
        ok!(r.fcntl_lock(c, F_OFD_GETLK, lk(WR, 6, 1)));
        ok!(r.fcntl_lock(c, F_OFD_GETLK, lk(WR, 5, 1)));
        ok!(r.fcntl_lock(c, F_OFD_GETLK, lk(RD, 8, 1)));
        // The description's locks against the process's: readers share, a writer conflicts.
        ok!(r.lk(c, F_OFD_SETLK, lk(RD, 6, 2)));
        err!(EAGAIN, r.lk(c, F_OFD_SETLK, lk(WR, 0, 1)));
        err!(EAGAIN, r.lk(a, F_SETLK, lk(WR, 7, 1)));
        ok!(r.fcntl_lock(a, F_GETLK, lk(WR, 7, 1)));
        // Any close of the process drops all its record locks; the description's stay.
        ok!(r.close(b));
        let d = r.open("/f", o::RDWR, 0).unwrap();
        ok!(r.fcntl_lock(d, F_OFD_GETLK, lk(WR, 0, 0)));
        ok!(r.fcntl_lock(c, F_OFD_GETLK, lk(WR, 0, 0)));
        ok!(r.lk(a, F_SETLK, lk(RD, 0, 0)));
        // ... and the description's go with its last close.
        ok!(r.close(c));
        ok!(r.fcntl_lock(d, F_OFD_GETLK, lk(WR, 0, 0)));
        ok!(r.lk(d, F_OFD_SETLK, lk(RD, 0, 0)));
        err!(EAGAIN, r.lk(a, F_SETLK, lk(WR, 100, 1)));
        ok!(r.lk(a, F_SETLK, lk(UN, 0, 0)));
        // A description's locks merge and split as a process's do.
        ok!(r.lk(d, F_OFD_SETLK, lk(WR, 10, 5)));
        ok!(r.lk(d, F_OFD_SETLK, lk(UN, 0, 10)));
        ok!(r.lk(d, F_OFD_SETLK, lk(WR, 15, 5)));
        ok!(r.fcntl_lock(d, F_OFD_GETLK, lk(UN, 0, 0)));
        ok!(r.fcntl_lock(d, F_OFD_GETLK, lk(UN, 25, 1)));
        ok!(r.fcntl_lock(d, F_OFD_GETLK, lk(UN, 0, 10)));
        ok!(r.fcntl_lock(a, F_GETLK, lk(WR, 0, 12)));
        ok!(r.fcntl_lock(a, F_GETLK, lk(RD, 10, 1)));
        ok!(r.fcntl_lock(a, F_GETLK, lk(RD, 20, 1)));
        ok!(r.lk(d, F_OFD_SETLK, lk(UN, 0, 0)));
        ok!(r.lk(a, F_SETLK, lk(WR, 0, 0)));
        ok!(r.fcntl_lock(d, F_OFD_GETLK, lk(RD, 4, 0)));
        ok!(r.close(a));
        ok!(r.lk(d, F_OFD_SETLKW, lk(WR, 0, 0)));
        ok!(r.close(d));
    }
);
