//! Anonymous page-aligned memory, for the bench's `registered` path and `check`'s host regions.

use crate::devices::anyhow_free::Result;

/// An anonymous private mapping, unmapped on drop.
pub struct Pages {
    pub ptr: *mut u8,
    pub len: usize,
}

// SAFETY: a `Pages` owns its mapping exclusively, as a `Box<[u8]>` owns its heap block: moving
// it to another thread moves that ownership, and its bytes are reached only through `&mut self`
// (`slice`) or by the owner's raw pointer uses, whose own contracts hold on any thread.
unsafe impl Send for Pages {}

/// Read-write protection.
pub const RW: i32 = libc::PROT_READ | libc::PROT_WRITE;

impl Pages {
    /// Maps `len` bytes with protection `prot`.
    pub fn map(len: usize, prot: i32) -> Result<Pages> {
        // SAFETY: anonymous private mapping, no hint.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
        if p == libc::MAP_FAILED {
            return Err(format!("mmap of {len} bytes failed").into());
        }
        Ok(Pages { ptr: p.cast(), len })
    }

    /// Advises transparent huge pages for the mapping (before it is first touched).
    pub fn advise_huge(&self) {
        // SAFETY: advice on our own mapping.
        unsafe { libc::madvise(self.ptr.cast(), self.len, libc::MADV_HUGEPAGE) };
    }

    /// The bytes. Only for read-write mappings.
    pub fn slice(&mut self) -> &mut [u8] {
        // SAFETY: mapped for `len` bytes while self lives; callers use read-write mappings here.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        // SAFETY: our mapping, unmapped once.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}
