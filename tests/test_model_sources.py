"""Model sources: safetensors only, no remote code, and a failed load leaves the others serving."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pipelines.registry import ASSETS
from studio.errors import ModelLoadError, ValidationError
from studio.manager import PipelineManager
from studio.measure import bench
from studio.request import build_request

PROMPT = "a small cyan circle at the bottom, on a grey background"


@pytest.fixture
def roots(tmp_path, monkeypatch):
    monkeypatch.setenv("STUDIO_MODEL_ROOTS", str(tmp_path))
    return tmp_path


def broken_copy(root: Path, name: str, damage) -> Path:
    target = root / name
    shutil.copytree(ASSETS / "tiny-shapes", target)
    damage(target)
    return target


def truncate_unet(d: Path) -> None:
    weights = d / "unet" / "diffusion_pytorch_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])


def pickle_only(d: Path) -> None:
    import torch

    weights = d / "unet" / "diffusion_pytorch_model.safetensors"
    weights.unlink()
    torch.save({}, d / "unet" / "diffusion_pytorch_model.bin")


def remote_code(d: Path) -> None:
    index = json.loads((d / "model_index.json").read_text())
    index["_class_name"] = ["my_module", "EvilPipeline"]
    (d / "model_index.json").write_text(json.dumps(index))
    (d / "my_module.py").write_text("raise SystemExit('remote code ran')\n")


@pytest.mark.parametrize(
    "damage", [truncate_unet, pickle_only, remote_code], ids=["corrupt", "pickle-only", "remote-code"]
)
def test_a_failed_load_leaves_the_loaded_pipelines_serving(roots, damage):
    manager = PipelineManager()
    good = build_request(model="tiny-shapes", prompt=PROMPT, steps=2)
    with manager.acquire(good) as prepared:
        before = bench.run_once(prepared, good).images
    bad_dir = broken_copy(roots, f"bad-{damage.__name__}", damage)
    with pytest.raises((ModelLoadError, ValueError)) as info:
        bad = build_request(model=str(bad_dir), prompt=PROMPT, steps=2, width=64, height=64)
        with manager.acquire(bad):
            pass
    assert "remote code ran" not in str(info.value)
    with manager.acquire(good) as prepared:
        assert (bench.run_once(prepared, good).images == before).all()
    assert len(manager.loaded()) == 1


def test_missing_hub_model_offline_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_TOKEN", "hf_fakeSECRETtoken123")
    req = build_request(model="nobody/no-such-model", prompt=PROMPT, steps=2, width=64, height=64)
    with pytest.raises(ModelLoadError, match="Could not load 'nobody/no-such-model'") as info:
        with PipelineManager().acquire(req):
            pass
    assert "hf_fakeSECRETtoken123" not in str(info.value)


@pytest.fixture(scope="module")
def shifted_vae(tmp_path_factory):
    """The bundled VAE with its decoder's last bias raised by 0.1, as a diffusers folder and as a single
    file in the original layout (the way VAEs are shared: `encoder.down.0.block.0...`, no prefix)."""
    import torch
    from diffusers import AutoencoderKL
    from safetensors.torch import save_file

    from tests.pipelines.single_file import vae_key

    root = tmp_path_factory.mktemp("vaes")
    vae = AutoencoderKL.from_pretrained(ASSETS / "tiny-shapes", subfolder="vae", use_safetensors=True)
    with torch.no_grad():
        vae.decoder.conv_out.bias += 0.1
    vae.save_pretrained(root / "shifted")
    original = {vae_key(k, vae.config): v.contiguous() for k, v in vae.state_dict().items()}
    save_file(original, root / "shifted.safetensors")
    return root


def test_a_vae_override_changes_the_image_and_only_its_own_pipeline(
    shifted_vae, monkeypatch, one_torch_thread
):
    """Two requests that differ only by their VAE never share a pipeline: the baseline's image is the same
    before and after, the shifted VAE's is brighter, and its folder and single file draw the same image."""
    monkeypatch.setenv("STUDIO_MODEL_ROOTS", str(shifted_vae))
    manager = PipelineManager()
    base = build_request(model="tiny-shapes", prompt=PROMPT, steps=2)
    folder = build_request(model="tiny-shapes", prompt=PROMPT, steps=2, vae=str(shifted_vae / "shifted"))
    single = build_request(
        model="tiny-shapes", prompt=PROMPT, steps=2, vae=str(shifted_vae / "shifted.safetensors")
    )
    assert folder.vae == str((shifted_vae / "shifted").resolve()) and base.vae is None
    images = {}
    for name, req in (("base", base), ("folder", folder), ("single", single), ("again", base)):
        with manager.acquire(req) as prepared:
            images[name] = bench.run_once(prepared, req).images
    assert (images["again"] == images["base"]).all()
    assert (images["single"] == images["folder"]).all()
    brighter = (images["folder"] - images["base"]).mean()
    assert 0.03 < brighter < 0.06, f"0.1 on the decoder's [-1, 1] output is 0.05 of the image, not {brighter}"
    assert [key[3:] for key in manager.loaded()] == [
        (("vae", folder.vae),),
        (("vae", single.vae),),
        (),
    ]


