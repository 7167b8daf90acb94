"""The `openvino` technique's disk cache: the parts it converts, compresses or calibrates, and their compiles.

Under `$STUDIO_HOME/openvino/<key>/` (`openvino.models.cache_key`: everything that decides the model):

- `model.xml`, `model.bin`: a part as converted (and compressed or calibrated) for one input shape, written
  once, atomically (a folder renamed into place). A new process compiles it from the file, its weights mapped
  from `model.bin`, instead of converting and calibrating again (the minutes of a first call).
- `compiled/<precision>/<cpu>.blob`: the CPU plugin's compile of that file for this CPU (`<cpu>`: a digest
  of its model and flags), exported weightless (OpenVINO's `CACHE_MODE=OPTIMIZE_SIZE`): the plugin's
  transformed graph, the weights it keeps as they are read from `model.bin` rather than stored again. One
  blob serves every thread count: it is imported with the count a call runs with (OpenVINO's own
  `CACHE_DIR` keys its blobs by the whole configuration, so a process whose free cores differ from the first
  one's compiled anew from the file). Measured on a 2-core Xeon with AMX (sd15-arch, full int8, 256x256),
  CPU seconds: the int8 UNet 4.3 s imported against 7.0-9.9 s compiled from the file (most of either is
  oneDNN reordering the int8 3x3 convolutions' weights with their zero-point compensation), the VAE decoder
  0.3 s against 0.8-1.0 s, the text encoder 0.2 s against 0.4 s; the blobs take 6.9 MB, 194 MB (the plugin
  expands that decoder's 8-bit weights to fp32 for its convolutions, and those it stores) and 1 MB.
  `OPTIMIZE_SPEED`, which stores every weight again (827 MB for that UNet), imported no faster. All blobs
  together stay under `COMPILED_CAP` bytes: the least recently used go first.

Faults fall back to building, with a sentence in the log: a cache folder that cannot be written (the part is
used without being stored), a disk that fills while saving, an entry that cannot be read back (it is removed
and built again), a compiled blob that cannot be read (compiled again from the cached model and exported
anew).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from studio import devices
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
        self._blobs: dict[tuple[str, int], Any] = {}  # the imported blobs' memory, while their compiles live
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
        """The model compiled for the CPU with `threads` (`openvino.models.compile_for_cpu`): imported from
        the stored blob, or compiled from the stored file (and exported), or from memory where it could not
        be stored."""
        if self.memory is not None:
            return ovm.compile_for_cpu(self.memory, precision, threads=threads)
        try:
            compiled, blob = compile_stored(self.folder / "model.xml", precision, threads)
        except RuntimeError as exc:
            if self.built:
                raise
            self._rebuilt(exc)
            return self.compile(precision, threads)
        self._blobs[precision, threads] = blob  # the compile reads it: kept as long as this entry
        if blob is not None:
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


def blob_name(xml: Path) -> str:
    """The name of the stored model `xml`'s blob: a digest of what a compiled blob is only good for besides
    OpenVINO's version (the entry's key): that very graph (a damaged model.xml is not run from an old blob,
    but built again) and this CPU, by its model, signature and flags."""
    hw = devices.detect()
    digest = hashlib.sha256("|".join([hw.cpu_name, str(hw.cpu_signature), *sorted(hw.cpu_flags)]).encode())
    digest.update(xml.read_bytes())
    return f"{digest.hexdigest()[:16]}.blob"


def compile_stored(xml: Path, precision: str, threads: int) -> tuple[Any, Any]:
    """The stored model `xml` compiled for the CPU with `threads`, and the memory the compile reads (None
    where it was not imported): its blob in the entry's `compiled/<precision>/` folder imported, or, where
    there is none or it cannot be read (a sentence in the log), compiled from the file and exported there; a
    folder that cannot be used is said too. A RuntimeError is the model file's own fault (the caller builds
    it again)."""
    folder = xml.parent / COMPILED / precision
    try:
        path = folder / blob_name(xml)
    except OSError as exc:  # no model file: compiling it says so
        raise RuntimeError(f"{xml} cannot be read ({exc})") from exc
    if path.is_file():
        try:
            blob = read_blob(path)
            compiled = ovm.import_for_cpu(blob, xml.with_suffix(".bin"), precision, threads)
        except (OSError, RuntimeError, ValueError) as exc:
            log.warning(
                "The compiled OpenVINO model %s could not be read back (truncated, or made by another "
                "version: %s): it was compiled again from the cached model and stored anew.",
                path,
                exc,
            )
        else:
            _touch(path)
            return compiled, blob
    compiled = ovm.compile_for_cpu(str(xml), precision, threads=threads, weightless=True)
    try:
        export(compiled, path)
    except (OSError, RuntimeError) as exc:
        log.warning(
            "OpenVINO's compiled-model cache %s cannot be used (%s): the model was compiled without it, and "
            "the next process compiles it again.",
            folder,
            exc,
        )
        return compiled, None
    for old in folder.parent.glob(f"{precision}-*"):  # OpenVINO's own cache, one per thread count, before
        shutil.rmtree(old, ignore_errors=True)
    prune(COMPILED_CAP)
    return compiled, None


def read_blob(path: Path) -> Any:
    """A stored blob as an `openvino.Tensor` over its file, mapped (copy on write: private to the process)."""
    return ovm.openvino().Tensor(np.memmap(path, dtype=np.uint8, mode="c"), shared_memory=True)


def export(compiled: Any, path: Path) -> None:
    """`compiled`'s export written as `path` (a scratch file renamed into place)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = compiled.export_model().getbuffer()
    handle, scratch = tempfile.mkstemp(prefix=f".{path.stem}-", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(scratch, path)
    finally:
        Path(scratch).unlink(missing_ok=True)


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
