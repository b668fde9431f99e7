//! Opening the pair: a wgpu device whose VkDevice has VK_EXT_external_memory_host, and vkhost's
//! borrowed device over the same VkDevice.
//!
//! wgpu 24 has no hook to add a device extension to its own `request_device`, so the VkDevice is
//! created here exactly as wgpu-hal's `Adapter::open` creates it (queue family 0, queue 0, the
//! extensions `required_device_extensions` gives for the requested features, the Vulkan
//! features `physical_device_features` gives for those), plus VK_EXT_external_memory_host, and
//! handed to wgpu-hal with `Adapter::device_from_raw` and to wgpu with
//! `Adapter::create_device_from_hal`. wgpu owns the VkDevice (no drop callback) and its queue.
//!
//! vkhost wraps it with [`vkhost::Device::from_raw_borrowed`], the mode without queues: vkhost
//! never touches a VkQueue nor calls vkDeviceWaitIdle there, so it can never submit on wgpu's
//! queue behind wgpu's lock. Everything vkhost keeps on this device (registry, imports, pinned
//! blocks) needs only the VkDevice. Its own copies, streams and kernels are `Unsupported`; the
//! device work is wgpu's (see [`crate::Scope`]).
//!
//! Lifetimes: the vkhost device keeps a clone of the `wgpu::Device` ([`vkhost::Device::keep_alive`])
//! and drops it after its teardown, so the VkDevice (and the VkInstance, which wgpu-hal's device
//! holds) outlive every vkhost handle, including a `PinnedBuffer` or a `Registration` that
//! outlives the [`Interop`]; the wgpu device outlives nothing of vkhost's that it needs.

use crate::{Error, Result};
use std::ffi::{CStr, c_char};
use vkhost::ash::{self, vk};
use wgpu::hal::api::Vulkan;

const EXTERNAL_MEMORY_HOST: &CStr = ash::ext::external_memory_host::NAME;

/// How [`Interop::open`] opens the pair.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost_wgpu::Result<()> {
/// use vkhost_wgpu::{Interop, Options, vkhost, wgpu};
/// let opts = Options {
///     device: wgpu::DeviceDescriptor { label: Some("vkhost interop"), ..Default::default() },
///     vkhost: vkhost::OpenOptions { import: vkhost::ImportPolicy::Auto, ..Default::default() },
///     ..Default::default()
/// };
/// let interop = Interop::open(&opts)?;
/// assert!(interop.vkhost().host_registration().is_ok()); // imports on
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Options<'a> {
    /// The wgpu instance's flags. `wgpu::InstanceFlags::VALIDATION` turns the Khronos
    /// validation layer on for the device both wgpu and vkhost use; with
    /// `wgpu::InstanceFlags::DEBUG` too, wgpu-hal installs a debug messenger and logs the layer's
    /// messages through `log` (errors at `Error` level). `VALIDATION` alone (what
    /// `WGPU_VALIDATION=1` gives a release build) installs none: the layer prints its messages to
    /// stdout and `log` sees nothing. Default:
    /// `wgpu::InstanceFlags::from_build_config().with_env()` (validation in debug builds;
    /// `WGPU_VALIDATION=1` and the other `WGPU_*` variables override).
    pub instance_flags: wgpu::InstanceFlags,
    /// Features, limits and memory hints of the wgpu device (default: none, WebGPU's default
    /// limits). A `HostBuffer` binds at offset 0, so no offset-alignment limit matters to it.
    pub device: wgpu::DeviceDescriptor<'a>,
    /// vkhost's options. On a borrowed device those of registrations and pinned blocks matter
    /// (`import`, `max_import_piece`, `pinned_huge_min`, `pinned_cache`); the others, about
    /// vkhost's own copies, streams and kernels, do not, but are still checked
    /// ([`vkhost::OpenOptions::validate`]: a value it refuses, from a `VKHOST_*` variable too,
    /// makes the open fail with `Error::Vkhost(InvalidArgument)`).
    pub vkhost: vkhost::OpenOptions,
}

