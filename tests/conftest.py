"""Shared fixtures: the bundled model, a studio or a run log on a temporary database, fake GPUs."""

from __future__ import annotations

import collections
import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# What gradio sets in its process when a demo is built with analytics off (as the suite's are): set for the
# whole suite, so that the processes tests start after one is built still share the suite's environment
# (tests/warm_python.py).
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "True"
# The suite's own inductor (and triton) cache, set before torch is imported and inherited by the processes
# tests start: the machine-wide /tmp/torchinductor_<user> may hold entries another process left damaged (a
# compile killed while writing a shared object leaves it truncated). Under .pytest_cache (git-ignored), so a
# second run in the same checkout reuses the compiled kernels.
os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(
    Path(__file__).resolve().parents[1] / ".pytest_cache" / "inductor"
)
os.environ["TRITON_CACHE_DIR"] = os.path.join(os.environ["TORCHINDUCTOR_CACHE_DIR"], "triton")
# Inductor proves that g++ builds each vector instruction set the CPU declares by building and loading a
# probe for each, in every process whose inductor cache lacks them: about 6 s, paid by each of the many
# processes the suite starts on an empty cache. The CPU's own flags still choose the set; the suite's g++
# builds all of them. (The studio remembering that probe's answer: test_aot_package.py, with the probe on.)
os.environ.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "1")
# One AOTInductor build per exported graph for the whole suite, in this process and every process it starts
# (tests/startup/package_memo.py): the studio still compiles in each empty home; the C++ is paid once.
# Added once (dict.fromkeys): a test module that imports this one runs it again.
os.environ["PYTHONPATH"] = os.pathsep.join(
    filter(
        None,
        dict.fromkeys(
            [
                str(Path(__file__).resolve().parent / "startup"),
                *os.environ.get("PYTHONPATH", "").split(os.pathsep),
            ]
        ),
    )
)
os.environ["SUITE_PACKAGE_MEMO"] = os.path.join(os.environ["TORCHINDUCTOR_CACHE_DIR"], "packages")
# The studio's home for what tests do not point elsewhere (OpenVINO's conversions, mostly): never the
# checkout's ./studio-data, which belongs to the user's `make run`.
# Under pytest-xdist (`make test` runs two workers) each worker has its own.
os.environ["STUDIO_HOME"] = str(
    Path(__file__).resolve().parents[1]
    / ".pytest_cache"
    / "-".join(filter(None, ("studio-home", os.environ.get("PYTEST_XDIST_WORKER"))))
)
# Workers share the machine's cores: one intra-op thread each (and for the processes they start), or the
# workers' OpenMP threads spin against each other and every tensor operation waits (10-30x slower on two
# cores).
os.environ.update({"OMP_NUM_THREADS": "1"} if os.environ.get("PYTEST_XDIST_WORKER") else {})

import pytest
import torch

from studio import devices, settings
from tests import warm_python
from tests.startup import package_memo

INDUCTOR_CACHE = Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
package_memo.install()


# Inductor precompiles its C++ prefix header (a ~150 MB .gch; kernels compile ~4x faster with it) into
# /tmp/torchinductor_<user>/precompiled_headers whatever TORCHINDUCTOR_CACHE_DIR says. A build killed there
# leaves a truncated .gch that fails every later kernel compile on the machine, so the suite keeps its own
# next to its cache.
settings.precompiled_headers_in(INDUCTOR_CACHE / "precompiled_headers")


def pytest_report_header(config):
    from studio.devices import int8_path

    hw = devices.detect()
    return [
        f"cpu: {hw.cpu_name}, {hw.cpu_count} CPUs; int8_static path: {int8_path(hw.cpu_flags)}; "
        f"torch {torch.__version__}",
        f"inductor cache: {INDUCTOR_CACHE}",
    ]


def pytest_sessionfinish(session):
    """A worker hands its count of cold-started processes (tests/warm_python.py) to the summary."""
    if hasattr(session.config, "workeroutput"):
        session.config.workeroutput["cold_processes"] = dict(warm_python.COLD)
        session.config.workeroutput["started_processes"] = dict(warm_python.STARTED)


COLD_PROCESSES: collections.Counter[str] = collections.Counter()
STARTED_PROCESSES: collections.Counter[str] = collections.Counter()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    output = getattr(node, "workeroutput", {})
    COLD_PROCESSES.update(output.get("cold_processes", {}))
    STARTED_PROCESSES.update(output.get("started_processes", {}))


