"""Hugging Face Spaces ZeroGPU support: import order, the GPU wrapper, the duration estimate.

On ZeroGPU (the platform sets ``SPACES_ZERO_GPU=true``) a GPU exists only inside a
function decorated with ``@spaces.GPU(duration=...)``, and that function runs in a
forked worker process: its arguments and its return value are pickled across the
process boundary, and nothing it writes to memory survives in the main process.
Hence three rules, all kept here:

- ``import spaces`` before anything touches CUDA: this module imports it at import
  time on ZeroGPU and imports neither torch nor anything that does, so ``app.py``
  can import it first.
- Only a *compute only* callable is wrapped (configure the pipeline, run and measure
  it, return plain picklable results). The run log and image files are written by
  the caller, outside the wrapped function.
- An exception raised in the worker comes back as the same exception (same class,
  same sentence) instead of ZeroGPU's generic "GPU task aborted", so the caller
  logs the real reason.

Off ZeroGPU ``gpu_wrapper`` returns the function unchanged and ``spaces`` is never imported.
"""

from __future__ import annotations

import functools
import importlib
import logging
import math
import pickle
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from pipelines.registry import cost_of
from studio.settings import on_zerogpu

log = logging.getLogger(__name__)

MIN_SECONDS = 15
# More GPU time for a request whose worker compiles a package (aot_package, the first request of a model on a
# Space with none kept): an assumption sized for SD-class denoisers, not a measurement.
COMPILE_SECONDS = 180
MAX_SECONDS = 300
SAFETY = 1.5


def ensure_spaces() -> ModuleType | None:
    """Import ``spaces`` on ZeroGPU (it must come before anything touches CUDA); None elsewhere.

    Raises:
        ImportError: on ZeroGPU without the ``spaces`` package (the Space image provides it).
    """
    if not on_zerogpu():
        return None
    module = importlib.import_module("spaces")
    if not callable(getattr(module, "GPU", None)):
        raise ImportError(
            "The imported 'spaces' "
            f"({getattr(module, '__file__', None) or list(getattr(module, '__path__', []))}) "
            "has no GPU decorator: install the 'spaces' package, and do not run from a directory whose "
            "'spaces/' folder shadows it."
        )
    return module


def estimate_duration(
    model_id: str, steps: int, width: int, height: int, rounds: int = 1, warmup: int = 0
) -> int:
    """Seconds of GPU to ask ZeroGPU for, for one measured request.

    duration = SAFETY * (setup + (warmup + rounds) * steps * step * (width * height) / pixels),
    clamped to [MIN_SECONDS, MAX_SECONDS] and rounded up. `setup`, `step` and `pixels` come from
    the model's spec (`pipelines.registry.ModelCost`: assumptions, not measurements). A shorter request
    queues sooner on ZeroGPU; one that overruns is aborted, hence the safety factor.

    Args:
        model_id: the request's model (registry id, hub id or directory).
        steps: denoising steps per call.
        width: image width in pixels.
        height: image height in pixels.
        rounds: timed calls.
        warmup: untimed warm-up calls.
    """
    cost = cost_of(model_id)
    calls = max(1, warmup + rounds)
    scale = (width * height) / cost.pixels
    seconds = SAFETY * (cost.setup + calls * steps * cost.step * scale)
    return min(MAX_SECONDS, max(MIN_SECONDS, math.ceil(seconds)))


def request_duration(request: Any, options: Any = None, *args: Any, **kwargs: Any) -> int:
    """The duration callable for ``spaces.GPU``: it receives the wrapped function's own arguments.

    Args:
        request: a `GenerationRequest` (model, steps, width, height are read).
        options: the run's `RunOptions` (its warmup and rounds; none for a profile: one call).
        *args: further arguments of the wrapped function (ignored).
        **kwargs: further keyword arguments of the wrapped function (ignored).
    """
    warmup, rounds = getattr(options, "warmup", 0), getattr(options, "rounds", 1)
    seconds = estimate_duration(
        request.model, request.steps, request.width, request.height, rounds=rounds, warmup=warmup
    )
    if "aot_package" in request.optimizations and not _package_kept(request.model):
        seconds = min(MAX_SECONDS, seconds + COMPILE_SECONDS)  # this request's worker compiles the package
    log.info(
        "asking ZeroGPU for %d s for %s (%d steps, %dx%d)",
        seconds,
        request.model,
        request.steps,
        request.width,
        request.height,
    )
    return seconds


def _package_kept(model: str) -> bool:
    """Whether a compiled package of `model` is kept on this Space (its worker then loads instead of
    compiling). Imported here, at request time: this module imports nothing that imports torch."""
    from studio.optimizations import packages

    return any(entry.get("model") == model for entry in packages.listing(every_root=True))


@dataclass
class Outcome:
    """What the worker sends back: the value, or the exception and its traceback text."""

    value: Any = None
    error: BaseException | None = None
    trace: str = ""

    def unwrap(self) -> Any:
        if self.error is not None:
            log.debug("raised in the ZeroGPU worker:\n%s", self.trace)
            raise self.error
        return self.value


def _capturing(fn: Callable[..., Any]) -> Callable[..., Outcome]:
    """`fn` returning an `Outcome`, so its exception crosses the process boundary intact."""

    @functools.wraps(fn)
    def compute(*args: Any, **kwargs: Any) -> Outcome:
        try:
            return Outcome(value=fn(*args, **kwargs))
        except Exception as exc:  # re-raised by Outcome.unwrap() in the caller's process
            return Outcome(error=exc, trace=traceback.format_exc())

    return compute


def gpu_wrapper(fn: Callable[..., Any], duration_fn: Callable[..., int]) -> Callable[..., Any]:
    """`fn` run under ``spaces.GPU(duration=duration_fn)`` on ZeroGPU; `fn` itself anywhere else.

    `fn` must be compute only: no run-log or file writes (on ZeroGPU they would happen in a
    forked worker), picklable arguments and return value.

    Args:
        fn: the GPU-bound callable.
        duration_fn: called with `fn`'s arguments, returns the seconds of GPU to request.
    """
    spaces = ensure_spaces()
    if spaces is None:
        return fn
    decorated = spaces.GPU(duration=duration_fn)(_capturing(fn))

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        return decorated(*args, **kwargs).unwrap()

    call.zerogpu = True  # type: ignore[attr-defined]
    return call


def portable(callback: Callable[..., Any] | None, what: str = "callback") -> Callable[..., Any] | None:
    """`callback` if it can be handed to the ZeroGPU worker (picklable), else None with a warning.

    Off ZeroGPU every callback is kept. On ZeroGPU a closure (for example a lambda around
    `gr.Progress`) cannot be pickled; per-step progress or cancellation is then not available for
    that run, which is logged rather than failing the request.

    Args:
        callback: the progress or stop callback.
        what: its name, for the log message.
    """
    if callback is None or not on_zerogpu():
        return callback
    try:
        pickle.dumps(callback)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        log.warning("%s cannot cross into the ZeroGPU worker (%s); running without it", what, exc)
        return None
    return callback


if on_zerogpu():
    ensure_spaces()
