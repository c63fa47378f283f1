//! Symbol tables: arbitrary bytes in every table format (objdump --syms, objdump -d labels,
//! readelf -s, nm/kallsyms, ELF, detected; the first byte picks the format, a section filter
//! and a load offset). Loading must never panic; a loaded table is sorted by address without
//! repeats, and every symbol is found at its own address.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_sources::symbols::{LoadOptions, SymbolFormat, SymbolTable};

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else { return };
    let opts = LoadOptions {
        format: SymbolFormat::ALL[pick as usize % SymbolFormat::ALL.len()],
        offset: u64::from(pick >> 3) << 40,
        section: (pick & 0x80 != 0).then(|| ".text".to_owned()),
    };
    let Ok(table) = SymbolTable::from_bytes(body, "fuzz", &opts) else { return };
    let syms = table.symbols();
    assert!(syms.windows(2).all(|w| w[0].addr < w[1].addr));
    for s in syms {
        assert_eq!(table.exact(s.addr), Some(s));
        let _ = table.lookup(s.addr.wrapping_add(s.size));
    }
});
