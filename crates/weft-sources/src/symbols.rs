//! Symbol tables: resolving code addresses to function names.
//!
//! Loaders (each documented on [`SymbolFormat`]):
//!
//! * `objdump --syms` listings (what Columbo ships and what its `make_sym_tables.py` makes),
//! * `objdump -d`/`-S` disassembly labels (`ffffffff812c56ea <tty_set_termios>:`),
//! * `readelf -s` tables,
//! * `nm` output and Linux `/proc/kallsyms` (also with the `KSYM ` prefix the project's QEMU
//!   script prints),
//! * ELF files directly (through the `object` crate): executables, `vmlinux`, kernel modules.
//!
//! A table has an identifier (reported as the `comp` of a call) and a load offset added to
//! every address: kernel modules are relocatable, their symbol values are offsets inside their
//! section, so the module's load address (`0xffffffffa0000000` for the first module without
//! KASLR) is given as the offset. Only one section of a module comes out right that way —
//! symbols of `.init.text`/`.text.unlikely` overlap `.text` — so [`LoadOptions::section`] can
//! keep a single section.
//!
//! Unlike Columbo's loader, which inserts every line, section, file and data-object symbols are
//! left out (they never name code and would shadow a function at the same address); untyped
//! symbols are kept because assembly entry points (`entry_SYSCALL_64`) are untyped. When two
//! symbols share an address the first one listed wins (as in Columbo).

use std::path::Path;
use std::sync::Arc;

use crate::error::SourceError;
use crate::parse::{Cursor, hex_prefix};

/// Input formats of symbol tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SymbolFormat {
    /// Detect from the content (ELF magic, `SYMBOL TABLE:`, `Symbol table '`, disassembly
    /// labels, else nm/kallsyms).
    #[default]
    Auto,
    /// `objdump --syms` (Columbo's `kSyms`): `<value> <7 flags> <section>\t<size> <name>`.
    ObjdumpSyms,
    /// `objdump -d`/`-S` labels (Columbo's `kS`): `<addr> <name>:`.
    ObjdumpDisasm,
    /// `readelf -s` (Columbo's `kElf`): `<n>: <value> <size> <type> <bind> <vis> <ndx> <name>`;
    /// `FUNC` and `NOTYPE` rows are kept.
    Readelf,
    /// `nm` and `/proc/kallsyms`: `<addr> <type> <name>[\t[module]]`, optionally prefixed with
    /// `KSYM `; text types (`T t W w`) are kept.
    Nm,
    /// An ELF file: its symbol table (else its dynamic symbol table); `FUNC` and untyped
    /// defined symbols are kept.
    Elf,
}

impl SymbolFormat {
    /// Every format.
    pub const ALL: [SymbolFormat; 6] = [
        SymbolFormat::Auto,
        SymbolFormat::ObjdumpSyms,
        SymbolFormat::ObjdumpDisasm,
        SymbolFormat::Readelf,
        SymbolFormat::Nm,
        SymbolFormat::Elf,
    ];

    /// From a configuration name (`auto`, `objdump-syms`, `objdump-d`, `readelf`, `nm`,
    /// `kallsyms`, `elf`; Columbo's `kSyms`, `kS`, `kElf` are accepted too).
    pub fn parse(s: &str) -> Option<SymbolFormat> {
        Some(match s {
            "auto" => SymbolFormat::Auto,
            "objdump-syms" | "objdump" | "kSyms" => SymbolFormat::ObjdumpSyms,
            "objdump-d" | "disasm" | "kS" => SymbolFormat::ObjdumpDisasm,
            "readelf" | "kElf" => SymbolFormat::Readelf,
            "nm" | "kallsyms" => SymbolFormat::Nm,
            "elf" => SymbolFormat::Elf,
            _ => return None,
        })
    }
}

/// One symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symbol {
    /// Address (load offset applied).
    pub addr: u64,
    /// Size in bytes (0 when unknown).
    pub size: u64,
    /// Name.
    pub name: Arc<str>,
}

/// How to load a table.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Input format.
    pub format: SymbolFormat,
    /// Added to every address (module load address).
    pub offset: u64,
    /// Keep only symbols of this section (objdump/readelf section names; ELF section names).
    pub section: Option<String>,
}

/// A loaded, address-sorted symbol table.
#[derive(Debug, Clone)]
pub struct SymbolTable {
    id: Arc<str>,
    syms: Vec<Symbol>,
    /// Lines (or ELF symbols) that were not symbols of interest.
    pub skipped: u64,
}

