//! The `bar` path: memcpy into and out of mapped DEVICE_LOCAL|HOST_VISIBLE memory (the BAR
//! window, or UMA memory), with reads capped by `--bar-read-cap`.

use super::{Ctx, DirKind, flush_cache, measure_with, point, point::pattern};
use crate::devices::anyhow_free::Result;
use crate::stats::size_label;
use vkhost::{Device, vk};

/// A buffer in the BAR window (or UMA memory), mapped, through the interop handles.
struct Bar {
    raw: vkhost::RawDevice,
    buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    ptr: *mut u8,
    len: usize,
}

impl Bar {
    fn new(dev: &Device, len: usize) -> Result<Option<Bar>> {
        let types = dev.info().memory_type_flags();
        let want = vk::MemoryPropertyFlags::DEVICE_LOCAL | vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
        let raw = dev.raw()?;
        let info =
            vk::BufferCreateInfo::default().size(len as u64).usage(vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST);
        // SAFETY: valid create info on a live device; every object is destroyed in Drop or below.
        unsafe {
            let buffer = raw.device.create_buffer(&info, None)?;
            let req = raw.device.get_buffer_memory_requirements(buffer);
            let Some(ti) = (0..types.len()).find(|&i| req.memory_type_bits & (1 << i) != 0 && types[i].contains(want)) else {
                raw.device.destroy_buffer(buffer, None);
                return Ok(None);
            };
            let ai = vk::MemoryAllocateInfo::default().allocation_size(req.size).memory_type_index(ti as u32);
            let memory = match raw.device.allocate_memory(&ai, None) {
                Ok(m) => m,
                Err(e) => {
                    raw.device.destroy_buffer(buffer, None);
                    return Err(format!("BAR allocation of {len} bytes: {e:?}").into());
                }
            };
            let ptr = raw
                .device
                .bind_buffer_memory(buffer, memory, 0)
                .and_then(|_| raw.device.map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty()));
            match ptr {
                Ok(p) => Ok(Some(Bar { raw, buffer, memory, ptr: p.cast(), len })),
                Err(e) => {
                    raw.device.destroy_buffer(buffer, None);
                    raw.device.free_memory(memory, None);
                    Err(format!("BAR bind/map: {e:?}").into())
                }
            }
        }
    }
    fn slice(&mut self) -> &mut [u8] {
        // SAFETY: mapped for len bytes while self lives.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        // SAFETY: our objects; no device work uses them (the bar path is memcpy only).
        unsafe {
            self.raw.device.destroy_buffer(self.buffer, None);
            self.raw.device.free_memory(self.memory, None);
        }
    }
}
pub(super) fn bench_bar(cx: &mut Ctx, dirs: &[DirKind], sizes: &[u64], max: usize, cap: usize) -> Result<()> {
    let Some(mut bar) = Bar::new(&cx.dev, max)? else {
        return Err("no DEVICE_LOCAL|HOST_VISIBLE memory type".into());
    };
    let mut host = vec![1u8; max];
    let mut back = vec![0u8; max.min(cap)];
    for &size in sizes {
        let n = size as usize;
        for &dir in dirs {
            if super::interrupted() {
                return Ok(());
            }
            cx.pb.set_message(format!("bar {} {}", dir.name(), size_label(size)));
            if dir != DirKind::H2d && n > cap {
                cx.pb.inc(1);
                continue;
            }
            let what = format!("bar {} {}", dir.name(), size_label(size));
            let mut want = vec![0u8; n];
            pattern(&mut want, size ^ 0xBA5);
            // h2d: memcpy in, read back (capped) and check; d2h: memcpy out and check.
            bar.slice()[..n].copy_from_slice(&want);
            let k = n.min(cap);
            back[..k].copy_from_slice(&bar.slice()[..k]);
            let ok = cx.check(&what, &back[..k], &want[..k]);
            // --flush-cache: the CPU copies the bytes here too.
            let s = match dir {
                DirKind::H2d => measure_with(
                    cx.iters,
                    cx.budget,
                    || flush_cache(&mut cx.flush),
                    || {
                        bar.slice()[..n].copy_from_slice(&host[..n]);
                        Ok(())
                    },
                )?,
                DirKind::D2h => measure_with(
                    cx.iters,
                    cx.budget,
                    || flush_cache(&mut cx.flush),
                    || {
                        host[..n].copy_from_slice(&bar.slice()[..n]);
                        Ok(())
                    },
                )?,
                DirKind::Bidir | DirKind::D2d => {
                    cx.pb.inc(1);
                    continue;
                }
            };
            let mut p = point("vulkan", "copy", "bar", dir.name(), size, size, s);
            p.verified = Some(ok);
            if dir == DirKind::H2d && n > cap {
                p.note = format!("check read back the first {} only", size_label(cap as u64));
            }
            cx.push(p);
        }
    }
    let cap_note = format!(
        "bar: d2h reads capped at {} (--bar-read-cap): on discrete GPUs they run at ~0.03 GB/s; bidir not measured (memcpy only)",
        size_label(cap as u64)
    );
    cx.pb.suspend(|| eprintln!("{cap_note}"));
    Ok(())
}
