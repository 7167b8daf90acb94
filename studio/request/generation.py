"""A generation request: loosely typed values from a form, a client's JSON or argv in, a typed, frozen
`GenerationRequest` out, or a `ValidationError` whose message says what to change. Nothing here loads a model
or touches an accelerator."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipelines import loras as lora_sources
from pipelines.distilled import TINY_VAES, adapters_for, few_step_adapter
from pipelines.registry import PipelineSpec, resolve
from pipelines.schedulers import SCHEDULERS
from pipelines.sources import read_config, resolve_vae
from studio import checks, devices, settings
from studio.errors import UnavailableError, ValidationError
from studio.optimizations import REGISTRY, check_conflicts, get, ordered, unavailable_reason
from studio.optimizations.adapters import Adapter
from studio.request.configs import parse_config, parse_opts
from studio.request.limits import (
    MAX_GUIDANCE,
    MAX_IMAGES,
    MAX_PROMPT,
    MAX_SEED,
    MAX_SIDE,
    MAX_STEPS,
    MIN_SIDE,
)


@dataclass(frozen=True)
class GenerationRequest:
    """A checked request: everything the engine needs, nothing it must re-check."""

    spec: PipelineSpec
    prompt: str
    negative_prompt: str
    seed: int
    steps: int
    guidance: float
    width: int
    height: int
    scheduler: str
    device: str
    optimizations: tuple[str, ...] = ()
    settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    batch: int = 1
    vae: str | None = None  # a VAE swapped in: a local folder or .safetensors file, or a hub id
    loras: tuple[Adapter, ...] = ()  # LoRAs loaded onto the pipeline for the run, each with its scale

    @property
    def model(self) -> str:
        return self.spec.id

    @property
    def dtype_name(self) -> str:
        return next((o for o in self.optimizations if get(o).dtype is not None), "fp32")

    @property
    def config_label(self) -> str:
        """'bf16+deepcache[interval=2]': the techniques in order, with the settings given for them."""

        def named(o: str) -> str:
            given = self.settings.get(o)
            return (
                f"{o}[{','.join(f'{k}={checks.typed(v)}' for k, v in sorted(given.items()))}]" if given else o
            )

        return "+".join(named(o) for o in self.optimizations) or "baseline"

    def columns(self) -> dict[str, Any]:
        """The request as its run's run-log columns (a form is filled from them, as from a logged run)."""
        return {
            "config_label": self.config_label,
            "model": self.model,
            "single_file_config": self.spec.single_file_config,
            "vae": self.vae,
            "loras": [a.record() for a in self.loras] or None,
            "device": self.device,
            "dtype": self.dtype_name,
            "requested": list(self.optimizations),
            "settings": self.settings,
            **{name: getattr(self, name) for name in ("prompt", "negative_prompt", "seed", "steps", "width")},
            **{name: getattr(self, name) for name in ("height", "guidance", "scheduler", "batch")},
        }


def _text(name: str, value: Any, required: bool) -> str:
    return checks.text(name, value, MAX_PROMPT, required=required)


def _side(name: str, value: Any) -> int:
    side = checks.whole(name, value, MIN_SIDE, MAX_SIDE)
    if side % 8:
        raise ValidationError(
            f"{name} must be a multiple of 8 (the VAE downsamples by 8); try {side // 8 * 8 or 8}."
        )
    return side


def _cross_attention_dim(spec: PipelineSpec) -> int | None:
    """The width a local UNet's cross-attention reads (a LoRA's must match), None where it is not known
    before loading (a hub model, a transformer)."""
    config = Path(spec.source) / "unet" / "config.json"
    if not (spec.local and config.is_file()):
        return None
    try:
        value = read_config(config).get("cross_attention_dim")
    except (OSError, ValueError, AttributeError):
        return None  # the loader says what is wrong with the model's files
    return value if isinstance(value, int) else None


def check_loras(spec: PipelineSpec, prompt: str, given: Any) -> tuple[str, tuple[Adapter, ...]]:
    """The prompt to encode (AUTOMATIC1111's `<lora:NAME:SCALE>` tags taken out) and the LoRAs of the request:
    those `given` (`SOURCE[:SCALE]` strings) and those the prompt's tags name, each found (a name in the LoRA
    folders, a local .safetensors file in the allowed roots, a hub id) and checked against the model."""
    text, tagged = lora_sources.loras_in_prompt(prompt)
    return text, resolve_adapters(spec, lora_sources.parse_loras([*lora_sources.parse_loras(given), *tagged]))


