//! Output: the printed tables (copy points with the CUDA comparison columns, latency, costs,
//! find, small-async), the JSON record of one point, the run's device record, and CSV.

use super::Point;
use super::meta::Link;
use crate::stats::{gbps, size_label};
use serde_json::{Value, json};

/// GB/s as a percentage of the link's theoretical rate (both directions' for bidir); none for
/// device-to-device copies, which do not cross the link.
pub fn link_pct(p: &Point, link: Option<&Link>) -> Option<f64> {
    let l = link?;
    let g = p.gbps();
    let full = if p.dir == "bidir" { 2.0 * l.gbps } else { l.gbps };
    (p.kind == "copy" && p.dir != "d2d" && g.is_finite()).then(|| 100.0 * g / full)
}

/// One result of the JSON's `results` (docs/BENCH.md says what each field means).
pub(super) fn to_json(p: &Point, link: Option<&Link>) -> Value {
    let num = |x: f64| if x.is_finite() { json!(x) } else { Value::Null };
    let rate = matches!(p.kind, "copy" | "latency" | "small-async");
    let g = |secs: f64| if rate { num(gbps(p.bytes_moved, secs)) } else { Value::Null };
    json!({
        "testcase": p.testcase(),
        "api": p.api,
        "kind": p.kind,
        "path": p.path,
        "dir": p.dir,
        "variant": if p.variant.is_empty() { Value::Null } else { json!(p.variant) },
        "size": p.size,
        "bytes_moved": p.bytes_moved,
        "iters": p.s.n,
        "warmup_iters": p.warmup,
        "median_s": p.s.median,
        "mean_s": p.s.mean,
        "stddev_s": p.s.stddev,
        "min_s": p.s.min,
        "max_s": p.s.max,
        "gbps": g(p.s.median),
        "min_gbps": g(p.s.max),
        "max_gbps": g(p.s.min),
        "link_pct": link_pct(p, link),
        "latency_us": if p.kind == "latency" || (p.kind == "copy" && p.size <= 64 << 10) { json!(p.s.median * 1e6) } else { Value::Null },
        "unstable": p.s.unstable(),
        "verified": p.verified,
        "note": p.note,
        "extra": p.extra,
    })
}

/// `run.device`: what DeviceInfo says.
pub(super) fn device_json(info: &vkhost::DeviceInfo, reg: &Result<usize, String>) -> Value {
    json!({
        "index": info.index,
        "name": info.name,
        "type": info.device_type.as_str(),
        "vendor_id": info.vendor_id,
        "device_id": info.device_id,
        "driver_name": info.driver_name,
        "driver_info": info.driver_info,
        "driver_version": info.driver_version,
        "vulkan_version": info.api_version.to_string(),
        "host_registration": crate::devices::registration_line(reg),
    })
}

/// The header line about the PCIe link.
pub(super) fn link_line(pcie: &Value) -> String {
    match pcie["generation"].as_u64() {
        Some(g) => format!(
            "PCIe link: Gen{g} x{} ({:.1} GB/s per direction, theoretical) at {}{}",
            pcie["width"],
            pcie["theoretical_gbps"].as_f64().unwrap_or(0.0),
            pcie["address"].as_str().unwrap_or("?"),
            pcie["numa_node"].as_i64().map(|n| format!(", NUMA node {n}")).unwrap_or_default()
        ),
        None => format!("PCIe link: unknown ({})", pcie["reason"].as_str().unwrap_or("no reason given")),
    }
}

/// The header line about CPU pinning.
pub(super) fn affinity_line(a: &Value) -> String {
    let cpus = a["cpus"].as_str().unwrap_or("?");
    match a["source"].as_str() {
        Some("none") => format!("not pinned ({}); running on {cpus}", a["reason"].as_str().unwrap_or("")),
        Some(src) => format!("pinned to {cpus} ({src})"),
        None => cpus.to_string(),
    }
}

/// The results as CSV: a header, then one row per point, from the JSON records.
pub(super) fn csv(results: &[Value]) -> String {
    const COLS: [&str; 19] = [
        "testcase",
        "api",
        "kind",
        "path",
        "dir",
        "variant",
        "size",
        "iters",
        "median_s",
        "mean_s",
        "stddev_s",
        "min_s",
        "max_s",
        "gbps",
        "link_pct",
        "latency_us",
        "unstable",
        "verified",
        "note",
    ];
    csv_of(&COLS, results)
}

