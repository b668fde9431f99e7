//! `--compare OLD.json`: this run's points against an earlier run's, new/old, matched by api,
//! testcase, size, dir and variant, so that a regression shows at a glance. (The dir tells apart
//! the operations of `costs` and `find`, which share a testcase and a size: without it every
//! cost was compared with the old `register`.)

use crate::devices::anyhow_free::Result;
use crate::stats::size_label;
use serde_json::Value;
use std::path::Path;

/// A change smaller than this (either way) is printed without a verdict.
const NOISE: f64 = 0.10;

/// Reads a `--json` file of this schema (`{run, results}`); the old bare array is refused.
pub(super) fn load(f: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(f).map_err(|e| format!("--compare {}: {e}", f.display()))?;
    let v: Value = serde_json::from_str(&text).map_err(|e| format!("--compare {}: {e}", f.display()))?;
    if v.is_array() {
        return Err(format!("--compare {}: a bare array is the JSON of vkhost before schema version 2; re-run it", f.display()).into());
    }
    if v["matrix"].is_array() {
        return Err(format!("--compare {}: a `vkhost bench --devices` matrix, which --compare does not read", f.display()).into());
    }
    if !v["results"].is_array() || !v["run"].is_object() {
        return Err(format!("--compare {}: no `run` object and `results` array (not a `vkhost bench --json` file?)", f.display()).into());
    }
    if v["results"].as_array().is_some_and(|r| r.is_empty()) {
        return Err(format!("--compare {}: no results to compare with", f.display()).into());
    }
    Ok(v)
}

/// A point's identity across runs: (api, testcase, size, dir, variant).
fn key(r: &Value) -> (String, String, u64, String, String) {
    let s = |k: &str| r[k].as_str().unwrap_or_default().to_string();
    (s("api"), s("testcase"), r["size"].as_u64().unwrap_or(0), s("dir"), s("variant"))
}

/// The figures an old and a new point are judged by, (old, new, more is better, unit): the
/// latency in us for latency points; GB/s where both points have it; else both median times
/// (costs, find, and a point whose `gbps` is null on one side: a zero median writes null). One
/// kind of figure for both: an old GB/s against a new median in us made a ratio of nothing.
fn figures(o: &Value, n: &Value) -> Option<(f64, f64, bool, &'static str)> {
    if o["kind"] == "latency" || n["kind"] == "latency" {
        return Some((o["latency_us"].as_f64()?, n["latency_us"].as_f64()?, false, "us"));
    }
    if let (Some(go), Some(gn)) = (o["gbps"].as_f64(), n["gbps"].as_f64()) {
        return Some((go, gn, true, "GB/s"));
    }
    let us = |r: &Value| r["median_s"].as_f64().map(|t| t * 1e6);
    Some((us(o)?, us(n)?, false, "us"))
}

/// The verdict on a new/old ratio of a figure: "faster", "SLOWER", or nothing within NOISE.
pub fn verdict(ratio: f64, more_is_better: bool) -> &'static str {
    let better = if more_is_better { ratio } else { 1.0 / ratio };
    if better < 1.0 - NOISE {
        "SLOWER"
    } else if better > 1.0 + NOISE {
        "faster"
    } else {
        ""
    }
}

/// Prints the comparison table; points only one run has are counted, not listed.
pub(super) fn print(old: &Value, new: &[Value]) {
    for line in table(old, new) {
        println!("{line}");
    }
}

