//! Record locks between processes, and deadlock detection, on the kernel and on the engine.
//!
//! The semantic cases (`semantics.rs`) run in one process, where only open file
//! descriptions can conflict. Here two processes do: on the kernel, this test process and
//! a child (this same binary, re-run as a line-oriented lock server on `/dev/shm`); on the
//! engine, two `Process`es of one `Vfs`, the second on its own thread. The same script
//! runs on both and the transcripts must agree, `EDEADLK` included.
//!
//! Then stress: threads of several engine processes take `flock`, process and OFD locks
//! with waiting, check that no two holders of conflicting locks are ever inside at once,
//! and close descriptors while others wait, so that a lost wake-up hangs the test.

use std::io::{BufRead, BufReader, Write};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use scalevfs::{Creds, Errno, Fd, Flock, FlockOp, LockCmd, LockType, OFlags, Process, Vfs};

const CHILD_ENV: &str = "SCALEVFS_LOCK_CHILD";

/// One side's lock calls on one file, by text command; answers are text too, with a
/// holder's pid given as `self` or `other`.
trait Side: Send {
    fn run(&mut self, cmd: &str) -> String;
}

fn parse(cmd: &str) -> (String, i64, i64, i64) {
    let w: Vec<&str> = cmd.split_whitespace().collect();
    let n = |i: usize| w.get(i).map_or(0, |s| s.parse().unwrap());
    (w[0].to_string(), n(1), n(2), n(3))
}

/// The kernel's side: `libc` on a file under `/dev/shm`.
struct Kernel {
    path: std::ffi::CString,
    fd: i32,
}

impl Kernel {
    fn errno() -> String {
        format!(
            "err {}",
            std::io::Error::last_os_error().raw_os_error().unwrap()
        )
    }
}

impl Side for Kernel {
    fn run(&mut self, cmd: &str) -> String {
        let (op, t, start, len) = parse(cmd);
        match op.as_str() {
            "open" => {
                // SAFETY: a NUL-terminated path.
                self.fd =
                    unsafe { libc::open(self.path.as_ptr(), libc::O_RDWR | libc::O_CREAT, 0o644) };
                if self.fd < 0 {
                    Self::errno()
                } else {
                    "ok".into()
                }
            }
            "close" => {
                // SAFETY: our descriptor.
                if unsafe { libc::close(self.fd) } < 0 {
                    Self::errno()
                } else {
                    "ok".into()
                }
            }
            _ => {
                let cmd = match op.as_str() {
                    "getlk" => libc::F_GETLK,
                    "setlk" => libc::F_SETLK,
                    "setlkw" => libc::F_SETLKW,
                    o => panic!("{o}"),
                };
                // SAFETY: zeroes are a valid `struct flock`.
                let mut fl: libc::flock = unsafe { std::mem::zeroed() };
                fl.l_type = t as i16;
                fl.l_start = start;
                fl.l_len = len;
                // SAFETY: `fl` outlives the call.
                if unsafe { libc::fcntl(self.fd, cmd, &mut fl as *mut libc::flock) } < 0 {
                    return Self::errno();
                }
                let who = if fl.l_pid == std::process::id() as i32 {
                    "self"
                } else {
                    "other"
                };
                if cmd == libc::F_GETLK {
                    format!("lk {} {}+{} {who}", fl.l_type, fl.l_start, fl.l_len)
                } else {
                    "ok".into()
                }
            }
        }
    }
}

/// The engine's side: one `Process`.
struct Engine {
    p: Process,
    fd: Fd,
}

