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
/// The first batch after the stream's work drained flushes at this many commands (see
/// [`StreamInner::flush_if_due`]).
const EARLY_CMDS: usize = 64;

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
    /// The stream's scratch buffer for gathered copies (`OpenOptions::gather_regions`), once
    /// made, and how much of it this batch used: each gathered run takes a fresh part, since
    /// the runs of one batch may overlap on the device (the batch's opening barrier orders it
    /// after the batches before, so every batch starts at 0).
    pub(super) scratch: Option<Scratch>,
    scratch_used: u64,
    /// The fewest regions of a merged run that go through the scratch buffer (`usize::MAX`:
    /// never).
    gather_min: usize,
    /// Bytes this batch moved through the scratch buffer (`HostStats::gathered_bytes`, counted
    /// once the batch is submitted).
    pub(super) gathered: u64,
    /// Whether every batch submitted before this one was known complete when it began (by the
    /// stream's cached completed value, which waits and polls raise): it then flushes early
    /// (`StreamInner::flush_if_due`).
    early: bool,
    /// The largest region of a copy but the staging ring's (`OpenOptions::copy_piece`,
    /// resolved for the device).
    copy_piece: u64,
}

/// A stream's device scratch buffer for gathered copies: owned by the stream's state and
/// released at its shutdown, after every batch that names it completed (as the staging ring).
#[derive(Clone, Copy)]
pub(super) struct Scratch {
    pub(super) buffer: vk::Buffer,
    pub(super) size: u64,
}

struct Merged {
    src: vk::Buffer,
    dst: vk::Buffer,
    regions: Vec<vk::BufferCopy>,
    ends: Ends,
}

/// What a copy goes between: where a run of copies may be gathered (uploads and downloads) and
/// whether its regions are cut at `OpenOptions::copy_piece` (all but the staging ring's).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Ends {
    /// From host memory (a pinned block or an import) to a device buffer.
    Upload,
    /// From a device buffer to host memory (a pinned block or an import).
    Download,
    /// Between two device buffers.
    Device,
    /// Through the stream's staging ring (pageable memory): its chunks stay whole regions, as
    /// the synchronous copies' staging chunks do.
    Ring,
}

impl Ends {
    /// Which end is host memory where a run may be gathered: `Some(true)` the source (an
    /// upload), `Some(false)` the destination (a download), `None` neither.
    fn host_src(self) -> Option<bool> {
        match self {
            Ends::Upload => Some(true),
            Ends::Download => Some(false),
            Ends::Device | Ends::Ring => None,
        }
    }
}

/// Where a merged run's host ends lie together: `(first offset, length)` of the one unbroken
/// range they cover, when there are at least `min` regions (and 2), none larger than
/// [`crate::OpenOptions::GATHER_REGION_MAX`], and no gap between them. Regions may overlap on
/// the host side (an upload may read the same bytes twice), so the range is their union; it
/// holds exactly the bytes the run was tracked as touching (`Batch::order`), so one copy of it
/// conflicts with nothing the run's own copies did not.
pub(super) fn dense_host_span(regions: &[vk::BufferCopy], host_src: bool, min: usize) -> Option<(u64, u64)> {
    if regions.len() < min.max(2) || regions.iter().any(|r| r.size > crate::OpenOptions::GATHER_REGION_MAX) {
        return None;
    }
    let mut ends: Vec<(u64, u64)> = regions.iter().map(|r| (if host_src { r.src_offset } else { r.dst_offset }, r.size)).collect();
    ends.sort_unstable();
    let start = ends[0].0;
    let mut end = start;
    for (at, n) in ends {
        if at > end {
            return None;
        }
        end = end.max(at + n);
    }
    Some((start, end - start))
}

/// Scratch offsets are aligned to this (the copy engines' preferred alignment for large
/// regions; vkCmdCopyBuffer itself needs none).
const SCRATCH_ALIGN: u64 = 256;

