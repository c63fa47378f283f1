//! A mapped memory region with bounds-checked atomic accessors (shared by the producer and the
//! consumer; the consumer treats every offset read from the region as untrusted).

use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64};

/// An owned `mmap` (unmapped on drop).
pub(crate) struct Map {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the region is only accessed through atomics or through raw copies whose races are
// excluded by the ring protocol (release/acquire on head and tail).
unsafe impl Send for Map {}
// SAFETY: as above.
unsafe impl Sync for Map {}

impl Map {
    /// Map `len` bytes of `fd` shared and read-write.
    pub(crate) fn shared(fd: i32, len: usize) -> std::io::Result<Map> {
        // SAFETY: a fresh mapping; the kernel validates fd and len.
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Map { ptr: p.cast(), len })
    }

    /// Anonymous private zeroed memory.
    pub(crate) fn anonymous(len: usize) -> std::io::Result<Map> {
        // SAFETY: a fresh anonymous mapping.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Map { ptr: p.cast(), len })
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn base(&self) -> *mut u8 {
        self.ptr
    }

    fn check(&self, off: usize, size: usize) -> Option<*mut u8> {
        if off.checked_add(size)? <= self.len && off.is_multiple_of(size.min(8)) {
            // SAFETY: in bounds (checked above).
            Some(unsafe { self.ptr.add(off) })
        } else {
            None
        }
    }

    pub(crate) fn u64_at(&self, off: usize) -> Option<&AtomicU64> {
        // SAFETY: in bounds and 8-aligned (mmap is page-aligned); AtomicU64 has u64's layout.
        self.check(off, 8).map(|p| unsafe { &*(p as *const AtomicU64) })
    }

    pub(crate) fn u32_at(&self, off: usize) -> Option<&AtomicU32> {
        // SAFETY: in bounds and 4-aligned.
        self.check(off, 4).map(|p| unsafe { &*(p as *const AtomicU32) })
    }

    pub(crate) fn u8_at(&self, off: usize) -> Option<&AtomicU8> {
        // SAFETY: in bounds.
        self.check(off, 1).map(|p| unsafe { &*(p as *const AtomicU8) })
    }

    /// Copy `len` bytes at `off` into `out` (cleared first); `None` when out of bounds.
    pub(crate) fn copy_out(&self, off: usize, len: usize, out: &mut Vec<u8>) -> Option<()> {
        if off.checked_add(len)? > self.len {
            return None;
        }
        out.clear();
        out.reserve(len);
        // SAFETY: source in bounds (checked), destination reserved; u8 has no invalid values.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.add(off), out.as_mut_ptr(), len);
            out.set_len(len);
        }
        Some(())
    }

    /// Write bytes at `off` (producer-side initialisation); `None` when out of bounds.
    pub(crate) fn write(&self, off: usize, bytes: &[u8]) -> Option<()> {
        if off.checked_add(bytes.len())? > self.len {
            return None;
        }
        // SAFETY: destination in bounds (checked).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.add(off), bytes.len()) };
        Some(())
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: ptr/len came from a successful mmap.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// `futex(FUTEX_WAKE)` on a shared (not process-private) word.
pub(crate) fn futex_wake(word: &AtomicU32) {
    // SAFETY: the address is a valid, aligned u32 in a mapping.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word as *const AtomicU32,
            libc::FUTEX_WAKE,
            i32::MAX,
            0usize,
            0usize,
            0u32,
        );
    }
}

/// `futex(FUTEX_WAIT)` while `*word == expected`, for at most `timeout`.
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32, timeout: std::time::Duration) {
    let ts =
        libc::timespec { tv_sec: timeout.as_secs() as libc::time_t, tv_nsec: timeout.subsec_nanos() as _ };
    // SAFETY: valid word and timespec pointers.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word as *const AtomicU32,
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            0usize,
            0u32,
        );
    }
}
