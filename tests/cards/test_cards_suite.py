"""The suite is chosen by the device, options are refused in sentences before anything runs, configurations
are classified by what their image measured, and the auto-tuner's budget is planned and enforced."""

from __future__ import annotations

import math
import time

import pytest

from studio import devices
from studio.cards import picks, search
from studio.cards.options import Options, validate_options
from studio.cards.suite import CPU_CASES, SUITE_VERSION, pick_cases, suite_for
from studio.errors import ValidationError
from studio.request import build_request


def hardware(gpu_gb: float | None) -> devices.Hardware:
    gpus = () if gpu_gb is None else (devices.GPU(0, "Fake GPU", int(gpu_gb * 2**30), (9, 0)),)
    return devices.Hardware(gpu_gb is not None, "ok", gpus, False, "Fake CPU", cpu_count=2)


@pytest.mark.parametrize(
    "gpu_gb, device, models",
    [
        (None, "cpu", ["tiny-shapes", "sd15-arch"]),
        (24, "cuda:0", ["tiny-shapes", "sd15-arch"]),
        (80, "cuda:0", ["tiny-shapes", "sd15-arch", "sdxl-arch"]),
        (139, "cuda:0", ["tiny-shapes", "sd15-arch", "sdxl-arch", "flux-arch"]),
        (139, "cpu", ["tiny-shapes", "sd15-arch"]),  # a GPU machine measuring its CPU
    ],
)
def test_the_suite_is_chosen_by_the_device(gpu_gb, device, models):
    cases = suite_for(hardware(gpu_gb), device)
    assert [c.model for c in cases] == models
    sd15 = next(c for c in cases if c.model == "sd15-arch")
    if device == "cpu":
        assert (sd15.width, sd15.steps, sd15.reference, sd15.keep_db) == (256, 10, None, 100.0)
        assert sd15.lossy_search and not sd15.lossy_configs, "on a CPU the auto-tuner looks for the lossy one"
    else:
        assert (sd15.width, sd15.steps, sd15.reference, sd15.keep_db) == (512, 50, "fp16", 60.0)
    assert SUITE_VERSION == 1


def test_a_model_outside_the_suite_is_refused_with_the_suites_models():
    with pytest.raises(
        ValidationError, match=r"sdxl-arch is not in this device's suite of cards.*tiny-shapes"
    ):
        pick_cases(list(CPU_CASES), ["sdxl-arch"])
    assert [c.model for c in pick_cases(list(CPU_CASES), ["sd15-arch"])] == ["sd15-arch"]


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"budget_s": 5}, "budget"),
        ({"budget_s": "lots"}, "budget"),
        ({"rounds": 0}, "rounds"),
        ({"warmup": -1}, "warm-up"),
        ({"configs": ["openvino[mode"]}, "is not a configuration"),
        ({"models": 3}, "models must be a list"),
    ],
)
def test_bad_options_are_refused_in_sentences(kw, message):
    with pytest.raises(ValidationError, match=message):
        validate_options(**kw)


def test_options_are_read_as_a_face_sends_them_and_say_their_command():
    options = validate_options("tiny-shapes, sd15-arch", "60", ["openvino[mode=full_int8]"], "2")
    assert options == Options(("tiny-shapes", "sd15-arch"), 60.0, ("openvino[mode=full_int8]",), 2, 1, "auto")
    assert options.command() == (
        "python -m studio cards --models tiny-shapes sd15-arch "
        '--configs "openvino[mode=full_int8]" --rounds 2'
    )


def record(config, psnr=None, status="ok", verdict="faster"):
    return {"config": config, "status": status, "verdict": verdict, "psnr_db": psnr, "speedup": 1.5}


