"""The `openvino` technique: the UNet, the VAE decoder and the text encoder run by OpenVINO's CPU runtime.

Applied at request time like every technique: each part is swapped for a stand-in that, on the first call
of each input shape, converts the part (or reads the conversion from the disk cache), compresses or
quantizes it as the `mode` setting says, and compiles it for the CPU; the PyTorch parts are kept and put
back on revert. Modes (see `openvino_models`): "fp32" (fp32 weights; with `inference_precision` "f32" the math
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
"""

from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass
from typing import Any

import torch

from pipelines.schedulers import denoiser_calls
from studio import checks, devices
from studio.errors import ValidationError
from studio.optimizations import openvino_models as ovm
from studio.optimizations import openvino_statistics as ovs
from studio.optimizations import openvino_winograd as owg
from studio.optimizations.base import Context, Optimization, Settings, register
from studio.optimizations.calibration import Inputs, Steps, answer, denoising_steps
from studio.optimizations.denoiser import restore_denoiser, swap_denoiser
from studio.optimizations.per_shape import PerShapeModule, PerShapeUNet

PRECISIONS = ("f32", "auto")
OVERFLOW_FIXES = ("auto", *ovm.OVERFLOW_FIXES)
# The most UNet calls a calibrated UNet is calibrated on: NNCF's statistics cost ~5 s a sample for SD 1.5 at
# 256x256 on a 2-core CPU, so a 50-step request would pay five times what a 10-step one pays for the same
# spread of timesteps. 48 covers 10 steps of the four calibration prompts (PNDM: 11 calls each, 44 in all).
CALIBRATION_SAMPLES = 48


@dataclass(frozen=True)
class OpenVINOSettings(Settings):
    """`mode`: fp32, int8_weights, hybrid_int8 or full_int8; `inference_precision`: f32 or auto (OpenVINO's
    choice, bf16 on CPUs with AMX or AVX512-BF16); `vae`, `text_encoder`: run those through OpenVINO too;
    `vae_int8` (int8 modes): the VAE decoder in static int8 as well (calibrated on the latents the
    calibration prompts denoise to), not 8-bit weights over float math; `overflow_fix` (int8 activations):
    which int8 convolutions get 7-bit weights, so that the int16 sums of CPUs without VNNI or AMX cannot
    saturate: "enable" (all), "first_layer_only" (NNCF's and optimum-intel's default), "disable", or "auto"
    (all on such CPUs, NNCF's default elsewhere); `winograd` (fp32 with f32 inference): the 3x3
    convolutions of the UNet and the VAE decoder by Winograd's F(4x4, 3x3) or F(2x2, 3x3), over the whole
    image or (large images) in strips of rows that stay in the CPU's cache, whichever this CPU runs fastest
    for each shape, timed at the first call (the direct convolution where none gains): fewer multiplies, the
    same result to fp32 rounding."""

    mode: str = "fp32"
    inference_precision: str = "f32"
    vae: bool = True
    text_encoder: bool = True
    overflow_fix: str = "auto"
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
        self._set("vae_int8", checks.boolean("openvino vae_int8", self.vae_int8))
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


@functools.cache
def fastest_convolution(shape: tuple[int, ...]) -> owg.Form | None:
    """`openvino_winograd.fastest_convolution`, timed once per shape in a process."""
    return owg.fastest_convolution(shape)


def _runner(model: Any, precision: str) -> Any:
    """A callable running the compiled model on torch tensors, returning its first output as a tensor."""
    request = ovm.compile_for_cpu(model, precision).create_infer_request()

    def run(*inputs: torch.Tensor) -> torch.Tensor:
        arrays = [t.detach().contiguous().cpu().numpy() for t in inputs]
        return torch.from_numpy(request.infer(arrays, share_inputs=False)[0].copy())

    return run


