"""The probe kernels of tests/test_emulator_compat.py and CUDA's semantics of what they call.

The probe is CUDA source, as a user writes it: the builder translates it (hipify inserts the
compat header because it calls the header's names) and compiles it for each emulated target. Each
kernel writes one row of ``n`` results per call it makes (ROWS below, in the kernel's order), so
one launch checks many helpers. The references are written from CUDA's documentation (the CUDA
Math API's SIMD intrinsics, the Programming Guide's warp functions, PTX's cvt and mov), in plain
Python integers and fractions, not from the header: tests/hipify_compat_gpu.cu compares the
header's text with CUDA's own intrinsics bit for bit on an NVIDIA GPU, this compares the AMD
instructions clang made of it with the same semantics. Not a test module.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import numpy as np

HEADER = Path(__file__).resolve().parents[1] / "buildsys/hipify/compat/kernelpack_hip_compat.h"

# ---- what the header defines, read from its text --------------------------------------------

# How each macro the header invokes at file scope names what it defines; a macro not listed here
# makes helpers_defined() fail, so a new kind of helper cannot go unchecked.
_MACRO_NAMES: dict[str, Callable[[str], list[str]]] = {
    "KP_SIMD1": lambda first: [first],
    "KP_SIMD2": lambda first: [first],
    "KP_SIMD_BOTH": lambda first: [first + "2", first + "4"],
    "KP_WARP_REDUCE": lambda first: [first],
    "KP_LOAD": lambda first: [first],
    "KP_STORE": lambda first: [first],
    "KP_INT_TO_BF16": lambda first: [first],
    "KP_UINT_TO_BF16": lambda first: [first],
    "KP_BF16_SHUFFLE": lambda first: [first + "(bf16)"],
    "KP_MIXED_MIN_MAX": lambda first: ["min", "max"],
    "KP_MULTI_WARP_TILE": lambda first: [f"tiled_partition<{first}>"],
    "KP_TILE_SHUFFLE_TYPES": lambda first: [f"tile.shfl<{first}>"],
    # kernelpack_compat::any_shfl...: what the tile shuffles above are made of, no CUDA name
    "KP_ANY_SHUFFLE": lambda first: [],
}
_INVOCATION = re.compile(r"\b(KP_[A-Z0-9_]+)\(\s*(\w+)")  # a macro and its first argument
_DIRECT = re.compile(r"\bKP_COMPAT\((\w+)\)\s*\(")
_PTX = re.compile(r"__device__ inline void (\w+)\(")
_CG = re.compile(r"__device__ inline \w+ (reduce|inclusive_scan|exclusive_scan)\(")


def helpers_defined(text: str | None = None) -> set[str]:
    """Every helper the compat header defines: the functions it names through KP_COMPAT, those
    its helper macros make, the cooperative-groups collectives and the PTX replacements
    (kernelpack_compat::ptx). Raises ValueError on a macro invocation it does not know."""
    text = HEADER.read_text(encoding="utf-8") if text is None else text
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("#define"):
            continue
        for match in _DIRECT.finditer(line):
            if match[1] not in {"name", "op"}:  # the helper macros' own definitions
                names.add(match[1])
        if line.startswith("KP_"):
            for macro, first in _INVOCATION.findall(line):
                if macro not in _MACRO_NAMES:
                    raise ValueError(f"compat header: unknown helper macro {macro} in {line!r}")
                names.update(_MACRO_NAMES[macro](first))
    ptx = text[text.index("namespace ptx {") :]
    names.update(f"ptx::{name}" for name in _PTX.findall(ptx) if not name.startswith("set"))
    names.update(f"cg::{name}" for name in _CG.findall(text))
    if "struct block_tile_memory" in text:
        names.add("cg::block_tile_memory")
    return names


# ---- CUDA semantics, exact -------------------------------------------------------------------


def lanes(word: int, bits: int, signed: bool) -> list[int]:
    """The byte (bits 8) or half-word (16) lanes of a 32-bit word, lowest first."""
    mask = (1 << bits) - 1
    out = [(word >> (k * bits)) & mask for k in range(32 // bits)]
    if signed:
        out = [v - (1 << bits) if v >> (bits - 1) else v for v in out]
    return out


def pack(values: list[int], bits: int) -> int:
    mask = (1 << bits) - 1
    return sum((v & mask) << (k * bits) for k, v in enumerate(values))


def _sat(v: int, bits: int, signed: bool) -> int:
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    return min(max(v, lo), hi)


def _avg_signed(x: int, y: int) -> int:
    # CUDA's __vavgs: the signed average rounded away from zero at halves (PTX vavrg on the sum's
    # sign; the NVIDIA test confirms the rounding bit for bit)
    s = x + y
    return (s + 1) >> 1 if s >= 0 else -((1 - s) >> 1)


SIMD_BINARY: dict[str, tuple[bool, Callable[[int, int, int], int]]] = {
    # stem: (signed lanes, per-lane result of x, y at lane width b)
    "__vabsdiffs": (True, lambda x, y, b: abs(x - y)),
    "__vabsdiffu": (False, lambda x, y, b: abs(x - y)),
    "__vadd": (False, lambda x, y, b: x + y),
    "__vaddss": (True, lambda x, y, b: _sat(x + y, b, True)),
    "__vaddus": (False, lambda x, y, b: _sat(x + y, b, False)),
    "__vsub": (False, lambda x, y, b: x - y),
    "__vsubss": (True, lambda x, y, b: _sat(x - y, b, True)),
    "__vsubus": (False, lambda x, y, b: _sat(x - y, b, False)),
    "__vavgs": (True, lambda x, y, b: _avg_signed(x, y)),
    "__vavgu": (False, lambda x, y, b: (x + y + 1) // 2),
    "__vhaddu": (False, lambda x, y, b: (x + y) // 2),
    "__vmaxs": (True, lambda x, y, b: max(x, y)),
    "__vmaxu": (False, lambda x, y, b: max(x, y)),
    "__vmins": (True, lambda x, y, b: min(x, y)),
    "__vminu": (False, lambda x, y, b: min(x, y)),
}
_COMPARISONS: dict[str, Callable[[int, int], bool]] = {
    "eq": lambda x, y: x == y,
    "ne": lambda x, y: x != y,
    "ge": lambda x, y: x >= y,
    "gt": lambda x, y: x > y,
    "le": lambda x, y: x <= y,
    "lt": lambda x, y: x < y,
}
for _op, _test in _COMPARISONS.items():
    for _sign in ("",) if _op in {"eq", "ne"} else ("s", "u"):
        _signed = _sign == "s"
        SIMD_BINARY[f"__vcmp{_op}{_sign}"] = (_signed, lambda x, y, b, t=_test: -int(t(x, y)))
        SIMD_BINARY[f"__vset{_op}{_sign}"] = (_signed, lambda x, y, b, t=_test: int(t(x, y)))
SIMD_UNARY: dict[str, Callable[[int, int], int]] = {
    "__vabs": lambda x, b: abs(x),
    "__vabsss": lambda x, b: _sat(abs(x), b, True),
    "__vneg": lambda x, b: -x,
    "__vnegss": lambda x, b: _sat(-x, b, True),
}
SAD: dict[str, bool] = {"__vsads": True, "__vsadu": False}


def simd(name: str, a: int, b: int) -> int:
    """CUDA's result of the SIMD video intrinsic ``name`` (__vadd4, __vsads2, ...) on words a, b."""
    stem, width = name[:-1], {"2": 16, "4": 8}[name[-1]]
    if stem in SIMD_UNARY:
        return pack([SIMD_UNARY[stem](x, width) for x in lanes(a, width, True)], width)
    if stem in SAD:
        xs, ys = lanes(a, width, SAD[stem]), lanes(b, width, SAD[stem])
        return sum(abs(x - y) for x, y in zip(xs, ys, strict=True)) & 0xFFFFFFFF
    signed, op = SIMD_BINARY[stem]
    xs, ys = lanes(a, width, signed), lanes(b, width, signed)
    return pack([op(x, y, width) for x, y in zip(xs, ys, strict=True)], width)


