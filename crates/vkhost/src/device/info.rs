//! Physical-device facts: what `devices()` returns and `vkhost devices` prints.

use ash::vk;
use std::ffi::CStr;

/// The kind of a physical device.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// use vkhost::DeviceType;
///
/// let dev = vkhost::Device::open_default()?;
/// let uma = match dev.info().device_type {
///     DeviceType::Discrete => false,
///     DeviceType::Integrated | DeviceType::Cpu => true,
///     DeviceType::Virtual | DeviceType::Other => false,
/// };
/// println!("{} shares the CPU's memory: {uma}", dev.info().name);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceType {
    /// A separate GPU (VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU).
    Discrete,
    /// A GPU sharing the CPU's memory (INTEGRATED_GPU).
    Integrated,
    /// A virtualized GPU (VIRTUAL_GPU).
    Virtual,
    /// Runs on the CPU, e.g. lavapipe (CPU).
    Cpu,
    /// Anything else (OTHER).
    Other,
}

impl DeviceType {
    fn from_vk(t: vk::PhysicalDeviceType) -> Self {
        match t {
            vk::PhysicalDeviceType::DISCRETE_GPU => DeviceType::Discrete,
            vk::PhysicalDeviceType::INTEGRATED_GPU => DeviceType::Integrated,
            vk::PhysicalDeviceType::VIRTUAL_GPU => DeviceType::Virtual,
            vk::PhysicalDeviceType::CPU => DeviceType::Cpu,
            _ => DeviceType::Other,
        }
    }

    /// Preference for `Device::open_default`: lower is better.
    pub(crate) fn rank(self) -> u8 {
        match self {
            DeviceType::Discrete => 0,
            DeviceType::Integrated => 1,
            DeviceType::Virtual => 2,
            DeviceType::Cpu => 3,
            DeviceType::Other => 4,
        }
    }

    /// The lower-case name `vkhost devices` prints: "discrete", "cpu", ...
    ///
    /// # Example
    ///
    /// ```
    /// use vkhost::DeviceType;
    ///
    /// assert_eq!(DeviceType::Discrete.as_str(), "discrete");
    /// assert_eq!(DeviceType::Cpu.as_str(), "cpu");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceType::Discrete => "discrete",
            DeviceType::Integrated => "integrated",
            DeviceType::Virtual => "virtual",
            DeviceType::Cpu => "cpu",
            DeviceType::Other => "other",
        }
    }
}

/// A memory heap.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// use vkhost::vk::MemoryHeapFlags;
///
/// let dev = vkhost::Device::open_default()?;
/// let heaps = &dev.info().memory_heaps;
/// // Vulkan requires at least one DEVICE_LOCAL heap.
/// let vram: u64 = heaps.iter().filter(|h| h.flags.contains(MemoryHeapFlags::DEVICE_LOCAL)).map(|h| h.size).sum();
/// assert!(vram > 0);
/// println!("device-local memory: {}", vkhost::fmt_bytes(vram));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryHeap {
    /// Size in bytes.
    pub size: u64,
    /// DEVICE_LOCAL, MULTI_INSTANCE.
    pub flags: vk::MemoryHeapFlags,
}

/// A memory type.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// use vkhost::vk::MemoryPropertyFlags as F;
///
/// let dev = vkhost::Device::open_default()?;
/// let info = dev.info();
/// for (i, t) in info.memory_types.iter().enumerate() {
///     let heap = info.memory_heaps[t.heap_index as usize];
///     println!("type {i}: {:?} on a heap of {}", t.flags, vkhost::fmt_bytes(heap.size));
/// }
/// // Vulkan requires a HOST_VISIBLE|HOST_COHERENT type: pinned memory always has a home.
/// assert!(info.memory_types.iter().any(|t| t.flags.contains(F::HOST_VISIBLE | F::HOST_COHERENT)));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryType {
    /// The heap this type allocates from.
    pub heap_index: u32,
    /// DEVICE_LOCAL, HOST_VISIBLE, HOST_COHERENT, HOST_CACHED, ...
    pub flags: vk::MemoryPropertyFlags,
}

