//! `--plot FILE.svg|png`: the figures drawn, three charts stacked.
//!
//! 1. Rate at one thread, by case and system (horizontal bars, log scale): how far apart the
//!    systems are.
//! 2. Scaling: each system's rate at the largest thread count over its rate at one thread, with
//!    the ideal (the thread count) marked, and the control's scale beside them.
//! 3. W12: bytes per empty file by system, with docs/WORKLOADS.md's target marked.
//!
//! The text is set in DejaVu Sans, embedded in the binary, so that the plot draws the same on a
//! machine without fonts.

use std::path::Path;

use plotters::coord::combinators::IntoLogRange;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::memory::MemFigure;
use super::report::Figure;
use super::target::System;
use super::Error;

/// W12's target, bytes per empty file.
const MEMORY_TARGET: f64 = 256.0;
const WIDTH: u32 = 1400;
/// Height per bar, in pixels.
const BAR: u32 = 11;

/// Fails unless `path` ends in `.svg` or `.png`: checked before the benchmark runs.
pub fn check_path(path: &Path) -> Result<(), Error> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("svg" | "png") => Ok(()),
        _ => Err(format!(
            "--plot {}: the file must end in .svg or .png",
            path.display()
        )
        .into()),
    }
}

fn color(sys: System) -> RGBColor {
    match sys {
        System::Kernel => RGBColor(90, 90, 90),
        System::Vfs => RGBColor(230, 159, 0),
        System::Wasmer => RGBColor(204, 121, 167),
        System::Scalevfs => RGBColor(0, 114, 178),
        System::Fuse => RGBColor(86, 180, 233),
        System::Control => RGBColor(170, 170, 170),
    }
}

/// One horizontal bar chart's data: a label per group, and per group the bars (system, value).
struct Bars {
    groups: Vec<(String, Vec<(System, f64)>)>,
}

impl Bars {
    fn most_bars(&self) -> usize {
        self.groups
            .iter()
            .map(|(_, b)| b.len())
            .max()
            .unwrap_or(1)
            .max(1)
    }

    fn height(&self) -> u32 {
        let per_group = self.most_bars() as u32 * BAR + 8;
        self.groups.len() as u32 * per_group + 110
    }

    fn values(&self) -> impl Iterator<Item = f64> + '_ {
        self.groups
            .iter()
            .flat_map(|(_, b)| b.iter().map(|(_, v)| *v))
    }
}

/// The case label of a figure.
fn label(f: &Figure) -> String {
    format!(
        "{} {} ({})",
        f.workload.id(),
        f.variant,
        f.workload.unit().name()
    )
}

/// Groups `figures` by case, in table order, keeping those `keep` selects, as `value`.
fn by_case(
    figures: &[Figure],
    keep: impl Fn(&Figure) -> bool,
    value: impl Fn(&Figure) -> Option<f64>,
) -> Bars {
    let mut groups: Vec<(String, Vec<(System, f64)>)> = Vec::new();
    for f in figures.iter().filter(|f| keep(f)) {
        let Some(v) = value(f).filter(|v| v.is_finite() && *v > 0.0) else {
            continue;
        };
        let l = label(f);
        match groups.iter_mut().find(|(g, _)| *g == l) {
            Some((_, bars)) => bars.push((f.system, v)),
            None => groups.push((l, vec![(f.system, v)])),
        }
    }
    Bars { groups }
}

