//! Memory-type choice: pure functions over the device's memory types, no Vulkan calls.
//!
//! Each chooser returns the index and a short reason, which `vkhost devices` prints.
//! The orders come from the seed (`pinned_memory_type`): on a discrete GPU the
//! DEVICE_LOCAL|HOST_VISIBLE type is the BAR window onto VRAM, write-combined and read at
//! 0.03 GB/s on the H200 (0.5-0.7 GB/s with streaming loads), so host memory is never placed
//! there while a system-memory type exists.
//! AMD's DEVICE_COHERENT/DEVICE_UNCACHED types are never picked: they are uncached for the device
//! and meant for debugging markers, not bulk transfers.
//!
//! **Host memory is always HOST_COHERENT.** vkhost never calls vkFlushMappedMemoryRanges or
//! vkInvalidateMappedMemoryRanges: the CPU writes pinned blocks, staging chunks and imported
//! pages with plain stores and reads the device's results with plain loads. On a memory type
//! without HOST_COHERENT those stores may sit in a CPU cache the device does not snoop, and the
//! loads may see stale lines, so every chooser for memory the host touches ([`pinned`] for
//! pinned blocks and staging, [`import`] for registered pages) considers only
//! HOST_VISIBLE|HOST_COHERENT types and answers `None` when there is none; callers then refuse
//! (`Unsupported`) or stage through coherent memory. For imports the candidate types are those
//! vkGetMemoryHostPointerPropertiesEXT reports for the pointer; the spec allows HOST_COHERENT
//! only together with HOST_VISIBLE, and NVIDIA reports HOST_VISIBLE|HOST_COHERENT(|HOST_CACHED)
//! types there, so the requirement costs nothing where imports work today.
//!
//! # Example
//!
//! The choices for the device's own memory types, as vkhost makes them at open:
//!
//! ```
//! # fn main() -> vkhost::Result<()> {
//! let dev = vkhost::Device::open_default()?;
//! let types = dev.info().memory_type_flags();
//! // Vulkan guarantees a HOST_VISIBLE|HOST_COHERENT type, so pinned memory always has one.
//! let pinned = vkhost::memtype::pinned(&types, u32::MAX).expect("a host-coherent type");
//! let device = vkhost::memtype::device_local(&types, u32::MAX).expect("any type at all");
//! println!("pinned: type {} ({}), device buffers: type {} ({})", pinned.index, pinned.reason, device.index, device.reason);
//! assert_eq!(dev.memory_choices().pinned, Some(pinned));
//! # Ok(()) }
//! ```

use ash::vk::MemoryPropertyFlags as F;

/// AMD's VK_AMD_device_coherent_memory bits, never picked.
///
/// # Example
///
/// ```
/// use vkhost::memtype::{self, AMD_DEVICE_MEMORY_BITS};
/// use vkhost::vk::MemoryPropertyFlags as F;
///
/// let host = F::HOST_VISIBLE | F::HOST_COHERENT | F::HOST_CACHED;
/// let types = [host | F::DEVICE_COHERENT_AMD, host];
/// assert!(types[0].intersects(AMD_DEVICE_MEMORY_BITS));
/// // The first type would win every tier, but it carries an AMD bit: the second is chosen.
/// assert_eq!(memtype::pinned(&types, u32::MAX).unwrap().index, 1);
/// ```
pub const AMD_DEVICE_MEMORY_BITS: F = F::from_raw(F::DEVICE_COHERENT_AMD.as_raw() | F::DEVICE_UNCACHED_AMD.as_raw());

/// A chosen memory type.
///
/// # Example
///
/// ```
/// use vkhost::vk::MemoryPropertyFlags as F;
///
/// let types = [F::DEVICE_LOCAL, F::HOST_VISIBLE | F::HOST_COHERENT];
/// let c: vkhost::memtype::Choice = vkhost::memtype::device_local(&types, u32::MAX).unwrap();
/// assert_eq!((c.index, c.reason), (0, "device-local VRAM"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choice {
    /// The memory type index, as passed to vkAllocateMemory.
    pub index: u32,
    /// Why this type: its tier in the chooser's order, printed by `vkhost devices`.
    pub reason: &'static str,
}

/// Host-visible and coherent: what every memory type the CPU touches must be (module docs).
const HOST_VC: F = F::from_raw(F::HOST_VISIBLE.as_raw() | F::HOST_COHERENT.as_raw());

