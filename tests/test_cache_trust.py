"""Issue 44 items 4, 12 and 10 (the cache part): the disk cache trusts only the user's own folder,
follows no link, checks every entry with a key an intruder cannot read, reclaims what killed writers
leave and never hangs or runs out of memory on what it finds in its folder.

Tests run as root here, so "another user" is a folder chowned to an unused uid; as root the
permission bits stop nothing, which is why the cache checks owner and mode itself.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from capped import WHEELS, run_capped
from test_loader import make_loader, make_package, mixed_machine, payload

from kernelpack.backends.rtc import Compiled
from kernelpack.cli import main as cli
from kernelpack.errors import KernelpackWarning
from kernelpack.loader.cache import MAGIC, DiskCache, cache_key

OTHER_UID = 54321  # no such user here
HOUR_AGO = time.time() - 3600
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")


def key(n: int) -> str:
    return cache_key("trust", str(n))


def sha256_framed(payload: bytes) -> bytes:
    """What an intruder can make without the user's key: the magic and a valid plain hash."""
    return MAGIC + hashlib.sha256(payload).digest() + payload


def plant(folder: Path, entry_key: str, payload: bytes) -> Path:
    path = folder / (entry_key + ".bin")
    path.write_bytes(sha256_framed(payload))
    return path


# -- the folder: owner, mode, links


@as_root
def test_a_folder_of_another_user_is_not_used(tmp_path: Path) -> None:
    folder = tmp_path / "shared"
    folder.mkdir(mode=0o700)
    planted = plant(folder, key(1), b"their GPU code")
    os.chown(folder, OTHER_UID, OTHER_UID)
    os.chown(planted, OTHER_UID, OTHER_UID)
    cache = DiskCache(folder)
    with pytest.warns(KernelpackWarning) as caught:
        assert cache.get(key(1)) is None
        cache.put(key(2), b"mine")
        assert DiskCache(folder).get(key(1)) is None  # a second instance: said once a process
    assert len(caught) == 1
    message = str(caught[0].message)
    assert f"{folder} is owned by uid {OTHER_UID} with mode 0700, not yours" in message
    assert "KERNELPACK_CACHE_DIR" in message and "\n" not in message
    assert cache.in_memory and cache.get(key(2)) == b"mine"
    assert sorted(p.name for p in folder.iterdir()) == [planted.name]  # nothing written
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777, 0o1777, 0o720], ids=oct)
def test_a_folder_others_may_write_is_not_used_nor_chmodded(tmp_path: Path, mode: int) -> None:
    folder = tmp_path / "loose"
    folder.mkdir()
    planted = plant(folder, key(1), b"planted while it was open")
    os.chmod(folder, mode)
    cache = DiskCache(folder)
    with pytest.warns(KernelpackWarning, match=f"mode {mode:04o}, writable by others") as caught:
        assert cache.get(key(1)) is None
        cache.put(key(2), b"mine")
    assert f"chmod 700 {folder}" in str(caught[0].message)
    assert stat.S_IMODE(folder.stat().st_mode) == mode  # left as found: the user decides
    assert sorted(p.name for p in folder.iterdir()) == [planted.name]


def test_a_folder_only_readable_by_others_is_made_private(tmp_path: Path) -> None:
    folder = tmp_path / "readable"
    folder.mkdir()
    os.chmod(folder, 0o755)
    cache = DiskCache(folder)
    cache.put(key(1), b"one")
    assert cache.get(key(1)) == b"one"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


@pytest.mark.parametrize("target_exists", [True, False], ids=["to-a-folder", "dangling"])
def test_a_linked_folder_is_not_followed(tmp_path: Path, target_exists: bool) -> None:
    target = tmp_path / "elsewhere"
    if target_exists:
        target.mkdir()
        os.chmod(target, 0o755)
        plant(target, key(1), b"behind the link")
    link = tmp_path / "cache"
    link.symlink_to(target)
    cache = DiskCache(link)
    with pytest.warns(KernelpackWarning, match=f"{link} is a symbolic link to {target}"):
        assert cache.get(key(1)) is None
        cache.put(key(2), b"mine")
    if target_exists:
        assert stat.S_IMODE(target.stat().st_mode) == 0o755  # not chmodded
        assert [p.name for p in target.iterdir()] == [key(1) + ".bin"]  # not written
    else:
        assert not target.exists()
    assert cache.get(key(2)) == b"mine"  # in memory: loading still works


