"""buildsys.provenance: the commit and dirty flag against git's own answers in a scratch repository,
and the file's rows against an index written out by hand."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from buildsys.index_writer import render_index
from buildsys.provenance import SourceState, provenance, source_state, with_provenance
from kernelpack.formats.index import PROVENANCE_FILE


def _git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin", "HOME": str(repo)}  # fmt: skip
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    ).stdout.strip()


def test_commit_and_dirty_flag_follow_git(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "project").mkdir(parents=True)
    _git(repo, "init", "-q")
    (repo / ".gitignore").write_text("build/\n")
    (repo / "project" / "a.cu").write_text("// a\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "one")
    head = _git(repo, "rev-parse", "HEAD")
    project = repo / "project"
    assert source_state(project) == SourceState(head, False)
    (project / "build").mkdir()
    (project / "build" / "out.o").write_text("ignored\n")
    assert source_state(project) == SourceState(head, False)  # ignored files do not count
    (project / "b.cu").write_text("// untracked\n")
    assert source_state(project) == SourceState(head, True)
    (project / "b.cu").unlink()
    (project / "a.cu").write_text("// edited\n")
    assert source_state(project) == SourceState(head, True)
    (repo / "elsewhere.txt").write_text("outside the project folder\n")
    (project / "a.cu").write_text("// a\n")
    assert source_state(project) == SourceState(head, False)


def test_a_tree_outside_git_is_unknown_not_clean(tmp_path: Path) -> None:
    assert source_state(tmp_path) == SourceState(None, None)


INDEX = {
    "schema": 2,
    "version": "1.0",
    "build": {
        "toolchains": {"hip": "hipcc 6.4 / clang 21", "cuda": "nvcc CUDA 13.0, V13.0.88"},
        "flags": {"code_object": ["--genco", "-O3"], "cubin": ["-cubin", "-O3"]},
        "sources": {"m": "00"},
    },
    "modules": {
        "m": {
            "kernels": {},
            "source": "",
            "source_sha256": "",
            "images": [
                {"vendor": "nvidia", "target": "sm_90", "kind": "cubin", "file": "device/m.cubin",
                 "sha256": "bb", "compression": "none", "offset": 0, "size": 1, "symbols": {}},
                {"vendor": "amd", "target": "gfx942", "kind": "code_object", "file": "device/m.hsaco",
                 "sha256": "aa", "compression": "zstd", "offset": 0, "size": 1, "symbols": {}},
            ],
        }
    },
}  # fmt: skip


def test_each_image_gets_its_compiler_and_flags_and_the_bytes_are_stable() -> None:
    files = {
        "demo/_index.py": render_index(INDEX).encode(),  # type: ignore[arg-type]
        "demo-1.0.dist-info/METADATA": b"Name: demo\n",
    }
    source = SourceState("c0ffee", True)
    added = with_provenance(files, source, None)
    document = json.loads(added[f"demo-1.0.dist-info/{PROVENANCE_FILE}"])
    assert document == {
        "schema": 1,
        "source": {"commit": "c0ffee", "dirty": True},
        "toolchains": {"hip": "hipcc 6.4 / clang 21", "cuda": "nvcc CUDA 13.0, V13.0.88"},
        "images": [
            {"module": "m", "target": "gfx942", "kind": "code_object", "sha256": "aa",
             "compiler": "hipcc 6.4 / clang 21", "flags": ["--genco", "-O3"]},
            {"module": "m", "target": "sm_90", "kind": "cubin", "sha256": "bb",
             "compiler": "nvcc CUDA 13.0, V13.0.88", "flags": ["-cubin", "-O3"]},
        ],
    }  # fmt: skip
    assert provenance(files, source, None) == provenance(
        dict(reversed(files.items())), source, None
    )
    # a wheel without images (host, variant, provider) names the run's compilers all the same
    bare = json.loads(provenance({"x-1.0.dist-info/METADATA": b""}, source, INDEX))  # type: ignore[arg-type]
    assert bare["images"] == [] and bare["toolchains"] == INDEX["build"]["toolchains"]  # type: ignore[index]
