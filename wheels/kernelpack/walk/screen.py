"""The GPU's screen: which walks a search keeps for exact verification (docs/walk.md, "Search").

The float pass computes, per walk and depth d (depth1, depth2), est = p_d / q_d and

    delta_screen = -1 - ln|est - L| / ln|q_d|      (raw q, L the float64 nearest the target)

in float64. The screen is honest about its resolution: where |est - L| is within
``d * 2^-49 * max(|est|, |L|)`` (8 ulps of rounding a step, over d steps: the float walk's
own error, first order) float64 cannot tell the walk's error from its rounding, and
delta_screen is +inf: "at least as close as float64 resolves". Such a walk ranks first and is a
hit candidate at any ``min_delta``; the exact verification (kernelpack.walk.verify) then gives
its delta. Elsewhere delta_screen is a lower bound of the exact delta (to the float walk's
rounding): the exact delta divides by the reduced q, which is at most the raw one.

walk.cu's write_estimate computes the same (the one place on the GPU); the numpy walker and the
exact reference call :func:`screen_delta`.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

RESOLUTION_PER_STEP = 2.0**-49  # relative, per step of the float walk


def screen_delta(
    est: npt.NDArray[np.float64], ln_q: npt.NDArray[np.float64], target: float, steps: int
) -> npt.NDArray[np.float64]:
    """delta_screen of walks at ``steps`` (module docstring); an infinite or NaN est keeps the
    plain formula's value."""
    with np.errstate(all="ignore"):
        distance = np.abs(est - np.float64(target))
        resolution = np.float64(steps) * RESOLUTION_PER_STEP * np.maximum(np.abs(est), abs(target))
        delta = np.float64(-1.0) - np.log(distance) / ln_q
    resolved = (resolution < np.inf) & (distance <= resolution)  # est finite
    result: npt.NDArray[np.float64] = np.where(resolved, np.inf, delta)
    return result