/// CSV of `records`: a header of `cols`, then one line per record with its fields of those
/// names (null and missing fields empty, strings bare, other values as JSON; a cell with a
/// comma, a quote or a newline quoted). `--devices` writes its matrix with it too.
pub(super) fn csv_of(cols: &[&str], records: &[Value]) -> String {
    let cell = |v: &Value| -> String {
        let s = match v {
            Value::Null => String::new(),
            Value::String(s) => s.clone(),
            v => v.to_string(),
        };
        if s.contains([',', '"', '\n']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s }
    };
    let mut out = cols.join(",") + "\n";
    for r in records {
        out += &cols.iter().map(|c| cell(&r[*c])).collect::<Vec<_>>().join(",");
        out.push('\n');
    }
    out
}

/// Microseconds for the tables: two decimals below 1 us (a BAR store of 4 KiB takes tens of
/// nanoseconds on a CPU driver, which one decimal printed as 0.0), else one.
fn fmt_us(seconds: f64) -> String {
    let us = seconds * 1e6;
    if us < 1.0 { format!("{us:.2}") } else { format!("{us:.1}") }
}

fn fmt_gbps(g: f64) -> String {
    if g >= 100.0 {
        format!("{g:.0}")
    } else if g >= 1.0 {
        format!("{g:.2}")
    } else {
        format!("{g:.3}")
    }
}

/// CUDA's figure beside a Vulkan point: cudaMemcpy for the copy-engine testcases (pinned and
/// registered against pinned memory, pageable), CUDA's SM copy over mapped pinned memory for the
/// copy kernel's testcases over host memory, and the device-to-device cudaMemcpy (which runs on
/// the SMs) beside both device-to-device testcases; none for bar.
fn cuda_of<'a>(p: &Point, cuda: &'a [Point]) -> Option<&'a Point> {
    let (path, sm) = match p.path.as_str() {
        "pinned" | "registered" => ("pinned", p.sm),
        // `DeviceBuffer::write` from pinned memory (the `write` variant of a bar h2d point).
        "bar" if p.variant == "write" => ("pinned", false),
        "pageable" if !p.sm => ("pageable", false),
        "device" => ("device", false),
        _ => return None,
    };
    cuda.iter().find(|c| c.kind == p.kind && c.sm == sm && c.path == path && c.dir == p.dir && c.size == p.size)
}

pub(super) fn print_table(points: &[Point], cuda: &[Point], link: Option<&Link>) {
    print!("{}", table(points, cuda, link));
}

