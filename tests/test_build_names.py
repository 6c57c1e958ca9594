"""Names a kernel project supplies never become shell text (issue 44, item 1).

nvcc runs its stages through /bin/sh and pastes file names, ``-D`` values and the values of its
pass-through options (``-Xcicc``, ``-Xptxas``, ...) into those command lines, so a project whose
module folder was ``m;cd;touch X;x`` ran ``touch X`` in $HOME on ``build --targets sm_90``. Each
name is now either refused where it enters (exit 2, one line naming it) or built correctly; the
injection tests below build projects holding ``;``, ``$()``, backticks, quotes, spaces and
newlines for sm_90 and gfx90a, with HOME and the current folder in temporary folders, and look for
the file each injected ``cd; touch X`` would leave.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from buildsys import REPO_ROOT, cli
from buildsys.errors import UnsafeNameError
from buildsys.index_writer import read_index
from buildsys.jobs import Job, compile_argv
from buildsys.matrix import load_matrix
from buildsys.modules import KernelModule, read_tree
from buildsys.names import check_define, check_flag, check_module_name, check_shell_path
from buildsys.settings import project_config
from buildsys.toolchain import cache_root

ATTACK = "m;cd;touch X;x"  # issue 44's folder name: nvcc ran `touch X` in $HOME
MARKER = "X"  # what every injected command below leaves, in $HOME (cd) or the compiler's folder
# One name per character class a shell reads; each runs `cd; touch X` if a shell ever parses it.
HOSTILE = {
    "semicolon": ATTACK,
    "dollar": "m$(cd;touch X)",
    "backtick": "m`cd;touch X`",
    "double quote": 'm";cd;touch X;"',
    "single quote": "m';cd;touch X;'",
    "space": "m ;cd;touch X",
    "newline": "m\ncd\ntouch X\n",
}
KERNEL = 'extern "C" __global__ void k(float* y) { y[threadIdx.x] = 1.0f; }\n'
# Define values a shell would split or run, but which have no meaning inside quotes the compilers
# add themselves: built, and the kernel checks that each arrived as written.
SAFE_DEFINES = ['SEMI="a;cd;touch X;b"', "SPACED=1 + 2", "QUOTED='q'", "PAREN=(1<<2)"]
CHECKED_KERNEL = (
    "constexpr bool same(const char* a, const char* b) {\n"
    "  return *a == *b && (*a == '\\0' || same(a + 1, b + 1));\n"
    "}\n"
    'static_assert(same(SEMI, "a;cd;touch X;b"), "SEMI did not arrive as written");\n'
    "static_assert(SPACED == 3 && QUOTED == 'q' && PAREN == 4, \"a define did not arrive\");\n"
    'extern "C" __global__ void good(int* y) { y[threadIdx.x] = SPACED; }\n'
)
VENDORS = [
    pytest.param("sm_90", marks=pytest.mark.nvcc, id="sm_90"),
    pytest.param("gfx90a", marks=pytest.mark.toolchain, id="gfx90a"),
]


# ---------------------------------------------------------------------------------------------
# The grammar, unit by unit


@pytest.mark.parametrize("name", ["mlp", "walk", "mmq_gguf", "threadFenceReduction", "_x", "a1"])
def test_module_names_of_real_projects_are_accepted(name: str) -> None:
    check_module_name(name, "kernel_sources")


@pytest.mark.parametrize(
    "name", [*HOSTILE.values(), "", "1st", "a-b", "a.b", "-x", "caf\u00e9", "a" * 101]
)
def test_a_module_name_outside_the_grammar_is_refused(name: str) -> None:
    with pytest.raises(UnsafeNameError, match="rename the folder") as error:
        check_module_name(name, "kernel_sources")
    assert "\n" not in str(error.value) and error.value.exit_code == 2


@pytest.mark.parametrize("define", ["A", "A=1", "_b=", *SAFE_DEFINES, 'S="h\u00e9llo"', "F=a,b"])
def test_defines_that_no_shell_can_misread_are_accepted(define: str) -> None:
    check_define(define, "defines")


@pytest.mark.parametrize(
    "define",
    ["", "=1", "1A", "A B", "A;B=1", "A(x)=x", "A-B", "V=$(cd;touch X)", "V=`touch X`",
     "V=a\\", "V=a\nb", "V=\t", "caf\u00e9=1"],
)  # fmt: skip
def test_a_define_a_shell_could_misread_is_refused(define: str) -> None:
    with pytest.raises(UnsafeNameError, match="defines") as error:
        check_define(define, "defines")
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    "flag",
    ["-O2", "-Xptxas", "-v", "-Xptxas=-v,-warn-spills", "--use_fast_math", "-std=c++17",
     "-maxrregcount=64", "64", "-DX=1", '-DS="a b"', "-UX", "-munsafe-fp-atomics", "-I", "inc"],
)  # fmt: skip
def test_ordinary_compiler_flags_are_accepted(flag: str) -> None:
    check_flag(flag, "flags")


@pytest.mark.parametrize(
    "flag",
    ["-Xptxas=-v;cd;touch X", "-Xptxas=$(touch X)", "-Xcicc=`touch X`", "-O2 -g", "a'b",
     '-Xptxas="x"', "-Xptxas=-v\n", "-DX=$(touch X)", "-U1", "@options.txt", "-ccbin=/tmp/cc",
     "-ccbin", "--compiler-bindir=/x", "-Xcompiler", "-B/tmp/bin", "-fplugin=./p.so",
     "-Xclang", "--options-file=f", "-optf", "-o", "-odir", "--keep-dir=/x", "-Wl,-rpath,x",
     "-Xoffload-linker", "--run", "-I/etc", "-ftime-trace=/root/.bashrc"],
)  # fmt: skip
def test_a_flag_that_could_break_out_or_run_a_program_is_refused(flag: str) -> None:
    with pytest.raises(UnsafeNameError, match="flags") as error:
        check_flag(flag, "flags")
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("character", ["$", "`", '"', "\\", "\n"])
def test_a_cache_folder_nvccs_shell_would_expand_is_refused(tmp_path: Path, character: str) -> None:
    check_shell_path(tmp_path / "plain folder; with spaces", "--cache-dir")
    with pytest.raises(UnsafeNameError, match="--cache-dir") as error:
        check_shell_path(tmp_path / f"c{character}x", "--cache-dir")
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_read_tree_refuses_a_hostile_module_folder_or_unit(tmp_path: Path, kind: str) -> None:
    name = HOSTILE[kind]
    for folder, unit in ((name, "k.cu"), ("good", f"{name}.cu")):
        root = tmp_path / kind / folder.replace("/", "_")
        (root / folder).mkdir(parents=True)
        (root / folder / unit).write_text(KERNEL)
        with pytest.raises(UnsafeNameError, match="rename"):
            read_tree(root)


def test_a_header_is_never_on_a_command_line_so_its_name_is_free(tmp_path: Path) -> None:
    (tmp_path / "good" / "detail").mkdir(parents=True)
    (tmp_path / "good" / "good.cu").write_text('#include "detail/odd name.cuh"\n' + KERNEL)
    (tmp_path / "good" / "detail" / "odd name.cuh").write_text("#pragma once\n")
    tree, modules = read_tree(tmp_path)
    assert [m.name for m in modules] == ["good"] and "good/detail/odd name.cuh" in tree


def test_nvccs_source_option_is_built_from_checked_names_only() -> None:
    """The -Xcicc option nvcc pastes unquoted: a module made without read_tree is refused too."""
    cubin = next(
        t for t in load_matrix(REPO_ROOT / "arch_matrix.toml").targets if t.kind == "cubin"
    )
    argv = compile_argv(Job(KernelModule("m", "m/a-1.cu"), cubin), [], [], "OUT", "DEPS")
    assert "-Xcicc=--orig_src_path_name=m/a-1.cu" in argv
    seed = hashlib.sha256(b"m/a-1.cu").hexdigest()[:8]  # the unit's own, a shell-safe hex number
    assert f"-frandom-seed=0x{seed}" in argv
    for module, unit in ((ATTACK, "k.cu"), ("m", "a,--x.cu"), ("m", "$(touch X).cu")):
        with pytest.raises(UnsafeNameError):
            compile_argv(Job(KernelModule(module, f"{module}/{unit}"), cubin), [], [], "O", "D")


def test_a_hostile_define_in_the_config_names_its_key(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "p"\nversion = "1"\n[tool.kernelpack.modules.good]\n'
        'defines = ["V=$(touch X)"]\n'
    )
    with pytest.raises(UnsafeNameError, match=r"tool\.kernelpack\.modules\.good\.defines"):
        project_config(tmp_path)


# ---------------------------------------------------------------------------------------------
# The injection tests: real builds, both vendors' compilers


def _toml(text: str) -> str:
    """A TOML basic string holding ``text`` (JSON's escapes are TOML's)."""
    return json.dumps(text)


def _project(root: Path, target: str, files: dict[str, str], config: str = "") -> Path:
    vendor = "amd" if target.startswith("gfx") else "nvidia"
    (root / "kernel_sources").mkdir(parents=True)
    (root / "pyproject.toml").write_text(
        f'[project]\nname = "names-test"\nversion = "1.0"\n\n[tool.kernelpack]\n{config}'
    )
    (root / "arch_matrix.toml").write_text(f'[{vendor}]\ntargets = ["{target}"]\n')
    for relative, text in files.items():
        path = root / "kernel_sources" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HOME and the current folder in tmp_path (the toolchains stay where they were found)."""
    monkeypatch.setenv("KERNELPACK_TOOLCHAIN_DIR", str(cache_root()))
    for name in [n for n in os.environ if n.startswith("KERNELPACK_BUILD_")]:
        monkeypatch.delenv(name)
    monkeypatch.delenv("KERNELPACK_DEBUG", raising=False)
    for folder in ("home", "cwd"):
        (tmp_path / folder).mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path / "cwd")
    return tmp_path