def dp4a(a: int, b: int, c: int, signed: bool) -> int:
    """PTX dp4a: c plus the four byte products, modulo 2^32."""
    total = c + sum(x * y for x, y in zip(lanes(a, 8, signed), lanes(b, 8, signed), strict=True))
    return total & 0xFFFFFFFF


def dp2a(a: int, b: int, c: int, signed: bool, high: bool) -> int:
    """PTX dp2a.lo/.hi: c plus a's two half-words times bytes 0-1 (lo) or 2-3 (hi) of b."""
    bs = lanes(b, 8, signed)[2:] if high else lanes(b, 8, signed)[:2]
    return (c + sum(x * y for x, y in zip(lanes(a, 16, signed), bs, strict=True))) & 0xFFFFFFFF


def mixed_min_max(a: int, b: int, bits: int, want_max: bool) -> int:
    """CUDA's min/max of a signed and an unsigned integer: both compared as the unsigned type."""
    mask = (1 << bits) - 1
    x, y = a & mask, b & mask
    return max(x, y) if want_max else min(x, y)


# ---- 16-bit floats ---------------------------------------------------------------------------


class Format:
    """A binary floating-point format: ``mantissa`` fraction bits, exponent ``bias``."""

    def __init__(self, mantissa: int, exponent: int) -> None:
        self.mantissa, self.exponent = mantissa, exponent
        self.bias = (1 << (exponent - 1)) - 1
        self.inf = ((1 << exponent) - 1) << mantissa

    def value(self, bits: int) -> Fraction | float:
        """The exact value of ``bits`` (float("nan") / +-inf where it is not finite)."""
        sign = -1 if bits >> (self.mantissa + self.exponent) else 1
        e = (bits >> self.mantissa) & ((1 << self.exponent) - 1)
        m = bits & ((1 << self.mantissa) - 1)
        if e == (1 << self.exponent) - 1:
            return float("nan") if m else sign * float("inf")
        if e == 0:
            return sign * Fraction(m, 1 << (self.mantissa + self.bias - 1))
        return (
            sign
            * Fraction((1 << self.mantissa) | m)
            * Fraction(2) ** (e - self.bias - self.mantissa)
        )

    def round(self, value: Fraction | float) -> int:
        """``value`` rounded to nearest, ties to even, as bits (infinities kept; NaN not taken)."""
        sign_bit = 1 << (self.mantissa + self.exponent)
        if isinstance(value, float):
            assert value in (float("inf"), float("-inf")), value
            return self.inf | (sign_bit if value < 0 else 0)
        sign = sign_bit if value < 0 else 0
        x = abs(value)
        if x == 0:
            return sign
        e = x.numerator.bit_length() - x.denominator.bit_length()  # floor(log2 x) or one more
        if Fraction(2) ** e > x:
            e -= 1
        e = max(e, 1 - self.bias)  # below the least normal: the subnormals' spacing
        scaled = x / Fraction(2) ** (e - self.mantissa)
        q, rest = divmod(scaled.numerator, scaled.denominator)
        if 2 * rest > scaled.denominator or (2 * rest == scaled.denominator and q & 1):
            q += 1
        if q == 1 << (self.mantissa + 1):  # rounded up to the next power of two
            q, e = q >> 1, e + 1
        if e > self.bias:
            return sign | self.inf
        if q < 1 << self.mantissa:  # subnormal
            return sign | q
        return sign | ((e + self.bias) << self.mantissa) | (q - (1 << self.mantissa))


