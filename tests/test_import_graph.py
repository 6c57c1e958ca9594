"""The import graph of kernelpack and buildsys: no cycle, imports inside functions only to defer.

Every module's imports are read with ``ast`` (module level, inside functions and classes alike;
only ``if TYPE_CHECKING:`` bodies, which never run, are left out), resolved to the project's own
modules, and the graph must be acyclic. Counting the imports inside functions means none of them
can be what keeps a cycle from showing: each in-function import of a project module is listed in
DEFERRED_PROJECT with the optional dependency it defers, and each in-function import of anything
else must be one of the optional or vendor dependencies in DEFERRED_THIRD_PARTY.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import kernelpack.formats as formats

REPO = Path(__file__).resolve().parent.parent
ROOTS = {"kernelpack": REPO / "wheels" / "kernelpack", "buildsys": REPO / "buildsys"}

# (importing module, imported module) -> why the import waits for the call
DEFERRED_PROJECT = {
    ("kernelpack.ops.mlp.api", "kernelpack.ops.mlp.torch_ops"): "it imports torch (optional)",
    (
        "kernelpack.backends.hotpath",
        "kernelpack.backends._launcher",
    ): "a C extension, may be absent",
    ("kernelpack.backends.launch", "kernelpack.backends._launcher"): "a C extension, may be absent",
    ("kernelpack.cli.sweep_command", "kernelpack.sweep"): "the sweep code imports numpy and Dask, "
    "which the other subcommands run without (the README's checkout command)",
    **{
        ("buildsys.cli", f"buildsys.{name}"): "a subcommand's module, imported when it runs: a "
        "no-op build imports none of the others (docs/bench-build.md's no-op figure)"
        for name in ("packaging", "build", "merge", "hipify.cli", "wheels", "export.command")
    },
    ("buildsys.cli", "kernelpack.formats"): "the readers, for the one subcommand that reads images",
    ("kernelpack.loader.images", "kernelpack.formats"): "the bundle reader, for an image inside "
    'a compressed bundle: a cubin\'s load reads none (docs/loader.md, "Ready time")',
    ("kernelpack.loader.load", "kernelpack.formats"): "the ELF readers, for kernel.info of a "
    "run-time compiled image only",
    ("kernelpack.loader.load", "kernelpack.backends.hip"): "HIP's binding, for AMD GPUs only",
    ("kernelpack.loader.load", "kernelpack.backends.support"): "the HIP runtime's code object "
    "version, which AMD's generic images alone need",
    ("kernelpack.loader.load", "kernelpack.loader.hints"): "the advice when no image fits and "
    "nothing compiles, for a load that fails",
    ("kernelpack.devices.detect", "kernelpack._jsonfields"): "the JSON shape, for the command "
    "lines' `--json` reports: a load writes none",
    ("kernelpack.loader.load", "kernelpack.loader.cache"): "the disk cache (with hashlib's OpenSSL "
    "start, hmac, fcntl: about 2 ms), for bundles, PTX and sources: a cubin's load keeps nothing",
    ("kernelpack.loader.load", "kernelpack.backends.rtc"): "NVRTC's and hipRTC's binding (and "
    "json), for a module no prebuilt image fits",
    ("buildsys.trees", "buildsys.hipify.tree_facts"): "the translator, for a tree that changed: "
    "an unchanged tree is served from its record without it",
    ("buildsys.trees", "buildsys.hipify.translate"): "the translator, for a tree that changed",
}
# top-level names an import inside a function may name, and why: optional dependencies (not in
# the runtime's requirements, or heavy and needed by one path only) and vendor libraries
DEFERRED_THIRD_PARTY = {
    "torch": "optional (kernelpack.ops.mlp's torch ops and modules, the torch path of the ops)",
    "cupy": "optional array framework",
    "numpy": "needed by the array paths only; `import kernelpack` stays cheap",
    "rich": "optional terminal output",
    "zstandard": "the bundle codec before Python 3.14",
    "compression": "Python 3.14's zstd, absent before",
    "distributed": "the sweep extra (Dask)",
    "dask": "the sweep extra (Dask)",
    "flint": "the exact extra (python-flint)",
    "setuptools_scm": "the build backend's version, a build requirement only",
    "ctypes": "renameat2's folder swap alone needs it; the no-op build's start does not",
    "packaging": "requirement parsing, for metadata a no-op build does not write",
    "email": "the metadata file's parser and writer, likewise",
    "dataclasses": "json_fields of the readers' dataclasses; the records a load makes are "
    "NamedTuples, so that a load does not import dataclasses and inspect",
    "tomllib": "kernelpack.files.regular's TOML reader (sweep specs, the builder's files): a load "
    "reads none",
    "hashlib": "OpenSSL's sha256 (its start about 2 ms), for data of 512 KiB and more "
    "(kernelpack.files.digest): a cubin's check uses CPython's own",
    "json": "the provenance file's reader (kernelpack.loader.catalog): a load reads no JSON",
    "importlib": "importlib.metadata (email, zipfile, csv: 13 to 27 ms) for entry points and "
    "distributions, which a fat install's load never reads (kernelpack.loader.catalog)",
}


def modules() -> dict[str, Path]:
    found = {}
    for root in ROOTS.values():
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root.parent).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _imports(tree: ast.AST) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Each import of ``tree`` but those under ``if TYPE_CHECKING:``, and whether it is inside a
    function."""

    def walk(
        node: ast.AST, in_function: bool
    ) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and ast.unparse(child.test) in (
                "TYPE_CHECKING",
                "typing.TYPE_CHECKING",
            ):
                for other in child.orelse:
                    yield from walk(other, in_function)
                continue
            if isinstance(child, ast.Import | ast.ImportFrom):
                yield child, in_function
            inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            yield from walk(child, inner)

    yield from walk(tree, False)


