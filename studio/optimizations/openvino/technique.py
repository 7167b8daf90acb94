"""The `openvino` technique: the UNet, the VAE decoder and the text encoder run by OpenVINO's CPU runtime.

Applied at request time like every technique: each part is swapped for a stand-in that, on the first call
of each input shape, converts the part (or reads the conversion from the disk cache), compresses or
quantizes it as the `mode` setting says, and compiles it for the CPU; the PyTorch parts are kept and put
back on revert. Modes (see `openvino.models`): "fp32" (fp32 weights; with `inference_precision` "f32" the math
of PyTorch's fp32 to rounding), "int8_weights" (8-bit weights), "hybrid_int8" (8-bit weights plus static
int8 of the convolutions, calibrated on the model's calibration prompts along a denoising trajectory of the
call's own size and steps) and "full_int8" (hybrid with the UNet's Linear layers as 1x1 convolutions, so
that they are static int8 too). `inference_precision` "auto" lets OpenVINO choose (bf16 on CPUs with AMX or
AVX512-BF16): faster there, and the image changes a little.

On CPUs without VNNI or AMX (an AVX2-only AMD EPYC, say) oneDNN's int8 convolutions add pairs of u8 x s8
products into a saturating int16, as for `int8_static` (`devices.int8_path`). NNCF's "overflow fix" quantizes
weights to 7 bits so that a pair always fits; NNCF and optimum-intel apply it to the first layer only, and the
other convolutions clip. `overflow_fix` "auto" applies it to every int8 convolution on such CPUs (measured on
the bundled model: 25.1 dB against fp32, 23.6 dB with the first layer only), and NNCF's default elsewhere.

What a first call prepares is kept under the studio's home (`openvino.cache`): each part as converted and
quantized, and the CPU plugin's compile of it, exported (a few MB for SD 1.5's int8 UNet, ~200 MB per image
size for the VAE decoder, one blob per part whatever the thread count, all together under a cap), so a new
process reads both back; each part's preparation is recorded as a phase ("cold": built now, "warm": read
back from those caches).

This module is the technique: its settings, apply and revert, and its facts. The stand-ins it swaps in are
`openvino.parts`, their calibration samples `openvino.calibration_samples`, the conversion and compression
`openvino.models` (with `openvino.statistics` and `openvino.winograd`), the disk cache `openvino.cache`, the
int8 recipes `openvino.int8`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from studio import checks, devices
from studio.errors import ValidationError
from studio.optimizations.base import Context, Optimization, Settings, register
from studio.optimizations.denoiser import restore_denoiser, swap_denoiser
from studio.optimizations.facts import NO_MEMORY_EFFECT, LadderRung
from studio.optimizations.openvino import models as ovm
from studio.optimizations.openvino.parts import OpenVINODecoder, OpenVINOTextEncoder, OpenVINOUNet

PRECISIONS = ("f32", "auto")
OVERFLOW_FIXES = ("auto", *ovm.OVERFLOW_FIXES)
INT8_LINEARS = ("auto", *ovm.LINEAR_FORMS)


@dataclass(frozen=True)
class OpenVINOSettings(Settings):
    """`mode`: fp32, int8_weights, hybrid_int8 or full_int8; `inference_precision`: f32 or auto (OpenVINO's
    choice, bf16 on CPUs with AMX or AVX512-BF16); `vae`, `text_encoder`: run those through OpenVINO too;
    `vae_int8` (int8 modes): the VAE decoder in static int8 as well (calibrated on the latents the
    calibration prompts denoise to), not 8-bit weights over float math; `overflow_fix` (int8 activations):
    which int8 convolutions get 7-bit weights, so that the int16 sums of CPUs without VNNI or AMX cannot
    saturate: "enable" (all), "first_layer_only" (NNCF's and optimum-intel's default), "disable", or "auto"
    (all on such CPUs, NNCF's default elsewhere); `int8_linears` (full_int8): how the UNet's Linear layers
    run in int8: "matmul" (int8 MatMuls), "convolution" (1x1 int8 convolutions over the tokens) or "auto"
    (the MatMuls on CPUs with VNNI or AMX, the convolutions elsewhere: each the faster there);
    `activation_ranges` (hybrid_int8, full_int8): "minmax" (NNCF's default) or "quantile" (each sample's
    0.01%-99.99% range, averaged: outliers clipped, a closer image, a longer first call);
    `calibration_precision` (hybrid_int8, full_int8): what NNCF's statistics inference runs in, "auto"
    (bf16 on CPUs with AMX or AVX512-BF16, a shorter first call) or "f32" (NNCF's and optimum-intel's);
    `winograd` (fp32 with f32 inference): the 3x3 convolutions of the UNet and the VAE decoder by
    Winograd's F(4x4, 3x3) or F(2x2, 3x3), over the whole image or (large images) in strips of rows that
    stay in the CPU's cache, whichever this CPU runs fastest for each shape, timed at the first call (the
    direct convolution where none gains): fewer multiplies, the same result to fp32 rounding."""

    mode: str = "fp32"
    inference_precision: str = "f32"
    vae: bool = True
    text_encoder: bool = True
    overflow_fix: str = "auto"
    int8_linears: str = "auto"
    activation_ranges: str = "minmax"
    calibration_precision: str = "auto"
    vae_int8: bool = False
    winograd: bool = False

    def __post_init__(self) -> None:
        self._set("mode", checks.one_of("openvino mode", self.mode, ovm.MODES))
        self._set(
            "inference_precision",
            checks.one_of("openvino inference_precision", self.inference_precision, PRECISIONS),
        )
        self._set("vae", checks.boolean("openvino vae", self.vae))
        self._set("text_encoder", checks.boolean("openvino text_encoder", self.text_encoder))
        self._set("overflow_fix", checks.one_of("openvino overflow_fix", self.overflow_fix, OVERFLOW_FIXES))
        self._set("int8_linears", checks.one_of("openvino int8_linears", self.int8_linears, INT8_LINEARS))
        self._set(
            "activation_ranges",
            checks.one_of("openvino activation_ranges", self.activation_ranges, ovm.ACTIVATION_RANGES),
        )
        self._set(
            "calibration_precision",
            checks.one_of("openvino calibration_precision", self.calibration_precision, PRECISIONS),
        )
        self._set("vae_int8", checks.boolean("openvino vae_int8", self.vae_int8))
        if self.activation_ranges != "minmax" and self.mode not in ovm.CALIBRATED:
            raise ValidationError(
                "openvino activation_ranges says how the UNet's int8 activations are calibrated: it needs "
                f"mode=hybrid_int8 or full_int8, not mode={self.mode}."
            )
        if self.calibration_precision != "auto" and self.mode not in ovm.CALIBRATED:
            raise ValidationError(
                "openvino calibration_precision says what the UNet's calibration runs in: it needs "
                f"mode=hybrid_int8 or full_int8, not mode={self.mode}."
            )
        if self.int8_linears != "auto" and self.mode != "full_int8":
            raise ValidationError(
                "openvino int8_linears says how full_int8 runs the UNet's Linear layers: it needs "
                f"mode=full_int8, not mode={self.mode}."
            )
        self._set("winograd", checks.boolean("openvino winograd", self.winograd))
        if self.winograd and (self.mode != "fp32" or self.inference_precision != "f32"):
            raise ValidationError(
                "openvino winograd rewrites fp32 convolutions: it needs mode=fp32 and inference_precision="
                f"f32, not mode={self.mode}, inference_precision={self.inference_precision}."
            )
        if self.vae_int8 and (self.mode == "fp32" or not self.vae):
            raise ValidationError(
                "openvino vae_int8 quantizes the VAE decoder OpenVINO runs: it needs vae=true and an int8 "
                f"mode (int8_weights, hybrid_int8 or full_int8), not mode={self.mode}, "
                f"vae={str(self.vae).lower()}."
            )


def overflow_fix(setting: str, cpu_flags: frozenset[str]) -> str:
    """NNCF's overflow fix for a setting on a CPU: "auto" gives every int8 convolution 7-bit weights where
    oneDNN sums u8 x s8 pairs into a saturating int16 (no VNNI, no AMX), NNCF's default elsewhere."""
    if setting != "auto":
        return setting
    return "enable" if devices.int8_path(cpu_flags) == "reduced_range" else "first_layer_only"


