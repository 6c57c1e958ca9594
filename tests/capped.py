"""Running a kernelpack command the way a hostile input meets it: in a child process with a 2 GiB
address-space cap and a wall-clock limit.

A reader that is quadratic, unbounded in its output or blocking on a FIFO shows up here as a
timeout or a MemoryError (a traceback on stderr) instead of an answer; the issue's bar is exit
status 0 with the right answer or 2 with one line, within ``timeout`` seconds.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

ADDRESS_SPACE_CAP = 2 << 30
WHEELS = Path(__file__).resolve().parents[1] / "wheels"


def _cap_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_CAP, ADDRESS_SPACE_CAP))


def run_capped(
    args: Sequence[str], *, timeout: float = 5.0, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m kernelpack ARGS`` under the cap; raises ``subprocess.TimeoutExpired`` past
    ``timeout`` seconds (the child is killed)."""
    environ = {**os.environ, "PYTHONPATH": str(WHEELS), **(env or {})}
    environ.pop("KERNELPACK_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "kernelpack", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environ,
        preexec_fn=_cap_address_space,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def assert_one_line_refusal(result: subprocess.CompletedProcess[str]) -> None:
    """Exit status 2, one line on stderr, no traceback."""
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr[-2000:]
