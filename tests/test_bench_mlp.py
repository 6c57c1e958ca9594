"""bench/bench_mlp.py's verdict on a row: which peer ours trails, and whether by more than the
run's spread; and its --forms mode's choice of rows and next forms, and its verdicts. The GPU
timing itself runs on the lent GPU only (`nox -s gpu`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from bench.bench_mlp import (
    OP_LIST,
    FormCase,
    FormTiming,
    Row,
    Timing,
    form_cases,
    form_verdicts,
    forms_picked,
    gaps,
    pass_launches,
    render_forms,
    rounds_settling_behind,
)
from kernelpack.ops.mlp import forms as mlp_forms
from kernelpack.ops.mlp import geometry as mlp_geometry

H200 = mlp_geometry.DeviceFacts("sm_90", 132)


@pytest.mark.parametrize(
    ("rounds", "settling"),
    # By hand: two-sided sign test, p = 2 * P(X >= k), X ~ Binomial(n, 1/2), the least k with
    # p < 0.05. n=5: even k=5 gives 2/32 = 0.0625. n=6: 2/64 = 0.031. n=9: k=8 gives
    # 2 * 10/512 = 0.039, k=7 gives 2 * 46/512 = 0.18. n=20: k=15 gives 2 * 21700/2^20 = 0.041,
    # k=14 gives 2 * 60460/2^20 = 0.115.
    [(1, None), (5, None), (6, 6), (9, 8), (20, 15)],
)
def test_rounds_settling_behind_is_the_sign_test(rounds: int, settling: int | None) -> None:
    assert rounds_settling_behind(rounds) == settling


def _row(ours: list[float], compiled: list[float], liger: list[float] | None) -> Row:
    return Row(
        "rms_norm",
        "float32",
        64,
        4096,
        "forward",
        Timing(tuple(ours), True),
        None if liger is None else Timing(tuple(liger), True),
        Timing(tuple(compiled), True),
        2 * 64 * 4096 * 4,
    )


def test_gaps_name_each_slower_median_with_its_rounds() -> None:
    # Slower than compile in every round; slower than Liger-Kernel in the median only, losing
    # 5 of 9 rounds; a row level with both has no gap.
    ours = [3.0, 3.1, 3.2, 3.3, 3.4, 3.5, 3.6, 3.7, 3.8]
    compiled = [t - 0.05 for t in ours]
    liger = [3.05, 3.15, 3.25, 3.35, 3.39, 3.49, 3.59, 3.69, 3.79]
    behind = gaps([_row(ours, compiled, liger), _row(ours, ours, None)])
    assert [(gap.peer, gap.lost_rounds, gap.beyond_spread) for gap in behind] == [
        ("Liger-Kernel", 5, False),
        ("torch.compile", 9, True),
    ]
    assert behind[1].line() == (
        "- rms_norm float32 64x4096 forward, behind torch.compile by 0.05 µs (1.5%): slower in "
        "9 of 9 rounds, beyond the run's spread"
    )
    assert behind[0].line().endswith("slower in 5 of 9 rounds, within the run's spread")


def test_a_row_of_few_rounds_is_not_judged() -> None:
    (gap,) = gaps([_row([2.0, 2.0, 2.0], [1.0, 1.0, 1.0], None)])
    assert gap.beyond_spread is None
    assert gap.line().endswith("slower in 3 of 3 rounds, too few rounds to tell")


@pytest.mark.parametrize(
    ("what", "spec", "message"),
    [
        ("queue", "rms_norm:float16", "not OP:DTYPE:ROWSxCOLS[:PASS]"),
        ("queue", "rms_norm:int8:64x4096", "no dtype 'int8'"),
        ("queue", "fused_add_rms_norm:float16:1x4096:forward+backward", "is not one of forward"),
        ("workload", "rms_norm:float16:1x4096:forward+backward", "forward only"),
    ],
)
def test_profile_mlp_names_a_bad_row_in_one_line(what: str, spec: str, message: str) -> None:
    """A usage error before any GPU work: one line naming the row and what is wrong, status 2."""
    repo = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo / "wheels"), str(repo)])}
    ran = subprocess.run(
        [sys.executable, str(repo / "bench" / "profile_mlp.py"), what, spec],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert ran.returncode == 2, ran.stderr
    assert "Traceback" not in ran.stderr
    assert f"{what} row {spec!r}: " in ran.stderr
    assert message in ran.stderr


# ---- --forms: which rows pick each form, and what the host takes with it retired -------------

# form -> a row of the benchmark's table that picks it on an H200 (op, dtype, rows, cols,
# forward+backward), the kernel of the launch it changes there, and the host's next choice with
# the form retired, by hand from docs/mlp-tuning.md and mlp.cu (a form added to FORMS without a
# row here fails test_each_form_has_a_row_that_picks_it)
FORM_ROWS = {
    "fixed": (
        ("rms_norm", "bfloat16", 4096, 8192, False),
        "rms_norm_fixed_full<__nv_bfloat16, 8192>",
        "rms_norm<__nv_bfloat16>",
    ),
    "fixed_streaming": (
        ("rms_norm", "bfloat16", 1, 4096, False),
        "rms_norm_fixed<__nv_bfloat16, 4096>",
        "rms_norm_fixed_full<__nv_bfloat16, 4096>",
    ),
    "short_rows": (
        ("rms_norm", "bfloat16", 1, 2048, False),
        "rms_norm_short<__nv_bfloat16>",
        "rms_norm<__nv_bfloat16>",
    ),
    "exact": (
        ("swiglu", "bfloat16", 1, 11008, False),
        "swiglu_exact<__nv_bfloat16, 8>",
        "swiglu<__nv_bfloat16>",
    ),
    "exact_streaming": (
        ("swiglu", "bfloat16", 64, 11008, False),
        "swiglu_exact_streaming<__nv_bfloat16>",
        "swiglu_exact<__nv_bfloat16, 16>",
    ),
    "narrow": (
        ("swiglu", "float32", 1, 11008, False),
        "swiglu_exact<float, 8> grid 43",
        "swiglu_exact_streaming<float> grid 22",
    ),
    "short_backward": (
        ("rms_norm", "bfloat16", 1, 4096, True),
        "rms_norm_backward_fixed<__nv_bfloat16, 4096>",
        "rms_norm_backward<__nv_bfloat16>",
    ),
    "fixed_backward": (
        ("rms_norm", "bfloat16", 1, 4096, True),
        "rms_norm_backward_fixed<__nv_bfloat16, 4096>",
        "rms_norm_backward_short<__nv_bfloat16>",
    ),
}


def _described(launch: tuple[str, object, object], grid: bool) -> str:
    name, launch_grid, _block = launch
    return name.removeprefix("mlp::") + (f" grid {launch_grid}" if grid else "")


def test_each_form_has_a_row_that_picks_it() -> None:
    assert sorted(FORM_ROWS) == sorted(mlp_forms.FORMS)


@pytest.mark.parametrize("form", list(FORM_ROWS))
def test_retiring_a_form_gives_the_hosts_next_choice(form: str) -> None:
    (op, dtype, rows, cols, backward), kept, retired = FORM_ROWS[form]
    picked = pass_launches(op, dtype, rows, cols, backward, H200)
    assert form in forms_picked(op, dtype, rows, cols, backward, H200)
    with mlp_forms.retired(form):
        other = pass_launches(op, dtype, rows, cols, backward, H200)
    grid = form == "narrow"
    assert kept in [_described(launch, grid) for launch in picked]
    assert retired in [_described(launch, grid) for launch in other]
    # outside, the host's choice again
    assert pass_launches(op, dtype, rows, cols, backward, H200) == picked


def test_a_row_picks_only_the_forms_whose_retirement_changes_it() -> None:
    # 1 x 4096 bfloat16 RMSNorm, forward and backward: the few-row fixed form (exact, streaming)
    # and the fixed short backward; no elementwise form
    picked = forms_picked("rms_norm", "bfloat16", 1, 4096, True, H200)
    assert picked == ["fixed", "fixed_streaming", "short_backward", "fixed_backward"]


def test_retired_refuses_an_unknown_form_and_restores_on_exit() -> None:
    unknown = r"unknown kernel forms \['wide'\]; known: fixed, "
    with pytest.raises(ValueError, match=unknown), mlp_forms.retired("wide"):
        pass
    with mlp_forms.retired("fixed"):
        with mlp_forms.retired("exact"):
            assert not mlp_forms.offered("fixed") and not mlp_forms.offered("exact")
        assert mlp_forms.offered("exact") and not mlp_forms.offered("fixed")
    assert all(mlp_forms.offered(form) for form in mlp_forms.FORMS)


def test_the_cases_give_every_form_its_first_row_first() -> None:
    cases = form_cases(H200, OP_LIST, ["bfloat16", "float16", "float32"])
    picked = {case.form for case in cases}
    # every form, the short-row norms on the table's 2048-column rows (not of FIXED_COLUMNS)
    assert picked == set(mlp_forms.FORMS)
    assert len({case.form for case in cases[: len(picked)]}) == len(picked)
    for case in cases:
        assert case.kept != case.retired, case


def _form_timing(form: str, kept: float, retired: float) -> FormTiming:
    (op, dtype, rows, cols, backward), _, _ = FORM_ROWS[form]
    passes = "forward+backward" if backward else "forward"
    launches = pass_launches(op, dtype, rows, cols, backward, H200)
    with mlp_forms.retired(form):
        other = pass_launches(op, dtype, rows, cols, backward, H200)
    case = FormCase(form, op, dtype, rows, cols, passes, launches, other)
    return FormTiming(case, Timing((kept,) * 9, True), Timing((retired,) * 9, True))


def test_the_forms_table_keeps_a_form_at_3_percent_and_retires_one_below() -> None:
    timings = [
        _form_timing("narrow", 10.0, 10.31),  # +3.1%: kept
        _form_timing("fixed_backward", 2.0, 2.04),  # +2.0%: retired
        _form_timing("exact_streaming", 5.0, 4.9),  # slower with it: retired
    ]
    verdicts = form_verdicts(timings)
    assert verdicts["narrow"] == pytest.approx(0.031)
    assert verdicts["fixed"] is None
    failed = ["exact_streaming: swiglu bfloat16 64x11008: kernelpack disagrees with torch"]
    text = render_forms(timings, [t.case for t in timings], [], failed, "an H200")
    assert "| narrow | " in text and "| +3.1% | keep |" in text
    assert "| fixed_backward | " in text and "| +2.0% | retire |" in text
    assert "| -2.0% | retire |" in text
    assert "| fixed | " in text and "| - | picked on no row of the table |" in text
    assert (
        "| narrow | swiglu | float32 | 1x11008 | forward | swiglu_exact<float, 8> 43x128 "
        "| swiglu_exact_streaming<float> 22x128 | 10.00 | 10.31 | +3.1% | 9/9 |"
    ) in text
    assert "\n- exact_streaming: swiglu bfloat16 64x11008: kernelpack disagrees" in text
