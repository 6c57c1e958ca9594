"""Compare our hipify with AMD's hipify-perl on the CUDA corpus; print a markdown table.

    python bench/bench_hipify_marked.py [--corpus DIR] [--jobs N]

For each corpus file and each tool: translate, then ``hipcc -c`` the result for gfx90a (wave64) and
gfx1100 (wave32) together, host and device; and count the wave-size hazards each tool reports
against the hazards marked in the corpus by hand (``// expect: <code>[, <code>]`` on the line).
hipify-perl has no wave-size checks; it is credited with a hazard when it prints any warning on
that line. The table in docs/hipify.md is this command's output.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: the repository's packages come first
    sys.path[:0] = [str(REPO / "wheels"), str(REPO)]

from buildsys import REPO_ROOT  # noqa: E402
from buildsys.hipify import COMPAT_DIR, WAVE_SIZE_CODES, Severity, hipify_source  # noqa: E402
from buildsys.toolchain import Toolchain, amd_toolchain  # noqa: E402

CORPUS_DIR = REPO_ROOT / "tests" / "hipify_corpus"
OFFLOAD_ARCHS = ("gfx90a", "gfx1100")
INLINE_ASM = "inline-asm"
_EXPECT_RE = re.compile(r"//.*?\bexpect:\s*([\w\-]+(?:\s*,\s*[\w\-]+)*)")
# hipify-perl's two warning shapes: "  warning: FILE:#LINE : text" and "  FILE:LINE: warning: text".
_PEER_WARNING_RE = re.compile(r"^\s*(?:warning: .*?:#(\d+) :|.*?:(\d+): warning:)", re.MULTILINE)


def read_expectations(text: str) -> Counter[tuple[int, str]]:
    """The findings marked in a corpus file: (line, code) with multiplicity."""
    expected: Counter[tuple[int, str]] = Counter()
    for number, line in enumerate(text.splitlines(), start=1):
        match = _EXPECT_RE.search(line)
        if match:
            for code in match.group(1).split(","):
                expected[(number, code.strip())] += 1
    return expected


@dataclass(frozen=True)
class ToolResult:
    compiled: bool
    first_error: str  # the compiler's first error line, '' when it compiled
    hazards_reported: int  # expected wave-size hazards the tool reported
    false_alarms: int | None  # wave-size findings not expected (None: the tool has no such class)
    findings: int  # everything the tool printed: diagnostics or warnings


@dataclass(frozen=True)
class FileComparison:
    name: str
    has_inline_asm: bool
    hazards_expected: int
    ours: ToolResult
    peer: ToolResult


@dataclass(frozen=True)
class Comparison:
    files: tuple[FileComparison, ...]
    hip_version: str
    peer_version: str
    seconds: float


def compile_hip(toolchain: Toolchain, source: Path) -> str:
    """'' when ``hipcc -c`` builds source for both targets, else its first error line."""
    archs = (f"--offload-arch={a}" for a in OFFLOAD_ARCHS)
    argv = ["hipcc", "-c", "-w", "-I", str(COMPAT_DIR), *archs, str(source)]
    result = toolchain.run([*argv, "-o", str(source.with_suffix(".o"))], check=False)
    if result.returncode == 0:
        return ""
    lines = (result.stderr + result.stdout).splitlines()
    return next((line for line in lines if "error" in line), lines[-1] if lines else "failed")


def _ours(source: Path, out: Path) -> tuple[Counter[tuple[int, str]], int]:
    text = source.read_text(encoding="utf-8")
    result = hipify_source(text, source.name)
    out.write_text(result.text, encoding="utf-8")
    wave = Counter((d.line, d.code) for d in result.diagnostics if d.code in WAVE_SIZE_CODES)
    return wave, sum(1 for d in result.diagnostics if d.severity is not Severity.NOTE)


def _peer(toolchain: Toolchain, source: Path, out: Path) -> tuple[set[int], int]:
    result = toolchain.run(["hipify-perl", str(source), f"-o={out}"], check=False)
    lines = {int(a or b) for a, b in _PEER_WARNING_RE.findall(result.stderr)}
    return lines, len(_PEER_WARNING_RE.findall(result.stderr))


def run_comparison(toolchain: Toolchain, corpus: Path = CORPUS_DIR, *, jobs: int = 2) -> Comparison:
    """Translate every corpus file with both tools and compile all outputs, ``jobs`` at a time."""
    started = time.monotonic()
    sources = sorted(corpus.glob("*.cu"))
    with tempfile.TemporaryDirectory(prefix="hipify-compare-") as work:
        work_dir = Path(work)
        (work_dir / "ours").mkdir()
        (work_dir / "peer").mkdir()
        translated: list[tuple[Path, Path, Path]] = [
            (s, work_dir / "ours" / f"{s.stem}.hip", work_dir / "peer" / f"{s.stem}.hip")
            for s in sorted(sources)
        ]
        ours = {s: _ours(s, o) for s, o, _ in translated}
        peer = {s: _peer(toolchain, s, p) for s, _, p in translated}
        outputs = [o for _, o, _ in translated] + [p for _, _, p in translated]
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            errors = dict(
                zip(
                    outputs,
                    pool.map(lambda path: compile_hip(toolchain, path), outputs),
                    strict=True,
                )
            )
    files = []
    for source, our_out, peer_out in translated:
        expected = read_expectations(source.read_text(encoding="utf-8"))
        expected_wave = Counter({k: n for k, n in expected.items() if k[1] in WAVE_SIZE_CODES})
        our_wave, our_findings = ours[source]
        peer_lines, peer_findings = peer[source]
        files.append(
            FileComparison(
                name=source.name,
                has_inline_asm=any(code == INLINE_ASM for _, code in expected),
                hazards_expected=sum(expected_wave.values()),
                ours=ToolResult(
                    compiled=not errors[our_out],
                    first_error=_short(errors[our_out], our_out),
                    hazards_reported=sum((our_wave & expected_wave).values()),
                    false_alarms=sum((our_wave - expected_wave).values()),
                    findings=our_findings,
                ),
                peer=ToolResult(
                    compiled=not errors[peer_out],
                    first_error=_short(errors[peer_out], peer_out),
                    hazards_reported=sum(
                        n for (line, _), n in expected_wave.items() if line in peer_lines
                    ),
                    false_alarms=None,
                    findings=peer_findings,
                ),
            )
        )
    return Comparison(
        tuple(files),
        hip_version=toolchain.version,
        peer_version=_peer_version(toolchain),
        seconds=time.monotonic() - started,
    )


def _short(error: str, path: Path) -> str:
    """A compiler error without the temporary folder's path."""
    return error.replace(str(path.parent) + "/", "").strip()


