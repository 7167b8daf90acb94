"""NNCF's statistics model with its weight reductions computed before the CPU plugin compiles it.

To collect the ranges of the weights it quantizes, NNCF adds a ReduceMin and a ReduceMax (over `Abs` for
symmetric weights) behind every quantized weight of the model it infers, as extra outputs. Their inputs are
constants, so the CPU plugin folds them while compiling, with reference kernels: for SD 1.5's UNet (562 of
them) that compile took 96 s on a 2-core AVX2 EPYC, against 4 s with the reductions already folded. Here
they are computed with numpy (1 s) and put in as constants under the same names: min, max and abs are
exact, so every statistic, and the quantized model, is the same to the bit.
"""

from __future__ import annotations

import functools
import importlib
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

REDUCTIONS: dict[str, Callable[..., np.ndarray]] = {"ReduceMin": np.min, "ReduceMax": np.max}
ELEMENTWISE: dict[str, Callable[[np.ndarray], np.ndarray]] = {"Abs": np.abs}
_installed = threading.Lock()


def constant_value(output: Any) -> np.ndarray | None:
    """An OpenVINO node output's value if constants alone make it (through ELEMENTWISE ops), else None."""
    node = output.get_node()
    kind = node.get_type_name()
    if kind == "Constant":
        return node.get_data()
    if kind in ELEMENTWISE:
        inner = constant_value(node.input_value(0))
        return None if inner is None else ELEMENTWISE[kind](inner)
    return None


def fold_weight_reductions(model: Any) -> int:
    """Replace each REDUCTIONS node of `model` whose data and axes are constant by a constant of its value
    (same friendly name, same output tensor names: NNCF reads its outputs by name); returns how many."""
    from openvino import opset13

    folded = 0
    for op in model.get_ordered_ops():
        reduce = REDUCTIONS.get(op.get_type_name())
        if reduce is None:
            continue
        data, axes = constant_value(op.input_value(0)), constant_value(op.input_value(1))
        if data is None or axes is None:
            continue
        axes = tuple(int(a) % data.ndim for a in np.atleast_1d(axes))
        value = reduce(data, axis=axes, keepdims=bool(op.get_attributes()["keep_dims"]))
        constant = opset13.constant(np.ascontiguousarray(value))
        constant.set_friendly_name(op.get_friendly_name())
        constant.output(0).get_tensor().set_names(op.output(0).get_names())
        op.output(0).replace(constant.output(0))
        folded += 1
    return folded


def install() -> None:
    """Once per process: NNCF's OpenVINO engine (the model it infers for statistics and bias correction)
    folds its model's weight reductions before compiling it."""
    with _installed:
        engine = importlib.import_module("nncf.openvino.engine").OVNativeEngine
        if getattr(engine.__init__, "folds_weight_reductions", False):
            return
        compile_model = engine.__init__

        @functools.wraps(compile_model)
        def init(self: Any, model: Any, *args: Any, **kwargs: Any) -> None:
            fold_weight_reductions(model)
            compile_model(self, model, *args, **kwargs)

        init.folds_weight_reductions = True  # type: ignore[attr-defined]
        engine.__init__ = init
