//! `vkhost check`: a self-test of vkhost on your driver.
//!
//! The correctness matrix of every path (pinned, registered, pageable, mixed) in both
//! directions, synchronous and on a stream, at odd sizes and offsets, with guard bytes around
//! every copied range on the host and on the device; the refusals (unmapped, read-only,
//! overlapping, double operations); teardown with live entries; the built-in kernels (fill,
//! SM copy, checksum against the CPU) over device buffers, pinned blocks and registrations at
//! aligned and unaligned offsets, with guard bytes, in the device's descriptor mode and again
//! with descriptor sets (the path of drivers without VK_KHR_push_descriptor); the multi-device
//! paths on two VkDevices of the device (HostRange, broadcast, gather, import pieces, one
//! destroyed first); stream copies gathered through a stream's scratch buffer
//! (`OpenOptions::gather_regions`); direct copies cut into 4 KiB regions
//! (`OpenOptions::copy_piece`). The validation layer is on where installed, and any
//! validation error is a failure. Exit code 1 on any failure.

use crate::devices::anyhow_free::Result;
use crate::pages::{Pages, RW};
use std::process::ExitCode;
use vkhost::host::{self, entries_of};
use vkhost::kernel::{Binding, DescriptorMode, checksum_cpu};
use vkhost::{CopyPath, Device, DeviceBuffer, Error, OpenOptions, PinnedBuffer, QueueKind, Stream};

#[derive(clap::Args)]
pub struct Args {
    /// Check this device index (default: the preferred device).
    #[arg(long, conflicts_with = "all")]
    device: Option<usize>,
    /// Check every device.
    #[arg(long)]
    all: bool,
}

const GUARD: usize = 4096 + 5;
const SIZES: [usize; 6] = [1, 3, 4095, 4097, 65537, (1 << 20) + 3];
const OFFSETS: [(usize, usize); 3] = [(0, 0), (1, 13), (4095, 7)];

struct Row {
    name: String,
    passed: usize,
    total: usize,
    detail: String,
}

/// `n` non-zero bytes of a sequence of period 2^15, entered at an offset of the seed's (an odd
/// multiple, so seeds that differ below 2^15 start at different places): patterns of different
/// seeds differ (see the test).
fn pattern(n: usize, seed: usize) -> Vec<u8> {
    let start = seed.wrapping_mul(0x9E37_79B9);
    (0..n).map(|i| ((i.wrapping_add(start).wrapping_mul(2654435761) >> 7) as u8) | 1).collect()
}

#[cfg(test)]
mod tests {
    use super::pattern;