/// The text tables [`print_table`] prints: copies, latency, costs, find and small-async, each
/// unstable point marked `!`, and the legend after them.
fn table(points: &[Point], cuda: &[Point], link: Option<&Link>) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<33} {:>6} {:>9} {:>9} {:>9} {:>6} {:>6} {:>10} {:>5} {:>5} {:1} {:>9} {:>7}",
        "testcase", "size", "GB/s", "min", "max", "sd%", "link%", "latency", "iters", "check", "!", "CUDA GB/s", "ratio"
    );
    for p in points.iter().filter(|p| p.kind == "copy").chain(cuda.iter().filter(|p| p.kind == "copy")) {
        let g = p.gbps();
        let lat = if p.size <= 64 << 10 { format!("{} us", fmt_us(p.s.median)) } else { String::new() };
        let (cg, ratio) = match (p.api, cuda_of(p, cuda)) {
            ("vulkan", Some(c)) => (fmt_gbps(c.gbps()), format!("{:.2}x", g / c.gbps())),
            _ => (String::new(), String::new()),
        };
        let check = match p.verified {
            Some(true) => "ok",
            Some(false) => "FAIL",
            None => "",
        };
        let name = match (p.api, p.variant.as_str()) {
            ("cuda", _) => format!("cuda:{}", p.testcase()),
            // The bar rows' `bar_assist` and `write` variants (the bidir queue pairs say theirs
            // in the note).
            (_, "assist" | "write") => format!("{}+{}", p.testcase(), p.variant),
            _ => p.testcase().to_string(),
        };
        let _ = writeln!(
            out,
            "{:<33} {:>6} {:>9} {:>9} {:>9} {:>6} {:>6} {:>10} {:>5} {:>5} {:1} {:>9} {:>7}{}",
            name,
            size_label(p.size),
            fmt_gbps(g),
            fmt_gbps(gbps(p.bytes_moved, p.s.max)),
            fmt_gbps(gbps(p.bytes_moved, p.s.min)),
            format!("{:.1}", 100.0 * p.s.stddev / p.s.mean),
            link_pct(p, link).map(|x| format!("{x:.0}")).unwrap_or_default(),
            lat,
            p.s.n,
            check,
            unstable_mark(p),
            cg,
            ratio,
            if p.note.is_empty() { String::new() } else { format!("  ({})", p.note) }
        );
    }
    let lat: Vec<&Point> = points.iter().filter(|p| p.kind == "latency").collect();
    if !lat.is_empty() {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{:<28} {:>6} {:>10} {:>10} {:>10} {:>10} {:>10} {:>5} {:>5} {:1}",
            "latency (us)", "size", "median", "mean", "stddev", "min", "max", "iters", "check", "!"
        );
        for p in lat {
            let us = fmt_us;
            let _ = writeln!(
                out,
                "{:<28} {:>6} {:>10} {:>10} {:>10} {:>10} {:>10} {:>5} {:>5} {:1}{}",
                p.testcase(),
                size_label(p.size),
                us(p.s.median),
                us(p.s.mean),
                us(p.s.stddev),
                us(p.s.min),
                us(p.s.max),
                p.s.n,
                match p.verified {
                    Some(true) => "ok",
                    Some(false) => "FAIL",
                    None => "-",
                },
                unstable_mark(p),
                if p.note.is_empty() { String::new() } else { format!("  ({})", p.note) }
            );
        }
    }
    let costs: Vec<&Point> = points.iter().filter(|p| p.kind == "cost").collect();
    if !costs.is_empty() {
        let _ = writeln!(out);
        let _ = writeln!(out, "{:<21} {:>6} {:>12} {:>12} {:>12} {:1}", "cost", "size", "median", "min", "max", "!");
        for p in costs {
            let _ = writeln!(
                out,
                "{:<21} {:>6} {:>12} {:>12} {:>12} {:1}",
                p.dir,
                size_label(p.size),
                dur(p.s.median),
                dur(p.s.min),
                dur(p.s.max),
                unstable_mark(p)
            );
        }
    }
    for p in points.iter().filter(|p| p.kind == "find") {
        let _ = writeln!(out, "find with {:>6} live registrations: {:.0} ns per lookup{}", p.size, p.s.median * 1e9, trailing_mark(p));
    }
    for p in points.iter().chain(cuda).filter(|p| p.kind == "small-async") {
        let _ = writeln!(
            out,
            "{} small-{}: {} for 1000 copies, {} GB/s ({}){}",
            p.api,
            p.dir,
            dur(p.s.median),
            fmt_gbps(p.gbps()),
            p.note,
            trailing_mark(p)
        );
    }
    // After every table, so that it explains marks in all of them (costs, find and small-async
    // lines included: their points carry `unstable` in the JSON and CSV too).
    if points.iter().chain(cuda).any(|p| p.s.unstable()) {
        let _ = writeln!(out, "! unstable: the slowest timed iteration took over {}x the fastest", crate::stats::UNSTABLE_SPREAD);
    }
    out
}

/// The table's flag for a point whose spread is large.
fn unstable_mark(p: &Point) -> &'static str {
    if p.s.unstable() { "!" } else { "" }
}

/// The flag at the end of a one-line point (find, small-async).
fn trailing_mark(p: &Point) -> &'static str {
    if p.s.unstable() { "  !" } else { "" }
}

