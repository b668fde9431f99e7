//! Loading libvulkan at run time, creating instances, and the validation messenger.
//!
//! The loader is opened once per process (`ash::Entry::load`); a missing loader is
//! `Error::LoaderMissing`, never a panic. Each `Device` owns its own `VkInstance`, so its
//! debug messenger counts only that device's validation errors and its teardown is independent.
//!
//! The messenger callback runs inside the driver stack's call (vkCreateInstance, a submit, ...),
//! where the spec forbids any Vulkan command (VUID-PFN_vkDebugUtilsMessengerCallbackEXT-None-04769)
//! and the loader and layer hold their locks. A user's `log::Log` is safe code that may call
//! vkhost, so the callback never runs it: it counts, then queues the message for a [`LogPump`],
//! one thread per validating instance (named `vkhost-validation-log`), which logs it under the
//! target `vkhost::validation`. A device's teardown, once it released the device's lock, waits
//! until the pump logged everything, at most [`LOG_DRAIN_LIMIT`].
//!
//! Driver workaround (NVIDIA 580, seen on the H200): the ICD loads glvnd's libEGL, which
//! registers a thread-exit destructor. When the last VkInstance is destroyed the loader unloads
//! the ICD; a thread that exits afterwards jumps into unmapped code (SIGSEGV in libEGL.so.1 at
//! thread exit, only with instances created and destroyed on several threads). vkhost therefore
//! keeps one layer-less instance for the life of the process ([`keep_icds_loaded`]), so ICDs
//! are never unloaded. It costs one idle instance and is never destroyed (reachable, not leaked).

use crate::error::{Error, Result, VkResultExt};
use crate::par::fork_generation;
use ash::vk;
use std::ffi::{CStr, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

const VALIDATION_LAYER: &CStr = c"VK_LAYER_KHRONOS_validation";

/// The process's Vulkan loader.
pub(crate) fn entry() -> Result<ash::Entry> {
    static ENTRY: OnceLock<std::result::Result<ash::Entry, String>> = OnceLock::new();
    ENTRY
        .get_or_init(|| {
            // SAFETY: loading libvulkan runs its initialisers; the loader is designed to be
            // loaded by dlopen and kept for the life of the process, which the static does.
            unsafe { ash::Entry::load() }.map_err(|e| e.to_string())
        })
        .clone()
        .map_err(|reason| Error::LoaderMissing { reason })
}

/// Creates, once, an instance that lives as long as the process: it pins the ICD libraries
/// (see the module docs). Failure is ignored: it is a workaround, not a requirement.
fn keep_icds_loaded(entry: &ash::Entry) {
    struct Pinned(#[allow(dead_code)] Option<ash::Instance>);
    static KEEP: OnceLock<Pinned> = OnceLock::new();
    KEEP.get_or_init(|| {
        let app = vk::ApplicationInfo::default().application_name(c"vkhost-keepalive").api_version(vk::API_VERSION_1_1);
        let info = vk::InstanceCreateInfo::default().application_info(&app);
        // SAFETY: a plain instance with no layers or extensions; never destroyed on purpose.
        Pinned(unsafe { entry.create_instance(&info, None) }.ok())
    });
}

/// Counts of validation messages, shared with the messenger callback.
#[derive(Debug)]
pub(crate) struct ValidationCounts {
    pub errors: AtomicU64,
    pub warnings: AtomicU64,
    /// Reports the layer makes about itself ([`LAYER_SELF_REPORTS`]), not counted as errors.
    pub layer_faults: AtomicU64,
    /// The most recent error message, for reports.
    pub last_error: std::sync::Mutex<Option<String>>,
    /// Set once the device's teardown ended (its instance destroyed, where vkhost owned one):
    /// nothing counts into these any more.
    pub done: std::sync::atomic::AtomicBool,
    /// Where the callback queues messages for its [`LogPump`]; `None` without one (no
    /// validation) and after the pump was closed.
    log_queue: Mutex<Option<SyncSender<(log::Level, String)>>>,
    /// Messages counted but not logged because the pump's queue was full.
    log_dropped: AtomicU64,
    /// The fork generation these were made in ([`fork_generation`]).
    fork_gen: u64,
}

impl Default for ValidationCounts {
    fn default() -> Self {
        ValidationCounts {
            errors: AtomicU64::new(0),
            warnings: AtomicU64::new(0),
            layer_faults: AtomicU64::new(0),
            last_error: Mutex::new(None),
            done: Default::default(),
            log_queue: Mutex::new(None),
            log_dropped: AtomicU64::new(0),
            fork_gen: fork_generation(),
        }
    }
}

impl Drop for ValidationCounts {
    fn drop(&mut self) {
        if fork_generation() != self.fork_gen {
            // A forked child: closing the parent's channel takes the channel's lock, which a
            // thread of the parent (the log thread, a callback) may have held at the fork.
            std::mem::forget(self.log_queue.get_mut().unwrap_or_else(PoisonError::into_inner).take());
        }
    }
}

/// How many messages wait for the log thread at most; past that the callback drops them from
/// the log (they are still counted), rather than wait inside the driver's call.
const LOG_QUEUE: usize = 4096;

/// How long a device's teardown waits for the log thread to log what is queued. Only a logger
/// that blocks (say on a lock the tearing-down thread holds) takes this long; then the thread
/// finishes on its own.
pub(crate) const LOG_DRAIN_LIMIT: Duration = Duration::from_secs(5);

/// The thread that logs a validating instance's messages outside the driver's calls (see the
/// module docs). [`InstanceParts::destroy`] hands it back unclosed: the device's teardown
/// closes it once it holds no lock ([`LogPump::close`]). Dropped unclosed, its queue is closed
/// and the thread detached; in a forked child both are forgotten.
pub(crate) struct LogPump {
    inner: Option<PumpInner>,
    fork_gen: u64,
}

struct PumpInner {
    counts: Arc<ValidationCounts>,
    thread: std::thread::JoinHandle<()>,
    /// Disconnected when the thread's loop ended (it drops the sender then). In a `Mutex` only
    /// to make `LogPump` `Sync` (the device's state is shared).
    finished: Mutex<Receiver<()>>,
}

impl Drop for LogPump {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            if fork_generation() != self.fork_gen {
                // The parent's thread and channel: nothing of them is the child's to release.
                std::mem::forget(inner);
            } else {
                // Unclosed (an unwind before a device existed): end the thread's loop now
                // rather than when the counts go, and detach it.
                lock_queue(&inner.counts).take();
            }
        }
    }
}

