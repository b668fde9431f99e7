//! `vkhost devices`: each device's facts, and what vkhost would do on it.

use serde_json::{Value, json};
use std::process::ExitCode;
use vkhost::{Device, DeviceInfo, OpenOptions, fmt_bytes};

#[derive(clap::Args)]
pub struct Args {
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn flags<T: std::fmt::Debug>(f: T) -> String {
    let s = format!("{f:?}").replace(" | ", "|");
    if s.is_empty() || s == "(empty)" || s == "0x0" { "none".into() } else { s }
}

/// What opening the device tells beyond its facts.
struct Opened {
    registration: Result<usize, String>,
    probed: bool,
    choices: Option<vkhost::MemoryChoices>,
    queues: Option<vkhost::CopyQueues>,
    /// The largest copy region (`Device::copy_piece`).
    copy_piece: Option<u64>,
    open_error: Option<String>,
}

fn open(info: &DeviceInfo) -> Opened {
    match Device::open_with(info.index, &OpenOptions::default()) {
        Ok(d) => {
            let o = Opened {
                registration: d.host_registration(),
                probed: d.import_probe().is_some(),
                choices: Some(d.memory_choices()),
                queues: Some(d.copy_queues()),
                copy_piece: Some(d.copy_piece()),
                open_error: None,
            };
            let _ = d.destroy();
            o
        }
        Err(e) => {
            let registration = info.host_registration();
            Opened { registration, probed: false, choices: None, queues: None, copy_piece: None, open_error: Some(e.to_string()) }
        }
    }
}

/// What moves a submitted copy on this device, for notes: "the copy engine" where the device
/// has a transfer-only queue family, else "the compute queue" (lavapipe, and GPUs without copy
/// engines, run every copy there).
pub fn copier(info: &vkhost::DeviceInfo) -> &'static str {
    if info.transfer_family().is_some() { "the copy engine" } else { "the compute queue" }
}

pub fn registration_line(r: &Result<usize, String>) -> String {
    match r {
        Ok(a) => format!("available, alignment {}", fmt_bytes(*a as u64)),
        Err(why) => format!("unavailable: {why}"),
    }
}

fn kind(k: vkhost::QueueKind) -> &'static str {
    match k {
        vkhost::QueueKind::Copy => "copy engine",
        vkhost::QueueKind::Compute => "compute queue",
    }
}

/// The copy-queue choice as lines: which queue each class of synchronous copy uses, and the
/// measurement behind it.
pub fn copy_queue_lines(q: &vkhost::CopyQueues) -> Vec<String> {
    let dir = |small, bulk, min: u64| {
        if small == bulk {
            format!("the {}", kind(small))
        } else {
            format!("the {} below {}, the {} from it", kind(small), fmt_bytes(min), kind(bulk))
        }
    };
    let mut v = vec![format!(
        "synchronous copies: h2d on {}; d2h on {}",
        dir(q.small_to_device, q.bulk_to_device, q.bulk_min_to_device),
        dir(q.small_to_host, q.bulk_to_host, q.bulk_min_to_host)
    )];
    match &q.measured {
        Some((c, k)) => v.push(format!(
            "  measured at open: copy engine {:.1}/{:.1} GB/s, 4 KiB {:.1}/{:.1} us; compute queue {:.1}/{:.1} GB/s, 4 KiB {:.1}/{:.1} us (h2d/d2h)",
            c.bulk_to_device_gbps,
            c.bulk_to_host_gbps,
            c.small_to_device_us,
            c.small_to_host_us,
            k.bulk_to_device_gbps,
            k.bulk_to_host_gbps,
            k.small_to_device_us,
            k.small_to_host_us
        )),
        None => v.push("  not measured (one kind of queue, or fixed by the options)".into()),
    }
    if q.reads_host_slowly() {
        v.push(format!(
            "  slow host reads: h2d below {}x d2h at open; `bar_assist` Auto (the default) shares DeviceBuffer writes of {} and more with CPU stores",
            vkhost::CopyQueues::SLOW_READS,
            fmt_bytes(OpenOptions::ASSIST_MIN as u64)
        ));
    }
    v
}

/// The copy-queue choice as JSON (`vkhost devices --json`, the bench's `run.device`).
pub fn queues_json(q: &vkhost::CopyQueues) -> Value {
    let fig = |f: &vkhost::QueueFigures| json!({"bulk_h2d_gbps": f.bulk_to_device_gbps, "bulk_d2h_gbps": f.bulk_to_host_gbps, "small_h2d_us": f.small_to_device_us, "small_d2h_us": f.small_to_host_us});
    json!({
        "bulk_min_h2d_bytes": q.bulk_min_to_device,
        "bulk_min_d2h_bytes": q.bulk_min_to_host,
        "small_h2d": kind(q.small_to_device),
        "small_d2h": kind(q.small_to_host),
        "bulk_h2d": kind(q.bulk_to_device),
        "bulk_d2h": kind(q.bulk_to_host),
        "measured": q.measured.as_ref().map(|(c, k)| json!({"copy_engine": fig(c), "compute_queue": fig(k)})),
        "reads_host_slowly": q.reads_host_slowly(),
    })
}

