"""Quantiles near a tensor's ends, exact and a few times faster than NumPy's, for NNCF's quantile statistics.

`activation_ranges=quantile` has NNCF take, for every activation it quantizes and every calibration sample,
the 0.01% and 99.99% quantiles (two reducers, one quantile each), with `np.quantile` over a float64 copy of
the whole tensor: a full selection pass per quantile. For SD 1.5's UNet at 256x256 that was more time than the
inference of the samples itself. A quantile that close to an end needs only the few values nearest that end:
`torch.topk` finds them without a float64 copy, among the blocks of the row whose own extremes are nearest
that end (a reduction and two small selections, no pass that masks the row), and the same interpolation as
NumPy's default ("linear") then gives the same number to the bit (float32 values are ordered the same in
float64).
"""

from __future__ import annotations

import functools
import importlib
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

# the most of a row's values `quantiles` takes from one end, as a share of the row; nearer the middle a
# selection over the whole row (NumPy's) is as fast
NEAR_END = 1 / 16
# a row's values in blocks of this many: the values nearest an end are searched in the blocks whose own
# extremes are nearest it
BLOCK = 64


def _lerp(below: np.ndarray, above: np.ndarray, t: float) -> np.ndarray:
    """NumPy's own linear interpolation (numpy.lib._function_base_impl._lerp), the same to the bit."""
    diff = above - below
    return below + diff * t if t < 0.5 else above - diff * (1 - t)


def _nearest(rows: torch.Tensor, count: int, largest: bool) -> torch.Tensor:
    """The `count` values of each row nearest its top (`largest`) or bottom, sorted from that end: exact.

    They lie in the `count` blocks (of BLOCK values) whose own extremes are nearest that end, with the row's
    tail past its last whole block: a value left out has `count` block extremes at least as near the end
    as itself, so it can only tie with the count-th nearest, which is then taken from among them."""
    height, length = rows.shape
    blocks = length // BLOCK
    if blocks < 2 * count:
        return rows.topk(count, 1, largest=largest, sorted=True).values
    body = rows[:, : blocks * BLOCK].reshape(height, blocks, BLOCK)
    extremes = body.amax(2) if largest else body.amin(2)
    picked = extremes.topk(count, 1, largest=largest, sorted=False).indices
    candidates = torch.gather(body, 1, picked[:, :, None].expand(height, count, BLOCK)).reshape(height, -1)
    candidates = torch.cat([candidates, rows[:, blocks * BLOCK :]], 1)
    return candidates.topk(count, 1, largest=largest, sorted=True).values


def quantiles(
    data: np.ndarray, q: Sequence[float], axes: Sequence[int] | None = None, keepdims: bool = False
) -> np.ndarray:
    """`np.quantile(data.astype(np.float64), q, axis=axes, keepdims=keepdims)`, the same values, for float32
    `data`; quantiles near the ends take only the values nearest them."""
    axes = tuple(range(data.ndim)) if axes is None else tuple(a % data.ndim for a in axes)
    n = math.prod(data.shape[a] for a in axes)
    positions = [float(p) * (n - 1) for p in q]
    taken = max((min(p, n - 1 - p) for p in positions), default=0.0)
    kept = [a for a in range(data.ndim) if a not in axes]
    rows = None
    if data.dtype == np.float32 and n >= 2 and taken + 2 <= n * NEAR_END:
        rows = torch.from_numpy(np.ascontiguousarray(data.transpose(*kept, *axes))).reshape(-1, n)
    # NumPy's answer with a NaN is NaN, and topk orders NaN first: a NaN anywhere makes the sum NaN (as do
    # both infinities: NumPy's path then too, the same numbers), one pass without a mask
    if rows is None or bool(rows.sum().isnan()):
        return np.quantile(data.astype(np.float64, copy=False), q=q, axis=axes, keepdims=keepdims)
    results = []
    for p in positions:
        lo = math.floor(p)
        hi = min(lo + 1, n - 1)
        if lo < n - 1 - lo:  # from the low end: ascending, index = rank
            values = _nearest(rows, hi + 1, largest=False)
            below, above = values[:, lo], values[:, hi]
        else:  # from the high end: descending, index = n - 1 - rank
            values = _nearest(rows, n - lo, largest=True)
            below, above = values[:, n - 1 - lo], values[:, n - 1 - hi]
        results.append(_lerp(below.double().numpy(), above.double().numpy(), p - lo))
    shape = (
        [1 if a in axes else data.shape[a] for a in range(data.ndim)]
        if keepdims
        else [data.shape[a] for a in kept]
    )
    return np.stack([r.reshape(shape) for r in results])


def faster_reducer(collectors: Any) -> bool:
    """Once: NNCF's `QuantileReducer` (in its `collectors` module) computes its quantiles of NumPy tensors by
    `quantiles`, the same values; others as before. Returns whether it changed anything."""
    reducer, axes_of = collectors.QuantileReducer, collectors.determine_reduction_axes
    original = reducer._reduce_out_of_place
    if getattr(original, "studio_quantiles", False):
        return False
    tensor, fns = importlib.import_module("nncf.tensor"), importlib.import_module("nncf.tensor.functions")

    @functools.wraps(original)
    def reduce(self: Any, x: list[Any]) -> list[Any]:
        data = x[0].data
        if not isinstance(data, np.ndarray):
            return original(self, x)
        axes = axes_of(data.ndim, self._axes, self._axes_mode)
        values = quantiles(data, self._quantile, axes, keepdims=self._keepdims)
        return fns.unstack(tensor.Tensor(values), axis=0)

    reduce.studio_quantiles = True  # type: ignore[attr-defined]
    reducer._reduce_out_of_place = reduce
    return True
