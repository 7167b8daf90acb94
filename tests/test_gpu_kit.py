"""The GPU kit and runner without a GPU: the kit's wheel list agrees with the requirements files, its checks
judge wheels as intended, the speed targets are judged only under their own conditions, and
`bash benchmarks/gpu/run.sh --dry-run` writes every section and file the GPU run writes."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from PIL import Image

from benchmarks.gpu import autotune_cache, common, kit, kit_build, ladder, merge, plan, targets, techniques
from benchmarks.gpu import report as gpu_report
from studio import report as studio_report

ROOT = Path(__file__).resolve().parents[1]


def requirements(name: str) -> dict[str, Requirement]:
    lines = (line.split("#", 1)[0].strip() for line in (ROOT / name).read_text().splitlines())
    reqs = [Requirement(line) for line in lines if line]
    return {kit.project(r.name): r for r in reqs}


def test_the_kit_pins_what_the_requirements_pin():
    pinned = {**requirements("requirements.txt"), **requirements("requirements-extras.txt")}
    listed = {kit.project(r.name): r for r in kit.read_kit()}
    assert {"diffusers", "sqlite-utils", "torchao", "tomesd"} <= set(listed)
    for name, req in listed.items():
        if name in pinned:
            assert req.specifier == pinned[name].specifier, (
                f"{name}: kit.txt {req}, requirements {pinned[name]}"
            )
        else:
            assert str(req.specifier).startswith("=="), f"{name} is not pinned in kit.txt"
    assert len(listed) == len(kit.read_kit()), "a package is listed twice"


def fake_wheel(folder: Path, name: str, version: str, requires: list[str], files: dict | None = None) -> Path:
    path = folder / f"{name}-{version}-py3-none-any.whl"
    meta = "\n".join([f"Name: {name}", f"Version: {version}", *(f"Requires-Dist: {r}" for r in requires)])
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr(f"{name}-{version}.dist-info/METADATA", meta + "\n")
        for inner, text in (files or {}).items():
            whl.writestr(inner, text)
    return path


def test_wheels_are_checked_against_the_list_and_the_machine(tmp_path):
    wheels = [
        fake_wheel(tmp_path, "diffusers", "0.42.1", ["numpy", "importlib_metadata", "zstd-magic>=1"]),
        fake_wheel(tmp_path, "tomesd", "0.1.3", ["torch (>=1.12.1)", 'pytest; extra == "dev"']),
        fake_wheel(tmp_path, "extra_thing", "1.0", []),
    ]
    missing = kit.missing_dependencies(wheels)
    assert missing == [
        "diffusers-0.42.1-py3-none-any.whl requires zstd-magic>=1, which neither the kit nor the machine has"
    ]
    problems = kit.pin_problems(
        wheels,
        [Requirement("diffusers==0.42.0"), Requirement("tomesd==0.1.3"), Requirement("torchao==0.18.0")],
    )
    assert problems == [
        "diffusers 0.42.1 does not meet diffusers==0.42.0",
        "torchao: 0 wheels in the kit, expected one",
        "extra-thing: in the kit but not in kit.txt",
    ]


def test_an_xformers_wheel_is_carried_only_when_built_for_the_machines_torch(tmp_path):
    build = {"version": {"torch": "2.10.0+cu128", "cuda": 1208}}
    wheel = fake_wheel(
        tmp_path, "xformers", "0.0.35", ["torch>=2.10", "numpy"], {"xformers/cpp_lib.json": json.dumps(build)}
    )
    built, torch = kit_build.built_for(wheel)
    assert (built, torch) == ("2.10.0+cu128 (CUDA 12.8)", "torch>=2.10")
    assert not kit_build.fits_machine(built, torch)
    assert kit_build.fits_machine("2.11.0+cu130 (CUDA 13.0)", "torch>=2.10")
    assert not kit_build.fits_machine("2.11.0+cu128 (CUDA 12.8)", "torch>=2.10")
    assert kit_build.fits_machine(None, "torch==2.11.0") and not kit_build.fits_machine(None, "torch>=2.11")


def results_with(ladder_rows: list[dict], device: str = "cuda:0", side: int = 512) -> dict:
    section = {"model": "sd15-arch", "side": side, "steps": 50, "rows": ladder_rows}
    empty = {"techniques": {}, "memory": {}, "compute-limit": {}}
    return {**empty, "device": device, "ladder": {"sd15": section}, "notes": [], "status": "complete"}


def rung(step: str, seconds: float, speedup: float | None) -> dict:
    return {
        "step": step,
        "config": step,
        "status": "ok",
        "applied": [],
        "seconds_per_image": seconds,
        "speedup": speedup,
        "speedup_min": speedup,
        "speedup_max": speedup,
    }


def test_targets_are_judged_only_under_their_own_conditions():
    rows = [rung("fp32", 3.0, None), rung("SDPA", 0.3, 10.0)]
    judged = {f["target"]: f for f in targets.judged(results_with(rows))}
    seconds, speedup, sdxl, *flux = judged.values()
    assert (seconds["met"], seconds["value"], seconds["config"]) == (True, 0.3, "SDPA")
    assert (speedup["met"], speedup["value"]) == (True, 10.0)
    assert sdxl["met"] is None and sdxl["note"] == "not measured in this run"
    assert [f["met"] for f in flux] == [None, None, None]
    slower = targets.judged(results_with([rung("fp32", 3.0, None), rung("SDPA", 0.7, 4.3)]))
    assert [f["met"] for f in slower] == [False, False, None, None, None, None]
    for elsewhere in (results_with(rows, device="cpu"), results_with(rows, side=256)):
        assert [f["met"] for f in targets.judged(elsewhere)] == [None] * 6


def test_flux_targets_take_fp8_without_a_cache_and_any_configuration_and_say_how_the_image_changed():
    def row(technique: str, applied: list[str], seconds: float, psnr: float, reused: float | None = None):
        return {
            "technique": technique,
            "config": "+".join(applied),
            "status": "ok",
            "applied": applied,
            "seconds_per_image": seconds,
            "psnr_db": psnr,
            "steps_reused_pct": reused,
        }

    section = {
        "model": "flux-arch",
        "side": 1024,
        "steps": 28,
        "rows": [
            row("baseline", ["bf16"], 5.0, None),
            row("combination", ["bf16", "fused_qkv", "torch_compile"], 3.6, 48.0),
            row("fp8", ["bf16", "fp8", "torch_compile"], 2.8, 43.4),
            row("fast", ["bf16", "fp8", "first_block_cache", "torch_compile"], 2.2, 31.5, 35.7),
        ],
    }
    data = {**results_with([]), "techniques": {"flux": section}}
    keep, no_cache, fastest = [f for f in targets.judged(data) if f["role"] == "flux"]
    assert (keep["met"], keep["value"], keep["note"]) == (False, 3.6, "")
    assert (no_cache["met"], no_cache["value"], no_cache["config"]) == (True, 2.8, "bf16+fp8+torch_compile")
    assert no_cache["note"] == "changes the image: PSNR 43.4 dB against the baseline"
    assert (fastest["met"], fastest["value"]) == (False, 2.2)
    assert "PSNR 31.5 dB" in fastest["note"] and "reused 35.7% of the denoiser's calls" in fastest["note"]
    assert "without a step cache <= 2.90 s" in no_cache["target"]


def test_runs_merge_and_their_targets_are_judged_again():
    first = results_with([rung("fp32", 3.0, None)])
    second = results_with([rung("fp32", 3.0, None), rung("SDPA", 0.3, 10.0)])
    second["notes"] = ["ladder on sdxl-arch (sdxl): not run (out of time)"]
    merged = merge.merge([first, second])
    assert merged["ladder"]["sd15"]["rows"][-1]["step"] == "SDPA"
    assert merged["targets"][0]["met"] is True and merged["notes"] == [f"run 2: {second['notes'][0]}"]
    with pytest.raises(SystemExit, match="different devices"):
        merge.merge([first, results_with([], device="cpu")])


def test_a_run_picks_its_models_in_order_its_techniques_and_the_ladders_compile_mode(tmp_path):
    args = ["--dry-run", "--out", str(tmp_path), "--work", str(tmp_path)]
    chosen = plan.from_args(
        plan.parser().parse_args(
            [*args, "--models", "sdxl,sd15", "--techniques", "combination,sdpa", "--compile-mode", "default"]
        )
    )
    assert [m.role for m in chosen.models] == ["sdxl", "sd15"]
    request = common.base_request(chosen, chosen.models[1])
    todo, _ = techniques.candidates(chosen, chosen.models[1], request)
    assert [name for name, _ in todo] == ["sdpa"]  # sd15 has no combination
    todo, _ = techniques.candidates(chosen, chosen.models[0], common.base_request(chosen, chosen.models[0]))
    assert [name for name, _ in todo] == ["sdpa", "combination"]
    compiled = plan.from_args(
        plan.parser().parse_args([*args, "--with-compile", "--techniques", "combination"])
    )
    sdxl = compiled.models[1]
    todo, _ = techniques.candidates(compiled, sdxl, common.base_request(compiled, sdxl))
    assert todo[0][1].settings == {"torch_compile": {"mode": "reduce-overhead"}}, (
        "CUDA graphs, the ladder's best"
    )
    steps = [s.rung.label for s, _ in ladder.plan_rungs(chosen, request)]
    assert steps[-2:] == ["torch.compile default", "CUDA graphs (reduce-overhead)"]
    for wrong in (["--models", "sd4"], ["--techniques", "warp_drive"]):
        with pytest.raises(SystemExit, match="unknown"):
            plan.from_args(plan.parser().parse_args([*args, *wrong]))


def test_techniques_with_settings_are_measured_as_written(tmp_path):
    args = ["--dry-run", "--with-compile", "--out", str(tmp_path), "--work", str(tmp_path), "--techniques"]
    written = "torch_compile[regional=true],torch_compile[mode=max-autotune,dynamic=false],sdpa"
    chosen = plan.from_args(plan.parser().parse_args([*args, written]))
    assert chosen.techniques == (
        "torch_compile[regional=true]",
        "torch_compile[mode=max-autotune,dynamic=false]",
        "sdpa",
    )
    request = common.base_request(chosen, chosen.models[0])
    todo, _ = techniques.candidates(chosen, chosen.models[0], request)
    assert [(name, r.settings) for name, r in todo] == [
        ("torch_compile[regional=true]", {"torch_compile": {"regional": True}}),
        (
            "torch_compile[mode=max-autotune,dynamic=false]",
            {"torch_compile": {"mode": "max-autotune", "dynamic": "false"}},
        ),
        ("sdpa", {}),
    ]
    for wrong in ("torch_compile[regional=true]+sdpa", "sdpa[", "warp_drive[speed=9]"):
        with pytest.raises(SystemExit, match="unknown techniques"):
            plan.from_args(plan.parser().parse_args([*args, wrong]))


def test_each_compiled_rung_is_measured_beside_fp32_on_its_own(tmp_path, monkeypatch):
    """A compile a time limit cuts off costs its own row only; `--rungs compiled` skips the eager
    rungs but fp32, which each compiled rung is measured against."""
    args = ["--dry-run", "--with-compile", "--out", str(tmp_path), "--work", str(tmp_path)]
    sweeps = []

    def measure(studio, chosen, planned, why):
        labels = [step.rung.label for step, _ in planned]
        sweeps.append(labels)
        if labels[-1] == "torch.compile max-autotune":
            why[labels[-1]] = "failed: the compile ran out of memory"
            return {}
        return {
            label: {"config": label, "latency_s": 1.0 / (i + 1), "status": "ok"}
            for i, label in enumerate(labels)
        }

    monkeypatch.setattr(ladder, "_measure", measure)
    puts = []
    results = type("Results", (), {"put": lambda self, *a: puts.append((list(sweeps), a[2]["rows"]))})()
    for rungs in ("all", "compiled"):
        sweeps.clear()
        chosen = plan.from_args(plan.parser().parse_args([*args, "--rungs", rungs]))
        rows = {r["step"]: r for r in ladder.measure(chosen, chosen.models[0], None, results)}
        fp32 = sweeps[0][0]
        assert len(sweeps) == (3 if rungs == "all" else 2) and [len(s) for s in sweeps[-2:]] == [2, 2]
        assert "SDPA" in sweeps[0] if rungs == "all" else "SDPA" not in sum(sweeps, [])
        assert [s[-1] for s in sweeps[-2:]] == ["torch.compile max-autotune", "CUDA graphs (reduce-overhead)"]
        assert all(s[0] == fp32 for s in sweeps) and rows[fp32]["status"] == "ok"
        assert rows["CUDA graphs (reduce-overhead)"]["status"] == "ok"
        assert "out of memory" in rows["torch.compile max-autotune"]["error"]
        assert ("compiled rungs only" in (rows["SDPA"].get("error") or "")) == (rungs == "compiled")
        # a run a time limit stops mid-compile still reports every rung, measured or why not
        first = next(rows for done, rows in puts if len(done) == len(sweeps) - 2)
        assert [r["step"] for r in first] == list(rows)
        puts.clear()


def test_techniques_are_measured_against_the_plans_baseline_not_against_no_technique(tmp_path):
    chosen = plan.from_args(
        plan.parser().parse_args(["--dry-run", "--out", str(tmp_path), "--work", str(tmp_path)])
    )
    chosen = dataclasses.replace(chosen, own_precision=True, rounds=1, warmup=0)
    model = dataclasses.replace(chosen.models[0], steps=2, baseline=("channels_last",))
    request = common.base_request(chosen, model)
    studio = common.new_studio(chosen, "baseline")
    rows = techniques.measure_group(
        studio, chosen, request, [("sdpa", techniques.configure(request, ["sdpa"]))]
    )
    assert [(r["technique"], r["config"], r["status"]) for r in rows] == [
        ("baseline", "channels_last", "ok"),
        ("sdpa", request.config_label + "+sdpa", "ok"),
    ]
    # every group times its own baseline and a speedup is against its own group's: the table shows that time,
    # or a row reads x1.09 beside a baseline of another group that took as long as it did
    assert rows[1]["baseline_s"] == rows[0]["latency_s"] > 0
    section = {"model": "tiny-shapes", "side": 64, "steps": 2, "baseline": "channels_last", "rows": rows}
    table = gpu_report.markdown({"status": "complete", "techniques": {"sd15": section}})
    head, _, first = table.split("## Techniques")[1].splitlines()[2:5]
    column = [c.strip() for c in head.split("|")].index("Baseline in the same rounds")
    assert first.split("|")[column].strip() == studio_report.seconds(rows[0]["latency_s"])


def autotune_file(cache: dict) -> dict:
    """One of inductor's local autotune cache files: the system timed, op -> shape -> choice timings."""
    return {"system": {"device": {"name": "NVIDIA H100 80GB HBM3"}, "hash": "0a1b2c"}, "cache": cache}


