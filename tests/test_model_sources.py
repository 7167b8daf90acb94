"""Model sources: safetensors only, no remote code, and a failed load leaves the others serving."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pipelines.registry import ASSETS
from studio.errors import ModelLoadError
from studio.manager import PipelineManager
from studio.measure import bench
from studio.request import validate_request

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
    good = validate_request(model="tiny-shapes", prompt=PROMPT, steps=2)
    with manager.acquire(good) as prepared:
        before = bench.run_once(prepared, good).images
    bad_dir = broken_copy(roots, f"bad-{damage.__name__}", damage)
    with pytest.raises((ModelLoadError, ValueError)) as info:
        bad = validate_request(model=str(bad_dir), prompt=PROMPT, steps=2, width=64, height=64)
        with manager.acquire(bad):
            pass
    assert "remote code ran" not in str(info.value)
    with manager.acquire(good) as prepared:
        assert (bench.run_once(prepared, good).images == before).all()
    assert len(manager.loaded()) == 1


def test_missing_hub_model_offline_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_TOKEN", "hf_fakeSECRETtoken123")
    req = validate_request(model="nobody/no-such-model", prompt=PROMPT, steps=2, width=64, height=64)
    with pytest.raises(ModelLoadError, match="Could not load 'nobody/no-such-model'") as info:
        with PipelineManager().acquire(req):
            pass
    assert "hf_fakeSECRETtoken123" not in str(info.value)