class OpenVINOPart(PerShapeModule):
    """A pipeline part run by OpenVINO: converted, compressed and compiled once per input shape."""

    counter = "compile"
    part = ""
    convolutional = True  # has 3x3 convolutions `winograd` may rewrite

    def __init__(self, module: torch.nn.Module, settings: OpenVINOSettings, stats: dict[str, Any]):
        super().__init__(module, stats)
        self._settings = settings
        self._weights = ovm.fingerprint(module)

    def traced(self) -> torch.nn.Module:
        """The module as `convert_model` sees it: positional tensors in, one tensor out."""
        return self.original

    def compressed(self, model: Any, inputs: tuple[torch.Tensor, ...]) -> Any:
        return model if self._settings.mode == "fp32" else ovm.compress_weights(model)

    def key_parts(self, inputs: tuple[torch.Tensor, ...]) -> dict[str, Any]:
        return {
            "part": self.part,
            "weights": self._weights,
            "inputs": [[list(t.shape), str(t.dtype)] for t in inputs],
            "mode": self._settings.mode,
        }

    def build(self, inputs: tuple[torch.Tensor, ...]) -> Any:
        parts = self.key_parts(inputs)
        model = ovm.cached_model(
            ovm.cache_key(**parts),
            lambda: self.compressed(ovm.convert(self.traced(), inputs), inputs),
            self._stats,
        )
        if self._settings.winograd and self.convolutional:
            # the fp32 conversion's entry, rewritten: which shapes gain is timed, so depends on the CPU
            fp32 = model
            model = ovm.cached_model(
                ovm.cache_key(**parts, winograd=owg.CHOOSER, cpu=devices.detect().cpu_name),
                lambda: owg.winograd_convolutions(fp32, fastest_convolution),
                self._stats,
            )
            self._stats[f"openvino_winograd_{self.part}"] = owg.winograd_counts(model)
        return _runner(model, self._settings.inference_precision)


class OpenVINOUNet(OpenVINOPart, PerShapeUNet):
    """The UNet; in hybrid_int8 and full_int8 modes calibrated on the model's calibration prompts at the
    call's size and steps (the step count is read from the pipeline's scheduler, set for the running call)."""

    part = "unet"

    def __init__(self, unet, settings, stats, pipe: Any, prompts: tuple[str, ...], fix: str):
        super().__init__(unet, settings, stats)  # PerShapeUNet's part makes `_plain`
        self._pipe = weakref.ref(pipe)  # no cycle: the part is freed with its pipeline
        self._prompts = prompts
        self._overflow_fix = fix

    def traced(self) -> torch.nn.Module:
        return self._plain

    def _steps(self) -> int:
        return len(self._pipe().scheduler.timesteps)

    def graph_key(self, inputs: tuple[torch.Tensor, ...]) -> tuple:
        """In the calibrated modes a graph is calibrated for the call's step count as well as its shapes."""
        steps = self._steps() if self._settings.mode in ovm.CALIBRATED else None
        return (*super().graph_key(inputs), steps)

    def key_parts(self, inputs):
        parts = super().key_parts(inputs)
        if self._settings.mode in ovm.CALIBRATED:
            scheduler = self._pipe().scheduler
            parts.update(
                steps=self._steps(),
                prompts=list(self._prompts),
                scheduler=type(scheduler).__name__,
                overflow_fix=self._overflow_fix,
                samples=CALIBRATION_SAMPLES,  # how many of the trajectories' inputs NNCF sees
                denoised_by="nncf",  # each sample's prediction from NNCF's inference of it
            )
        return parts

    def compressed(self, model: Any, inputs: tuple[torch.Tensor, ...]) -> Any:
        if self._settings.mode not in ovm.CALIBRATED:
            return super().compressed(model, inputs)
        calibration = self.calibration(inputs, model)  # before the rewrite below
        if self._settings.mode == "full_int8":
            self._stats["openvino_linears_as_convolutions"] = ovm.linears_as_convolutions(model)
        with ovs.listening(calibration.heard):
            quantized = ovm.hybrid_quantize(model, calibration, self._overflow_fix)
        self._stats["openvino_calibration_calls"] = {
            "answered by NNCF's statistics inference": calibration.answered,
            "run through the fp32 UNet": calibration.denoised,
        }
        return quantized

    def calibration(self, inputs: tuple[torch.Tensor, ...], model: Any) -> ovs.Denoised:
        """NNCF's samples: the UNet's inputs along a denoising trajectory per calibration prompt, at this
        call's shape and steps; at most `CALIBRATION_SAMPLES` of them, spread evenly over each trajectory.
        Each sample is denoised by NNCF's inference of it (the model being quantized, in fp32 math; in
        hybrid_int8 with its Linear layers' 8-bit weights, as it will run), the calls between samples by the
        converted fp32 UNet `model` (the PyTorch UNet's function to fp32 rounding, ~1.5x faster on a CPU)."""
        sample, timestep, _ = inputs
        pipe, steps = self._pipe(), self._steps()
        runs, length = len(self._prompts), denoiser_calls(pipe.scheduler, steps)
        picks = [run * length + i for run in range(runs) for i in spread(length, runs, CALIBRATION_SAMPLES)]
        # calls between samples run through `model` compiled now, before it is rewritten; where every call
        # is a sample, it is compiled only if NNCF leaves one unanswered
        fp32 = _runner(model, "f32") if len(picks) < runs * length else None

        def denoiser() -> Any:
            return fp32 if fp32 is not None else _runner(model, "f32")

        def prepare(inputs: Inputs) -> tuple[torch.Tensor, ...]:
            x, t, c = inputs
            return x, t.to(timestep.dtype).reshape(timestep.shape), c

        run = trajectory_steps(pipe, self._prompts, sample, steps)
        return ovs.Denoised(run, prepare, picks, ovm.output_name(model), denoiser)


