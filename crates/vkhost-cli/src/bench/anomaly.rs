//! Notes on a run whose small copies ran in a slow state: far slower than the device showed at
//! open, or pinned blocks far slower than registered memory of the same process (or the
//! reverse). Both are states of a process seen on the H200 (docs/PERFORMANCE.md, eighth
//! session: pinned 4 KiB copies at 18-21 us where registered memory took 12.5-14, in about half
//! of the full sweeps; every 4 KiB copy at 41-57 us in some), not properties of the link: a
//! user reading such a table should rerun before trusting its small-copy rows. And a note on a
//! host whose GPU reads host memory far slower than it writes it (a property of the host).

use super::point::Point;

/// A 4 KiB copy time counts as slow above this times the reference...
const RATIO: f64 = 1.3;
/// ...and this many microseconds more (one jittery microsecond on a 4 µs device is not a state).
const MARGIN_US: f64 = 4.0;

/// The 4 KiB synchronous copy-engine medians of `path` in µs, (h2d, d2h), when both were
/// measured.
fn small(points: &[Point], path: &str) -> Option<(f64, f64)> {
    let us = |dir: &str| {
        points
            .iter()
            .find(|p| p.api == "vulkan" && p.kind == "copy" && !p.sm && p.size == 4096 && p.path == path && p.dir == dir)
            .map(|p| p.s.median * 1e6)
    };
    Some((us("h2d")?, us("d2h")?))
}

fn slower(t: (f64, f64), reference: (f64, f64)) -> bool {
    let one = |a: f64, b: f64| a > b * RATIO && a > b + MARGIN_US;
    one(t.0, reference.0) && one(t.1, reference.1)
}

/// The notes for `points`; `at_open` is the 4 KiB (h2d, d2h) µs measured when the device opened
/// on the queues small copies run on ([`small_at_open`]), when it was.
pub(super) fn notes(points: &[Point], at_open: Option<(f64, f64)>) -> Vec<String> {
    let mut out = Vec::new();
    let (pinned, registered) = (small(points, "pinned"), small(points, "registered"));
    if let Some(o) = at_open {
        let slow: Vec<String> = [("pinned", pinned), ("registered", registered), ("pageable", small(points, "pageable"))]
            .into_iter()
            .filter_map(|(name, t)| t.filter(|&t| slower(t, o)).map(|t| format!("{name} {:.1} / {:.1}", t.0, t.1)))
            .collect();
        if !slow.is_empty() {
            out.push(format!(
                "slow small copies: 4 KiB h2d / d2h took {} us against {:.1} / {:.1} us measured when the device opened; \
                 a slow state of this process (seen on the H200 in some runs, docs/PERFORMANCE.md), not the link: rerun \
                 before trusting the small-copy rows",
                slow.join(", "),
                o.0,
                o.1
            ));
        }
    }
    if let (Some(p), Some(r)) = (pinned, registered) {
        let (a, b) = if slower(p, r) {
            (("pinned blocks", p), ("registered memory", r))
        } else if slower(r, p) {
            (("registered memory", r), ("pinned blocks", p))
        } else {
            return out;
        };
        out.push(format!(
            "{} copied slower than {} in this process: 4 KiB h2d / d2h {:.1} / {:.1} us against {:.1} / {:.1}; \
             the memory's state in this process (seen on the H200 in about half of the full sweeps, docs/PERFORMANCE.md), \
             so the rows of that memory here may not be what another process gets",
            a.0, b.0, a.1.0, a.1.1, b.1.0, b.1.1
        ));
    }
    out
}

/// The 4 KiB (h2d, d2h) µs measured at open on the queue each direction's 4 KiB copies run on
/// (`CopyQueues::queue_for`), for [`notes`]' `at_open`; None when nothing was measured. Not
/// the copy engines' alone: where the compute queue has the lower latency, small copies run
/// on it, and the copy engines' higher figure would let a slow state pass.
pub(super) fn small_at_open(q: &vkhost::CopyQueues) -> Option<(f64, f64)> {
    let (copy, compute) = q.measured?;
    let on = |to_device: bool| match q.queue_for(to_device, 4096) {
        vkhost::QueueKind::Copy => copy,
        vkhost::QueueKind::Compute => compute,
    };
    Some((on(true).small_to_device_us, on(false).small_to_host_us))
}

