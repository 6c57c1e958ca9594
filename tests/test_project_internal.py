"""Kernels of internal linkage (``static``, an unnamed namespace) are kernels like any other on
every vendor: discovered, named by the kernel-name rule, looked up by their symbol. In a module
device-linked from several units, internal kernels that share a name are each named after their
unit (``bump@a.cu``), never one picked (docs/loader.md, "Kernel names").

Pure tests read symbols copied from the compilers' output (nvcc 13.0 and nvlink, hipcc with clang
21 -fgpu-rdc, 2026-11-23); the builds compare the index with names written by hand and with
readelf's symbol tables; the GPU test launches every kernel against numpy.
"""

from __future__ import annotations

import ctypes
import json
import re
import subprocess
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from build_project import make_project

from buildsys.demangling import Demangled, as_source_spells
from buildsys.discovery import ImageKernels, ObjectKernel, name_kernels
from buildsys.errors import BuildError
from buildsys.index_writer import read_index
from buildsys.missing_kernels import absent_targets
from buildsys.modules import KernelModule
from buildsys.report import failure_error
from buildsys.unit_symbols import unit_of_tag, unit_symbol, unit_tags
from kernelpack.backends.rtc import Compiled, SourceCompiler, name_expression
from kernelpack.formats import read_bundle
from kernelpack.formats.index import KernelResources

if TYPE_CHECKING:
    from buildsys.toolchain import Toolchain

_KERNEL = """\
__global__ void {name}(const float* x, float* y, unsigned n) {{
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = {expression};
}}
"""


def _kernel(linkage: str, name: str, expression: str) -> str:
    text = _KERNEL.format(name=name, expression=expression)
    if linkage == "static":
        return "static " + text
    if linkage == "anonymous":
        return "namespace {\n" + text + "}  // namespace\n"
    return text


# Templates of internal linkage: instantiated with a static function's address (as candle's moe/
# does) and with a type of an unnamed namespace.
_TEMPLATES = """\
static __device__ float add_one(float v) { return v + 1.0f; }
typedef float (*unary)(float);
template <unary F>
__global__ void apply(const float* x, float* y, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = F(x[i]);
}
template __global__ void apply<&add_one>(const float*, float*, unsigned);
namespace {
struct Local { float offset; };
template <typename T>
__global__ void local_t(const float* x, float* y, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] - 3.0f;
}
template __global__ void local_t<Local>(const float*, float*, unsigned);
}  // namespace
"""

# module -> unit -> (linkage, kernel, y as a function of x in C, and in numpy by the name below)
SOURCES = {
    "solo/solo.cu": _kernel("static", "bump", "x[i] + 1.0f")
    + _kernel("anonymous", "twice", "x[i] * 2.0f")
    + _kernel("extern", "open", "x[i] - 4.0f")
    + _TEMPLATES,
    "pair/a.cu": _kernel("static", "bump", "x[i] + 1.0f")
    + _kernel("anonymous", "times", "x[i] * 2.0f")
    + _kernel("static", "only_a", "x[i] - 3.0f")
    + _kernel("static", "mixed", "x[i] + 11.0f"),
    "pair/b.cu": _kernel("static", "bump", "x[i] + 5.0f")
    + _kernel("anonymous", "times", "x[i] * 3.0f")
    + _kernel("extern", "mixed", "x[i] + 7.0f"),
}
# Written by hand from SOURCES: name -> y(x).
EXPECTED: dict[str, dict[str, float | tuple[str, float]]] = {
    "solo": {
        "bump": 1.0,
        "twice": ("*", 2.0),
        "open": -4.0,
        "apply<&add_one>": 1.0,
        "local_t<Local>": -3.0,
    },
    "pair": {
        "bump@a.cu": 1.0,
        "bump@b.cu": 5.0,
        "times@a.cu": ("*", 2.0),
        "times@b.cu": ("*", 3.0),
        "only_a": -3.0,
        "mixed": 7.0,  # b.cu's external kernel keeps the plain name
        "mixed@a.cu": 11.0,
    },
}


