//! The public constructors of [`Device`] (layer 5): a device-layer open, given the import probe
//! (`host::probe::run`) to run on the new device, so that the device layer names no host memory.

use crate::device::{BorrowedDevice, Device, OpenOptions, Ownership, RawDevice};
use crate::error::{Error, Result};

impl Device {
    /// Opens physical device `index` with default options (see [`OpenOptions`]).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open(0)?; // the loader's first device
    /// assert_eq!(dev.info().index, 0);
    /// assert!(matches!(vkhost::Device::open(10_000), Err(vkhost::Error::NoDevice)));
    /// # Ok(()) }
    /// ```
    pub fn open(index: usize) -> Result<Device> {
        Self::open_with(index, &OpenOptions::default())
    }

    /// Opens the preferred device: discrete > integrated > virtual > cpu; `VKHOST_DEVICE=<index>`
    /// overrides.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let buf = dev.alloc_buffer(1 << 20)?;
    /// buf.write(0, &vec![1u8; 1 << 20])?;
    /// dev.destroy()?;
    /// # Ok(()) }
    /// ```
    pub fn open_default() -> Result<Device> {
        Self::open_default_with(&OpenOptions::default())
    }

    /// [`Device::open_default`] with options.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::{Device, OpenOptions};
    ///
    /// let opts = OpenOptions { measure_copy_queues: false, ..Default::default() };
    /// let dev = Device::open_default_with(&opts)?;
    /// assert!(dev.copy_queues().measured.is_none()); // nothing measured at open
    /// # Ok(()) }
    /// ```
    pub fn open_default_with(opts: &OpenOptions) -> Result<Device> {
        let i = Self::default_index()?;
        let r = Self::open_with(i, opts);
        if matches!(r, Err(Error::NoDevice)) && std::env::var_os("VKHOST_DEVICE").is_some() {
            // `NoDevice`, as for `open` of that index; the log says where the index came from
            // and what there is.
            let n = crate::devices().map_or(0, |d| d.len());
            let have = if n == 0 { "there is none".to_owned() } else { format!("indices 0..={}", n - 1) };
            log::warn!("VKHOST_DEVICE={i} names no Vulkan device ({have})");
        }
        r
    }

    /// Opens physical device `index` with `opts`.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::{Device, OpenOptions};
    ///
    /// let info = &vkhost::devices()?[0];
    /// let opts = OpenOptions { staging_chunk: 4 << 20, staging_slots: 2, ..Default::default() };
    /// let dev = Device::open_with(info.index, &opts)?;
    /// assert_eq!(dev.info(), info);
    /// assert_eq!(dev.options().staging_slots, 2);
    /// # Ok(()) }
    /// ```
    pub fn open_with(index: usize, opts: &OpenOptions) -> Result<Device> {
        Self::open_index(index, opts, crate::host::probe::run)
    }

