"""torch_compile keeps its work across processes (studio.optimizations.compile_cache): the first build is
cold and saved under the studio's home; a process that starts with an empty inductor cache loads the saved
artifacts and builds warm. Damaged files, a folder that cannot be written and a full disk are said in a
warning, and the compile still runs. Each test compiles a one-layer module (a fraction of a second), in its
own studio home and its own empty inductor cache."""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import os
import subprocess
import sys
import textwrap
import time
from contextlib import ExitStack
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch._inductor.utils import fresh_cache
from torch.compiler._cache import CacheArtifactManager

from studio import devices, phases
from studio.optimizations import compile_cache
from studio.optimizations.base import Context, get
from studio.optimizations.counting import counting_backend, counting_into

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def new_process(tmp_path, monkeypatch):
    """A studio home and an inductor cache of the test's own, and torch's state as a new process has it."""
    monkeypatch.setenv("STUDIO_HOME", str(tmp_path / "home"))
    compile_cache.forget()
    torch._dynamo.reset()
    with CacheArtifactManager.with_fresh_cache(), fresh_cache(dir=str(tmp_path)):
        yield
    compile_cache.forget()
    torch._dynamo.reset()


def restart(tmp_path: Path) -> ExitStack:
    """What a new process starts with: no graphs, nothing loaded or recorded, an empty inductor cache (so
    that a warm build can only come from the saved artifacts)."""
    compile_cache.forget()
    torch._dynamo.reset()
    stack = ExitStack()
    stack.enter_context(CacheArtifactManager.with_fresh_cache())
    stack.enter_context(fresh_cache(dir=str(tmp_path)))
    return stack


def compiled_call(batch: int = 3, pipe: SimpleNamespace | None = None):
    """torch_compile applied to a pipeline whose denoiser is one linear layer, called once at `batch`:
    (its context, whether it drew what eager draws, the pipeline)."""
    if pipe is None:
        torch.manual_seed(0)
        pipe = SimpleNamespace(unet=torch.nn.Sequential(torch.nn.Linear(8, 4)))
        pipe.ctx = Context(device="cpu", hw=devices.detect())
        pipe.eager = pipe.unet
        get("torch_compile").apply(pipe, pipe.ctx)
    sample = torch.randn(batch, 8)
    with torch.no_grad():
        same = torch.allclose(pipe.unet(sample), pipe.eager(sample), atol=1e-5)
    return pipe.ctx, same, pipe


def saved() -> list[Path]:
    return sorted(compile_cache.folder().glob("*.bin"))


def events(stats: dict) -> list[dict]:
    return phases.since(stats.get(phases.PHASES, []), 0)


def built_phases(ctx: Context) -> list[str]:
    return [event["phase"] for event in events(ctx.stats)]


def test_a_saved_build_is_loaded_warm_into_an_empty_inductor_cache(tmp_path):
    ctx, same, _ = compiled_call()
    assert same and built_phases(ctx) == ["cold"], "nothing kept yet: inductor compiles from nothing"
    assert [e["what"] for e in events(ctx.stats)] == ["Sequential at 3x8"]
    assert len(saved()) == 1 and saved()[0].name.startswith(compile_cache.machine_key(ctx.hw, "cpu"))
    with restart(tmp_path):
        ctx, same, _ = compiled_call()
    assert same and built_phases(ctx) == ["warm"], "the saved artifacts served the build"
    assert len(saved()) == 1, "the same artifacts saved again replace their file"


def test_a_process_that_builds_more_supersedes_the_file_it_loaded(tmp_path):
    compiled_call(batch=3)
    first = saved()
    with restart(tmp_path):
        ctx, _, pipe = compiled_call(batch=3)
        compiled_call(batch=5, pipe=pipe)  # a second shape: a recompile, with symbolic sizes
    assert built_phases(ctx) == ["warm", "cold"]
    assert len(saved()) == 1 and saved() != first, "one file holds what both processes built"
    with restart(tmp_path):
        ctx, _, pipe = compiled_call(batch=3)
        compiled_call(batch=5, pipe=pipe)
    assert built_phases(ctx) == ["warm", "warm"]


def test_the_folder_keeps_the_newest_files_and_drops_stale_temporary_ones():
    root = compile_cache.folder()
    root.mkdir(parents=True)
    files = [root / f"torch-x-cpu-{n:02d}.bin" for n in range(compile_cache.MAX_FILES + 2)]
    stale, fresh = root / ".stale.tmp", root / ".being-written.tmp"
    for age, path in enumerate(reversed([*files, stale, fresh])):
        path.write_bytes(b"x")
        os.utime(path, (time.time() - 7200 + age, time.time() - 7200 + age))
    os.utime(fresh)
    gone = compile_cache.prune()
    assert sorted(gone) == sorted([*files[-2:], stale])
    assert sorted(saved()) == files[:-2] and fresh.exists()


def test_the_machine_key_holds_torch_the_device_and_its_kernels(fake_gpus):
    hw = devices.detect()
    cpu = compile_cache.machine_key(hw, "cpu")
    assert cpu.startswith(f"torch-{torch.__version__.split('+')[0]}-cpu-")
    other_cpu = dataclasses.replace(hw, cpu_flags=hw.cpu_flags ^ {"avx512f"})
    assert compile_cache.machine_key(other_cpu, "cpu") != cpu
    ampere, hopper = fake_gpus(count=1, major=8), fake_gpus(count=1, major=9)
    assert compile_cache.machine_key(ampere, "cuda") != compile_cache.machine_key(hopper, "cuda")
    assert compile_cache.machine_key(ampere, "cuda").split("-")[2] == "cuda"


