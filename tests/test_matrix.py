"""arch_matrix.toml validation: the default matrix, families, features, and every kind of bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from buildsys import REPO_ROOT
from buildsys.errors import MatrixError
from buildsys.matrix import load_matrix
from kernelpack.targets.processors import AMD_FAMILIES

DEFAULT_AMD = [
    *("gfx908", "gfx90a", "gfx942", "gfx950", "gfx1030", "gfx1100", "gfx1101", "gfx1200"),
    *("gfx1201", "gfx9-generic", "gfx9-4-generic", "gfx10-1-generic", "gfx10-3-generic"),
    *("gfx11-generic", "gfx12-generic"),
]


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "arch_matrix.toml"
    path.write_text(text)
    return path


def _buildsys(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "buildsys", *args], cwd=REPO_ROOT, capture_output=True, text=True
    )


def test_default_matrix_has_the_documented_targets() -> None:
    matrix = load_matrix()
    assert [t.target for t in matrix.amd] == DEFAULT_AMD
    assert [(t.target, t.kind) for t in matrix.nvidia] == [
        ("sm_80", "cubin"),
        ("sm_90", "cubin"),
        ("sm_120", "cubin"),
        ("compute_80", "ptx"),
    ]


def test_matrix_json_is_a_ci_strategy_matrix() -> None:
    result = _buildsys("matrix", "--json")
    assert result.returncode == 0, result.stderr
    include = json.loads(result.stdout)["include"]
    assert [e["target"] for e in include if e["vendor"] == "amd"] == DEFAULT_AMD
    wavefronts = {e["target"]: e["wavefront"] for e in include if e["vendor"] == "amd"}
    assert wavefronts["gfx942"] == 64 and wavefronts["gfx1100"] == 32
    assert all(set(e) >= {"vendor", "target", "kind", "shard"} for e in include)


@pytest.mark.parametrize("family", sorted(AMD_FAMILIES))
def test_families_expand(tmp_path: Path, family: str) -> None:
    matrix = load_matrix(_write(tmp_path, f'[amd]\ntargets = ["{family}"]\n'))
    assert [t.target for t in matrix.amd] == list(AMD_FAMILIES[family])
    assert all(t.source == family for t in matrix.amd)


def test_features_and_generic_targets(tmp_path: Path) -> None:
    text = '[amd]\ntargets = ["gfx90a:xnack+:sramecc-", "gfx11-generic"]\n'
    matrix = load_matrix(_write(tmp_path, text))
    assert [t.target for t in matrix.amd] == ["gfx90a:sramecc-:xnack+", "gfx11-generic"]
    assert matrix.amd[0].shard == "gfx90a_sramecc-_xnack+"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[amd]\ntargets = ["gfx1110"]\n',
            "amd.targets[0]: gfx1110: unknown AMD target; did you mean gfx1100?",
        ),
        ('[amd]\ntargets = ["gfx1100", "gfx1100"]\n', "amd.targets[1]: duplicate target gfx1100"),
        (
            '[amd]\ntargets = ["gfx110X", "gfx1101"]\n',
            "duplicate target gfx1101 (also from gfx110X)",
        ),
        ('[amd]\ntarget = ["gfx1100"]\n', "unknown key amd.target; known: amd.targets"),
        ('[intel]\ntargets = ["xe"]\n', "unknown table [intel]"),
        ('[amd]\ntargets = "gfx1100"\n', "amd.targets: expected a list of strings, got 'gfx1100'"),
        ("[amd]\ntargets = [1100]\n", "amd.targets: expected a list of strings"),
        ('[amd]\ntargets = ["gfx1100:xnack+"]\n', "gfx1100 has no xnack feature"),
        ('[amd]\ntargets = ["gfx90a:xnack"]\n', "bad feature 'xnack'"),
        (
            '[nvidia]\ntargets = ["sm_91"]\n',
            "nvidia.targets[0]: sm_91: unknown NVIDIA target; did you mean sm_90?",
        ),
        ('[nvidia]\nptx = ["sm_80"]\n', "nvidia.ptx[0]: sm_80: unknown PTX target"),
        ("[amd\ntargets = []\n", "not TOML"),
        ("[amd]\ntargets = []\n", "no targets"),
    ],
)
def test_bad_matrix_is_one_line_with_status_2(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(MatrixError, match=None) as caught:
        load_matrix(path)
    assert message in str(caught.value)
    assert str(path) in str(caught.value)
    result = _buildsys("matrix", "--matrix", str(path))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and message in result.stderr
    assert "Traceback" not in result.stderr


def test_a_missing_matrix_says_how_to_write_one(tmp_path: Path) -> None:
    """A new project without arch_matrix.toml is told what one holds and where the default set
    is (issue 50: a first build stopped at "cannot read: No such file or directory")."""
    result = _buildsys("matrix", "--matrix", str(tmp_path / "missing.toml"))
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert f"{tmp_path / 'missing.toml'}: no such target matrix; write one" in result.stderr
    assert f"kernelpack's default set is {REPO_ROOT / 'arch_matrix.toml'}" in result.stderr


def test_unreadable_matrix(tmp_path: Path) -> None:
    (tmp_path / "folder.toml").mkdir()
    result = _buildsys("matrix", "--matrix", str(tmp_path / "folder.toml"))
    assert result.returncode == 2
    assert "folder.toml: is a folder, not a regular file; give a target matrix" in result.stderr


def test_select_targets_for_a_shard() -> None:
    matrix = load_matrix().select(["gfx942", "gfx120X"])
    assert [t.target for t in matrix.targets] == ["gfx942", "gfx1200", "gfx1201"]
    with pytest.raises(MatrixError, match="gfx943: unknown AMD target; did you mean gfx942"):
        load_matrix().select(["gfx943"])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[amd]\ntargets = " + "[" * 100_000 + "]" * 100_000 + "\n", "nested too deeply"),
        ("[amd]\ntargets = " + "[" * 300 + '"gfx90a"' + "]" * 300 + "\n", "got [[[...]]]"),
        (f'[amd]\ntargets = ["gfx{"1" * 1_000_000}"]\n', "(1000003 characters): not a target"),
        (f'[nvidia]\ntargets = ["sm_{"9" * 1_000_000}"]\n', "(1000003 characters): not a target"),
        (
            f'[amd]\ntargets = [["{"x" * 1_000_000}"], 1, 2, 3, 4, 5, 6]\n',
            "x'], 1, 2, 3, ...]",
        ),
        (f"[{'t' * 1_000_000}]\n", "unknown table [ttttt"),
    ],
    ids=[
        "nested 100,000 deep",
        "nested 300 deep",
        "1 MB AMD name",
        "1 MB NVIDIA name",
        "1 MB value in a list",
        "1 MB table name",
    ],
)
def test_hostile_matrix_is_one_short_line(tmp_path: Path, text: str, message: str) -> None:
    """Refused before the did-you-mean search (108 s for a 1 MB name), echoed shortened."""
    path = _write(tmp_path, text)
    result = _buildsys("matrix", "--matrix", str(path))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and message in result.stderr
    assert len(result.stderr) < len(str(path)) + 250


def test_long_target_on_the_command_line_is_refused() -> None:
    with pytest.raises(MatrixError, match=r"--targets: gfx11111.*not a target name"):
        load_matrix().select(["gfx" + "1" * 100_000])


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("sm90", "unknown NVIDIA target; did you mean sm_90"),
        ("compute90", "unknown PTX target"),
    ],
)
def test_a_misspelt_target_on_the_command_line_is_judged_by_its_vendor(
    name: str, message: str
) -> None:
    with pytest.raises(MatrixError, match=f"--targets: {name}: {message}"):
        load_matrix().select([name])
