"""Sweeps (Compare, Ladder, Auto-tune) on the one interleaved protocol: order, own pipelines, group lifecycle,
busy hosts, memory figures and the shared vocabulary. tiny-shapes at 32x32 with 2 steps: a call is ~30 ms."""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter

import pytest

from studio import report
from studio.errors import Cancelled, RunFailed
from studio.measure import host as host_module
from studio.measure.host import BUSY_PCT, HostMonitor
from studio.measure.memory_probe import weight_bytes
from studio.measure.protocol import verdict
from studio.report.records import _memory_change
from studio.request import build_request
from studio.sweeps.compare import run_compare
from studio.sweeps.ladder import plan, run_ladder

PROMPT = "a big red circle on the left, on a white background"
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


def request(**kw):
    return build_request(
        **{"model": "tiny-shapes", "prompt": PROMPT, "seed": 7, "steps": 2, "width": 32, "height": 32, **kw}
    )


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def record_calls(studio, monkeypatch, events: list):
    """Every `studio.compute` call appends ("call", its configuration label) to `events`."""
    real = studio.compute

    def compute(req, options):
        events.append(("call", req.config_label))
        return real(req, options)

    monkeypatch.setattr(studio, "compute", compute)


def fail_on(studio, monkeypatch, label: str, call: int, error: type[Exception] = RunFailed) -> Counter:
    """`label`'s `call`-th compute (1 = its first warm-up) raises `error`; returns the calls per label."""
    real, counts = studio.compute, Counter()

    def compute(req, options):
        counts[req.config_label] += 1
        if req.config_label == label and counts[label] == call:
            raise error(f"{label} broke on call {call}")
        return real(req, options)

    monkeypatch.setattr(studio, "compute", compute)
    return counts


def expected_order(labels: list[str], warmup: int, rounds: int) -> list[str]:
    return [label for label in labels for _ in range(warmup)] + labels * rounds


def statuses(studio, group_id: int) -> dict[str, str]:
    return {r["config_label"]: r["status"] for r in studio.runlog.runs(group_id=group_id)}


# ---- 2. one protocol, order recorded at the engine level ---------------------------------------------------


def test_compare_runs_warmups_then_interleaved_rounds(studio, monkeypatch):
    events: list = []
    record_calls(studio, monkeypatch, events)
    result = run_compare(
        studio,
        request(),
        ["channels_last", "sdpa"],
        warmup=1,
        rounds=3,
        progress=lambda done, total, msg: events.append(("progress", (done, total, msg))),
    )
    labels = ["baseline", "channels_last", "sdpa"]
    calls = [label for kind, label in events if kind == "call"]
    assert calls == labels + labels * 3
    told = [x for kind, x in events if kind == "progress"]  # (calls done, calls, where)
    said = [(kind, x if kind == "call" else x[2]) for kind, x in events]
    firsts = [m for kind, m in said if kind == "progress" and "step" not in m]  # before each call's steps
    assert firsts == [f"configuration {i} of 3 ({x}), warm-up 1 of 1" for i, x in enumerate(labels, 1)] + [
        f"configuration {i} of 3 ({x}), round {r} of 3" for r in (1, 2, 3) for i, x in enumerate(labels, 1)
    ]
    assert [e for e in said if e[0] == "call" or "step" not in e[1]] == [
        e for pair in zip(firsts, calls, strict=True) for e in (("progress", pair[0]), ("call", pair[1]))
    ]
    steps = [m for _, _, m in told if "step" in m]
    assert steps[:2] == [
        "configuration 1 of 3 (baseline), warm-up 1 of 1, step 1 of 2",
        "configuration 1 of 3 (baseline), warm-up 1 of 1, step 2 of 2",
    ]
    assert "configuration 2 of 3 (channels_last), round 3 of 3, step 1 of 2" in steps
    fractions = [done / total for done, total, _ in told]
    assert fractions == sorted(fractions) and fractions[0] == 0 and fractions[-1] == 1.0

    records = result.records
    assert [r["config"] for r in records] == labels and all(r["rounds"] == 3 for r in records)
    base = result.results[0].metrics["latency_all"]
    for record, res in zip(records[1:], result.results[1:], strict=True):
        ratios = [b / o for b, o in zip(base, res.metrics["latency_all"], strict=True)]
        assert record["speedup"] == pytest.approx(statistics.median(ratios), abs=1e-3), (
            "median per-round ratio"
        )
        assert record["speedup_min"] == pytest.approx(min(ratios), abs=1e-3)
        assert record["speedup_max"] == pytest.approx(max(ratios), abs=1e-3)
        assert record["verdict"] == verdict(ratios)
    assert records[0]["verdict"] == "baseline" and records[0]["speedup"] == 1.0
    group = studio.runlog.db["groups"].get(result.group_id)  # the groups table, as a database copy shows it
    assert group["kind"] == "compare" and group["status"] == "ok"
    settings = json.loads(group["settings"])
    assert (settings["configs"], settings["warmup"], settings["rounds"]) == (labels, 1, 3)


