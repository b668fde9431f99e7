//! Test scaffolding shared by the unit tests of several layers (compiled only for tests).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A device opened with the validation layer where it is installed; `None` (said why) without
/// a Vulkan device.
pub(crate) fn open_validated() -> Option<crate::Device> {
    let validation = super::validation_layer_installed();
    let opts = crate::OpenOptions { validation, ..Default::default() };
    match crate::Device::open_default_with(&opts) {
        Ok(d) => {
            if !validation {
                eprintln!("the validation layer is not installed: the counts alone are checked");
            }
            Some(d)
        }
        Err(e) => {
            eprintln!("skipped: no Vulkan device ({e})");
            None
        }
    }
}

/// A point at the start of a drop where the first such drop for an armed device stops, after
/// the last owner's count went to zero and before any of the drop ran, until disarmed: a test
/// holds it there while the device is destroyed.
pub(crate) struct DropPause {
    /// The armed device's id (0: none).
    device: AtomicU64,
    reached: AtomicBool,
}

impl DropPause {
    pub(crate) const fn new() -> DropPause {
        DropPause { device: AtomicU64::new(0), reached: AtomicBool::new(false) }
    }

    /// Called at the start of the drop: stops here while armed for `device`, first drop only.
    pub(crate) fn here(&self, device: u64) {
        if self.device.load(Ordering::Acquire) != device || self.reached.swap(true, Ordering::AcqRel) {
            return;
        }
        while self.device.load(Ordering::Acquire) == device {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Arms the pause for `device`; the guard disarms it (lets a paused drop go) however the
    /// test ends.
    pub(crate) fn arm(&'static self, device: u64) -> Armed {
        self.reached.store(false, Ordering::Release);
        self.device.store(device, Ordering::Release);
        Armed(self)
    }

    /// Waits until a drop stopped here; fails the test after 10 s.
    pub(crate) fn wait_reached(&self, what: &str) {
        let start = Instant::now();
        while !self.reached.load(Ordering::Acquire) {
            assert!(start.elapsed() < Duration::from_secs(10), "{what} never began");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// An armed [`DropPause`]; dropping it disarms.
pub(crate) struct Armed(&'static DropPause);

impl Drop for Armed {
    fn drop(&mut self) {
        self.0.device.store(0, Ordering::Release);
    }
}