def _targets(name: str, path: Path, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The absolute names ``node`` imports (a module, or a module's attribute)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, *([node.module] if node.module else [])])
    return [f"{base}.{alias.name}" for alias in node.names] + [base]


def _project_module(target: str, known: dict[str, Path]) -> str | None:
    while target and target not in known:
        target = target.rpartition(".")[0]
    return target or None


def graph() -> tuple[dict[str, set[str]], list[tuple[str, str, int]], list[tuple[str, str, int]]]:
    """(edges, in-function imports of project modules, in-function imports of others)."""
    known = modules()
    edges: dict[str, set[str]] = {name: set() for name in known}
    deferred_project, deferred_other = [], []
    for name, path in known.items():
        for node, in_function in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            targets = _targets(name, path, node)
            if targets[-1].split(".")[0] not in ROOTS:
                if in_function:
                    deferred_other.append((name, targets[-1], node.lineno))
                continue
            named = targets if isinstance(node, ast.Import) else targets[:-1]
            for target in named:
                module = target if target in known else None
                module = module or _project_module(target, known)
                if module and module != name:
                    edges[name].add(module)
            if in_function:
                deferred_project.append((name, _deepest(targets, known), node.lineno))
    return edges, deferred_project, deferred_other


def _deepest(targets: list[str], known: dict[str, Path]) -> str:
    """The module an in-function import names: its own (a compiled one, not in ``known``, too)."""
    for target in targets[:-1]:
        if target in known or target.rpartition(".")[2].startswith("_"):
            return target
    return targets[-1]


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's), and self-loops."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_the_import_graph_reads_the_real_arrows() -> None:
    """The reader sees the arrows it must (were it to see none, no cycle would show)."""
    edges, _, _ = graph()
    assert "kernelpack.formats.index" in edges["kernelpack.loader.load"]
    assert "kernelpack.targets" in edges["buildsys.matrix"]
    assert "buildsys.wheelfile" in edges["buildsys.variants"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle_in_kernelpack_or_buildsys() -> None:
    edges, _, _ = graph()
    assert cycles(edges) == []


def test_imports_inside_functions_only_defer_an_optional_dependency() -> None:
    _, project, other = graph()
    unexplained = [(m, t, line) for m, t, line in project if (m, t) not in DEFERRED_PROJECT]
    assert unexplained == [], "import these at module level (no cycle needs them inside)"
    stray = [(m, t, line) for m, t, line in other if t.split(".")[0] not in DEFERRED_THIRD_PARTY]
    assert stray == [], "import these at module level, or add the optional dependency and why"
    known = modules()
    unsaid = [
        (module, line)
        for module, _, line in project + other
        if not any(
            "#" in text
            for text in known[module].read_text(encoding="utf-8").splitlines()[line - 2 : line]
        )
    ]
    assert unsaid == [], "say why each of these waits, in a comment on its line or the one above"


# the platform: what the products are built on, which imports no product
PLATFORM = ("formats", "targets", "files", "devices", "backends", "loader", "cli", "errors")


def test_the_platform_imports_no_product() -> None:
    """Imports go one way, from the products (kernelpack.ops and their public names) to the
    platform: no module of the platform imports a product's."""
    edges, _, _ = graph()
    products = ("kernelpack.ops", "kernelpack.mlp", "kernelpack.nn", "kernelpack.torch_ops")
    upward = [
        (module, target)
        for module, targets in edges.items()
        if module.startswith(tuple(f"kernelpack.{room}" for room in PLATFORM))
        for target in targets
        if target.startswith(products)
    ]
    assert upward == []
    assert "kernelpack.backends.hotpath" in edges["kernelpack.ops.mlp.hot"]


def test_the_runtime_package_has_rooms() -> None:
    """At most 15 modules directly in wheels/kernelpack (the generated _index.py among them)."""
    flat = [p.name for p in ROOTS["kernelpack"].glob("*.py") if p.name != "_index.py"]
    assert len(flat) + 1 <= 15, sorted(flat)


# A fat install's cubin load, in a fresh process: the loader's real code from the index to the
# kernel lookup, with the vendor runtime (which needs a GPU) replaced by one that keeps the bytes.
CUBIN_LOAD = r"""
import sys
from pathlib import Path

from kernelpack.backends.runtime import LoadedModule, Runtime
from kernelpack.devices.detect import Gpu
from kernelpack.loader.load import Loader
from kernelpack.targets import NvidiaTarget

root = Path(sys.argv[1])
cubin = bytes.fromhex(sys.argv[2])
(root / "demo.sm_90.cubin").write_bytes(cubin)
params = [{"type": "float*", "offset": 0, "size": 8}]
image = {
    "vendor": "nvidia", "target": "sm_90", "kind": "cubin", "file": "demo.sm_90.cubin",
    "offset": 0, "size": len(cubin), "sha256": sys.argv[3],
    "compression": "none", "kernels": {}, "symbols": {"scale": "_Z5scalePf"},
}
index = {
    "schema": 2, "version": "1.0", "build": {"toolchains": {}, "flags": {}, "sources": {}},
    "modules": {"demo": {"kernels": {"scale": params}, "source": "", "source_sha256": "",
                         "images": [image]}},
}


class Keeping(Runtime):
    vendor, library, binding = "nvidia", "keeping", "ctypes"
    loaded = b""

    def load(self, ordinal, data):
        Keeping.loaded = data
        return LoadedModule(1, ordinal)

    def function(self, module, name):
        return 2

    def launcher(self, module, function, signature, fail):
        return lambda *args, **kwargs: None


gpu = Gpu(0, "nvidia", NvidiaTarget(9, 0), "H200", "", "", None, "cuda", "sm_90")
loader = Loader(index=index, root=root, gpus=[gpu], runtimes=lambda vendor: Keeping())
loader.load("demo", 0).kernel("scale")
modules = sorted(sys.modules)
import json  # after the modules are listed: the report's own

print(json.dumps({"loaded": Keeping.loaded == cubin, "modules": modules}))
"""


def test_a_cubin_load_imports_nothing_it_does_not_use(tmp_path: Path) -> None:
    """Each module here was once imported by every load and used by none of a fat install's
    cubin loads: together 30 of the 36 ms the loader's imports took (docs/loader.md, "First
    load"). importlib.metadata is for device wheels; the bundle and ELF readers for compressed
    bundles and kernel.info of a compiled image; the run-time compilers for a module no image
    fits; the command lines' output module for the command lines; the disk cache (and OpenSSL's
    sha256 with it) for bundles, PTX and sources."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOTS["kernelpack"].parent), str(REPO)]),
        "KERNELPACK_CACHE_DIR": str(tmp_path / "cache"),
    }
    cubin = b"\x7fELF" + bytes(range(256)) * 4
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            CUBIN_LOAD,
            str(tmp_path),
            cubin.hex(),
            hashlib.sha256(cubin).hexdigest(),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=True,
    )
    report = json.loads(done.stdout)
    assert report["loaded"]
    unused = {
        "importlib.metadata",
        "email",
        "zipfile",
        "kernelpack.formats.bundles",
        "kernelpack.formats.code_objects",
        "kernelpack.formats.cubins",
        "kernelpack.formats.elf",
        "kernelpack.backends.rtc",
        "kernelpack.backends.hip",
        "kernelpack._console",
        "argparse",
        "dataclasses",
        "inspect",
        "json",
        "tomllib",
        "hashlib",
        "_hashlib",
        "hmac",
        "kernelpack.loader.cache",
        "kernelpack.loader.cache_files",
        "kernelpack.loader.hints",
        "kernelpack._jsonfields",
        "kernelpack.backends.support",
        "fcntl",
    }
    assert sorted(unused & set(report["modules"])) == []
    assert "kernelpack.loader.load" in report["modules"]  # the load ran in this process


def test_every_name_of_kernelpack_formats_is_its_readers_own() -> None:
    """kernelpack.formats imports its readers when a name is first asked for: each name it lists
    is the object of the module its table names, and the list and the table agree."""
    assert sorted(formats.__all__) == sorted(formats._HOMES)
    for name in formats.__all__:
        home = importlib.import_module(f"kernelpack.formats.{formats._HOMES[name]}")
        assert getattr(formats, name) is getattr(home, name), name
