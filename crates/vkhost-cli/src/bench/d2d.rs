//! `device_to_device_ce`: vkCmdCopyBuffer between two device buffers on a copy-engine stream
//! (`Stream::copy_async`, then `synchronize`), and the check and timing every device-to-device
//! point shares (`device_to_device_sm` comes here from `sm`).
//!
//! Bytes counted: `size`, as nvbandwidth counts a device-local copy. The device reads `size`
//! bytes and writes `size` bytes, so its memory traffic is twice the figure.

use super::{Ctx, DirKind, PathKind, measure, point, point::pattern};
use crate::devices::anyhow_free::Result;
use crate::stats::size_label;
use vkhost::DeviceBuffer;

/// The copy-engine testcase over every size: one copy-queue stream for the whole sweep.
pub(super) fn bench_d2d_ce(cx: &mut Ctx, sizes: &[u64], dbuf: &[DeviceBuffer; 2]) -> Result<()> {
    let stream = cx.dev.stream()?;
    for &size in sizes {
        if super::interrupted() {
            return Ok(());
        }
        let n = size as usize;
        d2d_point(cx, size, false, dbuf, &mut || {
            stream.copy_async(&dbuf[0], 0, &dbuf[1], 0, n)?;
            stream.synchronize()?;
            Ok(())
        })?;
    }
    Ok(())
}

/// One device-to-device point: `copy` moves the first `size` bytes of `dbuf[0]` into `dbuf[1]`
/// and returns once they are there. Checked once (a pattern in, the zeroed destination read
/// back), then timed.
pub(super) fn d2d_point(cx: &mut Ctx, size: u64, sm: bool, dbuf: &[DeviceBuffer; 2], copy: &mut dyn FnMut() -> Result<()>) -> Result<()> {
    let n = size as usize;
    let what = format!("{} {}", super::testcase::testcase_of("copy", "device", "d2d", sm), size_label(size));
    cx.pb.set_message(what.clone());
    // The check's buffers, allocated once at the largest size (no per-point churn).
    let (mut want, mut got) = std::mem::take(&mut cx.scratch);
    want.resize(want.len().max(n), 0);
    got.resize(got.len().max(n), 0);
    let r = (|| -> Result<bool> {
        let (want, got) = (&mut want[..n], &mut got[..n]);
        pattern(want, size ^ (DirKind::D2d as u64) << 40 ^ (PathKind::Device as u64) << 48 ^ (sm as u64) << 56);
        dbuf[0].write(0, want)?;
        // A zeroed destination, so a copy that did nothing cannot pass on an earlier point's bytes.
        got.fill(0);
        dbuf[1].write(0, got)?;
        copy()?;
        dbuf[1].read(0, got)?;
        Ok(cx.check(&what, got, want))
    })();
    cx.scratch = (want, got);
    let ok = r?;
    let s = measure(cx.iters, cx.budget, copy)?;
    let mut p = point("vulkan", "copy", PathKind::Device.name(), DirKind::D2d.name(), size, size, s);
    p.sm = sm;
    p.verified = Some(ok);
    if sm {
        p.extra = serde_json::json!({ "kernel": super::sm::kernel_name(n) });
    }
    cx.push(p);
    Ok(())
}
