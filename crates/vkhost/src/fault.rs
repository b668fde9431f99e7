//! Fault injection for tests (cargo feature `fault-injection`).
//!
//! Every Vulkan entry point that can fail in a way a caller must survive goes through
//! `check` first. With the feature on, a test arms a fault with `inject`: the `nth` call
//! (0-based) *on the calling thread* to the named entry point fails with the given code, as if
//! the driver had returned it. Thread-local, so tests running in parallel do not disturb each
//! other. Without the feature, `check` is an empty inline function.
//!
//! # Example
//!
//! The points a test can sweep (`inject`, `disarm` and `calls` exist with the feature only):
//!
//! ```
//! use vkhost::fault::Point;
//!
//! for p in Point::ALL {
//!     assert!(p.name().starts_with("vk"));
//! }
//! assert_eq!(Point::QueueSubmit.name(), "vkQueueSubmit");
//! ```

use ash::vk;

/// Entry points that can be made to fail.
///
/// # Example
///
/// ```
/// use vkhost::fault::Point;
///
/// let p = Point::AllocateMemory;
/// assert_eq!(p.name(), "vkAllocateMemory");
/// assert!(Point::ALL.contains(&p));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Point {
    /// `vkAllocateMemory`.
    AllocateMemory,
    /// `vkCreateBuffer`.
    CreateBuffer,
    /// `vkBindBufferMemory`.
    BindBufferMemory,
    /// `vkMapMemory`.
    MapMemory,
    /// `vkQueueSubmit`.
    QueueSubmit,
    /// `vkWaitForFences`.
    WaitForFences,
    /// `vkWaitSemaphores`.
    WaitSemaphores,
    /// `vkCreateCommandPool`.
    CreateCommandPool,
    /// `vkAllocateCommandBuffers`.
    AllocateCommandBuffers,
    /// `vkCreateFence`.
    CreateFence,
    /// `vkCreateSemaphore`.
    CreateSemaphore,
    /// `vkGetMemoryHostPointerPropertiesEXT`.
    GetMemoryHostPointerProperties,
    /// `vkCreateDescriptorSetLayout` (a kernel's pipeline).
    CreateDescriptorSetLayout,
    /// `vkCreatePipelineLayout` (a kernel's pipeline).
    CreatePipelineLayout,
    /// `vkCreateShaderModule` (a kernel's pipeline).
    CreateShaderModule,
    /// `vkCreateComputePipelines` (a kernel's pipeline).
    CreateComputePipelines,
    /// `vkCreateDescriptorPool` (a stream's launches with descriptor sets).
    CreateDescriptorPool,
    /// `vkAllocateDescriptorSets` (a stream's launches with descriptor sets).
    AllocateDescriptorSets,
    /// `vkQueueWaitIdle` (after a failed wait, an unwind, a borrowed device's teardown).
    QueueWaitIdle,
    /// `vkDeviceWaitIdle` (an owned device's teardown).
    DeviceWaitIdle,
}

impl Point {
    /// Every point, for sweeps.
    ///
    /// # Example
    ///
    /// ```
    /// use std::collections::HashSet;
    /// use vkhost::fault::Point;
    ///
    /// // Each point once, each with its own entry point.
    /// let names: HashSet<&str> = Point::ALL.iter().map(|p| p.name()).collect();
    /// assert_eq!(names.len(), Point::ALL.len());
    /// ```
    pub const ALL: [Point; 20] = [
        Point::AllocateMemory,
        Point::CreateBuffer,
        Point::BindBufferMemory,
        Point::MapMemory,
        Point::QueueSubmit,
        Point::WaitForFences,
        Point::WaitSemaphores,
        Point::CreateCommandPool,
        Point::AllocateCommandBuffers,
        Point::CreateFence,
        Point::CreateSemaphore,
        Point::GetMemoryHostPointerProperties,
        Point::CreateDescriptorSetLayout,
        Point::CreatePipelineLayout,
        Point::CreateShaderModule,
        Point::CreateComputePipelines,
        Point::CreateDescriptorPool,
        Point::AllocateDescriptorSets,
        Point::QueueWaitIdle,
        Point::DeviceWaitIdle,
    ];

    /// The Vulkan name of the entry point.
    ///
    /// # Example
    ///
    /// ```
    /// use vkhost::fault::Point;
    ///
    /// assert_eq!(Point::CreateBuffer.name(), "vkCreateBuffer");
    /// assert_eq!(Point::GetMemoryHostPointerProperties.name(), "vkGetMemoryHostPointerPropertiesEXT");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            Point::AllocateMemory => "vkAllocateMemory",
            Point::CreateBuffer => "vkCreateBuffer",
            Point::BindBufferMemory => "vkBindBufferMemory",
            Point::MapMemory => "vkMapMemory",
            Point::QueueSubmit => "vkQueueSubmit",
            Point::WaitForFences => "vkWaitForFences",
            Point::WaitSemaphores => "vkWaitSemaphores",
            Point::CreateCommandPool => "vkCreateCommandPool",
            Point::AllocateCommandBuffers => "vkAllocateCommandBuffers",
            Point::CreateFence => "vkCreateFence",
            Point::CreateSemaphore => "vkCreateSemaphore",
            Point::GetMemoryHostPointerProperties => "vkGetMemoryHostPointerPropertiesEXT",
            Point::CreateDescriptorSetLayout => "vkCreateDescriptorSetLayout",
            Point::CreatePipelineLayout => "vkCreatePipelineLayout",
            Point::CreateShaderModule => "vkCreateShaderModule",
            Point::CreateComputePipelines => "vkCreateComputePipelines",
            Point::CreateDescriptorPool => "vkCreateDescriptorPool",
            Point::AllocateDescriptorSets => "vkAllocateDescriptorSets",
            Point::QueueWaitIdle => "vkQueueWaitIdle",
            Point::DeviceWaitIdle => "vkDeviceWaitIdle",
        }
    }
}

