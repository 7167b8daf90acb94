"""The stand-ins the `openvino` technique swaps into a pipeline: the UNet, the VAE decoder and the text
encoder, each converted, compressed or quantized as the settings say, and compiled for the CPU by OpenVINO on
the first call of each input shape (read back from the disk cache, `openvino.cache`, where it was built
before), each saying which phase that preparation paid (`phases`: cold or warm); the PyTorch module each wraps
is kept (`original`) for revert. The int8 parts' calibration samples come from `openvino.calibration_samples`.
"""

from __future__ import annotations

import functools
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from studio import devices, phases
from studio.optimizations.openvino import cache as ovk
from studio.optimizations.openvino import calibration_samples as ovc
from studio.optimizations.openvino import int8 as int8
from studio.optimizations.openvino import models as ovm
from studio.optimizations.openvino import statistics as ovs
from studio.optimizations.openvino import winograd as owg
from studio.optimizations.per_shape import PerShapeModule, PerShapeUNet

if TYPE_CHECKING:
    from studio.optimizations.openvino.technique import OpenVINOSettings


@functools.cache
def fastest_convolution(shape: tuple[int, ...]) -> owg.Form | None:
    """`openvino.winograd.fastest_convolution`, timed once per shape in a process."""
    return owg.fastest_convolution(shape)


def _runner(compile_model: Callable[[int], Any], recompiled: Callable[[float], None] | None = None) -> Any:
    """A callable running a compiled model on torch tensors, returning its first output as a tensor;
    `compile_model(threads)` compiles the model for a thread count.

    OpenVINO fixes a compiled model's threads when it compiles, so the model follows torch's thread count at
    call time (what the engine chose for the run: the cores free at request time) by compiling once more for
    a count it has not run with (`recompiled(seconds)` is told); the last two counts stay compiled (a quiet
    and a busy host)."""

    def compiled(threads: int) -> Any:
        return compile_model(threads).create_infer_request()

    requests = {torch.get_num_threads(): compiled(torch.get_num_threads())}

    def run(*inputs: torch.Tensor) -> torch.Tensor:
        threads = torch.get_num_threads()
        request = requests.pop(threads, None)
        if request is None:
            start = time.perf_counter()
            request = compiled(threads)
            if recompiled is not None:
                recompiled(time.perf_counter() - start)
        requests[threads] = request  # the most recent last
        while len(requests) > 2:
            requests.pop(next(iter(requests)))
        arrays = [t.detach().contiguous().cpu().numpy() for t in inputs]
        return torch.from_numpy(request.infer(arrays, share_inputs=False)[0].copy())

    return run


def fp32_runner(model: Any) -> Any:
    """`_runner` of an in-memory model with fp32 math (the calibration's fp32 UNet)."""
    return _runner(lambda threads: ovm.compile_for_cpu(model, "f32", threads=threads))


class OpenVINOPart(PerShapeModule):
    """A pipeline part run by OpenVINO: converted, compressed and compiled once per input shape."""

    counter = "compile"
    part = ""
    label = ""  # what the part is called in a sentence
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
        """The part compiled for these inputs, from the disk cache where it was built before; records the
        phase it paid ("cold": converted, calibrated or rewritten now; "warm": read back and compiled)."""
        start = time.perf_counter()
        parts = self.key_parts(inputs)

        def convert() -> Any:
            return self.compressed(ovm.convert(self.traced(), inputs), inputs)

        entry = ovk.Entry(ovm.cache_key(**parts), convert, self._stats)
        cold = entry.built
        if self._settings.winograd and self.convolutional:
            # the fp32 conversion's entry, rewritten: which shapes gain is timed, so depends on the CPU
            fp32 = entry
            entry = ovk.Entry(
                ovm.cache_key(**parts, winograd=owg.CHOOSER, cpu=devices.detect().cpu_name),
                lambda: owg.winograd_convolutions(fp32.model(), fastest_convolution),
                self._stats,
            )
            cold = cold or entry.built
            self._stats[f"openvino_winograd_{self.part}"] = owg.winograd_counts(entry.model())
        what = f"the {self.label} at {'x'.join(map(str, inputs[0].shape))}"
        precision = self._settings.inference_precision
        again = f"{what} for another thread count"  # from the stored model (and its blob) where it is
        run = _runner(
            lambda threads: entry.compile(precision, threads),
            lambda seconds: self._record(entry.memory is not None, seconds, again),
        )
        self._record(cold or entry.built, time.perf_counter() - start, what)
        return run

    def _record(self, cold: bool, seconds: float, what: str) -> None:
        phase = phases.COLD if cold else phases.WARM
        phases.record(self._stats, technique="openvino", phase=phase, seconds=seconds, what=what)


