"""Which lanes can vote in a ballot: a 64-lane ballot kept in 32 bits loses nothing when no lane
above 31 can vote true.

A wave64 ballot sets bit j for lane j of the wavefront. Keeping it in 32 bits (the CUDA habit,
``unsigned b = __ballot_sync(...)``) drops the votes of lanes 32..63, which is a bug in general
(the ``ballot-32bit`` finding). It is not one when the predicate is a lane or thread index
compared ``<`` with a bound of at most 32 (``<=`` with at most 31): only lanes 0..31 can vote
true, so bits 32..63 are zero on every GPU. cuda-samples' reduction does this:
``__ballot_sync(mask, tid < shmem_extent)`` with ``tid = threadIdx.x`` and ``shmem_extent =
blockSize / warpSize`` (at most 1024 / 32).

What counts, each provable from the text of one file:

- an *index* is a value no smaller than the voting thread's lane in its wavefront:
  ``__lane_id()``; ``threadIdx.x`` and ``threadIdx.x % warpSize`` / ``& (warpSize - 1)`` in a
  file that reads no ``threadIdx.y``/``.z`` (its blocks are taken to be numbered by x alone, so
  lane = x mod the wave size <= x); ``thread_rank()`` of the thread block (a linear index); a variable
  defined once from one of these and never written again.
- a *bound* has an upper limit: an integer literal; a quotient of a bounded value or a block
  size by a divisor of known lower limit (``warpSize`` is at least 32 on every GPU, a literal,
  a name defined once); ``c ? a : b``; ``min(a, b)``; ``a % b``; a name defined once (a
  ``#define``, or a variable never written again) from a bound. A *block size* is
  ``blockDim.x/y/z`` or a name that says it is the block's thread count (``blockSize``,
  ``BLOCK_SIZE``, ``threads_per_block``, ...): at most 1024 threads on both vendors.
- a predicate is bounded when it, or one operand of a top-level ``&&``, is such a comparison.

Anything else (a bound of 48, ``blockDim.x`` itself, an unknown name, ``tid % 32``, a tile's
``thread_rank()``, which restarts in each tile, a variable written twice) keeps the finding.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .launch_shapes import function_name
from .lexer import COMPOUND_ASSIGNMENTS, Kind, literal_value
from .structure import SourceView
from .tables import WARP_BY_NAME

# The largest number of threads a block may have on NVIDIA and AMD GPUs alike.
MAX_BLOCK_THREADS = 1024
# The smallest warp (wavefront) size of any GPU either vendor makes: warpSize is at least this.
MIN_WAVE_SIZE = 32
# Names that say they hold a block's thread count.
_BLOCK_SIZE_RE = re.compile(
    r"^(?:k_?)?(?:block_?size|block_?threads|threads_?per_?block|n_?threads_?per_?block|"
    r"block_?dim)$",
    re.IGNORECASE,
)
_MIN_FUNCTIONS = frozenset({"min", "umin", "__umin"})
_WRITES = frozenset({"=", *COMPOUND_ASSIGNMENTS})
_STEPS = frozenset({"++", "--"})
_COMPARISONS = {"<": 0, "<=": 1, ">": 0, ">=": 1}  # the bound may be 32 - this
_NOT_TYPES = frozenset({"template", "return", "for", "if", "while", "switch", "case", "typedef"})
_DEPTH = 8  # definitions followed through names at most this deep


def votes_only_below_lane_32(view: SourceView, ballot: int) -> bool:
    """Whether the ballot call at token ``ballot`` can set no bit above 31."""
    parens = view.call_parens(ballot)
    if parens is None:
        return False
    intrinsic = WARP_BY_NAME.get(view.tokens[ballot].text)
    position = 0 if intrinsic is None or intrinsic.mask_arg < 0 else intrinsic.mask_arg + 1
    args = view.arguments(*parens)
    if position >= len(args):
        return False  # __activemask(): every active lane
    scope = _Scope.around(view, ballot)
    return scope.bounded_predicate(view.sig_in(*args[position]), ballot)


@dataclass(frozen=True)
class _Scope:
    """The function body around a ballot (or the whole file), where names are resolved."""

    view: SourceView
    body: tuple[int, int] | None

    @classmethod
    def around(cls, view: SourceView, index: int) -> _Scope:
        inside = [r for r in view.device_ranges if r[0] < index < r[1]]
        return cls(view, inside[0] if inside else None)

    def texts(self, sig: list[int]) -> list[str]:
        return [self.view.tokens[k].text for k in sig]

    # ---- predicates ----------------------------------------------------------------------

    def bounded_predicate(self, sig: list[int], before: int) -> bool:
        sig = self._strip(sig)
        conjuncts = self._split(sig, "&&")
        if len(conjuncts) > 1:
            return any(self.bounded_predicate(part, before) for part in conjuncts)
        operators = [k for k in self._top_level(sig) if self.view.tokens[k].text in _COMPARISONS]
        if len(operators) != 1:
            return False
        cut = sig.index(operators[0])
        left, right = sig[:cut], sig[cut + 1 :]
        operator = self.view.tokens[operators[0]].text
        index, bound = (left, right) if operator in ("<", "<=") else (right, left)
        limit = self.upper(bound, before, _DEPTH)
        return (
            limit is not None
            and limit + _COMPARISONS[operator] <= MIN_WAVE_SIZE
            and self.is_index(index, before, _DEPTH)
        )

    # ---- indexes: values no smaller than the thread's lane ---------------------------------

    def is_index(self, sig: list[int], before: int, depth: int) -> bool:
        sig = self._strip(sig)
        texts = self.texts(sig)
        if texts == ["__lane_id", "(", ")"]:
            return True
        if texts == ["threadIdx", ".", "x"]:
            return self._numbers_threads_by_x()
        if texts[-4:] == [".", "thread_rank", "(", ")"]:
            return self._is_thread_block(sig[:-4], before)
        for operator in ("%", "&"):
            parts = self._split(sig, operator)
            if len(parts) == 2 and self.texts(self._strip(parts[0])) == ["threadIdx", ".", "x"]:
                divisor = self.texts(self._strip(parts[1]))
                lane_mask = ["warpSize"] if operator == "%" else ["warpSize", "-", "1"]
                return divisor == lane_mask and self._numbers_threads_by_x()
        if len(sig) == 1 and self.view.tokens[sig[0]].kind is Kind.IDENT and depth > 0:
            definition = self._definition(texts[0], before)
            return definition is not None and self.is_index(definition, before, depth - 1)
        return False

    def _numbers_threads_by_x(self) -> bool:
        """Whether threads are numbered by x alone: the file reads no threadIdx.y/.z anywhere
        (a helper called from a two-dimensional kernel of the same file would not see it in its
        own body)."""
        view = self.view
        for k in view.sig:
            if view.tokens[k].text == "threadIdx":
                member = view.next_sig(view.next_sig(k) or k)
                if view.text_of(member) in ("y", "z"):
                    return False
        return self.body is not None

    def _is_thread_block(self, owner: list[int], before: int) -> bool:
        """Whether ``owner`` is the thread block's group (whose thread_rank() is linear), not a
        tile (whose rank restarts in each tile)."""
        texts = self.texts(owner)
        if texts[-3:] == ["this_thread_block", "(", ")"]:
            return True
        if len(owner) != 1 or self.body is None:
            return False
        declared = any(
            self.view.tokens[k].text == texts[0]
            and self.view.text_of(self.view.prev_sig(k)) == "thread_block"
            for k in self.view.sig_in(self.body[0], before)
        )
        definition = self._definition(texts[0], before)
        return declared or (
            definition is not None
            and self.texts(definition)[-3:] == ["this_thread_block", "(", ")"]
        )

    # ---- bounds: values with an upper limit ----------------------------------------------

    def upper(self, sig: list[int], before: int, depth: int) -> int | None:
        sig = self._strip(sig)
        texts = self.texts(sig)
        if not sig:
            return None
        question = [k for k in self._top_level(sig) if self.view.tokens[k].text == "?"]
        if question:
            return self._conditional(sig, question[0], before, depth)
        if len(sig) == 1:
            return self._upper_atom(sig[0], before, depth)
        if texts[0] in _MIN_FUNCTIONS or texts[:3] == ["std", "::", "min"]:
            return self._upper_min(sig, before, depth)
        for operator in ("/", "%"):
            parts = self._split(sig, operator)
            if len(parts) == 2:
                return self._quotient(parts, operator, before, depth)
        if texts[:1] == ["blockDim"] and texts[1:2] == ["."] and len(texts) == 3:
            return MAX_BLOCK_THREADS
        return None

    def _conditional(self, sig: list[int], question: int, before: int, depth: int) -> int | None:
        rest = sig[sig.index(question) + 1 :]
        colons = [k for k in self._top_level(rest) if self.view.tokens[k].text == ":"]
        if not colons:
            return None
        cut = rest.index(colons[0])
        limits = [self.upper(rest[:cut], before, depth), self.upper(rest[cut + 1 :], before, depth)]
        return None if None in limits else max(v for v in limits if v is not None)

    def _upper_min(self, sig: list[int], before: int, depth: int) -> int | None:
        opener = next((k for k in sig if self.view.tokens[k].text == "("), None)
        if opener is None or self.view.match.get(opener) != sig[-1]:
            return None
        limits = [
            self.upper(self.view.sig_in(*arg), before, depth)
            for arg in self.view.arguments(opener, sig[-1])
        ]
        known = [v for v in limits if v is not None]
        return min(known) if known else None

    def _quotient(
        self, parts: list[list[int]], operator: str, before: int, depth: int
    ) -> int | None:
        numerator, divisor = parts
        if operator == "%":
            limit = self.upper(divisor, before, depth)
            return None if limit is None else limit - 1
        top = self.upper(numerator, before, depth)
        if top is None and self._is_block_size(numerator, before, depth):
            top = MAX_BLOCK_THREADS
        bottom = self._lower(divisor, before, depth)
        return None if top is None or not bottom else top // bottom

    def _is_block_size(self, sig: list[int], before: int, depth: int) -> bool:
        sig = self._strip(sig)
        texts = self.texts(sig)
        if len(texts) == 3 and texts[:2] == ["blockDim", "."]:
            return True
        if len(texts) != 1 or self.view.tokens[sig[0]].kind is not Kind.IDENT or depth == 0:
            return False
        definition = self._definition(texts[0], before)
        if definition is not None:
            return self._is_block_size(definition, before, depth - 1)
        # a parameter (a kernel template's blockSize) or a macro of another file: its name says
        return _BLOCK_SIZE_RE.match(texts[0]) is not None and not self._written(texts[0])

    def _lower(self, sig: list[int], before: int, depth: int) -> int | None:
        """A lower limit of a divisor: a literal, warpSize, or a name defined once from one."""
        sig = self._strip(sig)
        if len(sig) != 1:
            return None
        token = self.view.tokens[sig[0]]
        if token.kind is Kind.NUMBER:
            return literal_value(token.text)
        if token.text == "warpSize":
            return MIN_WAVE_SIZE
        definition = self._definition(token.text, before) if depth > 0 else None
        return None if definition is None else self._lower(definition, before, depth - 1)

    def _upper_atom(self, index: int, before: int, depth: int) -> int | None:
        token = self.view.tokens[index]
        if token.kind is Kind.NUMBER:
            return literal_value(token.text)
        if token.kind is not Kind.IDENT or depth == 0:
            return None
        definition = self._definition(token.text, before)
        return None if definition is None else self.upper(definition, before, depth - 1)

    # ---- names defined once ----------------------------------------------------------------

    def _written(self, name: str) -> bool:
        """Whether the function body assigns to ``name`` or steps it."""
        return self.body is not None and self._variable(name, self.body[1], *self.body) == []

    def _definition(self, name: str, before: int) -> list[int] | None:
        """The expression a name is defined by, when it is defined once and never written again:
        a variable of the function, an object-like ``#define``, or a variable of the file
        outside every function (unless the function has a parameter of that name)."""
        view = self.view
        local = self._variable(name, before, *self.body) if self.body else None
        if local is not None:
            return local or None
        defines = [
            view.sig_in(d.start, d.end)
            for d in view.directives
            if d.name == "define" and view.range_text(d.start, d.end).split()[2:3] == [name]
        ]
        if len(defines) == 1 and len(defines[0]) > 3:
            sig = defines[0]
            function_like = view.tokens[sig[3]].text == "(" and sig[3] == sig[2] + 1
            return None if function_like else sig[3:]
        if defines or self._is_parameter(name):
            return None
        outside: list[int] | None = None
        for start, end in self._file_scope():
            found = self._variable(name, before, start, end)
            if found is not None:
                if outside is not None or not found:
                    return None
                outside = found
        return outside

    def _is_parameter(self, name: str) -> bool:
        if self.body is None:
            return False
        close = self.view.prev_sig(self.body[0])
        while close is not None and self.view.text_of(close) != ")":
            close = self.view.prev_sig(close)
        opener = self.view.match.get(close) if close is not None else None
        return opener is not None and name in self.texts(self.view.sig_in(opener, close or opener))

    def _file_scope(self) -> list[tuple[int, int]]:
        """Token ranges outside every function body (namespaces and file level)."""
        bodies = sorted(
            (k, self.view.match[k])
            for k in self.view.sig
            if self.view.tokens[k].text == "{"
            and k in self.view.match
            and function_name(self.view, k)
        )
        ranges: list[tuple[int, int]] = []
        start = 0
        for open_index, close_index in bodies:
            if open_index < start:
                continue  # a lambda or local class inside a body already left out
            ranges.append((start, open_index))
            start = close_index + 1
        return [*ranges, (start, len(self.view.tokens))]

    def _variable(self, name: str, before: int, start: int, end: int) -> list[int] | None:
        """The initializer of ``name`` in [start, end): [] when the name is written or declared
        more than once or its address is taken there; None when it is not defined there."""
        view = self.view
        tokens = view.tokens
        definitions: list[list[int]] = []
        for k in view.sig_in(start, end):
            if tokens[k].text != name:
                continue
            after, prior = view.next_sig(k), view.prev_sig(k)
            if view.text_of(after) in _STEPS or view.text_of(prior) in _STEPS:
                return []
            if view.text_of(prior) == "&" and (
                prior is None or tokens[view.prev_sig(prior) or prior].kind is Kind.PUNCT
            ):
                return []
            if view.text_of(prior) in (".", "->", "::"):
                continue
            if view.text_of(after) not in _WRITES or after is None:
                continue
            if view.text_of(after) != "=" or k > before or not self._declares(k):
                return []  # a compound assignment, a later definition, or a plain assignment
            definitions.append(self._initializer(after))
        if len(definitions) > 1:
            return []
        return definitions[0] if definitions else None

    def _declares(self, name: int) -> bool:
        """Whether the statement around ``name`` declares it: only type words before it
        (``const unsigned int tid = ...``), not a template's default argument, a for-header or
        a second declarator."""
        start, _ = self.view.statement_bounds(name)
        before = [k for k in self.view.sig_in(start, name) if k not in self.view.directive_at]
        return bool(before) and all(
            (self.view.tokens[k].kind is Kind.IDENT and self.view.tokens[k].text not in _NOT_TYPES)
            or self.view.tokens[k].text == "::"
            for k in before
        )

    def _initializer(self, equals: int) -> list[int]:
        sig: list[int] = []
        k = self.view.next_sig(equals)
        while k is not None and self.view.tokens[k].text not in (";", ","):
            if self.view.tokens[k].text in ("(", "[", "{") and k in self.view.match:
                sig.extend(self.view.sig_in(k, self.view.match[k] + 1))
                k = self.view.next_sig(self.view.match[k])
                continue
            sig.append(k)
            k = self.view.next_sig(k)
        return sig

    # ---- token lists ---------------------------------------------------------------------

    def _strip(self, sig: list[int]) -> list[int]:
        """Without parentheses around the whole."""
        while (
            len(sig) >= 2
            and self.view.match.get(sig[0]) == sig[-1]
            and self.texts(sig[:1]) == ["("]
        ):
            sig = sig[1:-1]
        return sig

    def _top_level(self, sig: list[int]) -> list[int]:
        """The tokens of ``sig`` outside any bracket pair."""
        top: list[int] = []
        skip_until = -1
        for k in sig:
            if k <= skip_until:
                continue
            if self.view.tokens[k].text in ("(", "[", "{") and k in self.view.match:
                skip_until = self.view.match[k]
                continue
            top.append(k)
        return top

    def _split(self, sig: list[int], operator: str) -> list[list[int]]:
        cuts = [k for k in self._top_level(sig) if self.view.tokens[k].text == operator]
        parts: list[list[int]] = []
        rest = sig
        for cut in cuts:
            position = rest.index(cut)
            parts.append(rest[:position])
            rest = rest[position + 1 :]
        return [*parts, rest]
