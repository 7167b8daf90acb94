"""The real app over HTTP with gradio_client: every named endpoint, same engine and database as the CLI."""

from __future__ import annotations

import re
import time

import httpx
import pytest
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError
from PIL import Image

from studio import devices
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
    """/generate's arguments by name: only what differs from the form's defaults (tiny-shapes, 64x64)."""
    return {"prompt": PROMPT, "seed": 2, "steps": 4, **kw}


def test_view_api_lists_the_named_endpoints(client):
    endpoints = client.view_api(return_format="dict", print_info=False)["named_endpoints"]
    assert {"/generate", "/compare", "/ladder", "/history", "/system", "/shard"} <= set(endpoints)
    params = [p["parameter_name"] for p in endpoints["/generate"]["parameters"]]
    assert params[:6] == ["model", "custom_model", "device", "precision", "optimizations", "prompt"]


ESSENTIAL = {  # the parameters a client must give; every other one has a default
    "/read_image": ["path"],
    "/load_config": ["run_id"],
    "/mcp_generate": ["prompt"],
    "/mcp_compare": ["prompt", "configs"],
    "/mcp_autotune": ["prompt"],
}


def test_every_parameter_and_return_is_named_and_only_the_essential_ones_are_required(client):
    endpoints = client.view_api(return_format="dict", print_info=False)["named_endpoints"]
    for name, endpoint in endpoints.items():
        params = [p["parameter_name"] for p in endpoint["parameters"]]
        returns = [r["label"] for r in endpoint["returns"]]
        assert not [p for p in params if p.startswith("param_")], f"{name} takes {params}"
        assert not [r for r in returns if r.startswith("value_")], f"{name} returns {returns}"
    required = {
        name: [p["parameter_name"] for p in endpoint["parameters"] if not p["parameter_has_default"]]
        for name, endpoint in endpoints.items()
    }
    assert {name: params for name, params in required.items() if params} == ESSENTIAL
    for name in ("/generate", "/compare", "/ladder", "/autotune", "/profile", "/estimate"):
        defaults = {p["parameter_name"]: p["parameter_default"] for p in endpoints[name]["parameters"]}
        assert defaults["steps"] is None and defaults["width"] is None, f"{name}: the model's own by default"
    assert [p["parameter_name"] for p in endpoints["/estimate"]["parameters"]] == [
        p["parameter_name"] for p in endpoints["/generate"]["parameters"]
    ]


def test_a_client_passes_only_what_it_cares_about_by_name(client):
    """/generate, /compare and /history called with keywords only: the rest takes the form's defaults."""
    image, card, metrics = client.predict(prompt="a red circle", steps=2, api_name="/generate")
    assert Image.open(image).size == (64, 64)
    assert (metrics["config"], metrics["status"], metrics["applied"]) == ("baseline", "ok", [])
    assert f"run #{metrics['run_id']} on cpu" in card
    threads = metrics["cpu_threads"]
    assert threads >= 1 and f"({threads} CPU thread" in card, "the card says the threads the run used"
    rows = client.predict(
        prompt="a red circle", steps=2, presets=["channels_last"], warmup=0, rounds=1, api_name="/compare"
    )[-1]
    assert [(r["config"], r["status"], r["rounds"]) for r in rows] == [
        ("baseline", "ok", 1),
        ("channels_last", "ok", 1),
    ]
    table, _plot, _csv, records = client.predict(api_name="/history")
    assert [(r["run_id"], r["config"]) for r in records[:2]] == [
        (rows[1]["run_id"], "channels_last"),
        (rows[0]["run_id"], "baseline"),
    ], "the same runs as records in the shared vocabulary"
    assert {"latency_s", "speedup", "peak_memory_mb"} <= set(records[0])
    newest = [dict(zip(table["headers"], row, strict=True)) for row in table["data"][:3]]
    assert [(run["Run"], run["Model"], run["Configuration"]) for run in newest] == [
        (rows[1]["run_id"], "tiny-shapes", "channels_last"),
        (rows[0]["run_id"], "tiny-shapes", "baseline"),
        (metrics["run_id"], "tiny-shapes", "baseline"),
    ]


def test_generate_returns_an_image_and_a_logged_run(client, server):
    image_path, card, metrics = client.predict(
        **generate_args(precision="bf16", optimizations=["channels_last"]), api_name="/generate"
    )
    assert Image.open(image_path).size == (64, 64)
    assert metrics["applied"] == ["bf16", "channels_last"] and "s ·" in card
    row = RunLog(server.home / "runs.db").get_run(metrics["run_id"])
    assert row["status"] == "ok" and row["requested"] == ["bf16", "channels_last"] and row["prompt"] == PROMPT


