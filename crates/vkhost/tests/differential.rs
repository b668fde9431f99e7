//! A seeded randomized differential test (written by an audit, 2026-12-03: ~11 000 cases ran
//! clean; it failed 11 of 200 cases with `wait_event`'s host wait removed, and nearly all with
//! the synchronous copies' settle removed). A plain xorshift generator builds small
//! programs over one device or two VkDevices of the same GPU: several streams, events across
//! streams and on the host, synchronous DeviceBuffer::write/read, raw and safe stream copies
//! from pinned blocks, registered ranges (odd offsets, shared pages, registered after pageable
//! use) and pageable memory, d2d copies, fills, the copy_sm / checksum / fill_u32 built-ins,
//! unregister / free while work is pending, HostRange broadcast/gather, flushes and
//! synchronizes, large (≥ 64 KiB, host offsets off 256 bytes) and tiny copies, bursts of small
//! copies between consecutive host pieces and scattered device slots (gathered through the
//! stream's scratch buffer on the second device, which also cuts copies into 4 KiB regions).
//!
//! The model applies every operation at issue time to byte arrays. The generator only emits an
//! operation once every earlier conflicting access (same bytes, one of them a write) is ordered
//! before it by a documented rule: stream order, `wait_event`, host waits (`synchronize`,
//! `Event::wait`), the settle of synchronous buffer calls, `unregister`'s wait for the uses of
//! its import. Otherwise it first inserts the ordering (an event + wait_event, or a
//! synchronize). So issue order is execution order for every conflict, and a byte with no
//! pending write must equal the model.
//!
//! `DIFF_CASES=n` (default 50), `DIFF_SEED=s` (replay one case, prints the program),
//! `DIFF_BASE=b` (first seed).

mod common;
use common::*;
use vkhost::kernel::checksum_cpu;
use vkhost::{Binding, Device, DeviceBuffer, Event, HostRange, QueueKind, Stream, host};

