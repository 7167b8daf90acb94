"""LoRAs on a live pipeline, switched at request time.

A request names its LoRAs (`Adapter`: a file `pipelines.loras` found and checked, and a scale). Before the
techniques are applied, `switch` makes the pipeline carry exactly those: the ones no longer wanted are
left loaded but inactive (the `KEEP_LOADED` most recent: switching back to one costs milliseconds; older ones
are deleted), new ones are loaded from the tensors kept in RAM (`CACHE`: a switch reads no disk after a
LoRA's first use), and each gets its scale. A request without LoRAs turns every adapter off
(`disable_lora`): each adapted layer gives its base layer's output, so its images are bit for bit those of a
pipeline that never had one. A LoRA at scale 0 is not loaded at all.

What the techniques built over the weights (a trace, a compiled or converted denoiser) was built over the
LoRAs of its run, so a change of LoRAs applies them again (`differ`), and what they keep (`kept`) is keyed by
the LoRAs too (`Context.adapters`).
"""

from __future__ import annotations

import logging
import os
import re
import time
from dataclasses import dataclass
from typing import Any

import torch

from pipelines.loras import LoraCache, LoraFile
from studio.errors import ValidationError
from studio.optimizations._quiet import at_least, errors_only

QUIET = "diffusers.loaders.lora_base"  # says, for each text encoder a LoRA leaves alone, that it does
STATE_KEY = "adapters"  # the live pipeline's state: the adapters its modules carry now
KEEP_LOADED = 4  # adapters a pipeline keeps loaded (inactive when not asked for): switching back costs ms
DEFAULT_CACHE_MB = 1024
CACHE = LoraCache(budget_bytes=int(os.environ.get("STUDIO_LORA_CACHE_MB", str(DEFAULT_CACHE_MB))) * 2**20)


@dataclass(frozen=True)
class Adapter:
    """One LoRA of a request: its file and its scale (0 leaves it out, 1 is as trained)."""

    file: LoraFile
    scale: float

    @property
    def name(self) -> str:
        return self.file.name

    @property
    def label(self) -> str:
        """'night:0.5', as the CLI and the API take it."""
        return f"{self.name}:{self.scale:g}"

    @property
    def key(self) -> tuple[str, str, float]:
        """What decides what the adapter does to the weights: the file (by its hash) and the scale."""
        return (self.name, self.file.hash, self.scale)

    def record(self) -> dict[str, Any]:
        """What the run log, the JSON and the card keep of it."""
        return {"name": self.name, "scale": self.scale, "hash": self.file.hash}


def keys(adapters: tuple[Adapter, ...]) -> tuple[tuple[str, str, float], ...]:
    return tuple(a.key for a in adapters)


def build_keys(adapters: tuple[Adapter, ...], hot: bool) -> tuple:
    """What a technique's build depends on of the LoRAs: their files, and their scales unless the pipeline is
    prepared for hot-swapping (`hot`: the scales are tensors the build reads, not constants it holds)."""
    return tuple((a.name, a.file.hash) for a in adapters) if hot else keys(adapters)


def adapter_name(file: LoraFile) -> str:
    """The name the adapter goes by inside the pipeline's modules (a Python identifier: peft keeps adapters
    in module dicts), unique per file content."""
    return re.sub(r"\W", "_", file.name) + "_" + file.hash[:8]


def differ(state: dict[str, Any], adapters: tuple[Adapter, ...]) -> bool:
    """Whether the pipeline whose state this is carries other LoRAs (or scales) than `adapters`."""
    return tuple(state.get(STATE_KEY, ())) != keys(adapters)


def _models(pipe: Any) -> list[torch.nn.Module]:
    """The pipeline's models, each as itself where a technique wrapped it (a compiled denoiser)."""
    models = [m for m in vars(pipe).values() if isinstance(m, torch.nn.Module)]
    return [getattr(m, "_orig_mod", m) for m in models]


def _carried(pipe: Any) -> set[str]:
    """The adapters the pipeline's models carry now (asked of them: a sweep's copy of a pipeline carries
    what the original carried when it was copied)."""
    return {name for model in _models(pipe) for name in getattr(model, "peft_config", None) or {}}


def _lora_layers(pipe: Any) -> list[Any]:
    """Every layer of the pipeline's models that carries adapters (peft's LoRA layers)."""
    from peft.tuners.lora import LoraLayer

    return [layer for model in _models(pipe) for layer in model.modules() if isinstance(layer, LoraLayer)]