# ---------------------------------------------------------------------------------------------
# Pure: symbols as the compilers wrote them


def test_a_device_links_renaming_of_internal_symbols_is_undone() -> None:
    # nvlink's input: nvcc -rdc=true -cubin a.cu (in the unit's folder)
    assert unit_symbol("__nv_static_25__c8701816_4_a_cu_41113dc9__Z7kstaticPf") == (
        "_Z7kstaticPf",
        "_c8701816_4_a_cu_41113dc9",
    )
    assert unit_symbol(
        "__nv_static_25__ed4d980e_4_a_cu_41113dc9__ZN36_GLOBAL__N__ed4d980e_4_a_cu_41113dc95kanonEPf"
    ) == ("_ZN36_GLOBAL__N__ed4d980e_4_a_cu_41113dc95kanonEPf", "_ed4d980e_4_a_cu_41113dc9")
    # clang -fgpu-rdc -cuid=m.a
    assert unit_symbol("_ZL7kstaticPf.intern.79d4b6a2cc0c815a") == (
        "_ZL7kstaticPf",
        "79d4b6a2cc0c815a",
    )
    for plain in ("_Z4kpubPf", "_ZL7kstaticPf", "plain_c", "__nv_static_x"):
        assert unit_symbol(plain) == (plain, "")


def test_unit_tags_name_the_units_as_each_linker_does() -> None:
    """clang's tags for -cuid=m.a and m.b and nvcc's ids for a.cu and b.cu, as the compilers
    wrote them."""
    module = KernelModule("m", "m/a.cu", ("m/b.cu",))
    tags = unit_tags(module)
    assert unit_of_tag("79d4b6a2cc0c815a", tags) == "a.cu"
    assert unit_of_tag("a809fee7d02a7317", tags) == "b.cu"
    assert unit_of_tag("_c8701816_4_a_cu_41113dc9", tags) == "a.cu"
    assert unit_of_tag("_dac5b7f8_4_b_cu_f673e0dc", tags) == "b.cu"
    assert unit_of_tag("_dac5b7f8_4_c_cu_f673e0dc", tags) is None
    assert unit_tags(KernelModule("m", "m/a.cu")) == {}
    # the builder passes clang exactly the id the tags are computed from
    assert (module.cuid("m/a.cu"), module.cuid("b.cu")) == ("m.a", "m.b")


_RESOURCES = KernelResources(
    registers=0, sgpr=0, agpr=0, lds=0, scratch=0, spills=0, wavefront=32, max_workgroup=0
)


def _image(target: str, symbols: list[str], vendor: str = "nvidia") -> ImageKernels:
    kernels = [ObjectKernel(s, ((0, 8),), _RESOURCES.copy()) for s in symbols]
    return ImageKernels(
        "m", vendor, target, kernels, units=unit_tags(KernelModule("m", "m/a.cu", ("m/b.cu",)))
    )


def _demangled(symbols: list[str]) -> dict[str, Demangled]:
    """What c++filt makes of the unit symbols below (written by hand)."""
    names = {
        "_Z1kPf": "k",
        "_ZL1kPf": "k",
        "_Z1uPf": "u",
        "_ZL1uPf": "u",
        "_Z1qPf": "q",
        "_ZL1qPf": "q",
    }
    return {s: Demangled(names[unit_symbol(s)[0]], ("float*",)) for s in symbols}


