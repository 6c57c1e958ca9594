"""The build's terminal output: a progress bar or plain lines while compiling (on stderr), then
the summary (a module x target table and the kernel-by-target table, or JSON with ``--json``) and
the one error naming each failure.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Mapping
from typing import Any

from kernelpack._console import print_json, print_table, use_rich
from kernelpack.formats.index import KernelResources

from .errors import BuildError
from .jobs import BuildResult, Job, Outcome
from .missing_kernels import absent_targets


class Reporter:
    """A rich progress bar on a terminal, plain lines elsewhere (on stderr: stdout is the summary)."""

    def __init__(self, total: int, to_compile: int, *, enabled: bool) -> None:
        self.total = total
        self.to_compile = to_compile
        self.done = 0
        self.enabled = enabled and to_compile > 0
        self._bar: Any = None
        self._lock = threading.Lock()  # steps come from the jobs' threads
        if not self.enabled:
            return
        if use_rich():
            from rich.console import Console  # deferred: optional terminal output
            from rich.progress import (  # deferred: optional terminal output
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TimeElapsedColumn,
            )

            self._bar = Progress(
                "[progress.description]{task.description}",
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self._bar.start()
            self._task = self._bar.add_task("compiling", total=to_compile)
        else:
            cached = total - to_compile
            print(f"build: {total} jobs, {cached} cached, {to_compile} to compile", file=sys.stderr)

    def step(self, job: Job, text: str) -> None:
        """A step of a long job as it happens (a linked module's units and link): one line above
        the bar on a terminal, a plain line elsewhere, so no long stretch of the build is silent."""
        if not self.enabled:
            return
        with self._lock:
            if self._bar is not None:
                self._bar.console.print(f"[dim]{job.label}: {text}[/dim]")
            else:
                print(f"build: {job.label}: {text}", file=sys.stderr, flush=True)

    def finished(self, outcome: Outcome) -> None:
        if not self.enabled:
            return
        self.done += 1
        line = f"{outcome.job.label}: {outcome.status} in {outcome.seconds:.1f} s"
        if self._bar is not None:
            self._bar.update(self._task, advance=1, description=line)
            if outcome.status == "failed":
                self._bar.console.print(f"[red]{outcome.job.label} failed[/red]\n{outcome.message}")
        else:
            print(f"[{self.done}/{self.to_compile}] {line}", file=sys.stderr, flush=True)
            if outcome.status == "failed":
                print(outcome.message, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


def _notes(resources: Mapping[str, KernelResources]) -> str:
    spills = sorted(k for k, r in resources.items() if r["spills"])
    scratch = sorted(k for k, r in resources.items() if r["scratch"])
    notes = []
    if spills:
        notes.append("SPILLS: " + ", ".join(spills))
    if scratch:
        notes.append("SCRATCH: " + ", ".join(scratch))
    return "; ".join(notes)


def summary_rows(result: BuildResult) -> list[dict[str, Any]]:
    rows = []
    for outcome in result.outcomes:
        row: dict[str, Any] = {
            "module": outcome.job.module.name,
            "target": outcome.job.target.target,
            "kind": outcome.job.kind,
            "status": outcome.status,
            "seconds": round(outcome.seconds, 3),
        }
        if outcome.image is not None:
            resources = outcome.image.kernels
            row.update(
                size=len(outcome.image.data),
                registers=max((r["registers"] for r in resources.values()), default=0),
                lds=max((r["lds"] for r in resources.values()), default=0),
                scratch=max((r["scratch"] for r in resources.values()), default=0),
                spills=sum(r["spills"] for r in resources.values()),
                flagged=_notes(resources),
                kernels={k: dict(r) for k, r in sorted(resources.items())},
            )
        if outcome.message:
            row["message"] = outcome.message
        if outcome.hint:
            row["hint"] = outcome.hint
        rows.append(row)
    return rows


def print_summary(result: BuildResult, *, as_json: bool) -> None:
    rows = summary_rows(result)
    counts = {s: result.count(s) for s in ("compiled", "cached", "failed", "not run")}
    if as_json:
        print_json(
            {
                "out": str(result.out),
                "jobs": rows,
                **counts,
                "kernels": kernel_rows(result),
                "error": result.error,
            }
        )
        return
    table = []
    for row in rows:
        when = "cached" if row["status"] == "cached" else f"{row['seconds']:.1f} s"
        if row["status"] in ("failed", "not run"):
            when = row["status"].upper()
        table.append(
            (
                row["module"],
                row["target"],
                when,
                f"{row['size'] / 1024:.1f} KiB" if "size" in row else "",
                row.get("registers", ""),
                row.get("lds", ""),
                row.get("scratch", ""),
                row.get("spills", ""),
                row.get("flagged", ""),
            )
        )
    title = ", ".join(f"{n} {s}" for s, n in counts.items() if n) + f" -> {result.out}"
    print_table(
        f"build: {title}",
        ("module", "target", "compile", "size", "regs", "LDS", "scratch", "spills", "flagged"),
        table,
    )
    kernels = kernel_rows(result)
    if kernels:
        print()
        print_table(
            f"kernels by target ({len(result.targets)} targets)",
            ("module", "kernel", "targets"),
            [
                (row["module"], row["kernel"], _targets_cell(row, len(result.targets)))
                for row in kernels
            ],
        )


def kernel_rows(result: BuildResult) -> list[dict[str, Any]]:
    """The kernel-by-target table: one row per module and kernel, with the targets whose objects
    define it and those that lack it (discovered from the objects: buildsys.discovery)."""
    rows = []
    for module, kernels in result.kernel_targets.items():
        for kernel, present in kernels.items():
            missing = absent_targets(kernel, present, result.targets)
            rows.append(
                {"module": module, "kernel": kernel, "targets": list(present), "missing": missing}
            )
    return rows


def _targets_cell(row: dict[str, Any], total: int) -> str:
    if not row["missing"] and len(row["targets"]) < total:
        return f"{', '.join(row['targets'])} only (a vendor library's kernel)"
    if not row["missing"]:
        return f"all {total}"
    return f"MISSING on {', '.join(row['missing'])} ({len(row['targets'])} of {total})"


def failure_error(result: BuildResult) -> BuildError:
    """One error naming each failed job with the first line of the compiler's message."""
    failed = [o for o in result.outcomes if o.status == "failed"]
    parts = []
    for outcome in failed:
        lines = outcome.message.splitlines() or [""]
        first = next((line for line in lines if "error" in line), lines[0])
        hint = f" ({outcome.hint})" if outcome.hint else ""
        parts.append(f"{outcome.job.label}: {first}{hint}")
    not_run = result.count("not run")
    tail = f"; {not_run} jobs not run (--keep-going builds them)" if not_run else ""
    if not failed and not not_run:
        return BuildError(f"nothing written to {result.out}: {result.error}")
    return BuildError(
        f"{len(failed)} of {len(result.outcomes)} compile jobs failed, nothing written to "
        f"{result.out}: " + " | ".join(parts) + tail
    )