def test_autotuning_timings_carried_between_runs_merge_shape_by_shape(tmp_path):
    earlier, later = tmp_path / "earlier", tmp_path / "later"
    earlier.mkdir(), later.mkdir()
    (earlier / "0a1b2c").write_text(json.dumps(autotune_file({"mm": {"a": {"c1": 1.0, "c2": 2.0}}})))
    # beside the ops, the padding pass's entries sit at the top level as a number and a boolean (an H100's)
    shape = "((torch.Size([154, 768]), (768, 1), torch.float16), ...)"
    padding = {f"base mm time: {shape}": 0.0498, shape: False}
    ops = {"mm": {"a": {"c1": 0.5}, "b": {"c1": 3.0}}, "conv": {"d": {"c": 1.0}}}
    (later / "0a1b2c").write_text(json.dumps(autotune_file({**ops, **padding})))
    assert autotune_cache.merge(later, earlier) == ["0a1b2c (NVIDIA H100 80GB HBM3): 3 shapes"]
    assert json.loads((earlier / "0a1b2c").read_text())["cache"] == {
        "mm": {"a": {"c1": 0.5, "c2": 2.0}, "b": {"c1": 3.0}},
        "conv": {"d": {"c": 1.0}},
        **padding,
    }
    assert autotune_cache.merge(tmp_path / "empty", tmp_path / "out") == []
    assert not (tmp_path / "out").exists(), "nothing timed, nothing returned"