def test_cancel_stops_the_clients_own_generate_and_no_other_clients(server):
    """`/cancel` from the client whose `/generate` runs stops it after its current step; another client's
    `/cancel` finds nothing of its own to stop; once the run has ended there is nothing to stop."""
    client, other = Client(server.url, verbose=False), Client(server.url, verbose=False)
    assert client.predict(api_name="/cancel") == "Nothing is running."
    seed = 7077
    job = client.submit(**generate_args(steps=200, width=256, height=256, seed=seed), api_name="/generate")
    log, deadline = RunLog(server.home / "runs.db"), time.monotonic() + 60
    while not [r for r in log.runs() if r["seed"] == seed and r["status"] == "running"]:
        assert time.monotonic() < deadline and not job.done(), "the run never started"
        time.sleep(0.2)
    assert other.predict(api_name="/cancel") == "Nothing is running.", "another client's run is not its own"
    assert client.predict(api_name="/cancel") == "Stopping after the current step…"
    image, card, metrics = job.result(timeout=60)
    assert image is None and metrics is None and card.startswith("Cancelled after "), card
    assert " of 200 steps (cancelled by the user)" in card
    assert [r["status"] for r in log.runs() if r["seed"] == seed] == ["cancelled"]
    assert client.predict(api_name="/cancel") == "Nothing is running."


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


SHARED = {
    "config",
    "status",
    "latency_s",
    "latency_spread_s",
    "speedup",
    "speedup_min",
    "speedup_max",
    "verdict",
    "peak_memory_mb",
    "memory_kind",
    "host_busy_pct",
    "host_busy",
    "run_id",
}
OLD_NAMES = {"peak_memory", "latency", "memory_added"}


def compare_out(client, configs, rounds=3, **xy):
    return client.predict(
        prompt=PROMPT, seed=3, steps=4, presets=configs, warmup=0, rounds=rounds, **xy, api_name="/compare"
    )


def test_seeds_by_prompts_over_the_api_give_a_labelled_grid_per_configuration(client):
    """`--axis seed --values +2 --y-axis prompt --y-values star,moon` as the API takes it: a 2 x 2 grid for
    each configuration, every point's seed and prompt in its row."""
    out = compare_out(
        client,
        ["vae_slicing"],
        rounds=1,
        axis="seed",
        axis_values="+2",
        y_axis="prompt",
        y_values="star,moon",
    )
    headline, rows, grid = out[0], out[-1], out[-6]
    assert [(r["config"], r["x"], r["y"]) for r in rows] == [
        (c, x, y) for y in ("star", "moon") for x in ("3", "4") for c in ("baseline", "vae_slicing")
    ]
    assert "× 2 prompt values (star, moon)" in headline
    assert Image.open(grid).size == (170 + 2 * 160, 28 + 4 * 160), "2 seeds by 2 configurations x 2 prompts"


def ladder_args(**kw):
    return {"prompt": PROMPT, "seed": 1, "steps": 2, "warmup": 0, "rounds": 2, **kw}


@pytest.fixture(scope="module")
def ladder_answer(client):
    """/ladder's answer (its markdown, table and rows) to `ladder_args()`, for the tests that read it."""
    return client.predict(**ladder_args(), api_name="/ladder")


def autotune_args(**kw):
    args = {"prompt": PROMPT, "seed": 2, "steps": 3, "techniques": ["channels_last"], "warmup": 0}
    return {**args, "rounds": 3, "confirm_rounds": 3, **kw}


def test_a_batch_sweep_over_the_api_gives_the_grid_heat_maps_and_the_best_batch(client):
    out = compare_out(client, ["vae_slicing"], rounds=2, batch=1, axis="batch", axis_values="1,2")
    headline, rows, grid, speedup, psnr = out[0], out[-1], out[-6], out[-5], out[-4]
    assert [(r["x"], r["config"], r["batch"], r["y"]) for r in rows] == [
        ("1", "baseline", 1, None),
        ("1", "vae_slicing", 1, None),
        ("2", "baseline", 2, None),
        ("2", "vae_slicing", 2, None),
    ]
    assert all(r["images_per_s"] > 0 for r in rows) and "Best throughput" in headline
    assert Image.open(grid).size == (170 + 2 * 160, 28 + 2 * 160)  # 2 configurations x 2 batch sizes
    assert speedup["headers"] == psnr["headers"] == ["Configuration", "batch=1", "batch=2"]
    assert [row[0] for row in speedup["data"]] == ["baseline", "vae_slicing"]
    assert speedup["data"][0][1:] == ["×1.00 (baseline)", "×1.00 (baseline)"]