def test_a_link_above_the_folder_is_the_users_own_choice(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "home").symlink_to(tmp_path / "real")
    cache = DiskCache(tmp_path / "home" / "cache")
    cache.put(key(1), b"one")
    assert DiskCache(tmp_path / "real" / "cache").get(key(1)) == b"one"


@as_root
def test_cache_commands_refuse_a_folder_of_another_user_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "shared"
    folder.mkdir(mode=0o700)
    planted = plant(folder, key(1), b"their GPU code")
    os.chown(folder, OTHER_UID, OTHER_UID)
    monkeypatch.setenv("KERNELPACK_CACHE_DIR", str(folder))
    for action in ("verify", "clear"):
        assert cli.main(["cache", action]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        (line,) = captured.err.splitlines()
        assert line.startswith(
            f"error: kernelpack cache folder {folder} is owned by uid {OTHER_UID}"
        )
    assert planted.exists()  # neither verify nor clear touched another user's files
    assert cli.main(["cache", "path"]) == 0
    assert "not using it" in capsys.readouterr().out


# -- entries: keyed, never followed


def test_an_entry_with_a_valid_plain_hash_but_not_the_key_is_refused(tmp_path: Path) -> None:
    """A frame hash anyone can compute proves nothing about who wrote the entry."""
    cache = DiskCache(tmp_path)
    cache.put(key(0), b"makes the folder and its key")
    forged = plant(tmp_path, key(1), b"forged cubin")
    assert cache.get(key(1)) is None
    assert not forged.exists() and cache.removed_bad == 1


def test_an_entry_renamed_to_another_key_is_refused(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path)
    cache.put(key(1), b"the entry for key 1")
    (tmp_path / (key(2) + ".bin")).write_bytes((tmp_path / (key(1) + ".bin")).read_bytes())
    assert cache.get(key(2)) is None
    assert cache.get(key(1)) == b"the entry for key 1"


def test_an_entry_of_another_folder_is_refused(tmp_path: Path) -> None:
    """Each folder has its own key: an entry copied from another cache is no entry here."""
    theirs, mine = DiskCache(tmp_path / "theirs"), DiskCache(tmp_path / "mine")
    theirs.put(key(1), b"their entry")
    mine.put(key(0), b"mine")
    (mine.folder / (key(1) + ".bin")).write_bytes((theirs.folder / (key(1) + ".bin")).read_bytes())
    assert mine.get(key(1)) is None


@pytest.mark.parametrize("how", ["mode 0644", "another owner", "a link", "short"])
def test_a_key_file_not_the_users_own_is_replaced(tmp_path: Path, how: str) -> None:
    """An intruder who could write the key file must not get entries signed with it accepted."""
    import hmac

    cache = DiskCache(tmp_path)
    cache.put(key(0), b"makes the key")
    known = b"k" * 32
    key_file = tmp_path / ".key"
    key_file.unlink()
    if how == "a link":
        (tmp_path / "known").write_bytes(known)
        key_file.symlink_to(tmp_path / "known")
    else:
        key_file.write_bytes(known[:16] if how == "short" else known)
        os.chmod(key_file, 0o644 if how == "mode 0644" else 0o600)
        if how == "another owner":
            if os.geteuid() != 0:
                pytest.skip("chown to another uid needs root")
            os.chown(key_file, OTHER_UID, OTHER_UID)
    forged = b"forged with the planted key"
    mac = hmac.new(known, key(1).encode() + forged, hashlib.sha256).digest()
    (tmp_path / (key(1) + ".bin")).write_bytes(MAGIC + mac + forged)
    assert cache.get(key(1)) is None
    assert not key_file.is_symlink() and key_file.read_bytes() != known
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert not (tmp_path / "known").exists() or (tmp_path / "known").read_bytes() == known


def test_a_linked_entry_is_not_followed(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path / "cache")
    cache.put(key(1), b"a good entry")
    good = cache.folder / (key(1) + ".bin")
    outside = tmp_path / "outside.bin"
    outside.write_bytes(good.read_bytes())
    link = cache.folder / (key(2) + ".bin")
    link.symlink_to(outside)
    assert cache.get(key(2)) is None
    assert not link.is_symlink() and outside.read_bytes() == good.read_bytes()


def test_a_forged_driver_compiled_cubin_is_not_loaded(tmp_path: Path) -> None:
    """PTX compiled by the driver is in no index: only the cache's key vouches for it."""
    index = make_package(tmp_path / "pkg", nvidia=("compute_80",))
    gpus = [g for g in mixed_machine() if g.vendor == "nvidia"]
    cache = DiskCache(tmp_path / "cache")
    first, _ = make_loader(index, tmp_path / "pkg", gpus, cache)
    first.load("demo")
    (entry,) = cache.entries()
    entry.path.write_bytes(sha256_framed(b"forged cubin"))
    again, runtimes = make_loader(index, tmp_path / "pkg", gpus, DiskCache(cache.folder))
    again.load("demo")
    assert runtimes["nvidia"].jits == 1
    assert runtimes["nvidia"].loads == [(0, b"compiled " + payload("compute_80"))]


def test_a_forged_nvrtc_compiled_object_is_not_loaded(tmp_path: Path) -> None:
    from test_loader import NamingCompiler

    index = make_package(tmp_path / "pkg", nvidia=("sm_80",))  # nothing fits the H100
    gpus = mixed_machine()[2:]
    compiler = NamingCompiler({"axpy": "lowered_axpy"})
    cache = DiskCache(tmp_path / "cache")
    first, _ = make_loader(index, tmp_path / "pkg", gpus, cache, compilers=lambda v: compiler)
    with pytest.warns(KernelpackWarning, match="compiled its source"):
        first.load("demo").kernel("axpy")
    (entry,) = cache.entries()
    forged = Compiled(b"forged object", {"axpy": "evil"}).to_bytes()
    entry.path.write_bytes(sha256_framed(forged))
    again, runtimes = make_loader(
        index, tmp_path / "pkg", gpus, DiskCache(cache.folder), compilers=lambda v: compiler
    )
    with pytest.warns(KernelpackWarning, match="compiled its source"):
        again.load("demo").kernel("axpy")
    assert len(compiler.asked) == 2  # compiled again
    assert runtimes["nvidia"].loads == [(0, payload("sm_90"))]
    assert runtimes["nvidia"].functions == ["lowered_axpy"]


def test_the_loader_still_loads_with_a_refused_folder(tmp_path: Path) -> None:
    """Loading must work for the user: the cache turns to memory with one warning."""
    index = make_package(tmp_path / "pkg", amd=("gfx1100", "gfx11-generic"))
    folder = tmp_path / "cache"
    folder.mkdir()
    os.chmod(folder, 0o777)
    made, runtimes = make_loader(index, tmp_path / "pkg", mixed_machine(), DiskCache(folder))
    with pytest.warns(KernelpackWarning, match="writable by others") as caught:
        made.load("demo", "hip:0")
        made.load("demo", "hip:1")
    assert len(caught) == 1
    assert [data for _, data in runtimes["amd"].loads] == [
        payload("gfx1100"),
        payload("gfx11-generic"),
    ]
    assert list(folder.iterdir()) == []


# -- temporary files of killed writers


def aged(path: Path, size: int) -> Path:
    path.write_bytes(bytes(size))
    os.utime(path, (HOUR_AGO, HOUR_AGO))
    return path


def test_dead_writers_temporary_files_are_reclaimed_and_counted_in_the_bound(
    tmp_path: Path,
) -> None:
    cache = DiskCache(tmp_path, max_bytes=4000)
    cache.put(key(0), bytes(1000))  # 1040 bytes with its header
    stale = aged(tmp_path / f".{key(1)}.bin.0123abcd.tmp", 60_000)
    older_writers = aged(tmp_path / f".{key(2)}.bin.k3j_h1x9.tmp", 20_000)  # atomic_write's names
    fresh = tmp_path / f".{key(3)}.bin.fedc.tmp"  # a writer that started a moment ago
    fresh.write_bytes(bytes(1500))
    held = aged(tmp_path / f".{key(4)}.bin.beef.tmp", 1500)  # old, but its writer is alive
    with held.open("rb") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        cache.put(key(5), bytes(1000))
    assert not stale.exists() and not older_writers.exists()
    assert fresh.exists() and held.exists()
    # the temporary files left count: 2 entries and 3000 bytes of them are over 4000, so the
    # older entry went
    assert cache.get(key(0)) is None and cache.get(key(5)) == bytes(1000)
    assert cache.size() == 1040 + 3000


def test_a_writer_killed_before_its_rename_leaves_a_file_the_next_write_reclaims(
    tmp_path: Path,
) -> None:
    child = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from kernelpack.loader.cache import DiskCache\n"
        "os.replace = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)\n"
        "DiskCache(Path(sys.argv[1])).put(sys.argv[2], bytes(5_000_000))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(WHEELS)}
    done = subprocess.run(
        [sys.executable, "-c", child, str(tmp_path), key(1)], env=env, check=False
    )
    assert done.returncode == -signal.SIGKILL
    (left,) = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert left.stat().st_size >= 5_000_000
    cache = DiskCache(tmp_path)
    assert cache.size() >= 5_000_000  # counted while it is there
    os.utime(left, (HOUR_AGO, HOUR_AGO))
    cache.put(key(2), b"next")
    assert not left.exists()
    assert cache.get(key(1)) is None and cache.get(key(2)) == b"next"


WRITER = """
import sys
from pathlib import Path
from kernelpack.loader.cache import DiskCache
folder, entry, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
cache = DiskCache(folder)
print("ready", flush=True)
for i in range(100):
    cache.put(entry, bytes([n]) * 200_000)
    assert cache.get(entry) is not None
"""


def test_eight_racing_writers_some_killed_leave_a_whole_entry(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(WHEELS)}
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path), key(0), str(n)],
            env=env,
            stdout=subprocess.PIPE,
        )
        for n in range(8)
    ]
    for writer in writers:
        assert writer.stdout is not None and writer.stdout.readline() == b"ready\n"
    time.sleep(0.3)
    for writer in writers[::2]:
        writer.kill()
    for writer in writers:
        writer.wait(timeout=120)
        assert writer.stdout is not None
        writer.stdout.close()
    assert [w.returncode for w in writers[1::2]] == [0, 0, 0, 0]
    cache = DiskCache(tmp_path)
    assert cache.get(key(0)) in [bytes([n]) * 200_000 for n in range(8)]
    verified = cache.verify()
    assert len(verified.good) == 1 and verified.removed == [] and verified.failed == []
    for left in tmp_path.glob("*.tmp"):  # a killed writer's: reclaimed by the next write
        os.utime(left, (HOUR_AGO, HOUR_AGO))
    cache.put(key(1), b"x")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [".key", key(0) + ".bin", key(1) + ".bin"]
    )