#[cfg(feature = "fault-injection")]
mod imp {
    use super::Point;
    use ash::vk;
    use std::cell::RefCell;
    use std::collections::HashMap;

    #[derive(Default)]
    struct State {
        armed: Option<(Point, u64, vk::Result)>,
        calls: HashMap<Point, u64>,
        fired: bool,
    }

    thread_local! {
        static STATE: RefCell<State> = RefCell::new(State::default());
    }

    pub fn check(point: Point) -> Result<(), vk::Result> {
        STATE.with(|s| {
            let mut s = s.borrow_mut();
            let n = s.calls.entry(point).or_insert(0);
            let this = *n;
            *n += 1;
            match s.armed {
                Some((p, nth, code)) if p == point && nth == this => {
                    s.armed = None;
                    s.fired = true;
                    Err(code)
                }
                _ => Ok(()),
            }
        })
    }

    /// Arms a fault: the `nth` (0-based) call to `point` on this thread from now fails with
    /// `code`. Resets this thread's call counts and the fired flag.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::fault::{self, Point};
    /// use vkhost::{Error, vk};
    ///
    /// let dev = vkhost::Device::open_default()?;
    /// // The next vkAllocateMemory on this thread fails as if the device were full.
    /// fault::inject(Point::AllocateMemory, 0, vk::Result::ERROR_OUT_OF_DEVICE_MEMORY);
    /// assert_eq!(dev.alloc_buffer(4096).unwrap_err(), Error::OutOfDeviceMemory);
    /// assert!(fault::disarm());
    /// // Disarmed: the same call succeeds.
    /// assert_eq!(dev.alloc_buffer(4096)?.len(), 4096);
    /// # Ok(()) }
    /// ```
    pub fn inject(point: Point, nth: u64, code: vk::Result) {
        STATE.with(|s| {
            let mut s = s.borrow_mut();
            s.calls.clear();
            s.fired = false;
            s.armed = Some((point, nth, code));
        })
    }

    /// Disarms this thread's fault and clears its call counts; returns whether the armed fault
    /// fired since `inject`.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::fault::{self, Point};
    /// use vkhost::vk;
    ///
    /// let dev = vkhost::Device::open_default()?;
    /// // Armed for the 1000th call, which never comes: the fault did not fire.
    /// fault::inject(Point::CreateBuffer, 999, vk::Result::ERROR_OUT_OF_HOST_MEMORY);
    /// dev.alloc_buffer(64)?;
    /// assert!(!fault::disarm());
    /// assert_eq!(fault::calls(Point::CreateBuffer), 0, "disarm clears the counts");
    /// # Ok(()) }
    /// ```
    pub fn disarm() -> bool {
        STATE.with(|s| {
            let mut s = s.borrow_mut();
            s.armed = None;
            s.calls.clear();
            std::mem::take(&mut s.fired)
        })
    }

    /// Calls to `point` on this thread since the last `inject` or `disarm`.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::fault::{self, Point};
    ///
    /// // Device buffers in VRAM that is not mapped: one vkCreateBuffer, one vkAllocateMemory.
    /// let opts = vkhost::OpenOptions { bar_writes: vkhost::BarWrites::Off, ..Default::default() };
    /// let dev = vkhost::Device::open_default_with(&opts)?;
    /// fault::disarm();
    /// let buf = dev.alloc_buffer(64)?;
    /// assert_eq!(fault::calls(Point::CreateBuffer), 1);
    /// assert_eq!(fault::calls(Point::AllocateMemory), 1);
    /// # drop(buf);
    /// # Ok(()) }
    /// ```
    pub fn calls(point: Point) -> u64 {
        STATE.with(|s| s.borrow().calls.get(&point).copied().unwrap_or(0))
    }
}

#[cfg(feature = "fault-injection")]
pub use imp::{calls, disarm, inject};

/// Called before each guarded entry point; fails only when a test armed this call.
#[inline(always)]
pub(crate) fn check(point: Point) -> Result<(), vk::Result> {
    #[cfg(feature = "fault-injection")]
    {
        imp::check(point)
    }
    #[cfg(not(feature = "fault-injection"))]
    {
        let _ = point;
        Ok(())
    }
}
