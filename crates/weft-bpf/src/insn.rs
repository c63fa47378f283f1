//! eBPF instructions and an assembler with forward labels.
//!
//! An instruction is the kernel's 8-byte `struct bpf_insn`: opcode, destination and source
//! registers (4 bits each), a signed 16-bit offset and a signed 32-bit immediate. `ld_imm64`
//! takes two slots. Jumps name [`Label`]s; [`Asm::finish`] resolves them into offsets
//! (`target - (pc + 1)`), so the generator never counts instructions by hand.

/// A register: `R0` (return value, helper result), `R1`–`R5` (helper arguments, clobbered by
/// calls), `R6`–`R9` (kept across calls), `R10` (read-only frame pointer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reg(pub u8);

pub const R0: Reg = Reg(0);
pub const R1: Reg = Reg(1);
pub const R2: Reg = Reg(2);
pub const R3: Reg = Reg(3);
pub const R6: Reg = Reg(6);
pub const R7: Reg = Reg(7);
pub const R8: Reg = Reg(8);
pub const R9: Reg = Reg(9);
pub const FP: Reg = Reg(10);

/// One `struct bpf_insn`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Insn {
    pub code: u8,
    /// `dst | src << 4`.
    pub regs: u8,
    pub off: i16,
    pub imm: i32,
}

impl Insn {
    pub fn new(code: u8, dst: Reg, src: Reg, off: i16, imm: i32) -> Insn {
        Insn { code, regs: (dst.0 & 0xf) | (src.0 << 4), off, imm }
    }

    /// The source register field (`BPF_PSEUDO_MAP_FD` in a map-loading `ld_imm64`).
    pub fn src(&self) -> u8 {
        self.regs >> 4
    }
}

// Instruction classes, sizes, modes, operations (include/uapi/linux/bpf_common.h, bpf.h).
const LD: u8 = 0x00;
const LDX: u8 = 0x01;
const ST: u8 = 0x02;
const STX: u8 = 0x03;
const ALU: u8 = 0x04;
const JMP: u8 = 0x05;
const ALU64: u8 = 0x07;
const IMM: u8 = 0x00;
const MEM: u8 = 0x60;
const K: u8 = 0x00;
const X: u8 = 0x08;
const CALL: u8 = 0x80;
const EXIT: u8 = 0x90;

/// Memory access sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    B = 0x10,
    H = 0x08,
    W = 0x00,
    DW = 0x18,
}

impl Size {
    /// The size of `bytes` (1, 2, 4 or 8).
    pub fn of(bytes: usize) -> Option<Size> {
        match bytes {
            1 => Some(Size::B),
            2 => Some(Size::H),
            4 => Some(Size::W),
            8 => Some(Size::DW),
            _ => None,
        }
    }
}

/// 64-bit ALU operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alu {
    Add = 0x00,
    Sub = 0x10,
    Mul = 0x20,
    Div = 0x30,
    Or = 0x40,
    And = 0x50,
    Lsh = 0x60,
    Rsh = 0x70,
    Mov = 0xb0,
    Arsh = 0xc0,
}

/// Conditional jumps (`S` variants compare signed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Jmp {
    Eq = 0x10,
    Gt = 0x20,
    Ge = 0x30,
    Ne = 0x50,
    Sgt = 0x60,
    Sge = 0x70,
    Lt = 0xa0,
    Le = 0xb0,
    Slt = 0xc0,
    Sle = 0xd0,
}

/// Kernel helper functions (their numbers in `enum bpf_func_id`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Helper {
    MapLookupElem = 1,
    MapUpdateElem = 2,
    MapDeleteElem = 3,
    KtimeGetNs = 5,
    GetSmpProcessorId = 8,
    GetCurrentPidTgid = 14,
    GetCurrentComm = 16,
}

/// A jump target, bound once with [`Asm::bind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Label(usize);

/// The assembler: instructions, labels and the jumps waiting for them.
#[derive(Debug, Default)]
pub struct Asm {
    insns: Vec<Insn>,
    labels: Vec<Option<usize>>,
    fixups: Vec<(usize, Label)>,
    /// `(instruction index, map index)` of every `ld_map` (patched with the map's fd at load).
    map_refs: Vec<(usize, usize)>,
}

/// An assembled program: instructions and where they load map fds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Code {
    pub insns: Vec<Insn>,
    /// `(instruction index, map index)`: the `ld_imm64` at the index loads that map's fd.
    pub map_refs: Vec<(usize, usize)>,
}

/// A label was used but never bound (a generator bug, reported instead of emitted).
#[derive(Debug, Clone, thiserror::Error)]
#[error("eBPF assembler: {0}")]
pub struct AsmError(pub String);

impl Asm {
    pub fn new() -> Asm {
        Asm::default()
    }

