//! Devices: enumeration, opening (by index, by default, over a caller's Vulkan handles),
//! destroy (tombstones) and release (the handle), facts, validation counts.

use crate::{Fail, Res, arg, ffi, out, vkhost_status};
use std::ffi::{c_char, c_void};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use vkhost::ash::vk::{self, Handle};
use vkhost::{Device, DeviceInfo, DeviceType, ImportPolicy, OpenOptions, Ownership, QueueKind, RawDevice};

/// An open device (opaque). Made by the `vkhost_device_open*` functions and
/// `vkhost_device_from_vulkan`; freed by `vkhost_device_release`.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
let mut dev: *mut vkhost_device = null_mut();
// SAFETY: `dev` is valid for the write; the handle is released once and not used after.
unsafe {
    assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
    assert!(!dev.is_null());
    assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
pub struct vkhost_device {
    pub(crate) dev: Device,
}

/// The kind of a physical device.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
use vkhost_device_type::*;
let mut info = MaybeUninit::<vkhost_device_info>::uninit();
// SAFETY: `info` is valid for the write, and read only after VKHOST_OK.
let info = unsafe {
    assert_eq!(vkhost_device_enumerate(0, info.as_mut_ptr()), VKHOST_OK);
    info.assume_init()
};
let gpu = match info.device_type {
    VKHOST_DEVICE_DISCRETE | VKHOST_DEVICE_INTEGRATED | VKHOST_DEVICE_VIRTUAL => true,
    VKHOST_DEVICE_CPU | VKHOST_DEVICE_OTHER => false,
};
assert_eq!(gpu, (info.device_type as u32) < VKHOST_DEVICE_CPU as u32);
```
"#
)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum vkhost_device_type {
    /// A separate GPU.
    VKHOST_DEVICE_DISCRETE = 0,
    /// A GPU sharing the CPU's memory.
    VKHOST_DEVICE_INTEGRATED = 1,
    /// A virtualized GPU.
    VKHOST_DEVICE_VIRTUAL = 2,
    /// Runs on the CPU (lavapipe).
    VKHOST_DEVICE_CPU = 3,
    /// Anything else.
    VKHOST_DEVICE_OTHER = 4,
}

/// Length of the string fields of `vkhost_device_info`, NUL included.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
let mut info = MaybeUninit::<vkhost_device_info>::uninit();
// SAFETY: `info` is valid for the write, and read only after VKHOST_OK.
let info = unsafe {
    assert_eq!(vkhost_device_enumerate(0, info.as_mut_ptr()), VKHOST_OK);
    info.assume_init()
};
assert_eq!(info.name.len(), VKHOST_NAME_LEN);
// SAFETY: vkhost NUL-terminates the name within its VKHOST_NAME_LEN bytes.
let name = unsafe { std::ffi::CStr::from_ptr(info.name.as_ptr()) };
assert!(name.count_bytes() < VKHOST_NAME_LEN);
```
"#
)]
pub const VKHOST_NAME_LEN: usize = 256;