    /// Patterns of different seeds differ: the rows that tell two sources apart by their seeds
    /// (`gathered_case`'s pinned and registered pieces, `piece` against `piece + 1`, in one
    /// batch) cannot pass a piece taken from the wrong one. The seed was xored into each byte
    /// and bit 0 then forced on, so seeds 2k and 2k + 1 gave one pattern (and seeds 256
    /// apart too): for the even piece sizes both sources held the same bytes.
    #[test]
    fn patterns_of_different_seeds_differ() {
        for n in [40, 4096, 65536] {
            for s in 0..1024 {
                for t in [s + 1, s + 2, s + 3, s + 256] {
                    assert_ne!(pattern(n, s), pattern(n, t), "{n} bytes, seeds {s} and {t}");
                }
            }
        }
        assert!(pattern(4096, 5).iter().all(|&b| b != 0), "non-zero bytes");
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Path {
    Pinned,
    Registered,
    Pageable,
    Mixed,
}

/// Host memory for a path: `len` bytes at `off` inside a region with guards around.
enum Host {
    Pinned(PinnedBuffer),
    /// Mapped pages, the addresses registered in them, and their device: unregistered before
    /// the pages are unmapped, also when a row fails half-way (see `Drop`).
    Pages(Pages, Vec<usize>, Device),
    Vec(Vec<u8>),
}

impl Drop for Host {
    fn drop(&mut self) {
        // A row that failed before `finish` (an error from a copy) would otherwise unmap pages
        // still registered: a stale import later rows could meet.
        if let Host::Pages(_, regs, dev) = self {
            for r in regs.drain(..) {
                let _ = host::unregister(dev, r);
            }
        }
    }
}

impl Host {
    fn new(dev: &Device, path: Path, region: usize, off: usize, len: usize, can_register: bool) -> Result<Host> {
        Ok(match path {
            Path::Pinned => Host::Pinned(PinnedBuffer::new(dev, region)?),
            Path::Pageable => Host::Vec(vec![0; region]),
            Path::Registered | Path::Mixed => {
                let mut p = Pages::map(region.next_multiple_of(4096), RW)?;
                let base = p.slice().as_mut_ptr() as usize;
                let mut regs = Vec::new();
                if !can_register {
                    // Registration is unavailable: the same memory, which must then stage.
                } else if path == Path::Registered {
                    // SAFETY: the mapping outlives the registration (unregistered in Drop order
                    // by `finish`).
                    unsafe { host::register(dev, base + GUARD + off, len) }?;
                    regs.push(base + GUARD + off);
                } else if len >= 3 {
                    // Register the middle third: the range is gap + registration + gap.
                    let a = base + GUARD + off + len / 3;
                    // SAFETY: as above.
                    unsafe { host::register(dev, a, len / 3) }?;
                    regs.push(a);
                }
                Host::Pages(p, regs, dev.clone())
            }
        })
    }
    fn bytes(&mut self) -> &mut [u8] {
        match self {
            Host::Pinned(p) => &mut p[..],
            Host::Pages(p, _, _) => p.slice(),
            Host::Vec(v) => &mut v[..],
        }
    }
    /// Unregisters what `new` registered, reporting a failure (`Drop` would ignore it).
    fn finish(mut self) -> Result<()> {
        if let Host::Pages(_, regs, dev) = &mut self {
            for r in std::mem::take(regs) {
                host::unregister(dev, r)?;
            }
        }
        Ok(())
    }
}

fn expected(path: Path, len: usize, can_register: bool) -> CopyPath {
    match path {
        Path::Pinned => CopyPath::Direct,
        Path::Registered if can_register => CopyPath::Direct,
        Path::Mixed if can_register && len >= 3 => CopyPath::Mixed,
        _ => CopyPath::Staged,
    }
}

/// One copy through `path` in `dir` (h2d when `up`), sync or on `stream`, with guards.
fn one(
    dev: &Device,
    dbuf: &DeviceBuffer,
    stream: Option<&vkhost::Stream>,
    path: Path,
    up: bool,
    len: usize,
    (hoff, doff): (usize, usize),
) -> Result<()> {
    let region = GUARD + hoff + len + GUARD;
    let can_register = dev.host_registration().is_ok();
    let mut h = Host::new(dev, path, region, hoff, len, can_register)?;
    let payload = pattern(len, len + hoff);
    let dguard = 0xD7u8;
    let hguard = 0x5Au8;
    dbuf.write(0, &vec![dguard; doff + len + GUARD])?;
    let bytes = h.bytes();
    bytes.fill(hguard);
    let at = GUARD + hoff;
    let ptr = bytes.as_mut_ptr();
    // A small "mixed" range can lie wholly inside its registration's rounded page: then the
    // import covers it and the copy is rightly direct.
    let want_path = match expected(path, len, can_register) {
        CopyPath::Mixed if host::find(dev, ptr.wrapping_add(at), len).is_some() => CopyPath::Direct,
        p => p,
    };
    let ran = if up {
        bytes[at..at + len].copy_from_slice(&payload);
        match stream {
            // SAFETY: the host region lives until after synchronize.
            Some(s) => unsafe { s.copy_to_device_async(ptr.add(at), len, dbuf, doff).and_then(|()| s.synchronize()).map(|()| None) }?,
            // SAFETY: as above.
            None => Some(unsafe { host::copy_to_device(dev, ptr.add(at), len, dbuf, doff) }?),
        }
    } else {
        dbuf.write(doff, &payload)?;
        match stream {
            // SAFETY: the host region lives and is untouched until after synchronize.
            Some(s) => unsafe { s.copy_to_host_async(dbuf, doff, ptr.add(at), len).and_then(|()| s.synchronize()).map(|()| None) }?,
            // SAFETY: as above.
            None => Some(unsafe { host::copy_to_host(dev, dbuf, doff, ptr.add(at), len) }?),
        }
    };
    let mut dv = vec![0u8; doff + len + GUARD];
    dbuf.read(0, &mut dv)?;
    let bytes = h.bytes();
    let fail = |what: &str| -> Result<()> { Err(format!("{what} (len {len}, host offset {hoff}, device offset {doff})").into()) };
    let r = if bytes[..at].iter().any(|&b| b != hguard) || bytes[at + len..].iter().any(|&b| b != hguard) {
        fail("host guard bytes changed")
    } else if dv[..doff].iter().any(|&b| b != dguard) || dv[doff + len..].iter().any(|&b| b != dguard) {
        fail("device guard bytes changed")
    } else if (up && dv[doff..doff + len] != payload[..]) || (!up && bytes[at..at + len] != payload[..]) {
        fail("payload mismatch")
    } else if let Some(p) = ran.filter(|&p| p != want_path) {
        fail(&format!("ran {p:?}, expected {want_path:?}"))
    } else {
        Ok(())
    };
    h.finish()?;
    r
}

fn matrix(dev: &Device, rows: &mut Vec<Row>) -> Result<()> {
    matrix_of(
        dev,
        rows,
        &[("pinned", Path::Pinned), ("registered", Path::Registered), ("pageable", Path::Pageable), ("mixed", Path::Mixed)],
    )
}

/// The matrix with pinned blocks of vkhost's own huge-page memory (`pinned_huge_min` at one
/// page, so every block of the matrix is one), on a device of its own.
fn huge_pinned(index: usize, opts: &OpenOptions, rows: &mut Vec<Row>) -> Result<u64> {
    // One import per block whatever VKHOST_IMPORT_PIECE says: the probe below reads the
    // block's one memory (a block in pieces has none).
    let dev = Device::open_with(index, &OpenOptions { pinned_huge_min: Some(4096), max_import_piece: None, ..opts.clone() })?;
    if let Err(why) = dev.host_registration() {
        rows.push(Row { name: format!("huge-page pinned blocks: skipped ({why})"), passed: 0, total: 0, detail: String::new() });
    } else {
        // The blocks must really be imports: a silent fallback to the driver would make the
        // rows below repeat the plain pinned ones.
        let probe = PinnedBuffer::new(&dev, 1 << 20)?;
        let imported = probe.raw_memory().is_some_and(|r| r.handle_types == vkhost::vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT);
        drop(probe);
        rows.push(Row {
            name: "huge-page pinned blocks are imports".into(),
            passed: usize::from(imported),
            total: 1,
            detail: if imported {
                String::new()
            } else {
                "the driver allocated the block (memory type differs, or the import failed: RUST_LOG=vkhost=debug says which)".into()
            },
        });
        matrix_of(&dev, rows, &[("huge-page pinned", Path::Pinned)])?;
    }
    dev.destroy()?;
    Ok(dev.validation_errors())
}

/// The matrix with freed pinned blocks kept and reused (`pinned_cache`, whatever the device's
/// default), on a device of its own: every case of the pinned rows allocates its block and frees
/// it, so later cases of a size run in a block an earlier case used, filled with their own guard
/// bytes and payload.
fn reused_pinned(index: usize, opts: &OpenOptions, rows: &mut Vec<Row>) -> Result<u64> {
    // Driver blocks whatever VKHOST_IMPORT_PIECE or VKHOST_PINNED_HUGE_MIN say: blocks in
    // pieces or of vkhost's own memory are not kept.
    let o = OpenOptions {
        pinned_cache: Some(OpenOptions::PINNED_CACHE),
        max_import_piece: None,
        pinned_huge_min: Some(usize::MAX),
        ..opts.clone()
    };
    let dev = Device::open_with(index, &o)?;
    matrix_of(&dev, rows, &[("pinned, reused blocks", Path::Pinned)])?;
    // The cases must really run in kept blocks: a cache that kept nothing would make these rows
    // repeat the plain pinned ones.
    let reused = dev.pinned_cache().reused;
    rows.push(Row {
        name: "pinned blocks reused from the cache".into(),
        passed: usize::from(reused > 0),
        total: 1,
        detail: if reused > 0 { String::new() } else { "no block was reused".into() },
    });
    let left = entries_of(&dev);
    dev.destroy()?;
    let clean = left == 0 && dev.live_objects() == vkhost::LiveObjects::default();
    rows.push(Row {
        name: "kept pinned blocks freed at teardown".into(),
        passed: usize::from(clean),
        total: 1,
        detail: if clean { String::new() } else { format!("{left} entries, {:?} left", dev.live_objects()) },
    });
    Ok(dev.validation_errors())
}

/// The matrix with registrations and pinned blocks imported in 64 KiB pieces
/// (`max_import_piece`, as a device whose maxMemoryAllocationSize is below a range gets), on a
/// device of its own: most of its copies cross a piece boundary, which splits them.
fn in_pieces(index: usize, opts: &OpenOptions, rows: &mut Vec<Row>) -> Result<u64> {
    let piece = 64 << 10;
    let o = OpenOptions { max_import_piece: Some(piece), pinned_huge_min: Some(4096), ..opts.clone() };
    let dev = Device::open_with(index, &o)?;
    if let Err(why) = dev.host_registration() {
        rows.push(Row { name: format!("imports in 64 KiB pieces: skipped ({why})"), passed: 0, total: 0, detail: String::new() });
    } else {
        // The imports must really be in pieces: a silent single import would make the rows
        // below repeat the plain ones. A lookup inside one piece finds it, one across two not.
        let mut p = Pages::map(4 * piece, RW)?;
        let base = p.slice().as_mut_ptr() as usize;
        // SAFETY: the mapping outlives the registration (unregistered below).
        unsafe { host::register(&dev, base, 4 * piece) }?;
        let split = host::find(&dev, base + piece / 2, piece / 2).is_some() && host::find(&dev, base + piece / 2, piece).is_none();
        host::unregister(&dev, base)?;
        drop(p);
        rows.push(Row {
            name: "registrations are imported in pieces".into(),
            passed: usize::from(split),
            total: 1,
            detail: if split { String::new() } else { "one import covers two 64 KiB pieces".into() },
        });
        matrix_of(
            &dev,
            rows,
            &[("registered in pieces", Path::Registered), ("mixed in pieces", Path::Mixed), ("pinned in pieces", Path::Pinned)],
        )?;
    }
    dev.destroy()?;
    Ok(dev.validation_errors())
}

/// `Stream::copy_async` between device buffers on a compute stream, on a device of its own with
/// `d2d_kernel_min` at 4 so the copy kernel's route is taken at every size where it applies
/// (offsets and length multiples of 4; the others stay a vkCmdCopyBuffer): offsets of each
/// 16-byte phase, lengths around the vector width, guard bytes on both sides, a fill before and
/// a copy after on the same stream (stream order), and a synchronous read with no synchronize
/// (it waits for the stream's work on the buffer). Which route each copy took is told by the
/// device's pipelines (one is made when the kernel first runs).
fn d2d_by_kernel(index: usize, opts: &OpenOptions, rows: &mut Vec<Row>) -> Result<u64> {
    // At least two cached pipelines: the row tells the copy kernel ran by the pipeline count
    // going up past the fill's, which a cache of one (`VKHOST_MAX_PIPELINES=1`) evicts.
    let o = OpenOptions { d2d_kernel_min: Some(4), max_pipelines: opts.max_pipelines.max(2), ..opts.clone() };
    let dev = Device::open_with(index, &o)?;
    rows.push(d2d_by_kernel_row(&dev)?);
    dev.destroy()?;
    Ok(dev.validation_errors())
}

/// [`d2d_by_kernel`]'s row, on its device.
fn d2d_by_kernel_row(dev: &Device) -> Result<Row> {
    let name = "stream d2d copies by the copy kernel";
    let skipped = |why: String| Row { name: format!("{name}: skipped ({why})"), passed: 0, total: 0, detail: String::new() };
    let s = match dev.stream_on(vkhost::QueueKind::Compute) {
        Ok(s) => s,
        Err(e) => return Ok(skipped(e.to_string())),
    };
    let n = 3 * 4096 + 64;
    let src = pattern(n, 77);
    let (a, b, c) = (dev.alloc_buffer(n)?, dev.alloc_buffer(n)?, dev.alloc_buffer(n)?);
    // Where kernels cannot run, copy_async rightly copies by vkCmdCopyBuffer: nothing of the
    // kernel's route to check (said, as `kernels` says it). Probed with the fill kernel, so the
    // copy kernel's pipeline is first made by a copy_async below (which is how a copy tells
    // that it ran the kernel).
    if let Err(e) = s.fill_u32(Binding::Device(&a, 0, 4), 0).and_then(|()| s.synchronize()) {
        return Ok(skipped(format!("the kernel cannot run: {e}")));
    }
    let mut row = Row { name: name.into(), passed: 0, total: 0, detail: String::new() };
    a.write(0, &src)?;
    let mut kernel_ran = false;
    for &(so, dof) in &[(0usize, 0usize), (4, 8), (16, 32), (12, 4), (1, 3)] {
        for &len in &[4usize, 12, 16, 20, 4096, 4096 + 4, 2 * 4096 + 28, 4097] {
            row.total += 1;
            s.fill_async(&b, 0, n, 0xA5A5_A5A5)?;
            let before = dev.live_objects().pipelines;
            s.copy_async(&a, so, &b, dof, len)?;
            kernel_ran |= dev.live_objects().pipelines > before;
            s.copy_async(&b, 0, &c, 0, n)?;
            let mut got = vec![0u8; n];
            c.read(0, &mut got)?;
            if got[dof..dof + len] == src[so..so + len] && got[..dof].iter().chain(&got[dof + len..]).all(|&x| x == 0xA5) {
                row.passed += 1;
            } else if row.detail.is_empty() {
                row.detail = format!("copy {so} -> {dof}, {len} bytes: the bytes differ or bytes beside it changed");
            }
        }
    }
    s.synchronize()?;
    if !kernel_ran {
        // Every case passed by vkCmdCopyBuffer alone would leave the kernel's route untested.
        row.total += 1;
        row.detail = "the copy kernel never ran (every copy was a vkCmdCopyBuffer)".into();
    }
    Ok(row)
}

/// Stream copies gathered through the stream's device scratch buffer
/// (`OpenOptions::gather_regions` at 2, so runs of small copies of one dense host range take
/// that route on every device, CPU devices included), on a device of its own: see
/// [`gathered_row`].
fn gathered(index: usize, opts: &OpenOptions, rows: &mut Vec<Row>) -> Result<u64> {
    let o = OpenOptions { gather_regions: Some(2), ..opts.clone() };
    let dev = Device::open_with(index, &o)?;
    rows.push(gathered_row(&dev)?);
    dev.destroy()?;
    Ok(dev.validation_errors())
}

/// [`gathered`]'s row: pieces of 1 B-64 KiB (and 64 KiB + 1, which go direct) of a range of a
/// pinned block and of a registration, back to back, with gaps, or (uploads) overlapping,
/// enqueued to (or from) a permutation of device offsets with gaps, both directions; two runs
/// per batch from different memory (each takes its own part of the scratch buffer); guard bytes
/// on the device and around the host pieces; read back synchronously with no synchronize for
/// uploads (the read waits for the stream's work on the buffer). Fails too if nothing went
/// through the scratch buffer.
fn gathered_row(dev: &Device) -> Result<Row> {
    let mut row = Row { name: "stream copies gathered through a scratch buffer".into(), passed: 0, total: 0, detail: String::new() };
    let can_register = dev.host_registration().is_ok();
    let s = dev.stream()?;
    let before = host::device_stats(dev).gathered_bytes;
    for &(piece, count) in &[(1usize, 40usize), (3, 7), (4096, 33), (5000, 9), (65536, 5), (65537, 3)] {
        // The host pieces back to back (gathered), with gaps (direct), and, for uploads only,
        // overlapping (gathered: their union is read once).
        for (hs, layout) in [(piece, "back to back"), (piece + 5, "with gaps"), ((piece / 2).max(1), "overlapping")] {
            gathered_case(dev, &s, &mut row, piece, count, hs, layout, can_register)?;
        }
    }
    if host::device_stats(dev).gathered_bytes == before {
        // Every case passed by direct copies alone would leave the scratch route untested.
        row.total += 1;
        row.detail = "nothing went through the scratch buffer".into();
    }
    Ok(row)
}

/// One case of [`gathered_row`]: `count` pieces of `piece` bytes, `hs` bytes apart on the host
/// (`layout` names it), uploaded from a pinned block and a registration to a permutation of
/// device slots, then (unless they overlap) downloaded back the same way.
#[allow(clippy::too_many_arguments)]
fn gathered_case(
    dev: &Device,
    s: &Stream,
    row: &mut Row,
    piece: usize,
    count: usize,
    hs: usize,
    layout: &str,
    can_register: bool,
) -> Result<()> {
    let span = hs * (count - 1) + piece;
    let stride = piece + 7;
    let dlen = stride * count + GUARD;
    // A permutation of the pieces' device slots (count and 7 share no factor but for 7).
    let slot = |i: usize| if count % 7 == 0 { count - 1 - i } else { (i * 7) % count };
    let mut pinned = PinnedBuffer::new(dev, span + GUARD)?;
    let mut pages = Pages::map((span + GUARD).next_multiple_of(4096), RW)?;
    let base = pages.slice().as_mut_ptr() as usize;
    if can_register {
        // SAFETY: the mapping outlives the registration (unregistered below, before it is
        // unmapped at the end of this call).
        unsafe { host::register(dev, base, span + GUARD) }?;
    }
    let (x, y) = (dev.alloc_buffer(dlen)?, dev.alloc_buffer(dlen)?);
    // Uploads: the pinned block's pieces to `x`, the registration's to `y`, one batch.
    let (up_a, up_b) = (pattern(span, piece), pattern(span, piece + 1));
    pinned[..span].copy_from_slice(&up_a);
    pages.slice()[..span].copy_from_slice(&up_b);
    x.write(0, &vec![0xA5; dlen])?;
    y.write(0, &vec![0xA5; dlen])?;
    for (src, buf) in [(pinned.as_ptr() as usize, &x), (base, &y)] {
        for i in 0..count {
            // SAFETY: the piece lies in the block or the mapping, both alive and unchanged
            // until the reads below wait for the stream's work.
            unsafe { s.copy_to_device_async((src + i * hs) as *const u8, piece, buf, slot(i) * stride) }?;
        }
    }
    for (want, buf, what) in [(&up_a, &x, "pinned"), (&up_b, &y, "registered")] {
        row.total += 1;
        let mut got = vec![0u8; dlen];
        buf.read(0, &mut got)?;
        let mut exp = vec![0xA5u8; dlen];
        for i in 0..count {
            exp[slot(i) * stride..slot(i) * stride + piece].copy_from_slice(&want[i * hs..i * hs + piece]);
        }
        if got == exp {
            row.passed += 1;
        } else if row.detail.is_empty() {
            row.detail = format!("upload of {count} x {piece} B {layout} from {what} memory: bytes differ on the device");
        }
    }
    if hs >= piece {
        // Downloads: `x`'s pieces into the pinned block, `y`'s into the registration.
        pinned.fill(0x5A);
        pages.slice().fill(0x5A);
        let (dn_a, dn_b) = (pattern(dlen, piece + 2), pattern(dlen, piece + 3));
        x.write(0, &dn_a)?;
        y.write(0, &dn_b)?;
        for (dst, buf) in [(pinned.as_mut_ptr() as usize, &x), (base, &y)] {
            for i in 0..count {
                // SAFETY: the piece lies in the block or the mapping, not otherwise accessed
                // until the synchronize below.
                unsafe { s.copy_to_host_async(buf, slot(i) * stride, (dst + i * hs) as *mut u8, piece) }?;
            }
        }
        s.synchronize()?;
        let got_b = pages.slice()[..span + GUARD].to_vec();
        for (from, got, what) in [(&dn_a, &pinned[..span + GUARD], "pinned"), (&dn_b, &got_b[..], "registered")] {
            row.total += 1;
            let mut exp = vec![0x5Au8; span + GUARD];
            for i in 0..count {
                exp[i * hs..i * hs + piece].copy_from_slice(&from[slot(i) * stride..slot(i) * stride + piece]);
            }
            if got == &exp[..] {
                row.passed += 1;
            } else if row.detail.is_empty() {
                row.detail =
                    format!("download of {count} x {piece} B {layout} into {what} memory: bytes differ or bytes beside them changed");
            }
        }
    }
    if can_register {
        host::unregister(dev, base)?;
    }
    Ok(())
}

/// The staged paths through a small staging ring (64 KiB chunks, 2 slots), on a device of its
/// own: the matrix's larger copies span many chunks, so the ring wraps and staged batches ramp
/// (with the default 16 MiB chunks no copy of the matrix fills one).
fn small_ring(index: usize, opts: &OpenOptions, rows: &mut Vec<Row>) -> Result<u64> {
    let o = OpenOptions { staging_chunk: 64 << 10, staging_slots: 2, ..opts.clone() };
    matrix_on(index, &o, rows, &[("pageable, small ring", Path::Pageable), ("mixed, small ring", Path::Mixed)])
}

/// The matrix's direct paths with copies cut into 4 KiB regions (`OpenOptions::copy_piece`;
/// CPU devices cut at 256 KiB by default, GPUs not at all), so the cutting runs on every device
/// at the matrix's sizes and odd offsets.
fn small_pieces(index: usize, opts: &OpenOptions, rows: &mut Vec<Row>) -> Result<u64> {
    let o = OpenOptions { copy_piece: Some(4096), ..opts.clone() };
    let paths =
        [("pinned, 4 KiB regions", Path::Pinned), ("registered, 4 KiB regions", Path::Registered), ("mixed, 4 KiB regions", Path::Mixed)];
    matrix_on(index, &o, rows, &paths)
}

/// [`matrix_of`] on a device of its own opened with `o`, destroyed after: its validation
/// errors.
fn matrix_on(index: usize, o: &OpenOptions, rows: &mut Vec<Row>, paths: &[(&str, Path)]) -> Result<u64> {
    let dev = Device::open_with(index, o)?;
    matrix_of(&dev, rows, paths)?;
    dev.destroy()?;
    Ok(dev.validation_errors())
}

/// Every size and offset through each of `paths`, both directions, synchronous and on a stream.
fn matrix_of(dev: &Device, rows: &mut Vec<Row>, paths: &[(&str, Path)]) -> Result<()> {
    let dbuf = dev.alloc_buffer(7 + (1 << 20) + 3 + GUARD + 4096)?;
    // A device vkhost opened has streams: one that cannot make one fails a row, rather than
    // leaving the stream rows out.
    let stream = match dev.stream() {
        Ok(s) => Some(s),
        Err(e) => {
            rows.push(Row { name: "stream creation".into(), passed: 0, total: 1, detail: e.to_string() });
            None
        }
    };
    for &(pname, path) in paths {
        for (dname, up) in [("h2d", true), ("d2h", false)] {
            for mode in ["sync", "stream"] {
                let s = if mode == "stream" {
                    match &stream {
                        Some(s) => Some(s),
                        None => continue,
                    }
                } else {
                    None
                };
                let degraded = matches!(path, Path::Registered | Path::Mixed) && dev.host_registration().is_err();
                let name = format!("{pname} {dname} {mode}{}", if degraded { " (staged: no registration)" } else { "" });
                let mut row = Row { name, passed: 0, total: 0, detail: String::new() };
                for &len in &SIZES {
                    for &offs in &OFFSETS {
                        row.total += 1;
                        match one(dev, &dbuf, s, path, up, len, offs) {
                            Ok(()) => row.passed += 1,
                            Err(e) if row.detail.is_empty() => row.detail = e.to_string(),
                            Err(_) => {}
                        }
                    }
                }
                rows.push(row);
            }
        }
    }
    Ok(())
}

/// Where a kernel case puts its bytes.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Device,
    /// Slices of a pinned block (`Binding::Host`/`HostMut`: launches complete before they return).
    Pinned,
    /// A pinned block bound through the block (`Binding::pinned`/`pinned_mut`: async launches).
    PinnedBlock,
    Registered,
}

/// One kernel case: an SM copy from a device buffer into `kind` memory at `off` (checked by the
/// device checksum against the CPU, then read back with its guards), then a fill of the same
/// bytes, read back.
fn kernel_case(dev: &Device, s: &Stream, kind: Kind, off: usize, len: usize, can_register: bool) -> Result<()> {
    let total = off + len + GUARD;
    let src = dev.alloc_buffer(len + 16)?;
    let want = pattern(len, off ^ len);
    src.write(12, &want)?;
    let init = pattern(total, 7);
    let pat = 0x5A5A_0000u32 ^ len as u32;
    let check = |got: &[u8], body: &dyn Fn(&[u8]) -> bool, what: &str| -> Result<()> {
        if got[..off] != init[..off] || got[off + len..] != init[off + len..] {
            return Err(format!("{what}: a guard byte changed").into());
        }
        if !body(&got[off..off + len]) {
            return Err(format!("{what}: wrong bytes").into());
        }
        Ok(())
    };
    let copied = |b: &[u8]| b == &want[..];
    let filled = |b: &[u8]| b.chunks(4).all(|c| c == pat.to_ne_bytes());
    let sum = checksum_cpu(&want);
    match kind {
        Kind::Device => {
            let b = dev.alloc_buffer(total)?;
            b.write(0, &init)?;
            s.copy_sm(Binding::Device(&src, 12, len), Binding::Device(&b, off, len))?;
            if s.checksum(Binding::Device(&b, off, len))? != sum {
                return Err("device checksum differs from the CPU's".into());
            }
            let mut got = vec![0; total];
            b.read(0, &mut got)?;
            check(&got, &copied, "copy")?;
            s.fill_u32(Binding::Device(&b, off, len), pat)?;
            s.synchronize()?;
            b.read(0, &mut got)?;
            check(&got, &filled, "fill")
        }
        Kind::Pinned => {
            let mut p = PinnedBuffer::new(dev, total)?;
            p.copy_from_slice(&init);
            s.copy_sm(Binding::Device(&src, 12, len), Binding::HostMut(&mut p[off..off + len]))?;
            if s.checksum(Binding::Host(&p[off..off + len]))? != sum {
                return Err("device checksum differs from the CPU's".into());
            }
            check(&p, &copied, "copy")?;
            s.fill_u32(Binding::HostMut(&mut p[off..off + len]), pat)?;
            check(&p, &filled, "fill")
        }
        Kind::PinnedBlock => {
            let mut p = PinnedBuffer::new(dev, total)?;
            p.copy_from_slice(&init);
            // Async: the block's Deref waits for the kernels' writes, with nothing waited here.
            s.copy_sm(Binding::Device(&src, 12, len), Binding::pinned_mut(&mut p, off, len))?;
            if s.checksum(Binding::pinned(&p, off, len))? != sum {
                return Err("device checksum differs from the CPU's".into());
            }
            check(&p, &copied, "copy")?;
            s.fill_u32(Binding::pinned_mut(&mut p, off, len), pat)?;
            check(&p, &filled, "fill")
        }
        Kind::Registered if can_register => {
            let mut m = Pages::map(total.next_multiple_of(4096), RW)?;
            m.slice()[..total].copy_from_slice(&init);
            let mut reg = dev.register(&mut m.slice()[..total])?;
            s.copy_sm(Binding::Device(&src, 12, len), Binding::HostMut(&mut reg[off..off + len]))?;
            if s.checksum(Binding::Host(&reg[off..off + len]))? != sum {
                return Err("device checksum differs from the CPU's".into());
            }
            check(&reg, &copied, "copy")?;
            s.fill_u32(Binding::HostMut(&mut reg[off..off + len]), pat)?;
            drop(reg);
            check(&m.slice()[..total], &filled, "fill")
        }
        // `kernels` does not run (nor count) these cases without registration.
        Kind::Registered => Err("registered memory: host registration unavailable".into()),
    }
}

/// The built-in kernels over every binding kind (see [`kernel_case`]), in the device's
/// descriptor mode.
fn kernels(dev: &Device, rows: &mut Vec<Row>) -> Result<()> {
    let can_register = dev.host_registration().is_ok();
    let s = dev.stream_on(QueueKind::Compute)?;
    let probe = dev.alloc_buffer(4)?;
    if let Err(Error::Unsupported { reason }) = s.fill_u32(Binding::Device(&probe, 0, 4), 0) {
        println!("    kernels skipped: {reason}");
        return Ok(());
    }
    let a = dev.info().min_storage_buffer_offset_alignment.max(16) as usize;
    let (mut passed, mut total, mut failed) = (0, 0, Vec::new());
    // Without registration the registered cases cannot run: left out of the count (and said),
    // never counted as passed.
    let kinds: &[Kind] = if can_register {
        &[Kind::Device, Kind::Pinned, Kind::PinnedBlock, Kind::Registered]
    } else {
        &[Kind::Device, Kind::Pinned, Kind::PinnedBlock]
    };
    for &kind in kinds {
        for off in [0, 4, a + 20, 4092] {
            for len in [4, 4096 + 12, 65536] {
                total += 1;
                match kernel_case(dev, &s, kind, off, len, can_register) {
                    Ok(()) => passed += 1,
                    Err(e) if failed.is_empty() => failed.push(format!("{kind:?} +{off} {len} B: {e}")),
                    Err(_) => {}
                }
            }
        }
    }
    if passed < total && failed.len() == 1 {
        failed.push(format!("{} failed in all", total - passed));
    }
    let mode = match dev.descriptor_mode() {
        DescriptorMode::Push => "push descriptors",
        DescriptorMode::Sets => "descriptor sets",
    };
    let skipped = if can_register { "" } else { " (registered: skipped, no registration)" };
    rows.push(Row { name: format!("kernels, {mode}{skipped}"), passed, total, detail: failed.join("; ") });
    Ok(())
}

/// [`kernels`] on a device opened with `push_descriptors: false`: launches write descriptor sets
/// from stream pools, as on drivers without VK_KHR_push_descriptor and on `Device::from_raw`
/// devices. Skipped where the first pass already used them (a driver without the extension, or
/// `VKHOST_PUSH_DESCRIPTORS=0`). Returns the validation errors.
fn kernels_with_sets(index: usize, opts: &OpenOptions, rows: &mut Vec<Row>) -> Result<u64> {
    let dev = Device::open_with(index, &OpenOptions { push_descriptors: false, ..opts.clone() })?;
    if dev.info().push_descriptor && opts.push_descriptors {
        kernels(&dev, rows)?;
    }
    dev.destroy()?;
    Ok(dev.validation_errors())
}

fn refusals(dev: &Device, rows: &mut Vec<Row>) -> Result<()> {
    let can_register = dev.host_registration().is_ok();
    let mut cases: Vec<(&str, std::result::Result<(), String>)> = Vec::new();
    let mut expect = |name: &'static str, got: vkhost::Result<()>, want: fn(&Error) -> bool, before: usize| {
        let ok = match &got {
            Err(e) if want(e) && entries_of(dev) == before => Ok(()),
            Err(e) => Err(format!("{e:?}, registry {} entries (was {before})", entries_of(dev))),
            Ok(()) => Err("accepted".into()),
        };
        cases.push((name, ok));
    };
    let inv = |e: &Error| matches!(e, Error::InvalidArgument { .. });
    let unsup = |e: &Error| matches!(e, Error::Unsupported { .. });
    let n0 = entries_of(dev);
    // An unmapped hole inside our own reservation (no other mapping lands there by chance).
    let reserve = Pages::map(8 * 4096, RW)?;
    let gone_ptr = reserve.ptr.wrapping_add(3 * 4096);
    // SAFETY: unmapping two pages of our own mapping; nothing references them.
    if unsafe { libc::munmap(gone_ptr.cast(), 2 * 4096) } != 0 {
        return Err("munmap failed".into());
    }
    // SAFETY: (all register calls) each is expected to be refused before touching memory, or
    // registers memory that outlives the registration.
    unsafe {
        expect("register unmapped", host::register(dev, gone_ptr, 100), if can_register { inv } else { unsup }, n0);
        let ro = Pages::map(4096, libc::PROT_READ)?;
        expect("register read-only", host::register(dev, ro.ptr, 4096), if can_register { inv } else { unsup }, n0);
        expect("register null", host::register(dev, std::ptr::null::<u8>(), 10), if can_register { inv } else { unsup }, n0);
        expect("register zero length", host::register(dev, 4096usize, 0), if can_register { inv } else { unsup }, n0);
        if can_register {
            let mut m = Pages::map(4 * 4096, RW)?;
            let b = m.slice().as_mut_ptr() as usize;
            host::register(dev, b + 100, 5000)?;
            expect("register overlapping", host::register(dev, b + 5000, 10), |e| *e == Error::AlreadyRegistered, n0 + 1);
            expect("unregister interior pointer", host::unregister(dev, b + 101), |e| *e == Error::NotRegistered, n0 + 1);
            expect("free_pinned of a registration", host::free_pinned(dev, b + 100), |e| *e == Error::NotPinned, n0 + 1);
            host::unregister(dev, b + 100)?;
            expect("double unregister", host::unregister(dev, b + 100), |e| *e == Error::NotRegistered, n0);
        }
    }
    let p = host::alloc_pinned(dev, 4096)?;
    expect("unregister of a pinned block", host::unregister(dev, p), |e| *e == Error::NotRegistered, n0 + 1);
    host::free_pinned(dev, p)?;
    expect("double free_pinned", host::free_pinned(dev, p), |e| *e == Error::NotPinned, n0);
    expect("alloc_pinned of 0 bytes", host::alloc_pinned(dev, 0).map(drop), inv, n0);
    let b = dev.alloc_buffer(16)?;
    expect("write past the end", b.write(10, &[0; 7]), |e| *e == Error::OutOfRange, n0);
    let total = cases.len();
    let failed: Vec<String> = cases.iter().filter_map(|(n, r)| r.as_ref().err().map(|e| format!("{n}: {e}"))).collect();
    rows.push(Row { name: "refusals".into(), passed: total - failed.len(), total, detail: failed.join("; ") });
    Ok(())
}