    /// Wraps a VkDevice created elsewhere.
    ///
    /// Requirements on `raw.device`:
    /// - it was created from `raw.physical_device` of `raw.instance` with Vulkan ≥ 1.1, and
    ///   `raw.instance` with an `apiVersion` at least the device's up to 1.2 (vkhost calls the
    ///   core entry points of that version, e.g. vkGetPhysicalDeviceProperties2 and the
    ///   timeline-semaphore calls; an older instance leaves them unloaded: a crash);
    /// - one queue at `raw.compute_queue_index` of `raw.compute_family`, which supports COMPUTE;
    /// - for copies on copy engines, the queues of `raw.copy_family` listed in
    ///   `raw.copy_queue_indices` (TRANSFER without GRAPHICS/COMPUTE); may be empty;
    /// - for `host::register`, VK_EXT_external_memory_host enabled (else registration is
    ///   `Unsupported` and copies stage);
    /// - where the device offers timeline semaphores ([`DeviceInfo::timeline_semaphore`](crate::DeviceInfo::timeline_semaphore)), the
    ///   timelineSemaphore feature enabled: vkhost's synchronous copies (the open-time import
    ///   probe among them) and streams wait on timeline semaphores there.
    ///
    /// Kernel launches ([`crate::kernel`]) on a wrapped device use descriptor sets from
    /// per-stream pools ([`DescriptorMode::Sets`](crate::kernel::DescriptorMode::Sets)): vkhost cannot know whether the caller enabled
    /// VK_KHR_push_descriptor, and needs no extension for them.
    ///
    /// # Safety
    /// Every requirement on `raw.device` listed above holds: an instance older than the
    /// device (up to 1.2) leaves entry points vkhost calls unloaded, a queue the device was not
    /// created with is not a queue (vkGetDeviceQueue), and where the device offers timeline
    /// semaphores vkhost creates them (VUID-VkSemaphoreTypeCreateInfo-timelineSemaphore-03252
    /// without the feature). vkhost checks only what the physical device can tell: the queue
    /// families, their flags and queue counts.
    /// The handles must be valid and stay valid until vkhost's `destroy` or last drop returns.
    /// vkhost submits to the named queues behind its own locks: the caller must not submit to
    /// them concurrently. With `Ownership::Owned` vkhost destroys the device and the instance
    /// (its destroy waits the whole device idle: the caller submits nothing from then on);
    /// with `Borrowed` the caller does, afterwards, and vkhost's destroy waits for vkhost's
    /// queues only: work the caller submitted on its own queues that uses vkhost's buffers
    /// ([`DeviceBuffer::raw`](crate::DeviceBuffer::raw), [`host::find`](crate::host::find))
    /// must be complete before it. A call that returns an error destroys neither, owned or
    /// not: they stay the caller's (a device lost while open probes it too), as does one that
    /// unwinds (a panic of the process's logger on a line logged while it opens).
    /// `external_memory_host` must be true only if that extension was enabled on the device.
    ///
    /// # Example
    ///
    /// ```
    /// use vkhost::{ash, vk, Device, OpenOptions, Ownership, RawDevice};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let info = vkhost::devices()?.into_iter().next().expect("a Vulkan device");
    /// # // SAFETY: loading libvulkan; it stays loaded while `entry` lives.
    /// # let entry = unsafe { ash::Entry::load()? };
    /// # let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_2);
    /// # // SAFETY: a valid create info: no layers, no extensions.
    /// # let instance = unsafe { entry.create_instance(&vk::InstanceCreateInfo::default().application_info(&app), None)? };
    /// # // SAFETY: the instance is alive; vkhost::devices() lists the devices in the loader's order.
    /// # let pd = unsafe { instance.enumerate_physical_devices()? }[info.index];
    /// # let family = info.compute_family().expect("a compute queue family").index;
    /// # let emh = info.host_import_alignment.is_some();
    /// # let exts = if emh { vec![ash::ext::external_memory_host::NAME.as_ptr()] } else { Vec::new() };
    /// # let prio = [1.0f32];
    /// # let queues = [vk::DeviceQueueCreateInfo::default().queue_family_index(family).queue_priorities(&prio)];
    /// # let mut f12 = vk::PhysicalDeviceVulkan12Features::default().timeline_semaphore(info.timeline_semaphore);
    /// # let mut dci = vk::DeviceCreateInfo::default().queue_create_infos(&queues).enabled_extension_names(&exts);
    /// # if info.api_version >= (vkhost::ApiVersion { major: 1, minor: 2, patch: 0 }) {
    /// #     dci = dci.push_next(&mut f12);
    /// # }
    /// # // SAFETY: the queue family, the extension and the feature were all read from `pd`.
    /// # let device = unsafe { instance.create_device(pd, &dci, None)? };
    /// // `entry`, `instance`, `pd` and `device` are the caller's own (a runtime's; setup hidden): one
    /// // queue of the compute family `family`; VK_EXT_external_memory_host (`emh`: whether enabled)
    /// // and timeline semaphores enabled where the device offers them.
    /// let raw = RawDevice {
    ///     entry: entry.clone(),
    ///     instance: instance.clone(),
    ///     physical_device: pd,
    ///     device: device.clone(),
    ///     compute_family: family, // one queue, index 0, created with the device
    ///     compute_queue_index: 0,
    ///     copy_family: None,
    ///     copy_queue_indices: Vec::new(),
    /// };
    /// // SAFETY: the handles are valid and outlive `dev` (destroyed below, before them); nothing else
    /// // submits to the queue meanwhile; `emh` is true only if the extension is enabled on `device`.
    /// let dev = unsafe { Device::from_raw(raw, Ownership::Borrowed, emh, &OpenOptions::default())? };
    /// let buf = dev.alloc_buffer(4096)?;
    /// buf.write(0, &[3; 4096])?; // vkhost submits to the caller's queue
    /// let mut out = vec![0u8; 4096];
    /// buf.read(0, &mut out)?;
    /// assert!(out.iter().all(|&b| b == 3));
    /// drop(buf);
    /// dev.destroy()?;
    /// // SAFETY: vkhost is done with the handles (`Borrowed`): the device goes, then its instance.
    /// unsafe {
    ///     device.destroy_device(None);
    ///     instance.destroy_instance(None);
    /// }
    /// # Ok(()) }
    /// ```
    pub unsafe fn from_raw(raw: RawDevice, ownership: Ownership, external_memory_host: bool, opts: &OpenOptions) -> Result<Device> {
        // SAFETY: forwarded contract.
        unsafe { Self::wrap_raw(raw, ownership, external_memory_host, opts, crate::host::probe::run) }
    }

