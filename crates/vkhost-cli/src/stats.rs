//! Sample statistics and size parsing for the bench: pure functions, unit-tested.

/// Median, mean, sample standard deviation, min and max of a non-empty sample, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub median: f64,
    pub mean: f64,
    /// Sample standard deviation (n - 1 in the denominator); 0 for one sample.
    pub stddev: f64,
    pub min: f64,
    pub max: f64,
    pub n: usize,
}

/// A point is unstable when its slowest timed iteration took more than this times its fastest.
pub const UNSTABLE_SPREAD: f64 = 1.2;

impl Summary {
    /// One value standing for `n` samples whose spread was not kept (e.g. a mean over lookups).
    pub fn single(x: f64, n: usize) -> Summary {
        Summary { median: x, mean: x, stddev: 0.0, min: x, max: x, n }
    }

    /// max / min > UNSTABLE_SPREAD: the figure moved too much between iterations to trust.
    pub fn unstable(&self) -> bool {
        self.min > 0.0 && self.max / self.min > UNSTABLE_SPREAD
    }
}

/// Summarizes samples; `None` when empty. The median of an even count is the mean of the two
/// middle values.
pub fn summarize(samples: &[f64]) -> Option<Summary> {
    if samples.is_empty() {
        return None;
    }
    let mut v: Vec<f64> = samples.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
    // Kept within the samples: rounding can put the sum's quotient just outside them (three
    // samples of 0.1 sum to 0.30000000000000004, a third of which is above 0.1), and a mean
    // never is. `max`/`min`, not `clamp`, which panics on a NaN bound.
    let mean = (v.iter().sum::<f64>() / n as f64).max(v[0]).min(v[n - 1]);
    let stddev = if n > 1 { (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt() } else { 0.0 };
    Some(Summary { median, mean, stddev, min: v[0], max: v[n - 1], n })
}

/// GB/s (1e9 bytes per second) for `bytes` moved in `secs`.
pub fn gbps(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 { bytes as f64 / secs / 1e9 } else { f64::INFINITY }
}

/// "4K" → 4096, "1M", "1G", "512" → bytes (binary units; "4KiB" and "4KB" too).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_uppercase();
    // One suffix at most: "4KiB" and "4KB", never "4KIBIB" or "4BBB".
    let (t, unit_needed) = match (t.strip_suffix("IB"), t.strip_suffix('B')) {
        (Some(r), _) => (r, true),
        (None, Some(r)) => (r, false),
        (None, None) => (t.as_str(), false),
    };
    if unit_needed && !t.ends_with(['K', 'M', 'G', 'T']) {
        return Err(format!("bad size {s:?} (use e.g. 4K, 1M, 1G)"));
    }
    let (num, mul) = match t.chars().last() {
        Some('K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M') => (&t[..t.len() - 1], 1 << 20),
        Some('G') => (&t[..t.len() - 1], 1 << 30),
        Some('T') => (&t[..t.len() - 1], 1 << 40),
        _ => (t, 1),
    };
    let n: u64 = num.trim().parse().map_err(|_| format!("bad size {s:?} (use e.g. 4K, 1M, 1G)"))?;
    match n.checked_mul(mul) {
        Some(0) => Err(format!("bad size {s:?}: a size is at least 1 byte")),
        Some(b) => Ok(b),
        None => Err(format!("bad size {s:?}: larger than 2^64 bytes")),
    }
}

/// 4096 → "4K", 1 << 30 → "1G", 1000 → "1000".
pub fn size_label(b: u64) -> String {
    for (u, s) in [("T", 1u64 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)] {
        if b >= s && b % s == 0 {
            return format!("{}{u}", b / s);
        }
    }
    b.to_string()
}

/// The default sweep: 4 KiB to `max` in ×4 steps.
pub fn sweep(min: u64, max: u64) -> Vec<u64> {
    let mut v = Vec::new();
    let mut s = min.max(1);
    while s <= max {
        v.push(s);
        s = match s.checked_mul(4) {
            Some(x) => x,
            None => break,
        };
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_odd_even() {
        let s = summarize(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.n), (2.0, 1.0, 3.0, 3));
        let s = summarize(&[4.0, 1.0, 2.0, 3.0]).unwrap();
        assert_eq!(s.median, 2.5);
        assert!(summarize(&[]).is_none());
        let s = summarize(&[5.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.mean, s.stddev), (5.0, 5.0, 5.0, 5.0, 0.0));
    }

    /// The mean of equal samples is that value, not a rounding error beside it.
    #[test]
    fn mean_lies_between_min_and_max_despite_rounding() {
        let x = std::hint::black_box(0.1f64);
        assert!((x + x + x) / 3.0 > x, "the rounding this guards against");
        let s = summarize(&[x, x, x]).unwrap();
        assert_eq!((s.min, s.mean, s.max), (x, x, x));
    }

    #[test]
    fn mean_stddev_unstable() {
        let s = summarize(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).unwrap();
        assert_eq!(s.mean, 5.0);
        // Sum of squared deviations 32, over n - 1 = 7.
        assert!((s.stddev - (32.0f64 / 7.0).sqrt()).abs() < 1e-12);
        assert!(s.unstable());
        assert!(!summarize(&[1.0, 1.1, 1.2]).unwrap().unstable());
        assert!(summarize(&[1.0, 1.21]).unwrap().unstable());
        assert!(!Summary::single(3.0, 10).unstable());
    }

    #[test]
    fn gbps_units() {
        assert_eq!(gbps(1_000_000_000, 1.0), 1.0);
        assert_eq!(gbps(1 << 30, 0.5), (1u64 << 30) as f64 / 0.5 / 1e9);
        assert!(gbps(1, 0.0).is_infinite());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("4KiB"), Ok(4096));
        assert_eq!(parse_size("123"), Ok(123));
        assert!(parse_size("0").is_err());
        assert!(parse_size("x").is_err());
        assert!(parse_size("99999999999T").is_err());
        assert_eq!(parse_size("4KB"), Ok(4096));
        for bad in ["4BBB", "4IB", "4KIBIB", "4KBB"] {
            assert!(parse_size(bad).is_err(), "{bad} is not a size");
        }
        assert_eq!(size_label(4096), "4K");
        assert_eq!(size_label(1 << 30), "1G");
        assert_eq!(size_label(1000), "1000");
    }

    #[test]
    fn default_sweep_is_x4() {
        let v = sweep(4096, 1 << 30);
        assert_eq!(v.first(), Some(&4096));
        assert_eq!(v.last(), Some(&(1 << 30)));
        assert_eq!(v.len(), 10);
        assert!(v.windows(2).all(|w| w[1] == 4 * w[0]));
        assert_eq!(sweep(4096, 1 << 20).last(), Some(&(1 << 20)));
    }
}
