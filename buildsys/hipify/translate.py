"""CUDA -> HIP translation of one source text: pure, no file I/O (the builder calls it directly).

The translator walks the token stream (lexer.py) and replaces whole identifier tokens by the
tables (tables.py); calls whose arguments change shape (warp intrinsics, kernel-pointer
arguments, launches) are rewritten argument by argument, recursively, so nested calls translate
too. Diagnostics point at the CUDA source's line and column. Output is deterministic and
translating it again gives it back unchanged: nothing the translator emits is a CUDA name, the
inserted includes and macros above the text are only inserted when absent (prelude.py), and the
generated-file header line is kept when the input already starts with one.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .arch_features import DROPPED_DEFINITION, FeatureDefinition, decisions_for, source_text
from .finding import Finding
from .hazards import MaskKind, classify_mask, full_mask_names
from .lexer import Kind
from .prelude import PreludeNeeds, insert_prelude
from .reporting import is_cuda_std, ptx_call, ptx_idiom, report
from .results import (
    GENERATED_PREFIX,
    Conversion,
    HipifyOptions,
    HipifyResult,
    HipifyStats,
    generated_header,
    source_sha256,
)
from .source_scan import (
    CG_GROUP_MAKERS,
    NOT_TYPES,
    cg_group_variables,
    declared_names,
    find_launches,
    namespace_aliases,
)
from .structure import Directive, SourceView
from .tables import (
    ACTIVEMASK_REPLACEMENT,
    BALLOT_NAMES,
    BALLOT_WIDENING,
    CALL_REWRITES,
    CG_SYNC_MEMBERS,
    COMPAT_CG_MEMBERS,
    COMPAT_FUNCTIONS,
    COMPAT_HOST_FUNCTIONS,
    COMPAT_MACROS,
    COMPAT_TILE_MEMBERS,
    CUDA_ARCH_MACRO,
    CUDA_ARCH_REPLACEMENT,
    HIP_DEVICE_PASS_MACRO,
    KERNEL_POINTER_ARG,
    QUALIFIED_RENAMES,
    REMOVED_STORAGE_CLASS,
    RENAMES,
    SOFTWARE_TEXTURE_FUNCTIONS,
    SOFTWARE_TEXTURE_HOST_CALLS,
    SYNCWARP_REPLACEMENT,
    TEXTURE_NAMESPACE,
    VERSION_MACROS,
    WARP_BY_NAME,
    WMMA_HEADER,
    header_target,
    library_prelude,
    library_rename,
)
from .tree_facts import scan_tree
from .vector_operators import RedundantOperator, redundant_vector_operators

__all__ = [
    "Conversion",
    "HipifyOptions",
    "HipifyResult",
    "HipifyStats",
    "generated_header",
    "hipify_source",
    "source_sha256",
]

# Directive words after which a name is a macro's name, not a use (#define register, #ifdef register)
_MACRO_NAMING = frozenset({"define", "undef", "ifdef", "ifndef", "defined"})


def hipify_source(text: str, path: str, *, options: HipifyOptions | None = None) -> HipifyResult:
    """Translate one CUDA source. ``path`` names it in diagnostics and in the header line."""
    view = SourceView(text)
    translator = _Translator(view, path, options or HipifyOptions())
    body = translator.emit(0, len(view.tokens))
    header = "" if text.startswith(GENERATED_PREFIX) else generated_header(path, text)
    needs = PreludeNeeds(
        translated=any(kind != "include" for kind, _, _ in translator.counts),
        compat=translator.uses_compat,
        texture=translator.uses_texture,
        version_macros=frozenset(translator.version_macros),
        warp_sync_member=translator.warp_sync_member,
    )
    body, warp_sync = insert_prelude(view, body, header, needs)
    if warp_sync is not None:
        translator.findings.append(warp_sync)
    diagnostics = report(
        view,
        path,
        translator.findings,
        translator.full_names,
        translator.declared,
        translator.decisions.dead_ranges,
        translator.tree.lane_reductions,
    )
    conversions = tuple(
        sorted(Conversion(kind, cuda, hip, n) for (kind, cuda, hip), n in translator.counts.items())
    )
    lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    return HipifyResult(body, diagnostics, HipifyStats(lines, conversions))


@dataclass
class _Translator:
    view: SourceView
    path: str
    options: HipifyOptions
    counts: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    findings: list[Finding] = field(default_factory=list)
    warp_sync_member: int | None = None
    uses_compat: bool = False
    uses_texture: bool = False
    version_macros: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.full_names = full_mask_names(self.view)
        self.declared = declared_names(self.view)
        self.group_variables = cg_group_variables(self.view)
        self.launches = find_launches(self.view) if self.options.launch_macro else {}
        self.cg_aliases = namespace_aliases(self.view, "cooperative_groups")
        self.tree = self.options.tree or scan_tree({self.path: self.view.text})
        features = self.tree.arch_features
        self.decisions = decisions_for(self.view, features)
        self.ptx_branches = features.ptx_branches
        self.redundant_operators = redundant_vector_operators(self.view)

    # ---- emission -----------------------------------------------------------------------

    def emit(self, lo: int, hi: int, *, launch_at_start: bool = True) -> str:
        """The translation of tokens[lo:hi] (a launch starting at lo kept as is if not launch_at_start)."""
        view = self.view
        out: list[str] = []
        k = lo
        while k < hi:
            token = view.tokens[k]
            operator = self.redundant_operators.get(k)
            if operator is not None and operator.end <= hi:
                out.append(self._drop_operator(operator))
                k = operator.end
                continue
            directive = view.directive_at.get(k)
            if directive is not None and directive.start == k and directive.name == "include":
                out.append(self._include(directive))
                k = directive.end
                continue
            if directive is not None and directive.start == k:
                dropped = self.decisions.dropped_definitions.get(k)
                if dropped is not None:
                    out.append(self._dropped_definition(directive, dropped))
                    k = directive.end
                    continue
                if k in self.decisions.switched_guards:
                    missing = self.decisions.switched_guards[k]
                    out.append(self._switched_guard(directive, missing))
                    k = directive.end
                    continue
            if k in self.launches and (launch_at_start or k != lo):
                text, k = self._launch(k)
                out.append(text)
                continue
            if token.kind is Kind.IDENT:
                rewritten = self._identifier(k)
                if rewritten is not None:
                    out.append(rewritten[0])
                    k = rewritten[1]
                    continue
            out.append(token.text)
            k += 1
        return "".join(out)

    def _count(self, kind: str, cuda: str, hip: str) -> None:
        self.counts[(kind, cuda, hip)] += 1

    def _identifier(self, k: int) -> tuple[str, int] | None:
        view = self.view
        name = view.tokens[k].text
        before = view.prev_sig(k)
        before_text = view.text_of(before)
        if before_text in (".", "->"):
            self._note_group_member(k, before)
            return None
        if name == "cuda" and is_cuda_std(self.view, k) and not self._in_user_scope(before):
            # libcu++'s cuda::std mirrors the standard library, whose constexpr parts
            # (numeric_limits, ...) HIP compiles in device code.
            std = view.next_sig(view.next_sig(k) or k)
            self._count("namespace", "cuda::std", "std")
            return "std", (std or k) + 1
        if before_text == "::" and before is not None:
            scope = view.prev_sig(before)
            if scope is not None and view.tokens[scope].kind is Kind.IDENT:
                qualified = QUALIFIED_RENAMES.get((view.tokens[scope].text, name))
                if qualified is not None:  # thrust::cuda::par -> thrust::hip::par
                    self._count("library", f"{view.tokens[scope].text}::{name}", qualified)
                    return qualified, k + 1
                if name in COMPAT_CG_MEMBERS and self._is_cg_scope(view.tokens[scope].text):
                    self.uses_compat = True
                return None  # a member of a user's namespace or class, not the CUDA API
        if name == REMOVED_STORAGE_CLASS and not self._names_macro(before):
            return self._removed_storage_class(k)
        if name in ("asm", "__asm__", "__asm"):
            call = ptx_call(view, k)
            if call is not None:
                function, operands, close = call
                self.uses_compat = True
                self._count("asm", view.range_text(k, close + 1).split('"')[1], function)
                operand_text = ", ".join(self.emit(lo, hi).strip() for lo, hi in operands)
                return f"{function}({operand_text})", close + 1
            idiom = ptx_idiom(view, k)
            if idiom is None:
                return None
            hip, output, close = idiom
            self._count("asm", view.range_text(k, close + 1).split('"')[1], hip)
            if output is None:
                return hip, close + 1
            return f"({self.emit(*output).strip()}) = {hip}", close + 1
        parens = view.call_parens(k)
        intrinsic = WARP_BY_NAME.get(name)
        if intrinsic is not None and parens is not None:
            # the compat header adds the bf16 shuffles HIP lacks (cuda_bf16.h has them)
            self.uses_compat |= intrinsic.hip.startswith("__shfl")
            return self._warp_call(k, intrinsic.hip, intrinsic.mask_arg, parens)
        if name == "__activemask" and parens is not None and not view.arguments(*parens):
            self._count("warp", name, ACTIVEMASK_REPLACEMENT)
            return ACTIVEMASK_REPLACEMENT, parens[1] + 1
        if name == "__syncwarp" and parens is not None:
            self._count("warp", name, "__builtin_amdgcn_wave_barrier")
            return SYNCWARP_REPLACEMENT, parens[1] + 1
        if name in BALLOT_WIDENING and parens is not None and self._has_ballot(*parens):
            wide = BALLOT_WIDENING[name]
            self._count("warp", name, wide)
            return wide + self.emit(k + 1, parens[1] + 1), parens[1] + 1
        if name in CALL_REWRITES and parens is not None:
            template = CALL_REWRITES[name]
            args = [self.emit(start, end).strip() for start, end in view.arguments(*parens)]
            if len(args) == template.count("{"):
                self._count("device_function", name, template.split("(", 1)[0])
                return template.format(*args), parens[1] + 1
        if name in VERSION_MACROS:
            replacement = VERSION_MACROS[name][0]
            self.version_macros.add(name)
            self._count("version", name, replacement)
            return replacement, k + 1
        if name == CUDA_ARCH_MACRO:
            if self._tests_definition(k):
                self._count("define", name, HIP_DEVICE_PASS_MACRO)
                return HIP_DEVICE_PASS_MACRO, k + 1
            self.uses_compat = True
            self._count("define", name, CUDA_ARCH_REPLACEMENT)
            return CUDA_ARCH_REPLACEMENT, k + 1
        if (name in COMPAT_FUNCTIONS or name in COMPAT_HOST_FUNCTIONS) and parens is not None:
            self.uses_compat = True
        if name in COMPAT_MACROS:
            self.uses_compat = True
        texture = self._software_texture(k, name, parens)
        if texture is not None:
            return texture
        rename = RENAMES.get(name)
        if rename is not None:
            self._count(rename.kind, name, rename.hip)
            position = KERNEL_POINTER_ARG.get(rename.hip)
            if position is not None and parens is not None:
                return self._kernel_pointer_call(rename.hip, k, position, parens)
            return rename.hip, k + 1
        library = library_rename(name)
        if library is not None:
            self._count("library", name, library)
            return library, k + 1
        return None

    def _software_texture(
        self, k: int, name: str, parens: tuple[int, int] | None
    ) -> tuple[str, int] | None:
        """A texture fetch (``tex2D<float>(t, x, y)``) or texture host call becomes the compat
        layer's (kernelpack_hip_texture.h), which fetches in software on the targets without
        image instructions and is HIP's own elsewhere; a name the file declares stays its own."""
        if name in self.declared:
            return None
        if name in SOFTWARE_TEXTURE_FUNCTIONS and self.view.text_of(self.view.next_sig(k)) in (
            "(",
            "<",
        ):
            replacement = TEXTURE_NAMESPACE + name
        elif name in SOFTWARE_TEXTURE_HOST_CALLS and parens is not None:
            replacement = SOFTWARE_TEXTURE_HOST_CALLS[name]
        else:
            return None
        self.uses_texture = True
        self._count("texture", name, replacement)
        return replacement, k + 1

    def _names_macro(self, before: int | None) -> bool:
        """Whether the name after token ``before`` is a macro's name (``#define register``,
        ``defined(register)``), not a use."""
        view = self.view
        if view.text_of(before) == "(" and before is not None:
            before = view.prev_sig(before)
            return view.text_of(before) == "defined"
        return view.text_of(before) in _MACRO_NAMING

    def _removed_storage_class(self, k: int) -> tuple[str, int]:
        """``register`` (the keyword: a C++ identifier cannot be spelt so, and comments and
        strings are other tokens) dropped with the blanks after it, once noted per file."""
        self.findings.append(
            Finding(
                k,
                "register-removed",
                "'register' removed: C++17 has no register storage class (nvcc accepts it under "
                "-std=c++17, clang refuses it); the compiler allocates registers either way",
                key=REMOVED_STORAGE_CLASS,
            )
        )
        self._count("keyword", REMOVED_STORAGE_CLASS, "(removed)")
        after = k + 1
        tokens = self.view.tokens
        if (
            after < len(tokens)
            and tokens[after].kind is Kind.SPACE
            and "\n" not in tokens[after].text
        ):
            after += 1
        return "", after

    def _warp_call(
        self, k: int, hip: str, mask_arg: int, parens: tuple[int, int]
    ) -> tuple[str, int]:
        view = self.view
        open_index, close_index = parens
        args = view.arguments(open_index, close_index)
        name = view.tokens[k].text
        if len(args) <= mask_arg + 1:
            return name + self.emit(k + 1, close_index + 1), close_index + 1
        mask_start, mask_end = args[mask_arg]
        kind, _ = classify_mask(view, mask_start, mask_end, self.full_names)
        if kind is MaskKind.VARIABLE:
            mask_sig = view.sig_in(mask_start, mask_end)
            self.findings.append(
                Finding(
                    mask_sig[0],
                    "mask-dropped",
                    f"lane mask '{view.range_text(mask_start, mask_end)}' of {name} dropped: "
                    f"{hip} acts on the lanes that are active, which is what an active-lane mask asks for",
                )
            )
        kept = [self.emit(start, end) for n, (start, end) in enumerate(args) if n != mask_arg]
        kept[0] = kept[0].lstrip()
        self._count("warp", name, hip)
        return hip + self.emit(k + 1, open_index) + "(" + ",".join(kept) + ")", close_index + 1

    def _kernel_pointer_call(
        self, hip: str, k: int, position: int, parens: tuple[int, int]
    ) -> tuple[str, int]:
        open_index, close_index = parens
        pieces = [
            self.emit(start, end) for start, end in self.view.arguments(open_index, close_index)
        ]
        if position < len(pieces):
            piece = pieces[position]
            stripped = piece.strip()
            if not stripped.startswith(("reinterpret_cast", "(const void", "(void", "static_cast")):
                lead = piece[: len(piece) - len(piece.lstrip())]
                trail = piece[len(piece.rstrip()) :]
                pieces[position] = f"{lead}reinterpret_cast<const void*>({stripped}){trail}"
        return hip + self.emit(k + 1, open_index) + "(" + ",".join(pieces) + ")", close_index + 1

    def _has_ballot(self, open_index: int, close_index: int) -> bool:
        tokens = self.view.tokens
        return any(tokens[i].text in BALLOT_NAMES for i in range(open_index, close_index))

    def _in_user_scope(self, before: int | None) -> bool:
        """Whether the token before a name is the '::' of ``scope::`` (a user's namespace)."""
        if self.view.text_of(before) != "::" or before is None:
            return False
        scope = self.view.prev_sig(before)
        return (
            scope is not None
            and self.view.tokens[scope].kind is Kind.IDENT
            and self.view.tokens[scope].text not in NOT_TYPES
        )

    def _is_cg_scope(self, scope: str) -> bool:
        """Whether ``scope`` names cooperative_groups (itself or a namespace alias of it)."""
        return scope == "cooperative_groups" or scope in self.cg_aliases

    def _tests_definition(self, k: int) -> bool:
        """Whether __CUDA_ARCH__ at k is tested for being defined (#ifdef, defined(...))."""
        directive = self.view.directive_at.get(k)
        if directive is None:
            return False
        if directive.name in ("ifdef", "ifndef"):
            return True
        before = self.view.prev_sig(k)
        if self.view.text_of(before) == "(" and before is not None:
            before = self.view.prev_sig(before)
        return self.view.text_of(before) == "defined"

    def _drop_operator(self, dropped: RedundantOperator) -> str:
        """A comment in place of a user operator HIP's vector types define (vector_operators),
        with the definition's line breaks, so later lines keep their numbers."""
        signature = f"operator{dropped.operator}({dropped.vector_type}, {dropped.vector_type})"
        self._count("vector_operator", signature, "HIP_vector_type")
        tokens = self.view.tokens[dropped.start : dropped.end]
        lines = sum(token.text.count("\n") for token in tokens)
        return f"/* hipify: {signature} is HIP's own */" + "\n" * lines

    def _note_group_member(self, k: int, dot: int | None) -> None:
        """Remember a cooperative-groups vote member call (tile.ballot(p)) that HIP guards."""
        view = self.view
        if view.tokens[k].text in COMPAT_TILE_MEMBERS and dot is not None:
            # the compat header adds tile shuffles of vector and 16-bit float types
            self.uses_compat |= view.text_of(view.prev_sig(dot)) in self.group_variables
        if view.tokens[k].text not in CG_SYNC_MEMBERS or view.call_parens(k) is None or dot is None:
            return
        owner = view.prev_sig(dot)
        owner_text = view.text_of(owner)
        is_group = owner_text in self.group_variables
        if owner_text == ")" and owner is not None:
            start, end = view.statement_bounds(owner)
            is_group = any(view.tokens[i].text in CG_GROUP_MAKERS for i in range(start, end))
        if is_group and self.warp_sync_member is None:
            self.warp_sync_member = k

    def _include(self, directive: Directive) -> str:
        view = self.view
        sig = view.sig_in(directive.start, directive.end)
        text = "".join(t.text for t in view.tokens[directive.start : directive.end])
        if len(sig) < 3:
            return text
        first = view.tokens[sig[2]]
        if first.kind is Kind.STRING and first.text.startswith('"'):
            header, open_text, close_text, last = first.text[1:-1], '"', '"', sig[2]
        elif first.text == "<":
            closing = next((i for i in sig[3:] if view.tokens[i].text == ">"), None)
            if closing is None:
                return text
            header = "".join(t.text for t in view.tokens[sig[2] + 1 : closing])
            open_text, close_text, last = "<", ">", closing
        else:
            return text
        target = header_target(header)
        start = view.tokens[directive.start]
        prelude = library_prelude(target or header, start.line, view.text[: start.offset])
        if target is None:
            return prelude + text
        self._count("include", header, target)
        # the CLI, the builder and the corpus bench ship the compat folder to files that include
        # the compat header: a WMMA user gets it too
        self.uses_compat |= target == WMMA_HEADER
        head = "".join(t.text for t in view.tokens[directive.start : sig[2]])
        tail = "".join(t.text for t in view.tokens[last + 1 : directive.end])
        return f"{prelude}{head}{open_text}{target}{close_text}{tail}"

    def _dropped_definition(self, directive: Directive, feature: FeatureDefinition) -> str:
        """A feature macro AMD leaves undefined: a comment in its place (as many lines)."""
        view = self.view
        text = "".join(t.text for t in view.tokens[directive.start : directive.end])
        name = view.sig_in(directive.start, directive.end)[2]
        branches = self.ptx_branches.get(feature.name, 0)
        self.findings.append(
            Finding(
                name,
                "arch-feature",
                f"{feature.name} is defined only under '#if {feature.guard}' and selects inline "
                f"PTX in {branches} branch{'es' if branches != 1 else ''}, each with an alternative: "
                "left undefined on AMD, so "
                f"every test of {feature.name} takes its alternative, as on an NVIDIA GPU "
                "without the feature",
            )
        )
        self._count("define", feature.name, "(undefined on AMD)")
        return f"{DROPPED_DEFINITION}{feature.name}" + "\n" * text.count("\n")

    def _switched_guard(self, directive: Directive, missing: str) -> str:
        """``#if <arch guard>`` over inline PTX (``missing``, or an intrinsic HIP lacks) with an
        alternative: not taken on AMD."""
        view = self.view
        sig = view.sig_in(directive.start, directive.end)
        head = "".join(t.text for t in view.tokens[directive.start : sig[1] + 1])
        condition = self.emit(sig[2], sig[-1] + 1).strip()
        tail = "".join(t.text for t in view.tokens[sig[-1] + 1 : directive.end])
        self.findings.append(
            Finding(
                sig[1],
                "arch-feature",
                f"'#{directive.name} {source_text(view, sig[2], sig[-1] + 1)}' selects {missing}: "
                f"not taken on AMD ({'no AMD GPU has it' if missing == 'inline PTX' else 'HIP lacks it'}), "
                "the source's alternative branch is compiled instead",
            )
        )
        return f"{head} 0 /* hipify: {missing}, not on AMD */ && ({condition}){tail}"

    def _launch(self, k: int) -> tuple[str, int]:
        launch = self.launches[k]
        name = self.emit(k, launch.open_config, launch_at_start=False).strip()
        if "<" in name:
            name = f"HIP_KERNEL_NAME({name})"
        config = [
            self.emit(start, end).strip()
            for start, end in self.view.arguments(launch.open_config, launch.close_config)
        ]
        config += ["0"] * (4 - len(config))
        kernel_args = self.emit(launch.open_args + 1, launch.close_args).strip()
        self._count("kernel_launch", "<<<>>>", "hipLaunchKernelGGL")
        parts = [name, *config] + ([kernel_args] if kernel_args else [])
        return "hipLaunchKernelGGL(" + ", ".join(parts) + ")", launch.close_args + 1
