"""A CPU run takes the cores free at request time; a sweep keeps one count for all its configurations; the
`threads` technique still fixes the count; torch's own setting comes back after every run."""

from __future__ import annotations

import itertools

import pytest
import torch

from studio import report
from studio.engine import threads
from studio.sweeps.compare import run_compare
from tests.tiny import request


@pytest.fixture
def two_cores(monkeypatch):
    """A 2-core machine whose other processes keep `busy[0]` cores busy; torch set to 2 threads."""
    busy = [0.0]
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(threads, "physical_cores", lambda: 2)
    monkeypatch.setattr(threads.CORE_WATCH, "busy_cores", lambda: busy[0])
    old = torch.get_num_threads()
    torch.set_num_threads(2)
    yield busy
    torch.set_num_threads(old)


@pytest.mark.parametrize("busy, expected", [(0.0, 2), (0.3, 2), (1.0, 1), (2.0, 1), (None, 2)])
def test_the_threads_are_the_cores_other_processes_leave(two_cores, busy, expected):
    two_cores[0] = busy
    assert threads.free_threads() == expected


def test_never_more_than_the_process_is_set_to_use(two_cores):
    torch.set_num_threads(1)
    assert threads.free_threads() == 1


def test_a_run_on_a_busy_host_uses_one_thread_and_says_so(two_cores, studio):
    two_cores[0] = 1.0
    seen = []
    real = torch.set_num_threads

    def spy(n):
        seen.append(n)
        real(n)

    torch.set_num_threads = spy
    try:
        run = studio.generate(request(steps=2))
    finally:
        torch.set_num_threads = real
    assert seen[0] == 1 and torch.get_num_threads() == 2, "one thread for the run, then torch's own again"
    assert run.metrics["stats"]["cpu_threads"] == 1
    assert run.metrics["stats"]["thread_policy"] == threads.FREE_CORES
    assert report.single_record(run)["cpu_threads"] == 1


def test_the_threads_technique_fixes_the_count(two_cores, studio):
    two_cores[0] = 2.0
    run = studio.generate(request(["threads"], settings={"threads": {"num_threads": 2}}, steps=2))
    assert run.metrics["stats"]["cpu_threads"] == 2
    assert run.metrics["stats"]["thread_policy"] == threads.FIXED


def test_a_sweep_keeps_one_count_for_every_configuration(two_cores, studio, monkeypatch):
    """The host gets busy half-way through a Compare: the comparison stays fair (one count for all)."""
    loads = itertools.chain([0.0], itertools.repeat(2.0))
    monkeypatch.setattr(threads.CORE_WATCH, "busy_cores", lambda: next(loads))
    result = run_compare(studio, request(steps=2), ["channels_last"], warmup=0, rounds=2)
    assert [r["cpu_threads"] for r in result.records] == [2, 2]


def test_concurrent_runs_give_the_process_its_own_count_back(two_cores):
    """Two runs overlapping in a server's threads, each with its own count: torch's count is the process's
    own again once both have ended (not what the first one found when it started)."""
    first, second = threads.using(1), threads.using(2)
    first.__enter__()
    second.__enter__()
    assert torch.get_num_threads() == 2
    first.__exit__(None, None, None)
    second.__exit__(None, None, None)
    assert torch.get_num_threads() == 2
    two_cores[0] = 0.0
    with threads.using(1):
        assert threads.free_threads() == 2, "the ceiling is the process's own count, not the run's"