/// What a physical device is and offers (`vkhost_device_enumerate`, `vkhost_device_get_info`).
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
let mut info = MaybeUninit::<vkhost_device_info>::uninit();
// SAFETY: `info` is valid for the write, and read only after VKHOST_OK.
let info = unsafe {
    assert_eq!(vkhost_device_enumerate(0, info.as_mut_ptr()), VKHOST_OK);
    info.assume_init()
};
assert_eq!(info.index, 0);
assert!(info.api_major >= 1 && info.max_memory_allocation_size > 0);
// SAFETY: vkhost NUL-terminates the name within the array.
let name = unsafe { std::ffi::CStr::from_ptr(info.name.as_ptr()) };
println!("device 0: {} (Vulkan {}.{})", name.to_string_lossy(), info.api_major, info.api_minor);
```
"#
)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct vkhost_device_info {
    /// Index in the loader's enumeration order, as `vkhost_device_open` takes it.
    pub index: usize,
    /// VkPhysicalDeviceProperties::deviceName, NUL-terminated (truncated if longer).
    pub name: [c_char; VKHOST_NAME_LEN],
    /// VkPhysicalDeviceDriverProperties::driverName, NUL-terminated; empty before Vulkan 1.2.
    pub driver_name: [c_char; VKHOST_NAME_LEN],
    /// The kind of device.
    pub device_type: vkhost_device_type,
    /// PCI vendor id (0x10de NVIDIA, 0x1002 AMD, 0x10005 Mesa).
    pub vendor_id: u32,
    /// Vendor-specific device id.
    pub device_id: u32,
    /// Vulkan version the device supports: major.
    pub api_major: u32,
    /// Vulkan version: minor.
    pub api_minor: u32,
    /// Vulkan version: patch.
    pub api_patch: u32,
    /// minImportedHostPointerAlignment when VK_EXT_external_memory_host is offered, else 0.
    pub host_import_alignment: usize,
    /// maxMemoryAllocationSize.
    pub max_memory_allocation_size: u64,
    /// Whether timeline semaphores (needed by streams) are supported.
    pub timeline_semaphore: bool,
}

fn fill_name(dst: &mut [c_char; VKHOST_NAME_LEN], s: &str) {
    let bytes = s.as_bytes();
    let n = bytes.len().min(VKHOST_NAME_LEN - 1);
    for (d, &b) in dst.iter_mut().zip(&bytes[..n]) {
        *d = b as c_char;
    }
    dst[n..].fill(0);
}

impl From<&DeviceInfo> for vkhost_device_info {
    fn from(i: &DeviceInfo) -> Self {
        let mut o = vkhost_device_info {
            index: i.index,
            name: [0; VKHOST_NAME_LEN],
            driver_name: [0; VKHOST_NAME_LEN],
            device_type: match i.device_type {
                DeviceType::Discrete => vkhost_device_type::VKHOST_DEVICE_DISCRETE,
                DeviceType::Integrated => vkhost_device_type::VKHOST_DEVICE_INTEGRATED,
                DeviceType::Virtual => vkhost_device_type::VKHOST_DEVICE_VIRTUAL,
                DeviceType::Cpu => vkhost_device_type::VKHOST_DEVICE_CPU,
                DeviceType::Other => vkhost_device_type::VKHOST_DEVICE_OTHER,
            },
            vendor_id: i.vendor_id,
            device_id: i.device_id,
            api_major: i.api_version.major,
            api_minor: i.api_version.minor,
            api_patch: i.api_version.patch,
            host_import_alignment: i.host_import_alignment.unwrap_or(0),
            max_memory_allocation_size: i.max_memory_allocation_size,
            timeline_semaphore: i.timeline_semaphore,
        };
        fill_name(&mut o.name, &i.name);
        fill_name(&mut o.driver_name, &i.driver_name);
        o
    }
}

/// `vkhost_open_options::import_policy`: import host memory where the device can (default).
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
let mut opts = MaybeUninit::<vkhost_open_options>::uninit();
// SAFETY: `opts`, `dev` and `granule` are valid for the writes; `dev` is released once.
unsafe {
    assert_eq!(vkhost_open_options_default(opts.as_mut_ptr()), VKHOST_OK);
    let mut opts = opts.assume_init();
    opts.import_policy = VKHOST_IMPORT_AUTO; // whatever VKHOST_IMPORT says
    let mut dev = null_mut();
    assert_eq!(vkhost_device_open_with(VKHOST_DEFAULT_DEVICE, &opts, &mut dev), VKHOST_OK);
    let mut granule = 0;
    // VKHOST_OK on a device with VK_EXT_external_memory_host.
    assert_eq!(vkhost_device_registration(dev, &mut granule), VKHOST_OK);
    assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
pub const VKHOST_IMPORT_AUTO: u32 = 0;
/// `vkhost_open_options::import_policy`: never import; `vkhost_register` is
/// `VKHOST_UNSUPPORTED` and copies stage.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
let mut opts = MaybeUninit::<vkhost_open_options>::uninit();
// SAFETY: `opts`, `dev` and `granule` are valid for the writes; `dev` is released once.
unsafe {
    assert_eq!(vkhost_open_options_default(opts.as_mut_ptr()), VKHOST_OK);
    let mut opts = opts.assume_init();
    opts.import_policy = VKHOST_IMPORT_NEVER;
    let mut dev = null_mut();
    assert_eq!(vkhost_device_open_with(VKHOST_DEFAULT_DEVICE, &opts, &mut dev), VKHOST_OK);
    let mut granule = 0;
    assert_eq!(vkhost_device_registration(dev, &mut granule), VKHOST_UNSUPPORTED);
    assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
pub const VKHOST_IMPORT_NEVER: u32 = 1;
/// A queue kind (`vkhost_open_options::copy_queue`, `vkhost_stream_create`): the copy engines
/// where the device has them, else the compute queue.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
// SAFETY: `dev` is a live handle (opened first, released last) and every out-pointer
// points to a local of the type the call writes.
unsafe {
#   let mut dev = null_mut();
#   assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
    let mut stream = null_mut();
    assert_eq!(vkhost_stream_create(dev, VKHOST_QUEUE_COPY, &mut stream), VKHOST_OK);
    assert_eq!(vkhost_stream_synchronize(stream), VKHOST_OK);
    assert_eq!(vkhost_stream_destroy(stream), VKHOST_OK);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
pub const VKHOST_QUEUE_COPY: u32 = 0;
/// A queue kind: the compute queue.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
// SAFETY: `dev` is a live handle (opened first, released last) and every out-pointer
// points to a local of the type the call writes.
unsafe {
#   let mut dev = null_mut();
#   assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
    let mut stream = null_mut();
    assert_eq!(vkhost_stream_create(dev, VKHOST_QUEUE_COMPUTE, &mut stream), VKHOST_OK);
    assert_eq!(vkhost_stream_destroy(stream), VKHOST_OK);
    // Any other value is refused.
    assert_eq!(vkhost_stream_create(dev, 7, &mut stream), VKHOST_INVALID_ARGUMENT);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
pub const VKHOST_QUEUE_COMPUTE: u32 = 1;
/// `vkhost_raw_device::copy_family` when there is no copy-engine family.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
// SAFETY: `dev` is a live handle (opened first, released last) and every out-pointer
// points to a local of the type the call writes.
unsafe {
#   let mut dev = null_mut();
#   assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
    let mut raw = MaybeUninit::<vkhost_raw_device>::uninit();
    assert_eq!(vkhost_device_raw(dev, raw.as_mut_ptr()), VKHOST_OK);
    let raw = raw.assume_init();
    // Copy queues exactly when there is a copy-engine family.
    assert_eq!(raw.copy_family == VKHOST_NO_FAMILY, raw.copy_queue_count == 0);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
pub const VKHOST_NO_FAMILY: u32 = u32::MAX;

/// Options for `vkhost_device_open_with` and `vkhost_device_from_vulkan`. Start from
/// `vkhost_open_options_default`, which reads the environment as the Rust defaults do
/// (`VKHOST_VALIDATION`, `VKHOST_IMPORT`, `VKHOST_COPY_QUEUE`, `VKHOST_STAGING_CHUNK`,
/// `VKHOST_STAGING_SLOTS`, `VKHOST_IMPORT_PIECE`). The Rust options this struct lacks take
/// their defaults, which the same environment variables set (`VKHOST_COPY_PIECE`,
/// `VKHOST_GATHER_REGIONS`, `VKHOST_EARLY_SUBMIT`, ...: README's table).
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
let mut opts = MaybeUninit::<vkhost_open_options>::uninit();
// SAFETY: `opts` and `dev` are valid for the writes; `dev` is released once.
unsafe {
    assert_eq!(vkhost_open_options_default(opts.as_mut_ptr()), VKHOST_OK);
    let mut opts = opts.assume_init();
    opts.staging_chunk = 1 << 20; // 1 MiB chunks,
    opts.staging_slots = 2; // two in flight
    let mut dev = null_mut();
    assert_eq!(vkhost_device_open_with(VKHOST_DEFAULT_DEVICE, &opts, &mut dev), VKHOST_OK);
    assert_eq!(vkhost_device_release(dev), VKHOST_OK);
    opts.staging_slots = 1; // out of range: refused before anything is created
    assert_eq!(vkhost_device_open_with(VKHOST_DEFAULT_DEVICE, &opts, &mut dev), VKHOST_INVALID_ARGUMENT);
}
```
"#
)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct vkhost_open_options {
    /// Nonzero: enable the Khronos validation layer and count its errors. Only where vkhost
    /// creates the instance (`vkhost_device_open*`): `vkhost_device_from_vulkan` ignores it
    /// (the caller's instance has whatever layers the caller enabled, and no error is counted).
    pub validation: u32,
    /// `VKHOST_IMPORT_AUTO` or `VKHOST_IMPORT_NEVER`.
    pub import_policy: u32,
    /// The queue synchronous copies use: `VKHOST_QUEUE_COPY` or `VKHOST_QUEUE_COMPUTE`.
    pub copy_queue: u32,
    /// Bytes per staging chunk: at least 4096 and a multiple of it (default 16 MiB).
    pub staging_chunk: usize,
    /// Staging chunks in flight, 2..=16 (default 3).
    pub staging_slots: usize,
    /// The largest single import or pinned allocation in bytes; larger ranges become several
    /// imports behind one entry. 0: the device's maxMemoryAllocationSize (the default);
    /// otherwise a multiple of 4096, at most that limit.
    pub max_import_piece: usize,
}