def test_ladder_runs_every_rung_interleaved(studio, monkeypatch):
    events: list = []
    record_calls(studio, monkeypatch, events)
    req = request()
    steps = plan(req)
    labels = ["+".join(s.optimizations) or "baseline" for s in steps if not s.skipped]
    assert len(labels) >= 3, steps
    group_id, rows = run_ladder(studio, req, warmup=1, rounds=2)  # two rounds show the interleaving
    assert [label for _, label in events] == expected_order(labels, 1, 2)
    assert [r["step"] for r in rows] == [s.label for s in steps]
    if req.device == "cpu":  # bf16 in fp16's place where the CPU computes it, else skipped with the reason
        fp16 = next(r for r in rows if r["step"] in ("fp16", "bf16 in place of fp16"))
        assert fp16["step"] == "bf16 in place of fp16" or "no bf16 instructions" in fp16["error"], fp16
    measured = [r for r in rows if r["status"] == "ok"]
    assert [r["config"] for r in measured] == labels and measured[0]["verdict"] == "baseline"
    assert all(r["rounds"] == 2 for r in measured)
    assert all(r["error"] for r in rows if r["status"] == "skipped")
    assert studio.runlog.db["groups"].get(group_id)["status"] == "ok"


# ---- 3. irreversible configurations keep their own pipeline ------------------------------------------------


def test_a_traced_configuration_is_traced_once_in_its_own_pipeline(studio, monkeypatch):
    from studio.optimizations.trace import TracedUNet

    builds = []
    real_build = TracedUNet.build
    monkeypatch.setattr(
        TracedUNet, "build", lambda self, inputs: builds.append(1) or real_build(self, inputs)
    )
    result = run_compare(studio, request(), ["jit_trace_unet"], warmup=1, rounds=3)
    base, traced = result.records
    assert traced["status"] == "ok" and traced["rounds"] == 3
    assert len(builds) == 1, "interleaving with the baseline must not rebuild and retrace the traced UNet"
    assert traced["recompiles"] == 1 and result.results[1].metrics["stats"]["trace_count"] == 1
    assert base["recompiles"] is None
    assert studio.manager.disk_loads == 1, (
        "the private pipeline is a copy of the loaded weights, not a disk read"
    )
    assert studio.manager._slots == {} and studio.manager._sweeps == set(), (
        "private pipelines end with the sweep"
    )
    (shared,) = studio.manager._entries.values()
    assert "trace_count" not in shared.stats, "the shared pipeline was never traced"
    with pytest.raises(RuntimeError, match="outside manager.own_pipelines"):
        with studio.manager.acquire(
            request(optimizations=["jit_trace_unet"]), slot=("sweep-1", "jit_trace_unet")
        ):
            pass


def test_a_compare_can_set_one_technique_two_ways(studio):
    """Configurations carry their own settings, written as results label them; each is its own run."""
    result = run_compare(
        studio,
        request(steps=8),
        ["deepcache[interval=2]", "deepcache[interval=5]", "deepcache[interval=2]"],
        rounds=2,
    )
    assert [r["config"] for r in result.records] == [
        "baseline",
        "deepcache[interval=2]",
        "deepcache[interval=5]",
    ]
    runs = {r["config_label"]: r for r in studio.runlog.runs(group_id=result.group_id)}
    assert runs["deepcache[interval=5]"]["settings"] == {"deepcache": {"interval": 5}}
    two, five = (r.request.settings["deepcache"]["interval"] for r in result.results[1:])
    assert (two, five) == (2, 5) and result.results[1].arrays.tobytes() != result.results[2].arrays.tobytes()


