//! Async host↔device copies: a planned copy's direct pieces (registered or pinned memory) and
//! pageable pieces staged through the ring.

use super::batch::{Access, Ends};
use super::inner::{State, StreamInner, relock};
use super::ring::Completion;
use crate::device::Live;
use crate::device::submit::{Dir, HostSide, host_aligned, par_copy};
use crate::error::{Error, Result};
use crate::host;
use crate::resource::DeviceMem;
use ash::vk;

/// What an async host copy enqueued.
pub(super) struct Enqueued {
    /// The timeline value that completes it.
    pub(super) value: u64,
    /// The enqueue call (`State::calls`; 0 for none): its copy-outs, if cancelled, are its own.
    pub(super) call: u64,
    /// Whether a direct piece lies in a registration (the caller's memory).
    pub(super) registered: bool,
    /// Whether some bytes went through the staging ring.
    pub(super) staged: bool,
    /// Whether some bytes go direct (the device reads or writes the host bytes themselves).
    pub(super) direct: bool,
}

impl StreamInner {
    /// The argument checks of [`StreamInner::host_copy`], which refuse before anything is
    /// enqueued: the buffer is this device's, the range lies in it, the host range does not wrap.
    /// A destroyed device answers that first, whatever the arguments (issue 2): asked only when
    /// an argument is refused, so a copy's checks (run twice per call, here and in `host_copy`)
    /// take no lock beside the one `host_copy` holds.
    pub(super) fn check_host_copy(&self, addr: usize, len: usize, buf: &DeviceMem, off: usize) -> Result<()> {
        let args = || -> Result<()> {
            buf.check_device(&self.shared)?;
            buf.check_range(off, len)?;
            host::check_host_range(addr, len)
        };
        args().map_err(|refused| self.shared.live().err().unwrap_or(refused))
    }

