"""The compiled package (aot_package): compiled once, loaded compiled by a new pipeline, exact revert, and the
faults of kept packages (truncated, foreign, another environment, a home that cannot be written, a full disk),
each a sentence and a compile instead."""

from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from pipelines import loader
from studio import devices, phases
from studio.errors import ValidationError
from studio.manager import PipelineManager
from studio.measure.quality import max_abs_diff
from studio.optimizations import Context, packages
from studio.optimizations.aot_package import INDUCTOR_CONFIGS, PackagedModule
from tests.tiny import run
from tests.tiny import technique_request as request

pytestmark = pytest.mark.slow  # C++ compiles


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    folder = tmp_path_factory.mktemp("package-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("STUDIO_HOME", str(folder))
        yield folder


def _events(prepared) -> list[dict]:
    return [e for e in prepared.entry.stats.get(phases.PHASES, []) if e["technique"] == "aot_package"]


def test_package_matches_eager_then_loads_compiled_and_reverts(home, manager, baseline):
    req = request(["aot_package"])
    images, prepared = run(manager, req)
    assert type(prepared.pipe.unet).__name__ == "PackagedModule"
    assert [e["phase"] for e in _events(prepared)] == ["cold"], "the first call compiles the UNet's package"
    assert max_abs_diff(images, baseline) <= 1e-4
    kept = packages.listing()
    assert len(kept) == 1 and kept[0]["part"] == "UNet" and kept[0]["size_mb"] < 50, kept
    # A technique may move weights to new storage between two applies (channels_last does, and back to
    # another): the package the first apply loaded, kept for the next, must read the weights as they are then.
    conv = prepared.pipe.unet.original.conv_in.weight
    original = conv.data
    conv.data = original * 2
    try:
        doubled, _ = run(manager, request())
        reapplied, prepared = run(manager, req)
        assert not _events(prepared), "the second apply reuses the package the first loaded"
        assert max_abs_diff(reapplied, doubled) <= 1e-4, "the kept package reads this apply's weights"
    finally:
        conv.data = original

    fresh = PipelineManager(
        load=loader.load
    )  # what a new process meets: the package on disk, nothing compiled
    again, prepared = run(fresh, req)
    assert [e["phase"] for e in _events(prepared)] == ["package"]
    assert not prepared.entry.stats.get("compile_count"), "a kept package is loaded, not compiled"
    assert np.array_equal(again, images), "the loaded package computes what the compiled one did"

    reverted, prepared = run(fresh, request())
    assert np.array_equal(reverted, baseline), "revert puts the loaded UNet back exactly"
    assert type(prepared.pipe.unet).__name__ == "UNet2DConditionModel"


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, sample, timestep, scale=None):
        return torch.relu(self.linear(sample)) * timestep + (0 if scale is None else scale)


def _ctx(stats: dict, **settings) -> Context:
    return Context(
        device="cpu",
        hw=devices.detect(),
        target=frozenset({"aot_package"}),
        technique_settings={"aot_package": settings} if settings else {},
        stats=stats,
    )


def _call(module: torch.nn.Module, stats: dict, **settings) -> tuple[torch.Tensor, list[dict]]:
    packed = PackagedModule(module, _ctx(stats, **settings), "test part")
    x = torch.arange(16, dtype=torch.float32).reshape(2, 8)
    return packed(x, 3), phases.since(stats.get(phases.PHASES, []), 0)


@pytest.fixture(scope="module")
def small(home):
    """A small module and its package, compiled once for the fault tests (a copy of it is what a test's
    stand-in compile writes, so only this fixture pays a C++ build)."""
    torch.manual_seed(0)  # the same values each run: the suite's package memo serves this build again
    module = Small().eval()
    stats: dict = {}
    out, events = _call(module, stats)
    assert [e["phase"] for e in events] == ["cold"]
    (folder,) = [
        p.parent
        for p in packages.cache_root().glob("*/package.pt2")
        if "test part" in p.parent.joinpath("package.json").read_text()
    ]
    return module, out, folder


@pytest.fixture
def stand_in_compile(monkeypatch, small):
    """aoti_compile_and_package replaced by a copy of the small module's package: counts the compiles."""
    compiles = []

    def compile_(exported, package_path=None, inductor_configs=None):
        compiles.append(package_path)
        inductor_configs["aot_inductor.package"] = True  # as torch's own does to the dict it is handed
        shutil.copy(small[2] / "package.pt2", package_path)
        return package_path

    monkeypatch.setattr(torch._inductor, "aoti_compile_and_package", compile_)
    return compiles


