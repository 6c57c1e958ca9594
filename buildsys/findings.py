"""hipify's findings as the build acts on them.

hipify reports each finding as ``file:line:col: severity[code]: message`` (buildsys.hipify). An
*error* means the translated file will not compile for AMD, or would not mean the same: an AMD
build stops before starting any compiler and names every such finding in the files its modules
compile. A compile that fails anyway is pointed at the findings (warnings, notes) in the file and
line the compiler complained about, since they usually say why.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_FINDING = re.compile(
    r"^(?P<path>.+?):(?P<line>\d+):(?P<col>\d+): (?P<severity>error|warning|note)"
    r"\[(?P<code>[\w-]+)\]: (?P<message>.*)$"
)
# clang's own diagnostics: "walk.hip:12:5: error: ..." (paths relative to the compile's folder)
_COMPILER_ERROR = re.compile(
    r"^(?P<path>[^\s:][^:]*):(?P<line>\d+):(?P<col>\d+): (?:fatal )?error:"
)
_LINE_MARKER = re.compile(r'^#line \d+ "([^"]+)"$', re.MULTILINE)


@dataclass(frozen=True)
class Finding:
    path: str  # tree path of the CUDA file ("mlp/mlp.cu", "include/common.cuh")
    line: int
    col: int
    severity: str
    code: str
    text: str  # the whole line, as hipify wrote it

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}:{self.col}"


def parse_findings(lines: Iterable[str]) -> list[Finding]:
    findings = []
    for text in lines:
        match = _FINDING.match(text)
        if match:
            findings.append(
                Finding(
                    match["path"],
                    int(match["line"]),
                    int(match["col"]),
                    match["severity"],
                    match["code"],
                    text,
                )
            )
    return findings


def files_of(inlined_source: str, main: str) -> set[str]:
    """The tree paths a module's translation unit reads, from its self-contained source's
    ``#line`` markers (modules.inline_includes), with the hipified main named as its .cu."""
    return {hip_cuda_path(p) for p in _LINE_MARKER.findall(inlined_source)} | {hip_cuda_path(main)}


def hip_cuda_path(path: str) -> str:
    """A hipified unit's path as its CUDA source's (headers keep their names)."""
    return path[: -len(".hip")] + ".cu" if path.endswith(".hip") else path


def blocking(findings: Sequence[Finding], files: set[str]) -> list[Finding]:
    """The error findings in these files: each stops an AMD build before it compiles."""
    return [f for f in findings if f.severity == "error" and f.path in files]


def explaining(
    compiler_message: str, module: str, findings: Sequence[Finding], sources: str = ""
) -> list[Finding]:
    """The findings at the places a failed AMD compile names (paths relative to the module's
    folder of the hipified tree, or inside ``sources``, the sources folder as the build's
    messages name it): those on the same line first, else the file's others."""
    places: list[tuple[str, int]] = []
    for text in compiler_message.splitlines():
        match = _COMPILER_ERROR.match(text.strip())
        if match:
            named = match["path"]
            if sources == ".":  # the project is its own sources folder
                path = named
            elif sources and named.startswith(f"{sources}/"):
                path = named[len(sources) + 1 :]
            else:
                path = posixpath.normpath(posixpath.join(module, named))
            places.append((hip_cuda_path(path), int(match["line"])))
    chosen: list[Finding] = []
    for path, number in places:
        in_file = [f for f in findings if f.path == path]
        for finding in [f for f in in_file if f.line == number] or in_file:
            if finding not in chosen:
                chosen.append(finding)
    return chosen[:3]
