//! Uprobe targets: `BINARY:FUNCTION` → the binary's path and the function's file offset.
//!
//! The function's virtual address comes from the ELF symbol table (through
//! [`crate::symbols::SymbolTable`]); the uprobe PMU wants a *file offset*, found through the
//! loadable segment that contains the address (`offset = addr - p_vaddr + p_offset`). That
//! is right for executables, PIE executables and shared libraries alike.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::error::PerfError;
use crate::symbols::{LoadOptions, SymbolFormat, SymbolTable};

/// A resolved uprobe target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UprobeTarget {
    /// `binary:function` as given (the probe's name in events and spans).
    pub name: Arc<str>,
    /// The binary (absolute, symlinks resolved).
    pub path: PathBuf,
    /// The function.
    pub function: String,
    /// Its virtual address in the ELF file.
    pub addr: u64,
    /// Its file offset (what the kernel wants).
    pub offset: u64,
}

impl UprobeTarget {
    /// Parses `BINARY:FUNCTION` (a binary without `/` is looked up on `PATH`) and resolves it.
    pub fn resolve(spec: &str) -> Result<UprobeTarget, PerfError> {
        let (bin, func) =
            spec.rsplit_once(':').filter(|(b, f)| !b.is_empty() && !f.is_empty()).ok_or_else(|| {
                PerfError::Config(format!(
                    "{spec:?}: a uprobe is BINARY:FUNCTION, e.g. /usr/bin/gzip:deflate"
                ))
            })?;
        let path = find_binary(bin)?;
        let data = std::fs::read(&path).map_err(|e| PerfError::io(&path, "read binary", e))?;
        let (addr, offset) =
            function_offset(&data, func).map_err(|msg| PerfError::Elf { path: path.clone(), msg })?;
        Ok(UprobeTarget {
            name: Arc::from(format!("{bin}:{func}")),
            path,
            function: func.to_owned(),
            addr,
            offset,
        })
    }
}

/// Uprobe dynamic events registered in tracefs for one capture; removed on drop.
#[derive(Debug)]
pub struct DynamicUprobes {
    control: PathBuf,
    /// `group:name` of every created event.
    created: Vec<String>,
    group: String,
}

/// Numbers the process's uprobe events (tracefs names must be unique within its group).
static NEXT_PROBE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The x86_64 SysV integer argument registers, as tracefs fetch args.
const ARG_FETCH: &str = "arg0=%di arg1=%si arg2=%dx arg3=%cx arg4=%r8 arg5=%r9";

impl DynamicUprobes {
    /// A set in tracefs group `weft_<pid>` (`events` = the tracefs `events` directory).
    pub fn new(events: &Path) -> DynamicUprobes {
        let root = events.parent().unwrap_or(events);
        DynamicUprobes {
            control: root.join("uprobe_events"),
            created: Vec::new(),
            group: format!("weft_{}", std::process::id()),
        }
    }

    fn write(&self, line: &str) -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new().append(true).open(&self.control)?;
        f.write_all(format!("{line}\n").as_bytes())
    }

    /// Registers entry and return probes for `t`; returns their `group:name` tracepoint names.
    pub fn add(&mut self, t: &UprobeTarget) -> Result<(String, String), PerfError> {
        let base: String =
            t.function.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).take(40).collect();
        // Unique in the process: two captures of one process may probe the same function.
        let n = NEXT_PROBE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let entry = format!("{base}_{n}_entry");
        let ret = format!("{base}_{n}_return");
        let path = t.path.display();
        for line in [
            format!("p:{}/{entry} {path}:{:#x} {ARG_FETCH}", self.group, t.offset),
            format!("r:{}/{ret} {path}:{:#x} ret=%ax", self.group, t.offset),
        ] {
            self.write(&line).map_err(|e| PerfError::Tracefs {
                path: self.control.clone(),
                msg: format!("cannot add uprobe `{line}`: {e}"),
            })?;
            let name =
                line.split_whitespace().next().and_then(|h| h.get(2..)).unwrap_or("").replace('/', ":");
            self.created.push(name);
        }
        Ok((format!("{}:{entry}", self.group), format!("{}:{ret}", self.group)))
    }
}