/// A queue family.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// let dev = vkhost::Device::open_default()?;
/// for f in &dev.info().queue_families {
///     println!("family {}: {} queue(s), {:?}", f.index, f.count, f.flags);
/// }
/// assert_eq!(dev.info().queue_families[0].index, 0);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueFamily {
    /// The family index.
    pub index: u32,
    /// GRAPHICS, COMPUTE, TRANSFER, ...
    pub flags: vk::QueueFlags,
    /// How many queues the family has.
    pub count: u32,
}

impl QueueFamily {
    /// TRANSFER without GRAPHICS or COMPUTE: a copy engine.
    ///
    /// # Example
    ///
    /// ```
    /// use vkhost::QueueFamily;
    /// use vkhost::vk::QueueFlags;
    ///
    /// let copy_engine = QueueFamily { index: 1, flags: QueueFlags::TRANSFER, count: 2 };
    /// let compute = QueueFamily { index: 2, flags: QueueFlags::COMPUTE | QueueFlags::TRANSFER, count: 8 };
    /// assert!(copy_engine.is_transfer_only());
    /// assert!(!compute.is_transfer_only());
    /// ```
    pub fn is_transfer_only(&self) -> bool {
        self.flags.contains(vk::QueueFlags::TRANSFER) && !self.flags.intersects(vk::QueueFlags::GRAPHICS | vk::QueueFlags::COMPUTE)
    }
}

/// A Vulkan API version, split.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// use vkhost::ApiVersion;
///
/// let v = ApiVersion { major: 1, minor: 3, patch: 275 };
/// assert_eq!(v.to_string(), "1.3.275");
/// assert!(v > ApiVersion { major: 1, minor: 2, patch: 999 }); // major, then minor, then patch
///
/// let dev = vkhost::Device::open_default()?;
/// let info = dev.info();
/// if info.api_version >= (ApiVersion { major: 1, minor: 2, patch: 0 }) {
///     println!("Vulkan {}: driver {}", info.api_version, info.driver_name);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ApiVersion {
    /// Major version (1).
    pub major: u32,
    /// Minor version.
    pub minor: u32,
    /// Patch version.
    pub patch: u32,
}

impl ApiVersion {
    pub(crate) fn from_raw(v: u32) -> Self {
        ApiVersion { major: vk::api_version_major(v), minor: vk::api_version_minor(v), patch: vk::api_version_patch(v) }
    }
}

