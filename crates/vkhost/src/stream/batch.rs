//! Command recording: the open batch (one command buffer), merging consecutive copies, and
//! the conflict tracking that puts a barrier only between commands that touch the same bytes.

use super::descriptors::DescPool;
use super::inner::{State, StreamInner};
use crate::device::Live;
use crate::device::pipeline::Pipeline;
use crate::device::submit::{compute_barrier, transfer_barrier};
use crate::error::{Error, Result};
use crate::fault::{self, Point};
use crate::resource::{Resource, Timeline};
use ash::vk;
use std::sync::{Arc, Weak};

/// Flush the open batch once it holds this many commands or bytes.
const BATCH_CMDS: usize = 512;
const BATCH_BYTES: u64 = 4 << 20;

pub(super) struct Batch {
    pub(super) cmd: vk::CommandBuffer,
    cmds: usize,
    bytes: u64,
    pub(super) d2h: bool,
    /// Whether barriers include compute-shader accesses: set from the first launch of the
    /// stream on (`State::launched`), so streams that only copy keep transfer-only barriers.
    pub(super) compute: bool,
    /// Ranges touched since the last barrier.
    touched: Vec<Access>,
    /// Owners of what the batch names, kept until it is reaped.
    pub(super) keep: Vec<Arc<Resource>>,
    /// Pipelines its launches use, kept until it is reaped (the device's cache may evict them
    /// meanwhile: see `device::pipeline`).
    pub(super) pipes: Vec<Arc<Pipeline>>,
    /// Descriptor pools its launches' sets come from (`DescriptorMode::Sets`), reset once it is
    /// reaped (`descriptors`).
    pub(super) pools: Vec<DescPool>,
    /// Copies between one pair of buffers not yet recorded: consecutive copies between the same
    /// buffers become one vkCmdCopyBuffer with several regions, and contiguous ones one region.
    merged: Option<Merged>,
}

struct Merged {
    src: vk::Buffer,
    dst: vk::Buffer,
    regions: Vec<vk::BufferCopy>,
}

/// How many accesses to track before a barrier is cheaper than checking.
const TRACKED: usize = 128;

/// What a range is a range of: bytes of one device buffer, or host bytes by address. Host
/// bytes are keyed by address, not by the import that reaches them, so two imports that share
/// a page conflict as they should.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Key {
    Buffer(vk::Buffer),
    Host,
}

/// A range a command reads or writes.
#[derive(Clone, Copy)]
pub(super) struct Access {
    key: Key,
    start: u64,
    end: u64,
    write: bool,
}

impl Access {
    pub(super) fn buf(buffer: vk::Buffer, start: u64, len: u64, write: bool) -> Access {
        Access { key: Key::Buffer(buffer), start, end: start + len, write }
    }
    pub(super) fn host(addr: usize, len: u64, write: bool) -> Access {
        Access { key: Key::Host, start: addr as u64, end: addr as u64 + len, write }
    }
    pub(super) fn is_write(&self) -> bool {
        self.write
    }
    /// Whether two accesses touch a common byte (of one buffer, or of host memory).
    pub(super) fn overlaps(&self, o: &Access) -> bool {
        self.key == o.key && self.start < o.end && o.start < self.end
    }
}

impl Batch {
    /// Records the merged copy, if any.
    ///
    /// # Safety
    /// `self.cmd` is recording, under the stream lock; the buffers named are alive until the
    /// batch completes.
    pub(super) unsafe fn emit(&mut self, d: &ash::Device) {
        if let Some(m) = self.merged.take() {
            // SAFETY: the caller's contract; the regions do not overlap (a conflict would have
            // emitted the earlier ones and put a barrier in between).
            unsafe { crate::device::submit::cmd_copy_buffer(d, self.cmd, m.src, m.dst, &m.regions) };
        }
    }

    /// Puts a barrier before a command making the accesses `acc` if it conflicts with one since
    /// the last barrier (recording pending copies first), then tracks `acc`.
    ///
    /// # Safety
    /// As for [`Batch::emit`].
    unsafe fn order(&mut self, d: &ash::Device, acc: &[Access]) {
        if self.cmds > 0 && self.conflicts(acc) {
            // SAFETY: the caller's contract.
            unsafe {
                self.emit(d);
                self.barrier(d);
            }
            self.touched.clear();
        }
        self.touched.extend_from_slice(acc);
    }

