"""`python -m studio`: same validation and database as the UI; JSON output for scripts, in the shared
vocabulary.

The commands run in-process (`studio.cli.main`) with STUDIO_HOME pointed at a temporary directory; one test
starts the real `python -m studio` to prove the entry point and its exit status.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.schedulers import SCHEDULERS
from studio import devices
from tests import warm_python

ROOT = Path(__file__).resolve().parent.parent
PROMPT = "a big green triangle on the right, on a white background"
SMALL = ("--seed", "1", "--steps", "2", "--width", "32", "--height", "32")
SHARED = (
    "latency_s",
    "latency_spread_s",
    "speedup",
    "speedup_min",
    "speedup_max",
    "verdict",
    "peak_memory_mb",
    "host_busy_pct",
)
OLD = ("peak_memory", "latency")


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def speaks_the_shared_vocabulary(record: dict) -> None:
    assert set(SHARED) <= set(record), sorted(record)
    assert not set(OLD) & set(record), sorted(record)


@pytest.mark.parametrize(
    "args, message",
    [
        # the full list of bad inputs is checked in test_validate.py; these prove the CLI wiring
        (["--opt", "warp"], "Unknown optimization 'warp'"),
        (["--opt", "cudnn_benchmark"], "cudnn_benchmark needs CUDA"),
        (["--width", "60"], "multiple of 8"),
    ],
)
def test_bad_input_exits_non_zero_with_the_reason_and_logs_nothing(cli, tmp_path, args, message):
    status, out, err = cli("generate", "--prompt", PROMPT, *args)
    assert status == 2 and out == ""
    assert message in err and err.startswith("error: ")
    assert not (tmp_path / "runs.db").exists(), "validation must happen before the run log is touched"


def test_python_dash_m_studio_is_the_same_cli(tmp_path):
    env = {**os.environ, "STUDIO_HOME": str(tmp_path), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    proc = warm_python.run(
        [sys.executable, "-m", "studio", "generate", "--prompt", PROMPT, "--width", "60"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and "multiple of 8" in proc.stderr
    assert not (tmp_path / "runs.db").exists()


def test_system_and_show_answer_without_importing_the_model_libraries(tmp_path):
    """`system` and `show` load no model: they answer without importing diffusers or transformers (seconds
    of imports), and with nothing on stderr."""
    env = {**os.environ, "STUDIO_HOME": str(tmp_path), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    code = (
        "import sys\n"
        "from studio.cli import main\n"
        "codes = [main(['system', '--json']), main(['show', 'README.md'])]\n"
        "print(codes, sorted({m.split('.')[0] for m in sys.modules} & {'diffusers', 'transformers'}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.stdout.splitlines()[-1] == "[0, 1] []", proc.stdout[-500:] + proc.stderr[-2000:]
    from studio.report import image_metadata

    assert proc.stderr.strip() == image_metadata.read(ROOT / "README.md").message, proc.stderr


def test_a_run_from_the_shell_prints_its_result_and_no_library_noise(tmp_path):
    """stdout: one line with the run; stderr: only the studio's own warnings (no progress bars of the
    libraries, no advice to install torchvision, no tracer warnings from a traced UNet)."""
    env = {**os.environ, "STUDIO_HOME": str(tmp_path), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "studio", "generate", "--prompt", PROMPT, "--steps", "2", "--seed", "1"]
    proc = warm_python.run(
        [*cmd, "--opt", "jit_trace_unet"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr
    line = r"run 1: jit_trace_unet [\d.]+ m?s, first call [\d.]+ m?s, peak \d+ MB -> \S+\.png\n"
    assert re.fullmatch(line, proc.stdout), proc.stdout
    noise = [line for line in proc.stderr.splitlines() if not line.startswith("warning: ")]
    assert not noise, proc.stderr


def test_a_compare_configuration_carries_its_settings_and_a_malformed_one_is_refused(cli):
    status, out, err = cli(
        "compare", "--prompt", PROMPT, *SMALL, "--config", "deepcache[interval=2]", "--rounds", "1", "--json"
    )
    assert status == 0, err
    assert [r["config"] for r in json.loads(out)["rows"]] == ["baseline", "deepcache[interval=2]"]
    status, out, err = cli("compare", "--prompt", PROMPT, *SMALL, "--config", "deepcache[interval]", "--json")
    assert status != 0 and "must look like setting=value" in err


def test_compare_over_seeds_and_a_prompt_search_and_replace_draws_a_grid_per_configuration(cli, monkeypatch):
    """4 seeds by 2 prompts: a 4 x 2 grid of images for each configuration in the JSON, its rows labelled; the
    same sweep over a tighter request budget is refused before it starts, with nothing logged."""
    circle = "a big red circle in the middle, on a white background"
    axes = ("--axis", "seed", "--values", "+4", "--y-axis", "prompt", "--y-values", "circle,square")
    args = ("compare", "--prompt", circle, *SMALL, "--config", "channels_last", *axes)
    monkeypatch.setenv("STUDIO_MAX_REQUEST_S", "0.5")
    status, _, err = cli(*args, "--rounds", "5", "--json")
    assert status == 2 and "This sweep would take about" in err, err
    assert json.loads(cli("history", "--json")[1]) == [], "refused before anything ran"
    monkeypatch.delenv("STUDIO_MAX_REQUEST_S")
    status, out, err = cli(*args, "--rounds", "1", "--warmup", "0", "--json")
    assert status == 0, err
    answer = json.loads(out)
    assert (answer["axis"], answer["values"]) == ("seed", ["1", "2", "3", "4"])
    assert (answer["y_axis"], answer["y_values"]) == ("prompt", ["circle", "square"])
    for config in ("baseline", "channels_last"):
        grid = answer["grids"][config]
        assert [len(row) for row in grid] == [4, 4], "a row per prompt, a column per seed"
        assert all(Path(path).is_file() for row in grid for path in row)
    status, text, _ = cli(*args, "--rounds", "1", "--warmup", "0")
    assert "| configuration | seed=1 | seed=2 | seed=3 | seed=4 |" in text
    assert "| channels_last · prompt=square |" in text


def test_generate_compare_history_share_one_database_and_one_vocabulary(cli):
    status, out, err = cli(
        "generate", "--prompt", PROMPT, *SMALL, "--opt", "bf16", "--opt", "channels_last", "--json"
    )
    assert status == 0, err
    data = json.loads(out)
    speaks_the_shared_vocabulary(data)
    assert data["applied"] == ["bf16", "channels_last"] and Path(data["image_path"]).is_file()
    assert data["config"] == "bf16+channels_last" and data["rounds"] == 1 and data["load_s"] is not None

    status, out, err = cli(
        "compare",
        "--prompt",
        PROMPT,
        *SMALL,
        "--config",
        "baseline",
        "--config",
        "bf16,channels_last",
        "--rounds",
        "3",
        "--warmup",
        "0",
        "--json",
    )
    assert status == 0, err
    rows = json.loads(out)["rows"]
    assert [r["config"] for r in rows] == ["baseline", "bf16+channels_last"]
    for row in rows:
        speaks_the_shared_vocabulary(row)
        assert row["rounds"] == 3 and row["run_id"] and row["image_path"]
    assert rows[0]["verdict"] == "baseline" and rows[1]["verdict"] in ("faster", "slower", "within noise")
    assert (
        rows[1]["speedup_min"] <= rows[1]["speedup"] <= rows[1]["speedup_max"]
        and rows[1]["psnr_db"] is not None
    )

    status, out, _ = cli("history", "--json")
    history = {r["run_id"]: r for r in json.loads(out)}
    assert data["run_id"] in history and all(r["run_id"] in history for r in rows)
    for record in history.values():
        speaks_the_shared_vocabulary(record)
    for row in rows:
        assert {k: history[row["run_id"]][k] for k in SHARED} == {k: row[k] for k in SHARED}
    _, out, _ = cli("history", "--technique", "channels_last", "--json")
    assert {r["config"] for r in json.loads(out)} == {"bf16+channels_last"}
    _, text, _ = cli("history")
    assert "| Run | When | Model | Configuration |" in text and "bf16+channels_last" in text


def test_bad_counts_are_refused_before_anything_runs(cli):
    status, _, err = cli("compare", "--prompt", PROMPT, *SMALL, "--config", "channels_last", "--rounds", "-2")
    assert status == 2 and err.startswith("error: ") and "rounds must be a whole number" in err
    assert json.loads(cli("history", "--json")[1]) == [], "nothing ran, nothing was logged"


def test_every_face_speaks_the_requests_words_and_the_old_flags_still_parse():
    """`--optimizations` and `--rounds` are the words of the request, the API and the records; `--opt` is
    kept as an alias, so a script written for it parses to the same request."""
    from studio.cli import build_parser

    parser = build_parser()
    new = parser.parse_args(
        ["generate", "--prompt", "p", "--optimizations", "bf16", "channels_last", "--rounds", "3"]
    )
    old = parser.parse_args(
        ["generate", "--prompt", "p", "--opt", "bf16", "--opt", "channels_last", "--rounds", "3"]
    )
    assert vars(new) == vars(old) and new.optimizations == ["bf16", "channels_last"] and new.rounds == 3
    for command in ("profile", "estimate"):
        parsed = parser.parse_args([command, "--prompt", "p", "--opt", "bf16", "--optimizations", "tome"])
        assert parsed.optimizations == ["bf16", "tome"]


def test_generate_help_says_each_arguments_range_and_default_as_the_validation_has_them(cli):
    from studio.request.generation import MAX_STEPS

    status, out, _ = cli("generate", "--help")
    text = " ".join(out.split())  # argparse wraps its lines
    assert status == 0
    assert f"denoising steps, 1 to {MAX_STEPS} (default: the model's own)" in text
    assert "-1 for a random one (default 0)" in text
    assert f"{', '.join(SCHEDULERS)} (default: the model's own)" in text


def test_system_and_optimizations(cli):
    system = json.loads(cli("system", "--json")[1])
    assert "cpu" in system["hardware"]["devices"] and system["versions"]["diffusers"]
    lines = cli("system")[1].splitlines()
    hw = devices.detect()
    assert f"CPU:        {hw.cpu_name}, {hw.cpu_count} cores" in lines, "one readable line per fact"
    assert lines[-1] == f"Run log:    {system['database']}"
    optimizations = {r["name"]: r for r in json.loads(cli("optimizations", "--json")[1])}
    assert optimizations["bf16"]["unavailable"] is None
    assert "CUDA" in optimizations["cudnn_benchmark"]["unavailable"]


def test_autotune_prints_the_answer_and_logs_one_group(cli):
    status, out, err = cli(
        "autotune",
        "--prompt",
        PROMPT,
        *SMALL,
        "--technique",
        "channels_last",
        "--technique",
        "bf16",
        "--rounds",
        "2",
        "--warmup",
        "0",
        "--confirm-rounds",
        "2",
        "--json",
    )
    assert status == 0, err
    data = json.loads(out)
    assert {r["config"] for r in data["rows"]} >= {"baseline", "channels_last", "bf16"}
    for row in data["rows"]:
        speaks_the_shared_vocabulary(row)
    if data["winner"] is not None:
        assert set(data["winner"]["techniques"]) <= {"channels_last", "bf16"}
        assert data["confirmation"]["verdict"] == "faster"
    assert data["summary"] and data["winner_label"]
    stages = [r["stage"] for r in data["rows"]]
    sweeps = (
        1 + stages.count("combination") // 2 + stages.count("confirmation")
    )  # each has its own baseline run
    _, out, _ = cli("history", "--limit", "100", "--json")
    runs = json.loads(out)
    assert len(runs) == len(data["rows"]) + sweeps - 1 and {r["status"] for r in runs} == {"ok"}
    status, _, err = cli("autotune", "--prompt", PROMPT, "--min-ssim", "2")
    assert status == 2 and "min_ssim must be a finite number between -1 and 1" in err


def test_show_prints_what_a_png_carries_and_says_when_it_carries_nothing(cli, tmp_path):
    status, out, err = cli("generate", "--prompt", PROMPT, *SMALL, "--opt", "vae_slicing", "--json")
    assert status == 0, err
    image = json.loads(out)["image_path"]
    status, out, err = cli("show", image)
    assert status == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("Settings of run 1 (vae_slicing)")
    assert f"prompt: {PROMPT}" in lines and "seed 1, 2 steps, 32x32, guidance 6.0, scheduler default" in lines
    assert any(line.startswith("latency ") for line in lines)
    assert any(line.startswith(f"hardware: {devices.detect().cpu_name}, devices ") for line in lines), lines
    status, out, err = cli("show", image, "--json")
    data = json.loads(out)
    assert data["source"] == "diffusion-studio" and data["settings"]["requested"] == ["vae_slicing"]
    from PIL import Image

    Image.new("RGB", (4, 4)).save(tmp_path / "plain.png")
    status, out, err = cli("show", str(tmp_path / "plain.png"))
    assert status == 1 and out == "" and "carries no generation settings" in err


def test_profile_prints_the_summary_and_tables_and_logs_a_run(cli, tmp_path):
    small = ("--seed", "1", "--steps", "3", "--width", "64", "--height", "64")
    status, out, err = cli("profile", "--prompt", PROMPT, *small, "--opt", "channels_last", "--json")
    assert status == 0, err
    data = json.loads(out)
    assert data["run_id"] == 1 and data["applied"] == ["channels_last"] and data["flops"] > 0
    assert sum(k["seconds"] for k in data["kinds"]) == pytest.approx(data["step_s"], abs=1e-5)
    status, out, err = cli("profile", "--prompt", PROMPT, *small)
    assert status == 0, err
    assert out.startswith("run 2: Step 2 of 3 of tiny-shapes (baseline, fp32, 64×64, batch 1) on cpu took")
    assert "| Kind | Time | Share | FLOPs |" in out
    assert "| Operator | Kind | Calls | Self CPU | Share |" in out
    history = {r["run_id"]: r for r in json.loads(cli("history", "--json")[1])}
    assert history[1]["status"] == "ok" and history[1]["config"] == "channels_last"
    status, out, err = cli("profile", "--prompt", PROMPT, "--steps", "1")
    assert status == 2 and out == "" and "at least 2 steps" in err
    assert len(json.loads(cli("history", "--json")[1])) == 2, "a refused profile is not logged"


def test_estimate_says_the_peak_before_anything_runs(cli):
    status, out, err = cli("estimate", "--prompt", PROMPT, *SMALL, "--batch", "2", "--json")
    assert status == 0, err
    data = json.loads(out)
    assert data["known"] and data["kind"] == "cpu_rss" and data["peak"] >= data["now"] > 0
    assert data["sentence"].startswith("Estimated peak") and data["fits"] is True, "a small image fits in RAM"
    status, out, err = cli("history", "--json")
    assert json.loads(out) == [], "an estimate runs nothing and logs nothing"


def test_estimate_says_what_the_first_call_cost_as_the_api_does(cli):
    """`estimate` answers `first_call` as /estimate does: a machine's card's before a run of it here, then
    this studio's own; the plain output says it after the memory sentence."""
    ask = ("estimate", "--prompt", PROMPT, "--steps", "2", "--opt", "openvino")
    status, out, err = cli(*ask, "--json")
    assert status == 0, err
    assert json.loads(out)["first_call"].startswith("Not run here yet. A machine's card measured")
    assert cli("generate", "--prompt", PROMPT, "--steps", "2", "--opt", "openvino")[0] == 0
    status, out, err = cli(*ask)
    assert status == 0 and "Estimated peak" in out and "The first call of openvino took " in out, out