impl SymbolTable {
    /// Loads `path` as table `id`.
    pub fn load(path: &Path, id: &str, opts: &LoadOptions) -> Result<SymbolTable, SourceError> {
        let data = std::fs::read(path).map_err(|e| SourceError::io(path, "read symbol table", e))?;
        Self::from_bytes(&data, id, opts).map_err(|msg| SourceError::invalid(path, msg))
    }

    /// Parses a table from its bytes.
    pub fn from_bytes(data: &[u8], id: &str, opts: &LoadOptions) -> Result<SymbolTable, String> {
        let format = match opts.format {
            SymbolFormat::Auto => detect(data),
            f => f,
        };
        let mut syms = Vec::new();
        let mut skipped = 0u64;
        if format == SymbolFormat::Elf {
            load_elf(data, opts, &mut syms, &mut skipped)?;
        } else {
            for line in data.split(|&b| b == b'\n') {
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                let parsed = match format {
                    SymbolFormat::ObjdumpSyms => objdump_syms(line, opts.section.as_deref()),
                    SymbolFormat::ObjdumpDisasm => disasm_label(line),
                    SymbolFormat::Readelf => readelf(line, opts.section.as_deref()),
                    _ => nm(line),
                };
                match parsed {
                    Some((addr, size, name)) => syms.push(Symbol {
                        addr: addr.wrapping_add(opts.offset),
                        size,
                        name: Arc::from(String::from_utf8_lossy(name).as_ref()),
                    }),
                    None => skipped += 1,
                }
            }
        }
        // Stable sort keeps the first-listed symbol first among equal addresses.
        syms.sort_by_key(|s| s.addr);
        syms.dedup_by(|later, first| later.addr == first.addr);
        Ok(SymbolTable { id: Arc::from(id), syms, skipped })
    }

    /// The table's identifier.
    pub fn id(&self) -> &Arc<str> {
        &self.id
    }
    /// Number of symbols.
    pub fn len(&self) -> usize {
        self.syms.len()
    }
    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.syms.is_empty()
    }
    /// All symbols, by address.
    pub fn symbols(&self) -> &[Symbol] {
        &self.syms
    }
    /// The symbol starting exactly at `addr`.
    pub fn exact(&self, addr: u64) -> Option<&Symbol> {
        self.syms.binary_search_by_key(&addr, |s| s.addr).ok().map(|i| &self.syms[i])
    }
    /// The symbol containing `addr` (nearest at or below it; within its size when known) and
    /// the offset into it.
    pub fn lookup(&self, addr: u64) -> Option<(&Symbol, u64)> {
        let i = self.syms.partition_point(|s| s.addr <= addr).checked_sub(1)?;
        let s = &self.syms[i];
        let off = addr - s.addr;
        if s.size != 0 && off >= s.size {
            return None;
        }
        Some((s, off))
    }
}

/// Several tables searched in order (the first table that knows an address wins).
#[derive(Debug, Clone, Default)]
pub struct Symbolizer {
    tables: Vec<SymbolTable>,
}

impl Symbolizer {
    /// A symbolizer over `tables`, searched in this order.
    pub fn new(tables: Vec<SymbolTable>) -> Self {
        Symbolizer { tables }
    }
    /// The tables.
    pub fn tables(&self) -> &[SymbolTable] {
        &self.tables
    }
    /// The function starting exactly at `addr` and the identifier of its table.
    pub fn exact(&self, addr: u64) -> Option<(&Symbol, &Arc<str>)> {
        self.tables.iter().find_map(|t| t.exact(addr).map(|s| (s, t.id())))
    }
    /// The function containing `addr`, the offset into it and its table's identifier.
    pub fn lookup(&self, addr: u64) -> Option<(&Symbol, u64, &Arc<str>)> {
        self.tables.iter().find_map(|t| t.lookup(addr).map(|(s, o)| (s, o, t.id())))
    }
}

fn detect(data: &[u8]) -> SymbolFormat {
    if data.starts_with(b"\x7fELF") {
        return SymbolFormat::Elf;
    }
    let head = &data[..data.len().min(64 * 1024)];
    if memchr::memmem::find(head, b"SYMBOL TABLE:").is_some() {
        SymbolFormat::ObjdumpSyms
    } else if memchr::memmem::find(head, b"Symbol table '").is_some() {
        SymbolFormat::Readelf
    } else if head.split(|&b| b == b'\n').any(|l| disasm_label(l).is_some()) {
        SymbolFormat::ObjdumpDisasm
    } else {
        SymbolFormat::Nm
    }
}