const ARENA: usize = 256 * 1024;
const VECN: usize = 160 * 1024;
const PIN: usize = 160 * 1024;
const DEV: usize = 192 * 1024;
const NBUF: usize = 2;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn chance(&mut self, pct: usize) -> bool {
        self.below(100) < pct
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Region {
    Arena,
    Vec,
    Pin(usize),
    /// A safe PinnedBuffer of device d (upload_pinned / download_pinned, Deref views).
    Safe(usize),
    Buf(usize, usize),
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Actor {
    Stream(usize),
    Host,
    /// A synchronous call on buffer (dev, i): settles that buffer's stream work.
    Settle(usize, usize),
}

#[derive(Clone, Debug)]
struct Acc {
    region: Region,
    lo: usize,
    hi: usize,
    stream: usize,
    seq: u64,
    write: bool,
    /// The registration (id) whose import this host access went through, when one covered it
    /// whole on the stream's device.
    via: Option<u64>,
    retired: bool,
}

struct Reg {
    id: u64,
    /// Arena, or Pin(p) registered on the other device.
    region: Region,
    a: usize,
    l: usize,
    devs: Vec<usize>,
    range: Option<HostRange<'static>>,
}

struct Case<'d> {
    devs: Vec<&'d Device>,
    rng: Rng,
    log: Vec<String>,
    streams: Vec<Stream>,
    sdev: Vec<usize>,
    scompute: Vec<bool>,
    seqs: Vec<u64>,
    /// vc[actor][stream]: stream's seq known complete/ordered before the actor's later work.
    vc: Vec<Vec<u64>>,
    host_vc: Vec<u64>,
    /// (stream, seq, event, the stream's clock at the record: transitively ordered work).
    events: Vec<(usize, u64, Event, Vec<u64>)>,
    accs: Vec<Acc>,
    regs: Vec<Reg>,
    next_reg: u64,
    arena: Pages,
    vecm: Vec<u8>,
    pins: Vec<std::ptr::NonNull<u8>>,
    safes: Vec<vkhost::PinnedBuffer>,
    m_safe: Vec<Vec<u8>>,
    bufs: Vec<Vec<DeviceBuffer>>,
    m_arena: Vec<u8>,
    m_vec: Vec<u8>,
    m_pin: Vec<Vec<u8>>,
    m_buf: Vec<Vec<Vec<u8>>>,
    fail: Option<String>,
    /// Whether orderings are taken as transitive (a wait on t's event also orders what t
    /// waited for before it): DIFF_TRANSITIVE=0 turns that off.
    transitive: bool,
    window: usize,
}

fn overlap(a: usize, b: usize, c: usize, d: usize) -> bool {
    a < d && c < b
}

impl<'d> Case<'d> {
    fn ptr(&mut self, r: Region) -> *mut u8 {
        match r {
            Region::Arena => self.arena.ptr,
            Region::Vec => self.vecm.as_mut_ptr(),
            Region::Pin(d) => self.pins[d].as_ptr(),
            Region::Safe(d) => self.safes[d].as_mut_ptr(),
            Region::Buf(..) => unreachable!(),
        }
    }
    fn model(&mut self, r: Region) -> &mut Vec<u8> {
        match r {
            Region::Arena => &mut self.m_arena,
            Region::Vec => &mut self.m_vec,
            Region::Pin(d) => &mut self.m_pin[d],
            Region::Safe(d) => &mut self.m_safe[d],
            Region::Buf(d, i) => &mut self.m_buf[d][i],
        }
    }
    fn rlen(r: Region) -> usize {
        match r {
            Region::Arena => ARENA,
            Region::Vec => VECN,
            Region::Pin(_) | Region::Safe(_) => PIN,
            Region::Buf(..) => DEV,
        }
    }

    fn retire(&mut self) {
        let hv = self.host_vc.clone();
        for a in &mut self.accs {
            if hv[a.stream] >= a.seq {
                a.retired = true;
            }
        }
        self.accs.retain(|a| !a.retired);
    }

    fn ordered(&self, a: &Acc, actor: Actor) -> bool {
        if a.retired || self.host_vc[a.stream] >= a.seq {
            return true;
        }
        match actor {
            Actor::Stream(s) => s == a.stream || self.vc[s][a.stream] >= a.seq,
            Actor::Host => false,
            Actor::Settle(d, i) => a.region == Region::Buf(d, i),
        }
    }

    /// Inserts orderings until every access conflicting with (region, lo..hi, write) is
    /// ordered before `actor`.
    fn order(&mut self, actor: Actor, region: Region, lo: usize, hi: usize, write: bool) {
        loop {
            let c = self
                .accs
                .iter()
                .find(|a| a.region == region && overlap(a.lo, a.hi, lo, hi) && (a.write || write) && !self.ordered(a, actor))
                .cloned();
            let Some(a) = c else { return };
            match actor {
                Actor::Stream(s) if self.sdev[s] == self.sdev[a.stream] && self.rng.chance(70) => {
                    let t = a.stream;
                    let ev = self.streams[t].record().unwrap();
                    self.log.push(format!("e{} = s{t}.record()", self.events.len()));
                    self.streams[s].wait_event(&ev).unwrap();
                    self.log.push(format!("s{s}.wait_event(e{})", self.events.len()));
                    let snap = self.snap(t);
                    self.merge_stream(s, &snap);
                    self.events.push((t, self.seqs[t], ev, snap));
                }
                _ => self.sync(a.stream),
            }
        }
    }

    /// Stream t's clock now: its own work, and what it waited for (transitively).
    fn snap(&self, t: usize) -> Vec<u64> {
        let mut v = self.vc[t].clone();
        v[t] = self.seqs[t];
        if self.transitive {
            v
        } else {
            let mut o = vec![0; v.len()];
            o[t] = v[t];
            o
        }
    }

    fn merge_stream(&mut self, s: usize, snap: &[u64]) {
        for (k, &x) in snap.iter().enumerate() {
            if k != s {
                self.vc[s][k] = self.vc[s][k].max(x);
            }
        }
    }

    fn merge_host(&mut self, snap: &[u64]) {
        for (k, &x) in snap.iter().enumerate() {
            self.host_vc[k] = self.host_vc[k].max(x);
        }
        self.retire();
    }

    fn sync(&mut self, t: usize) {
        self.log.push(format!("s{t}.synchronize()"));
        if let Err(e) = self.streams[t].synchronize() {
            self.failed(format!("synchronize: {e:?}"));
        }
        let snap = self.snap(t);
        self.merge_host(&snap);
    }

    /// Registrations are refused under VKHOST_IMPORT=never (documented): not a failure.
    fn refused_by_policy(&mut self, e: &vkhost::Error) -> bool {
        let never = matches!(std::env::var("VKHOST_IMPORT").as_deref(), Ok("never" | "off" | "0"));
        if never && matches!(e, vkhost::Error::Unsupported { .. }) {
            self.log.push("  -> refused (VKHOST_IMPORT=never)".into());
            return true;
        }
        false
    }

    fn failed(&mut self, m: String) {
        if self.fail.is_none() {
            self.fail = Some(m);
        }
    }

    fn via(&self, dev: usize, r: Region, lo: usize, hi: usize) -> Option<u64> {
        self.regs.iter().find(|g| g.region == r && g.devs.contains(&dev) && g.a <= lo && hi <= g.a + g.l).map(|g| g.id)
    }

    fn note(&mut self, s: usize, r: Region, lo: usize, hi: usize, write: bool) {
        let via = self.via(self.sdev[s], r, lo, hi);
        let seq = self.seqs[s];
        self.accs.push(Acc { region: r, lo, hi, stream: s, seq, write, via, retired: false });
    }

    fn host_region(&mut self, dev: usize, min: usize, max: usize, align: usize) -> (Region, usize, usize) {
        let r = match self.rng.below(10) {
            0..=4 => Region::Arena,
            5..=6 => Region::Vec,
            _ => Region::Pin(if self.rng.chance(60) { dev } else { self.rng.below(self.devs.len()) }),
        };
        let (o, l) = self.span(Self::rlen(r), min, max, align);
        (r, o, l)
    }

    /// An offset and a length inside `n` bytes: tiny, small or large (≥ 64 KiB).
    fn span(&mut self, n: usize, min: usize, max: usize, align: usize) -> (usize, usize) {
        // DIFF_WINDOW=w: every range within the first w bytes (more overlaps, more hazards).
        let n = n.min(self.window);
        let mut l = match self.rng.below(10) {
            0..=2 => 1 + self.rng.below(16),
            3..=7 => 1 + self.rng.below(6000),
            _ => 65536 + self.rng.below(40000),
        };
        l = l.clamp(min, max.min(n));
        l = (l / align).max(1) * align;
        let mut o = self.rng.below(n - l + 1);
        if self.rng.chance(30) {
            // Right after or at a registration's edge: shares its page.
            if let Some(g) = self.regs.get(self.rng.below(self.regs.len().max(1))) {
                o = (g.a + g.l).min(n - l);
            }
            o = o.min(n - l);
        }
        o = o / align * align;
        (o, l)
    }

    /// Part of device p's pinned block registered on the other device: that device's streams
    /// reach the block through their own import.
    /// An offset for `len` bytes in `n`, a multiple of `align`, within the window when it fits.
    fn below_w(&mut self, n: usize, len: usize, align: usize) -> usize {
        let n = n.min(self.window.max(len));
        self.rng.below((n - len) / align + 1) * align
    }
    fn doff(&mut self, len: usize) -> usize {
        self.below_w(DEV, len, 1)
    }
    fn doff4(&mut self, len: usize) -> usize {
        self.below_w(DEV, len, 4)
    }

    fn register_pin_elsewhere(&mut self) {
        let p = self.rng.below(2);
        let d = 1 - p;
        let a = self.rng.below(self.window.min(PIN) - 1);
        let big = self.rng.chance(30);
        let l = (1 + self.rng.below(if big { 100_000 } else { 10_000 })).min(PIN - a);
        // A raw block, or a safe PinnedBuffer's bytes: another device's import of them.
        let region = if self.rng.chance(50) { Region::Pin(p) } else { Region::Safe(p) };
        if self.regs.iter().any(|g| g.region == region && overlap(g.a, g.a + g.l, a, a + l)) {
            return;
        }
        let id = self.next_reg;
        self.next_reg += 1;
        self.log.push(format!("r{id} = register(d{d}, {region:?}[{a}..+{l}])"));
        let base = self.ptr(region);
        // SAFETY: inside the block, which is unregistered here before it is freed.
        match unsafe { host::register(self.devs[d], base.add(a), l) } {
            Ok(()) => self.regs.push(Reg { id, region, a, l, devs: vec![d], range: None }),
            Err(e) if self.refused_by_policy(&e) => {}
            Err(e) => self.failed(format!("register pinned elsewhere: {e:?}")),
        }
    }

    fn register_reg(&mut self, both: bool) {
        let big = self.rng.chance(20);
        let (a, l) = (self.rng.below(self.window.min(ARENA) - 1), 1 + self.rng.below(if big { 120_000 } else { 12_000 }));
        let a = if self.rng.chance(30) && !self.regs.is_empty() {
            let g = &self.regs[self.rng.below(self.regs.len())];
            (g.a + g.l).min(ARENA - 1)
        } else {
            a
        };
        let l = l.min(ARENA - a);
        let devs: Vec<usize> = if both { vec![0, 1] } else { vec![self.rng.below(self.devs.len())] };
        let clash = self
            .regs
            .iter()
            .any(|g| g.region == Region::Arena && g.devs.iter().any(|d| devs.contains(d)) && overlap(g.a, g.a + g.l, a, a + l));
        if clash {
            return;
        }
        let id = self.next_reg;
        self.next_reg += 1;
        if both {
            self.log.push(format!("r{id} = HostRange::register([d0,d1], arena[{a}..+{l}])"));
            // SAFETY: inside the arena, which outlives every registration of the case; the
            // model keeps conflicting host and device accesses ordered.
            let s = unsafe { std::slice::from_raw_parts_mut(self.arena.ptr.add(a), l) };
            match HostRange::register(&[self.devs[0], self.devs[1]], s) {
                Ok(r) => self.regs.push(Reg { id, region: Region::Arena, a, l, devs, range: Some(r) }),
                Err(e) if self.refused_by_policy(&e) => {}
                Err(e) => self.failed(format!("HostRange::register: {e:?}")),
            }
        } else {
            let d = devs[0];
            self.log.push(format!("r{id} = register(d{d}, arena[{a}..+{l}])"));
            // SAFETY: as above.
            match unsafe { host::register(self.devs[d], self.arena.ptr.add(a), l) } {
                Ok(()) => self.regs.push(Reg { id, region: Region::Arena, a, l, devs, range: None }),
                Err(e) if self.refused_by_policy(&e) => {}
                Err(e) => self.failed(format!("register: {e:?}")),
            }
        }
    }

    fn unregister(&mut self, i: usize) {
        let g = self.regs.remove(i);
        self.log.push(format!("unregister(r{})", g.id));
        let r = match g.range {
            Some(r) => r.unregister(),
            None => {
                let p = self.ptr(g.region);
                // SAFETY: `g.a` lies inside the region `p` starts (where it was registered).
                host::unregister(self.devs[g.devs[0]], unsafe { p.add(g.a) })
            }
        };
        if let Err(e) = r {
            self.failed(format!("unregister: {e:?}"));
        }
        // Documented: returns once no work can touch the bytes through the import.
        for a in &mut self.accs {
            if a.via == Some(g.id) {
                a.retired = true;
            }
        }
        self.retire();
    }

    /// Compares every byte without a pending write against the model.
    fn check(&mut self, what: &str) {
        self.retire();
        for d in 0..self.devs.len() {
            for i in 0..NBUF {
                let mut got = vec![0u8; DEV];
                if let Err(e) = self.bufs[d][i].read(0, &mut got) {
                    self.failed(format!("check read: {e:?}"));
                }
                // A synchronous read settles every stream work enqueued on the buffer: all
                // of its bytes must match, pending or not.
                self.cmp(what, Region::Buf(d, i), &got);
                for a in &mut self.accs {
                    if a.region == Region::Buf(d, i) {
                        a.retired = true;
                    }
                }
            }
        }
        let mut regions = vec![Region::Arena, Region::Vec];
        regions.extend((0..self.devs.len()).map(Region::Pin));
        regions.extend((0..self.devs.len()).map(Region::Safe));
        for r in regions {
            let n = Self::rlen(r);
            let p = self.ptr(r);
            // SAFETY: the region is live; the device may only read the bytes we compare.
            let got = unsafe { std::slice::from_raw_parts(p, n) }.to_vec();
            self.cmp(what, r, &got);
        }
    }

    fn cmp(&mut self, what: &str, r: Region, got: &[u8]) {
        if self.fail.is_some() {
            return;
        }
        let pending: Vec<(usize, usize)> = if let Region::Buf(..) = r {
            Vec::new()
        } else {
            self.accs.iter().filter(|a| a.region == r && a.write).map(|a| (a.lo, a.hi)).collect()
        };
        let want = self.model(r).clone();
        let mut bad = Vec::new();
        for i in 0..got.len() {
            if got[i] != want[i] && !pending.iter().any(|&(lo, hi)| lo <= i && i < hi) {
                bad.push(i);
            }
        }
        if let (Some(&first), Some(&last)) = (bad.first(), bad.last()) {
            let s = first.saturating_sub(0);
            let e = (s + 16).min(got.len());
            self.failed(format!(
                "{what}: {r:?} differs at {} bytes, first {first} last {last}; want[{s}..{e}]={:02x?} got={:02x?}",
                bad.len(),
                &want[s..e],
                &got[s..e]
            ));
        }
    }

    fn host_write(&mut self, r: Region, lo: usize, l: usize) {
        self.order(Actor::Host, r, lo, lo + l, true);
        let v = (self.rng.next() as u8) | 1;
        let data: Vec<u8> = (0..l).map(|i| v.wrapping_add((i as u8).wrapping_mul(7))).collect();
        self.model(r)[lo..lo + l].copy_from_slice(&data);
        let p = self.ptr(r);
        // SAFETY: in the region, every conflicting access ordered before.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p.add(lo), l) };
    }

    fn copy_model(&mut self, src: Region, so: usize, dst: Region, dof: usize, l: usize) {
        let tmp = self.model(src)[so..so + l].to_vec();
        self.model(dst)[dof..dof + l].copy_from_slice(&tmp);
    }

    fn step(&mut self) {
        let nd = self.devs.len();
        let ns = self.streams.len();
        let s = self.rng.below(ns);
        let d = self.sdev[s];
        let bi = self.rng.below(NBUF);
        match self.rng.below(100) {
            0..=13 => {
                if self.rng.chance(15) {
                    self.burst(s, true);
                    return;
                }
                // raw async h2d
                let (r, h, l) = self.host_region(d, 1, DEV, 1);
                let o = self.doff(l);
                self.raw_copy(s, true, r, h, l, bi, o, false);
            }
            14..=27 => {
                if self.rng.chance(15) {
                    self.burst(s, false);
                    return;
                }
                let (r, h, l) = self.host_region(d, 1, DEV, 1);
                let o = self.doff(l);
                self.raw_copy(s, false, r, h, l, bi, o, false);
            }
            28..=33 => {
                // Half on 4-byte offsets and lengths: on the second device (a `d2d_kernel_min`
                // of 4) a compute-capable stream runs those by the copy kernel.
                let a = if self.rng.chance(50) { 4 } else { 1 };
                let (so, l) = self.span(DEV, a, DEV / 2, a);
                let bj = self.rng.below(NBUF);
                let dof = self.below_w(DEV, l, a);
                if bi == bj && overlap(so, so + l, dof, dof + l) {
                    return;
                }
                self.order(Actor::Stream(s), Region::Buf(d, bi), so, so + l, false);
                self.order(Actor::Stream(s), Region::Buf(d, bj), dof, dof + l, true);
                self.seqs[s] += 1;
                self.log.push(format!("s{s}.copy_async(b{d}.{bi}@{so} -> b{d}.{bj}@{dof}, {l})"));
                if let Err(e) = self.streams[s].copy_async(&self.bufs[d][bi], so, &self.bufs[d][bj], dof, l) {
                    self.failed(format!("copy_async: {e:?}"));
                }
                self.note(s, Region::Buf(d, bi), so, so + l, false);
                self.note(s, Region::Buf(d, bj), dof, dof + l, true);
                self.copy_model(Region::Buf(d, bi), so, Region::Buf(d, bj), dof, l);
            }
            34..=37 => {
                let (o, l) = self.span(DEV, 4, DEV, 4);
                let v = self.rng.next() as u32;
                self.order(Actor::Stream(s), Region::Buf(d, bi), o, o + l, true);
                self.seqs[s] += 1;
                self.log.push(format!("s{s}.fill_async(b{d}.{bi}@{o}, {l}, {v:#x})"));
                if let Err(e) = self.streams[s].fill_async(&self.bufs[d][bi], o, l, v) {
                    self.failed(format!("fill_async: {e:?}"));
                }
                self.note(s, Region::Buf(d, bi), o, o + l, true);
                let m = self.model(Region::Buf(d, bi));
                for k in (o..o + l).step_by(4) {
                    m[k..k + 4].copy_from_slice(&v.to_le_bytes());
                }
            }
            38..=45 => self.kernel_op(s),
            46..=49 => self.safe_op(s),
            50..=55 => {
                // synchronous write from host memory
                let dv = self.rng.below(nd);
                let (r, h, l) = self.host_region(dv, 1, DEV, 1);
                let o = self.doff(l);
                self.order(Actor::Host, r, h, h + l, false);
                self.order(Actor::Settle(dv, bi), Region::Buf(dv, bi), o, o + l, true);
                self.log.push(format!("b{dv}.{bi}.write({o}, {r:?}[{h}..+{l}])"));
                let p = self.ptr(r);
                // SAFETY: the region is live and no pending work writes these bytes.
                let src = unsafe { std::slice::from_raw_parts(p.add(h), l) };
                if let Err(e) = self.bufs[dv][bi].write(o, src) {
                    self.failed(format!("write: {e:?}"));
                }
                self.copy_model(r, h, Region::Buf(dv, bi), o, l);
            }
            56..=61 => {
                let dv = self.rng.below(nd);
                let (r, h, l) = self.host_region(dv, 1, DEV, 1);
                let o = self.doff(l);
                self.order(Actor::Host, r, h, h + l, true);
                self.order(Actor::Settle(dv, bi), Region::Buf(dv, bi), o, o + l, false);
                self.log.push(format!("b{dv}.{bi}.read({o}, {r:?}[{h}..+{l}])"));
                let p = self.ptr(r);
                // SAFETY: the region is live and no pending work touches these bytes.
                let dst = unsafe { std::slice::from_raw_parts_mut(p.add(h), l) };
                if let Err(e) = self.bufs[dv][bi].read(o, dst) {
                    self.failed(format!("read: {e:?}"));
                }
                self.copy_model(Region::Buf(dv, bi), o, r, h, l);
            }
            62..=64 => {
                // safe upload: host bytes read on return
                let (r, h, l) = self.host_region(d, 1, DEV, 1);
                let o = self.doff(l);
                self.order(Actor::Host, r, h, h + l, false);
                self.order(Actor::Stream(s), r, h, h + l, false);
                self.order(Actor::Stream(s), Region::Buf(d, bi), o, o + l, true);
                self.seqs[s] += 1;
                self.log.push(format!("s{s}.upload({r:?}[{h}..+{l}] -> b{d}.{bi}@{o})"));
                let p = self.ptr(r);
                // SAFETY: live region, no pending write on it.
                let src = unsafe { std::slice::from_raw_parts(p.add(h), l) };
                match self.streams[s].upload(src, &self.bufs[d][bi], o) {
                    Ok(p) => std::mem::forget(p),
                    Err(e) => self.failed(format!("upload: {e:?}")),
                }
                self.note(s, Region::Buf(d, bi), o, o + l, true);
                self.copy_model(r, h, Region::Buf(d, bi), o, l);
            }
            65..=67 => {
                // safe download: in place on return
                let (r, h, l) = self.host_region(d, 1, DEV, 1);
                let o = self.doff(l);
                self.order(Actor::Host, r, h, h + l, true);
                self.order(Actor::Stream(s), Region::Buf(d, bi), o, o + l, false);
                self.seqs[s] += 1;
                self.log.push(format!("s{s}.download(b{d}.{bi}@{o} -> {r:?}[{h}..+{l}])"));
                let p = self.ptr(r);
                // SAFETY: live region, no pending access on it.
                let dst = unsafe { std::slice::from_raw_parts_mut(p.add(h), l) };
                if let Err(e) = self.streams[s].download(&self.bufs[d][bi], o, dst).and_then(|p| p.wait()) {
                    self.failed(format!("download: {e:?}"));
                }
                self.note(s, Region::Buf(d, bi), o, o + l, false);
                self.copy_model(Region::Buf(d, bi), o, r, h, l);
            }
            68..=71 => {
                if nd == 2 && self.rng.chance(45) {
                    self.register_pin_elsewhere();
                } else {
                    let both = nd == 2 && self.rng.chance(40);
                    self.register_reg(both)
                }
            }
            72..=74 if !self.regs.is_empty() => {
                let i = self.rng.below(self.regs.len());
                self.unregister(i);
            }
            72..=74 => {}
            75..=77 if nd == 2 => {
                // broadcast from host memory into both devices' buffers
                let (r, h, l) = self.host_region(0, 1, DEV, 1);
                let (b0, b1) = (self.rng.below(NBUF), self.rng.below(NBUF));
                let (o0, o1) = (self.doff(l), self.doff(l));
                self.order(Actor::Host, r, h, h + l, false);
                self.order(Actor::Settle(0, b0), Region::Buf(0, b0), o0, o0 + l, true);
                self.order(Actor::Settle(1, b1), Region::Buf(1, b1), o1, o1 + l, true);
                self.log.push(format!("broadcast({r:?}[{h}..+{l}] -> b0.{b0}@{o0}, b1.{b1}@{o1})"));
                let p = self.ptr(r);
                // SAFETY: live region, no pending write on it.
                let src = unsafe { std::slice::from_raw_parts(p.add(h), l) };
                if let Err(e) = vkhost::broadcast(src, &[(&self.bufs[0][b0], o0), (&self.bufs[1][b1], o1)]) {
                    self.failed(format!("broadcast: {e:?}"));
                }
                self.copy_model(r, h, Region::Buf(0, b0), o0, l);
                self.copy_model(r, h, Region::Buf(1, b1), o1, l);
            }
            78..=79 if nd == 2 => {
                let (r, h, l) = self.host_region(0, 2, DEV, 1);
                let (b0, b1) = (self.rng.below(NBUF), self.rng.below(NBUF));
                let each = l / 2;
                let (o0, o1) = (self.rng.below(DEV - each + 1), self.rng.below(DEV - (l - each) + 1));
                self.order(Actor::Host, r, h, h + l, true);
                self.order(Actor::Settle(0, b0), Region::Buf(0, b0), o0, o0 + each, false);
                self.order(Actor::Settle(1, b1), Region::Buf(1, b1), o1, o1 + l - each, false);
                self.log.push(format!("gather(b0.{b0}@{o0}, b1.{b1}@{o1} -> {r:?}[{h}..+{l}])"));
                let p = self.ptr(r);
                // SAFETY: live region, no pending access on it.
                let dst = unsafe { std::slice::from_raw_parts_mut(p.add(h), l) };
                if let Err(e) = vkhost::gather(&[(&self.bufs[0][b0], o0), (&self.bufs[1][b1], o1)], dst) {
                    self.failed(format!("gather: {e:?}"));
                }
                self.copy_model(Region::Buf(0, b0), o0, r, h, each);
                self.copy_model(Region::Buf(1, b1), o1, r, h + each, l - each);
            }
            80..=84 => {
                self.log.push(format!("e{} = s{s}.record()", self.events.len()));
                match self.streams[s].record() {
                    Ok(ev) => {
                        let snap = self.snap(s);
                        self.events.push((s, self.seqs[s], ev, snap))
                    }
                    Err(e) => self.failed(format!("record: {e:?}")),
                }
            }
            85..=88 => {
                if self.events.is_empty() {
                    return;
                }
                let k = self.rng.below(self.events.len());
                let (t, snap) = (self.events[k].0, self.events[k].3.clone());
                if self.rng.chance(70) {
                    if self.sdev[t] != d {
                        return;
                    }
                    self.log.push(format!("s{s}.wait_event(e{k})"));
                    if let Err(e) = self.streams[s].wait_event(&self.events[k].2) {
                        self.failed(format!("wait_event: {e:?}"));
                    }
                    self.merge_stream(s, &snap);
                } else {
                    self.log.push(format!("e{k}.wait()"));
                    if let Err(e) = self.events[k].2.wait() {
                        self.failed(format!("event wait: {e:?}"));
                    }
                    self.merge_host(&snap);
                    if self.rng.chance(50) {
                        self.check(&format!("after e{k}.wait()"));
                    }
                }
            }
            89..=90 => {
                self.sync(s);
                if self.rng.chance(50) {
                    self.check(&format!("after s{s}.synchronize()"));
                }
            }
            92 => {
                // Poll an event until done: is_done submits and reaps (completing copy-outs).
                if self.events.is_empty() {
                    return;
                }
                let k = self.rng.below(self.events.len());
                self.log.push(format!("while !e{k}.is_done() {{}}"));
                let t0 = std::time::Instant::now();
                loop {
                    match self.events[k].2.is_done() {
                        Ok(true) => break,
                        Ok(false) if t0.elapsed().as_secs() < 60 => std::thread::yield_now(),
                        r => {
                            self.failed(format!("is_done: {r:?}"));
                            return;
                        }
                    }
                }
                let snap = self.events[k].3.clone();
                self.merge_host(&snap);
                if self.rng.chance(50) {
                    self.check(&format!("after e{k}.is_done()"));
                }
            }
            93 => {
                // Drop the stream (documented to synchronize first) and open a fresh one.
                self.log.push(format!("drop(s{s}); s{s} = new stream"));
                let kind = if self.scompute[s] { QueueKind::Compute } else { QueueKind::Copy };
                let fresh = self.devs[d].stream_on(kind).unwrap();
                let old = std::mem::replace(&mut self.streams[s], fresh);
                drop(old);
                let snap = self.snap(s);
                self.merge_host(&snap);
                // The new stream's ops continue the numbering; old events keep theirs.
                if self.rng.chance(50) {
                    self.check(&format!("after drop(s{s})"));
                }
            }
            91 => {
                self.log.push(format!("s{s}.flush()"));
                if let Err(e) = self.streams[s].flush() {
                    self.failed(format!("flush: {e:?}"));
                }
            }
            94..=95 => {
                let (r, h, l) = self.host_region(d, 1, 20000, 1);
                if let Region::Pin(_) | Region::Arena | Region::Vec = r {
                    self.log.push(format!("host write {r:?}[{h}..+{l}]"));
                    self.host_write(r, h, l);
                }
            }
            96 => {
                // free a pinned block while work may be pending, then a fresh one
                let pd = self.rng.below(nd);
                let r = Region::Pin(pd);
                // Another device's stream reaches the block as pageable memory: the raw
                // contract wants it valid until that work completes.
                let others: Vec<usize> = self
                    .accs
                    .iter()
                    .filter(|a| a.region == r && self.sdev[a.stream] != pd && !self.ordered(a, Actor::Host))
                    .map(|a| a.stream)
                    .collect();
                for t in others {
                    self.sync(t);
                }
                while let Some(i) = self.regs.iter().position(|g| g.region == r) {
                    self.unregister(i);
                }
                self.log.push(format!("free_pinned(p{pd}) + alloc_pinned(d{pd})"));
                if let Err(e) = host::free_pinned(self.devs[pd], self.pins[pd]) {
                    self.failed(format!("free_pinned: {e:?}"));
                }
                self.accs.retain(|a| a.region != r);
                self.pins[pd] = host::alloc_pinned(self.devs[pd], PIN).unwrap();
                let init = pattern(PIN, self.rng.next() as u8);
                // SAFETY: a fresh block of PIN bytes.
                unsafe { std::ptr::copy_nonoverlapping(init.as_ptr(), self.pins[pd].as_ptr(), PIN) };
                self.m_pin[pd] = init;
            }
            97..=99 => self.check("check"),
            _ => {}
        }
    }

    /// A binding for a kernel op on stream s: a device range, or a raw host range that one
    /// registration or this device's pinned block covers. (region, offset, len).
    fn kbind(&mut self, s: usize, len: usize) -> (Region, usize) {
        let d = self.sdev[s];
        match self.rng.below(5) {
            0 => {
                let o = self.below_w(PIN, len, 4);
                (Region::Pin(d), o)
            }
            1 | 2 => {
                let cands: Vec<(Region, usize, usize)> =
                    self.regs.iter().filter(|g| g.devs.contains(&d)).map(|g| (g.region, g.a, g.l)).collect();
                for (r, a, l) in cands {
                    let first = a.div_ceil(4) * 4;
                    if first + len <= a + l {
                        let o = first + self.rng.below((a + l - first - len) / 4 + 1) * 4;
                        return (r, o);
                    }
                }
                (Region::Buf(d, self.rng.below(NBUF)), self.doff4(len))
            }
            _ => (Region::Buf(d, self.rng.below(NBUF)), self.doff4(len)),
        }
    }

    fn binding(&mut self, r: Region, o: usize, l: usize) -> Binding<'static> {
        match r {
            Region::Buf(d, i) => {
                // SAFETY: every caller passes the Binding to one stream call in the same op, which
                // consumes it, and `self.bufs` is neither moved nor dropped during that call (the
                // 'static only frees `self` for the call's `&mut`); a launch that outlives the call
                // holds its own owner of the buffer, not this reference.
                let b: &'static DeviceBuffer = unsafe { &*(&self.bufs[d][i] as *const DeviceBuffer) };
                Binding::Device(b, o, l)
            }
            _ => {
                let p = self.ptr(r);
                // SAFETY: registered/pinned bytes that stay valid until the launch completes
                // (unregister and free wait / keep the block); the model orders host access.
                unsafe { Binding::host(p.add(o), l) }
            }
        }
    }

    /// A burst of 2-41 small raw async copies on stream `s` between consecutive pieces of one
    /// host range (mostly the stream's device's pinned block) and scattered slots of one device
    /// buffer, all uploads or all downloads: the runs a stream gathers through its scratch
    /// buffer (`OpenOptions::gather_regions`; the second device gathers from 2 copies on).
    fn burst(&mut self, s: usize, up: bool) {
        let d = self.sdev[s];
        let bi = self.rng.below(NBUF);
        let r = if self.rng.chance(70) { Region::Pin(d) } else { Region::Arena };
        let k = 2 + self.rng.below(40);
        let psz = match self.rng.below(3) {
            0 => 1 + self.rng.below(64),
            1 => 4096,
            _ => 1 + self.rng.below(3000),
        };
        let total = k * psz;
        if total > Self::rlen(r) || total > DEV {
            return;
        }
        let h = self.below_w(Self::rlen(r), total, 1);
        let base = self.below_w(DEV, total, 1);
        let mut slots: Vec<usize> = (0..k).collect();
        for i in (1..k).rev() {
            let j = self.rng.below(i + 1);
            slots.swap(i, j);
        }
        for (i, &slot) in slots.iter().enumerate() {
            self.raw_copy(s, up, r, h + i * psz, psz, bi, base + slot * psz, true);
        }
    }

    /// One raw async copy on stream `s` between host bytes `r[h..h+l]` and bytes `o..o+l` of
    /// buffer `bi` of the stream's device (`up`: to the device), after the orderings it needs;
    /// noted as pending and applied to the model. `burst` marks it in the log and errors.
    #[allow(clippy::too_many_arguments)]
    fn raw_copy(&mut self, s: usize, up: bool, r: Region, h: usize, l: usize, bi: usize, o: usize, burst: bool) {
        let d = self.sdev[s];
        let buf = Region::Buf(d, bi);
        let (tag, what) = if burst { (" (burst)", "burst ") } else { ("", "") };
        let p = self.ptr(r);
        if up {
            self.order(Actor::Stream(s), r, h, h + l, false);
            self.order(Actor::Stream(s), buf, o, o + l, true);
            self.seqs[s] += 1;
            self.log.push(format!("s{s}.copy_to_device_async({r:?}[{h}..+{l}] -> b{d}.{bi}@{o}){tag}"));
            // SAFETY: model-ordered; the region outlives the work.
            if let Err(e) = unsafe { self.streams[s].copy_to_device_async(p.add(h), l, &self.bufs[d][bi], o) } {
                self.failed(format!("{what}h2d: {e:?}"));
            }
            self.note(s, r, h, h + l, false);
            self.note(s, buf, o, o + l, true);
            self.copy_model(r, h, buf, o, l);
        } else {
            self.order(Actor::Stream(s), buf, o, o + l, false);
            self.order(Actor::Stream(s), r, h, h + l, true);
            self.seqs[s] += 1;
            self.log.push(format!("s{s}.copy_to_host_async(b{d}.{bi}@{o} -> {r:?}[{h}..+{l}]){tag}"));
            // SAFETY: as above.
            if let Err(e) = unsafe { self.streams[s].copy_to_host_async(&self.bufs[d][bi], o, p.add(h), l) } {
                self.failed(format!("{what}d2h: {e:?}"));
            }
            self.note(s, buf, o, o + l, false);
            self.note(s, r, h, h + l, true);
            self.copy_model(buf, o, r, h, l);
        }
    }

    /// The safe PinnedBuffer API: async upload_pinned / download_pinned with the guard leaked
    /// (documented sound: the block's Deref waits for pending device writes, DerefMut for any
    /// access), Deref reads and DerefMut writes, which must see the documented bytes.
    fn safe_op(&mut self, s: usize) {
        let d = self.sdev[s];
        let bi = self.rng.below(NBUF);
        let pd = if self.rng.chance(75) { d } else { self.rng.below(self.devs.len()) };
        let r = Region::Safe(pd);
        let (h, l) = self.span(PIN, 1, DEV, 1);
        let o = self.doff(l);
        if pd != d {
            // Another device's block: the library waits for the block's own device's work
            // (settle_foreign) and completes the copy before returning; work of this stream's
            // device through its own import of the bytes is the caller's to order.
            let mine: Vec<usize> = self
                .accs
                .iter()
                .filter(|a| a.region == r && overlap(a.lo, a.hi, h, h + l) && self.sdev[a.stream] == d && !self.ordered(a, Actor::Host))
                .map(|a| a.stream)
                .collect();
            for t in mine {
                self.sync(t);
            }
        }
        match self.rng.below(4) {
            0 => {
                // Another device's block: documented staged before the call returns, after
                // the block's own device's pending writes (as its Deref): no ordering added.
                if pd == d {
                    self.order(Actor::Stream(s), r, h, h + l, false);
                }
                self.order(Actor::Stream(s), Region::Buf(d, bi), o, o + l, true);
                self.seqs[s] += 1;
                self.log.push(format!("forget(s{s}.upload_pinned(safe{pd}, {h}..{}, b{d}.{bi}@{o}))", h + l));
                let r2 = self.streams[s].upload_pinned(&self.safes[pd], h..h + l, &self.bufs[d][bi], o).map(std::mem::forget);
                if let Err(e) = r2 {
                    self.failed(format!("upload_pinned: {e:?}"));
                }
                if pd == d {
                    self.note(s, r, h, h + l, false);
                }
                self.note(s, Region::Buf(d, bi), o, o + l, true);
                self.copy_model(r, h, Region::Buf(d, bi), o, l);
            }
            1 => {
                self.order(Actor::Stream(s), Region::Buf(d, bi), o, o + l, false);
                if pd == d {
                    self.order(Actor::Stream(s), r, h, h + l, true);
                }
                self.seqs[s] += 1;
                self.log.push(format!("forget(s{s}.download_pinned(b{d}.{bi}@{o}, safe{pd}, {h}..{}))", h + l));
                let r2 = self.streams[s].download_pinned(&self.bufs[d][bi], o, &mut self.safes[pd], h..h + l).map(std::mem::forget);
                if let Err(e) = r2 {
                    self.failed(format!("download_pinned: {e:?}"));
                }
                self.note(s, Region::Buf(d, bi), o, o + l, false);
                if pd == d {
                    self.note(s, r, h, h + l, true);
                }
                self.copy_model(Region::Buf(d, bi), o, r, h, l);
            }
            2 => {
                // Deref: waits for the device's pending writes to the block: every byte known.
                self.log.push(format!("check safe{pd}[..] (Deref)"));
                let got = self.safes[pd][..].to_vec();
                let want = self.m_safe[pd].clone();
                // Writes of another device's stream through its own import of the bytes are
                // not the block's device's: Deref does not wait for them (raw API's contract).
                let foreign: Vec<(usize, usize)> = self
                    .accs
                    .iter()
                    .filter(|a| a.region == r && a.write && self.sdev[a.stream] != pd && !self.ordered(a, Actor::Host))
                    .map(|a| (a.lo, a.hi))
                    .collect();
                if let Some(i) = (0..PIN).find(|&i| got[i] != want[i] && !foreign.iter().any(|&(lo, hi)| lo <= i && i < hi)) {
                    let e = (i + 16).min(PIN);
                    self.failed(format!("Deref of safe{pd} differs at {i}: want {:02x?} got {:02x?}", &want[i..e], &got[i..e]));
                }
                let sdev = self.sdev.clone();
                for a in &mut self.accs {
                    if a.region == r && a.write && sdev[a.stream] == pd {
                        a.retired = true;
                    }
                }
                self.retire();
            }
            _ => {
                // DerefMut: waits for any device access to the block.
                // Another device's work through its own import: the host orders it (raw API).
                let others: Vec<usize> = self
                    .accs
                    .iter()
                    .filter(|a| {
                        a.region == r && overlap(a.lo, a.hi, h, h + l) && self.sdev[a.stream] != pd && !self.ordered(a, Actor::Host)
                    })
                    .map(|a| a.stream)
                    .collect();
                for t in others {
                    self.sync(t);
                }
                self.log.push(format!("safe{pd}[{h}..+{l}] = .. (DerefMut)"));
                let v = (self.rng.next() as u8) | 1;
                let data: Vec<u8> = (0..l).map(|i| v.wrapping_add((i as u8).wrapping_mul(13))).collect();
                self.safes[pd][h..h + l].copy_from_slice(&data);
                self.m_safe[pd][h..h + l].copy_from_slice(&data);
                let sdev = self.sdev.clone();
                self.accs.retain(|a| !(a.region == r && sdev[a.stream] == pd));
            }
        }
    }

    fn kernel_op(&mut self, s: usize) {
        if !self.scompute[s] {
            return;
        }
        let l = match self.rng.below(3) {
            0 => 4 * (1 + self.rng.below(8)),
            1 => 4 * (1 + self.rng.below(1500)),
            _ => 4 * (16384 + self.rng.below(8000)),
        };
        match self.rng.below(3) {
            0 => {
                let (r, o) = self.kbind(s, l);
                let v = self.rng.next() as u32;
                self.order(Actor::Stream(s), r, o, o + l, true);
                self.seqs[s] += 1;
                self.log.push(format!("s{s}.fill_u32({r:?}[{o}..+{l}], {v:#x})"));
                let b = self.binding(r, o, l);
                if let Err(e) = self.streams[s].fill_u32(b, v) {
                    self.failed(format!("fill_u32: {e:?}"));
                }
                self.note(s, r, o, o + l, true);
                let m = self.model(r);
                for k in (o..o + l).step_by(4) {
                    m[k..k + 4].copy_from_slice(&v.to_le_bytes());
                }
            }
            1 => {
                let (rs, so) = self.kbind(s, l);
                let (rd, dof) = self.kbind(s, l);
                if rs == rd && overlap(so, so + l, dof, dof + l) {
                    return;
                }
                self.order(Actor::Stream(s), rs, so, so + l, false);
                self.order(Actor::Stream(s), rd, dof, dof + l, true);
                self.seqs[s] += 1;
                self.log.push(format!("s{s}.copy_sm({rs:?}[{so}..+{l}] -> {rd:?}[{dof}])"));
                let (bs, bd) = (self.binding(rs, so, l), self.binding(rd, dof, l));
                if let Err(e) = self.streams[s].copy_sm(bs, bd) {
                    self.failed(format!("copy_sm: {e:?}"));
                }
                self.note(s, rs, so, so + l, false);
                self.note(s, rd, dof, dof + l, true);
                self.copy_model(rs, so, rd, dof, l);
            }
            _ => {
                let (rs, so) = self.kbind(s, l);
                let (rd, dof) = self.kbind(s, 8);
                if rs == rd && overlap(so, so + l, dof, dof + 8) {
                    return;
                }
                self.order(Actor::Stream(s), rs, so, so + l, false);
                self.order(Actor::Stream(s), rd, dof, dof + 8, true);
                self.seqs[s] += 1;
                self.log.push(format!("s{s}.checksum_into({rs:?}[{so}..+{l}] -> {rd:?}[{dof}..+8])"));
                let (bs, bd) = (self.binding(rs, so, l), self.binding(rd, dof, 8));
                match self.streams[s].checksum_into(bs, bd) {
                    Ok(()) => {}
                    // With a registration or pinned block made of several imports
                    // (VKHOST_IMPORT_PIECE), an 8-byte result that straddles two imports is
                    // refused (documented on `checksum_into`): a refused call writes nothing, so
                    // the model stays as it is and later checks verify that.
                    Err(vkhost::Error::NotRegistered)
                        if rd != Region::Buf(self.sdev[s], 0)
                            && rd != Region::Buf(self.sdev[s], 1)
                            && std::env::var("VKHOST_IMPORT_PIECE").is_ok() =>
                    {
                        self.log.push("  -> NotRegistered (result straddles two imports)".into());
                        return;
                    }
                    Err(e) => self.failed(format!("checksum_into: {e:?}")),
                }
                self.note(s, rs, so, so + l, false);
                self.note(s, rd, dof, dof + 8, true);
                let sum = checksum_cpu(&self.model(rs)[so..so + l]);
                self.model(rd)[dof..dof + 8].copy_from_slice(&sum.to_le_bytes());
            }
        }
    }
}

