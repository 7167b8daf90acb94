"""The models NNCF infers to collect statistics, made cheaper to compile and to run, computing the same.

NNCF adds its statistics (ranges, means) to the model it quantizes as extra outputs and infers that model
on each calibration sample. Three things made that slow on a CPU, all undone here, in the model its engine
is about to compile (`install` wraps NNCF's OpenVINO engine):
- `fold_weight_reductions`: behind every weight it quantizes NNCF puts a ReduceMin and a ReduceMax (over
  `Abs` for symmetric weights). Their inputs are constants, so the CPU plugin folds them while compiling,
  with reference kernels: for SD 1.5's UNet (562 of them) that compile took 96 s on a 2-core AVX2 EPYC,
  against 4 s with them folded here with numpy (1 s). min, max and abs are exact: every statistic, and
  the quantized model, is the same to the bit.
- `token_convolutions_as_matmuls`: full int8 runs the Linear layers as 1x1 convolutions over [tokens, in,
  1, 1] (`openvino.int8.linears_as_convolutions`), fast in int8 but, in fp32, half the speed of the
  MatMul they came from: the statistics model of SD 1.5's UNet ran 4.1 s per sample, 2.1 s with them back
  as MatMuls. The same products and sums (statistics within 5e-6 relative); the quantized model keeps
  its convolutions.
- `drop_repeated_results`: NNCF gives each reducer that reads a tensor out of the model its own Result, so
  quantile ranges copied each activation out twice per sample (SD 1.5's UNet at 256x256: 895 MB a sample,
  half of it a copy); the copy goes, and its readers find the tensor under the same name.

And one inference per calibration sample instead of two: a UNet's calibration samples are its inputs along
denoising runs, each input made from the prediction for the last, so they used to be made by running the
UNet once (the trajectories) before NNCF ran it again on each (the statistics). `Denoised` is NNCF's dataset
that makes them as NNCF goes, answering each sample with the prediction NNCF's own inference of it computed
(the engine passes what it infers to a listener).

And quantile statistics (`activation_ranges=quantile`) from the few values nearest each end of a tensor
(`openvino.quantiles`), the same numbers as NumPy's full selection, over ten times faster.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import threading
from collections.abc import Callable, Collection, Iterator
from typing import Any

import numpy as np
import torch

from studio.optimizations.calibration import Inputs, Steps
from studio.optimizations.openvino.models import opset
from studio.optimizations.openvino.quantiles import faster_reducer

REDUCTIONS: dict[str, Callable[..., np.ndarray]] = {"ReduceMin": np.min, "ReduceMax": np.max}
ELEMENTWISE: dict[str, Callable[[np.ndarray], np.ndarray]] = {"Abs": np.abs}
_installed = threading.Lock()
_listening = threading.local()  # .listener(input_data, outputs), told of each inference NNCF's engine runs
log = logging.getLogger(__name__)


def _replace(output: Any, by: Any) -> None:
    """Feed `output`'s consumers from `by` instead, under `output`'s tensor names (NNCF reads by name)."""
    names = output.get_names()
    output.replace(by)
    by.get_tensor().set_names(names)


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
    (same friendly name, same output tensor names); returns how many."""
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
        constant = opset().constant(np.ascontiguousarray(value))
        constant.set_friendly_name(op.get_friendly_name())
        _replace(op.output(0), constant.output(0))
        folded += 1
    return folded


def drop_repeated_results(model: Any) -> int:
    """Remove each Result of `model` that copies an earlier one: the same node output under the same name.
    NNCF adds a Result per reducer that reads a tensor out of the model, both named by the tensor, so the
    two quantiles of an activation (`activation_ranges=quantile`) copied it out twice per sample, where
    its readers look it up by that one name. Returns how many were removed."""
    seen: set[tuple[str, int, str]] = set()
    dropped = 0
    for result in list(model.get_results()):
        source = result.input_value(0)
        key = (source.get_node().get_friendly_name(), source.get_index(), result.get_friendly_name())
        if key in seen:
            model.remove_result(result)
            dropped += 1
        seen.add(key)
    return dropped


def token_convolutions_as_matmuls(model: Any) -> int:
    """Replace each 1x1 Convolution by a constant weight over 1x1 images ([tokens, in, 1, 1], no stride,
    padding or dilation) by Reshape to [tokens, in] -> MatMul by the weight -> Reshape back; returns how
    many."""
    ops = opset()
    rewritten = 0
    for op in model.get_ordered_ops():
        if op.get_type_name() != "Convolution":
            continue
        weight, shape = op.input_value(1).get_node(), op.get_input_partial_shape(0)
        if weight.get_type_name() != "Constant" or shape.is_dynamic:
            continue
        attributes = op.get_attributes()
        tokens, channels, *pixels = (d.get_length() for d in shape)
        if (
            pixels != [1, 1]
            or list(weight.get_output_shape(0))[2:] != [1, 1]
            or any(list(attributes[k]) != [1, 1] for k in ("strides", "dilations"))
            or any(any(attributes[k]) for k in ("pads_begin", "pads_end"))
        ):
            continue
        matrix = weight.get_data()[:, :, 0, 0]  # [out, in]
        flat = ops.reshape(op.input_value(0), [tokens, channels], False)
        product = ops.matmul(flat, ops.constant(np.ascontiguousarray(matrix)), False, True)
        back = ops.reshape(product, [tokens, matrix.shape[0], 1, 1], False)
        _replace(op.output(0), back.output(0))
        rewritten += 1
    return rewritten