fn teardown(index: usize, opts: &OpenOptions, rows: &mut Vec<Row>) -> Result<u64> {
    let dev = Device::open_with(index, opts)?;
    let mut steps: Vec<(&str, bool)> = Vec::new();
    let mut m = Pages::map(2 * 4096, RW)?;
    let base = m.slice().as_mut_ptr() as usize;
    let can_register = dev.host_registration().is_ok();
    if can_register {
        // SAFETY: the mapping outlives the device.
        unsafe { host::register(&dev, base, 4096) }?;
    }
    let raw = host::alloc_pinned(&dev, 8192)?;
    let safe = PinnedBuffer::new(&dev, 4096)?;
    let buf = dev.alloc_buffer(64)?;
    steps.push(("destroy is Busy while a PinnedBuffer lives", matches!(dev.destroy(), Err(Error::Busy { .. }))));
    drop(safe);
    steps.push(("destroy succeeds", dev.destroy().is_ok()));
    steps.push(("destroy twice", dev.destroy().is_ok()));
    steps.push(("find is None after destroy", host::find(&dev, raw, 1).is_none()));
    if can_register {
        steps.push(("late unregister is Ok", host::unregister(&dev, base).is_ok()));
        steps.push(("second late unregister is NotRegistered", host::unregister(&dev, base) == Err(Error::NotRegistered)));
    }
    steps.push(("late free_pinned is Ok", host::free_pinned(&dev, raw).is_ok()));
    steps.push(("inert buffer: DeviceDestroyed", buf.write(0, &[1]) == Err(Error::DeviceDestroyed)));
    steps.push(("new work: DeviceDestroyed", dev.alloc_buffer(1).err() == Some(Error::DeviceDestroyed)));
    steps.push(("registry empty", entries_of(&dev) == 0));
    steps.push(("no Vulkan object left", dev.live_objects() == vkhost::LiveObjects::default()));
    drop(buf);
    let total = steps.len();
    let failed: Vec<&str> = steps.iter().filter(|s| !s.1).map(|s| s.0).collect();
    rows.push(Row { name: "teardown".into(), passed: total - failed.len(), total, detail: failed.join("; ") });
    Ok(dev.validation_errors())
}