impl LogPump {
    /// Starts the thread and gives `counts` its queue. `None` (with a warning) when no thread
    /// can be started: messages are then counted but not logged.
    fn start(counts: &Arc<ValidationCounts>) -> Option<LogPump> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<(log::Level, String)>(LOG_QUEUE);
        let (finished_tx, finished) = std::sync::mpsc::sync_channel::<()>(0);
        let spawned = std::thread::Builder::new().name("vkhost-validation-log".into()).spawn(move || {
            let _finished = finished_tx;
            for (level, msg) in rx {
                // A logger that panics loses its line, not the thread.
                contain(|| log::log!(target: "vkhost::validation", level, "{msg}"));
            }
        });
        match spawned {
            Ok(thread) => {
                *lock_queue(counts) = Some(tx);
                let inner = PumpInner { counts: Arc::clone(counts), thread, finished: Mutex::new(finished) };
                Some(LogPump { inner: Some(inner), fork_gen: fork_generation() })
            }
            Err(e) => {
                contain(|| log::warn!("no thread for the validation layer's messages ({e}): they are counted but not logged"));
                None
            }
        }
    }

    /// Closes the queue and waits, at most [`LOG_DRAIN_LIMIT`], until the thread logged
    /// everything queued and left its loop: `true` if it did (the thread then only exits,
    /// detached). Run after the messenger and the instance are gone, holding no lock a logger
    /// might want. On the pump's own thread (a logger that tore down the device) it does not
    /// wait. Never panics: a logger's panic on its warnings is contained.
    pub(crate) fn close(mut self) -> bool {
        if fork_generation() != self.fork_gen {
            return false; // `drop` forgets the parent's thread and channel
        }
        let Some(inner) = self.inner.take() else { return false };
        lock_queue(&inner.counts).take();
        let ended = if std::thread::current().id() == inner.thread.thread().id() {
            false
        } else {
            let finished = inner.finished.into_inner().unwrap_or_else(PoisonError::into_inner);
            match finished.recv_timeout(LOG_DRAIN_LIMIT) {
                // The loop ended: everything queued was logged. The thread is detached, not
                // joined: its exit runs thread-local destructors (the logger's, a driver's),
                // and one of them could wait on a lock the caller holds.
                Err(RecvTimeoutError::Disconnected) | Ok(()) => true,
                Err(RecvTimeoutError::Timeout) => {
                    contain(|| {
                        log::warn!(
                            "the validation log thread still runs the logger after {LOG_DRAIN_LIMIT:?}; \
                             it finishes on its own"
                        )
                    });
                    false
                }
            }
        };
        let dropped = inner.counts.log_dropped.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            contain(|| log::warn!("{dropped} validation messages were counted but not logged: the log thread fell {LOG_QUEUE} behind"));
        }
        ended
    }
}