impl Side for Engine {
    fn run(&mut self, cmd: &str) -> String {
        let err = |e: Errno| format!("err {}", e.raw());
        let (op, t, start, len) = parse(cmd);
        match op.as_str() {
            "open" => match self
                .p
                .open("/lockfile", OFlags::RDWR | OFlags::CREAT, 0o644)
            {
                Ok(fd) => {
                    self.fd = fd;
                    "ok".into()
                }
                Err(e) => err(e),
            },
            "close" => self.p.close(self.fd).map_or_else(err, |_| "ok".into()),
            _ => {
                let cmd = match op.as_str() {
                    "getlk" => LockCmd::GetLk,
                    "setlk" => LockCmd::SetLk,
                    "setlkw" => LockCmd::SetLkW,
                    o => panic!("{o}"),
                };
                let typ = [LockType::Read, LockType::Write, LockType::Unlock][t as usize];
                let mut fl = Flock::new(typ, start, len);
                if let Err(e) = self.p.fcntl_lock(self.fd, cmd, &mut fl) {
                    return err(e);
                }
                let who = if fl.pid as u64 == self.p.lock_owner_id() {
                    "self"
                } else {
                    "other"
                };
                if cmd == LockCmd::GetLk {
                    let t = [LockType::Read, LockType::Write, LockType::Unlock]
                        .iter()
                        .position(|&x| x == fl.typ)
                        .unwrap();
                    format!("lk {t} {}+{} {who}", fl.start, fl.len)
                } else {
                    "ok".into()
                }
            }
        }
    }
}

/// The other process: commands in, answers out, each command run in order.
struct Peer {
    send: Box<dyn FnMut(&str) + Send>,
    recv: Box<dyn FnMut() -> String + Send>,
}

impl Peer {
    fn call(&mut self, cmd: &str) -> String {
        (self.send)(cmd);
        (self.recv)()
    }
}

/// The child's entry point: when this binary is run with `CHILD_ENV` set, this test serves
/// lock commands on the file named there, one per line of stdin, until stdin closes.
/// Without it, it returns at once (it is the child's half of the tests below).
#[test]
fn lock_server_child() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut k = Kernel {
        path: std::ffi::CString::new(path).unwrap(),
        fd: -1,
    };
    // Answers go to stderr: libtest's own lines go to stdout, which the parent discards.
    let out = std::io::stderr();
    for line in std::io::stdin().lock().lines() {
        let a = k.run(&line.unwrap());
        let mut o = out.lock();
        writeln!(o, "@@ {a}").unwrap();
        o.flush().unwrap();
    }
}

fn kernel_pair(dir: &std::path::Path) -> (Box<dyn Side>, Peer, std::process::Child) {
    let path = dir.join("lockfile");
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "lock_server_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &path)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let me = Kernel {
        path: std::ffi::CString::new(path.to_str().unwrap()).unwrap(),
        fd: -1,
    };
    let peer = Peer {
        send: Box::new(move |c| {
            writeln!(stdin, "{c}").unwrap();
            stdin.flush().unwrap();
        }),
        recv: Box::new(move || loop {
            let l = lines.next().expect("the child answers").unwrap();
            if let Some(a) = l.strip_prefix("@@ ") {
                return a.to_string();
            }
        }),
    };
    (Box::new(me), peer, child)
}

fn engine_pair() -> (Box<dyn Side>, Peer) {
    let vfs = Vfs::new_memfs();
    let me = Engine {
        p: vfs.process(Creds::root()),
        fd: Fd(-1),
    };
    let q = vfs.process(Creds::root());
    let (ctx, crx) = mpsc::channel::<String>();
    let (atx, arx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        let mut e = Engine { p: q, fd: Fd(-1) };
        for c in crx {
            if atx.send(e.run(&c)).is_err() {
                break;
            }
        }
    });
    let peer = Peer {
        send: Box::new(move |c| ctx.send(c.to_string()).unwrap()),
        recv: Box::new(move || arx.recv().unwrap()),
    };
    (Box::new(me), peer)
}