def test_generate_with_a_batch_reports_per_image_figures(client):
    image, card, metrics = client.predict(**generate_args(batch=3, steps=2), api_name="/generate")
    assert metrics["batch"] == 3 and "per call of 3 images" in card
    assert metrics["seconds_per_image"] == pytest.approx(metrics["latency_s"] / 3, rel=5e-3)
    assert Image.open(image).size == (3 * 64 + 2 * 4, 64)  # the batch side by side


def test_compare_is_interleaved_and_speaks_the_shared_keys(client, server):
    out = compare_out(client, ["bf16", "channels_last"])
    headline, gallery, rows = out[0], out[1], out[-1]
    assert "interleaved rounds" in headline
    assert [r["config"] for r in rows] == ["baseline", "bf16", "channels_last"]
    assert [g["caption"].split(" · ")[0] for g in gallery] == ["baseline", "bf16", "channels_last"]
    for r in rows:
        assert r["status"] == "ok" and r["rounds"] == 3 and SHARED <= set(r) and not OLD_NAMES & set(r)
        assert r["speedup_min"] <= r["speedup"] <= r["speedup_max"]
    assert rows[0]["verdict"] == "baseline" and {r["verdict"] for r in rows[1:]} <= {
        "faster",
        "slower",
        "within noise",
    }
    log = RunLog(server.home / "runs.db")
    runs = [log.get_run(r["run_id"]) for r in rows]
    assert len({run["group_id"] for run in runs}) == 1 and len(runs[1]["latency_all"]) == 3
    assert runs[1]["verdict"] == rows[1]["verdict"] and runs[1]["speedup"] == pytest.approx(
        rows[1]["speedup"], abs=1e-3
    )


def test_every_face_shares_the_vocabulary(client, server, cli_at, ladder_answer):
    """/generate, /compare, /ladder, /autotune, /history, the CLI's --json and the CSV export use the same
    keys."""
    import csv
    import json

    _, _, generated = client.predict(**generate_args(), api_name="/generate")
    compared = compare_out(client, ["channels_last"], rounds=2)[-1]
    laddered = ladder_answer[-1]
    tuned = client.predict(**autotune_args(rounds=2, confirm_rounds=2), api_name="/autotune")[4]["rows"]
    history, _plot, csv_path, _records = client.predict(
        model="tiny-shapes", status="ok", limit=20, api_name="/history"
    )
    status, out, _ = cli_at(server.home)("history", "--json", "--limit", "3")  # on the server's run log
    assert status == 0
    cli = json.loads(out)
    assert len(cli) == 3, "the server's runs, read from its run log"
    faces = {
        "/generate": [generated],
        "/compare": compared,
        "/ladder": [r for r in laddered if r["status"] == "ok"],
        "/autotune": tuned,
        "cli history --json": cli,
    }
    for face, records in faces.items():
        for record in records:
            assert SHARED <= set(record), f"{face} lacks {SHARED - set(record)}"
            assert not OLD_NAMES & set(record), f"{face} still says {OLD_NAMES & set(record)}"
    with open(csv_path) as fh:
        header = next(csv.reader(fh))
    assert SHARED <= set(header) and not OLD_NAMES & set(header)
    assert history["headers"][:5] == ["Run", "When", "Model", "Prompt", "Configuration"]


def test_history_and_system(client):
    client.predict(**generate_args(steps=2), api_name="/generate")
    table, _plot, _csv, _records = client.predict(
        model="tiny-shapes", status="ok", limit=50, api_name="/history"
    )
    assert table["data"] and "Latency" in table["headers"]
    latency = table["data"][0][table["headers"].index("Latency")]
    assert latency.endswith(" s") or latency.endswith(" ms")
    system, summary, techniques = client.predict(api_name="/system")
    assert "cpu" in system["hardware"]["devices"]
    cpu = f"| CPU | {devices.detect().cpu_name}, {system['hardware']['cpu_count']} cores |"
    assert cpu in summary, summary
    names = {t["name"]: t for t in system["techniques"]}
    assert names["cudnn_benchmark"]["unavailable"] and names["bf16"]["unavailable"] is None
    assert "needs CUDA" in " ".join(row[2] for row in techniques["data"])