def pytest_terminal_summary(terminalreporter):
    """How many of the suite's processes started warm, and which environment variables made others start
    cold: a library that starts setting one in the test process turns every later process cold, seconds
    each."""
    started, cold = STARTED_PROCESSES + warm_python.STARTED, COLD_PROCESSES + warm_python.COLD
    if started:
        line = f"processes started by tests/warm_python.py: {started['warm']} warm, {started['cold']} cold"
        if cold:
            line += "; cold for their environment: " + ", ".join(f"{n} ({c})" for n, c in cold.most_common())
        terminalreporter.write_line(line)


def pytest_sessionstart(session):
    """`pytest -q` (make test) prints no header: the machine's line is written anyway, first."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and session.config.get_verbosity() < 0:
        for line in pytest_report_header(session.config):
            reporter.write_line(line)


# What a test file costs, for ordering the files longest first: the seconds its tests took in a full run
# (tests/file_seconds.json: the files of 8 s or more, from a full run's durations on the slowest CPU the suite
# runs on, a 2-core AMD EPYC Zen 3, cold caches; `python -m tests.file_seconds` refreshes it). A file not
# listed there is short and is costed by its markers (a test marked slow takes over ~10 s; a browser
# file starts a studio server and Chromium, ~12 s, once).
FILE_SECONDS = json.loads((Path(__file__).parent / "file_seconds.json").read_text())
SLOW_S, BROWSER_FILE_S, OTHER_S = 10.0, 12.0, 0.2


def _expected_seconds(name: str, items: list[pytest.Item]) -> float:
    if name in FILE_SECONDS:
        return FILE_SECONDS[name]
    browser = any(item.get_closest_marker("browser") for item in items)
    slow = sum(1 for item in items if item.get_closest_marker("slow"))
    return BROWSER_FILE_S * browser + SLOW_S * slow + OTHER_S * (len(items) - slow)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Test files longest first, each file's tests in their own order. `make test`'s workers take whole files
    (`--dist loadfile --no-loadscope-reorder`) in this order: the long ones start at once, and the last files
    to start are short ones, so no worker idles through another's long file at the end."""
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::")[0], []).append(item)
    cost = {name: _expected_seconds(name, tests) for name, tests in files.items()}
    items[:] = [item for name in sorted(files, key=lambda n: -cost[n]) for item in files[name]]


@pytest.fixture(autouse=True)
def _fresh_hardware():
    devices.detect.cache_clear()
    yield
    devices.detect.cache_clear()


@pytest.fixture
def fake_gpus(monkeypatch):
    """Pretend the machine has N functional CUDA GPUs of a given compute capability."""

    def install(count: int = 2, major: int = 8):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        gpus = tuple(devices.GPU(i, f"Fake GPU {i}", 24 * 2**30, (major, 0)) for i in range(count))
        monkeypatch.setattr(devices, "_probe_cuda", lambda: (True, "ok", gpus))
        devices.detect.cache_clear()
        return devices.detect()

    return install


@pytest.fixture
def studio(tmp_path):
    from studio.engine import Studio

    return Studio(db_path=tmp_path / "runs.db", outputs=tmp_path / "out")


@pytest.fixture
def runlog(tmp_path):
    """An empty run log at runs.db in the test's directory, where the `studio` fixture keeps its own."""
    from studio.optimizations import REGISTRY
    from studio.runlog import RunLog

    return RunLog(tmp_path / "runs.db", techniques=tuple(REGISTRY))


@pytest.fixture
def one_torch_thread():
    """Two intra-op threads on a shared two-core machine run 10-30x slower; for tests that time nothing."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def cli_at(monkeypatch, capsys):
    """`cli_at(home)`: a function that runs the CLI in-process on the studio home `home` (its database, its
    outputs) and answers (exit status, stdout, stderr)."""
    from studio.cli import main

    def at(home: Path):
        monkeypatch.setenv("STUDIO_HOME", str(home))
        for name in ("STUDIO_DB", "STUDIO_OUTPUTS"):
            monkeypatch.delenv(name, raising=False)

        def run(*args: str) -> tuple[int, str, str]:
            capsys.readouterr()
            try:
                status = main(list(args))
            except SystemExit as exc:  # argparse
                status = exc.code
            out, err = capsys.readouterr()
            return status, out, err

        return run

    return at


@pytest.fixture
def cli(cli_at, tmp_path):
    """Run the CLI in-process on a database under tmp_path: (exit status, stdout, stderr)."""
    return cli_at(tmp_path)
