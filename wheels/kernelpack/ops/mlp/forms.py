"""The kernel forms the MLP geometry picks, by name, and retiring one for a measurement.

A form is a kernel (or a launch choice) the geometry (:mod:`.geometry`) takes over a more general
one where a shape allows it; each test that picks one asks :func:`offered` first, which is always
true but inside :func:`retired`, the benchmark's hook (bench/bench_mlp.py --forms).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

# Each form the geometry may pick over a more general one, by name: what it is, and what the
# host takes where it is retired. A form earns its place by a row of the committed benchmark
# (bench/bench_mlp.py --forms, docs/bench-mlp-forms.md: at least 3% over the host's next choice);
# retiring one is deleting its entry here, its test in the geometry function that picks it, and
# its templates and instantiations in mlp.cu (docs/mlp-tuning.md, "Kernel forms").
FORMS: Mapping[str, str] = {
    "fixed": "fixed-length forward norms (*_fixed, *_fixed_full); else short or general",
    "fixed_streaming": "few-row fixed norms through streaming hints (*_fixed); else *_fixed_full",
    "short_rows": "short-row forward norms (*_short); else the general kernel",
    "exact": "exact elementwise forms (*_exact, *_exact_streaming); else the general kernels",
    "exact_streaming": "16-byte exact elementwise forms with streaming hints; else plain exact",
    "narrow": "8-byte vectors where 16-byte ones leave SMs idle; else 16-byte vectors",
    "short_backward": "short-row norm backward (*_backward_short); else rms_norm_backward",
    "fixed_backward": "fixed-length short backward (*_backward_fixed); else *_backward_short",
}
_retired: frozenset[str] = frozenset()


def offered(form: str) -> bool:
    """Whether the host may pick ``form`` (one of FORMS): always, but inside :func:`retired`."""
    return form not in _retired


@contextlib.contextmanager
def retired(*forms: str) -> Iterator[None]:
    """Inside, the geometry picks what it would if ``forms`` did not exist: the benchmark's
    hook for timing a form against the host's next choice (bench/bench_mlp.py --forms), and
    the tests'. Not for production calls: the hot path's prepared entries (kernelpack.ops.mlp.hot)
    keep the plans made outside, and the caller clears them."""
    global _retired
    unknown = sorted(set(forms) - set(FORMS))
    if unknown:
        raise ValueError(f"unknown kernel forms {unknown}; known: {', '.join(FORMS)}")
    saved = _retired
    _retired = saved | frozenset(forms)
    try:
        yield
    finally:
        _retired = saved
