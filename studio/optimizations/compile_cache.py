"""torch.compile's portable cache artifacts, kept under the studio's home so that a new process builds its
graphs warm instead of cold.

torch records what each compile puts in its caches (inductor's FX graph cache, AOTAutograd's cache,
autotuning results); `torch.compiler.save_cache_artifacts()` serializes everything recorded in this process
and `torch.compiler.load_cache_artifacts(data)` writes it back into the caches of another one, where
dynamo's next build of the same graph is a cache hit. torch_compile `load`s once per process and machine
key, before its first compile, and `save`s after every call that built graphs.

Where: `compile-cache/` in the studio's home, one file per save, named `<machine key>-<digest>.bin`. The
machine key holds what decides whether an artifact can be reused: torch's version, the device kind, the
GPUs' compute capabilities for CUDA, the CPU's kernel flags (`devices.KERNEL_FLAGS`) and signature for a
CPU; the digest names the artifacts inside. Each file starts with one JSON line saying which torch and
machine wrote it, so a file that another torch wrote, or that is truncated or foreign, is named in a warning
and deleted instead of loaded.

A save holds every artifact of its process (those it built, and those it loaded and used), so it supersedes
the files its process loaded whose artifacts it holds; those are deleted. Artifacts a process loaded but did
not use stay in their file.

What it costs on disk: a save is the compiled graphs' generated code and metadata, not their shared objects:
about 0.1 MB for a one-layer module and 2 MB for the bundled tiny-shapes UNet at one shape. At most
`MAX_FILES` files are kept: past that the least recently written go first.

What it does not carry: the C++ kernels inductor compiled for a CPU (shared objects it keeps in its own cache
folder, `studio.optimizations.inductor_cache.cache_dir()`), which a process whose inductor cache is empty
compiles again. On a CPU they are most of the cost: tiny-shapes' first call on a 2-core Xeon took 105 s cold,
81 s with these artifacts alone and 9-10 s with inductor's folder kept (with or without them). On a GPU,
triton's kernels travel inside the FX graph cache's artifacts.

Faults never stop a compile: a file that cannot be read, a folder that cannot be written or a disk that
fills while saving each log one warning sentence, and the graphs are compiled (or kept) without the file.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import tempfile
import time
from pathlib import Path

import torch

from studio import devices, settings

log = logging.getLogger(__name__)

FOLDER = "compile-cache"  # under the studio's home
MAX_FILES = 16  # files kept in the folder, all machine keys together
FORMAT = 1  # the layout of this module's header line
MAGIC = "diffusion-studio compile cache"

# This process's files by folder and machine key: each file it loaded or saved, and the artifact keys the file
# holds. An entry present means its files were loaded (once per process and studio home).
_known: dict[str, dict[Path, frozenset[str]]] = {}


class UnreadableArtifacts(ValueError):
    """An artifacts file that is not one this torch and machine can load (its sentence says why)."""


def folder() -> Path:
    """`compile-cache/` in the studio's home."""
    return settings.home() / FOLDER


def machine(hw: devices.Hardware, device_type: str) -> dict[str, object]:
    """What decides whether compiled artifacts can be reused: torch's version and the device they run on."""
    described: dict[str, object] = {"torch": torch.__version__, "device": device_type}
    if device_type == "cuda":
        described["cuda"] = torch.version.cuda
        described["capabilities"] = sorted({f"{g.capability[0]}.{g.capability[1]}" for g in hw.gpus})
    else:
        described["cpu"] = hw.cpu_signature
        described["kernels"] = hw.cpu_kernels
    return described


def machine_key(hw: devices.Hardware, device_type: str) -> str:
    """A file-name prefix for `machine(hw, device_type)`: readable, then a digest of all of it,
    e.g. "torch-2.13.0-cpu-3f2a9c01"."""
    described = machine(hw, device_type)
    digest = hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:8]
    version = torch.__version__.split("+")[0]
    return f"torch-{version}-{device_type}-{digest}"


def _header(hw: devices.Hardware, device_type: str) -> bytes:
    return (json.dumps({"magic": MAGIC, "format": FORMAT, **machine(hw, device_type)}) + "\n").encode()


