"""Wheel sizes: runs `python -m buildsys wheels --json` and writes docs/wheel-sizes.md.

    python bench/bench_wheels.py [--output docs/wheel-sizes.md]

Every file of dist/ compressed (the .whl file) and uncompressed (the sum of its members), what a
user with one GPU downloads from the split wheels, and what the generic AMD targets cost: each
module's fat bundle is rebuilt here without the generic entries and compressed the way the builder
compresses it (kernelpack.formats.compress_bundle), against the bundle the fat wheel carries.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = REPO / "docs" / "wheel-sizes.md"
sys.path.insert(0, str(REPO / "wheels"))

from kernelpack.formats import compress_bundle, read_bundle, write_bundle  # noqa: E402
from kernelpack.targets import parse_target  # noqa: E402


def generic_cost(fat: Path) -> list[tuple[str, int, int, int, list[str]]]:
    """(bundle, bytes in the fat wheel, bytes without generic entries, entries, generic targets)."""
    rows = []
    with zipfile.ZipFile(fat) as archive:
        for name in sorted(n for n in archive.namelist() if n.endswith(".hsaco")):
            carried = archive.read(name)
            entries = [e for e in read_bundle(carried, name) if e.kind != "host"]
            generic = [e.target for e in entries if parse_target(e.target).kind == "generic"]
            kept = [(e.id, e.data) for e in entries if e.target not in generic]
            without = compress_bundle(write_bundle(kept))
            rows.append((name, len(carried), len(without), len(entries), generic))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args()
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    with tempfile.TemporaryDirectory(prefix="kernelpack-sizes-") as tmp:
        result = subprocess.run(
            [sys.executable, "-m", "buildsys", "wheels", "--provision", "--json", "--out", tmp],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
            env=env,
        )
        report = json.loads(result.stdout)
        wheels = report["wheels"]
        fat = next(w for w in wheels if w["kind"] == "fat")
        cost = generic_cost(Path(fat["file"]))
    host = next(w for w in wheels if w["kind"] == "host")
    devices = [w for w in wheels if w["kind"] == "device"]

    def short(path: str) -> str:
        return re.sub(r"-\d[^-]*?(?=-(cp|py)3)", "-VERSION", Path(path).name)

    rows = [
        f"| {w['kind']} | `{short(w['file'])}` | {w['compressed']:,} | {w['uncompressed']:,} |"
        for w in wheels
    ]
    one_gpu = [
        f"| {re.search(r'kernelpack_device_([a-z0-9_]+)', Path(d['file']).name)[1]} "  # type: ignore[index]
        f"| {host['compressed'] + d['compressed']:,} "
        f"| {(host['compressed'] + d['compressed']) / fat['compressed']:.2f} |"
        for d in devices
    ]
    generic_rows = [
        f"| `{name}` | {entries} ({len(generic)} generic) | {carried:,} | {without:,} "
        f"| {carried - without:,} ({(carried - without) / without:.0%}) |"
        for name, carried, without, entries, generic in cost
    ]
    added = sum(carried - without for _, carried, without, _, _ in cost)
    generic_wheels = [d for d in devices if "generic" in Path(d["file"]).name]
    split_total = host["compressed"] + sum(d["compressed"] for d in devices)
    text = f"""# Wheel sizes

Command: `python bench/bench_wheels.py` (runs `python -m buildsys wheels --provision --json`; one run).
Machine: {platform.processor() or platform.machine()}, Python {platform.python_version()}, {time.strftime("%Y-%m-%d")}.
Matrix: arch_matrix.toml (9 AMD processors, 6 generic AMD targets, sm_80, sm_90, sm_120, compute_80
PTX); modules mlp, walk. Kinds: fat = the null variant (every image), host = the plain wheel (no
images), device = one per device group, variant = the host wheel requiring one device wheel,
provider = the variant provider plugin.

| kind | wheel | compressed bytes | uncompressed bytes |
| --- | --- | ---: | ---: |
{chr(10).join(rows)}

Split wheels together (host + every device wheel): {split_total:,} bytes ({split_total / fat["compressed"]:.2f} of
the fat wheel: each device wheel compresses its own images apart from the others).

## What the generic targets cost

Each fat bundle rebuilt without its generic entries and compressed as the builder does (zstd CCOB):

| bundle | entries | bytes as shipped | bytes without generic | generic cost |
| --- | --- | ---: | ---: | ---: |
{chr(10).join(generic_rows)}

The six generic targets add {added:,} bytes to the fat wheel ({added / (fat["compressed"] - added):.0%} of
it without them) and give every gfx9/gfx10/gfx11/gfx12 processor LLVM knows but gfx1250 a native
image (docs/targets.md). Their device wheels are {", ".join(f"{w['compressed']:,}" for w in generic_wheels)} bytes.

## What a user with one GPU downloads from the split wheels (host + one device wheel)

| device wheel | bytes | of the fat wheel |
| --- | ---: | ---: |
{chr(10).join(one_gpu)}
"""
    args.output.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
