//! `--plot FILE` and `vkhost plot`: bandwidth against size, one panel per direction (h2d,
//! d2h, bidir on the top row; d2d beside latency on the bottom row), as SVG or (for a `.png`
//! name) PNG. d2d has its own panel: device-local copies run at device-memory speed, far above
//! the link, and would flatten the host lines.
//!
//! A path keeps its colour in every bandwidth panel (h2d, d2h, bidir, d2d); the latency panel,
//! whose lines are all pinned memory, colours them by direction instead (h2d purple, d2h
//! brown; the floor dotted in its direction's colour). The copy kernel's line (`_sm`) is dotted with square
//! markers in its path's colour, CUDA's line dashed with triangles in the colour of the path it
//! compares with (pinned, pageable, device). The link's theoretical rate, when known, is a grey
//! dashed line (twice it for bidir; none for d2d). Text needs a TrueType font, for PNG's glyphs and for
//! both formats' layout (plotters' ab_glyph measures text with it): `VKHOST_PLOT_FONT`, the
//! first of `FONTS` that exists, or what `fc-match sans-serif` names.

use crate::bench::Point;
use crate::bench::meta::{Link, link_gbps};
use crate::devices::anyhow_free::Result;
use crate::stats::size_label;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// The colour of each path, the same in every panel (Tableau 10).
const PATHS: [(&str, RGBColor); 5] = [
    ("pinned", RGBColor(31, 119, 180)),
    ("registered", RGBColor(255, 127, 14)),
    ("pageable", RGBColor(44, 160, 44)),
    ("bar", RGBColor(214, 39, 40)),
    ("device", RGBColor(23, 190, 207)),
];
const LATENCY: [(&str, RGBColor); 2] = [("h2d", RGBColor(148, 103, 189)), ("d2h", RGBColor(140, 86, 75))];
const LINK: RGBColor = RGBColor(110, 110, 110);

/// TrueType fonts tried for PNG text, in order.
const FONTS: [&str; 4] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

/// How a line is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Style {
    /// Vulkan by the copy engine (or the CPU, for bar): solid, circles.
    Solid,
    /// Vulkan by the copy kernel (`_sm`): dotted, squares.
    Dotted,
    /// CUDA: dashed, triangles.
    Dashed,
}

/// The largest y value a panel plots (GB/s or µs); larger ones are left out. Its axis ends
/// 12% above its largest value, which must stay finite.
const Y_MAX: f64 = 1e300;

/// One line of a panel.
struct Series {
    name: String,
    colour: RGBColor,
    style: Style,
    pts: Vec<(f64, f64)>,
}

/// The bandwidth lines of one direction: Vulkan per path by the copy engine (solid) and by the
/// copy kernel (dotted), CUDA per path (dashed).
fn bandwidth(points: &[&Point], dir: &str) -> Vec<Series> {
    let mut out: Vec<Series> = Vec::new();
    for (api, sm, style) in [("vulkan", false, Style::Solid), ("vulkan", true, Style::Dotted), ("cuda", false, Style::Dashed)] {
        for (path, c) in PATHS {
            let mut pts: Vec<(f64, f64)> = points
                .iter()
                .filter(|p| p.kind == "copy" && p.api == api && p.sm == sm && p.path == path && p.dir == dir)
                // Not the `write` and `assist` extras beside a bar row: another mechanism, which
                // stood on the bar line wherever the row's own point was missing (skipped).
                .filter(|p| !matches!(p.variant.as_str(), "write" | "assist"))
                .map(|p| ((p.size as f64).log2(), p.gbps()))
                // log2(0) is -inf: a point off either axis would make its range infinite.
                .filter(|(x, g)| x.is_finite() && g.is_finite() && *g > 0.0)
                .collect();
            if pts.is_empty() {
                continue;
            }
            // Several bidir queue pairs give several points per size: the first (stable sort) stays.
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            pts.dedup_by(|a, b| a.0 == b.0);
            let name = match style {
                Style::Dashed => format!("CUDA {path}"),
                Style::Dotted => format!("{path} sm"),
                // "device" alone would not say which engine.
                Style::Solid if path == "device" => "device ce".to_string(),
                Style::Solid => path.to_string(),
            };
            out.push(Series { name, colour: c, style, pts });
        }
    }
    out
}