/// The pump's queue; a poisoned lock still holds a usable `Option`.
fn lock_queue(c: &ValidationCounts) -> std::sync::MutexGuard<'_, Option<SyncSender<(log::Level, String)>>> {
    c.log_queue.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Queues the line `line` makes for the log thread, made only when `level` is logged at all;
/// never blocks and never runs the user's code.
fn queue_log(counts: Option<&ValidationCounts>, level: log::Level, line: impl FnOnce() -> String) {
    let Some(c) = counts else { return };
    // `log_enabled!` would ask the user's logger: only the maximum levels are read here.
    if level > log::STATIC_MAX_LEVEL || level > log::max_level() {
        return;
    }
    if let Some(tx) = lock_queue(c).as_ref() {
        if let Err(TrySendError::Full(_)) = tx.try_send((level, line())) {
            c.log_dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl ValidationCounts {
    /// Error messages counted so far (`Device::validation_errors`, `ValidationCounter::errors`).
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    /// Warnings counted so far.
    pub fn warnings(&self) -> u64 {
        self.warnings.load(Ordering::Relaxed)
    }

    /// The layer's reports about itself counted so far ([`LAYER_SELF_REPORTS`]).
    pub fn layer_faults(&self) -> u64 {
        self.layer_faults.load(Ordering::Relaxed)
    }

    /// The most recent error message.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().ok().and_then(|g| g.clone())
    }
}

/// Whether `VKHOST_VALIDATION` (1, true or on; 0, false or off, the default) asks for the
/// Khronos validation layer. Any other value warns and leaves it off, as the other variables do.
pub(crate) fn validation_requested() -> bool {
    matches!(super::env_word("VKHOST_VALIDATION", &["1", "true", "on", "0", "false", "off"]), Some("1" | "true" | "on"))
}

/// An instance, and its messenger when validation is on.
pub(crate) struct InstanceParts {
    pub entry: ash::Entry,
    pub instance: ash::Instance,
    pub debug: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
    /// The thread that logs the messenger's messages; `destroy` hands it back for closing.
    pub pump: Option<LogPump>,
}

/// Message IDs with which the validation layer reports a fault of its own, not of the program:
/// counted apart ([`ValidationCounts::layer_faults`]), logged as warnings, never as errors.
///
/// `VkSemaphore-state-timeout` (named `UNASSIGNED-` in layer 1.3.239, Debian's, and
/// `INTERNAL-ERROR-` in later layers; the message says "This is most likely a validation bug"):
/// with synchronization validation on, a vkWaitSemaphores that returns because another thread's
/// vkSignalSemaphore just signalled the value waits, inside the layer and under the layer's
/// lock, for the layer's record of that signal, which the signalling thread cannot make
/// without the same lock. After 10 s the layer gives up and reports it. A plain program shows
/// it (a timeline semaphore, one thread waiting, one signalling from the host, both on one CPU
/// with the signaller at a lower priority: 4 of 8 rounds stalled with synchronization
/// validation, 0 of 15 without); vkhost's tests hit it three times in CI under load. Nothing the
/// program did is wrong, so it must not fail a zero-error check.
pub(crate) const LAYER_SELF_REPORTS: &[&str] = &["UNASSIGNED-VkSemaphore-state-timeout", "INTERNAL-ERROR-VkSemaphore-state-timeout"];

/// Where a message with this severity and ID counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Counted {
    Error,
    LayerFault,
    Warning,
    Other,
}

fn classify(severity: vk::DebugUtilsMessageSeverityFlagsEXT, id_name: Option<&str>) -> Counted {
    if id_name.is_some_and(|id| LAYER_SELF_REPORTS.contains(&id)) {
        Counted::LayerFault
    } else if severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::ERROR) {
        Counted::Error
    } else if severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::WARNING) {
        Counted::Warning
    } else {
        Counted::Other
    }
}