# -- `cache verify` over what is not an entry file (under a 2 GiB cap, within 5 s)


def test_cache_verify_counts_fifos_device_links_and_huge_files_as_damaged(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path / "cache")
    cache.put(key(0), b"a good entry")
    fifo = cache.folder / (key(1) + ".bin")
    os.mkfifo(fifo)
    zero = cache.folder / (key(2) + ".bin")
    zero.symlink_to("/dev/zero")
    huge = cache.folder / (key(3) + ".bin")
    with huge.open("wb") as handle:  # sparse: 3 GiB that take no disk
        handle.truncate(3 << 30)
    result = run_capped(["cache", "verify"], env={"KERNELPACK_CACHE_DIR": str(cache.folder)})
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert result.stdout.strip() == f"{cache.folder}: 1 entries good, 3 damaged and removed"
    assert [p.name for p in cache.folder.glob("*.bin")] == [key(0) + ".bin"]
    assert stat.S_ISCHR(os.stat("/dev/zero").st_mode)


def test_get_of_a_fifo_entry_does_not_wait(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    DiskCache(folder).put(key(0), b"makes the folder")
    os.mkfifo(folder / (key(1) + ".bin"))
    child = (
        "import sys\nfrom pathlib import Path\nfrom kernelpack.loader.cache import DiskCache\n"
        "cache = DiskCache(Path(sys.argv[1]))\n"
        "assert cache.get(sys.argv[2]) is None and cache.removed_bad == 1\n"
    )
    env = {**os.environ, "PYTHONPATH": str(WHEELS)}
    done = subprocess.run(
        [sys.executable, "-c", child, str(folder), key(1)],
        env=env,
        timeout=5,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