@pytest.mark.parametrize(
    "command, says",
    [
        (["--help"], "usage: python -m studio"),
        (["generate", "--help"], "--steps STEPS"),
        (["compare"], "--prompt"),
        (["autotune", "--help"], "baseline/winner rounds (default 5)"),
    ],
)
def test_help_and_a_bad_argument_answer_without_loading_torch(command, says):
    """The command line answers --help (and argparse's own refusals) before importing any model library."""
    from benchmarks.cli_startup import PROBE

    probe = subprocess.run([sys.executable, "-c", PROBE, *command], cwd=ROOT, capture_output=True, text=True)
    assert says in probe.stdout + probe.stderr
    assert probe.stderr.strip().splitlines()[-1] == "False", "torch was imported"


def test_timeline_says_a_configurations_speed_per_set_of_library_versions(cli):
    """`timeline`: the logged runs of one configuration, one era per set of versions; the Markdown block to
    paste into an issue says the machine and that the eras were measured apart."""
    for _ in range(2):
        assert (
            cli("generate", "--prompt", PROMPT, *SMALL, "--optimizations", "channels_last", "--rounds", "2")[
                0
            ]
            == 0
        )
    status, out, _ = cli(
        "timeline", "--config", "channels_last", "--steps", "2", "--width", "32", "--height", "32", "--json"
    )
    found = json.loads(out)
    assert status == 0 and found["config"] == "channels_last"
    (era,) = found["eras"]
    assert len(era["runs"]) == 2 and era["verdict"] is None and era["versions"]["torch"]
    status, text, _ = cli(
        "timeline", "--config", "channels_last", "--steps", "2", "--width", "32", "--height", "32"
    )
    assert status == 0 and "| runs | when | versions |" in text and "not interleaved" in text
    assert "No finished run" in cli("timeline", "--config", "bf16", "--steps", "2")[1]