impl From<&OpenOptions> for vkhost_open_options {
    fn from(o: &OpenOptions) -> Self {
        vkhost_open_options {
            validation: o.validation as u32,
            import_policy: if o.import == ImportPolicy::Never { VKHOST_IMPORT_NEVER } else { VKHOST_IMPORT_AUTO },
            copy_queue: if o.copy_queue == QueueKind::Compute { VKHOST_QUEUE_COMPUTE } else { VKHOST_QUEUE_COPY },
            staging_chunk: o.staging_chunk,
            staging_slots: o.staging_slots,
            max_import_piece: o.max_import_piece.unwrap_or(0),
        }
    }
}

pub(crate) fn queue_kind(k: u32, what: &str) -> Res<QueueKind> {
    match k {
        VKHOST_QUEUE_COPY => Ok(QueueKind::Copy),
        VKHOST_QUEUE_COMPUTE => Ok(QueueKind::Compute),
        k => Err(vkhost::Error::InvalidArgument { reason: format!("{what} = {k}: not a VKHOST_QUEUE_* value") }.into()),
    }
}

impl vkhost_open_options {
    fn to_rust(self) -> Res<OpenOptions> {
        let import = match self.import_policy {
            VKHOST_IMPORT_AUTO => ImportPolicy::Auto,
            VKHOST_IMPORT_NEVER => ImportPolicy::Never,
            p => {
                let reason = format!("import_policy = {p}: not a VKHOST_IMPORT_* value");
                return Err(vkhost::Error::InvalidArgument { reason }.into());
            }
        };
        Ok(OpenOptions {
            import,
            validation: self.validation != 0,
            staging_chunk: self.staging_chunk,
            staging_slots: self.staging_slots,
            copy_queue: queue_kind(self.copy_queue, "copy_queue")?,
            max_import_piece: (self.max_import_piece != 0).then_some(self.max_import_piece),
            // Every field not in the C struct (its layout is the ABI): the Rust default, which
            // the environment can set (VKHOST_COPY_QUEUE=copy, VKHOST_GATHER_REGIONS, ...).
            ..OpenOptions::default()
        })
    }
}

/// A device's Vulkan handles, for interop both ways: `vkhost_device_raw` fills it from a vkhost
/// device; `vkhost_device_from_vulkan` wraps a device described by it.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
// SAFETY: `dev` is a live handle (opened first, released last) and every out-pointer
// points to a local of the type the call writes.
unsafe {
#   let mut dev = null_mut();
#   assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
    let mut raw = MaybeUninit::<vkhost_raw_device>::uninit();
    assert_eq!(vkhost_device_raw(dev, raw.as_mut_ptr()), VKHOST_OK);
    let raw = raw.assume_init();
    assert!(!raw.instance.is_null() && !raw.physical_device.is_null() && !raw.device.is_null());
    assert!(!raw.get_instance_proc_addr.is_null());
    assert!(raw.copy_queue_count as usize <= raw.copy_queue_indices.len());
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct vkhost_raw_device {
    /// The loader's `vkGetInstanceProcAddr` (a `PFN_vkGetInstanceProcAddr`), or NULL to use
    /// libvulkan.so.1's.
    pub get_instance_proc_addr: *const c_void,
    /// The `VkInstance`.
    pub instance: *mut c_void,
    /// The `VkPhysicalDevice` the device was created from.
    pub physical_device: *mut c_void,
    /// The `VkDevice`.
    pub device: *mut c_void,
    /// A queue family with COMPUTE.
    pub compute_family: u32,
    /// The queue of `compute_family` vkhost may submit to.
    pub compute_queue_index: u32,
    /// A transfer-only family (copy engines), or `VKHOST_NO_FAMILY`.
    pub copy_family: u32,
    /// How many entries of `copy_queue_indices` are used (0..=4; 0 without a copy family).
    pub copy_queue_count: u32,
    /// Queues of `copy_family` vkhost may submit to.
    pub copy_queue_indices: [u32; 4],
    /// Nonzero if VK_EXT_external_memory_host was enabled on the device (else registration is
    /// unsupported and copies stage).
    pub external_memory_host: u32,
}

/// The validation counts of the devices opened through this ABI whose teardown has not ended
/// (for the process-wide count), and the errors of those whose teardown ended. A counter
/// outlives its device, so a teardown's own reports (vkDestroyDevice's objects left
/// undestroyed) are counted whenever it runs: at `vkhost_device_destroy`, or at the release of
/// the last handle that holds the device.
static OPEN: Mutex<Vec<vkhost::ValidationCounter>> = Mutex::new(Vec::new());
static RETIRED_ERRORS: AtomicU64 = AtomicU64::new(0);

/// The counters of devices not yet torn down, after moving the errors of those that were into
/// `RETIRED_ERRORS` (their counts no longer change).
fn open_list() -> std::sync::MutexGuard<'static, Vec<vkhost::ValidationCounter>> {
    let mut open = OPEN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    open.retain(|c| {
        let done = c.is_final();
        if done {
            RETIRED_ERRORS.fetch_add(c.errors(), Ordering::Relaxed);
        }
        !done
    });
    open
}

