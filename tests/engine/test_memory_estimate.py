"""Will it fit: the peak-memory estimate before a run, against the peak the run then measures (CPU RSS here),
its correction from the run log, and the refusal on a GPU of known size (fake GPUs)."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from studio.engine import memory_estimate
from studio.errors import ValidationError
from studio.request import build_request
from tests import tiny, warm_python

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.usefixtures("one_torch_thread")

# one fix is named with "ticked", several as alternatives ("any one of"), a pair as "together"
FITS_WITH_SLICING = r"It would fit with (vae_slicing ticked|any one of: vae_slicing;)"


def _measured_within(studio, request, tolerance=0.25):
    before = memory_estimate.estimate(studio.manager, request, studio.runlog)
    result = studio.generate(request)
    measured = result.metrics["peak_memory"]
    assert abs(before.peak - measured) <= tolerance * measured, (before, measured)
    return before, result


def test_the_estimate_is_within_a_quarter_of_the_measured_peak_on_the_bundled_model(studio):
    before, result = _measured_within(studio, tiny.request(steps=2, batch=2))
    assert before.known and before.weights > 0 and before.kind == "cpu_rss"
    logged = result.metrics["stats"]["memory_estimate"]  # the engine's own, taken as the run started
    assert logged["peak"] == pytest.approx(before.peak / 2**20, rel=0.1) and logged["sentence"]
    loaded = memory_estimate.estimate(studio.manager, tiny.request(steps=2), studio.runlog)
    assert loaded.weights == 0, "a loaded pipeline's weights are already in the process"


SD15_IN_A_FRESH_PROCESS = """
import json, sys
from studio.engine import Studio
from studio.request import build_request
from studio.engine import memory_estimate
studio = Studio(db_path=sys.argv[1] + "/runs.db", outputs=sys.argv[1] + "/out")
request = build_request(model="sd15-arch", prompt="a red circle", steps=1, width=128, height=128)
before = memory_estimate.estimate(studio.manager, request, studio.runlog)
measured = studio.generate(request).metrics["peak_memory"]
print(json.dumps({"peak": before.peak, "weights": before.weights, "measured": measured}))
"""


@pytest.mark.slow
def test_the_estimate_is_within_a_quarter_of_the_measured_peak_on_sd15_arch(tmp_path):
    """In a process of its own, as a user starts the studio (forked from a Python that imported the libraries
    and ran nothing, tests/warm_python.py): in the suite's own process the memory freed by earlier tests is
    counted as in use and then reused, which no estimate can know. One step at 128x128: the real
    architecture's weights and its activations at a small image (within 3% of the measured peak on a 2-core
    AMD EPYC Zen 3); the activations' share of a peak is what the bundled model's test above checks."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-c", SD15_IN_A_FRESH_PROCESS, str(tmp_path)]
    proc = warm_python.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=True)
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert abs(got["peak"] - got["measured"]) <= 0.25 * got["measured"], got
    assert 3.9 * 2**30 < got["weights"] < 4.1 * 2**30  # 1.07 B parameters in fp32


def test_the_run_log_corrects_the_next_estimate(studio):
    request = tiny.request(steps=2)
    first = memory_estimate.estimate(studio.manager, request, studio.runlog)
    assert first.correction == 1.0
    result = studio.generate(request)
    ratio = result.metrics["peak_memory"] / (result.metrics["stats"]["memory_estimate"]["peak"] * 2**20)
    again = memory_estimate.estimate(studio.manager, request, studio.runlog)
    assert again.correction == pytest.approx(min(2.0, max(0.5, ratio)), rel=1e-6)


def test_techniques_change_the_estimate_the_way_they_change_memory():
    request = build_request(model="sdxl-arch", prompt="x", width=1024, height=1024, batch=2)
    shape = memory_estimate.spec_shape(request.spec)

    def activations(**kw):
        return memory_estimate._activations(request.__class__(**{**request.__dict__, **kw}), shape, 4)

    assert activations(optimizations=("vae_slicing",)) == activations(batch=1) < activations()
    assert activations(optimizations=("vae_tiling",)) < activations(optimizations=("vae_slicing",))


def test_a_run_that_would_not_fit_a_gpu_is_refused_with_what_would_make_it_fit(studio, fake_gpus):
    fake_gpus(1)  # one fake 24 GB GPU
    request = build_request(model="sdxl-arch", prompt="x", device="cuda:0", width=1024, height=1024, batch=2)
    with pytest.raises(ValidationError, match="Does not fit in 24.0 GB") as info:
        studio.generate(request)
    assert re.search(FITS_WITH_SLICING, str(info.value)), str(info.value)
    assert studio.runlog.runs() == [], "a refused run is not logged"
    said = studio.will_it_fit(request)  # what /estimate, Generate's "Will it fit?" and the CLI answer
    assert said["fits"] is False and said["sentence"] == str(info.value), "the words the run is refused with"
    fits = memory_estimate.estimate(studio.manager, request.__class__(**{**request.__dict__, "batch": 1}))
    assert fits.fits is True and fits.now == 0


def test_on_a_cpu_a_run_that_would_not_fit_in_ram_is_refused_with_what_would_make_it_fit(studio, monkeypatch):
    """sd15-arch 1024x1024, batch 8 (an estimate of about 46 GB) against the RAM this process may reach."""
    # 20 GB on top of what this process holds now (it differs with what the tests before loaded)
    monkeypatch.setattr(memory_estimate, "cpu_capacity", lambda now: now + 20 * 2**30)
    request = build_request(model="sd15-arch", prompt="x", device="cpu", width=1024, height=1024, batch=8)
    found = memory_estimate.estimate(studio.manager, request)
    assert found.fits is False and found.capacity == found.now + 20 * 2**30 and found.peak > 40 * 2**30
    with pytest.raises(ValidationError, match=r"Does not fit in [\d.]+ GB of RAM") as info:
        studio.generate(request)
    assert re.search(FITS_WITH_SLICING, str(info.value)), str(info.value)
    assert "vae_slicing + " not in str(info.value), "no pair with a technique that does it alone"
    assert studio.runlog.runs() == [], "a refused run is not logged, nothing was loaded"
    assert studio.manager.loaded() == []


def test_the_cpus_capacity_is_what_the_process_holds_plus_what_is_available(monkeypatch):
    """Read on fixed figures: the machine's real free memory moves while other tests run beside this one."""
    import types

    now = memory_estimate.rss()
    available = 6 * 2**30
    free = types.SimpleNamespace(available=available)
    monkeypatch.setattr(memory_estimate.psutil, "virtual_memory", lambda: free)
    monkeypatch.setattr(memory_estimate, "_cgroup_limit", lambda: None)
    assert memory_estimate.cpu_capacity(now) == now + available
    monkeypatch.setattr(memory_estimate, "_cgroup_limit", lambda: now + 2**30)
    assert memory_estimate.cpu_capacity(now) == now + 2**30, "a container's limit below that is the ceiling"
