"""A code object placed in host memory for the emulator, as the HSA loader places it on a GPU.

The emulator reads instructions and data at plain host addresses (its memory is the process's), so
a loaded image is a private copy of the object's allocated sections at their virtual addresses.
Each kernel is found by name the way HIP finds it: the symbol ``<name>.kd`` gives its 64-byte kernel
descriptor (llvm's amdhsa kernel_descriptor_t), whose entry offset gives the first instruction; the
metadata note (read by :func:`kernelpack.formats.read_code_object`) gives its arguments.

Instructions the emulator does not execute and that are no-ops on its memory are rewritten in that
copy, kernel by kernel, as the table :data:`NO_OP_REWRITES` says, and counted; so is the one
instruction it cannot execute that has a meaning, ``s_getpc_b64`` (its instruction compiler has no
PC in scalar ALU code): where the compiler uses it to address the object's read-only data
(``s_getpc_b64`` then a 64-bit literal offset added to the pair), the three instructions become
two ``s_mov_b32`` of the absolute address they compute in this copy, and an ``s_nop 0`` (the same
20 bytes; only SCC, which the compiler never reads after that addition, differs). And on CDNA,
where LLVM encodes a FLAT instruction's SADDR field (which FLAT does not use) as 0, which the
emulator reads as s[0:1] added to the address, the field is set to 0x7F ("off", as GLOBAL's unused
SADDR is encoded): the address is the VGPR pair's, as the hardware takes it. On RDNA4, whose FLAT
instructions the emulator cannot compile (their pseudocode reads flat_scratch, which it lacks), a
flat_* instruction becomes the global_* of the same operation and operands (one byte of the
encoding differs): the same access for a global address, which every address an emulated kernel is
given is (a flat address into LDS or scratch would not be; the emulator has no such apertures).
On RDNA, ``v_mov_b32_dpp`` with the DPP16 control ``row_share:0`` (each lane takes lane 0 of
its row of 16: 0x150, which the emulator's table names row_newbcast, CDNA's name, and does not
run; HIP's ``__syncthreads_count`` has it) becomes ``v_permlane16_b32`` with every lane select
0, its fetch-inactive and bound-control bits the DPP word's (op_sel): the same 8 bytes, the
same operation on the hardware. (``row_share:15`` likewise, with selects of all ones; other
lanes would need a literal, which does not fit in the 8 bytes, and are left to the emulator's
own message.) The emulator's permlane16 reads inactive source lanes as they are, where the
hardware's bound control gives 0: the same wherever the source lanes are active, as they are
in every kernel that uses it here.

And an atomic that returns the memory's old value on CDNA (FLAT or GLOBAL with sc0, gfx9's glc)
or RDNA4 (th:TH_ATOMIC_RETURN) is counted, not rewritten: the emulator returns the value where
the instruction's ``glc`` says so, a field those classes name otherwise, so kernelpack gives them
a ``glc`` that reads their bit (kernelpack.emulator._checkout); without it such an atomic leaves
its destination unwritten (walk_select_top then wrote its records at a stale address: SIGSEGV).

The installed image is never changed (it was checked against the index's sha256 before it got
here).
"""

from __future__ import annotations

import ctypes
import struct
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import RuntimeLibraryError
from ..formats import read_code_object
from ..formats.elf import Elf

EM_AMDGPU = 224
SHT_NOBITS = 8
SHT_RELA, SHT_REL = 4, 9
STT_FUNC = 2
S_NOP_0 = struct.pack("<I", 0xBF800000)  # s_nop 0: the same word on gfx9, gfx11 and gfx12
# The emulator reads up to 16 bytes at the program counter; the copy ends in this much padding.
TAIL_PADDING = 64

# llvm's amdhsa kernel_descriptor_t (AMDGPUUsage, "Kernel Descriptor"): group (LDS) and private
# (scratch) segment bytes, kernarg bytes, entry offset, rsrc3, rsrc1, rsrc2, code properties,
# kernarg preload
_DESCRIPTOR = struct.Struct("<IIIxxxxq20xIIIHH4x")
# kernel_code_properties: the user SGPRs each enables, in the order the hardware loads them
USER_SGPRS = (
    (0x001, "private_segment_buffer", 4),
    (0x002, "dispatch_ptr", 2),
    (0x004, "queue_ptr", 2),
    (0x008, "kernarg_segment_ptr", 2),
    (0x010, "dispatch_id", 2),
    (0x020, "flat_scratch_init", 2),
    (0x040, "private_segment_size", 1),
)
WAVEFRONT_SIZE32 = 0x400


