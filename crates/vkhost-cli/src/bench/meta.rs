//! Run metadata for `vkhost bench`'s JSON: the build, the host (CPU, kernel, NUMA), the device
//! and its PCIe link (from sysfs, found through VK_EXT_pci_bus_info), and CPU affinity.
//!
//! Everything here is best effort: a fact the platform does not expose is `null` with a
//! `reason`, never an error. The parsers (CPU lists, link speeds, RFC 3339) are pure and
//! unit-tested.
//!
//! PCIe links train down when idle (NVIDIA GPUs sit at 2.5 GT/s until work arrives), so the
//! theoretical rate uses the link's capability, the lower of the device's and its upstream
//! port's `max_link_speed`/`max_link_width`, and the `current_*` values are recorded beside it.

use serde_json::{Value, json};
use std::path::Path;
use vkhost::{Device, ash, vk};

/// Bumped on any change a reader of the JSON must know about. 1 was the bare array of points.
pub const SCHEMA_VERSION: u32 = 2;

/// The PCIe link the theoretical rate is computed from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    pub gt_s: f64,
    pub width: u32,
    pub generation: u32,
    /// Per direction, GB/s (1e9 B/s), after line encoding.
    pub gbps: f64,
}

/// "32.0 GT/s PCIe", "2.5 GT/s", "16 GT/s" → GT/s; "Unknown" → None.
pub fn parse_link_speed(s: &str) -> Option<f64> {
    s.split_whitespace().next()?.parse::<f64>().ok().filter(|&x| x > 0.0)
}

/// The PCIe generation that signals at `gt_s`.
pub fn generation(gt_s: f64) -> Option<u32> {
    [2.5, 5.0, 8.0, 16.0, 32.0, 64.0, 128.0].iter().position(|&g| (gt_s - g).abs() < 0.01).map(|i| i as u32 + 1)
}

/// Theoretical bytes per second per direction of a link, in GB/s: GT/s x lanes x encoding
/// efficiency / 8 (8b/10b to Gen2, 128b/130b Gen3 to Gen5, FLIT 242/256 from Gen6). Protocol
/// overhead (TLP headers) is not subtracted, so real copies top out around 85-90% of it.
pub fn link_gbps(gt_s: f64, width: u32) -> f64 {
    let eff = if gt_s <= 5.0 {
        8.0 / 10.0
    } else if gt_s <= 32.0 {
        128.0 / 130.0
    } else {
        242.0 / 256.0
    };
    gt_s * width as f64 * eff / 8.0
}

/// "0-3,8,10-11" → [0, 1, 2, 3, 8, 10, 11] (Linux cpulist format), sorted, no duplicates.
pub fn parse_cpu_list(s: &str) -> Result<Vec<usize>, String> {
    let bad = || format!("bad CPU list {s:?} (use e.g. 0-3,8)");
    let mut v = Vec::new();
    // An empty part (`0,,1`, a trailing comma) is a typo, refused as the kernel refuses it.
    for part in s.trim().split(',').map(str::trim) {
        if part.is_empty() {
            return Err(bad());
        }
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse::<usize>().map_err(|_| bad())?, b.trim().parse::<usize>().map_err(|_| bad())?),
            None => {
                let a = part.parse::<usize>().map_err(|_| bad())?;
                (a, a)
            }
        };
        if a > b || b >= 1 << 16 {
            return Err(bad());
        }
        v.extend(a..=b);
    }
    if v.is_empty() {
        return Err(bad());
    }
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

/// [0, 1, 2, 3, 8] → "0-3,8".
pub fn cpu_list_string(cpus: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        out.push(if i == j { cpus[i].to_string() } else { format!("{}-{}", cpus[i], cpus[j]) });
        i = j + 1;
    }
    out.join(",")
}

/// Seconds since the Unix epoch → "2026-11-29T14:03:07Z" (RFC 3339, UTC).
pub fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem / 60 % 60, rem % 60)
}

