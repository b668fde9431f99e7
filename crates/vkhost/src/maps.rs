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
    // The text always answers (`Some`), so the walk always ends with a verdict.
    walk(want, |addr| Some(maps.iter().find(|m| m.range.contains(&addr)).cloned()))
        .unwrap_or_else(|| Err("no answer from the maps text".into()))
}

/// The walk both [`check`] and [`query::check`] make: from `want.start`, mapping after mapping,
/// until `want` is covered. `at(addr)` is the mapping that covers `addr` (`Some(None)` where
/// none does, `None` where it cannot say, which ends the walk with `None`).
fn walk(want: &Range<usize>, mut at: impl FnMut(usize) -> Option<Option<Mapping>>) -> Option<std::result::Result<(), String>> {
    let mut cur = want.start;
    loop {
        let Some(m) = at(cur)? else {
            return Some(Err(format!("{cur:#x} (within {:#x}..{:#x}) is not mapped", want.start, want.end)));
        };
        if !(m.read && m.write) {
            return Some(Err(format!(
                "{:#x}..{:#x} is mapped {}{}: registration needs read-write memory",
                m.range.start,
                m.range.end,
                if m.read { "r" } else { "-" },
                if m.write { "w" } else { "-" }
            )));
        }
        cur = m.range.end;
        if cur >= want.end {
            return Some(Ok(()));
        }
    }
}

/// Proves every page of `want` (page-aligned, already found mapped read-write by [`check_rw`])
/// can be read: `madvise(MADV_POPULATE_READ)` faults each page in for reading, as the first
/// access would, and fails where a mapping listed read-write cannot be touched: a guard region
/// (`MADV_GUARD_INSTALL`, invisible in /proc/self/maps), a file mapping past the end of its file
/// (SIGBUS on access), a poisoned page. Pages become present and no byte changes (private
/// anonymous holes map the shared zero page, nothing is allocated; holes of shared memory, tmpfs
/// or memfd are allocated, as a first read would). It proves reads only: a page the kernel lets
/// the process read but not write (a userfaultfd write-protected one) passes, and the CPU
/// driver's later write into it faults, as a CPU write by the caller would. The kernel answers
/// EINVAL for an advice it lacks (before 5.14) and for a VM_IO/VM_PFNMAP mapping (a device's
/// registers or another driver's memory, which no page walk can prove): both prove nothing,
/// `Ok`, and the mapping check made before stands. EINTR comes only with a fatal signal
/// pending (the kernel's page walk is killable, nothing else interrupts it): retried, as EAGAIN.
pub(crate) fn populate_read(want: &Range<usize>) -> Result<()> {
    const MADV_POPULATE_READ: libc::c_int = 22;
    loop {
        // SAFETY: an advice on a page-aligned range the caller found mapped: it changes no byte
        // and no mapping, only which pages are present (what any read of them would do).
        let r = unsafe { libc::madvise(want.start as *mut libc::c_void, want.len(), MADV_POPULATE_READ) };
        if r == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINVAL) => return Ok(()),
            Some(libc::EINTR | libc::EAGAIN) => continue,
            _ => {
                return Err(Error::invalid(format!(
                    "{:#x}..{:#x}: a page of the range cannot be read ({e}): a guard region, a file mapping past its \
                     file's end, or a poisoned page",
                    want.start, want.end
                )));
            }
        }
    }
}

/// Checks `want` against this process's mappings now: with the PROCMAP_QUERY ioctl where the
/// kernel has it (Linux 6.11+; a few microseconds, one query per mapping the range spans), else
/// by reading and parsing all of /proc/self/maps (its cost grows with the process's mapping
/// count: on the H200, where the driver maps much, it was a large share of a small `register`).
pub(crate) fn check_rw(want: &Range<usize>) -> Result<()> {
    match query::check(want) {
        Some(r) => r.map_err(Error::invalid),
        None => check_rw_text(want),
    }
}

/// [`check_rw`] from the text of /proc/self/maps.
pub(crate) fn check_rw_text(want: &Range<usize>) -> Result<()> {
    let text = std::fs::read_to_string("/proc/self/maps")
        .map_err(|e| Error::unsupported(format!("cannot read /proc/self/maps to validate the range: {e}")))?;
    check(&parse(&text), want).map_err(Error::invalid)
}

/// The PROCMAP_QUERY ioctl on /proc/self/maps (linux/fs.h, Linux 6.11): the mapping that covers
/// one address, without generating the whole file.
pub(crate) mod query {
    use super::Mapping;
    use std::ops::Range;