fn choice(c: Option<vkhost::memtype::Choice>) -> Value {
    match c {
        Some(c) => json!({"type": c.index, "why": c.reason}),
        None => Value::Null,
    }
}

pub fn run(a: Args) -> anyhow_free::Result<ExitCode> {
    let infos = vkhost::devices()?;
    if infos.is_empty() {
        eprintln!("no Vulkan devices: the loader found no driver (`make setup` installs lavapipe, Debian's mesa-vulkan-drivers)");
        return Ok(ExitCode::from(1));
    }
    let mut out = Vec::new();
    for info in &infos {
        let o = open(info);
        if a.json {
            out.push(json!({
                "index": info.index,
                "name": info.name,
                "type": info.device_type.as_str(),
                "vendor_id": info.vendor_id,
                "device_id": info.device_id,
                "driver_name": info.driver_name,
                "driver_info": info.driver_info,
                "api_version": info.api_version.to_string(),
                "memory_heaps": info.memory_heaps.iter().map(|h| json!({"size": h.size, "flags": flags(h.flags)})).collect::<Vec<_>>(),
                "memory_types": info.memory_types.iter().map(|t| json!({"heap": t.heap_index, "flags": flags(t.flags)})).collect::<Vec<_>>(),
                "queue_families": info.queue_families.iter().map(|q| json!({"index": q.index, "flags": flags(q.flags), "count": q.count})).collect::<Vec<_>>(),
                "host_import_alignment": info.host_import_alignment,
                "max_memory_allocation_size": info.max_memory_allocation_size,
                "host_registration": match &o.registration { Ok(a) => json!({"available": true, "alignment": a, "probed": o.probed}), Err(w) => json!({"available": false, "reason": w, "probed": o.probed}) },
                "memory_choices": o.choices.as_ref().map(|c| json!({
                    "pinned": choice(c.pinned),
                    "import": choice(c.import),
                    "import_host_pointer_bits": c.import_bits.as_ref().ok(),
                    "device_buffer": choice(c.device_local),
                })),
                "copy_queues": o.queues.as_ref().map(queues_json),
                "copy_piece_bytes": o.copy_piece,
                "open_error": o.open_error,
            }));
            continue;
        }
        println!("[{}] {} ({})", info.index, info.name, info.device_type.as_str());
        println!("    vendor {:#06x}, device {:#06x}, API {}", info.vendor_id, info.device_id, info.api_version);
        println!("    driver {} ({})", info.driver_name, info.driver_info);
        for (i, h) in info.memory_heaps.iter().enumerate() {
            println!("    heap {i}: {} {}", fmt_bytes(h.size), flags(h.flags));
        }
        for (i, t) in info.memory_types.iter().enumerate() {
            println!("    memory type {i}: heap {} {}", t.heap_index, flags(t.flags));
        }
        for q in &info.queue_families {
            let tag = if q.is_transfer_only() { "  (copy engine)" } else { "" };
            println!("    queue family {}: {} x{}{tag}", q.index, flags(q.flags), q.count);
        }
        println!("    max allocation: {}", fmt_bytes(info.max_memory_allocation_size));
        let proof = match (&o.registration, o.probed) {
            (Ok(_), true) => " (proven by an import probe at open)",
            // The device did not open: the extension is only advertised, nothing was probed.
            (Ok(_), false) if o.open_error.is_some() => " (advertised; not probed: the device did not open)",
            _ => "",
        };
        println!("    host registration: {}{proof}", registration_line(&o.registration));
        if let Some(c) = &o.choices {
            let show = |c: Option<vkhost::memtype::Choice>| match c {
                Some(c) => format!("memory type {} ({})", c.index, c.reason),
                None => "none".to_string(),
            };
            println!("    pinned blocks use: {}", show(c.pinned));
            match &c.import_bits {
                Ok(bits) => println!("    imports use: {} (host pointer allows types {bits:#x})", show(c.import)),
                Err(why) => println!("    imports use: none ({why})"),
            }
            println!("    device buffers use: {}", show(c.device_local));
        }
        if let Some(q) = &o.queues {
            for l in copy_queue_lines(q) {
                println!("    {l}");
            }
        }
        if let Some(p) = o.copy_piece {
            println!("    copy regions: at most {} each (OpenOptions::copy_piece, VKHOST_COPY_PIECE)", fmt_bytes(p));
        }
        if let Some(e) = &o.open_error {
            println!("    could not open: {e}");
        }
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
    }
    Ok(ExitCode::SUCCESS)
}

/// Refuses a device index none of `infos` (`vkhost::devices()`) has, saying which ones there
/// are (the library's `NoDevice` says only that none was found at it).
pub fn check_index(flag: &str, i: usize, infos: &[vkhost::DeviceInfo]) -> anyhow_free::Result<()> {
    if infos.iter().any(|d| d.index == i) {
        return Ok(());
    }
    let list: Vec<String> = infos.iter().map(|d| format!("[{}] {}", d.index, d.name)).collect();
    Err(format!("{flag} {i}: no such device; {} present: {}", infos.len(), if list.is_empty() { "none".into() } else { list.join(", ") })
        .into())
}

/// A tiny boxed-error result, so subcommands can `?` any error into a message.
pub mod anyhow_free {
    pub type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;
}
