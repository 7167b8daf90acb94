"""The command line's stdout carries only the command's result: `--json` output parses even when a library
prints progress bars on stdout (NNCF's, on a cold OpenVINO cache), from Python or from native code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from studio import cli
from tests import warm_python

ROOT = Path(__file__).resolve().parent.parent
BAR = "Applying Weight Compression ━━━━━━━━━━ 100%"


def _start(*args: str, home: Path, code: str | None = None) -> subprocess.Popen:
    env = dict(os.environ, STUDIO_HOME=str(home), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    argv = [sys.executable, "-c", code, *args] if code else [sys.executable, "-m", "studio", *args]
    pipe = subprocess.PIPE
    return warm_python.Popen(argv, cwd=ROOT, env=env, stdout=pipe, stderr=pipe, text=True)


def _done(process: subprocess.Popen) -> subprocess.CompletedProcess:
    out, err = process.communicate(timeout=600)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def _run(*args: str, home: Path, code: str | None = None) -> subprocess.CompletedProcess:
    return _done(_start(*args, home=home, code=code))


def test_a_commands_chatter_goes_to_stderr_and_its_result_alone_to_stdout(tmp_path):
    """A command whose libraries print on stdout, through Python and straight to descriptor 1."""
    code = (
        "import os, sys\n"
        "from studio import cli\n"
        "def noisy(args):\n"
        f"    print({BAR!r})\n"
        f"    os.write(1, ({BAR!r} + '\\n').encode())\n"
        "    cli.emit({'ok': True}, args.json, 'ok')\n"
        "    return 0\n"
        "cli.COMMANDS['system'] = noisy\n"
        "sys.exit(cli.main(sys.argv[1:]))\n"
    )
    done = _run("system", "--json", home=tmp_path, code=code)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"ok": True}
    assert done.stderr.count(BAR) == 2


def test_in_process_the_result_still_reaches_the_callers_stdout(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("STUDIO_HOME", str(tmp_path))
    assert cli.main(["optimizations", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {"name", "unavailable"} <= set(rows[0])


@pytest.mark.slow
def test_json_output_parses_while_an_openvino_build_runs_on_a_cold_cache(tmp_path):
    pytest.importorskip("nncf")
    small = (
        "--model",
        "tiny-shapes",
        "--prompt",
        "a red circle",
        "--steps",
        "2",
        "--width",
        "32",
        "--height",
        "32",
        "--json",
    )
    setting = ("--setting", "openvino.mode=int8_weights")
    config = "openvino[mode=int8_weights]"
    # side by side, each on its own cold cache: each process's time is its imports and its build
    generate = _start("generate", *small, "--opt", "openvino", *setting, home=tmp_path / "a")
    compare = _start("compare", *small, "--config", config, "--rounds", "1", home=tmp_path / "b")
    done = _done(generate)
    assert done.returncode == 0, done.stderr[-2000:]
    run = json.loads(done.stdout)
    assert run["applied"] == ["openvino"] and run["run_id"] >= 1
    done = _done(compare)
    assert done.returncode == 0, done.stderr[-2000:]
    assert [r["config"] for r in json.loads(done.stdout)["rows"]] == ["baseline", config]
