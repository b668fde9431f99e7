//! Fault injection for tests (cargo feature `fault-injection`).
//!
//! Every Vulkan entry point that can fail in a way a caller must survive goes through
//! `check` first. With the feature on, a test arms a fault with `inject`: the `nth` call
//! (0-based) *on the calling thread* to the named entry point fails with the given code, as if
//! the driver had returned it. Thread-local, so tests running in parallel do not disturb each
//! other. Without the feature, `check` is an empty inline function.

use ash::vk;

/// Entry points that can be made to fail.
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
}

impl Point {
    /// Every point, for sweeps.
    pub const ALL: [Point; 12] = [
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
    ];

    /// The Vulkan name of the entry point.
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
    pub fn disarm() -> bool {
        STATE.with(|s| {
            let mut s = s.borrow_mut();
            s.armed = None;
            s.calls.clear();
            std::mem::take(&mut s.fired)
        })
    }

    /// Calls to `point` on this thread since the last `inject` or `disarm`.
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
