//! Named testcases in nvbandwidth's spirit: `--list` prints them, `-t` selects them.
//!
//! A testcase names one measurement, whatever sizes it is swept over: `host_to_device_ce` is
//! pinned memory copied by the device's copy queue (the copy engine, "ce", as nvbandwidth says),
//! `_registered_ce` and `_pageable_ce` the other ways a user hands memory over, `_bar` a CPU
//! memcpy through the mapped BAR window, `_sm` the built-in copy kernel (nvbandwidth's "sm": the
//! shader cores do the copy) over the same memory, and `device_to_device_*` a copy between two
//! device buffers. Pure data and pure selection: no Vulkan here.

use super::{DirKind, PathKind};

/// What a testcase runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Work {
    /// Copies over the size sweep on one path and direction by the copy engine
    /// (vkCmdCopyBuffer; for `bar`, a CPU memcpy): synchronous host copies, or for `device`
    /// (`d2d`) a stream copy and synchronize.
    Copy(PathKind, DirKind),
    /// The same by the built-in copy kernel (`Stream::copy_sm`) on a compute stream, then
    /// synchronize: host memory bound directly (pinned, registered), or two device buffers.
    Sm(PathKind, DirKind),
    /// Synchronous pinned copies at `LATENCY_SIZES`, reported in µs.
    Latency(DirKind),
    /// `Device::copy_floor` at `FLOOR_SIZES`: a pre-recorded copy submitted and waited with
    /// nothing of vkhost's around it, reported in µs.
    Floor(DirKind),
    /// 1000 async 4 KiB copies plus one synchronize, against 1000 synchronous ones.
    SmallAsync { scattered: bool },
    /// register/unregister, alloc/free pinned per size, and `find`.
    Costs,
}

#[derive(Debug)]
pub struct Testcase {
    pub name: &'static str,
    pub work: Work,
    pub about: &'static str,
}

/// The sizes of the latency testcases: small enough that fixed costs dominate.
pub const LATENCY_SIZES: [u64; 4] = [256, 4 << 10, 16 << 10, 64 << 10];

/// The sizes of the floor testcases: the small copy of issue 10's latency target and the
/// mid-size copies of its 1-4 MiB target, each beside a `_ce` point of the sweep's default sizes.
pub const FLOOR_SIZES: [u64; 4] = [4 << 10, 64 << 10, 1 << 20, 4 << 20];

use DirKind::{Bidir, D2d, D2h, H2d};
use PathKind::{Bar, Device, Pageable, Pinned, Registered};

