//! Figures: the statistics of a set of runs, the table and the JSON records.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use serde::Serialize;

use super::target::System;
use super::workloads::Workload;
use super::Error;

/// Median, minimum and maximum of a set of runs, in total operations per second.
#[derive(Clone, Copy, Debug)]
pub struct Summary {
    /// The median (the mean of the middle two for an even count).
    pub median: f64,
    /// The slowest run.
    pub min: f64,
    /// The fastest run.
    pub max: f64,
}

impl Summary {
    /// Summarizes `runs`, which must not be empty.
    pub fn of(runs: &[f64]) -> Summary {
        assert!(!runs.is_empty(), "a figure needs at least one run");
        let mut v = runs.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Summary {
            median,
            min: v[0],
            max: v[n - 1],
        }
    }
}

/// One figure: a case on one system at one thread count.
#[derive(Clone, Debug)]
pub struct Figure {
    /// The workload.
    pub workload: Workload,
    /// The variant's name.
    pub variant: String,
    /// The system.
    pub system: System,
    /// How many threads ran.
    pub threads: usize,
    /// Total operations per second over all threads.
    pub ops: Summary,
    /// How many runs the summary covers.
    pub runs: usize,
}

impl Figure {
    /// Nanoseconds per operation per thread, from the median.
    pub fn ns_per_op(&self) -> f64 {
        self.threads as f64 * 1e9 / self.ops.median
    }
}

/// A JSON record, one per figure.
#[derive(Serialize)]
struct Record<'a> {
    workload: &'static str,
    variant: &'a str,
    system: &'static str,
    threads: usize,
    unit: &'static str,
    ops_per_sec: f64,
    ns_per_op: f64,
    min_ops_per_sec: f64,
    max_ops_per_sec: f64,
    runs: usize,
}

/// Writes `figures` to `path` as a JSON array.
pub fn write_json(path: &Path, figures: &[Figure]) -> Result<(), Error> {
    let records: Vec<Record<'_>> = figures
        .iter()
        .map(|f| Record {
            workload: f.workload.id(),
            variant: &f.variant,
            system: f.system.name(),
            threads: f.threads,
            unit: f.workload.unit().name(),
            ops_per_sec: f.ops.median,
            ns_per_op: f.ns_per_op(),
            min_ops_per_sec: f.ops.min,
            max_ops_per_sec: f.ops.max,
            runs: f.runs,
        })
        .collect();
    let err = |e: &dyn std::fmt::Display| Error::from(format!("{}: {e}", path.display()));
    let mut out = BufWriter::new(File::create(path).map_err(|e| err(&e))?);
    serde_json::to_writer_pretty(&mut out, &records).map_err(|e| err(&e))?;
    writeln!(out)
        .and_then(|()| out.flush())
        .map_err(|e| err(&e))
}

/// `1234567.0` as `1.23M`: three significant digits and an SI suffix.
fn si(x: f64) -> String {
    let (v, suffix) = match x {
        x if x >= 1e9 => (x / 1e9, "G"),
        x if x >= 1e6 => (x / 1e6, "M"),
        x if x >= 1e3 => (x / 1e3, "k"),
        x => (x, ""),
    };
    let digits = match v {
        v if v >= 100.0 => 0,
        v if v >= 10.0 => 1,
        _ => 2,
    };
    format!("{v:.digits$}{suffix}")
}

/// A figure's rate column: `median [min..max]`.
fn rate_cell(f: Option<&Figure>) -> String {
    match f {
        Some(f) => format!(
            "{:>6} [{}..{}]",
            si(f.ops.median),
            si(f.ops.min),
            si(f.ops.max)
        ),
        None => "-".to_owned(),
    }
}

fn ns_cell(f: Option<&Figure>) -> String {
    f.map_or_else(|| "-".to_owned(), |f| format!("{:.1}", f.ns_per_op()))
}

/// `a / b` with two decimals, or `-`.
fn ratio_cell(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
        _ => "-".to_owned(),
    }
}

// The table is printed a row at a time, as figures arrive.

/// The table's column headings.
pub fn header() -> String {
    let mut s = format!(
        "{:<4} {:<16} {:<5} {:>3}  {:<25} {:<25} {:>8}  {:>9} {:>9}  {:>7} {:>7}\n",
        "wl",
        "variant",
        "unit",
        "thr",
        "kernel/s [min..max]",
        "scalevfs/s [min..max]",
        "ratio",
        "k ns/op",
        "s ns/op",
        "k scale",
        "s scale"
    );
    s.push_str(&"-".repeat(s.len() - 1));
    s
}

/// One row: the kernel's and scalevfs's figures for one case and thread count, with each
/// system's rate at one thread for the scaling columns.
pub fn row(
    kernel: Option<&Figure>,
    scalevfs: Option<&Figure>,
    kernel_1t: Option<f64>,
    scalevfs_1t: Option<f64>,
) -> String {
    let any = kernel.or(scalevfs).expect("a row has at least one figure");
    let scaling = |f: Option<&Figure>, one: Option<f64>| match f {
        Some(f) if f.threads > 1 => ratio_cell(Some(f.ops.median), one),
        _ => "-".to_owned(),
    };
    format!(
        "{:<4} {:<16} {:<5} {:>3}  {:<25} {:<25} {:>8}  {:>9} {:>9}  {:>7} {:>7}",
        any.workload.id(),
        any.variant,
        any.workload.unit().name(),
        any.threads,
        rate_cell(kernel),
        rate_cell(scalevfs),
        ratio_cell(scalevfs.map(|f| f.ops.median), kernel.map(|f| f.ops.median)),
        ns_cell(kernel),
        ns_cell(scalevfs),
        scaling(kernel, kernel_1t),
        scaling(scalevfs, scalevfs_1t),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_takes_the_middle() {
        let s = Summary::of(&[5.0, 1.0, 3.0]);
        assert_eq!((s.median, s.min, s.max), (3.0, 1.0, 5.0));
        assert_eq!(Summary::of(&[4.0, 1.0, 2.0, 3.0]).median, 2.5);
    }

    #[test]
    fn si_keeps_three_digits() {
        assert_eq!(si(725_300.0), "725k");
        assert_eq!(si(1_620_000.0), "1.62M");
        assert_eq!(si(12_340_000.0), "12.3M");
        assert_eq!(si(950.0), "950");
    }
}