/// Multi-device paths on two VkDevices of this physical device (the same calls a machine with
/// several GPUs makes): one range registered on both (`HostRange`), broadcast and gather,
/// a registration in several import pieces, one device destroyed while the other works.
fn multi_device(index: usize, opts: &OpenOptions, rows: &mut Vec<Row>) -> Result<u64> {
    // `a` in one piece, `b` in 64 KiB pieces, whatever VKHOST_IMPORT_PIECE says (the steps
    // below rely on it: `find` on `a` over 4 KiB at the start).
    let a = Device::open_with(index, &OpenOptions { max_import_piece: None, ..opts.clone() })?;
    let b = Device::open_with(index, &OpenOptions { max_import_piece: Some(64 << 10), ..opts.clone() })?;
    let mut steps: Vec<(&str, bool)> = Vec::new();
    let n = (1 << 20) + 4096;
    let want = pattern(n, 11);
    let mut v = want.clone();
    let (da, db) = (a.alloc_buffer(n)?, b.alloc_buffer(n)?);
    let can_register = a.host_registration().is_ok() && b.host_registration().is_ok();
    let range = if can_register { Some(vkhost::HostRange::register(&[&a, &b], &mut v)?) } else { None };
    let src: &[u8] = match &range {
        Some(r) => r,
        None => &want,
    };
    if let Some(r) = &range {
        steps.push(("find on each device", r.find(&a, 0, 4096).is_some() && r.find(&b, 0, 4096).is_some()));
        // b imports in 64 KiB pieces from the first page of the range.
        let boundary = (r.as_ptr() as usize & !4095) + (64 << 10) - r.as_ptr() as usize;
        steps.push(("find across two import pieces is None", r.find(&b, boundary - 8, 16).is_none() && r.find(&b, boundary, 16).is_some()));
    }
    steps.push(("broadcast", vkhost::broadcast(src, &[(&da, 0), (&db, 0)]).is_ok()));
    // Each read into zeros: a read that brings nothing fails its step.
    let read = |d: &vkhost::DeviceBuffer| {
        let mut out = vec![0u8; n];
        d.read(0, &mut out).map(|()| out)
    };
    steps.push(("broadcast bytes on a", read(&da).is_ok_and(|o| o == want)));
    steps.push(("broadcast bytes on b", read(&db).is_ok_and(|o| o == want)));
    // b gets bytes of its own, so that the gather shows which device each slice came from.
    let other = pattern(n, 12);
    let mut back = vec![0u8; n];
    let gathered = db.write(0, &other).is_ok() && vkhost::gather(&[(&da, 0), (&db, n / 2)], &mut back).is_ok();
    steps.push(("gather", gathered));
    // Slice 0 (the first half) came from a at 0, slice 1 from b at n/2.
    steps.push(("gather bytes", back[..n / 2] == want[..n / 2] && back[n / 2..] == other[n / 2..]));
    drop(db);
    steps.push(("destroy one device", b.destroy().is_ok()));
    let copied = da.write(0, &vec![0u8; n]).is_ok() && vkhost::broadcast(src, &[(&da, 0)]).is_ok();
    steps.push(("the other still copies", copied && read(&da).is_ok_and(|o| o == want)));
    if let Some(r) = range {
        steps.push(("one unregister for both (tombstone on the destroyed one)", r.unregister().is_ok()));
    }
    drop(da);
    // Each device's count is cumulative: b's is final (destroyed above), a's once it is too.
    let errors_b = b.validation_errors();
    a.destroy()?;
    let total = steps.len();
    let failed: Vec<&str> = steps.iter().filter(|s| !s.1).map(|s| s.0).collect();
    rows.push(Row { name: "multi-device (two VkDevices)".into(), passed: total - failed.len(), total, detail: failed.join("; ") });
    Ok(errors_b + a.validation_errors())
}