/// Every testcase, in the order a run measures them.
pub const TESTCASES: &[Testcase] = &[
    Testcase { name: "host_to_device_ce", work: Work::Copy(Pinned, H2d), about: "pinned host memory to device, copy queue" },
    Testcase { name: "device_to_host_ce", work: Work::Copy(Pinned, D2h), about: "device to pinned host memory, copy queue" },
    Testcase { name: "bidir_ce", work: Work::Copy(Pinned, Bidir), about: "both directions at once on two queues, pinned (sum reported)" },
    Testcase {
        name: "host_to_device_registered_ce",
        work: Work::Copy(Registered, H2d),
        about: "the user's page-aligned allocation, registered, to device",
    },
    Testcase {
        name: "device_to_host_registered_ce",
        work: Work::Copy(Registered, D2h),
        about: "device to the user's registered allocation",
    },
    Testcase {
        name: "bidir_registered_ce",
        work: Work::Copy(Registered, Bidir),
        about: "both directions at once, registered memory (sum reported)",
    },
    Testcase {
        name: "host_to_device_pageable_ce",
        work: Work::Copy(Pageable, H2d),
        about: "a plain Vec to device through the default path (staged)",
    },
    Testcase { name: "device_to_host_pageable_ce", work: Work::Copy(Pageable, D2h), about: "device to a plain Vec (staged)" },
    Testcase {
        name: "bidir_pageable_ce",
        work: Work::Copy(Pageable, Bidir),
        about: "both directions at once, pageable (staged; sum reported)",
    },
    Testcase {
        name: "host_to_device_bar",
        work: Work::Copy(Bar, H2d),
        about: "CPU memcpy into mapped DEVICE_LOCAL|HOST_VISIBLE memory; from 4M also +assist: DeviceBuffer::write shared between the copy engine and CPU stores (bar_assist)",
    },
    Testcase {
        name: "device_to_host_bar",
        work: Work::Copy(Bar, D2h),
        about: "CPU reads out of the BAR window (streaming loads or memcpy, --bar-reads; capped by --bar-read-cap)",
    },
    Testcase {
        name: "bidir_bar",
        work: Work::Copy(Bar, Bidir),
        about: "h2d by CPU stores into mapped VRAM (DeviceBuffer::write, bar_write_max raised) while the copy engine does d2h (sum); from 4M also +assist: the h2d shared between the copy engine and CPU stores (bar_assist)",
    },
    Testcase {
        name: "host_to_device_sm",
        work: Work::Sm(Pinned, H2d),
        about: "pinned host memory to device, the copy kernel (shader cores) reading it directly",
    },
    Testcase {
        name: "device_to_host_sm",
        work: Work::Sm(Pinned, D2h),
        about: "device to pinned host memory, the copy kernel writing it directly",
    },
    Testcase {
        name: "host_to_device_registered_sm",
        work: Work::Sm(Registered, H2d),
        about: "the user's registered allocation to device, the copy kernel reading it directly",
    },
    Testcase {
        name: "device_to_host_registered_sm",
        work: Work::Sm(Registered, D2h),
        about: "device to the user's registered allocation, the copy kernel writing it directly",
    },
    Testcase {
        name: "device_to_device_ce",
        work: Work::Copy(Device, D2d),
        about: "between two device buffers, copy queue (stream copy + synchronize; size counted once)",
    },
    Testcase {
        name: "device_to_device_sm",
        work: Work::Sm(Device, D2d),
        about: "between two device buffers, the copy kernel (size counted once)",
    },
    Testcase {
        name: "latency_host_to_device",
        work: Work::Latency(H2d),
        about: "one synchronous DeviceBuffer::write from pinned memory, 256 B to 64 KiB, in us (BAR stores where used)",
    },
    Testcase {
        name: "latency_device_to_host",
        work: Work::Latency(D2h),
        about: "one synchronous DeviceBuffer::read into pinned memory, 256 B to 64 KiB, in us",
    },
    Testcase {
        name: "latency_floor_host_to_device",
        work: Work::Floor(H2d),
        about: "the floor under host_to_device_ce: one pre-recorded copy from a pinned block, submitted and polled on vkhost's queue with nothing of vkhost's around it (Device::copy_floor), 4 KiB to 4 MiB, in us",
    },
    Testcase {
        name: "latency_floor_device_to_host",
        work: Work::Floor(D2h),
        about: "the same into a pinned block, with the HOST_READ barrier the spec requires (as every vkhost d2h copy), in us",
    },
    Testcase {
        name: "small_async",
        work: Work::SmallAsync { scattered: false },
        about: "1000 async 4 KiB copies to consecutive offsets + synchronize, vs synchronous",
    },
    Testcase {
        name: "small_async_scattered",
        work: Work::SmallAsync { scattered: true },
        about: "the same to scattered offsets (nothing merges), vs synchronous",
    },
    Testcase { name: "costs", work: Work::Costs, about: "register/unregister, alloc/free pinned per size; find at 1, 100, 10 000" },
];

/// The testcase that measures a point, from the point's kind, path and direction, and whether
/// the copy kernel moved it (`sm`). CUDA's points map to the testcase they compare with
/// ("pinned" to `_ce`, "pageable" to `_pageable_ce`, "device" to `device_to_device_ce`, and
/// CUDA's SM copy, "pinned" with `sm`, to `host_to_device_sm`/`device_to_host_sm`).
pub fn testcase_of(kind: &str, path: &str, dir: &str, sm: bool) -> &'static str {
    match kind {
        "cost" | "find" => "costs",
        "small-async" if dir.ends_with("scattered") => "small_async_scattered",
        "small-async" => "small_async",
        "latency" if path == "floor" && dir == "d2h" => "latency_floor_device_to_host",
        "latency" if path == "floor" => "latency_floor_host_to_device",
        "latency" if dir == "d2h" => "latency_device_to_host",
        "latency" => "latency_host_to_device",
        _ => TESTCASES
            .iter()
            .find(|t| match t.work {
                Work::Copy(p, d) if !sm => p.name() == path && d.name() == dir,
                Work::Sm(p, d) if sm => p.name() == path && d.name() == dir,
                _ => false,
            })
            .map(|t| t.name)
            .unwrap_or("unknown"),
    }
}

/// The last word of a copy testcase's name: what moves the bytes (nvbandwidth's `ce` and `sm`,
/// and `bar` for CPU stores or loads through the mapped window).
const ENGINES: [&str; 3] = ["ce", "sm", "bar"];

/// Resolves `-t` names: an exact name selects that testcase; an engine (`ce`, `sm`, `bar`, with
/// or without a leading `_`) every testcase whose name ends with it; anything else every
/// testcase it is a prefix of. The result keeps `TESTCASES`' order, without duplicates. An
/// empty list selects everything.
pub fn select(names: &[String]) -> Result<Vec<&'static Testcase>, String> {
    if names.is_empty() {
        return Ok(TESTCASES.iter().collect());
    }
    let mut on = vec![false; TESTCASES.len()];
    for n in names.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        let exact = TESTCASES.iter().position(|t| t.name == n);
        let hits: Vec<usize> = match exact {
            Some(i) => vec![i],
            None => {
                let engine = n.trim_start_matches('_');
                let by_engine = ENGINES.contains(&engine);
                (0..TESTCASES.len())
                    .filter(|&i| {
                        let t = TESTCASES[i].name;
                        if by_engine { t.rsplit('_').next() == Some(engine) } else { t.starts_with(n) }
                    })
                    .collect()
            }
        };
        if hits.is_empty() {
            let valid: Vec<&str> = TESTCASES.iter().map(|t| t.name).collect();
            return Err(format!(
                "unknown testcase {n:?}; valid testcases (or a prefix of them, or an engine: ce, sm, bar): {}",
                valid.join(", ")
            ));
        }
        for i in hits {
            on[i] = true;
        }
    }
    Ok(TESTCASES.iter().zip(on).filter(|(_, on)| *on).map(|(t, _)| t).collect())
}

