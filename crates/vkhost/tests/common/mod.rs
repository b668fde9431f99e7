//! Helpers for device tests: every test opens its device with the Khronos validation layer on
//! and asserts zero validation errors when it ends.
//!
//! A device test never passes silently without a device: if none can be opened it fails with
//! the reason, unless VKHOST_SKIP_NO_DEVICE=1, in which case it prints why it skips.
#![allow(dead_code)]

use vkhost::{Device, OpenOptions};

pub mod child;
pub mod ops;
pub mod panic_logger;

/// `rel` under `crates/vkhost`: where this test was built, or (a test binary carried to another
/// machine with the working tree, as `scripts/h200-run.sh` runs them) under the current
/// directory. Panics, naming both, when neither has it.
pub fn crate_path(rel: &str) -> std::path::PathBuf {
    let built = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    if built.exists() {
        return built;
    }
    let here = std::path::Path::new("crates/vkhost").join(rel);
    assert!(here.exists(), "{rel} is neither at {} nor under the current directory", built.display());
    here
}

pub fn init_log() {
    let _ = env_logger::builder().is_test(true).try_init();
}

/// Validation on. BAR writes off: these tests count which path each copy took (direct and
/// staged bytes); on a full-BAR GPU (the H200) `Auto` would turn their small writes into CPU
/// stores. tests/bar.rs and `vkhost check` test the stores (`BarWrites::On`).
pub fn opts() -> OpenOptions {
    OpenOptions { validation: true, bar_writes: vkhost::BarWrites::Off, ..OpenOptions::default() }
}

/// Opens the default device with validation, or explains why not.
pub fn device() -> Option<Checked> {
    device_with(opts())
}

pub fn device_with(o: OpenOptions) -> Option<Checked> {
    init_log();
    match Device::open_default_with(&o) {
        Ok(d) => Some(Checked(d)),
        Err(e) if std::env::var("VKHOST_SKIP_NO_DEVICE").as_deref() == Ok("1") => {
            eprintln!("SKIPPED: no Vulkan device could be opened ({e}); VKHOST_SKIP_NO_DEVICE=1 allows skipping");
            None
        }
        Err(e) => panic!("no Vulkan device could be opened: {e}. Run scripts/setup (installs lavapipe and the validation layer)."),
    }
}

/// A device whose validation error count is asserted zero on drop, after destroy.
pub struct Checked(pub Device);

impl std::ops::Deref for Checked {
    type Target = Device;
    fn deref(&self) -> &Device {
        &self.0
    }
}

impl Drop for Checked {
    fn drop(&mut self) {
        let r = self.0.destroy();
        if std::thread::panicking() {
            return;
        }
        assert!(r.is_ok() || matches!(r, Err(vkhost::Error::Busy { .. })), "destroy: {r:?}");
        assert!(self.0.validation_enabled(), "validation must be on in device tests");
        if self.0.validation_layer_faults() > 0 {
            // Not a failure: the layer's own (see Device::validation_layer_faults).
            eprintln!("note: the validation layer reported {} fault(s) of its own", self.0.validation_layer_faults());
        }
        assert_eq!(self.0.validation_errors(), 0, "validation errors; last: {:?}", self.0.last_validation_error());
    }
}

/// A seeded xorshift generator for the randomized tests (reproducible by seed).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// A number in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A deterministic non-zero pattern.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| ((i as u32).wrapping_mul(2654435761).rotate_right(13) as u8) ^ seed | 1).collect()
}

/// Page-aligned anonymous memory, unmapped on drop.
pub struct Pages {
    pub ptr: *mut u8,
    pub len: usize,
}

impl Pages {
    pub fn new(len: usize) -> Pages {
        Self::with_prot(len, libc::PROT_READ | libc::PROT_WRITE)
    }
    pub fn with_prot(len: usize, prot: i32) -> Pages {
        // SAFETY: anonymous private mapping, no hint.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
        assert_ne!(p, libc::MAP_FAILED);
        Pages { ptr: p.cast(), len }
    }
    pub fn slice(&mut self) -> &mut [u8] {
        // SAFETY: mapped read-write for len bytes (for the default prot).
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        // SAFETY: our mapping.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}
