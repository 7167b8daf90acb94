"""Static int8 quantization of the UNet for x86 CPUs: PyTorch 2 export quantization lowered by inductor.

`int8_dynamic` leaves the convolutions (most of an SD UNet's FLOPs) in floating point and
quantizes activations at run time. `int8_static` quantizes convolutions and linear layers:
weights per channel, activations per tensor with ranges observed in advance (calibration).
Inductor, with frozen weights, lowers the quantize/convolution/dequantize patterns to oneDNN's
int8 kernels (VNNI on AVX-512 CPUs, AMX on Xeons from Sapphire Rapids on). torchao's
`X86InductorQuantizer` and its inductor passes do the work; this module only drives them.

The graph is exported for fixed shapes, so each input shape gets its own build, on its first call:
1. `torch.export` the UNet (sample, timestep, text embeddings);
2. insert observers (`prepare_pt2e`) and calibrate: a denoising trajectory of `calibration_steps`
   steps, from seeded noise, with a fresh copy of the pipeline's scheduler and the call's own
   text embeddings, run through the observed model (each sample of the batch follows its own
   conditioning, so guided and unguided activations are both seen);
3. with `bias_correction` (the default), the trajectory once more with the ranges fixed, to take the
   mean error quantization adds to each output channel out of the biases;
4. `convert_pt2e`, then `torch.compile` with inductor and freezing; with `cpp_wrapper` the graph's
   launcher is C++ and its kernels are built as one library instead of one each.
With `vae` on (the default), the VAE's decoder gets the same treatment, calibrated on the first
latents it decodes at each shape: at 256x256 it is a third of an SD 1.5 image's time on a CPU.
All of it is the first call's cost, counted as compiles (`compile_count`, `compile_seconds`).
The float UNet and decoder are kept and put back on revert.

Which int8 kernels oneDNN runs depends on the CPU, and so does how activations must be quantized
(`devices.int8_path`, recorded in the pipeline's stats as `int8_static_path`):
- "amx" (`amx_int8`, Sapphire Rapids on) and "vnni" (`avx512_vnni`, or `avx_vnni` on AVX2 CPUs that
  have it): u8 x s8 products are accumulated straight into int32; activations use the full 0..255.
- "reduced_range" (neither, e.g. an AVX2-only AMD EPYC): oneDNN multiplies with vpmaddubsw, which
  adds each pair of u8 x s8 products into a saturating int16 (255 * 127 * 2 > 32767): large
  activations clip and the image degrades (21 dB against fp32 measured on such a CPU). Activations
  are quantized to 0..127 instead (torchao's `reduce_range`), so that a pair always fits.
"""

from __future__ import annotations

import importlib
import sys
import time
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from studio import checks, devices, phases
from studio.errors import UnavailableError
from studio.optimizations import kept
from studio.optimizations.base import Context, Optimization, Settings, register
from studio.optimizations.bias_correction import correct_biases
from studio.optimizations.calibration import denoising_trajectory
from studio.optimizations.compile import freezing
from studio.optimizations.counting import counting_backend
from studio.optimizations.denoiser import restore_denoiser, swap_denoiser
from studio.optimizations.facts import NO_MEMORY_EFFECT
from studio.optimizations.inductor_cache import recovering
from studio.optimizations.per_shape import PerShapeModule, PerShapeUNet

LAYERS = ("all", "convolutions")
CPP_WRAPPER = ("auto", "true", "false")
MKLDNN_LOWERINGS = "torch._inductor.mkldnn_lowerings"  # where the lowering's copy warning is raised
EDGES = ("conv_in", "conv_out")  # the first and last convolution of a UNet and of a VAE decoder


