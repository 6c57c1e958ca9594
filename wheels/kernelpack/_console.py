"""Terminal output shared by both command lines: rich on a terminal, plain lines elsewhere.

rich is used when it is importable and standard output is a terminal (NO_COLOR and FORCE_COLOR
are honoured by rich itself); in CI and in pipes the same tables come out as plain aligned text, and
``--json`` output never goes through here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from .errors import KernelpackError


def debug_enabled() -> bool:
    return os.environ.get("KERNELPACK_DEBUG", "") not in ("", "0")


def use_rich() -> bool:
    """rich only for a person at a terminal; CI logs and pipes get plain lines."""
    if os.environ.get("CI") and not os.environ.get("FORCE_COLOR"):
        return False
    if not (sys.stdout.isatty() or os.environ.get("FORCE_COLOR")):
        return False
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return True


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """One table: a rich Table on a terminal, aligned plain text otherwise."""
    cells = [["" if c is None else str(c) for c in row] for row in rows]
    if use_rich():
        from rich.console import Console
        from rich.table import Table

        table = Table(title=title)
        for column in columns:
            table.add_column(column)
        for row in cells:
            table.add_row(*row)
        Console().print(table)
        return
    widths = [len(c) for c in columns]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    if title:
        print(title)
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def print_json(value: Any) -> None:
    import json  # imported here: the loader imports this module, and a launch needs no JSON

    print(json.dumps(value, indent=2, sort_keys=True))


def run_cli(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> int:
    """Run a command line's main, turning the error hierarchy into one line and an exit status."""
    try:
        return main(argv)
    except KernelpackError as error:
        if debug_enabled():
            import traceback

            traceback.print_exc()
        print(f"error: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