def test_internal_kernels_of_several_units_are_named_after_their_unit() -> None:
    nv_a, nv_b = (
        "__nv_static_25__c8701816_4_a_cu_41113dc9_",
        "__nv_static_25__dac5b7f8_4_b_cu_f673e0dc_",
    )
    cubin = [nv_a + "_Z1kPf", nv_b + "_Z1kPf", nv_a + "_Z1uPf", "_Z1qPf", nv_b + "_Z1qPf"]
    code_object = [
        "_ZL1kPf.intern.79d4b6a2cc0c815a",
        "_ZL1kPf.intern.a809fee7d02a7317",
        "_ZL1uPf.intern.79d4b6a2cc0c815a",
        "_Z1qPf",
        "_ZL1qPf.intern.a809fee7d02a7317",
    ]
    images = [_image("sm_90", cubin), _image("gfx942", code_object, "amd")]
    module = name_kernels(images, _demangled(cubin + code_object), ["gfx942", "sm_90"])["m"]
    assert sorted(module.params) == ["k@a.cu", "k@b.cu", "q", "q@b.cu", "u"]
    assert module.symbols["sm_90"]["k@b.cu"] == nv_b + "_Z1kPf"
    assert module.symbols["gfx942"]["k@b.cu"] == "_ZL1kPf.intern.a809fee7d02a7317"
    assert module.symbols["gfx942"]["q"] == "_Z1qPf"

    # a name shared on one target only is named after its units on every target
    lone = [nv_a + "_Z1kPf"]
    module = name_kernels(
        [_image("sm_90", cubin), _image("sm_80", lone)], _demangled(cubin), ["sm_90", "sm_80"]
    )["m"]
    assert module.targets["k@a.cu"] == ["sm_90", "sm_80"]
    assert "k" not in module.targets


def test_one_name_twice_in_one_unit_or_an_unknown_unit_is_a_build_error() -> None:
    twice = ["_Z1kPf", "_ZL1kPf"]  # an external and an internal k of one unit: never one picked
    with pytest.raises(BuildError, match=r"symbols _Z1kPf and _ZL1kPf are both kernel 'k'"):
        name_kernels([_image("sm_90", twice)], _demangled(twice), ["sm_90"])
    unknown = ["_ZL1kPf.intern.0123456789abcdef"]
    with pytest.raises(
        BuildError, match=r"tag '0123456789abcdef' names none of the module's units \(a.cu, b.cu\)"
    ):
        name_kernels([_image("gfx942", unknown, "amd")], _demangled(unknown), ["gfx942"])


def test_a_static_function_as_template_argument_reads_as_the_source_spells_it() -> None:
    """candle's moe/ instantiates a kernel with the address of a static function; c++filt prints
    clang's symbol (.intern. stripped) and nvcc's (__nv_static_ stripped) differently, both copied
    from the objects: one name, the source's ``&vec_dot_q2_K_q8_1``."""
    clang = (
        "void vllm_rs::moe_gemm_gguf_kernel<256, 16, block_q2_K, 1, &(vec_dot_q2_K_q8_1(void "
        "const*, block_q8_1 const*, int const&))>(void const*, int)"
    )
    nvcc = (
        "void vllm_rs::moe_gemm_gguf_kernel<256, 16, block_q2_K, 1, &_INTERNAL_c37edf84_11_moe_"
        "gguf_cu_2c4098ac::vec_dot_q2_K_q8_1>(void const*, int)"
    )
    source = "void vllm_rs::moe_gemm_gguf_kernel<256, 16, block_q2_K, 1, &vec_dot_q2_K_q8_1>(void const*, int)"
    assert as_source_spells(clang) == as_source_spells(nvcc) == source
    assert as_source_spells("(anonymous namespace)::k(float*)") == "k(float*)"
    assert as_source_spells("k<&(f<int, 2>(int (*)(float)))>") == "k<&f<int, 2>>"
    assert as_source_spells("k(a&(b))") == "k(a&(b))"  # not a function's address: unchanged


def test_a_vendor_librarys_kernel_is_expected_on_its_vendors_targets_only() -> None:
    targets = ["gfx942", "gfx90a", "sm_90", "compute_80"]
    assert absent_targets("cub::detail::EmptyKernel<void>", ["sm_90"], targets) == ["compute_80"]
    assert (
        absent_targets("rocprim::detail::transform_kernel<int>", ["gfx942", "gfx90a"], targets)
        == []
    )
    assert absent_targets("mine<int>", ["gfx942", "gfx90a"], targets) == ["sm_90", "compute_80"]
    assert absent_targets("thrust::k", ["gfx942"], targets) == ["gfx90a"]


