//! Where the time of `alloc_pinned` goes (issue 9: the `alloc_pinned` figures of the 3% line).
//!
//!     cargo run --release --example alloc_cost -- [rounds=15] [sizes in KiB, comma-separated]
//!
//! For each size, alternating round by round so that drifts in the process hit every variant
//! alike, times the allocation and the free, separately, of:
//! - `host::alloc_pinned` + `host::free_pinned` (what the bench's `alloc_pinned` row times,
//!   plus the free);
//! - the bare Vulkan objects a pinned block is made of (vkCreateBuffer, vkAllocateMemory,
//!   vkBindBufferMemory, vkMapMemory, then unmap, free, destroy) on the memory type vkhost picks,
//!   with the buffer's sharing mode (exclusive or concurrent across the families vkhost uses)
//!   and usage (TRANSFER only, or TRANSFER | STORAGE) varied;
//! - vkAllocateMemory + vkFreeMemory alone, and with the map.
//!
//! Prints, per variant, the allocation's median / min in microseconds and its ratio to the
//! library's `alloc_pinned`, then the free's median (the library's `free_pinned` hands the
//! driver's free to a background thread; the bare variants free inline).

use std::time::Instant;
use vkhost::{Device, host, vk};
#[path = "support/args.rs"]
mod args;

/// The error of a failed Vulkan `call`.
fn failed(call: &'static str) -> impl Fn(vk::Result) -> vkhost::Error {
    move |code| vkhost::Error::Vulkan { call, code }
}

fn main() -> vkhost::Result<()> {
    let rounds: usize = args::arg(1, 15)?.max(1);
    let sizes: Vec<u64> = args::sizes(2, 10, &[4 << 10, 1 << 20, 4 << 20, 16 << 20, 256 << 20])?.into_iter().map(|n| n as u64).collect();
    let dev = Device::open_default()?;
    let raw = dev.raw()?;
    let d = &raw.device;
    // SAFETY: plain query of the physical device vkhost opened.
    let mp = unsafe { raw.instance.get_physical_device_memory_properties(raw.physical_device) };
    let types: Vec<vk::MemoryPropertyFlags> = mp.memory_types[..mp.memory_type_count as usize].iter().map(|t| t.property_flags).collect();
    let mut families = vec![raw.compute_family];
    families.extend(raw.copy_family);
    println!("{}: {rounds} rounds; families {families:?}; memory types {types:?}", dev.info().name);

    let transfer = vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST;
    let storage = transfer | vk::BufferUsageFlags::STORAGE_BUFFER;
    // (name, Some((concurrent, usage, map)) for buffer variants, None for the library path)
    #[derive(Clone, Copy)]
    enum V {
        Library,
        Buffer { concurrent: bool, usage: vk::BufferUsageFlags },
        Memory { map: bool },
    }
    let variants: [(&str, V); 7] = [
        ("host::alloc_pinned + free_pinned", V::Library),
        ("buffer concurrent, storage (vkhost's)", V::Buffer { concurrent: true, usage: storage }),
        ("buffer concurrent, transfer only", V::Buffer { concurrent: true, usage: transfer }),
        ("buffer exclusive, storage", V::Buffer { concurrent: false, usage: storage }),
        ("buffer exclusive, transfer only", V::Buffer { concurrent: false, usage: transfer }),
        ("memory + map only", V::Memory { map: true }),
        ("memory only", V::Memory { map: false }),
    ];
    for &size in &sizes {
        let mut t: Vec<Vec<f64>> = vec![vec![]; variants.len()];
        let mut f: Vec<Vec<f64>> = vec![vec![]; variants.len()];
        for r in 0..rounds + 1 {
            for (i, &(_, v)) in variants.iter().enumerate() {
                let start = Instant::now();
                let freed = match v {
                    V::Library => {
                        let p = host::alloc_pinned(&dev, size as usize)?;
                        let freed = Instant::now();
                        host::free_pinned(&dev, p)?;
                        freed
                    }
                    V::Buffer { concurrent, usage } => {
                        let info = vk::BufferCreateInfo::default().size(size).usage(usage);
                        let info = if concurrent && families.len() > 1 {
                            info.sharing_mode(vk::SharingMode::CONCURRENT).queue_family_indices(&families)
                        } else {
                            info.sharing_mode(vk::SharingMode::EXCLUSIVE)
                        };
                        // SAFETY: a valid create info; every object is destroyed below, unused.
                        unsafe {
                            let b = d.create_buffer(&info, None).map_err(failed("vkCreateBuffer"))?;
                            let req = d.get_buffer_memory_requirements(b);
                            let index = vkhost::memtype::pinned(&types, req.memory_type_bits).expect("a pinned type").index;
                            let ai = vk::MemoryAllocateInfo::default().allocation_size(req.size).memory_type_index(index);
                            let m = d.allocate_memory(&ai, None).map_err(failed("vkAllocateMemory"))?;
                            d.bind_buffer_memory(b, m, 0).map_err(failed("vkBindBufferMemory"))?;
                            let p = d.map_memory(m, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty()).map_err(failed("vkMapMemory"))?;
                            std::hint::black_box(p);
                            let freed = Instant::now();
                            d.unmap_memory(m);
                            d.destroy_buffer(b, None);
                            d.free_memory(m, None);
                            freed
                        }
                    }
                    V::Memory { map } => {
                        let index = vkhost::memtype::pinned(&types, u32::MAX).expect("a pinned type").index;
                        let ai = vk::MemoryAllocateInfo::default().allocation_size(size).memory_type_index(index);
                        // SAFETY: a valid allocate info; the memory is freed below, unused.
                        unsafe {
                            let m = d.allocate_memory(&ai, None).map_err(failed("vkAllocateMemory"))?;
                            let p = if map {
                                Some(d.map_memory(m, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty()).map_err(failed("vkMapMemory"))?)
                            } else {
                                None
                            };
                            std::hint::black_box(p);
                            let freed = Instant::now();
                            if p.is_some() {
                                d.unmap_memory(m);
                            }
                            d.free_memory(m, None);
                            freed
                        }
                    }
                };
                // Round 0 warms the driver's paths and is not counted.
                if r > 0 {
                    t[i].push((freed - start).as_secs_f64() * 1e6);
                    f[i].push(freed.elapsed().as_secs_f64() * 1e6);
                }
            }
            // Free-list effects: let the background releaser of `free_pinned` finish.
            dev.release_queued();
        }
        let med = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            (v[v.len() / 2], v[0])
        };
        let (lib, _) = med(&mut t[0].clone());
        println!("== {} KiB", size >> 10);
        for (i, (name, _)) in variants.iter().enumerate() {
            let (m, lo) = med(&mut t[i]);
            let (fm, _) = med(&mut f[i]);
            println!("  {name:40} alloc median {m:10.1} us  min {lo:10.1} us  {:.2}x of the library's;  free {fm:10.1} us", m / lib);
        }
    }
    Ok(())
}