@pytest.mark.parametrize(
    "rec, psnr, dtype, reference, kind",
    [
        (record("openvino"), 116.4, "fp32", None, picks.KEEPS),
        (record("channels_last"), math.inf, "fp32", None, picks.KEEPS),  # identical
        (record("openvino[mode=full_int8]"), 40.8, "fp32", None, picks.CHANGES),
        (record("baseline", verdict="baseline"), math.inf, "fp32", None, None),
        (record("deepcache", status="failed"), None, "fp32", None, None),
        (record("fp16"), math.inf, "fp16", "fp16", None),  # the GPU's reference row is no candidate
        (record("fp16+torch_compile"), 66.5, "fp16", "fp16", picks.KEEPS),
        (record("fp16+deepcache"), 47.9, "fp16", "fp16", picks.CHANGES),
        (record("bf16+torch_compile"), 80.0, "bf16", "fp16", picks.CHANGES),  # another precision
    ],
)
def test_a_configuration_keeps_the_math_by_what_its_image_measured(rec, psnr, dtype, reference, kind):
    keep_db = 100.0 if reference is None else 60.0
    assert picks.kind_of(rec, psnr, dtype, reference, keep_db) == kind


def test_the_best_of_each_kind_is_the_fastest_and_a_slower_one_is_still_named():
    found = [
        {**picks.pick(picks.KEEPS, {**record("openvino"), "speedup": 0.9, "verdict": "slower"})},
        picks.pick(picks.CHANGES, {**record("a"), "speedup": 2.0}),
        picks.pick(picks.CHANGES, {**record("b"), "speedup": 3.0}),
    ]
    keep, lossy = picks.winners(found)
    assert (keep["config"], lossy["config"]) == ("openvino", "b")
    assert not picks.faster(keep) and picks.faster(lossy)
    assert picks.db(math.inf) is None and picks.db(math.nan) is None and picks.db(40.8123) == 40.81


def tiny_request():
    return build_request(
        model="tiny-shapes", prompt="a red circle", steps=4, width=32, height=32, device="cpu"
    )


def test_the_search_takes_the_suites_techniques_while_their_planned_work_fits_the_budget():
    request = tiny_request()
    roomy = search.plan(("deepcache", "cfg_cutoff", "fp16"), request, 1000.0, 0.5, 1, 2)
    assert roomy.techniques == ["deepcache", "cfg_cutoff"]
    assert roomy.left_out == [roomy.left_out[0]] and roomy.left_out[0].startswith("fp16: fp16 needs a GPU")
    tight = search.plan(("deepcache", "cfg_cutoff"), request, 5.0, 0.5, 1, 2)
    assert tight.techniques == [] and "more than the budget leaves" in tight.left_out[0]
    assert tight.planned_s == pytest.approx((3 + 6) * 0.5)


def test_the_deadline_says_who_stopped_the_run():
    user = {"stop": None}
    deadline = search.Deadline(0.05, lambda: user["stop"])
    assert deadline() is None and not deadline.expired
    user["stop"] = "the user clicked Cancel"
    assert deadline() == "the user clicked Cancel" and not deadline.expired
    user["stop"] = None
    time.sleep(0.06)
    assert "budget of 0.05 s" in deadline() and deadline.expired


def test_a_stopped_search_offers_the_fastest_row_it_had_within_the_floor():
    rows = [
        {"config": "baseline", "status": "ok", "stage": "baseline", "verdict": "baseline", "speedup": 1.0},
        {
            "config": "a",
            "status": "ok",
            "stage": "single",
            "verdict": "faster",
            "floor": None,
            "speedup": 1.4,
        },
        {
            "config": "b",
            "status": "ok",
            "stage": "single",
            "verdict": "faster",
            "floor": "PSNR 20 < 30",
            "speedup": 3,
        },
        {
            "config": "c",
            "status": "ok",
            "stage": "single",
            "verdict": "within noise",
            "floor": None,
            "speedup": 2,
        },
        {
            "config": "d",
            "status": "cancelled",
            "stage": "single",
            "verdict": None,
            "floor": None,
            "speedup": None,
        },
    ]
    assert search.fastest_within_floor(rows) == "a"
    assert search.fastest_within_floor(rows[:1]) is None


