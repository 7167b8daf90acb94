"""A damaged entry in inductor's on-disk cache is deleted and rebuilt, with a warning naming it; nothing else
is retried or hidden. The damage is real: the shared object a compile is about to load is truncated on disk
(what a compile killed while writing it leaves), once, and the real loader then fails on it."""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from studio.optimizations import inductor_cache
from studio.optimizations.base import Context
from studio.optimizations.compile import _compile


class Block(torch.nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv = torch.nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x):
        return torch.nn.functional.gelu(self.conv(x)) + x


class Tiny(torch.nn.Module):
    """Odd sizes, so that no other test of this run has already loaded these kernels in this process."""

    _repeated_blocks = ("Block",)

    def __init__(self, channels: int = 5):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(channels)])  # one: each kernel is a C++ compile

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x.tanh()


class Pointwise(torch.nn.Module):
    """One fused kernel: each kernel compiled with a damaged precompiled header costs a failed compile and a
    rebuild."""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return torch.nn.functional.gelu(x * self.scale).tanh()


@pytest.fixture(autouse=True)
def own_home(tmp_path, monkeypatch):
    """A studio home of each test's own: torch.compile's kept artifacts from other runs would serve the
    kernels these tests need compiled."""
    monkeypatch.setenv("STUDIO_HOME", str(tmp_path / "home"))


@pytest.fixture
def damage_once(monkeypatch):
    """Truncate the first compiled kernel inductor loads from its cache directory, then let the real loader
    fail on it. Returns the list of damaged paths (one entry once it has happened)."""
    from torch._inductor.codecache import CppPythonBindingsCodeCache

    real = CppPythonBindingsCodeCache._load_library_inner.__func__
    damaged: list[Path] = []

    def load(cls, path, key):
        if not damaged and Path(path).resolve().is_relative_to(inductor_cache.cache_dir()):
            damaged.append(Path(path).resolve())
            with open(path, "r+b") as fh:
                fh.truncate(64)
        return real(cls, path, key)

    monkeypatch.setattr(CppPythonBindingsCodeCache, "_load_library_inner", classmethod(load))
    return damaged


def _warned_about(caplog, entry: Path) -> bool:
    return any(
        r.levelno == logging.WARNING and str(entry) in r.getMessage() and "deleting it" in r.getMessage()
        for r in caplog.records
    )


@pytest.mark.parametrize("regional", [False, True], ids=["whole", "regional"])
def test_torch_compile_rebuilds_a_truncated_kernel_and_says_which(damage_once, caplog, regional):
    torch.manual_seed(0)
    model = Tiny(channels=5 if regional else 7).eval()
    x = torch.randn(1, model.blocks[0].conv.in_channels, 11, 13)
    with torch.no_grad():
        expected = model(x)
    pipe = SimpleNamespace(unet=model)
    ctx = Context(device="cpu", hw=None, technique_settings={"torch_compile": {"regional": regional}})
    _compile(pipe, ctx)
    with caplog.at_level(logging.WARNING, logger=inductor_cache.__name__), torch.no_grad():
        out = pipe.unet(x)
    assert damage_once, "no kernel was loaded from the cache directory: the test did not engage"
    assert _warned_about(caplog, damage_once[0])
    assert damage_once[0].stat().st_size > 64, "the kernel was built again in place of the damaged one"
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)
    assert ctx.stats["compile_count"] >= 1


def test_int8_static_build_rebuilds_a_truncated_kernel(damage_once, caplog):
    pytest.importorskip("torchao")
    from studio.optimizations.static_quantization import Recipe, quantize_and_compile

    torch.manual_seed(0)
    model = Tiny(channels=6).eval()
    x = torch.randn(1, 6, 9, 9)
    with caplog.at_level(logging.WARNING, logger=inductor_cache.__name__):
        compiled = quantize_and_compile(model, (x,), lambda observed: observed(x), Recipe())
    assert damage_once and _warned_about(caplog, damage_once[0])
    with torch.no_grad():
        assert torch.isfinite(compiled(x)).all()