def int8_linears(setting: str, cpu_flags: frozenset[str]) -> str:
    """How full int8 runs the UNet's Linear layers on a CPU. Measured per UNet call on SD 1.5 at 256x256
    against optimum-intel's hybrid int8 (whose Linear layers are 8-bit weights over float math): on a VNNI
    CPU (Zen 5 EPYC) int8 MatMuls x1.23, the 1x1 convolutions x0.65 (one 1x1 image per token starves
    oneDNN's int8 convolution); without VNNI (AVX2 EPYC) the convolutions x1.24, int8 MatMuls x0.88."""
    if setting != "auto":
        return setting
    return "convolution" if devices.int8_path(cpu_flags) == "reduced_range" else "matmul"


def statistics_precision(setting: str, hw: devices.Hardware) -> str:
    """The precision NNCF's statistics inference of a calibrated UNet runs in: with
    `calibration_precision` "auto", bf16 where the CPU computes it (AVX512-BF16 or AMX), f32 elsewhere. On
    a Zen 5 EPYC (SD 1.5, 256x256, 10 steps, 48 samples) bf16 took the statistics from 57-61 s to 43 s;
    the int8 image against PyTorch fp32's, seeds 1-4: 43.12 dB on average against 43.03 with f32
    statistics. Bias correction stays f32 (its corrections are small differences)."""
    return "bf16" if setting == "auto" and hw.cpu_bf16 else "f32"