fn read(p: impl AsRef<Path>) -> Option<String> {
    std::fs::read_to_string(p).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

fn hostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is writable for its length; gethostname NUL-terminates on success
    // (a truncated name may lack it, so the NUL is searched for within the buffer).
    let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if r != 0 {
        return None;
    }
    let n = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

fn uname() -> Value {
    // SAFETY: utsname is plain bytes; uname fills it.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: a valid, writable utsname.
    if unsafe { libc::uname(&mut u) } != 0 {
        return Value::Null;
    }
    let f = |s: &[libc::c_char]| {
        let b: Vec<u8> = s.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
        String::from_utf8_lossy(&b).into_owned()
    };
    json!({ "sysname": f(&u.sysname), "release": f(&u.release), "version": f(&u.version), "machine": f(&u.machine) })
}

/// The CPU model ("model name" on x86, "Model" or "CPU part" elsewhere) and the number of
/// logical CPUs, from /proc/cpuinfo.
fn cpuinfo() -> (Option<String>, usize) {
    let text = read("/proc/cpuinfo").unwrap_or_default();
    let field = |k: &str| text.lines().find_map(|l| l.split_once(':').filter(|(a, _)| a.trim() == k).map(|(_, b)| b.trim().to_string()));
    let model = field("model name").or_else(|| field("Model")).or_else(|| field("CPU part"));
    let count = text.lines().filter(|l| l.split(':').next().is_some_and(|a| a.trim() == "processor")).count();
    (model, count)
}

/// NUMA nodes and their CPUs, from /sys/devices/system/node (empty where it does not exist).
fn numa_nodes() -> Vec<Value> {
    let mut v: Vec<(u32, String)> = std::fs::read_dir("/sys/devices/system/node")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let n: u32 = name.strip_prefix("node")?.parse().ok()?;
            Some((n, read(e.path().join("cpulist")).unwrap_or_default()))
        })
        .collect();
    v.sort();
    v.into_iter().map(|(n, cpus)| json!({"node": n, "cpus": cpus})).collect()
}

/// The size of the largest CPU cache cpu0 sees (the LLC), from sysfs: "32768K" → bytes.
pub fn llc_bytes() -> Option<u64> {
    let dir = "/sys/devices/system/cpu/cpu0/cache";
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter_map(|e| read(e.path().join("size")))
        .filter_map(|s| crate::stats::parse_size(&s).ok())
        .max()
}

/// The host facts for `run.host`.
pub fn host() -> Value {
    let (model, count) = cpuinfo();
    json!({
        "hostname": hostname(),
        "cpu_model": model,
        "cpu_count": count,
        "cpus_online": read("/sys/devices/system/cpu/online"),
        "llc_bytes": llc_bytes(),
        "kernel": uname(),
        "numa_nodes": numa_nodes(),
    })
}

/// "dddd:bb:dd.f" of the device from VK_EXT_pci_bus_info, or why not.
pub fn pci_address(dev: &Device) -> Result<String, String> {
    let raw = dev.raw().map_err(|e| e.to_string())?;
    let (instance, pd) = (&raw.instance, raw.physical_device);
    // SAFETY: a live instance and one of its physical devices.
    let exts = unsafe { instance.enumerate_device_extension_properties(pd) }.unwrap_or_default();
    let has = exts.iter().any(|e| e.extension_name_as_c_str().is_ok_and(|n| n == ash::ext::pci_bus_info::NAME));
    if !has {
        return Err("the device does not offer VK_EXT_pci_bus_info (CPU drivers such as lavapipe have no PCI device)".into());
    }
    let mut pci = vk::PhysicalDevicePCIBusInfoPropertiesEXT::default();
    let mut p2 = vk::PhysicalDeviceProperties2::default().push_next(&mut pci);
    // SAFETY: the device offers the extension, so its struct may be chained (the instance is
    // Vulkan 1.1 or later, which vkhost requires).
    unsafe { instance.get_physical_device_properties2(pd, &mut p2) };
    Ok(format!("{:04x}:{:02x}:{:02x}.{:x}", pci.pci_domain, pci.pci_bus, pci.pci_device, pci.pci_function))
}

/// What sysfs says about the device at `addr`: the `pcie` JSON object, the link (when both
/// ends report a speed and width), and the CPUs local to the device's NUMA node.
pub fn pcie(addr: Result<String, String>) -> (Value, Option<Link>, Option<Vec<usize>>) {
    pcie_in(Path::new("/sys"), addr)
}