def test_ladder_shows_skipped_steps_with_reasons(ladder_answer):
    md, table, rows = ladder_answer
    assert "interleaved rounds" in md
    steps = {r["step"]: r for r in rows}
    assert steps["cuDNN auto-tuner"]["status"] == "skipped" and "CUDA" in steps["cuDNN auto-tuner"]["error"]
    assert steps["channels last"]["status"] == "ok" and steps["original"]["verdict"] == "baseline"
    assert table["headers"][:3] == ["Step", "Configuration", "Latency"]


def test_load_config_returns_a_logged_runs_settings(client):
    _, _, metrics = client.predict(
        **generate_args(precision="bf16", optimizations=["vae_slicing"], seed=42, steps=3),
        api_name="/generate",
    )
    out = client.predict(metrics["run_id"], api_name="/load_config")
    model, custom, precision, speed, memory, precision_opts, prompt = out[:7]
    assert (model, custom, precision, speed, memory, prompt) == (
        "tiny-shapes",
        "",
        "bf16",
        [],
        ["vae_slicing"],
        PROMPT,
    )
    assert list(out[8:11]) == [42, 3, 6.0]


def test_the_served_png_carries_its_run_and_read_image_reads_it(client, tmp_path):
    image, _, metrics = client.predict(
        **generate_args(optimizations=["vae_slicing"], seed=5), api_name="/generate"
    )
    found = client.predict(handle_file(image), api_name="/read_image")
    assert found["found"] and found["source"] == "diffusion-studio"
    settings = found["settings"]
    assert (settings["run_id"], settings["seed"], settings["requested"]) == (
        metrics["run_id"],
        5,
        ["vae_slicing"],
    )
    assert settings["latency_s"] == metrics["latency_s"]
    Image.new("RGB", (8, 8)).save(tmp_path / "plain.png")
    plain = client.predict(handle_file(str(tmp_path / "plain.png")), api_name="/read_image")
    assert plain["found"] is False and "carries no generation settings" in plain["message"]


def test_an_images_settings_outside_what_a_request_may_ask_are_not_loaded(client, tmp_path):
    """A PNG naming a model file outside the allowed roots, a pickle VAE and 10^9 steps: /read_image says why
    and hands back no settings (the form's Load from image fills nothing)."""
    from tests.faults.files import outside_png

    found = client.predict(handle_file(str(outside_png(tmp_path))), api_name="/read_image")
    assert found["found"] is False and found["settings"] is None
    assert "Its settings were not loaded" in found["message"]


def test_a_single_file_checkpoint_and_a_vae_override_over_the_api(client, server):
    """What people have: the bundled model as one original-layout .safetensors file, and a VAE folder."""
    import torch
    from diffusers import AutoencoderKL

    from tests.pipelines.single_file import save_single_file

    save_single_file("assets/tiny-shapes", server.home / "tiny.safetensors")
    vae = AutoencoderKL.from_pretrained("assets/tiny-shapes", subfolder="vae", use_safetensors=True)
    with torch.no_grad():
        vae.decoder.conv_out.bias += 0.1
    vae.save_pretrained(server.home / "brighter-vae")
    folder, _, _ = client.predict(**generate_args(steps=3), api_name="/generate")
    single, _, run = client.predict(
        **generate_args(steps=3, custom_model=str(server.home / "tiny.safetensors")), api_name="/generate"
    )
    assert Image.open(single).tobytes() == Image.open(folder).tobytes()
    brighter, _, _ = client.predict(
        **generate_args(steps=3, vae=str(server.home / "brighter-vae")), api_name="/generate"
    )
    mean = [sum(Image.open(path).convert("L").getdata()) for path in (folder, brighter)]
    assert mean[1] > mean[0]
    found = client.predict(handle_file(brighter), api_name="/read_image")["settings"]
    assert found["vae"] == str(server.home / "brighter-vae")
    with pytest.raises(AppError, match="pickle"):
        (server.home / "old.ckpt").write_bytes(b"x")
        client.predict(**generate_args(custom_model=str(server.home / "old.ckpt")), api_name="/generate")