def _build(sandbox: Path, project: Path, target: str) -> int:
    argv = ["build", "--project", str(project), "--targets", target]
    argv += ["--cache-dir", str(sandbox / "cache"), "--out", str(sandbox / "out")]
    return cli.main(argv)


def _side_effects(sandbox: Path) -> list[str]:
    """Every file an injected ``touch X`` left: under the sandbox (HOME, the current folder, the
    project, the cache and its scratch folders where the compilers ran) and in the real $HOME."""
    found = [str(p) for p in sandbox.rglob(MARKER)]
    real_home = Path(os.path.expanduser(f"~{os.environ.get('USER', 'root')}"))
    return found + [str(real_home / MARKER)] * (real_home / MARKER).exists()


def _hostile_project(root: Path, target: str, kind: str, name: str) -> Path:
    if kind == "module":
        return _project(root, target, {f"{name}/k.cu": KERNEL})
    if kind == "unit":
        return _project(root, target, {f"good/{name}.cu": KERNEL})
    if kind == "define name":
        return _project(root, target, {"good/good.cu": KERNEL}, f"defines = [{_toml(name)}]\n")
    if kind == "define value":
        config = f"defines = [{_toml('KP_VALUE=' + name)}]\n"
        return _project(root, target, {"good/good.cu": KERNEL}, config)
    config = f"[tool.kernelpack.modules.good]\nflags = [{_toml('-Xptxas=-v,' + name)}]\n"
    return _project(root, target, {"good/good.cu": KERNEL}, config)


