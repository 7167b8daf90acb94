"""The `openvino` technique on the bundled model: OpenVINO's CPU runtime for the UNet, VAE decoder and text
encoder, in fp32 (the same image), with 8-bit weights and with calibrated hybrid int8 (close, and the image
still shows what was asked); conversions cached on disk; exact revert; no usage data sent."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from studio.errors import ValidationError
from studio.manager import PipelineManager
from studio.measure import bench
from studio.measure.quality import max_abs_diff, psnr
from studio.optimizations import REGISTRY, unavailable_reason
from studio.optimizations.openvino import int8 as ov_int8
from tests import tiny

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("openvino") is None or importlib.util.find_spec("nncf") is None,
    reason="openvino and nncf are optional (requirements-extras.txt) and not installed here",
)
STEPS = 20
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    path = tmp_path_factory.mktemp("studio-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STUDIO_HOME", str(path))
        yield path


@pytest.fixture(scope="module")
def manager(home):
    return PipelineManager()


@pytest.fixture(scope="module")
def baseline(manager):
    return tiny.run(manager, tiny.request(steps=STEPS))[0]


def openvino(**settings):
    return tiny.request(["openvino"], {"openvino": settings} if settings else None, steps=STEPS)


def cache_entries(home: Path) -> set[str]:
    root = home / "openvino"
    return {p.name for p in root.iterdir()} if root.exists() else set()


UNET_ONLY = {"vae": False, "text_encoder": False}  # the calibrated UNet alone (the other parts add time)


@dataclass
class Built:
    """A UNet calibrated in a fresh pipeline manager: the home it was stored in, the call's request, images
    and prepared pipeline, its cache entry, and what the spies saw while it was built."""

    home: Path
    request: Any
    images: np.ndarray
    prepared: Any
    unet: Path
    seen: dict[str, list] = field(default_factory=dict)
    hardware: Any = None  # the CPU the build was told it ran on, where one was

    @property
    def stats(self) -> dict:
        return self.prepared.ctx.stats

    def stored(self) -> bytes:
        """The stored weights and quantizer ranges."""
        return (self.unet / "model.bin").read_bytes()


def build_unet(patch: pytest.MonkeyPatch, home: Path, settings: dict, steps: int = 2) -> Built:
    """openvino with `settings` for the UNet only, `steps` steps (2: a short calibration), by a fresh pipeline
    manager with `home` as the studio's home (set through `patch`); its one new cache entry is the UNet's."""
    patch.setenv("STUDIO_HOME", str(home))
    before = cache_entries(home)
    request = tiny.request(["openvino"], {"openvino": {**settings, **UNET_ONLY}}, steps=steps)
    images, prepared = tiny.run(PipelineManager(), request)
    new = cache_entries(home) - before
    assert len(new) == 1, f"one new cache entry, the UNet's: {new}"
    return Built(home, request, images, prepared, home / "openvino" / new.pop())


def returned(patch: pytest.MonkeyPatch, owner: Any, name: str) -> list:
    """What each call of `owner.name` returns from now on (until `patch` puts it back)."""
    real, seen = getattr(owner, name), []

    def spy(*args, **kwargs):
        seen.append(real(*args, **kwargs))
        return seen[-1]

    patch.setattr(owner, name, spy)
    return seen


def given_samples(patch: pytest.MonkeyPatch) -> list:
    """The samples NNCF is given by each static int8 quantization from now on (iterated again after
    quantizing: the dataset replays them)."""
    given: list = []
    quantize = getattr(ov_int8.static_int8, "__wrapped__", ov_int8.static_int8)  # not an earlier call's spy

    def spy(model, calibration, fix, float_ops, *ranges):
        quantized = quantize(model, calibration, fix, float_ops, *ranges)
        given.extend(calibration)
        return quantized

    spy.__wrapped__ = quantize
    patch.setattr(ov_int8, "static_int8", spy)
    return given


def nncf_compiles(patch: pytest.MonkeyPatch) -> list[tuple[int, dict | None]]:
    """The outputs and the configuration of each model NNCF's engine compiles from now on."""
    import openvino as ov

    compiled: list[tuple[int, dict | None]] = []
    compile_model = ov.Core.compile_model

    def spy(self, model, *args, **kwargs):
        if sys._getframe(1).f_code.co_filename.endswith(os.path.join("nncf", "openvino", "engine.py")):
            compiled.append((len(model.outputs), kwargs.get("config")))  # a model NNCF's engine infers
        return compile_model(self, model, *args, **kwargs)

    patch.setattr(ov.Core, "compile_model", spy)
    return compiled


def test_fp32_draws_the_same_image_builds_once_per_shape_and_reverts(manager, baseline, home):
    images, prepared = tiny.run(manager, openvino())
    assert max_abs_diff(images, baseline) < 1e-4, "fp32 with f32 precision keeps PyTorch's fp32 math"
    stats = prepared.ctx.stats
    assert stats["compile_count"] == 3, "the UNet, the VAE decoder and the text encoder, once each"
    assert stats["openvino_builds"] == 3 and len(cache_entries(home)) == 3
    images_again, prepared = tiny.run(manager, openvino())
    assert np.array_equal(images_again, images) and prepared.ctx.stats["compile_count"] == 3, "no rebuild"
    assert np.array_equal(tiny.run(manager, tiny.request(steps=STEPS))[0], baseline), "revert is exact"


def test_a_new_process_reads_the_conversion_from_disk(baseline, home):
    tiny.run(PipelineManager(), openvino())  # the entries exist (this module's manager or this call)
    fresh = PipelineManager()
    images, prepared = tiny.run(fresh, openvino())
    assert prepared.ctx.stats["openvino_cache_hits"] == 3 and "openvino_builds" not in prepared.ctx.stats
    assert max_abs_diff(images, baseline) < 1e-4


@pytest.mark.parametrize(
    "mode, min_psnr", [("int8_weights", 36.0), ("hybrid_int8", 24.0), ("full_int8", 20.0)]
)  # measured on an AMX Xeon: 43-46 dB and 30.5-32 dB; on an AVX2-only EPYC hybrid_int8 25.1 dB (overflow fix
# on every convolution, the default there; 23.6 dB with NNCF's first-layer-only) and full_int8 22.6 dB: room
# for other CPUs
def test_int8_modes_stay_close_and_keep_what_the_image_shows(manager, baseline, mode, min_psnr):
    images, prepared = tiny.run(manager, openvino(mode=mode))
    assert 0 < max_abs_diff(images, baseline) and psnr(images, baseline) >= min_psnr, psnr(images, baseline)
    assert tiny.fidelity(images)["detected"] == tiny.fidelity(baseline)["detected"]
    assert np.array_equal(tiny.run(manager, tiny.request(steps=STEPS))[0], baseline)


def test_a_sweeps_openvino_pipeline_shares_the_loaded_weights_and_leaves_them_as_they_were(manager, baseline):
    """In a sweep each OpenVINO configuration gets a pipeline of its own that shares the loaded tensors (no
    second copy of the weights): converting, calibrating and rewriting the graph (full_int8's Linear layers as
    convolutions) read them and write none, and the baseline's image is still exact afterwards."""
    loaded, _ = manager._entry(tiny.request(steps=STEPS))
    modules = {n: m for n, m in vars(loaded.base).items() if isinstance(m, torch.nn.Module)}
    before = {(n, k): v.clone() for n, m in modules.items() for k, v in m.state_dict().items()}
    with manager.own_pipelines("openvino-sweep"):
        for mode in ("fp32", "full_int8"):
            request = openvino(mode=mode)
            with manager.acquire(request, slot=("openvino-sweep", mode)) as prepared:
                images = bench.run_once(prepared, request).images
                assert prepared.pipe.unet.original.conv_in.weight is loaded.base.unet.conv_in.weight
                assert type(prepared.pipe.vae.decoder).__name__ == "OpenVINODecoder"
            assert psnr(images, baseline) >= (100.0 if mode == "fp32" else 20.0)
    assert type(loaded.base.vae.decoder).__name__ == "Decoder", "the decoder swap stayed in the sweep's copy"
    after = {(n, k): v for n, m in modules.items() for k, v in m.state_dict().items()}
    assert after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)
    assert np.array_equal(tiny.run(manager, tiny.request(steps=STEPS))[0], baseline)


