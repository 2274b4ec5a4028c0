//! Running requests as their callers.
//!
//! Every FUSE request carries the caller's fsuid and fsgid (and its thread id, through which
//! the supplementary groups are read from `/proc/<tid>/status`). The engine checks
//! permissions against a [`Process`](scalevfs::Process)'s credentials, and a process owns
//! its descriptor table, so all requests share one `Process` (the node descriptors and open
//! file handles live in its table) and take turns at its credentials.
//!
//! # The gate
//! [`CredGate`] lets any number of requests of the *same* caller identity run at once; a
//! request of another identity waits until those in flight finish, then switches the
//! process's credentials and goes in. So a mount used by one user (the common case: root,
//! or the one user who mounted it) is served fully in parallel, and mixed users take turns.
//! While a request of another identity waits, newcomers of the current identity wait too,
//! so no identity starves. Requests that do not consult credentials (getattr, readlink,
//! read, lseek, readdir, fsync, release, releasedir, statfs, forget) do not pass the
//! gate.
//!
//! An engine change would remove the turn-taking: several `Process` values sharing one
//! descriptor table (Linux `CLONE_FILES`), one per identity, or `*_as(creds, ...)` calls.
//!
//! # Lock order
//! ```text
//! CredGate::state
//!   Process::ctx_lock (inside Process::set_creds)
//! ```

use std::collections::HashMap;

use parking_lot::{Condvar, Mutex};
use scalevfs::Creds;

/// A caller identity: what the engine needs for permission checks.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Who {
    /// fsuid.
    pub uid: u32,
    /// fsgid.
    pub gid: u32,
    /// Supplementary groups, sorted.
    pub groups: Vec<u32>,
}

impl Who {
    /// The superuser, with no supplementary groups.
    pub fn root() -> Who {
        Who {
            uid: 0,
            gid: 0,
            groups: Vec::new(),
        }
    }

    /// The caller of a request: `uid`/`gid` from the request header, the groups of thread
    /// `pid` (none for root, who passes group checks anyway, or when they cannot be read).
    pub fn of_request(uid: u32, gid: u32, pid: u32) -> Who {
        let groups = if uid == 0 || pid == 0 {
            Vec::new()
        } else {
            std::fs::read_to_string(format!("/proc/{pid}/status"))
                .map(|s| parse_groups(&s))
                .unwrap_or_default()
        };
        Who { uid, gid, groups }
    }

    /// Engine credentials (real ids equal to the effective ones: for `access(2)` the kernel
    /// already sends the real ids).
    pub fn creds(&self) -> Creds {
        Creds::user(self.uid, self.gid, self.groups.clone())
    }
}

/// The supplementary groups on the `Groups:` line of a `/proc/<pid>/status` text, sorted.
pub fn parse_groups(status: &str) -> Vec<u32> {
    let mut g: Vec<u32> = status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|rest| {
            rest.split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    g.sort_unstable();
    g.dedup();
    g
}

#[derive(Debug, Default)]
struct GateState {
    /// The identity the process's credentials are set to.
    current: Option<Who>,
    /// Requests inside the gate (all of them of `current`).
    active: usize,
    /// Waiting requests, by identity.
    waiting: HashMap<Who, usize>,
}

impl GateState {
    fn others_waiting(&self) -> bool {
        self.waiting
            .iter()
            .any(|(w, &n)| n > 0 && Some(w) != self.current.as_ref())
    }
}

/// Admits requests of one identity at a time; see the module docs.
#[derive(Debug, Default)]
pub struct CredGate {
    state: Mutex<GateState>,
    cv: Condvar,
}

/// A request inside the gate; leaving drops it.
#[derive(Debug)]
pub struct Inside<'a> {
    gate: &'a CredGate,
}

