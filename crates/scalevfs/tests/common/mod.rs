//! Differential testing with the host kernel's tmpfs as the oracle.
//!
//! A case is a function of a [`Rec`]. [`run`] plays it on the kernel (see `kernel.rs`: the test
//! process is chrooted into a fresh tmpfs directory, so absolute paths mean the same on both
//! sides), then on a fresh engine, appends a snapshot of the whole tree to each trace and compares
//! the traces line by line. A case's own expectations ([`Rec::expect`]) are checked against the
//! kernel only: when the kernel disagrees, the case is wrong.
//!
//! A test binary that uses this module chroots itself on first use: it must not need the host's
//! file system afterwards.
//!
//! Environment, for triage:
//! - `ORACLE_TRACE=1` prints every kernel trace (run with `--nocapture`);
//! - `ORACLE_FULL=1` lists every differing line of a failing case, not only the first;
//! - `ORACLE_IGNORE=dirsize,blocks` leaves those stat fields out, to see past a known
//!   difference. CI sets none of them.

#![allow(dead_code)]

pub mod engine;
pub mod kernel;
pub mod oracle;

pub use oracle::*;

use std::panic::{catch_unwind, AssertUnwindSafe};

/// What [`run`] found.
pub enum Outcome {
    /// Not root: the kernel side cannot run.
    Skipped,
    Same,
    /// The first difference, as a report.
    Differs(String),
}

fn panic_msg(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "<non-string panic>".into()
    }
}

/// Plays `case` on `sys`, then snapshots the tree. A panic on the engine side becomes the last
/// trace line; on the kernel side it propagates (a wrong case).
fn play(sys: &mut dyn Sys, case: &dyn Fn(&mut Rec)) -> Vec<String> {
    let oracle = sys.is_oracle();
    let mut r = Rec::new(sys);
    if oracle {
        case(&mut r);
        r.snapshot();
        return r.trace;
    }
    let res = catch_unwind(AssertUnwindSafe(|| {
        case(&mut r);
        r.snapshot();
    }));
    if let Err(p) = res {
        r.log(format!("PANIC: {}", panic_msg(&*p)));
    }
    r.trace
}

/// Runs `case` on the kernel and on the engine and compares.
pub fn run(name: &str, case: &dyn Fn(&mut Rec)) -> Outcome {
    let Some(mut k) = kernel::Kernel::session() else {
        return Outcome::Skipped;
    };
    let kt = play(&mut k, case);
    drop(k);
    let mut e = engine::new_sys();
    let et = play(&mut *e, case);
    if std::env::var_os("ORACLE_TRACE").is_some() {
        eprintln!("=== {name} (kernel)\n{}\n", kt.join("\n"));
    }
    if let Some(d) = diff("kernel", &kt, e.name(), &et) {
        return Outcome::Differs(format!("case {name}: {d}"));
    }
    // A system that stores on the host (hostfs) must have left there what the kernel
    // made: its answers alone could come from its cache.
    if let Some(host) = e.host_tree() {
        let tree: Vec<String> = kt
            .iter()
            .filter(|l| l.starts_with("tree "))
            .cloned()
            .collect();
        if let Some(d) = diff("kernel", &tree, "host after hostfs", &host) {
            return Outcome::Differs(format!("case {name}: the host's tree: {d}"));
        }
    }
    Outcome::Same
}

/// Runs `case` on both systems and panics with a report when they differ.
pub fn check(name: &str, case: impl Fn(&mut Rec)) {
    match run(name, &case) {
        Outcome::Skipped | Outcome::Same => {}
        Outcome::Differs(report) => panic!("{report}"),
    }
}
