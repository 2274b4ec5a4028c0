//! The control: what this machine gives a second thread that shares nothing.
//!
//! Every scale figure in the table (a rate at N threads over the rate at 1) mixes what the
//! system under test shares between threads with what the machine does when a second CPU
//! gets busy. On a virtual machine the second can dominate: a host that is running other
//! guests may give the second vCPU little or no time, and a run of a loop that shares
//! nothing then "scales" 0.6x one moment and 2.0x the next. The control row separates the
//! two. It is measured in the same rounds as each case, interleaved with the systems (see
//! `measure`), so its scale is what the machine gave a second thread at the moments the
//! case's own figures were taken. A system's scale can be read against it: a system that
//! shares nothing between its threads can get at most about the control's scale.
//!
//! The probe is a loop with the shape of an in-process file-system call and no shared
//! state: each thread builds its own table of 254 names, each mapped to 64 bytes, and per
//! operation looks a name up, copies its bytes into a fresh 64-byte allocation, and frees
//! it. The allocation goes through the process's allocator, as the systems' do; the table is
//! the thread's own, so no cache line is written by one thread and read by the other.

use std::collections::HashMap;

use super::workloads::{Case, Worker};
use super::Error;

/// Names in a thread's table (W7's file count).
const NAMES: usize = 254;

/// The control's case for a workload's variant `variant` (its row sits under that variant).
pub fn case(variant: &str) -> Case {
    Case::new(variant, |_thread| Ok(worker()))
}

/// One thread's probe loop, over a table of its own.
fn worker() -> Worker {
    let table: HashMap<String, [u8; 64]> = (0..NAMES)
        .map(|i| (format!("/control/f{i:03}"), [i as u8; 64]))
        .collect();
    let names: Vec<String> = table.keys().cloned().collect();
    let mut next = 0usize;
    let mut sum = 0u64;
    Box::new(move |batch: u64| {
        for _ in 0..batch {
            let name = &names[next % NAMES];
            let data = table
                .get(name)
                .ok_or_else(|| Error::from(format!("control: {name} is missing from its table")))?;
            let copy = std::hint::black_box(Box::new(*data));
            sum = sum.wrapping_add(u64::from(copy[next % 64]));
            next += 1;
        }
        std::hint::black_box(sum);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::workloads::Kind;

    #[test]
    fn the_probe_runs_and_builds_a_table_per_thread() {
        let c = case("shared");
        assert_eq!(c.figure_variants(), vec!["shared".to_owned()]);
        let Kind::Loop(make) = &c.kind else {
            panic!("the control is a timed loop");
        };
        let (mut a, mut b) = (make(0).unwrap(), make(1).unwrap());
        a(1000).unwrap();
        b(3).unwrap();
        a(NAMES as u64 * 2).unwrap();
    }
}
