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
        // A CPU device cuts copies into 256 KiB regions (unless the environment says otherwise).
        if std::env::var_os("VKHOST_COPY_PIECE").is_none() {
            assert_eq!(l["copy_piece_bytes"], 256 << 10, "{l}");
        }
        assert_eq!(l["host_registration"]["alignment"], 4096);
        assert_eq!(l["host_registration"]["probed"], true);
    }
    let t = vkhost(&["devices"]);
    let text = String::from_utf8_lossy(&t.stdout);
    assert!(text.contains("host registration: available, alignment 4 KiB") || !text.contains("llvmpipe"), "{text}");
}

/// One `bench --quick` run (every testcase), shared by the tests that read its outputs.
struct QuickRun {
    json_path: std::path::PathBuf,
    json: Value,
    csv: String,
    png: Vec<u8>,
    stdout: String,
}

fn quick_run() -> &'static QuickRun {
    static RUN: std::sync::OnceLock<QuickRun> = std::sync::OnceLock::new();
    RUN.get_or_init(|| {
        let (j, c, p) = (tmp("quick.json"), tmp("quick.csv"), tmp("quick.png"));
        let o = vkhost(&[
            "bench",
            "--quick",
            "--iters",
            "3",
            "--budget",
            "0.1",
            "--json",
            j.to_str().unwrap(),
            "--csv",
            c.to_str().unwrap(),
            "--plot",
            p.to_str().unwrap(),
        ]);
        let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(o.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&o.stderr));
        let json = serde_json::from_str(&std::fs::read_to_string(&j).unwrap()).expect("valid JSON");
        QuickRun { json_path: j, json, csv: std::fs::read_to_string(&c).unwrap(), png: std::fs::read(&p).unwrap(), stdout }
    })
}

/// Validates `v` against `schema`, for the subset of JSON Schema (2020-12) that
/// docs/bench.schema.json and docs/bench-devices.schema.json use. Any other keyword fails the test, so the schema cannot grow a
/// rule this validator would silently skip.
fn validate(schema: &Value, v: &Value, at: &str, errors: &mut Vec<String>) {
    let Some(obj) = schema.as_object() else { return errors.push(format!("{at}: schema is not an object")) };
    for (k, rule) in obj {
        match k.as_str() {
            "$schema" | "$id" | "title" | "description" => {}
            "type" => {
                let types: Vec<&str> = match rule {
                    Value::String(t) => vec![t.as_str()],
                    Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
                    _ => vec![],
                };
                let ok = types.iter().any(|t| match *t {
                    "object" => v.is_object(),
                    "array" => v.is_array(),
                    "string" => v.is_string(),
                    "number" => v.is_number(),
                    "integer" => v.is_u64() || v.is_i64(),
                    "boolean" => v.is_boolean(),
                    "null" => v.is_null(),
                    other => panic!("unknown type {other}"),
                });
                if !ok {
                    errors.push(format!("{at}: {v} is not of type {rule}"));
                }
            }
            "required" => {
                for r in rule.as_array().unwrap().iter().filter_map(Value::as_str) {
                    if v.is_object() && v.get(r).is_none() {
                        errors.push(format!("{at}: missing {r}"));
                    }
                }
            }
            "properties" => {
                if let Some(o) = v.as_object() {
                    for (name, sub) in rule.as_object().unwrap() {
                        if let Some(x) = o.get(name) {
                            validate(sub, x, &format!("{at}.{name}"), errors);
                        }
                    }
                }
            }
            "additionalProperties" => {
                assert_eq!(rule, &Value::Bool(false), "only additionalProperties: false is supported");
                let known = obj.get("properties").and_then(Value::as_object);
                if let Some(o) = v.as_object() {
                    for name in o.keys().filter(|n| !known.is_some_and(|k| k.contains_key(*n))) {
                        errors.push(format!("{at}: unexpected field {name}"));
                    }
                }
            }
            "items" => {
                for (i, x) in v.as_array().into_iter().flatten().enumerate() {
                    validate(rule, x, &format!("{at}[{i}]"), errors);
                }
            }
            "enum" => {
                if !rule.as_array().unwrap().contains(v) {
                    errors.push(format!("{at}: {v} not in {rule}"));
                }
            }
            "const" => {
                if rule != v {
                    errors.push(format!("{at}: {v} is not {rule}"));
                }
            }
            "minimum" => {
                if let (Some(x), Some(m)) = (v.as_f64(), rule.as_f64()) {
                    if x < m {
                        errors.push(format!("{at}: {x} < minimum {m}"));
                    }
                }
            }
            other => panic!("{at}: the schema uses {other:?}, which this validator does not implement"),
        }
    }
}

#[test]
fn quick_json_validates_against_the_documented_schema() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/bench.schema.json");
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).expect("the schema is JSON");
    let run = quick_run();
    let mut errors = Vec::new();
    validate(&schema, &run.json, "$", &mut errors);
    assert!(errors.is_empty(), "{}", errors.join("\n"));
    // The validator does catch things.
    let mut bad = run.json.clone();
    bad["results"][0]["unexpected"] = Value::Bool(true);
    bad["run"]["schema_version"] = 1.into();
    let mut errors = Vec::new();
    validate(&schema, &bad, "$", &mut errors);
    assert_eq!(errors.len(), 2, "{errors:?}");
}