def test_a_vae_is_checked_like_a_model(shifted_vae, tmp_path, monkeypatch):
    monkeypatch.setenv("STUDIO_MODEL_ROOTS", str(tmp_path))
    refused = {
        str(shifted_vae / "shifted"): "VAE directory .* is outside the allowed roots",
        str(tmp_path / "vae.ckpt"): r"VAE .* is a pickle checkpoint \(.ckpt\)",
        str(
            ASSETS / "tiny-shapes" / "unet"
        ): "is a 'UNet2DConditionModel'; the studio swaps in an AutoencoderKL",
        str(ASSETS / "tiny-shapes" / "unet" / "diffusion_pytorch_model.safetensors"): "holds no VAE decoder",
        str(tmp_path): "is not a diffusers VAE folder",
        "not a name": "Unknown VAE",
    }
    for name, message in refused.items():
        with pytest.raises(ValidationError, match=message):
            build_request(model="tiny-shapes", prompt=PROMPT, vae=name)
    pipeline_folder = build_request(model="tiny-shapes", prompt=PROMPT, vae=str(ASSETS / "tiny-shapes"))
    assert pipeline_folder.vae == str(ASSETS / "tiny-shapes"), "a pipeline folder lends its vae/"
    monkeypatch.setenv("STUDIO_MODEL_ALLOWLIST", "tiny-shapes")
    with pytest.raises(ValidationError, match="VAE 'owner/some-vae' is not in STUDIO_MODEL_ALLOWLIST"):
        build_request(model="tiny-shapes", prompt=PROMPT, vae="owner/some-vae")


def test_a_vae_that_cannot_be_loaded_or_does_not_fit_is_a_sentence(tmp_path, monkeypatch):
    from diffusers import AutoencoderKL

    monkeypatch.setenv("STUDIO_MODEL_ROOTS", str(tmp_path))
    AutoencoderKL(latent_channels=4, block_out_channels=(8,), norm_num_groups=8).save_pretrained(
        tmp_path / "sd"
    )
    cases = {
        "nobody/no-such-vae": "Could not load the VAE 'nobody/no-such-vae'",
        str(tmp_path / "sd"): (
            "does not fit this model: it has 4 latent channels and downsamples by 1, the model's own VAE 8 "
            "and 8"
        ),
    }
    for name, message in cases.items():
        req = build_request(model="tiny-shapes", prompt=PROMPT, steps=2, vae=name)
        with pytest.raises(ModelLoadError, match=message):
            with PipelineManager().acquire(req):
                pass


def test_on_a_space_only_the_registrys_models_load_unless_the_owner_widens_the_list(monkeypatch):
    from pipelines.registry import SPECS, resolve

    monkeypatch.delenv("STUDIO_MODEL_ALLOWLIST", raising=False)
    monkeypatch.setenv("SPACE_ID", "owner/diffusion-studio")
    assert resolve("sd15").id == "sd15" and resolve("tiny-shapes").id == "tiny-shapes"
    with pytest.raises(ValidationError, match="this Space's allowlist.*STUDIO_MODEL_ALLOWLIST"):
        resolve("someone/any-model")
    monkeypatch.setenv("STUDIO_MODEL_ALLOWLIST", "*")
    assert resolve("someone/any-model").source == "someone/any-model"
    monkeypatch.setenv("STUDIO_MODEL_ALLOWLIST", "tiny-shapes,someone/any-model")
    assert resolve("someone/any-model").source == "someone/any-model"
    with pytest.raises(ValidationError, match="not in STUDIO_MODEL_ALLOWLIST"):
        resolve("sd15")
    monkeypatch.delenv("SPACE_ID")
    monkeypatch.delenv("STUDIO_MODEL_ALLOWLIST")
    assert resolve("someone/any-model").source == "someone/any-model" and "sd15" in SPECS
