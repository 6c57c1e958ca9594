"""Targets at any precision: a number, a decimal string of any length, or an expression of known
constants (``"6/zeta(3) - 5"``, ``"4/pi - 1"``, ``"1/(e - 1)"``, ``"catalan"``, ``"log(2)"``).

:func:`parse_target` reads one into a :class:`Target`: a small expression tree, evaluated by
:meth:`Target.ball` to a certified real ball (python-flint's arb) at any precision, and by
:attr:`Target.screen` to the float64 the walkers' screen compares with. Nothing is ever handed to
eval(): the parser below knows numbers, ``+ - * /``, ``**`` (or ``^``), parentheses and the names
of :data:`CONSTANTS` and :data:`FUNCTIONS`, and each mistake is one UsageError naming the token.

A target's *resolution* says how far the number it was given as can be from the number meant: a
Python float stands for every real within half an ulp of it, a bare decimal string (``"0.0855"``)
for every real it truncates or rounds to (one unit in its last place); integers and expressions
are exact (a decimal inside an expression is taken at its face value). An exact delta closer
to the target than about a thousand times its resolution cannot be had from it
(kernelpack.walk.exact_walk).
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from ..errors import UsageError

# name -> what it is, and the arb function (of the flint module) that gives its value.
CONSTANTS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "catalan": ("Catalan's constant", lambda flint: flint.arb.const_catalan()),
    "e": ("Euler's number", lambda flint: flint.arb.const_e()),
    "euler": ("the Euler-Mascheroni constant", lambda flint: flint.arb.const_euler()),
    "phi": ("the golden ratio", lambda flint: (1 + flint.arb(5).sqrt()) / 2),
    "pi": ("pi", lambda flint: flint.arb.pi()),
}
# name -> what it is, and the arb function of one ball.
FUNCTIONS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "atan": ("arctangent", lambda x: x.atan()),
    "cos": ("cosine", lambda x: x.cos()),
    "exp": ("exponential", lambda x: x.exp()),
    "gamma": ("the gamma function", lambda x: x.gamma()),
    "log": ("natural logarithm", lambda x: x.log()),
    "sin": ("sine", lambda x: x.sin()),
    "sqrt": ("square root", lambda x: x.sqrt()),
    "zeta": ("Riemann's zeta function", lambda x: x.zeta()),
}
if set(CONSTANTS) & set(FUNCTIONS):
    raise AssertionError("a name is both a constant and a function")
KNOWN = (
    f"constants: {', '.join(sorted(CONSTANTS))}; functions: {', '.join(sorted(FUNCTIONS))}; "
    "operators: + - * / ** ^ ( )"
)
MAX_EXPONENT = 10_000  # an integer power the exact (rational) folding takes at most
MAX_DEPTH = 100  # nesting of parentheses and unary signs


@dataclass(frozen=True)
class Node:
    """One node of a target's tree: ``num`` (value: a Fraction), ``const`` or ``call`` (name,
    args), or an operator ``neg add sub mul div pow`` over ``args``."""

    kind: str
    value: Fraction | str | None = None
    args: tuple[Node, ...] = ()


_TOKEN = re.compile(
    r"\s*(?:(?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)|(?P<name>[A-Za-z_]\w*)"
    r"|(?P<op>\*\*|[-+*/^(),]))"
)


def _tokens(text: str, where: str) -> list[tuple[str, str, int]]:
    """(kind, spelling, column) of each token, then ("end", "", len)."""
    found: list[tuple[str, str, int]] = []
    position = 0
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position == len(text):
            return [*found, ("end", "", position)]
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            raise UsageError(
                f"{where}: {text!r}: unexpected character {text[position]!r} at column "
                f"{position + 1}; known: {KNOWN}"
            )
        kind = match.lastgroup or "op"
        found.append((kind, match.group(kind), match.start(kind)))
        position = match.end()


class _Parser:
    """Recursive descent over the grammar::

    expr  := term (("+" | "-") term)*
    term  := unary (("*" | "/") unary)*
    unary := ("+" | "-") unary | power
    power := atom (("**" | "^") unary)?        # right-associative: 2**-1, -2**2 = -(2**2)
    atom  := number | constant | function "(" expr ")" | "(" expr ")"
    """

    def __init__(self, text: str, where: str) -> None:
        self.text = text
        self.where = where
        self.tokens = _tokens(text, where)
        self.at = 0
        self.depth = 0

    def fail(self, what: str) -> UsageError:
        kind, spelling, column = self.tokens[self.at]
        token = "the end" if kind == "end" else repr(spelling)
        return UsageError(
            f"{self.where}: {self.text!r}: {what}, got {token} at column {column + 1}; "
            f"known: {KNOWN}"
        )

    def peek(self) -> str:
        kind, spelling, _ = self.tokens[self.at]
        return spelling if kind == "op" else kind

    def take(self, spelling: str) -> None:
        if self.peek() != spelling:
            raise self.fail(f"expected {spelling!r}")
        self.at += 1

    def parse(self) -> Node:
        node = self.expr()
        if self.peek() != "end":
            raise self.fail("expected an operator or the end")
        return node

    def expr(self) -> Node:
        return self.left_assoc(self.term, {"+": "add", "-": "sub"})

    def term(self) -> Node:
        return self.left_assoc(self.unary, {"*": "mul", "/": "div"})

    def left_assoc(self, operand: Callable[[], Node], operators: Mapping[str, str]) -> Node:
        """``operand (op operand)*`` for the operators (spelling -> node kind), grouped from the
        left: the grammar's ``expr`` and ``term`` levels."""
        node = operand()
        while (op := operators.get(self.peek())) is not None:
            self.at += 1
            node = Node(op, args=(node, operand()))
        return node

    def unary(self) -> Node:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.fail(f"nested more than {MAX_DEPTH} deep")
        try:
            if self.peek() in ("+", "-"):
                negate = self.peek() == "-"
                self.at += 1
                operand = self.unary()
                return Node("neg", args=(operand,)) if negate else operand
            return self.power()
        finally:
            self.depth -= 1

    def power(self) -> Node:
        base = self.atom()
        if self.peek() in ("**", "^"):
            self.at += 1
            return Node("pow", args=(base, self.unary()))
        return base

    def atom(self) -> Node:
        kind, spelling, _ = self.tokens[self.at]
        if kind == "num":
            self.at += 1
            return Node("num", _decimal(spelling))
        if kind == "name":
            if spelling in CONSTANTS:
                self.at += 1
                return Node("const", spelling)
            if spelling in FUNCTIONS:
                self.at += 1
                self.take("(")
                argument = self.expr()
                self.take(")")
                return Node("call", spelling, (argument,))
            raise UsageError(
                f"{self.where}: {self.text!r}: unknown name {spelling!r} at column "
                f"{self.tokens[self.at][2] + 1}; known: {KNOWN}"
            )
        if self.peek() == "(":
            self.at += 1
            inner = self.expr()
            self.take(")")
            return inner
        raise self.fail("expected a number, a constant, a function or '('")