def entries_used(monkeypatch) -> list[Path]:
    """The cache entries (folders) the parts open from now on, built or read back, in order."""
    from studio.optimizations.openvino import cache as ovk

    folders: list[Path] = []
    init = ovk.Entry.__init__

    def recording(self, *args, **kwargs):
        init(self, *args, **kwargs)
        folders.append(self.folder)

    monkeypatch.setattr(ovk.Entry, "__init__", recording)
    return folders


def decoder_constants(entries: list[Path]) -> set[str]:
    """The element types of the constants of the VAE decoder among `entries` (the one model whose only input
    is a float latent)."""
    from studio.optimizations.openvino import models as ovm

    core = ovm.openvino().Core()
    for entry in entries:
        model = core.read_model(entry / "model.xml")
        if len(model.inputs) == 1 and model.inputs[0].get_element_type().is_real():
            constants = [op for op in model.get_ops() if op.get_type_name() == "Constant"]
            return {op.get_element_type().get_type_name() for op in constants}
    raise AssertionError("no VAE decoder among the call's cache entries")


def test_vae_int8_makes_the_decoder_static_int8_and_the_image_still_shows_what_was_asked(
    home, baseline, monkeypatch
):
    """In the int8 modes the decoder otherwise gets 8-bit weights (unsigned, with a zero point) over float
    math; `vae_int8` quantizes its activations too: signed int8 weights, calibrated on the latents the
    calibration prompts denoise to. (In this module's home, int8_weights' parts are read back where
    test_int8_modes_stay_close built them: only the calibrated decoder is new. A fresh manager: its parts
    open their cache entries.)"""
    manager, used = PipelineManager(), entries_used(monkeypatch)
    types = {}
    for vae_int8 in (False, True):
        used.clear()
        images, prepared = tiny.run(manager, openvino(mode="int8_weights", vae_int8=vae_int8))
        types[vae_int8] = decoder_constants(used)
        assert ("openvino_overflow_fix" in prepared.ctx.stats) == vae_int8, "recorded where it applies"
        if vae_int8:
            assert psnr(images, baseline) >= 24.0, psnr(images, baseline)
            assert tiny.fidelity(images)["detected"] == tiny.fidelity(baseline)["detected"]
    assert "u8" in types[False] and "i8" not in types[False]
    assert "i8" in types[True]
    assert np.array_equal(tiny.run(manager, tiny.request(steps=STEPS))[0], baseline)


