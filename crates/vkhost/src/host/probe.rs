//! The import probe: one page registered, copied to the device and back through the import, and
//! unregistered, before registration counts as working on a device. Run by the public
//! constructors (`open.rs`) as the device opens, and again by a `register` after a run that could
//! not finish. The verdict lives in the device's state (`Shared::probe`), which the device layer
//! reads; the probe itself goes through this layer's public paths.

use super::{CopyPath, copy_to_device, copy_to_host, register, unregister};
use crate::device::{Device, ImportPolicy, ProbeScope};
use crate::error::Error;
use crate::maps;
use std::sync::atomic::Ordering;

/// How many times the import probe runs at most when it keeps failing in a way that may pass.
const PROBE_TRIES: u32 = 3;

/// Proves registration with a real import of one page (run by the public constructors as the
/// device opens, `crate::device::AfterOpen`, and again by a `register` after a run that could
/// not finish): register, a device round trip of a
/// pattern in both directions, unregister. Until then VK_EXT_external_memory_host is only
/// advertised. Skipped when the facts or the policy already rule registration out.
///
/// A failure that may pass (out of host or device memory, in the probe's own import, copy
/// context or buffer) is no verdict: registration stays available, unproven, and the next
/// `register` runs the probe again. Before, one such failure at open turned registration
/// off for the device's whole life, blaming imports (found by an audit).
pub(crate) fn run(dev: &Device) {
    let s = &dev.shared;
    if s.options.import == ImportPolicy::Never || s.info.host_registration().is_err() {
        return;
    }
    // The copies below are not the user's traffic (see `device::in_probe`).
    let scope = ProbeScope::enter();
    let verdict = probe(dev);
    drop(scope);
    let tries = s.probe_tries.fetch_add(1, Ordering::AcqRel) + 1;
    match verdict {
        Ok(g) => {
            let _ = s.probe.set(Ok(g));
            s.probe_retry.store(false, Ordering::Release);
        }
        Err((why, true)) if tries < PROBE_TRIES => {
            s.probe_retry.store(true, Ordering::Release);
            log::warn!("{}: the import probe could not finish ({why}); it runs again at the next registration", s.id);
        }
        Err((why, _)) => {
            let _ = s.probe.set(Err(why.clone()));
            s.probe_retry.store(false, Ordering::Release);
            log::warn!("{}: host registration disabled, import probe failed: {why}", s.id);
        }
    }
}

/// The import probe, run at open and again by a `register` after one that could not finish (see
/// `Device::host_registration`): one page registered, a
/// pattern copied to the device and back through it, unregistered (a borrowed device without
/// queues only registers and unregisters). `Err` says what failed, and whether that may pass
/// (`true`: out of host or device memory), so that it proves nothing about imports.
fn probe(dev: &Device) -> std::result::Result<usize, (String, bool)> {
    let page = maps::page_size();
    let granule = dev.shared.info.host_registration().map_err(|why| (why, false))?;
    // Whether the failure may pass, kept beside the message the error carries.
    let transient = std::cell::Cell::new(false);
    let r = maps::with_probe_page(page, |p| {
        let fail = |what: &str, e: Error| {
            // Out of memory may pass; a lost or destroyed device says nothing about imports.
            if matches!(e, Error::OutOfHostMemory | Error::OutOfDeviceMemory | Error::DeviceLost | Error::DeviceDestroyed) {
                transient.set(true);
            }
            Error::unsupported(format!("{what}: {e}"))
        };
        // SAFETY: the probe page is mapped read-write until with_probe_page returns, after the
        // unregister below.
        unsafe { register(dev, p, page) }.map_err(|e| fail("register", e))?;
        if dev.is_borrowed() {
            // No queue to copy through: the import itself is all that can be proved.
            return unregister(dev, p).map_err(|e| fail("unregister", e));
        }
        let r = (|| {
            let buf = dev.alloc_buffer(page).map_err(|e| fail("device buffer", e))?;
            // SAFETY: the page is ours, page-sized.
            let page_bytes = unsafe { std::slice::from_raw_parts_mut(p, page) };
            for (i, b) in page_bytes.iter_mut().enumerate() {
                *b = (i as u8).wrapping_mul(31) ^ 0xA5;
            }
            let want = page_bytes.to_vec();
            // SAFETY: as above.
            let path = unsafe { copy_to_device(dev, p, page, &buf, 0) }.map_err(|e| fail("copy to device", e))?;
            let mut back = vec![0u8; page];
            buf.read(0, &mut back).map_err(|e| fail("read back", e))?;
            if path != CopyPath::Direct || back != want {
                return Err(Error::unsupported(format!("h2d round trip through the import was wrong ({path:?})")));
            }
            let other: Vec<u8> = want.iter().map(|b| !b).collect();
            buf.write(0, &other).map_err(|e| fail("write", e))?;
            // SAFETY: as above.
            unsafe { copy_to_host(dev, &buf, 0, p, page) }.map_err(|e| fail("copy to host", e))?;
            // SAFETY: the copy completed; the page is ours.
            if unsafe { std::slice::from_raw_parts(p, page) } != &other[..] {
                return Err(Error::unsupported("d2h round trip through the import was wrong"));
            }
            Ok(())
        })();
        let u = unregister(dev, p);
        r?;
        u.map_err(|e| fail("unregister", e))
    });
    r.map(|()| granule).map_err(|e| {
        // The probe page's own mapping failing is out of host memory too.
        let transient = transient.get() || matches!(e, Error::OutOfHostMemory);
        let why = match e {
            Error::Unsupported { reason } => reason,
            e => e.to_string(),
        };
        (why, transient)
    })
}