/// The string at `p`, or `None` for NULL.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string that stays valid and unchanged for `'a`.
unsafe fn c_str<'a>(p: *const std::ffi::c_char) -> Option<&'a CStr> {
    // SAFETY: not NULL here, and the caller guarantees the rest.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) })
}

/// Runs `f`, and no panic out of it goes further: its payload is dropped inside a catch too
/// (a payload whose own drop panics, say a logger's `panic_any`, would unwind on into the
/// driver, an abort), and a second payload from that drop is leaked.
pub(crate) fn contain(f: impl FnOnce()) {
    if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        if let Err(again) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(p))) {
            std::mem::forget(again);
        }
    }
}

unsafe extern "system" fn messenger_callback(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    user: *mut c_void,
) -> vk::Bool32 {
    // Never unwind into the driver (an allocation failure in `format!` would). No user code
    // runs here: the message is logged later, by the instance's `LogPump`.
    contain(|| {
        // SAFETY: the layer passes a valid callback-data pointer for the duration of the call.
        let data = unsafe { data.as_ref() };
        // SAFETY: p_message is NULL or a NUL-terminated string the layer owns for the call.
        let msg = data.and_then(|d| unsafe { c_str(d.p_message) }).map(|m| m.to_string_lossy().into_owned()).unwrap_or_default();
        // SAFETY: as p_message.
        let id_name = data.and_then(|d| unsafe { c_str(d.p_message_id_name) }).and_then(|m| m.to_str().ok());
        // SAFETY: `user` is the `ValidationCounts` behind an Arc that the device keeps alive
        // until after its instance is destroyed.
        let counts = unsafe { (user as *const ValidationCounts).as_ref() };
        match classify(severity, id_name) {
            Counted::Error => {
                if let Some(c) = counts {
                    c.errors.fetch_add(1, Ordering::Relaxed);
                    if let Ok(mut g) = c.last_error.lock() {
                        *g = Some(msg.clone());
                    }
                }
                queue_log(counts, log::Level::Error, || format!("{types:?}: {msg}"));
            }
            Counted::LayerFault => {
                if let Some(c) = counts {
                    c.layer_faults.fetch_add(1, Ordering::Relaxed);
                }
                queue_log(counts, log::Level::Warn, || {
                    format!("the layer's own fault, not counted as an error (see Device::validation_layer_faults): {types:?}: {msg}")
                });
            }
            Counted::Warning => {
                if let Some(c) = counts {
                    c.warnings.fetch_add(1, Ordering::Relaxed);
                }
                queue_log(counts, log::Level::Warn, || format!("{types:?}: {msg}"));
            }
            Counted::Other => queue_log(counts, log::Level::Debug, || format!("{types:?}: {msg}")),
        }
    });
    vk::FALSE
}

fn messenger_info(counts: &Arc<ValidationCounts>) -> vk::DebugUtilsMessengerCreateInfoEXT<'static> {
    vk::DebugUtilsMessengerCreateInfoEXT::default()
        .message_severity(
            vk::DebugUtilsMessageSeverityFlagsEXT::ERROR
                | vk::DebugUtilsMessageSeverityFlagsEXT::WARNING
                | vk::DebugUtilsMessageSeverityFlagsEXT::INFO,
        )
        .message_type(
            vk::DebugUtilsMessageTypeFlagsEXT::GENERAL
                | vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE,
        )
        .pfn_user_callback(Some(messenger_callback))
        .user_data(Arc::as_ptr(counts) as *mut c_void)
}

/// Whether the loader lists the Khronos validation layer.
pub(crate) fn layer_installed(entry: &ash::Entry) -> Result<bool> {
    // SAFETY: plain query on a loaded entry.
    let available = unsafe { entry.enumerate_instance_layer_properties() }.call("vkEnumerateInstanceLayerProperties")?;
    Ok(available.iter().any(|l| l.layer_name_as_c_str().map(|n| n == VALIDATION_LAYER).unwrap_or(false)))
}

