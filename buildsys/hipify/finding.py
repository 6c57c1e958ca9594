"""A finding before it becomes a diagnostic: the token it points at, its code and message."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    token: int  # index of the token the diagnostic points at
    code: str
    message: str
    key: str = ""  # what the finding is about (a name): repeats of (code, key) are reported once