    /// Wraps a caller's VkDevice **without any of its queues**: the borrowed-device mode, for
    /// runtimes that own their device and queues (an ash backend, wgpu-hal).
    ///
    /// vkhost then keeps the registry and the imports only: [`crate::host::register`],
    /// [`crate::host::find`], [`crate::host::alloc_pinned`], [`crate::PinnedBuffer`],
    /// [`crate::Registration`], tombstones after destroy, and [`Device::alloc_buffer`] (the
    /// buffer's handle only). vkhost submits nothing: its synchronous copies
    /// ([`crate::host::copy_to_device`], `DeviceBuffer::write`/`read`), streams and kernel
    /// launches answer `Error::Unsupported` ("borrowed device without queues: record copies with
    /// host::record_copy"). Copies are the caller's: [`crate::host::record_copy`] records them
    /// into the caller's command buffer and returns a [`crate::host::RecordedCopy`] ticket whose
    /// completion hook (a timeline value or a fence) lets `unregister` wait for them.
    ///
    /// At open, the import probe only registers and unregisters one page (it cannot copy).
    ///
    /// What the caller must have done:
    /// - created `raw.instance` with an `apiVersion` at least the device's up to 1.2 (vkhost
    ///   reads the device's facts with vkGetPhysicalDeviceProperties2, core from 1.1, and
    ///   waits on timeline values with core 1.2 calls), and the device with Vulkan ≥ 1.1;
    /// - enabled VK_EXT_external_memory_host for `register`; set `raw.external_memory_host`
    ///   only if it is enabled (else registration is `Unsupported`; pinned blocks still work);
    /// - enabled the timelineSemaphore feature (Vulkan 1.2), if it uses
    ///   [`crate::host::RecordedCopy::completes_at`]; fences need nothing.
    ///
    /// Buffers vkhost creates here (imports, pinned blocks, device buffers) are
    /// `VK_SHARING_MODE_EXCLUSIVE` with usage TRANSFER_SRC | TRANSFER_DST | STORAGE_BUFFER: the
    /// first queue family that uses one owns it; a second family needs the caller's
    /// queue-family ownership transfer.
    ///
    /// # Safety
    /// - What the caller must have done (above) holds: the instance's and the device's
    ///   versions, and `raw.external_memory_host` true only where the extension is enabled
    ///   (vkhost imports host memory through it).
    /// - The handles must be valid, `raw.physical_device` must be the one `raw.device` was
    ///   created from, and they must stay valid until vkhost's [`Device::destroy`] (or the last
    ///   drop of the device and everything holding it) returns; then the caller destroys them.
    /// - External synchronization: vkhost never touches a VkQueue of this device, nor calls
    ///   vkDeviceWaitIdle (which needs every queue externally synchronized). It waits on the
    ///   caller's semaphores and fences only through vkWaitSemaphores / vkGetSemaphoreCounterValue
    ///   / vkWaitForFences / vkGetFenceStatus, which need no external synchronization; the caller
    ///   must not destroy (or reset, for a fence) an object named by a completion hook until
    ///   vkhost has observed it complete (see [`crate::host::RecordedCopy`]).
    /// - Every command the caller records that names a vkhost buffer outside
    ///   [`crate::host::record_copy`] (for example a [`crate::host::find`] result used in its
    ///   own shader) is outside vkhost's tracking: the caller must complete it before the
    ///   matching `unregister`/`free_pinned`/destroy.
    ///
    /// # Example
    ///
    /// ```
    /// use vkhost::{ash, vk, BorrowedDevice, Device, Error, OpenOptions};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let info = vkhost::devices()?.into_iter().next().expect("a Vulkan device");
    /// # // SAFETY: loading libvulkan; it stays loaded while `entry` lives.
    /// # let entry = unsafe { ash::Entry::load()? };
    /// # let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_2);
    /// # // SAFETY: a valid create info: no layers, no extensions.
    /// # let instance = unsafe { entry.create_instance(&vk::InstanceCreateInfo::default().application_info(&app), None)? };
    /// # // SAFETY: the instance is alive; vkhost::devices() lists the devices in the loader's order.
    /// # let pd = unsafe { instance.enumerate_physical_devices()? }[info.index];
    /// # let family = info.compute_family().expect("a compute queue family").index;
    /// # let emh = info.host_import_alignment.is_some();
    /// # let exts = if emh { vec![ash::ext::external_memory_host::NAME.as_ptr()] } else { Vec::new() };
    /// # let prio = [1.0f32];
    /// # let queues = [vk::DeviceQueueCreateInfo::default().queue_family_index(family).queue_priorities(&prio)];
    /// # let mut f12 = vk::PhysicalDeviceVulkan12Features::default().timeline_semaphore(info.timeline_semaphore);
    /// # let mut dci = vk::DeviceCreateInfo::default().queue_create_infos(&queues).enabled_extension_names(&exts);
    /// # if info.api_version >= (vkhost::ApiVersion { major: 1, minor: 2, patch: 0 }) {
    /// #     dci = dci.push_next(&mut f12);
    /// # }
    /// # // SAFETY: the queue family, the extension and the feature were all read from `pd`.
    /// # let device = unsafe { instance.create_device(pd, &dci, None)? };
    /// // `entry`, `instance`, `pd` and `device` are the caller's own (a runtime's; setup hidden): one
    /// // queue of the compute family `family`; VK_EXT_external_memory_host (`emh`: whether enabled)
    /// // and timeline semaphores enabled where the device offers them.
    /// let raw = BorrowedDevice {
    ///     entry: entry.clone(),
    ///     instance: instance.clone(),
    ///     physical_device: pd,
    ///     device: device.clone(),
    ///     external_memory_host: emh,
    /// };
    /// // SAFETY: the handles are valid and outlive `dev` (destroyed below, before them); vkhost never
    /// // touches the caller's queue; this code records nothing that names vkhost's buffers.
    /// let dev = unsafe { Device::from_raw_borrowed(raw, &OpenOptions::default())? };
    /// // Pinned memory, listed with the VkBuffer the caller's own commands can name:
    /// let pinned = vkhost::PinnedBuffer::new(&dev, 4096)?;
    /// let (buffer, offset) = vkhost::host::find(&dev, pinned.as_ptr(), 4096).expect("listed");
    /// assert!(buffer != vk::Buffer::null() && offset == 0);
    /// // vkhost submits nothing itself: record copies with host::record_copy.
    /// let gpu = dev.alloc_buffer(4096)?;
    /// assert!(matches!(gpu.write(0, &pinned), Err(Error::Unsupported { .. })));
    /// drop((pinned, gpu));
    /// dev.destroy()?;
    /// // SAFETY: vkhost is done with the handles: the device goes, then its instance.
    /// unsafe {
    ///     device.destroy_device(None);
    ///     instance.destroy_instance(None);
    /// }
    /// # Ok(()) }
    /// ```
    pub unsafe fn from_raw_borrowed(raw: BorrowedDevice, opts: &OpenOptions) -> Result<Device> {
        // SAFETY: forwarded contract.
        unsafe { Self::wrap_borrowed(raw, opts, crate::host::probe::run) }
    }
}
