//! Where the time of `register` goes (issue 9/10: the 1 GiB register cost).
//!
//!     cargo run --release --example register_cost -- [MiB=1024] [iters=5]
//!
//! For 4 KiB pages and for memory advised MADV_HUGEPAGE before it is first touched, times:
//! - `host::register` then `host::unregister`, waiting for the background release
//!   (`Device::release_queued`) before the next register, and without that wait (the release of
//!   the previous import overlaps the next register);
//! - the bare Vulkan import the registration is made of: vkGetMemoryHostPointerPropertiesEXT +
//!   vkAllocateMemory(import) + vkFreeMemory, whole, and in 4 pieces on 4 threads.
//!
//! Prints one line per measure: median / min / max in ms.

use std::time::Instant;
use vkhost::{Device, host, vk};
#[path = "support/args.rs"]
mod args;

fn ms(v: &mut [f64]) -> String {
    v.sort_by(f64::total_cmp);
    format!("median {:7.2}  min {:7.2}  max {:7.2} ms", v[v.len() / 2] * 1e3, v[0] * 1e3, v[v.len() - 1] * 1e3)
}

fn anon_huge_kib() -> u64 {
    std::fs::read_to_string("/proc/self/smaps_rollup")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("AnonHugePages:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok()))
        .unwrap_or(0)
}

fn main() -> vkhost::Result<()> {
    let (mib, len) = args::size_arg(1, 20, 1024, 0)?;
    let iters: usize = args::arg(2, 5)?.max(1);
    let dev = Device::open_default()?;
    let raw = dev.raw()?;
    let ext = ash::ext::external_memory_host::Device::new(&raw.instance, &raw.device);
    // SAFETY: plain query of the physical device vkhost opened.
    let mp = unsafe { raw.instance.get_physical_device_memory_properties(raw.physical_device) };
    println!(
        "{}: {mib} MiB, {iters} iterations; THP: {}",
        dev.info().name,
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default().trim()
    );
    // A small registration: what the /proc/self/maps text costs in this process (vkhost reads
    // it only where the kernel lacks the PROCMAP_QUERY ioctl) against a whole register.
    let mut text = vec![];
    let mut lines = 0;
    for _ in 0..20 {
        let t = Instant::now();
        let s = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
        lines = s.lines().filter(|l| l.contains('-')).count();
        text.push(t.elapsed().as_secs_f64());
    }
    let mut small = vec![0u8; 3 << 12];
    let page = (small.as_mut_ptr() as usize).next_multiple_of(4096) as *mut u8;
    let mut reg4k = vec![];
    for _ in 0..20 {
        let t = Instant::now();
        // SAFETY: `small` outlives the unregister below.
        unsafe { host::register(&dev, page, 4096) }?;
        reg4k.push(t.elapsed().as_secs_f64());
        host::unregister(&dev, page)?;
        dev.release_queued();
    }
    println!("/proc/self/maps text ({lines} mappings)  {}", ms(&mut text));
    println!("register 4 KiB (release waited)    {}", ms(&mut reg4k));
    for huge in [false, true] {
        // SAFETY: a fresh anonymous private mapping, unmapped at the end of this iteration after
        // every import of it is gone.
        let base = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
        };
        assert!(base != libc::MAP_FAILED, "cannot map {mib} MiB");
        if huge {
            // SAFETY: advice on our own mapping.
            unsafe { libc::madvise(base, len, libc::MADV_HUGEPAGE) };
        }
        let p = base as *mut u8;
        // SAFETY: the mapping is `len` bytes, read-write, ours until munmap below.
        unsafe { std::ptr::write_bytes(p, 0x5A, len) };
        let label = if huge { "MADV_HUGEPAGE" } else { "4 KiB pages " };
        println!("[{label}] AnonHugePages {} MiB", anon_huge_kib() >> 10);

        let (mut reg, mut unreg, mut rel) = (vec![], vec![], vec![]);
        for _ in 0..iters {
            let t = Instant::now();
            // SAFETY: the mapping outlives the unregister below.
            unsafe { host::register(&dev, p, len) }?;
            reg.push(t.elapsed().as_secs_f64());
            let t = Instant::now();
            host::unregister(&dev, p)?;
            unreg.push(t.elapsed().as_secs_f64());
            dev.release_queued();
            rel.push(t.elapsed().as_secs_f64());
        }
        println!("[{label}] register (release waited)    {}", ms(&mut reg));
        println!("[{label}] unregister returns           {}", ms(&mut unreg));
        println!("[{label}] unregister + release         {}", ms(&mut rel));
        let mut reg2 = vec![];
        for _ in 0..iters {
            let t = Instant::now();
            // SAFETY: as above.
            unsafe { host::register(&dev, p, len) }?;
            reg2.push(t.elapsed().as_secs_f64());
            host::unregister(&dev, p)?;
        }
        dev.release_queued();
        println!("[{label}] register (release overlaps)  {}", ms(&mut reg2));

        // The bare import, whole and in 4 pieces on 4 threads.
        let import = |ptr: *mut u8, n: usize| -> (f64, f64, f64) {
            let t = Instant::now();
            let mut props = vk::MemoryHostPointerPropertiesEXT::default();
            // SAFETY: the extension is enabled by vkhost; `ptr` is page-aligned mapped memory.
            let r = unsafe {
                (ext.fp().get_memory_host_pointer_properties_ext)(
                    raw.device.handle(),
                    vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT,
                    ptr.cast(),
                    &mut props,
                )
            };
            assert_eq!(r, vk::Result::SUCCESS, "host pointer properties");
            let t_props = t.elapsed().as_secs_f64();
            let ty = (0..mp.memory_type_count)
                .filter(|&i| props.memory_type_bits & (1 << i) != 0)
                .max_by_key(|&i| mp.memory_types[i as usize].property_flags.contains(vk::MemoryPropertyFlags::HOST_CACHED))
                .expect("an importable type");
            let mut imp = vk::ImportMemoryHostPointerInfoEXT::default()
                .handle_type(vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT)
                .host_pointer(ptr.cast());
            let ai = vk::MemoryAllocateInfo::default().allocation_size(n as u64).memory_type_index(ty).push_next(&mut imp);
            let t = Instant::now();
            // SAFETY: valid import info over our own mapping; freed below.
            let m = unsafe { raw.device.allocate_memory(&ai, None) }.expect("import");
            let t_alloc = t.elapsed().as_secs_f64();
            let t = Instant::now();
            // SAFETY: our fresh allocation, unused.
            unsafe { raw.device.free_memory(m, None) };
            (t_props, t_alloc, t.elapsed().as_secs_f64())
        };
        let (mut pr, mut al, mut fr) = (vec![], vec![], vec![]);
        for _ in 0..iters {
            let (a, b, c) = import(p, len);
            pr.push(a);
            al.push(b);
            fr.push(c);
        }
        println!("[{label}] raw host pointer properties  {}", ms(&mut pr));
        println!("[{label}] raw vkAllocateMemory import  {}", ms(&mut al));
        println!("[{label}] raw vkFreeMemory             {}", ms(&mut fr));
        let (mut par, mut parf) = (vec![], vec![]);
        let addr = p as usize;
        for _ in 0..iters {
            let t = Instant::now();
            let frees: Vec<f64> = std::thread::scope(|s| {
                let hs: Vec<_> = (0..4).map(|k| s.spawn(move || import((addr + k * len / 4) as *mut u8, len / 4).2)).collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let total = t.elapsed().as_secs_f64();
            parf.push(frees.iter().cloned().fold(0.0, f64::max));
            par.push(total);
        }
        println!("[{label}] raw 4 pieces x 4 threads     {} (import+free)", ms(&mut par));
        // SAFETY: every import of the mapping is gone.
        unsafe { libc::munmap(base, len) };
    }
    dev.destroy()
}
