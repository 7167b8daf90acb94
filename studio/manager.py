"""PipelineManager: load once, apply and revert a configuration at request time.

Weights are read from disk once per (model, dtype, device map, VAE) and kept on the CPU.
A request names a configuration; the manager reverts what is no longer wanted and
applies what is new on the live pipeline. Removing an irreversible technique
(trace, compile, offload hooks) rebuilds the working pipeline from the cached
components: no disk read. Moving to an accelerator happens here, at request time.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from pipelines import loader
from pipelines.errors import ValidationError
from pipelines.schedulers import steps_refused
from studio import devices
from studio.measure.memory_probe import weight_bytes
from studio.optimizations import Context, Optimization, adapters, get, kept, ordered
from studio.request import GenerationRequest

log = logging.getLogger(__name__)

LoadFn = Callable[..., Any]


UNPLACED = ""  # LivePipeline.device when the modules may be anywhere and the next request must place them


@dataclass
class LivePipeline:
    """One loaded pipeline and the configuration currently applied to it."""

    key: tuple
    base: Any
    pipe: Any
    load_seconds: float
    applied: tuple[str, ...] = ()
    settings: dict[str, dict] = field(default_factory=dict)
    device: str = "cpu"
    state: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock)
    # (configuration, width, height) called on this pipeline so far: the first call of each pays for what
    # later ones reuse (a conversion, a compile for that shape), whatever ran on the pipeline before
    called: set[tuple[str, int, int]] = field(default_factory=set)


@dataclass
class Prepared:
    """A pipeline ready for one request, with what the run needs to record."""

    pipe: Any
    ctx: Context
    call_opts: list[Optimization]
    applied: tuple[str, ...]
    load_seconds: float
    switch_seconds: float
    first_call: bool
    entry: LivePipeline


def _clone(pipe: Any, share_tensors: bool = False) -> Any:
    """A pipeline whose torch modules are copies (same values, separate tensors; with `share_tensors` the
    same tensors in copied modules, so swapping a submodule of the clone leaves the original's alone); the
    rest is shared."""
    clone = copy.copy(pipe)
    for name, module in list(vars(pipe).items()):
        if isinstance(module, torch.nn.Module):
            tensors = itertools.chain(module.parameters(), module.buffers()) if share_tensors else ()
            memo = {id(t): t for t in tensors}  # deepcopy takes what the memo holds as already copied
            clone.__dict__[name] = copy.deepcopy(module, memo)  # not setattr: would re-register the config
    return clone


def _shares_weights(request: GenerationRequest) -> bool:
    """Whether a sweep's copy may share the cached weights: its techniques only read them (shares_weights)."""
    changing = [get(o) for o in request.optimizations if get(o).stage == "pipeline"]
    return bool(changing) and all(o.shares_weights for o in changing)


def _cache_key(request: GenerationRequest) -> tuple:
    """What a loaded pipeline is read with: the model, the load-stage techniques (dtype, device map) and, when
    given, the single-file checkpoint's config folder and the VAE swapped in."""
    load_opts = tuple(o for o in request.optimizations if get(o).stage == "load")
    memory = request.settings.get("device_map_balanced", {}).get("max_memory")
    sources = (("single_file_config", request.spec.single_file_config), ("vae", request.vae))
    return (
        request.spec.id,
        load_opts,
        repr(sorted(memory.items(), key=str)) if memory else None,
        *((name, value) for name, value in sources if value),
    )


class PipelineManager:
    """Keeps loaded pipelines and hands out one configured for each request.

    Args:
        load: the loading function (the real diffusers loader by default).
        max_pipelines: how many (model, dtype, device map) entries stay cached.
    """

    def __init__(self, load: LoadFn = loader.load, max_pipelines: int | None = None):
        self._load = load
        self._max = max_pipelines or int(os.environ.get("STUDIO_MAX_PIPELINES", "3"))
        self._entries: OrderedDict[tuple, LivePipeline] = OrderedDict()
        self._lock = threading.Lock()
        self._loading: dict[tuple, threading.Lock] = {}
        self._slots: dict[tuple, LivePipeline] = {}
        self._sweeps: set[str] = set()
        self.disk_loads = 0

    def loaded(self) -> list[tuple]:
        """Keys of the pipelines in the cache, least recently used first."""
        with self._lock:
            return list(self._entries)

    def loaded_pipeline(self, request: GenerationRequest) -> Any | None:
        """The cached pipeline `request` would run on, without loading it (None when it is not loaded)."""
        with self._lock:
            entry = self._entries.get(_cache_key(request))
        return None if entry is None else entry.base

    @staticmethod
    def changes_pipeline(request: GenerationRequest, irreversibly: bool = False) -> bool:
        """Whether `request`'s configuration changes its pipeline (modules, layouts, hooks), or, with
        `irreversibly`, changes it beyond an exact revert (trace, compile, int8 build)."""
        return any(
            get(o).stage == "pipeline" and not (irreversibly and get(o).reversible)
            for o in request.optimizations
        )

    def model_bytes(self, request: GenerationRequest) -> int:
        """The bytes of weights and buffers a copy of `request`'s pipeline holds with its techniques applied
        (loads it if needed): the weights, unless the copy shares them, and the further copies some
        techniques keep."""
        entry, _ = self._entry(request)
        weights = weight_bytes(entry.base)
        own = 0 if _shares_weights(request) else 1
        return int(
            weights * (own + sum(get(o).copies(request.settings.get(o, {})) for o in request.optimizations))
        )

    @contextlib.contextmanager
    def own_pipelines(self, name: str) -> Iterator[None]:
        """For the block, `acquire(request, slot=...)` with a slot under `name` gets a live pipeline of its
        own: a copy of the cached weights (no disk read; shared, not copied, where every technique of the
        slot's configuration only reads them), kept outside the cache, dropped when the block ends."""
        with self._lock:
            self._sweeps.add(name)
        try:
            yield
        finally:
            with self._lock:
                self._sweeps.discard(name)
                for key in [k for k in self._slots if k[-1][0] == name]:
                    del self._slots[key]
            kept.release()  # what the sweep's pipelines built goes with them

    def _slot_entry(self, request: GenerationRequest, slot: tuple[str, str]) -> tuple[LivePipeline, bool]:
        if slot[0] not in self._sweeps:
            raise RuntimeError(f"slot {slot} used outside manager.own_pipelines({slot[0]!r})")
        key = (*_cache_key(request), slot)
        with self._lock:
            if key in self._slots:
                return self._slots[key], False
        shared, _ = self._entry(request)
        with shared.lock:
            start = time.perf_counter()
            base = _clone(shared.base, share_tensors=_shares_weights(request))
            entry = LivePipeline(
                key=key, base=base, pipe=copy.copy(base), load_seconds=time.perf_counter() - start
            )
        with self._lock:
            self._slots[key] = entry
        return entry, True

    def _entry(self, request: GenerationRequest) -> tuple[LivePipeline, bool]:
        key = _cache_key(request)
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key], False
            key_lock = self._loading.setdefault(key, threading.Lock())
        with key_lock:
            with self._lock:
                if key in self._entries:
                    return self._entries[key], False
            entry = self._load_entry(key, request)
            with self._lock:
                self._entries[key] = entry
                over = len(self._entries) - self._max
                evicted = [self._entries.popitem(last=False)[0] for _ in range(over)]
            if evicted:
                log.info("evicted %s from the pipeline cache", ", ".join(map(str, evicted)))
                kept.release()  # with what its techniques built
            return entry, True

    def _load_entry(self, key: tuple, request: GenerationRequest) -> LivePipeline:
        dtype = next((get(o).dtype for o in request.optimizations if get(o).dtype is not None), torch.float32)
        device_map = "balanced" if "device_map_balanced" in request.optimizations else None
        memory = request.settings.get("device_map_balanced", {}).get("max_memory")
        start = time.perf_counter()
        vae = {"vae": request.vae} if request.vae else {}  # loaders that know no VAE still serve the rest
        base = self._load(request.spec, dtype=dtype, device_map=device_map, max_memory=memory, **vae)
        self.disk_loads += 1
        seconds = time.perf_counter() - start
        return LivePipeline(key=key, base=base, pipe=copy.copy(base), load_seconds=seconds)

    @contextlib.contextmanager
    def acquire(self, request: GenerationRequest, slot: tuple[str, str] | None = None) -> Iterator[Prepared]:
        """Hold the pipeline for `request`, configured as it asks, for the duration of the block.

        `slot` (sweep name, configuration) selects a live pipeline of the sweep's own (see `own_pipelines`).
        """
        entry, loaded_now = self._slot_entry(request, slot) if slot else self._entry(request)
        with entry.lock:
            start = time.perf_counter()
            scheduler = self._scheduler(entry, request.scheduler, request.steps)  # before any technique runs
            ctx = self._configure(entry, request)
            entry.pipe.scheduler = scheduler
            switch = time.perf_counter() - start
            # call-stage techniques, and pipeline-stage ones that also set something around each call
            call_opts = [
                get(o)
                for o in request.optimizations
                if get(o).stage == "call" or get(o).call_context is not None
            ]
            shape = (request.config_label, request.width, request.height)
            first = shape not in entry.called
            entry.called.add(shape)
            yield Prepared(
                pipe=entry.pipe,
                ctx=ctx,
                call_opts=call_opts,
                applied=tuple(o.name for o in ordered(request.optimizations)),
                load_seconds=entry.load_seconds if loaded_now else 0.0,
                switch_seconds=switch,
                first_call=first,
                entry=entry,
            )

    @staticmethod
    def _scheduler(entry: LivePipeline, name: str, steps: int) -> Any:
        """A fresh scheduler for one request: a deep copy of a template built once per pipeline and name.

        Raises:
            ValidationError: this scheduler, as the model configures it, cannot take `steps` steps.
        """
        templates = entry.state.setdefault("scheduler_templates", {})
        if name not in templates:  # the base pipeline's own scheduler never steps: the "default" template
            base = entry.base.scheduler
            templates[name] = base if name == "default" else loader.make_scheduler(name, base)
        checked = entry.state.setdefault("scheduler_steps_checked", set())  # a dry run once, not each call
        if (name, steps) not in checked:
            refused = steps_refused(templates[name], steps)
            if refused is not None:
                kind = type(templates[name]).__name__
                raise ValidationError(
                    f"The {name} scheduler ({kind}, as this model configures it) cannot take {steps} steps: "
                    f"{refused}. Choose more steps or another scheduler."
                )
            checked.add((name, steps))
        return copy.deepcopy(templates[name])

    def _configure(self, entry: LivePipeline, request: GenerationRequest) -> Context:
        target = {o for o in request.optimizations if get(o).stage == "pipeline"}
        settings = {k: v for k, v in request.settings.items() if k in target}
        changed = {n for n in set(entry.applied) & target if entry.settings.get(n) != settings.get(n)}
        hot = "torch_compile" in target  # a compiled denoiser reads LoRA scales as tensors: set in place
        moved = adapters.differ(entry.state, request.loras)
        if moved and not adapters.rescaled(entry.pipe, entry.state, entry.stats, request.loras):
            changed = set(entry.applied)  # what techniques built over the weights is built again
        removed = (set(entry.applied) - target) | changed
        ctx = Context(
            device=request.device,
            hw=devices.detect(),
            family=request.spec.family,
            model=request.model,
            target=frozenset(target),
            calibration_prompts=request.spec.calibration_prompts,
            technique_settings=dict(request.settings),
            state=entry.state,
            stats=entry.stats,
            adapters=adapters.build_keys(request.loras, hot),
        )
        if any(not get(n).reversible for n in removed):
            self._rebuild(entry, ctx)
            removed, current = set(), set()
        else:
            current = set(entry.applied) - removed
        for opt in reversed(ordered(removed)):
            opt.revert(entry.pipe, ctx)
        entry.applied = tuple(o.name for o in ordered(current))
        self._place(entry, request, target)
        adapters.switch(entry.pipe, entry.state, entry.stats, request.loras, hot)
        for opt in ordered(target - current):
            opt.apply(entry.pipe, ctx)
            entry.applied = tuple(o.name for o in ordered({*entry.applied, opt.name}))
        entry.settings = settings
        return ctx

    def _rebuild(self, entry: LivePipeline, ctx: Context) -> None:
        """Undo everything and start again from the cached components (no disk read)."""
        revert_ctx = Context(ctx.device, ctx.hw, ctx.family, state=entry.state, stats=entry.stats)
        for opt in reversed(ordered(entry.applied)):
            opt.revert(entry.pipe, revert_ctx)
        entry.pipe = copy.copy(entry.base)
        entry.device = UNPLACED  # an offload or device map left its modules where they are: move them again
        entry.applied = ()
        entry.stats.clear()
        entry.called.clear()
        log.info("rebuilt %s from the cached components", entry.key[0])

    def _place(self, entry: LivePipeline, request: GenerationRequest, target: set[str]) -> None:
        placed = any(get(o).places_modules for o in request.optimizations)
        if placed or entry.device == request.device:
            if placed:
                entry.device = request.device
            return
        entry.pipe.to(request.device)
        entry.device = request.device