/// `pcie` with sysfs mounted at `sys` (a fake tree in tests).
fn pcie_in(sys: &Path, addr: Result<String, String>) -> (Value, Option<Link>, Option<Vec<usize>>) {
    let none = |addr: Value, reason: String| {
        let v = json!({
            "address": addr, "generation": null, "width": null, "gt_per_s": null, "theoretical_gbps": null,
            "current_gt_per_s": null, "current_width": null, "numa_node": null, "local_cpus": null, "reason": reason,
        });
        (v, None, None)
    };
    let addr = match addr {
        Ok(a) => a,
        Err(e) => return none(Value::Null, e),
    };
    let dev = sys.join("bus/pci/devices").join(&addr);
    if !dev.exists() {
        return none(json!(addr), format!("{} does not exist (no sysfs, or a virtual device)", dev.display()));
    }
    let speed = |d: &Path, f: &str| read(d.join(f)).as_deref().and_then(parse_link_speed);
    let width = |d: &Path, f: &str| read(d.join(f)).and_then(|s| s.parse::<u32>().ok()).filter(|&w| w > 0);
    // The upstream port is the parent directory of the device's canonical sysfs path.
    let up = std::fs::canonicalize(&dev).ok().and_then(|p| p.parent().map(Path::to_path_buf));
    let up = up.filter(|u| u.join("max_link_speed").exists());
    let min_opt = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let gt = min_opt(speed(&dev, "max_link_speed"), up.as_deref().and_then(|u| speed(u, "max_link_speed")));
    let w = match (width(&dev, "max_link_width"), up.as_deref().and_then(|u| width(u, "max_link_width"))) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let link = match (gt, w) {
        (Some(gt), Some(w)) => generation(gt).map(|g| Link { gt_s: gt, width: w, generation: g, gbps: link_gbps(gt, w) }),
        _ => None,
    };
    let numa = read(dev.join("numa_node")).and_then(|s| s.parse::<i64>().ok()).filter(|&n| n >= 0);
    let local = read(dev.join("local_cpulist")).and_then(|s| parse_cpu_list(&s).ok());
    let v = json!({
        "address": addr,
        "generation": link.map(|l| l.generation),
        "width": link.map(|l| l.width),
        "gt_per_s": link.map(|l| l.gt_s),
        "theoretical_gbps": link.map(|l| l.gbps),
        "current_gt_per_s": speed(&dev, "current_link_speed"),
        "current_width": width(&dev, "current_link_width"),
        "numa_node": numa,
        "local_cpus": local.as_deref().map(cpu_list_string),
        "reason": match (link, gt, w) {
            (Some(_), _, _) => Value::Null,
            // Read, but at a rate no PCIe generation signals at (a link of another kind).
            (None, Some(gt), Some(_)) => json!(format!("max_link_speed {gt} GT/s is no PCIe generation's rate")),
            _ => json!("sysfs gives no max_link_speed/max_link_width for the device"),
        },
    });
    (v, link, local)
}

/// The CPUs the calling thread may run on.
pub fn current_affinity() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain bits; sched_getaffinity fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: a valid cpu_set_t of the size passed.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return Vec::new();
    }
    // SAFETY: CPU_ISSET reads the set for an index below CPU_SETSIZE.
    (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect()
}

/// Pins every thread of the process (the driver's included, which an affinity set on one
/// thread would miss) to `cpus`; threads created later inherit it from their creator.
pub fn pin_process(cpus: &[usize]) -> Result<(), String> {
    // SAFETY: as in current_affinity.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        if c >= libc::CPU_SETSIZE as usize {
            return Err(format!("CPU {c} is beyond CPU_SETSIZE"));
        }
        // SAFETY: c < CPU_SETSIZE, checked above.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // The calling thread first, so that a refusal (CPUs not online, or not allowed by the
    // cgroup) is reported before any thread moved.
    // SAFETY: a valid cpu_set_t of the size passed.
    if unsafe { libc::sched_setaffinity(0, size, &set) } != 0 {
        return Err(format!("sched_setaffinity({}): {}", cpu_list_string(cpus), std::io::Error::last_os_error()));
    }
    let tids = std::fs::read_dir("/proc/self/task").into_iter().flatten().flatten();
    for tid in tids.filter_map(|e| e.file_name().into_string().ok()?.parse::<libc::pid_t>().ok()) {
        // SAFETY: as above; a thread that exited meanwhile fails with ESRCH, which is fine.
        unsafe { libc::sched_setaffinity(tid, size, &set) };
    }
    Ok(())
}