def test_linears_as_convolutions_computes_what_the_linear_layers_did():
    """Every Linear layer becomes a 1x1 convolution over the tokens (same result to rounding); a product of
    two activations (attention's) stays a MatMul."""
    import torch

    from studio.optimizations.openvino import models as ovm

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = torch.nn.Linear(8, 16)
            self.outer = torch.nn.Linear(16, 8, bias=False)

        def forward(self, x):
            hidden = torch.nn.functional.gelu(self.inner(x))
            return self.outer(hidden @ hidden.transpose(1, 2) @ hidden)

    torch.manual_seed(0)
    block, x = Block().eval(), torch.randn(2, 5, 8)
    model = ovm.convert(block, (x,))
    assert ov_int8.linears_as_convolutions(model) == 2
    kinds = [op.get_type_name() for op in model.get_ordered_ops()]
    assert kinds.count("Convolution") == 2 and kinds.count("MatMul") == 2, kinds
    out = ovm.compile_for_cpu(model, "f32").create_infer_request().infer([x.numpy()])[0]
    np.testing.assert_allclose(out, block(x).detach().numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("m", [2, 4])
def test_winograd_computes_the_3x3_convolutions_and_leaves_the_others(m):
    """F(2x2, 3x3) and F(4x4, 3x3) give what the 3x3 convolutions gave, to fp32 rounding; a strided, a 1x1
    and a dilated convolution are left as they are."""
    import torch

    from studio.optimizations.openvino import models as ovm
    from studio.optimizations.openvino import winograd as owg

    torch.manual_seed(0)
    layers = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),
        torch.nn.SiLU(),
        torch.nn.Conv2d(16, 24, 3, padding=1),
        torch.nn.Conv2d(24, 24, 3, padding=1, stride=2),
        torch.nn.Conv2d(24, 8, 1),
        torch.nn.Conv2d(8, 8, 3, padding=2, dilation=2),
        torch.nn.Conv2d(8, 8, 3, padding=1),
    ).eval()
    x = torch.randn(2, 3, 16, 24)  # not square; after the strided one 8x12
    model = ovm.convert(layers, (x,))
    counts = owg.winograd_counts(owg.winograd_convolutions(model, lambda shape: (m, None)))
    assert counts == {f"F({m},3)": 3}, counts
    kinds = [op.get_type_name() for op in model.get_ordered_ops()]
    # per rewritten convolution: the products and the output transform, each one MatMul
    assert kinds.count("DepthToSpace") == 3 and kinds.count("MatMul") == 6
    # the batch's two images side by side in one product per tile position: [a*a, C_out, N*tiles]
    products = [
        list(op.get_output_shape(0))
        for op in model.get_ordered_ops()
        if op.get_type_name() == "MatMul" and len(op.get_output_shape(0)) == 3
    ]
    tiles, after_stride = (16 // m) * (24 // m), (8 // m) * (12 // m)
    a2 = (m + 2) ** 2
    assert products == [[a2, 16, 2 * tiles], [a2, 24, 2 * tiles], [a2, 8, 2 * after_stride]], products
    out = ovm.compile_for_cpu(model, "f32").create_infer_request().infer([x.numpy()])[0]
    expected = layers(x).detach().numpy()
    assert np.abs(out - expected).max() < 1e-4 * np.abs(expected).max()


@pytest.mark.parametrize("m", [2, 4])
def test_winograd_in_strips_computes_the_same_convolution(m):
    """In strips of 8 output rows (the image padded once, each strip cut with its border rows), F(m, 3) gives
    the 3x3 convolution's result to fp32 rounding, top and bottom rows included; the strips share one copy
    of the transformed weights; an image the strips do not divide keeps the direct convolution."""
    import torch

    from studio.optimizations.openvino import models as ovm
    from studio.optimizations.openvino import winograd as owg

    torch.manual_seed(0)
    conv = torch.nn.Conv2d(6, 10, 3, padding=1).eval()
    x = torch.randn(2, 6, 24, 16)  # three strips of 8 rows
    model = ovm.convert(conv, (x,))
    counts = owg.winograd_counts(owg.winograd_convolutions(model, lambda shape: (m, 8)))
    assert counts == {f"F({m},3) in strips of 8 rows": 1}, counts
    kinds = [op.get_type_name() for op in model.get_ordered_ops()]
    assert kinds.count("MatMul") == 6 and kinds.count("Slice") == 3 and kinds.count("Concat") == 1
    weights = [
        op
        for op in model.get_ordered_ops()
        if op.get_type_name() == "Constant" and list(op.shape) == [(m + 2) ** 2, 10, 6]
    ]
    assert len(weights) == 1, "one transformed weight tensor for every strip"
    constants = [
        op for op in model.get_ordered_ops() if op.get_type_name() == "Constant" and len(op.shape) >= 2
    ]
    assert len({tuple(op.shape) for op in constants}) == len(constants), "the transforms' kernels shared too"
    out = ovm.compile_for_cpu(model, "f32").create_infer_request().infer([x.numpy()])[0]
    expected = conv(x).detach().numpy()
    assert np.abs(out - expected).max() < 1e-4 * np.abs(expected).max()
    odd = ovm.convert(conv, (torch.randn(1, 6, 12, 16),))  # 12 rows: strips of 8 do not divide them
    assert owg.winograd_counts(owg.winograd_convolutions(odd, lambda shape: (m, 8))) == {}


def test_winograd_is_timed_per_shape_and_fits_the_shape():
    """The chooser answers the direct convolution (None) or one of Winograd's forms, never a tile or strip
    that does not divide the image, and the rewrite keeps a convolution its choice says to keep."""
    import torch

    from studio.optimizations.openvino import models as ovm
    from studio.optimizations.openvino import winograd as owg

    assert owg.fastest_convolution((1, 8, 8, 6, 6), calls=2) in (None, (2, None))
    assert owg.fastest_convolution((1, 7, 7, 5, 5), calls=1) is None, "neither tile fits 5x5"
    assert owg.fastest_convolution((1, 8, 8, 16, 12), calls=1) in (None, *owg.FORMS)
    assert [f for f in owg.FORMS if owg.fits(f, 12, 16)] == [(2, None), (4, None), (4, 4)], (
        "strips of 8 rows do not divide 12"
    )
    conv = torch.nn.Conv2d(4, 4, 3, padding=1).eval()
    model = ovm.convert(conv, (torch.randn(1, 4, 8, 8),))
    assert owg.winograd_counts(owg.winograd_convolutions(model, lambda shape: None)) == {}
    assert [op.get_type_name() for op in model.get_ordered_ops()].count("Convolution") == 1


def test_winograd_draws_the_same_image_and_says_what_it_rewrote(manager, baseline, monkeypatch):
    """Every 3x3 convolution of the UNet and the VAE decoder that F(2, 3) fits, forced to it (which ones gain
    is timed, so depends on the CPU): the image stays PyTorch's fp32 one to rounding; the run's stats count
    the rewritten convolutions per part; other settings are refused before anything runs."""
    from studio.optimizations.openvino import parts as openvino_parts

    monkeypatch.setattr(openvino_parts, "fastest_convolution", lambda shape: (2, None))
    images, prepared = tiny.run(manager, openvino(winograd=True))
    stats = prepared.ctx.stats
    assert (
        stats["openvino_winograd_unet"]["F(2,3)"] > 0 and stats["openvino_winograd_vae_decoder"]["F(2,3)"] > 0
    )
    assert "openvino_winograd_text_encoder" not in stats
    assert psnr(images, baseline) > 60.0
    for settings in ({"mode": "hybrid_int8"}, {"inference_precision": "auto"}):
        with pytest.raises(ValidationError, match="winograd .* needs mode=fp32 and inference_precision=f32"):
            openvino(winograd=True, **settings)


def test_a_rewrite_timed_on_one_cpu_is_read_back_there_and_timed_again_on_another(
    baseline, home, monkeypatch
):
    """Which convolutions gain from Winograd's forms is timed on the CPU, so the rewritten models are cached
    per CPU: a new process on the same CPU reads them back without timing a shape; another generation behind
    the same model name ("AMD EPYC" is a Zen 3 or a Zen 4) times and rewrites them again, and reads the shared
    fp32 conversion back."""
    from studio import devices
    from studio.optimizations.openvino import parts as openvino_parts

    timed = []
    monkeypatch.setattr(openvino_parts, "fastest_convolution", lambda shape: timed.append(shape) or (2, None))
    # the entries exist after this call (an earlier test's, or this call's own)
    tiny.run(PipelineManager(), openvino(winograd=True))
    timed.clear()
    _, prepared = tiny.run(PipelineManager(), openvino(winograd=True))
    assert not timed and "openvino_builds" not in prepared.ctx.stats
    here = devices.detect()
    other = "family 1 model 2 stepping 3" if here.cpu_signature != "family 1 model 2 stepping 3" else ""
    monkeypatch.setattr(devices, "_cpu_info", lambda: (here.cpu_model, here.cpu_flags, other))
    devices.detect.cache_clear()
    images, prepared = tiny.run(PipelineManager(), openvino(winograd=True))
    assert timed and prepared.ctx.stats["openvino_builds"] == 2, (
        "the UNet and the VAE decoder, rewritten again"
    )
    assert prepared.ctx.stats["openvino_cache_hits"] == 3, "the three fp32 conversions, read back"
    assert psnr(images, baseline) > 60.0


def test_openvino_profile_says_where_a_models_time_goes(tmp_path, monkeypatch, capsys):
    """The profile benchmark lists what is cached and splits one model's time by node type and kernel."""
    import torch

    from benchmarks import openvino_profile
    from studio.optimizations.openvino import models as ovm

    monkeypatch.setenv("STUDIO_HOME", str(tmp_path))
    layer = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64)).eval()
    entry = ovm.cache_root() / "an-entry"
    entry.mkdir(parents=True)
    ovm.openvino().save_model(ovm.convert(layer, (torch.randn(2, 16, 64),)), entry / "model.xml")
    monkeypatch.setattr(sys, "argv", ["openvino_profile"])
    openvino_profile.main()
    listing = capsys.readouterr().out
    assert "an-entry" in listing and "[2, 16, 64]" in listing, listing
    monkeypatch.setattr(sys, "argv", ["openvino_profile", "an-entry", "--calls", "2"])
    openvino_profile.main()
    out = capsys.readouterr().out
    assert "s per call (2 calls)" in out
    by_type = out.split("by node type:")[1].split("by kernel:")[0]
    assert "FullyConnected" in by_type or "MatMul" in by_type, out


# A new process, as a CLI user's: an int8_weights build in an empty cache (its warnings recorded), then
# `benchmarks.openvino_first_call` on the bundled model, then what became of OpenVINO's and NNCF's usage
# reporting. Each part's output follows a line of its own on stdout and stderr.
FRESH_PROCESS = """
import json
import sys
import warnings

import torch

from studio.manager import PipelineManager
from tests import tiny

MARKS = {marks!r}
request = tiny.request(["openvino"], {{"openvino": {{"mode": "int8_weights"}}}}, steps=2)
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    _, prepared = tiny.run(PipelineManager(), request)
chatty = (torch.jit.TracerWarning, FutureWarning)
warned = [str(w.message) for w in seen if issubclass(w.category, chatty)]
print(json.dumps({{"builds": prepared.ctx.stats.get("openvino_builds", 0), "warnings": warned}}))
for mark in MARKS:
    print(mark, flush=True)
    print(mark, file=sys.stderr, flush=True)
    if mark == MARKS[0]:
        from benchmarks import openvino_first_call

        sys.argv = {benchmark!r}
        openvino_first_call.main()
from openvino.tools.ovc import telemetry_utils
from nncf.telemetry import wrapper
print(sys.modules["openvino_telemetry"], telemetry_utils.tm.__name__, type(wrapper.telemetry).__name__)
"""
MARKS = ("=== the first call benchmark", "=== usage reporting")
BENCHMARK = ["openvino_first_call", "--model", "tiny-shapes", "--side", "64"]
BENCHMARK += ["--mode", "hybrid_int8", "--steps", "2", "--seeds", "1"]


