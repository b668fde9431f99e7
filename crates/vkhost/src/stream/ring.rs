//! The pageable staging ring (chunks reused once the device is past them) and the pageable
//! d2h completions copied out of it once their batch is done.

use super::inner::{State, StreamInner, relock, signalled};
use crate::device::{Bound, Live};
use crate::error::{Error, Result};
use crate::memtype;
use ash::vk;

pub(super) struct Ring {
    pub(super) bound: Bound,
    chunk: u64,
    /// The timeline value that last used each chunk (0: never).
    pub(super) last: Vec<u64>,
    cur: usize,
    used: u64,
}

/// A pageable d2h piece to copy out of the ring once `value` completes.
pub(super) struct Completion {
    /// The enqueue call that queued it: a failed call removes its own completions.
    pub(super) call: u64,
    pub(super) value: u64,
    pub(super) ring_off: u64,
    pub(super) addr: usize,
    pub(super) len: u64,
}

impl StreamInner {
    /// Room for `n` (≤ chunk) staged bytes in the ring; may flush and wait for old work.
    pub(super) fn ring_alloc(&self, l: &Live, st: &mut State, n: u64) -> Result<u64> {
        let s = &*self.shared;
        if st.ring.is_none() {
            let chunk = s.options.staging_chunk as u64;
            let slots = s.options.staging_slots as u64;
            let usage = vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST;
            let bound = s.alloc_bound(l, chunk * slots, usage, &memtype::pinned, true, false)?;
            st.ring = Some(Ring { bound, chunk, last: vec![0; slots as usize], cur: 0, used: 0 });
        }
        let (chunk, full) = {
            let Some(r) = st.ring.as_ref() else { return Err(Error::unsupported("no staging ring")) };
            (r.chunk, r.used + n > r.chunk)
        };
        debug_assert!(n <= chunk);
        if full {
            // Close this chunk: submit what uses it, so the device starts while we fill the next.
            self.flush(l, st)?;
            let (next, need) = {
                let Some(r) = st.ring.as_ref() else { return Err(Error::unsupported("no staging ring")) };
                let next = (r.cur + 1) % r.last.len();
                (next, r.last[next])
            };
            if need > 0 {
                if need > st.submitted {
                    self.flush(l, st)?;
                }
                // Move to the next chunk only once its previous use is done: after a failed wait
                // the ring stays where it was, and the next call waits again.
                self.wait_sem(l, signalled(st, need))?;
                self.reap(l, st)?;
            }
            if let Some(r) = st.ring.as_mut() {
                r.cur = next;
                r.used = 0;
            }
        }
        let v = Self::batch_value(st);
        let Some(r) = st.ring.as_mut() else { return Err(Error::unsupported("no staging ring")) };
        let off = r.cur as u64 * r.chunk + r.used;
        r.used += n;
        r.last[r.cur] = v;
        Ok(off)
    }

    /// Completes pending pageable d2h copies that write into `[addr, addr+len)`.
    pub(super) fn settle(&self, l: &Live, st: &mut State, addr: usize, len: usize) -> Result<()> {
        let end = addr + len;
        let need = st.completions.iter().filter(|c| c.addr < end && addr < c.addr + c.len as usize).map(|c| c.value).max();
        if let Some(v) = need {
            if v > st.submitted {
                self.flush(l, st)?;
            }
            self.wait_sem(l, signalled(st, v))?;
            self.reap(l, st)?;
        }
        Ok(())
    }

    pub(super) fn ring_buffer(st: &State) -> Result<(vk::Buffer, *mut u8)> {
        match &st.ring {
            Some(Ring { bound: Bound { buffer, ptr: Some(p), .. }, .. }) => Ok((*buffer, p.0.as_ptr())),
            _ => Err(Error::unsupported("staging ring is not mapped")),
        }
    }

    /// Drops queued pageable d2h copy-outs up to `value` (their work cannot be confirmed: `e`),
    /// recording their batches as cancelled (`State::cancelled`).
    pub(super) fn cancel_completions(&self, value: u64, e: &Error) {
        let mut st = relock(&self.state);
        let n = super::inner::cancel_where(&mut st, |c| c.value <= value, e);
        if n > 0 {
            log::warn!("{}: {n} pageable d2h copies cancelled ({e})", self.shared.id);
        }
    }
}