/// P holds byte 0, Q byte 1. Q waits for byte 0; P asking to wait for byte 1 would close
/// the cycle: `EDEADLK`. P's close lets Q in. Types: 0 read, 1 write, 2 unlock.
fn deadlock_script(me: &mut dyn Side, q: &mut Peer) -> Vec<String> {
    let mut t = Vec::new();
    let mine = |me: &mut dyn Side, c: &str, t: &mut Vec<String>| {
        let a = me.run(c);
        t.push(format!("P {c} -> {a}"));
    };
    let theirs = |q: &mut Peer, c: &str, t: &mut Vec<String>| {
        let a = q.call(c);
        t.push(format!("Q {c} -> {a}"));
    };
    mine(me, "open", &mut t);
    theirs(q, "open", &mut t);
    mine(me, "setlk 1 0 1", &mut t);
    theirs(q, "setlk 1 1 1", &mut t);
    theirs(q, "getlk 1 0 2", &mut t);
    mine(me, "getlk 0 1 0", &mut t);
    theirs(q, "setlk 0 0 1", &mut t);
    // Readers share across processes; a writer waits.
    mine(me, "setlk 0 5 5", &mut t);
    theirs(q, "setlk 0 7 5", &mut t);
    theirs(q, "setlk 1 7 1", &mut t);
    // Q waits for byte 0 (its answer comes later).
    (q.send)("setlkw 1 0 1");
    std::thread::sleep(Duration::from_millis(300));
    mine(me, "setlkw 1 1 1", &mut t);
    mine(me, "setlk 1 1 1", &mut t);
    // A wait that closes no cycle is not refused: byte 100 is free.
    mine(me, "setlkw 1 100 1", &mut t);
    mine(me, "close", &mut t);
    t.push(format!("Q setlkw 1 0 1 -> {}", (q.recv)()));
    mine(me, "open", &mut t);
    mine(me, "getlk 1 0 0", &mut t);
    mine(me, "getlk 1 2 3", &mut t);
    theirs(q, "close", &mut t);
    mine(me, "getlk 1 0 0", &mut t);
    mine(me, "close", &mut t);
    t
}

/// Runs the script on its own thread: a detector that misses the cycle leaves P waiting
/// forever, which must fail the test rather than hang it.
fn watched(mut me: Box<dyn Side>, mut q: Peer) -> Vec<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let t = deadlock_script(&mut *me, &mut q);
        drop(q);
        let _ = tx.send(t);
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the script hung: a deadlock went undetected, or a wake-up was lost")
}

#[test]
fn record_locks_between_processes_and_deadlock_detection() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let (e, eq) = engine_pair();
    let engine = watched(e, eq);
    let expected_deadlock = format!("P setlkw 1 1 1 -> err {}", Errno::EDEADLK.raw());
    assert!(engine.contains(&expected_deadlock), "{engine:#?}");
    // The kernel, when we may make files in /dev/shm.
    let dir =
        std::path::Path::new("/dev/shm").join(format!("scalevfs-locks-{}", std::process::id()));
    if std::fs::create_dir_all(&dir).is_err() {
        eprintln!("no /dev/shm: the kernel side is skipped");
        return;
    }
    let (k, kq, mut child) = kernel_pair(&dir);
    let kernel = watched(k, kq);
    child.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(kernel, engine, "kernel (left) and engine (right) differ");
}

