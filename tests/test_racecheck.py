"""bench/racecheck.py on any machine: its cases select every kernel the sources instantiate (read
off mlp.cu and walk.cu, macros expanded here), and its verdict reads racecheck's reports right.
The racecheck run itself is bench/gpu_all.sh's, on the lent GPU."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench import racecheck
from kernelpack.ops.mlp.geometry import DeviceFacts

SOURCES = Path(__file__).resolve().parent.parent / "kernel_sources"

_DEFINE = re.compile(r"^#define (\w+)\(([^)]*)\)(.*)$")


def _logical_lines(source: str) -> list[str]:
    """The source's lines with backslash continuations joined and // comments dropped."""
    return [
        re.sub(r"//.*", "", line).strip()
        for line in re.sub(r"\\\n", " ", source).splitlines()
        if line.strip()
    ]


def _expand(text: str, macros: dict[str, tuple[list[str], str]]) -> str:
    """``text`` with every function-like macro of ``macros`` expanded, arguments by whole word."""
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, macros)) + r")\(([^()]*)\)")
    while macros and (found := pattern.search(text)):
        params, body = macros[found.group(1)]
        values = [value.strip() for value in found.group(2).split(",")] if params else []
        for param, value in zip(params, values, strict=True):
            body = re.sub(rf"\b{param}\b", value, body)
        text = text[: found.start()] + body + text[found.end() :]
    return text


def instantiated_kernels(source: str, namespace: str) -> set[str]:
    """The kernels ``source`` instantiates, as kernelpack names them ("mlp::swiglu<float>",
    "walk_registers<2, 1>"): the explicit instantiations (function-like macros expanded), and
    the __global__ functions that are not templates."""
    macros: dict[str, tuple[list[str], str]] = {}
    kept: list[str] = []
    lines = _logical_lines(source)
    for line in lines:
        define = _DEFINE.match(line)
        if define:
            params = [p.strip() for p in define.group(2).split(",") if p.strip()]
            macros[define.group(1)] = (params, define.group(3))
        elif not line.startswith("#"):
            kept.append(line)
    text = _expand("\n".join(kept), macros)
    prefix = f"{namespace}::" if namespace else ""
    names = {
        prefix + re.sub(r"\s*,\s*", ", ", args.strip()).join((f"{name}<", ">"))
        for name, args in re.findall(r"template __global__ void (\w+)<(.*?)>\(", text)
    }
    for index, line in enumerate(lines):
        plain = re.match(r"__global__ void (?:__launch_bounds__\(.*?\)\s*)?(\w+)\(", line)
        follows = re.match(r"__global__ void __launch_bounds__\(.*\)$", line)
        if follows and index + 1 < len(lines):
            plain = re.match(r"(\w+)\(", lines[index + 1])
        templated = index and lines[index - 1].startswith("template <")
        if plain and not templated:
            names.add(prefix + plain.group(1))
    return names


def test_instantiated_kernels_reads_macros_and_plain_kernels() -> None:
    """The reader on a source written here: a macro over a macro, a plain kernel on the line
    after its launch bounds, and a template definition (not a kernel of its own)."""
    source = """
#define ONE(T, N) \\
  template __global__ void k<T, N>(const T*);
#define BOTH(T) ONE(T, 4) ONE(T, 8)
BOTH(float)
template <int M>
__global__ void __launch_bounds__(256)
    t(int x) {}
template __global__ void t<2>(int);
__global__ void __launch_bounds__(64)
    plain(int x) {}
"""
    assert instantiated_kernels(source, "") == {"k<float, 4>", "k<float, 8>", "t<2>", "plain"}


# sm_90 with its own multiprocessor count (the H200's)
TUNED = DeviceFacts("sm_90", 132)