HALF = Format(10, 5)
BF16 = Format(7, 8)
FLOAT = Format(23, 8)
CANONICAL_NAN = 0x7FFF  # PTX's NaN result of a 16-bit add, cvt to bf16, max.NaN


def is_nan16(bits: int, fmt: Format) -> bool:
    return (bits & ~(1 << 15)) > fmt.inf


def add16(a: int, b: int, fmt: Format) -> int:
    """The correctly rounded 16-bit sum CUDA's atomicAdd(__half*/__nv_bfloat16*) stores."""
    x, y = fmt.value(a), fmt.value(b)
    if x == 0 and y == 0:  # -0 + -0 is -0; any other sum of zeros +0
        return a & b & 0x8000
    if isinstance(x, float) or isinstance(y, float):
        total = float(x) + float(y)
        return CANONICAL_NAN if total != total else fmt.round(total)
    return fmt.round(x + y)


def bf16_max_min_nan(a: int, b: int, want_max: bool) -> int:
    """__hmax_nan / __hmin_nan on bf16: NaN if either is NaN, +0 above -0."""
    if is_nan16(a, BF16) or is_nan16(b, BF16):
        return CANONICAL_NAN

    def key(bits: int) -> tuple[float | Fraction, int]:
        return BF16.value(bits), 0 if bits >> 15 else 1  # -0 below +0

    pick = max if want_max else min
    return pick((a, b), key=key)


def float_to(bits32: int, fmt: Format) -> int:
    """cvt.rn of a float32 (its bits) to ``fmt``: NaN to the canonical 0x7fff (bf16's rule)."""
    value = FLOAT.value(bits32)
    if isinstance(value, float) and value != value:
        return CANONICAL_NAN
    if value == 0:  # a zero keeps its sign
        return (bits32 >> 31) << 15
    return fmt.round(value)


def widen(bits16: int, fmt: Format) -> int:
    """cvt.f32 of a 16-bit float: the float32 bits of the same value (exact)."""
    value = fmt.value(bits16)
    if isinstance(value, float) and value != value:
        raise ValueError("NaN widening is not compared")
    if value == 0:
        return (bits16 >> 15) << 31
    return FLOAT.round(value)