def test_a_build_leaves_the_studios_inductor_settings_as_they_were(
    small, stand_in_compile, tmp_path, monkeypatch
):
    monkeypatch.setenv("STUDIO_HOME", str(tmp_path))
    before = dict(INDUCTOR_CONFIGS)
    _call(small[0], {})
    assert len(stand_in_compile) == 1
    assert INDUCTOR_CONFIGS == before, "the next build must read the same settings"


def test_the_timestep_as_a_number_is_an_input_not_a_constant(small):
    module, out, _ = small
    x = torch.arange(16, dtype=torch.float32).reshape(2, 8)
    packed = PackagedModule(module, _ctx({}), "test part")
    assert torch.allclose(packed(x, 5), module(x, 5)), "a timestep baked in at 3 would give 3's output"
    assert torch.allclose(out, module(x, 3))


def test_a_package_built_twice_on_one_warm_inductor_cache_computes_the_inputs_it_is_given(small):
    """A package reads most of the live module's tensors but holds some inside its compiled code (the
    Linear's bias here): a module of the same architecture with other values is not served by it (it would
    compute with the first module's bias) but compiled for, saying why; the first module is served again.
    The second build runs on the inductor cache the first one warmed (the suite keeps it between runs): its
    package computes the input, the timestep and the tensors it is given, not the first build's."""
    module, _, _ = small
    x = torch.arange(16, dtype=torch.float32).reshape(2, 8)
    torch.manual_seed(1)
    other = Small().eval()
    out, events = _call(other, {})
    assert [e["phase"] for e in events] == ["cold"], "not served by the first module's package"
    assert "whose tensors it holds itself (linear.bias) had other values" in events[0]["note"], events
    assert torch.allclose(out, other(x, 3)), "it computes with its own tensors"
    again, events = _call(other, {})
    assert [e["phase"] for e in events] == ["package"] and torch.equal(again, out)
    packed, y = PackagedModule(other, _ctx({}), "test part"), torch.randn(2, 8)
    assert torch.allclose(packed(y, 7), other(y, 7)), "another input and timestep than the build's"
    assert torch.allclose(PackagedModule(module, _ctx({}), "test part")(y, 7), module(y, 7))


def test_a_truncated_package_is_named_removed_and_compiled_again(
    small, stand_in_compile, tmp_path, monkeypatch
):
    module, out, folder = small
    monkeypatch.setenv("STUDIO_HOME", str(tmp_path))
    shutil.copytree(folder, packages.cache_root() / folder.name)
    kept = packages.cache_root() / folder.name / "package.pt2"
    kept.write_bytes(kept.read_bytes()[:1000])
    again, events = _call(module, {})
    assert [e["phase"] for e in events] == ["cold"] and len(stand_in_compile) == 1
    assert "could not be loaded" in events[0]["note"] and "compiled again" in events[0]["note"]
    assert torch.equal(again, out)
    assert kept.stat().st_size > 1000, "the damaged package was replaced by the new build"


def test_a_package_for_another_environment_is_refused_with_a_sentence(small, stand_in_compile, tmp_path):
    module, out, folder = small
    source = tmp_path / "published"
    shutil.copytree(folder, source / folder.name)
    meta = json.loads((source / folder.name / "package.json").read_text())
    meta["environment"] = {"torch": "2.0.0", "device": "cuda", "capability": "9.0"}
    (source / folder.name / "package.json").write_text(json.dumps(meta))
    again, events = _call(module, {}, source=str(source))
    assert events[0]["phase"] == "package", "the studio's own kept package serves instead"
    assert "was built for torch 2.0.0 on cuda (compute capability 9.0)" in events[0]["note"]
    assert not stand_in_compile and torch.equal(again, out)


def test_a_published_package_is_loaded_from_its_folder(small, stand_in_compile, tmp_path, monkeypatch):
    module, out, folder = small
    source = tmp_path / "published"
    shutil.copytree(folder, source / folder.name)
    monkeypatch.setenv("STUDIO_HOME", str(tmp_path / "empty-home"))
    again, events = _call(module, {}, source=str(source))
    assert [e["phase"] for e in events] == ["package"] and not stand_in_compile
    assert torch.equal(again, out)


def test_a_home_that_cannot_be_written_still_runs(small, stand_in_compile, tmp_path, monkeypatch):
    module, out, _ = small
    blocker = tmp_path / "home-is-a-file"
    blocker.write_text("")
    monkeypatch.setenv("STUDIO_HOME", str(blocker))
    again, events = _call(module, {})
    assert "could not be kept" in events[0]["note"] and torch.equal(again, out)