#[test]
fn quick_json_has_run_metadata_and_statistics() {
    let q = quick_run();
    let run = &q.json["run"];
    assert_eq!(run["schema_version"], 2);
    assert_eq!(run["vkhost_version"], env!("CARGO_PKG_VERSION"));
    assert!(run["git_commit"].as_str().is_some_and(|c| c == "unknown" || c.len() >= 40), "{run}");
    let t = run["time"].as_str().unwrap();
    assert!(t.len() == 20 && t.ends_with('Z') && &t[10..11] == "T" && t.starts_with("20"), "{t}");
    let host = &run["host"];
    assert!(host["hostname"].as_str().is_some_and(|h| !h.is_empty()));
    assert!(host["cpu_count"].as_u64().unwrap() >= 1);
    assert_eq!(host["kernel"]["sysname"], "Linux");
    assert!(host["numa_nodes"].is_array());
    assert!(run["affinity"]["cpus"].as_str().is_some_and(|c| !c.is_empty()));
    let dev = &run["device"];
    for k in ["name", "driver_name", "driver_info", "vulkan_version"] {
        assert!(dev[k].is_string(), "{k}: {dev}");
    }
    if dev["name"].as_str().unwrap().contains("llvmpipe") {
        // A CPU driver has no PCI device: null figures, with the reason.
        assert!(run["pcie"]["generation"].is_null() && run["pcie"]["reason"].as_str().unwrap().contains("pci_bus_info"));
        assert_eq!(run["affinity"]["source"], "none");
        assert!(q.stdout.contains("PCIe link: unknown"));
    }
    let results = q.json["results"].as_array().unwrap();
    let names: std::collections::BTreeSet<&str> = results.iter().map(|r| r["testcase"].as_str().unwrap()).collect();
    let listed: Vec<&str> = run["testcases"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    // Every testcase ran (lavapipe has a BAR-like memory type and host registration).
    assert_eq!(names, listed.iter().copied().collect(), "{names:?}");
    for r in results {
        let f = |k: &str| r[k].as_f64().unwrap();
        assert!(f("min_s") <= f("median_s") && f("median_s") <= f("max_s"), "{r}");
        assert!(f("min_s") <= f("mean_s") && f("mean_s") <= f("max_s") && f("stddev_s") >= 0.0, "{r}");
        assert_eq!(r["unstable"], f("max_s") / f("min_s") > 1.2, "{r}");
        if r["kind"] == "copy" {
            assert_eq!(r["verified"], true, "{r}");
            let g = f("gbps");
            assert!((f("bytes_moved") / f("median_s") / 1e9 - g).abs() <= 1e-9 * g.max(1.0), "GB/s is bytes / median / 1e9: {r}");
        }
        if r["kind"] == "latency" {
            assert!((f("latency_us") - f("median_s") * 1e6).abs() < 1e-6, "{r}");
        }
    }
    // The floor: both directions at its four sizes, unverified (it moves the library's own
    // buffers), at least 50 submissions each whatever --iters says, and vkhost's own copy of
    // the same size, timed alternately with it, over it.
    let floors: Vec<&Value> = results.iter().filter(|r| r["path"] == "floor").collect();
    assert_eq!(floors.len(), 8, "{floors:?}");
    for r in &floors {
        assert!(r["kind"] == "latency" && r["verified"].is_null() && r["iters"].as_u64().unwrap() >= 50, "{r}");
        assert!(r["testcase"].as_str().unwrap().starts_with("latency_floor_"), "{r}");
        let note = r["note"].as_str().unwrap();
        let ce = if r["dir"] == "h2d" { "host_to_device_ce" } else { "device_to_host_ce" };
        assert!(note.contains(" queue") && note.contains(ce), "{r}");
        let (ours, over) = (r["extra"]["vkhost_median_s"].as_f64().unwrap(), r["extra"]["vkhost_over_floor_us"].as_f64().unwrap());
        assert!(ours > 0.0 && ((ours - r["median_s"].as_f64().unwrap()) * 1e6 - over).abs() < 1e-6, "{r}");
    }
    assert!(q.stdout.contains("all points verified but the 8 latency floor point(s)"), "{}", q.stdout);
    // Every point that moves the bench's bytes was checked: the small-async rows, the
    // synchronous ones too, and every copy; unchecked are only the floor and the costs.
    for r in results.iter().filter(|r| !(r["kind"] == "cost" || r["path"] == "floor")) {
        assert_eq!(r["verified"], true, "{r}");
    }
    // Pageable copies carry their CPU cost, bidir too.
    for r in results.iter().filter(|r| r["path"] == "pageable" && r["kind"] == "copy") {
        assert!(r["extra"]["cpu_cores"].as_f64().is_some_and(|c| c > 0.0), "{r}");
        assert!(r["note"].as_str().unwrap().contains("CPU "), "{r}");
    }
}

#[test]
fn csv_has_a_header_and_a_row_per_point() {
    let q = quick_run();
    let lines: Vec<&str> = q.csv.lines().collect();
    assert!(
        lines[0].starts_with("testcase,api,kind,path,dir,variant,size,iters,median_s,mean_s,stddev_s,min_s,max_s,gbps"),
        "{}",
        lines[0]
    );
    assert_eq!(lines.len() - 1, q.json["results"].as_array().unwrap().len());
    assert!(lines.iter().any(|l| l.starts_with("host_to_device_ce,vulkan,copy,pinned,h2d,,4096,")), "{}", q.csv);
}

#[test]
fn plots_png_and_replots_the_json() {
    let q = quick_run();
    assert!(q.png.starts_with(b"\x89PNG\r\n\x1a\n") && q.png.len() > 10_000, "a PNG of {} bytes", q.png.len());
    let s = tmp("replot.svg");
    let o = vkhost(&["plot", q.json_path.to_str().unwrap(), s.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let svg = std::fs::read_to_string(&s).unwrap();
    // "pinned sm": the replot knows the copy kernel's points from their testcase.
    for want in [
        "<svg",
        "host to device (h2d)",
        "device to host (d2h)",
        "bidir",
        "device to device (d2d)",
        "latency",
        "registered",
        "pageable",
        "pinned sm",
        "device ce",
        "16M",
    ] {
        assert!(svg.contains(want), "missing {want}");
    }
    // The bare array of schema version 1 is refused with a reason.
    let old = tmp("old.json");
    std::fs::write(&old, "[]").unwrap();
    let o = vkhost(&["plot", old.to_str().unwrap(), s.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("schema version 2"));
}

#[test]
fn list_prints_every_testcase_with_a_description() {
    let o = vkhost(&["bench", "--list"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}");
    for t in [
        "host_to_device_ce",
        "device_to_host_ce",
        "bidir_ce",
        "host_to_device_bar",
        "host_to_device_registered_ce",
        "device_to_host_pageable_ce",
        "latency_host_to_device",
        "latency_device_to_host",
        "latency_floor_host_to_device",
        "latency_floor_device_to_host",
        "small_async",
        "small_async_scattered",
        "costs",
        "host_to_device_sm",
        "device_to_host_sm",
        "host_to_device_registered_sm",
        "device_to_host_registered_sm",
        "device_to_device_ce",
        "device_to_device_sm",
    ] {
        let line = out.lines().find(|l| l.split_whitespace().next() == Some(t)).unwrap_or_else(|| panic!("{t} not listed: {out}"));
        assert!(line.split_whitespace().count() > 3, "{t} has no description: {line}");
    }
}

#[test]
fn unknown_testcase_is_an_error_listing_valid_ones() {
    let o = vkhost(&["bench", "-t", "host_to_device_ce,warp_drive"]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("warp_drive") && err.contains("host_to_device_ce") && err.contains("small_async_scattered"), "{err}");
}

fn results_of(j: &std::path::Path) -> Vec<Value> {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(j).unwrap()).unwrap();
    v["results"].as_array().unwrap().clone()
}

#[test]
fn t_selects_exact_names_and_prefixes_and_flush_cache_is_recorded() {
    let j = tmp("sel.json");
    let o = vkhost(&[
        "bench",
        "-t",
        "host_to_device",
        "-t",
        "latency_device_to_host",
        "--sizes",
        "4K,64K",
        "--iters",
        "2",
        "--budget",
        "0.05",
        "--flush-cache",
        "--cpu",
        "0",
        "--json",
        j.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got: std::collections::BTreeSet<String> = results_of(&j).iter().map(|r| r["testcase"].as_str().unwrap().to_string()).collect();
    let want: std::collections::BTreeSet<String> = [
        "host_to_device_ce",
        "host_to_device_registered_ce",
        "host_to_device_pageable_ce",
        "host_to_device_bar",
        "host_to_device_sm",
        "host_to_device_registered_sm",
        "latency_device_to_host",
    ]
    .map(String::from)
    .into();
    assert_eq!(got, want);
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&j).unwrap()).unwrap();
    assert!(v["run"]["flush_cache_bytes"].as_u64().unwrap() > 0);
    assert_eq!(v["run"]["affinity"]["source"], "--cpu");
    assert_eq!(v["run"]["affinity"]["cpus"], "0");
    // A CPU list the kernel refuses is an error, not a silent unpinned run.
    let o = vkhost(&["bench", "-t", "host_to_device_ce", "--sizes", "4K", "--cpu", "4000"]);
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stdout));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--cpu 4000"));
}

/// The copy kernel's and the device-to-device testcases on lavapipe: `-t` by exact name and by
/// prefix, every point verified, bytes counted once, no link share for d2d, and the JSON valid.
#[test]
fn sm_and_d2d_testcases_verify() {
    let j = tmp("sm.json");
    let o =
        vkhost(&["bench", "-t", "host_to_device_sm", "-t", "device_to_device", "--quick", "--iters", "2", "--json", j.to_str().unwrap()]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}\n{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("all points verified"), "{out}");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&j).unwrap()).unwrap();
    let listed: Vec<&str> = v["run"]["testcases"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    assert_eq!(listed, ["host_to_device_sm", "device_to_device_ce", "device_to_device_sm"]);
    let results = v["results"].as_array().unwrap();
    let sizes = v["run"]["sizes"].as_array().unwrap().len();
    for t in &listed {
        let pts: Vec<&Value> = results.iter().filter(|r| r["testcase"] == *t).collect();
        assert_eq!(pts.len(), sizes, "{t}: a point per size");
        for r in pts {
            assert_eq!(r["verified"], true, "{r}");
            assert_eq!(r["kind"], "copy", "{r}");
            assert_eq!(r["bytes_moved"], r["size"], "size counted once: {r}");
            let (path, dir) = if *t == "host_to_device_sm" { ("pinned", "h2d") } else { ("device", "d2d") };
            assert_eq!((r["path"].as_str().unwrap(), r["dir"].as_str().unwrap()), (path, dir), "{r}");
            if dir == "d2d" {
                assert!(r["link_pct"].is_null(), "{r}");
            }
            if t.ends_with("_sm") {
                assert!(r["extra"]["kernel"].as_str().is_some_and(|k| k.starts_with("copy")), "{r}");
            }
        }
    }
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/bench.schema.json")).unwrap())
            .unwrap();
    let mut errors = Vec::new();
    validate(&schema, &v, "$", &mut errors);
    assert!(errors.is_empty(), "{}", errors.join("\n"));
    for l in ["host_to_device_sm ", "device_to_device_ce ", "device_to_device_sm "] {
        assert!(out.lines().any(|x| x.starts_with(l) && x.contains(" ok")), "no {l} row: {out}");
    }
}

/// `--dirs d2d` keeps the device-to-device testcases (and small_async, which --dirs leaves
/// alone); `--paths pinned --dirs d2d` leaves nothing, an error. A planted mismatch in an sm
/// point exits 2.
#[test]
fn dirs_and_paths_filter_the_new_testcases() {
    let j = tmp("d2d-dirs.json");
    let o = vkhost(&["bench", "--dirs", "d2d", "--no-costs", "--sizes", "4K", "--iters", "1", "--json", j.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&j).unwrap()).unwrap();
    let listed: Vec<&str> = v["run"]["testcases"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    assert_eq!(listed, ["device_to_device_ce", "device_to_device_sm", "small_async", "small_async_scattered"]);
    let o = vkhost(&["bench", "-t", "device_to_device", "--paths", "pinned"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no testcase left"));
    let o = vkhost(&["bench", "-t", "device_to_host_registered_sm", "--sizes", "4K", "--iters", "1", "--plant-mismatch"]);
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stdout));
    assert!(String::from_utf8_lossy(&o.stderr).contains("FAIL device_to_host_registered_sm 4K"));
}

#[test]
fn demo_pipeline_matches_the_cpu() {
    let o = vkhost(&["demo", "pipeline"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}\n{}", String::from_utf8_lossy(&o.stderr));
    for v in ["serial", "pipelined", "zero-copy"] {
        assert!(out.lines().any(|l| l.trim_start().starts_with(v) && l.ends_with("matches the CPU")), "{v}: {out}");
    }
    // A wrong result is a failure, with its exit code.
    let o = vkhost(&["demo", "pipeline", "--mib", "4", "--chunks", "3", "--plant-mismatch"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert_eq!(out.matches("WRONG").count(), 3, "{out}");
    // Registrations imported in 64 KiB pieces: the zero-copy kernel's host bindings are cut
    // where a piece ends (up to `665758d` it failed with NotRegistered; found by a review).
    let o = Command::new(env!("CARGO_BIN_EXE_vkhost"))
        .args(["demo", "pipeline", "--mib", "2", "--chunks", "3"])
        .env_remove("VKHOST_DEVICE")
        .env("VKHOST_IMPORT_PIECE", "65536")
        .output()
        .expect("run vkhost");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}\n{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.lines().any(|l| l.trim_start().starts_with("zero-copy") && l.ends_with("matches the CPU")), "{out}");
}

#[test]
fn compare_prints_new_over_old_per_point() {
    let q = quick_run();
    let o = vkhost(&[
        "bench",
        "-t",
        "host_to_device_ce,latency_host_to_device",
        "--sizes",
        "4K,64K",
        "--iters",
        "2",
        "--budget",
        "0.05",
        "--compare",
        q.json_path.to_str().unwrap(),
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}\n{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("compare with"), "{out}");
    let rows: Vec<&str> = out.lines().filter(|l| l.starts_with("host_to_device_ce ") && l.contains('x')).collect();
    assert_eq!(rows.len(), 2, "{out}");
    // 2 sizes of host_to_device_ce and 4 of latency_host_to_device match the quick run.
    assert!(out.contains("6 point(s) compared"), "{out}");
    let old = tmp("cmp-old.json");
    std::fs::write(&old, "[]").unwrap();
    let o = vkhost(&["bench", "-t", "costs", "--compare", old.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("bare array"));
    // A run with nothing in it compares with nothing: refused before measuring.
    for (text, says) in [(r#"{"run":{},"results":[]}"#, "no results to compare with"), (r#"{"results":[{}]}"#, "no `run` object")] {
        std::fs::write(&old, text).unwrap();
        let o = vkhost(&["bench", "-t", "costs", "--compare", old.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(1), "{text}");
        assert!(String::from_utf8_lossy(&o.stderr).contains(says), "{text}: {}", String::from_utf8_lossy(&o.stderr));
    }
}

/// Runs `vkhost ARGS`, waits for a line of its stdout that `ready` accepts, then `pause`, then
/// sends it SIGINT; returns its exit code and the lines it printed after `ready`'s.
fn interrupted(args: &[&str], ready: impl Fn(&str) -> bool, pause: std::time::Duration) -> (Option<i32>, Vec<String>) {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(env!("CARGO_BIN_EXE_vkhost"))
        .args(args)
        .env_remove("VKHOST_DEVICE")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(lines.by_ref().map_while(Result::ok).any(|l| ready(&l)), "no ready line");
    std::thread::sleep(pause);
    // SAFETY: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) }, 0);
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    (child.wait().unwrap().code(), rest)
}

#[test]
fn ctrl_c_writes_the_points_measured_so_far() {
    let j = tmp("int.json");
    let sizes = "4K,8K,16K,32K,64K,128K,256K,512K,1M,2M,4M,8M,16M";
    // Every point runs its whole 1 s budget (100 000 copies take longer at any size), so the
    // 26 points take 26 s and the interrupt lands early whatever the machine's speed. With
    // 1000 iterations and 0.3 s an idle lavapipe finished the sweep before the interrupt
    // (all 26 points in 1.8 s).
    let args = ["bench", "-t", "host_to_device_ce,device_to_host_ce", "--sizes", sizes, "--iters", "100000", "--budget", "1"];
    // Measuring starts after the header; let it measure a point or two.
    let (code, rest) = interrupted(
        &[&args[..], &["--json", j.to_str().unwrap()]].concat(),
        |l| l.starts_with("CPUs:"),
        std::time::Duration::from_millis(1500),
    );
    assert_eq!(code, Some(130), "{rest:?}");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&j).unwrap()).unwrap();
    assert_eq!(v["run"]["interrupted"], true);
    let n = v["results"].as_array().unwrap().len();
    assert!((1..26).contains(&n), "{n} points");
}

/// Ctrl-C in a `--devices` run: the rows measured are printed, then "interrupted" and exit 130,
/// as in the single-device sweep (it skipped the rest silently and exited 0; found by an audit).
#[test]
fn ctrl_c_in_the_devices_matrix_exits_130() {
    // Interrupted right after the first row measured.
    let j = tmp("matrix-int.json");
    let (code, rest) = interrupted(
        &["bench", "--devices", "0", "--sizes", "4K,64K,1M,4M,16M", "--iters", "1000", "--budget", "0.3", "--json", j.to_str().unwrap()],
        |l| l.starts_with("pinned "),
        std::time::Duration::ZERO,
    );
    assert_eq!(code, Some(130), "{rest:?}");
    assert!(rest.iter().any(|l| l.starts_with("interrupted")), "{rest:?}");
    assert!(!rest.iter().any(|l| l.starts_with("pageable ")), "rows measured after the interrupt: {rest:?}");
    // The JSON holds the rows printed, and says the run was cut short.
    let v = json_of(&j);
    assert_eq!(v["run"]["interrupted"], true);
    let printed = rest.iter().filter(|l| l.starts_with("pinned ") || l.starts_with("registered ")).count() + 1;
    let rows = v["matrix"].as_array().unwrap().len();
    assert!(rows == printed && rows < 30, "{rows} rows in the JSON, {printed} printed: {rest:?}");
}

/// Standard output closed early (`vkhost bench | head -1`): no panic, and `--json` still
/// written (a backtrace and exit 101 lost the run's files; found by an audit).
#[test]
fn a_closed_stdout_is_no_panic_and_the_json_is_written() {
    let j = tmp("closed-stdout.json");
    let spawn = |testcases: &str| {
        let _ = std::fs::remove_file(&j);
        Command::new(env!("CARGO_BIN_EXE_vkhost"))
            .args(["bench", "-t", testcases, "--sizes", "4K", "--iters", "1", "--json", j.to_str().unwrap()])
            .env_remove("VKHOST_DEVICE")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut child = spawn("latency_host_to_device");
    // Closed before the first write: every write to stdout meets a closed pipe (reading a line
    // first could let the rest fit in the pipe's buffer, and the test pass without the fix).
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(0), "{err}");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&j).expect("--json written")).unwrap();
    assert!(!v["results"].as_array().unwrap().is_empty());
    // Both closed (`2>&1 | head`), with a testcase that notes on stderr (the bar rows): exit 0,
    // not a panic's 101, and the JSON written.
    let mut child = spawn("host_to_device_bar,latency_host_to_device");
    drop(child.stdout.take());
    drop(child.stderr.take());
    assert_eq!(child.wait().unwrap().code(), Some(0));
    assert!(j.exists(), "--json written");
}

#[test]
fn planted_mismatch_exits_2() {
    let o = vkhost(&["bench", "--sizes", "4K", "--iters", "1", "--no-costs", "--paths", "pinned", "--dirs", "h2d", "--plant-mismatch"]);
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stdout));
    assert!(String::from_utf8_lossy(&o.stderr).contains("FAIL"));
    assert!(String::from_utf8_lossy(&o.stdout).contains("FAIL"));
}

/// Costs beside copies: measured in a process of their own, and back in this run's table and
/// JSON beside the copies (per size and operation, with the iterations asked for).
#[test]
fn bench_costs_and_find() {
    let j = tmp("costs.json");
    let o = vkhost(&[
        "bench",
        "--sizes",
        "4K,1M",
        "--iters",
        "2",
        "--budget",
        "0.1",
        "--paths",
        "pinned",
        "--dirs",
        "h2d",
        "--json",
        j.to_str().unwrap(),
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}");
    for k in ["register", "unregister", "alloc_pinned", "free_pinned", "find with", "process of their own"] {
        assert!(out.contains(k), "missing {k}: {out}");
    }
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&j).unwrap()).unwrap();
    let r = doc["results"].as_array().unwrap();
    let count = |kind: &str| r.iter().filter(|p| p["kind"] == kind).count();
    assert_eq!(r.iter().filter(|p| p["testcase"] == "host_to_device_ce").count(), 2, "h2d at 4K and 1M");
    assert_eq!(count("cost"), 2 * 6, "6 operations at 2 sizes");
    assert_eq!(count("find"), 3);
    for p in r.iter().filter(|p| p["kind"] == "cost") {
        assert_eq!(p["iters"], 2, "{p}");
        assert!(p["median_s"].as_f64().unwrap() > 0.0, "{p}");
    }
    assert!(r.iter().filter(|p| p["kind"] == "find").all(|p| p["verified"] == true));
    // find is timed in rounds, each a sample, as every point: --iters rounds after one untimed.
    for p in r.iter().filter(|p| p["kind"] == "find") {
        assert_eq!((p["iters"].as_u64(), p["warmup_iters"].as_u64()), (Some(2), Some(1)), "{p}");
        assert!(p["min_s"].as_f64() <= p["max_s"].as_f64() && p["median_s"].as_f64().unwrap() > 0.0, "{p}");
    }
}

#[test]
fn check_all_passes() {
    let o = vkhost(&["check", "--all"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("all checks passed") && !out.contains("FAIL"), "{out}");
}

/// `VKHOST_IMPORT_PIECE` (a documented override of `OpenOptions::max_import_piece`) does not
/// fail `vkhost check` on a working driver: its multi-device and huge-page rows set the pieces
/// they rely on (they read FAIL with 4 KiB pieces; found by an audit).
#[test]
fn check_passes_with_any_import_piece() {
    let o = Command::new(env!("CARGO_BIN_EXE_vkhost"))
        .args(["check"])
        .env_remove("VKHOST_DEVICE")
        .env("VKHOST_IMPORT_PIECE", "4096")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && out.contains("all checks passed") && !out.contains("FAIL"), "{out}");
}

#[test]
fn bad_device_index_is_an_error_not_a_panic() {
    let o = Command::new(env!("CARGO_BIN_EXE_vkhost")).args(["bench", "--quick"]).env("VKHOST_DEVICE", "99").output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    // The error, and a warning naming the variable (up to `665758d` only "no Vulkan device
    // available").
    assert!(
        err.contains("no Vulkan device available") && err.contains("VKHOST_DEVICE=99 names no Vulkan device") && !err.contains("panicked"),
        "{err}"
    );
    let o = Command::new(env!("CARGO_BIN_EXE_vkhost")).args(["check"]).env("VKHOST_DEVICE", "0").output().unwrap();
    assert!(o.status.success());
}

/// `--devices`: the host × GPU matrix, here on the same device twice (two VkDevices): a column
/// per device, the aggregate, every point verified.
#[test]
fn devices_matrix_runs_each_device_alone_and_all_at_once() {
    let o = vkhost(&["bench", "--devices", "0,0", "--quick", "--sizes", "64K", "--iters", "2"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}\n{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("aggregate"), "{out}");
    let rows: Vec<&str> = out.lines().filter(|l| l.ends_with(" ok")).collect();
    assert_eq!(rows.len(), 6, "pinned, registered, pageable × h2d, d2h: {out}");
    // The single-device outputs are refused, each named.
    let e = vkhost(&["bench", "--devices", "0", "--plot", "x.svg", "--baseline", "cuda"]);
    let err = String::from_utf8_lossy(&e.stderr);
    assert!(e.status.code() == Some(1) && err.contains("--devices refuses --plot, --baseline:"), "{err}");
    // Flags the matrix would ignore are refused (a user passing --cpu thinks the run pinned).
    for flag in [&["--cpu", "0"][..], &["--hugepages"], &["-t", "costs"], &["--bidir-queues", "compute-copy"], &["--bidir-mode", "threads"]]
    {
        let e = vkhost(&[&["bench", "--devices", "0", "--sizes", "4K"][..], flag].concat());
        let err = String::from_utf8_lossy(&e.stderr);
        assert!(e.status.code() == Some(1) && err.contains("no use for"), "{flag:?}: {err}");
    }
    // Two outputs naming one file: refused before measuring (the plot overwrote the JSON).
    let same = tmp("same.svg");
    let e = vkhost(&["bench", "--sizes", "4K", "--json", same.to_str().unwrap(), "--plot", same.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&e.stderr);
    assert!(e.status.code() == Some(1) && err.contains("same file") && !same.exists(), "{err}");
}

/// A path whose memory cannot be had is skipped with a note, the run still writes its JSON, and
/// it exits 1 (something was left out): 3 GiB is past the device's maxMemoryAllocationSize on
/// lavapipe (2 GiB), so every path's device buffer is refused. Before, the first refusal ended
/// the run with no file.
#[test]
fn devices_matrix_skips_a_path_it_cannot_allocate_and_still_writes() {
    let devs = vkhost(&["devices", "--json"]);
    let max = serde_json::from_slice::<Value>(&devs.stdout).ok().and_then(|v| v[0]["max_memory_allocation_size"].as_u64());
    if max.is_none_or(|m| m >= 3 << 30) {
        eprintln!("skipped: device 0's maxMemoryAllocationSize ({max:?}) does not refuse a 3 GiB buffer");
        return;
    }
    let j = tmp("matrix-skip.json");
    let o = vkhost(&["bench", "--devices", "0", "--sizes", "3G", "--iters", "1", "--json", j.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    let v = json_of(&j);
    let notes: Vec<&str> = v["run"]["notes"].as_array().unwrap().iter().filter_map(|n| n.as_str()).collect();
    for path in ["pinned", "registered", "pageable"] {
        assert!(notes.iter().any(|n| n.starts_with(&format!("{path}: skipped ("))), "{path}: {notes:?}");
    }
    assert_eq!(v["matrix"], serde_json::json!([]), "no row was measured");
}

/// `--devices` with sizes past the machine's memory is refused before any device is opened,
/// naming `--sizes`, as the sweep refuses them. Before, every path was skipped and the run then
/// aborted allocating its check buffers (exit 134, "memory allocation of ... failed").
#[test]
fn devices_matrix_refuses_sizes_past_the_machines_memory() {
    let o = vkhost(&["bench", "--devices", "0", "--sizes", "4K,1T", "--iters", "1"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert!(err.contains("--sizes 1T: the matrix holds about") && !err.contains("memory allocation"), "{}", show(&o));
    assert!(!String::from_utf8_lossy(&o.stdout).contains("aggregate"), "measured before refusing: {}", show(&o));
}

/// `--devices` with `--json` and `--csv` (issue 14's machine-readable output for issue 15's
/// matrix): the JSON validates against docs/bench-devices.schema.json, a row per path and
/// direction with a figure per device in `--devices` order, and the CSV has a line per device
/// and one for the aggregate of each row.
#[test]
fn devices_matrix_writes_json_and_csv() {
    let (j, c) = (tmp("matrix.json"), tmp("matrix.csv"));
    let o = vkhost(&[
        "bench",
        "--devices",
        "0,0",
        "--quick",
        "--sizes",
        "4K",
        "--iters",
        "2",
        "--json",
        j.to_str().unwrap(),
        "--csv",
        c.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", show(&o));
    let v = json_of(&j);
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/bench-devices.schema.json")).unwrap(),
    )
    .expect("the schema is JSON");
    let mut errors = Vec::new();
    validate(&schema, &v, "$", &mut errors);
    assert!(errors.is_empty(), "{}", errors.join("\n"));
    // The validator does catch things.
    let mut bad = v.clone();
    bad["matrix"][0]["per_device"][0]["unexpected"] = Value::Bool(true);
    bad["run"]["device"] = Value::Null;
    let mut errors = Vec::new();
    validate(&schema, &bad, "$", &mut errors);
    assert_eq!(errors.len(), 2, "{errors:?}");

    let run = &v["run"];
    assert_eq!(
        (run["tool"].as_str(), run["interrupted"].as_bool(), run["failures"].as_u64()),
        (Some("vkhost bench --devices"), Some(false), Some(0))
    );
    assert_eq!(run["sizes"], serde_json::json!([4096]));
    let devices = run["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2, "{run}");
    assert!(devices.iter().all(|d| d["index"] == 0 && d["name"].is_string() && d["copy_queues"].is_object()), "{run}");
    let rows = v["matrix"].as_array().unwrap();
    let have: Vec<(&str, &str)> = rows.iter().map(|r| (r["path"].as_str().unwrap(), r["dir"].as_str().unwrap())).collect();
    let want: Vec<(&str, &str)> = ["pinned", "registered", "pageable"].iter().flat_map(|p| ["h2d", "d2h"].map(|d| (*p, d))).collect();
    assert_eq!(have, want, "pinned, registered, pageable × h2d, d2h, in the table's order");
    for r in rows {
        let f = |x: &Value| x.as_f64().unwrap();
        assert!(r["size"] == 4096 && r["ok"] == true, "{r}");
        let per = r["per_device"].as_array().unwrap();
        assert_eq!(per.len(), 2, "{r}");
        for d in per {
            assert!(d["index"] == 0 && (4096.0 / f(&d["median_s"]) / 1e9 - f(&d["gbps"])).abs() <= 1e-9 * f(&d["gbps"]).max(1.0), "{r}");
        }
        let agg = f(&r["aggregate_gbps"]);
        assert!((2.0 * 4096.0 / f(&r["aggregate_median_s"]) / 1e9 - agg).abs() <= 1e-9 * agg.max(1.0), "{r}");
        let sum: f64 = per.iter().map(|d| f(&d["gbps"])).sum();
        assert!((agg / sum - f(&r["vs_sum"])).abs() <= 1e-9 * f(&r["vs_sum"]).max(1.0), "{r}");
    }
    let csv = std::fs::read_to_string(&c).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0], "path,dir,size,device,position,gbps,median_s,vs_sum,ok");
    assert_eq!(lines.len(), 1 + rows.len() * 3, "a line per device and one for the aggregate per row: {csv}");
    // `--devices 0,0`: the same index twice, told apart by position.
    assert!(lines[1].starts_with("pinned,h2d,4096,0,0,") && lines[1].ends_with(",,true"), "{csv}");
    assert!(lines[2].starts_with("pinned,h2d,4096,0,1,") && lines[2].ends_with(",,true"), "{csv}");
    assert!(lines[3].starts_with("pinned,h2d,4096,aggregate,,") && lines[3].ends_with(",true"), "{csv}");
    // The sweep's readers say what the file is instead of a bare "expected results".
    let svg = tmp("matrix.svg");
    let o = vkhost(&["plot", j.to_str().unwrap(), svg.to_str().unwrap()]);
    assert!(o.status.code() == Some(1) && String::from_utf8_lossy(&o.stderr).contains("--devices` matrix"), "{}", show(&o));
    let o = vkhost(&["bench", "-t", "costs", "--compare", j.to_str().unwrap()]);
    assert!(o.status.code() == Some(1) && String::from_utf8_lossy(&o.stderr).contains("--devices` matrix"), "{}", show(&o));
}

/// Nonsense arguments are refused before anything is measured, with the flag named, never
/// with a panic (exit 101) or a hang: a budget that is negative or not a number (a `Duration`
/// from it panicked), zero iterations, an unknown bidir queue pair (skipped whole paths
/// mid-run), sizes with doubled suffixes, an output in a folder that does not exist (lost the
/// run after measuring it), a device index that does not exist.
#[test]
fn bad_arguments_are_refused_up_front() {
    let base = ["bench", "-t", "host_to_device_ce", "--sizes", "4K", "--iters", "1"];
    let run = |extra: &[&str]| {
        let mut a: Vec<&str> = base.to_vec();
        a.extend_from_slice(extra);
        vkhost(&a)
    };
    // Each with what its message must name (so a run failing for another reason, say no
    // device, cannot pass for a refusal).
    for (extra, names) in [
        (&["--budget=-1"][..], "--budget"),
        (&["--budget", "nan"], "--budget"),
        (&["--budget", "inf"], "--budget"),
        (&["--iters", "0"], "--iters"),
        (&["--bidir-queues", "foo"], "--bidir-queues"),
        (&["--bidir-mode", "foo"], "--bidir-mode"),
        (&["--sizes", "4KIBIB"], "--sizes: bad size \"4KIBIB\""),
        (&["--sizes", "4IB"], "--sizes: bad size \"4IB\""),
        (&["--sizes", "0"], "--sizes: bad size \"0\""),
        // Each size flag named: a bare `bad size "0"` did not say which of four it was.
        (&["--bar-read-cap", "0"], "--bar-read-cap: bad size \"0\""),
        (&["--staging-chunk", "1x"], "--staging-chunk: bad size \"1x\""),
        (&["--max-size", "0"], "--max-size: bad size \"0\""),
        (&["--json", "/nonexistent-vkhost-dir/x.json"], "--json /nonexistent-vkhost-dir/x.json"),
        (&["--plot", "/nonexistent-vkhost-dir/x.svg"], "--plot /nonexistent-vkhost-dir/x.svg"),
        (&["--device", "4096"], "--device 4096: no such device"),
        (&["--bar-threads", "0"], "--bar-threads"),
        (&["--json", "-"], "--json -: name a file"),
        (&["--json", "/proc/vkhost-cli-test.json"], "--json /proc/vkhost-cli-test.json: cannot be written"),
        (&["--csv", "/proc/vkhost-cli-test.csv"], "--csv /proc/vkhost-cli-test.csv: cannot be written"),
        (&["--sizes", "4K,99999G"], "--sizes 99999G: the testcases chosen hold about"),
        (&["--sizes", "4T"], "--sizes 4T:"),
        (&["--plot", "x.pdf"], "--plot x.pdf: a plot is SVG (.svg) or PNG (.png), not .pdf"),
    ] {
        let o = run(extra);
        let err = String::from_utf8_lossy(&o.stderr);
        // 1, clap's usage errors (`--iters 0`) too: 2 is a failed round-trip check.
        assert_eq!(o.status.code(), Some(1), "{extra:?}: {err}");
        assert!(!err.contains("panicked"), "{extra:?}: {err}");
        assert!(err.contains(names), "{extra:?}: the message names {names:?}: {err}");
        assert!(!String::from_utf8_lossy(&o.stdout).contains("host_to_device_ce "), "{extra:?} measured before refusing");
    }
    let o = vkhost(&["bench", "--devices", "all,0"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("stands alone"), "{}", String::from_utf8_lossy(&o.stderr));
    // Options the device refuses, before the costs process opens a device (it used to measure
    // first): no device is opened at all, as the library's debug log shows.
    for (flag, value) in [("--staging-slots", "1"), ("--staging-threads", "0"), ("--staging-chunk", "5K")] {
        let o = Command::new(env!("CARGO_BIN_EXE_vkhost"))
            .args(["bench", "--sizes", "4K", "--iters", "1", flag, value])
            .env("RUST_LOG", "vkhost=debug")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{flag} {value}: {err}");
        assert!(err.contains("invalid argument"), "{flag} {value}: {err}");
        assert!(!err.contains("opened"), "{flag} {value}: a device was opened before the refusal: {err}");
    }
}

/// `--baseline cuda` in a build without the `cuda` feature is refused before anything is
/// measured. Before, the whole sweep ran and the run exited 0 with a note that there was no
/// baseline.
#[test]
fn baseline_cuda_without_the_feature_is_refused_up_front() {
    if cfg!(feature = "cuda") {
        eprintln!("skipped: this build has the cuda feature");
        return;
    }
    let o = vkhost(&["bench", "-t", "host_to_device_ce", "--sizes", "4K", "--iters", "1", "--baseline", "cuda"]);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--baseline cuda: this vkhost was built without the `cuda` feature"),
        "{}",
        show(&o)
    );
    assert!(!String::from_utf8_lossy(&o.stdout).contains("host_to_device_ce "), "measured before refusing: {}", show(&o));
}

/// `vkhost plot` of points off a log axis (size 0, an infinite latency) leaves them out instead
/// of hanging in the plotting library, a bidir point of 2^63 bytes moves no wrapped `2 * size`
/// (a debug build's overflow panic), and it never overwrites its own input.
#[test]
fn plot_skips_points_off_the_axes_and_keeps_its_input() {
    let j = tmp("offaxis.json");
    std::fs::write(
        &j,
        r#"{"run":{},"results":[{"kind":"copy","api":"vulkan","path":"pinned","dir":"h2d","size":0,"median_s":1e-5},
            {"kind":"copy","api":"vulkan","path":"pinned","dir":"h2d","size":4096,"median_s":1e-5},
            {"kind":"copy","api":"vulkan","path":"pinned","dir":"bidir","size":9223372036854775808,"median_s":1e-5},
            {"kind":"latency","dir":"h2d","size":4096,"median_s":1e305}]}"#,
    )
    .unwrap();
    let svg = tmp("offaxis.svg");
    let child = Command::new(env!("CARGO_BIN_EXE_vkhost")).args(["plot"]).arg(&j).arg(&svg).spawn().expect("run vkhost");
    let t = std::time::Instant::now();
    let mut child = child;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t.elapsed() > std::time::Duration::from_secs(60) {
            let _ = child.kill();
            panic!("vkhost plot hung on points off the axes");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(status.success());
    assert!(std::fs::metadata(&svg).unwrap().len() > 0);
    let o = Command::new(env!("CARGO_BIN_EXE_vkhost")).args(["plot"]).arg(&j).arg(&j).output().unwrap();
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("overwrite its input"));
    assert!(std::fs::read_to_string(&j).unwrap().starts_with("{\"run\""), "the input is intact");
    let _ = std::fs::remove_file(&j);
    let _ = std::fs::remove_file(&svg);
}

/// A plot with nothing to draw is an error, not five empty panels and exit 0: `vkhost plot` of
/// a file without a copy or latency point (an empty `results`, another tool's entries), and
/// `bench --plot` with only testcases the plot does not draw (refused before measuring).
#[test]
fn a_plot_with_nothing_to_draw_is_refused() {
    let svg = tmp("nothing.svg");
    for (tag, doc) in
        [("empty", r#"{"run":{},"results":[]}"#), ("foreign", r#"{"run":{},"results":[{"name":"x","value":1},{"size":"4K"}]}"#)]
    {
        let j = tmp(&format!("nothing-{tag}.json"));
        std::fs::write(&j, doc).unwrap();
        let o = Command::new(env!("CARGO_BIN_EXE_vkhost")).arg("plot").arg(&j).arg(&svg).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{tag}: {}", show(&o));
        assert!(err.contains(&format!("{}: no copy or latency point to plot", j.display())), "{tag}: {}", show(&o));
        assert!(!svg.exists(), "{tag}: a plot was written");
        let _ = std::fs::remove_file(&j);
    }
    let o = vkhost(&["bench", "-t", "small_async,costs", "--iters", "1", "--plot", svg.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--plot draws the copy and latency testcases"), "{}", show(&o));
    assert!(!String::from_utf8_lossy(&o.stdout).contains("small-async"), "measured before refusing: {}", show(&o));
    assert!(!svg.exists());
}

/// A plot named for another format (`.jpg`, `.pdf`) is refused, not written as an SVG under that
/// name; `--plot x.pdf` before measuring (`bad_arguments_are_refused_up_front`).
#[test]
fn a_plot_named_for_another_format_is_refused() {
    let j = tmp("nothing-ext.json");
    std::fs::write(&j, r#"{"run":{},"results":[{"kind":"copy","path":"pinned","dir":"h2d","size":4096,"median_s":1e-5}]}"#).unwrap();
    let jpg = tmp("nothing.jpg");
    let o = Command::new(env!("CARGO_BIN_EXE_vkhost")).arg("plot").arg(&j).arg(&jpg).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("a plot is SVG (.svg) or PNG (.png), not .jpg"), "{}", show(&o));
    assert!(!jpg.exists());
    let _ = std::fs::remove_file(&j);
}

/// `vkhost plot` of values that overflow the y axis to infinity once its 12% headroom is added
/// (a latency of 1.7e302 s, a link rate of 1e308 GT/s, as in a corrupted or edited file) leaves
/// them out and finishes; before, the plotting library looped forever on the infinite axis.
#[test]
fn plot_leaves_out_values_too_large_for_the_axis() {
    let cases = [
        (
            "link",
            r#"{"run":{"device":{},"pcie":{"gt_per_s":1e308,"width":16,"generation":5}},
            "results":[{"kind":"copy","api":"vulkan","path":"pinned","dir":"h2d","size":4096,"median_s":0.001}]}"#,
        ),
        (
            "latency",
            r#"{"run":{"device":{},"pcie":{}},
            "results":[{"kind":"latency","api":"vulkan","path":"pinned","dir":"h2d","size":4096,"median_s":1.7e302},
            {"kind":"latency","api":"vulkan","path":"pinned","dir":"h2d","size":8192,"median_s":1e-5}]}"#,
        ),
    ];
    for (tag, doc) in cases {
        let j = tmp(&format!("huge-{tag}.json"));
        let svg = tmp(&format!("huge-{tag}.svg"));
        std::fs::write(&j, doc).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_vkhost")).args(["plot"]).arg(&j).arg(&svg).spawn().expect("run vkhost");
        let t = std::time::Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if t.elapsed() > std::time::Duration::from_secs(60) {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{tag}: vkhost plot still running after 60 s");
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        assert!(status.success(), "{tag}: {status}");
        assert!(std::fs::metadata(&svg).unwrap().len() > 0, "{tag}: empty plot");
        let _ = std::fs::remove_file(&j);
        let _ = std::fs::remove_file(&svg);
    }
}

// ---- found by an audit of the CLI against docs/BENCH.md; each failed on the code before ----

fn show(o: &std::process::Output) -> String {
    format!("status {:?}\n{}\n{}", o.status, String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn json_of(p: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).expect("JSON")
}

/// `--hugepages` advises the pageable path's memory too, as documented (it advised only the
/// registered path's).
#[test]
fn hugepages_advise_the_pageable_paths_memory() {
    if Command::new("strace").arg("-V").output().is_err() {
        eprintln!("skipped: strace is not installed (it counts the madvise calls)");
        return;
    }
    let o = Command::new("strace")
        .args(["-f", "-e", "trace=madvise", env!("CARGO_BIN_EXE_vkhost"), "bench", "--quick", "--sizes", "4M", "--hugepages", "-t"])
        .arg("host_to_device_pageable_ce")
        .env_remove("VKHOST_DEVICE")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    let n = String::from_utf8_lossy(&o.stderr).matches("MADV_HUGEPAGE").count();
    assert!(n >= 2, "--hugepages: the pageable path's two buffers advised {n} times");
}

/// The pageable rows' CPU cost counts the timed copies only: the untimed `--flush-cache` writes
/// made it dozens of cores on a 2-CPU machine.
#[test]
fn flush_cache_is_not_counted_as_copy_cpu() {
    let j = tmp("flush-cpu.json");
    let o =
        vkhost(&["bench", "--quick", "--sizes", "4K", "-t", "host_to_device_pageable_ce", "--flush-cache", "--json", j.to_str().unwrap()]);
    assert!(o.status.success(), "{}", show(&o));
    let cpus = std::thread::available_parallelism().unwrap().get() as f64;
    let cores = json_of(&j)["results"][0]["extra"]["cpu_cores"].as_f64().unwrap();
    assert!(cores <= cpus * 1.1, "cpu_cores {cores:.1} on a machine with {cpus} CPUs");
}

/// Two outputs through a symbolic link to one file are refused, as two names of it are.
#[test]
fn outputs_through_a_symlink_are_one_file() {
    let (a, l) = (tmp("same.json"), tmp("same-link.json"));
    std::fs::write(&a, "{}").unwrap();
    std::os::unix::fs::symlink(&a, &l).unwrap();
    let run = || {
        let o = vkhost(&[
            "bench",
            "--quick",
            "--sizes",
            "4K",
            "-t",
            "host_to_device_ce",
            "--json",
            a.to_str().unwrap(),
            "--csv",
            l.to_str().unwrap(),
        ]);
        assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("same file"), "{}", show(&o));
    };
    run();
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "{}", "nothing written");
    // A link to an output that does not exist yet.
    std::fs::remove_file(&a).unwrap();
    run();
    let _ = std::fs::remove_file(&l);
}

/// A huge `--iters` with a small budget measures within the budget (every point preallocated
/// `iters` samples: 4294967295 aborted the process).
#[test]
fn huge_iters_within_a_budget_do_not_abort() {
    let o = vkhost(&["bench", "--sizes", "4K", "-t", "host_to_device_ce", "--iters", "4294967295", "--budget", "0.01"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    // The floor testcases too: at least 50 runs of each point, then the budget (they ran every
    // `--iters`, hours).
    let j = tmp("floor-budget.json");
    let o = vkhost(&["bench", "-t", "latency_floor", "--iters", "4294967295", "--budget", "0.01", "--json", j.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    for r in json_of(&j)["results"].as_array().unwrap() {
        let n = r["iters"].as_u64().unwrap();
        assert!((50..1000).contains(&n), "{r}");
    }
}

/// A size named twice is measured once (it gave two points of one identity, which `--compare`
/// then matched to one old point), and `--quick` keeps to `--max-size`.
#[test]
fn sizes_are_measured_once_and_quick_keeps_to_max_size() {
    let j = tmp("dup.json");
    let o = vkhost(&["bench", "--quick", "--sizes", "4K,64K,4K", "-t", "host_to_device_ce", "--json", j.to_str().unwrap()]);
    assert!(o.status.success(), "{}", show(&o));
    let v = json_of(&j);
    assert_eq!(v["run"]["sizes"], serde_json::json!([4096, 65536]));
    assert_eq!(v["results"].as_array().unwrap().len(), 2);
    let o = vkhost(&["bench", "--quick", "--max-size", "64K", "-t", "host_to_device_ce", "--json", j.to_str().unwrap()]);
    assert!(o.status.success(), "{}", show(&o));
    assert_eq!(json_of(&j)["run"]["sizes"], serde_json::json!([4096, 65536]), "--quick --max-size 64K");
}

/// The costs stop when `--budget` runs out, as every point does (they ran every `--iters`).
#[test]
fn costs_respect_the_budget() {
    let j = tmp("costs-budget.json");
    // Alone (in this process) and beside another testcase (in a process of their own).
    for t in ["costs", "costs,host_to_device_ce"] {
        // 5000 iterations: an alloc_pinned + free_pinned of 16 MiB on lavapipe can take under
        // 20 us (lazily mapped), so 50 fitted in the budget now and then; 5000 never fit in 1 ms.
        let o = vkhost(&["bench", "-t", t, "--sizes", "16M", "--iters", "5000", "--budget", "0.001", "--json", j.to_str().unwrap()]);
        assert!(o.status.success(), "{}", show(&o));
        let v = json_of(&j);
        let costs: Vec<&Value> = v["results"].as_array().unwrap().iter().filter(|r| r["kind"] == "cost").collect();
        assert!(costs.len() >= 4, "-t {t}: register, unregister, alloc_pinned, free_pinned: {costs:?}");
        for r in costs {
            assert!(r["iters"].as_u64().unwrap() < 5000, "-t {t}: budget 0.001 s, {} ran {} iterations", r["dir"], r["iters"]);
        }
    }
}

/// Without registration, `vkhost check` leaves the registered kernel cases out of the count
/// and says so (they passed without running).
#[test]
fn check_does_not_pass_kernel_cases_it_cannot_run() {
    let o =
        Command::new(env!("CARGO_BIN_EXE_vkhost")).arg("check").env_remove("VKHOST_DEVICE").env("VKHOST_IMPORT", "never").output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{}", show(&o));
    let rows: Vec<&str> = text.lines().filter(|l| l.contains("kernels, ")).collect();
    assert!(!rows.is_empty(), "{text}");
    for row in rows {
        assert!(row.contains("registered: skipped") && row.contains("36/36"), "{row}");
    }
}

/// `vkhost devices` on a device that does not open says why, and that host registration is
/// only advertised there (no import probe ran).
#[test]
fn devices_that_do_not_open_say_registration_is_unproven() {
    let o = Command::new(env!("CARGO_BIN_EXE_vkhost")).arg("devices").env("VKHOST_STAGING_THREADS", "0").output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(text.contains("could not open: invalid argument"), "{}", show(&o));
    for l in text.lines().filter(|l| l.contains("host registration: available")) {
        assert!(l.contains("not probed") && !l.contains("proven"), "{l}");
    }
}

/// `vkhost check`'s BAR rows test CPU stores whatever the environment says: with
/// `VKHOST_BAR_WRITE_MAX=0` they used to pass with every byte written by the copy engine.
#[test]
fn check_bar_rows_store_whatever_the_environment_says() {
    let o = Command::new(env!("CARGO_BIN_EXE_vkhost")).arg("check").env("VKHOST_BAR_WRITE_MAX", "0").output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{}", show(&o));
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("bar writes (CPU stores)") || l.contains("split bar writes (4") || l.contains("bar assist, sizes"))
        .collect();
    assert_eq!(rows.len(), 3, "{text}");
    for row in rows {
        let stored: u64 = row.split_whitespace().skip_while(|w| !w.contains('/')).nth(1).and_then(|w| w.parse().ok()).unwrap_or(0);
        assert!(row.contains("bytes stored by the CPU") && stored > 0, "{row}");
    }
}

/// Bar reads over `--bar-read-cap` are said in the run's notes (only stderr said so).
#[test]
fn bar_reads_skipped_by_the_cap_are_in_the_notes() {
    let j = tmp("bar-cap.json");
    let o = vkhost(&["bench", "--quick", "--sizes", "4K,8M", "-t", "device_to_host_bar", "--json", j.to_str().unwrap()]);
    assert!(o.status.success(), "{}", show(&o));
    let notes = json_of(&j)["run"]["notes"].to_string();
    assert!(notes.contains("8M skipped, over --bar-read-cap 4M"), "{notes}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("left out, over --bar-read-cap"), "{}", show(&o));
    // Nothing over the cap: no word of it.
    let o = vkhost(&["bench", "--quick", "--sizes", "4K", "-t", "device_to_host_bar", "--json", j.to_str().unwrap()]);
    assert!(o.status.success(), "{}", show(&o));
    assert!(!String::from_utf8_lossy(&o.stderr).contains("--bar-read-cap"), "{}", show(&o));
    assert!(!json_of(&j)["run"]["notes"].to_string().contains("--bar-read-cap"), "{}", show(&o));
}

/// A mid-size `bidir_bar` write that finds the store threads parked is a submitted copy (it
/// wakes them for the next): that is the library's choice, not a sign that device buffers are
/// unmapped, and it must not cost the row or the rest of the bar section. Eight staging threads
/// that poll, on this 2-core machine: the first 1 MiB write finds them parked (the H100 sweep
/// at `e946e91` lost every bar row from 1 MiB on this way, `bar: skipped`).
#[test]
fn bidir_bar_rows_stay_when_a_mid_size_write_is_a_copy() {
    let j = tmp("bidir-bar-mid.json");
    let o = Command::new(env!("CARGO_BIN_EXE_vkhost"))
        .args(["bench", "--quick", "--no-costs", "--sizes", "1M,4M", "-t", "bidir_bar", "--json", j.to_str().unwrap()])
        .env_remove("VKHOST_DEVICE")
        .env("VKHOST_STAGING_THREADS", "8")
        .env("VKHOST_STAGING_SPIN_US", "5000")
        .output()
        .expect("run vkhost");
    assert!(o.status.success(), "{}", show(&o));
    let v = json_of(&j);
    assert!(!v["run"]["notes"].to_string().contains("bar: skipped"), "{}", show(&o));
    let rows: Vec<(u64, String)> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["variant"].as_str().unwrap_or("").is_empty())
        .map(|r| (r["size"].as_u64().unwrap(), r["dir"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(rows, [(1 << 20, "bidir".to_string()), (4 << 20, "bidir".to_string())], "{}", show(&o));
    for r in v["results"].as_array().unwrap() {
        assert_eq!(r["verified"], true, "{r}");
        assert_eq!(r["warmup_iters"], 3, "{r}");
    }
}

/// `--bar-reads` picks how the bar rows read the BAR window; the run and each read point say
/// which (streaming loads by default where the CPU has them).
#[test]
fn bar_reads_say_how_they_read() {
    for (flag, want) in [(None, if cfg!(target_arch = "x86_64") { "movntdqa" } else { "memcpy" }), (Some("memcpy"), "memcpy")] {
        let j = tmp(&format!("bar-reads-{}.json", flag.unwrap_or("default")));
        let mut args = vec!["bench", "--quick", "--sizes", "4K,64K", "-t", "device_to_host_bar", "--json", j.to_str().unwrap()];
        if let Some(f) = flag {
            args.extend(["--bar-reads", f]);
        }
        let o = vkhost(&args);
        assert!(o.status.success(), "{}", show(&o));
        let v = json_of(&j);
        assert!(v["run"]["bar_reads"].as_str().unwrap().starts_with(want), "{flag:?}: {}", v["run"]["bar_reads"]);
        let rows = v["results"].as_array().unwrap();
        assert_eq!(rows.len(), 2, "{rows:?}");
        for r in rows {
            assert_eq!(r["verified"], true, "{r}");
            assert!(r["note"].as_str().unwrap().contains(want), "{flag:?}: {r}");
        }
    }
    let o = vkhost(&["bench", "--quick", "--bar-reads", "fast"]);
    assert!(!o.status.success(), "an unknown --bar-reads value is refused");
}

/// The latency testcases time at least 50 copies per size whatever `--budget` says.
#[test]
fn latency_keeps_its_fifty_copies_under_a_tiny_budget() {
    let j = tmp("lat-budget.json");
    let o = vkhost(&["bench", "-t", "latency_host_to_device", "--budget", "0", "--iters", "5", "--json", j.to_str().unwrap()]);
    assert!(o.status.success(), "{}", show(&o));
    let v = json_of(&j);
    let rows = v["results"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "256 B, 4 KiB, 16 KiB, 64 KiB");
    for r in rows {
        assert!(r["iters"].as_u64().unwrap() >= 50, "{} at {}: {} iterations", r["testcase"], r["size"], r["iters"]);
    }
}

/// `--bidir-mode`: by default a pinned or registered pair is enqueued from one thread (the
/// copies are direct) and a pageable pair runs a thread per direction; `threads` runs two
/// threads everywhere. The JSON says which ran, and every pair is verified either way. Each
/// point's pairs warm up for half a second, or for `--budget` if less: with a budget of 0, one
/// pair exactly (`warmup_iters` counts them).
#[test]
fn bidir_mode_says_how_each_pair_ran() {
    let one = "two streams, one thread (async copies)";
    let two = "two streams (one thread each)";
    for (mode, direct_mode, budget) in [("auto", one, "2"), ("threads", two, "2"), ("auto", one, "0"), ("threads", two, "0")] {
        let j = tmp(&format!("bidir-{mode}-{budget}.json"));
        let o = vkhost(&[
            "bench",
            "-t",
            "bidir_ce,bidir_registered_ce,bidir_pageable_ce",
            "--sizes",
            "4K,1M",
            "--iters",
            "3",
            "--budget",
            budget,
            "--bidir-mode",
            mode,
            "--json",
            j.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", show(&o));
        let rows = results_of(&j);
        assert_eq!(rows.len(), 6, "three paths x two sizes: {rows:?}");
        for r in &rows {
            assert_eq!(r["verified"], true, "{r}");
            let want = if r["path"] == "pageable" { two } else { direct_mode };
            assert_eq!(r["extra"]["mode"], want, "--bidir-mode {mode}: {r}");
            let warm = r["warmup_iters"].as_u64().unwrap();
            if budget == "0" {
                assert_eq!(warm, 1, "--budget 0: one untimed pair: {r}");
            } else if r["size"] == 4096 {
                // Half a second of 4 KiB pairs, each well under a millisecond even here; one
                // pair would be the old warm-up.
                assert!(warm > 1, "--bidir-mode {mode}: {r}");
            }
        }
    }
}

/// An output that fails at the end (here /dev/full: it opens, every write fails with ENOSPC)
/// does not cost the others: the CSV is still written, and the run exits 1 naming the JSON.
#[test]
fn a_failed_output_still_writes_the_others() {
    let c = tmp("after-full.csv");
    let o =
        vkhost(&["bench", "-t", "host_to_device_ce", "--sizes", "4K", "--iters", "1", "--json", "/dev/full", "--csv", c.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--json /dev/full:"), "{}", show(&o));
    let csv = std::fs::read_to_string(&c).expect("the CSV was written");
    assert!(csv.lines().any(|l| l.starts_with("host_to_device_ce,vulkan,copy,pinned,h2d,,4096,")), "{csv}");
}

/// The output pre-check: a symbolic link to a file not there yet passes and leaves nothing
/// behind; the file standard output writes to is refused (the JSON written over the table's
/// own lines); --max-size names itself; sizes only the copy testcases use do not limit the
/// others.
#[test]
fn output_and_size_checks_before_measuring() {
    let dir = tmp("outdir");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).unwrap();
    let link = dir.join("link.json");
    std::os::unix::fs::symlink(dir.join("target.json"), &link).unwrap();
    // Refused for its size after the output check: the link's target must not be left behind.
    let o = vkhost(&["bench", "-t", "host_to_device_ce", "--sizes", "99999G", "--json", link.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert!(!dir.join("target.json").exists(), "the check left the link's target behind");
    // The link works as an output.
    let o = vkhost(&["bench", "-t", "host_to_device_ce", "--sizes", "4K", "--iters", "1", "--json", link.to_str().unwrap()]);
    assert!(o.status.success(), "{}", show(&o));
    assert!(json_of(&dir.join("target.json"))["results"].is_array());
    // --json naming the file stdout goes to.
    let out = dir.join("out.txt");
    let f = std::fs::File::create(&out).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_vkhost"))
        .args(["bench", "-t", "host_to_device_ce", "--sizes", "4K", "--iters", "1", "--json", out.to_str().unwrap()])
        .stdout(f)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("is the file standard output writes to"), "{}", show(&o));
    // Above the maxMemoryAllocationSize of the device the bench opens (the preferred one: the
    // first discrete GPU, then integrated, virtual, CPU), named by the flag that gave the size:
    // --sizes, or --max-size for the default sweep (4K in x4 steps: the first step above it).
    let devs: Vec<Value> = serde_json::from_slice(&vkhost(&["devices", "--json"]).stdout).unwrap();
    let rank = |d: &Value| ["discrete", "integrated", "virtual", "cpu"].iter().position(|t| d["type"] == *t).unwrap_or(4);
    let max_alloc = devs.iter().min_by_key(|d| rank(d)).and_then(|d| d["max_memory_allocation_size"].as_u64()).unwrap();
    let mut step = 4096u64;
    while step <= max_alloc {
        step *= 4;
    }
    let ram = std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .unwrap()
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<u64>()
        .unwrap()
        * 1024;
    // host_to_device_ce holds four regions of the largest size: past the machine's memory the
    // memory check answers first, which the table above covers.
    if 4 * step <= ram {
        for (flag, size) in [("--sizes", step), ("--max-size", step)] {
            let label = format!("{}K", size >> 10);
            let o = vkhost(&["bench", "-t", "host_to_device_ce", flag, &label]);
            assert_eq!(o.status.code(), Some(1), "{}", show(&o));
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(err.contains(&format!("{flag} ")) && err.contains("exceeds the device's maxMemoryAllocationSize"), "{}", show(&o));
        }
    } else {
        println!("maxMemoryAllocationSize refusal not tried: {step} bytes x 4 is more than this machine's memory");
    }
    // Latency has sizes of its own: a huge --sizes does not refuse it.
    let o = vkhost(&["bench", "-t", "latency_host_to_device", "--sizes", "99999G", "--iters", "1", "--budget", "0.01"]);
    assert!(o.status.success(), "{}", show(&o));
    let _ = std::fs::remove_dir_all(&dir);
}
