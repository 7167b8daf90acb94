"""The processes the suite starts warm (tests/warm_python.py) behave as new interpreters do: their own pid,
arguments, working folder, environment and standard streams, exit statuses and signals; and a process that a
warm start would change (another environment, folder or interpreter option) starts cold."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import psutil
import pytest

from tests import warm_python
from tests.warm_python import ROOT

PY = sys.executable
needs_warm = pytest.mark.skipif(
    not warm_python.POSSIBLE, reason="warm starts need OMP_NUM_THREADS=1 (make test)"
)


def parent_of(process: subprocess.Popen) -> int:
    return psutil.Process(process.pid).ppid()


@needs_warm
def test_a_warm_process_gets_its_arguments_folder_environment_and_streams():
    env = {**os.environ, "STUDIO_WARM_CHECK": "yes"}
    code = (
        "import os, sys\n"
        "print(sys.argv, os.getcwd(), os.environ['STUDIO_WARM_CHECK'], sys.stdin.read().upper())\n"
        "print('to stderr', file=sys.stderr)\n"
        "sys.exit(3)"
    )
    done = warm_python.run(
        [PY, "-c", code, "a", "b"], cwd=ROOT, env=env, input="hi", capture_output=True, text=True
    )
    assert done.returncode == 3
    assert done.stdout == f"['-c', 'a', 'b'] {ROOT} yes HI\n"
    assert done.stderr == "to stderr\n"


@needs_warm
def test_python_dash_m_runs_the_module_as_main_or_says_it_is_missing():
    done = warm_python.run([PY, "-m", "studio", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("usage: python -m studio"), done.stdout[:200]
    done = warm_python.run([PY, "-m", "tests.no_such_module"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 1 and "No module named tests.no_such_module" in done.stderr, done.stderr


@needs_warm
def test_an_uncaught_exception_prints_its_traceback_and_exits_1():
    done = warm_python.run([PY, "-c", "raise ValueError('boom')"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stderr.startswith("Traceback") and done.stderr.strip().endswith("ValueError: boom")


@needs_warm
def test_a_warm_process_is_signalled_and_waited_for_as_any_other():
    process = warm_python.Popen([PY, "-c", "import time; time.sleep(60)"], cwd=ROOT)
    try:
        assert parent_of(process) != os.getpid(), "forked from the warm Python"
        with pytest.raises(subprocess.TimeoutExpired):
            process.wait(timeout=0.2)
        assert process.poll() is None
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == -signal.SIGTERM
    finally:
        process.kill()
    with pytest.raises(subprocess.TimeoutExpired):
        warm_python.run([PY, "-c", "import time; time.sleep(60)"], cwd=ROOT, timeout=0.5)


@needs_warm
def test_processes_run_side_by_side():
    """Three processes waiting for a line each: all three are running before any is told to finish."""
    code = "import sys; print('started', flush=True); sys.stdin.readline()"
    pipe = subprocess.PIPE
    waiting = [
        warm_python.Popen([PY, "-c", code], cwd=ROOT, stdin=pipe, stdout=pipe, text=True) for _ in "abc"
    ]
    assert [p.stdout.readline() for p in waiting] == ["started\n"] * 3
    assert [p.poll() for p in waiting] == [None] * 3
    assert len({p.pid for p in waiting}) == 3 and all(parent_of(p) != os.getpid() for p in waiting)
    for p in waiting:
        p.stdin.write("done\n")
        p.stdin.flush()
    assert [p.wait(timeout=60) for p in waiting] == [0, 0, 0]


@pytest.mark.parametrize(
    ("args", "where", "env"),
    [
        ([PY, "-c", "pass"], ROOT, {"HOME": "/nowhere"}),  # read when libraries are imported
        ([PY, "-c", "pass"], ROOT, {"OMP_NUM_THREADS": "7"}),
        ([PY, "-c", "pass"], ROOT.parent, {}),  # another folder may hold another studio
        ([PY, "-X", "importtime", "-c", "pass"], ROOT, {}),
        (["/bin/true"], ROOT, {}),
    ],
)
def test_a_process_a_warm_start_would_change_starts_cold(args, where, env):
    process = warm_python.Popen(args, cwd=where, env={**os.environ, **env}, stderr=subprocess.DEVNULL)
    assert parent_of(process) == os.getpid(), "this process's own child (a zombie until waited for)"
    assert process.wait(timeout=120) == 0