def test_the_benchmark_has_no_budget_unless_given_one(tmp_path):
    args = ["--dry-run", "--out", str(tmp_path), "--work", str(tmp_path)]
    assert plan.from_args(plan.parser().parse_args(args)).left() == math.inf
    assert 0 < plan.from_args(plan.parser().parse_args([*args, "--budget-s", "30"])).left() <= 30


def test_the_kit_size_is_held_only_to_a_limit_given():
    mib = kit_build.MIB
    assert kit_build.check_size(10 * mib, 500 * mib, None) == "kit: 10.0 MiB; with the tracked tree 500.0 MiB"
    assert kit_build.check_size(10 * mib, 30 * mib, 64).endswith("30.0 MiB (size limit 64 MiB)")
    with pytest.raises(SystemExit, match="exceed the size limit you gave \\(--max-mib 64\\)"):
        kit_build.check_size(10 * mib, 65 * mib, 64)


def test_results_written_before_the_targets_had_their_name_are_read_back():
    """Earlier results.json files keep the judged targets under `floors`: the report and a merge read them."""
    old = results_with([rung("fp32", 3.0, None), rung("SDPA", 0.3, 10.0)])
    old["floors"] = targets.judged(old)
    text = gpu_report.markdown(old)
    assert "## Targets" in text and "| sd15-arch 512x512, 50 steps: best keep-the-math" in text
    merged = merge.merge([old])
    assert "floors" not in merged and merged["targets"][0]["met"] is True