def _payload(data: bytes, expected: bytes) -> bytes:
    """The artifacts after the header line, when the header is `expected`; else UnreadableArtifacts."""
    line, newline, payload = data.partition(b"\n")
    try:
        header = json.loads(line)
    except ValueError:
        header = None
    if not newline or not isinstance(header, dict) or header.get("magic") != MAGIC:
        raise UnreadableArtifacts("it is not a compile cache file written by the studio")
    wanted = json.loads(expected)
    if header != wanted:
        differ = ", ".join(
            f"{k} {header.get(k)!r} (here {v!r})" for k, v in wanted.items() if header.get(k) != v
        )
        raise UnreadableArtifacts(f"it was written for another torch or machine: {differ}")
    return payload


def _artifact_keys(info: object) -> frozenset[str]:
    """The artifact keys a torch CacheInfo lists, as "type:key"."""
    return frozenset(f"{kind}:{key}" for kind, keys in getattr(info, "artifacts", {}).items() for key in keys)


def _digest(keys: frozenset[str]) -> str:
    return hashlib.sha256("\n".join(sorted(keys)).encode()).hexdigest()[:16]


def _files(key: str) -> list[Path]:
    """This machine key's files, the newest first."""
    try:
        found = [(p.stat().st_mtime, p) for p in folder().glob(f"{key}-*.bin")]
    except OSError as exc:
        log.warning(
            "The compile cache folder %s could not be read (%s); torch.compile builds without it.",
            folder(),
            exc.strerror or exc,
        )
        return []
    return [p for _, p in sorted(found, reverse=True)]


def _discard(path: Path, why: str) -> None:
    """Delete an artifacts file that cannot be loaded, saying why."""
    log.warning(
        "The compile cache file %s cannot be loaded: %s. It is deleted; torch.compile builds without it.",
        path,
        why,
    )
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        log.warning("The compile cache file %s could not be deleted (%s).", path, exc.strerror or exc)


def _put(payload: bytes) -> object:
    """`torch.compiler.load_cache_artifacts(payload)`, keeping every entry: its CacheInfo, or
    UnreadableArtifacts.

    Each save appends one entry per artifact type with the artifacts new since the last one, and torch 2.13
    reads the entries into a dict by type: of bytes saved more than once in a process, it would load only what
    the last save added. The entries are read here with torch's own reader and merged by type (where those
    private names are missing, torch's loader is used as it is)."""
    try:
        from torch.compiler._cache import CacheArtifactManager, _deserialize_single_cache
        from torch.utils._appending_byte_serializer import AppendingByteSerializer

        CacheArtifactManager._ensure_cache_artifacts_registered()
    except (ImportError, AttributeError) as exc:
        log.debug("torch's artifact reader moved (%s); loading with torch.compiler.load_cache_artifacts", exc)
        CacheArtifactManager = None
    if CacheArtifactManager is None:
        info = torch.compiler.load_cache_artifacts(payload)  # torch logs why, when it cannot
        if info is None:
            raise UnreadableArtifacts("torch could not read its artifacts (the file is truncated or damaged)")
        return info
    merged: dict[str, list] = {}
    try:  # a checksum covers the bytes: a truncated file fails here, before anything is written
        for kind, artifacts in AppendingByteSerializer.to_list(
            payload, deserialize_fn=_deserialize_single_cache
        ):
            merged.setdefault(kind, []).extend(artifacts)
    except (AssertionError, RuntimeError, ValueError) as exc:
        raise UnreadableArtifacts(
            f"torch could not read its artifacts, the file is truncated or damaged ({exc})"
        ) from exc
    return CacheArtifactManager.populate_caches(merged)


def _load_file(path: Path, header: bytes) -> frozenset[str] | None:
    """Put one file's artifacts into torch's caches: their keys, or None when it could not be loaded."""
    try:
        info = _put(_payload(path.read_bytes(), header))
    except UnreadableArtifacts as exc:
        _discard(path, str(exc))
        return None
    except OSError as exc:  # reading the file, or writing its artifacts into inductor's cache folder
        log.warning(
            "The compile cache file %s could not be loaded (%s); torch.compile builds without it.",
            path,
            exc.strerror or exc,
        )
        return None
    return _artifact_keys(info)