def test_loras_are_listed_taken_by_flag_and_by_prompt_tag_and_a_bad_one_exits_2(cli, tmp_path):
    """`loras` lists what the folders hold (the bundled `night` among them); `--lora` and a prompt's
    `<lora:NAME:SCALE>` both reach the run, which names them; a missing LoRA is one sentence and exit 2."""
    status, out, _ = cli("loras", "--json")
    night = next(row for row in json.loads(out) if row["name"] == "night")
    assert status == 0 and night["base"] == "tiny-shapes" and night["rank"] > 0 and len(night["hash"]) == 12
    status, out, _ = cli("loras")
    assert status == 0 and out.splitlines()[0].split()[:3] == ["name", "base", "rank"] and "night" in out
    status, out, _ = cli("generate", "--prompt", "a red circle <lora:night:0.5>", "--steps", "2", "--json")
    assert status == 0 and [(x["name"], x["scale"]) for x in json.loads(out)["loras"]] == [("night", 0.5)]
    status, out, _ = cli("generate", "--prompt", "a red circle", "--steps", "2", "--lora", "night:0.7")
    assert status == 0 and "<lora:night:0.7>" in out
    status, out, err = cli("generate", "--prompt", "a red circle", "--lora", "nowhere")
    assert status == 2 and not out and err.startswith("error: There is no LoRA named 'nowhere'")