/// How many accesses to track before a barrier is cheaper than checking (two per copy: a run
/// of copies holds at most `OpenOptions::GATHER_REGIONS_MAX`).
const TRACKED: usize = 2 * crate::OpenOptions::GATHER_REGIONS_MAX;

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
        let Some(m) = self.merged.take() else { return };
        if let Some((scratch, base, start, span)) = self.gather_room(&m) {
            // SAFETY: the caller's contract; the scratch range is this run's alone.
            unsafe { self.emit_gathered(d, &m, scratch, base, start, span) };
            return;
        }
        // The regions do not overlap (a conflict would have emitted the earlier ones and put a
        // barrier in between).
        let piece = if m.ends == Ends::Ring { crate::device::submit::COPY_REGION_MAX } else { self.copy_piece };
        // SAFETY: the caller's contract.
        unsafe { crate::device::submit::cmd_copy_buffer(d, self.cmd, m.src, m.dst, &m.regions, piece) };
    }

    /// Whether merged run `m` goes through the scratch buffer: the scratch buffer, the part of
    /// it the run takes, and the run's host span `(start, length)` ([`dense_host_span`]).
    fn gather_room(&self, m: &Merged) -> Option<(Scratch, u64, u64, u64)> {
        let host_src = m.ends.host_src()?;
        let scratch = self.scratch?;
        let (start, span) = dense_host_span(&m.regions, host_src, self.gather_min)?;
        let base = self.scratch_used.next_multiple_of(SCRATCH_ALIGN);
        (base + span <= scratch.size).then_some((scratch, base, start, span))
    }

    /// Records merged run `m` through the scratch buffer's `[base, base+span)`: an upload
    /// copies its host span `[start, start+span)` there in one region and scatters it to the
    /// run's device regions; a download gathers the device regions there and copies the span
    /// out in one region. A barrier between the two halves orders the scratch bytes.
    ///
    /// # Safety
    /// As for [`Batch::emit`]; `[base, base+span)` lies in the scratch buffer and no other
    /// command of this batch uses it; `[start, start+span)` is the run's host span.
    unsafe fn emit_gathered(&mut self, d: &ash::Device, m: &Merged, scratch: Scratch, base: u64, start: u64, span: u64) {
        use crate::device::submit::cmd_copy_buffer;
        let whole = [vk::BufferCopy { src_offset: start, dst_offset: base, size: span }];
        let moved = |r: &vk::BufferCopy, src: bool| {
            let mut r = *r;
            if src {
                r.src_offset = base + (r.src_offset - start);
            } else {
                r.dst_offset = base + (r.dst_offset - start);
            }
            r
        };
        // SAFETY: the caller's contract: the host span is the run's (tracked) host bytes, the
        // scratch range is this run's, the device regions are the run's (non-overlapping).
        unsafe {
            if m.ends == Ends::Upload {
                cmd_copy_buffer(d, self.cmd, m.src, scratch.buffer, &whole, self.copy_piece);
                self.barrier(d);
                let regions: Vec<vk::BufferCopy> = m.regions.iter().map(|r| moved(r, true)).collect();
                cmd_copy_buffer(d, self.cmd, scratch.buffer, m.dst, &regions, self.copy_piece);
            } else {
                let regions: Vec<vk::BufferCopy> = m.regions.iter().map(|r| moved(r, false)).collect();
                cmd_copy_buffer(d, self.cmd, m.src, scratch.buffer, &regions, self.copy_piece);
                self.barrier(d);
                let out = [vk::BufferCopy { src_offset: base, dst_offset: start, size: span }];
                cmd_copy_buffer(d, self.cmd, scratch.buffer, m.dst, &out, self.copy_piece);
            }
        }
        self.scratch_used = base + span;
        // The bytes the run's copies moved (an upload may read host bytes twice).
        self.gathered += m.regions.iter().map(|r| r.size).sum::<u64>();
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
            scratch: st.scratch.as_ref().map(|b| b.0),
            scratch_used: 0,
            gather_min: self.gather_min(),
            gathered: 0,
            early: self.shared.options.early_submit && self.completed.load(std::sync::atomic::Ordering::Relaxed) >= st.submitted,
            copy_piece: self.shared.copy_piece(),
        };
        // SAFETY: `cmd` was just begun and is ours, under the stream lock.
        unsafe { b.barrier(&l.device) };
        st.open = Some(b);
        Ok(())
    }

    /// The fewest regions of a merged run this stream gathers (`OpenOptions::gather_regions`;
    /// `usize::MAX`: never).
    fn gather_min(&self) -> usize {
        let s = &*self.shared;
        match s.options.gather_regions {
            Some(n) => n.max(2),
            None if s.info.device_type == crate::DeviceType::Cpu => usize::MAX,
            None => crate::OpenOptions::GATHER_REGIONS,
        }
    }

    /// Makes the stream's scratch buffer for gathered copies, once: called when a merged run
    /// first reaches the size that would use it. Where it cannot be made, the stream never
    /// gathers (the copies go direct, as without it).
    fn make_scratch(&self, l: &Live, st: &mut State) {
        if st.scratch.is_some() || st.no_scratch {
            return;
        }
        let s = &*self.shared;
        let usage = vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST;
        let size = crate::OpenOptions::GATHER_SCRATCH;
        match s.alloc_bound(l, size, usage, &crate::memtype::device_local, false, false) {
            Ok(bound) => {
                let scratch = Scratch { buffer: bound.buffer, size };
                st.scratch = Some((scratch, bound));
                if let Some(b) = st.open.as_mut() {
                    b.scratch = Some(scratch);
                }
            }
            Err(e) => {
                st.no_scratch = true;
                log::debug!("{}: no scratch buffer for gathered copies ({e}): they go direct", s.id);
            }
        }
    }

    /// Records one copy, ordered after earlier commands it conflicts with, and flushes a full
    /// batch. `acc` is what it touches (source first); each of `owners` is noted as used (with
    /// whether the copy writes it) and kept by the batch until it is reaped. `ends` says what
    /// the copy goes between, for gathering and cutting (see [`Ends`]).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn push_copy(
        &self,
        l: &Live,
        st: &mut State,
        src: vk::Buffer,
        dst: vk::Buffer,
        region: vk::BufferCopy,
        d2h: bool,
        ends: Ends,
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
                b.merged = Some(Merged { src, dst, regions: vec![region], ends });
            }
        }
        // A run that would gather, on a stream without its scratch buffer yet: make it. Asked
        // once per run, as it reaches the threshold (no sorting on every copy of a stream that
        // never gathers); a run that cannot gather there, its host bytes broken or a region too
        // large, makes none.
        let want_scratch = b.scratch.is_none()
            && !st.no_scratch
            && b.merged.as_ref().is_some_and(|m| {
                m.regions.len() == b.gather_min
                    && m.ends.host_src().is_some_and(|src| dense_host_span(&m.regions, src, b.gather_min).is_some())
            });
        if want_scratch {
            self.make_scratch(l, st);
        }
        let Some(b) = st.open.as_mut() else { return Err(Error::unsupported("no open batch")) };
        b.cmds += 1;
        b.bytes += region.size;
        b.d2h |= d2h;
        self.flush_if_due(l, st)
    }

    /// Flushes the open batch when it is full, or at [`EARLY_CMDS`] commands when it is the
    /// first batch since the stream's work was last known complete (`Batch::early`): the device
    /// then has nothing of this stream's to run while the caller goes on enqueuing, so the work
    /// so far starts at once instead of when the batch fills (a loop of small async copies left the device idle for its first 512
    /// enqueues: ~0.2 ms at ~0.4 us each). Once per such start, so a stream whose device keeps
    /// up pays one submission more, not one per `EARLY_CMDS` commands.
    fn flush_if_due(&self, l: &Live, st: &mut State) -> Result<()> {
        let due = st.open.as_ref().is_some_and(|b| b.cmds >= BATCH_CMDS || b.bytes >= BATCH_BYTES || (b.early && b.cmds == EARLY_CMDS));
        if due {
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
        self.flush_if_due(l, st)
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

#[cfg(test)]
mod tests {
    use super::dense_host_span;
    use ash::vk::BufferCopy;

    /// `OpenOptions::copy_piece` cuts every copy vkhost records but the staging chunks: the
    /// synchronous direct ones, a stream's uploads, downloads and device-to-device copies; a
    /// pageable copy, synchronous or through a stream's ring, stays one region. Counted by
    /// the regions this thread recorded (`submit::RECORDED_REGIONS`).
    #[test]
    fn copies_are_cut_at_the_piece_but_staging_chunks_are_not() {
        use crate::device::submit::RECORDED_REGIONS;
        let validation = crate::validation_layer_installed();
        // BAR writes off: a small write to mapped device memory would be CPU stores, no region.
        let opts = crate::OpenOptions { copy_piece: Some(4096), validation, bar_writes: crate::BarWrites::Off, ..Default::default() };
        let dev = match crate::Device::open_default_with(&opts) {
            Ok(d) => d,
            Err(e) => return eprintln!("skipped: no Vulkan device ({e})"),
        };
        assert_eq!(dev.copy_piece(), 4096);
        let count = || RECORDED_REGIONS.with(|c| c.get());
        let n = 16 * 4096;
        let (buf, other) = (dev.alloc_buffer(n).unwrap(), dev.alloc_buffer(n).unwrap());
        let mut pinned = crate::PinnedBuffer::new(&dev, n).unwrap();
        let mut pageable = vec![7u8; n];
        let s = dev.stream().unwrap();
        let step = |what: &str, want: usize, f: &mut dyn FnMut()| {
            let before = count();
            f();
            assert_eq!(count() - before, want, "{what}");
        };
        step("sync direct upload", 16, &mut || buf.write(0, &pinned).unwrap());
        step("sync direct download", 16, &mut || buf.read(0, &mut pinned).unwrap());
        step("sync staged upload", 1, &mut || buf.write(0, &pageable).unwrap());
        step("sync staged download", 1, &mut || buf.read(0, &mut pageable).unwrap());
        step("stream upload", 16, &mut || s.upload_pinned(&pinned, 0..n, &buf, 0).unwrap().wait().unwrap());
        step("stream download", 16, &mut || s.download_pinned(&buf, 0, &mut pinned, 0..n).unwrap().wait().unwrap());
        step("stream device to device", 16, &mut || {
            s.copy_async(&buf, 0, &other, 0, n).unwrap();
            s.synchronize().unwrap();
        });
        step("stream ring upload", 1, &mut || s.upload(&pageable, &buf, 0).unwrap().wait().unwrap());
        drop((s, pinned, buf, other));
        dev.destroy().unwrap();
        assert_eq!(dev.validation_errors(), 0);
    }

    fn r(src: u64, dst: u64, size: u64) -> BufferCopy {
        BufferCopy { src_offset: src, dst_offset: dst, size }
    }

    #[test]
    fn a_run_is_gathered_only_when_its_host_bytes_are_one_unbroken_range() {
        // Uploads: the host end is the source. Pieces in any order, tiling [100, 400).
        let up = [r(200, 0, 100), r(100, 9000, 100), r(300, 5000, 100)];
        assert_eq!(dense_host_span(&up, true, 2), Some((100, 300)));
        // Too few regions for the threshold; values under 2 act as 2.
        assert_eq!(dense_host_span(&up, true, 4), None);
        assert_eq!(dense_host_span(&up[..1], true, 0), None);
        // A gap between the pieces: the range would hold bytes no copy tracked.
        assert_eq!(dense_host_span(&[r(0, 0, 100), r(101, 500, 100)], true, 2), None);
        // Overlapping reads are one range (their union).
        assert_eq!(dense_host_span(&[r(0, 0, 100), r(50, 500, 100)], true, 2), Some((0, 150)));
        // A region inside an earlier, longer one ends the union nowhere.
        assert_eq!(dense_host_span(&[r(100, 900, 50), r(0, 0, 300), r(300, 400, 10)], true, 2), Some((0, 310)));
        // Downloads: the host end is the destination; the sources may be anywhere.
        let down = [r(7000, 4096, 4096), r(0, 0, 4096), r(90_000, 8192, 4096)];
        assert_eq!(dense_host_span(&down, false, 2), Some((0, 3 * 4096)));
        assert_eq!(dense_host_span(&down, true, 2), None, "the sources are scattered");
        // A region past the largest gathered size keeps the run direct.
        let max = crate::OpenOptions::GATHER_REGION_MAX;
        assert_eq!(dense_host_span(&[r(0, 0, max), r(max, 0, 1)], true, 2), Some((0, max + 1)));
        assert_eq!(dense_host_span(&[r(0, 0, max + 1), r(max + 1, 0, 1)], true, 2), None);
    }
}