/// `000000000002406e g     F .text\t0000000000000da7 i40e_napi_poll`
fn objdump_syms<'a>(line: &'a [u8], section: Option<&str>) -> Option<(u64, u64, &'a [u8])> {
    let (value, n) = hex_prefix(line)?;
    if n < 8 || line.get(n) != Some(&b' ') || line.len() < n + 9 {
        return None;
    }
    let flags = &line[n + 1..n + 8];
    // Column 6: d = debugging/section symbol; column 7: f = file, O = data object.
    if flags[5] == b'd' || flags[6] == b'f' || flags[6] == b'O' {
        return None;
    }
    let rest = &line[n + 9..];
    let tab = memchr::memchr(b'\t', rest)?;
    let sec = &rest[..tab];
    if sec == b"*UND*" || section.is_some_and(|s| s.as_bytes() != sec) {
        return None;
    }
    let mut c = Cursor::new(&rest[tab + 1..]);
    let size = c.hex()?;
    c.spaces();
    c.lit(b".hidden ");
    let name = c.rest;
    let name = &name[..name.iter().position(|&b| b == b' ' || b == b'\t').unwrap_or(name.len())];
    (!name.is_empty()).then_some((value, size, name))
}

/// `ffffffff812c56ea <tty_set_termios>:`
fn disasm_label(line: &[u8]) -> Option<(u64, u64, &[u8])> {
    let (addr, n) = hex_prefix(line)?;
    let rest = line.get(n..)?.strip_prefix(b" <")?;
    let name = rest.strip_suffix(b">:")?;
    (!name.is_empty() && !name.contains(&b'>')).then_some((addr, 0, name))
}

/// `    12: ffffffff81000000    10 FUNC    GLOBAL DEFAULT    1 _stext`
fn readelf<'a>(line: &'a [u8], section: Option<&str>) -> Option<(u64, u64, &'a [u8])> {
    let mut c = Cursor::new(line);
    c.spaces();
    c.dec()?;
    if !c.lit(b":") {
        return None;
    }
    c.spaces();
    let (value, n) = hex_prefix(c.rest)?;
    c.skip(n);
    c.spaces();
    let size = c.num()?;
    c.spaces();
    let ty = c.token();
    if ty != b"FUNC" && ty != b"NOTYPE" {
        return None;
    }
    c.spaces();
    c.token(); // bind
    c.spaces();
    c.token(); // visibility
    c.spaces();
    let ndx = c.token();
    if ndx == b"UND" || section.is_some_and(|s| s.as_bytes() != ndx) {
        return None;
    }
    c.spaces();
    let name = c.token();
    (!name.is_empty()).then_some((value, size, name))
}

/// `ffffffff81c00080 T entry_SYSCALL_64` (optionally `KSYM `-prefixed, optional `\t[module]`).
fn nm(line: &[u8]) -> Option<(u64, u64, &[u8])> {
    let line = line.strip_prefix(b"KSYM ").unwrap_or(line);
    let (addr, n) = hex_prefix(line)?;
    let mut c = Cursor::new(&line[n..]);
    if !c.lit(b" ") {
        return None;
    }
    let ty = c.token();
    if !matches!(ty, b"T" | b"t" | b"W" | b"w") {
        return None;
    }
    c.spaces();
    let name = c.token();
    let name = &name[..name.iter().position(|&b| b == b'\t').unwrap_or(name.len())];
    (!name.is_empty()).then_some((addr, 0, name))
}