@dataclass(frozen=True)
class Int8StaticSettings(Settings):
    """`calibration_steps`: denoising steps observed to set the activation ranges; `vae`: quantize the decoder
    too; `layers`: "all" (convolutions and linear layers) or "convolutions" (the linear layers, and the first
    and last convolution, stay in floating point: OpenVINO's hybrid recipe, closer to the fp32 image);
    `bias_correction`: take the mean error quantization adds to each output channel back out of the biases
    (one more calibration run; studio.optimizations.bias_correction); `cpp_wrapper`: inductor's C++ launcher,
    "auto" everywhere but the vnni path (`wrapped_in_cpp`)."""

    calibration_steps: int = 8
    vae: bool = True
    layers: str = "all"
    bias_correction: bool = True
    cpp_wrapper: str = "auto"

    def __post_init__(self) -> None:
        self._set(
            "calibration_steps", checks.whole("int8_static calibration_steps", self.calibration_steps, 1, 50)
        )
        self._set("vae", checks.boolean("int8_static vae", self.vae))
        self._set("layers", checks.one_of("int8_static layers", self.layers, LAYERS))
        self._set("bias_correction", checks.boolean("int8_static bias_correction", self.bias_correction))
        wrapper = str(self.cpp_wrapper).strip().lower()
        self._set("cpp_wrapper", checks.one_of("int8_static cpp_wrapper", wrapper, CPP_WRAPPER))


def wrapped_in_cpp(setting: str, path: str) -> bool:
    """Whether the int8 graphs get inductor's C++ launcher: "auto" turns it on on the amx and reduced_range
    paths. The same image to the bit, one library of kernels instead of one per kernel (docs/benchmarks.md):
    on a 2-core Xeon with AMX sd15-arch's first call 8-12% shorter at the same steady speed and tiny-shapes'
    steady call a quarter shorter; on a 2-core AVX2-only AMD EPYC (reduced_range) tiny-shapes' first call
    15% shorter and its steady call ×1.87 instead of ×1.40 over fp32. On a Cascade Lake (vnni) an older torch
    built it in 5.6 min instead of 2.2, so that path keeps the Python launcher."""
    return setting == "true" or (setting == "auto" and path != "vnni")


# Unbounded caches keyed by a module, in torchao and torch.ao: each quantized graph is remembered there (with
# its observers and weights) after it is gone, ~50 MB per int8_static build of the bundled model in a Compare.
DEVICE_CACHES = (
    ("torchao.utils", "_assert_and_get_unique_device"),
    ("torch.ao.quantization.fx.utils", "assert_and_get_unique_device"),
)


@kept.on_release
def forget_dropped_quantized_graphs() -> None:
    """Empty the libraries' caches of the devices of the modules they quantized (they only spare a look at
    the module's parameters), so that a dropped quantized graph goes."""
    for module_name, name in DEVICE_CACHES:
        cached = getattr(sys.modules.get(module_name), name, None)
        if hasattr(cached, "cache_clear"):
            cached.cache_clear()


def _pt2e() -> tuple[Any, Any]:
    """torchao's PT2E entry points and x86 quantizer module (importing the latter's passes registers them)."""
    try:
        quantize = importlib.import_module("torchao.quantization.pt2e.quantize_pt2e")
        x86 = importlib.import_module("torchao.quantization.pt2e.quantizer.x86_inductor_quantizer")
        importlib.import_module("torchao.quantization.pt2e.inductor_passes.x86")
    except ImportError as exc:
        raise UnavailableError(f"int8_static could not import torchao's PT2E quantization ({exc}).") from exc
    return quantize, x86


@dataclass(frozen=True)
class Recipe:
    """What gets quantized and how: `reduce_range` keeps activations within 0..127 (CPUs without VNNI or AMX);
    `layers` and `bias_correction` as in Int8StaticSettings; `cpp_wrapper`: inductor's C++ launcher."""

    reduce_range: bool = False
    layers: str = "all"
    bias_correction: bool = True
    cpp_wrapper: bool = False

    def quantizer(self, module: torch.nn.Module) -> Any:
        """The quantizer for `module`, the one exported (its submodules' names find the edge convolutions)."""
        _, x86 = _pt2e()
        config = x86.get_default_x86_inductor_quantization_config(reduce_range=self.reduce_range)
        quantizer = x86.X86InductorQuantizer()
        if self.layers == "all":
            return quantizer.set_global(config)
        for name, sub in module.named_modules():  # a module name's setting outranks the operator type's
            if name.rpartition(".")[2] in EDGES and isinstance(sub, torch.nn.Conv2d):
                quantizer.set_module_name_qconfig(name, None)
        return quantizer.set_module_type_qconfig(torch.nn.Conv2d, config)


