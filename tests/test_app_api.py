"""The real app over HTTP with gradio_client: every named endpoint, same engine and database as the CLI."""

from __future__ import annotations

import pytest
from gradio_client import Client
from PIL import Image

from studio.runlog import RunLog
from tests.server import Server

PROMPT = "a big yellow star in the centre, on a black background"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("app")
    srv = Server(home, STUDIO_MODEL_ROOTS=str(home)).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server):
    return Client(server.url, verbose=False)


def generate_args(**kw):
    args = {"model": "tiny-shapes", "custom_model": "", "device": "auto", "precision": "fp32", "optimizations": [],
            "prompt": PROMPT, "negative_prompt": "", "seed": 2, "steps": 4, "guidance": 6.0, "width": 64, "height": 64,
            "scheduler": "default", "settings": ""}
    return {**args, **kw}


def test_view_api_lists_the_named_endpoints(client):
    endpoints = client.view_api(return_format="dict", print_info=False)["named_endpoints"]
    assert {"/generate", "/compare", "/ladder", "/history", "/system", "/shard"} <= set(endpoints)
    params = [p["parameter_name"] for p in endpoints["/generate"]["parameters"]]
    assert params[:6] == ["model", "custom_model", "device", "precision", "optimizations", "prompt"]


def test_generate_returns_an_image_and_a_logged_run(client, server):
    image_path, card, metrics = client.predict(**generate_args(precision="bf16", optimizations=["channels_last"]),
                                               api_name="/generate")
    assert Image.open(image_path).size == (64, 64)
    assert metrics["applied"] == ["bf16", "channels_last"] and "s ·" in card
    row = RunLog(server.home / "runs.db").get_run(metrics["run_id"])
    assert row["status"] == "ok" and row["requested"] == ["bf16", "channels_last"] and row["prompt"] == PROMPT


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"steps": 0}, "steps must be a whole number between 1 and 200"),
        ({"width": 60}, "multiple of 8"),
        ({"prompt": ""}, "prompt is empty"),
        ({"optimizations": ["warp"]}, "Unknown optimization 'warp'"),
        ({"optimizations": ["sdpa", "classic_attention"]}, "cannot be combined"),
        ({"model": "nope"}, "Unknown model 'nope'"),
        ({"settings": "{not json"}, "settings must be a JSON object"),
    ],
)
def test_bad_input_returns_the_validation_message(client, kw, message):
    with pytest.raises(Exception, match=message) as info:
        client.predict(**generate_args(**kw), api_name="/generate")
    assert type(info.value).__name__ == "AppError"


def test_compare_rows_are_consistent(client, server):
    out = client.predict("tiny-shapes", "", "auto", PROMPT, 3, 4, 6.0, 64, 64, "default", ["bf16", "channels_last"],
                         "", 0, 2, api_name="/compare")
    gallery, rows = out[0], out[-1]
    assert [r["config"] for r in rows] == ["baseline", "bf16", "channels_last"]
    assert len(gallery) == 3
    base = rows[0]["latency_median"]
    for r in rows:
        assert r["status"] == "ok" and r["speedup"] == pytest.approx(base / r["latency_median"])
    group = {RunLog(server.home / "runs.db").get_run(r["run_id"])["group_id"] for r in rows}
    assert len(group) == 1 and None not in group


def test_history_and_system(client):
    table, _plot, csv_path = client.predict("tiny-shapes", "", "ok", "", "", 50, api_name="/history")
    assert table["data"] and "latency_median" in table["headers"]
    assert open(csv_path).readline().startswith("id,")
    system = client.predict(api_name="/system")
    assert "cpu" in system["hardware"]["devices"]
    names = {t["name"]: t for t in system["techniques"]}
    assert names["cudnn_benchmark"]["unavailable"] and names["bf16"]["unavailable"] is None


def test_ladder_shows_skipped_steps_with_reasons(client):
    md, table = client.predict("tiny-shapes", "", "auto", PROMPT, 1, 2, 64, 64, 0, 1, api_name="/ladder")
    assert "| original |" in md and "x1.00" in md
    statuses = dict(zip([r[0] for r in table["data"]], [r[1] for r in table["data"]], strict=True))
    assert statuses["cuDNN auto-tuner"] == "skipped" and "CUDA" in md
    assert statuses["channels last"] == "ok"


def test_load_config_returns_a_logged_runs_settings(client):
    _, _, metrics = client.predict(**generate_args(precision="bf16", optimizations=["vae_slicing"], seed=42, steps=3),
                                   api_name="/generate")
    out = client.predict(metrics["run_id"], api_name="/load_config")
    model, custom, precision, opts, prompt = out[:5]
    assert (model, custom, precision, opts, prompt) == ("tiny-shapes", "", "bf16", ["vae_slicing"], PROMPT)
    assert list(out[6:9]) == [42, 3, 6.0]


def test_shard_saves_small_shards_that_load_back_and_generate(client, server):
    report = client.predict("tiny-shapes", "", "tiny-1mb", "1MB", api_name="/shard")[0]
    unet = next(c for c in report["components"] if c["name"] == "unet")
    assert unet["sharded"] and len(unet["shards"]) > 1 and all(s["bytes"] <= 1_000_000 for s in unet["shards"])
    assert report["out"] == str(server.home / "sharded" / "tiny-1mb") and report["loadable"]
    image, _, metrics = client.predict(**generate_args(custom_model=report["out"]), api_name="/generate")
    reference, _, _ = client.predict(**generate_args(), api_name="/generate")
    assert metrics["latency_s"] > 0
    assert Image.open(image).tobytes() == Image.open(reference).tobytes(), "the sharded copy is the same model"
    with pytest.raises(Exception, match="folder name must be"):
        client.predict("tiny-shapes", "", "../../etc", "1MB", api_name="/shard")


def test_autotune_endpoint_returns_rows_fronts_and_a_winner_to_apply(client):
    out = client.predict("tiny-shapes", "", "auto", PROMPT, 2, 3, 64, 64, ["channels_last"], False, 30, 0.95, 0.03,
                         0, 1, 1, api_name="/autotune")
    data = out[4]
    assert [r["config"] for r in data["rows"]][:2] == ["baseline", "channels_last"]
    assert data["pareto_quality"] and data["summary"] and set(data["winner"]) <= {"channels_last"}
    with pytest.raises(Exception, match="min_psnr must be a number from 0 to 200"):
        client.predict("tiny-shapes", "", "auto", PROMPT, 2, 3, 64, 64, [], False, -1, 0.95, 0.03, 0, 1, 1,
                       api_name="/autotune")