impl Default for Options<'_> {
    fn default() -> Self {
        Options {
            instance_flags: wgpu::InstanceFlags::from_build_config().with_env(),
            device: wgpu::DeviceDescriptor::default(),
            vkhost: vkhost::OpenOptions::default(),
        }
    }
}

/// A wgpu device and queue, and a vkhost [`Device`](vkhost::Device) over the same VkDevice.
///
/// Registered and pinned memory of [`Interop::vkhost`] becomes wgpu storage buffers inside
/// [`Interop::scope`]. Cheap to share: every part is a handle (`Send + Sync`). Dropping it drops
/// the handles; the VkDevice goes when the last of them (wgpu's and vkhost's) is gone.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost_wgpu::Result<()> {
/// use vkhost_wgpu::{Interop, wgpu};
/// let interop = Interop::open(&Default::default())?;
/// let info = interop.adapter().get_info();
/// println!("{} ({:?}): {interop:?}", info.name, info.device_type);
/// assert!(interop.vkhost().is_borrowed()); // vkhost over wgpu's VkDevice, without queues
/// let shared = std::sync::Arc::new(interop); // Send + Sync
/// std::thread::spawn(move || {
///     shared.device().poll(wgpu::Maintain::Poll);
/// })
/// .join()
/// .unwrap();
/// # Ok(()) }
/// ```
pub struct Interop {
    // Drop order is field order: vkhost's handle first. (Its device also holds a clone of
    // `device`, so the order is not what keeps the VkDevice alive; see the module docs.)
    pub(crate) vkhost: vkhost::Device,
    /// The VkDevice's function table, for the buffers [`crate::Scope`] creates and binds.
    pub(crate) raw: ash::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) device: wgpu::Device,
    adapter: wgpu::Adapter,
    /// VkMemoryRequirements::alignment of a buffer over imported host memory.
    alignment: u64,
}

impl std::fmt::Debug for Interop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interop").field("adapter", &self.adapter.get_info().name).field("vkhost", &self.vkhost).finish()
    }
}

impl Interop {
    /// Creates a Vulkan-only wgpu instance with `opts.instance_flags`, picks an adapter
    /// ([`Interop::pick_adapter`]) and opens the pair on it ([`Interop::open_adapter`]).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost_wgpu::Result<()> {
    /// use vkhost_wgpu::{Interop, Options, wgpu};
    /// let interop = Interop::open(&Options::default())?;
    /// assert_eq!(interop.adapter().get_info().backend, wgpu::Backend::Vulkan);
    /// # Ok(()) }
    /// ```
    pub fn open(opts: &Options<'_>) -> Result<Interop> {
        let instance = wgpu::Instance::new(&wgpu::InstanceDescriptor {
            backends: wgpu::Backends::VULKAN,
            flags: opts.instance_flags,
            ..Default::default()
        });
        let adapter = Self::pick_adapter(&instance)?;
        Self::open_adapter(&adapter, opts)
    }

