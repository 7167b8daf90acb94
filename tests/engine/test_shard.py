"""Sharded checkpoints: save the bundled model in small shards, list them, load them back unchanged."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
from pathlib import Path

import pytest
import torch

from pipelines import loader, registry
from studio.cli.shard_command import add_shard_parser, cmd_shard
from studio.engine import shard
from studio.errors import ValidationError

MAX = "1MB"


def _cli(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_shard_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["shard", *argv])


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> tuple[Path, dict]:
    """The bundled model sharded at 1MB through the CLI command (`--json`), under an allowed root."""
    root = tmp_path_factory.mktemp("models")
    out = root / "tiny-shapes-sharded"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("STUDIO_MODEL_ROOTS", str(root))
        stdout = io.StringIO()
        with contextlib.redirect_stdout(stdout):
            assert (
                cmd_shard(
                    _cli("--model", "tiny-shapes", "--out", str(out), "--max-shard-size", MAX, "--json")
                )
                == 0
            )
    return out, json.loads(stdout.getvalue())


def _component(report: dict, name: str) -> dict:
    return next(c for c in report["components"] if c["name"] == name)


def test_unet_really_splits_and_report_matches_the_index(sharded):
    out, report = sharded
    unet = _component(report, "unet")
    assert unet["sharded"] and len(unet["shards"]) >= 5
    index = json.loads((out / "unet" / unet["index"]).read_text())
    assert {s["file"] for s in unet["shards"]} == set(index["weight_map"].values())
    assert sum(s["tensors"] for s in unet["shards"]) == len(index["weight_map"])
    assert unet["total_size"] == index["metadata"]["total_size"]
    for s in unet["shards"]:
        assert (out / "unet" / s["file"]).stat().st_size == s["bytes"]
        assert s["bytes"] < 1.1 * shard.parse_size(MAX)  # tensor bytes <= 1MB, plus the JSON header
    assert not list(out.rglob("*.bin")), "weights must be safetensors only"


def test_listing_reads_the_directory_back(sharded):
    out, report = sharded
    listed = {c.name: c for c in shard.list_shards(out)}
    assert set(listed) == {"unet", "vae", "text_encoder"}
    assert [s.file for s in listed["unet"].shards] == [
        s["file"] for s in _component(report, "unet")["shards"]
    ]
    assert listed["vae"].sharded
    assert report["loadable"] is True and report["max_shard_size"] == 1_000_000


def test_directory_is_complete_for_diffusers(sharded):
    out, _ = sharded
    source = registry.ASSETS / "tiny-shapes"
    assert (out / "model_index.json").read_text() == (source / "model_index.json").read_text()
    for folder in ("tokenizer", "scheduler"):
        assert sorted(p.name for p in (out / folder).iterdir()) == sorted(
            p.name for p in (source / folder).iterdir()
        )


def test_sharded_directory_loads_through_the_registry_and_gives_identical_outputs(sharded, monkeypatch):
    out, _ = sharded
    monkeypatch.setenv("STUDIO_MODEL_ROOTS", str(out.parent))
    spec = registry.resolve(str(out))
    assert spec.local and spec.pipeline_class == "StableDiffusionPipeline" and spec.family == "sd"
    original = loader.load(registry.SPECS["tiny-shapes"]).unet
    reloaded = loader.load(spec).unet
    for name, tensor in original.state_dict().items():
        assert torch.equal(tensor, reloaded.state_dict()[name]), name
    gen = torch.Generator().manual_seed(0)
    sample = torch.randn(1, original.config.in_channels, 8, 8, generator=gen)
    context = torch.randn(1, 8, original.config.cross_attention_dim, generator=gen)
    with torch.no_grad():
        expected, actual = original(sample, 10, context).sample, reloaded(sample, 10, context).sample
    # The weights are bit-identical (above); the outputs need not be. The reloaded tensors live in other
    # memory (other alignment, other strides of the same values), and oneDNN/MKL pick their convolution and
    # GEMM kernels and blocking from that layout, so the same products are summed in another order: fp32
    # rounding (eps 1.2e-7) on sums of up to 3x3x192 = 1728 terms per output, over ~20 layers. Measured:
    # bit-identical on Intel, within 1e-5 on an AVX2-only AMD EPYC; this UNet run channels-last (another
    # kernel path) moves outputs of size ~3 by 1.2e-6 here. The bound is 10x the largest of those; one weight
    # and one bias off by 1e-3 move them by 1e-3.
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-4)


def test_outside_the_allowed_roots_is_refused(sharded, monkeypatch, tmp_path):
    out, _ = sharded
    monkeypatch.setenv("STUDIO_MODEL_ROOTS", str(tmp_path))
    assert not shard.loadable(out)
    with pytest.raises(ValidationError, match="STUDIO_MODEL_ROOTS"):
        registry.resolve(str(out))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1MB", 10**6),
        ("500KB", 500_000),
        ("2GiB", 2 * 2**30),
        ("1.5 GB", 1_500_000_000),
        ("4096", 4096),
        (2048, 2048),
    ],
)
def test_parse_size(text, expected):
    assert shard.parse_size(text) == expected


@pytest.mark.parametrize("bad", ["", "ten MB", "5XB", "12", "-1MB", True])
def test_bad_sizes_are_sentences(bad):
    with pytest.raises(ValidationError, match="size"):
        shard.parse_size(bad)


def test_bad_input_is_refused_before_loading(tmp_path, monkeypatch):
    def no_load(*a, **k):
        raise AssertionError("the model must not be loaded for bad input")

    monkeypatch.setattr(loader, "load", no_load)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "keep.txt").write_text("x")
    with pytest.raises(ValidationError, match="not empty"):
        cmd_shard(_cli("--out", str(tmp_path / "busy"), "--max-shard-size", MAX))
    with pytest.raises(ValidationError, match="size"):
        cmd_shard(_cli("--out", str(tmp_path / "new"), "--max-shard-size", "lots"))
    assert not (tmp_path / "new").exists()


def test_listing_a_non_pipeline_directory_says_so(tmp_path):
    with pytest.raises(ValidationError, match="model_index.json"):
        shard.list_shards(tmp_path)


def test_what_the_studio_shards_it_loads_back_whatever_the_roots_say(tmp_path, monkeypatch):
    """The Shard tab's save lands under the studio's home; a request naming it then runs, even with
    STUDIO_MODEL_ROOTS pointing elsewhere."""
    from studio.engine import Studio
    from studio.request import build_request

    monkeypatch.setenv("STUDIO_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("STUDIO_MODEL_ROOTS", str(tmp_path / "elsewhere"))
    studio = Studio(db_path=tmp_path / "runs.db", outputs=tmp_path / "out")
    report = studio.shard("tiny-shapes", "mine", MAX)
    assert report["loadable"] is True and report["out"].startswith(str(tmp_path / "home"))
    run = studio.generate(build_request(model=report["out"], prompt="a red circle", steps=2))
    assert run.images and studio.logged_run(run.run_id)["status"] == "ok"
