//! SVG plots (plotters, SVG backend only: no font or system library; text is written as
//! SVG `<text>`): the overhead breakdown per workload for each guard, like the paper's
//! Figures 5–8, beside the paper's totals; the blocked/allowed rates; utility.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::EvalError;
use crate::paper;
use crate::pool::Guard;
use crate::run::{Cell, UtilityCell};
use crate::utility::Matching;

fn err<E: std::fmt::Display>(what: &str) -> impl Fn(E) -> EvalError + '_ {
    move |e| EvalError::Plot(format!("{what}: {e}"))
}

/// A short workload label for an axis.
pub fn short(spec: &str) -> String {
    let parts: Vec<&str> = spec.split(':').collect();
    match parts.as_slice() {
        ["st-sa"] => "ST-SA".into(),
        ["mt-sa-seq", t] => format!("seq{t}"),
        ["mt-sa-int", t] => format!("int{t}"),
        ["mt-ma", t, m] => format!("MA{t},{m}"),
        _ => spec.into(),
    }
}

const PARTS: [(&str, RGBColor); 4] = [
    ("AEG + guards", RGBColor(31, 119, 180)),
    ("measurement", RGBColor(255, 127, 14)),
    ("HW evidence", RGBColor(44, 160, 44)),
    ("signature", RGBColor(214, 39, 40)),
];

/// The overhead of one guard per workload (`cells`: one executor's cells, in workload
/// order): our breakdown stacked, and our totals against the paper's range (log scale).
pub fn overhead(
    path: &Path,
    guard: Guard,
    cells: &[&Cell],
    hw_backend: &str,
) -> Result<(), EvalError> {
    let what = path.display().to_string();
    let root = SVGBackend::new(path, (1200, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(err(&what))?;
    let (left, right) = root.split_horizontally(640);
    stacked(&left, guard, cells, hw_backend).map_err(err(&what))?;
    versus_paper(&right, guard, cells).map_err(err(&what))?;
    root.present().map_err(err(&what))?;
    Ok(())
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type DrawResult = Result<(), Box<dyn std::error::Error + 'static>>;

fn labels(cells: &[&Cell]) -> Vec<String> {
    cells.iter().map(|c| short(&c.workload)).collect()
}

fn stacked(area: &Area<'_>, guard: Guard, cells: &[&Cell], hw: &str) -> DrawResult {
    let names = labels(cells);
    let top = cells
        .iter()
        .map(|c| c.cost.total_ms)
        .fold(0.0f64, f64::max)
        .max(1e-6)
        * 1.15;
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("{} overhead per bundle, measured (ms)", guard.symbol()),
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5f64..(cells.len() as f64 - 0.5), 0f64..top)?;
    let fmt = |x: &f64| {
        let i = x.round();
        if (x - i).abs() < 1e-6 && i >= 0.0 {
            names.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(cells.len().max(1))
        .x_label_formatter(&fmt)
        .y_desc("ms per bundle")
        .draw()?;
    for (k, (name, color)) in PARTS.iter().enumerate() {
        let rects: Vec<_> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let parts = [
                    c.cost.aeg_ms,
                    c.cost.measure_ms,
                    c.cost.hw_ms,
                    c.cost.sign_ms,
                ];
                let below: f64 = parts.iter().take(k).sum();
                let h = parts.get(k).copied().unwrap_or(0.0);
                let x = i as f64;
                Rectangle::new([(x - 0.35, below), (x + 0.35, below + h)], color.filled())
            })
            .collect();
        let label = if k == 2 {
            format!("{name} ({hw})")
        } else {
            (*name).to_string()
        };
        let c = *color;
        chart
            .draw_series(rects)?
            .label(label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], c.filled()));
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    Ok(())
}

fn versus_paper(area: &Area<'_>, guard: Guard, cells: &[&Cell]) -> DrawResult {
    let names = labels(cells);
    let p = paper::overhead(guard).total;
    let lo = cells
        .iter()
        .map(|c| c.cost.total_ms)
        .filter(|v| *v > 0.0)
        .fold(p.lo, f64::min)
        / 2.0;
    let hi = p.hi * 2.0;
    let mut chart = ChartBuilder::on(area)
        .caption(
            "total per bundle: Knox (bars) vs paper (band), ms, log",
            ("sans-serif", 16),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(
            -0.5f64..(cells.len() as f64 - 0.5),
            (lo.max(1e-4)..hi).log_scale(),
        )?;
    let fmt = |x: &f64| {
        let i = x.round();
        if (x - i).abs() < 1e-6 && i >= 0.0 {
            names.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(cells.len().max(1))
        .x_label_formatter(&fmt)
        .y_desc("ms (log)")
        .draw()?;
    let band = RGBColor(150, 150, 150);
    chart
        .draw_series(std::iter::once(Rectangle::new(
            [(-0.5, p.lo), (cells.len() as f64 - 0.5, p.hi)],
            band.mix(0.35).filled(),
        )))?
        .label(format!("paper {p} ms (TDX, Python)"))
        .legend(move |(x, y)| {
            Rectangle::new([(x, y - 5), (x + 10, y + 5)], band.mix(0.35).filled())
        });
    let blue = RGBColor(31, 119, 180);
    chart
        .draw_series(cells.iter().enumerate().map(|(i, c)| {
            let x = i as f64;
            Rectangle::new(
                [
                    (x - 0.3, lo.max(1e-4)),
                    (x + 0.3, c.cost.total_ms.max(1e-4)),
                ],
                blue.filled(),
            )
        }))?
        .label("Knox, measured")
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], blue.filled()));
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    Ok(())
}

const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
];