fn dur(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.2} s")
    } else if s >= 1e-3 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{:.1} us", s * 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::point;
    use crate::stats::summarize;

    fn pt(api: &'static str, path: &str, dir: &str, sm: bool, secs: f64) -> Point {
        let mut p = point(api, "copy", path, dir, 1 << 20, 1 << 20, summarize(&[secs]).unwrap());
        p.sm = sm;
        p
    }

    #[test]
    fn cuda_figures_pair_copy_engine_with_memcpy_and_sm_with_the_sm_copy() {
        // CUDA's SM point first, so a lookup that ignored `sm` would find it for the ce rows.
        let cuda =
            [pt("cuda", "pinned", "h2d", true, 2.0), pt("cuda", "pinned", "h2d", false, 1.0), pt("cuda", "device", "d2d", false, 3.0)];
        let of = |p: Point| cuda_of(&p, &cuda).map(|c| (c.sm, c.s.median));
        assert_eq!(of(pt("vulkan", "pinned", "h2d", false, 1.0)), Some((false, 1.0)));
        assert_eq!(of(pt("vulkan", "registered", "h2d", false, 1.0)), Some((false, 1.0)));
        assert_eq!(of(pt("vulkan", "pinned", "h2d", true, 1.0)), Some((true, 2.0)));
        assert_eq!(of(pt("vulkan", "registered", "h2d", true, 1.0)), Some((true, 2.0)));
        assert_eq!(of(pt("vulkan", "device", "d2d", false, 1.0)), Some((false, 3.0)));
        // CUDA's device-to-device cudaMemcpy (on the SMs) beside the copy kernel's row too;
        // no CUDA SM copy over pageable memory, none for bar.
        assert_eq!(of(pt("vulkan", "device", "d2d", true, 1.0)), Some((false, 3.0)));
        assert_eq!(of(pt("vulkan", "pinned", "d2h", true, 1.0)), None);
        assert_eq!(of(pt("vulkan", "bar", "h2d", false, 1.0)), None);
        // A CUDA SM point carries the testcase it compares with.
        assert_eq!(cuda[0].testcase(), "host_to_device_sm");
        assert_eq!(cuda[1].testcase(), "host_to_device_ce");
    }

    /// Times under a microsecond keep two decimals in both tables: a 50 ns point printed as
    /// `0.0 us` (a review's note).
    #[test]
    fn sub_microsecond_times_are_not_printed_as_zero() {
        let s = summarize(&[50e-9, 52e-9, 54e-9]).unwrap();
        let copy = point("vulkan", "copy", "bar", "h2d", 4096, 4096, s);
        let lat = point("vulkan", "latency", "bar", "h2d", 4096, 4096, s);
        let t = table(&[copy, lat], &[], None);
        assert!(t.contains(" 0.05 us"), "{t}");
        assert!(!t.contains(" 0.0 ") && !t.contains(" 0.0 us"), "{t}");
        assert_eq!(fmt_us(12.34e-6), "12.3");
    }

    /// Issue 14: points whose spread is large are flagged in the table, whatever their kind.
    /// (The cost table, find and small-async lines had no mark, and the legend came before
    /// the cost table.)
    #[test]
    fn every_unstable_point_is_marked_in_the_table_and_the_legend_comes_last() {
        let mk = |kind: &'static str, path: &str, dir: &str, size: u64, unstable: bool| {
            let s = summarize(&if unstable { vec![1e-3, 2e-3] } else { vec![1e-3, 1.1e-3] }).unwrap();
            assert_eq!(s.unstable(), unstable);
            point("vulkan", kind, path, dir, size, size.max(4096), s)
        };
        let mut points = Vec::new();
        for unstable in [false, true] {
            points.push(mk("copy", "pinned", "h2d", 4096, unstable));
            points.push(mk("latency", "pinned", "h2d", 4096, unstable));
            points.push(mk("cost", "pinned", "alloc_pinned", 4096, unstable));
            points.push(mk("find", "registered", "find", 100, unstable));
            points.push(mk("small-async", "pinned", "async-scattered", 4096, unstable));
        }
        // Distinguish each pair's lines: the stable point first, at a size the unstable one
        // does not share where a line would otherwise look the same.
        for p in points.iter_mut().skip(5) {
            p.size *= 2;
        }
        let t = table(&points, &[], None);
        let line_of = |p: &Point| -> String {
            let hit = |l: &&str| match p.kind {
                "copy" | "latency" => l.starts_with(&format!("{} ", p.testcase())) && l.contains(&format!(" {} ", size_label(p.size))),
                "cost" => l.starts_with(&format!("{} ", p.dir)) && l.contains(&format!(" {} ", size_label(p.size))),
                "find" => l.starts_with(&format!("find with {:>6} ", p.size)),
                _ => l.starts_with(&format!("vulkan small-{}:", p.dir)) && l.contains(&super::dur(p.s.median)),
            };
            let found: Vec<&str> = t.lines().filter(hit).collect();
            assert_eq!(found.len(), 1, "{} {}: {found:?}\n{t}", p.kind, p.size);
            found[0].to_string()
        };
        for p in &points {
            let l = line_of(p);
            assert_eq!(l.trim_end().ends_with('!') || l.contains(" ! "), p.s.unstable(), "{} {}: {l:?}\n{t}", p.kind, p.size);
        }
        assert!(t.trim_end().lines().last().unwrap().starts_with("! unstable"), "legend last:\n{t}");
        let stable: Vec<Point> = points.iter().filter(|p| !p.s.unstable()).cloned().collect();
        assert!(!table(&stable, &[], None).contains("! unstable"), "no legend without a mark");
    }
}