@pytest.fixture(scope="module")
def fresh_process(tmp_path_factory):
    """`FRESH_PROCESS` run with its own home directory, studio home and TMPDIR (each empty): the process,
    and those folders as it left them. One process for the three tests below (each started process imports
    torch, OpenVINO and NNCF again: seconds)."""
    root = tmp_path_factory.mktemp("fresh-process")
    folders = {name: root / name for name in ("home", "studio", "tmp")}
    for folder in folders.values():
        folder.mkdir()
    env = {**os.environ, "HOME": str(folders["home"]), "STUDIO_HOME": str(folders["studio"])}
    env.update(TMPDIR=str(folders["tmp"]), OMP_NUM_THREADS="1")
    script = FRESH_PROCESS.format(marks=MARKS, benchmark=BENCHMARK)
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    return done, folders


def fresh_process_part(fresh_process, part: int) -> tuple[str, str]:
    """The stdout and stderr of one part of `FRESH_PROCESS` (0: the build, 1: the benchmark, 2: the usage
    reporting), once it exited cleanly."""
    done, _ = fresh_process
    assert done.returncode == 0, done.stderr[-2000:]
    marks = "|".join(re.escape(f"{mark}\n") for mark in MARKS)
    outs, errs = (re.split(marks, text) for text in (done.stdout, done.stderr))
    assert len(outs) == len(errs) == len(MARKS) + 1, done.stdout[-2000:]
    return outs[part], errs[part]


def test_a_build_keeps_the_libraries_chatter_to_itself(fresh_process):
    """The first call of a size traces and compresses each part: torch's tracer warnings and NNCF's INFO
    tables would fill a CLI user's terminal (some 50 lines) before the results; a cached call is quiet."""
    out, err = fresh_process_part(fresh_process, 0)
    built = json.loads(out.splitlines()[-1])
    assert built["builds"] >= 3, "the UNet, decoder and text encoder were built here"
    assert built["warnings"] == []
    assert "INFO:nncf" not in out + err and "TracerWarning" not in err


def test_the_first_call_benchmark_times_each_phase_in_an_empty_cache(fresh_process):
    """`benchmarks.openvino_first_call` on the bundled model: every phase timed, the samples NNCF got, and
    the image against PyTorch fp32's; its cache is its own and gone afterwards."""
    out, _ = fresh_process_part(fresh_process, 1)
    assert "tiny-shapes 64x64, 2 steps, openvino[mode=hybrid_int8]" in out
    assert "    int8 weights folded: " in out, out  # milliseconds on the bundled model
    for phase in ("conversion", "NNCF quantization", "statistics", "bias correction", "compile"):
        seconds = float(out.split(f"  {phase}: ")[1].split(" s")[0])
        assert seconds > 0, out
    assert "seed 1: first call" in out and "dB against PyTorch fp32" in out
    samples = int(out.split("samples given to NNCF: ")[1].split()[0])
    assert samples > 0
    assert f"trajectory calls answered by NNCF's statistics inference: {samples}" in out, out
    assert list(fresh_process[1]["tmp"].iterdir()) == [], "the benchmark's own cache is removed"


def test_conversion_sends_no_usage_data_and_writes_nothing_home(fresh_process):
    """In a fresh process (import order is the point): importing OpenVINO, converting and quantizing with it
    never reach `openvino_telemetry`, and nothing appears in the home directory."""
    out, _ = fresh_process_part(fresh_process, 2)
    assert out.split()[-3:] == ["None", "openvino.tools.ovc.telemetry_stub", "MagicMock"]
    assert list(fresh_process[1]["home"].iterdir()) == [], "nothing written under the home directory"


def _dequantized_weight(op) -> bool:
    """Whether `op`'s second input is a constant behind dequantizing ops (Multiply, Subtract, Convert)."""
    node = op.input_value(1).get_node()
    while node.get_type_name() in ("Multiply", "Subtract", "Convert"):
        node = node.input_value(0).get_node()
    return node.get_type_name() == "Constant"


def _behind_layout(node) -> str:
    """The type of the first node behind `node` that is no Reshape or Transpose."""
    while node.get_type_name() in ("Reshape", "Transpose"):
        node = node.input_value(0).get_node()
    return node.get_type_name()


def linear_layers() -> int:
    manager = PipelineManager()
    with manager.acquire(tiny.request()) as plain:
        return sum(isinstance(m, torch.nn.Linear) for m in plain.pipe.unet.modules())


def weight_element_type(op) -> str:
    """The element type of the constant behind `op`'s weight input (through dequantizing ops)."""
    node = op.input_value(1).get_node()
    while node.get_type_name() != "Constant":
        node = node.input_value(0).get_node()
    return node.get_element_type().get_type_name()


# calibrated at SHORT_STEPS steps on SHORT_SAMPLES samples (CALIBRATION_SAMPLES, made smaller): a request
# longer than its samples, whose calls between them run through the fp32 UNet
SHORT_STEPS, SHORT_SAMPLES = 6, 12
# NNCF's own overflow fix (the first layer only): these builds also show the full-range weights it leaves
# (test_overflow_fix_gives_every_int8_convolution_7_bit_weights)
CONVOLUTIONS = {"mode": "full_int8", "int8_linears": "convolution", "overflow_fix": "first_layer_only"}


@pytest.fixture(scope="module")
def int8_convolutions(tmp_path_factory):
    """full int8 with the Linear layers as convolutions, calibrated at SHORT_STEPS on SHORT_SAMPLES samples,
    each in an empty home of its own: on this CPU told it computes bf16 ("native") and told it does not
    ("emulated": NNCF's statistics then run in f32). Per build, the samples NNCF was given ("samples"), the
    models NNCF's engine compiled ("compiles"), and the token convolutions each model NNCF's engine compiled
    ran as MatMuls ("as_matmuls")."""
    import dataclasses

    from studio import devices
    from studio.optimizations.openvino import calibration_samples as calibration
    from studio.optimizations.openvino import statistics as openvino_statistics

    real = devices.detect()
    cpus = {
        "native": dataclasses.replace(real, cpu_flags=real.cpu_flags | {"avx512_bf16"}),
        "emulated": dataclasses.replace(real, cpu_flags=real.cpu_flags - {"avx512_bf16", "amx_bf16"}),
    }
    built = {}
    for name, hardware in cpus.items():
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(devices, "detect", lambda hardware=hardware: hardware)
            patch.setattr(calibration, "CALIBRATION_SAMPLES", SHORT_SAMPLES)
            seen = {
                "samples": given_samples(patch),
                "compiles": nncf_compiles(patch),
                "as_matmuls": returned(patch, openvino_statistics, "token_convolutions_as_matmuls"),
            }
            home = tmp_path_factory.mktemp(f"int8-convolutions-{name}")
            built[name] = build_unet(patch, home, CONVOLUTIONS, steps=SHORT_STEPS)
        built[name].seen, built[name].hardware = seen, hardware
    return built


def test_full_int8_runs_the_unets_linear_layers_as_static_int8_convolutions(int8_convolutions):
    """hybrid_int8 leaves the Linear layers as MatMuls with 8-bit weights over float math; full_int8 with
    `int8_linears=convolution` (the choice on CPUs without VNNI) runs each of them as a 1x1 convolution with
    int8 weights and activations (calibrated on their MatMuls)."""
    from studio.optimizations.openvino import models as ovm

    linears = linear_layers()
    for built in int8_convolutions.values():  # NNCF's statistics in bf16 and in f32
        assert built.stats["openvino_linears_as_convolutions"] == linears > 0
        assert max(built.seen["as_matmuls"]) == linears, (
            "NNCF's statistics model runs them as the MatMuls they were"
        )
        model = ovm.openvino().Core().read_model(built.unet / "model.xml")
        ops = model.get_ordered_ops()
        assert not [op for op in ops if op.get_type_name() == "MatMul" and ov_int8._constant_behind(op, 1)]
        rewritten = [op for op in ops if op.get_friendly_name().endswith("/as_convolution")]
        assert len(rewritten) == linears
        assert {weight_element_type(op) for op in rewritten} == {"i8"}
        kinds = {op.get_type_name() for op in ops}
        assert "FakeQuantize" in kinds, "int8 activations: calibrated quantizers in front of the convolutions"