/// One panel: a guard, its executors, and their cells (by executor, then workload).
pub type Panel<'c> = (Guard, Vec<String>, Vec<Vec<&'c Cell>>);

/// Correctly blocked and correctly allowed % per workload, one panel per guard, one
/// pair of bars per executor.
pub fn effectiveness(path: &Path, panels: &[Panel<'_>]) -> Result<(), EvalError> {
    let what = path.display().to_string();
    let h = 320 * panels.len().max(1) as u32;
    let root = SVGBackend::new(path, (1200, h)).into_drawing_area();
    root.fill(&WHITE).map_err(err(&what))?;
    let areas = root.split_evenly((panels.len().max(1), 1));
    for ((guard, execs, cells), area) in panels.iter().zip(&areas) {
        rates_panel(area, *guard, execs, cells).map_err(err(&what))?;
    }
    root.present().map_err(err(&what))?;
    Ok(())
}

fn rates_panel(
    area: &Area<'_>,
    guard: Guard,
    execs: &[String],
    cells: &[Vec<&Cell>],
) -> DrawResult {
    let workloads: Vec<String> = cells
        .first()
        .map(|row| row.iter().map(|c| short(&c.workload)).collect())
        .unwrap_or_default();
    let n = workloads.len();
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!(
                "{}: correctly blocked (solid) / correctly allowed (light), %",
                guard.symbol()
            ),
            ("sans-serif", 16),
        )
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0f64..110f64)?;
    let fmt = |x: &f64| {
        let i = x.round();
        if (x - i).abs() < 1e-6 && i >= 0.0 {
            workloads.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n.max(1))
        .x_label_formatter(&fmt)
        .y_desc("%")
        .draw()?;
    let groups = (execs.len() * 2).max(1) as f64;
    let w = 0.8 / groups;
    for (e, (name, row)) in execs.iter().zip(cells).enumerate() {
        let color = PALETTE.get(e % PALETTE.len()).copied().unwrap_or(BLUE);
        for (k, light) in [false, true].into_iter().enumerate() {
            let bars: Vec<_> = row
                .iter()
                .enumerate()
                .filter_map(|(i, c)| {
                    let v = if light {
                        c.rates.allowed_pct()
                    } else {
                        c.rates.blocked_pct()
                    }?;
                    let x0 = i as f64 - 0.4 + w * (2 * e + k) as f64;
                    let style = if light {
                        color.mix(0.4).filled()
                    } else {
                        color.filled()
                    };
                    Some(Rectangle::new([(x0, 0.0), (x0 + w * 0.9, v)], style))
                })
                .collect();
            let s = chart.draw_series(bars)?;
            if !light {
                s.label(name.clone()).legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled())
                });
            }
        }
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .position(SeriesLabelPosition::LowerRight)
        .draw()?;
    Ok(())
}

/// False-block rate of free-text calls, exact vs constraints, per executor; and the
/// share of injected calls blocked.
pub fn utility(path: &Path, rows: &[(String, Matching, &UtilityCell)]) -> Result<(), EvalError> {
    let what = path.display().to_string();
    let root = SVGBackend::new(path, (900, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(err(&what))?;
    utility_panel(&root, rows).map_err(err(&what))?;
    root.present().map_err(err(&what))?;
    Ok(())
}

fn utility_panel(area: &Area<'_>, rows: &[(String, Matching, &UtilityCell)]) -> DrawResult {
    let mut execs: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
    execs.dedup();
    let n = execs.len();
    let mut chart = ChartBuilder::on(area)
        .caption(
            "free-text calls falsely blocked (solid) and injected calls blocked (light), %",
            ("sans-serif", 16),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0f64..110f64)?;
    let fmt = |x: &f64| {
        let i = x.round();
        if (x - i).abs() < 1e-6 && i >= 0.0 {
            execs.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n.max(1))
        .x_label_formatter(&fmt)
        .y_desc("%")
        .draw()?;
    for (k, m) in Matching::ALL.into_iter().enumerate() {
        let color = PALETTE.get(k).copied().unwrap_or(BLUE);
        for light in [false, true] {
            let bars: Vec<_> = rows
                .iter()
                .filter(|r| r.1 == m)
                .filter_map(|(e, _, c)| {
                    let i = execs.iter().position(|x| x == e)?;
                    let v = if light {
                        c.rates.deviations_blocked_pct()
                    } else {
                        c.rates.false_block_pct()
                    }?;
                    let x0 = i as f64 - 0.4 + 0.2 * (2 * k + usize::from(light)) as f64;
                    let style = if light {
                        color.mix(0.4).filled()
                    } else {
                        color.filled()
                    };
                    Some(Rectangle::new([(x0, 0.0), (x0 + 0.18, v.max(0.5))], style))
                })
                .collect();
            let s = chart.draw_series(bars)?;
            if !light {
                s.label(m.as_str()).legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled())
                });
            }
        }
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .position(SeriesLabelPosition::UpperMiddle)
        .draw()?;
    Ok(())
}