fn load_elf(data: &[u8], opts: &LoadOptions, out: &mut Vec<Symbol>, skipped: &mut u64) -> Result<(), String> {
    use object::{Object, ObjectSection, ObjectSymbol, SymbolKind, SymbolSection};
    let file = object::File::parse(data).map_err(|e| format!("not a readable ELF file: {e}"))?;
    let mut any = false;
    for pass in 0..2 {
        let syms: Vec<object::Symbol<'_, '_>> =
            if pass == 0 { file.symbols().collect() } else { file.dynamic_symbols().collect() };
        for s in syms {
            let keep = matches!(s.kind(), SymbolKind::Text | SymbolKind::Unknown) && s.is_definition();
            let name = s.name().unwrap_or("");
            let in_section = match (&opts.section, s.section()) {
                (None, _) => true,
                (Some(want), SymbolSection::Section(i)) => file
                    .section_by_index(i)
                    .ok()
                    .and_then(|sec| sec.name().ok().map(|n| n == want))
                    .unwrap_or(false),
                (Some(_), _) => false,
            };
            if keep && in_section && !name.is_empty() {
                out.push(Symbol {
                    addr: s.address().wrapping_add(opts.offset),
                    size: s.size(),
                    name: Arc::from(name),
                });
                any = true;
            } else {
                *skipped += 1;
            }
        }
        if any {
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str, opts: LoadOptions) -> SymbolTable {
        SymbolTable::from_bytes(text.as_bytes(), "t", &opts).unwrap()
    }

    #[test]
    fn objdump_syms_listing() {
        let t = table(
            "i40e-image:     file format elf64-x86-64\n\nSYMBOL TABLE:\n\
             0000000000000000 l    d  .text\t0000000000000000 .text\n\
             0000000000000000 l    df *ABS*\t0000000000000000 i40e_main.c\n\
             000000000002406e g     F .text\t0000000000000da7 i40e_napi_poll\n\
             0000000000000010 l     O .data\t0000000000000008 some_data\n\
             0000000000000040 g       .entry.text\t0000000000000000 entry_SYSCALL_64\n\
             0000000000000000         *UND*\t0000000000000000 printk\n\
             0000000000000100 g     F .text\t0000000000000010 .hidden hidden_fn\n",
            LoadOptions { format: SymbolFormat::Auto, offset: 0xffff_ffff_a000_0000, section: None },
        );
        let names: Vec<_> = t.symbols().iter().map(|s| &*s.name).collect();
        assert_eq!(names, vec!["entry_SYSCALL_64", "hidden_fn", "i40e_napi_poll"]);
        assert_eq!(t.exact(0xffff_ffff_a002_406e).unwrap().name.as_ref(), "i40e_napi_poll");
        assert!(t.exact(0xffff_ffff_a002_406f).is_none());
        let (s, off) = t.lookup(0xffff_ffff_a002_4070).unwrap();
        assert_eq!((&*s.name, off), ("i40e_napi_poll", 2));
        assert!(t.lookup(0xffff_ffff_a002_406e + 0xda7).is_none(), "past the end of the function");
        let only_text = table(
            "SYMBOL TABLE:\n0000000000000040 g       .entry.text\t0000000000000000 e\n0000000000000050 g     F .text\t0000000000000001 f\n",
            LoadOptions { section: Some(".text".into()), ..LoadOptions::default() },
        );
        assert_eq!(only_text.len(), 1);
    }

    #[test]
    fn other_text_formats() {
        let d = table(
            "\nffffffff812c56ea <tty_set_termios>:\nffffffff812c56ea:\t55\tpush %rbp\n",
            LoadOptions::default(),
        );
        assert_eq!(d.exact(0xffff_ffff_812c_56ea).unwrap().name.as_ref(), "tty_set_termios");
        let r = table(
            "Symbol table '.symtab' contains 3 entries:\n   Num:    Value          Size Type    Bind   Vis      Ndx Name\n\
             \x20    1: ffffffff81000000    10 FUNC    GLOBAL DEFAULT    1 _stext\n\
             \x20    2: ffffffff81000010     4 OBJECT  GLOBAL DEFAULT    2 data\n\
             \x20    3: 0000000000000000     0 FILE    LOCAL  DEFAULT  ABS x.c\n",
            LoadOptions::default(),
        );
        assert_eq!(r.len(), 1);
        assert_eq!(r.symbols()[0].size, 10);
        let k = table(
            "KSYM ffffffff817b27b0 T __sys_sendto\nffffffff81c00080 T entry_SYSCALL_64\nffffffff82000000 D data\nffffffffc0000000 t e1000e_poll\t[e1000e]\n",
            LoadOptions { format: SymbolFormat::Nm, ..LoadOptions::default() },
        );
        assert_eq!(k.len(), 3);
        assert_eq!(k.exact(0xffff_ffff_c000_0000).unwrap().name.as_ref(), "e1000e_poll");
    }

    #[test]
    fn symbolizer_order_and_elf_errors() {
        let a = SymbolTable::from_bytes(b"0000000000000010 T a\n", "A", &LoadOptions::default()).unwrap();
        let b = SymbolTable::from_bytes(
            b"0000000000000010 T b\n0000000000000020 T c\n",
            "B",
            &LoadOptions::default(),
        )
        .unwrap();
        let s = Symbolizer::new(vec![a, b]);
        let (sym, id) = s.exact(0x10).unwrap();
        assert_eq!((&*sym.name, &**id), ("a", "A"));
        assert_eq!(&*s.exact(0x20).unwrap().0.name, "c");
        assert!(s.exact(0x30).is_none());
        assert!(SymbolTable::from_bytes(b"\x7fELF garbage", "x", &LoadOptions::default()).is_err());
    }
}
