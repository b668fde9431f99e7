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
            series.entry(name).or_default().push((p.size as f64, g));
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
        .build_cartesian_2d((xmin / 1.5..xmax * 1.5).log_scale(), 0.0..ymax.max(0.001))?;
    chart
        .configure_mesh()
        .x_desc("transfer size (bytes)")
        .y_desc("GB/s (1e9 B/s)")
        .x_label_formatter(&|x| crate::stats::size_label(x.round() as u64))
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