@pytest.mark.slow
def test_run_sh_takes_its_output_folder_and_time_limit_as_options(tmp_path):
    """`--out` names the folder; a `--time-limit-s` already spent before the benchmark starts none."""
    empty = tmp_path / "carried"
    empty.mkdir()
    env = {**os.environ, "PYTHON": sys.executable, "TMPDIR": str(tmp_path), "GPU_AUTOTUNE_CACHE": str(empty)}
    out = tmp_path / "elsewhere"
    command = ["bash", "benchmarks/gpu/run.sh", "--dry-run", "--part", "bench", "--time-limit-s", "1"]
    done = subprocess.run(
        [*command, "--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "benchmark: not started" in (out / "bench.log").read_text()
    assert not (out / "results.json").exists()
    wrong = subprocess.run(
        ["bash", "benchmarks/gpu/run.sh", "--time-limit-s", "ten"], cwd=ROOT, capture_output=True, text=True
    )
    assert wrong.returncode == 2 and "--time-limit-s must be a whole number" in wrong.stderr


DRY_RUN_TECHNIQUES = (
    *("sdpa", "jit_trace_unet", "deepcache", "bf16", "fp16", "openvino", "torch_compile", "aot_package"),
    *("combination", "fast", "fp8", "fp8-row", "graphs", "tuned", "whole-graphs"),
)


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """`bash benchmarks/gpu/run.sh --dry-run` once for the module, with no time limit (the default): its
    output folder, its output and results.json. One UNet role and one transformer role: in a dry run every
    UNet role runs the same tiny-shapes. The techniques section measures `DRY_RUN_TECHNIQUES`: the rows the
    tests below read, and one technique of each kind the benchmark handles apart (a traced UNet in a pipeline
    of its own, a lossy cache, another precision); every technique's own behaviour is tested elsewhere."""
    tmp = tmp_path_factory.mktemp("gpu-dry-run")
    out = tmp / "out"
    carried = tmp / "carried"  # an earlier run's autotuning timings, as benchmarks/gpu/autotune-cache holds
    carried.mkdir()
    (carried / "0a1b2c").write_text(json.dumps(autotune_file({"mm": {"8192x320": {"0.5": 0.01}}})))
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "OMP_NUM_THREADS": "1",
        "TMPDIR": str(tmp),
        "GPU_AUTOTUNE_CACHE": str(carried),
    }
    done = subprocess.run(
        ["bash", "benchmarks/gpu/run.sh", "--dry-run", "--out", str(out), "--models", "sd15,flux"]
        + ["--techniques", ",".join(DRY_RUN_TECHNIQUES)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out, done.stdout, json.loads((out / "results.json").read_text())


@pytest.mark.slow
def test_the_dry_run_writes_every_file_and_section(dry_run):
    out, stdout, data = dry_run
    files = sorted(p.name for p in out.iterdir())
    assert files == ["autotune-cache", "bench.log", "images.png", "results.json", "results.md", "tests.log"]
    returned = json.loads((out / "autotune-cache" / "0a1b2c").read_text())
    assert returned["cache"] == {"mm": {"8192x320": {"0.5": 0.01}}}, "the carried timings go back out"
    assert data["dry_run"] and data["status"] == "complete" and data["device"] == "cpu", data["notes"]
    for section in ("environment", "techniques", "memory", "ladder", "compute-limit", "targets"):
        assert data[section], f"{section} is empty"
    assert data["environment"]["xformers"] and data["environment"]["torch"]
    text = (out / "results.md").read_text()
    assert text.startswith("# GPU benchmark") and "**Dry run**" in text and "## Ladder" in text
    with Image.open(out / "images.png") as sheet:
        assert sheet.format == "PNG" and sheet.width > 500
    assert "GPU tests" in stdout and "tests exit status: 0" in stdout
    assert "no budget" in (out / "bench.log").read_text(), "no time limit given: everything runs"


@pytest.mark.slow
def test_the_dry_run_measures_a_transformer_against_its_own_precision_and_its_combinations(dry_run):
    """flux-tiny: the combinations by name (the CPU drops what it cannot run: fp8, cuDNN attention), and its
    FLOPs counted on the transformer, once per step (flow matching)."""
    section = dry_run[2]["techniques"]["flux"]
    rows = {r["technique"]: r for r in section["rows"]}
    assert section["model"] == "flux-tiny" and section["baseline"] == "fp32"
    assert rows["combination"]["status"] == "ok" and "fused_qkv" in rows["combination"]["applied"]
    assert rows["fast"]["status"] == "ok" and "first_block_cache" in rows["fast"]["applied"]
    assert "fp8" not in rows["fast"]["applied"] and rows["fp8"]["status"] == "unavailable"
    for same in ("fp8-row", "graphs", "tuned", "whole-graphs"):  # without fp8 and compile: the combination
        assert rows[same]["status"] == "skipped", same
        assert rows[same]["error"] == "the same configuration as combination here"
    limit = dry_run[2]["compute-limit"]["flux"]
    assert limit["unet_calls"] == limit["steps"] and limit["unet_batch"] == 1, "guidance-distilled: no CFG"


@pytest.mark.slow
def test_the_dry_run_measures_techniques_and_memory_or_says_why_not(dry_run):
    rows = {r["technique"]: r for r in dry_run[2]["techniques"]["sd15"]["rows"]}
    assert rows["baseline"]["status"] == "ok" and rows["baseline"]["latency_s"] > 0
    assert rows["sdpa"]["status"] == "ok" and rows["sdpa"]["revert_exact"] is True
    assert 0 < rows["sdpa"]["speedup_min"] <= rows["sdpa"]["speedup"] <= rows["sdpa"]["speedup_max"]
    assert rows["fp16"]["status"] == "unavailable" and "GPU" in rows["fp16"]["error"]
    assert rows["openvino"]["status"] == "unavailable" and "CPU only" in rows["openvino"]["error"]
    for compiled in ("torch_compile", "aot_package"):
        assert rows[compiled]["status"] == "unavailable" and "--with-compile" in rows[compiled]["error"]
    memory = {r["technique"]: r for r in dry_run[2]["memory"]["sd15"]["rows"]}
    assert memory["baseline"]["peak_memory_mb"] > 0 and memory["model_cpu_offload"]["status"] == "unavailable"


@pytest.mark.slow
def test_the_dry_run_climbs_the_ladder_and_judges_no_target(dry_run):
    data = dry_run[2]
    ladder = {r["step"]: r for r in data["ladder"]["sd15"]["rows"]}
    assert ladder["fp32"]["verdict"] == "baseline" and ladder["SDPA"]["status"] == "ok"
    assert ladder["TF32"]["status"] == "skipped" and "CUDA" in ladder["TF32"]["error"]
    limit = data["compute-limit"]["sd15"]
    assert limit["unet_gflops_per_call"] > 0 and 0 < limit["fraction_of_peak"]
    assert limit["unet_calls"] == limit["steps"], (
        "the dry run's tiny-shapes (DPM-Solver) calls it once a step"
    )
    per_image = limit["unet_gflops_per_call"] * limit["unet_calls"]
    assert limit["gflops_per_image"] == pytest.approx(per_image, abs=0.005 * limit["unet_calls"])  # rounding
    assert [t["met"] for t in data["targets"]] == [None] * len(targets.TARGETS)
    for target in data["targets"]:
        if target["role"] == "sdxl":  # not in this dry run
            assert target["value"] is None and target["note"] == "not measured in this run"
        else:
            assert target["value"] > 0, target
