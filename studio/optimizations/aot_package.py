"""The `aot_package` technique: the denoiser (and, with `vae`, the VAE's decoder) compiled ahead of time with
AOTInductor into a package kept on disk, so that a new process loads it compiled instead of compiling again.

At the first call of each input shape the part is exported (`torch.export`, its keyword inputs by name) and
compiled (`torch._inductor.aoti_compile_and_package`) into a package without weights
(`aot_inductor.package_constants_in_so=False`), kept under the studio's home
(`studio.optimizations.packages`); the live module's tensors are handed to it
(`load_constants(user_managed=True)`: no copy). Any later process whose part has the same architecture,
shapes, dtype, device and torch version loads that package (about a second) and runs it at once. Each first
sight of a shape records its phase (`studio.phases`): "cold" (exported and compiled now) or
"package" (loaded compiled).

Unlike `torch_compile` there is no dynamo at call time: no guards to check per call and no recompiles, but
each new shape (size, batch, guidance on or off) is its own package. The package takes the weights as they are
when it is loaded: techniques that change them (precision, fused projections, layout) come before it, and
their names are part of the key. Settings: `vae` (compile the decoder too: a third of an SD 1.5 image at
256x256 on a CPU) and `source` (a folder of packages published from another machine, read before the studio's
own).
"""

from __future__ import annotations

import inspect
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from pipelines.sources import HUB_ID
from studio import checks, phases
from studio.errors import ValidationError, first_line
from studio.optimizations import compile_activity, inductor_cache, package_holdings, packages
from studio.optimizations.base import Context, Optimization, Settings, register
from studio.optimizations.denoiser import denoiser_name, restore_denoiser, swap_denoiser
from studio.optimizations.facts import DEFAULTS_ONLY, NO_MEMORY_EFFECT, Preset
from studio.optimizations.per_shape import PerShapeModule

log = logging.getLogger(__name__)

NAME = "aot_package"
INDUCTOR_CONFIGS = {"aot_inductor.package_constants_in_so": False}  # the weights stay the live module's


@dataclass(frozen=True)
class AotPackageSettings(Settings):
    """`vae`: package the VAE's decoder too; `source`: a folder of packages published from another machine
    (each checked against this device and torch version before use)."""

    vae: bool = False
    source: str = ""

    def __post_init__(self) -> None:
        self._set("vae", checks.boolean("aot_package vae", self.vae))
        source = checks.text("aot_package source", self.source, 500)
        if source and not Path(source).expanduser().is_dir() and not HUB_ID.match(source):
            raise ValidationError(
                f"aot_package source {source!r} is neither a folder here nor a Hugging Face dataset "
                "repository (owner/name); give the folder or repository packages were published to (one "
                "folder per package, each with package.pt2 and package.json), or leave it empty."
            )
        self._set("source", source)


def _output_class(module: torch.nn.Module) -> type | None:
    """The output class `module` returns with return_dict=True (None: it takes no return_dict)."""
    if "return_dict" not in inspect.signature(module.forward).parameters:
        return None
    from diffusers.models.modeling_outputs import Transformer2DModelOutput
    from diffusers.models.unets.unet_2d_condition import UNet2DConditionModel, UNet2DConditionOutput

    return UNet2DConditionOutput if isinstance(module, UNet2DConditionModel) else Transformer2DModelOutput