def _peer_version(toolchain: Toolchain) -> str:
    """hipify-perl's package version where a package manager knows it, else what it prints."""
    package = toolchain.run(["dpkg-query", "-W", "-f=${Version}", "hipify-perl"], check=False)
    if package.returncode == 0 and package.stdout.strip():
        return f"hipify-perl {package.stdout.strip()}"
    printed = toolchain.run(["hipify-perl", "-version"], check=False)
    lines = (printed.stderr or printed.stdout).strip().splitlines()
    return f"hipify-perl ({lines[0]})" if lines else "hipify-perl"


def markdown(comparison: Comparison) -> str:
    """The comparison as markdown: a summary per tool, then one row per corpus file."""
    files = comparison.files
    plain = [f for f in files if not f.has_inline_asm]
    expected = sum(f.hazards_expected for f in files)

    def summary(name: str, pick: Callable[[FileComparison], ToolResult]) -> str:
        compiled = sum(pick(f).compiled for f in files)
        compiled_plain = sum(pick(f).compiled for f in plain)
        reported = sum(pick(f).hazards_reported for f in files)
        alarms = [pick(f).false_alarms for f in files]
        false_alarms = "-" if any(a is None for a in alarms) else str(sum(a or 0 for a in alarms))
        findings = sum(pick(f).findings for f in files)
        return (
            f"| {name} | {compiled}/{len(files)} | {compiled_plain}/{len(plain)} | "
            f"{reported}/{expected} | {false_alarms} | {findings} |"
        )

    lines = [
        f"Corpus: {len(files)} CUDA files (tests/hipify_corpus); compiled with `hipcc -c` for "
        f"{' and '.join(OFFLOAD_ARCHS)} together ({comparison.hip_version}); peer: {comparison.peer_version}.",
        "",
        "| tool | files compiled | without inline PTX | wave-size hazards reported / expected | "
        "unexpected wave-size findings | diagnostics printed |",
        "| --- | --- | --- | --- | --- | --- |",
        summary("buildsys hipify", lambda f: f.ours),
        summary("hipify-perl", lambda f: f.peer),
        "",
        "| file | hazards expected | ours: compiles | ours: hazards | hipify-perl: compiles | "
        "hipify-perl: hazards | hipify-perl: first error |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for f in files:
        lines.append(
            f"| {f.name}{' (inline PTX)' if f.has_inline_asm else ''} | {f.hazards_expected} | "
            f"{_yes(f.ours.compiled)} | {f.ours.hazards_reported} | {_yes(f.peer.compiled)} | "
            f"{f.peer.hazards_reported} | {_cell(f.peer.first_error)} |"
        )
    lines += ["", f"Wall time: {comparison.seconds:.0f} s (2 hipcc jobs at a time)."]
    return "\n".join(lines) + "\n"


def _yes(value: bool) -> str:
    return "yes" if value else "no"


def _cell(text: str) -> str:
    text = re.sub(r"^\S+:\d+:\d+: ", "", text).replace("|", "\\|")
    return f"`{text[:110]}`" if text else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python bench/bench_hipify_marked.py", description=__doc__
    )
    parser.add_argument("--corpus", type=Path, default=CORPUS_DIR, metavar="DIR")
    parser.add_argument("--jobs", type=int, default=2, metavar="N", help="hipcc jobs at a time")
    args = parser.parse_args(argv)
    comparison = run_comparison(amd_toolchain(provision=True), args.corpus, jobs=args.jobs)
    sys.stdout.write(markdown(comparison))
    return 0


if __name__ == "__main__":
    from kernelpack._console import run_cli

    sys.exit(run_cli(main))
