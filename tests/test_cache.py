"""The disk cache: atomic, verified, private, bounded, and usable (in memory) when the folder is not."""

from __future__ import annotations

import json
import os
import stat
import warnings
from pathlib import Path

import pytest

from kernelpack.errors import KernelpackWarning
from kernelpack.loader.cache import DiskCache, cache_key, default_folder


def key(n: int) -> str:
    return cache_key("test", str(n))


def test_round_trip_in_a_private_folder(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path / "a" / "cache")
    data = os.urandom(5000)
    cache.put(key(1), data)
    assert cache.get(key(1)) == data
    assert stat.S_IMODE(cache.folder.stat().st_mode) == 0o700
    names = sorted(p.name for p in cache.folder.iterdir())
    assert names == [".key", key(1) + ".bin"]  # the folder's key, no temporary left over
    assert stat.S_IMODE((cache.folder / ".key").stat().st_mode) == 0o600
    assert cache.get(key(2)) is None


def test_loose_folder_is_made_private(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)
    DiskCache(folder).put(key(1), b"x")
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[:-1],  # truncated payload
        lambda b: b[:20],  # truncated header
        lambda b: b[:-1] + bytes([b[-1] ^ 1]),  # a flipped bit
        lambda b: b"XX" + b[2:],  # not our magic
        lambda b: b"",
    ],
    ids=["truncated", "short-header", "flipped", "magic", "empty"],
)
def test_damaged_entry_is_detected_and_removed(tmp_path: Path, damage: object) -> None:
    cache = DiskCache(tmp_path)
    cache.put(key(1), os.urandom(100))
    path = tmp_path / (key(1) + ".bin")
    path.write_bytes(damage(path.read_bytes()))  # type: ignore[operator]
    assert cache.get(key(1)) is None
    assert not path.exists()
    assert cache.removed_bad == 1
    cache.put(key(1), b"remade")
    assert cache.get(key(1)) == b"remade"


def test_least_recently_used_entries_go_first(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, max_bytes=3 * 1100)
    for n in range(3):
        cache.put(key(n), bytes(1000))
        os.utime(tmp_path / (key(n) + ".bin"), (1000 + n, 1000 + n))
    assert cache.get(key(0)) is not None  # a read makes key 0 the most recently used
    cache.put(key(3), bytes(1000))
    remaining = {e.key for e in cache.entries()}
    assert remaining == {key(0), key(2), key(3)}
    assert cache.size() <= cache.max_bytes


def test_an_entry_larger_than_the_bound_is_still_kept(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, max_bytes=10)
    cache.put(key(1), bytes(100))
    assert cache.get(key(1)) == bytes(100)


def test_verify_and_clear(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path)
    for n in range(4):
        cache.put(key(n), os.urandom(64))
    (tmp_path / (key(2) + ".bin")).write_bytes(b"garbage")
    (tmp_path / "unrelated.txt").write_text("not ours")
    verified = cache.verify()
    assert {e.key for e in verified.good} == {key(0), key(1), key(3)}
    assert [e.key for e in verified.removed] == [key(2)]
    assert verified.failed == []
    cleared = cache.clear()
    assert len(cleared.removed) == 3 and cleared.failed == []
    assert cache.entries() == []
    assert (tmp_path / "unrelated.txt").exists()


