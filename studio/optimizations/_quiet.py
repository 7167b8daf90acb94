"""Keep an optional accelerator's import-time noise out of stderr (imported before diffusers).

With torchao installed (for int8_dynamic), importing diffusers imports torchao, which logs
a warning for each CUDA-only kernel library it cannot load on a CPU-only torch build and
makes torch log two pytree deprecation warnings; diffusers then logs one about torchao
serialization types missing from torchao 0.18. None of it affects the studio. torchao is
imported here once with those loggers raised to ERROR for the duration, and the diffusers
logger stays at ERROR. The CLI's contract (stderr starts with "error: ") depends on this.
A torchao that fails to import is said once, as a warning; the studio starts without it.
`at_least` raises loggers for a block; OpenVINO's model builds use it for NNCF's INFO lines.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import logging
from collections.abc import Iterator

IMPORT_NOISE = ("torchao", "torch.utils._pytree")
DIFFUSERS_TORCHAO = "diffusers.quantizers.torchao.torchao_quantizer"


def errors_only(*names: str) -> contextlib.AbstractContextManager[None]:
    """Raise the named loggers to ERROR for the block, then restore their levels."""
    return at_least(logging.ERROR, *names)


@contextlib.contextmanager
def at_least(level: int, *names: str) -> Iterator[None]:
    """Raise the named loggers to `level` for the block, then restore their levels."""
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(level)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


log = logging.getLogger(__name__)
logging.getLogger(DIFFUSERS_TORCHAO).setLevel(logging.ERROR)
if importlib.util.find_spec("torchao") is not None:
    try:
        with errors_only(*IMPORT_NOISE):
            for module in (
                "torchao",
                "torchao.quantization",
                "torchao.prototype.safetensors.safetensors_support",
            ):
                importlib.import_module(module)  # what diffusers' torchao quantizer imports
    except Exception as exc:  # the studio still starts; the techniques needing torchao say why they cannot
        log.warning("torchao is installed but could not be imported (%s: %s)", type(exc).__name__, exc)