def int_to_bf16(v: int) -> int:
    """__int2bfloat16_rn and its kin: the integer rounded once to bf16."""
    return BF16.round(Fraction(v))


# ---- warps (CUDA: 32-lane warps, lane = thread index modulo 32) --------------------------------


def shfl(values: np.ndarray, source: np.ndarray, width: int) -> np.ndarray:
    """__shfl_sync(full, v, src, width) for a block: src taken modulo width, within each group."""
    lane = np.arange(values.size)
    return values[(lane - lane % width) + source % width]


def shfl_xor(values: np.ndarray, lane_mask: int, width: int) -> np.ndarray:
    lane = np.arange(values.size)
    warp_lane = lane % 32
    other = warp_lane ^ lane_mask
    group_end = warp_lane - warp_lane % width + width - 1
    return np.where(other <= group_end, values[lane - warp_lane + other], values)


def shfl_up(values: np.ndarray, delta: int, width: int) -> np.ndarray:
    lane = np.arange(values.size)
    inside = lane % width >= delta
    return np.where(inside, values[np.where(inside, lane - delta, lane)], values)


def shfl_down(values: np.ndarray, delta: int, width: int) -> np.ndarray:
    lane = np.arange(values.size)
    inside = lane % width + delta < width
    return np.where(inside, values[np.where(inside, lane + delta, lane)], values)


# ---- the probe source ------------------------------------------------------------------------

SIMD_NAMES = sorted(f"{stem}{w}" for stem in [*SIMD_BINARY, *SIMD_UNARY, *SAD] for w in ("2", "4"))
# words(a, b, c): one row a call, in this order; each entry the C expression of the row (a, b, c
# unsigned; sa, sb, sc the same bits as int; ca/cb char4, ua/ub uchar4; la, lb 64-bit words)
WORD_ROWS: list[tuple[str, str]] = [
    *((name, f"{name}(a)" if name[:-1] in SIMD_UNARY else f"{name}(a, b)") for name in SIMD_NAMES),
    ("__dp4a(int)", "(unsigned)__dp4a(sa, sb, sc)"),
    ("__dp4a(unsigned)", "__dp4a(a, b, c)"),
    ("__dp4a(char4)", "(unsigned)__dp4a(ca, cb, sc)"),
    ("__dp4a(uchar4)", "__dp4a(ua, ub, c)"),
    ("__dp2a_lo(int)", "(unsigned)__dp2a_lo(sa, sb, sc)"),
    ("__dp2a_lo(unsigned)", "__dp2a_lo(a, b, c)"),
    ("__dp2a_hi(int)", "(unsigned)__dp2a_hi(sa, sb, sc)"),
    ("__dp2a_hi(unsigned)", "__dp2a_hi(a, b, c)"),
    ("min(int, unsigned)", "min(sa, b)"),
    ("min(unsigned, int)", "min(a, sb)"),
    ("max(int, unsigned)", "max(sa, b)"),
    ("max(unsigned, int)", "max(a, sb)"),
    *(
        (f"{op}({types}) {half}", f"(unsigned)({op}({args}) >> {shift})")
        for op, types, args in (
            ("min", "long long, unsigned long long", "(long long)la, lb"),
            ("min", "unsigned long long, long long", "la, (long long)lb"),
            ("max", "long long, unsigned long long", "(long long)la, lb"),
            ("max", "unsigned long long, long long", "la, (long long)lb"),
            ("min", "long, unsigned long", "(long)la, (unsigned long)lb"),
            ("max", "unsigned long, long", "(unsigned long)la, (long)lb"),
        )
        for half, shift in (("lo", 0), ("hi", 32))
    ),
]


def word_reference(name: str, a: int, b: int, c: int) -> int:
    """CUDA's value of row ``name`` of the words kernel for inputs a, b, c (32-bit words)."""
    la, lb = (a << 32) | c, (b << 32) | (c ^ 0x5A5A5A5A)
    if name in SIMD_NAMES:
        return simd(name, a, b)
    if name.startswith("__dp4a"):
        return dp4a(a, b, c, signed=name in {"__dp4a(int)", "__dp4a(char4)"})
    if name.startswith("__dp2a"):
        return dp2a(a, b, c, signed=name.endswith("(int)"), high="hi" in name)
    want_max = name.startswith("max")
    if "long" in name:
        got = mixed_min_max(la, lb, 64, want_max)
        return (got >> 32) if name.endswith("hi") else got & 0xFFFFFFFF
    return mixed_min_max(a, b, 32, want_max)


