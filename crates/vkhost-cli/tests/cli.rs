//! The `vkhost` binary on the default device (lavapipe in CI): devices, bench, check.

use serde_json::Value;
use std::process::Command;

fn vkhost(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vkhost")).args(args).env_remove("VKHOST_DEVICE").output().expect("run vkhost")
}

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("vkhost-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&d);
    d
}

#[test]
fn devices_json_lists_registration() {
    let o = vkhost(&["devices", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).expect("devices --json is JSON");
    let list = v.as_array().expect("an array");
    assert!(!list.is_empty());
    for d in list {
        for k in [
            "index",
            "name",
            "type",
            "vendor_id",
            "driver_name",
            "api_version",
            "memory_heaps",
            "memory_types",
            "queue_families",
            "host_registration",
        ] {
            assert!(d.get(k).is_some(), "missing {k}");
        }
    }
    if let Some(l) = list.iter().find(|d| d["name"].as_str().unwrap_or("").contains("llvmpipe")) {
        assert_eq!(l["host_registration"]["available"], true);
        assert_eq!(l["host_registration"]["alignment"], 4096);
        assert_eq!(l["host_registration"]["probed"], true);
    }
    let t = vkhost(&["devices"]);
    let text = String::from_utf8_lossy(&t.stdout);
    assert!(text.contains("host registration: available, alignment 4 KiB") || !text.contains("llvmpipe"), "{text}");
}

#[test]
fn bench_json_matches_schema_and_svg_is_written() {
    let (j, s) = (tmp("b.json"), tmp("b.svg"));
    let o = vkhost(&[
        "bench",
        "--sizes",
        "4K,64K,1M",
        "--iters",
        "2",
        "--budget",
        "0.2",
        "--no-costs",
        "--json",
        j.to_str().unwrap(),
        "--plot",
        s.to_str().unwrap(),
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}\n{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("all points verified"));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&j).unwrap()).expect("valid JSON");
    let points = v.as_array().expect("one array of point objects");
    let copies: Vec<&Value> = points.iter().filter(|p| p["kind"] == "copy").collect();
    // 3 sizes x (pinned, registered, pageable: 3 dirs; bar: 2 dirs)
    assert_eq!(copies.len(), 3 * (3 * 3 + 2), "{points:#?}");
    for p in points {
        for k in ["device", "driver", "path", "dir"] {
            assert!(p[k].is_string(), "{k} in {p}");
        }
        for k in ["size", "iters"] {
            assert!(p[k].is_u64(), "{k} in {p}");
        }
        for k in ["median_s", "min_s", "max_s"] {
            assert!(p[k].as_f64().is_some_and(|x| x > 0.0), "{k} in {p}");
        }
        assert!(p["min_s"].as_f64() <= p["median_s"].as_f64() && p["median_s"].as_f64() <= p["max_s"].as_f64());
        assert!(p["gbps"].is_number() || p["gbps"].is_null());
    }
    for p in &copies {
        assert_eq!(p["verified"], true, "{p}");
        let (size, med, g) = (p["size"].as_f64().unwrap(), p["median_s"].as_f64().unwrap(), p["gbps"].as_f64().unwrap());
        let moved = if p["dir"] == "bidir" { 2.0 * size } else { size };
        assert!((moved / med / 1e9 - g).abs() <= 1e-9 * g.max(1.0), "GB/s is bytes / median / 1e9: {p}");
    }
    assert!(points.iter().any(|p| p["kind"] == "small-async"));
    let svg = std::fs::read_to_string(&s).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("</svg>") && svg.contains("pinned h2d"));
    // The JSON re-plots.
    let s2 = tmp("replot.svg");
    let o = vkhost(&["plot", j.to_str().unwrap(), s2.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let svg2 = std::fs::read_to_string(&s2).unwrap();
    assert!(svg2.starts_with("<svg") && svg2.contains("registered d2h") && svg2.contains("1M"));
}

#[test]
fn planted_mismatch_exits_2() {
    let o = vkhost(&["bench", "--sizes", "4K", "--iters", "1", "--no-costs", "--paths", "pinned", "--dirs", "h2d", "--plant-mismatch"]);
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stdout));
    assert!(String::from_utf8_lossy(&o.stderr).contains("FAIL"));
    assert!(String::from_utf8_lossy(&o.stdout).contains("FAIL"));
}

#[test]
fn bench_costs_and_find() {
    let o = vkhost(&["bench", "--sizes", "4K,1M", "--iters", "2", "--budget", "0.1", "--paths", "pinned", "--dirs", "h2d"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}");
    for k in ["register", "unregister", "alloc_pinned", "free_pinned", "find with"] {
        assert!(out.contains(k), "missing {k}: {out}");
    }
}

#[test]
fn check_all_passes() {
    let o = vkhost(&["check", "--all"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("all checks passed") && !out.contains("FAIL"), "{out}");
}

#[test]
fn bad_device_index_is_an_error_not_a_panic() {
    let o = Command::new(env!("CARGO_BIN_EXE_vkhost")).args(["bench", "--quick"]).env("VKHOST_DEVICE", "99").output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no Vulkan device") && !err.contains("panicked"), "{err}");
    let o = Command::new(env!("CARGO_BIN_EXE_vkhost")).args(["check"]).env("VKHOST_DEVICE", "0").output().unwrap();
    assert!(o.status.success());
}