/// The latency lines: the `latency_*` testcases, or (for files without them) the copy engine's
/// pinned copies of 64 KiB and less (not the copy kernel's `_sm` points: a line mixing both
/// would zig-zag between two mechanisms).
fn latency(points: &[&Point]) -> Vec<Series> {
    let lat: Vec<&&Point> = points.iter().filter(|p| p.kind == "latency").collect();
    let src: Vec<&&Point> = if lat.is_empty() {
        points.iter().filter(|p| p.kind == "copy" && p.api == "vulkan" && !p.sm && p.path == "pinned" && p.size <= 64 << 10).collect()
    } else {
        lat
    };
    // The floor (`latency_floor_*`, path "floor") dotted beside the copies it is the floor of.
    LATENCY
        .iter()
        .flat_map(|&(dir, c)| [(dir, c, "pinned", Style::Solid), (dir, c, "floor", Style::Dotted)])
        .filter_map(|(dir, c, path, style)| {
            let mut pts: Vec<(f64, f64)> = src
                .iter()
                .filter(|p| p.dir == dir && (p.path == "floor") == (path == "floor"))
                .map(|p| ((p.size as f64).log2(), p.s.median * 1e6))
                .filter(|(x, y)| x.is_finite() && y.is_finite() && *y >= 0.0)
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            (!pts.is_empty()).then(|| Series { name: format!("{path} {dir}"), colour: c, style, pts })
        })
        .collect()
}

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    caption: &str,
    y_desc: &str,
    series: &[Series],
    link: Option<(f64, String)>,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    // Points (and a link line) too large for the axis are left out, as points off a log axis
    // are: an axis whose end overflows to infinity would never finish drawing its ticks.
    let on_axis = |y: f64| y.is_finite() && (0.0..=Y_MAX).contains(&y);
    let kept: Vec<Series> = series
        .iter()
        .map(|s| Series {
            name: s.name.clone(),
            colour: s.colour,
            style: s.style,
            pts: s.pts.iter().copied().filter(|p| on_axis(p.1)).collect(),
        })
        .filter(|s| !s.pts.is_empty())
        .collect();
    let series = &kept[..];
    let link = link.filter(|l| on_axis(l.0) && l.0 > 0.0);
    let all = series.iter().flat_map(|s| s.pts.iter());
    let (xmin, xmax) = all.clone().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    if series.is_empty() {
        area.titled(&format!("{caption}: no points"), ("sans-serif", 16))?;
        return Ok(());
    }
    let ymax = all.map(|p| p.1).fold(0.0f64, f64::max).max(link.as_ref().map_or(0.0, |l| l.0)) * 1.12;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(xmin - 0.5..xmax + 0.5, 0.0..ymax.max(0.001))?;
    chart
        .configure_mesh()
        .x_labels(((xmax - xmin) as usize + 2).min(24))
        .x_desc("transfer size")
        .y_desc(y_desc)
        .x_label_formatter(&|x| {
            let r = x.round();
            if (x - r).abs() < 1e-6 && r >= 0.0 && (r as i64) % 2 == 0 { size_label(1u64 << (r as u32).min(62)) } else { String::new() }
        })
        .draw()?;
    if let Some((y, label)) = link {
        chart
            .draw_series(DashedLineSeries::new(vec![(xmin - 0.5, y), (xmax + 0.5, y)], 6, 4, LINK.stroke_width(2)))?
            .label(label)
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 7, y)], LINK.stroke_width(2)));
    }
    for s in series {
        let c = s.colour;
        match s.style {
            Style::Dashed => {
                chart.draw_series(DashedLineSeries::new(s.pts.clone(), 8, 5, c.stroke_width(2)))?.label(&s.name).legend(move |(x, y)| {
                    EmptyElement::at((x, y))
                        + PathElement::new(vec![(0, 0), (7, 0)], c.stroke_width(2))
                        + PathElement::new(vec![(11, 0), (18, 0)], c.stroke_width(2))
                });
                chart.draw_series(s.pts.iter().map(|&(x, y)| TriangleMarker::new((x, y), 4, c.filled())))?;
            }
            Style::Dotted => {
                chart.draw_series(DashedLineSeries::new(s.pts.clone(), 2, 4, c.stroke_width(2)))?.label(&s.name).legend(move |(x, y)| {
                    EmptyElement::at((x, y))
                        + PathElement::new(vec![(0, 0), (2, 0)], c.stroke_width(2))
                        + PathElement::new(vec![(6, 0), (8, 0)], c.stroke_width(2))
                        + PathElement::new(vec![(12, 0), (14, 0)], c.stroke_width(2))
                        + PathElement::new(vec![(18, 0), (20, 0)], c.stroke_width(2))
                });
                chart.draw_series(s.pts.iter().map(|&(x, y)| EmptyElement::at((x, y)) + Rectangle::new([(-3, -3), (3, 3)], c.filled())))?;
            }
            Style::Solid => {
                chart
                    .draw_series(LineSeries::new(s.pts.clone(), c.stroke_width(2)))?
                    .label(&s.name)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
                chart.draw_series(s.pts.iter().map(|&(x, y)| Circle::new((x, y), 3, c.filled())))?;
            }
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    Ok(())
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, points: &[&Point], title: &str, link: Option<&Link>) -> Result<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let root = root.titled(&format!("vkhost bench: {title}"), ("sans-serif", 22))?;
    // Top row: the three host directions; bottom row: d2d and latency, wider.
    let (top, bottom) = root.split_vertically(root.dim_in_pixel().1 / 2);
    let (top, bottom) = (top.split_evenly((1, 3)), bottom.split_evenly((1, 2)));
    let link_label = |l: &Link, k: f64| (k * l.gbps, format!("PCIe Gen{} x{}: {:.1} GB/s", l.generation, l.width, k * l.gbps));
    let gbps = "GB/s (1e9 B/s)";
    panel(&top[0], "host to device (h2d)", gbps, &bandwidth(points, "h2d"), link.map(|l| link_label(l, 1.0)))?;
    panel(&top[1], "device to host (d2h)", gbps, &bandwidth(points, "d2h"), link.map(|l| link_label(l, 1.0)))?;
    panel(&top[2], "both at once (bidir, sum)", gbps, &bandwidth(points, "bidir"), link.map(|l| link_label(l, 2.0)))?;
    // No link line: a device-local copy does not cross it.
    panel(&bottom[0], "device to device (d2d)", gbps, &bandwidth(points, "d2d"), None)?;
    panel(&bottom[1], "latency: one synchronous copy", "us (median)", &latency(points), None)?;
    root.present()?;
    Ok(())
}