def resolve_adapters(spec: PipelineSpec, refs: tuple[lora_sources.LoraRef, ...]) -> tuple[Adapter, ...]:
    """Each LoRA named found (a name in the LoRA folders, a local .safetensors file in the allowed roots, a
    hub id) and checked against the model, with its scale."""
    folders = lora_sources.lora_folders(settings.home())
    width = _cross_attention_dim(spec) if refs else None
    adapters = []
    for ref in refs:
        file = lora_sources.resolve_lora(ref.source, folders)
        reason = lora_sources.fits(file, spec.family, width)
        if reason:
            raise ValidationError(reason)
        adapters.append(Adapter(file=file, scale=ref.scale))
    return tuple(adapters)


def with_few_step(request: GenerationRequest) -> GenerationRequest:
    """`request` as `few_step` runs it: the model's distilled adapter (`pipelines.distilled`) among its LoRAs
    at the scale it was trained for, with its scheduler, steps (or the setting's) and guidance. A model with
    no tiny decoder registered is refused `tiny_vae` here, before anything runs."""
    base = request.spec.adapter_base
    if "tiny_vae" in request.optimizations and base not in TINY_VAES:
        raise ValidationError(f"tiny_vae has no tiny decoder registered for {request.model}; remove it.")
    if "few_step" not in request.optimizations:
        return request
    chosen = get("few_step").settings(**request.settings.get("few_step", {}))
    adapter = few_step_adapter(base, None if chosen.adapter == "auto" else chosen.adapter)
    if adapter is None:
        known = ", ".join(adapters_for(base)) or "none"
        which = "distilled" if chosen.adapter == "auto" else chosen.adapter
        raise ValidationError(
            f"few_step has no {which} adapter registered for {request.model} (for it: {known}); remove it."
        )
    file = lora_sources.resolve_lora(adapter.source, lora_sources.lora_folders(settings.home()))
    others = tuple(a for a in request.loras if a.file.path != file.path)
    return dataclasses.replace(
        request,
        steps=chosen.steps or adapter.steps,
        guidance=adapter.guidance,
        scheduler=adapter.scheduler,
        loras=(*others, Adapter(file=file, scale=adapter.lora_scale)),
    )


def _check_settings(optimizations: list[str], settings: Any) -> dict[str, dict[str, Any]]:
    """Each technique's settings, built into its settings object (which checks them); only for
    requested ones."""
    if settings in (None, ""):
        return {}
    if not isinstance(settings, dict):
        raise ValidationError("settings must be a mapping of optimization name to its settings.")
    checked = {name: get(name).settings.checked(name, given) for name, given in settings.items()}
    return {name: given for name, given in checked.items() if name in optimizations}


def check_opts(names: list[str], spec: PipelineSpec, device: str) -> tuple[str, ...]:
    """Known, compatible with each other and runnable on `device`; returned in apply order."""
    for name in names:
        get(name)
    check_conflicts(set(names))
    hw = devices.detect()
    for name in names:
        reason = unavailable_reason(REGISTRY[name], hw, device, spec.family)
        if reason:
            # runnable here on some model: then it is this model that it does not fit
            other = "model" if unavailable_reason(REGISTRY[name], hw, device, None) is None else "device"
            raise UnavailableError(f"{reason} Remove it or choose another {other}.")
    dtype = next((n for n in names if get(n).dtype is not None), "fp32")
    if dtype not in spec.dtypes:
        raise ValidationError(f"{spec.id} supports {', '.join(spec.dtypes)}, not {dtype}.")
    return tuple(o.name for o in ordered(names))


def check_settings_here(request: GenerationRequest) -> GenerationRequest:
    """`request`, once no technique's settings pick hardware its device does not have (an attention
    backend); otherwise the technique's sentence (`Optimization.settings_unavailable`)."""
    for name in request.optimizations:
        reason = get(name).settings_unavailable(
            request.settings.get(name, {}), request.device, request.dtype_name
        )
        if reason:
            raise UnavailableError(f"{reason} Choose another setting or device.")
    return request


