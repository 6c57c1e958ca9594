"""A wheel checked before it is published: auditwheel's verdict and repair, and our own checks.

auditwheel judges host code only: a wheel without any (py3-none-any) is checked here to hold none,
and a platform wheel is repaired by auditwheel, whose repair must leave the AMDGPU and CUDA images
untouched. No wheel may carry a GPU runtime library (the user's driver stack provides those), nor
have one grafted in by the repair.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from kernelpack.loader.images import IMAGE_FILE_SUFFIXES

from .errors import BuildError
from .wheelfile import read_wheel

# Vendor runtimes a wheel must never carry: the user's driver stack provides them.
GPU_RUNTIME_LIBRARIES = re.compile(
    r"lib(amdhip64|hsa-runtime64|hsakmt|amd_comgr|hiprtc|cuda|cudart|nvrtc|nvidia-ml|nvJitLink)\b"
)


def audit_plain(wheel: Path) -> str:
    """A py3-none-any wheel must hold no host code (auditwheel has nothing to repair in it) and
    no GPU runtime library; auditwheel's own verdict is reported."""
    files = read_wheel(wheel)
    host_code = sorted(
        n
        for n, data in files.items()
        if data.startswith(b"\x7fELF") and not n.endswith(IMAGE_FILE_SUFFIXES)
    )
    if host_code:
        raise BuildError(f"{wheel.name}: host code in a py3-none-any wheel: {host_code}")
    _refuse_gpu_runtimes(wheel.name, files, "carries")
    return _auditwheel_show(wheel)


def _refuse_gpu_runtimes(wheel_name: str, names: Iterable[str], how: str) -> None:
    """A BuildError naming the GPU runtime libraries among a wheel's files, if there are any."""
    found = sorted(n for n in names if GPU_RUNTIME_LIBRARIES.search(Path(n).name))
    if found:
        raise BuildError(f"{wheel_name}: {how} GPU runtime libraries: {found}")


def _auditwheel_show(wheel: Path) -> str:
    """auditwheel's own verdict on a wheel, on one line (:func:`audit_verdict`)."""
    show = subprocess.run(
        [sys.executable, "-m", "auditwheel", "show", str(wheel)], capture_output=True, text=True
    )
    return audit_verdict(show.stdout + show.stderr)


_PASSED_OVER = re.compile(
    r"^[^\n]*WARNING[^\n]*?ignoring: (\S+) with unknown architecture[^\n]*$", re.M
)
_NO_ARCH = re.compile(
    r"^[^\n]*WARNING[^\n]*architecture could not be deduced from the wheel filename[^\n]*$", re.M
)
_LOG_PREFIX = re.compile(r"^INFO:auditwheel[.\w]*:", re.M)  # other levels keep theirs


def audit_verdict(output: str) -> str:
    """auditwheel show's output on one line, without the warnings that a kernelpack wheel always
    earns and that say nothing of it: "ignoring: X with unknown architecture" for each AMDGPU or
    CUDA image (GPU code, for which auditwheel has no rule; counted instead) and "architecture
    could not be deduced" for a py3-none-any wheel, which has none. Left in, they came last (on
    standard error, after the verdict) and a successful build ended on a WARNING line."""
    passed = _PASSED_OVER.findall(output)
    kept = _LOG_PREFIX.sub("", _NO_ARCH.sub("", _PASSED_OVER.sub("", output)))
    verdict = " ".join(kept.split())
    if passed:
        verdict += f" ({len(passed)} GPU code files passed over: auditwheel judges host code only)"
    return verdict


def auditwheel_repair(wheel: Path, out_dir: Path) -> tuple[Path, str]:
    """auditwheel repair, and our own checks of what auditwheel cannot judge.

    auditwheel reads every ELF file in a wheel; the AMDGPU and CUDA images must come through its
    repair untouched, and no GPU runtime library may be grafted in: the user's driver stack
    provides those.
    """
    result = subprocess.run(
        [sys.executable, "-m", "auditwheel", "repair", "-w", str(out_dir), str(wheel)],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise BuildError(f"auditwheel repair {wheel.name} failed: {result.stderr.strip()[-1000:]}")
    (repaired,) = out_dir.glob("*.whl")
    before, after = read_wheel(wheel), read_wheel(repaired)
    changed = [
        name
        for name, data in before.items()
        if name.endswith(IMAGE_FILE_SUFFIXES) and after.get(name) != data
    ]
    if changed:
        raise BuildError(f"auditwheel repair changed device images: {', '.join(changed)}")
    _refuse_gpu_runtimes(repaired.name, after, "auditwheel grafted")
    return repaired, _auditwheel_show(repaired)