def rescaled(pipe: Any, state: dict[str, Any], stats: dict[str, Any], adapters: tuple[Adapter, ...]) -> bool:
    """Where the pipeline carries the same LoRA files as `adapters` with their scales as tensors (prepared
    for hot-swapping), set the new scales in place and answer True: nothing built over the weights changes,
    nothing is compiled again. Otherwise False (the caller switches them the long way)."""
    now = state.get(STATE_KEY, ())
    if not state.get("adapters_hot") or [k[:2] for k in now] != [a.key[:2] for a in adapters]:
        return False
    from peft.utils.hotswap import _update_scaling

    start = time.perf_counter()
    scales = {adapter_name(a.file): a.scale for a in adapters}
    for layer in _lora_layers(pipe):
        for name in layer.scaling:
            if name in scales:
                _update_scaling(layer, name, scales[name] * layer.lora_alpha[name] / layer.r[name])
    state[STATE_KEY] = keys(adapters)
    stats["lora_switch_seconds"] = time.perf_counter() - start
    stats["lora_reads"] = ["hot-swapped scales"]
    return True


def switch(
    pipe: Any, state: dict[str, Any], stats: dict[str, Any], adapters: tuple[Adapter, ...], hot: bool = False
) -> None:
    """Make `pipe` carry exactly `adapters` at their scales (see the module's docstring); the seconds it took
    and where the tensors came from go into `stats` (`lora_switch_seconds`, `lora_reads`; under `hot`,
    `lora_files_changed`: other files than the last run's, which a compiled denoiser compiles again for). With
    `hot` (a
    compiled denoiser), a LoRA at scale 0 is loaded too and every scale becomes a tensor, so that a later
    change of scales is set in place (`rescaled`) and recompiles nothing.

    Raises:
        ValidationError: a LoRA does not fit the model's layers; the pipeline is left without it.
    """
    before = state.get(STATE_KEY)  # None: the pipeline's first run
    files = {k[:2] for k in keys(adapters)}
    stats["lora_files_changed"] = hot and before is not None and {k[:2] for k in before} != files
    if not differ(state, adapters) and not (adapters and not _carried(pipe)):
        state.setdefault(STATE_KEY, ())
        return
    start = time.perf_counter()
    wanted = {adapter_name(a.file): a for a in adapters if a.scale != 0 or hot}
    carried = _carried(pipe)
    state[STATE_KEY] = ()  # until the switch is complete
    if not wanted:
        if carried:
            pipe.disable_lora()  # its layers stay, inactive: each gives its base layer's output, exactly
    else:
        used = [n for n in state.get("adapters_used", []) if n in carried and n not in wanted]
        spare = [*used, *sorted(carried - set(wanted) - set(used))]  # least recently used first
        drop = spare[: max(0, len(carried | set(wanted)) - KEEP_LOADED)]
        if drop:
            pipe.delete_adapters(drop)
        reads = []
        for name, adapter in wanted.items():
            if name in carried:
                reads.append("loaded")
                continue
            before = CACHE.misses
            tensors = CACHE.get(adapter.file)
            reads.append("disk" if CACHE.misses > before else "ram")
            _load(pipe, name, adapter, tensors)
        pipe.enable_lora()
        pipe.set_adapters(list(wanted), adapter_weights=[a.scale for a in wanted.values()])
        stats["lora_reads"] = reads
        state["adapters_used"] = [*[n for n in spare if n not in drop], *wanted]
        if hot:
            from peft.utils.hotswap import _convert_scalings_to_tensor

            for model in _models(pipe):
                _convert_scalings_to_tensor(model)
    state["adapters_hot"] = hot and bool(wanted)
    state[STATE_KEY] = keys(adapters)
    stats["lora_switch_seconds"] = time.perf_counter() - start


def _load(pipe: Any, name: str, adapter: Adapter, tensors: dict[str, Any]) -> None:
    """Load one adapter's tensors into the pipeline's modules; one that does not fit is taken out again."""
    try:
        # a LoRA of the UNet alone is "safe to ignore" for each text encoder; one that does not fit is said
        # here, in one sentence, not logged as an error too
        with errors_only(QUIET), at_least(logging.CRITICAL, "diffusers.loaders.peft"):
            pipe.load_lora_weights(dict(tensors), adapter_name=name)
    except (ValueError, RuntimeError, KeyError) as exc:
        if name in _carried(pipe):
            pipe.delete_adapters([name])
        raise ValidationError(
            f"LoRA {adapter.name!r} does not fit this model's layers ({_why(exc, name)}): choose a LoRA made "
            "for this model."
        ) from exc


def _why(exc: BaseException, name: str) -> str:
    """The first layer torch says does not fit, in words ('to_k: the model's is [4, 64], the file's [4, 96]'),
    else the first line of the error."""
    found = re.search(
        r"size mismatch for (\S+): copying a param with shape torch\.Size\((\[[^\]]*\])\) from "
        r"checkpoint, the shape in current model is torch\.Size\((\[[^\]]*\])\)",
        str(exc),
    )
    if found:
        layer = found[1].replace(f".{name}", "")
        return f"{layer}: the model's is {found[3]}, the file's {found[2]}"
    return str(exc).strip().splitlines()[0][:200]