def quantize_and_compile(
    module: torch.nn.Module,
    inputs: tuple[torch.Tensor, ...],
    calibrate,
    recipe: Recipe,
    stats: dict[str, Any] | None = None,
    part: str = "the UNet",
) -> Any:
    """Export `module` for these inputs, observe it while `calibrate(observed)` runs, convert to int8 as the
    recipe says and compile it with inductor and frozen weights; the first (compiling) call happens here.
    Recorded in `stats` as the cold phase: the calibration runs again in every process (inductor's cache
    shortens the compile, not the calibration)."""
    start = time.perf_counter()
    compiled = _quantize_and_compile(module, inputs, calibrate, recipe)
    if stats is not None:
        what = f"{part} at {'x'.join(str(n) for n in inputs[0].shape)}"
        took = time.perf_counter() - start
        phases.record(stats, technique="int8_static", phase=phases.COLD, seconds=took, what=what)
    return compiled


def _quantize_and_compile(
    module: torch.nn.Module, inputs: tuple[torch.Tensor, ...], calibrate, recipe: Recipe
) -> Any:
    quantize, _ = _pt2e()
    with torch.no_grad():
        exported = torch.export.export(module, inputs).module()
        observed = quantize.prepare_pt2e(exported, recipe.quantizer(module))
        calibrate(observed)
        if recipe.bias_correction:
            correct_biases(observed, calibrate)
        converted = quantize.convert_pt2e(observed)
        # Outside `counting_into`, the backend counts nothing: the build is counted once, by PerShapeModule.
        options = {"freezing": True, **({"cpp_wrapper": True} if recipe.cpp_wrapper else {})}
        compiled = recovering(torch.compile(converted, backend=counting_backend(options)))
        with freezing(), warnings.catch_warnings():
            # Inductor's oneDNN lowering copies each weight's zero points with torch.tensor(a tensor), which
            # warns once per int8 layer: its own code, nothing the user did, and not for the user's terminal.
            warnings.filterwarnings(
                "ignore", "To copy construct from a tensor", UserWarning, MKLDNN_LOWERINGS
            )
            compiled(*inputs)
    return compiled


class Int8StaticUNet(PerShapeUNet):
    """The UNet quantized to static int8 and compiled, one build per input shape."""

    counter = "compile"

    def __init__(
        self, unet: torch.nn.Module, pipe: Any, calibration_steps: int, stats: dict[str, Any], recipe: Recipe
    ):
        super().__init__(unet, stats)
        self._scheduler = lambda: pipe.scheduler  # the request's scheduler, set on the pipeline per request
        self._calibration_steps = calibration_steps
        self._recipe = recipe

    def calibrate(self, model: Any, inputs: tuple[torch.Tensor, ...]) -> None:
        """Run `model` along a short denoising trajectory of this call's shape and text embeddings."""
        sample, _, context = inputs
        denoising_trajectory(model, sample, context, self._scheduler(), self._calibration_steps)

    def build(self, inputs: tuple[torch.Tensor, ...]) -> Any:
        calibrate = lambda observed: self.calibrate(observed, inputs)  # noqa: E731
        return quantize_and_compile(self._plain, inputs, calibrate, self._recipe, stats=self._stats)


