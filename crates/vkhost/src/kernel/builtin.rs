//! vkhost's own kernels, written in WGSL (`src/kernel/wgsl/`) and compiled to SPIR-V at build
//! time by naga (`build.rs`). They follow the binding convention of [`crate::kernel`]; launch
//! them through [`Stream::fill_u32`](crate::Stream::fill_u32),
//! [`Stream::copy_sm`](crate::Stream::copy_sm) and [`Stream::checksum`](crate::Stream::checksum),
//! which check offsets and lengths (multiples of 4 bytes, else `InvalidArgument`), or launch
//! them yourself with the push constants each file documents. A direct launch is checked too,
//! since the kernels trust their push constants: each binding must start on the kernel's unit
//! (4 bytes, 16 for `copy_vec4`) and hold the elements the push constants name (the checksum's
//! result 8 bytes), and the workgroups must be `[n, 1, 1]` with `256 n` plus the element count
//! at most 2^32 (the kernels loop over x with a u32 index) and `256 n · 32768` at least the
//! element count (at most 32 768 rounds of the loop per invocation: llvmpipe ends longer loops
//! silently, a GPU's watchdog may end the device); anything else is `InvalidArgument` and
//! nothing is recorded.
//!
//! ## The checksum
//!
//! A 64-bit function of the u32 words (little-endian) of a range, with no 64-bit integers on
//! the device:
//!
//! ```text
//! checksum = Σ_i fmix32(word[i] ^ (i · 0x9E3779B9 mod 2^32))   mod 2^64
//! fmix32(x) = MurmurHash3's finalizer: x ^= x>>16; x *= 0x85EBCA6B; x ^= x>>13; x *= 0xC2B2AE35; x ^= x>>16
//! ```
//!
//! i is the word's index in the range (mod 2^32). Each term depends on the word and its
//! position, so moved, swapped or changed words change the sum (a sum, not a cryptographic
//! hash: it detects corruption, not tampering). The device adds the 32-bit terms into (low,
//! high) u32 halves with carries; [`checksum_cpu`] computes the same value on the host.
//!
//! # Example
//!
//! ```
//! # fn main() -> vkhost::Result<()> {
//! use vkhost::{Binding, QueueKind};
//! let dev = vkhost::Device::open_default()?;
//! let stream = dev.stream_on(QueueKind::Compute)?;
//! let gpu = dev.alloc_buffer(4096)?;
//! stream.fill_u32(Binding::Device(&gpu, 0, 4096), 0x1234_5678)?; // the `fill` built-in
//! let on_device = stream.checksum(Binding::Device(&gpu, 0, 4096))?; // the `checksum` built-in
//! let on_host = vkhost::kernel::checksum_cpu(&0x1234_5678u32.to_le_bytes().repeat(1024));
//! assert_eq!(on_device, on_host);
//! # Ok(()) }
//! ```

use super::{Kernel, Param};
use crate::error::Result;
use std::sync::LazyLock;

use super::builtin_spirv as spv;

/// Threads per workgroup of every built-in (their `@workgroup_size`).
pub(crate) const WORKGROUP: u32 = 256;

/// The most rounds of a built-in's grid-stride loop one launch may ask of an invocation (its
/// element count over its invocations). A launch with too few workgroups for its count is
/// refused: llvmpipe ends a shader's loops after about 65 535 iterations without a word (a
/// `fill` of 24 Mi words in one workgroup set only its first 16 Mi), and a GPU would run one
/// workgroup for up to 2^32 rounds (a watchdog's lost device). The wrappers stay far below it:
/// 4 096 rounds at most (`checksum`'s 256 workgroups over a piece of 1 GiB, the most a wrapper
/// binds at once).
pub(crate) const MAX_ROUNDS: u64 = 1 << 15;

/// A built-in from its words. They are naga's validated output, built into the crate, so the
/// checks in `build` (magic, decorations) pass for them; were one to fail (a broken build),
/// every use of that kernel answers the typed error instead of panicking.
fn make(name: &str, words: &[u32], params: &[Param], push: usize, check: super::ArgCheck) -> Result<Kernel> {
    Kernel::build(name, words, "main", params, push, Some(check))
        .map_err(|e| crate::Error::unsupported(format!("the built-in kernel `{name}` failed its own checks: {e}")))
}

type Builtin = LazyLock<Result<Kernel>>;

static FILL: Builtin = LazyLock::new(|| make("fill", spv::FILL, &[Param::ReadWrite], 8, check_fill));
static COPY: Builtin = LazyLock::new(|| make("copy", spv::COPY, &[Param::ReadOnly, Param::ReadWrite], 4, check_copy));
static COPY4: Builtin = LazyLock::new(|| make("copy4", spv::COPY4, &[Param::ReadOnly, Param::ReadWrite], 4, check_copy4));
static CHECKSUM: Builtin = LazyLock::new(|| make("checksum", spv::CHECKSUM, &[Param::ReadOnly, Param::ReadWrite], 8, check_checksum));