/// `DeviceBuffer::write` as CPU stores into mapped device memory (`BarWrites::On`, so every
/// device with a DEVICE_LOCAL|HOST_VISIBLE type runs it): every size and offset of the matrix
/// with guard bytes, and the ordering of stores between stream work on the same bytes.
///
/// `split`: with `bar_write_max` raised to 2 MiB, 4 staging threads that poll for work for 5 ms
/// (`staging_spin`, set on every device so that CPU drivers run this path too), so that writes
/// of 128 KiB and more are stores split over threads in 64 KiB parts (the h2d side of `vkhost
/// bench -t bidir_bar`). A write between `OpenOptions::BAR_SOLO_MAX` and
/// `BAR_PARKED_SPLIT_MIN` that finds the threads parked is a submitted copy instead (and wakes
/// them): either is right, but some such write must have been stores.
///
/// `skip`: why the BAR rows cannot run on this device (see [`bar_skip`]).
fn bar_writes(index: usize, opts: &OpenOptions, rows: &mut Vec<Row>, split: bool, skip: Option<&str>) -> Result<u64> {
    let (what, order_name) = if split {
        ("split bar writes (4 threads), sizes x offsets", "split bar writes ordered with stream work")
    } else {
        ("bar writes (CPU stores), sizes x offsets", "bar writes ordered with stream work")
    };
    if let Some(why) = skip {
        rows.push(Row { name: format!("{what}: skipped ({why})"), passed: 0, total: 0, detail: String::new() });
        return Ok(0);
    }
    // `bar_write_max` is set here, not taken from the environment: with VKHOST_BAR_WRITE_MAX=0
    // nothing would be stored and the rows would test the copy engine under the stores' name.
    let mut o = OpenOptions { bar_writes: vkhost::BarWrites::On, bar_write_max: 256 << 10, ..opts.clone() };
    if split {
        o.bar_write_max = 2 << 20;
        o.staging_threads = 4;
        o.staging_spin = Some(std::time::Duration::from_millis(5));
    }
    let dev = Device::open_with(index, &o)?;
    let max = dev.options().bar_write_max;
    let dbuf = dev.alloc_buffer(7 + (1 << 20) + 3 + GUARD + (64 << 10))?;
    let mut row = Row { name: what.into(), passed: 0, total: 0, detail: String::new() };
    // Sizes a write may take either way in the split pass (stores on polling threads, else a
    // submitted copy, which wakes them).
    let either = |len: usize| split && len > OpenOptions::BAR_SOLO_MAX && len < OpenOptions::BAR_PARKED_SPLIT_MIN;
    let case = |len: usize, (hoff, doff): (usize, usize)| -> Result<u64> {
        let payload = pattern(len, len + hoff + 1);
        // A size either way is written again (each time checked) until it was stored, up to 20
        // times, with a pause that lets the woken threads start polling (on a machine of few
        // cores they wait for one behind the driver's).
        let mut tries = if either(len) && len <= max { 20 } else { 1 };
        loop {
            let (err, before, after) = guarded_write(&dbuf, doff, &payload, &payload, || host::device_stats(&dev).mapped_bytes)?;
            let stored = after - before;
            let fail = |what: &str| -> Result<u64> { Err(format!("{what} (len {len}, device offset {doff})").into()) };
            tries -= 1;
            if let Some(e) = err {
                return fail(e);
            } else if stored == 0 && tries > 0 {
                std::thread::sleep(std::time::Duration::from_micros(500));
            } else if stored == len as u64 && len <= max || stored == 0 && (len > max || either(len)) {
                return Ok(stored);
            } else {
                return fail(&format!("{stored} bytes stored; stores apply up to {max}"));
            }
        }
    };
    let (mut stored, mut either_stored, mut either_copied) = (0, 0, 0);
    for &len in &SIZES {
        for &offs in &OFFSETS {
            row.total += 1;
            match case(len, offs) {
                Ok(n) => {
                    row.passed += 1;
                    stored += n;
                    if either(len) && len <= max {
                        if n > 0 { either_stored += 1 } else { either_copied += 1 }
                    }
                }
                Err(e) if row.detail.is_empty() => row.detail = e.to_string(),
                Err(_) => {}
            }
        }
    }
    if either_stored == 0 && either_copied > 0 && row.detail.is_empty() {
        // The split stores never ran: the row would test the copy engine under their name.
        row.passed -= either_copied;
        row.detail = format!("none of {either_copied} mid-size writes found the store threads polling (all submitted copies)");
    }
    if row.detail.is_empty() {
        // Said, so that a run shows the stores took part (a row that stored nothing would be
        // the copy engine's under the stores' name).
        row.detail = format!("{stored} bytes stored by the CPU (writes up to {max})");
        if either_copied > 0 {
            row.detail += &format!("; {either_copied} mid-size write(s) found the store threads parked 20 times: submitted copies");
        }
    }
    rows.push(row);
    // Stream work before a store on the same bytes lands first; work after it sees it.
    // A write the stores take (split over the threads in the `split` pass).
    let w = if split { 1 << 20 } else { 4096 };
    let order = ordered_with_streams(&dev, &dbuf, order_name, w, 60 << 10, 8, "a store")?;
    rows.push(order);
    drop(dbuf);
    dev.destroy()?;
    Ok(dev.validation_errors())
}