/// Draws the charts to `path` (SVG or PNG by its extension).
pub fn write(
    path: &Path,
    figures: &[Figure],
    memory: &[MemFigure],
    threads: &[usize],
) -> Result<(), Error> {
    check_path(path)?;
    plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
        .map_err(|_| "plot: the embedded font does not load")?;

    // The control's rate counts its probes, not the case's operations: it is drawn only in
    // the scaling chart.
    let rates = by_case(
        figures,
        |f| f.threads == 1 && f.system != System::Control,
        |f| Some(f.ops.median),
    );
    let top = threads.iter().copied().max().unwrap_or(1);
    let scaling = by_case(
        figures,
        |f| f.threads == top && top > 1,
        |f| {
            let one = figures.iter().find(|g| {
                g.workload == f.workload
                    && g.variant == f.variant
                    && g.system == f.system
                    && g.threads == 1
            })?;
            Some(f.ops.median / one.ops.median)
        },
    );
    let mem = Bars {
        groups: memory
            .iter()
            .map(|m| {
                (
                    m.system.name().to_owned(),
                    vec![(m.system, m.bytes_per_file)],
                )
            })
            .collect(),
    };
    let charts = [&rates, &scaling, &mem]
        .into_iter()
        .filter(|b| !b.groups.is_empty());
    let height: u32 = charts.map(|b| b.height()).sum();
    if height == 0 {
        return Err("plot: no figures to draw".into());
    }
    let all = [&rates, &scaling, &mem];
    match path.extension().and_then(|e| e.to_str()) {
        Some("png") => draw(
            BitMapBackend::new(path, (WIDTH, height)).into_drawing_area(),
            all,
            top,
        ),
        _ => draw(
            SVGBackend::new(path, (WIDTH, height)).into_drawing_area(),
            all,
            top,
        ),
    }
    .map_err(|e| Error::from(format!("plot {}: {e}", path.display())))
}

/// Draws the charts that have data, stacked, on `root`.
fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    [rates, scaling, mem]: [&Bars; 3],
    top: usize,
) -> Res
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let charts: Vec<(usize, &Bars)> = [rates, scaling, mem]
        .into_iter()
        .enumerate()
        .filter(|(_, b)| !b.groups.is_empty())
        .collect();
    let mut breaks = Vec::new();
    let mut y = 0;
    for (_, b) in &charts[..charts.len().saturating_sub(1)] {
        y += b.height() as i32;
        breaks.push(y);
    }
    let areas = root.split_by_breakpoints::<i32, i32, _, _>([], breaks);
    for ((kind, bars), area) in charts.into_iter().zip(&areas) {
        match kind {
            0 => rate_chart(area, bars)?,
            1 => scale_chart(area, bars, top)?,
            _ => memory_chart(area, bars)?,
        }
    }
    root.present()?;
    Ok(())
}

type Res = Result<(), Box<dyn std::error::Error>>;

/// The y axis of a bar chart: group `i` (the first at the top) is centred on `n - 1 - i`, where
/// the axis has a tick.
fn group_axis(bars: &Bars) -> std::ops::Range<f64> {
    -0.5..bars.groups.len() as f64 - 0.5
}

/// Where group `i` is centred.
fn group_y(bars: &Bars, i: usize) -> f64 {
    (bars.groups.len() - 1 - i) as f64
}

/// The label of the group centred on tick `y`; none between groups.
fn group_label(bars: &Bars, y: f64) -> String {
    let n = bars.groups.len() as f64;
    if (y - y.round()).abs() > 1e-6 || y.round() < 0.0 || y.round() >= n {
        return String::new();
    }
    let i = (n - 1.0 - y.round()) as usize;
    bars.groups
        .get(i)
        .map(|(l, _)| l.clone())
        .unwrap_or_default()
}

