"""Single-file checkpoints: the writer is diffusers' own conversion in reverse, diffusers' `from_single_file`
reads what it writes back to the same image, and the studio loads a `.safetensors` file through the registry's
rules (inside the roots, no pickles, a sentence when the configs cannot be found)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from diffusers import AutoencoderKL, StableDiffusionPipeline, UNet2DConditionModel
from diffusers.loaders.single_file_utils import (
    convert_ldm_clip_checkpoint,
    convert_ldm_unet_checkpoint,
    convert_ldm_vae_checkpoint,
    infer_diffusers_model_type,
)
from safetensors.torch import load_file, save_file

from pipelines.architecture_configs import SD15_UNET
from pipelines.registry import ASSETS, resolve
from studio.errors import ModelLoadError, ValidationError
from studio.manager import PipelineManager
from tests.pipelines import single_file
from tests.tiny import PROMPT, request, run

pytestmark = pytest.mark.usefixtures("one_torch_thread")
TINY = ASSETS / "tiny-shapes"


@pytest.fixture(scope="module")
def folder_pipe():
    return StableDiffusionPipeline.from_pretrained(TINY, use_safetensors=True)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The bundled model written as one file by the writer's command line."""
    out = tmp_path_factory.mktemp("models") / "tiny-shapes.safetensors"
    single_file.main(["tiny-shapes", str(out)])
    return out


@pytest.fixture
def roots(saved, monkeypatch):
    monkeypatch.setenv("STUDIO_MODEL_ROOTS", str(saved.parent))
    return saved.parent


def test_the_writer_is_diffusers_own_conversion_in_reverse(folder_pipe):
    """diffusers' converters (original -> diffusers) give back every tensor, unchanged, under its name."""
    original = single_file.original_state_dict(folder_pipe)
    for model, back in (
        (folder_pipe.unet, convert_ldm_unet_checkpoint(original, folder_pipe.unet.config)),
        (folder_pipe.vae, convert_ldm_vae_checkpoint(original, folder_pipe.vae.config)),
        (folder_pipe.text_encoder, convert_ldm_clip_checkpoint(original)),
    ):
        back = {k.removeprefix("text_model."): v for k, v in back.items()}
        assert back.keys() == model.state_dict().keys()
        assert all(torch.equal(back[k], v) for k, v in model.state_dict().items())


def test_the_names_are_stable_diffusion_1_5s_on_its_real_layout():
    """On SD 1.5's UNet (built on the meta device: names and shapes only) the keys are the original
    checkpoint's, and diffusers maps them back."""
    with torch.device("meta"):
        unet = UNet2DConditionModel(**SD15_UNET)
    original = {
        single_file.UNET + single_file.unet_key(k, unet.config): v for k, v in unet.state_dict().items()
    }
    assert len(original) == 686, "SD 1.5's original checkpoint has 686 model.diffusion_model tensors"
    for key in (
        "input_blocks.3.0.op.weight",
        "output_blocks.2.1.conv.weight",
        "output_blocks.5.2.conv.weight",
    ):
        assert single_file.UNET + key in original
    assert infer_diffusers_model_type(original) == "v1"
    assert convert_ldm_unet_checkpoint(original, unet.config).keys() == unet.state_dict().keys()
    with torch.device("meta"):
        vae = AutoencoderKL(
            block_out_channels=(128, 256, 512, 512),
            down_block_types=("DownEncoderBlock2D",) * 4,
            up_block_types=("UpDecoderBlock2D",) * 4,
            layers_per_block=2,
        )
    names = {single_file.vae_key(k, vae.config) for k in vae.state_dict()}
    assert {"decoder.up.3.upsample.conv.weight", "decoder.up.1.block.0.nin_shortcut.weight"} <= names
    assert "encoder.mid.attn_1.proj_out.weight" in names and "encoder.norm_out.weight" in names


def test_diffusers_reads_the_file_back_to_the_same_image(saved, folder_pipe):
    """StableDiffusionPipeline.from_single_file honours the bundled model's non-standard configs (8 latent
    channels, 2 down blocks, a 64-wide CLIP: left to itself diffusers would take it for instruct-pix2pix) and
    draws the folder's image exactly."""
    pipe = StableDiffusionPipeline.from_single_file(str(saved), config=str(TINY), local_files_only=True)
    assert pipe.unet.config.in_channels == 8 and pipe.text_encoder.config.hidden_size == 64
    assert pipe.vae.config.scaling_factor == folder_pipe.vae.config.scaling_factor

    def image(p):
        generator = torch.Generator().manual_seed(3)
        kw = {"num_inference_steps": 4, "width": 64, "height": 64, "output_type": "np"}
        return p(PROMPT, generator=generator, **kw).images

    np.testing.assert_array_equal(image(pipe), image(folder_pipe))