# ---- 4. group lifecycle ------------------------------------------------------------------------------------


def test_a_failing_configuration_is_a_failed_run_and_leaves_the_later_rounds(studio, monkeypatch):
    counts = fail_on(studio, monkeypatch, "channels_last", call=2)  # its warm-up works, its first round fails
    result = run_compare(studio, request(), ["channels_last", "sdpa"], warmup=1, rounds=3)
    base, failed, other = result.records
    assert failed["status"] == "failed" and "channels_last broke on call 2" in failed["error"]
    assert failed["latency_s"] is None and failed["speedup"] is None
    assert counts == {"baseline": 4, "channels_last": 2, "sdpa": 4}, (
        "a dropped configuration is not called again"
    )
    assert base["status"] == other["status"] == "ok" and other["rounds"] == 3
    assert studio.runlog.db["groups"].get(result.group_id)["status"] == "ok"
    runs = {r["config_label"]: r for r in studio.runlog.runs(group_id=result.group_id)}
    assert runs["channels_last"]["status"] == "failed" and "broke" in runs["channels_last"]["error"]
    assert runs["baseline"]["status"] == runs["sdpa"]["status"] == "ok"


def test_a_library_error_in_one_configuration_drops_only_that_one(studio, monkeypatch):
    """A kernel or converter error (not the studio's own) in one configuration: the others are still measured,
    and the failed one says what broke, with the error's type."""
    counts = fail_on(studio, monkeypatch, "channels_last", call=1, error=RuntimeError)
    result = run_compare(studio, request(), ["channels_last", "sdpa"], warmup=1, rounds=2)
    base, failed, other = result.records
    assert failed["status"] == "failed" and failed["error"] == "RuntimeError: channels_last broke on call 1"
    assert base["status"] == other["status"] == "ok" and counts["channels_last"] == 1
    assert studio.runlog.db["groups"].get(result.group_id)["status"] == "ok"
    assert statuses(studio, result.group_id)["channels_last"] == "failed"


def test_on_a_gpu_the_sweeps_copies_are_bounded_by_its_free_memory(studio, fake_gpus, monkeypatch):
    """On CUDA each configuration's own copy is made on the GPU: plenty of host memory does not help, and the
    memory torch's allocator keeps cached counts as free."""
    import torch

    from studio.errors import ValidationError
    from studio.sweeps.runner import Entry, own_pipelines

    fake_gpus(1)
    entries = [
        Entry(label, request(optimizations=optimizations, device="cuda:0"))
        for label, optimizations in (("baseline", ()), ("jit_trace_unet", ("jit_trace_unet",)))
    ]
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (24 * 2**30, 24 * 2**30))
    assert own_pipelines(studio, entries) == {"jit_trace_unet"}
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (2**20, 24 * 2**30))
    with pytest.raises(ValidationError, match="of GPU memory is available"):
        own_pipelines(studio, entries)
    # what an earlier sweep's copies left in torch's allocator cache is free for this one's
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 20 * 2**30)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 2 * 2**30)
    assert own_pipelines(studio, entries) == {"jit_trace_unet"}


def test_a_failing_baseline_fails_the_group(studio, monkeypatch):
    fail_on(studio, monkeypatch, "baseline", call=2)
    with pytest.raises(RunFailed, match="baseline broke"):
        run_compare(studio, request(), ["channels_last"], warmup=1, rounds=3)
    (group,) = studio.runlog.db["groups"].rows
    assert group["status"] == "failed" and "baseline broke" in group["error"]
    assert set(statuses(studio, group["id"]).values()) == {"failed"}


def test_cancelling_mid_sweep_cancels_the_group_and_leaves_no_run_running(studio):
    step_checks = Counter()

    def should_stop():
        step_checks["n"] += 1
        return "stopped by the test" if step_checks["n"] >= 9 else None  # 2 steps a call: during the 5th call

    with pytest.raises(Cancelled, match="stopped by the test"):
        run_compare(studio, request(), ["channels_last", "sdpa"], warmup=1, rounds=3, should_stop=should_stop)
    (group,) = studio.runlog.db["groups"].rows
    assert group["status"] == "cancelled"
    assert set(statuses(studio, group["id"]).values()) == {"cancelled"}