def with_config(request: GenerationRequest, config: Any) -> GenerationRequest:
    """`request` with another configuration (see `parse_config`): its techniques, checked for this model
    and device, and their settings (the configuration's own over the request's)."""
    names, given = parse_config(config)
    optimizations = check_opts(names, request.spec, request.device)
    merged = {name: {**request.settings.get(name, {}), **given.get(name, {})} for name in names}
    settings = _check_settings(names, {k: v for k, v in merged.items() if v})
    return with_few_step(
        check_settings_here(dataclasses.replace(request, optimizations=optimizations, settings=settings))
    )


def _validated(
    *,
    model: Any,
    prompt: Any,
    negative_prompt: Any = "",
    seed: Any = 0,
    steps: Any = None,
    guidance: Any = None,
    width: Any = None,
    height: Any = None,
    scheduler: Any = None,
    device: Any = "auto",
    optimizations: Any = None,
    settings: Any = None,
    batch: Any = 1,
    vae: Any = None,
    single_file_config: Any = None,
    loras: Any = None,
) -> GenerationRequest:
    """Check one generation request; unspecified sizes, steps and guidance use the model's defaults.

    The door's own checks, private to this package: every face and script calls
    `studio.request.build_request`, which takes the request's fields by name and calls this.

    `vae` names a VAE to swap in (see `pipelines.sources.resolve_vae`); `single_file_config`, for a
    .safetensors checkpoint, the local diffusers folder its configs come from (`pipelines.registry.resolve`).
    """
    if not isinstance(model, str):
        raise ValidationError(f"model must be text, not {type(model).__name__}.")
    spec = resolve(model, single_file_config or None)
    scheduler = scheduler or spec.scheduler
    if scheduler not in SCHEDULERS:
        raise ValidationError(f"Unknown scheduler {scheduler!r}; choose one of {', '.join(SCHEDULERS)}.")
    if spec.schedulers and scheduler not in spec.schedulers:
        raise ValidationError(
            f"{spec.id} runs with its own flow-matching scheduler: choose {' or '.join(spec.schedulers)}, "
            f"not {scheduler!r}."
        )
    if not isinstance(device, str):
        raise ValidationError("device must be text such as 'auto', 'cpu' or 'cuda:0'.")
    resolved = devices.resolve(device)
    names = parse_opts(optimizations)
    seed = random.randint(0, MAX_SEED) if seed in (-1, "-1") else checks.whole("seed", seed, 0, MAX_SEED)
    prompt, adapters = check_loras(spec, _text("prompt", prompt, required=True), loras)
    checked = check_settings_here(
        GenerationRequest(
            spec=spec,
            prompt=_text("prompt", prompt, required=True),
            negative_prompt=_text("negative prompt", negative_prompt, required=False),
            seed=seed,
            steps=checks.whole("steps", spec.steps if steps in (None, "") else steps, 1, MAX_STEPS),
            guidance=checks.number(
                "guidance", spec.guidance if guidance in (None, "") else guidance, 0.0, MAX_GUIDANCE
            ),
            width=_side("width", spec.width if width in (None, "") else width),
            height=_side("height", spec.height if height in (None, "") else height),
            scheduler=scheduler,
            device=resolved,
            optimizations=check_opts(names, spec, resolved),
            settings=_check_settings(names, settings),
            batch=checks.whole("batch", batch, 1, MAX_IMAGES),
            vae=resolve_vae(vae),
            loras=adapters,
        )
    )
    return with_few_step(checked)


def parse_setting_args(items: list[str]) -> dict[str, dict[str, Any]]:
    """`--setting torch_compile.mode=max-autotune` (repeated) ->
    {'torch_compile': {'mode': 'max-autotune'}}."""
    settings: dict[str, dict[str, Any]] = {}
    for item in items:
        key, sep, value = item.partition("=")
        name, dot, setting = key.partition(".")
        if not (sep and dot):
            raise ValidationError(f"--setting {item!r} must look like technique.setting=value.")
        settings.setdefault(name, {})[setting] = value
    return settings