impl std::fmt::Display for ApiVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// What a physical device is and offers. One per device, from [`crate::devices`].
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// for info in vkhost::devices()? {
///     println!("{}: {} ({}, Vulkan {}), {} max allocation", info.index, info.name,
///         info.device_type.as_str(), info.api_version, vkhost::fmt_bytes(info.max_memory_allocation_size));
/// }
/// let dev = vkhost::Device::open_default()?;
/// assert!(dev.info().compute_family().is_some()); // vkhost opens only compute-capable devices
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Index in the loader's enumeration order, as taken by `Device::open`.
    pub index: usize,
    /// VkPhysicalDeviceProperties::deviceName.
    pub name: String,
    /// The kind of device.
    pub device_type: DeviceType,
    /// PCI vendor id (0x10de NVIDIA, 0x1002 AMD, 0x10005 Mesa).
    pub vendor_id: u32,
    /// Vendor-specific device id.
    pub device_id: u32,
    /// VkPhysicalDeviceDriverProperties::driverName, empty before Vulkan 1.2.
    pub driver_name: String,
    /// VkPhysicalDeviceDriverProperties::driverInfo, empty before Vulkan 1.2.
    pub driver_info: String,
    /// The Vulkan version the device supports.
    pub api_version: ApiVersion,
    /// The driver's version, encoded as the vendor chooses.
    pub driver_version: u32,
    /// The memory heaps, by index.
    pub memory_heaps: Vec<MemoryHeap>,
    /// The memory types, by index.
    pub memory_types: Vec<MemoryType>,
    /// The queue families, by index.
    pub queue_families: Vec<QueueFamily>,
    /// minImportedHostPointerAlignment when VK_EXT_external_memory_host is offered and the
    /// device can import host allocations as vkhost's buffers (asked with their usage,
    /// vkGetPhysicalDeviceExternalBufferProperties says `IMPORTABLE` and the handle type
    /// compatible; a Vulkan 1.0 device is not asked), else None.
    pub host_import_alignment: Option<usize>,
    /// VkPhysicalDeviceMaintenance3Properties::maxMemoryAllocationSize.
    pub max_memory_allocation_size: u64,
    /// Whether timeline semaphores are supported (Vulkan 1.2 feature), needed by streams.
    pub timeline_semaphore: bool,
    /// VkPhysicalDeviceLimits::minStorageBufferOffsetAlignment: kernel bindings are bound at
    /// offsets aligned down to max(this, 16) (see [`crate::kernel`]).
    pub min_storage_buffer_offset_alignment: u64,
    /// VkPhysicalDeviceLimits::maxStorageBufferRange: the most bytes one kernel binding spans.
    pub max_storage_buffer_range: u32,
    /// VkPhysicalDeviceLimits::maxPushConstantsSize.
    pub max_push_constants_size: u32,
    /// VkPhysicalDeviceLimits::maxComputeWorkGroupCount.
    pub max_compute_work_group_count: [u32; 3],
    /// VkPhysicalDeviceLimits::maxComputeWorkGroupSize: a kernel's workgroup size per
    /// dimension (checked at launch).
    pub max_compute_work_group_size: [u32; 3],
    /// VkPhysicalDeviceLimits::maxComputeWorkGroupInvocations: a kernel's workgroup size, all
    /// dimensions multiplied (checked at launch).
    pub max_compute_work_group_invocations: u32,
    /// VkPhysicalDeviceLimits::maxComputeSharedMemorySize: a kernel's workgroup memory
    /// (checked at launch, where vkhost can size it).
    pub max_compute_shared_memory_size: u32,
    /// The most storage-buffer bindings one kernel may have on this device: the smaller of
    /// maxPerStageDescriptorStorageBuffers and maxDescriptorSetStorageBuffers (checked at
    /// launch).
    pub max_kernel_bindings: u32,
    /// VkPhysicalDevicePushDescriptorPropertiesKHR::maxPushDescriptors (0 where the driver does
    /// not offer push descriptors): the most bindings of a launch in
    /// [`DescriptorMode::Push`](crate::kernel::DescriptorMode::Push) (checked at launch).
    pub max_push_descriptors: u32,
    /// Whether the driver offers VK_KHR_push_descriptor (whether kernel launches use it:
    /// [`Device::descriptor_mode`](crate::Device::descriptor_mode)).
    pub push_descriptor: bool,
}

impl DeviceInfo {
    /// The memory property flags of each type, in order.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let flags = dev.info().memory_type_flags();
    /// assert_eq!(flags.len(), dev.info().memory_types.len());
    /// // The input of the memtype choosers:
    /// assert!(vkhost::memtype::pinned(&flags, u32::MAX).is_some());
    /// # Ok(()) }
    /// ```
    pub fn memory_type_flags(&self) -> Vec<vk::MemoryPropertyFlags> {
        self.memory_types.iter().map(|t| t.flags).collect()
    }

    /// The first transfer-only queue family (a copy engine), if any.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// match dev.info().transfer_family() {
    ///     Some(f) => assert!(f.is_transfer_only() && f.count > 0),
    ///     None => println!("no copy engines: copies run on the compute queue"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn transfer_family(&self) -> Option<&QueueFamily> {
        self.queue_families.iter().find(|f| f.is_transfer_only() && f.count > 0)
    }

    /// The first family that can run compute.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let family = dev.info().compute_family().expect("vkhost opened it, so it computes");
    /// assert!(family.flags.contains(vkhost::vk::QueueFlags::COMPUTE));
    /// assert_eq!(dev.raw()?.compute_family, family.index); // the family vkhost submits to
    /// # Ok(()) }
    /// ```
    pub fn compute_family(&self) -> Option<&QueueFamily> {
        self.queue_families.iter().find(|f| f.flags.contains(vk::QueueFlags::COMPUTE) && f.count > 0)
    }

    /// Whether registered host memory can work on this device, judged from its facts alone:
    /// the import alignment, or why not. `Device::host_registration` adds policy and the probe.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// for info in vkhost::devices()? {
    ///     match info.host_registration() {
    ///         // Imports are rounded out to this granule: at least a page.
    ///         Ok(granule) => assert!(granule >= vkhost::host::page_size()),
    ///         Err(why) => println!("{}: no registration: {why}", info.name),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn host_registration(&self) -> Result<usize, String> {
        let align = self.host_import_alignment.ok_or_else(|| {
            "VK_EXT_external_memory_host is not offered by this device, or it cannot import host allocations as \
             transfer and storage buffers"
                .to_string()
        })?;
        let page = crate::maps::page_size();
        registration_granule(align, page)
    }
}

