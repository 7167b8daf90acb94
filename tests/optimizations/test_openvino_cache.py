"""The `openvino` technique's disk cache on the bundled model: a first build says "cold", a fresh pipeline or
a new process with the cache says "warm" and imports the compiles back from their exported blobs, one per part
whatever the thread count; the cache's faults (a folder that cannot be written, a truncated compiled blob, a
full disk, an unreadable entry) are a sentence in the log and a run that builds instead; the compiled blobs
stay under their cap."""

from __future__ import annotations

import errno
import importlib.util
import json
import logging
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from studio import phases
from studio.manager import PipelineManager
from studio.optimizations.openvino import cache as ovk
from tests import tiny, warm_python

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("openvino") is None,
    reason="openvino is optional (requirements-extras.txt) and not installed here",
)
ROOT = Path(__file__).resolve().parents[2]
PARTS = ["UNet", "VAE decoder", "text encoder"]
REQUEST = tiny.request(["openvino"], steps=2)  # fp32, no calibration: the smallest build showing the phases


@pytest.fixture
def home(tmp_path, monkeypatch, one_torch_thread):
    """An empty studio home; one thread, as the new process's."""
    monkeypatch.setenv("STUDIO_HOME", str(tmp_path))
    return tmp_path


def run() -> tuple[np.ndarray, dict]:
    """The request in a fresh pipeline manager (a pipeline of its own): its images and stats."""
    images, prepared = tiny.run(PipelineManager(), REQUEST)
    return images, prepared.ctx.stats


def phases_by_part(stats: dict) -> dict[str, str]:
    events = [e for e in stats.get(phases.PHASES, []) if e["technique"] == "openvino"]
    assert all(e["seconds"] > 0 for e in events)
    return {e["what"].removeprefix("the ").split(" at ")[0]: e["phase"] for e in events}


def blobs(home: Path) -> list[Path]:
    return sorted((home / "openvino").glob("*/compiled/*/*.blob"))


@pytest.fixture(scope="module")
def first_build(tmp_path_factory):
    """The request's first build, in an empty studio home, with one thread: that home, the images and the
    stats. Built once for the tests that start from a cache it left (each gets a copy: `built`)."""
    source = tmp_path_factory.mktemp("first-build")
    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STUDIO_HOME", str(source))
        torch.set_num_threads(1)
        try:
            images, stats = run()
        finally:
            torch.set_num_threads(threads)
    return source, images, stats


@pytest.fixture
def built(first_build, home) -> np.ndarray:
    """`home` holding a copy of what the first build stored (as if this test had just built it): its
    images. (A weightless blob names the weights it was compiled with, the first build's; an import reads
    those of the entry it belongs to, and an export in this home differs from the copy by that name.)"""
    source, images, _ = first_build
    shutil.copytree(source / "openvino", home / "openvino")
    return images


def test_a_first_build_is_cold_and_a_fresh_pipeline_reads_it_and_its_compile_back_warm(
    first_build, built, home
):
    source, images, stats = first_build
    assert phases_by_part(stats) == dict.fromkeys(PARTS, "cold")
    assert [e["what"] for e in stats[phases.PHASES] if e["what"].startswith("the UNet")] == [
        "the UNet at 2x8x8x8"
    ], "the part and its input's shape"
    assert len(blobs(source)) == 3, "each part's compile stored beside its model"
    again, stats = run()
    assert phases_by_part(stats) == dict.fromkeys(PARTS, "warm")
    assert stats["openvino_compiled_from_cache"] == 3 and "openvino_builds" not in stats
    assert np.array_equal(again, images)


