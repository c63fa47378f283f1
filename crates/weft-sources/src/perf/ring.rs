//! A perf mmap ring buffer: one metadata page followed by 2^n data pages.
//!
//! The kernel writes records at `data_head`; we read from `data_tail`. Reading `data_head`
//! uses an acquire load (the kernel's `smp_store_release`/our `smp_rmb` pair), and the new
//! `data_tail` is published with a release store after the records were copied out, so the
//! kernel never overwrites bytes we are still reading. A record that wraps past the end of
//! the data area is copied into a scratch buffer so callers always see it contiguous.

use std::io;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use perf_event_open_sys::bindings::perf_event_mmap_page;

use super::error::PerfError;
use super::record::HEADER_LEN;

/// A mapped ring.
#[derive(Debug)]
pub struct Ring {
    base: NonNull<u8>,
    map_len: usize,
    data_off: usize,
    data_size: usize,
    scratch: Vec<u8>,
    /// Records whose header was impossible (size < 8 or larger than the ring): the rest of
    /// that read was skipped.
    pub corrupt: u64,
}

// SAFETY: the mapping is owned by this value and only touched through `&mut self`.
unsafe impl Send for Ring {}

impl Ring {
    /// Maps `1 + data_pages` pages of `fd` (`data_pages` must be a power of two).
    pub fn map(fd: &impl AsRawFd, data_pages: usize, what: &str) -> Result<Ring, PerfError> {
        if !data_pages.is_power_of_two() {
            return Err(PerfError::Config(format!("ring size {data_pages} pages is not a power of two")));
        }
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let map_len = page * (1 + data_pages);
        // SAFETY: a shared read-write mapping of a perf fd; the kernel validates the size.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            let source = io::Error::last_os_error();
            let hint = if source.raw_os_error() == Some(libc::EPERM) {
                " (locked-memory limit: raise /proc/sys/kernel/perf_event_mlock_kb or use smaller rings)"
            } else {
                ""
            };
            return Err(PerfError::Sys {
                op: "mmap ring",
                what: format!("{what}{hint}, {map_len} bytes"),
                source,
            });
        }
        let base =
            NonNull::new(p as *mut u8).ok_or_else(|| PerfError::Config("mmap returned NULL".into()))?;
        let mut r = Ring {
            base,
            map_len,
            data_off: page,
            data_size: page * data_pages,
            scratch: Vec::new(),
            corrupt: 0,
        };
        // Newer kernels publish the data area's place in the metadata page.
        let meta = r.meta();
        // SAFETY: the metadata page is mapped and at least as large as the struct.
        let (off, size) = unsafe { ((*meta).data_offset as usize, (*meta).data_size as usize) };
        if off != 0 && size != 0 && off + size <= map_len {
            r.data_off = off;
            r.data_size = size;
        }
        Ok(r)
    }

    fn meta(&self) -> *mut perf_event_mmap_page {
        self.base.as_ptr() as *mut perf_event_mmap_page
    }

    fn head(&self) -> &AtomicU64 {
        // SAFETY: data_head is an aligned u64 inside the mapped metadata page, written by the
        // kernel concurrently: accessed only atomically.
        unsafe { AtomicU64::from_ptr(std::ptr::addr_of_mut!((*self.meta()).data_head)) }
    }

    fn tail(&self) -> &AtomicU64 {
        // SAFETY: as `head`; data_tail is written only by us, read by the kernel.
        unsafe { AtomicU64::from_ptr(std::ptr::addr_of_mut!((*self.meta()).data_tail)) }
    }

    /// Bytes written but not yet read.
    pub fn pending(&self) -> u64 {
        self.head().load(Ordering::Acquire).wrapping_sub(self.tail().load(Ordering::Relaxed))
    }

    /// Data area size in bytes.
    pub fn data_size(&self) -> usize {
        self.data_size
    }

    /// Hands every complete record (header included) to `f`, then frees the space. Returns
    /// the number of records.
    pub fn drain(&mut self, mut f: impl FnMut(&[u8])) -> u64 {
        let head = self.head().load(Ordering::Acquire);
        let mut tail = self.tail().load(Ordering::Relaxed);
        let mask = self.data_size as u64 - 1;
        let mut n = 0;
        // SAFETY: the data area lies within the mapping (checked in `map`).
        let data =
            unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(self.data_off), self.data_size) };
        while tail < head {
            let avail = head - tail;
            if avail < HEADER_LEN as u64 {
                self.corrupt += 1;
                tail = head;
                break;
            }
            let pos = (tail & mask) as usize;
            // Headers are 8-byte aligned and the area is a multiple of 8: never split.
            let size =
                u16::from_le_bytes([data[(pos + 6) & mask as usize], data[(pos + 7) & mask as usize]]) as u64;
            if size < HEADER_LEN as u64 || size > avail || size > self.data_size as u64 {
                self.corrupt += 1;
                tail = head;
                break;
            }
            let size = size as usize;
            if pos + size <= self.data_size {
                f(&data[pos..pos + size]);
            } else {
                let first = self.data_size - pos;
                self.scratch.clear();
                self.scratch.extend_from_slice(&data[pos..]);
                self.scratch.extend_from_slice(&data[..size - first]);
                f(&self.scratch);
            }
            tail += size as u64;
            n += 1;
        }
        self.tail().store(tail, Ordering::Release);
        n
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `map` mapped.
        unsafe { libc::munmap(self.base.as_ptr() as *mut libc::c_void, self.map_len) };
    }
}