# ---------------------------------------------------------------------------------------------
# Builds: the index against hand-written names, the symbols against readelf


def _build(tmp_path: Path, matrix: str) -> Path:
    project = make_project(tmp_path, files=SOURCES, matrix=matrix)
    result = project.build()
    assert not result.failed, failure_error(result)
    return project.settings.out


def _readelf_symbols(path: Path) -> dict[str, str]:
    """Symbol name -> binding, from binutils' readelf (independent of kernelpack's reader)."""
    text = subprocess.run(
        ["readelf", "-sW", str(path)], capture_output=True, text=True, check=True
    ).stdout
    found: dict[str, str] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 8 and re.fullmatch(r"\d+:", fields[0]):
            found[fields[-1]] = fields[4]
    return found


WHEELS = Path(__file__).resolve().parent.parent / "wheels"
HIPRTC_PROBE = """
import json, sys
from kernelpack.formats import read_code_object
from kernelpack.backends.rtc import SourceCompiler
source, target, names = open(sys.argv[1]).read(), sys.argv[2], json.loads(sys.argv[3])
plain = SourceCompiler("hiprtc").compile(source, "solo", target)
asked = SourceCompiler("hiprtc").compile(source, "solo", target, names)
kernels = sorted(k.name for k in read_code_object(plain.image, "hiprtc").kernels)
print(json.dumps({"plain": plain.symbols, "kernels": kernels, "lowered": asked.symbols,
                  "note": asked.note}))
"""


@pytest.mark.toolchain
def test_amd_internal_kernels_are_in_the_index_and_global_in_the_code_object(
    tmp_path: Path, amd_toolchain: Toolchain
) -> None:
    """hipModuleGetFunction finds a kernel by its symbol and descriptor (``<symbol>.kd``), which
    clang makes global (a plain unit) or weak (a device link): readelf says so for each."""
    out = _build(tmp_path, '[amd]\ntargets = ["gfx942"]\n')
    index = read_index((out / "_index.py").read_text())
    for module, expected in EXPECTED.items():
        found = index["modules"][module]
        assert sorted(found["kernels"]) == sorted(expected)
        (image,) = found["images"]
        assert sorted(image["symbols"]) == sorted(expected)
        raw = (out / image["file"]).read_bytes()
        (entry,) = [e for e in read_bundle(raw, module) if e.target == image["target"]]
        elf = tmp_path / f"{module}.elf"
        elf.write_bytes(bytes(entry.view))
        bindings = _readelf_symbols(elf)
        for symbol in image["symbols"].values():
            assert bindings.get(symbol) in ("GLOBAL", "WEAK"), (symbol, bindings.get(symbol))
            assert bindings.get(symbol + ".kd") in ("GLOBAL", "WEAK"), symbol

    # hipRTC on the one-file module's hipified source: clang names every kernel as in the
    # index (no hash of the unit), and hipRTC's own name lookup agrees
    solo = index["modules"]["solo"]
    symbols = solo["images"][0]["symbols"]
    argv = [
        *("/usr/bin/env", f"PYTHONPATH={WHEELS}", "python3", "-c", HIPRTC_PROBE),
        *(str((out / solo["source"]).with_suffix(".hip")), "gfx942", json.dumps(sorted(symbols))),
    ]
    done = subprocess.run(amd_toolchain.command(argv), capture_output=True, text=True, check=True)
    compiled = json.loads(done.stdout)
    assert compiled["plain"] == {}  # given no names, it names none
    assert compiled["kernels"] == sorted(symbols.values())
    assert compiled["lowered"] == symbols and compiled["note"] == ""