    /// The adapter [`Interop::open`] uses among `instance`'s Vulkan adapters: the one at
    /// physical-device index `VKHOST_DEVICE` when that is set (as vkhost's
    /// `Device::open_default`; `InvalidArgument` when it is not an index, one that is not UTF-8
    /// included), else the first that [`Interop::supports`], discrete before integrated before
    /// virtual before CPU.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost_wgpu::Result<()> {
    /// use vkhost_wgpu::{Interop, Options, wgpu};
    /// let instance = wgpu::Instance::new(&wgpu::InstanceDescriptor { backends: wgpu::Backends::VULKAN, ..Default::default() });
    /// let adapter = Interop::pick_adapter(&instance)?;
    /// assert_eq!(Interop::supports(&adapter), Ok(()));
    /// let interop = Interop::open_adapter(&adapter, &Options::default())?;
    /// # Ok(()) }
    /// ```
    pub fn pick_adapter(instance: &wgpu::Instance) -> Result<wgpu::Adapter> {
        let adapters = instance.enumerate_adapters(wgpu::Backends::VULKAN);
        if adapters.is_empty() {
            return Err(Error::NoAdapter { reason: "wgpu found no Vulkan adapter".into() });
        }
        // `var_os`, as vkhost reads it: a value that is not UTF-8 is set, and no index (with
        // `std::env::var` it read as unset, and the default adapter opened).
        if let Some(v) = std::env::var_os("VKHOST_DEVICE") {
            let v = v.to_string_lossy();
            let want = v.trim().parse::<usize>().map_err(|_| Error::invalid(format!("VKHOST_DEVICE={v:?} is not an index")))?;
            let a = adapters
                .into_iter()
                .find(|a| physical_index(a) == Some(want))
                .ok_or_else(|| Error::NoAdapter { reason: format!("wgpu exposes no adapter at VKHOST_DEVICE={want}") })?;
            return match Self::supports(&a) {
                Ok(()) => Ok(a),
                Err(why) => Err(Error::NoAdapter { reason: format!("VKHOST_DEVICE={want} ({}): {why}", a.get_info().name) }),
            };
        }
        let rank = |a: &wgpu::Adapter| match a.get_info().device_type {
            wgpu::DeviceType::DiscreteGpu => 0,
            wgpu::DeviceType::IntegratedGpu => 1,
            wgpu::DeviceType::VirtualGpu => 2,
            wgpu::DeviceType::Cpu => 3,
            wgpu::DeviceType::Other => 4,
        };
        let mut why = Vec::new();
        let mut ok: Vec<wgpu::Adapter> = Vec::new();
        for a in adapters {
            match Self::supports(&a) {
                Ok(()) => ok.push(a),
                Err(e) => why.push(format!("{}: {e}", a.get_info().name)),
            }
        }
        ok.sort_by_key(rank);
        ok.into_iter().next().ok_or_else(|| Error::NoAdapter { reason: why.join("; ") })
    }

    /// Whether the pair can be opened on `adapter`: a Vulkan adapter of version 1.1 or later
    /// offering VK_EXT_external_memory_host. `Err` says what is missing.
    ///
    /// # Example
    ///
    /// ```
    /// use vkhost_wgpu::{Interop, wgpu};
    /// let instance = wgpu::Instance::new(&wgpu::InstanceDescriptor { backends: wgpu::Backends::VULKAN, ..Default::default() });
    /// let usable = instance
    ///     .enumerate_adapters(wgpu::Backends::VULKAN)
    ///     .iter()
    ///     .filter(|a| match Interop::supports(a) {
    ///         Ok(()) => true,
    ///         Err(why) => {
    ///             println!("{}: {why}", a.get_info().name);
    ///             false
    ///         }
    ///     })
    ///     .count();
    /// assert!(usable >= 1);
    /// ```
    pub fn supports(adapter: &wgpu::Adapter) -> std::result::Result<(), String> {
        // SAFETY: the callback only reads the adapter's capabilities; it destroys nothing.
        unsafe {
            adapter.as_hal::<Vulkan, _, _>(|hal| {
                let hal = hal.ok_or("not a Vulkan adapter")?;
                let caps = hal.physical_device_capabilities();
                let device_version = caps.properties().api_version;
                if device_version < vk::API_VERSION_1_1 {
                    return Err("Vulkan 1.1 is needed (VK_KHR_external_memory is core there)".to_string());
                }
                // vkhost reads the device's facts with the core calls of its version up to 1.2
                // (`Device::from_raw_borrowed`): wgpu's instance must be that recent too.
                let minor = |v: u32| (vk::api_version_major(v), vk::api_version_minor(v));
                let instance = hal.shared_instance().instance_api_version();
                if minor(instance) < minor(device_version).min((1, 2)) {
                    let (a, b) = minor(instance);
                    return Err(format!("wgpu's Vulkan instance is version {a}.{b}, older than the device's (up to 1.2)"));
                }
                if !caps.supports_extension(EXTERNAL_MEMORY_HOST) {
                    return Err("VK_EXT_external_memory_host is not offered".to_string());
                }
                Ok(())
            })
        }
    }