class Int8StaticDecoder(PerShapeModule):
    """The VAE's decoder quantized to static int8 and compiled, one build per latent shape, calibrated on the
    first latents it decodes at that shape (the image being made)."""

    counter = "compile"

    def __init__(self, decoder: torch.nn.Module, stats: dict[str, Any], recipe: Recipe):
        super().__init__(decoder, stats)
        self._recipe = recipe

    def forward(self, sample: torch.Tensor, latent_embeds: torch.Tensor | None = None) -> torch.Tensor:
        if latent_embeds is not None:
            raise TypeError(
                "Int8StaticDecoder takes no latent_embeds (spatially conditioned VAEs are not quantized)"
            )
        inputs = (sample,)
        return self.graph_for(inputs)(sample)

    def build(self, inputs: tuple[torch.Tensor, ...]) -> Any:
        calibrate = lambda observed: observed(*inputs)  # noqa: E731
        return quantize_and_compile(
            self.original, inputs, calibrate, self._recipe, stats=self._stats, part="the VAE decoder"
        )


def quantize_unet(pipe: Any, ctx: Context) -> None:
    _pt2e()  # unavailable before anything changes
    settings = ctx.settings("int8_static")
    path = ctx.stats["int8_static_path"] = devices.int8_path((ctx.hw or devices.detect()).cpu_flags)
    recipe = Recipe(
        reduce_range=path == "reduced_range",
        layers=settings.layers,
        bias_correction=settings.bias_correction,
        cpp_wrapper=wrapped_in_cpp(settings.cpp_wrapper, path),
    )
    calibration = settings.calibration_steps
    swap_denoiser(lambda unet, _: Int8StaticUNet(unet.eval(), pipe, calibration, ctx.stats, recipe))(
        pipe, ctx
    )
    if settings.vae:
        ctx.state["int8_static_decoder"] = pipe.vae.decoder
        pipe.vae.decoder = Int8StaticDecoder(pipe.vae.decoder.eval(), ctx.stats, recipe).keep_graphs(
            ctx, "vae.decoder"
        )


def restore(pipe: Any, ctx: Context) -> None:
    ctx.stats.pop("int8_static_path", None)
    restore_denoiser(pipe, ctx)
    decoder = ctx.state.pop("int8_static_decoder", None)
    if decoder is not None:
        pipe.vae.decoder = decoder


register(
    Optimization(
        name="int8_static",
        label="int8 static quantization (x86)",
        group="precision",
        description=(
            "Quantize the convolutions and linear layers of the UNet (and of the VAE decoder, setting vae) "
            "to int8 with calibrated activation ranges (PT2E, torchao's X86InductorQuantizer) and compile "
            "them with inductor: oneDNN int8 kernels (VNNI, AMX) on x86 CPUs; layers=convolutions keeps the "
            "linear layers and the first and last convolution in float (OpenVINO's hybrid recipe), and the "
            "biases are corrected for the mean error quantization adds; cpp_wrapper builds the graphs with "
            "inductor's C++ launcher (auto: on all but VNNI CPUs without AMX). The first call of each "
            "image size calibrates and compiles (minutes for SD 1.5). Changes the output slightly; judge it "
            "by PSNR."
        ),
        requires=("module:torchao", "family:sd", "cpu-x86"),
        conflict_reason=(
            "it swaps the UNet (and the VAE decoder) for quantized, compiled graphs of the plain float "
            "model, which other compilers and quantizations, step caches, fused projections, bf16 and "
            "autocast would change under its calibration or be bypassed by"
        ),
        conflicts=(
            "jit_trace_unet",
            "torch_compile",
            "int8_dynamic",
            "int8_weight_only",  # its prepare finds torchao's int8 tensors where it expects aten linears
            "deepcache",
            "token_merging",
            "fused_qkv",
            "bf16",
            "autocast",
        ),
        reversible=False,
        apply=quantize_unet,
        revert=restore,
        settings=Int8StaticSettings,
        call_context=lambda ctx: freezing(),
        order=80,
        autotune="slow_to_prepare",
        grid=({"layers": "all"}, {"layers": "convolutions"}),  # fastest, or closer to fp32
        presets=(),
        ladder_rung=None,
        memory_effect=NO_MEMORY_EFFECT,
    )
)