def test_the_studio_loads_the_file_with_the_bundled_configs(roots, saved):
    """A file of the bundled architecture needs no config folder: the bundled model's folder, defaults and
    hooks come with it, and the image is the bundled model's."""
    req = request(model=str(saved))
    assert req.spec.single_file and req.spec.single_file_config == str(TINY)
    assert (req.width, req.spec.family, req.spec.prompt_fidelity) == (
        64,
        "sd",
        resolve("tiny-shapes").prompt_fidelity,
    )
    manager = PipelineManager()
    np.testing.assert_array_equal(run(manager, req)[0], run(manager, request())[0])


def test_a_file_the_configs_cannot_be_found_for_offline_says_to_pass_a_folder(roots, saved, monkeypatch):
    """Without its text encoder the file is no longer the bundled architecture: diffusers would fetch SD 1.5's
    configs from the hub, which is offline here, so the load says what to pass; given the folder, the missing
    text encoder comes from it."""
    state = load_file(saved)
    partial = roots / "no-text-encoder.safetensors"
    save_file({k: v for k, v in state.items() if not k.startswith(single_file.CLIP)}, partial)
    req = request(model=str(partial))
    assert req.spec.single_file_config is None and req.spec.label == partial.name
    with pytest.raises(ModelLoadError, match="Pass single_file_config, a local diffusers folder"):
        with PipelineManager().acquire(req):
            pass
    with pytest.raises(ModelLoadError, match="Could not load the single-file checkpoint .* CLIPTextModel"):
        with PipelineManager().acquire(request(model=str(partial), single_file_config=str(TINY))):
            pass


def test_a_config_folder_named_for_the_file_is_used_and_keys_the_pipeline(roots, saved):
    """A copy of the bundled folder as single_file_config: the same image, on a pipeline of its own (the
    config folder decides the scheduler and tokenizer, so it is part of what the pipeline was loaded with)."""
    copy = roots / "tiny-config"
    shutil.copytree(TINY, copy, dirs_exist_ok=True)
    named = request(model=str(saved), single_file_config=str(copy), width=64, height=64, guidance=6.0)
    assert (
        named.spec.single_file_config == str(copy.resolve())
        and named.spec.pipeline_class == "StableDiffusionPipeline"
    )
    manager = PipelineManager()
    np.testing.assert_array_equal(run(manager, named)[0], run(manager, request(model=str(saved)))[0])
    assert [key[-1] for key in manager.loaded()] == [
        ("single_file_config", str(copy.resolve())),
        ("single_file_config", str(TINY)),
    ]


@pytest.mark.parametrize("suffix", [".ckpt", ".pt", ".bin", ".pth"])
def test_pickle_checkpoints_are_refused_before_any_load(roots, suffix):
    pickle = roots / f"model{suffix}"
    torch.save({}, pickle)
    with pytest.raises(ValidationError, match=r"is a pickle checkpoint .* loads only \.safetensors files"):
        request(model=str(pickle))


def test_files_outside_the_roots_and_impostors_are_refused(roots, saved, tmp_path, monkeypatch):
    monkeypatch.setenv("STUDIO_MODEL_ROOTS", str(tmp_path))
    with pytest.raises(
        ValidationError, match="is outside the allowed roots; add its parent to STUDIO_MODEL_ROOTS"
    ):
        request(model=str(saved))
    fake = tmp_path / "fake.safetensors"
    fake.write_bytes(b"\x80\x04not a safetensors file")
    with pytest.raises(ValidationError, match="is not a readable .safetensors file"):
        request(model=str(fake))
    vae_only = tmp_path / "vae.safetensors"
    save_file({k: v for k, v in load_file(saved).items() if k.startswith(single_file.VAE)}, vae_only)
    with pytest.raises(ValidationError, match="holds no UNet .* a VAE file goes in vae"):
        request(model=str(vae_only))
    inside = tmp_path / "inside.safetensors"
    inside.write_bytes(saved.read_bytes())
    with pytest.raises(ValidationError, match="single_file_config .* is outside the allowed roots"):
        request(model=str(inside), single_file_config=str(tmp_path.parent / "elsewhere"))
    with pytest.raises(ValidationError, match="single_file_config is for a single-file .safetensors model"):
        request(single_file_config=str(TINY))
    monkeypatch.setenv("STUDIO_MODEL_ALLOWLIST", "tiny-shapes")
    with pytest.raises(ValidationError, match="not in STUDIO_MODEL_ALLOWLIST"):
        request(model=str(vae_only))


def test_the_writer_refuses_what_it_cannot_write(tmp_path, folder_pipe):
    with pytest.raises(ValueError, match="must end in .safetensors"):
        single_file.save_single_file(folder_pipe, tmp_path / "model.ckpt")
    with pytest.raises(SystemExit):
        single_file.main([str(tmp_path / "no-such-folder"), str(tmp_path / "out.safetensors")])