def test_shard_saves_small_shards_that_load_back_and_generate(client, server):
    report = client.predict(name="tiny-1mb", max_shard_size="1MB", api_name="/shard")[0]
    unet = next(c for c in report["components"] if c["name"] == "unet")
    assert (
        unet["sharded"] and len(unet["shards"]) > 1 and all(s["bytes"] <= 1_000_000 for s in unet["shards"])
    )
    assert report["out"] == str(server.home / "sharded" / "tiny-1mb") and report["loadable"]
    # a folder's own defaults are not tiny-shapes' (its registry entry): the same numbers for both
    same = {"width": 64, "height": 64, "guidance": 6.0}
    image, _, metrics = client.predict(
        **generate_args(custom_model=report["out"], **same), api_name="/generate"
    )
    reference, _, _ = client.predict(**generate_args(**same), api_name="/generate")
    assert metrics["latency_s"] > 0
    assert Image.open(image).tobytes() == Image.open(reference).tobytes(), (
        "the sharded copy is the same model"
    )
    with pytest.raises(Exception, match="folder name must be"):
        client.predict(name="../../etc", api_name="/shard")


def test_autotune_endpoint_returns_rows_fronts_and_only_a_confirmed_winner(client):
    data = client.predict(**autotune_args(), api_name="/autotune")[4]
    winner = data["winner"]
    assert [r["config"] for r in data["rows"]][:2] == ["baseline", "channels_last"]
    assert data["pareto_quality"] and data["summary"]
    if winner is None:
        assert data["summary"].startswith("Nothing here beats the baseline beyond noise")
    else:
        assert winner["techniques"] == ["channels_last"] and data["confirmation"]["verdict"] == "faster"
    with pytest.raises(Exception, match="min_psnr must be a finite number between 0 and 200"):
        client.predict(**autotune_args(techniques=[], min_psnr=-1, rounds=1), api_name="/autotune")


@pytest.mark.parametrize(
    "endpoint, args, message",
    [
        ("/generate", generate_args(steps=2.5), "steps must be a whole number between 1 and 200, not 2.5"),
        (
            "/generate",
            generate_args(steps="ten"),
            "steps must be a whole number between 1 and 200, not 'ten'",
        ),
        ("/generate", generate_args(seed=1.5), "seed must be a whole number"),
        (
            "/compare",
            {"steps": 2, "presets": ["channels_last"], "warmup": -1},
            "warm-up calls must be a whole number between 0 and 10, not -1",
        ),
        ("/compare", {"steps": 2, "presets": []}, "Choose at least one configuration"),
        (
            "/compare",
            {"steps": 200, "width": 2048, "height": 2048, "warmup": 10, "rounds": 50},
            "STUDIO_MAX_REQUEST_S",
        ),
        ("/ladder", ladder_args(rounds="many"), "rounds must be a whole number"),
        ("/history", {"since": "yesterday"}, "since must be a date or time"),
        ("/history", {"status": "done"}, "status must be one of"),
        ("/load_config", {"run_id": 10**9}, "There is no run 1000000000"),
        ("/load_config", {"run_id": "abc"}, "run id must be a whole number"),
    ],
)
def test_requests_that_cannot_hurt_the_server(client, server, endpoint, args, message):
    """Fractions, text, negative counts, empty or oversized sweeps and bad filters are refused with a
    sentence, before anything runs, and nothing lands in the server log as a traceback."""
    before = len(server.log())
    with pytest.raises(Exception, match=message) as info:
        client.predict(**args, api_name=endpoint)
    assert type(info.value).__name__ == "AppError"
    assert "Traceback" not in server.log()[before:]


def profile_args(**kw):
    return {"prompt": PROMPT, "seed": 2, "steps": 3, **kw}


def test_profile_returns_the_summary_chart_operators_and_a_logged_record(client, server):
    summary, chart, ops, kinds, record = client.predict(
        **profile_args(optimizations=["channels_last"]), api_name="/profile"
    )
    assert summary.startswith("Step 2 of 3 of tiny-shapes (channels_last, fp32, 64×64, batch 1)")
    assert "FLOP/s achieved" in summary and "matmul peak" in summary
    assert chart["columns"] == ["kind", "time (ms)"] and chart["datatypes"]["kind"] == "nominal"
    assert [row[0] for row in chart["data"]][:3] == ["convolution", "matmul / linear", "attention"]
    assert ops["headers"] == ["Operator", "Kind", "Calls", "Self CPU", "Share"]
    assert ops["data"][0][3].endswith(("ms", "µs", " s")) and ops["data"][0][4].endswith("%")
    assert kinds["headers"] == ["Kind", "Time", "Share", "FLOPs"]
    assert record["applied"] == ["channels_last"] and 0 < record["peak_fraction"] < 1
    row = RunLog(server.home / "runs.db").get_run(record["run_id"])
    assert row["status"] == "ok" and row["profile"]["flops"] == record["flops"] > 0
    with pytest.raises(AppError, match="at least 2 steps"):
        client.predict(**profile_args(steps=1), api_name="/profile")