/// A note when the device's copy queues measured at open (`CopyQueues::reads_host_slowly`) show
/// a host whose GPU reads host memory far slower than it writes it: then the h2d rows may show
/// the host's limit rather than the sweep's or vkhost's.
pub(super) fn host_read_note(q: &vkhost::CopyQueues) -> Option<String> {
    let (h2d, d2h) = q.bulk_at_open()?;
    q.reads_host_slowly().then(|| {
        format!(
            "slow host reads: when the device opened, bulk copies read host memory at {h2d:.1} GB/s and wrote it at \
             {d2h:.1} ({:.2}x); on the H100 hosts where this was seen, every GPU read of host memory was that slow, a \
             plain Vulkan program's and CUDA's copy kernel's too (docs/PERFORMANCE.md): the h2d rows may show the \
             host's limit. Large writes shared with CPU stores are faster there (the host_to_device_bar+assist \
             rows): `bar_assist` Auto, the default, shares a DeviceBuffer::write of {} and more on such a host",
            h2d / d2h,
            vkhost::fmt_bytes(vkhost::OpenOptions::ASSIST_MIN as u64)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::summarize;

    #[test]
    fn slow_host_reads_are_named_from_the_open_time_figures() {
        use vkhost::{CopyQueues, QueueFigures, QueueKind};
        // Both queues measured at the same bulk rates (h2d, d2h), 4 KiB times alike.
        let q = |h2d: f64, d2h: f64| {
            let f = QueueFigures { bulk_to_device_gbps: h2d, bulk_to_host_gbps: d2h, small_to_device_us: 12.0, small_to_host_us: 12.0 };
            CopyQueues::from_figures(f, f)
        };
        // The thirty-fourth session's capped H100: 34.8 / 52.4 GB/s (the better queue each way).
        let n = host_read_note(&q(34.8, 52.4)).expect("a capped host gets the note");
        assert!(n.starts_with("slow host reads") && n.contains("34.8") && n.contains("0.66x"), "{n}");
        assert!(n.contains("DeviceBuffer::write of 4 MiB and more"), "{n}");
        // The thirty-second session's H100 (50.6 / 51.7) and the H200 (~49 / 51): no note.
        assert_eq!(host_read_note(&q(50.6, 51.7)), None);
        assert_eq!(host_read_note(&q(49.2, 51.1)), None);
        // Nothing measured (one kind of queue, lavapipe) or nonsense figures: no note.
        assert_eq!(host_read_note(&CopyQueues::fixed(QueueKind::Copy)), None);
        assert_eq!(host_read_note(&q(0.0, 0.0)), None);
    }

    /// Where the compute queue has the lower 4 KiB latency, small copies run on it
    /// (`CopyQueues::from_figures`), and the figure at open that their 4 KiB rows are held
    /// against is the compute queue's: the copy engines' higher one hid a slow state.
    #[test]
    fn the_reference_at_open_is_the_queue_small_copies_run_on() {
        use vkhost::{CopyQueues, QueueFigures, QueueKind};
        let f = |s2d: f64, s2h: f64| QueueFigures {
            bulk_to_device_gbps: 50.0,
            bulk_to_host_gbps: 50.0,
            small_to_device_us: s2d,
            small_to_host_us: s2h,
        };
        // Copy engines at 30 / 31 us, the compute queue at 10 / 11: small copies on compute.
        let q = CopyQueues::from_figures(f(30.0, 31.0), f(10.0, 11.0));
        assert_eq!((q.small_to_device, q.small_to_host), (QueueKind::Compute, QueueKind::Compute));
        assert_eq!(small_at_open(&q), Some((10.0, 11.0)));
        // Pinned and registered 4 KiB copies at 25 / 26 us on that queue: a slow state, named.
        let n = notes(&run((25.0, 26.0), (25.0, 26.0)), small_at_open(&q));
        assert!(n.iter().any(|n| n.starts_with("slow small copies") && n.contains("against 10.0 / 11.0 us")), "{n:?}");
        // The H200's figures: the copy engines have the lower latency, and stay the reference;
        // each direction is its own queue's.
        let q = CopyQueues::from_figures(f(14.8, 16.3), f(17.1, 18.5));
        assert_eq!(small_at_open(&q), Some((14.8, 16.3)));
        let q = CopyQueues::from_figures(f(14.8, 31.0), f(17.1, 11.0));
        assert_eq!((q.small_to_device, q.small_to_host), (QueueKind::Copy, QueueKind::Compute));
        assert_eq!(small_at_open(&q), Some((14.8, 11.0)));
        assert_eq!(small_at_open(&CopyQueues::fixed(QueueKind::Copy)), None);
    }

    fn pt(path: &str, dir: &str, us: f64) -> Point {
        super::super::point::point("vulkan", "copy", path, dir, 4096, 4096, summarize(&[us * 1e-6]).unwrap())
    }

    fn run(p: (f64, f64), r: (f64, f64)) -> Vec<Point> {
        vec![pt("pinned", "h2d", p.0), pt("pinned", "d2h", p.1), pt("registered", "h2d", r.0), pt("registered", "d2h", r.1)]
    }

    #[test]
    fn a_normal_run_has_no_note() {
        assert!(notes(&run((12.9, 13.6), (13.0, 13.8)), Some((12.6, 13.9))).is_empty());
        // Within the margin: a 4 µs device jittering by 3 µs is not a slow state.
        assert!(notes(&run((6.5, 6.8), (4.0, 4.1)), Some((4.0, 4.2))).is_empty());
        assert!(notes(&[], Some((12.6, 13.9))).is_empty());
        assert!(notes(&run((12.9, 13.6), (13.0, 13.8)), None).is_empty());
    }

    #[test]
    fn the_slow_pinned_state_is_named() {
        // The eighth session's call 4: pinned 18.1 / 21.0, registered 12.5 / 13.1, open 12.6 / 13.9.
        let n = notes(&run((18.1, 21.0), (12.5, 13.1)), Some((12.6, 13.9)));
        assert_eq!(n.len(), 2, "{n:?}");
        assert!(n[0].starts_with("slow small copies") && n[0].contains("pinned 18.1 / 21.0") && !n[0].contains("registered"), "{n:?}");
        assert!(n[1].starts_with("pinned blocks copied slower than registered memory"), "{n:?}");
        // Without the open-time figures only the comparison remains; the reverse is named too.
        let n = notes(&run((12.5, 13.1), (18.1, 21.0)), None);
        assert_eq!(n.len(), 1);
        assert!(n[0].starts_with("registered memory copied slower than pinned blocks"), "{n:?}");
    }

    #[test]
    fn a_whole_process_slow_state_is_named_once() {
        // The eighth session's call 7, sweep 3: every 4 KiB copy at ~42 us.
        let n = notes(&run((41.9, 42.0), (41.9, 42.7)), Some((12.6, 13.9)));
        assert_eq!(n.len(), 1, "{n:?}");
        assert!(n[0].contains("pinned 41.9 / 42.0, registered 41.9 / 42.7"), "{n:?}");
        // One direction slow is not the state (both must be).
        assert!(notes(&run((41.9, 13.0), (12.9, 13.1)), Some((12.6, 13.9))).is_empty());
    }
}