impl Drop for DynamicUprobes {
    fn drop(&mut self) {
        for name in self.created.iter().rev() {
            // Busy while a perf event on it is open somewhere: also in a child another thread
            // forked and has not exec'd yet (close-on-exec), so try again for a moment.
            let mut tries = 0;
            while let Err(e) = self.write(&format!("-:{}", name.replace(':', "/"))) {
                tries += 1;
                if tries == 20 {
                    tracing::warn!("could not remove uprobe event {name}: {e}");
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
    }
}

fn find_binary(bin: &str) -> Result<PathBuf, PerfError> {
    let p = Path::new(bin);
    let found = if bin.contains('/') {
        Some(p.to_path_buf())
    } else {
        std::env::var_os("PATH")
            .and_then(|paths| std::env::split_paths(&paths).map(|d| d.join(bin)).find(|c| c.is_file()))
    };
    let found = found.ok_or_else(|| PerfError::Config(format!("{bin}: not found on PATH")))?;
    found.canonicalize().map_err(|e| PerfError::io(&found, "resolve binary path", e))
}

/// The virtual address and file offset of `func` in the ELF image `data`.
pub fn function_offset(data: &[u8], func: &str) -> Result<(u64, u64), String> {
    let table = function_table(data)?;
    let sym = table.symbols().iter().find(|s| &*s.name == func).ok_or_else(|| {
        format!("no function {func:?} in the symbol table ({} functions; stripped binary?)", table.len())
    })?;
    address_offset(data, sym.addr).map(|off| (sym.addr, off)).map_err(|m| format!("function {func}: {m}"))
}

/// Every function of the binary `bin` (a path, or a name looked up on `PATH`) whose name
/// `keep` accepts, resolved as uprobe targets named `bin:function`, in address order. An
/// address with several names (aliases) is probed once, under its first name.
pub fn resolve_matching(bin: &str, keep: impl Fn(&str) -> bool) -> Result<Vec<UprobeTarget>, PerfError> {
    let path = find_binary(bin)?;
    let data = std::fs::read(&path).map_err(|e| PerfError::io(&path, "read binary", e))?;
    let elf = |msg| PerfError::Elf { path: path.clone(), msg };
    let table = function_table(&data).map_err(elf)?;
    let mut out = Vec::new();
    for sym in table.symbols().iter().filter(|s| keep(&s.name)) {
        // Functions outside file-backed code (none in practice) cannot be probed: skipped.
        let Ok(offset) = address_offset(&data, sym.addr) else { continue };
        out.push(UprobeTarget {
            name: Arc::from(format!("{bin}:{}", sym.name)),
            path: path.clone(),
            function: sym.name.to_string(),
            addr: sym.addr,
            offset,
        });
    }
    Ok(out)
}

fn function_table(data: &[u8]) -> Result<SymbolTable, String> {
    SymbolTable::from_bytes(data, "uprobe", &LoadOptions { format: SymbolFormat::Elf, ..Default::default() })
}

/// The file offset of the virtual address `addr` in the ELF image `data`, through the
/// loadable segment that contains it (`addr - p_vaddr + p_offset`).
pub fn address_offset(data: &[u8], addr: u64) -> Result<u64, String> {
    use object::{Object, ObjectSegment};
    let file = object::File::parse(data).map_err(|e| format!("not a readable ELF file: {e}"))?;
    for seg in file.segments() {
        let (start, size) = (seg.address(), seg.size());
        if addr >= start && addr < start.saturating_add(size) {
            let (foff, fsize) = seg.file_range();
            let rel = addr - start;
            if rel >= fsize {
                return Err(format!("{addr:#x} is not backed by file data"));
            }
            return Ok(foff + rel);
        }
    }
    Err(format!("{addr:#x} lies in no loadable segment"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_a_function_in_this_test_binary() {
        // Any ELF with symbols works; the test binary itself has `main`.
        let exe = std::env::current_exe().unwrap();
        let data = std::fs::read(&exe).unwrap();
        let (addr, off) = function_offset(&data, "main").unwrap();
        assert!(addr > 0);
        // The bytes at the offset are the function's code: the same bytes the section holds.
        use object::{Object, ObjectSection};
        let f = object::File::parse(&*data).unwrap();
        let text = f.sections().find(|s| s.address() <= addr && addr < s.address() + s.size()).unwrap();
        let sec_bytes = text.data().unwrap();
        let in_sec = (addr - text.address()) as usize;
        assert_eq!(&data[off as usize..off as usize + 8], &sec_bytes[in_sec..in_sec + 8]);
        assert!(function_offset(&data, "no_such_function_here").unwrap_err().contains("no function"));
        assert!(UprobeTarget::resolve("nocolon").is_err());
        let exe = exe.to_str().unwrap();
        let all = resolve_matching(exe, |n| n == "main").unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!((all[0].addr, all[0].offset), (addr, off));
        assert_eq!(&*all[0].name, format!("{exe}:main"));
    }
}