def copies(settings: OpenVINOSettings) -> float:
    """The further copies of the pipeline's weights the compiled parts hold: fp32, as many bytes again;
    with `winograd` more, the rewritten convolutions' weights being 16/9 (F(2, 3)) or 4 (F(4, 3)) times as
    large (SD 1.5's UNet: 3.3 GB on disk in fp32, 4.7 GB rewritten on an AVX2 EPYC)."""
    return 1.4 if settings.winograd else 1.0


def apply(pipe: Any, ctx: Context) -> None:
    settings = ctx.settings("openvino")
    ovm.openvino()  # unavailable before anything changes
    if settings.mode != "fp32":
        ovm.nncf()
    hw = ctx.hw or devices.detect()
    flags = hw.cpu_flags
    fix = overflow_fix(settings.overflow_fix, flags)
    if settings.mode in ovm.CALIBRATED or settings.vae_int8:  # int8 activations: the fix applies
        ctx.stats["openvino_overflow_fix"] = fix
    linears = int8_linears(settings.int8_linears, flags) if settings.mode == "full_int8" else None
    if linears:
        ctx.stats["openvino_int8_linears"] = linears
    statistics = statistics_precision(settings.calibration_precision, hw)
    if settings.mode in ovm.CALIBRATED:
        ctx.stats["openvino_statistics_precision"] = statistics
    swap_denoiser(
        lambda unet, _: OpenVINOUNet(
            unet.eval(),
            settings,
            ctx.stats,
            pipe=pipe,
            prompts=ctx.calibration_prompts,
            fix=fix,
            linears=linears,
            statistics=statistics,
        )
    )(pipe, ctx)
    if settings.vae:
        ctx.state["openvino_decoder"] = pipe.vae.decoder
        decoder = pipe.vae.decoder.eval()
        pipe.vae.decoder = OpenVINODecoder(
            decoder, settings, ctx.stats, pipe=pipe, prompts=ctx.calibration_prompts, fix=fix
        ).keep_graphs(ctx, "vae.decoder")
    if settings.text_encoder:
        ctx.state["openvino_text_encoder"] = pipe.text_encoder
        pipe.text_encoder = OpenVINOTextEncoder(pipe.text_encoder.eval(), settings, ctx.stats).keep_graphs(
            ctx, "text_encoder"
        )