fn allowed(bits: u32, i: usize) -> bool {
    i < 32 && bits & (1 << i) != 0
}

fn first(types: &[F], bits: u32, want: impl Fn(F) -> bool) -> Option<u32> {
    types.iter().enumerate().find(|&(i, &f)| allowed(bits, i) && !f.intersects(AMD_DEVICE_MEMORY_BITS) && want(f)).map(|(i, _)| i as u32)
}

/// Memory for a pinned block or a staging buffer: host-visible and coherent, system memory first.
///
/// Best first: HOST_VISIBLE|HOST_COHERENT|HOST_CACHED not DEVICE_LOCAL; HOST_VISIBLE|HOST_COHERENT
/// not DEVICE_LOCAL; only then DEVICE_LOCAL host-visible coherent types (cached first), which
/// is all UMA and CPU devices have.
///
/// `bits` are the memory types allowed (VkMemoryRequirements::memoryTypeBits, or `u32::MAX`).
///
/// # Example
///
/// ```
/// use vkhost::vk::MemoryPropertyFlags as F;
///
/// // A discrete GPU's table (the H200's): VRAM, system memory, cached system memory, BAR.
/// let types = [
///     F::empty(),
///     F::DEVICE_LOCAL,
///     F::HOST_VISIBLE | F::HOST_COHERENT,
///     F::HOST_VISIBLE | F::HOST_COHERENT | F::HOST_CACHED,
///     F::DEVICE_LOCAL | F::HOST_VISIBLE | F::HOST_COHERENT,
/// ];
/// assert_eq!(vkhost::memtype::pinned(&types, u32::MAX).unwrap().index, 3);
/// // Cached system memory not allowed: uncached system memory, never the BAR window.
/// assert_eq!(vkhost::memtype::pinned(&types, !(1 << 3)).unwrap().index, 2);
/// // No host-visible type allowed at all.
/// assert_eq!(vkhost::memtype::pinned(&types, 0b11), None);
/// ```
pub fn pinned(types: &[F], bits: u32) -> Option<Choice> {
    let vc = HOST_VC;
    let tiers: [(&dyn Fn(F) -> bool, &'static str); 4] = [
        (&|f: F| f.contains(vc | F::HOST_CACHED) && !f.contains(F::DEVICE_LOCAL), "system memory, cached"),
        (&|f: F| f.contains(vc) && !f.contains(F::DEVICE_LOCAL), "system memory, uncached"),
        (&|f: F| f.contains(vc | F::HOST_CACHED), "device-local host-visible, cached (UMA)"),
        (&|f: F| f.contains(vc), "device-local host-visible (UMA or BAR window)"),
    ];
    tiers.iter().find_map(|(want, reason)| first(types, bits, want).map(|index| Choice { index, reason }))
}

/// Memory for an import of host pages: among the types both the host pointer and the buffer
/// allow (`bits`), only HOST_VISIBLE|HOST_COHERENT ones (see the module docs: vkhost never
/// flushes or invalidates), preferring non-DEVICE_LOCAL and HOST_CACHED. `None` when no allowed
/// type is coherent: the range cannot be registered and copies stage.
///
/// # Example
///
/// ```
/// use vkhost::vk::MemoryPropertyFlags as F;
///
/// // A discrete GPU's table (the H200's): VRAM, system memory, cached system memory, BAR.
/// let types = [
///     F::empty(),
///     F::DEVICE_LOCAL,
///     F::HOST_VISIBLE | F::HOST_COHERENT,
///     F::HOST_VISIBLE | F::HOST_COHERENT | F::HOST_CACHED,
///     F::DEVICE_LOCAL | F::HOST_VISIBLE | F::HOST_COHERENT,
/// ];
/// // vkGetMemoryHostPointerPropertiesEXT allowed types 2 and 3: the cached one wins.
/// assert_eq!(vkhost::memtype::import(&types, 0b1100).unwrap().index, 3);
/// // Only non-coherent memory allowed: refused, the range is staged instead.
/// let non_coherent = [F::HOST_VISIBLE | F::HOST_CACHED];
/// assert_eq!(vkhost::memtype::import(&non_coherent, u32::MAX), None);
/// ```
pub fn import(types: &[F], bits: u32) -> Option<Choice> {
    let vc = HOST_VC;
    let tiers: [(&dyn Fn(F) -> bool, &'static str); 4] = [
        (&|f: F| f.contains(vc | F::HOST_CACHED) && !f.contains(F::DEVICE_LOCAL), "system memory, cached"),
        (&|f: F| f.contains(vc) && !f.contains(F::DEVICE_LOCAL), "system memory"),
        (&|f: F| f.contains(vc | F::HOST_CACHED), "device-local, cached (UMA)"),
        (&|f: F| f.contains(vc), "device-local (UMA)"),
    ];
    tiers.iter().find_map(|(want, reason)| first(types, bits, want).map(|index| Choice { index, reason }))
}

/// Memory for a device buffer: DEVICE_LOCAL and not HOST_VISIBLE where one exists (never the BAR
/// window of a discrete GPU); on UMA or CPU devices, any DEVICE_LOCAL type; failing that, any.
///
/// # Example
///
/// ```
/// use vkhost::vk::MemoryPropertyFlags as F;
///
/// // A discrete GPU's table (the H200's): VRAM, system memory, cached system memory, BAR.
/// let types = [
///     F::empty(),
///     F::DEVICE_LOCAL,
///     F::HOST_VISIBLE | F::HOST_COHERENT,
///     F::HOST_VISIBLE | F::HOST_COHERENT | F::HOST_CACHED,
///     F::DEVICE_LOCAL | F::HOST_VISIBLE | F::HOST_COHERENT,
/// ];
/// assert_eq!(vkhost::memtype::device_local(&types, u32::MAX).unwrap().index, 1);
/// // A UMA device: one type that is everything.
/// let uma = [F::DEVICE_LOCAL | F::HOST_VISIBLE | F::HOST_COHERENT | F::HOST_CACHED];
/// let c = vkhost::memtype::device_local(&uma, u32::MAX).unwrap();
/// assert_eq!((c.index, c.reason), (0, "device-local, host-visible (UMA)"));
/// ```
pub fn device_local(types: &[F], bits: u32) -> Option<Choice> {
    let tiers: [(&dyn Fn(F) -> bool, &'static str); 3] = [
        (&|f: F| f.contains(F::DEVICE_LOCAL) && !f.contains(F::HOST_VISIBLE), "device-local VRAM"),
        (&|f: F| f.contains(F::DEVICE_LOCAL), "device-local, host-visible (UMA)"),
        (&|_| true, "no device-local type; first allowed"),
    ];
    tiers.iter().find_map(|(want, reason)| first(types, bits, want).map(|index| Choice { index, reason }))
}

/// Memory for a device buffer that synchronous writes may store into with the CPU (the BAR
/// window of a discrete GPU with a full BAR, or UMA memory): DEVICE_LOCAL|HOST_VISIBLE|
/// HOST_COHERENT (coherent: vkhost never flushes), preferring not HOST_CACHED (on a GPU the
/// window is write-combined either way). `None` when no allowed type is such.
///
/// # Example
///
/// ```
/// use vkhost::vk::MemoryPropertyFlags as F;
///
/// // A discrete GPU's table (the H200's): VRAM, system memory, cached system memory, BAR.
/// let types = [
///     F::empty(),
///     F::DEVICE_LOCAL,
///     F::HOST_VISIBLE | F::HOST_COHERENT,
///     F::HOST_VISIBLE | F::HOST_COHERENT | F::HOST_CACHED,
///     F::DEVICE_LOCAL | F::HOST_VISIBLE | F::HOST_COHERENT,
/// ];
/// assert_eq!(vkhost::memtype::device_mapped(&types, u32::MAX).unwrap().index, 4);
/// // The buffer's requirements exclude the BAR type: nothing to store into.
/// assert_eq!(vkhost::memtype::device_mapped(&types, 0b0111), None);
/// ```
pub fn device_mapped(types: &[F], bits: u32) -> Option<Choice> {
    let want = F::DEVICE_LOCAL | HOST_VC;
    let tiers: [(&dyn Fn(F) -> bool, &'static str); 2] = [
        (&|f: F| f.contains(want) && !f.contains(F::HOST_CACHED), "device-local, mapped for CPU stores"),
        (&|f: F| f.contains(want), "device-local, mapped for CPU stores (cached)"),
    ];
    tiers.iter().find_map(|(want, reason)| first(types, bits, want).map(|index| Choice { index, reason }))
}

/// Whether the device's mapped VRAM type spans its VRAM: a DEVICE_LOCAL|HOST_VISIBLE|
/// HOST_COHERENT type on the same heap as a DEVICE_LOCAL type that is not host-visible (a "full
/// BAR", as on the H200, where type 4 maps all 143 GB of heap 0). A small BAR window lives on a
/// heap of its own (256 MiB, typically) and does not count. `types` are (flags, heap) pairs.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// use vkhost::vk::MemoryPropertyFlags as F;
///
/// let vram = F::DEVICE_LOCAL;
/// let bar = F::DEVICE_LOCAL | F::HOST_VISIBLE | F::HOST_COHERENT;
/// let system = F::HOST_VISIBLE | F::HOST_COHERENT;
/// // The BAR type allocates from the VRAM heap (0): a full BAR.
/// assert!(vkhost::memtype::full_bar(&[(vram, 0), (system, 1), (bar, 0)]));
/// // A 256 MiB window on a heap of its own (2): not a full BAR.
/// assert!(!vkhost::memtype::full_bar(&[(vram, 0), (system, 1), (bar, 2)]));
///
/// // The device at hand, from its facts:
/// let dev = vkhost::Device::open_default()?;
/// let types: Vec<_> = dev.info().memory_types.iter().map(|t| (t.flags, t.heap_index)).collect();
/// println!("full BAR: {}", vkhost::memtype::full_bar(&types));
/// # Ok(()) }
/// ```
pub fn full_bar(types: &[(F, u32)]) -> bool {
    full_bar_types(types) != 0
}

/// The memory types of a full BAR (see [`full_bar`]), as a mask of memory-type bits: the
/// DEVICE_LOCAL|HOST_VISIBLE|HOST_COHERENT types on a heap that also holds VRAM that is not
/// host-visible. 0 when the device has no full BAR. Device buffers that `OpenOptions::bar_writes`
/// maps go in [`device_mapped`]`(types, bits & full_bar_types(..))`, so that a small window
/// listed before the full BAR is never chosen. `types` are (flags, heap) pairs; an index past
/// 31 (Vulkan has at most 32 types) is never in the mask.
///
/// # Example
///
/// ```
/// use vkhost::vk::MemoryPropertyFlags as F;
///
/// let bar = F::DEVICE_LOCAL | F::HOST_VISIBLE | F::HOST_COHERENT;
/// // VRAM on heap 0, system memory on heap 1, a 256 MiB window (heap 2), then a full BAR.
/// let types = [(F::DEVICE_LOCAL, 0), (F::HOST_VISIBLE | F::HOST_COHERENT, 1), (bar, 2), (bar, 0)];
/// assert_eq!(vkhost::memtype::full_bar_types(&types), 1 << 3);
/// ```
pub fn full_bar_types(types: &[(F, u32)]) -> u32 {
    // AMD's device-coherent types are never chosen (`device_mapped` skips them): they count
    // for nothing here either.
    let usable = |f: &F| !f.intersects(AMD_DEVICE_MEMORY_BITS);
    let vram_heaps: Vec<u32> =
        types.iter().filter(|(f, _)| usable(f) && f.contains(F::DEVICE_LOCAL) && !f.contains(F::HOST_VISIBLE)).map(|&(_, h)| h).collect();
    types
        .iter()
        .enumerate()
        .take(32)
        .filter(|(_, (f, h))| usable(f) && f.contains(F::DEVICE_LOCAL | HOST_VC) && vram_heaps.contains(h))
        .fold(0, |mask, (i, _)| mask | 1 << i)
}

/// The BAR window: DEVICE_LOCAL|HOST_VISIBLE|HOST_COHERENT on a device that also has non-host-visible
/// DEVICE_LOCAL memory (so it is a window, not UMA memory), the first such type whatever its
/// heap. A fact for tools; the library places mapped device buffers with [`device_mapped`]
/// limited to [`full_bar_types`] instead.
///
/// # Example
///
/// ```
/// use vkhost::vk::MemoryPropertyFlags as F;
///
/// // A discrete GPU's table (the H200's): VRAM, system memory, cached system memory, BAR.
/// let types = [
///     F::empty(),
///     F::DEVICE_LOCAL,
///     F::HOST_VISIBLE | F::HOST_COHERENT,
///     F::HOST_VISIBLE | F::HOST_COHERENT | F::HOST_CACHED,
///     F::DEVICE_LOCAL | F::HOST_VISIBLE | F::HOST_COHERENT,
/// ];
/// assert_eq!(vkhost::memtype::bar_window(&types), Some(4));
/// // UMA: device-local memory is all host-visible, so there is no window.
/// let uma = [F::DEVICE_LOCAL | F::HOST_VISIBLE | F::HOST_COHERENT];
/// assert_eq!(vkhost::memtype::bar_window(&uma), None);
/// ```
pub fn bar_window(types: &[F]) -> Option<u32> {
    let has_vram = types.iter().any(|f| f.contains(F::DEVICE_LOCAL) && !f.contains(F::HOST_VISIBLE));
    if !has_vram {
        return None;
    }
    first(types, u32::MAX, |f| f.contains(F::DEVICE_LOCAL | F::HOST_VISIBLE | F::HOST_COHERENT))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `full_bar` and `device_mapped` agree on a table whose only mapped device-local type is
    /// AMD's device-coherent kind (never chosen): no full BAR. Before, `full_bar` said yes, and
    /// every `alloc_buffer` first made a buffer `device_mapped` then refused.
    #[test]
    fn full_bar_agrees_with_device_mapped() {
        let vram = F::DEVICE_LOCAL;
        let system = F::HOST_VISIBLE | F::HOST_COHERENT;
        let amd_bar = F::DEVICE_LOCAL | F::HOST_VISIBLE | F::HOST_COHERENT | F::DEVICE_COHERENT_AMD | F::DEVICE_UNCACHED_AMD;
        for table in [vec![(vram, 0), (system, 1), (amd_bar, 0)], vec![(vram, 0), (system, 1), (amd_bar & !AMD_DEVICE_MEMORY_BITS, 0)]] {
            let flags: Vec<F> = table.iter().map(|t| t.0).collect();
            assert_eq!(full_bar(&table), device_mapped(&flags, u32::MAX).is_some(), "{table:?}");
        }
    }

    #[test]
    fn a_full_bar_is_chosen_over_a_window_listed_before_it() {
        // A window on a heap of its own (type 2, heap 2) listed before a full BAR (type 3 on the
        // VRAM heap 0): device buffers must go in the full BAR. Before, the library asked
        // `device_mapped` for any mapped type and got the window, whose heap (256 MiB,
        // typically) then refused every larger buffer with OutOfDeviceMemory.
        let bar = F::DEVICE_LOCAL | F::HOST_VISIBLE | F::HOST_COHERENT;
        let t = [(F::DEVICE_LOCAL, 0), (F::HOST_VISIBLE | F::HOST_COHERENT, 1), (bar, 2), (bar, 0)];
        let flags: Vec<F> = t.iter().map(|x| x.0).collect();
        assert_eq!(device_mapped(&flags, u32::MAX).map(|c| c.index), Some(2), "the window, as asked before");
        assert_eq!(full_bar_types(&t), 0b1000);
        assert_eq!(device_mapped(&flags, full_bar_types(&t)).map(|c| c.index), Some(3));
        // No full BAR: nothing; the H200's table: type 4 alone.
        assert_eq!(full_bar_types(&[(F::DEVICE_LOCAL, 0), (bar, 2)]), 0);
        let h200: Vec<(F, u32)> = h200().into_iter().zip([1, 0, 1, 1, 0]).collect();
        assert_eq!(full_bar_types(&h200), 1 << 4);
        // More than 32 entries (not a valid table) cannot overflow the mask.
        let many: Vec<(F, u32)> = std::iter::repeat_n((F::DEVICE_LOCAL, 0), 32).chain([(bar, 0)]).collect();
        assert_eq!(full_bar_types(&many), 0);
    }

    #[test]
    fn full_bar_is_a_mapped_type_on_the_vram_heap() {
        let with_heaps: Vec<(F, u32)> = h200().into_iter().zip([1, 0, 1, 1, 0]).collect();
        assert!(full_bar(&with_heaps));
        assert_eq!(device_mapped(&h200(), u32::MAX).map(|c| c.index), Some(4));
        // A 256 MiB window on a heap of its own (heap 2) is not a full BAR.
        let small: Vec<(F, u32)> = h200().into_iter().zip([1, 0, 1, 1, 2]).collect();
        assert!(!full_bar(&small));
        // UMA: no VRAM type that is not host-visible, so no BAR at all.
        let uma = [(F::DEVICE_LOCAL | F::HOST_VISIBLE | F::HOST_COHERENT | F::HOST_CACHED, 0)];
        assert!(!full_bar(&uma));
        assert_eq!(device_mapped(&[uma[0].0], 1).map(|c| c.index), Some(0));
        assert_eq!(device_mapped(&h200(), 0b0010), None);
    }

    /// The H200's types, from ../shared/GPU.md.
    fn h200() -> Vec<F> {
        vec![
            F::empty(),
            F::DEVICE_LOCAL,
            F::HOST_VISIBLE | F::HOST_COHERENT,
            F::HOST_VISIBLE | F::HOST_COHERENT | F::HOST_CACHED,
            F::DEVICE_LOCAL | F::HOST_VISIBLE | F::HOST_COHERENT,
        ]
    }

    /// lavapipe: one type, everything.
    fn lavapipe() -> Vec<F> {
        vec![F::DEVICE_LOCAL | F::HOST_VISIBLE | F::HOST_COHERENT | F::HOST_CACHED]
    }

    #[test]
    fn pinned_prefers_cached_system_memory_on_h200() {
        assert_eq!(pinned(&h200(), u32::MAX).unwrap().index, 3);
        // Without type 3 allowed, the uncached system type, never the BAR window.
        assert_eq!(pinned(&h200(), !(1 << 3)).unwrap().index, 2);
        // Only the BAR window left: taken last.
        assert_eq!(pinned(&h200(), 1 << 4).unwrap().index, 4);
        assert_eq!(pinned(&h200(), 0b11), None);
    }

    #[test]
    fn pinned_on_uma_takes_device_local() {
        assert_eq!(pinned(&lavapipe(), 1).unwrap().index, 0);
    }

    #[test]
    fn amd_device_coherent_never_picked() {
        let types = vec![
            F::HOST_VISIBLE | F::HOST_COHERENT | F::HOST_CACHED | F::DEVICE_COHERENT_AMD,
            F::HOST_VISIBLE | F::HOST_COHERENT | F::DEVICE_UNCACHED_AMD,
            F::HOST_VISIBLE | F::HOST_COHERENT,
        ];
        assert_eq!(pinned(&types, u32::MAX).unwrap().index, 2);
        assert_eq!(import(&types, u32::MAX).unwrap().index, 2);
    }

    #[test]
    fn import_prefers_cached_non_device_local() {
        assert_eq!(import(&h200(), 0xC).unwrap().index, 3);
        assert_eq!(import(&h200(), 0x4).unwrap().index, 2);
        assert_eq!(import(&lavapipe(), 1).unwrap().index, 0);
        assert_eq!(import(&h200(), 0), None);
    }

    #[test]
    fn non_coherent_host_memory_never_picked() {
        // The only host-visible type is not coherent: nothing the host touches may go there.
        let types = vec![F::DEVICE_LOCAL, F::HOST_VISIBLE | F::HOST_CACHED, F::HOST_VISIBLE | F::DEVICE_LOCAL];
        assert_eq!(pinned(&types, u32::MAX), None);
        assert_eq!(import(&types, u32::MAX), None);
        assert_eq!(import(&types, 0b110), None);
        // Device buffers do not care.
        assert_eq!(device_local(&types, u32::MAX).unwrap().index, 0);
    }

    #[test]
    fn mixed_table_picks_the_coherent_type() {
        // Non-coherent cached system memory comes first and would win every tier but coherence.
        let types = vec![
            F::HOST_VISIBLE | F::HOST_CACHED,
            F::DEVICE_LOCAL,
            F::HOST_VISIBLE | F::HOST_COHERENT,
            F::DEVICE_LOCAL | F::HOST_VISIBLE | F::HOST_CACHED,
        ];
        assert_eq!(pinned(&types, u32::MAX).unwrap().index, 2);
        assert_eq!(import(&types, u32::MAX).unwrap().index, 2);
        // The host pointer allows only the non-coherent types: refused, not silently used.
        assert_eq!(import(&types, 0b1001), None);
        assert_eq!(pinned(&types, 0b1001), None);
    }

    #[test]
    fn device_local_avoids_bar() {
        assert_eq!(device_local(&h200(), u32::MAX).unwrap().index, 1);
        assert_eq!(device_local(&h200(), 1 << 4).unwrap().index, 4);
        assert_eq!(device_local(&lavapipe(), 1).unwrap().index, 0);
    }

    #[test]
    fn bar_only_on_discrete() {
        assert_eq!(bar_window(&h200()), Some(4));
        assert_eq!(bar_window(&lavapipe()), None);
    }
}
