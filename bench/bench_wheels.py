"""Wheel sizes: runs `python -m buildsys wheels --json` and writes docs/wheel-sizes.md.

    python bench/bench_wheels.py [--output docs/wheel-sizes.md]

The fat wheel, the host wheel and each device wheel, compressed (the .whl file) and uncompressed
(the sum of its members), and what a user with one GPU downloads from the split wheels.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = REPO / "docs" / "wheel-sizes.md"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kernelpack-sizes-") as tmp:
        result = subprocess.run(
            [sys.executable, "-m", "buildsys", "wheels", "--json", "--out", tmp],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        )
    report = json.loads(result.stdout)
    wheels = report["wheels"]
    fat, host, devices = wheels[0], wheels[1], wheels[2:]

    def short(path: str) -> str:
        return re.sub(r"-\d[^-]*?(?=-(cp|py)3)", "-VERSION", Path(path).name)

    rows = [
        f"| {w['kind']} | `{short(w['file'])}` | {w['compressed']:,} | {w['uncompressed']:,} |"
        for w in wheels
    ]
    one_gpu = [
        f"| {re.search(r'kernelpack_device_([a-z0-9]+)', Path(d['file']).name)[1]} "  # type: ignore[index]
        f"| {host['compressed'] + d['compressed']:,} "
        f"| {(host['compressed'] + d['compressed']) / fat['compressed']:.2f} |"
        for d in devices
    ]
    split_total = host["compressed"] + sum(d["compressed"] for d in devices)
    text = f"""# Wheel sizes

Command: `python bench/bench_wheels.py` (runs `python -m buildsys wheels --json`; one run).
Machine: {platform.processor() or platform.machine()}, Python {platform.python_version()}, {time.strftime("%Y-%m-%d")}.
Matrix: arch_matrix.toml (8 AMD targets, sm_80, sm_90, sm_120, compute_80 PTX); modules mlp, walk.

| kind | wheel | compressed bytes | uncompressed bytes |
| --- | --- | ---: | ---: |
{chr(10).join(rows)}

Split wheels together: {split_total:,} bytes ({split_total / fat["compressed"]:.2f} of the fat
wheel: each device wheel compresses its own images apart from the others).

What a user with one GPU downloads from the split wheels (host + one device wheel):

| device wheel | bytes | of the fat wheel |
| --- | ---: | ---: |
{chr(10).join(one_gpu)}
"""
    args.output.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