fn hand_out(dev: Device, o: crate::Out<*mut vkhost_device>) {
    open_list().push(dev.validation_counter());
    // SAFETY: `o` was checked non-NULL; the caller passed a writable `vkhost_device**`.
    unsafe { o.put(Box::into_raw(Box::new(vkhost_device { dev }))) }
}

/// Stores the number of physical devices in `*count`.
///
/// # Safety
/// `count` must be NULL or valid for a write.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
let mut n = 0usize;
// SAFETY: `n` is valid for the write.
let status = unsafe { vkhost_device_count(&mut n) };
assert_eq!(status, VKHOST_OK);
assert!(n >= 1);
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_device_count(count: *mut usize) -> vkhost_status {
    ffi(|| {
        let o = out(count, "count")?;
        let n = vkhost::devices()?.len();
        // SAFETY: forwarded contract.
        unsafe { o.put(n) };
        Ok(())
    })
}

/// Describes physical device `index` into `*info`. `VKHOST_NO_DEVICE` past the last device.
///
/// # Safety
/// `info` must be NULL or valid for a write of `vkhost_device_info`.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
let mut n = 0;
let mut info = MaybeUninit::<vkhost_device_info>::uninit();
// SAFETY: `n` and `info` are valid for the writes; `info` is read only after VKHOST_OK.
unsafe {
    assert_eq!(vkhost_device_count(&mut n), VKHOST_OK);
    for i in 0..n {
        assert_eq!(vkhost_device_enumerate(i, info.as_mut_ptr()), VKHOST_OK);
        assert_eq!(info.assume_init_ref().index, i);
    }
    assert_eq!(vkhost_device_enumerate(n, info.as_mut_ptr()), VKHOST_NO_DEVICE);
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_device_enumerate(index: usize, info: *mut vkhost_device_info) -> vkhost_status {
    ffi(|| {
        let o = out(info, "info")?;
        let all = vkhost::devices()?;
        let i = all.get(index).ok_or(vkhost::Error::NoDevice)?;
        // SAFETY: forwarded contract.
        unsafe { o.put(i.into()) };
        Ok(())
    })
}

/// Fills `*options` with the defaults, which read the environment as `OpenOptions::default()`
/// does (`VKHOST_VALIDATION`, `VKHOST_IMPORT`, `VKHOST_COPY_QUEUE`, `VKHOST_STAGING_CHUNK`,
/// `VKHOST_STAGING_SLOTS`, `VKHOST_IMPORT_PIECE`; the options this struct does not carry,
/// such as the staging threads, come from the environment again when a device is opened).
///
/// # Safety
/// `options` must be NULL or valid for a write.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
let mut opts = MaybeUninit::<vkhost_open_options>::uninit();
// SAFETY: `opts` is valid for the write, and read only after VKHOST_OK.
let opts = unsafe {
    assert_eq!(vkhost_open_options_default(opts.as_mut_ptr()), VKHOST_OK);
    opts.assume_init()
};
assert!(opts.import_policy == VKHOST_IMPORT_AUTO || opts.import_policy == VKHOST_IMPORT_NEVER);
assert!((2..=16).contains(&opts.staging_slots));
assert_eq!(opts.staging_chunk % 4096, 0);
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_open_options_default(options: *mut vkhost_open_options) -> vkhost_status {
    ffi(|| {
        let o = out(options, "options")?;
        // SAFETY: forwarded contract.
        unsafe { o.put((&OpenOptions::default()).into()) };
        Ok(())
    })
}

/// Opens physical device `index` with default options. `VKHOST_NO_DEVICE` if there is none.
///
/// # Safety
/// `device` must be NULL or valid for a write.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
let (mut n, mut dev) = (0, null_mut());
let mut info = MaybeUninit::<vkhost_device_info>::uninit();
// SAFETY: `n`, `dev` and `info` are valid for the writes; `dev` is released once.
unsafe {
    assert_eq!(vkhost_device_open(0, &mut dev), VKHOST_OK);
    assert_eq!(vkhost_device_get_info(dev, info.as_mut_ptr()), VKHOST_OK);
    assert_eq!(info.assume_init().index, 0);
    assert_eq!(vkhost_device_release(dev), VKHOST_OK);
    assert_eq!(vkhost_device_count(&mut n), VKHOST_OK);
    assert_eq!(vkhost_device_open(n, &mut dev), VKHOST_NO_DEVICE); // past the last one
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_device_open(index: usize, device: *mut *mut vkhost_device) -> vkhost_status {
    ffi(|| {
        let o = out(device, "device")?;
        hand_out(Device::open(index)?, o);
        Ok(())
    })
}

/// Opens the preferred device (discrete > integrated > virtual > cpu; `VKHOST_DEVICE=<index>`
/// overrides) with default options.
///
/// # Safety
/// `device` must be NULL or valid for a write.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
let mut dev = null_mut();
let mut granule = 0;
// SAFETY: `dev` and `granule` are valid for the writes; `dev` is released once.
unsafe {
    assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
    // The device vkhost prefers imports host memory where it can.
    let status = vkhost_device_registration(dev, &mut granule);
    assert!(status == VKHOST_OK || status == VKHOST_UNSUPPORTED);
    assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_device_open_default(device: *mut *mut vkhost_device) -> vkhost_status {
    ffi(|| {
        let o = out(device, "device")?;
        hand_out(Device::open_default()?, o);
        Ok(())
    })
}

/// `vkhost_device_open_with`'s index for "the preferred device" (as `vkhost_device_open_default`).
/// In the header as `#define VKHOST_DEFAULT_DEVICE SIZE_MAX` (cbindgen.toml: cbindgen cannot
/// spell `usize::MAX`).
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
let (mut a, mut b) = (null_mut(), null_mut());
let mut opts = MaybeUninit::<vkhost_open_options>::uninit();
let (mut ia, mut ib) = (MaybeUninit::<vkhost_device_info>::uninit(), MaybeUninit::uninit());
// SAFETY: every out-pointer is valid for its write; `a` and `b` are released once.
unsafe {
    assert_eq!(vkhost_open_options_default(opts.as_mut_ptr()), VKHOST_OK);
    assert_eq!(vkhost_device_open_with(VKHOST_DEFAULT_DEVICE, opts.as_ptr(), &mut a), VKHOST_OK);
    assert_eq!(vkhost_device_open_default(&mut b), VKHOST_OK);
    assert_eq!(vkhost_device_get_info(a, ia.as_mut_ptr()), VKHOST_OK);
    assert_eq!(vkhost_device_get_info(b, ib.as_mut_ptr()), VKHOST_OK);
    assert_eq!(ia.assume_init().index, ib.assume_init().index); // the same physical device
    assert_eq!(vkhost_device_release(a), VKHOST_OK);
    assert_eq!(vkhost_device_release(b), VKHOST_OK);
}
```
"#
)]
pub const VKHOST_DEFAULT_DEVICE: usize = usize::MAX;

/// Opens physical device `index` (or the preferred one for `VKHOST_DEFAULT_DEVICE`) with
/// `*options`. Options that fail validation are `VKHOST_INVALID_ARGUMENT`, before anything is
/// created. `options` NULL is `VKHOST_NULL_ARGUMENT` (`vkhost_device_open` opens with the
/// defaults).
///
/// # Safety
/// `options` must be NULL or point to a `vkhost_open_options`; `device` NULL or valid for a
/// write.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
let mut opts = MaybeUninit::<vkhost_open_options>::uninit();
let mut dev = null_mut();
// SAFETY: `opts` and `dev` are valid for the writes; `dev` is released once.
unsafe {
    assert_eq!(vkhost_open_options_default(opts.as_mut_ptr()), VKHOST_OK);
    let mut opts = opts.assume_init();
    opts.copy_queue = VKHOST_QUEUE_COMPUTE; // synchronous copies on the compute queue
    assert_eq!(vkhost_device_open_with(0, &opts, &mut dev), VKHOST_OK);
    assert_eq!(vkhost_device_release(dev), VKHOST_OK);
    opts.import_policy = 5; // not a VKHOST_IMPORT_* value
    assert_eq!(vkhost_device_open_with(0, &opts, &mut dev), VKHOST_INVALID_ARGUMENT);
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_device_open_with(
    index: usize,
    options: *const vkhost_open_options,
    device: *mut *mut vkhost_device,
) -> vkhost_status {
    ffi(|| {
        // SAFETY: forwarded contract.
        let opts = unsafe { arg(options, "options") }?;
        // A NULL out-pointer answers NULL_ARGUMENT whatever the options hold.
        let o = out(device, "device")?;
        let opts = opts.to_rust()?;
        let dev = if index == VKHOST_DEFAULT_DEVICE { Device::open_default_with(&opts)? } else { Device::open_with(index, &opts)? };
        hand_out(dev, o);
        Ok(())
    })
}

/// Wraps a VkDevice created elsewhere (see the Rust `Device::from_raw` for the requirements on
/// its instance's version, its queues and its features). `owned` nonzero: vkhost destroys the VkDevice and the VkInstance
/// at `vkhost_device_destroy` (or when the last handle goes); zero: the caller destroys them,
/// after `vkhost_device_destroy` returned. A call that fails (any status but `VKHOST_OK`)
/// destroys neither, owned or not: they stay the caller's. `options` may be NULL (defaults;
/// its `validation` is ignored here, see `vkhost_open_options`). Queues the
/// physical device cannot have (a family that is not a compute family for the compute queue, an
/// index past its family's queue count, one queue named twice): `VKHOST_INVALID_ARGUMENT`.
///
/// # Safety
/// `raw` must point to a `vkhost_raw_device` whose handles are valid and stay valid until
/// vkhost's destroy returns, made as `Device::from_raw` requires (the instance's apiVersion at
/// least the device's up to 1.2, timelineSemaphore enabled where the device offers it); the
/// caller must not submit to the named queues while vkhost may.
/// `options` NULL or valid; `device` NULL or valid for a write.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
// Wrap the VkDevice of a vkhost device a second time, borrowed (`owned` = 0): the Vulkan
// objects stay the first device's, which destroys them when it is released.
// SAFETY: the handles come from `dev`, which outlives `dev2` (destroyed and released first);
// `dev` submits nothing while `dev2` lives. Out-pointers point to locals of their type.
unsafe {
#   let mut dev = null_mut();
#   assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
    let mut raw = MaybeUninit::<vkhost_raw_device>::uninit();
    assert_eq!(vkhost_device_raw(dev, raw.as_mut_ptr()), VKHOST_OK);
    let mut opts = MaybeUninit::<vkhost_open_options>::uninit();
    assert_eq!(vkhost_open_options_default(opts.as_mut_ptr()), VKHOST_OK);
    let mut opts = opts.assume_init();
    opts.validation = 0; // a layer of `dev`'s is already in the device's dispatch chain
    let mut dev2 = null_mut();
    assert_eq!(vkhost_device_from_vulkan(raw.as_ptr(), 0, &opts, &mut dev2), VKHOST_OK);
    let mut buf = null_mut();
    assert_eq!(vkhost_buffer_alloc(dev2, 4096, &mut buf), VKHOST_OK);
    assert_eq!(vkhost_buffer_free(buf), VKHOST_OK);
    assert_eq!(vkhost_device_destroy(dev2), VKHOST_OK);
    assert_eq!(vkhost_device_release(dev2), VKHOST_OK);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_device_from_vulkan(
    raw: *const vkhost_raw_device,
    owned: u32,
    options: *const vkhost_open_options,
    device: *mut *mut vkhost_device,
) -> vkhost_status {
    ffi(|| {
        // SAFETY: forwarded contract.
        let r = *unsafe { arg(raw, "raw") }?;
        let o = out(device, "device")?;
        let opts = if options.is_null() {
            OpenOptions::default()
        } else {
            // SAFETY: non-NULL, forwarded contract.
            unsafe { &*options }.to_rust()?
        };
        let invalid = |reason: &str| Fail::Lib(vkhost::Error::InvalidArgument { reason: reason.into() });
        if r.instance.is_null() || r.physical_device.is_null() || r.device.is_null() {
            return Err(invalid("raw: instance, physical_device and device must be non-NULL"));
        }
        if r.copy_queue_count as usize > r.copy_queue_indices.len() {
            return Err(invalid("raw: copy_queue_count is more than 4"));
        }
        if (r.copy_family == VKHOST_NO_FAMILY) != (r.copy_queue_count == 0) {
            return Err(invalid("raw: copy_queue_count must be 0 exactly when copy_family is VKHOST_NO_FAMILY"));
        }
        let entry = if r.get_instance_proc_addr.is_null() {
            // SAFETY: loading libvulkan.so.1 runs its initialisers; vkhost itself keeps the
            // loader loaded for the life of the process, so this only takes another reference.
            unsafe { vkhost::ash::Entry::load() }.map_err(|e| Fail::Lib(vkhost::Error::LoaderMissing { reason: e.to_string() }))?
        } else {
            // SAFETY: the caller passes a PFN_vkGetInstanceProcAddr, which has this signature.
            let gipa: vk::PFN_vkGetInstanceProcAddr = unsafe { std::mem::transmute(r.get_instance_proc_addr) };
            // SAFETY: a valid loader entry point per the contract.
            unsafe { vkhost::ash::Entry::from_static_fn(vkhost::ash::StaticFn { get_instance_proc_addr: gipa }) }
        };
        let instance_handle = vk::Instance::from_raw(r.instance as u64);
        // SAFETY: a valid VkInstance created through this loader, per the contract.
        let instance = unsafe { vkhost::ash::Instance::load(entry.static_fn(), instance_handle) };
        // SAFETY: a valid VkDevice created from that instance, per the contract.
        let dev = unsafe { vkhost::ash::Device::load(instance.fp_v1_0(), vk::Device::from_raw(r.device as u64)) };
        let rd = RawDevice {
            entry,
            instance,
            physical_device: vk::PhysicalDevice::from_raw(r.physical_device as u64),
            device: dev,
            compute_family: r.compute_family,
            compute_queue_index: r.compute_queue_index,
            copy_family: (r.copy_family != VKHOST_NO_FAMILY).then_some(r.copy_family),
            copy_queue_indices: r.copy_queue_indices[..r.copy_queue_count as usize].to_vec(),
        };
        let ownership = if owned != 0 { Ownership::Owned } else { Ownership::Borrowed };
        // SAFETY: forwarded contract (valid handles, queues not used concurrently, the
        // extension flag tells the truth).
        let d = unsafe { Device::from_raw(rd, ownership, r.external_memory_host != 0, &opts) }?;
        hand_out(d, o);
        Ok(())
    })
}

/// Fills `*raw` with the device's Vulkan handles, for building pipelines on the same device or
/// wrapping it again with `vkhost_device_from_vulkan`. They are valid until the device is
/// destroyed. `VKHOST_DEVICE_DESTROYED` after `vkhost_device_destroy`.
///
/// # Safety
/// `device` must be NULL or a live handle; `raw` NULL or valid for a write.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
// SAFETY: `dev` is a live handle (opened first, released last) and every out-pointer
// points to a local of the type the call writes.
unsafe {
#   let mut dev = null_mut();
#   assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
    let mut raw = MaybeUninit::<vkhost_raw_device>::uninit();
    assert_eq!(vkhost_device_raw(dev, raw.as_mut_ptr()), VKHOST_OK);
    assert!(!raw.assume_init_ref().device.is_null()); // a VkDevice to build pipelines on
    assert_eq!(vkhost_device_destroy(dev), VKHOST_OK);
    assert_eq!(vkhost_device_raw(dev, raw.as_mut_ptr()), VKHOST_DEVICE_DESTROYED);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_device_raw(device: *const vkhost_device, raw: *mut vkhost_raw_device) -> vkhost_status {
    ffi(|| {
        // SAFETY: forwarded contract.
        let d = unsafe { arg(device, "device") }?;
        let o = out(raw, "raw")?;
        let r = d.dev.raw()?;
        let mut idx = [0u32; 4];
        let n = r.copy_queue_indices.len().min(4);
        idx[..n].copy_from_slice(&r.copy_queue_indices[..n]);
        let v = vkhost_raw_device {
            get_instance_proc_addr: r.entry.static_fn().get_instance_proc_addr as *const c_void,
            instance: r.instance.handle().as_raw() as *mut c_void,
            physical_device: r.physical_device.as_raw() as *mut c_void,
            device: r.device.handle().as_raw() as *mut c_void,
            compute_family: r.compute_family,
            compute_queue_index: r.compute_queue_index,
            copy_family: r.copy_family.unwrap_or(VKHOST_NO_FAMILY),
            copy_queue_count: n as u32,
            copy_queue_indices: idx,
            external_memory_host: d.dev.info().host_import_alignment.is_some() as u32,
        };
        // SAFETY: forwarded contract.
        unsafe { o.put(v) };
        Ok(())
    })
}

/// Describes the device's physical device into `*info` (works after destroy too).
///
/// # Safety
/// `device` must be NULL or a live handle; `info` NULL or valid for a write.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
// SAFETY: `dev` is a live handle (opened first, released last) and every out-pointer
// points to a local of the type the call writes.
unsafe {
#   let mut dev = null_mut();
#   assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
    let mut info = MaybeUninit::<vkhost_device_info>::uninit();
    assert_eq!(vkhost_device_get_info(dev, info.as_mut_ptr()), VKHOST_OK);
    let before = info.assume_init();
    assert_eq!(vkhost_device_destroy(dev), VKHOST_OK);
    assert_eq!(vkhost_device_get_info(dev, info.as_mut_ptr()), VKHOST_OK); // after destroy too
    assert_eq!(info.assume_init().device_id, before.device_id);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_device_get_info(device: *const vkhost_device, info: *mut vkhost_device_info) -> vkhost_status {
    ffi(|| {
        // SAFETY: forwarded contract.
        let d = unsafe { arg(device, "device") }?;
        let o = out(info, "info")?;
        // SAFETY: forwarded contract.
        unsafe { o.put(d.dev.info().into()) };
        Ok(())
    })
}

/// Whether host registration works on this device: `VKHOST_OK` with the import granule (bytes
/// a registration is rounded out to) in `*granule`, or `VKHOST_UNSUPPORTED` with the reason
/// (no VK_EXT_external_memory_host, the import probe at open failed, or the policy is never).
///
/// # Safety
/// `device` must be NULL or a live handle; `granule` NULL or valid for a write.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
// SAFETY: `dev` is a live handle (opened first, released last) and every out-pointer
// points to a local of the type the call writes.
unsafe {
#   let mut dev = null_mut();
#   assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
    let mut granule = 0;
    // VKHOST_OK on a device with VK_EXT_external_memory_host (unless VKHOST_IMPORT=never).
    assert_eq!(vkhost_device_registration(dev, &mut granule), VKHOST_OK);
    assert!(granule.is_power_of_two());
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_device_registration(device: *const vkhost_device, granule: *mut usize) -> vkhost_status {
    ffi(|| {
        // SAFETY: forwarded contract.
        let d = unsafe { arg(device, "device") }?;
        let o = out(granule, "granule")?;
        if d.dev.is_destroyed() {
            return Err(vkhost::Error::DeviceDestroyed.into());
        }
        if d.dev.options().import == ImportPolicy::Never {
            return Err(vkhost::Error::Unsupported { reason: "imports disabled by policy".into() }.into());
        }
        let g = d.dev.host_registration().map_err(|reason| vkhost::Error::Unsupported { reason })?;
        // SAFETY: forwarded contract.
        unsafe { o.put(g) };
        Ok(())
    })
}

/// Waits idle and destroys the Vulkan device and everything it owns. The handle stays valid:
/// late `vkhost_unregister`/`vkhost_free_pinned` of its entries succeed (once, as tombstones),
/// `vkhost_buffer_free`/`vkhost_stream_destroy`/`vkhost_event_release` still free their handles,
/// and other calls answer `VKHOST_DEVICE_DESTROYED`, except those that only read what the
/// handles recorded: `vkhost_device_get_info`, `vkhost_device_is_destroyed`,
/// `vkhost_device_stats`, `vkhost_device_counters`, `vkhost_device_validation_errors`,
/// `vkhost_buffer_len`, `vkhost_device_trim_pinned_cache` (0 bytes: the teardown freed what was
/// kept), and `vkhost_event_wait`/`vkhost_event_query` (the work is done: `VKHOST_OK`, or the
/// error of work that never ran). Idempotent. Pinned blocks are unmapped: do not touch their
/// bytes afterwards.
///
/// # Safety
/// `device` must be NULL or a live handle.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
// SAFETY: `dev` is a live handle (opened first, released last) and every out-pointer
// points to a local of the type the call writes.
unsafe {
#   let mut dev = null_mut();
#   assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
    let mut block = null_mut();
    assert_eq!(vkhost_alloc_pinned(dev, 4096, &mut block), VKHOST_OK);
    assert_eq!(vkhost_device_destroy(dev), VKHOST_OK);
    assert_eq!(vkhost_device_destroy(dev), VKHOST_OK); // idempotent
    let mut buf = null_mut();
    assert_eq!(vkhost_buffer_alloc(dev, 4096, &mut buf), VKHOST_DEVICE_DESTROYED);
    let mut c = vkhost_host_counters::new(); // what the handle recorded still reads
    assert_eq!(vkhost_device_counters(dev, &mut c), VKHOST_OK);
    assert_eq!(vkhost_free_pinned(dev, block), VKHOST_OK); // a tombstone: once
    assert_eq!(vkhost_free_pinned(dev, block), VKHOST_NOT_PINNED);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_device_destroy(device: *const vkhost_device) -> vkhost_status {
    ffi(|| {
        // SAFETY: forwarded contract.
        let d = unsafe { arg(device, "device") }?;
        d.dev.destroy()?;
        Ok(())
    })
}

/// Frees the handle. If it was the last reference to the device (buffers, streams and events
/// hold one too) and the device was not destroyed, this destroys it. The handle must not be
/// used afterwards.
///
/// # Safety
/// `device` must be NULL or a live handle not used by another thread; it is dangling after.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
// SAFETY: each handle is released once and not used after; out-pointers point to locals.
unsafe {
    let (mut dev, mut buf) = (null_mut(), null_mut());
    assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
    assert_eq!(vkhost_buffer_alloc(dev, 4096, &mut buf), VKHOST_OK);
    assert_eq!(vkhost_device_release(dev), VKHOST_OK); // the buffer still holds the device
    let mut len = 0;
    assert_eq!(vkhost_buffer_len(buf, &mut len), VKHOST_OK);
    assert_eq!(vkhost_buffer_free(buf), VKHOST_OK); // the last reference: the device goes
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_device_release(device: *mut vkhost_device) -> vkhost_status {
    ffi(|| {
        if device.is_null() {
            return Err(Fail::Null("device"));
        }
        // SAFETY: made by `Box::into_raw` in `hand_out`, released once per the contract.
        drop(unsafe { Box::from_raw(device) });
        Ok(())
    })
}

/// Stores in `*destroyed` whether `vkhost_device_destroy` has run on the device.
///
/// # Safety
/// `device` must be NULL or a live handle; `destroyed` NULL or valid for a write.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
// SAFETY: `dev` is a live handle (opened first, released last) and every out-pointer
// points to a local of the type the call writes.
unsafe {
#   let mut dev = null_mut();
#   assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
    let mut destroyed = true;
    assert_eq!(vkhost_device_is_destroyed(dev, &mut destroyed), VKHOST_OK);
    assert!(!destroyed);
    assert_eq!(vkhost_device_destroy(dev), VKHOST_OK);
    assert_eq!(vkhost_device_is_destroyed(dev, &mut destroyed), VKHOST_OK);
    assert!(destroyed);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_device_is_destroyed(device: *const vkhost_device, destroyed: *mut bool) -> vkhost_status {
    ffi(|| {
        // SAFETY: forwarded contract.
        let d = unsafe { arg(device, "device") }?;
        let o = out(destroyed, "destroyed")?;
        // SAFETY: forwarded contract.
        unsafe { o.put(d.dev.is_destroyed()) };
        Ok(())
    })
}

/// Frees now, on this thread, the freed pinned blocks the device keeps for reuse (see
/// `vkhost_free_pinned`; `VKHOST_PINNED_CACHE=N|off` sets how many bytes it keeps, 64 MiB on
/// GPUs and none on CPU drivers by default) and stores their bytes in `*bytes`, each block
/// counted in whole 4 KiB pages: 0 when nothing is kept or the device was destroyed (its
/// teardown freed them). Live blocks are untouched;
/// later frees fill the cache again.
///
/// # Safety
/// `device` must be NULL or a live handle; `bytes` NULL or valid for a write.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::ptr::null_mut;
// SAFETY: `dev` is a live handle (opened first, released last) and every out-pointer
// points to a local of the type the call writes.
unsafe {
#   let mut dev = null_mut();
#   assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
    let mut block = null_mut();
    assert_eq!(vkhost_alloc_pinned(dev, 4096, &mut block), VKHOST_OK);
    assert_eq!(vkhost_free_pinned(dev, block), VKHOST_OK); // kept where the device keeps blocks
    let mut bytes = u64::MAX;
    assert_eq!(vkhost_device_trim_pinned_cache(dev, &mut bytes), VKHOST_OK);
    println!("{bytes} bytes were kept"); // 4096 on GPUs; 0 on CPU drivers (cache off by default)
    assert_eq!(vkhost_device_trim_pinned_cache(dev, &mut bytes), VKHOST_OK);
    assert_eq!(bytes, 0); // nothing left
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_device_trim_pinned_cache(device: *const vkhost_device, bytes: *mut u64) -> vkhost_status {
    ffi(|| {
        // SAFETY: forwarded contract.
        let d = unsafe { arg(device, "device") }?;
        let o = out(bytes, "bytes")?;
        let n = d.dev.trim_pinned_cache();
        // SAFETY: forwarded contract.
        unsafe { o.put(n) };
        Ok(())
    })
}

/// Stores the validation-layer errors this device has reported (0 without validation) in
/// `*errors`. Still answers after destroy, so teardown errors count. The layer's reports about
/// a fault of its own (`VkSemaphore-state-timeout`, "most likely a validation bug") are not
/// errors of the program and are not counted (Rust: `Device::validation_layer_faults`).
///
/// # Safety
/// `device` must be NULL or a live handle; `errors` NULL or valid for a write.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
// SAFETY: `dev` is a live handle (opened first, released last) and every out-pointer
// points to a local of the type the call writes.
unsafe {
#   let mut dev = null_mut();
#   assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
    let mut buf = null_mut();
    assert_eq!(vkhost_buffer_alloc(dev, 4096, &mut buf), VKHOST_OK);
    assert_eq!(vkhost_buffer_free(buf), VKHOST_OK);
    let mut errors = u64::MAX;
    assert_eq!(vkhost_device_validation_errors(dev, &mut errors), VKHOST_OK);
    assert_eq!(errors, 0); // with VKHOST_VALIDATION=1 too: the calls above are clean
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_device_validation_errors(device: *const vkhost_device, errors: *mut u64) -> vkhost_status {
    ffi(|| {
        // SAFETY: forwarded contract.
        let d = unsafe { arg(device, "device") }?;
        let o = out(errors, "errors")?;
        // SAFETY: forwarded contract.
        unsafe { o.put(d.dev.validation_errors()) };
        Ok(())
    })
}

/// Validation-layer errors reported so far by every device opened through this ABI, released
/// or not, the reports of each device's teardown included (vkDestroyDevice's objects left
/// undestroyed), whenever it runs: at `vkhost_device_destroy`, or at the release of the last
/// handle that holds the device (a buffer, stream or event holds one). For tests: with
/// validation on, a clean run ends with 0. Leaves the thread's `vkhost_last_error_message` as it
/// was (it cannot fail).
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
// SAFETY: `dev` is a live handle (opened first, released last) and every out-pointer
// points to a local of the type the call writes.
unsafe {
#   let mut dev = null_mut();
#   assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
    let mut block = null_mut();
    assert_eq!(vkhost_alloc_pinned(dev, 4096, &mut block), VKHOST_OK);
    assert_eq!(vkhost_free_pinned(dev, block), VKHOST_OK);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
// Counted over every device of this process, released ones included.
assert_eq!(vkhost_validation_errors(), 0);
```
"#
)]
#[unsafe(no_mangle)]
pub extern "C" fn vkhost_validation_errors() -> u64 {
    // Not through `ffi`, which records a message: a count is no call's outcome, and a caller may
    // read it and the last message in one expression, in either order (replacing the message
    // freed the string lent out). A panic still stops here (0).
    std::panic::catch_unwind(|| {
        // Under the list's lock, which every retirement takes: no counter is counted twice.
        let open = open_list();
        RETIRED_ERRORS.load(Ordering::Relaxed) + open.iter().map(|c| c.errors()).sum::<u64>()
    })
    .unwrap_or_else(|p| {
        crate::drop_payload(p);
        0
    })
}
