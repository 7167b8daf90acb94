"""One door to a generation request: every face, script and test builds one with `build_request`, in the
request's words (`optimizations`, `batch`, ...). The checks behind it belong to `studio/request/` alone."""

from __future__ import annotations

import os
from pathlib import Path

import studio.request

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "studio" / "request"
# The inner checker's former public name, written in two pieces so that this file does not hold it.
OLD_NAME = "validate" + "_request"
INNER = "_validated"  # studio.request.generation's checks, which only build_request calls


def python_files_outside_the_package() -> list[Path]:
    """Every .py file of the checkout but those of studio/request/ (hidden folders, the virtual environment
    and the caches left out)."""
    found = []
    for folder, subfolders, files in os.walk(ROOT):
        subfolders[:] = [d for d in subfolders if not d.startswith(".") and d != "__pycache__"]
        here = Path(folder)
        if here == PACKAGE or PACKAGE in here.parents:
            continue
        found.extend(here / name for name in files if name.endswith(".py"))
    return sorted(found)


def test_nothing_outside_the_request_package_names_the_inner_checks():
    files = python_files_outside_the_package()
    for expected in ("studio/cli/__init__.py", "benchmarks/gpu/common.py", "tests/tiny.py", "app.py"):
        assert ROOT / expected in files, f"{expected} is not scanned"
    offenders = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in files
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if OLD_NAME in line or f"import {INNER}" in line or f", {INNER}" in line or f".{INNER}(" in line
    ]
    assert not offenders, "Build requests with studio.request.build_request:\n" + "\n".join(offenders)


def test_the_package_exports_only_the_door():
    assert "build_request" in studio.request.__all__
    assert OLD_NAME not in studio.request.__all__ and not hasattr(studio.request, OLD_NAME)
    assert INNER not in studio.request.__all__


def test_the_command_line_goes_through_the_door():
    """The CLI's and the distributed launcher's request is built from argv by `build_request`."""
    import argparse

    from studio.request.fields import request_from_args

    args = argparse.Namespace(
        model="tiny-shapes",
        prompt="a red circle",
        negative_prompt="",
        seed=1,
        steps=2,
        guidance=None,
        width=None,
        height=None,
        scheduler=None,
        device="cpu",
        setting=["deepcache.interval=2"],
        batch=2,
    )
    request = request_from_args(args, ["bf16", "deepcache"])
    assert request.config_label == "bf16+deepcache[interval=2]" and request.batch == 2
    assert request == studio.request.build_request(
        model="tiny-shapes",
        prompt="a red circle",
        seed=1,
        steps=2,
        device="cpu",
        precision="bf16",
        optimizations="deepcache",
        settings={"deepcache": {"interval": "2"}},
        batch=2,
    )