@dataclass(frozen=True)
class NoOpRewrite:
    """An instruction the emulator cannot run that does nothing on its coherent memory, replaced
    by as many ``s_nop 0`` as it has words: found by the decoder's op name (``op``), or by its
    encoding (``words``, little-endian) where the decoder does not know it."""

    arch: str
    mnemonic: str
    why: str
    op: str = ""
    words: bytes = b""


NO_OP_REWRITES: tuple[NoOpRewrite, ...] = (
    NoOpRewrite(
        "rdna3",
        "buffer_gl0_inv",
        "invalidates the L0 cache after __syncthreads; the emulator does not decode it",
        words=bytes.fromhex("0000ace000000000"),
    ),
    NoOpRewrite(
        "rdna4",
        "global_inv",
        "invalidates caches after __syncthreads; the emulator decodes it but cannot run it",
        op="GLOBAL_INV",
    ),
)


# The PC-relative address the compiler materializes: s_getpc_b64 s[n:n+1], then s_add_u32 s[n],
# s[n], literal and s_addc_u32 s[n+1], s[n+1], literal (gfx12 names them s_add_co_u32 and
# s_add_co_ci_u32); SOP1 and SOP2 keep their fields in the same bits on gfx9, gfx11 and gfx12.
GETPC = "S_GETPC_B64"
ADD_LOW = ("S_ADD_U32", "S_ADD_CO_U32")
ADD_HIGH = ("S_ADDC_U32", "S_ADD_CO_CI_U32")
SOP_LITERAL = 255  # an SSRC field's code for the literal word that follows the instruction
S_MOV_B32 = 0xBE800000 | SOP_LITERAL  # SOP1 s_mov_b32 sdst, literal (sdst in bits 22:16)
PC_RELATIVE = "s_getpc_b64 + 64-bit offset rewritten to two s_mov_b32 of the address"
# CDNA's FLAT encoding (two words): bits 31:26 of the first 0b110111 and SEG (15:14) 0; SADDR in
# bits 22:16 of the second
FLAT_SADDR = "flat_* SADDR field 0 (unused) set to 0x7F"
SADDR_OFF = 0x7F
# RDNA4's VFLAT and VGLOBAL encodings: the same fields and operation numbers, bits 31:24 differ
RDNA4_FLAT, RDNA4_GLOBAL = 0xEC, 0xEE
FLAT_AS_GLOBAL = "flat_* re-encoded as global_* (RDNA4)"
# RDNA's VOP1 with a DPP16 word (two words): bits 8:0 of the first 0xFA (src0 = DPP), 31:25
# 0b0111111, the operation in 16:9 (1: v_mov_b32), vdst in 24:17; the second word has the source
# VGPR in 7:0, the control in 16:8, FI in 18, BC in 19, the source modifiers in 23:20, bank_mask
# in 27:24 and row_mask in 31:28. v_permlane16_b32 (VOP3, the same on gfx11 and gfx12): op_sel
# bits 12:11 (FI, BC), vdst in 7:0; src0 (256 + VGPR), src1 and src2 (the lane selects, here
# inline constants) in the second word's 8:0, 17:9 and 26:18.
DPP16_SRC0, VOP1_V_MOV_B32 = 0xFA, 1
ROW_SHARE_FIRST = 0x150
V_PERMLANE16_B32 = 0xD65B0000
# row_share:N -> the select of every lane: N in each nibble, as an inline constant
ROW_SHARE_SELECTS = {0: 128, 15: 193}  # 0, -1
ROW_SHARE = "v_mov_b32_dpp row_share:N rewritten to v_permlane16_b32 (selects N)"
# Whether an atomic returns the old value: CDNA's FLAT/GLOBAL sc0, bit 16 (gfx9's glc); RDNA4's
# VFLAT/VGLOBAL th:TH_ATOMIC_RETURN, bit 52 (bit 0 of th)
RETURN_BIT = {"cdna": (("FLAT", "GLOBAL"), 16), "rdna4": (("VFLAT", "VGLOBAL"), 52)}
RETURNING_ATOMIC = "returning atomics run through the glc name kernelpack supplies"


def _op_name(decode: Callable[[bytes, str], Any], window: bytes, arch: str) -> str:
    try:
        return str(getattr(getattr(decode(window, arch), "op", None), "name", ""))
    except Exception:  # the decoder's own error: not the instruction looked for
        return ""


