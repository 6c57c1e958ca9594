"""What the wheels command says of auditwheel (issue 50 item 9): its verdict, not its warnings for
GPU code. auditwheel warns for each AMDGPU or CUDA image and for a wheel without a platform; on
standard error those came after the verdict, so a successful build ended on a WARNING line."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from buildsys.wheel_audit import audit_verdict

OBJECTS = Path(__file__).parent / "fixtures" / "objects"


def _pure_wheel(folder: Path) -> Path:
    wheel = folder / "demo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("demo/__init__.py", "")
        archive.writestr("demo/device/gfx90a.co", (OBJECTS / "gfx90a.co").read_bytes())
        archive.writestr("demo-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: demo\n")
        archive.writestr(
            "demo-1.0.dist-info/WHEEL",
            "Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        archive.writestr("demo-1.0.dist-info/RECORD", "")
    return wheel


def test_auditwheels_own_output_on_a_device_wheel_has_its_verdict_and_no_warning(
    tmp_path: Path,
) -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "auditwheel", "show", str(_pure_wheel(tmp_path))],
        capture_output=True,
        text=True,
        check=False,
    )
    assert "WARNING" in shown.stderr  # what auditwheel itself says of a py3-none-any wheel
    verdict = audit_verdict(shown.stdout + shown.stderr)
    assert "WARNING" not in verdict
    assert verdict.startswith("This does not look like a platform wheel")


def test_the_image_warnings_are_counted_and_the_verdict_kept() -> None:
    """A platform wheel's output as auditwheel 6 logs it (logging's default format,
    wheel_abi.py's message), the warnings last as they come on standard error."""
    stdout = (
        "kernelpack-1.0-cp311-abi3-linux_x86_64.whl is consistent with the following platform "
        'tag: "manylinux_2_17_x86_64".\n'
    )
    stderr = "".join(
        f"WARNING:auditwheel.wheel_abi:ignoring: {name}.hsaco with unknown architecture\n"
        for name in ("mlp", "walk")
    )
    assert audit_verdict(stdout + stderr) == (
        stdout.strip() + " (2 GPU code files passed over: auditwheel judges host code only)"
    )
    other = "WARNING:auditwheel.policy:something else\n"
    assert "WARNING" in audit_verdict(stdout + other)  # a warning of another kind stays