def _truncated(data: bytes) -> bytes:
    return data[: len(data) // 2]


def _foreign(data: bytes) -> bytes:
    return b"\x7fELF" + os.urandom(64)


def _other_torch(data: bytes) -> bytes:
    line, _, payload = data.partition(b"\n")
    return json.dumps({**json.loads(line), "torch": "2.0.0"}).encode() + b"\n" + payload


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (_truncated, "truncated or damaged"),
        (_foreign, "not a compile cache file"),
        (_other_torch, "torch '2.0.0'"),
    ],
)
def test_a_file_that_cannot_be_loaded_is_said_deleted_and_compiled_around(tmp_path, caplog, damage, said):
    compiled_call()
    (path,) = saved()
    path.write_bytes(damage(path.read_bytes()))
    with restart(tmp_path), caplog.at_level(logging.WARNING, logger=compile_cache.__name__):
        ctx, same, _ = compiled_call()
    warnings = [r.getMessage() for r in caplog.records if r.name == compile_cache.__name__]
    assert len(warnings) == 1 and str(path) in warnings[0] and said in warnings[0], warnings
    assert same and built_phases(ctx) == ["cold"], "compiled from nothing, and right"
    assert [p.name for p in saved()] != [] and path.read_bytes()[:1] == b"{", "a good file took its place"


class FullDisk:
    """`os` for compile_cache, whose files fill the disk halfway through writing."""

    replace = staticmethod(os.replace)

    @staticmethod
    def fdopen(handle: int, mode: str):
        real = os.fdopen(handle, mode)
        write = real.write

        def half_then_full(data: bytes) -> int:
            write(data[: len(data) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        real.write = half_then_full
        return real


def test_a_full_disk_keeps_the_previous_file_and_the_compile(monkeypatch, caplog):
    ctx, _, pipe = compiled_call(batch=3)
    (before,) = saved()
    kept = before.read_bytes()
    monkeypatch.setattr(compile_cache, "os", FullDisk)
    with caplog.at_level(logging.WARNING, logger=compile_cache.__name__):
        _, same, _ = compiled_call(batch=5, pipe=pipe)
    assert same and ctx.stats["compile_count"] == 2, "the new shape compiled and ran"
    warnings = [r.getMessage() for r in caplog.records if r.name == compile_cache.__name__]
    assert len(warnings) == 1 and "the disk is full" in warnings[0], warnings
    assert saved() == [before] and before.read_bytes() == kept, "the file saved before is whole"
    assert not list(compile_cache.folder().glob(".*.tmp")), "no half-written file is left"


def test_a_folder_that_cannot_be_written_is_said_and_the_compile_runs(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("STUDIO_HOME", str(blocker / "home"))
    with caplog.at_level(logging.WARNING, logger=compile_cache.__name__):
        ctx, same, _ = compiled_call()
    assert same and built_phases(ctx) == ["cold"]
    warnings = [r.getMessage() for r in caplog.records if r.name == compile_cache.__name__]
    assert len(warnings) == 1 and "could not be saved" in warnings[0] and str(blocker) in warnings[0], (
        warnings
    )


def test_the_counting_backend_records_phases_only_for_a_named_technique():
    """A build counted without a technique name records no phase; outside `counting_into` nothing counts."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 4))
    unnamed, named = {}, {}
    with torch.no_grad():
        with counting_into(unnamed):
            torch.compile(model, backend=counting_backend({}))(torch.randn(2, 8))
        torch._dynamo.reset()
        with counting_into(named):
            torch.compile(model, backend=counting_backend({}, technique="int8_static", what="the UNet"))(
                torch.randn(2, 8)
            )
        torch._dynamo.reset()
        torch.compile(model, backend=counting_backend({}, technique="int8_static", what="the UNet"))(
            torch.randn(2, 8)
        )
    assert unnamed["compile_count"] == 1 and phases.PHASES not in unnamed
    assert [(e["technique"], e["what"]) for e in events(named)] == [("int8_static", "the UNet at 2x8")]


SECOND_PROCESS = textwrap.dedent(
    """
    import json, types
    import torch
    from studio import devices
    from studio import phases
    from studio.optimizations.base import Context, get

    torch.manual_seed(0)
    pipe = types.SimpleNamespace(unet=torch.nn.Sequential(torch.nn.Linear(8, 4)))
    ctx = Context(device="cpu", hw=devices.detect())
    get("torch_compile").apply(pipe, ctx)
    with torch.no_grad():
        pipe.unet(torch.randn(3, 8))
    print(json.dumps(phases.since(ctx.stats.get(phases.PHASES, []), 0)))
    """
)


@pytest.mark.slow
def test_a_second_process_loads_the_artifacts_and_builds_warm(tmp_path):
    """Two new processes, each with an empty inductor cache: the first compiles (cold) and keeps its
    artifacts in the studio's home, the second builds from them (warm). Both are processes of their own, so
    what other tests left in this one cannot decide the result."""

    def process(cache: str) -> list[tuple[str, str]]:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / cache), "PYTHONPATH": str(ROOT)}
        done = subprocess.run(
            [sys.executable, "-c", SECOND_PROCESS],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return [(e["technique"], e["phase"]) for e in json.loads(done.stdout.strip().splitlines()[-1])]

    assert process("first-inductor-cache") == [("torch_compile", "cold")]
    assert process("empty-inductor-cache") == [("torch_compile", "warm")]