    /// The stream's barrier between two commands (see [`Batch::compute`]).
    ///
    /// # Safety
    /// As for [`Batch::emit`].
    unsafe fn barrier(&self, d: &ash::Device) {
        // SAFETY: the caller's contract; `compute` is only set on compute-capable queues.
        unsafe { if self.compute { compute_barrier(d, self.cmd) } else { transfer_barrier(d, self.cmd) } }
    }

    /// Whether `acc` conflicts with an access since the last barrier (a write on either side of
    /// overlapping bytes of one buffer): then a barrier must separate them.
    fn conflicts(&self, acc: &[Access]) -> bool {
        self.touched.len() + acc.len() > TRACKED || acc.iter().any(|a| self.touched.iter().any(|t| t.overlaps(a) && (t.write || a.write)))
    }
}

impl StreamInner {
    pub(super) fn begin(&self, l: &Live, st: &mut State) -> Result<()> {
        if st.open.is_some() {
            return Ok(());
        }
        let s = &*self.shared;
        let cmd = match st.free_cmds.pop() {
            Some(c) => c,
            None => {
                fault::check(Point::AllocateCommandBuffers).map_err(|c| s.fail("vkAllocateCommandBuffers", c))?;
                let ai = vk::CommandBufferAllocateInfo::default()
                    .command_pool(st.pool)
                    .level(vk::CommandBufferLevel::PRIMARY)
                    .command_buffer_count(1);
                // SAFETY: the pool is ours, synchronized by the stream lock.
                let v = unsafe { l.device.allocate_command_buffers(&ai) }.map_err(|c| s.fail("vkAllocateCommandBuffers", c))?;
                v[0]
            }
        };
        // SAFETY: `cmd` is idle (fresh or returned by reap after its batch completed).
        let r = unsafe {
            l.device.reset_command_buffer(cmd, vk::CommandBufferResetFlags::empty()).and_then(|_| {
                l.device
                    .begin_command_buffer(cmd, &vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT))
            })
        };
        if let Err(c) = r {
            st.free_cmds.push(cmd);
            return Err(s.fail("vkBeginCommandBuffer", c));
        }
        let b = Batch {
            cmd,
            cmds: 0,
            bytes: 0,
            d2h: false,
            compute: st.launched,
            touched: Vec::new(),
            keep: Vec::new(),
            pipes: Vec::new(),
            pools: Vec::new(),
            merged: None,
        };
        // SAFETY: `cmd` was just begun and is ours, under the stream lock.
        unsafe { b.barrier(&l.device) };
        st.open = Some(b);
        Ok(())
    }

    /// Records one copy, ordered after earlier commands it conflicts with, and flushes a full
    /// batch. `acc` is what it touches (source first); each of `owners` is noted as used (with
    /// whether the copy writes it) and kept by the batch until it is reaped.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn push_copy(
        &self,
        l: &Live,
        st: &mut State,
        src: vk::Buffer,
        dst: vk::Buffer,
        region: vk::BufferCopy,
        d2h: bool,
        acc: [Access; 2],
        owners: &[(&Arc<Resource>, bool)],
    ) -> Result<()> {
        self.begin(l, st)?;
        self.own(st, owners);
        let Some(b) = st.open.as_mut() else { return Err(Error::unsupported("no open batch")) };
        let d = &l.device;
        // SAFETY: recording into our open command buffer under the stream lock; both buffers are
        // owned by the batch (`own` above) until it is reaped.
        unsafe { b.order(d, &acc) };
        // The host side's offset of a region (the destination of a d2h copy, else the source;
        // for device-to-device and staging-ring copies the rule below only keeps some
        // contiguous regions apart, at no cost).
        let host = |r: &vk::BufferCopy| if d2h { r.dst_offset } else { r.src_offset };
        let align = crate::device::submit::HOST_ALIGN;
        match b.merged.as_mut() {
            Some(m) if m.src == src && m.dst == dst => match m.regions.last_mut() {
                // Contiguous regions become one, except a region that starts on a host boundary
                // after one that does not (a large copy split so its bulk starts on one:
                // `submit::host_aligned`).
                Some(last)
                    if last.src_offset + last.size == region.src_offset
                        && last.dst_offset + last.size == region.dst_offset
                        && !(host(last) % align != 0 && host(&region) % align == 0) =>
                {
                    last.size += region.size
                }
                _ => m.regions.push(region),
            },
            _ => {
                // SAFETY: as above.
                unsafe { b.emit(d) };
                b.merged = Some(Merged { src, dst, regions: vec![region] });
            }
        }
        b.cmds += 1;
        b.bytes += region.size;
        b.d2h |= d2h;
        if b.cmds >= BATCH_CMDS || b.bytes >= BATCH_BYTES {
            self.flush(l, st)?;
        }
        Ok(())
    }

    /// Notes a use of each owner by the open batch and makes the batch keep it. Call after
    /// `begin` and before recording, so the use is noted before the batch can be submitted
    /// (`crate::track`).
    fn own(&self, st: &mut State, owners: &[(&Arc<Resource>, bool)]) {
        let v = Self::batch_value(st);
        let tl = self.timeline();
        let Some(b) = st.open.as_mut() else { return };
        for &(r, write) in owners {
            r.tracker.note(&tl, v, write);
            if !b.keep.iter().rev().take(8).any(|k| Arc::ptr_eq(k, r)) {
                b.keep.push(r.clone());
            }
        }
    }

    /// Records one command (`rec`) that makes the accesses `acc`, and flushes a full batch.
    ///
    /// Stream order: a barrier goes before the command only when it touches bytes that an
    /// earlier command since the last barrier touched, with a write on either side. Independent
    /// small copies then run concurrently on the copy engine instead of draining it one by one.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn push(
        &self,
        l: &Live,
        st: &mut State,
        bytes: u64,
        d2h: bool,
        acc: &[Access],
        owners: &[(&Arc<Resource>, bool)],
        rec: impl FnOnce(vk::CommandBuffer),
    ) -> Result<()> {
        self.begin(l, st)?;
        self.own(st, owners);
        let Some(b) = st.open.as_mut() else { return Err(Error::unsupported("no open batch")) };
        // SAFETY: the open batch's command buffer is recording, under the stream lock; pending
        // copies are recorded first so command order is stream order.
        unsafe {
            b.order(&l.device, acc);
            b.emit(&l.device);
        }
        rec(b.cmd);
        b.cmds += 1;
        b.bytes += bytes;
        b.d2h |= d2h;
        if b.cmds >= BATCH_CMDS || b.bytes >= BATCH_BYTES {
            self.flush(l, st)?;
        }
        Ok(())
    }

    /// [`StreamInner::push`] for a dispatch of `pipe`, which the batch keeps until it is
    /// reaped: the first launch of the stream switches its barriers to include compute-shader
    /// accesses, with one such barrier before it (ordering it after every earlier command, of
    /// this batch and of the batches before).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn push_launch(
        &self,
        l: &Live,
        st: &mut State,
        pipe: &Arc<Pipeline>,
        bytes: u64,
        host_write: bool,
        acc: &[Access],
        owners: &[(&Arc<Resource>, bool)],
        rec: impl FnOnce(vk::CommandBuffer),
    ) -> Result<()> {
        self.begin(l, st)?;
        st.launched = true;
        if let Some(b) = st.open.as_mut() {
            if !b.pipes.iter().rev().take(8).any(|p| Arc::ptr_eq(p, pipe)) {
                b.pipes.push(pipe.clone());
            }
        }
        if let Some(b) = st.open.as_mut().filter(|b| !b.compute) {
            b.compute = true;
            // SAFETY: the open command buffer is recording, under the stream lock; the caller
            // checked that the queue supports compute.
            unsafe {
                b.emit(&l.device);
                b.barrier(&l.device);
            }
            b.touched.clear();
        }
        self.push(l, st, bytes, host_write, acc, owners, rec)
    }

    /// This stream as the timeline its uses are noted on.
    fn timeline(&self) -> Weak<dyn Timeline> {
        self.me.clone()
    }
}