impl CredGate {
    /// Enters as `who`. `switch` is called (with the gate locked, nobody inside) when the
    /// identity changes; it sets the engine credentials.
    pub fn enter(&self, who: &Who, switch: impl FnOnce(&Who)) -> Inside<'_> {
        let mut st = self.state.lock();
        let mut queued = false;
        loop {
            let same = st.current.as_ref() == Some(who);
            if (same && !st.others_waiting()) || st.active == 0 {
                if queued {
                    if let Some(n) = st.waiting.get_mut(who) {
                        *n -= 1;
                        if *n == 0 {
                            st.waiting.remove(who);
                        }
                    }
                }
                if !same {
                    switch(who);
                    st.current = Some(who.clone());
                }
                st.active += 1;
                return Inside { gate: self };
            }
            if !queued {
                *st.waiting.entry(who.clone()).or_default() += 1;
                queued = true;
            }
            self.cv.wait(&mut st);
        }
    }
}

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        let mut st = self.gate.state.lock();
        st.active -= 1;
        if st.active == 0 && !st.waiting.is_empty() {
            self.gate.cv.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::sync::Arc;
    use std::time::Duration;

    fn user(uid: u32) -> Who {
        Who {
            uid,
            gid: uid,
            groups: vec![],
        }
    }

    #[test]
    fn groups_line() {
        let s = "Name:\tx\nUid:\t1\t1\t1\t1\nGroups:\t27 4 100 4 \nNgid:\t0\n";
        assert_eq!(parse_groups(s), vec![4, 27, 100]);
        assert_eq!(parse_groups("Groups:\t\n"), Vec::<u32>::new());
        assert_eq!(parse_groups("Name:\tx\n"), Vec::<u32>::new());
    }

    #[test]
    fn own_groups_are_read() {
        // This thread's groups as /proc shows them; root reads none.
        let tid = std::process::id();
        let w = Who::of_request(1, 1, tid);
        let want = parse_groups(&std::fs::read_to_string("/proc/self/status").unwrap());
        assert_eq!(w.groups, want);
        assert!(Who::of_request(0, 0, tid).groups.is_empty());
        assert_eq!(w.creds().uid, 1);
    }

    #[test]
    fn same_identity_runs_concurrently_and_switches_once() {
        let gate = CredGate::default();
        let switches = AtomicUsize::new(0);
        let a = gate.enter(&user(1), |_| {
            switches.fetch_add(1, SeqCst);
        });
        let b = gate.enter(&user(1), |_| {
            switches.fetch_add(1, SeqCst);
        });
        assert_eq!(switches.load(SeqCst), 1);
        drop((a, b));
        let _c = gate.enter(&user(2), |_| {
            switches.fetch_add(1, SeqCst);
        });
        assert_eq!(switches.load(SeqCst), 2);
    }

    #[test]
    fn other_identity_waits_for_those_inside_and_is_not_starved() {
        let gate = Arc::new(CredGate::default());
        let current = Arc::new(Mutex::new(0u32));
        let inside_a = gate.enter(&user(1), |w| *current.lock() = w.uid);
        let g2 = gate.clone();
        let c2 = current.clone();
        let t = std::thread::spawn(move || {
            let _i = g2.enter(&user(2), |w| *c2.lock() = w.uid);
            // Nobody of identity 1 is inside while we are.
            assert_eq!(*c2.lock(), 2);
        });
        // Wait until the other identity is queued; then a newcomer of identity 1 must wait.
        while gate.state.lock().waiting.is_empty() {
            std::thread::sleep(Duration::from_millis(1));
        }
        let g3 = gate.clone();
        let c3 = current.clone();
        let late = std::thread::spawn(move || {
            let _i = g3.enter(&user(1), |w| *c3.lock() = w.uid);
            assert_eq!(*c3.lock(), 1);
        });
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(*current.lock(), 1);
        assert_eq!(gate.state.lock().active, 1, "the newcomer did not get in");
        drop(inside_a);
        t.join().unwrap();
        late.join().unwrap();
        let st = gate.state.lock();
        assert_eq!(st.active, 0);
        assert!(st.waiting.is_empty());
    }

    #[test]
    fn many_threads_never_mix_identities() {
        let gate = Arc::new(CredGate::default());
        let current = Arc::new(Mutex::new(u32::MAX));
        let inside: Arc<Mutex<HashMap<u32, usize>>> = Arc::default();
        let threads: Vec<_> = (0..6)
            .map(|i| {
                let (gate, current, inside) = (gate.clone(), current.clone(), inside.clone());
                std::thread::spawn(move || {
                    for j in 0..300 {
                        let who = user((i + j) % 3);
                        let _g = gate.enter(&who, |w| *current.lock() = w.uid);
                        assert_eq!(*current.lock(), who.uid);
                        {
                            let mut m = inside.lock();
                            *m.entry(who.uid).or_default() += 1;
                            assert_eq!(m.values().filter(|&&n| n > 0).count(), 1);
                        }
                        std::thread::yield_now();
                        *inside.lock().get_mut(&who.uid).unwrap() -= 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }
}