def test_mlp_cases_select_every_instantiated_kernel() -> None:
    """On sm_90 every kernel mlp.cu instantiates is some case's launch, and every
    launch predicted is a kernel mlp.cu has."""
    source = (SOURCES / "mlp" / "mlp.cu").read_text()
    instantiated = instantiated_kernels(source, "mlp")
    assert len(instantiated) > 100  # the reader found the macro-made instantiations
    cases = racecheck.mlp_cases(TUNED)
    predicted = {k for case in cases for k in racecheck.mlp_kernels(case, TUNED)}
    assert sorted(instantiated - predicted) == []
    assert sorted(predicted - instantiated) == []


@pytest.mark.parametrize("facts", [DeviceFacts("gfx942", 304), DeviceFacts("sm_80", 108)])
def test_mlp_cases_reach_every_kernel_on_other_targets(facts: DeviceFacts) -> None:
    """Elsewhere (another multiprocessor count, another family) the same cases reach every
    kernel too: no form is the host's choice on one family alone."""
    instantiated = instantiated_kernels((SOURCES / "mlp" / "mlp.cu").read_text(), "mlp")
    predicted = {
        k for case in racecheck.mlp_cases(facts) for k in racecheck.mlp_kernels(case, facts)
    }
    assert sorted(instantiated - predicted) == []


def test_mlp_cases_are_small() -> None:
    """Racecheck's time goes with the bytes moved: no case but those past the streaming forms'
    64 MiB (which they need) moves more than 16 MiB."""
    large = [
        case for case in racecheck.mlp_cases(TUNED) if case.rows * case.cols * 4 * 3 > 16 * 2**20
    ]
    assert all(c.op in ("swiglu", "silu_and_mul") for c in large)
    assert len(large) == 3 * 2


def test_walk_cases_take_the_residue_form_their_name_says() -> None:
    """walk_residues<m> runs two forms (tables in shared memory, the program evaluated every
    step): a case for each, at each matrix size."""
    from kernelpack.walk import compile_program
    from kernelpack.walk.lower import lower

    forms = set()
    for case in racecheck.walk_cases():
        program = compile_program([list(row) for row in case.matrix], ["x", "y"])
        form = lower(program, 2, case.depth, registers=True).residue.form
        named = [f for f in ("registers", "tables", "evaluate") if f in case.name]
        assert form == (named or ["registers"])[0], case.name  # selection, resident: registers
        forms.add((program.m, form))
    assert forms == {(m, f) for m in (2, 3, 4) for f in ("registers", "tables", "evaluate")}


def test_walk_cases_select_every_instantiated_kernel() -> None:
    source = (SOURCES / "walk" / "walk.cu").read_text()
    instantiated = instantiated_kernels(source, "")
    assert {"walk_registers<2, 1>", "walk_bounds", "walk_select_pick"} <= instantiated
    predicted = {k for case in racecheck.walk_cases() for k in racecheck.walk_kernels(case)}
    assert sorted(instantiated - predicted) == []
    assert sorted(predicted - instantiated) == []


def _record(*cases: tuple[str, list[str], str]) -> dict[str, object]:
    kernels = sorted({k for _, launched, _ in cases for k in launched} | {"mlp::unused<float>"})
    return {
        "kernels": kernels,
        "device": "test",
        "seconds": 1.0,
        "cases": [
            {"case": c, "launched": launched, "check": check} for c, launched, check in cases
        ],
    }


CLEAN_LOG = """========= COMPUTE-SANITIZER
racecheck case: rms_norm float32 3x9
racecheck driver: 1 cases, 0 mismatched
========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)
"""

# as compute-sanitizer 2025's analysis report spells it: the demangled kernel, "(int)" casts
HAZARD_LOG = """========= COMPUTE-SANITIZER
racecheck case: rms_norm float32 64x4096
========= Error: Race reported between Write access at void mlp::rms_norm_fixed<float, (int)4096>(const float *, const float *, float *, float *, long long, long long, float)+0x1a0 in mlp.cu:812
=========     and Read access at void mlp::rms_norm_fixed<float, (int)4096>(const float *, const float *, float *, float *, long long, long long, float)+0x2b0 in mlp.cu:820 [64 hazards]
========= Warning: Race reported between Write access at void other_kernel(int *)+0x10
=========     and Read access at void other_kernel(int *)+0x20 [2 hazards]
========= RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)
"""


