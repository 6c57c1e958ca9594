"""The environment of a builder run as a subprocess in the tests (not a test module).

The builder and runtime come from this checkout, run from another folder; the caller's
KERNELPACK_BUILD_* settings are dropped so each test says its own; this interpreter's folder leads
PATH (auditwheel and the console scripts of the test environment); and whatever PYTHONPATH the
caller had stays after the checkout, because on the lent GPU machine that is where the carried
wheels (zstandard) are.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from buildsys import REPO_ROOT


def builder_env(*extra_paths: str, **extra: str) -> dict[str, str]:
    """os.environ for a builder subprocess; ``extra_paths`` go after the checkout on PYTHONPATH,
    ``extra`` variables are set last."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELPACK_BUILD_")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    inherited = [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []
    path = [str(REPO_ROOT), str(REPO_ROOT / "wheels"), *extra_paths, *inherited]
    return env | {"PYTHONPATH": ":".join(path)} | extra


def interruptible() -> None:
    """``preexec_fn`` for a builder a test interrupts: SIGINT back to its default disposition.

    A shell starts background jobs with SIGINT ignored, the child inherits that, and Python then
    installs no KeyboardInterrupt handler: the builder would rightly ignore the test's signal.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