def load(hw: devices.Hardware, device_type: str) -> frozenset[str]:
    """Put this machine's saved artifacts into torch's caches, once per process and machine key (later calls
    load nothing).

    Args:
        hw: the machine (`devices.detect()`).
        device_type: where the graphs run: "cpu", "cuda" or "mps".

    Returns:
        The artifact keys loaded now ("type:key"), empty when there were none.
    """
    key = machine_key(hw, device_type)
    if f"{folder()}:{key}" in _known:
        return frozenset()
    start, header = time.perf_counter(), _header(hw, device_type)
    known = _known[f"{folder()}:{key}"] = {}
    for path in _files(key):
        keys = _load_file(path, header)
        if keys is not None:
            known[path] = keys
    loaded = frozenset().union(*known.values())
    if loaded:
        log.info(
            "Loaded %d torch.compile cache artifacts from %d files in %s in %.2fs.",
            len(loaded),
            len(known),
            folder(),
            time.perf_counter() - start,
        )
    return loaded


def _write(path: Path, data: bytes) -> None:
    """Write `data` to `path` at once: a temporary file in the same folder, then renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as fh:
            fh.write(data)
        os.replace(temporary, path)
    finally:
        Path(temporary).unlink(missing_ok=True)  # gone already when the rename happened


def _unsaved(exc: OSError) -> None:
    if exc.errno == errno.ENOSPC:
        why, fix = "the disk is full", "free some space there"
    else:
        why, fix = exc.strerror or str(exc), "make it writable or point STUDIO_HOME elsewhere"
    log.warning(
        "torch.compile's cache could not be saved to %s (%s): the graphs compiled now stay in this "
        "process only; %s to keep them for the next one.",
        folder(),
        why,
        fix,
    )


def save(hw: devices.Hardware, device_type: str) -> Path | None:
    """Save every artifact this process has recorded (built or loaded and used) in one new file, delete this
    process's files it supersedes, and prune the folder to `MAX_FILES`.

    Args:
        hw: the machine (`devices.detect()`).
        device_type: where the graphs run: "cpu", "cuda" or "mps".

    Returns:
        The file written; None when there was nothing to save or it could not be written (said in a warning).
    """
    saved = torch.compiler.save_cache_artifacts()
    if saved is None:
        return None
    data, info = saved
    keys, key = _artifact_keys(info), machine_key(hw, device_type)
    path = folder() / f"{key}-{_digest(keys)}.bin"
    try:
        _write(path, _header(hw, device_type) + data)
    except OSError as exc:
        _unsaved(exc)
        return None
    known = _known.setdefault(f"{folder()}:{key}", {})
    for old in [p for p, held in known.items() if p != path and held <= keys]:
        del known[old]
        _remove(old)
    known[path] = keys
    prune()
    log.info("Saved %d torch.compile cache artifacts (%.1f MB) to %s.", len(keys), len(data) / 2**20, path)
    return path


def _remove(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        log.warning("The compile cache file %s could not be deleted (%s).", path, exc.strerror or exc)


STALE_TEMPORARY_S = 3600  # a temporary file this old was left by a process killed while saving


def prune(keep: int = MAX_FILES) -> list[Path]:
    """Delete the least recently written files beyond `keep`, and temporary files left by killed saves; the
    files deleted."""
    try:
        files = sorted(((p.stat().st_mtime, p) for p in folder().glob("*.bin")), reverse=True)
        stale = [p for p in folder().glob(".*.tmp") if time.time() - p.stat().st_mtime > STALE_TEMPORARY_S]
    except OSError as exc:
        log.warning(
            "The compile cache folder %s could not be listed (%s); nothing was pruned.",
            folder(),
            exc.strerror or exc,
        )
        return []
    gone = [p for _, p in files[keep:]] + stale
    for path in gone:
        _remove(path)
        for known in _known.values():
            known.pop(path, None)
    return gone


def forget() -> None:
    """Forget which files this process loaded and saved (tests; a new studio home): the next `load` reads them
    again."""
    _known.clear()