@functools.cache
def _say_unchanged(reason: str) -> None:
    """Once per process and reason: every build calls `install`."""
    log.warning("NNCF's statistics run unchanged, slower (%s; see requirements-extras.txt)", reason)


def install() -> None:
    """Once per process: NNCF's OpenVINO engine (the model it infers for statistics and bias correction)
    folds its model's weight reductions, drops its repeated Results, runs its token convolutions as MatMuls
    and tells a listener (`listening`) what it infers, and its quantile statistics take
    `openvino.quantiles`' faster path; left as it is, with a warning, where this nncf's engine is not where
    expected."""
    with _installed:
        try:
            engine = importlib.import_module("nncf.openvino.engine").OVNativeEngine
            faster_reducer(importlib.import_module("nncf.common.tensor_statistics.collectors"))
        except (ImportError, AttributeError) as exc:  # another nncf than requirements-extras.txt pins
            _say_unchanged(str(exc))
            return
        if getattr(engine.__init__, "studio_rewrites", False):
            return
        compile_model, infer = engine.__init__, engine.infer

        @functools.wraps(compile_model)
        def init(self: Any, model: Any, *args: Any, **kwargs: Any) -> None:
            fold_weight_reductions(model)
            drop_repeated_results(model)
            token_convolutions_as_matmuls(model)
            if getattr(_listening, "precision", "f32") != "f32" and len(model.outputs) > 1:
                args, kwargs = (), {"use_fp32_precision": False}  # the statistics model
            compile_model(self, model, *args, **kwargs)

        @functools.wraps(infer)
        def told(self: Any, input_data: Any) -> Any:
            outputs = infer(self, input_data)
            listener = getattr(_listening, "listener", None)
            if listener is not None:
                listener(input_data, outputs)
            return outputs

        init.studio_rewrites = True  # type: ignore[attr-defined]
        engine.__init__, engine.infer = init, told


@contextlib.contextmanager
def listening(
    listener: Callable[[Any, dict[str, np.ndarray]], None], precision: str = "f32"
) -> Iterator[None]:
    """While inside, `listener(input_data, outputs)` after each inference of NNCF's engine in this thread, and
    the statistics model (the one with more than one output) runs in `precision`: "f32" or "bf16"
    (OpenVINO's own choice, bf16 where the CPU computes it); the other models NNCF infers stay f32."""
    _listening.listener, _listening.precision = listener, precision
    try:
        yield
    finally:
        del _listening.listener, _listening.precision


class Denoised:
    """NNCF's calibration dataset for a UNet: its inputs along denoising runs, each answered with the
    prediction NNCF's own inference of it computed.

    `run` (`calibration.denoising_steps`, one run after another) yields each call's inputs and is sent the
    prediction; `prepare` makes the model's tensors of them. The calls in `picks` (indices in call order)
    are NNCF's samples, as numpy arrays: NNCF infers each on the model it quantizes (the model with its
    statistics as extra outputs), whose output named `output` is the prediction the run needs next. The
    other calls, and a sample NNCF did not infer as given (another nncf), are answered by the model
    `make_denoiser()` returns, made once when first needed. Iterated again, the samples are replayed.
    """

    def __init__(
        self,
        run: Steps,
        prepare: Callable[[Inputs], tuple[torch.Tensor, ...]],
        picks: Collection[int],
        output: str,
        make_denoiser: Callable[[], Callable[..., torch.Tensor]],
    ):
        self._run, self._prepare, self._picks, self._output = run, prepare, frozenset(picks), output
        self._make_denoiser = make_denoiser
        self._denoiser: Callable[..., torch.Tensor] | None = None
        self._samples: list[tuple[np.ndarray, ...]] | None = None
        self._pending: tuple[np.ndarray, ...] | None = None
        self._heard: np.ndarray | None = None
        self.answered = 0  # samples whose prediction NNCF's inference gave
        self.denoised = 0  # calls the denoiser answered

    def __len__(self) -> int:
        return len(self._picks)

    def heard(self, input_data: Any, outputs: dict[str, np.ndarray]) -> None:
        """The engine's listener: keep the prediction for the sample just given to NNCF."""
        if input_data is self._pending and self._output in outputs:
            self._heard = np.array(outputs[self._output], copy=True)
            self.answered += 1

    def __iter__(self) -> Iterator[tuple[np.ndarray, ...]]:
        if self._samples is not None:
            yield from self._samples
            return
        samples: list[tuple[np.ndarray, ...]] = []
        call, inputs = 0, next(self._run)
        while True:
            tensors = self._prepare(inputs)
            if call in self._picks:
                sample = tuple(t.detach().cpu().numpy().copy() for t in tensors)
                samples.append(sample)
                if len(samples) == len(self._picks):  # the last: the run's rest is not needed
                    self._samples = samples
                self._pending, self._heard = sample, None
                yield sample
                prediction = self._prediction(tensors)
            else:
                prediction = self._denoise(tensors)
            if self._samples is not None:
                return
            call += 1
            try:
                inputs = self._run.send(prediction)
            except StopIteration:
                self._samples = samples
                return

    def _prediction(self, tensors: tuple[torch.Tensor, ...]) -> torch.Tensor:
        heard, self._pending, self._heard = self._heard, None, None
        if heard is None:
            return self._denoise(tensors)
        return torch.from_numpy(heard).to(tensors[0].dtype)

    def _denoise(self, tensors: tuple[torch.Tensor, ...]) -> torch.Tensor:
        if self._denoiser is None:
            self._denoiser = self._make_denoiser()
        self.denoised += 1
        return self._denoiser(*tensors)
