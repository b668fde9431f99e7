//! Timing shared by the latency examples (`queue_latency`, `pinned_small`, `split_copy`,
//! `mid_split`), included with `#[path]`; not an example itself (no `main`).

use std::time::Instant;

/// The median of `v` (its upper middle for an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median µs of `n` synchronous writes and of `n` reads of `len` bytes between `host` and `buf`.
#[allow(dead_code)] // split_copy and mid_split time their own copies
pub fn sync_copies(buf: &vkhost::DeviceBuffer, host: &mut [u8], len: usize, n: usize) -> vkhost::Result<(f64, f64)> {
    let (mut w, mut r) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let t = Instant::now();
        buf.write(0, &host[..len])?;
        w.push(t.elapsed().as_secs_f64() * 1e6);
        let t = Instant::now();
        buf.read(0, &mut host[..len])?;
        r.push(t.elapsed().as_secs_f64() * 1e6);
    }
    Ok((median(w), median(r)))
}