/// Fills `dbuf` with guard bytes up to `GUARD` past `[doff, doff + payload.len())`, writes
/// `src` (which holds `payload`'s bytes) at `doff` with `DeviceBuffer::write`, and reads it all
/// back: the first of "device guard bytes changed" and "payload mismatch" that applies, and
/// `stats()` just before and after the write.
fn guarded_write<T>(
    dbuf: &vkhost::DeviceBuffer,
    doff: usize,
    src: &[u8],
    payload: &[u8],
    stats: impl Fn() -> T,
) -> Result<(Option<&'static str>, T, T)> {
    const DGUARD: u8 = 0xC3;
    let len = payload.len();
    dbuf.write(0, &vec![DGUARD; doff + len + GUARD])?;
    let before = stats();
    dbuf.write(doff, src)?;
    let after = stats();
    let mut dv = vec![0u8; doff + len + GUARD];
    dbuf.read(0, &mut dv)?;
    let err = if dv[..doff].iter().chain(&dv[doff + len..]).any(|&b| b != DGUARD) {
        Some("device guard bytes changed")
    } else if dv[doff..doff + len] != payload[..] {
        Some("payload mismatch")
    } else {
        None
    };
    Ok((err, before, after))
}

/// Rounds of: a stream fill of `dbuf`, a `DeviceBuffer::write` of `w` bytes at 4096 (the path
/// under test: `what`), a stream copy of the whole range out, read back. The write must land
/// after the fill and be seen by the copy. A device without a stream gives an empty row.
fn ordered_with_streams(
    dev: &Device,
    dbuf: &vkhost::DeviceBuffer,
    name: &str,
    w: usize,
    tail: usize,
    rounds: u32,
    what: &str,
) -> Result<Row> {
    let mut order = Row { name: name.into(), passed: 0, total: 0, detail: String::new() };
    // A device vkhost opened has streams: a failed stream is a failed row (as in the matrix).
    let s = match dev.stream() {
        Ok(s) => s,
        Err(e) => {
            order.total = 1;
            order.detail = format!("stream creation failed: {e}");
            return Ok(order);
        }
    };
    let n = 4096 + w + tail;
    let other = dev.alloc_buffer(n)?;
    for round in 0..rounds {
        order.total += 1;
        let want = pattern(w, round as usize);
        s.fill_async(dbuf, 0, n, 0xBEEF_0000 | round)?;
        dbuf.write(4096, &want)?;
        s.copy_async(dbuf, 0, &other, 0, n)?;
        s.synchronize()?;
        let mut got = vec![0u8; n];
        other.read(0, &mut got)?;
        let fill = (0xBEEF_0000u32 | round).to_le_bytes();
        if got[4096..4096 + w] == want[..] && got[..4096].chunks(4).chain(got[4096 + w..].chunks(4)).all(|c| c == fill) {
            order.passed += 1;
        } else if order.detail.is_empty() {
            order.detail = format!("round {round}: {what} and stream work on the same bytes ran out of order");
        }
    }
    Ok(order)
}

