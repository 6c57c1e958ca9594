"""A C/C++ token scanner just good enough for source-to-source translation.

Translation must never touch text inside comments, string or character literals, or part of a
longer identifier (``cudaMallocHostBuffer`` is a user name, not ``cudaMallocHost``); hipify-perl's
regular expressions get this wrong. Scanning into tokens first makes those cases impossible: the
translator only ever replaces whole identifier tokens. Every character of the input belongs to
exactly one token, so joining the token texts gives the input back byte for byte.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum


class Kind(Enum):
    SPACE = "space"  # blanks, newlines and backslash-newline continuations
    COMMENT = "comment"
    STRING = "string"  # string and character literals, raw strings included
    NUMBER = "number"  # a preprocessing number: 32, 0xffffffffu, 1.0e-3f
    IDENT = "ident"
    PUNCT = "punct"


@dataclass(frozen=True)
class Token:
    kind: Kind
    text: str
    offset: int
    line: int  # 1-based
    col: int  # 1-based, in characters


# The compound assignment operators (the hazard checks end an operand at them, too).
COMPOUND_ASSIGNMENTS = ("+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>=")
# Longest punctuators first. <<< and >>> are CUDA's launch brackets; the translator checks that a
# >>> closes a <<< before it treats it as one (a nested template can end in >>> too).
_PUNCTUATORS = sorted(
    [
        *("<<<", ">>>", "...", "->*", "::", "->", "++", "--", "<<", ">>"),
        *("<=", ">=", "==", "!=", "&&", "||", "##", ".*"),
        *COMPOUND_ASSIGNMENTS,
    ],
    key=len,
    reverse=True,
)

_TOKEN_RE = re.compile(
    r"""
    (?P<space>(?:[ \t\r\n\f\v]|\\\r?\n)+)
  | (?P<comment>//(?:[^\n\\]|\\.|\\\n)*|/\*.*?(?:\*/|\Z))
  | (?P<raw>(?:u8|u|U|L)?R"(?P<delim>[^()\\ \t\n]{0,16})\()
  | (?P<string>(?:u8|u|U|L)?"(?:[^"\\\n]|\\.|\\\n)*"?|(?:u8|u|U|L)?'(?:[^'\\\n]|\\.)*'?)
  | (?P<number>\.?[0-9](?:[eEpP][+-]|[0-9A-Za-z_.'])*)
  | (?P<ident>[A-Za-z_$][A-Za-z0-9_$]*)
  | (?P<punct>"""
    + "|".join(re.escape(p) for p in _PUNCTUATORS)
    + r"""|[^\s])
    """,
    re.VERBOSE | re.DOTALL,
)


def tokenize(text: str) -> list[Token]:
    """All tokens of ``text``, in order; their texts joined give ``text`` back exactly."""
    tokens: list[Token] = []
    pos = 0
    line = 1
    line_start = 0
    while pos < len(text):
        match = _TOKEN_RE.match(text, pos)
        if match is None or match.lastgroup is None:  # pragma: no cover - [^\s] matches the rest
            raise AssertionError(f"tokenizer stuck at offset {pos}")
        group = match.lastgroup
        end = match.end()
        if group == "raw":
            closing = ")" + match.group("delim") + '"'
            close_at = text.find(closing, end)
            end = len(text) if close_at < 0 else close_at + len(closing)
            kind = Kind.STRING
        else:
            kind = Kind(group)
        piece = text[pos:end]
        tokens.append(Token(kind, piece, pos, line, pos - line_start + 1))
        newlines = piece.count("\n")
        if newlines:
            line += newlines
            line_start = pos + piece.rindex("\n") + 1
        pos = end
    return tokens


def is_directive_start(tokens: list[Token], index: int) -> bool:
    """True when tokens[index] is a ``#`` that begins a preprocessor line."""
    if tokens[index].text != "#":
        return False
    k = index - 1
    while k >= 0:
        token = tokens[k]
        if token.kind is Kind.SPACE:
            if "\n" in token.text.replace("\\\n", "").replace("\\\r\n", ""):
                return True
        elif token.kind is Kind.COMMENT and token.text.startswith("/*"):
            pass
        else:
            return False
        k -= 1
    return True


def literal_value(text: str) -> int | None:
    """The value of an integer literal token (suffixes and digit separators allowed), else None."""
    digits = text.replace("'", "").rstrip("uUlLzZ")
    try:
        if len(digits) > 1 and digits[0] == "0" and digits[1] not in "xXbB":
            return int(digits, 8)
        return int(digits, 0)
    except ValueError:
        return None