    /// `struct procmap_query` (linux/fs.h), 104 bytes.
    #[repr(C)]
    #[derive(Default)]
    struct ProcmapQuery {
        size: u64,
        query_flags: u64,
        query_addr: u64,
        vma_start: u64,
        vma_end: u64,
        vma_flags: u64,
        vma_page_size: u64,
        vma_offset: u64,
        inode: u64,
        dev_major: u32,
        dev_minor: u32,
        vma_name_size: u32,
        build_id_size: u32,
        vma_name_addr: u64,
        build_id_addr: u64,
    }

    /// `_IOWR('f', 17, struct procmap_query)`.
    const PROCMAP_QUERY: u64 = (3 << 30) | ((size_of::<ProcmapQuery>() as u64) << 16) | ((b'f' as u64) << 8) | 17;
    const VMA_READABLE: u64 = 0x01;
    const VMA_WRITABLE: u64 = 0x02;
    const VMA_SHARED: u64 = 0x08;

    /// Whether `want` is covered by consecutive read-write mappings (same answers and messages
    /// as [`super::check`]); `None` when this kernel cannot answer the query (no /proc, or an
    /// older kernel: ENOTTY/EINVAL), so the caller falls back to the text.
    pub(crate) fn check(want: &Range<usize>) -> Option<Result<(), String>> {
        // Opened per call, not cached: a descriptor opened before fork() would keep answering
        // for the parent's address space in the child.
        // SAFETY: a NUL-terminated path; the descriptor is closed below on every path.
        let fd = unsafe { libc::open(c"/proc/self/maps".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        let r = super::walk(want, |addr| at(fd, addr));
        // SAFETY: `fd` is ours, open, and closed once.
        unsafe { libc::close(fd) };
        r
    }

    /// The mapping that covers `addr`, asked of the kernel (`Some(None)`: none does; `None`: no
    /// answer to trust).
    fn at(fd: libc::c_int, addr: usize) -> Option<Option<Mapping>> {
        let mut q = ProcmapQuery { size: size_of::<ProcmapQuery>() as u64, query_addr: addr as u64, ..Default::default() };
        // SAFETY: `q` is a valid, writable procmap_query whose `size` says its length; with
        // vma_name_size and build_id_size zero the kernel writes nothing outside it.
        let rc = unsafe { libc::ioctl(fd, PROCMAP_QUERY as _, &mut q as *mut ProcmapQuery) };
        if rc != 0 {
            return match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::ENOENT) => Some(None),
                _ => None,
            };
        }
        let range = q.vma_start as usize..q.vma_end as usize;
        // Not an answer about `addr`: do not trust this kernel's reply.
        range.contains(&addr).then_some(Some(Mapping {
            range,
            read: q.vma_flags & VMA_READABLE != 0,
            write: q.vma_flags & VMA_WRITABLE != 0,
            shared: q.vma_flags & VMA_SHARED != 0,
        }))
    }
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

/// An anonymous, private, read-write mapping vkhost made (the host side of a pinned block
/// made of imports), unmapped when dropped: after every import of it was freed (the imports
/// hold it as their backing).
#[derive(Debug)]
pub(crate) struct AnonMap {
    addr: usize,
    len: usize,
}

/// The huge-page size [`AnonMap::new_huge`] aligns to (x86-64's and AArch64's 4 KiB-granule
/// PMD size).
pub(crate) const HUGE_PAGE: usize = 2 << 20;

/// Maps `len` (> 0) fresh zeroed anonymous, private, read-write bytes; their address. The
/// caller owns the mapping and unmaps it.
fn map_anon(len: usize) -> Result<usize> {
    // SAFETY: an anonymous private mapping with no address hint has no preconditions.
    let p = unsafe {
        libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
    };
    if p == libc::MAP_FAILED { Err(Error::OutOfHostMemory) } else { Ok(p as usize) }
}

impl AnonMap {
    /// Maps `len` (> 0, a page multiple) fresh zeroed bytes at a [`HUGE_PAGE`]-aligned address,
    /// advised `MADV_HUGEPAGE` and faulted in (written) before it returns, so that the kernel
    /// backs it with transparent huge pages where it can: a device then maps it with large
    /// pages, and an import pins pages that exist instead of faulting them in itself. Where the
    /// kernel has no transparent huge pages the advice fails and the bytes are faulted in as
    /// small pages.
    pub(crate) fn new_huge(len: usize) -> Result<AnonMap> {
        let over = len.checked_add(HUGE_PAGE).ok_or(Error::OutOfHostMemory)?;
        let base = map_anon(over)?;
        let start = base.next_multiple_of(HUGE_PAGE);
        let (head, tail) = (start - base, base + over - (start + len));
        // SAFETY: `[base, base+over)` is the mapping just made, known to nothing else; the head
        // and tail unmapped here lie inside it and outside `[start, start+len)`, which stays
        // mapped and is owned by the map made next.
        unsafe {
            if head > 0 {
                libc::munmap(base as *mut libc::c_void, head);
            }
            if tail > 0 {
                libc::munmap((start + len) as *mut libc::c_void, tail);
            }
        }
        debug_assert_eq!(head + len + tail, over);
        let map = AnonMap { addr: start, len };
        // SAFETY: advice on our own mapping; failure (no THP in this kernel) changes nothing.
        unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_HUGEPAGE) };
        // MADV_POPULATE_WRITE (Linux 5.14) faults the whole range in, writable, in one call;
        // on older kernels (EINVAL) one write per page does. Any other failure (no memory) is
        // an error: writing the pages would invite the OOM killer instead. (EINTR comes only
        // with a fatal signal pending, when the process is going anyway.)
        const MADV_POPULATE_WRITE: libc::c_int = 23;
        // SAFETY: our own read-write mapping.
        if unsafe { libc::madvise(start as *mut libc::c_void, len, MADV_POPULATE_WRITE) } != 0 {
            if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
                return Err(Error::OutOfHostMemory); // `map` drops: unmapped
            }
            let page = page_size();
            for off in (0..len).step_by(page) {
                // SAFETY: `start + off` lies in our read-write mapping; it holds zeroes, and
                // writing a zero keeps it so while making the kernel allocate the page.
                unsafe { std::ptr::write_volatile((start + off) as *mut u8, 0) };
            }
        }
        Ok(map)
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
    let p = map_anon(len)?;
    let r = f(p as *mut u8);
    // SAFETY: `p` is the mapping made above, of `len` bytes; `f` no longer uses it.
    unsafe { libc::munmap(p as *mut libc::c_void, len) };
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
        assert!(check_rw_text(&(p..p + v.len())).is_ok());
        assert!(check_rw_text(&(8..4096)).is_err());
    }

    /// The ioctl and the text agree, message for message, on live mappings: read-write ones
    /// (spanning two mappings with different protections that are both read-write), a
    /// read-only page, a hole, and ranges that end in them.
    #[test]
    fn query_agrees_with_the_text() {
        let page = page_size();
        // SAFETY: a fresh anonymous mapping of 4 pages, unmapped at the end of the test.
        let base = unsafe {
            libc::mmap(std::ptr::null_mut(), 4 * page, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
        };
        assert_ne!(base, libc::MAP_FAILED);
        let b = base as usize;
        // Page 1 read-write-exec (a separate mapping, still read-write), page 2 read-only, page 3 unmapped.
        // SAFETY: pages of the mapping above.
        unsafe {
            assert_eq!(libc::mprotect((b + page) as *mut libc::c_void, page, libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC), 0);
            assert_eq!(libc::mprotect((b + 2 * page) as *mut libc::c_void, page, libc::PROT_READ), 0);
            assert_eq!(libc::munmap((b + 3 * page) as *mut libc::c_void, page), 0);
        }
        let cases = [
            b..b + 2 * page,
            b + 100..b + page + 1,
            b..b + 3 * page,
            b + 2 * page..b + 3 * page,
            b + 3 * page..b + 4 * page,
            b..b + 4 * page,
        ];
        let mut answered = 0;
        for want in &cases {
            let text = check_rw_text(want).map_err(|e| e.to_string());
            if let Some(q) = query::check(want) {
                answered += 1;
                assert_eq!(q.is_ok(), text.is_ok(), "{want:x?}: {q:?} vs {text:?}");
                if let (Err(q), Err(t)) = (&q, &text) {
                    assert!(t.contains(q.as_str()), "{want:x?}: {q} vs {t}");
                }
            }
        }
        assert!(check_rw(&cases[0]).is_ok() && check_rw(&cases[2]).is_err() && check_rw(&cases[4]).is_err());
        // SAFETY: the pages still mapped from above.
        unsafe { libc::munmap(base, 3 * page) };
        if answered == 0 {
            eprintln!("query_agrees_with_the_text: this kernel has no PROCMAP_QUERY (Linux 6.11+); only the text path was checked");
        }
    }
}
