"""Facts about a CUDA source that translation needs before it walks the tokens: kernel launches,
the names the file declares, namespace aliases and cooperative-groups variables."""

from __future__ import annotations

from dataclasses import dataclass

from .lexer import Kind
from .structure import SourceView

# Keywords that can stand before a name without being its type (``return x;``).
NOT_TYPES = frozenset(
    {
        "return",
        "else",
        "case",
        "throw",
        "new",
        "delete",
        "sizeof",
        "do",
        "goto",
        "co_return",
        "co_await",
        "co_yield",
        "typeid",
        "alignof",
        "decltype",
        "if",
        "while",
        "for",
        "switch",
        "defined",
        "and",
        "or",
        "not",
    }
)
CG_GROUP_MAKERS = frozenset(
    {"tiled_partition", "coalesced_threads", "thread_block_tile", "coalesced_group"}
)


@dataclass(frozen=True)
class Launch:
    open_config: int  # '<<<'
    close_config: int  # '>>>'
    open_args: int
    close_args: int


def find_launches(view: SourceView) -> dict[int, Launch]:
    """Kernel launches ``name<<<...>>>(...)`` by the token index where the kernel name starts."""
    launches: dict[int, Launch] = {}
    for index in view.sig:
        if view.tokens[index].text != "<<<":
            continue
        close_config = next(
            (i for i in view.sig if i > index and view.tokens[i].text == ">>>"), None
        )
        if close_config is None:
            continue
        parens = view.call_parens(close_config)
        start = _kernel_name_start(view, index)
        if parens is None or start is None:
            continue
        launches[start] = Launch(index, close_config, parens[0], parens[1])
    return launches


def _kernel_name_start(view: SourceView, launch: int) -> int | None:
    k = view.prev_sig(launch)
    if k is None:
        return None
    if view.tokens[k].text == ">":
        depth = 0
        while k is not None:
            text = view.tokens[k].text
            if text == ">":
                depth += 1
            elif text == "<":
                depth -= 1
                if depth == 0:
                    break
            k = view.prev_sig(k)
        if k is None:
            return None
        k = view.prev_sig(k)
    if k is None or view.tokens[k].kind is not Kind.IDENT:
        return None
    while True:
        scope = view.prev_sig(k)
        if view.text_of(scope) != "::" or scope is None:
            return k
        qualifier = view.prev_sig(scope)
        if qualifier is None or view.tokens[qualifier].kind is not Kind.IDENT:
            return scope
        k = qualifier


def declared_names(view: SourceView) -> frozenset[str]:
    """Names the file itself defines (macros, functions, variables, types): not left-over CUDA API."""
    names: set[str] = set()
    for _, sig in view.directives_named("define"):
        if len(sig) >= 3:
            names.add(view.tokens[sig[2]].text)
    for pos in range(1, len(view.sig) - 1):
        token = view.tokens[view.sig[pos]]
        if token.kind is not Kind.IDENT:
            continue
        before = view.tokens[view.sig[pos - 1]]
        after = view.tokens[view.sig[pos + 1]].text
        type_like = (before.kind is Kind.IDENT and before.text not in NOT_TYPES) or before.text in (
            "*",
            "&",
            ">",
        )
        if type_like and after in ("(", "=", ";", ",", "[", ")", "{"):
            names.add(token.text)
    return frozenset(names)


def namespace_aliases(view: SourceView, namespace: str) -> frozenset[str]:
    """Names declared as ``namespace alias = <namespace>;`` (``namespace cg = cooperative_groups``)."""
    aliases: set[str] = set()
    for pos in range(len(view.sig) - 3):
        texts = [view.tokens[view.sig[pos + n]].text for n in range(4)]
        if texts[0] == "namespace" and texts[2] == "=" and texts[3] == namespace:
            aliases.add(texts[1])
    return frozenset(aliases)


def cg_group_variables(view: SourceView) -> frozenset[str]:
    """Variables holding cooperative-groups tiles or coalesced groups."""
    names: set[str] = set()
    for index in view.sig:
        if view.tokens[index].text not in CG_GROUP_MAKERS:
            continue
        start, end = view.statement_bounds(index)
        sig = view.sig_in(start, end)
        texts = [view.tokens[i].text for i in sig]
        if "=" in texts:
            at = texts.index("=")
            if at > 0 and view.tokens[sig[at - 1]].kind is Kind.IDENT:
                names.add(texts[at - 1])
        elif texts and view.tokens[sig[-1]].kind is Kind.IDENT:
            names.add(texts[-1])
    return frozenset(names)