@dataclass
class KernelCode:
    """One kernel of a placed image: where it starts, what its descriptor and metadata say."""

    name: str  # the symbol (mangled for C++ kernels)
    entry: int  # absolute address of the first instruction
    size: int  # bytes of code (its function symbol's size)
    group_segment: int  # static LDS bytes
    private_segment: int  # scratch bytes a work-item
    kernarg_size: int
    rsrc2: int
    properties: int  # kernel_code_properties
    kernarg_preload: int
    wavefront: int
    args: tuple[Any, ...]  # kernelpack.formats.code_objects.KernelArg: explicit and hidden
    rewrites: Counter[str] = field(default_factory=Counter)

    @property
    def user_sgprs(self) -> list[tuple[str, int]]:
        """The user SGPRs the descriptor enables, in load order: (what, count)."""
        return [(what, n) for bit, what, n in USER_SGPRS if self.properties & bit]


class PlacedImage:
    """A code object's allocated sections copied into host memory at their virtual addresses."""

    def __init__(self, data: bytes, label: str, arch: str) -> None:
        self.label = label
        self.arch = arch
        elf = Elf(data, label, machine=EM_AMDGPU, what="AMD code object")
        for section in elf.sections:
            if section.addr and section.type in (SHT_RELA, SHT_REL):
                raise RuntimeLibraryError(
                    f"{label}: has dynamic relocations ({section.name}); the emulated runtime "
                    "loads objects without them only"
                )
        end = max(s.addr + s.size for s in elf.sections if s.addr)
        self._memory = (ctypes.c_ubyte * (end + TAIL_PADDING))()
        self.base = ctypes.addressof(self._memory)
        for section in elf.sections:
            if section.addr and section.type != SHT_NOBITS:
                ctypes.memmove(self.base + section.addr, elf.contents(section), section.size)
        table = elf.section(".symtab") or elf.section(".dynsym")
        symbols = elf.symbols(table) if table is not None else []
        self._symbols = {s.name: s for s in symbols if s.name}
        self._functions = {s.value: s.size for s in symbols if s.type == STT_FUNC}
        self._metadata = {k.name: k for k in read_code_object(data, label).kernels}
        self._metadata.update({k.symbol: k for k in self._metadata.values()})
        self._kernels: dict[str, KernelCode] = {}

    def read(self, address: int, size: int) -> bytes:
        return ctypes.string_at(address, size)

    def kernel(self, symbol: str, decode: Callable[[bytes, str], Any]) -> KernelCode:
        """The kernel whose symbol is ``symbol``, its no-op instructions rewritten (once)."""
        found = self._kernels.get(symbol)
        if found is not None:
            return found
        descriptor = self._symbols.get(symbol + ".kd")
        metadata = self._metadata.get(symbol) or self._metadata.get(symbol + ".kd")
        if descriptor is None or metadata is None:
            raise RuntimeLibraryError(
                f"{self.label}: no kernel {symbol!r} (no {symbol}.kd descriptor with metadata)"
            )
        kd = self.base + descriptor.value
        group, private, kernarg, entry, _rsrc3, _rsrc1, rsrc2, properties, preload = (
            _DESCRIPTOR.unpack(self.read(kd, _DESCRIPTOR.size))
        )
        start = descriptor.value + entry
        size = self._functions.get(start) or (len(self._memory) - TAIL_PADDING - start)
        code = KernelCode(
            symbol,
            self.base + start,
            size,
            group,
            private,
            kernarg,
            rsrc2,
            properties,
            preload,
            32 if properties & WAVEFRONT_SIZE32 else 64,
            tuple(metadata.args),
        )
        self._rewrite(code, decode)
        self._kernels[symbol] = code
        return code

    def _rewrite(self, code: KernelCode, decode: Callable[[bytes, str], Any]) -> None:
        """Walks the kernel's instructions and rewrites the table's no-ops to s_nop; stops at the
        first word the decoder does not know that no row names (the emulator would stop there
        too, with its own message, should the kernel reach it)."""
        rules = [r for r in NO_OP_REWRITES if r.arch == self.arch]
        at, end = code.entry, code.entry + code.size
        while at < end:
            window = self.read(at, 16)
            rule = next((r for r in rules if r.words and window.startswith(r.words)), None)
            if rule is not None:
                size = len(rule.words)
            else:
                try:
                    inst = decode(window, self.arch)
                    size = int(inst.size())
                except Exception:  # the decoder's own error: an encoding it does not know
                    return
                op = getattr(inst, "op", None)
                name = getattr(op, "name", "")
                if self.arch == "cdna" and type(inst).__name__ == "FLAT" and size == 8:
                    first, second = struct.unpack("<II", window[:8])
                    if (first >> 14) & 3 == 0 and (second >> 16) & 0x7F != SADDR_OFF:
                        second = (second & ~(0x7F << 16)) | SADDR_OFF << 16
                        ctypes.memmove(at + 4, struct.pack("<I", second), 4)
                        code.rewrites[FLAT_SADDR] += 1
                if (
                    self.arch == "rdna4"
                    and type(inst).__name__ == "VFLAT"
                    and window[3] == RDNA4_FLAT
                ):
                    as_global = window[:3] + bytes([RDNA4_GLOBAL]) + window[4:]
                    if _op_name(decode, as_global, self.arch) == "GLOBAL_" + name[len("FLAT_") :]:
                        ctypes.memmove(at + 3, bytes([RDNA4_GLOBAL]), 1)
                        code.rewrites[FLAT_AS_GLOBAL] += 1
                kinds, bit = RETURN_BIT.get(self.arch, ((), 0))
                if (
                    type(inst).__name__ in kinds
                    and "ATOMIC" in name
                    and int.from_bytes(window[:size], "little") >> bit & 1
                ):
                    code.rewrites[RETURNING_ATOMIC] += 1
                if self.arch in ("rdna3", "rdna4") and self._share_as_permlane(at, decode):
                    code.rewrites[ROW_SHARE] += 1
                if name == GETPC and self._materialize_pc(at, decode):
                    code.rewrites[PC_RELATIVE] += 1
                    at += 20
                    continue
                rule = next((r for r in rules if r.op and r.op == name), None)
            if rule is not None:
                ctypes.memmove(at, S_NOP_0 * (size // 4), size)
                code.rewrites[f"{rule.mnemonic} rewritten to s_nop"] += 1
            at += size

    def _materialize_pc(self, at: int, decode: Callable[[bytes, str], Any]) -> bool:
        """At the s_getpc_b64 at ``at``: where the two additions of a 64-bit literal offset to its
        pair follow, the three become s_mov_b32 of the address's halves and s_nop 0 (module
        docstring); False, and nothing changed, where the code is another."""
        getpc, low, offset_low, high, offset_high = struct.unpack("<5I", self.read(at, 20))
        pair = (getpc >> 16) & 0x7F

        def adds_literal(word: int, register: int) -> bool:
            sources = {word & 0xFF, (word >> 8) & 0xFF}
            return (word >> 16) & 0x7F == register and sources == {register, SOP_LITERAL}

        if not (
            _op_name(decode, self.read(at + 4, 16), self.arch) in ADD_LOW
            and _op_name(decode, self.read(at + 12, 16), self.arch) in ADD_HIGH
            and adds_literal(low, pair)
            and adds_literal(high, pair + 1)
        ):
            return False
        address = (at + 4 + (offset_high << 32 | offset_low)) % 2**64
        moves = struct.pack(
            "<5I",
            S_MOV_B32 | pair << 16,
            address & 0xFFFFFFFF,
            S_MOV_B32 | (pair + 1) << 16,
            address >> 32,
            struct.unpack("<I", S_NOP_0)[0],
        )
        for start, name in ((0, "S_MOV_B32"), (8, "S_MOV_B32"), (16, "S_NOP")):
            if _op_name(decode, moves[start:] + bytes(16), self.arch) != name:
                return False  # an encoding this decoder reads otherwise: leave the code as it is
        ctypes.memmove(at, moves, len(moves))
        return True

    def _share_as_permlane(self, at: int, decode: Callable[[bytes, str], Any]) -> bool:
        """At ``at``: a ``v_mov_b32_dpp`` of ``row_share:N`` on every row and bank without source
        modifiers, for an N whose selects are an inline constant, becomes the
        ``v_permlane16_b32`` of the same lanes (module docstring); False, and nothing changed,
        for any other instruction."""
        first, second = struct.unpack("<II", self.read(at, 8))
        control = (second >> 8) & 0x1FF
        selects = ROW_SHARE_SELECTS.get(control - ROW_SHARE_FIRST)
        if not (
            first & 0x1FF == DPP16_SRC0
            and first >> 25 == 0x3F
            and (first >> 9) & 0xFF == VOP1_V_MOV_B32
            and selects is not None
            and (second >> 20) & 0xF == 0  # no neg or abs
            and second >> 24 == 0xFF  # row_mask and bank_mask 0xF: every lane written
        ):
            return False
        fetch_inactive, bound_control = (second >> 18) & 1, (second >> 19) & 1
        vdst, vsrc = (first >> 17) & 0xFF, second & 0xFF
        permlane = struct.pack(
            "<II",
            V_PERMLANE16_B32 | bound_control << 12 | fetch_inactive << 11 | vdst,
            (256 + vsrc) | selects << 9 | selects << 18,
        )
        if _op_name(decode, permlane + bytes(8), self.arch) != "V_PERMLANE16_B32":
            return False  # an encoding this decoder reads otherwise: leave the code as it is
        ctypes.memmove(at, permlane, len(permlane))
        return True