def _decimal(spelling: str) -> Fraction:
    """The exact value of a decimal literal (``1.25e-3`` is 1/800)."""
    mantissa, _, exponent = spelling.lower().partition("e")
    whole, _, fraction = mantissa.partition(".")
    value = Fraction(int((whole or "0") + fraction), 10 ** len(fraction))
    if not exponent:
        return value
    power = int(exponent)
    if abs(power) > 100_000:
        raise UsageError(f"target: exponent {power} of {spelling!r} is out of range")
    return value * Fraction(10) ** power


def _unit_in_last_place(spelling: str) -> Fraction:
    """One unit in the last digit of a decimal literal (``0.0855`` -> 1/10000; ``12`` -> 0)."""
    mantissa, _, exponent = spelling.lower().partition("e")
    _, point, fraction = mantissa.partition(".")
    if not point and not exponent:
        return Fraction(0)
    return Fraction(10) ** (int(exponent or 0) - len(fraction))


# The operators whose value is the same arithmetic on exact fractions and on balls (pow is not:
# a fractional or huge exponent leaves the rationals)
_ARITHMETIC: dict[str, Callable[..., Any]] = {
    "neg": operator.neg,
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "div": operator.truediv,
}


def _rational(node: Node) -> Fraction | None:
    """The node's exact value where it is rational without constants, else None."""
    if node.kind == "num":
        assert isinstance(node.value, Fraction)
        return node.value
    if node.kind in ("const", "call"):
        return None
    values = [_rational(arg) for arg in node.args]
    if any(v is None for v in values):
        return None
    args = [v for v in values if v is not None]
    if node.kind == "div" and args[1] == 0:
        raise UsageError("target: division by zero")
    if node.kind in _ARITHMETIC:
        exact: Fraction = _ARITHMETIC[node.kind](*args)
        return exact
    a, b = args
    if b.denominator != 1 or abs(b.numerator) > MAX_EXPONENT:
        return None  # a fractional power (or a huge one) is evaluated as a ball
    if a == 0 and b < 0:
        raise UsageError("target: 0 to a negative power")
    return a ** int(b)