/// The rectangles of `bars`, one per bar, from `base`; a series per system for the legend.
fn draw_bars<'a, DB: DrawingBackend + 'a, X>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, RangedCoordf64>>,
    bars: &Bars,
    base: f64,
) -> Res
where
    X: Ranged<ValueType = f64>,
    DB::ErrorType: 'static,
{
    let slot = 0.8 / bars.most_bars() as f64;
    for sys in System::ALL {
        let mut rects = Vec::new();
        for (i, (_, group)) in bars.groups.iter().enumerate() {
            if let Some(j) = group.iter().position(|(s, _)| *s == sys) {
                let y0 = group_y(bars, i) + 0.4 - (j + 1) as f64 * slot;
                rects.push(Rectangle::new(
                    [(base, y0), (group[j].1, y0 + slot)],
                    color(sys).filled(),
                ));
            }
        }
        if rects.is_empty() {
            continue;
        }
        chart
            .draw_series(rects)?
            .label(sys.name())
            .legend(move |(x, y)| {
                Rectangle::new([(x, y - 5), (x + 12, y + 5)], color(sys).filled())
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

fn rate_chart<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, bars: &Bars) -> Res
where
    DB::ErrorType: 'static,
{
    let lo = bars.values().fold(f64::INFINITY, f64::min);
    let hi = bars.values().fold(0.0, f64::max);
    let lo = 10f64.powf(lo.log10().floor());
    let hi = 10f64.powf(hi.log10().ceil());
    let mut chart = ChartBuilder::on(area)
        .caption(
            "Rate at 1 thread (operations per second, log scale)",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(260)
        .build_cartesian_2d((lo..hi).log_scale(), group_axis(bars))?;
    chart
        .configure_mesh()
        .y_labels(bars.groups.len() + 1)
        .y_label_formatter(&|y| group_label(bars, *y))
        .x_label_formatter(&|x| format!("{x:.0e}"))
        .draw()?;
    draw_bars(&mut chart, bars, lo)
}

fn scale_chart<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    bars: &Bars,
    threads: usize,
) -> Res
where
    DB::ErrorType: 'static,
{
    let caption = format!("Scaling: rate at {threads} threads / rate at 1 thread (dashed: ideal)");
    marked_chart(area, bars, &caption, threads as f64, 1.1, &|x| {
        format!("{x:.1}x")
    })
}

fn memory_chart<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, bars: &Bars) -> Res
where
    DB::ErrorType: 'static,
{
    let caption = "W12: bytes per empty file (dashed: the 256-byte target)";
    marked_chart(area, bars, caption, MEMORY_TARGET, 1.15, &|x| {
        format!("{x:.0}")
    })
}

/// A bar chart on a linear axis from 0, with a dashed line at `mark` (an ideal or a target);
/// the axis reaches `headroom` times the larger of `mark` and the longest bar.
fn marked_chart<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    bars: &Bars,
    caption: &str,
    mark: f64,
    headroom: f64,
    x_label: &dyn Fn(&f64) -> String,
) -> Res
where
    DB::ErrorType: 'static,
{
    let hi = bars.values().fold(mark, f64::max) * headroom;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(260)
        .build_cartesian_2d(0.0..hi, group_axis(bars))?;
    chart
        .configure_mesh()
        .y_labels(bars.groups.len() + 1)
        .y_label_formatter(&|y| group_label(bars, *y))
        .x_label_formatter(x_label)
        .draw()?;
    let n = bars.groups.len() as f64;
    chart.draw_series(DashedLineSeries::new(
        [(mark, -0.5), (mark, n - 0.5)],
        6,
        4,
        BLACK.stroke_width(2),
    ))?;
    draw_bars(&mut chart, bars, 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::report::Summary;
    use crate::bench::workloads::Workload;

    fn fig(system: System, threads: usize, rate: f64) -> Figure {
        Figure {
            workload: Workload::W1,
            variant: "stat_same".into(),
            system,
            threads,
            ops: Summary::of(&[rate]),
            runs: 1,
        }
    }

    #[test]
    fn draws_svg_and_png() {
        let figures = vec![
            fig(System::Kernel, 1, 2e6),
            fig(System::Scalevfs, 1, 3e7),
            fig(System::Kernel, 2, 3e6),
            fig(System::Scalevfs, 2, 5.5e7),
        ];
        let mem = vec![MemFigure {
            system: System::Scalevfs,
            files: 10,
            bytes_per_file: 300.0,
            detail: String::new(),
        }];
        let dir = std::env::temp_dir().join(format!("scalevfs-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for ext in ["svg", "png"] {
            let p = dir.join(format!("t.{ext}"));
            write(&p, &figures, &mem, &[1, 2]).unwrap();
            assert!(
                std::fs::metadata(&p).unwrap().len() > 1000,
                "{ext} is empty"
            );
        }
        let svg = std::fs::read_to_string(dir.join("t.svg")).unwrap();
        assert!(svg.contains("W1 stat_same"), "labels missing");
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(check_path(Path::new("x.pdf")).is_err());
    }
}