@pytest.mark.nvcc
def test_nvidia_internal_kernels_are_in_the_index_and_local_entries_of_the_cubin(
    tmp_path: Path,
) -> None:
    out = _build(tmp_path, '[nvidia]\ntargets = ["sm_90"]\n')
    index = read_index((out / "_index.py").read_text())
    for module, expected in EXPECTED.items():
        found = index["modules"][module]
        assert sorted(found["kernels"]) == sorted(expected)
        (image,) = found["images"]
        bindings = _readelf_symbols(out / image["file"])
        for name, symbol in image["symbols"].items():
            external = name in ("open", "mixed")
            assert bindings.get(symbol) == ("GLOBAL" if external else "LOCAL"), (name, symbol)


# ---------------------------------------------------------------------------------------------
# GPU: every kernel launched through the loader, from a cubin (plain and linked) and from PTX


def _check_every_kernel(out: Path, module_name: str, image_kind: str, **loader: Any) -> None:
    import numpy as np
    import torch

    from kernelpack.loader.load import Loader

    index = read_index((out / "_index.py").read_text())
    module = Loader(index=index, root=out, fragments=list, **loader).load(module_name)
    assert image_kind in module.image, module.image
    rng = np.random.default_rng()
    n = 40_009
    x_host = rng.standard_normal(n).astype(np.float32)
    x = torch.from_numpy(x_host).cuda()
    for name, operation in EXPECTED[module_name].items():
        y = torch.full_like(x, float("nan"))  # poisoned
        module.kernel(name).launch((n + 255) // 256, 256, x, y, n)
        torch.cuda.synchronize()
        wide = x_host.astype(np.float64)
        want = wide * operation[1] if isinstance(operation, tuple) else wide + operation
        np.testing.assert_allclose(y.cpu().numpy(), want, rtol=1e-6, atol=1e-6, err_msg=name)


@pytest.mark.gpu
@pytest.mark.nvcc
def test_internal_kernels_launch_from_cubins_and_ptx(tmp_path: Path) -> None:
    out = _build(tmp_path / "cubin", '[nvidia]\ntargets = ["sm_90"]\n')
    _check_every_kernel(out, "solo", "sm_90 cubin")
    _check_every_kernel(out, "pair", "sm_90 cubin")
    solo_only = {k: v for k, v in SOURCES.items() if k.startswith("solo/")}
    project = make_project(
        tmp_path / "ptx", files=solo_only, matrix='[nvidia]\ntargets = []\nptx = ["compute_90"]\n'
    )
    result = project.build()
    assert not result.failed, failure_error(result)
    _check_every_kernel(project.settings.out, "solo", "compute_90 ptx")


# ---------------------------------------------------------------------------------------------
# Run-time compilation: NVRTC asked for each kernel's symbol by the index's name


def test_name_expressions_spell_the_index_names() -> None:
    for name in ("bump", "twice", "apply<&add_one>", "local_t<Local>", "ops::add<float>"):
        assert name_expression(name) == "&" + name
    assert name_expression("mul_mat_q<(ggml_type)2, 64, false>") == (
        "&mul_mat_q<(ggml_type)2, 64, false>"
    )
    for unspellable in (
        "k<(anonymous namespace)::{lambda(int)#1}>",
        "k<{unnamed type#1}>",
        "k<(float)[3fc00000]>",
        "clear@dot.cu",
    ):
        assert name_expression(unspellable) is None, unspellable


class FakeNvrtc:
    """libnvrtc's calls that SourceCompiler makes, answered as NVRTC documents them: lowered
    names for the name expressions added before the compile; a compile error where a rejected
    expression was added."""

    def __init__(self, lowered: dict[str, str], rejected: frozenset[str] = frozenset()) -> None:
        self.lowered, self.rejected = lowered, rejected
        self.added: list[list[str]] = []
        self.log = b""
        lib = self

        def create(program: Any, source: bytes, name: bytes, *rest: object) -> int:
            program._obj.value = 1
            lib.added.append([])
            return 0

        def add(program: object, expression: bytes) -> int:
            lib.added[-1].append(expression.decode())
            return 0

        def compile_program(program: object, count: int, options: object) -> int:
            bad = [e for e in lib.added[-1] if e in lib.rejected]
            lib.log = b"".join(
                b'demo.cu(9): error: identifier "%s" is undefined\n' % e.encode() for e in bad
            )
            return 6 if bad else 0  # NVRTC_ERROR_COMPILATION

        def log_size(program: object, size: Any) -> int:
            size._obj.value = len(lib.log) + 1
            return 0

        def log(program: object, buffer: Any) -> int:
            ctypes.memmove(buffer, lib.log + b"\0", len(lib.log) + 1)
            return 0

        def cubin_size(program: object, size: Any) -> int:
            size._obj.value = len(CUBIN)
            return 0

        def cubin(program: object, buffer: Any) -> int:
            ctypes.memmove(buffer, CUBIN, len(CUBIN))
            return 0

        def lowered_name(program: object, expression: bytes, out: Any) -> int:
            out._obj.value = lib.lowered[expression.decode()].encode()
            return 0

        self.nvrtcCreateProgram = create
        self.nvrtcAddNameExpression = add
        self.nvrtcCompileProgram = compile_program
        self.nvrtcGetProgramLogSize = log_size
        self.nvrtcGetProgramLog = log
        self.nvrtcGetCUBINSize = cubin_size
        self.nvrtcGetCUBIN = cubin
        self.nvrtcGetLoweredName = lowered_name
        self.nvrtcDestroyProgram = lambda program: 0
        self.nvrtcGetErrorString = lambda code: b"NVRTC_ERROR_COMPILATION"


CUBIN = b"\x7fELF cubin"
# An unnamed namespace's kernel in the form nvcc gives its symbol, the unit's hashes made up
# here; what NVRTC names it is measured on the GPU (test below): only the compiler knows
TWICE = "_ZN37_GLOBAL__N__1f9b2b3c_7_solo_cu_e3b0c4425twiceEPKfPfj"


def test_nvrtc_is_asked_for_every_kernels_symbol_by_its_name() -> None:
    fake = FakeNvrtc({"&twice": TWICE, "&bump": "_Z4bumpPKfPfj", "&open": "_Z4openPKfPfj"})
    compiler = SourceCompiler("nvrtc", fake)
    compiled = compiler.compile("source", "solo", "sm_90", ["bump", "twice", "open", "k@a.cu"])
    assert fake.added == [["&bump", "&twice", "&open"]]  # k@a.cu: no expression spells it
    assert compiled == Compiled(
        CUBIN, {"bump": "_Z4bumpPKfPfj", "twice": TWICE, "open": "_Z4openPKfPfj"}, ""
    )
    assert Compiled.from_bytes(compiled.to_bytes()) == compiled


def test_rejected_name_expressions_leave_the_index_symbols_and_say_why() -> None:
    fake = FakeNvrtc({"&bump": "_Z4bumpPKfPfj"}, rejected=frozenset({"&twice"}))
    compiled = SourceCompiler("nvrtc", fake).compile("source", "solo", "sm_90", ["bump", "twice"])
    assert fake.added == [["&bump", "&twice"], []]  # compiled once more without names
    assert compiled.image == CUBIN and compiled.symbols == {}
    assert compiled.note == (
        'nvrtc rejected the kernels\' name expressions (demo.cu(9): error: identifier "&twice" '
        "is undefined), so no kernel was looked up by the symbol it gave"
    )


def test_hiprtc_is_asked_the_same_way() -> None:
    fake = FakeNvrtc({"&twice": "_ZN12_GLOBAL__N_15twiceEPKfPfj"})
    compiled = SourceCompiler("hiprtc", _as_hiprtc(fake)).compile("s", "solo", "gfx942", ["twice"])
    assert fake.added == [["&twice"]]
    assert compiled.symbols == {"twice": "_ZN12_GLOBAL__N_15twiceEPKfPfj"}


def _as_hiprtc(fake: FakeNvrtc) -> object:
    """The same calls under hipRTC's names (its code object calls are GetCode/GetCodeSize)."""
    calls = {
        name.replace("nvrtc", "hiprtc"): getattr(fake, name)
        for name in vars(fake)
        if name.startswith("nvrtc")
    }
    calls["hiprtcGetCodeSize"], calls["hiprtcGetCode"] = fake.nvrtcGetCUBINSize, fake.nvrtcGetCUBIN
    return types.SimpleNamespace(**calls)


def test_a_cache_entry_that_is_no_compiled_module_is_a_miss() -> None:
    entry = Compiled(CUBIN, {"twice": TWICE}, "").to_bytes()
    assert Compiled.from_bytes(CUBIN) is None  # an entry of an older kernelpack: the bare cubin
    assert Compiled.from_bytes(entry[:9]) is None
    damaged = entry.replace(b'"symbols"', b'"symbolz"')
    assert Compiled.from_bytes(damaged) is None


class Keeping:
    """A run-time compiler that keeps what it made, for the test to read the names it gave."""

    def __init__(self, inner: SourceCompiler) -> None:
        self.inner = inner
        self.made: list[Compiled] = []

    def version(self) -> str:
        return self.inner.version()

    def compile(self, source: str, name: str, target: str, kernels: list[str]) -> Compiled:
        self.made.append(self.inner.compile(source, name, target, kernels))
        return self.made[-1]


@pytest.mark.gpu
@pytest.mark.nvcc
def test_internal_kernels_launch_when_compiled_at_run_time(tmp_path: Path) -> None:
    """No image fits the GPU (sm_80 cubins only; an sm_90 GPU runs none): NVRTC compiles the
    module's embedded source, names each kernel's symbol by the index's name, and every kernel
    (static, unnamed namespace, templates of internal linkage) launches against numpy; a second
    loader takes object and names from the disk cache."""
    from kernelpack.backends.rtc import open_compiler
    from kernelpack.errors import KernelpackWarning, RuntimeLibraryError
    from kernelpack.loader.cache import DiskCache

    try:
        nvrtc = Keeping(open_compiler("nvidia"))
    except RuntimeLibraryError as error:
        pytest.skip(str(error))
    solo_only = {k: v for k, v in SOURCES.items() if k.startswith("solo/")}
    project = make_project(tmp_path, files=solo_only, matrix='[nvidia]\ntargets = ["sm_80"]\n')
    result = project.build()
    assert not result.failed, failure_error(result)
    out = project.settings.out
    cache = DiskCache(tmp_path / "cache")
    with pytest.warns(KernelpackWarning, match="compiled its source with nvrtc"):
        _check_every_kernel(
            out, "solo", "compiled by nvrtc", compilers=lambda v: nvrtc, cache=cache
        )
    (made,) = nvrtc.made
    assert sorted(made.symbols) == sorted(EXPECTED["solo"]) and made.note == ""
    built = read_index((out / "_index.py").read_text())["modules"]["solo"]["images"][0]
    for name, symbol in sorted(made.symbols.items()):  # for the record (-rP)
        print(f"{name}: nvrtc {symbol}, nvcc {built['symbols'][name]}")
    with pytest.warns(KernelpackWarning):
        _check_every_kernel(
            out, "solo", "compiled by nvrtc", compilers=lambda v: nvrtc, cache=cache
        )
    assert len(nvrtc.made) == 1

    # a name the source does not resolve: NVRTC rejects it, the module compiles without names
    source = (out / "device" / "solo.cu").read_text()
    rejected = nvrtc.inner.compile(source, "solo", "sm_90", ["twice", "no_such_kernel"])
    assert rejected.symbols == {} and rejected.image.startswith(b"\x7fELF")
    assert rejected.note.startswith("nvrtc rejected the kernels' name expressions ("), rejected.note
    print(rejected.note)  # for the record: NVRTC's first error line