    /// Opens the pair on `adapter` (which must be a Vulkan adapter that
    /// [`Interop::supports`]): the wgpu device with `opts.device`'s features and limits and
    /// VK_EXT_external_memory_host, and vkhost's borrowed device over it with `opts.vkhost`.
    /// `opts.instance_flags` is not used: the adapter's instance already exists.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost_wgpu::Result<()> {
    /// use vkhost_wgpu::{Interop, Options, wgpu};
    /// let instance = wgpu::Instance::new(&wgpu::InstanceDescriptor { backends: wgpu::Backends::VULKAN, ..Default::default() });
    /// let adapter = Interop::pick_adapter(&instance)?;
    /// let opts = Options { device: wgpu::DeviceDescriptor { label: Some("compute"), ..Default::default() }, ..Default::default() };
    /// let interop = Interop::open_adapter(&adapter, &opts)?;
    /// assert_eq!(interop.adapter().get_info(), adapter.get_info());
    /// # Ok(()) }
    /// ```
    pub fn open_adapter(adapter: &wgpu::Adapter, opts: &Options<'_>) -> Result<Interop> {
        Self::supports(adapter).map_err(Error::unsupported)?;
        let desc = &opts.device;
        // `create_device_from_hal` (unlike `request_device`) checks neither against the adapter:
        // a limit beyond the hardware would let wgpu accept shaders and dispatches that Vulkan
        // does not allow.
        let missing = desc.required_features - adapter.features();
        if !missing.is_empty() {
            return Err(Error::unsupported(format!("features {missing:?} are not offered by the adapter")));
        }
        let mut over = Vec::new();
        desc.required_limits.check_limits_with_fail_fn(&adapter.limits(), false, |name, want, have| {
            over.push(format!("{name}: {want} requested, the adapter allows {have}"))
        });
        if !over.is_empty() {
            return Err(Error::unsupported(format!("limits beyond the adapter: {}", over.join("; "))));
        }
        // SAFETY: `create_hal_device` creates a VkDevice from this adapter and gives it to
        // wgpu-hal, which owns it from then on; it destroys nothing of the adapter's.
        let open = unsafe { adapter.as_hal::<Vulkan, _, _>(|hal| create_hal_device(hal, desc)) }?;
        // SAFETY: `open` was made from this adapter's hal adapter with exactly
        // `desc.required_features`.
        let (device, queue) = unsafe { adapter.create_device_from_hal(open, desc, None) }?;
        // SAFETY: only clones handles and function tables; the callbacks destroy nothing.
        let inst = unsafe {
            adapter.as_hal::<Vulkan, _, _>(|a| {
                a.map(|a| (a.shared_instance().entry().clone(), a.shared_instance().raw_instance().clone(), a.raw_physical_device()))
            })
        };
        // SAFETY: as above.
        let raw = unsafe { device.as_hal::<Vulkan, _, _>(|d| d.map(|d| d.raw_device().clone())) };
        let (Some((entry, instance, physical_device)), Some(raw)) = (inst, raw) else {
            return Err(Error::unsupported("not a Vulkan adapter"));
        };
        let borrowed = vkhost::BorrowedDevice { entry, instance, physical_device, device: raw.clone(), external_memory_host: true };
        // SAFETY: the handles are wgpu's, valid while the wgpu device lives, which the vkhost
        // device keeps (keep_alive below) until after its teardown; nothing escapes before that
        // call. VK_EXT_external_memory_host was enabled by `create_hal_device`; the instance's
        // version is the device's up to 1.2 (`supports`, checked by `open`). vkhost takes no
        // queue, so wgpu's queue stays wgpu's alone. Device work naming vkhost's memory is only
        // recorded inside `Interop::scope`, which completes it before the memory can go (the
        // scope holds the vkhost device, so `destroy` is Busy meanwhile).
        let vk = unsafe { vkhost::Device::from_raw_borrowed(borrowed, &opts.vkhost) }?;
        vk.keep_alive(Box::new(device.clone()));
        let alignment = import_alignment(&raw)?;
        log::debug!("{}: vkhost over wgpu's device on {} (host buffers aligned to {alignment})", vk.id(), adapter.get_info().name);
        Ok(Interop { vkhost: vk, raw, queue, device, adapter: adapter.clone(), alignment })
    }