    /// An async host↔device copy (see the `Stream` methods).
    ///
    /// # Safety
    /// h2d: `addr` readable for `len` bytes until the call returns, and, where a registration
    /// or pinned block covers it, unchanged until the work completes. d2h: `addr` writable for
    /// `len` bytes and not otherwise accessed until the work completes and a wait returns.
    pub(super) unsafe fn host_copy(&self, to_device: bool, addr: usize, len: usize, buf: &DeviceMem, off: usize) -> Result<Enqueued> {
        let s = &*self.shared;
        self.check_host_copy(addr, len, buf, off)?;
        let l = s.live()?;
        let mut st = relock(&self.state);
        self.check(&st)?;
        if len == 0 {
            // Nothing to guard: value 0 is complete from the start.
            return Ok(Enqueued { value: 0, call: 0, registered: false, staged: false, direct: false });
        }
        // Holds every resource a direct piece names until this call has noted all its uses.
        let plan = host::plan(s, addr, len, off as u64);
        st.calls += 1;
        let call = st.calls;
        // A panic unwinding out of the enqueue (a user's logger, as a wait for ring room fails)
        // leaves this call's copy-outs as an error does: never to be written.
        let r = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.enqueue_pieces(&l, &mut st, to_device, &plan, buf, call)
        })) {
            Ok(r) => r,
            Err(panic) => {
                st.completions.retain(|c| c.call != call);
                // Direct pieces this call recorded name the caller's bytes, and the batch holding
                // them may be submitted already (a wait for ring room flushes first) or still
                // open: submit what is open and wait for the queue before the unwind goes on, as
                // `Stream::guarded_copy` drains after an error, so that the device no longer
                // touches the bytes once the caller has them back. Quietly: a user's logger that
                // panicked once may panic again on a failed flush's line (the batch is then lost
                // and never runs).
                if plan.pieces.iter().any(|p| matches!(p.host, HostSide::Direct { .. })) {
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.flush(&l, &mut st)));
                    let _ = self.wait_queue_idle(&l);
                }
                std::panic::resume_unwind(panic)
            }
        };
        if r.is_err() {
            // The caller sees an error and may free the destination: the pageable d2h pieces
            // this call queued must never be written (pieces already completed were written
            // inside the call, while the memory was still the caller's to lend).
            st.completions.retain(|c| c.call != call);
        }
        let (direct, staged) = r?;
        host::record(s, direct, staged);
        // The value that covers this copy: the open batch, or the last submitted one.
        let value = if st.open.is_some() { st.submitted + 1 } else { st.submitted };
        Ok(Enqueued { value, call, registered: plan.registered, staged: staged > 0, direct: direct > 0 })
    }

    /// Records a planned copy's pieces; returns (direct, staged) bytes.
    fn enqueue_pieces(
        &self,
        l: &Live,
        st: &mut State,
        to_device: bool,
        plan: &host::Plan,
        buf: &DeviceMem,
        call: u64,
    ) -> Result<(u64, u64)> {
        let s = &*self.shared;
        let (mut direct, mut staged) = (0, 0);
        let (dev, dev_res) = (buf.raw(), &buf.res);
        for piece in &plan.pieces {
            match piece.host {
                HostSide::Direct { buffer, offset, addr } => {
                    let Some(held) = plan.held.iter().find(|h| h.0.obj.buffer == buffer) else {
                        return Err(Error::unsupported("direct piece without its owner"));
                    };
                    // Stream order for host bytes: an earlier pageable d2h of this stream into
                    // these bytes (queued before they were registered) lands before the device
                    // reads them, or before it writes them (else the older copy-out would
                    // overwrite the newer bytes).
                    self.settle(l, st, addr, piece.len as usize)?;
                    let owners = [(&held.0, !to_device), (dev_res, to_device)];
                    // The bulk of a large piece starts on a host boundary (see `host_aligned`).
                    for (h, dv, n) in host_aligned(offset, piece.dev_offset, piece.len) {
                        let host_acc = Access::host(addr + (h - offset) as usize, n, !to_device);
                        let dev_acc = Access::buf(dev, dv, n, to_device);
                        if to_device {
                            let region = vk::BufferCopy { src_offset: h, dst_offset: dv, size: n };
                            self.push_copy(l, st, buffer, dev, region, false, Ends::Upload, [host_acc, dev_acc], &owners)?;
                        } else {
                            let region = vk::BufferCopy { src_offset: dv, dst_offset: h, size: n };
                            self.push_copy(l, st, dev, buffer, region, true, Ends::Download, [dev_acc, host_acc], &owners)?;
                        }
                    }
                    direct += piece.len;
                }
                HostSide::Staged { addr: a } => {
                    if to_device {
                        // Stream order for host bytes: an earlier pageable d2h into these bytes
                        // must land before we read them.
                        self.settle(l, st, a, piece.len as usize)?;
                    }
                    let chunk = s.options.staging_chunk as u64;
                    let mut done = 0;
                    while done < piece.len {
                        let n = (piece.len - done).min(chunk);
                        let roff = self.ring_alloc(l, st, n)?;
                        let (rb, rp) = Self::ring_buffer(st)?;
                        let dev_off = piece.dev_offset + done;
                        let owners = [(dev_res, to_device)];
                        if to_device {
                            // SAFETY: the source is readable (contract); the ring range is ours
                            // and idle (ring_alloc waited for its previous use).
                            unsafe { par_copy(s, rp.add(roff as usize), (a + done as usize) as *const u8, n as usize, Dir::ToDevice) };
                            let acc = [Access::buf(rb, roff, n, false), Access::buf(dev, dev_off, n, true)];
                            let region = vk::BufferCopy { src_offset: roff, dst_offset: dev_off, size: n };
                            self.push_copy(l, st, rb, dev, region, false, Ends::Ring, acc, &owners)?;
                        } else {
                            let v = Self::batch_value(st);
                            let acc = [Access::buf(dev, dev_off, n, false), Access::buf(rb, roff, n, true)];
                            let region = vk::BufferCopy { src_offset: dev_off, dst_offset: roff, size: n };
                            self.push_copy(l, st, dev, rb, region, true, Ends::Ring, acc, &owners)?;
                            st.completions.push_back(Completion { call, value: v, ring_off: roff, addr: a + done as usize, len: n });
                        }
                        done += n;
                    }
                    staged += piece.len;
                }
            }
        }
        Ok((direct, staged))
    }
}
