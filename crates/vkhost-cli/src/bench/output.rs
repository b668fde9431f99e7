//! Output: the printed tables (copy points with the CUDA comparison columns, costs, find,
//! small-async) and the JSON record of one point.

use super::{Ctx, Point};
use crate::stats::{gbps, size_label};
use serde_json::{json, Value};

pub(super) fn to_json(cx: &Ctx, p: &Point) -> Value {
    let g = p.gbps();
    json!({
        "api": p.api,
        "kind": p.kind,
        "device": cx.device_name,
        "driver": cx.driver.trim(),
        "path": p.path,
        "dir": p.dir,
        "size": p.size,
        "iters": p.s.n,
        "median_s": p.s.median,
        "min_s": p.s.min,
        "max_s": p.s.max,
        "gbps": if g.is_finite() { json!(g) } else { Value::Null },
        "max_gbps": gbps(p.bytes_moved, p.s.min),
        "min_gbps": gbps(p.bytes_moved, p.s.max),
        "latency_us": if p.kind == "copy" && p.size <= 64 << 10 { json!(p.s.median * 1e6) } else { Value::Null },
        "verified": p.verified,
        "note": p.note,
        "extra": p.extra,
    })
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

pub(super) fn print_table(points: &[Point], cuda: &[Point]) {
    let cuda_of = |p: &Point| -> Option<&Point> {
        let path = match p.path.as_str() {
            "pinned" | "registered" => "pinned",
            "pageable" => "pageable",
            _ => return None,
        };
        cuda.iter().find(|c| c.kind == p.kind && c.path == path && c.dir == p.dir && c.size == p.size)
    };
    println!();
    println!(
        "{:<11} {:<5} {:>6} {:>9} {:>9} {:>9} {:>10} {:>6} {:>6} {:>9} {:>7}",
        "path", "dir", "size", "GB/s", "min", "max", "latency", "iters", "check", "CUDA GB/s", "ratio"
    );
    for p in points.iter().filter(|p| p.kind == "copy").chain(cuda.iter().filter(|p| p.kind == "copy")) {
        let g = p.gbps();
        let lat = if p.size <= 64 << 10 { format!("{:.1} us", p.s.median * 1e6) } else { String::new() };
        let (cg, ratio) = match (p.api, cuda_of(p)) {
            ("vulkan", Some(c)) => (fmt_gbps(c.gbps()), format!("{:.2}x", g / c.gbps())),
            _ => (String::new(), String::new()),
        };
        let check = match p.verified {
            Some(true) => "ok",
            Some(false) => "FAIL",
            None => "",
        };
        let path = if p.api == "cuda" { format!("cuda-{}", p.path) } else { p.path.clone() };
        println!(
            "{:<11} {:<5} {:>6} {:>9} {:>9} {:>9} {:>10} {:>6} {:>6} {:>9} {:>7}{}",
            path,
            p.dir,
            size_label(p.size),
            fmt_gbps(g),
            fmt_gbps(gbps(p.bytes_moved, p.s.max)),
            fmt_gbps(gbps(p.bytes_moved, p.s.min)),
            lat,
            p.s.n,
            check,
            cg,
            ratio,
            if p.note.is_empty() { String::new() } else { format!("  ({})", p.note) }
        );
    }
    let costs: Vec<&Point> = points.iter().filter(|p| p.kind == "cost").collect();
    if !costs.is_empty() {
        println!();
        println!("{:<14} {:>6} {:>12} {:>12} {:>12}", "cost", "size", "median", "min", "max");
        for p in costs {
            println!("{:<14} {:>6} {:>12} {:>12} {:>12}", p.dir, size_label(p.size), dur(p.s.median), dur(p.s.min), dur(p.s.max));
        }
    }
    for p in points.iter().filter(|p| p.kind == "find") {
        println!("find with {:>6} live registrations: {:.0} ns per lookup", p.size, p.s.median * 1e9);
    }
    for p in points.iter().chain(cuda).filter(|p| p.kind == "small-async") {
        println!("{} small-{}: {} for 1000 copies, {} GB/s ({})", p.api, p.dir, dur(p.s.median), fmt_gbps(p.gbps()), p.note);
    }
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