class OpenVINOUNet(OpenVINOPart, PerShapeUNet):
    """The UNet; in hybrid_int8 and full_int8 modes calibrated on the model's calibration prompts at the
    call's size and steps (the step count is read from the pipeline's scheduler, set for the running call)."""

    part = "unet"
    label = "UNet"

    def __init__(
        self,
        unet,
        settings,
        stats,
        pipe: Any,
        prompts: tuple[str, ...],
        fix: str,
        linears: str | None,
        statistics: str = "f32",
    ):
        super().__init__(unet, settings, stats)  # PerShapeUNet's part makes `_plain`
        self._pipe = weakref.ref(pipe)  # no cycle: the part is freed with its pipeline
        self._prompts = prompts
        self._overflow_fix = fix
        self._linears = linears  # full_int8: "matmul" or "convolution" (`openvino.int8_linears`)
        self._statistics = statistics  # NNCF's statistics inference: "f32" or "bf16"

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
                samples=ovc.CALIBRATION_SAMPLES,  # how many of the trajectories' inputs NNCF sees
                denoised_by="nncf",  # each sample's prediction from NNCF's inference of it
            )
            if self._linears == "matmul":  # (the convolutions' entries keep the keys they had)
                parts.update(int8_linears="matmul", float_conditioning=True)
            if self._settings.activation_ranges != "minmax":
                parts.update(activation_ranges=self._settings.activation_ranges)
            if self._statistics != "f32":
                parts.update(statistics_precision=self._statistics)
        return parts

    def compressed(self, model: Any, inputs: tuple[torch.Tensor, ...]) -> Any:
        if self._settings.mode not in ovm.CALIBRATED:
            return super().compressed(model, inputs)
        calibration = self.calibration(inputs, model)  # before the rewrite below
        quantize = int8.hybrid_quantize
        if self._linears == "convolution":
            self._stats["openvino_linears_as_convolutions"] = int8.linears_as_convolutions(model)
        elif self._linears == "matmul":
            quantize = int8.full_quantize
        with ovs.listening(calibration.heard, self._statistics):
            quantized = quantize(model, calibration, self._overflow_fix, self._settings.activation_ranges)
        self._stats["openvino_calibration_calls"] = {
            "answered by NNCF's statistics inference": calibration.answered,
            "run through the fp32 UNet": calibration.denoised,
        }
        return quantized

    def calibration(self, inputs: tuple[torch.Tensor, ...], model: Any) -> ovs.Denoised:
        """NNCF's samples at this call's shape and steps (`openvino.calibration_samples.unet_samples`), the
        calls between them run by the converted fp32 UNet `model`."""
        fp32 = functools.partial(fp32_runner, model)
        return ovc.unet_samples(
            self._pipe(),
            self._prompts,
            inputs,
            steps=self._steps(),
            fp32=fp32,
            output_name=ovm.output_name(model),
        )


class OpenVINODecoder(OpenVINOPart):
    """The VAE's decoder: 8-bit weights over float math in the int8 modes, or with `vae_int8` static int8,
    calibrated on the latents the calibration prompts denoise to (with the PyTorch UNet, at the call's size
    and steps), decoded as the pipeline decodes them."""

    part = "vae_decoder"
    label = "VAE decoder"

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
        return int8.decoder_quantize(model, self.calibration(inputs), self._overflow_fix)

    def calibration(self, inputs: tuple[torch.Tensor, ...]) -> list[tuple[Any, ...]]:
        """The decoder's inputs for the latents of each calibration trajectory, one image each."""
        (sample,) = inputs
        return ovc.decoder_samples(self._pipe(), self._prompts, sample, self._steps())

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
    label = "text encoder"
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