def test_the_scheduler_menus_name_each_sampler_as_its_users_know_it_and_send_the_studios_name(server):
    config = httpx.get(server.url + "config", timeout=30).json()
    menus = [c["props"] for c in config["components"] if c.get("props", {}).get("label") == "Scheduler"]
    assert len(menus) == 2, "Generate and Compare"
    for menu in menus:
        choices = {value: label for label, value in menu["choices"]}
        assert menu["value"] == "default" and choices["default"] == "Model's own"
        assert choices["pndm"] == "PLMS (pndm)" and choices["dpmpp_2m"] == "DPM++ 2M (dpmpp_2m)"


def test_estimate_says_what_the_first_call_of_a_configuration_cost_before_it_runs(client):
    """/estimate before and after the first /generate of a configuration: what a machine's card measured on
    its machine (docs/cards has openvino on the bundled model), then what it cost here."""
    ask = {"prompt": "a red circle", "steps": 2, "optimizations": ["openvino"], "api_name": "/estimate"}
    before = client.predict(**ask)
    assert before["first_call"].startswith("Not run here yet. A machine's card measured the first call of ")
    assert "(64x64, 20 steps) on AMD EPYC" in before["first_call"] and before["fits"] is not False
    _image, _card, metrics = client.predict(
        prompt="a red circle", steps=2, optimizations=["openvino"], api_name="/generate"
    )
    after = client.predict(**ask)["first_call"]
    first = metrics["first_call_s"]
    assert first is not None and after.startswith("The first call of openvino took ")
    assert "at 2 steps here" in after


def test_loras_by_keyword_in_the_prompt_and_in_the_png(client, server, tmp_path):
    """`loras=[...]` by keyword and A1111's `<lora:NAME:SCALE>` in the prompt: the run names them, the PNG
    carries them as A1111 writes them (tags in the prompt, `Lora hashes`), and reading the PNG back gives them
    again; an A1111 PNG with a tag loads the same LoRA."""
    from PIL import PngImagePlugin

    image, card, run = client.predict(**generate_args(loras=["night:0.5"]), api_name="/generate")
    assert [(x["name"], x["scale"]) for x in run["loras"]] == [("night", 0.5)] and "<lora:night:0.5>" in card
    tagged = client.predict(**generate_args(prompt=f"{PROMPT} <lora:night:1>"), api_name="/generate")[2]
    assert [(x["name"], x["scale"]) for x in tagged["loras"]] == [("night", 1.0)]
    assert (
        RunLog(server.home / "runs.db").get_run(tagged["run_id"])["prompt"] == PROMPT
    )  # the tag is not text
    text = Image.open(image).info["parameters"]
    assert f"{PROMPT} <lora:night:0.5>" in text and f'Lora hashes: "night: {run["loras"][0]["hash"]}"' in text
    found = client.predict(handle_file(image), api_name="/read_image")["settings"]
    assert [(x["name"], x["scale"]) for x in found["loras"]] == [("night", 0.5)]
    info = PngImagePlugin.PngInfo()
    info.add_text(
        "parameters", "a big red circle <lora:night:0.8>\nSteps: 4, Sampler: Euler, CFG scale: 6, Seed: 7"
    )
    Image.new("RGB", (64, 64)).save(tmp_path / "a1111.png", pnginfo=info)
    a1111 = client.predict(handle_file(str(tmp_path / "a1111.png")), api_name="/read_image")["settings"]
    assert a1111["prompt"] == "a big red circle" and a1111["loras"] == [{"name": "night", "scale": 0.8}]
    with pytest.raises(AppError, match="is a pickle checkpoint"):
        client.predict(**generate_args(loras=["style.ckpt"]), api_name="/generate")


def test_a_first_compile_s_progress_reaches_an_api_client_phase_by_phase(client):
    """`job.status().progress_data` while torch_compile's first call prepares: what it is doing, each
    second, against the cards' estimate."""
    job = client.submit(prompt=PROMPT, steps=2, optimizations=["torch_compile"], api_name="/generate")
    said = set()
    while not job.done():
        said.update(p.desc for p in job.status().progress_data or [])
        time.sleep(0.2)
    job.result()
    lines = [s for s in said if s and s.startswith("first call: ")]
    assert any("(dynamo)" in s or "(inductor)" in s for s in lines), said
    assert all(re.search(r" · \d+ s of about \d+ s$", s) for s in lines), lines