/// `DeviceBuffer::write` with `bar_assist: Always` (`BarWrites::On`, 3 store threads): writes of
/// `ASSIST_MIN` and more shared between the copy engine and CPU stores. Sizes x offsets from a
/// plain `Vec` (the copy engine's share staged) and from a pinned block (direct), with guard
/// bytes; the two sides' byte counts must add up to each write; and stream work before and
/// after a write on the same bytes stays in order.
fn bar_assist(index: usize, opts: &OpenOptions, rows: &mut Vec<Row>, skip: Option<&str>) -> Result<u64> {
    if let Some(why) = skip {
        rows.push(Row { name: format!("bar assist: skipped ({why})"), passed: 0, total: 0, detail: String::new() });
        return Ok(0);
    }
    // `bar_write_max` set here (assisted writes need it above 0), not from the environment.
    let o = OpenOptions {
        bar_writes: vkhost::BarWrites::On,
        bar_assist: vkhost::BarAssist::Always,
        assist_threads: 3,
        bar_write_max: 256 << 10,
        ..opts.clone()
    };
    let dev = Device::open_with(index, &o)?;
    let min = OpenOptions::ASSIST_MIN;
    let sizes = [min, min + 5, 2 * min + 4095];
    let most = sizes[2];
    let dbuf = dev.alloc_buffer(4095 + most + GUARD)?;
    let mut pinned = vkhost::PinnedBuffer::new(&dev, 4095 + most)?;
    let mut row = Row { name: "bar assist, sizes x offsets x sources".into(), passed: 0, total: 0, detail: String::new() };
    // Bytes the CPU stored, from a plain source and from a pinned one.
    let mut stored_by = [0u64; 2];
    let counts = |d: &Device| {
        let s = host::device_stats(d);
        (s.mapped_bytes, s.direct_bytes + s.staged_bytes)
    };
    for &len in &sizes {
        for &(hoff, doff) in &OFFSETS {
            for from_pinned in [false, true] {
                row.total += 1;
                let payload = pattern(len, len + hoff + usize::from(from_pinned));
                let plain;
                let src: &[u8] = if from_pinned {
                    pinned[hoff..hoff + len].copy_from_slice(&payload);
                    &pinned[hoff..hoff + len]
                } else {
                    plain = payload.clone();
                    &plain
                };
                let (err, before, after) = guarded_write(&dbuf, doff, src, &payload, || counts(&dev))?;
                let what = format!("len {len}, device offset {doff}, {} source", if from_pinned { "pinned" } else { "plain" });
                let stored = after.0 - before.0;
                stored_by[usize::from(from_pinned)] += stored;
                let moved = stored + (after.1 - before.1);
                // A write the copy engine took whole is a valid split (the stores and the engine
                // take parts as they get to them: a store thread the scheduler held back finds
                // none left, seen on 2 busy cores); the row asks for stores over all its writes.
                let err = err.or((moved != len as u64).then_some("stores and copies do not add up to the write"));
                match err {
                    None => row.passed += 1,
                    Some(e) if row.detail.is_empty() => row.detail = format!("{e} ({what})"),
                    Some(_) => {}
                }
            }
        }
    }
    for (i, source) in ["plain", "pinned"].into_iter().enumerate() {
        if stored_by[i] == 0 && row.passed == row.total {
            // Not one write from this source was shared: its assisted path was never exercised.
            row.passed -= 1;
            row.detail = format!(
                "no byte stored by the CPU in any write from a {source} source: {} wrote them all",
                crate::devices::copier(dev.info())
            );
        }
    }
    if row.detail.is_empty() {
        row.detail = format!(
            "{} bytes stored by the CPU (plain sources {}, pinned {}), the rest by {}",
            stored_by[0] + stored_by[1],
            stored_by[0],
            stored_by[1],
            crate::devices::copier(dev.info())
        );
    }
    rows.push(row);
    let order = ordered_with_streams(&dev, &dbuf, "bar assist ordered with stream work", min, 8192, 4, "an assisted write")?;
    rows.push(order);
    drop((dbuf, pinned));
    dev.destroy()?;
    Ok(dev.validation_errors())
}

