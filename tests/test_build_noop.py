"""What a no-op build keeps from the last one (issue 49: a no-op rebuild in at most 0.3 s), each
cache against a fresh computation and against what invalidates it.

The end-to-end cases (a source edited, a flag changed, nothing touched) are test_build.py's,
with the real compilers; these need git and c++filt, no compiler.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import kernelpack
from buildsys import REPO_ROOT, demangling, discovered, hipify, index_writer, scm_version, toolchain
from buildsys.cache import BuildCache
from buildsys.demangling import demangle, find_demangler
from buildsys.modules import read_tree
from buildsys.project import package_version
from buildsys.trees import hipify_tree
from kernelpack.formats import compress_bundle, write_bundle

# What `python -m buildsys build` must not import: the other subcommands' modules and what only
# a compile or a translation needs.
NOT_FOR_BUILD = (
    "buildsys.wheels",
    "buildsys.export.command",
    "buildsys.merge",
    "buildsys.hipify.cli",
    "buildsys.hipify.translate",
    "buildsys.hipify.tree_facts",
    "packaging.requirements",
    "setuptools_scm",
)


def test_the_build_command_imports_only_what_it_runs() -> None:
    code = (
        "import sys\n"
        "from buildsys.cli import _parser\n"
        "_parser().parse_args(['build', '--targets', 'gfx1100'])\n"
        f"print(sorted(m for m in {NOT_FOR_BUILD!r} if m in sys.modules))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "wheels"), str(REPO_ROOT)])}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("command", "option"),
    [
        ("wheels", "--merge"),
        ("export", "--build-out"),
        ("hipify", "--launch-macro"),
        ("merge", "SHARD"),
    ],
)
def test_a_deferred_subcommand_still_takes_its_arguments(command: str, option: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "wheels")}
    done = subprocess.run(
        [sys.executable, "-m", "buildsys", command, "--help"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert option in done.stdout


def test_every_name_hipify_exports_resolves_to_its_module() -> None:
    assert sorted(hipify.__all__) == sorted(hipify._MODULES)
    for name, module in hipify._MODULES.items():
        assert getattr(hipify, name) is getattr(
            __import__(f"buildsys.hipify.{module}", fromlist=[name]), name
        )
    with pytest.raises(AttributeError):
        _ = hipify.no_such_name


# ---------------------------------------------------------------------------------------------
# setuptools-scm's version (buildsys.scm_version)


def git(project: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(project), *args], check=True, capture_output=True)


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    """A git checkout of a project whose version setuptools-scm gives."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        '[project]\nname = "demo"\ndynamic = ["version"]\n\n'
        '[tool.setuptools_scm]\nfallback_version = "0.0.0"\n'
    )
    (project / "kernel.cu").write_text("// one\n")
    git(project, "init", "-q", "-b", "main")
    git(project, "config", "user.email", "test@example.com")
    git(project, "config", "user.name", "test")
    git(project, "add", ".")
    git(project, "commit", "-q", "-m", "one")
    return project


def fresh(project: Path) -> str:
    """The version setuptools-scm computes now (package_version, uncached): the reference."""
    return package_version(project)


def cached(project: Path, cache: Path) -> str:
    return scm_version.cached_version(project, cache, package_version)


def unasked(project: Path) -> str:
    raise AssertionError("setuptools-scm was asked again")