/// The seed's `check_registrable`: imports are rounded outward to max(page, alignment); an
/// alignment coarser than a page would import memory the process may not own.
pub(crate) fn registration_granule(align: usize, page: usize) -> Result<usize, String> {
    if align == 0 || !align.is_power_of_two() {
        return Err(format!("minImportedHostPointerAlignment {align} is not a power of two"));
    }
    if align > page {
        return Err(format!(
            "minImportedHostPointerAlignment {} is coarser than the page size {}: rounding a range to it \
             would import memory the process may not own",
            fmt_bytes(align as u64),
            fmt_bytes(page as u64)
        ));
    }
    Ok(align.max(page))
}

/// Bytes in binary units: exact multiples as integers, other sizes to one decimal.
///
/// # Example
///
/// ```
/// use vkhost::fmt_bytes;
///
/// assert_eq!(fmt_bytes(4096), "4 KiB");
/// assert_eq!(fmt_bytes(1 << 30), "1 GiB");
/// assert_eq!(fmt_bytes(1536), "1.5 KiB");
/// assert_eq!(fmt_bytes(100), "100 B");
/// ```
pub fn fmt_bytes(n: u64) -> String {
    const UNITS: [(&str, u64); 4] = [("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (u, s) in UNITS {
        if n >= s && n % s == 0 {
            return format!("{} {u}", n / s);
        }
    }
    for (u, s) in UNITS {
        if n >= s {
            return format!("{:.1} {u}", n as f64 / s as f64);
        }
    }
    format!("{n} B")
}

fn cstr_field(raw: &[std::ffi::c_char]) -> String {
    // SAFETY: Vulkan fills these fixed arrays with NUL-terminated UTF-8; the slice bound keeps the
    // read inside the array even if a driver forgot the terminator.
    let bytes = unsafe { std::slice::from_raw_parts(raw.as_ptr().cast::<u8>(), raw.len()) };
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

pub(crate) fn has_extension(instance: &ash::Instance, pd: vk::PhysicalDevice, name: &CStr) -> bool {
    // SAFETY: `pd` was enumerated from `instance`, which is alive.
    let exts = unsafe { instance.enumerate_device_extension_properties(pd) }.unwrap_or_default();
    exts.iter().any(|e| e.extension_name_as_c_str().map(|n| n == name).unwrap_or(false))
}

/// Whether `pd` can import host allocations (`HOST_ALLOCATION_EXT`) as buffers of vkhost's
/// usage, by vkGetPhysicalDeviceExternalBufferProperties (core in Vulkan 1.1: `pd` must be a
/// device of 1.1 or later, of an instance of 1.1 or later, which vkhost's instances and the
/// `from_raw` contract are).
fn host_imports_importable(instance: &ash::Instance, pd: vk::PhysicalDevice) -> bool {
    let info = vk::PhysicalDeviceExternalBufferInfo::default()
        .usage(crate::device::BUFFER_USAGE)
        .handle_type(vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT);
    let mut props = vk::ExternalBufferProperties::default();
    // SAFETY: `pd` was enumerated from `instance`, which is alive; both structs are valid and
    // the query writes `props` only.
    unsafe { instance.get_physical_device_external_buffer_properties(pd, &info, &mut props) };
    importable(&props.external_memory_properties)
}

/// The rule of [`host_imports_importable`]: importable, and the host-allocation handle type
/// among those compatible with it.
fn importable(p: &vk::ExternalMemoryProperties) -> bool {
    p.external_memory_features.contains(vk::ExternalMemoryFeatureFlags::IMPORTABLE)
        && p.compatible_handle_types.contains(vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT)
}

/// Reads a physical device's facts.
pub(crate) fn query(instance: &ash::Instance, pd: vk::PhysicalDevice, index: usize) -> DeviceInfo {
    // SAFETY: `pd` was enumerated from `instance`, which is alive for this call.
    let props = unsafe { instance.get_physical_device_properties(pd) };
    let api = props.api_version;
    let v12 = vk::api_version_major(api) > 1 || vk::api_version_minor(api) >= 2;
    // Offered, and host allocations importable as vkhost's buffers: a buffer created for an
    // import must name only compatible handle types (VUID-VkBufferCreateInfo-pNext-00920). The
    // query is core physical-device functionality of Vulkan 1.1, usable on a device of 1.1 or
    // later; a Vulkan 1.0 device (imports through VK_KHR_external_memory) is not asked.
    let v11 = vk::api_version_major(api) > 1 || vk::api_version_minor(api) >= 1;
    let has_emh = has_extension(instance, pd, ash::ext::external_memory_host::NAME) && (!v11 || host_imports_importable(instance, pd));
    let has_push = has_extension(instance, pd, ash::khr::push_descriptor::NAME);

    let mut driver = vk::PhysicalDeviceDriverProperties::default();
    let mut emh = vk::PhysicalDeviceExternalMemoryHostPropertiesEXT::default();
    let mut maint3 = vk::PhysicalDeviceMaintenance3Properties::default();
    let mut push = vk::PhysicalDevicePushDescriptorPropertiesKHR::default();
    {
        let mut p2 = vk::PhysicalDeviceProperties2::default().push_next(&mut maint3);
        if has_push {
            p2 = p2.push_next(&mut push);
        }
        if v12 {
            p2 = p2.push_next(&mut driver);
        }
        if has_emh {
            p2 = p2.push_next(&mut emh);
        }
        // SAFETY: every struct chained is core in the device's API version or belongs to an
        // extension the device offers (checked above).
        unsafe { instance.get_physical_device_properties2(pd, &mut p2) };
    }

    let mut timeline = vk::PhysicalDeviceTimelineSemaphoreFeatures::default();
    if v12 {
        let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut timeline);
        // SAFETY: the timeline feature struct is core in Vulkan 1.2, which the device reports.
        unsafe { instance.get_physical_device_features2(pd, &mut f2) };
    }

    // SAFETY: as above.
    let mem = unsafe { instance.get_physical_device_memory_properties(pd) };
    // SAFETY: as above.
    let families = unsafe { instance.get_physical_device_queue_family_properties(pd) };

    DeviceInfo {
        index,
        name: cstr_field(&props.device_name),
        device_type: DeviceType::from_vk(props.device_type),
        vendor_id: props.vendor_id,
        device_id: props.device_id,
        driver_name: if v12 { cstr_field(&driver.driver_name) } else { String::new() },
        driver_info: if v12 { cstr_field(&driver.driver_info) } else { String::new() },
        api_version: ApiVersion::from_raw(api),
        driver_version: props.driver_version,
        memory_heaps: mem.memory_heaps[..mem.memory_heap_count as usize]
            .iter()
            .map(|h| MemoryHeap { size: h.size, flags: h.flags })
            .collect(),
        memory_types: mem.memory_types[..mem.memory_type_count as usize]
            .iter()
            .map(|t| MemoryType { heap_index: t.heap_index, flags: t.property_flags })
            .collect(),
        queue_families: families
            .iter()
            .enumerate()
            .map(|(i, f)| QueueFamily { index: i as u32, flags: f.queue_flags, count: f.queue_count })
            .collect(),
        host_import_alignment: has_emh.then_some(emh.min_imported_host_pointer_alignment as usize),
        max_memory_allocation_size: if maint3.max_memory_allocation_size == 0 { u64::MAX } else { maint3.max_memory_allocation_size },
        timeline_semaphore: timeline.timeline_semaphore == vk::TRUE,
        min_storage_buffer_offset_alignment: props.limits.min_storage_buffer_offset_alignment,
        max_storage_buffer_range: props.limits.max_storage_buffer_range,
        max_push_constants_size: props.limits.max_push_constants_size,
        max_compute_work_group_count: props.limits.max_compute_work_group_count,
        max_compute_work_group_size: props.limits.max_compute_work_group_size,
        max_compute_work_group_invocations: props.limits.max_compute_work_group_invocations,
        max_compute_shared_memory_size: props.limits.max_compute_shared_memory_size,
        max_kernel_bindings: props.limits.max_per_stage_descriptor_storage_buffers.min(props.limits.max_descriptor_set_storage_buffers),
        max_push_descriptors: if has_push { push.max_push_descriptors } else { 0 },
        push_descriptor: has_push,
    }
}

/// The device `open_default` picks: discrete > integrated > virtual > cpu > other, first wins.
pub(crate) fn pick_default(infos: &[DeviceInfo]) -> Option<usize> {
    infos.iter().min_by_key(|i| (i.device_type.rank(), i.index)).map(|i| i.index)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(index: usize, t: DeviceType) -> DeviceInfo {
        DeviceInfo {
            index,
            name: String::new(),
            device_type: t,
            vendor_id: 0,
            device_id: 0,
            driver_name: String::new(),
            driver_info: String::new(),
            api_version: ApiVersion { major: 1, minor: 3, patch: 0 },
            driver_version: 0,
            memory_heaps: vec![],
            memory_types: vec![],
            queue_families: vec![],
            host_import_alignment: None,
            max_memory_allocation_size: u64::MAX,
            timeline_semaphore: true,
            min_storage_buffer_offset_alignment: 16,
            max_storage_buffer_range: u32::MAX,
            max_push_constants_size: 128,
            max_compute_work_group_count: [65535; 3],
            max_compute_work_group_size: [1024, 1024, 64],
            max_compute_work_group_invocations: 1024,
            max_compute_shared_memory_size: 32768,
            max_kernel_bindings: 32,
            max_push_descriptors: 32,
            push_descriptor: true,
        }
    }

    #[test]
    fn default_prefers_discrete_then_integrated() {
        let v = vec![info(0, DeviceType::Cpu), info(1, DeviceType::Integrated), info(2, DeviceType::Discrete)];
        assert_eq!(pick_default(&v), Some(2));
        let v = vec![info(0, DeviceType::Cpu), info(1, DeviceType::Virtual)];
        assert_eq!(pick_default(&v), Some(1));
        let v = vec![info(0, DeviceType::Other), info(1, DeviceType::Cpu)];
        assert_eq!(pick_default(&v), Some(1));
        assert_eq!(pick_default(&[]), None);
    }

    #[test]
    fn granule_refuses_coarse_alignment() {
        assert_eq!(registration_granule(4096, 4096), Ok(4096));
        assert_eq!(registration_granule(64, 4096), Ok(4096));
        assert!(registration_granule(65536, 4096).unwrap_err().contains("coarser than the page"));
        assert!(registration_granule(3000, 4096).is_err());
    }

    #[test]
    fn transfer_only_family() {
        let mut i = info(0, DeviceType::Discrete);
        i.queue_families = vec![
            QueueFamily { index: 0, flags: vk::QueueFlags::GRAPHICS | vk::QueueFlags::COMPUTE | vk::QueueFlags::TRANSFER, count: 16 },
            QueueFamily { index: 1, flags: vk::QueueFlags::TRANSFER, count: 2 },
            QueueFamily { index: 2, flags: vk::QueueFlags::COMPUTE | vk::QueueFlags::TRANSFER, count: 8 },
        ];
        assert_eq!(i.transfer_family().unwrap().index, 1);
        assert_eq!(i.compute_family().unwrap().index, 0);
    }

    #[test]
    fn bytes_format() {
        assert_eq!(fmt_bytes(4096), "4 KiB");
        assert_eq!(fmt_bytes(1 << 30), "1 GiB");
        assert_eq!(fmt_bytes(100), "100 B");
        assert_eq!(fmt_bytes(1536), "1.5 KiB");
    }

    /// Host allocations count as importable only when the driver says both: the feature and the
    /// handle type among the compatible ones.
    #[test]
    fn host_imports_need_the_importable_feature_and_a_compatible_handle_type() {
        use ash::vk::{ExternalMemoryFeatureFlags as F, ExternalMemoryHandleTypeFlags as H, ExternalMemoryProperties};
        let p = |f: F, h: H| ExternalMemoryProperties { external_memory_features: f, compatible_handle_types: h, ..Default::default() };
        assert!(importable(&p(F::IMPORTABLE, H::HOST_ALLOCATION_EXT)));
        assert!(importable(&p(F::IMPORTABLE | F::EXPORTABLE, H::HOST_ALLOCATION_EXT | H::OPAQUE_FD)));
        assert!(!importable(&p(F::EXPORTABLE, H::HOST_ALLOCATION_EXT)), "not importable");
        assert!(!importable(&p(F::IMPORTABLE, H::OPAQUE_FD)), "host allocations not compatible");
        assert!(!importable(&p(F::empty(), H::empty())), "nothing");
    }
}
