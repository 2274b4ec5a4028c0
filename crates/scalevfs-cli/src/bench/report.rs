//! Figures: the statistics of a set of runs, the table and the JSON records.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use serde::Serialize;

use super::memory::MemFigure;
use super::target::System;
use super::workloads::{Unit, Workload};
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

/// A JSON record: a rate figure or a memory figure.
#[derive(Serialize)]
#[serde(untagged)]
enum Record<'a> {
    Rate(RateRecord<'a>),
    Memory(MemRecord),
}

/// A rate figure's record.
#[derive(Serialize)]
struct RateRecord<'a> {
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

/// W12's record.
#[derive(Serialize)]
struct MemRecord {
    workload: &'static str,
    system: &'static str,
    unit: &'static str,
    bytes_per_file: f64,
    files: usize,
    detail: String,
}

/// Writes `figures` and `memory` to `path` as a JSON array.
pub fn write_json(path: &Path, figures: &[Figure], memory: &[MemFigure]) -> Result<(), Error> {
    let mut records: Vec<Record<'_>> = figures
        .iter()
        .map(|f| {
            Record::Rate(RateRecord {
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
        })
        .collect();
    records.extend(memory.iter().map(|m| {
        Record::Memory(MemRecord {
            workload: Workload::W12.id(),
            system: m.system.name(),
            unit: Unit::BytesPerFile.name(),
            bytes_per_file: m.bytes_per_file,
            files: m.files,
            detail: m.detail.clone(),
        })
    }));
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
fn rate_cell(f: &Figure) -> String {
    format!(
        "{:>6} [{}..{}]",
        si(f.ops.median),
        si(f.ops.min),
        si(f.ops.max)
    )
}

/// Nanoseconds per operation per thread.
fn ns_cell(f: &Figure) -> String {
    format!("{:.1}", f.ns_per_op())
}

/// `a / b` as a factor (`654x`, `10.57x`, `0.0412x`), or `-`.
fn ratio_cell(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => factor(a / b),
        _ => "-".to_owned(),
    }
}

/// Two decimals; no decimals from 100 up; three significant digits below 0.1 (so that a large
/// slowdown still reads).
fn factor(x: f64) -> String {
    match x {
        x if x >= 100.0 => format!("{x:.0}x"),
        x if x >= 0.1 || x == 0.0 => format!("{x:.2}x"),
        x => {
            let decimals = (2.0 - x.log10().floor()) as usize;
            format!("{x:.decimals$}x")
        }
    }
}

// The table is printed a group at a time, as figures arrive: one row per system for each case
// and thread count, in `System::ALL` order.

/// Which optional columns the table has.
#[derive(Clone, Copy, Debug)]
pub struct Columns {
    /// "vs kernel": each other system's rate over the kernel's.
    pub vs_kernel: bool,
    /// "vs peer": scalevfs's rate over the best in-process peer's.
    pub vs_peer: bool,
    /// "vs fuse": scalevfs's rate over the FUSE mount's (what the in-process API saves).
    pub vs_fuse: bool,
}

fn line(cells: [&str; 11], cols: Columns) -> String {
    let [wl, variant, unit, thr, system, rate, ns, scale, vs_kernel, vs_peer, vs_fuse] = cells;
    let mut s = format!(
        "{wl:<7} {variant:<16} {unit:<7} {thr:>3}  {system:<8}  {rate:<25} {ns:>9}  {scale:>6}"
    );
    if cols.vs_kernel {
        s.push_str(&format!("  {vs_kernel:>9}"));
    }
    if cols.vs_peer {
        s.push_str(&format!("  {vs_peer:>8}"));
    }
    if cols.vs_fuse {
        s.push_str(&format!("  {vs_fuse:>8}"));
    }
    s
}

/// The table's column headings.
pub fn header(cols: Columns) -> String {
    let mut s = line(
        [
            "wl",
            "variant",
            "unit",
            "thr",
            "system",
            "rate/s [min..max]",
            "ns/op",
            "scale",
            "vs kernel",
            "vs peer",
            "vs fuse",
        ],
        cols,
    );
    let width = s.len();
    s.push('\n');
    s.push_str(&"-".repeat(width));
    s
}

/// One case at one thread count: a row per system measured (`group`, in table order). A row's
/// scale is its rate over the same system's rate at one thread (`one_thread`); "vs kernel" is its
/// rate over the kernel's in this group, "vs peer" (scalevfs only) its rate over the best peer's,
/// "vs fuse" (scalevfs only) its rate over fuse's.
pub fn rows(
    group: &[Figure],
    one_thread: impl Fn(System) -> Option<f64>,
    cols: Columns,
) -> Vec<String> {
    let rate = |sys: System| group.iter().find(|f| f.system == sys).map(|f| f.ops.median);
    let best_peer = group
        .iter()
        .filter(|f| f.system.is_peer())
        .map(|f| f.ops.median)
        .max_by(f64::total_cmp);
    group
        .iter()
        .map(|f| {
            let scale = match f.threads {
                1 => "-".to_owned(),
                _ => ratio_cell(Some(f.ops.median), one_thread(f.system)),
            };
            let vs_kernel = match f.system {
                System::Kernel | System::Control => "-".to_owned(),
                _ => ratio_cell(Some(f.ops.median), rate(System::Kernel)),
            };
            let vs_peer = match f.system {
                System::Scalevfs => ratio_cell(Some(f.ops.median), best_peer),
                _ => "-".to_owned(),
            };
            let vs_fuse = match f.system {
                System::Scalevfs => ratio_cell(Some(f.ops.median), rate(System::Fuse)),
                _ => "-".to_owned(),
            };
            line(
                [
                    f.workload.id(),
                    &f.variant,
                    match f.system {
                        System::Control => "probes",
                        _ => f.workload.unit().name(),
                    },
                    &f.threads.to_string(),
                    f.system.name(),
                    &rate_cell(f),
                    &ns_cell(f),
                    &scale,
                    &vs_kernel,
                    &vs_peer,
                    &vs_fuse,
                ],
                cols,
            )
        })
        .collect()
}

/// W12's table: bytes per file on each system, and its ratio to the kernel's (lower is less
/// memory).
pub fn memory_rows(figures: &[MemFigure]) -> Vec<String> {
    let kernel = figures
        .iter()
        .find(|m| m.system == System::Kernel)
        .map(|m| m.bytes_per_file);
    let mut out = vec![
        format!(
            "{:<4} {:<8} {:>9} {:>12}  {:>9}  how",
            "wl", "system", "files", "bytes/file", "vs kernel"
        ),
        "-".repeat(60),
    ];
    for m in figures {
        let vs = match m.system {
            System::Kernel => "-".to_owned(),
            _ => ratio_cell(Some(m.bytes_per_file), kernel),
        };
        out.push(format!(
            "{:<4} {:<8} {:>9} {:>12.0}  {:>9}  {}",
            Workload::W12.id(),
            m.system.name(),
            m.files,
            m.bytes_per_file,
            vs,
            m.detail
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_control_row_has_a_scale_and_no_ratio_to_the_kernel() {
        let fig = |system, threads, rate| Figure {
            workload: Workload::W7,
            variant: "open_read_close".to_owned(),
            system,
            threads,
            ops: Summary::of(&[rate]),
            runs: 1,
        };
        let cols = Columns {
            vs_kernel: true,
            vs_peer: false,
            vs_fuse: false,
        };
        let one = |sys: System| match sys {
            System::Kernel => Some(1e6),
            System::Control => Some(2e7),
            _ => None,
        };
        let group = [fig(System::Kernel, 2, 1.5e6), fig(System::Control, 2, 3e7)];
        let rows = rows(&group, one, cols);
        let cells: Vec<Vec<&str>> = rows
            .iter()
            .map(|r| r.split_whitespace().collect())
            .collect();
        // wl variant unit thr system rate [min..max] ns/op scale vs-kernel
        assert_eq!(cells[0][2], "triples");
        assert_eq!(cells[0][9], "-");
        assert_eq!(cells[1][2], "probes");
        assert_eq!(cells[1][4], "control");
        assert_eq!(cells[1][8], "1.50x", "the control's scale: {}", rows[1]);
        assert_eq!(
            cells[1][9], "-",
            "no ratio of probes to system calls: {}",
            rows[1]
        );
    }

    #[test]
    fn summary_takes_the_middle() {
        let s = Summary::of(&[5.0, 1.0, 3.0]);
        assert_eq!((s.median, s.min, s.max), (3.0, 1.0, 5.0));
        assert_eq!(Summary::of(&[4.0, 1.0, 2.0, 3.0]).median, 2.5);
    }

    #[test]
    fn factors_keep_small_ratios_readable() {
        assert_eq!(factor(654.44), "654x");
        assert_eq!(factor(10.5749), "10.57x");
        assert_eq!(factor(0.25), "0.25x");
        assert_eq!(factor(0.04123), "0.0412x");
        assert_eq!(factor(0.004123), "0.00412x");
        assert_eq!(ratio_cell(Some(1.0), None), "-");
    }

    #[test]
    fn si_keeps_three_digits() {
        assert_eq!(si(725_300.0), "725k");
        assert_eq!(si(1_620_000.0), "1.62M");
        assert_eq!(si(12_340_000.0), "12.3M");
        assert_eq!(si(950.0), "950");
    }
}