def test_an_unchanged_checkout_gives_the_cached_version_without_git(
    repository: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    expected = fresh(repository)
    assert cached(repository, cache) == expected

    def no_subprocess(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"a subprocess ran: {args}")

    monkeypatch.setattr(subprocess, "run", no_subprocess)
    monkeypatch.setattr(subprocess, "Popen", no_subprocess)
    assert scm_version.cached_version(repository, cache, unasked) == expected


def test_the_version_follows_head_tags_edits_and_the_environment(
    repository: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    first = cached(repository, cache)
    assert first == fresh(repository)

    (repository / "kernel.cu").write_text("// two\n")  # a tracked file edited: dirty
    dirty = cached(repository, cache)
    assert dirty == fresh(repository) != first

    git(repository, "commit", "-q", "-am", "two")  # HEAD moves
    moved = cached(repository, cache)
    assert moved == fresh(repository) and moved not in (first, dirty)

    git(repository, "tag", "v2.0")  # a new tag: only refs/tags changes
    assert cached(repository, cache) == fresh(repository) == "2.0"

    git(repository, "reset", "-q", "--soft", "HEAD~1")  # only HEAD's ref changes
    assert cached(repository, cache) == fresh(repository) != "2.0"
    git(repository, "reset", "-q", "--hard", "v2.0")

    git(repository, "checkout", "-q", "HEAD~1")  # HEAD moves back, detached
    assert cached(repository, cache) == fresh(repository) == first

    monkeypatch.setenv("SETUPTOOLS_SCM_PRETEND_VERSION", "3.1")
    assert cached(repository, cache) == "3.1"


def test_a_damaged_version_record_is_computed_again(repository: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    expected = cached(repository, cache)
    [record] = [p for p in (cache / "version").rglob("*") if p.is_file()]
    for damage in ("not json", '{"state": {}, "version": 1}', '{"version": "9.9"}'):
        record.write_text(damage)
        assert cached(repository, cache) == expected


def test_a_folder_that_is_no_checkout_top_is_not_cached(tmp_path: Path) -> None:
    project = tmp_path / "plain"
    project.mkdir()
    (project / "pyproject.toml").write_text('[project]\nname = "demo"\nversion = "1.5"\n')
    assert cached(project, tmp_path / "cache") == "1.5"
    assert not (tmp_path / "cache").exists()


# ---------------------------------------------------------------------------------------------
# c++filt's output (buildsys.demangling.demangle)

SYMBOLS = ["_Z6kernelPfi", "_ZN3mlp6swigluIfEEvPKT_S3_PS1_x", "plain_c_kernel"]


def test_demangling_is_cached_by_symbols_and_demangler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    command = find_demangler()
    cache = BuildCache(tmp_path)
    expected = demangle(SYMBOLS, command)  # no cache: c++filt itself
    assert demangle(SYMBOLS, command, cache) == expected
    runs: list[tuple[str, ...]] = []
    real = demangling._run_filter

    def counted(*args: object) -> list[str]:
        runs.append(tuple(map(str, args[2:])))
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(demangling, "_run_filter", counted)
    assert demangle(SYMBOLS, command, cache) == expected
    assert runs == []
    more = [*SYMBOLS, "_Z5otheri"]
    assert demangle(more, command, cache) == demangle(more, command)
    assert len(runs) == 4  # two for the cached call, two for the reference

    # another demangler (a copy of c++filt elsewhere) asks again
    other = tmp_path / "c++filt"
    shutil.copy(command[-1], other)
    runs.clear()
    assert demangle(SYMBOLS, [str(other)], cache) == expected
    assert len(runs) == 2


def test_a_damaged_demangle_record_asks_cplusfilt_again(tmp_path: Path) -> None:
    command = find_demangler()
    cache = BuildCache(tmp_path)
    expected = demangle(SYMBOLS, command, cache)
    [record] = [p for p in (tmp_path / "demangle").rglob("*") if p.is_file()]
    for damage in ("[]", '{"full": ["a"], "names": ["a"]}', '{"full": [1, 2], "names": [3, 4]}'):
        record.write_text(damage)
        assert demangle(SYMBOLS, command, cache) == expected


# ---------------------------------------------------------------------------------------------
# compressed bundles (buildsys.index_writer.compressed_bundle)


def bundle(seed: int) -> bytes:
    payload = bytes((seed * 7 + i * 13) % 251 for i in range(20000))
    return write_bundle([("hipv4-amdgcn-amd-amdhsa--gfx1100", payload)])


def test_a_compressed_bundle_is_kept_by_its_bytes_and_zstd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = BuildCache(tmp_path)
    raw = bundle(1)
    expected = compress_bundle(raw)
    assert index_writer.compressed_bundle(raw, cache) == expected
    calls: list[int] = []
    monkeypatch.setattr(
        index_writer, "compress_bundle", lambda data: calls.append(1) or compress_bundle(data)
    )
    assert index_writer.compressed_bundle(raw, cache) == expected
    assert calls == []
    assert index_writer.compressed_bundle(bundle(2), cache) == compress_bundle(bundle(2))
    assert len(calls) == 1
    monkeypatch.setattr(index_writer, "zstd_identity", lambda: "zstandard 99 (another)")
    assert index_writer.compressed_bundle(raw, cache) == expected
    assert len(calls) == 2


def test_a_damaged_compressed_bundle_is_made_again(tmp_path: Path) -> None:
    cache = BuildCache(tmp_path)
    raw = bundle(3)
    expected = index_writer.compressed_bundle(raw, cache)
    [record] = [p for p in (tmp_path / "bundles").rglob("*") if p.is_file()]
    data = bytearray(record.read_bytes())
    data[-1] ^= 1
    record.write_bytes(bytes(data))
    assert index_writer.compressed_bundle(raw, cache) == expected == compress_bundle(raw)


# ---------------------------------------------------------------------------------------------
# the hipified tree (buildsys.trees.hipify_tree)


def sources(root: Path, scale: str = "2.0f") -> Path:
    (root / "mod").mkdir(parents=True, exist_ok=True)
    (root / "include").mkdir(exist_ok=True)
    (root / "include" / "common.cuh").write_text(f"#pragma once\n#define SCALE {scale}\n")
    (root / "mod" / "mod.cu").write_text(
        '#include "common.cuh"\n__global__ void k(float* x) { x[threadIdx.x] *= SCALE; }\n'
    )
    return root


def test_an_unchanged_tree_is_read_whole_without_the_translator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree, modules = read_tree(sources(tmp_path / "src"))
    cache = BuildCache(tmp_path / "cache")
    expected = hipify_tree(tree, modules, BuildCache(tmp_path / "reference"))
    assert hipify_tree(tree, modules, cache) == expected
    assert "mod/mod.hip" in expected[0].files

    def untranslated(*args: object, **kwargs: object) -> None:
        raise AssertionError("the translator ran")

    import buildsys.hipify.translate as translate

    monkeypatch.setattr(translate, "hipify_source", untranslated)
    assert hipify_tree(tree, modules, cache) == expected


def test_an_edited_file_is_hipified_again(tmp_path: Path) -> None:
    cache = BuildCache(tmp_path / "cache")
    tree, modules = read_tree(sources(tmp_path / "src"))
    hipify_tree(tree, modules, cache)
    tree, modules = read_tree(sources(tmp_path / "src", scale="4.0f"))
    found = hipify_tree(tree, modules, cache)
    assert found == hipify_tree(tree, modules, BuildCache(tmp_path / "reference"))
    assert "4.0f" in found[0].files["include/common.cuh"]


def test_a_damaged_whole_tree_record_is_hipified_again(tmp_path: Path) -> None:
    tree, modules = read_tree(sources(tmp_path / "src"))
    expected = hipify_tree(tree, modules, BuildCache(tmp_path / "reference"))
    cache = BuildCache(tmp_path / "cache")
    hipify_tree(tree, modules, cache)
    for record in (tmp_path / "cache" / "hipify").rglob("*"):
        if record.is_file() and '"files"' in record.read_text():
            record.write_text('{"files": {"mod/mod.hip": 1}, "diagnostics": []}')
    assert hipify_tree(tree, modules, cache) == expected


# ---------------------------------------------------------------------------------------------
# the readers' fingerprint and nvcc's facts


def test_the_readers_fingerprint_ignores_the_package_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "kernelpack"
    (package / "formats").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "formats" / "reader.py").write_text("READ = 1\n")
    monkeypatch.setattr(kernelpack, "__file__", str(package / "__init__.py"))
    first = discovered._readers_fingerprint()
    (package / "_index.py").write_text("INDEX = {}\n")  # what a build of kernelpack writes there
    assert discovered._readers_fingerprint() == first
    (package / "formats" / "reader.py").write_text("READ = 2\n")
    assert discovered._readers_fingerprint() != first


FAKE_NVCC = """#!/bin/sh
echo run >> "{log}"
case "$1" in
  --version) echo "Cuda compilation tools, release {release}, V{release}.1" ;;
  --list-gpu-code) echo "sm_80 sm_90" ;;
  --list-gpu-arch) echo "compute_80 compute_90" ;;
esac
"""


def test_nvccs_facts_are_kept_until_nvcc_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNELPACK_TOOLCHAIN_DIR", str(tmp_path / "toolchains"))
    log, nvcc = tmp_path / "log", tmp_path / "bin" / "nvcc"
    nvcc.parent.mkdir()
    nvcc.write_text(FAKE_NVCC.format(log=log, release="13.0"))
    nvcc.chmod(0o755)
    codes = ["compute_80", "compute_90", "sm_80", "sm_90"]
    assert toolchain.compiler.nvcc_facts(str(nvcc)) == ("13.0, V13.0.1", codes)
    assert log.read_text().count("run") == 3
    assert toolchain.compiler.nvcc_facts(str(nvcc)) == ("13.0, V13.0.1", codes)
    assert log.read_text().count("run") == 3  # nothing ran
    nvcc.write_text(FAKE_NVCC.format(log=log, release="13.1"))  # another toolkit there
    assert toolchain.compiler.nvcc_facts(str(nvcc))[0] == "13.1, V13.1.1"
    assert log.read_text().count("run") == 6