def test_a_disk_that_fills_while_saving_still_runs(small, stand_in_compile, tmp_path, monkeypatch):
    module, out, _ = small
    monkeypatch.setenv("STUDIO_HOME", str(tmp_path))
    real_replace = packages.os.replace

    def full(src, dst):
        if Path(dst).parent == packages.cache_root():
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(packages.os, "replace", full)
    again, events = _call(module, {})
    assert "No space left on device" in events[0]["note"] and torch.equal(again, out)
    assert not list(packages.cache_root().glob("*/package.pt2")), "no half entry is left behind"


def test_a_source_that_is_not_a_folder_is_refused_before_any_compile(tmp_path):
    from studio.optimizations import get

    with pytest.raises(ValidationError, match="aot_package source .* is neither a folder here nor a Hugging"):
        get("aot_package").settings(source=str(tmp_path / "missing"))
    assert get("aot_package").settings(source="someone/studio-cards").source == "someone/studio-cards"


def test_the_cpu_probe_is_remembered_only_where_every_declared_set_passed(tmp_path, monkeypatch):
    from torch._inductor import config, cpu_vec_isa

    with config.patch({"cpp.vec_isa_ok": None}):  # the probe on, as in a user's process
        before = config.cpp.vec_isa_ok
        cpu_vec_isa.valid_vec_isa_list.cache_clear()
        packages.skip_known_isa_probe(tmp_path)
        noted = json.loads((tmp_path / packages.ISA_FILE).read_text())
        assert noted["valid"] == [str(i) for i in cpu_vec_isa.valid_vec_isa_list()]
        if noted["valid"] != noted["declared"] or not noted["declared"]:
            pytest.skip("a declared instruction set failed its probe here: nothing is remembered")
        probed = []
        monkeypatch.setattr(cpu_vec_isa.VecISA, "check_build", lambda self, code: probed.append(self) or True)
        cpu_vec_isa.valid_vec_isa_list.cache_clear()
        packages.skip_known_isa_probe(tmp_path)
        assert not probed and [str(i) for i in cpu_vec_isa.valid_vec_isa_list()] == noted["valid"]
        assert config.cpp.vec_isa_ok == before, (
            "inductor's config is left as it was (torch.compile's keys read it)"
        )
        (tmp_path / packages.ISA_FILE).write_text(json.dumps({**noted, "valid": noted["valid"][1:]}))
        cpu_vec_isa.valid_vec_isa_list.cache_clear()
        packages.skip_known_isa_probe(tmp_path)
        rewritten = json.loads((tmp_path / packages.ISA_FILE).read_text())
        assert rewritten["valid"] == noted["valid"], (
            "a set that failed its probe is probed again, and noted anew"
        )
        cpu_vec_isa.valid_vec_isa_list.cache_clear()


def test_the_architecture_digest_is_the_same_in_every_process():
    """A model built in code (the *-arch models) lists its config's defaulted keys from a set, whose order
    changes with each process's hash seed: the digest must not, or no later process finds the package. Two
    processes with hash seeds of their own, and this one."""
    import os
    import subprocess
    import sys

    import torch

    from pipelines.architectures import models
    from studio.optimizations import packages

    probe = (
        "import torch\nfrom pipelines.architectures import models\n"
        "from studio.optimizations import packages\n"
        "with torch.device('meta'):\n    print(packages.architecture(models('sd15')['unet']))"
    )
    root = Path(__file__).resolve().parents[2]
    probes = [  # side by side: each process's time is its imports
        subprocess.Popen(
            [sys.executable, "-c", probe],
            cwd=root,
            env={**os.environ, "PYTHONHASHSEED": seed},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in ("1", "2")
    ]
    with torch.device("meta"):
        here = packages.architecture(models("sd15")["unet"])
    answers = [process.communicate(timeout=300) for process in probes]
    assert [process.returncode for process in probes] == [0, 0], [err[-2000:] for _, err in answers]
    digests = {here, *(out.strip() for out, _ in answers)}
    assert len(digests) == 1, digests


def test_compare_says_which_phase_a_configurations_first_call_paid(home, tmp_path):
    """Compare's record of a compiled configuration carries the phase its warm-up paid (the package loaded in
    a new studio, or compiled where none is kept), as its run in the run log does."""
    from studio.engine import Studio
    from studio.sweeps.compare import run_compare

    studio = Studio(db_path=tmp_path / "runs.db", outputs=tmp_path / "out")  # nothing compiled in memory
    result = run_compare(studio, request(), ["aot_package"], warmup=1, rounds=1)
    base, packaged = result.records
    assert base["first_call_phase"] is None
    assert packaged["first_call_phase"] in ("package", "cold") and packaged["prepare_s"] > 0, packaged
    assert studio.runlog.get_run(packaged["run_id"])["first_call_phase"] == packaged["first_call_phase"]
