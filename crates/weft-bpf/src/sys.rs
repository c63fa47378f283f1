//! The thin safe layer over `bpf(2)`: create maps, load programs (with the verifier's log on
//! refusal), look up, update, iterate and delete map elements. Every object is an [`OwnedFd`]: closing
//! the last fd frees it in the kernel.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use crate::Error;
use crate::insn::Insn;

// Commands (enum bpf_cmd).
const MAP_CREATE: i32 = 0;
const MAP_LOOKUP_ELEM: i32 = 1;
const MAP_UPDATE_ELEM: i32 = 2;
const MAP_DELETE_ELEM: i32 = 3;
const MAP_GET_NEXT_KEY: i32 = 4;
const PROG_LOAD: i32 = 5;

/// Map types (enum bpf_map_type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapType {
    Hash = 1,
    Array = 2,
    PerCpuHash = 5,
    PerCpuArray = 6,
}

impl MapType {
    pub fn per_cpu(self) -> bool {
        matches!(self, MapType::PerCpuHash | MapType::PerCpuArray)
    }
}

/// Program types (enum bpf_prog_type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgType {
    /// kprobes and uprobes: the context is `struct pt_regs`.
    Kprobe = 2,
    /// Kernel tracepoints: the context is the tracepoint's record.
    Tracepoint = 5,
}

#[repr(C)]
#[derive(Default)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

#[repr(C)]
#[derive(Default)]
struct ElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value_or_next_key: u64,
    flags: u64,
}

#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
}

/// `bpf(cmd, attr, sizeof attr)`.
fn bpf<T>(cmd: i32, attr: &mut T) -> io::Result<i64> {
    // SAFETY: `attr` is a live, fully initialised `#[repr(C)]` prefix of `union bpf_attr`
    // whose size is passed along; the kernel zero-extends the fields it has beyond it. Any
    // pointers inside it point to buffers the caller keeps alive across the call.
    let r = unsafe {
        libc::syscall(libc::SYS_bpf, cmd, attr as *mut T as *mut libc::c_void, std::mem::size_of::<T>())
    };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(r) }
}

/// The kernel's object names: up to 15 bytes of `[A-Za-z0-9_.]`.
fn object_name(name: &str) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (o, c) in
        out.iter_mut().zip(name.bytes().filter(|c| c.is_ascii_alphanumeric() || *c == b'_').take(15))
    {
        *o = c;
    }
    out
}

fn owned(fd: i64) -> OwnedFd {
    // SAFETY: the kernel returned a fresh fd (checked non-negative) that nothing else owns.
    unsafe { OwnedFd::from_raw_fd(fd as i32) }
}

fn hint(e: &io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => " — loading eBPF needs root (or CAP_BPF + CAP_PERFMON)",
        Some(libc::ENOMEM) => " — out of locked memory for maps (raise `ulimit -l`)",
        Some(libc::E2BIG) => " — a map's key or value is too large for this kernel",
        _ => "",
    }
}

/// A map: its fd and shape.
#[derive(Debug)]
pub struct Map {
    fd: OwnedFd,
    pub ty: MapType,
    pub key_size: u32,
    pub value_size: u32,
    pub name: String,
}

impl AsRawFd for Map {
    fn as_raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }
}

impl Map {
    pub fn create(
        ty: MapType,
        key_size: u32,
        value_size: u32,
        max_entries: u32,
        name: &str,
    ) -> Result<Map, Error> {
        let mut a = MapCreateAttr {
            map_type: ty as u32,
            key_size,
            value_size,
            max_entries,
            map_name: object_name(name),
            ..Default::default()
        };
        let fd = bpf(MAP_CREATE, &mut a).map_err(|source| Error::Bpf {
            op: "BPF_MAP_CREATE",
            what: format!(
                "map {name} ({ty:?}, key {key_size} B, value {value_size} B, {max_entries} entries)"
            ),
            hint: hint(&source),
            source,
        })?;
        Ok(Map { fd: owned(fd), ty, key_size, value_size, name: name.to_owned() })
    }

    /// Bytes one lookup returns: the value, or for per-CPU maps the value rounded up to 8
    /// bytes once per possible CPU.
    pub fn lookup_len(&self, ncpus: usize) -> usize {
        if self.ty.per_cpu() {
            (self.value_size as usize).div_ceil(8) * 8 * ncpus
        } else {
            self.value_size as usize
        }
    }

    /// The value of `key` into `out` (`lookup_len` bytes); `false` when there is none.
    pub fn lookup(&self, key: &[u8], out: &mut [u8]) -> Result<bool, Error> {
        if key.len() != self.key_size as usize {
            return Err(Error::Internal(format!("map {}: key of {} bytes", self.name, key.len())));
        }
        let mut a = ElemAttr {
            map_fd: self.fd.as_raw_fd() as u32,
            key: key.as_ptr() as u64,
            value_or_next_key: out.as_mut_ptr() as u64,
            ..Default::default()
        };
        match bpf(MAP_LOOKUP_ELEM, &mut a) {
            Ok(_) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
            Err(source) => Err(Error::Bpf {
                op: "BPF_MAP_LOOKUP_ELEM",
                what: format!("map {}", self.name),
                hint: "",
                source,
            }),
        }
    }