def test_verdict_of_a_clean_run_names_every_form_and_the_unreached() -> None:
    record = _record(("rms_norm float32 3x9", ["mlp::rms_norm<float>"], "ok"))
    verdict = racecheck.module_verdict(record, CLEAN_LOG)
    assert verdict["summary"] == {"hazards": 0, "errors": 0, "warnings": 0}
    assert verdict["forms"] == {
        "mlp::rms_norm<float>": {"cases": ["rms_norm float32 3x9"], "hazards": 0}
    }
    assert verdict["unreached"] == ["mlp::unused<float>"]
    assert racecheck.verdict_line("mlp", verdict) == (
        "racecheck mlp: 0 hazards, but incomplete (1/2 kernels reached)"
    )


def test_verdict_attributes_hazards_to_their_form() -> None:
    record = _record(
        ("rms_norm float32 64x4096", ["mlp::rms_norm_fixed<float, 4096>"], "ok"),
        ("rms_norm float32 133x4096", ["mlp::rms_norm_fixed_full<float, 4096>"], "ok"),
    )
    verdict = racecheck.module_verdict(record, HAZARD_LOG)
    assert verdict["forms"]["mlp::rms_norm_fixed<float, 4096>"]["hazards"] == 64
    assert verdict["forms"]["mlp::rms_norm_fixed_full<float, 4096>"]["hazards"] == 0
    assert len(verdict["unattributed"]) == 1 and "other_kernel" in verdict["unattributed"][0]
    assert racecheck.verdict_line("mlp", verdict).startswith("racecheck mlp: HAZARDS: 2 reported")


def test_verdict_without_a_summary_or_a_record_says_so(tmp_path: Path) -> None:
    record = _record(("swiglu float32 1x9", ["mlp::swiglu<float>"], "ok"))
    killed = racecheck.module_verdict(record, "racecheck case: swiglu float32 1x9\n")
    assert "no verdict: racecheck wrote no summary" in racecheck.verdict_line("mlp", killed)
    out = tmp_path / "verdict.json"
    assert (
        racecheck.main(
            [
                "verdict",
                "--out",
                str(out),
                "walk",
                str(tmp_path / "none.json"),
                str(tmp_path / "none.log"),
            ]
        )
        == 0
    )
    assert "the driver wrote no record" in out.read_text()


def test_verdict_counts_failed_checks_as_incomplete() -> None:
    record = _record(("swiglu float32 1x9", ["mlp::swiglu<float>"], "mismatch: relative error 0.5"))
    record["kernels"] = ["mlp::swiglu<float>"]
    line = racecheck.verdict_line("mlp", racecheck.module_verdict(record, CLEAN_LOG))
    assert line == "racecheck mlp: 0 hazards, but incomplete (1/1 kernels reached, 1 checks failed)"


def test_every_launch_is_recorded_through_the_kernels_made_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The driver's record of launches: each Kernel made after _record_launches appends its name
    on every launch, and the launch still reaches the runtime's own, arguments and all."""
    from kernelpack.loader.module import Kernel

    monkeypatch.setattr(Kernel, "__init__", Kernel.__init__)  # restored after the test
    reached: list[tuple[object, ...]] = []

    class Runtime:
        def launcher(
            self, loaded: object, function: int, signature: object, fail: object
        ) -> object:
            return lambda *args, **kwargs: reached.append((*args, kwargs["stream"]))

    class Module:
        _loaded, _runtime = None, Runtime()

    launched: list[str] = []
    racecheck._record_launches(launched)
    kernel = Kernel("mlp::swiglu<float>", Module(), None, 7)  # type: ignore[arg-type]
    kernel.launch(4, 128, 1, 2, stream=0)
    kernel.launch(8, 128, 3, 4, stream=5)
    assert launched == ["mlp::swiglu<float>"] * 2
    assert reached == [(4, 128, 1, 2, 0), (8, 128, 3, 4, 5)]