def test_a_new_process_with_the_cache_is_warm(built, home):
    script = """
import json
from studio.manager import PipelineManager
from tests import tiny
from tests.optimizations.test_openvino_cache import REQUEST
_, prepared = tiny.run(PipelineManager(), REQUEST)
stats = prepared.ctx.stats
events = [[e["what"], e["phase"]] for e in stats["phases"]]
print(json.dumps([*events, stats["openvino_compiled_from_cache"]]))
"""
    env = {**os.environ, "STUDIO_HOME": str(home), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    done = warm_python.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    *events, from_blobs = json.loads(done.stdout.splitlines()[-1])
    assert sorted(phase for _, phase in events) == ["warm"] * 3 and from_blobs == 3, events


def test_a_blob_compiled_with_one_thread_count_is_imported_with_another(built, home):
    """The engine runs a call on the cores free at request time: a process whose count differs from the one
    that compiled imports the same blob with its own count, rather than compiling from the model again."""
    images = built
    stored = {blob: blob.stat().st_size for blob in blobs(home)}
    torch.set_num_threads(2)  # the fixture puts the process's count back
    again, stats = run()
    assert phases_by_part(stats) == dict.fromkeys(PARTS, "warm")
    assert stats["openvino_compiled_from_cache"] == 3
    assert np.allclose(again, images, atol=1e-5), "the same model (two threads sum in another order)"
    assert {blob: blob.stat().st_size for blob in blobs(home)} == stored, "no blob per thread count"


def test_openvinos_own_cache_folders_of_a_part_go_when_its_blob_is_exported(built, home):
    """A home kept from before: OpenVINO's `CACHE_DIR` folders, one per precision and thread count, are
    removed as each part's blob is exported (they would no longer be read)."""
    for blob in blobs(home):
        old = blob.parent.parent / "f32-1"
        old.mkdir()
        (old / "123.blob").write_bytes(b"\0" * 10)
        blob.unlink()
    _, stats = run()
    assert "openvino_compiled_from_cache" not in stats and len(blobs(home)) == 3
    assert not list((home / "openvino").glob(f"*/{ovk.COMPILED}/f32-1"))


def test_a_cache_folder_that_cannot_be_written_is_said_and_the_parts_are_built(home, caplog):
    (home / "openvino").write_text("a file where the cache folder would be")
    images, stats = run()
    assert "The OpenVINO cache folder" in caplog.text and "cannot be written" in caplog.text
    assert phases_by_part(stats) == dict.fromkeys(PARTS, "cold")
    assert stats["openvino_not_cached"] == 3
    again, stats = run()
    assert phases_by_part(stats) == dict.fromkeys(PARTS, "cold"), "nothing was kept: built again"
    assert np.array_equal(again, images)


def test_a_compiled_cache_folder_that_cannot_be_used_compiles_without_it(built, home, caplog):
    images = built
    for entry in (home / "openvino").iterdir():
        for folder in (entry / ovk.COMPILED).iterdir():
            for blob in folder.iterdir():
                blob.unlink()
            folder.rmdir()
            folder.write_text("a file where the compiled models would be")
    with caplog.at_level(logging.WARNING):
        again, stats = run()
    assert "compiled-model cache" in caplog.text and "cannot be used" in caplog.text
    assert phases_by_part(stats) == dict.fromkeys(PARTS, "warm"), "the models themselves were read back"
    assert np.array_equal(again, images)


def test_a_truncated_compiled_blob_is_said_and_compiled_again(built, home, caplog):
    for blob in blobs(home):  # compiled and exported in this home: what its export anew is compared with
        blob.unlink()
    images, stats = run()
    assert "openvino_compiled_from_cache" not in stats and len(blobs(home)) == 3
    assert np.array_equal(images, built)
    sizes = {}
    for blob in blobs(home):
        sizes[blob] = blob.stat().st_size
        blob.chmod(0o600)
        with blob.open("r+b") as file:
            file.truncate(sizes[blob] // 2)
    again, stats = run()
    assert caplog.text.count("could not be read back (truncated") == 3
    assert phases_by_part(stats) == dict.fromkeys(PARTS, "warm")
    assert "openvino_compiled_from_cache" not in stats and np.array_equal(again, images)
    assert [blob.stat().st_size for blob in blobs(home)] == list(sizes.values()), "stored anew"
    _, stats = run()
    assert stats["openvino_compiled_from_cache"] == 3


def test_a_disk_that_fills_while_saving_is_said_and_the_next_run_builds_again(home, caplog, monkeypatch):
    def full(model, folder: Path) -> None:
        (folder / "model.bin").write_bytes(b"\0" * 1000)  # part of it written, then the disk is full
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    real = ovk.save
    monkeypatch.setattr(ovk, "save", full)
    images, stats = run()
    assert caplog.text.count("could not be stored") == 3 and os.strerror(errno.ENOSPC) in caplog.text
    assert phases_by_part(stats) == dict.fromkeys(PARTS, "cold")
    assert list((home / "openvino").iterdir()) == [], "no entry, and no scratch folder left behind"
    monkeypatch.setattr(ovk, "save", real)
    again, stats = run()
    assert phases_by_part(stats) == dict.fromkeys(PARTS, "cold") and np.array_equal(again, images)
    assert len(list((home / "openvino").iterdir())) == 3


def test_an_entry_that_cannot_be_read_is_removed_and_built_again(built, home, caplog):
    images = built
    for xml in (home / "openvino").glob("*/model.xml"):
        xml.write_text("<net>truncated")
    again, stats = run()
    assert caplog.text.count("cannot be read") == 3
    assert phases_by_part(stats) == dict.fromkeys(PARTS, "cold") and np.array_equal(again, images)
    assert stats["openvino_builds"] == 3


def test_the_least_recently_used_compiled_blobs_go_first_over_the_cap(home):
    folders = [home / "openvino" / f"entry{i}" / ovk.COMPILED / "f32-2" for i in range(4)]
    for age, folder in enumerate(folders):
        folder.mkdir(parents=True)
        blob = folder / "1.blob"
        blob.write_bytes(b"\0" * 100)
        os.utime(blob, (1000 - age, 1000 - age))  # entry0 the most recent
    assert ovk.prune(250) == [folders[3] / "1.blob", folders[2] / "1.blob"]
    assert ovk.compiled_blobs() == [folders[1] / "1.blob", folders[0] / "1.blob"]
    assert ovk.prune(10) == [folders[1] / "1.blob"], "the most recent one stays"