fn run_case(devs: &[&Device], seed: u64, verbose: bool) -> Result<(), String> {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    for _ in 0..4 {
        rng.next();
    }
    let two = devs.len() == 2 && rng.chance(50);
    let devs: Vec<&Device> = if two { devs.to_vec() } else { vec![devs[0]] };
    let nd = devs.len();
    let errors_before: Vec<u64> = devs.iter().map(|d| d.validation_errors()).collect();
    let ns = 2 + rng.below(3);
    let mut streams = Vec::new();
    let mut sdev = Vec::new();
    let mut scompute = Vec::new();
    for i in 0..ns {
        let d = if nd == 2 && i % 2 == 1 { 1 } else { 0 };
        let compute = i == 0 || rng.chance(70);
        let st = if compute { devs[d].stream_on(QueueKind::Compute) } else { devs[d].stream() }.unwrap();
        streams.push(st);
        sdev.push(d);
        scompute.push(compute);
    }
    let mut arena = Pages::new(ARENA);
    let m_arena = pattern(ARENA, rng.next() as u8);
    arena.slice().copy_from_slice(&m_arena);
    let m_vec = pattern(VECN, rng.next() as u8);
    let mut pins = Vec::new();
    let mut m_pin = Vec::new();
    let mut safes = Vec::new();
    let mut m_safe = Vec::new();
    let mut bufs = Vec::new();
    let mut m_buf = Vec::new();
    for d in &devs {
        let p = host::alloc_pinned(d, PIN).unwrap();
        let init = pattern(PIN, rng.next() as u8);
        // SAFETY: fresh block.
        unsafe { std::ptr::copy_nonoverlapping(init.as_ptr(), p.as_ptr(), PIN) };
        pins.push(p);
        m_pin.push(init);
        let mut sb = vkhost::PinnedBuffer::new(d, PIN).unwrap();
        let init = pattern(PIN, rng.next() as u8);
        sb.copy_from_slice(&init);
        safes.push(sb);
        m_safe.push(init);
        let mut bs = Vec::new();
        let mut ms = Vec::new();
        for _ in 0..NBUF {
            let b = d.alloc_buffer(DEV).unwrap();
            let init = pattern(DEV, rng.next() as u8);
            b.write(0, &init).unwrap();
            bs.push(b);
            ms.push(init);
        }
        bufs.push(bs);
        m_buf.push(ms);
    }
    let mut c = Case {
        devs: devs.clone(),
        rng,
        log: vec![format!(
            "seed {seed}: {nd} device(s), streams {:?} (device, compute, queue)",
            sdev.iter().zip(&scompute).zip(&streams).map(|((d, c), s)| (d, c, s.queue().ok())).collect::<Vec<_>>()
        )],
        streams,
        sdev,
        scompute,
        seqs: vec![0; ns],
        vc: vec![vec![0; ns]; ns],
        host_vc: vec![0; ns],
        events: Vec::new(),
        accs: Vec::new(),
        regs: Vec::new(),
        next_reg: 0,
        arena,
        vecm: m_vec.clone(),
        pins,
        safes,
        m_safe,
        bufs,
        m_arena,
        m_vec,
        m_pin,
        m_buf,
        fail: None,
        transitive: std::env::var("DIFF_TRANSITIVE").as_deref() != Ok("0"),
        window: std::env::var("DIFF_WINDOW").ok().and_then(|v| v.parse().ok()).unwrap_or(usize::MAX),
    };
    let maxops: usize = std::env::var("DIFF_OPS").ok().and_then(|v| v.parse().ok()).unwrap_or(60);
    let nops = 20 + c.rng.below(maxops.saturating_sub(20).max(1));
    for _ in 0..nops {
        c.step();
        if c.fail.is_some() {
            break;
        }
    }
    if c.fail.is_none() {
        for t in 0..ns {
            c.sync(t);
        }
        c.check("final");
    }
    while !c.regs.is_empty() {
        c.unregister(0);
    }
    c.events.clear();
    for (d, p) in c.pins.iter().enumerate() {
        host::free_pinned(devs[d], *p).unwrap();
    }
    let streams = std::mem::take(&mut c.streams);
    drop(streams);
    if c.fail.is_none() {
        for (i, d) in devs.iter().enumerate() {
            if d.validation_errors() != errors_before[i] {
                c.failed(format!("validation errors on d{i}: {:?}", d.last_validation_error()));
            }
        }
    }
    if verbose || c.fail.is_some() || std::env::var("DIFF_VERBOSE").is_ok() {
        eprintln!("{}", c.log.join("\n"));
    }
    match c.fail {
        Some(f) => Err(format!("seed {seed}: {f}")),
        None => Ok(()),
    }
}