/// Registers a TrueType font as "sans-serif", once.
fn register_font() -> Result<()> {
    static DONE: std::sync::OnceLock<std::result::Result<(), String>> = std::sync::OnceLock::new();
    DONE.get_or_init(|| {
        let fc = || {
            let o = std::process::Command::new("fc-match").args(["-f", "%{file}", "sans-serif"]).output().ok()?;
            String::from_utf8(o.stdout).ok().filter(|s| !s.is_empty())
        };
        let candidates =
            std::env::var("VKHOST_PLOT_FONT").into_iter().chain(FONTS.iter().map(|s| s.to_string())).chain(std::iter::from_fn(fc).take(1));
        let (path, bytes) = candidates.filter_map(|p| std::fs::read(&p).ok().map(|b| (p, b))).next().ok_or_else(|| {
            format!("plotting needs a TrueType font: none of {FONTS:?} exists and fc-match found none (set VKHOST_PLOT_FONT)")
        })?;
        // Leaked once: plotters keeps fonts for the life of the process.
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).map_err(|_| format!("{path}: not a usable TrueType font"))
    })
    .clone()
    .map_err(Into::into)
}

/// Whether `file` names a PNG (`.png`) rather than an SVG (`.svg`, or no extension: a pipe such
/// as `--plot >(cat)`). Any other extension is refused: an SVG written under a `.pdf` or `.jpg`
/// name is not what was asked for.
pub fn is_png(what: &str, file: &Path) -> Result<bool> {
    match file.extension().map(|e| e.to_string_lossy().to_ascii_lowercase()) {
        None => Ok(false),
        Some(e) if e == "svg" => Ok(false),
        Some(e) if e == "png" => Ok(true),
        Some(e) => Err(format!("{what} {}: a plot is SVG (.svg) or PNG (.png), not .{e}", file.display()).into()),
    }
}

/// Writes the plot: PNG when `file` ends in `.png`, else SVG.
pub fn plot(file: &Path, points: &[&Point], title: &str, link: Option<&Link>) -> Result<()> {
    let size = (1800, 1000);
    let png = is_png("the plot", file)?;
    register_font()?;
    if png {
        draw(BitMapBackend::new(file, size).into_drawing_area(), points, title, link)
    } else {
        draw(SVGBackend::new(file, size).into_drawing_area(), points, title, link)
    }
}

