"""The `openvino` technique's disk cache: the parts it converts, compresses or calibrates, and their compiles.

Under `$STUDIO_HOME/openvino/<key>/` (`openvino.models.cache_key`: everything that decides the model):

- `model.xml`, `model.bin`: a part as converted (and compressed or calibrated) for one input shape, written
  once, atomically (a folder renamed into place). A new process compiles it from the file, its weights mapped
  from `model.bin`, instead of converting and calibrating again (the minutes of a first call).
- `compiled/<precision>-<threads>/*.blob`: OpenVINO's compiled-model cache (`CACHE_DIR`) of that file for this
  CPU, in its `OPTIMIZE_SIZE` mode: the CPU plugin's transformed graph, reading the weights it keeps as they
  are from `model.bin` rather than storing them again. Measured on a 2-core Xeon with AMX (sd15-arch, full
  int8, 256x256), CPU seconds of compiling the int8 UNet: 6.9 s from the file, 4.5 s from its blob; its blob
  takes 6.9 MB, the text encoder's 1 MB, the VAE decoder's 194 MB (the plugin expands that decoder's 8-bit
  weights to fp32 for its convolutions, and those it stores). OpenVINO's default mode, which stores every
  weight again, took 1.19 GB for the three and loaded no faster. A blob is only as good as the OpenVINO
  version, CPU and file it was made for; OpenVINO checks that and compiles anew where it does not match.
  All blobs together stay under `COMPILED_CAP` bytes: the least recently used go first.

Faults fall back to building, with a sentence in the log: a cache folder that cannot be written (the part is
used without being stored), a disk that fills while saving, an entry that cannot be read back (it is removed
and built again), a compiled blob that cannot be read (compiled again from the cached model).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from studio.optimizations.openvino import models as ovm

log = logging.getLogger(__name__)

COMPILED_CAP = 2 * 1024**3  # bytes of compiled blobs kept under the OpenVINO cache, all entries together
COMPILED = "compiled"  # the folder of an entry's compiled blobs


def _count(stats: dict[str, Any], name: str) -> None:
    stats[name] = stats.get(name, 0) + 1


class Entry:
    """One part's model in the disk cache, built by `build` where it is not there yet.

    `built` says whether it was converted in this process (a cold phase) or read back (a warm one). Where the
    cache cannot take it, the built model stays in memory (`memory`) and is compiled from there."""

    def __init__(self, key: str, build: Callable[[], Any], stats: dict[str, Any]):
        self.key = key
        self.folder = ovm.cache_root() / key
        self.built = False
        self.memory: Any = None
        self._build = build
        self._stats = stats
        if (self.folder / "model.xml").exists():
            _count(stats, "openvino_cache_hits")
        else:
            self._make()

    def _make(self) -> None:
        with ovm.quiet_build():
            model = self._build()
        self.built = True
        _count(self._stats, "openvino_builds")
        if not store(model, self.folder):
            self.memory = model
            _count(self._stats, "openvino_not_cached")

    def _rebuilt(self, exc: Exception) -> None:
        """The stored entry could not be read: removed, then built again (and stored where it can be)."""
        log.warning(
            "The cached OpenVINO model %s cannot be read (%s): it is removed and built again.",
            self.folder,
            exc,
        )
        shutil.rmtree(self.folder, ignore_errors=True)
        self._make()

    def model(self) -> Any:
        """The model itself (its weights mapped from the file where it is stored)."""
        if self.memory is not None:
            return self.memory
        try:
            return ovm.openvino().Core().read_model(self.folder / "model.xml")
        except RuntimeError as exc:
            if self.built:
                raise
            self._rebuilt(exc)
            return self.model()

    def compile(self, precision: str, threads: int) -> Any:
        """The model compiled for the CPU with `threads` (`openvino.models.compile_for_cpu`): from the stored
        file through the compiled-model cache, or from memory where it could not be stored."""
        if self.memory is not None:
            return ovm.compile_for_cpu(self.memory, precision, threads=threads)
        try:
            compiled = compile_stored(self.folder / "model.xml", precision, threads)
        except RuntimeError as exc:
            if self.built:
                raise
            self._rebuilt(exc)
            return self.compile(precision, threads)
        if compiled.get_property("LOADED_FROM_CACHE"):
            _count(self._stats, "openvino_compiled_from_cache")
        return compiled


def store(model: Any, folder: Path) -> bool:
    """Write `model` as `folder`/model.xml (its scratch folder renamed into place); False, with a sentence in
    the log, where it could not be (a folder that cannot be written, a full disk). True too where another
    process stored the same entry first."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    except OSError as exc:
        log.warning(
            "The OpenVINO cache folder %s cannot be written (%s): this model is used without being stored, "
            "and the next process builds it again.",
            folder.parent,
            exc,
        )
        return False
    try:
        save(model, scratch)
        os.replace(scratch, folder)
        return True
    except (OSError, RuntimeError) as exc:  # a full disk, or another process stored it first
        if (folder / "model.xml").exists():
            return True
        log.warning(
            "The OpenVINO model could not be stored in %s (%s): it is used without being stored, and the "
            "next process builds it again.",
            folder,
            exc,
        )
        return False
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def save(model: Any, folder: Path) -> None:
    """`model` as `folder`/model.xml and model.bin; compress_to_fp16=False: the stored model computes
    exactly what the built one does."""
    ovm.openvino().save_model(model, folder / "model.xml", compress_to_fp16=False)