/// Creates an instance; with `validation`, enables the Khronos layer and a messenger that
/// counts into `counts`. Refuses (rather than silently running unchecked) when validation is
/// asked for and the layer is absent.
pub(crate) fn create(validation: bool, counts: &Arc<ValidationCounts>) -> Result<InstanceParts> {
    let entry = entry()?;
    keep_icds_loaded(&entry);
    // SAFETY: plain query on a loaded entry.
    let loader_version =
        unsafe { entry.try_enumerate_instance_version() }.call("vkEnumerateInstanceVersion")?.unwrap_or(vk::API_VERSION_1_0);
    let api = loader_version.min(vk::API_VERSION_1_3);
    if api < vk::API_VERSION_1_1 {
        return Err(Error::unsupported("the Vulkan loader is older than 1.1"));
    }

    let mut layers: Vec<*const std::ffi::c_char> = Vec::new();
    let mut exts: Vec<*const std::ffi::c_char> = Vec::new();
    if validation {
        if !layer_installed(&entry)? {
            return Err(Error::unsupported(
                "VKHOST_VALIDATION=1 but VK_LAYER_KHRONOS_validation is not installed \
                 (Debian: apt-get install vulkan-validationlayers; or run scripts/setup)",
            ));
        }
        layers.push(VALIDATION_LAYER.as_ptr());
        exts.push(ash::ext::debug_utils::NAME.as_ptr());
    }

    let app = vk::ApplicationInfo::default().application_name(c"vkhost").engine_name(c"vkhost").api_version(api);
    let mut dbg_info = messenger_info(counts);
    let mut info = vk::InstanceCreateInfo::default().application_info(&app).enabled_layer_names(&layers).enabled_extension_names(&exts);
    if validation {
        // Also catches messages from vkCreateInstance and vkDestroyInstance themselves.
        info = info.push_next(&mut dbg_info);
    }
    // Started before vkCreateInstance: the chained messenger reports from inside it.
    let pump = if validation { LogPump::start(counts) } else { None };
    // SAFETY: every pointer in `info` refers to locals that outlive the call.
    let instance = match unsafe { entry.create_instance(&info, None) } {
        Ok(i) => i,
        Err(code) => {
            pump.map(LogPump::close);
            return Err(match code {
                // The loader found no driver it could use (none installed, as on a fresh
                // machine without mesa-vulkan-drivers, or none that loads): no device, not a
                // Vulkan failure.
                vk::Result::ERROR_INCOMPATIBLE_DRIVER => Error::NoDevice,
                code => Error::vk("vkCreateInstance", code),
            });
        }
    };

    let debug = if validation {
        let du = ash::ext::debug_utils::Instance::new(&entry, &instance);
        // SAFETY: `instance` was created with VK_EXT_debug_utils enabled; the user-data pointer
        // stays valid while `counts` lives, which the caller guarantees past instance teardown.
        match unsafe { du.create_debug_utils_messenger(&messenger_info(counts), None) } {
            Ok(m) => Some((du, m)),
            Err(code) => {
                // SAFETY: nothing was created from the instance yet.
                unsafe { instance.destroy_instance(None) };
                pump.map(LogPump::close);
                return Err(Error::vk("vkCreateDebugUtilsMessengerEXT", code));
            }
        }
    } else {
        None
    };
    Ok(InstanceParts { entry, instance, debug, pump })
}