/// `--list`: one line per testcase.
pub fn list() -> String {
    let w = TESTCASES.iter().map(|t| t.name.len()).max().unwrap_or(0);
    TESTCASES.iter().map(|t| format!("{:<w$}  {}\n", t.name, t.about)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&Testcase]) -> Vec<&'static str> {
        v.iter().map(|t| t.name).collect()
    }

    #[test]
    fn exact_prefix_and_unknown() {
        assert_eq!(select(&[]).unwrap().len(), TESTCASES.len());
        assert_eq!(names(&select(&["small_async".into()]).unwrap()), ["small_async"]);
        assert_eq!(names(&select(&["small".into()]).unwrap()), ["small_async", "small_async_scattered"]);
        assert_eq!(
            names(&select(&["host_to_device".into()]).unwrap()),
            [
                "host_to_device_ce",
                "host_to_device_registered_ce",
                "host_to_device_pageable_ce",
                "host_to_device_bar",
                "host_to_device_sm",
                "host_to_device_registered_sm"
            ]
        );
        assert_eq!(names(&select(&["device_to_device".into()]).unwrap()), ["device_to_device_ce", "device_to_device_sm"]);
        assert_eq!(
            names(&select(&["latency".into()]).unwrap()),
            ["latency_host_to_device", "latency_device_to_host", "latency_floor_host_to_device", "latency_floor_device_to_host"]
        );
        assert_eq!(names(&select(&["latency_floor".into()]).unwrap()), ["latency_floor_host_to_device", "latency_floor_device_to_host"]);
        // The engine, nvbandwidth's last word: `sm` (issue 11's sm paths), `ce`, `bar`.
        let sm = [
            "host_to_device_sm",
            "device_to_host_sm",
            "host_to_device_registered_sm",
            "device_to_host_registered_sm",
            "device_to_device_sm",
        ];
        assert_eq!(names(&select(&["sm".into()]).unwrap()), sm);
        assert_eq!(names(&select(&["_sm".into()]).unwrap()), sm);
        assert_eq!(names(&select(&["bar".into()]).unwrap()), ["host_to_device_bar", "device_to_host_bar", "bidir_bar"]);
        let ce = names(&select(&["ce".into()]).unwrap());
        assert_eq!(ce.len(), 10, "{ce:?}");
        assert!(ce.iter().all(|n| n.ends_with("_ce")), "{ce:?}");
        // `sm` is not a prefix here (small_async); a word inside a name is not an engine:
        // `device` selects by prefix only.
        assert_eq!(names(&select(&["device".into()]).unwrap())[0], "device_to_host_ce");
        assert!(select(&["registered".into()]).is_err());
        // Order is the table's, duplicates collapse.
        assert_eq!(names(&select(&["costs".into(), "bidir_ce".into(), "bidir_ce".into()]).unwrap()), ["bidir_ce", "costs"]);
        let e = select(&["nope".into()]).unwrap_err();
        assert!(e.contains("nope") && e.contains("host_to_device_ce") && e.contains("costs"), "{e}");
    }

    #[test]
    fn names_are_unique_and_points_map_back() {
        for (i, t) in TESTCASES.iter().enumerate() {
            assert!(TESTCASES[..i].iter().all(|u| u.name != t.name), "{}", t.name);
            match t.work {
                Work::Copy(p, d) => assert_eq!(testcase_of("copy", p.name(), d.name(), false), t.name),
                Work::Sm(p, d) => assert_eq!(testcase_of("copy", p.name(), d.name(), true), t.name),
                _ => {}
            }
        }
        assert_eq!(testcase_of("small-async", "pinned", "sync-scattered", false), "small_async_scattered");
        assert_eq!(testcase_of("latency", "pinned", "d2h", false), "latency_device_to_host");
        assert_eq!(testcase_of("latency", "floor", "d2h", false), "latency_floor_device_to_host");
        assert_eq!(testcase_of("latency", "floor", "h2d", false), "latency_floor_host_to_device");
        assert_eq!(testcase_of("find", "registered", "find", false), "costs");
        // No sm testcase over pageable memory: a kernel binds only imported memory.
        assert_eq!(testcase_of("copy", "pageable", "h2d", true), "unknown");
        assert!(list().lines().count() == TESTCASES.len() && list().contains("bidir_pageable_ce"));
    }
}