def compile_stored(xml: Path, precision: str, threads: int) -> Any:
    """The stored model `xml` compiled for the CPU, through OpenVINO's compiled-model cache in the entry's
    `compiled/<precision>-<threads>/` folder; without that cache, and a sentence in the log, where the folder
    cannot be used. A RuntimeError is the model file's own fault (the caller builds it again)."""
    folder = xml.parent / COMPILED / f"{precision}-{threads}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        before = {p: p.stat().st_mtime for p in folder.glob("*.blob")}
        started = time.time()
        compiled = ovm.compile_for_cpu(str(xml), precision, threads=threads, cache=folder)
    except (OSError, RuntimeError) as exc:
        # raises in turn where the model file is at fault
        compiled = ovm.compile_for_cpu(str(xml), precision, threads=threads)
        log.warning(
            "OpenVINO's compiled-model cache %s cannot be used (%s): the model was compiled without it, and "
            "the next process compiles it again.",
            folder,
            exc,
        )
        return compiled
    if compiled.get_property("LOADED_FROM_CACHE"):
        for blob in before:
            _touch(blob)
        return compiled
    if before:
        log.warning(
            "The compiled OpenVINO model in %s could not be read back (truncated, or made by another "
            "version): it was compiled again from the cached model and stored anew.",
            folder,
        )
    for blob, mtime in before.items():  # the blobs this compile did not rewrite are stale
        if blob.exists() and blob.stat().st_mtime == mtime and mtime < started:
            blob.unlink(missing_ok=True)
    prune(COMPILED_CAP)
    return compiled


def _touch(path: Path) -> None:
    try:
        os.utime(path)
    except OSError:  # a blob read back, in a folder this process cannot write: pruning order only
        pass


def compiled_blobs() -> list[Path]:
    """Every compiled blob under the OpenVINO cache, the least recently used first."""
    blobs = []
    for blob in ovm.cache_root().glob(f"*/{COMPILED}/*/*.blob"):
        try:
            blobs.append((blob.stat().st_mtime, blob))
        except OSError:
            continue
    return [blob for _, blob in sorted(blobs)]


def prune(cap: int) -> list[Path]:
    """Remove the least recently used compiled blobs until all of them take at most `cap` bytes (the most
    recent one always stays); returns those removed."""
    blobs = compiled_blobs()
    sizes = {blob: blob.stat().st_size for blob in blobs}
    total = sum(sizes.values())
    removed = []
    for blob in blobs[:-1]:
        if total <= cap:
            break
        blob.unlink(missing_ok=True)
        total -= sizes[blob]
        removed.append(blob)
    if removed:
        log.info("removed %d least recently used compiled OpenVINO models (over %d bytes)", len(removed), cap)
    return removed
