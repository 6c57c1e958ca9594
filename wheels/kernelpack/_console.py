"""Terminal output shared by both command lines: rich on a terminal, plain lines elsewhere.

rich is used when it is importable and standard output is a terminal (NO_COLOR and FORCE_COLOR
are honoured by rich itself); in CI and in pipes the same tables come out as plain aligned text, and
``--json`` output never goes through here.

What the tables show may come from a file (kernel names, bundle entry ids), so it is data, never
markup or terminal control: :func:`printable` writes control, format and other unprintable
characters as escapes, and rich gets each cell as plain :class:`rich.text.Text`, so a name such as
``[/]`` or ``\x1b[2J`` is shown as written and cannot restyle or clear the terminal.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .errors import KernelpackError, debug_enabled


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


def printable(text: str) -> str:
    """``text`` with every character that is not printable (escape, carriage return, bell,
    bidirectional overrides, zero-width characters...) written as a Python escape: ``\x1b``."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """One table: a rich Table on a terminal, aligned plain text otherwise."""
    title = printable(title)
    cells = [["" if c is None else printable(str(c)) for c in row] for row in rows]
    if use_rich():
        from rich.console import Console  # deferred: optional terminal output
        from rich.table import Table  # deferred: optional terminal output
        from rich.text import Text  # deferred: optional terminal output

        table = Table(title=Text(title))
        for column in columns:
            table.add_column(column)
        for row in cells:
            table.add_row(*(Text(cell) for cell in row))
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
    print(json.dumps(value, indent=2, sort_keys=True))


def program_name(script: str, module: str) -> str:
    """What a command line calls itself in its help and usage: ``script`` when run as that
    console script, else ``python3 -m module`` (argparse's own guess would be ``__main__.py``)."""
    return script if Path(sys.argv[0]).name == script else f"python3 -m {module}"


def add_version(parser: argparse.ArgumentParser, name: str, version: Callable[[], str]) -> None:
    """``--version``: prints ``name`` and ``version()``, which is read only when asked (it reads
    installed metadata or an index, which no other command needs)."""

    class _Version(argparse.Action):
        def __call__(
            self, parser: argparse.ArgumentParser, *args: object, **kwargs: object
        ) -> None:
            print(f"{name} {version()}")
            parser.exit()

    parser.add_argument("--version", action=_Version, nargs=0, help="print the version and exit")


SIGPIPE_STATUS = 128 + 13  # what a shell reports for a tool that SIGPIPE ended (`yes | head -1`)


def run_cli(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> int:
    """Run a command line's main, turning the error hierarchy into one line and an exit status.

    A reader that stops early (``--json | head -1``) closes the pipe: that ends the command quietly
    with the status a shell gives a tool ended by SIGPIPE, not with a traceback. Standard output is
    flushed here, inside the guard, and then pointed at /dev/null, so that the interpreter's own
    flush at exit finds nothing left to write to the closed pipe.
    """
    try:
        status = main(argv)
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        _drop_stdout()
        return SIGPIPE_STATUS
    except KernelpackError as error:
        if debug_enabled():
            traceback.print_exc()
        message = "\n".join(printable(line) for line in str(error).split("\n"))
        print(f"error: {message}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _drop_stdout() -> None:
    """Send what is still buffered for standard output (and anything later) to /dev/null."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # not a real file (a test's capture): nothing to redirect
        pass