def spread(length: int, runs: int, most: int) -> list[int]:
    """Which calls of a run of `length` to keep when `runs` such runs give at most `most` in all: the same
    number from each run, evenly spaced along it from its first call to its last."""
    keep = max(1, min(length, most // max(1, runs)))
    return sorted({round(i * (length - 1) / max(1, keep - 1)) for i in range(keep)})


def trajectory_steps(pipe: Any, prompts: tuple[str, ...], sample: torch.Tensor, steps: int) -> Steps:
    """A denoising run of `steps` per calibration prompt, one after another (`calibration.denoising_steps`),
    from seeded noise shaped like `sample` (batch 2 or more), the batch's first half unguided and the rest
    guided by the prompt (the pipeline's order); returns the latents each run ends at."""
    ends = []
    for seed, prompt in enumerate(prompts):
        with torch.no_grad():
            cond, uncond = pipe.encode_prompt(prompt, sample.device, 1, True, None)
        half = sample.shape[0] // 2
        context = torch.cat([uncond] * half + [cond] * (sample.shape[0] - half))
        ends.append((yield from denoising_steps(sample, context, pipe.scheduler, steps, seed)))
    return ends


def trajectories(
    pipe: Any, prompts: tuple[str, ...], model: Any, sample: torch.Tensor, steps: int
) -> list[torch.Tensor]:
    """`trajectory_steps` run by `model(latents, t, context)`; the latents each trajectory ends at."""
    with torch.no_grad():
        return answer(trajectory_steps(pipe, prompts, sample, steps), model)


class OpenVINODecoder(OpenVINOPart):
    """The VAE's decoder: 8-bit weights over float math in the int8 modes, or with `vae_int8` static int8,
    calibrated on the latents the calibration prompts denoise to (with the PyTorch UNet, at the call's size
    and steps), decoded as the pipeline decodes them."""

    part = "vae_decoder"

    def __init__(self, decoder, settings, stats, pipe: Any, prompts: tuple[str, ...], fix: str):
        super().__init__(decoder, settings, stats)
        self._pipe = weakref.ref(pipe)
        self._prompts = prompts
        self._overflow_fix = fix

    def _steps(self) -> int | None:
        return len(self._pipe().scheduler.timesteps) if self._settings.vae_int8 else None

    def graph_key(self, inputs: tuple[torch.Tensor, ...]) -> tuple:
        return (*super().graph_key(inputs), self._steps())

    def key_parts(self, inputs):
        parts = super().key_parts(inputs)
        if self._settings.vae_int8:
            fix, prompts = self._overflow_fix, list(self._prompts)
            parts.update(vae_int8=True, steps=self._steps(), prompts=prompts, overflow_fix=fix)
        return parts

    def compressed(self, model: Any, inputs: tuple[torch.Tensor, ...]) -> Any:
        if not self._settings.vae_int8:
            return super().compressed(model, inputs)
        return ovm.decoder_quantize(model, self.calibration(inputs), self._overflow_fix)

    def calibration(self, inputs: tuple[torch.Tensor, ...]) -> list[tuple[Any, ...]]:
        """The decoder's inputs for the latents of each calibration trajectory, one image each."""
        (sample,) = inputs
        pipe = self._pipe()
        unet = getattr(pipe.unet, "original", pipe.unet)  # PyTorch's: no graph of another batch is built

        def denoise(x: torch.Tensor, t: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
            return unet(x, t, encoder_hidden_states=c, return_dict=False)[0]

        latent = torch.zeros(2, unet.config.in_channels, *sample.shape[2:], dtype=sample.dtype)
        vae, records = pipe.vae, []
        with torch.no_grad():
            for latents in trajectories(pipe, self._prompts, denoise, latent, self._steps()):
                z = latents / vae.config.scaling_factor + (vae.config.shift_factor or 0.0)
                if vae.post_quant_conv is not None:
                    z = vae.post_quant_conv(z)
                records += [(one.numpy().copy(),) for one in z.split(1)]
        return records

    def forward(self, sample: torch.Tensor, latent_embeds: torch.Tensor | None = None) -> torch.Tensor:
        if latent_embeds is not None:
            raise TypeError(
                "OpenVINODecoder takes no latent_embeds (spatially conditioned VAEs); set vae=false"
            )
        return self.graph_for((sample,))(sample)


class _TextHidden(torch.nn.Module):
    def __init__(self, encoder: torch.nn.Module):
        super().__init__()
        self.encoder = encoder

    def forward(self, input_ids):
        return self.encoder(input_ids, return_dict=False)[0]


class OpenVINOTextEncoder(OpenVINOPart):
    """The text encoder's last hidden state (8-bit weights in the int8 modes)."""

    part = "text_encoder"
    convolutional = False

    def traced(self) -> torch.nn.Module:
        return _TextHidden(self.original)

    def forward(self, input_ids, attention_mask=None, output_hidden_states=None, **kwargs):
        if attention_mask is not None or output_hidden_states:
            raise TypeError(
                "openvino's text encoder returns the last hidden state only (no attention mask, no "
                "clip_skip); set openvino text_encoder=false"
            )
        return (self.graph_for((input_ids,))(input_ids),)


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
    fix = overflow_fix(settings.overflow_fix, (ctx.hw or devices.detect()).cpu_flags)
    if settings.mode in ovm.CALIBRATED or settings.vae_int8:  # int8 activations: the fix applies
        ctx.stats["openvino_overflow_fix"] = fix
    swap_denoiser(
        lambda unet, _: OpenVINOUNet(unet.eval(), settings, ctx.stats, pipe, ctx.calibration_prompts, fix)
    )(pipe, ctx)
    if settings.vae:
        ctx.state["openvino_decoder"] = pipe.vae.decoder
        decoder = pipe.vae.decoder.eval()
        pipe.vae.decoder = OpenVINODecoder(decoder, settings, ctx.stats, pipe, ctx.calibration_prompts, fix)
    if settings.text_encoder:
        ctx.state["openvino_text_encoder"] = pipe.text_encoder
        pipe.text_encoder = OpenVINOTextEncoder(pipe.text_encoder.eval(), settings, ctx.stats)


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
            "Run the UNet, VAE decoder and text encoder with OpenVINO's CPU runtime (convert_model, NNCF): "
            "mode fp32, int8_weights (8-bit weights), hybrid_int8 (8-bit weights and calibrated int8 "
            "convolutions) or full_int8 (the Linear layers too, as 1x1 int8 convolutions); "
            "inference_precision f32 keeps fp32 math, auto lets OpenVINO pick bf16 on CPUs with AMX or "
            "AVX512-BF16; vae_int8 makes the VAE decoder static int8 too; winograd (fp32) computes the 3x3 "
            "convolutions with fewer multiplies (Winograd's F(4x4,3x3) or F(2x2,3x3), whole or in strips of "
            "rows, each shape timed on this CPU at the first call). On CPUs without VNNI "
            "or AMX every int8 convolution gets 7-bit weights (overflow_fix=auto), so the int16 sums there "
            "cannot saturate. The first call of each size converts (and calibrates) and is cached on disk."
        ),
        requires=("module:openvino", "family:sd", "cpu"),
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
    )
)