/// Why the BAR rows cannot run on a device: no memory type `BarWrites::On` maps device buffers
/// in (`memtype::device_mapped`, the library's own choice), so they would stay unmapped.
fn bar_skip(info: &vkhost::DeviceInfo) -> Option<&'static str> {
    vkhost::memtype::device_mapped(&info.memory_type_flags(), u32::MAX)
        .is_none()
        .then_some("no DEVICE_LOCAL|HOST_VISIBLE|HOST_COHERENT memory type")
}

fn check_device(index: usize) -> Result<bool> {
    let validation = vkhost::validation_layer_installed();
    if !validation {
        println!("note: validation layer not installed, checking without it");
    }
    let opts = OpenOptions { validation, ..OpenOptions::default() };
    let dev = Device::open_with(index, &opts)?;
    let info = dev.info().clone();
    println!("[{}] {} ({}, {})", info.index, info.name, info.device_type.as_str(), info.driver_name);
    println!("    host registration: {}", crate::devices::registration_line(&dev.host_registration()));
    let skip = bar_skip(&info);
    let mut rows = Vec::new();
    let t = std::time::Instant::now();
    matrix(&dev, &mut rows)?;
    refusals(&dev, &mut rows)?;
    kernels(&dev, &mut rows)?;
    let left = entries_of(&dev);
    dev.destroy()?;
    let errors = dev.validation_errors()
        + teardown(index, &opts, &mut rows)?
        + multi_device(index, &opts, &mut rows)?
        + bar_writes(index, &opts, &mut rows, false, skip)?
        + bar_writes(index, &opts, &mut rows, true, skip)?
        + bar_assist(index, &opts, &mut rows, skip)?
        + huge_pinned(index, &opts, &mut rows)?
        + reused_pinned(index, &opts, &mut rows)?
        + in_pieces(index, &opts, &mut rows)?
        + small_ring(index, &opts, &mut rows)?
        + small_pieces(index, &opts, &mut rows)?
        + kernels_with_sets(index, &opts, &mut rows)?
        + d2d_by_kernel(index, &opts, &mut rows)?
        + gathered(index, &opts, &mut rows)?;
    rows.push(Row {
        name: "registry empty at the end".into(),
        passed: usize::from(left == 0),
        total: 1,
        detail: if left == 0 { String::new() } else { format!("{left} entries left") },
    });
    if opts.validation {
        rows.push(Row {
            name: "validation errors".into(),
            passed: usize::from(errors == 0),
            total: 1,
            detail: if errors == 0 { String::new() } else { format!("{errors} (run with RUST_LOG=vkhost=warn to see them)") },
        });
    }
    let width = rows.iter().map(|r| r.name.chars().count()).max().unwrap_or(0).max(44);
    println!("    {:<width$} {:>6} {:>9}  detail", "check", "result", "cases");
    let mut ok = true;
    for r in &rows {
        let pass = r.passed == r.total;
        ok &= pass;
        println!("    {:<width$} {:>6} {:>4}/{:<4}  {}", r.name, if pass { "pass" } else { "FAIL" }, r.passed, r.total, r.detail);
    }
    println!("    {} in {:.1} s", if ok { "all checks passed" } else { "FAILED" }, t.elapsed().as_secs_f64());
    Ok(ok)
}

pub fn run(a: Args) -> Result<ExitCode> {
    let infos = vkhost::devices()?;
    let indices: Vec<usize> = if a.all {
        infos.iter().map(|i| i.index).collect()
    } else if let Some(i) = a.device {
        crate::devices::check_index("--device", i, &infos)?;
        vec![i]
    } else {
        let d = Device::open_default_with(&OpenOptions { validation: false, ..OpenOptions::default() })?;
        let i = d.info().index;
        d.destroy()?;
        vec![i]
    };
    if indices.is_empty() {
        println!("no Vulkan devices");
        return Ok(ExitCode::from(1));
    }
    let mut ok = true;
    for i in indices {
        match check_device(i) {
            Ok(pass) => ok &= pass,
            Err(e) => {
                println!("[{i}] FAILED: {e}");
                ok = false;
            }
        }
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