def test_a_truncated_precompiled_header_is_deleted_and_the_kernel_built_without_it(
    tmp_path, monkeypatch, caplog
):
    """What a header build killed half-way leaves: gcc stops with "while reading precompiled header" on every
    kernel. A truncated copy of the real header is put in a header directory of the test's own (the suite's
    header is left alone), and a kernel that must be compiled (a fresh kernel cache) is built with it."""
    from torch._inductor import codecache
    from torch._inductor.runtime.cache_dir_utils import temporary_cache_dir

    torch.manual_seed(0)
    with temporary_cache_dir(str(tmp_path / "warm")), torch.no_grad():
        warm = SimpleNamespace(unet=Pointwise(0.5).eval())
        _compile(warm, Context(device="cpu", hw=None))
        warm.unet(torch.randn(1, 3, 5, 5))  # a kernel compiled: the precompiled header exists from here on
    headers = sorted(Path(codecache._HEADER_DIR).glob("*.h*"))
    assert any(h.suffix == ".gch" for h in headers), "no precompiled header: the test did not engage"
    private = tmp_path / "precompiled_headers"
    (private / "locks").mkdir(parents=True)
    for header in headers:
        shutil.copy2(header, private / header.name)
        if header.suffix == ".gch":
            with open(private / header.name, "r+b") as fh:
                fh.truncate(4096)
    monkeypatch.setattr(codecache, "_HEADER_DIR", str(private))
    monkeypatch.setattr(codecache, "_HEADER_LOCK_DIR", str(private / "locks"))
    codecache._precompile_header.cache_clear()  # it remembers header paths per process
    model = Pointwise(1.5).eval()
    x = torch.randn(1, 4, 7, 6)
    try:
        with temporary_cache_dir(str(tmp_path / "cache")):
            pipe = SimpleNamespace(unet=model)
            _compile(pipe, Context(device="cpu", hw=None))
            with caplog.at_level(logging.WARNING, logger=inductor_cache.__name__), torch.no_grad():
                out = pipe.unet(x)
    finally:
        codecache._precompile_header.cache_clear()  # the suite's own header directory again after this test
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    named = [m for m in warned if str(private) in m and ".h.gch" in m and "precompiled header" in m]
    assert named, warned
    # The damaged header the compile read is deleted; the directory may hold others (an ahead-of-time compile
    # builds its own, with other flags), truncated alike but not read by this kernel.
    deleted = re.findall(rf"({re.escape(str(private))}/\S+?\.h\.gch)", " ".join(named))
    assert deleted and not any(Path(p).exists() for p in deleted), "the damaged header was deleted"
    with torch.no_grad():
        torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-5)


def _raiser(*errors: BaseException):
    calls = []

    def fn(*args, **kwargs):
        calls.append(args)
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]
        return "done"

    return fn, calls


def test_errors_that_are_not_a_damaged_cache_entry_propagate_untouched(tmp_path, caplog):
    elsewhere = tmp_path / "libelsewhere.so"
    elsewhere.write_bytes(b"\x7fELF")
    for error in (
        ImportError("No module named 'tomesd'"),
        RuntimeError("shapes do not match"),
        OSError(f"{elsewhere}: file too short"),
        ValueError(f"{inductor_cache.cache_dir()}/a/b.so"),
    ):
        fn, calls = _raiser(error)
        with pytest.raises(type(error)) as raised:
            inductor_cache.recovering(fn)(1)
        assert raised.value is error and len(calls) == 1, f"{error!r} was retried"
    assert elsewhere.exists(), "only files under inductor's cache directory are ever deleted"
    assert not caplog.records


def test_a_damaged_entry_is_deleted_once_and_a_second_failure_propagates(monkeypatch, tmp_path):
    monkeypatch.setattr(inductor_cache, "cache_dir", lambda: tmp_path.resolve())
    entry = tmp_path / "ab" / "cabc.main.so"
    entry.parent.mkdir()
    entry.write_bytes(b"\x7fELF")
    wrapped = RuntimeError("backend='inductor' raised")
    wrapped.__cause__ = ImportError(f"{entry}: file too short")

    fn, calls = _raiser(wrapped)
    assert inductor_cache.recovering(fn)("x") == "done" and calls == [("x",), ("x",)]
    assert not entry.exists()

    entry.write_bytes(b"\x7fELF")
    again = OSError(f"{entry}: invalid ELF header")
    fn, calls = _raiser(wrapped, again)
    with pytest.raises(OSError, match="invalid ELF header"):
        inductor_cache.recovering(fn)("x")
    assert len(calls) == 2, "one retry, no more"