    /// Every key of the map (a snapshot; keys added meanwhile may be missed).
    pub fn keys(&self) -> Result<Vec<Vec<u8>>, Error> {
        let mut out = Vec::new();
        let mut cur: Option<Vec<u8>> = None;
        loop {
            let mut next = vec![0u8; self.key_size as usize];
            let mut a = ElemAttr {
                map_fd: self.fd.as_raw_fd() as u32,
                key: cur.as_ref().map(|k| k.as_ptr() as u64).unwrap_or(0),
                value_or_next_key: next.as_mut_ptr() as u64,
                ..Default::default()
            };
            match bpf(MAP_GET_NEXT_KEY, &mut a) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(out),
                Err(source) => {
                    return Err(Error::Bpf {
                        op: "BPF_MAP_GET_NEXT_KEY",
                        what: format!("map {}", self.name),
                        hint: "",
                        source,
                    });
                }
            }
            out.push(next.clone());
            cur = Some(next);
        }
    }

    /// Sets `key` to `value` (for per-CPU maps, `lookup_len` bytes: every CPU's value).
    pub fn update(&self, key: &[u8], value: &[u8]) -> Result<(), Error> {
        if key.len() != self.key_size as usize {
            return Err(Error::Internal(format!("map {}: key of {} bytes", self.name, key.len())));
        }
        let mut a = ElemAttr {
            map_fd: self.fd.as_raw_fd() as u32,
            key: key.as_ptr() as u64,
            value_or_next_key: value.as_ptr() as u64,
            ..Default::default()
        };
        bpf(MAP_UPDATE_ELEM, &mut a).map(|_| ()).map_err(|source| Error::Bpf {
            op: "BPF_MAP_UPDATE_ELEM",
            what: format!("map {}", self.name),
            hint: "",
            source,
        })
    }

    /// Deletes `key` (absent keys are not an error).
    pub fn delete(&self, key: &[u8]) -> Result<(), Error> {
        let mut a =
            ElemAttr { map_fd: self.fd.as_raw_fd() as u32, key: key.as_ptr() as u64, ..Default::default() };
        match bpf(MAP_DELETE_ELEM, &mut a) {
            Ok(_) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            Err(source) => Err(Error::Bpf {
                op: "BPF_MAP_DELETE_ELEM",
                what: format!("map {}", self.name),
                hint: "",
                source,
            }),
        }
    }
}

/// Bytes of verifier log asked for when a program is refused.
const LOG_SIZE: usize = 4 << 20;

/// Loads a program. On refusal it is loaded again with the verifier's log on, and the error
/// carries that log.
pub fn load_program(ty: ProgType, insns: &[Insn], name: &str) -> Result<OwnedFd, Error> {
    // None of the helpers the generator calls is GPL-only, so the program carries weft's own.
    let license = c"Apache-2.0";
    let attempt = |log: Option<&mut Vec<u8>>| {
        let mut a = ProgLoadAttr {
            prog_type: ty as u32,
            insn_cnt: insns.len() as u32,
            insns: insns.as_ptr() as u64,
            license: license.as_ptr() as u64,
            prog_name: object_name(name),
            ..Default::default()
        };
        if let Some(buf) = log {
            a.log_level = 1;
            a.log_size = buf.len() as u32;
            a.log_buf = buf.as_mut_ptr() as u64;
        }
        bpf(PROG_LOAD, &mut a)
    };
    match attempt(None) {
        Ok(fd) => Ok(owned(fd)),
        Err(first) => {
            let mut buf = vec![0u8; LOG_SIZE];
            let again = attempt(Some(&mut buf));
            if let Ok(fd) = again {
                // Loaded with the log on (a transient failure the first time).
                return Ok(owned(fd));
            }
            let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
            let log = String::from_utf8_lossy(&buf[..end]).trim_end().to_owned();
            if log.is_empty() {
                return Err(Error::Bpf {
                    op: "BPF_PROG_LOAD",
                    what: format!("program {name}"),
                    hint: hint(&first),
                    source: first,
                });
            }
            Err(Error::Verifier { program: name.to_owned(), source: first, log })
        }
    }
}

/// The number of possible CPUs (`/sys/devices/system/cpu/possible`): the number of values a
/// per-CPU map lookup returns.
pub fn possible_cpus() -> Result<usize, Error> {
    let path = Path::new("/sys/devices/system/cpu/possible");
    let text = std::fs::read_to_string(path).map_err(|e| Error::Io { path: path.to_owned(), source: e })?;
    let cpus = weft_sources::perf::sys::parse_cpu_list(&text)
        .ok_or_else(|| Error::Internal(format!("{}: cannot parse {:?}", path.display(), text.trim())))?;
    Ok(cpus.iter().max().map(|m| *m as usize + 1).unwrap_or(1))
}