def revert(pipe: Any, ctx: Context) -> None:
    restore_denoiser(pipe, ctx)
    decoder = ctx.state.pop("openvino_decoder", None)
    if decoder is not None:
        pipe.vae.decoder = decoder
    encoder = ctx.state.pop("openvino_text_encoder", None)
    if encoder is not None:
        pipe.text_encoder = encoder


register(
    Optimization(
        name="openvino",
        label="OpenVINO runtime (CPU)",
        group="speed",
        description=(
            "Run the UNet, VAE decoder and text encoder with OpenVINO's CPU runtime (its PyTorch frontend, "
            "NNCF): mode fp32, int8_weights (8-bit weights), hybrid_int8 (8-bit weights and calibrated int8 "
            "convolutions) or full_int8 (the Linear layers too: int8 MatMuls on CPUs with VNNI or AMX, 1x1 "
            "int8 convolutions elsewhere; int8_linears picks); "
            "inference_precision f32 keeps fp32 math, auto lets OpenVINO pick bf16 on CPUs with AMX or "
            "AVX512-BF16; activation_ranges quantile clips outliers (a closer image, a longer first call); "
            "calibration_precision auto calibrates in bf16 on such CPUs (a shorter first call), f32 is "
            "NNCF's own; vae_int8 makes the VAE decoder static int8 too; winograd (fp32) computes the 3x3 "
            "convolutions with fewer multiplies (Winograd's F(4x4,3x3) or F(2x2,3x3), whole or in strips of "
            "rows, each shape timed on this CPU at the first call). On CPUs without VNNI "
            "or AMX every int8 convolution gets 7-bit weights (overflow_fix=auto), so the int16 sums there "
            "cannot saturate. The first call of each size converts (and calibrates) and is cached on disk."
        ),
        requires=("module:openvino", "family:sd", "cpu"),
        conflict_reason=(
            "it runs the UNet, VAE decoder and text encoder in OpenVINO's runtime from the float model it "
            "converts, where PyTorch's compilers, quantizations, step caches, attention processors, "
            "layouts and "
            "precisions have no effect (its own settings choose precision and int8)"
        ),
        conflicts=(
            "jit_trace_unet",
            "torch_compile",
            "int8_dynamic",
            "int8_static",
            "deepcache",
            "token_merging",
            "fused_qkv",
            "channels_last",
            "attention_slicing",
            "classic_attention",
            "bf16",
            "autocast",
        ),
        reversible=False,
        weight_copies=copies,
        shares_weights=True,  # reads the weights to convert them; the parts it swaps in wrap the originals
        apply=apply,
        revert=revert,
        settings=OpenVINOSettings,
        order=80,
        autotune="candidate",
        grid=(
            {"mode": "fp32"},
            {"mode": "fp32", "winograd": True},
            {"mode": "fp32", "inference_precision": "auto"},
            {"mode": "int8_weights", "inference_precision": "auto"},
            {"mode": "hybrid_int8", "inference_precision": "auto"},
            {"mode": "full_int8", "inference_precision": "auto"},
            {"mode": "full_int8", "inference_precision": "auto", "vae_int8": True},
        ),
        presets=(),
        # on a CPU, the runtime users reach for instead: it replaces what came before that it conflicts with
        ladder_rung=LadderRung(80, "OpenVINO runtime", replaces_conflicts=True),
        memory_effect=NO_MEMORY_EFFECT,
    )
)