def test_a_configuration_that_failed_before_a_cancel_stays_failed(studio, monkeypatch):
    fail_on(studio, monkeypatch, "channels_last", call=1)
    step_checks = Counter()

    def should_stop():
        step_checks["n"] += 1
        return "stopped by the test" if step_checks["n"] >= 7 else None

    with pytest.raises(Cancelled):
        run_compare(studio, request(), ["channels_last", "sdpa"], warmup=1, rounds=3, should_stop=should_stop)
    (group,) = studio.runlog.db["groups"].rows
    runs = {r["config_label"]: r for r in studio.runlog.runs(group_id=group["id"])}
    assert "running" not in {r["status"] for r in runs.values()}
    assert runs["channels_last"]["status"] == "failed" and "broke" in runs["channels_last"]["error"]


# ---- 5. a busy host ----------------------------------------------------------------------------------------


@contextlib.contextmanager
def busy_loop():
    """Another process spinning on one core (the last one this process may use), killed on the way out."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        with contextlib.suppress(OSError, AttributeError):
            os.sched_setaffinity(proc.pid, {max(os.sched_getaffinity(0))})
        time.sleep(0.3)  # started and spinning
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_host_monitor_sees_another_process_spinning():
    with busy_loop(), HostMonitor() as monitor:
        time.sleep(1.0)
    load = monitor.result
    assert load.busy_pct is not None and load.busy_pct > BUSY_PCT, load
    assert load.busy and "other processes used" in load.note()


def test_host_monitor_counts_other_processes_not_our_own(monkeypatch):
    """Made-up /proc/stat figures: 1 s on 2 cores, 1.5 s busy of which 1.0 s ours, 0.4 s stolen."""
    ticks, own, clock = iter([(100.0, 10.0), (101.5, 10.4)]), iter([5.0, 6.0]), iter([50.0, 51.0])
    monkeypatch.setattr(host_module, "_cpu_ticks", lambda: next(ticks))
    monkeypatch.setattr(host_module, "_own_cpu", lambda: next(own))
    monkeypatch.setattr(host_module.time, "monotonic", lambda: next(clock, 51.0))
    monkeypatch.setattr(host_module.os, "cpu_count", lambda: 2)
    with HostMonitor() as monitor:
        pass
    assert (monitor.result.busy_pct, monitor.result.steal_pct, monitor.result.seconds) == (25.0, 20.0, 1.0)
    assert monitor.result.busy


def test_host_monitor_says_unknown_where_there_is_no_proc_stat(monkeypatch, tmp_path):
    monkeypatch.setattr(host_module, "STAT", tmp_path / "missing")
    with HostMonitor() as monitor:
        pass
    assert monitor.result.busy_pct is None and monitor.result.steal_pct is None
    assert not monitor.result.busy and monitor.result.note() is None


def test_a_busy_host_never_turns_noise_into_a_claimed_speedup(studio):
    """channels_last changes nothing much for tiny-shapes on a CPU; under a busy loop (and whatever else runs
    here) the compare must say 'within noise' or flag the host as busy: a speedup the host's load made (a
    busy loop beside another worker once read x0.39) is never shown as a plain claim."""
    with busy_loop():
        result = run_compare(studio, request(width=64, height=64), ["channels_last"], warmup=1, rounds=5)
    base, cl = result.records
    assert cl["status"] == "ok" and cl["rounds"] == 5
    assert cl["verdict"] == "within noise" or cl["host_busy"], cl
    if not cl["host_busy"]:
        assert 0.5 <= cl["speedup"] <= 2.0, cl
    for record in result.records:
        assert record["host_busy_pct"] is not None
        assert record["host_busy"] == (
            record["host_busy_pct"] > BUSY_PCT or (record["host_steal_pct"] or 0) > BUSY_PCT
        )
    if cl["host_busy"]:
        assert "host was busy" in report.markdown(result.records)
        assert any("host was busy" in w for w in cl["warnings"])


# ---- 7. the shared vocabulary from the engine faces --------------------------------------------------------


def test_run_records_and_log_records_speak_the_shared_vocabulary(studio):
    result = run_compare(studio, request(), ["channels_last"], warmup=0, rounds=3)
    logged = {r["id"]: report.log_record(r) for r in studio.runlog.runs(group_id=result.group_id)}
    for res, record in zip(result.results, result.records, strict=True):
        assert record == report.run_record(res, result.results[0])
        row = logged[record["run_id"]]
        for face in (record, row):
            assert set(SHARED) <= set(face) and not set(OLD) & set(face), face
        for key in (
            "config",
            "status",
            "latency_s",
            "latency_spread_s",
            "rounds",
            "speedup",
            "speedup_min",
            "speedup_max",
            "verdict",
            "peak_memory_mb",
            "host_busy_pct",
            "host_busy",
            "recompiles",
        ):
            assert row[key] == record[key], key
    assert set(report.single_record(studio.generate(request()))) >= set(SHARED)
    failed = report.failed_record("bf16", "boom")
    assert set(failed) == set(report.KEYS) and failed["status"] == "failed"
    assert report.to_csv(result.records).splitlines()[0].split(",")[: len(report.KEYS)] == list(report.KEYS)


# ---- 8. memory figures -------------------------------------------------------------------------------------


def test_configurations_that_do_not_change_memory_say_so(studio):
    base, cl = run_compare(
        studio, request(width=64, height=64), ["channels_last"], warmup=1, rounds=3
    ).records
    assert cl["memory_change_mb"] is None and cl["memory_note"] == "no measurable difference"
    assert base["memory_change_mb"] is None and base["memory_note"] is None, (
        "the baseline is not compared to itself"
    )
    assert cl["memory_kind"] == "cpu_rss" and cl["peak_memory_mb"] > 0
    assert "(no measurable difference)" in report.memory(cl)


MB = 2**20


@pytest.mark.parametrize(
    "mine, theirs, kind, expected",
    [
        ([100 * MB] * 3, [50 * MB] * 3, "cpu_rss", (50.0, None)),
        ([50 * MB] * 3, [100 * MB] * 3, "cpu_rss", (-50.0, None)),
        (
            [60 * MB] * 3,
            [50 * MB] * 3,
            "cpu_rss",
            (None, "no measurable difference"),
        ),  # 10 MB < RSS resolution
        ([3 * MB] * 3, [1 * MB] * 3, "cuda_allocated", (2.0, None)),  # the CUDA allocator resolves 1 MB
        (
            [100 * MB, 140 * MB, 100 * MB],
            [60 * MB] * 3,
            "cpu_rss",
            (None, "no measurable difference"),
        ),  # 40 MB swings
        ([100 * MB, 140 * MB, 100 * MB], [30 * MB] * 3, "cpu_rss", (70.0, None)),  # beyond its own swings
    ],
)
def test_memory_change_is_reported_only_beyond_what_the_probe_resolves(mine, theirs, kind, expected):
    m = {"memory_added_all": mine, "memory_added": max(mine), "memory_kind": kind}
    base = {"memory_added_all": theirs, "memory_added": max(theirs), "memory_kind": kind}
    assert _memory_change(m, base) == expected


def test_an_offloaded_configuration_reads_as_a_saving_not_as_more_memory():
    """What the H100 showed: model offload's call adds more (its modules come onto the GPU during the call),
    but it starts with none of its weights there; the baseline keeps 2 GB of weights resident."""
    baseline = {
        "memory_added_all": [1219 * MB] * 3,
        "memory_resident": 2089 * MB,
        "memory_kind": "cuda_allocated",
    }
    offload = {"memory_added_all": [1913 * MB] * 3, "memory_resident": 0, "memory_kind": "cuda_allocated"}
    assert _memory_change(offload, baseline) == (-1395.0, None)
    old_row = {**baseline, "memory_resident": None}
    assert _memory_change(offload, old_row) == (694.0, None), "a row without the figure: what the calls added"


def test_a_run_records_the_weights_resident_before_its_call(studio):
    result = studio.generate(request(width=64, height=64))
    with studio.manager.acquire(request(width=64, height=64)) as prepared:
        expected = weight_bytes(prepared.pipe, "cpu")
    assert result.metrics["memory_resident"] == expected > 0
    assert studio.runlog.get_run(result.run_id)["memory_resident"] == expected
    assert weight_bytes(prepared.pipe, "cuda:0") == 0, "nothing of it is on a GPU"


def test_memory_change_without_a_baseline_or_per_call_figures():
    m = {"memory_added": 100 * MB, "memory_kind": "cpu_rss"}
    assert _memory_change(m, None) == (None, None)
    assert _memory_change(m, m) == (None, None)
    assert _memory_change(m, {"memory_added": 20 * MB}) == (80.0, None), "old runs: one figure per run"