    pub fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }

    pub fn bind(&mut self, l: Label) {
        self.labels[l.0] = Some(self.insns.len());
    }

    fn push(&mut self, i: Insn) {
        self.insns.push(i);
    }

    /// `dst = imm` (64-bit, `imm` sign-extended).
    pub fn mov_imm(&mut self, dst: Reg, imm: i32) {
        self.push(Insn::new(ALU64 | Alu::Mov as u8 | K, dst, R0, 0, imm));
    }

    /// `dst = src`.
    pub fn mov(&mut self, dst: Reg, src: Reg) {
        self.push(Insn::new(ALU64 | Alu::Mov as u8 | X, dst, src, 0, 0));
    }

    /// `dst = (u32) src` (clears the upper half).
    pub fn mov32(&mut self, dst: Reg, src: Reg) {
        self.push(Insn::new(ALU | Alu::Mov as u8 | X, dst, src, 0, 0));
    }

    /// `dst op= imm`.
    pub fn alu_imm(&mut self, op: Alu, dst: Reg, imm: i32) {
        self.push(Insn::new(ALU64 | op as u8 | K, dst, R0, 0, imm));
    }

    /// `dst op= src`.
    pub fn alu(&mut self, op: Alu, dst: Reg, src: Reg) {
        self.push(Insn::new(ALU64 | op as u8 | X, dst, src, 0, 0));
    }

    /// `dst = imm64` (two slots).
    pub fn ld_imm64(&mut self, dst: Reg, imm: i64) {
        self.push(Insn::new(LD | IMM | Size::DW as u8, dst, R0, 0, imm as i32));
        self.push(Insn::new(0, R0, R0, 0, (imm >> 32) as i32));
    }

    /// `dst = &map` (`ld_imm64` with `BPF_PSEUDO_MAP_FD`; the fd is filled in at load).
    pub fn ld_map(&mut self, dst: Reg, map: usize) {
        self.map_refs.push((self.insns.len(), map));
        self.push(Insn::new(LD | IMM | Size::DW as u8, dst, Reg(1), 0, 0));
        self.push(Insn::new(0, R0, R0, 0, 0));
    }

    /// `dst = *(size *)(src + off)`.
    pub fn ldx(&mut self, size: Size, dst: Reg, src: Reg, off: i16) {
        self.push(Insn::new(LDX | MEM | size as u8, dst, src, off, 0));
    }

    /// `*(size *)(dst + off) = src`.
    pub fn stx(&mut self, size: Size, dst: Reg, off: i16, src: Reg) {
        self.push(Insn::new(STX | MEM | size as u8, dst, src, off, 0));
    }

    /// `*(size *)(dst + off) = imm`.
    pub fn st(&mut self, size: Size, dst: Reg, off: i16, imm: i32) {
        self.push(Insn::new(ST | MEM | size as u8, dst, R0, off, imm));
    }

    /// `if dst op imm goto l`.
    pub fn jmp_imm(&mut self, op: Jmp, dst: Reg, imm: i32, l: Label) {
        self.fixups.push((self.insns.len(), l));
        self.push(Insn::new(JMP | op as u8 | K, dst, R0, 0, imm));
    }

    /// `if dst op src goto l`.
    pub fn jmp(&mut self, op: Jmp, dst: Reg, src: Reg, l: Label) {
        self.fixups.push((self.insns.len(), l));
        self.push(Insn::new(JMP | op as u8 | X, dst, src, 0, 0));
    }

    /// `goto l`.
    pub fn ja(&mut self, l: Label) {
        self.fixups.push((self.insns.len(), l));
        self.push(Insn::new(JMP, R0, R0, 0, 0));
    }

    /// Calls a kernel helper (arguments in R1–R5, result in R0; R1–R5 are clobbered).
    pub fn call(&mut self, h: Helper) {
        self.push(Insn::new(JMP | CALL, R0, R0, 0, h as i32));
    }

    pub fn exit(&mut self) {
        self.push(Insn::new(JMP | EXIT, R0, R0, 0, 0));
    }

    /// `R0 = 0; exit`.
    pub fn ret0(&mut self) {
        self.mov_imm(R0, 0);
        self.exit();
    }

    /// `dst = FP + off` (a pointer to the stack).
    pub fn stack_ptr(&mut self, dst: Reg, off: i16) {
        self.mov(dst, FP);
        self.alu_imm(Alu::Add, dst, off as i32);
    }

    /// Resolves every jump; fails on an unbound label or an offset beyond 16 bits.
    pub fn finish(self) -> Result<Code, AsmError> {
        let mut insns = self.insns;
        for (at, l) in self.fixups {
            let target = self.labels[l.0].ok_or_else(|| AsmError(format!("label {} never bound", l.0)))?;
            let off = target as i64 - at as i64 - 1;
            insns[at].off =
                i16::try_from(off).map_err(|_| AsmError(format!("jump of {off} instructions")))?;
        }
        Ok(Code { insns, map_refs: self.map_refs })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_like_the_kernel_headers() {
        let mut a = Asm::new();
        let end = a.label();
        a.mov_imm(R0, 7); // b7 00 .. imm 7
        a.jmp_imm(Jmp::Eq, R1, 3, end); // 15 01
        a.ld_imm64(R2, 0x1_0000_0002);
        a.ldx(Size::DW, R3, R6, 16); // 79 63 off 16
        a.bind(end);
        a.exit(); // 95
        let c = a.finish().unwrap();
        assert_eq!(c.insns[0], Insn { code: 0xb7, regs: 0, off: 0, imm: 7 });
        assert_eq!((c.insns[1].code, c.insns[1].regs, c.insns[1].off), (0x15, 0x01, 3));
        assert_eq!((c.insns[2].code, c.insns[2].imm, c.insns[3].imm), (0x18, 2, 1));
        assert_eq!((c.insns[4].code, c.insns[4].regs, c.insns[4].off), (0x79, 0x63, 16));
        assert_eq!(c.insns[5].code, 0x95);
        assert_eq!(std::mem::size_of::<Insn>(), 8);
        let mut bad = Asm::new();
        let l = bad.label();
        bad.ja(l);
        assert!(bad.finish().is_err());
    }
}