REDUCTIONS = [
    ("__reduce_add_sync(int)", "int", lambda v: int(np.sum(v.astype(np.int64))) & 0xFFFFFFFF),
    ("__reduce_add_sync(unsigned)", "unsigned", lambda v: int(np.sum(v)) & 0xFFFFFFFF),
    ("__reduce_min_sync(int)", "int", lambda v: int(v.view(np.int32).min()) & 0xFFFFFFFF),
    ("__reduce_min_sync(unsigned)", "unsigned", lambda v: int(v.min())),
    ("__reduce_max_sync(int)", "int", lambda v: int(v.view(np.int32).max()) & 0xFFFFFFFF),
    ("__reduce_max_sync(unsigned)", "unsigned", lambda v: int(v.max())),
    ("__reduce_and_sync", "unsigned", lambda v: int(np.bitwise_and.reduce(v))),
    ("__reduce_or_sync", "unsigned", lambda v: int(np.bitwise_or.reduce(v))),
    ("__reduce_xor_sync", "unsigned", lambda v: int(np.bitwise_xor.reduce(v))),
]
# (width, xor lane mask, delta): masks past the width reach into another group (CUDA: an earlier
# group's value is read, a later group's gives the thread's own)
SHUFFLE_SHAPES = [(32, 5, 3), (16, 17, 7), (4, 6, 1)]
# the tile kernels: name -> (tile sizes, with the scans and shuffles). A tile of 64 is one
# wavefront at wave64 (HIP's tile) and two at wave32 (the header's multi-warp tile, as 128 and
# 256 are everywhere)
TILE_KERNELS: dict[str, tuple[list[int], bool]] = {
    "tiles": ([2, 4, 8, 16, 32], True),
    "tile64": ([64], False),
    "multi_warp_tiles": ([64, 128, 256], False),
}
SCAN_SIZES = [8, 32]
CG_OPS = [  # cg::reduce operator, the C type, numpy's reduction
    ("plus", "unsigned", lambda v: int(np.sum(v)) & 0xFFFFFFFF),
    ("less", "int", lambda v: int(v.view(np.int32).min()) & 0xFFFFFFFF),
    ("greater", "unsigned", lambda v: int(v.max())),
    ("bit_and", "unsigned", lambda v: int(np.bitwise_and.reduce(v))),
    ("bit_or", "unsigned", lambda v: int(np.bitwise_or.reduce(v))),
    ("bit_xor", "unsigned", lambda v: int(np.bitwise_xor.reduce(v))),
]
TILE_SHUFFLE_SIZES = [16, 32]
PTX_ROWS = [
    "cvt.rn.f16.f32",
    "cvt.f32.f16",
    "cvt.rn.bf16.f32",
    "cvt.f32.bf16",
    "cvt.rn.f16x2.f32",
    "cvt.rn.bf16x2.f32",
    "mov.b32 pack",
    "mov.b32 unpack lo",
    "mov.b32 unpack hi",
    "mov.b16",
    "mov.b32 f->r",
    "mov.b32 r->f",
    "__float2bfloat16_rn",
    "__float2bfloat162_rn",
    "make_bfloat162",
    "htanh_approx",
    "h2tanh_approx",
]
LOADS = ["__ldcs", "__ldcg", "__ldca", "__ldlu", "__ldcv", "__ldg"]
STORES = ["__stcs", "__stcg", "__stwb", "__stwt"]


def _words_kernel() -> str:
    body = "\n".join(
        f"  out[{k} * n + i] = {expr};  // {name}" for k, (name, expr) in enumerate(WORD_ROWS)
    )
    return f"""
extern "C" __global__ void words(const unsigned* as, const unsigned* bs, const unsigned* cs,
                                 unsigned* out, int n) {{
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const unsigned a = as[i], b = bs[i], c = cs[i];
  const int sa = (int)a, sb = (int)b, sc = (int)c;
  const char4 ca = bits_as<char4>(a), cb = bits_as<char4>(b);
  const uchar4 ua = bits_as<uchar4>(a), ub = bits_as<uchar4>(b);
  const unsigned long long la = ((unsigned long long)a << 32) | c;
  const unsigned long long lb = ((unsigned long long)b << 32) | (c ^ 0x5A5A5A5Au);
{body}
}}
"""