/// `vkhost plot IN.json OUT.svg|OUT.png`: re-plot a saved `bench --json` file.
#[derive(clap::Args)]
pub struct Args {
    /// A file written by `vkhost bench --json` (schema version 2: {run, results}).
    input: std::path::PathBuf,
    /// The plot to write: SVG (.svg), or PNG for a .png name; other extensions are refused.
    output: std::path::PathBuf,
}

pub fn run(a: Args) -> Result<std::process::ExitCode> {
    if a.input.canonicalize().ok().is_some_and(|i| a.output.canonicalize().ok() == Some(i)) {
        return Err(format!("{}: the plot would overwrite its input", a.output.display()).into());
    }
    is_png("the plot", &a.output)?;
    crate::bench::check_output("the plot", &a.output)?;
    let text = std::fs::read_to_string(&a.input).map_err(|e| format!("{}: {e}", a.input.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", a.input.display()))?;
    if v.is_array() {
        return Err(format!(
            "{}: a bare array is the JSON of vkhost before schema version 2; re-run `vkhost bench --json` to plot it",
            a.input.display()
        )
        .into());
    }
    if v["matrix"].is_array() {
        return Err(format!("{}: a `vkhost bench --devices` matrix, which `vkhost plot` does not draw", a.input.display()).into());
    }
    let list = v["results"]
        .as_array()
        .ok_or_else(|| format!("{}: expected {{\"run\": ..., \"results\": [...]}} as `vkhost bench --json` writes", a.input.display()))?;
    let run = &v["run"];
    let mut points = Vec::new();
    for p in list {
        let (Some(size), Some(median)) = (p["size"].as_u64(), p["median_s"].as_f64()) else { continue };
        let kind: &'static str = match p["kind"].as_str() {
            Some("copy") => "copy",
            Some("latency") => "latency",
            _ => "other",
        };
        let api: &'static str = if p["api"] == "cuda" { "cuda" } else { "vulkan" };
        let dir = p["dir"].as_str().unwrap_or_default().to_string();
        let moved = p["bytes_moved"].as_u64().unwrap_or(if dir == "bidir" { size.saturating_mul(2) } else { size });
        let s = crate::stats::Summary {
            min: p["min_s"].as_f64().unwrap_or(median),
            max: p["max_s"].as_f64().unwrap_or(median),
            ..crate::stats::Summary::single(median, 1)
        };
        let mut pt = crate::bench::point(api, kind, p["path"].as_str().unwrap_or_default(), &dir, size, moved, s);
        pt.verified = p["verified"].as_bool();
        pt.sm = p["testcase"].as_str().is_some_and(|t| t.ends_with("_sm"));
        pt.variant = p["variant"].as_str().unwrap_or_default().to_string();
        points.push(pt);
    }
    // A file with nothing to draw is an error, not a plot of empty panels that exits 0 (an empty
    // `results`, or entries that are not copy or latency points, such as another tool's JSON).
    if !points.iter().any(|p| p.kind != "other") {
        return Err(format!(
            "{}: no copy or latency point to plot ({} result(s); each needs kind \"copy\" or \"latency\", a size and median_s)",
            a.input.display(),
            list.len()
        )
        .into());
    }
    let dev = &run["device"];
    let title = format!(
        "{} ({} {})",
        dev["name"].as_str().unwrap_or("?"),
        dev["driver_name"].as_str().unwrap_or(""),
        dev["driver_info"].as_str().unwrap_or("")
    );
    let pcie = &run["pcie"];
    let link = match (pcie["gt_per_s"].as_f64(), pcie["width"].as_u64(), pcie["generation"].as_u64()) {
        (Some(gt), Some(w), Some(g)) => match (u32::try_from(w), u32::try_from(g)) {
            (Ok(w), Ok(g)) => Some(Link { gt_s: gt, width: w, generation: g, gbps: link_gbps(gt, w) }),
            _ => None,
        },
        _ => None,
    };
    let refs: Vec<&Point> = points.iter().collect();
    plot(&a.output, &refs, &title, link.as_ref())?;
    println!("wrote {}", a.output.display());
    Ok(std::process::ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::point;
    use crate::stats::Summary;

    /// The bar line holds the bar rows' own points only: an `assist` (or `write`) extra at a
    /// size whose plain point was skipped stood on it, drawn as the bar path's figure.
    #[test]
    fn the_bar_line_leaves_out_the_extras_beside_its_rows() {
        let (fast, slow) = (Summary::single(1e-5, 1), Summary::single(1e-3, 1));
        let mut extra = point("vulkan", "copy", "bar", "bidir", 1 << 20, 2 << 20, fast);
        extra.variant = "assist".into();
        let mut write = point("vulkan", "copy", "bar", "h2d", 1 << 24, 1 << 24, fast);
        write.variant = "write".into();
        let mut plain = point("vulkan", "copy", "bar", "bidir", 1 << 24, 2 << 24, slow);
        plain.variant = "copy-copy".into();
        let refs = [&extra, &write, &plain];
        let b = bandwidth(&refs, "bidir");
        let bar = b.iter().find(|s| s.name == "bar").expect("the bar line");
        assert_eq!(bar.pts, vec![(24.0, plain.gbps())], "only the row's own point");
        assert!(bandwidth(&refs, "h2d").is_empty(), "a `write` extra alone draws no line");
    }

    #[test]
    fn cuda_is_dashed_in_its_paths_colour_and_the_link_is_drawn() {
        let s = Summary::single(1e-3, 1);
        let mut pts = Vec::new();
        for api in ["vulkan", "cuda"] {
            for path in ["pinned", "pageable"] {
                for size in [1u64 << 20, 1 << 24] {
                    pts.push(point(api, "copy", path, "h2d", size, size, s));
                }
            }
        }
        let refs: Vec<&Point> = pts.iter().collect();
        let b = bandwidth(&refs, "h2d");
        let find = |name: &str| b.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("{name}"));
        assert_eq!(find("CUDA pinned").colour, find("pinned").colour);
        assert_eq!(find("CUDA pageable").colour, find("pageable").colour);
        assert_ne!(find("pinned").colour, find("pageable").colour);
        assert!(find("CUDA pinned").style == Style::Dashed && find("pinned").style == Style::Solid);
        assert!(bandwidth(&refs, "d2h").is_empty());
        // The copy kernel's line: the path's colour, dotted, apart from the copy engine's.
        let mut k = point("vulkan", "copy", "pinned", "h2d", 1 << 20, 1 << 20, s);
        k.sm = true;
        let d2d =
            [point("vulkan", "copy", "device", "d2d", 1 << 20, 1 << 20, s), point("cuda", "copy", "device", "d2d", 1 << 20, 1 << 20, s)];
        let refs: Vec<&Point> = pts.iter().chain([&k]).chain(&d2d).collect();
        let b = bandwidth(&refs, "h2d");
        let sm = b.iter().find(|s| s.name == "pinned sm").expect("pinned sm");
        assert_eq!((sm.colour, sm.style, sm.pts.len()), (find("pinned").colour, Style::Dotted, 1));
        let names: Vec<String> = bandwidth(&refs, "d2d").into_iter().map(|s| s.name).collect();
        assert_eq!(names, ["device ce", "CUDA device"]);
        // Without latency testcases the latency panel takes the copy engine's small pinned
        // copies only: a copy kernel's point of the same size and direction stays out.
        let small = |sm: bool, secs: f64| {
            let mut p = point("vulkan", "copy", "pinned", "d2h", 4096, 4096, Summary::single(secs, 1));
            p.sm = sm;
            p
        };
        let (ce, kernel) = (small(false, 10e-6), small(true, 90e-6));
        let l = latency(&[&ce, &kernel]);
        assert_eq!(l.len(), 1, "one line: pinned d2h");
        assert_eq!(l[0].pts.len(), 1, "{:?}", l[0].pts);
        assert!((l[0].pts[0].1 - 10.0).abs() < 1e-9, "the copy engine's 10 us, not the kernel's 90: {:?}", l[0].pts);

        let f = std::env::temp_dir().join(format!("vkhost-plot-{}.svg", std::process::id()));
        let link = Link { gt_s: 32.0, width: 16, generation: 5, gbps: link_gbps(32.0, 16) };
        if register_font().is_err() {
            eprintln!("skipped the SVG half: no TrueType font on this machine");
            return;
        }
        plot(&f, &refs, "test", Some(&link)).unwrap();
        let svg = std::fs::read_to_string(&f).unwrap();
        assert!(svg.contains("PCIe Gen5 x16: 63.0 GB/s"), "the link line in h2d");
        // Panels without points say so (and draw no link line).
        assert!(svg.contains("device to host (d2h): no points") && !svg.contains("126.0 GB/s"));
        assert!(svg.contains("pinned sm") && svg.contains("device to device (d2d)"));
        std::fs::remove_file(&f).unwrap();
    }
}