def _ball(node: Node, flint: Any) -> Any:
    """The node as an arb ball at the current working precision of flint.ctx."""
    if node.kind == "num":
        assert isinstance(node.value, Fraction)
        return flint.arb(flint.fmpq(node.value.numerator, node.value.denominator))
    if node.kind == "const":
        assert isinstance(node.value, str)
        return CONSTANTS[node.value][1](flint)
    args = [_ball(arg, flint) for arg in node.args]
    if node.kind == "call":
        assert isinstance(node.value, str)
        return FUNCTIONS[node.value][1](args[0])
    if node.kind in _ARITHMETIC:
        return _ARITHMETIC[node.kind](*args)
    a, b = args
    exponent = _rational(node.args[1])
    if exponent is not None and exponent.denominator == 1:
        return a ** int(exponent)
    return a**b


def import_flint(why: str) -> Any:
    """python-flint, or the UsageError that says how to install it."""
    try:
        import flint  # deferred: the exact extra (python-flint)
    except ImportError:
        raise UsageError(
            f"{why} needs python-flint (certified big-number arithmetic); install it with "
            "`pip install 'kernelpack[exact]'` (or `pip install python-flint`)"
        ) from None
    return flint


@dataclass(frozen=True, eq=False)
class Target:
    """A parsed target. ``text`` is how it was given (a float as its repr), ``tree`` its
    expression, ``rational`` its exact value where it has no constants, ``resolution`` how far
    the number meant may lie from it (module docstring; 0 when exact)."""

    text: str
    tree: Node
    rational: Fraction | None
    resolution: Fraction
    _balls: dict[int, Any] = field(default_factory=dict, repr=False, compare=False)

    def ball(self, prec: int) -> Any:
        """The target as an arb ball computed at ``prec`` bits or more (python-flint): computed
        at the next power of two and kept, so that the walks of a verification share the
        constants' evaluation (zeta(3) at 32,768 bits takes milliseconds)."""
        flint = import_flint(f"target {self.text!r}")
        bits = 1 << max(0, prec - 1).bit_length()
        if bits not in self._balls:
            with flint.ctx.workprec(bits):
                value = _ball(self.tree, flint)
            if not value.is_finite():
                raise UsageError(f"target: {self.text!r} is not a finite real number")
            self._balls[bits] = value
        return self._balls[bits]

    @property
    def screen(self) -> float:
        """The float64 nearest the target (what the float screen compares with)."""
        if self.rational is not None:
            try:
                value = float(self.rational)
            except OverflowError:
                value = math.inf
        else:
            value = float(self.ball(128).mid())
        if not math.isfinite(value):
            raise UsageError(f"target: expected a finite number, got {self.text!r}")
        return value


def parse_target(value: object, where: str = "target") -> Target:
    """``value`` (a float, an int, a Fraction, a decimal string of any length or an expression
    of known constants, or a Target) as a Target; a UsageError naming ``where`` otherwise."""
    if isinstance(value, Target):
        return value
    if isinstance(value, (bool, np.bool_)):
        raise UsageError(f"{where}: expected a number or an expression, got {value!r}")
    if isinstance(value, (int, np.integer)):
        exact = Fraction(int(value))
        return Target(str(int(value)), Node("num", exact), exact, Fraction(0))
    if isinstance(value, Fraction):
        return Target(str(value), Node("num", value), value, Fraction(0))
    if isinstance(value, (float, np.floating)):
        number = float(value)
        if not math.isfinite(number):
            raise UsageError(f"{where}: expected a finite number, got {number}")
        exact = Fraction(number)
        return Target(repr(number), Node("num", exact), exact, Fraction(math.ulp(number)) / 2)
    if not isinstance(value, str):
        raise UsageError(
            f"{where}: expected a number, a decimal string or an expression of known constants, "
            f"got {type(value).__name__}"
        )
    text = value.strip()
    if not text:
        raise UsageError(f"{where}: an empty string; give a number or an expression ({KNOWN})")
    tree = _Parser(text, where).parse()
    rational = _rational(tree)
    resolution = Fraction(0)
    bare = re.fullmatch(r"[-+]?\s*((?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)", text)
    if bare:
        resolution = _unit_in_last_place(bare.group(1))
    target = Target(text, tree, rational, resolution)
    target.screen  # noqa: B018 (a target that has no finite float value is refused here)
    return target