/// The build: vkhost's version and the git commit it was built from.
pub fn build() -> (&'static str, &'static str) {
    (env!("CARGO_PKG_VERSION"), env!("VKHOST_GIT_COMMIT"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,8,10-11").unwrap(), [0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse_cpu_list(" 5 ").unwrap(), [5]);
        assert_eq!(parse_cpu_list("3,1,1-2").unwrap(), [1, 2, 3]);
        for bad in ["", "a", "3-1", "1-", "-", "1,,x", "0,,1", "0,1,"] {
            assert!(parse_cpu_list(bad).is_err(), "{bad}");
        }
        assert_eq!(cpu_list_string(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(cpu_list_string(&[7]), "7");
        assert_eq!(cpu_list_string(&[]), "");
    }

    #[test]
    fn links() {
        assert_eq!(parse_link_speed("32.0 GT/s PCIe"), Some(32.0));
        assert_eq!(parse_link_speed("2.5 GT/s"), Some(2.5));
        assert_eq!(parse_link_speed("Unknown"), None);
        assert_eq!(generation(32.0), Some(5));
        assert_eq!(generation(2.5), Some(1));
        assert_eq!(generation(3.0), None);
        // Gen5 x16: 32 GT/s x 16 x 128/130 / 8 = 63.015 GB/s per direction.
        assert!((link_gbps(32.0, 16) - 63.015).abs() < 1e-3);
        // Gen1 x1: 2.5 x 0.8 / 8 = 0.25 GB/s.
        assert!((link_gbps(2.5, 1) - 0.25).abs() < 1e-12);
    }

    /// A fake sysfs: a Gen5 x16 device behind a Gen4 x16 port, on NUMA node 1.
    #[test]
    fn pcie_from_a_fake_sysfs() {
        let root = std::env::temp_dir().join(format!("vkhost-sysfs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let port = root.join("devices/pci0000:00/0000:00:01.0");
        let dev = port.join("0000:01:00.0");
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::create_dir_all(root.join("bus/pci/devices")).unwrap();
        std::os::unix::fs::symlink(&dev, root.join("bus/pci/devices/0000:01:00.0")).unwrap();
        let w = |d: &Path, f: &str, v: &str| std::fs::write(d.join(f), format!("{v}\n")).unwrap();
        w(&dev, "max_link_speed", "32.0 GT/s PCIe");
        w(&dev, "max_link_width", "16");
        w(&dev, "current_link_speed", "2.5 GT/s PCIe");
        w(&dev, "current_link_width", "16");
        w(&dev, "numa_node", "1");
        w(&dev, "local_cpulist", "8-15");
        w(&port, "max_link_speed", "16.0 GT/s PCIe");
        w(&port, "max_link_width", "16");
        let (v, link, local) = pcie_in(&root, Ok("0000:01:00.0".into()));
        // The port caps the link at Gen4; the idle downtrain shows in current_* only.
        let l = link.unwrap();
        assert_eq!((l.generation, l.width, l.gt_s), (4, 16, 16.0));
        assert!((l.gbps - link_gbps(16.0, 16)).abs() < 1e-12);
        assert_eq!(v["current_gt_per_s"], 2.5);
        assert_eq!(v["numa_node"], 1);
        assert_eq!(v["local_cpus"], "8-15");
        assert!(v["reason"].is_null());
        assert_eq!(local.unwrap(), (8..16).collect::<Vec<_>>());
        // Without the device in sysfs, or without the extension: nulls and a reason.
        let (v, link, local) = pcie_in(&root, Ok("0000:02:00.0".into()));
        assert!(link.is_none() && local.is_none() && v["generation"].is_null());
        assert!(v["reason"].as_str().unwrap().contains("does not exist"));
        let (v, _, _) = pcie_in(&root, Err("no VK_EXT_pci_bus_info".into()));
        assert!(v["address"].is_null() && v["reason"] == "no VK_EXT_pci_bus_info");
        // A rate no generation signals at: no link, and a reason that says so (it said sysfs
        // gave no speed, which it had).
        w(&dev, "max_link_speed", "20.0 GT/s PCIe");
        std::fs::remove_file(port.join("max_link_speed")).unwrap();
        let (v, link, _) = pcie_in(&root, Ok("0000:01:00.0".into()));
        assert!(link.is_none() && v["generation"].is_null());
        assert_eq!(v["reason"], "max_link_speed 20 GT/s is no PCIe generation's rate");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339(4_102_444_799), "2099-12-31T23:59:59Z");
    }
}