/// Threads of three processes, each with two descriptors of one file, take write locks
/// of each kind with waiting, and check mutual exclusion by a counter of holders inside;
/// some close a descriptor and open it again while others wait.
#[test]
fn stress_locks_exclude_and_never_lose_a_wakeup() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let vfs = Vfs::new_memfs();
    let procs: Vec<Arc<Process>> = (0..3)
        .map(|_| Arc::new(vfs.process(Creds::root())))
        .collect();
    let fd = procs[0]
        .open("/f", OFlags::RDWR | OFlags::CREAT, 0o644)
        .unwrap();
    procs[0].close(fd).unwrap();
    let rounds = if cfg!(miri) { 20 } else { 2_000 };
    // Per kind: holders inside the critical section (flock, process locks, OFD locks).
    let inside: Arc<[AtomicUsize; 3]> = Arc::new(Default::default());
    let broken = Arc::new(AtomicBool::new(false));
    let mut hs = Vec::new();
    for (i, p) in procs.iter().enumerate() {
        for t in 0..2 {
            let p = p.clone();
            let inside = inside.clone();
            let broken = broken.clone();
            hs.push(std::thread::spawn(move || {
                let mut x = 0x9e37_79b9_7f4a_7c15_u64 ^ ((i * 2 + t) as u64);
                let mut fd = p.open("/f", OFlags::RDWR, 0).unwrap();
                for _ in 0..rounds {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let kind = (x % 3) as usize;
                    // Process locks exclude only across processes: one thread per process
                    // takes them.
                    let kind = if kind == 1 && t == 1 { 2 } else { kind };
                    match kind {
                        0 => p.flock(fd, FlockOp::EX).unwrap(),
                        1 => p
                            .fcntl_lock(fd, LockCmd::SetLkW, &mut Flock::new(LockType::Write, 0, 0))
                            .unwrap(),
                        _ => p
                            .fcntl_lock(
                                fd,
                                LockCmd::OfdSetLkW,
                                &mut Flock::new(LockType::Write, 0, 0),
                            )
                            .unwrap(),
                    }
                    if inside[kind].fetch_add(1, SeqCst) != 0 {
                        broken.store(true, SeqCst);
                    }
                    std::thread::yield_now();
                    inside[kind].fetch_sub(1, SeqCst);
                    match (kind, x >> 60) {
                        // Sometimes the close drops the lock (and wakes the waiters). Only
                        // the first thread of a process closes: a close drops every record
                        // lock of its process, the other thread's too.
                        (_, 0) if t == 0 => {
                            p.close(fd).unwrap();
                            fd = p.open("/f", OFlags::RDWR, 0).unwrap();
                        }
                        (0, _) => p.flock(fd, FlockOp::UN).unwrap(),
                        (1, _) => p
                            .fcntl_lock(fd, LockCmd::SetLk, &mut Flock::new(LockType::Unlock, 0, 0))
                            .unwrap(),
                        _ => p
                            .fcntl_lock(
                                fd,
                                LockCmd::OfdSetLk,
                                &mut Flock::new(LockType::Unlock, 0, 0),
                            )
                            .unwrap(),
                    }
                }
                // Closed once every thread is done: a close drops its process's record
                // locks, the other thread's too.
                (p, fd)
            }));
        }
    }
    let open: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    for (p, fd) in open {
        p.close(fd).unwrap();
    }
    assert!(
        !broken.load(SeqCst),
        "two holders of one exclusive lock at once"
    );
    // Everything was dropped: a fresh description gets every kind at once.
    let p = &procs[0];
    let fd = p.open("/f", OFlags::RDWR, 0).unwrap();
    p.flock(fd, FlockOp::EX | FlockOp::NB).unwrap();
    p.fcntl_lock(
        fd,
        LockCmd::OfdSetLk,
        &mut Flock::new(LockType::Write, 0, 0),
    )
    .unwrap();
    p.close(fd).unwrap();
}

/// `limits::LOCKS_PER_FILE` through the public call: the request past it, and an unlock
/// that would split a record past it, fail with `ENOLCK` and change nothing.
#[test]
fn record_locks_per_file_are_bounded() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let p = Vfs::new_memfs().process(Creds::root());
    let fd = p.open("/f", OFlags::RDWR | OFlags::CREAT, 0o644).unwrap();
    let n = scalevfs::limits::LOCKS_PER_FILE as i64;
    let set = |typ, start, len| p.fcntl_lock(fd, LockCmd::SetLk, &mut Flock::new(typ, start, len));
    for i in 0..n {
        set(LockType::Write, 2 * i, 1).unwrap();
    }
    assert_eq!(set(LockType::Write, 2 * n, 1), Err(Errno::ENOLCK));
    assert_eq!(
        set(LockType::Unlock, 1, 1),
        Ok(()),
        "nothing there: no new record"
    );
    // Merging two records into one needs none.
    set(LockType::Write, 1, 1).unwrap();
    set(LockType::Write, 2 * n, 1).unwrap();
    assert_eq!(set(LockType::Unlock, 1, 1), Err(Errno::ENOLCK), "a split");
    set(LockType::Unlock, 0, 0).unwrap();
    set(LockType::Write, 0, 0).unwrap();
    p.close(fd).unwrap();
}