/// The lines [`print`] prints.
fn table(old: &Value, new: &[Value]) -> Vec<String> {
    let mut out = Vec::new();
    let olds = old["results"].as_array().map(Vec::as_slice).unwrap_or_default();
    let run = &old["run"];
    out.push(String::new());
    out.push(format!(
        "compare with {} (commit {}, {}):",
        run["time"].as_str().unwrap_or("?"),
        run["git_commit"].as_str().unwrap_or("?"),
        run["device"]["name"].as_str().unwrap_or("?")
    ));
    out.push(format!("{:<40} {:>6} {:>10} {:>10} {:>5} {:>7}", "testcase", "size", "old", "new", "unit", "new/old"));
    let (mut matched, mut slower, mut unjudged) = (0, 0, 0);
    for n in new {
        let k = key(n);
        let Some(o) = olds.iter().find(|o| key(o) == k) else { continue };
        // In both runs, but without a figure to judge on one side (a failed point's nulls, an
        // old time of zero): counted below, so that no point of either run goes unmentioned.
        let Some((fo, fnew, more, unit)) = figures(o, n).filter(|f| f.0 > 0.0) else {
            unjudged += 1;
            continue;
        };
        matched += 1;
        let ratio = fnew / fo;
        let v = verdict(ratio, more);
        slower += (v == "SLOWER") as usize;
        let shaky = if o["unstable"] == true || n["unstable"] == true { " (unstable)" } else { "" };
        let mut name = if k.0 == "vulkan" { k.1.clone() } else { format!("{}:{}", k.0, k.1) };
        // The operation of a cost or find point (a copy's direction is in its testcase name).
        if !["h2d", "d2h", "bidir", "d2d", ""].contains(&k.3.as_str()) {
            name += &format!(" {}", k.3);
        }
        if !k.4.is_empty() {
            name += &format!(" [{}]", k.4);
        }
        out.push(format!("{:<40} {:>6} {:>10.3} {:>10.3} {:>5} {:>6.2}x  {v}{shaky}", name, size_label(k.2), fo, fnew, unit, ratio));
    }
    let only_new = new.iter().filter(|n| !olds.iter().any(|o| key(o) == key(n))).count();
    let only_old = olds.iter().filter(|o| !new.iter().any(|n| key(n) == key(o))).count();
    let unjudged = if unjudged > 0 { format!(", {unjudged} in both without a figure to compare") } else { String::new() };
    out.push(format!(
        "{matched} point(s) compared, {slower} slower by over {:.0}%; {only_new} only in this run, {only_old} only in the old one{unjudged}",
        NOISE * 100.0
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_know_which_way_is_better() {
        assert_eq!(verdict(0.8, true), "SLOWER");
        assert_eq!(verdict(1.2, true), "faster");
        assert_eq!(verdict(1.05, true), "");
        // Times: more is worse.
        assert_eq!(verdict(1.25, false), "SLOWER");
        assert_eq!(verdict(0.8, false), "faster");
    }

    /// Cost points share a testcase and a size; each is compared with its own old figure (they
    /// were all compared with the old `register`: "free_pinned 0.07x faster").
    #[test]
    fn cost_operations_compare_with_their_own_old_figures() {
        let cost = |op: &str, us: f64| {
            serde_json::json!({"api": "vulkan", "testcase": "costs", "kind": "cost", "size": 4096, "dir": op,
                               "variant": null, "gbps": null, "median_s": us * 1e-6})
        };
        let old = serde_json::json!({"run": {}, "results": [cost("register", 22.0), cost("free_pinned", 2.0)]});
        let new = [cost("register", 22.0), cost("free_pinned", 2.0)];
        let lines = table(&old, &new);
        let rows: Vec<&String> = lines.iter().filter(|l| l.starts_with("costs")).collect();
        assert_eq!(rows.len(), 2, "{lines:#?}");
        assert!(rows.iter().all(|r| r.contains("1.00x")), "{lines:#?}");
        assert!(rows[0].starts_with("costs register") && rows[1].starts_with("costs free_pinned"), "{lines:#?}");
    }

    /// A copy point whose new `gbps` is null (a zero median: `gbps` of an infinite rate is
    /// written as null) was judged by its median time in us against the old GB/s, with the old
    /// point's "more is better": a point that got faster than the clock reads read as
    /// "0.00x SLOWER" in GB/s. Both figures are now of one kind (here the median times).
    #[test]
    fn a_point_without_gbps_on_one_side_is_compared_by_time_on_both() {
        let copy = |gbps: Option<f64>, secs: f64| {
            serde_json::json!({"api": "vulkan", "testcase": "host_to_device_ce", "kind": "copy", "size": 1 << 20,
                               "dir": "h2d", "variant": null, "gbps": gbps, "median_s": secs})
        };
        // Old: 100 us (10.49 GB/s); new: 50 us, but without gbps (as a file of another writer,
        // or a zero time, has it).
        let old = serde_json::json!({"run": {}, "results": [copy(Some(10.49), 100e-6)]});
        let lines = table(&old, &[copy(None, 50e-6)]);
        let row = lines.iter().find(|l| l.starts_with("host_to_device_ce")).expect("a row");
        assert!(row.contains(" us ") && row.contains("0.50x") && row.contains("faster"), "{lines:#?}");
        assert!(lines.last().unwrap().starts_with("1 point(s) compared, 0 slower"), "{lines:#?}");
        // The reverse (old without gbps, new with it) likewise.
        let old = serde_json::json!({"run": {}, "results": [copy(None, 100e-6)]});
        let lines = table(&old, &[copy(Some(20.97), 50e-6)]);
        let row = lines.iter().find(|l| l.starts_with("host_to_device_ce")).expect("a row");
        assert!(row.contains(" us ") && row.contains("0.50x") && row.contains("faster"), "{lines:#?}");
        // A zero new time is not "SLOWER".
        let old = serde_json::json!({"run": {}, "results": [copy(Some(10.49), 100e-6)]});
        let lines = table(&old, &[copy(None, 0.0)]);
        assert!(!lines.iter().any(|l| l.contains("SLOWER")), "{lines:#?}");
        assert!(lines.last().unwrap().contains("0 slower"), "{lines:#?}");
    }

    /// A point both runs have but one cannot judge (a failed point writes nulls; an old time of
    /// zero makes no ratio) is counted in the summary; it was in none of its counts.
    #[test]
    fn a_point_in_both_runs_without_a_figure_is_counted() {
        let copy = |gbps: Option<f64>, secs: Option<f64>| {
            serde_json::json!({"api": "vulkan", "testcase": "host_to_device_ce", "kind": "copy", "size": 1 << 20,
                               "dir": "h2d", "variant": null, "gbps": gbps, "median_s": secs})
        };
        let old = serde_json::json!({"run": {}, "results": [copy(Some(10.49), Some(100e-6))]});
        let lines = table(&old, &[copy(None, None)]);
        assert_eq!(
            lines.last().unwrap(),
            "0 point(s) compared, 0 slower by over 10%; 0 only in this run, 0 only in the old one, 1 in both without a figure to compare"
        );
        let old = serde_json::json!({"run": {}, "results": [copy(None, Some(0.0))]});
        let lines = table(&old, &[copy(None, Some(50e-6))]);
        assert!(lines.last().unwrap().ends_with(", 1 in both without a figure to compare"), "{lines:#?}");
    }
}