    /// Where a registration must start for [`crate::Scope::registration`]: its first byte's
    /// address must be a multiple of this (VkMemoryRequirements::alignment of a storage buffer
    /// over imported host memory; 64 on lavapipe). A pinned block starts at a page, which is.
    ///
    /// glibc's `malloc` aligns to 16 bytes (large blocks start 16 bytes into a page), so a
    /// plain `Vec<f32>` usually does not start there: register the aligned run of a slightly
    /// longer vector, from `v.as_ptr().align_offset(alignment)` on.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost_wgpu::Result<()> {
    /// # use vkhost_wgpu::Interop;
    /// let interop = Interop::open(&Default::default())?;
    /// let align = interop.host_buffer_alignment();
    /// assert!(align.is_power_of_two());
    /// // Register the aligned run of a slightly longer vector.
    /// let len = 4096;
    /// let mut bytes = vec![0u8; len + align];
    /// let at = bytes.as_ptr().align_offset(align);
    /// let mut reg = interop.vkhost().register(&mut bytes[at..at + len])?;
    /// interop.scope(|s| s.registration(&mut reg).map(drop))?; // accepted: it starts aligned
    /// # Ok(()) }
    /// ```
    pub fn host_buffer_alignment(&self) -> usize {
        self.alignment as usize
    }

    /// The wgpu device.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost_wgpu::Result<()> {
    /// # use vkhost_wgpu::{Interop, wgpu};
    /// let interop = Interop::open(&Default::default())?;
    /// let buf = interop.device().create_buffer(&wgpu::BufferDescriptor {
    ///     label: None,
    ///     size: 256,
    ///     usage: wgpu::BufferUsages::STORAGE,
    ///     mapped_at_creation: false,
    /// });
    /// assert_eq!(buf.size(), 256);
    /// # Ok(()) }
    /// ```
    pub fn device(&self) -> &wgpu::Device {
        &self.device
    }

    /// The wgpu queue: all device work on this pair goes through it.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost_wgpu::Result<()> {
    /// # use vkhost_wgpu::{Interop, vkhost::PinnedBuffer};
    /// let interop = Interop::open(&Default::default())?;
    /// let mut pinned = PinnedBuffer::new(interop.vkhost(), 4096)?;
    /// interop.scope(|s| -> vkhost_wgpu::Result<()> {
    ///     let buf = s.pinned(&mut pinned)?;
    ///     interop.queue().write_buffer(&buf, 0, &[1, 2, 3, 4]); // submitted by the scope's end
    ///     Ok(())
    /// })?;
    /// assert_eq!(pinned[..4], [1, 2, 3, 4]);
    /// # Ok(()) }
    /// ```
    pub fn queue(&self) -> &wgpu::Queue {
        &self.queue
    }

    /// The wgpu adapter the pair was opened on.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost_wgpu::Result<()> {
    /// # use vkhost_wgpu::{Interop, wgpu};
    /// let interop = Interop::open(&Default::default())?;
    /// assert_eq!(interop.adapter().get_info().backend, wgpu::Backend::Vulkan);
    /// assert_eq!(Interop::supports(interop.adapter()), Ok(()));
    /// # Ok(()) }
    /// ```
    pub fn adapter(&self) -> &wgpu::Adapter {
        &self.adapter
    }

    /// The vkhost device: register memory ([`vkhost::Device::register`]) and allocate pinned
    /// blocks ([`vkhost::PinnedBuffer::new`]) here, then hand them to wgpu in
    /// [`Interop::scope`]. It is a borrowed device without queues: vkhost's own copies,
    /// streams and kernels answer `Unsupported`; wgpu does the device work.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost_wgpu::Result<()> {
    /// use vkhost_wgpu::{Interop, vkhost};
    /// let interop = Interop::open(&Default::default())?;
    /// let dev = interop.vkhost();
    /// let pinned = vkhost::PinnedBuffer::new(dev, 4096)?; // memory for wgpu, in a scope
    /// assert!(dev.is_borrowed());
    /// // vkhost's own device work is refused: wgpu does it.
    /// assert!(matches!(dev.stream(), Err(vkhost::Error::Unsupported { .. })));
    /// # Ok(()) }
    /// ```
    pub fn vkhost(&self) -> &vkhost::Device {
        &self.vkhost
    }
}

