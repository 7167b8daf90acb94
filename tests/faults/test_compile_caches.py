"""Compile caches that cannot be written or were cut short: the configuration is built again and runs, the
user is told in a sentence where the cache went, and nothing of the run is lost."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from studio import settings
from tests.faults import caches
from tests.faults.cases import Workspace

needs_openvino = pytest.mark.skipif(
    importlib.util.find_spec("openvino") is None or importlib.util.find_spec("nncf") is None,
    reason="openvino and nncf are optional (requirements-extras.txt) and not installed here",
)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    return Workspace(tmp_path_factory.mktemp("caches"))


@needs_openvino
def test_an_openvino_cache_folder_that_cannot_be_written_converts_and_says_so(workspace):
    outcome = caches.openvino_cache_unwritable_case(workspace)
    assert outcome.alive, outcome.facts
    assert "cannot be written" in outcome.said and "the next process builds it again" in outcome.said
    assert outcome.facts["difference"] <= 1.0 and outcome.runs_lost == 0


@needs_openvino
def test_a_truncated_openvino_cache_entry_is_rebuilt(workspace):
    outcome = caches.openvino_cache_truncated_case(workspace)
    assert outcome.facts["entries"] == 1 and outcome.alive, outcome.facts
    assert "cannot be read" in outcome.said and "removed and built again" in outcome.said
    assert outcome.facts["rewritten"], "the entry was written again, whole"


def test_a_compile_cache_folder_that_cannot_be_created_moves_to_the_studio_home(workspace):
    outcome = caches.compile_cache_unwritable_case(workspace)
    assert outcome.alive, outcome.facts["stderr"][-2000:]
    assert outcome.facts["used"] == outcome.facts["home"] / "inductor"
    assert outcome.said.startswith("torch.compile's cache folder") and "Not a directory" in outcome.said
    assert outcome.facts["headers"], "the precompiled header was built in the folder used"


def test_with_the_home_unwritable_too_the_compile_cache_is_a_new_temporary_folder(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(blocker / "inductor"))
    monkeypatch.setenv("STUDIO_HOME", str(blocker / "home"))
    said = settings.usable_compile_cache()
    used = os.environ["TORCHINDUCTOR_CACHE_DIR"]
    assert said and used in said and os.path.isdir(used) and os.access(used, os.W_OK)
    assert settings.usable_compile_cache() is None, "the folder it moved to is used from then on"


def test_a_writable_compile_cache_folder_is_left_as_the_user_set_it(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    assert settings.usable_compile_cache() is None
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "mine")


def test_a_studio_compile_keeps_inductors_precompiled_headers_with_its_kernels(tmp_path, monkeypatch):
    """Inductor's headers go to its default folder whatever TORCHINDUCTOR_CACHE_DIR says: the studio's
    compiles put them in the cache folder in use, so a kept cache folder holds them too; a folder already
    chosen for them (settings.precompiled_headers_in) stays."""
    from torch._inductor import codecache
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    from studio.optimizations import inductor_cache

    monkeypatch.setattr(codecache, "_HEADER_DIR", os.path.join(default_cache_dir(), "precompiled_headers"))
    monkeypatch.setattr(codecache, "_HEADER_LOCK_DIR", os.path.join(codecache._HEADER_DIR, "locks"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "kept"))
    inductor_cache.recovering(lambda: None)  # what wraps each compiled call the studio makes
    assert Path(codecache._HEADER_DIR) == (tmp_path / "kept").resolve() / "precompiled_headers"
    assert Path(codecache._HEADER_LOCK_DIR) == Path(codecache._HEADER_DIR) / "locks"
    chosen = str(tmp_path / "chosen")
    monkeypatch.setattr(codecache, "_HEADER_DIR", chosen)
    inductor_cache.keep_headers_with_kernels()
    assert codecache._HEADER_DIR == chosen


def test_checking_the_default_folder_creates_nothing_where_another_folder_is_set(tmp_path, monkeypatch):
    """With TORCHINDUCTOR_CACHE_DIR set, the default folder is only looked at: a process told to leave its
    temporary folder as it found it (the OpenVINO first-call benchmark) still does."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    assert settings.usable_compile_cache() is None
    assert list((tmp_path / "tmp").iterdir()) == []
