"""The Hugging Face Space bundle: it builds, its README front matter parses and names files that exist,
nothing is uploaded without --upload, and the token never shows up in the output."""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipelines.registry import SPECS

ROOT = Path(__file__).resolve().parent.parent
SECRET = "hf_test_SECRET_value_that_must_never_be_printed"


def _load_script():
    spec = importlib.util.spec_from_file_location("build_space", ROOT / "spaces" / "build_space.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build_space = _load_script()


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> tuple[Path, list[tuple[str, int]]]:
    out = tmp_path_factory.mktemp("space")
    return out, build_space.build(out)


def _meta(folder: Path) -> dict:
    text = (folder / "README.md").read_text(encoding="utf-8")
    head = re.match(r"^---\n(.*?)\n---\n", text, re.DOTALL)
    assert head, "README.md must start with YAML front matter"
    return yaml.safe_load(head.group(1))


def test_front_matter_parses_and_names_files_that_exist(bundle):
    out, _ = bundle
    meta = _meta(out)
    assert meta["sdk"] == "gradio" and (out / meta["app_file"]).is_file() and meta["app_file"] == "app.py"
    requirements = (ROOT / "requirements.txt").read_text()
    pin = re.search(r"^gradio(?:\[[\w,]+\])?==(\S+)$", requirements, re.MULTILINE).group(1)
    assert meta["sdk_version"] == pin
    assert meta["python_version"] == "3.11"
    assert meta["suggested_hardware"].startswith("zero-")
    assert len(meta["short_description"]) <= 60
    assert build_space.check(out) == []


def test_models_are_the_registry_hub_models():
    meta = build_space.front_matter(ROOT / "spaces" / "README.md")
    assert sorted(meta["models"]) == sorted(s.source for s in SPECS.values() if not s.local)


def test_bundle_has_the_app_and_not_the_training_runs(bundle):
    out, files = bundle
    names = {rel for rel, _ in files}
    for needed in (
        "app.py",
        "requirements.txt",
        "README.md",
        "studio/engine/zerogpu.py",
        "studio/ui/__init__.py",
        "pipelines/registry.py",
        "assets/tiny-shapes/model_index.json",
        "assets/tiny-shapes/unet/diffusion_pytorch_model.safetensors",
    ):
        assert needed in names and (out / needed).is_file(), needed
    assert not [
        n for n in names if "/runs/" in n or "__pycache__" in n or n.endswith((".pt", ".ckpt", ".pyc"))
    ]
    assert not (out / "spaces").exists()
    assert (out / "README.md").read_text() == (ROOT / "spaces" / "README.md").read_text()


def test_check_reports_a_version_mismatch(bundle, tmp_path):
    out, _ = bundle
    for name in ("README.md", "app.py"):
        (tmp_path / name).write_text((out / name).read_text())
    (tmp_path / "requirements.txt").write_text("gradio==5.0.0\n")
    assert any("sdk_version" in p for p in build_space.check(tmp_path))


def test_dry_run_uploads_nothing_and_never_prints_the_token():
    env = dict(os.environ, HF_TOKEN=SECRET)
    run = subprocess.run(
        [sys.executable, str(ROOT / "spaces" / "build_space.py")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert "dry run: nothing uploaded" in run.stdout and "app.py" in run.stdout
    assert SECRET not in run.stdout + run.stderr


class FakeHfApi:
    instances: list[FakeHfApi] = []

    def __init__(self, token=None, **kwargs):
        self.token = token
        self.calls: list[tuple[str, dict]] = []
        FakeHfApi.instances.append(self)

    def create_repo(self, repo_id, **kwargs):
        self.calls.append(("create_repo", dict(kwargs, repo_id=repo_id)))

    def upload_folder(self, **kwargs):
        self.calls.append(("upload_folder", kwargs))
        return type(
            "CommitInfo", (), {"commit_url": f"https://huggingface.co/spaces/{kwargs['repo_id']}/commit/1"}
        )()


@pytest.fixture
def fake_hub(monkeypatch):
    import huggingface_hub

    FakeHfApi.instances = []
    monkeypatch.setattr(huggingface_hub, "HfApi", FakeHfApi)
    return FakeHfApi


def test_upload_uses_the_environment_token_and_never_shows_it(
    fake_hub, monkeypatch, tmp_path, capsys, caplog
):
    monkeypatch.setenv("HF_TOKEN", SECRET)
    with caplog.at_level(logging.DEBUG):
        assert (
            build_space.main(["--upload", "--repo", "me/diffusion-studio", "--out", str(tmp_path / "s")]) == 0
        )
    [api] = fake_hub.instances
    assert api.token == SECRET
    (create, created), (upload, uploaded) = api.calls
    assert create == "create_repo" and created["repo_type"] == "space" and created["space_sdk"] == "gradio"
    assert upload == "upload_folder" and uploaded["repo_type"] == "space"
    assert Path(uploaded["folder_path"]) == tmp_path / "s" and uploaded["repo_id"] == "me/diffusion-studio"
    printed = capsys.readouterr()
    assert "uploaded to https://huggingface.co/spaces/me/diffusion-studio" in printed.out
    assert SECRET not in printed.out + printed.err + caplog.text


def test_upload_without_a_token_is_refused_before_anything(fake_hub, monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    assert build_space.main(["--upload", "--repo", "me/diffusion-studio", "--out", str(tmp_path / "s")]) == 2
    assert "HF_TOKEN" in capsys.readouterr().err
    assert fake_hub.instances == [] and not (tmp_path / "s").exists()


def test_a_non_empty_output_directory_is_refused(tmp_path, capsys):
    (tmp_path / "old.txt").write_text("x")
    assert build_space.main(["--out", str(tmp_path)]) == 2
    assert "not empty" in capsys.readouterr().err


def test_a_cpu_space_carries_openvino_and_torchs_cpu_build(tmp_path):
    """The free CPU hardware gets OpenVINO (the fastest path measured on CPUs) and torch's CPU build; a GPU
    Space the extras that run there and no OpenVINO; each README names the hardware it was made for."""
    cpu, gpu = tmp_path / "cpu", tmp_path / "gpu"
    build_space.build(cpu, hardware="cpu-basic")
    build_space.build(gpu, hardware="zero-a10g")
    cpu_reqs, gpu_reqs = ((f / "requirements.txt").read_text() for f in (cpu, gpu))
    extras = (ROOT / "requirements-extras.txt").read_text()
    for name in ("openvino", "nncf", "tomesd", "torchao"):
        pin = re.search(rf"^{name}==\S+", extras, re.MULTILINE).group(0)
        assert pin in cpu_reqs
        assert (pin in gpu_reqs) == (name in ("tomesd", "torchao"))
    assert cpu_reqs.startswith("--extra-index-url") and "--extra-index-url" not in gpu_reqs
    assert (ROOT / "requirements.txt").read_text().rstrip() in gpu_reqs
    assert _meta(cpu)["suggested_hardware"] == "cpu-basic" and _meta(gpu)["suggested_hardware"] == "zero-a10g"
    assert build_space.check(cpu) == [] and build_space.check(gpu) == []


def test_a_zerogpu_space_ships_compiled_packages_its_workers_read_first(tmp_path):
    """A Space built with --packages carries them as packages/, which the bundle's studio reads before its own
    home: a request of that model asks ZeroGPU for no compile time, and its worker loads instead of compiling
    (tests/engine/test_zerogpu_packages.py runs that across a real fork)."""
    kept = tmp_path / "home" / "packages" / "0123abcd"
    kept.mkdir(parents=True)
    (kept / "package.pt2").write_bytes(b"compiled code")
    (kept / "package.json").write_text('{"format": 1, "model": "tiny-shapes", "part": "UNet"}')
    out = tmp_path / "space"
    build_space.build(out, hardware="zero-a10g", packages=tmp_path / "home" / "packages")
    assert (out / "packages" / "0123abcd" / "package.pt2").read_bytes() == b"compiled code"
    probe = (
        "import json; from studio.optimizations import packages; from studio.engine import zerogpu; "
        "print(json.dumps([[e['model'] for e in packages.listing(every_root=True)], "
        "zerogpu._package_kept('tiny-shapes'), zerogpu._package_kept('sd15')]))"
    )
    env = {**os.environ, "STUDIO_HOME": str(tmp_path / "space-home")}
    done = subprocess.run([sys.executable, "-c", probe], cwd=out, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == '[["tiny-shapes"], true, false]'
    with pytest.raises(FileNotFoundError, match="holds no compiled package"):
        build_space.build(tmp_path / "other", hardware="zero-a10g", packages=tmp_path)