/// VkMemoryRequirements::alignment of the buffers `Scope::registration` creates (a probe buffer
/// with their usage and handle type, destroyed at once).
fn import_alignment(raw: &ash::Device) -> Result<u64> {
    let mut ext = vk::ExternalMemoryBufferCreateInfo::default().handle_types(vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT);
    let info = vk::BufferCreateInfo::default()
        .size(4096)
        .usage(crate::scope::VK_USAGE)
        .sharing_mode(vk::SharingMode::EXCLUSIVE)
        .push_next(&mut ext);
    // SAFETY: a valid create info on a live device (VK_EXT_external_memory_host is enabled).
    let b = unsafe { raw.create_buffer(&info, None) }.map_err(|code| Error::Vulkan { call: "vkCreateBuffer", code })?;
    // SAFETY: `b` is live; destroyed once, never used otherwise.
    let req = unsafe {
        let req = raw.get_buffer_memory_requirements(b);
        raw.destroy_buffer(b, None);
        req
    };
    Ok(req.alignment.max(1))
}

/// The adapter's index in vkEnumeratePhysicalDevices, as `VKHOST_DEVICE` counts.
fn physical_index(a: &wgpu::Adapter) -> Option<usize> {
    // SAFETY: enumeration only; the callback destroys nothing.
    unsafe {
        a.as_hal::<Vulkan, _, _>(|hal| {
            let hal = hal?;
            let pds = hal.shared_instance().raw_instance().enumerate_physical_devices().ok()?;
            pds.iter().position(|&p| p == hal.raw_physical_device())
        })
    }
}

/// Creates the VkDevice as wgpu-hal's `Adapter::open` does, with VK_EXT_external_memory_host
/// added, and gives it to wgpu-hal.
fn create_hal_device(hal: Option<&wgpu::hal::vulkan::Adapter>, desc: &wgpu::DeviceDescriptor<'_>) -> Result<wgpu::hal::OpenDevice<Vulkan>> {
    let hal = hal.ok_or_else(|| Error::unsupported("not a Vulkan adapter"))?;
    let features = desc.required_features;
    let mut exts: Vec<&'static CStr> = hal.required_device_extensions(features);
    if !exts.contains(&EXTERNAL_MEMORY_HOST) {
        exts.push(EXTERNAL_MEMORY_HOST);
    }
    let mut phd_features = hal.physical_device_features(&exts, features);
    // Queue family 0, queue 0: what wgpu-hal 24's own `Adapter::open` uses (its adapter
    // checks were made against family 0).
    let family = 0;
    let prio = [1.0f32];
    let qci = [vk::DeviceQueueCreateInfo::default().queue_family_index(family).queue_priorities(&prio)];
    let names: Vec<*const c_char> = exts.iter().map(|e| e.as_ptr()).collect();
    let info = vk::DeviceCreateInfo::default().queue_create_infos(&qci).enabled_extension_names(&names);
    let info = phd_features.add_to_device_create(info);
    // SAFETY: the extensions were read from this physical device (`required_device_extensions`
    // keeps only supported ones; `supports` checked VK_EXT_external_memory_host), the features
    // come from wgpu-hal for them, and family 0 exists on every Vulkan device.
    let raw = unsafe { hal.shared_instance().raw_instance().create_device(hal.raw_physical_device(), &info, None) }
        .map_err(|code| Error::Vulkan { call: "vkCreateDevice", code })?;
    // SAFETY: `raw` was created from this adapter with family 0, `exts` (a superset of
    // `required_device_extensions(features)`) and `physical_device_features(&exts, features)`.
    // No drop callback: wgpu-hal owns the VkDevice from here, and destroys it if this fails.
    let open = unsafe { hal.device_from_raw(raw, None, &exts, features, &desc.memory_hints, family, 0) }?;
    Ok(open)
}