def row(config, speedup, psnr, stage="single", verdict="faster", floor=None):
    return {
        "config": config,
        "status": "ok",
        "stage": stage,
        "verdict": verdict,
        "floor": floor,
        "speedup": speedup,
        "psnr_db": psnr,
    }


@pytest.mark.parametrize(
    "winner, confirmed_psnr, expected",
    [
        ("openvino[mode=full_int8]", 40.8, ["openvino[mode=full_int8]"]),  # a lossy winner is enough
        ("openvino[mode=fp32]", 116.4, ["openvino[mode=fp32]", "deepcache[interval=3]"]),  # + the best lossy
        (None, None, ["deepcache[interval=3]"]),  # nothing confirmed: the best lossy row is measured again
    ],
)
def test_the_run_measures_again_the_winner_and_the_fastest_that_changes_the_image(
    winner, confirmed_psnr, expected
):
    from types import SimpleNamespace

    rows = [
        row("baseline", 1.0, None, stage="baseline", verdict="baseline"),
        row("openvino[mode=fp32]", 3.3, 116.4),
        row("deepcache[interval=2]", 1.5, 35.0),
        row("deepcache[interval=3]", 1.9, 31.0),
        row("deepcache[interval=5]", 2.5, 22.0, floor="PSNR 22.0 dB < 30"),
        row("cfg_cutoff[after=0.3]", 2.2, 33.0, verdict="within noise"),
    ]
    found = SimpleNamespace(
        winner=winner and object(),
        winner_label=winner or "baseline",
        confirmation={"psnr_db": confirmed_psnr},
        rows=rows,
    )
    assert search.to_confirm(found, 100.0) == expected
    assert search.fastest_within_floor(rows, below_db=100.0) == "deepcache[interval=3]"


class FakeRun:
    """What `candidates_of` reads of a run: its label, its image and its precision."""

    def __init__(self, label, dtype, value):
        from types import SimpleNamespace

        import numpy as np

        self.label, self.request = label, SimpleNamespace(dtype_name=dtype)
        self.arrays = np.full((1, 8, 8, 3), value)


def test_on_a_gpu_the_math_is_held_to_the_reference_rows_image():
    """fp32 baseline, the fp16 reference, a compiled fp16 row 1e-4 from fp16's image (80 dB), a DeepCache row
    0.01 from it (40 dB) and a bf16 row: only the compiled one keeps fp16's math."""
    from types import SimpleNamespace

    from studio.cards.run_suite import candidates_of
    from studio.cards.suite import GPU_CASES

    runs = [
        FakeRun("baseline", "fp32", 0.0),
        FakeRun("fp16", "fp16", 0.5),
        FakeRun("fp16+torch_compile", "fp16", 0.5001),
        FakeRun("fp16+deepcache", "fp16", 0.51),
        FakeRun("bf16", "bf16", 0.5),
    ]
    records = [
        record(r.label, psnr=10.0, verdict="baseline" if r.label == "baseline" else "faster") for r in runs
    ]
    found = candidates_of(SimpleNamespace(records=records, results=runs), GPU_CASES[1])
    kinds = {p["config"]: (p["kind"], p["reference_psnr_db"]) for p in found}
    assert kinds == {
        "fp16+torch_compile": (picks.KEEPS, 80.0),
        "fp16+deepcache": (picks.CHANGES, 40.0),
        "bf16": (picks.CHANGES, None),
    }
    assert all(p["reference"] == "fp16" and p["psnr_db"] == 10.0 for p in found)


def test_a_configuration_written_with_its_defaults_is_measured_once():
    from studio.cards.run_suite import distinct

    configs = [
        "openvino",
        "openvino[mode=fp32]",
        "openvino[winograd=true]",
        "deepcache",
        "deepcache[interval=3]",
    ]
    assert distinct(tiny_request(), configs) == ["openvino", "openvino[winograd=true]", "deepcache"]