#[test]
fn random_programs_match_the_model() {
    // DIFF_BAR=on: small synchronous writes are CPU stores into mapped device memory (lavapipe's
    // memory is all host-visible); DIFF_BAR=assist: and larger ones shared with the pool.
    let mut o = opts();
    match std::env::var("DIFF_BAR").as_deref() {
        Ok("on") => o.bar_writes = vkhost::BarWrites::On,
        Ok("assist") => {
            o.bar_writes = vkhost::BarWrites::On;
            o.bar_assist = vkhost::BarAssist::Always;
        }
        _ => {}
    }
    let d0 = device_with(o.clone()).expect("device");
    // The second device runs every device-to-device stream copy it can by the copy kernel
    // (`OpenOptions::d2d_kernel_min`), the first by vkCmdCopyBuffer (lavapipe's default); it
    // also takes the GPUs' routes for small and large direct copies: runs of 2 or more
    // gathered through a stream's scratch buffer (`gather_regions`, on by default on GPUs) and
    // regions cut at 4 KiB (`copy_piece`).
    let d1 = Checked(
        Device::open_with(
            d0.info().index,
            &vkhost::OpenOptions { d2d_kernel_min: Some(4), gather_regions: Some(2), copy_piece: Some(4096), ..o.clone() },
        )
        .expect("second device"),
    );
    let devs = [&d0.0, &d1.0];
    if let Ok(s) = std::env::var("DIFF_SEED") {
        let s: u64 = s.parse().unwrap();
        run_case(&devs, s, true).unwrap();
        return;
    }
    let n: u64 = std::env::var("DIFF_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(50);
    let base: u64 = std::env::var("DIFF_BASE").ok().and_then(|c| c.parse().ok()).unwrap_or(1);
    let mut fails = Vec::new();
    let t0 = std::time::Instant::now();
    for seed in base..base + n {
        if let Err(e) = run_case(&devs, seed, false) {
            eprintln!("FAIL {e}");
            fails.push(e);
        }
    }
    let gathered = host::device_stats(&d1.0).gathered_bytes;
    eprintln!("{} cases, {} failed, {:?}; the second device gathered {gathered} bytes", n, fails.len(), t0.elapsed());
    assert!(fails.is_empty(), "{} of {n} cases failed:\n{}", fails.len(), fails.join("\n"));
    // The bursts exist to reach the gathered runs: over a few dozen cases some must gather.
    assert!(n < 20 || gathered > 0, "{n} cases and nothing went through a scratch buffer: the bursts no longer gather");
}

/// `checksum_into`'s 8 result bytes are one binding: host result bytes that straddle two imports
/// of one pinned block are refused with `NotRegistered` (documented), and nothing is written.
#[test]
fn checksum_result_across_two_imports_of_one_block_is_refused() {
    let o = vkhost::OpenOptions { max_import_piece: Some(4096), ..opts() };
    let d = device_with(o).expect("device");
    let stream = d.stream_on(QueueKind::Compute).unwrap();
    let src = d.alloc_buffer(4096).unwrap();
    src.write(0, &[7u8; 4096]).unwrap();
    let block = host::alloc_pinned(&d, 3 * 4096).unwrap();
    // SAFETY: the block is live and 12 KiB; nothing else touches it until it is freed.
    unsafe { std::ptr::write_bytes(block.as_ptr(), 0xEE, 3 * 4096) };
    // SAFETY: 8 bytes inside the live block, which nothing else touches until synchronize.
    let out = unsafe { Binding::host(block.as_ptr().add(4096 - 4), 8) };
    let r = stream.checksum_into(Binding::Device(&src, 0, 4096), out);
    stream.synchronize().unwrap();
    let mut got = [0u8; 8];
    // SAFETY: the stream is synchronized; the block is live.
    unsafe { std::ptr::copy_nonoverlapping(block.as_ptr().add(4096 - 4), got.as_mut_ptr(), 8) };
    host::free_pinned(&d, block).unwrap();
    assert_eq!(r, Err(vkhost::Error::NotRegistered));
    assert_eq!(got, [0xEE; 8], "a refused call writes nothing");
}
