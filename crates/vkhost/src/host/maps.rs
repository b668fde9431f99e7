//! Is a host range mapped, readable and writable? Checked from /proc/self/maps before any
//! import, because drivers check little: lavapipe imports unmapped memory and crashes later;
//! NVIDIA answers OUT_OF_DEVICE_MEMORY for read-only mappings.

use crate::error::{Error, Result};
use std::ops::Range;

/// One line of /proc/self/maps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mapping {
    pub range: Range<usize>,
    pub read: bool,
    pub write: bool,
    pub shared: bool,
}

/// Parses /proc/self/maps text; malformed lines are skipped.
pub(crate) fn parse(text: &str) -> Vec<Mapping> {
    text.lines()
        .filter_map(|line| {
            let mut it = line.split_whitespace();
            let (a, b) = it.next()?.split_once('-')?;
            let perms = it.next()?.as_bytes();
            if perms.len() < 4 {
                return None;
            }
            Some(Mapping {
                range: usize::from_str_radix(a, 16).ok()?..usize::from_str_radix(b, 16).ok()?,
                read: perms[0] == b'r',
                write: perms[1] == b'w',
                shared: perms[3] == b's',
            })
        })
        .collect()
}

/// Whether `want` is entirely covered by consecutive read-write mappings; why not otherwise.
pub(crate) fn check(maps: &[Mapping], want: &Range<usize>) -> std::result::Result<(), String> {
    let mut cur = want.start;
    // Maps are sorted by address in /proc; sort anyway for parsed test input.
    let mut sorted: Vec<&Mapping> = maps.iter().filter(|m| m.range.end > want.start && m.range.start < want.end).collect();
    sorted.sort_by_key(|m| m.range.start);
    for m in sorted {
        if m.range.start > cur {
            break;
        }
        if !(m.read && m.write) {
            return Err(format!(
                "{:#x}..{:#x} is mapped {}{}: registration needs read-write memory",
                m.range.start,
                m.range.end,
                if m.read { "r" } else { "-" },
                if m.write { "w" } else { "-" }
            ));
        }
        cur = cur.max(m.range.end);
        if cur >= want.end {
            return Ok(());
        }
    }
    Err(format!("{cur:#x} (within {:#x}..{:#x}) is not mapped", want.start, want.end))
}

/// Checks `want` against this process's mappings now.
pub(crate) fn check_rw(want: &Range<usize>) -> Result<()> {
    let text = std::fs::read_to_string("/proc/self/maps")
        .map_err(|e| Error::unsupported(format!("cannot read /proc/self/maps to validate the range: {e}")))?;
    check(&parse(&text), want).map_err(Error::invalid)
}

/// The system page size.
///
/// # Example
///
/// ```
/// let page = vkhost::host::page_size();
/// assert!(page.is_power_of_two() && page >= 4096);
/// // Registrations are rounded out to whole pages (or a coarser import granule).
/// let granule = vkhost::host::round_out(page + 1, 1, page).unwrap();
/// assert_eq!(granule, page..2 * page);
/// ```
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as usize } else { 4096 }
}

/// An anonymous, private, read-write mapping vkhost made (the host side of a pinned block too
/// large for one allocation), unmapped when dropped: after every import of it was freed (the
/// imports hold it as their backing).
#[derive(Debug)]
pub(crate) struct AnonMap {
    addr: usize,
    len: usize,
}

impl AnonMap {
    /// Maps `len` (> 0, a page multiple) fresh zeroed bytes.
    pub(crate) fn new(len: usize) -> Result<AnonMap> {
        // SAFETY: an anonymous private mapping with no address hint has no preconditions.
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
        };
        if p == libc::MAP_FAILED {
            return Err(Error::OutOfHostMemory);
        }
        Ok(AnonMap { addr: p as usize, len })
    }

    /// The first byte.
    pub(crate) fn ptr(&self) -> std::ptr::NonNull<u8> {
        // mmap never returns null on success (MAP_FAILED is -1).
        std::ptr::NonNull::new(self.addr as *mut u8).unwrap_or(std::ptr::NonNull::dangling())
    }

    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for AnonMap {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once; every import of it was freed first (it is
        // their backing, dropped after their memory).
        unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len) };
    }
}

/// Calls `f` with one fresh, anonymous, read-write page of `len` bytes, unmapped afterwards.
pub(crate) fn with_probe_page<T>(len: usize, f: impl FnOnce(*mut u8) -> Result<T>) -> Result<T> {
    // SAFETY: an anonymous private mapping with no address hint has no preconditions.
    let p = unsafe {
        libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
    };
    if p == libc::MAP_FAILED {
        return Err(Error::OutOfHostMemory);
    }
    let r = f(p.cast());
    // SAFETY: `p` is the mapping made above, of `len` bytes; `f` no longer uses it.
    unsafe { libc::munmap(p, len) };
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d0c000-55d0e000 r--p 00000000 fd:01 123 /usr/bin/x
7f0000000000-7f0000002000 rw-p 00000000 00:00 0
7f0000002000-7f0000004000 rw-s 00000000 00:05 7 /dev/zero (deleted)
7f0000004000-7f0000005000 r--p 00000000 00:00 0
7f0000006000-7f0000007000 rw-p 00000000 00:00 0 [heap]
garbage line
";

    #[test]
    fn parses() {
        let m = parse(MAPS);
        assert_eq!(m.len(), 5);
        assert_eq!(m[1].range, 0x7f0000000000..0x7f0000002000);
        assert!(m[2].shared && m[2].write);
        assert!(!m[3].write);
    }

    #[test]
    fn spans_adjacent_mappings() {
        let m = parse(MAPS);
        assert!(check(&m, &(0x7f0000000000..0x7f0000004000)).is_ok());
        assert!(check(&m, &(0x7f0000001000..0x7f0000003000)).is_ok());
    }

    #[test]
    fn refuses_read_only_and_holes() {
        let m = parse(MAPS);
        assert!(check(&m, &(0x7f0000003000..0x7f0000005000)).unwrap_err().contains("read-write"));
        assert!(check(&m, &(0x7f0000006000..0x7f0000008000)).unwrap_err().contains("not mapped"));
        assert!(check(&m, &(0x1000..0x2000)).unwrap_err().contains("not mapped"));
        assert!(check(&m, &(0x55d0c000..0x55d0d000)).is_err());
    }

    #[test]
    fn live_process_check() {
        let v = vec![1u8; 3 * page_size()];
        let p = v.as_ptr() as usize;
        assert!(check_rw(&(p..p + v.len())).is_ok());
        assert!(check_rw(&(8..4096)).is_err());
    }
}