MATMULS = {"mode": "full_int8", "int8_linears": "matmul"}


@pytest.fixture(scope="module")
def int8_matmuls(tmp_path_factory):
    """full int8 with int8 MatMuls at STEPS (the images are compared with fp32's), in an empty home."""
    with pytest.MonkeyPatch.context() as patch:
        return build_unet(patch, tmp_path_factory.mktemp("int8-matmuls"), MATMULS, steps=STEPS)


def test_full_int8_with_int8_matmuls_quantizes_the_linear_layers_where_they_are(int8_matmuls, baseline):
    """`int8_linears=matmul` (the choice on CPUs with VNNI or AMX) keeps the Linear layers as MatMuls and
    quantizes them, weights and activations, but those fed by the text encoder's states or the timestep
    embedding, which keep 8-bit weights over float math as in hybrid; the image stays close to fp32's."""
    from studio.optimizations.openvino import models as ovm

    built = int8_matmuls
    assert built.stats["openvino_int8_linears"] == "matmul"
    assert "openvino_linears_as_convolutions" not in built.stats
    model = ovm.openvino().Core().read_model(built.unet / "model.xml")
    ops = model.get_ordered_ops()
    with_weights = [op for op in ops if op.get_type_name() == "MatMul" and _dequantized_weight(op)]
    assert len(with_weights) == linear_layers() > 0
    assert not [op for op in ops if op.get_friendly_name().endswith("/as_convolution")]
    fed = {op.get_friendly_name(): _behind_layout(op.input_value(0).get_node()) for op in with_weights}
    int8 = [op for op in with_weights if fed[op.get_friendly_name()] == "FakeQuantize"]
    kept = [op for op in with_weights if op not in int8]
    assert int8 and kept, "both kinds are there on the bundled model"
    assert {weight_element_type(op) for op in int8} == {"i8"}
    for op in kept:  # cross-attention's keys and values (the text states), the timestep embedding's
        rows = math.prod(d.get_length() for d in list(op.input_value(0).get_partial_shape())[:-1])
        assert fed[op.get_friendly_name()] == "Parameter" or rows < 16, op.get_friendly_name()
    assert "Parameter" in {fed[op.get_friendly_name()] for op in kept}
    assert psnr(built.images, baseline) >= 20.0, psnr(built.images, baseline)


def test_quantile_activation_ranges_calibrate_their_own_entry_and_stay_close(
    int8_matmuls, monkeypatch, baseline
):
    minmax, settings = int8_matmuls, {**MATMULS, "activation_ranges": "quantile"}
    quantile = build_unet(monkeypatch, minmax.home, settings, steps=STEPS)  # in the minmax build's home
    assert len(cache_entries(minmax.home)) == 2, "each calibration is its own cache entry"
    assert not np.array_equal(minmax.images, quantile.images), (
        "the ranges changed what the int8 model computes"
    )
    assert psnr(quantile.images, baseline) >= 20.0, psnr(quantile.images, baseline)


def test_activation_ranges_without_int8_activations_is_a_sentence():
    with pytest.raises(ValidationError, match="activation_ranges .* needs mode=hybrid_int8 or full_int8"):
        tiny.request(["openvino"], {"openvino": {"mode": "int8_weights", "activation_ranges": "quantile"}})


@pytest.mark.parametrize(
    "flags, form",
    [
        ({"avx2"}, "convolution"),
        ({"avx2", "avx_vnni"}, "matmul"),
        ({"avx512_vnni"}, "matmul"),
        ({"amx_int8"}, "matmul"),
    ],
)
def test_int8_linears_auto_picks_the_faster_form_for_the_cpu(flags, form):
    from studio.optimizations.openvino.technique import int8_linears

    assert int8_linears("auto", frozenset(flags)) == form
    assert int8_linears("convolution", frozenset(flags)) == "convolution"


def test_int8_linears_outside_full_int8_is_a_sentence():
    with pytest.raises(ValidationError, match="int8_linears .* needs mode=full_int8"):
        tiny.request(["openvino"], {"openvino": {"mode": "hybrid_int8", "int8_linears": "matmul"}})


def int8_weight_peaks(model_xml: Path) -> list[int]:
    """The largest |value| of each signed 8-bit constant (the static int8 convolutions' weights)."""
    from studio.optimizations.openvino import models as ovm

    model = ovm.openvino().Core().read_model(model_xml)
    return [
        int(np.abs(op.get_data().astype(np.int32)).max())
        for op in model.get_ops()
        if op.get_type_name() == "Constant" and op.get_element_type().get_type_name() == "i8"
    ]


HYBRID = {"mode": "hybrid_int8"}


@pytest.fixture(scope="module")
def hybrid_unet(home):
    """hybrid int8 with the overflow fix on every int8 convolution, at 2 steps (a short calibration), stored
    in this module's home; the searches for fusing patterns NNCF made ("searches")."""
    from studio.optimizations.openvino import models as ovm
    from studio.optimizations.openvino import patterns

    ovm.nncf()  # imported as the studio imports it, its search installed
    searches: list[tuple] = []
    with (
        pytest.MonkeyPatch.context() as patch,
        patterns.watched(lambda graph, *rest: searches.append((graph.copy(), *rest))) as own,
    ):
        built = build_unet(patch, home, {**HYBRID, "overflow_fix": "enable"})
    built.seen = {"searches": searches, "nncfs_own": own}
    return built


def test_the_search_for_fusing_patterns_finds_what_nncfs_own_finds(hybrid_unet):
    """The studio searches each of NNCF's fusing patterns among the nodes that could match it: on the UNet's
    graphs, NNCF's own search finds the same matches."""
    searches, own = hybrid_unet.seen["searches"], hybrid_unet.seen["nncfs_own"]
    assert searches, "NNCF searched for its fusing patterns"
    expected = [own(graph, pattern_graph, strict) for graph, pattern_graph, strict, _ in searches]
    assert any(expected), "the UNet holds fusing patterns"
    for (*_, found), theirs in zip(searches, expected, strict=True):
        assert sorted(map(tuple, found)) == sorted(map(tuple, theirs))


def test_overflow_fix_gives_every_int8_convolution_7_bit_weights(hybrid_unet, int8_convolutions):
    """Without VNNI, oneDNN sums pairs of u8 x s8 products in a saturating int16: weights within -64..64 keep
    every pair in range. NNCF's own default fixes the first layer only, and then full-range weights remain
    (shown on the full int8 UNet `int8_convolutions` built with it: its Linear layers' convolutions and the
    UNet's own, all static int8)."""
    peaks = {}
    for fix, built in (("enable", hybrid_unet), ("first_layer_only", int8_convolutions["emulated"])):
        assert built.stats["openvino_overflow_fix"] == fix
        peaks[fix] = int8_weight_peaks(built.unet / "model.xml")
    assert peaks["enable"] and max(peaks["enable"]) <= 64
    assert max(peaks["first_layer_only"]) > 64