def test_unwritable_folder_falls_back_to_memory_with_one_warning(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the folder should be")
    cache = DiskCache(blocker / "cache")
    with pytest.warns(KernelpackWarning, match="not usable") as caught:
        cache.put(key(1), b"one")
        cache.put(key(2), b"two")
    assert len(caught) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cache.put(key(3), b"three")
    assert cache.in_memory
    assert [cache.get(key(n)) for n in (1, 2, 3)] == [b"one", b"two", b"three"]


def test_keys_must_be_hex_digests(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="64 hex digits"):
        DiskCache(tmp_path).get("../../etc/passwd")


def test_default_folder_follows_the_environment(tmp_path: Path) -> None:
    assert default_folder({"KERNELPACK_CACHE_DIR": str(tmp_path)}) == tmp_path
    assert default_folder({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "kernelpack"
    assert default_folder({}) == Path.home() / ".cache" / "kernelpack"
    # the XDG rule: a relative XDG_CACHE_HOME is invalid, never a folder under the working one
    assert default_folder({"XDG_CACHE_HOME": "cache"}) == Path.home() / ".cache" / "kernelpack"


def test_concurrent_writers_leave_a_whole_entry(tmp_path: Path) -> None:
    import threading

    cache = DiskCache(tmp_path)
    payloads = [bytes([n]) * 100_000 for n in range(8)]
    threads = [threading.Thread(target=cache.put, args=(key(0), p)) for p in payloads]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert cache.get(key(0)) in payloads
    assert sorted(p.name for p in tmp_path.iterdir()) == [".key", key(0) + ".bin"]


@pytest.fixture
def undeletable(monkeypatch: pytest.MonkeyPatch) -> set[Path]:
    """Files whose removal fails as in a read-only folder (EACCES); root ignores chmod, so the
    refusal is injected at os.unlink, which the cache calls relative to the folder's descriptor."""
    refused: set[Path] = set()
    unlink = os.unlink

    def refusing(path: str, *, dir_fd: int | None = None) -> None:
        folder = Path(os.readlink(f"/proc/self/fd/{dir_fd}")) if dir_fd is not None else Path()
        if folder / path in refused:
            raise PermissionError(13, "Permission denied", str(path))
        unlink(path, dir_fd=dir_fd)

    monkeypatch.setattr(os, "unlink", refusing)
    return refused


def test_cache_commands_report_files_they_could_not_remove(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    undeletable: set[Path],
) -> None:
    """Issue 15 item 11: "1 damaged and removed" while the file stayed, and "removed 0" with exit 0."""
    from kernelpack.cli import main as cli

    monkeypatch.setenv("KERNELPACK_CACHE_DIR", str(tmp_path))
    cache = DiskCache(tmp_path)
    for n in range(4):
        cache.put(key(n), os.urandom(64))
    damaged = tmp_path / (key(2) + ".bin")
    damaged.write_bytes(b"garbage")
    undeletable.add(damaged)
    assert cli.main(["cache", "verify"]) == 1
    captured = capsys.readouterr()
    assert "3 entries good, 0 damaged and removed, 1 could not be removed" in captured.out
    assert f"could not remove {damaged}: Permission denied" in captured.err
    assert damaged.exists()

    undeletable.update(tmp_path / (key(n) + ".bin") for n in (0, 1))
    assert cli.main(["cache", "clear", "--json"]) == 1
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["removed"] == 1  # key(3): the only one that could go
    assert sorted(e["path"] for e in report["not_removed"]) == sorted(
        str(tmp_path / (key(n) + ".bin")) for n in (0, 1, 2)
    )
    assert captured.err.count("could not remove") == 3
    assert len(list(tmp_path.glob("*.bin"))) == 3


def test_get_counts_only_entries_it_did_remove(tmp_path: Path, undeletable: set[Path]) -> None:
    cache = DiskCache(tmp_path)
    cache.put(key(1), b"payload")
    path = tmp_path / (key(1) + ".bin")
    path.write_bytes(b"garbage")
    undeletable.add(path)
    assert cache.get(key(1)) is None
    assert cache.removed_bad == 0 and path.exists()


def test_cache_path_reports_the_builders_folders_each_on_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The builder's compile cache and toolchains sit inside the image cache's folder by default:
    each is reported with its own files and size, links not followed (issue 50, smaller)."""
    from kernelpack.cli import main as cli

    root = tmp_path / "xdg" / "kernelpack"
    (root / "build" / "ab").mkdir(parents=True)
    (root / "build" / "ab" / "object.o").write_bytes(b"x" * 1500)
    (root / "build" / "index.json").write_bytes(b"y" * 500)
    rootfs = root / "toolchains" / "debian" / "usr" / "bin"
    rootfs.mkdir(parents=True)
    (rootfs / "clang").write_bytes(b"z" * 2_400_000)
    (rootfs / "clang++").symlink_to("clang")  # a link: counted neither as a file nor in bytes
    for variable in (
        "KERNELPACK_CACHE_DIR",
        "KERNELPACK_BUILD_CACHE_DIR",
        "KERNELPACK_TOOLCHAIN_DIR",
    ):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))

    assert cli.main(["cache", "path"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"image cache: {root} (0 entries, 0 bytes)",
        f"build cache: {root / 'build'} (2 files, 2.0 kB)",
        f"toolchains: {root / 'toolchains'} (1 file, 2.4 MB)",
    ]
    assert cli.main(["cache", "path", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["builder"] == [
        {"what": "build cache", "folder": str(root / "build"), "files": 2, "bytes": 2000},
        {"what": "toolchains", "folder": str(root / "toolchains"), "files": 1, "bytes": 2_400_000},
    ]

    elsewhere = tmp_path / "tools"
    elsewhere.mkdir()
    monkeypatch.setenv("KERNELPACK_TOOLCHAIN_DIR", str(elsewhere))
    assert cli.main(["cache", "path"]) == 0
    assert f"toolchains: {elsewhere} (0 files, 0 bytes)" in capsys.readouterr().out


def test_the_reported_folders_are_the_ones_the_builder_uses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kernelpack's table of the builder's folders against buildsys' own lookups."""
    from buildsys import toolchain
    from buildsys.settings import OPTIONS_BY_NAME, BuildSettings
    from kernelpack.files.paths import builder_folders

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    for variable in ("KERNELPACK_BUILD_CACHE_DIR", "KERNELPACK_TOOLCHAIN_DIR"):
        monkeypatch.delenv(variable, raising=False)
    build, tools = (use.folder for use in builder_folders())
    assert build == BuildSettings().cache_dir and tools == toolchain.cache_root()
    assert OPTIONS_BY_NAME["cache_dir"].environment == "KERNELPACK_BUILD_CACHE_DIR"
    monkeypatch.setenv("KERNELPACK_TOOLCHAIN_DIR", str(tmp_path / "t"))
    assert builder_folders()[1].folder == toolchain.cache_root() == tmp_path / "t"
