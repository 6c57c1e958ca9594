"""bench/bench_mlp.py's verdict on a row: which peer ours trails, and whether by more than the
run's spread. The GPU timing itself runs on the lent GPU only (`nox -s gpu`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from bench.bench_mlp import Row, Timing, gaps, rounds_settling_behind


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