def _warp_kernel() -> str:
    rows: list[str] = []
    for name, ctype, _ in REDUCTIONS:
        call = name.split("(")[0]
        rows.append(f"out[R * n + i] = (unsigned){call}(0xffffffffu, ({ctype})v);")
    for name, ctype, _ in REDUCTIONS:
        call = name.split("(")[0]
        rows.append(f"out[R * n + i] = (unsigned){call}(own, ({ctype})v);")
    for value, back in (("bv", "bf16_bits"), ("(int)v", "(unsigned)")):
        for width, lane_mask, delta in SHUFFLE_SHAPES:
            rows += [
                f"out[R * n + i] = {back}(__shfl_sync(0xffffffffu, {value}, (int)src, {width}));",
                f"out[R * n + i] = {back}(__shfl_xor_sync(0xffffffffu, {value}, {lane_mask}, "
                f"{width}));",
                f"out[R * n + i] = {back}(__shfl_up_sync(0xffffffffu, {value}, {delta}u, {width}));",
                f"out[R * n + i] = {back}(__shfl_down_sync(0xffffffffu, {value}, {delta}u, "
                f"{width}));",
            ]
    rows += [
        "{ const unsigned long long m = __ballot_sync(0xffffffffu, p & 1u);"
        " out[R * n + i] = (unsigned)m; out[R * n + n + i] = (unsigned)(m >> 32); }",
        "",  # the ballot's high word
        "out[R * n + i] = __any_sync(0xffffffffu, p & 4u) ? 1u : 0u;",
        "out[R * n + i] = __all_sync(0xffffffffu, p & 8u) ? 1u : 0u;",
        "if (p & 2u) { const unsigned long long m = __activemask();"
        " out[R * n + i] = (unsigned)m; out[R * n + n + i] = (unsigned)(m >> 32); }",
        "",
    ]
    body = "\n".join(f"  {row.replace('R * n', f'{k} * n')}" for k, row in enumerate(rows) if row)
    return f"""
extern "C" __global__ void warp(const unsigned* vs, const unsigned* srcs, const unsigned* ps,
                                const unsigned* masks, unsigned* out, int n) {{
  const int i = threadIdx.x;
  const unsigned v = vs[i], src = srcs[i], p = ps[i], mask = masks[i / 32];
  // two groups of 16 lanes a warp, each reducing over its own: the lanes mask names, the rest
  const unsigned own = ((mask >> (i % 32)) & 1u) ? mask : ~mask;
  const __nv_bfloat16 bv = bits_as<__nv_bfloat16>((unsigned short)v);
{body}
  __syncwarp();
}}
"""


WARP_ROW_COUNT = 2 * len(REDUCTIONS) + 2 * 4 * len(SHUFFLE_SHAPES) + 6


def _tiles_kernel(name: str, sizes: list[int], extras: bool) -> str:
    """cg::reduce over tiles of each size (six operators a row, the float sum in fout), and with
    ``extras`` the scans and the tile shuffles of vectors and 16-bit floats."""
    lines: list[str] = []
    k = 0
    for size in sizes:
        lines.append(f"  {{ auto tile = cg::tiled_partition<{size}>(block);")
        for op, ctype, _ in CG_OPS:
            lines.append(
                f"    out[{k} * n + i] = (unsigned)cg::reduce(tile, ({ctype})v, cg::{op}<{ctype}>());"
            )
            k += 1
        row = sizes.index(size)
        lines.append(f"    fout[{row} * n + i] = cg::reduce(tile, f, cg::plus<float>()); }}")
    for size in SCAN_SIZES if extras else []:
        lines.append(f"  {{ auto tile = cg::tiled_partition<{size}>(block);")
        lines.append(f"    out[{k} * n + i] = cg::inclusive_scan(tile, v);")
        lines.append(f"    out[{k + 1} * n + i] = cg::exclusive_scan(tile, v); }}")
        k += 2
    for size in TILE_SHUFFLE_SIZES if extras else []:
        lines += [
            f"  {{ auto tile = cg::tiled_partition<{size}>(block);",
            "    const int4 q = tile.shfl(make_int4((int)v, (int)src, (int)(v ^ src), (int)~v),"
            f" (int)src % {size});",
            f"    out[{k} * n + i] = (unsigned)q.x; out[{k + 1} * n + i] = (unsigned)q.y;",
            f"    out[{k + 2} * n + i] = (unsigned)q.z; out[{k + 3} * n + i] = (unsigned)q.w;",
            "    const float2 r = tile.shfl_xor(make_float2(f, -f), 3u);",
            f"    out[{k + 4} * n + i] = bits_as<unsigned>(r.x);"
            f" out[{k + 5} * n + i] = bits_as<unsigned>(r.y);",
            "    const __half h = tile.shfl_up(bits_as<__half>((unsigned short)src), 2u);",
            f"    out[{k + 6} * n + i] = bits_as<unsigned short>(h);",
            "    const __nv_bfloat16 b = tile.shfl_down(bits_as<__nv_bfloat16>((unsigned short)v), 5u);",
            f"    out[{k + 7} * n + i] = bf16_bits(b); }}",
        ]
        k += 8
    body = "\n".join(lines)
    return f"""
extern "C" __global__ void {name}(const unsigned* vs, const unsigned* srcs, const float* fs,
                                 unsigned* out, float* fout, int n) {{
  __shared__ cg::block_tile_memory<256> scratch;
  cg::thread_block block = cg::this_thread_block(scratch);
  const int i = threadIdx.x;
  const unsigned v = vs[i], src = srcs[i];
  const float f = fs[i];
{body}
}}
"""


