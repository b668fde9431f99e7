//! Model test: random registrations, pinned blocks, ranges and directions, synchronous and on
//! a stream, against byte-array models of host and device memory. ≥ 500 cases on lavapipe.

mod common;
use common::*;
use proptest::prelude::*;
use vkhost::host::{self, entries_of};
use vkhost::{CopyPath, Device, PinnedBuffer};

const ARENA: usize = 8 * 4096;
const DEV: usize = 32 * 1024;
const PIN: usize = 16 * 1024;

#[derive(Debug, Clone)]
enum Op {
    Register(usize, usize),
    Unregister(usize),
    /// (from pinned?, host offset, len, device offset)
    H2d(bool, usize, usize, usize),
    D2h(bool, usize, usize, usize),
    H2dAsync(bool, usize, usize, usize),
    D2hAsync(bool, usize, usize, usize),
    Sync,
}

fn op() -> impl Strategy<Value = Op> {
    let copy = (any::<bool>(), 0..ARENA, 1..9000usize, 0..DEV);
    prop_oneof![
        2 => (0..ARENA, 1..10_000usize).prop_map(|(a, l)| Op::Register(a, l)),
        1 => (0..8usize).prop_map(Op::Unregister),
        3 => copy.clone().prop_map(|(p, h, l, d)| Op::H2d(p, h, l, d)),
        3 => copy.clone().prop_map(|(p, h, l, d)| Op::D2h(p, h, l, d)),
        2 => copy.clone().prop_map(|(p, h, l, d)| Op::H2dAsync(p, h, l, d)),
        2 => copy.prop_map(|(p, h, l, d)| Op::D2hAsync(p, h, l, d)),
        1 => Just(Op::Sync),
    ]
}

/// Clamps a copy to the host region and the device buffer.
fn clamp(pinned: bool, h: usize, l: usize, d: usize) -> (usize, usize, usize) {
    let hl = if pinned { PIN } else { ARENA };
    let h = h % hl;
    let l = l.min(hl - h).min(DEV - d).max(1);
    (h, l, d)
}

/// One device for every case, destroyed (and checked for validation errors) at the end.
#[test]
fn copies_match_the_model() {
    let d = device().expect("device");
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(500);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig { cases, ..ProptestConfig::default() });
    let strategy = (proptest::collection::vec(op(), 1..24), any::<u8>());
    if let Err(e) = runner.run(&strategy, |(ops, seed)| one_case(&d, ops, seed)) {
        panic!("{e}");
    }
}

fn one_case(d: &Device, ops: Vec<Op>, seed: u8) -> Result<(), TestCaseError> {
    {
        let errors_before = d.validation_errors();
        let stream = d.stream().unwrap();
        let mut arena = Pages::new(ARENA);
        let mut pin = PinnedBuffer::new(d, PIN).unwrap();
        let buf = d.alloc_buffer(DEV).unwrap();
        let mut m_arena = pattern(ARENA, seed);
        let mut m_pin = pattern(PIN, seed ^ 0x55);
        let mut m_dev = pattern(DEV, seed ^ 0xAA);
        arena.slice().copy_from_slice(&m_arena);
        pin.copy_from_slice(&m_pin);
        buf.write(0, &m_dev).unwrap();
        let base = arena.ptr as usize;
        let mut regs: Vec<(usize, usize)> = Vec::new();
        let mut pending = false;
        for op in ops {
            // Synchronous work must not race the stream's: synchronize first.
            if pending && !matches!(op, Op::H2dAsync(..) | Op::D2hAsync(..)) {
                stream.synchronize().unwrap();
                pending = false;
            }
            match op {
                Op::Register(a, l) => {
                    let l = l.min(ARENA - a);
                    let clash = regs.iter().any(|&(x, y)| a < x + y && x < a + l);
                    // SAFETY: inside the arena, which outlives the registrations.
                    let r = unsafe { host::register(d, base + a, l) };
                    prop_assert_eq!(r.is_err(), clash, "register {}+{}: {:?}", a, l, r);
                    if r.is_ok() {
                        regs.push((a, l));
                    }
                }
                Op::Unregister(i) => {
                    if !regs.is_empty() {
                        let (a, _) = regs.remove(i % regs.len());
                        prop_assert_eq!(host::unregister(d, base + a), Ok(()));
                    }
                }
                Op::H2d(p, h, l, o) | Op::H2dAsync(p, h, l, o) => {
                    let (h, l, o) = clamp(p, h, l, o);
                    let src = if p { pin.as_ptr() as usize + h } else { base + h };
                    let model_src = if p { &m_pin[h..h + l] } else { &m_arena[h..h + l] };
                    m_dev[o..o + l].copy_from_slice(model_src);
                    if matches!(op, Op::H2d(..)) {
                        // SAFETY: inside the arena or the pinned block.
                        let path = unsafe { host::copy_to_device(d, src as *const u8, l, &buf, o) }.unwrap();
                        if p {
                            prop_assert_eq!(path, CopyPath::Direct);
                        }
                    } else {
                        // SAFETY: as above; host memory is not written until synchronize.
                        unsafe { stream.copy_to_device_async(src as *const u8, l, &buf, o) }.unwrap();
                        pending = true;
                    }
                }
                Op::D2h(p, h, l, o) | Op::D2hAsync(p, h, l, o) => {
                    let (h, l, o) = clamp(p, h, l, o);
                    let dst = if p { pin.as_mut_ptr() as usize + h } else { base + h };
                    let model_dst = if p { &mut m_pin[h..h + l] } else { &mut m_arena[h..h + l] };
                    model_dst.copy_from_slice(&m_dev[o..o + l]);
                    if matches!(op, Op::D2h(..)) {
                        // SAFETY: inside the arena or the pinned block.
                        unsafe { host::copy_to_host(d, &buf, o, dst as *mut u8, l) }.unwrap();
                    } else {
                        // SAFETY: as above; untouched until synchronize.
                        unsafe { stream.copy_to_host_async(&buf, o, dst as *mut u8, l) }.unwrap();
                        pending = true;
                    }
                }
                Op::Sync => {}
            }
        }
        stream.synchronize().unwrap();
        let mut got_dev = vec![0u8; DEV];
        buf.read(0, &mut got_dev).unwrap();
        prop_assert!(got_dev == m_dev, "device memory differs from the model");
        prop_assert!(arena.slice() == &m_arena[..], "host arena differs from the model");
        prop_assert!(pin[..] == m_pin[..], "pinned block differs from the model");
        for (a, _) in regs {
            host::unregister(d, base + a).unwrap();
        }
        drop(pin);
        prop_assert_eq!(entries_of(d), 0);
        prop_assert_eq!(d.validation_errors(), errors_before, "validation: {:?}", d.last_validation_error());
    }
    Ok(())
}