/// The u32 at word `i` of a built-in's own push constants (their sizes are checked first).
pub(crate) fn push_word(pc: &[u8], i: usize) -> u64 {
    let w = pc.get(4 * i..4 * i + 4).and_then(|b| <[u8; 4]>::try_from(b).ok()).unwrap_or([0; 4]);
    u64::from(u32::from_ne_bytes(w))
}

/// A built-in's binding must start on `unit` bytes (the kernel indexes from `delta / unit`) and
/// hold `bytes` bytes from there.
fn check_binding(what: &str, (delta, len): (u32, u64), unit: u32, bytes: u64) -> Result<()> {
    if delta % unit != 0 {
        return Err(crate::Error::invalid(format!("{what}: the binding must start on a multiple of {unit} bytes")));
    }
    if bytes > len {
        return Err(crate::Error::invalid(format!("{what}: the push constants name {bytes} bytes, the binding has {len}")));
    }
    Ok(())
}

fn check_fill(b: &[(u32, u64)], pc: &[u8]) -> Result<()> {
    check_binding("fill", b[0], 4, 4 * push_word(pc, 0))
}

fn check_copy(b: &[(u32, u64)], pc: &[u8]) -> Result<()> {
    let n = 4 * push_word(pc, 0);
    check_binding("copy source", b[0], 4, n)?;
    check_binding("copy destination", b[1], 4, n)
}

fn check_copy4(b: &[(u32, u64)], pc: &[u8]) -> Result<()> {
    let n = 16 * push_word(pc, 0);
    check_binding("copy4 source", b[0], 16, n)?;
    check_binding("copy4 destination", b[1], 16, n)
}

fn check_checksum(b: &[(u32, u64)], pc: &[u8]) -> Result<()> {
    check_binding("checksum source", b[0], 4, 4 * push_word(pc, 0))?;
    check_binding("checksum result", b[1], 4, 8)
}

fn get(k: &'static Builtin) -> Result<&'static Kernel> {
    k.as_ref().map_err(Clone::clone)
}

/// `fill`: binding 0 (read-write); own push constants `words: u32, pattern: u32`: `words` u32
/// words from the delta set to `pattern`.
///
/// `Err` (`Unsupported`) only if the built-in failed its own checks, which a correct build
/// never does; the same for every built-in below.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// use vkhost::{Binding, QueueKind, kernel::builtin};
/// let dev = vkhost::Device::open_default()?;
/// let stream = dev.stream_on(QueueKind::Compute)?;
/// let gpu = dev.alloc_buffer(1024)?;
/// let push = |w: &[u32]| -> Vec<u8> { w.iter().flat_map(|x| x.to_ne_bytes()).collect() };
/// // Binding 0: 256 words set to 42 (its own push constants: words, pattern).
/// stream.launch(builtin::fill()?, [1, 1, 1], &[Binding::Device(&gpu, 0, 1024)], &push(&[256, 42]))?;
/// stream.synchronize()?;
/// let mut back = [0u32; 256];
/// gpu.read_slice(0, &mut back)?;
/// assert_eq!(back, [42; 256]);
/// # Ok(()) }
/// ```
pub fn fill() -> Result<&'static Kernel> {
    get(&FILL)
}

/// `copy` by u32 words: binding 0 (read) to binding 1 (read-write); own push constant
/// `words: u32`.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// use vkhost::{Binding, QueueKind, kernel::builtin};
/// let dev = vkhost::Device::open_default()?;
/// let stream = dev.stream_on(QueueKind::Compute)?;
/// let (src, dst) = (dev.alloc_buffer(400)?, dev.alloc_buffer(400)?);
/// src.write_slice(0, &[3u32; 100])?;
/// let push = |w: &[u32]| -> Vec<u8> { w.iter().flat_map(|x| x.to_ne_bytes()).collect() };
/// let bindings = [Binding::Device(&src, 0, 400), Binding::Device(&dst, 0, 400)];
/// stream.launch(builtin::copy()?, [1, 1, 1], &bindings, &push(&[100]))?; // 100 words
/// stream.synchronize()?;
/// let mut back = [0u32; 100];
/// dst.read_slice(0, &mut back)?;
/// assert_eq!(back, [3; 100]);
/// # Ok(()) }
/// ```
pub fn copy() -> Result<&'static Kernel> {
    get(&COPY)
}