@pytest.mark.parametrize("target", VENDORS)
def test_the_original_attack_is_refused_and_runs_nothing(
    sandbox: Path, target: str, capsys: pytest.CaptureFixture[str], request: pytest.FixtureRequest
) -> None:
    if target.startswith("gfx"):
        request.getfixturevalue("amd_toolchain")
    project = _project(sandbox / "project", target, {f"{ATTACK}/k.cu": KERNEL})
    assert _build(sandbox, project, target) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and repr(ATTACK) in lines[0] and "rename" in lines[0], lines
    assert _side_effects(sandbox) == []
    assert not (sandbox / "out").exists()


@pytest.mark.parametrize("name", list(HOSTILE.values()), ids=list(HOSTILE))
@pytest.mark.parametrize("kind", ["module", "unit", "define name", "define value", "flag"])
@pytest.mark.parametrize("target", VENDORS)
def test_a_hostile_name_is_refused_in_one_line_and_runs_nothing(
    sandbox: Path,
    target: str,
    kind: str,
    name: str,
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
) -> None:
    if target.startswith("gfx"):
        request.getfixturevalue("amd_toolchain")
    project = _hostile_project(sandbox / "project", target, kind, name)
    status = _build(sandbox, project, target)
    err = capsys.readouterr().err.strip().splitlines()
    assert _side_effects(sandbox) == []
    if kind == "define value" and not any(c in name for c in "$`\n"):
        # inside the compilers' own quoting these mean nothing: built (the test below checks
        # that such values arrive as written)
        assert status == 0, err
        return
    assert status == 2 and len(err) == 1 and repr(name)[1:-1] in err[0], err


@pytest.mark.nvcc
def test_a_cache_folder_nvccs_shell_would_expand_is_refused_before_nvcc_runs(
    sandbox: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = _project(sandbox / "project", "sm_90", {"good/good.cu": KERNEL})
    argv = ["build", "--project", str(project), "--targets", "sm_90", "--out", str(sandbox / "out")]
    assert cli.main([*argv, "--cache-dir", str(sandbox / "c$(cd;touch X)")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "--cache-dir" in lines[0], lines
    assert _side_effects(sandbox) == []


@pytest.mark.parametrize("target", VENDORS)
def test_defines_holding_shell_characters_build_as_written(
    sandbox: Path, target: str, request: pytest.FixtureRequest
) -> None:
    if target.startswith("gfx"):
        request.getfixturevalue("amd_toolchain")
    config = f"defines = [{', '.join(_toml(d) for d in SAFE_DEFINES)}]\n"
    project = _project(sandbox / "project", target, {"good/good.cu": CHECKED_KERNEL}, config)
    assert _build(sandbox, project, target) == 0
    assert _side_effects(sandbox) == []
    index = read_index((sandbox / "out" / "_index.py").read_text())
    assert [image["target"] for image in index["modules"]["good"]["images"]] == [target]