def test_weight_reductions_fold_to_the_values_the_plugin_computes():
    """NNCF's statistics outputs over constant weights (min, max of |w|) become constants of the same value
    and name; a reduction over an activation stays in the graph."""
    from openvino import opset13 as ops

    from studio.optimizations.openvino import models as ovm
    from studio.optimizations.openvino import statistics as openvino_statistics

    def model():
        rng = np.random.default_rng(0)
        x = ops.parameter([1, 3, 8, 8], np.float32, name="x")
        weight = ops.constant(rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
        conv = ops.convolution(x, weight, [1, 1], [1, 1], [1, 1], [1, 1])
        outputs = {
            "conv": conv,
            "w_max": ops.reduce_max(ops.abs(weight), ops.constant(np.array([1, 2, 3])), keep_dims=True),
            "w_min": ops.reduce_min(weight, ops.constant(np.array([-1, 0])), keep_dims=False),
            "a_max": ops.reduce_max(conv, ops.constant(np.array([0, 1, 2, 3])), keep_dims=True),
        }
        for name, node in outputs.items():
            node.output(0).get_tensor().set_names({name})
        return ovm.openvino().Model([n.output(0) for n in outputs.values()], [x])

    def run(m):
        result = (
            ovm.compile_for_cpu(m, "f32").create_infer_request().infer([np.ones((1, 3, 8, 8), np.float32)])
        )
        return {name: value.copy() for port, value in result.items() for name in port.get_names()}

    expected = run(model())
    folded = model()
    assert openvino_statistics.fold_weight_reductions(folded) == 2
    kinds = [op.get_type_name() for op in folded.get_ordered_ops()]
    assert kinds.count("ReduceMax") == 1 and "ReduceMin" not in kinds and "Abs" not in kinds
    got = run(folded)
    assert got.keys() == expected.keys() == {"conv", "w_max", "w_min", "a_max"}
    for name in expected:
        assert np.array_equal(got[name], expected[name]), name


def test_token_convolutions_run_as_the_matmuls_they_came_from_in_nncfs_statistics():
    """A 1x1 convolution over [tokens, in, 1, 1] (a Linear layer as full int8 runs it) becomes the MatMul
    it was, under the same output name and to fp32 rounding; a 1x1 over a real image and a 3x3 stay."""
    from openvino import opset13 as ops

    from studio.optimizations.openvino import models as ovm
    from studio.optimizations.openvino import statistics as openvino_statistics

    def model():
        rng = np.random.default_rng(0)
        tokens = ops.parameter([6, 8, 1, 1], np.float32, name="tokens")
        image = ops.parameter([1, 8, 4, 4], np.float32, name="image")

        def conv(x, out, k):
            weight = ops.constant(rng.standard_normal((out, 8, k, k)).astype(np.float32))
            return ops.convolution(x, weight, [1, 1], [k // 2] * 2, [k // 2] * 2, [1, 1])

        outputs = {"linear": conv(tokens, 5, 1), "pointwise": conv(image, 5, 1), "3x3": conv(image, 5, 3)}
        for name, node in outputs.items():
            node.output(0).get_tensor().set_names({name})
        return ovm.openvino().Model([n.output(0) for n in outputs.values()], [tokens, image])

    rng = np.random.default_rng(1)
    inputs = [
        rng.standard_normal((6, 8, 1, 1)).astype(np.float32),
        rng.standard_normal((1, 8, 4, 4)).astype(np.float32),
    ]

    def run(m):
        result = ovm.compile_for_cpu(m, "f32").create_infer_request().infer(inputs)
        return {name: value.copy() for port, value in result.items() for name in port.get_names()}

    expected = run(model())
    rewritten = model()
    assert openvino_statistics.token_convolutions_as_matmuls(rewritten) == 1
    kinds = [op.get_type_name() for op in rewritten.get_ordered_ops()]
    assert kinds.count("Convolution") == 2 and kinds.count("MatMul") == 1
    got = run(rewritten)
    assert got.keys() == expected.keys() == {"linear", "pointwise", "3x3"}
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-5)


def test_another_nncf_without_the_engine_is_used_as_it_is_and_says_so(monkeypatch, caplog):
    from studio.optimizations.openvino import statistics as openvino_statistics

    real = importlib.import_module

    def without_engine(name, *args):
        if name == "nncf.openvino.engine":
            raise ImportError("No module named 'nncf.openvino.engine'")
        return real(name, *args)

    monkeypatch.setattr(openvino_statistics.importlib, "import_module", without_engine)
    openvino_statistics._say_unchanged.cache_clear()
    with caplog.at_level("WARNING", logger=openvino_statistics.__name__):
        openvino_statistics.install()
        openvino_statistics.install()  # the next build's
    assert "slower" in caplog.text and "nncf.openvino.engine" in caplog.text
    assert len(caplog.records) == 1, "said once, not once per build"


def test_nncf_quantizes_to_the_same_bits_with_the_weight_reductions_folded(quantile_unet, nncfs_own_unet):
    """int8 built with NNCF's weight statistics folded before compiling is the very model built without:
    the stored weights and quantizer ranges are byte for byte the same (`nncfs_own_unet`, built with neither
    the folding nor the studio's quantiles)."""
    counts = quantile_unet.seen["folded"]
    assert counts and counts[0] > 0, "the statistics model had weight reductions to fold"
    assert nncfs_own_unet.stored() == quantile_unet.stored()


# NNCF's statistics in f32 whatever the CPU (bf16 would not change what is compared below)
QUANTILES = {"mode": "full_int8", "activation_ranges": "quantile", "calibration_precision": "f32"}


@pytest.fixture(scope="module")
def quantile_unet(tmp_path_factory):
    """full int8 with quantile ranges at 2 steps in an empty home, as the studio builds it; what each call
    of the studio's quantiles returned ("quantiles"), and what each model NNCF's engine compiled had of
    repeated Results dropped ("dropped") and of weight reductions folded ("folded")."""
    from studio.optimizations.openvino import quantiles as openvino_quantiles
    from studio.optimizations.openvino import statistics as openvino_statistics

    openvino_statistics.install()
    with pytest.MonkeyPatch.context() as patch:
        seen = {
            "quantiles": returned(patch, openvino_quantiles, "quantiles"),
            "dropped": returned(patch, openvino_statistics, "drop_repeated_results"),
            "folded": returned(patch, openvino_statistics, "fold_weight_reductions"),
        }
        built = build_unet(patch, tmp_path_factory.mktemp("quantiles"), QUANTILES)
    built.seen = seen
    return built


@pytest.fixture(scope="module")
def nncfs_own_unet(quantile_unet, tmp_path_factory):
    """`quantile_unet`'s configuration built in an empty home with NNCF's own quantiles and its weight
    reductions left to the CPU plugin (not folded): one build that two of the studio's shortcuts are each
    compared with, byte for byte."""
    from nncf.common.tensor_statistics import collectors

    from studio.optimizations.openvino import statistics as openvino_statistics

    faster = collectors.QuantileReducer._reduce_out_of_place
    assert faster.studio_quantiles, "the studio's quantiles are installed (by `quantile_unet`'s build)"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(collectors.QuantileReducer, "_reduce_out_of_place", faster.__wrapped__)
        patch.setattr(openvino_statistics, "faster_reducer", lambda module: False)
        patch.setattr(openvino_statistics, "fold_weight_reductions", lambda model: 0)
        return build_unet(patch, tmp_path_factory.mktemp("nncfs-own"), QUANTILES)


def test_a_tensor_two_quantiles_read_is_copied_out_once_and_builds_the_same_model(
    quantile_unet, tmp_path, monkeypatch
):
    """Quantile ranges read each activation for its low and its high quantile: the statistics model gives
    it out once, and the quantized model is the one built with each copied out twice: the same int8
    weights, its ranges and biases the same to float rounding at each tensor's scale (the CPU plugin may
    pick another kernel for a tensor with fewer readers)."""
    import openvino as ov

    from studio.optimizations.openvino import statistics as openvino_statistics

    assert max(quantile_unet.seen["dropped"]) > 0, "the statistics model had an activation given out twice"
    monkeypatch.setattr(openvino_statistics, "drop_repeated_results", lambda model: 0)
    twice = build_unet(monkeypatch, tmp_path, QUANTILES)
    constants = {}
    for name, built in (("with", quantile_unet), ("without", twice)):
        model = ov.Core().read_model(built.unet / "model.xml")
        constants[name] = [
            op.get_data() for op in model.get_ordered_ops() if op.get_type_name() == "Constant"
        ]
    assert len(constants["with"]) == len(constants["without"])
    integers = 0
    for i, (value, other) in enumerate(zip(constants["with"], constants["without"], strict=True)):
        assert value.dtype == other.dtype and value.shape == other.shape, i
        if value.dtype.kind in "iu":
            integers += 1
            assert np.array_equal(value, other), i
        else:
            # A corrected bias is a difference of means, each summed in the kernel's own order: on an AMX
            # Xeon a bias moved by 2.9e-6 at a tensor's scale of 0.15 (2e-5 of it); 1e-4 of it is allowed.
            scale = float(np.abs(other).max(initial=0.0))
            np.testing.assert_allclose(value, other, rtol=1e-5, atol=1e-4 * scale, err_msg=str(i))
    assert integers > 0, "the model has int8 weights"


@pytest.mark.parametrize(
    "flags, expected",
    [
        ({"avx2", "fma"}, "enable"),
        ({"avx2", "avx512f", "avx512_vnni"}, "first_layer_only"),
        ({"avx2", "avx_vnni"}, "first_layer_only"),
        ({"avx512f", "amx_int8", "avx512_vnni"}, "first_layer_only"),
    ],
)
def test_auto_overflow_fix_follows_the_cpus_int8_kernels(flags, expected):
    from studio.optimizations.openvino.technique import overflow_fix

    assert overflow_fix("auto", frozenset(flags)) == expected
    assert overflow_fix("disable", frozenset(flags)) == "disable", "an explicit setting is kept"


def test_hybrid_calibration_is_keyed_by_size_and_steps(hybrid_unet, home, monkeypatch):
    """A call at other steps opens a UNet of its own, and the same decoder and text encoder. (This module's
    home holds both UNets on a CPU without VNNI, whose overflow fix is `hybrid_unet`'s: the 2-step one of
    `hybrid_unet` and the one at STEPS test_int8_modes_stay_close built. Fresh managers: their parts open
    their entries, built or read back.)"""
    used, opened = entries_used(monkeypatch), {}
    for steps in (STEPS, 2):
        used.clear()
        tiny.run(
            PipelineManager(), tiny.request(["openvino"], {"openvino": {"mode": "hybrid_int8"}}, steps=steps)
        )
        opened[steps] = set(used)
    assert len(opened[STEPS]) == len(opened[2]) == 3, opened
    assert len(opened[STEPS] - opened[2]) == 1, "2 steps calibrates a UNet of its own"


def pytorch_trajectories(prepared, request, like: tuple) -> list[tuple]:
    """Every UNet input along `request`'s calibration trajectories, denoised by the PyTorch UNet, formatted as
    NNCF's samples (`like`: one of them)."""
    from studio.optimizations.openvino import calibration_samples as calibration

    pipe, records = prepared.pipe, []
    unet = getattr(pipe.unet, "original", pipe.unet)  # the stand-in's PyTorch UNet

    def record(x, t, c):
        t = t.to(torch.from_numpy(like[1]).dtype).reshape(like[1].shape)
        records.append((x.numpy().copy(), t.numpy().copy(), c.numpy().copy()))
        return unet(x, t, encoder_hidden_states=c, return_dict=False)[0]

    prompts = tuple(request.spec.calibration_prompts)
    calibration.trajectories(pipe, prompts, record, torch.zeros(like[0].shape), request.steps)
    return records


def test_calibration_samples_are_denoised_by_nncfs_own_inference_and_spread_over_the_steps(
    int8_convolutions, monkeypatch
):
    """NNCF infers every calibration sample for its statistics, so each sample's prediction, which the
    trajectory needs for its next input, is the one NNCF computed: one UNet inference per sample, not two.
    The calls between samples run through the converted fp32 UNet, and so does every call where NNCF's
    engine does not tell what it inferred (another nncf). The samples are the inputs the PyTorch UNet's
    trajectories give, to fp32 rounding (with NNCF's statistics in f32); a long request keeps
    CALIBRATION_SAMPLES of them, from each prompt's first step to its last, so that NNCF's statistics cost
    no more at 30 steps than at 10 (built at SHORT_STEPS with the cap made SHORT_SAMPLES: the same
    spread, fewer samples)."""
    import contextlib

    from pipelines.schedulers import fresh_scheduler
    from studio import devices
    from studio.optimizations.openvino import calibration_samples as calibration
    from studio.optimizations.openvino import statistics as ovs

    built = int8_convolutions["emulated"]  # NNCF's statistics in f32
    given, calls, request = built.seen["samples"], built.stats["openvino_calibration_calls"], built.request
    prompts = len(request.spec.calibration_prompts)
    cap = calibration.CALIBRATION_SAMPLES  # the studio's own: 30 steps give NNCF that many samples, no more
    assert len(calibration.spread(30, prompts, cap)) * prompts == cap // prompts * prompts <= cap
    samples = SHORT_SAMPLES // prompts * prompts
    assert len(given) == samples
    assert calls == {
        "answered by NNCF's statistics inference": samples,
        "run through the fp32 UNet": SHORT_STEPS * prompts - samples,
    }
    every = pytorch_trajectories(built.prepared, request, given[0])
    picks = calibration.spread(SHORT_STEPS, prompts, SHORT_SAMPLES)
    reference = [every[run * SHORT_STEPS + i] for run in range(prompts) for i in picks]
    steps = [float(t) for t in fresh_scheduler(built.prepared.pipe.scheduler, SHORT_STEPS).timesteps]
    first = [float(t.reshape(-1)[0]) for _, t, _ in given[: len(given) // prompts]]
    assert first[0] == steps[0] and first[-1] == steps[-1] and set(first) <= set(steps)
    assert first == sorted(first, reverse=True) and len(set(first)) == len(first)
    for (x, t, c), (x0, t0, c0) in zip(given, reference, strict=True):
        assert np.array_equal(t, t0) and np.array_equal(c, c0)
        np.testing.assert_allclose(x, x0, rtol=0, atol=1e-3)
    # with an nncf whose engine tells nothing of what it infers, every call up to the last sample runs
    # through the fp32 UNet: the same samples, one more inference each
    monkeypatch.setattr(devices, "detect", lambda: built.hardware)
    fewer = 2 * prompts
    monkeypatch.setattr(calibration, "CALIBRATION_SAMPLES", fewer)
    monkeypatch.setattr(ovs, "listening", lambda listener, precision: contextlib.nullcontext())
    given = given_samples(monkeypatch)
    again = build_unet(monkeypatch, built.home, CONVOLUTIONS, steps=SHORT_STEPS)
    assert len(cache_entries(built.home)) == 2, "another sample count calibrates a UNet of its own"
    picks = calibration.spread(SHORT_STEPS, prompts, fewer)
    last = (prompts - 1) * SHORT_STEPS + picks[-1]
    assert again.stats["openvino_calibration_calls"] == {
        "answered by NNCF's statistics inference": 0,
        "run through the fp32 UNet": last,
    }
    reference = [every[run * SHORT_STEPS + i] for run in range(prompts) for i in picks]
    for (x, t, c), (x0, t0, c0) in zip(given, reference, strict=True):
        assert np.array_equal(t, t0) and np.array_equal(c, c0)
        np.testing.assert_allclose(x, x0, rtol=0, atol=1e-3)


def test_bad_settings_are_refused_before_anything_runs():
    with pytest.raises(ValidationError, match="openvino mode .*full_int8"):  # the message lists the modes
        openvino(mode="int4")
    with pytest.raises(ValidationError, match="openvino inference_precision"):
        openvino(inference_precision="fp8")
    with pytest.raises(ValidationError, match="openvino overflow_fix"):
        openvino(mode="hybrid_int8", overflow_fix="half")
    with pytest.raises(ValidationError, match="openvino calibration_precision"):
        openvino(mode="full_int8", calibration_precision="bf16")
    with pytest.raises(ValidationError, match="calibration_precision .* needs mode=hybrid_int8 or full_int8"):
        openvino(mode="int8_weights", calibration_precision="f32")
    with pytest.raises(ValidationError, match="openvino settings must be a mapping"):
        openvino(threads=2)
    for mode, vae in (("fp32", True), ("hybrid_int8", False)):
        with pytest.raises(ValidationError, match="vae_int8 .* needs vae=true and an int8 mode"):
            openvino(mode=mode, vae=vae, vae_int8=True)


def test_it_says_why_when_it_cannot_run(monkeypatch):
    from studio import devices

    hw = devices.detect()
    assert "runs on the CPU" in unavailable_reason(REGISTRY["openvino"], hw, "cuda:0")
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "openvino" else real(name, *a)
    )
    assert "needs the openvino package" in unavailable_reason(REGISTRY["openvino"], hw, "cpu")


def test_a_compiled_part_follows_the_runs_thread_count():
    """OpenVINO fixes a compiled model's threads: a run on a busy host (one thread) gets a model compiled for
    one thread, once; the last two counts stay compiled."""
    from studio.optimizations.openvino import parts as openvino_parts

    compiled: list[int] = []

    class Request:
        def __init__(self, threads):
            self.threads = threads

        def infer(self, arrays, share_inputs=False):
            return [np.full((1,), self.threads, dtype=np.float32)]

    class Compiled:
        def __init__(self, threads):
            compiled.append(threads)
            self.threads = threads

        def create_infer_request(self):
            return Request(self.threads)

    recompiles: list[float] = []
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        run = openvino_parts._runner(Compiled, recompiles.append)
        answers = []
        for threads in (2, 1, 1, 2, 3, 1):
            torch.set_num_threads(threads)
            answers.append(int(run(torch.zeros(1)).item()))
    finally:
        torch.set_num_threads(before)
    assert answers == [2, 1, 1, 2, 3, 1], "each call runs with the threads of its run"
    assert compiled == [2, 1, 3, 1], "compiled once per count; the two most recent counts are kept"
    assert len(recompiles) == 3, "each compile after the first is told (a phase the run paid)"


def test_quantiles_near_the_ends_are_numpys_to_the_bit_without_numpys_full_selection(monkeypatch):
    from studio.optimizations.openvino import quantiles as openvino_quantiles

    rng = np.random.default_rng(0)
    cases = [
        ((2, 320, 16, 16), (1, 2, 3), True),  # a convolution's input, one range per batch item
        ((2, 320, 16, 16), None, False),
        ((2, 256, 320), (0, 1, 2), True),  # a Linear layer's
        ((2, 77, 64), (1, 2), False),
    ]
    expected = {}
    for shape, axes, keepdims in cases:
        data = (rng.standard_normal(shape) * rng.uniform(0.1, 30)).astype(np.float32)
        data.reshape(-1)[:7] = 1e4  # outliers, and ties among them
        data.reshape(-1)[-300:] = np.round(data.reshape(-1)[-300:])  # ties near the low end
        for q in ([0.0001], [0.9999], [0.01], [0.001, 0.999]):
            wide = np.quantile(data.astype(np.float64), q=q, axis=axes, keepdims=keepdims)
            expected[(shape, axes, keepdims, tuple(q))] = (data, wide)
    # the values nearest the ends crowded into one block, in the tail past the last whole block, and blocks
    # whose own extremes tie
    rows = rng.standard_normal((3, 81920 + 37)).astype(np.float32)
    rows[0, 640:650] = 100 + np.arange(10)
    rows[1, -12:] = -100 - np.arange(12)
    rows[2, ::64] = 50.0
    rows[2, 5::64] = -50.0
    for q in ([0.0001], [0.9999], [0.0001, 0.9999]):
        expected[("blocks", (1,), False, tuple(q))] = (rows, np.quantile(rows.astype(np.float64), q, axis=1))

    def refused(*args, **kwargs):
        raise AssertionError("a quantile near an end took NumPy's full selection")

    monkeypatch.setattr(openvino_quantiles.np, "quantile", refused)
    for (shape, axes, keepdims, q), (data, wide) in expected.items():
        got = openvino_quantiles.quantiles(data, list(q), axes, keepdims)
        assert got.dtype == wide.dtype and got.shape == wide.shape, (shape, axes, q)
        assert np.array_equal(got, wide), (shape, axes, q, got, wide)
    monkeypatch.undo()
    broken = rng.standard_normal((2, 81920)).astype(np.float32)
    broken[1, 5] = np.nan
    got = openvino_quantiles.quantiles(broken, [0.0001, 0.9999], (1,))
    assert np.array_equal(
        got, np.quantile(broken.astype(np.float64), [0.0001, 0.9999], axis=1), equal_nan=True
    )
    middle = rng.standard_normal((4, 100)).astype(np.float32)
    assert np.array_equal(
        openvino_quantiles.quantiles(middle, [0.5], (1,)),
        np.quantile(middle.astype(np.float64), [0.5], axis=1),
    ), "a median takes NumPy's own path"


def test_quantile_ranges_build_the_very_model_nncfs_own_quantiles_build(quantile_unet, nncfs_own_unet):
    """full int8 with quantile ranges, its statistics by the studio's quantiles and by NNCF's own
    (`nncfs_own_unet`, whose weight reductions are not folded either: that shortcut keeps the bits too,
    test_nncf_quantizes_to_the_same_bits_with_the_weight_reductions_folded): the stored weights and
    quantizer ranges are byte for byte the same."""
    from nncf.common.tensor_statistics import collectors

    faster = collectors.QuantileReducer._reduce_out_of_place
    assert faster.studio_quantiles, "the studio's quantiles are installed"
    assert quantile_unet.seen["quantiles"], "and they computed the studio's build's ranges"
    assert nncfs_own_unet.stored() == quantile_unet.stored()


def test_statistics_run_in_bf16_where_the_cpu_computes_it_and_bias_correction_stays_f32(int8_convolutions):
    import openvino as ov

    from studio.optimizations.openvino import technique

    native, emulated = int8_convolutions["native"].hardware, int8_convolutions["emulated"].hardware
    assert technique.statistics_precision("auto", native) == "bf16"
    assert technique.statistics_precision("f32", native) == "f32", "NNCF's own, where asked for"
    assert technique.statistics_precision("auto", emulated) == "f32"
    for name, built in int8_convolutions.items():
        assert built.stats["openvino_statistics_precision"] == technique.statistics_precision(
            "auto", built.hardware
        )
        compiled = built.seen["compiles"]
        statistics = [config for outputs, config in compiled if outputs > 1]
        corrections = [config for outputs, config in compiled if outputs == 1]
        assert len(statistics) == 1, compiled
        assert (statistics[0] is None) == (name == "native"), "OpenVINO's own precision only where native"
        assert corrections and all(
            config == {"INFERENCE_PRECISION_HINT": ov.Type.f32} for config in corrections
        )
    unets = {name: built.unet.name for name, built in int8_convolutions.items()}
    assert unets["native"] != unets["emulated"], "a build's statistics precision is part of its cache key"