/// `copy` by 16-byte vectors, for deltas and lengths that are multiples of 16: own push
/// constant `vecs: u32` (the count of 16-byte vectors).
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// use vkhost::{Binding, QueueKind, kernel::builtin};
/// let dev = vkhost::Device::open_default()?;
/// let stream = dev.stream_on(QueueKind::Compute)?;
/// let (src, dst) = (dev.alloc_buffer(1024)?, dev.alloc_buffer(1024)?);
/// src.write(0, &[4; 1024])?;
/// let push = |w: &[u32]| -> Vec<u8> { w.iter().flat_map(|x| x.to_ne_bytes()).collect() };
/// let bindings = [Binding::Device(&src, 0, 1024), Binding::Device(&dst, 0, 1024)];
/// stream.launch(builtin::copy_vec4()?, [1, 1, 1], &bindings, &push(&[64]))?; // 64 vectors
/// stream.synchronize()?;
/// let mut back = vec![0u8; 1024];
/// dst.read(0, &mut back)?;
/// assert!(back.iter().all(|&b| b == 4));
/// # Ok(()) }
/// ```
pub fn copy_vec4() -> Result<&'static Kernel> {
    get(&COPY4)
}

/// `checksum`: adds the checksum (module docs) of binding 0 (read) into the u64 at binding 1
/// (read-write, 8 bytes: low u32, high u32; zero it first); own push constants `words: u32,
/// first: u32` (the index of the first word, for a range split over several launches).
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// use vkhost::{Binding, QueueKind, kernel::builtin};
/// let dev = vkhost::Device::open_default()?;
/// let stream = dev.stream_on(QueueKind::Compute)?;
/// let data = dev.alloc_buffer(1024)?;
/// data.write(0, &[0xA5; 1024])?;
/// let sum = dev.alloc_buffer(8)?;
/// sum.write(0, &[0; 8])?; // the kernel adds into it
/// let push = |w: &[u32]| -> Vec<u8> { w.iter().flat_map(|x| x.to_ne_bytes()).collect() };
/// let bindings = [Binding::Device(&data, 0, 1024), Binding::Device(&sum, 0, 8)];
/// stream.launch(builtin::checksum()?, [1, 1, 1], &bindings, &push(&[256, 0]))?; // words, first
/// stream.synchronize()?;
/// let mut got = [0u64; 1];
/// sum.read_slice(0, &mut got)?;
/// assert_eq!(got[0], builtin::checksum_cpu(&[0xA5; 1024]));
/// # Ok(()) }
/// ```
pub fn checksum() -> Result<&'static Kernel> {
    get(&CHECKSUM)
}

/// MurmurHash3's 32-bit finalizer.
fn fmix32(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x85eb_ca6b);
    x ^= x >> 13;
    x = x.wrapping_mul(0xc2b2_ae35);
    x ^ (x >> 16)
}

/// The checksum of the module docs over `bytes` read as little-endian u32 words: what
/// [`Stream::checksum`](crate::Stream::checksum) computes on the device. Only whole words count
/// (`bytes.len() / 4` of them; device ranges are multiples of 4 bytes).
///
/// # Example
///
/// ```
/// use vkhost::kernel::checksum_cpu;
/// let a = [1u8, 0, 0, 0, 2, 0, 0, 0];
/// let swapped = [2u8, 0, 0, 0, 1, 0, 0, 0];
/// assert_ne!(checksum_cpu(&a), checksum_cpu(&swapped), "positions count");
/// assert_eq!(checksum_cpu(&a[..7]), checksum_cpu(&a[..4]), "only whole words count");
/// assert_eq!(checksum_cpu(&[]), 0);
/// ```
pub fn checksum_cpu(bytes: &[u8]) -> u64 {
    bytes
        .chunks_exact(4)
        .enumerate()
        .map(|(i, w)| {
            let w = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
            u64::from(fmix32(w ^ (i as u32).wrapping_mul(0x9e37_79b9)))
        })
        .fold(0u64, u64::wrapping_add)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_depends_on_position_and_value() {
        let a: Vec<u8> = (0..64u8).collect();
        let mut b = a.clone();
        b.swap(0, 4);
        assert_ne!(checksum_cpu(&a), checksum_cpu(&b));
        assert_eq!(checksum_cpu(&a), checksum_cpu(&a.clone()));
        assert_eq!(checksum_cpu(&[]), 0);
        // Trailing partial words do not count.
        assert_eq!(checksum_cpu(&a[..63]), checksum_cpu(&a[..60]));
    }

    #[test]
    fn builtins_pass_their_checks() {
        for k in [fill(), copy(), copy_vec4(), checksum()] {
            let k = k.unwrap();
            assert!(k.inner.desc.words.len() > 5, "{}", k.name());
        }
    }

    /// A built-in whose words fail the checks is a typed error, not a panic.
    #[test]
    fn a_builtin_failing_its_checks_is_an_error() {
        let e = make("broken", &[0xdead_beef; 8], &[Param::ReadWrite], 8, check_fill).unwrap_err();
        assert!(matches!(e, crate::Error::Unsupported { ref reason } if reason.contains("broken")), "{e:?}");
    }
}
