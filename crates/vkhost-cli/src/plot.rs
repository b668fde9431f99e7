//! `--plot FILE.svg`: bandwidth against size, one line per api, path and direction.

use crate::bench::Point;
use crate::devices::anyhow_free::Result;
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;

pub fn svg(file: &Path, points: &[&Point], title: &str) -> Result<()> {
    let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for p in points.iter().filter(|p| p.kind == "copy") {
        let g = p.gbps();
        if g.is_finite() && g > 0.0 {
            let name = if p.api == "cuda" { format!("cuda {} {}", p.path, p.dir) } else { format!("{} {}", p.path, p.dir) };
            // x is log2(size), so ticks fall on the binary sizes the sweep uses.
            series.entry(name).or_default().push(((p.size as f64).log2(), g));
        }
    }
    if series.is_empty() {
        return Err("nothing to plot".into());
    }
    let xs = series.values().flatten().map(|p| p.0);
    let (xmin, xmax) = xs.fold((f64::MAX, 0.0f64), |(a, b), x| (a.min(x), b.max(x)));
    let ymax = series.values().flatten().map(|p| p.1).fold(0.0f64, f64::max) * 1.1;
    let root = SVGBackend::new(file, (1000, 640)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("vkhost bench: {title}"), ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d(xmin - 0.5..xmax + 0.5, 0.0..ymax.max(0.001))?;
    chart
        .configure_mesh()
        .x_labels(((xmax - xmin) as usize + 2).min(40))
        .x_desc("transfer size")
        .y_desc("GB/s (1e9 B/s)")
        .x_label_formatter(&|x| {
            let r = x.round();
            if (x - r).abs() < 1e-6 && r >= 0.0 {
                crate::stats::size_label(1u64 << (r as u32).min(62))
            } else {
                String::new()
            }
        })
        .draw()?;
    for (i, (name, mut pts)) in series.into_iter().enumerate() {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let color = Palette99::pick(i).to_rgba();
        let style = if name.starts_with("cuda") { color.stroke_width(1) } else { color.stroke_width(2) };
        chart
            .draw_series(LineSeries::new(pts.clone(), style))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
        chart.draw_series(pts.iter().map(|&(x, y)| Circle::new((x, y), 3, color.filled())))?;
    }
    chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).position(SeriesLabelPosition::UpperLeft).draw()?;
    root.present()?;
    Ok(())
}

/// `vkhost plot IN.json OUT.svg`: re-plot a saved `bench --json` file.
#[derive(clap::Args)]
pub struct Args {
    /// A file written by `vkhost bench --json`.
    input: std::path::PathBuf,
    /// The SVG to write.
    output: std::path::PathBuf,
}

pub fn run(a: Args) -> Result<std::process::ExitCode> {
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&a.input)?)?;
    let list = v.as_array().ok_or("expected the JSON array `vkhost bench --json` writes")?;
    let mut points = Vec::new();
    let mut title = String::new();
    for p in list {
        let (Some(size), Some(median)) = (p["size"].as_u64(), p["median_s"].as_f64()) else { continue };
        let kind: &'static str = if p["kind"] == "copy" { "copy" } else { "other" };
        let api: &'static str = if p["api"] == "cuda" { "cuda" } else { "vulkan" };
        let dir = p["dir"].as_str().unwrap_or_default().to_string();
        if title.is_empty() && api == "vulkan" {
            title = format!("{} ({})", p["device"].as_str().unwrap_or_default(), p["driver"].as_str().unwrap_or_default());
        }
        let moved = if dir == "bidir" { 2 * size } else { size };
        let s =
            crate::stats::Summary { median, min: p["min_s"].as_f64().unwrap_or(median), max: p["max_s"].as_f64().unwrap_or(median), n: 1 };
        let mut pt = crate::bench::point(api, kind, p["path"].as_str().unwrap_or_default(), &dir, size, moved, s);
        pt.verified = p["verified"].as_bool();
        points.push(pt);
    }
    let refs: Vec<&Point> = points.iter().collect();
    svg(&a.output, &refs, &title)?;
    println!("wrote {}", a.output.display());
    Ok(std::process::ExitCode::SUCCESS)
}