def tile_rows(sizes: list[int], extras: bool) -> int:
    """The rows of a tiles kernel's ``out``."""
    return len(sizes) * len(CG_OPS) + (2 * len(SCAN_SIZES) + 8 * len(TILE_SHUFFLE_SIZES)) * extras


PROBE_SOURCE = (
    """// Probe kernels of the compat header's helpers (tests/compat_probe.py writes this file).
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cooperative_groups/scan.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_pipeline.h>

namespace cg = cooperative_groups;

template <typename T, typename F>
__device__ inline T bits_as(F from) {
  static_assert(sizeof(T) == sizeof(F), "same size");
  T to;
  memcpy(&to, &from, sizeof(T));
  return to;
}
__device__ inline unsigned bf16_bits(__nv_bfloat16 b) { return bits_as<unsigned short>(b); }
"""
    + _words_kernel()
    + """
extern "C" __global__ void halves(const unsigned short* as, const unsigned short* bs,
                                  const long long* ints, unsigned short* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const __nv_bfloat16 a = bits_as<__nv_bfloat16>(as[i]), b = bits_as<__nv_bfloat16>(bs[i]);
  const long long v = ints[i];
  out[0 * n + i] = bf16_bits(__hmax_nan(a, b));
  out[1 * n + i] = bf16_bits(__hmin_nan(a, b));
  out[2 * n + i] = bf16_bits(__int2bfloat16_rn((int)v));
  out[3 * n + i] = bf16_bits(__uint2bfloat16_rn((unsigned)v));
  out[4 * n + i] = bf16_bits(__short2bfloat16_rn((short)v));
  out[5 * n + i] = bf16_bits(__ushort2bfloat16_rn((unsigned short)v));
  out[6 * n + i] = bf16_bits(__ll2bfloat16_rn(v));
  out[7 * n + i] = bf16_bits(__ull2bfloat16_rn((unsigned long long)v));
}

extern "C" __global__ void ptx(const float* fs, const unsigned short* hs, const unsigned* ws,
                               unsigned* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float f = fs[i], g = fs[i ^ 1];
  const unsigned short h = hs[i], k = hs[i ^ 1];
  const unsigned w = ws[i];
  unsigned short r16, lo, hi;
  unsigned r32;
  float rf;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r16) : "f"(f));
  out[0 * n + i] = r16;
  asm("cvt.f32.f16 %0, %1;" : "=f"(rf) : "h"(h));
  out[1 * n + i] = bits_as<unsigned>(rf);
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r16) : "f"(f));
  out[2 * n + i] = r16;
  asm("cvt.f32.bf16 %0, %1;" : "=f"(rf) : "h"(h));
  out[3 * n + i] = bits_as<unsigned>(rf);
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r32) : "f"(f), "f"(g));
  out[4 * n + i] = r32;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r32) : "f"(f), "f"(g));
  out[5 * n + i] = r32;
  asm("mov.b32 %0, {%1, %2};" : "=r"(r32) : "h"(h), "h"(k));
  out[6 * n + i] = r32;
  asm("mov.b32 {%0, %1}, %2;" : "=h"(lo), "=h"(hi) : "r"(w));
  out[7 * n + i] = lo;
  out[8 * n + i] = hi;
  asm("mov.b16 %0, %1;" : "=h"(r16) : "h"(h));
  out[9 * n + i] = r16;
  asm("mov.b32 %0, %1;" : "=r"(r32) : "f"(f));
  out[10 * n + i] = r32;
  asm("mov.b32 %0, %1;" : "=f"(rf) : "r"(w));
  out[11 * n + i] = bits_as<unsigned>(rf);
  out[12 * n + i] = bf16_bits(__float2bfloat16_rn(f));
  out[13 * n + i] = bits_as<unsigned>(__float2bfloat162_rn(f));
  out[14 * n + i] = bits_as<unsigned>(
      make_bfloat162(bits_as<__nv_bfloat16>(h), bits_as<__nv_bfloat16>(k)));
  out[15 * n + i] = bits_as<unsigned short>(htanh_approx(bits_as<__half>(h)));
  out[16 * n + i] = bits_as<unsigned>(
      h2tanh_approx(__halves2half2(bits_as<__half>(h), bits_as<__half>(k))));
}
"""
    + _warp_kernel()
    + "".join(_tiles_kernel(name, *shape) for name, shape in TILE_KERNELS.items())
    + """
// 16-bit atomics, in place: cas[i] by atomicCAS (neighbours share 32-bit words), h/bh by one
// atomicAdd a thread, pairs (i < n / 2) by the packed adds, and the four sums every thread adds to
extern "C" __global__ void atomics(unsigned short* cas, const unsigned short* compare,
                                   const unsigned short* value, unsigned short* h,
                                   const unsigned short* hx, unsigned short* bh,
                                   const unsigned short* bx, unsigned* h2, const unsigned* h2x,
                                   unsigned* b2, const unsigned* b2x, unsigned short* sums,
                                   unsigned* old, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  old[0 * n + i] = atomicCAS(&cas[i], compare[i], value[i]);
  old[1 * n + i] = bits_as<unsigned short>(
      atomicAdd(reinterpret_cast<__half*>(&h[i]), bits_as<__half>(hx[i])));
  old[2 * n + i] = bf16_bits(
      atomicAdd(reinterpret_cast<__nv_bfloat16*>(&bh[i]), bits_as<__nv_bfloat16>(bx[i])));
  if (i < n / 2) {
    old[3 * n + i] = bits_as<unsigned>(
        atomicAdd(reinterpret_cast<__half2*>(&h2[i]), bits_as<__half2>(h2x[i])));
    old[4 * n + i] = bits_as<unsigned>(
        atomicAdd(reinterpret_cast<__nv_bfloat162*>(&b2[i]), bits_as<__nv_bfloat162>(b2x[i])));
  }
  // contended: a quarter of 0..3 into two half sums, 0 or 1 into two bf16 sums (exact sums)
  atomicAdd(reinterpret_cast<__half*>(&sums[i % 2]), __float2half(0.25f * (i % 4)));
  atomicAdd(reinterpret_cast<__nv_bfloat16*>(&sums[2 + i % 2]), __float2bfloat16((float)((i / 2) % 2)));
}

// cache-hinted loads and stores, each of 16-byte vectors, 32-bit words and bf16, and the
// cuda_pipeline.h copies into shared memory (16, 8, 4 bytes; 16 with zfill i % 17)
extern "C" __global__ void memory(const uint4* src4, const unsigned* src1,
                                  const __nv_bfloat16* srcb, uint4* out4, unsigned* out1,
                                  __nv_bfloat16* outb, uint4* pipe16, uint2* pipe8,
                                  unsigned* pipe4, uint4* pipez, int n) {
  __shared__ uint4 s16[64], sz[64];
  __shared__ uint2 s8[64];
  __shared__ unsigned s4[64];
  const int i = threadIdx.x;
  s16[i] = sz[i] = make_uint4(0xabababab, 0xabababab, 0xabababab, 0xabababab);
  s8[i] = make_uint2(0xabababab, 0xabababab);
  s4[i] = 0xabababab;
  __syncthreads();
"""
    + "".join(
        f"  out4[{k} * n + i] = {load}(&src4[i]);\n"
        f"  out1[{k} * n + i] = {load}(&src1[i]);\n"
        f"  outb[{k} * n + i] = {load}(&srcb[i]);\n"
        for k, load in enumerate(LOADS)
    )
    + "".join(
        f"  {store}(&out4[{k + len(LOADS)} * n + i], src4[i]);\n"
        f"  {store}(&out1[{k + len(LOADS)} * n + i], src1[i]);\n"
        f"  {store}(&outb[{k + len(LOADS)} * n + i], srcb[i]);\n"
        for k, store in enumerate(STORES)
    )
    + """  __pipeline_memcpy_async(&s16[i], &src4[i], 16);
  __pipeline_memcpy_async(&s8[i], reinterpret_cast<const uint2*>(src4) + i, 8);
  __pipeline_memcpy_async(&s4[i], &src1[i], 4);
  __pipeline_memcpy_async(&sz[i], &src4[i], 16, i % 17);
  __pipeline_commit();
  __pipeline_wait_prior(0);
  __syncthreads();
  pipe16[i] = s16[i];
  pipe8[i] = s8[i];
  pipe4[i] = s4[i];
  pipez[i] = sz[i];
}

// __trap compiled, and not taken unless *flag is 0x5eed
extern "C" __global__ void trap_unless(int* flag) {
  if (*flag == 0x5eed) __trap();
  *flag = 1;
}
"""
)