class PackagedModule(PerShapeModule):
    """Stands in for a pipeline part and runs a compiled package of it per input shape (built or loaded on
    first sight of the shape). Inputs are passed by name; None inputs are left out, a number given as the
    timestep becomes a tensor (a constant would be baked into the graph)."""

    counter = "package"

    def __init__(self, module: torch.nn.Module, ctx: Context, part: str):
        super().__init__(module, ctx.stats)
        self.part = part
        self._signature = inspect.signature(module.forward)
        self._output = _output_class(module)
        settings = ctx.settings(NAME)
        self._roots, self._source_note = packages.roots(settings.source)
        self._device = ctx.device
        self._model = ctx.model
        self._parts = {
            "part": part,
            "architecture": packages.architecture(module),
            "settings": ctx.technique_settings.get(NAME, {}) | {"source": ""},
            "techniques": sorted(ctx.target - {NAME}),
            **({"loras": [list(k) for k in ctx.adapters]} if ctx.adapters else {}),  # scales are in the graph
        }

    def _inputs(self, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
        bound = self._signature.bind(*args, **kwargs).arguments
        named = {}
        for name, value in bound.items():
            if self._signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
                named.update(value)
            else:
                named[name] = value
        named = {k: v for k, v in named.items() if v is not None and k != "return_dict"}
        if isinstance(named.get("timestep"), (int, float)):
            named["timestep"] = torch.tensor(named["timestep"], device=self._device)
        if self._output is not None:
            named["return_dict"] = False
        return named

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return_dict = kwargs.get("return_dict", True)
        inputs = self._inputs(args, kwargs)
        out = self.graph_for(inputs)(**inputs)
        if self._output is None:
            return out
        return self._output(sample=out[0]) if return_dict else tuple(out)

    def graph_key(self, inputs: dict[str, Any]) -> tuple:  # type: ignore[override]
        leaves, spec = tree_flatten(inputs)
        return (str(spec), *(_leaf_key(leaf) for leaf in leaves))

    def build(self, inputs: dict[str, Any]) -> Any:  # type: ignore[override]
        env = packages.environment(self._device)
        name = packages.key(
            {**self._parts, "environment": env, "inputs": [str(k) for k in self.graph_key(inputs)]}
        )
        what = f"the {self.part} at {_shape_words(inputs)}"
        notes = [self._source_note] if self._source_note else []
        names = [name]  # and, once a package of this key held other values, this module's own beside it
        for root in self._roots:
            for candidate in names:  # `_kept` may add this module's own name, tried next in the same root
                graph = self._kept(root, candidate, env, what=what, notes=notes, names=names)
                if graph is not None:
                    return graph
        return self._compile(inputs, names[-1], env, what, notes)

    def _kept(
        self, root: Path, name: str, env: dict[str, Any], *, what: str, notes: list[str], names: list[str]
    ) -> Any:
        """The package kept as `root/name`, loaded and bound, or None (none there, or one that cannot serve:
        `notes` says why). One that holds other values inside itself than this module's adds the name of
        this module's own to `names` (kept beside it: another model of the same architecture)."""
        start = time.perf_counter()
        try:
            entry = packages.find(root, name, env)
            if entry is None:
                return None
            other = package_holdings.same_values(self.original, entry.meta.get("holds"))
            if other:
                notes.append(f"The compiled package in {root / name} was not used: {other}")
                own = f"{names[0]}-{package_holdings.variant(self.original, entry.meta.get('holds'))}"
                names.extend([own] if own not in names else [])
                return None
            graph = self._load(entry.package)
        except packages.PackageRefused as exc:
            notes.append(f"{exc} It was not used.")
            log.warning("%s", exc)
            return None
        except (RuntimeError, OSError, ValueError) as exc:  # truncated or damaged: aoti cannot open it
            notes.append(
                f"The compiled package in {root / name} could not be loaded ({first_line(exc)}); "
                "it was compiled again."
            )
            if root == packages.cache_root():
                packages.discard(root / name, first_line(exc))
            return None
        took, note = time.perf_counter() - start, " ".join(notes)
        phases.record(self._stats, technique=NAME, phase=phases.PACKAGE, seconds=took, what=what, note=note)
        return graph

    def _compile(self, inputs: dict[str, Any], name: str, env: dict[str, Any], what: str, notes: list[str]):
        start = time.perf_counter()
        inductor_cache.keep_headers_with_kernels()
        compile_activity.say(f"exporting {what} into a graph (torch.export)")
        with torch.no_grad():
            exported = torch.export.export(self.original, (), inputs, strict=False)
        compile_activity.say(f"compiling {what} into a package (AOTInductor: lowering, kernels, linking)")

        def build(path: str) -> None:
            torch._inductor.aoti_compile_and_package(  # a copy: torch adds its own entries to the dict
                exported, package_path=path, inductor_configs=dict(INDUCTOR_CONFIGS)
            )
            managed = torch._inductor.aoti_load_package(path).get_constant_fqns()
            meta["holds"] = package_holdings.held(self.original, managed)  # written with the package

        meta = {key: self._parts[key] for key in ("part", "architecture", "techniques")} | {
            "model": self._model
        }
        meta |= {
            "environment": env,
            "inputs": _shape_words(inputs),
            "created_at": time.strftime("%Y-%m-%d %H:%M"),
        }
        path, note = packages.save(packages.cache_root(), name, build, meta)
        compile_activity.say(f"loading the package of {what}")
        try:
            graph = self._load(path)
        finally:
            compile_activity.clear()
        seconds = time.perf_counter() - start
        self._stats["compile_count"] = self._stats.get("compile_count", 0) + 1
        self._stats["compile_seconds"] = self._stats.get("compile_seconds", 0.0) + seconds
        phases.record(
            self._stats,
            technique=NAME,
            phase=phases.COLD,
            seconds=seconds,
            what=what,
            note=" ".join([*notes, note]).strip(),
        )
        return graph

    def _load(self, path: Path) -> Any:
        """The package at `path`, running on the live module's own tensors."""
        index = int(self._device.split(":")[1]) if ":" in self._device else -1
        if self._device == "cpu":
            packages.skip_known_isa_probe()
        compiled = torch._inductor.aoti_load_package(str(path), device_index=index)
        self._bind(compiled)
        return compiled

    def _bind(self, compiled: Any) -> None:
        """Point the package's constants at the live module's tensors as they are now (the package holds no
        copy of them: a tensor a technique has since replaced would be read after it was freed)."""
        tensors = dict(self.original.named_parameters(remove_duplicate=False))
        tensors.update(self.original.named_buffers(remove_duplicate=False))
        missing = [fqn for fqn in compiled.get_constant_fqns() if fqn not in tensors]
        if missing:
            raise ValueError(f"it expects tensors this {self.part} does not have: {', '.join(missing[:3])}")
        wanted = {fqn: tensors[fqn] for fqn in compiled.get_constant_fqns()}
        compiled.load_constants(wanted, check_full_update=True, user_managed=True)

    def keep_graphs(self, ctx: Context, part: str) -> PackagedModule:
        """The packages an earlier apply loaded, bound again to the module's tensors of this apply."""
        super().keep_graphs(ctx, part)
        for compiled in self._graphs.values():
            self._bind(compiled)
        return self


def _leaf_key(leaf: Any) -> Any:
    if isinstance(leaf, torch.Tensor):
        layout = "cl" if leaf.dim() == 4 and leaf.is_contiguous(memory_format=torch.channels_last) else ""
        return (tuple(leaf.shape), str(leaf.dtype), leaf.device.type, layout)
    return repr(leaf)


def _shape_words(inputs: dict[str, Any]) -> str:
    first = next((v for v in inputs.values() if isinstance(v, torch.Tensor)), None)
    return "x".join(map(str, first.shape)) if first is not None else "no tensor input"


def _packaged(module: torch.nn.Module, ctx: Context) -> torch.nn.Module:
    return PackagedModule(module.eval(), ctx, "UNet" if "UNet" in type(module).__name__ else "transformer")


def apply(pipe: Any, ctx: Context) -> None:
    denoiser_name(pipe)  # a pipeline without a UNet or transformer is refused here, before any compile
    swap_denoiser(_packaged)(pipe, ctx)
    vae = getattr(pipe, "vae", None)
    if ctx.settings(NAME).vae and vae is not None:
        ctx.state["aot_package_decoder"] = vae.decoder
        vae.decoder = PackagedModule(vae.decoder.eval(), ctx, "VAE decoder").keep_graphs(ctx, "vae.decoder")


def revert(pipe: Any, ctx: Context) -> None:
    decoder = ctx.state.pop("aot_package_decoder", None)
    if decoder is not None:
        pipe.vae.decoder = decoder
    restore_denoiser(pipe, ctx)


register(
    Optimization(
        name=NAME,
        label="compiled package (AOTInductor)",
        group="speed",
        description=(
            "Compile the UNet or transformer ahead of time (torch.export + AOTInductor) into a package kept "
            "on disk, one per input shape: the first call of a shape compiles (minutes for SD 1.5 on a CPU), "
            "every later process loads the package in about a second and runs at compiled speed, with no "
            "dynamo guards per call. The package takes the live model's weights (all but a few small tensors "
            "folded into its code, checked before use), so it costs megabytes on disk. Settings: vae (the "
            "VAE decoder too), source (a folder of packages published elsewhere)."
        ),
        conflict_reason=(
            "it swaps the denoiser for a package compiled ahead of time from the plain model, in which other "
            "compilers, quantized weights, offloading, step caches and casting have no place"
        ),
        conflicts=(
            "jit_trace_unet",
            "torch_compile",
            "openvino",
            "int8_static",
            "int8_dynamic",
            "int8_weight_only",
            "fp8",
            "deepcache",
            "token_merging",
            "autocast",
            "layerwise_casting",
            "group_offload",
            "model_cpu_offload",
            "sequential_cpu_offload",
            "device_map_balanced",
        ),
        reversible=False,
        apply=apply,
        revert=revert,
        settings=AotPackageSettings,
        order=80,
        autotune="slow_to_prepare",
        grid=DEFAULTS_ONLY,
        presets=(Preset(155, ("aot_package",)),),
        ladder_rung=None,
        memory_effect=NO_MEMORY_EFFECT,
    )
)