impl InstanceParts {
    /// Destroys the messenger and the instance, and hands back the log thread, for the caller
    /// to [`LogPump::close`] once it holds no lock a logger might want (messages from
    /// vkDestroyInstance may still be queued).
    ///
    /// # Safety
    /// Every object created from the instance (devices included) must be destroyed already.
    #[must_use = "close the log thread (LogPump::close) once no lock is held"]
    pub(crate) unsafe fn destroy(self) -> Option<LogPump> {
        if let Some((du, m)) = self.debug {
            // SAFETY: the messenger belongs to this instance and is destroyed once.
            unsafe { du.destroy_debug_utils_messenger(m, None) };
        }
        // SAFETY: the caller guarantees no child objects remain.
        unsafe { self.instance.destroy_instance(None) };
        self.pump
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends the callback one message, as the layer would.
    fn deliver(counts: &Arc<ValidationCounts>, severity: vk::DebugUtilsMessageSeverityFlagsEXT, id: &CStr, msg: &CStr) {
        let data = vk::DebugUtilsMessengerCallbackDataEXT::default().message_id_name(id).message(msg);
        // SAFETY: valid callback data for the call; `user` points at live counts.
        unsafe { messenger_callback(severity, vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION, &data, Arc::as_ptr(counts) as *mut c_void) };
    }

    /// The callback queues for the log thread and never waits on it: past the queue's room a
    /// message is dropped from the log (and counted as dropped), and with the level off nothing
    /// is queued. A pump's close returns once its thread logged everything and left its loop.
    #[test]
    fn the_callback_queues_without_waiting_and_a_pump_drains_at_close() {
        log::set_max_level(log::LevelFilter::Trace);
        let e = vk::DebugUtilsMessageSeverityFlagsEXT::ERROR;
        let c = Arc::new(ValidationCounts::default());
        let (tx, rx) = std::sync::mpsc::sync_channel(2);
        *lock_queue(&c) = Some(tx);
        for _ in 0..5 {
            deliver(&c, e, c"VUID-x", c"m");
        }
        assert_eq!((c.errors(), c.log_dropped.load(Ordering::Relaxed)), (5, 3));
        assert_eq!(rx.try_iter().map(|(l, _)| l).collect::<Vec<_>>(), [log::Level::Error; 2]);
        log::set_max_level(log::LevelFilter::Warn);
        deliver(&c, vk::DebugUtilsMessageSeverityFlagsEXT::INFO, c"i", c"info");
        assert_eq!(rx.try_iter().count(), 0, "a message above the maximum level was queued");
        lock_queue(&c).take();

        let c = Arc::new(ValidationCounts::default());
        let pump = LogPump::start(&c).expect("a thread");
        for _ in 0..100 {
            deliver(&c, e, c"VUID-y", c"m");
        }
        assert!(pump.close(), "close returned before the log thread ended");
        assert!(lock_queue(&c).is_none(), "the queue stayed open after close");
        assert_eq!(c.log_dropped.load(Ordering::Relaxed), 0);
        assert_eq!(c.errors(), 100);
        // Dropped unclosed, a pump closes its queue (its thread's loop ends; detached).
        let c = Arc::new(ValidationCounts::default());
        drop(LogPump::start(&c).expect("a thread"));
        assert!(lock_queue(&c).is_none(), "a pump dropped unclosed left its queue open");
        log::set_max_level(log::LevelFilter::Off);
    }

    /// A panic whose payload panics again when dropped stays inside: the payload was dropped
    /// after the catch, and its panic unwound into the driver's call of the callback.
    #[test]
    fn a_panic_payload_that_panics_on_drop_is_contained() {
        struct Bomb;
        impl Drop for Bomb {
            fn drop(&mut self) {
                panic!("the payload's drop");
            }
        }
        let r = std::panic::catch_unwind(|| contain(|| std::panic::panic_any(Bomb)));
        assert!(r.is_ok(), "a panic got out of `contain`");
    }

    /// The layer's reports about itself are counted apart, and nothing else is: an error with
    /// any other ID (one that merely mentions a semaphore timeout included) still counts.
    #[test]
    fn only_the_layers_reports_about_itself_are_kept_out_of_the_error_count() {
        let e = vk::DebugUtilsMessageSeverityFlagsEXT::ERROR;
        let c = Arc::new(ValidationCounts::default());
        deliver(
            &c,
            e,
            c"UNASSIGNED-VkSemaphore-state-timeout",
            c"Timeout waiting for timeline semaphore state to update. This is most likely a validation bug.",
        );
        deliver(&c, e, c"INTERNAL-ERROR-VkSemaphore-state-timeout", c"The Validation Layers hit a timeout");
        assert_eq!((c.errors(), c.layer_faults(), c.warnings(), c.last_error()), (0, 2, 0, None));
        deliver(&c, e, c"VUID-vkWaitSemaphores-pWaitInfo-parameter", c"Timeout waiting for timeline semaphore state to update");
        deliver(&c, e, c"UNASSIGNED-VkSemaphore-state-timeout-x", c"another");
        assert_eq!((c.errors(), c.layer_faults()), (2, 2));
        assert_eq!(c.last_error().as_deref(), Some("another"));
        deliver(&c, vk::DebugUtilsMessageSeverityFlagsEXT::WARNING, c"UNASSIGNED-BestPractices-x", c"w");
        assert_eq!((c.errors(), c.layer_faults(), c.warnings()), (2, 2, 1));
        // A message without an ID still counts by its severity.
        let data = vk::DebugUtilsMessengerCallbackDataEXT::default().message(c"no id");
        // SAFETY: as in `deliver`.
        unsafe { messenger_callback(e, vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION, &data, Arc::as_ptr(&c) as *mut c_void) };
        assert_eq!(c.errors(), 3);
    }
}
