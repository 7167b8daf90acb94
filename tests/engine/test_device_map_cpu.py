"""Device maps with accelerate: what runs for real on a CPU-only host, and the multi-GPU logic with fakes.

For real: the bundled UNet loaded with `device_map="auto"` and a `max_memory` cap on "cpu" spills the rest
to disk (accelerate's offload hooks bring it back per forward), and still computes the same output.
With fakes: two pretend GPUs with small budgets get modules in order, within their caps, rest on the CPU.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
import torch
from accelerate import infer_auto_device_map
from accelerate.utils import compute_module_sizes, convert_file_size_to_int
from diffusers import UNet2DConditionModel

from pipelines.registry import ASSETS

SOURCE = ASSETS / "tiny-shapes"


@pytest.fixture(scope="module")
def unet() -> UNet2DConditionModel:
    return UNet2DConditionModel.from_pretrained(SOURCE, subfolder="unet").eval()


def _bytes_per_device(model: torch.nn.Module, device_map: dict) -> dict:
    sizes = compute_module_sizes(model)
    used: dict = defaultdict(int)
    for name, device in device_map.items():
        used[device] += sizes[name]
    return dict(used)


def _forward(model: torch.nn.Module, reference: UNet2DConditionModel) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    sample = torch.randn(1, reference.config.in_channels, 8, 8, generator=gen)
    context = torch.randn(1, 8, reference.config.cross_attention_dim, generator=gen)
    with torch.no_grad():
        return model(sample, 10, context).sample


def test_max_memory_on_cpu_spills_to_disk_and_output_is_unchanged(unet, tmp_path):
    cap = "6MB"
    mapped = UNet2DConditionModel.from_pretrained(
        SOURCE, subfolder="unet", device_map="auto", max_memory={"cpu": cap}, offload_folder=str(tmp_path)
    ).eval()
    device_map = mapped.hf_device_map
    assert set(device_map.values()) == {"cpu", "disk"}, device_map
    used = _bytes_per_device(unet, device_map)
    assert 0 < used["cpu"] <= convert_file_size_to_int(cap)
    assert used["cpu"] + used["disk"] == compute_module_sizes(unet)[""]
    modules = dict(mapped.named_modules())
    for name, device in device_map.items():
        params = list(modules[name].parameters())
        expected = "meta" if device == "disk" else "cpu"  # disk weights live in the offload folder until used
        assert all(p.device.type == expected for p in params), (name, device)
    assert list(tmp_path.glob("*.dat")), "offloaded weights must be written to the offload folder"
    assert torch.equal(_forward(mapped, unet), _forward(unet, unet))


def test_a_cap_that_holds_everything_keeps_it_all_on_the_cpu(unet, tmp_path):
    mapped = UNet2DConditionModel.from_pretrained(
        SOURCE, subfolder="unet", device_map="auto", max_memory={"cpu": "1GB"}, offload_folder=str(tmp_path)
    )
    assert set(mapped.hf_device_map.values()) == {"cpu"}
    assert not list(tmp_path.glob("*.dat"))


@pytest.fixture
def two_fake_gpus(monkeypatch, fake_gpus):
    fake_gpus(2)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)


@pytest.mark.parametrize("cap", ["5MB", "6MB"])
def test_two_fake_gpus_fill_in_order_within_their_caps(unet, two_fake_gpus, cap):
    max_memory = {0: cap, 1: cap, "cpu": "1GB"}
    device_map = infer_auto_device_map(
        unet, max_memory=max_memory, no_split_module_classes=unet._no_split_modules
    )
    rank = {0: 0, 1: 1, "cpu": 2}
    order = [rank[device] for device in device_map.values()]
    assert order == sorted(order), "modules fill GPU 0, then GPU 1, then the CPU, in module order"
    assert set(device_map.values()) == {0, 1, "cpu"}
    used = _bytes_per_device(unet, device_map)
    assert used[0] <= convert_file_size_to_int(cap) and used[1] <= convert_file_size_to_int(cap)
    assert sum(used.values()) == compute_module_sizes(unet)[""]


def test_fake_gpus_with_room_take_the_whole_model(unet, two_fake_gpus):
    device_map = infer_auto_device_map(
        unet, max_memory={0: "1GB", 1: "1GB", "cpu": "1GB"}, no_split_module_classes=unet._no_split_modules
    )
    assert device_map == {"": 0}


def test_device_without_a_budget_takes_no_part(unet, two_fake_gpus):
    device_map = infer_auto_device_map(
        unet, max_memory={1: "6MB", "cpu": "1GB"}, no_split_module_classes=unet._no_split_modules
    )
    assert 0 not in device_map.values() and 1 in device_map.values()


def test_the_pipelines_device_map_is_logged_with_the_run_and_shown(tmp_path):
    from pipelines import loader
    from studio import report
    from studio.engine import Studio
    from studio.manager import PipelineManager
    from studio.request import build_request
    from studio.ui.views import generate_card

    placed = {
        "text_encoder": "cpu",
        "unet": 0,
        "vae": 1,
    }  # what accelerate reports after device_map="balanced"

    def load(spec, **kwargs):
        pipe = loader.load(spec, **kwargs)
        pipe.hf_device_map = dict(placed)
        return pipe

    studio = Studio(
        db_path=tmp_path / "runs.db", outputs=tmp_path / "out", manager=PipelineManager(load=load)
    )
    result = studio.generate(build_request(model="tiny-shapes", prompt="a red circle", seed=1, steps=2))
    expected = {name: str(device) for name, device in placed.items()}
    assert studio.runlog.get_run(result.run_id)["stats"]["hf_device_map"] == expected
    record = report.single_record(result)
    assert record["device_map"] == expected
    card = generate_card(record)
    assert "unet → 0" in card and "vae → 1" in card
