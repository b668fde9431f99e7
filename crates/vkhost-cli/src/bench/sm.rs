//! The `_sm` testcases: the built-in copy kernel (`Stream::copy_sm`, nvbandwidth's "sm" copy,
//! where the shader cores move the bytes) on a compute stream, then `synchronize`.
//!
//! - `host_to_device_sm`, `device_to_host_sm`: the kernel binds the pinned block itself
//!   (`Binding::Host`/`HostMut` of its slice) and a device buffer;
//! - `host_to_device_registered_sm`, `device_to_host_registered_sm`: the same over the user's
//!   registered pages (a launch that binds registered memory through a slice completes before
//!   it returns, so the `synchronize` after it finds nothing left);
//! - `device_to_device_sm`: two device buffers (checked and timed by `d2d::d2d_point`).
//!
//! The host memory is the path's (`paths::Host`), the same the `_ce` testcases use. The kernel
//! moves u32 words, by 16-byte vectors when the length is a multiple of 16 (every range here
//! starts 16-aligned): sizes that are not multiples of 4 are skipped with a note.

use super::d2d::d2d_point;
use super::paths::Host;
use super::{Ctx, DirKind, PathKind, measure, point, point::pattern};
use crate::devices::anyhow_free::Result;
use crate::stats::size_label;
use serde_json::json;
use vkhost::kernel::Binding;
use vkhost::{DeviceBuffer, QueueKind, Stream};

/// One copy by the kernel, waited for.
fn copy(stream: &Stream, src: Binding<'_>, dst: Binding<'_>) -> Result<()> {
    stream.copy_sm(src, dst)?;
    stream.synchronize()?;
    Ok(())
}

/// Measures `path`'s sm testcases in `dirs` at every size: `host` is the path's memory (none
/// for `device`).
pub(super) fn bench_sm(
    cx: &mut Ctx,
    path: PathKind,
    dirs: &[DirKind],
    sizes: &[u64],
    dbuf: &[DeviceBuffer; 2],
    mut host: Option<&mut Host>,
    notes: &mut Vec<String>,
) -> Result<()> {
    // Kernels need a compute queue: copy-engine streams refuse launches.
    let stream = cx.dev.stream_on(QueueKind::Compute)?;
    let mut odd = Vec::new();
    for &size in sizes {
        for &dir in dirs {
            if super::interrupted() {
                return Ok(());
            }
            if size % 4 != 0 {
                cx.pb.inc(1);
                if !odd.contains(&size) {
                    odd.push(size);
                }
                continue;
            }
            let n = size as usize;
            match (dir, host.as_deref_mut()) {
                (DirKind::D2d, _) => d2d_point(cx, size, true, dbuf, &mut || {
                    copy(&stream, Binding::Device(&dbuf[0], 0, n), Binding::Device(&dbuf[1], 0, n))
                })?,
                (DirKind::H2d | DirKind::D2h, Some(h)) => host_point(cx, &stream, path, dir, size, dbuf, h)?,
                _ => return Err(format!("no sm testcase for {} {}", path.name(), dir.name()).into()),
            }
        }
    }
    if !odd.is_empty() {
        let list: Vec<String> = odd.iter().map(|&s| size_label(s)).collect();
        notes.push(format!(
            "{} sm: {} skipped: the copy kernel moves whole u32 words (sizes must be multiples of 4)",
            path.name(),
            list.join(", ")
        ));
    }
    Ok(())
}

/// One h2d or d2h point over host memory: a round trip checked through the kernel, then the
/// timed copies.
fn host_point(
    cx: &mut Ctx,
    stream: &Stream,
    path: PathKind,
    dir: DirKind,
    size: u64,
    dbuf: &[DeviceBuffer; 2],
    host: &mut Host,
) -> Result<()> {
    let n = size as usize;
    let what = format!("{} {}", super::testcase::testcase_of("copy", path.name(), dir.name(), true), size_label(size));
    cx.pb.set_message(what.clone());
    let (src, dst) = host.both();
    let (src, dst) = (&mut src[..n], &mut dst[..n]);
    // The check's buffers, allocated once at the largest size (no per-point churn).
    let (mut want, mut got) = std::mem::take(&mut cx.scratch);
    want.resize(want.len().max(n), 0);
    got.resize(got.len().max(n), 0);
    let r = (|| -> Result<bool> {
        let (want, got) = (&mut want[..n], &mut got[..n]);
        pattern(want, size ^ (dir as u64) << 40 ^ (path as u64) << 48 ^ 1 << 56);
        if dir == DirKind::H2d {
            src.copy_from_slice(want);
            // Zeroed first, so a copy that did nothing cannot pass on an earlier point's bytes.
            got.fill(0);
            dbuf[0].write(0, got)?;
            copy(stream, Binding::Host(src), Binding::Device(&dbuf[0], 0, n))?;
            dbuf[0].read(0, got)?;
        } else {
            dbuf[1].write(0, want)?;
            dst.fill(0);
            copy(stream, Binding::Device(&dbuf[1], 0, n), Binding::HostMut(dst))?;
            got.copy_from_slice(dst);
        }
        Ok(cx.check(&what, got, want))
    })();
    cx.scratch = (want, got);
    let ok = r?;
    let s = if dir == DirKind::H2d {
        measure(cx.iters, cx.budget, || copy(stream, Binding::Host(src), Binding::Device(&dbuf[0], 0, n)))?
    } else {
        measure(cx.iters, cx.budget, || copy(stream, Binding::Device(&dbuf[1], 0, n), Binding::HostMut(dst)))?
    };
    let mut p = point("vulkan", "copy", path.name(), dir.name(), size, size, s);
    p.sm = true;
    p.verified = Some(ok);
    p.extra = json!({ "kernel": kernel_name(n) });
    cx.push(p);
    Ok(())
}

/// Which built-in `copy_sm` runs for `n` bytes at 16-aligned offsets.
pub(super) fn kernel_name(n: usize) -> &'static str {
    if n % 16 == 0 { "copy_vec4" } else { "copy" }
}
