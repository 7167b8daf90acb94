"""Compiled packages kept on disk: AOTInductor packages of a pipeline's parts, one folder per build.

A package is compiled once (`torch.export` + `torch._inductor.aoti_compile_and_package`) and loaded in any
later process in about a second. It holds the compiled code, not the weights: the live module's own tensors
are handed to it when it is loaded (`load_constants`), so a package is keyed by the module's architecture (its
classes, config, parameter names, shapes and dtypes, attention processors), not by its weight values, and
costs on disk what its code costs (3 MB for the bundled model's UNet, tens of MB for SD 1.5's).

Layout: `<root>/<key>/package.pt2` and `<root>/<key>/package.json` (what it was built for and from). `root` is
`$STUDIO_HOME/packages` (`settings.home()`), or a folder of published packages (`source`). The key digests
everything that decides the build: the architecture, the input shapes, dtypes and layouts, this environment
(`environment()`: torch version, device kind, CUDA capability or the CPU's kernel flags), the technique's
settings and the other techniques applied. A package is written to a scratch folder and renamed into place, so
a killed build leaves no half entry; one that cannot be read is named, removed and rebuilt; one built for
another environment is refused with a sentence and rebuilt here.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from studio import devices
from studio import settings as studio_settings
from studio.errors import first_line

log = logging.getLogger(__name__)

FORMAT = 2  # the layout of a package folder; a folder of another format is refused (2: says what it holds)
PACKAGE, META = "package.pt2", "package.json"
FOLDER = "packages"  # the folder of packages in a studio home, a Space and a published dataset repository


# Packages shipped beside app.py (a Space bundle built with --packages): read before the studio's own.
SHIPPED = Path(__file__).resolve().parents[2] / "packages"


def cache_root() -> Path:
    return studio_settings.home() / "packages"


def roots(source: str = "") -> tuple[list[Path], str]:
    """Where packages are looked for, in order: the `source` a request names (a folder, or a Hugging Face
    dataset repository packages were published to: its `packages/`, downloaded), the packages shipped beside
    the app, the studio's own (where new builds are kept); and a sentence when `source` could not be read."""
    shipped = [SHIPPED] if SHIPPED.is_dir() else []
    if not source or Path(source).expanduser().is_dir():
        return [*([Path(source).expanduser()] if source else []), *shipped, cache_root()], ""
    try:
        return [fetched(source), *shipped, cache_root()], ""
    except (OSError, ValueError) as exc:
        note = f"The compiled packages of {source} could not be downloaded ({first_line(exc)}); not used."
        return [*shipped, cache_root()], note


def fetched(repo_id: str) -> Path:
    """The `packages/` folder of the dataset repository `repo_id` (what `python -m studio cards --publish`
    uploads beside a card), downloaded into the hub's cache: package files only."""
    from huggingface_hub import snapshot_download

    patterns = [f"{FOLDER}/*/{PACKAGE}", f"{FOLDER}/*/{META}"]
    return Path(snapshot_download(repo_id, repo_type="dataset", allow_patterns=patterns)) / FOLDER


def files(root: Path | None = None) -> list[Path]:
    """Every kept package's two files under `root` (the studio's by default), to publish."""
    root = root or cache_root()
    kept = sorted(p.parent for p in root.glob(f"*/{META}") if (p.parent / PACKAGE).is_file())
    return [folder / name for folder in kept for name in (PACKAGE, META)]


def environment(device: str) -> dict[str, Any]:
    """What a package built on `device` only runs with: torch's version, the device kind and, on CUDA, its
    compute capability, on a CPU the kernel flags inductor's code was built for."""
    kind = device.split(":")[0]
    env: dict[str, Any] = {"torch": torch.__version__, "device": kind}
    if kind == "cuda":
        index = int(device.split(":")[1]) if ":" in device else 0
        env["capability"] = "{}.{}".format(*torch.cuda.get_device_capability(index))
    elif kind == "cpu":
        env["cpu_kernels"] = devices.detect().cpu_kernels
    return env


def architecture(module: torch.nn.Module) -> str:
    """A digest of what a compiled graph of `module` depends on besides its weight values: its classes,
    config, parameter and buffer names, shapes, dtypes and layouts, and its attention processors."""
    digest = hashlib.sha256(type(module).__qualname__.encode())
    config = getattr(module, "config", None)
    if config is not None:  # its own keys; diffusers' bookkeeping ("_use_default_values": a set's order) not
        settings = {k: v for k, v in dict(config).items() if not k.startswith("_")}
        digest.update(json.dumps(settings, sort_keys=True, default=str).encode())
    for name, sub in module.named_modules():
        digest.update(
            f"{name}:{type(sub).__qualname__}:{type(getattr(sub, 'processor', None)).__name__}".encode()
        )
    for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
        layout = "cl" if tensor.dim() == 4 and tensor.is_contiguous(memory_format=torch.channels_last) else ""
        digest.update(f"{name}{tuple(tensor.shape)}{tensor.dtype}{layout}".encode())
    return digest.hexdigest()[:24]


def key(parts: dict[str, Any]) -> str:
    """The folder name for a build decided by `parts` (JSON-able values)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:32]


class PackageRefused(Exception):
    """A kept package that cannot be used here: the sentence says why (the caller compiles instead)."""


@dataclass(frozen=True)
class Entry:
    """A package folder: its path and what it says of itself."""

    folder: Path
    meta: dict[str, Any]

    @property
    def package(self) -> Path:
        return self.folder / PACKAGE

    @property
    def size_mb(self) -> float:
        return round(self.package.stat().st_size / 1e6, 1)


def find(root: Path, name: str, env: dict[str, Any]) -> Entry | None:
    """The package kept under `root/name`, or None when there is none.

    Raises:
        PackageRefused: the folder holds a package of another format or built for another environment.
    """
    folder = root / name
    if not (folder / PACKAGE).is_file():
        return None
    try:
        meta = json.loads((folder / META).read_text())
    except (OSError, ValueError) as exc:
        raise PackageRefused(f"The compiled package in {folder} has no readable {META} ({exc}).") from exc
    if meta.get("format") != FORMAT:
        raise PackageRefused(
            f"The compiled package in {folder} is of format {meta.get('format')!r}; this studio reads "
            f"{FORMAT}."
        )
    if meta.get("environment") != env:
        raise PackageRefused(
            f"The compiled package in {folder} was built for {_words(meta.get('environment'))}; this is "
            f"{_words(env)}."
        )
    return Entry(folder, meta)


def _words(env: Any) -> str:
    if not isinstance(env, dict):
        return "an unknown environment"
    where = env.get("device", "?")
    if env.get("capability"):
        where += f" (compute capability {env['capability']})"
    if env.get("cpu_kernels") is not None:
        where += f" ({', '.join(env['cpu_kernels']) or 'no AVX2/AVX-512'})"
    return f"torch {env.get('torch', '?')} on {where}"


def discard(entry_folder: Path, why: str) -> None:
    """Remove a kept package that cannot be used, saying which and why."""
    log.warning("compiled package %s cannot be used (%s); removing it and compiling again", entry_folder, why)
    shutil.rmtree(entry_folder, ignore_errors=True)


def save(root: Path, name: str, build: Any, meta: dict[str, Any]) -> tuple[Path, str]:
    """Build a package with `build(path)` and keep it as `root/name` (a scratch folder renamed into place).

    Returns (the package file to load, a sentence when it could not be kept: then it lives in a temporary
    folder of its own, removed when the process ends, and the next process compiles again).
    """
    try:
        root.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
    except OSError as exc:
        note = f"The compiled package could not be kept in {root} ({exc}); the next process compiles again."
        return _unkept(build, meta), note
    try:
        _write(scratch, build, meta)
        os.replace(scratch, root / name)
    except OSError as exc:  # the disk filled, or another process kept the same package first
        shutil.rmtree(scratch, ignore_errors=True)
        if (root / name / PACKAGE).is_file():
            return root / name / PACKAGE, ""
        note = f"The compiled package could not be kept in {root} ({exc}); the next process compiles again."
        return _unkept(build, meta), note
    return root / name / PACKAGE, ""


def _write(folder: Path, build: Any, meta: dict[str, Any]) -> None:
    start = time.perf_counter()
    build(str(folder / PACKAGE))
    meta = {**meta, "format": FORMAT, "compile_s": round(time.perf_counter() - start, 2)}
    meta["size_mb"] = round((folder / PACKAGE).stat().st_size / 1e6, 1)
    (folder / META).write_text(json.dumps(meta, indent=1, sort_keys=True))


_UNKEPT: list[tempfile.TemporaryDirectory] = []  # removed when the process ends


def _unkept(build: Any, meta: dict[str, Any]) -> Path:
    folder = tempfile.TemporaryDirectory(prefix="studio-package-")
    _UNKEPT.append(folder)
    _write(Path(folder.name), build, meta)
    return Path(folder.name) / PACKAGE


def listing(root: Path | None = None, every_root: bool = False) -> list[dict[str, Any]]:
    """The packages kept under `root` (the studio's by default): what each was built for, its size and
    when."""
    found = []
    found_roots = roots()[0] if every_root else [root or cache_root()]
    for meta_file in [f for r in found_roots for f in sorted(r.glob(f"*/{META}"))]:
        try:
            meta = json.loads(meta_file.read_text())
        except (OSError, ValueError) as exc:
            log.warning("compiled package %s has an unreadable %s (%s)", meta_file.parent, META, exc)
            continue
        found.append({"key": meta_file.parent.name, **meta})
    return found


ISA_FILE = "cpu-isa.json"


def skip_known_isa_probe(root: Path | None = None) -> None:
    """Spare a new process inductor's probe of the CPU's vector instruction sets where this machine already
    answered it.

    Loading a package asks inductor which instruction sets the CPU runs (`pick_vec_isa`): it builds and
    loads a small program per candidate, each in a child Python, about 1.3 s in every new process. The answer
    is kept in `root/cpu-isa.json` with the torch version and the CPU's flags; when it said that every set the
    CPU declares works, later processes tell inductor so (`cpp.vec_isa_ok`, only while it lists them)
    instead of probing again. Where a set failed its probe, the probe runs as before.
    """
    from torch._inductor import config
    from torch._inductor import cpu_vec_isa as isa

    if config.cpp.vec_isa_ok is not None:
        return
    file = (root or cache_root()) / ISA_FILE
    declared = [
        str(i) for i in isa.supported_vec_isa_list if set(str(i).split()) <= set(isa.x86_isa_checker())
    ]
    facts = {"torch": torch.__version__, "declared": declared}
    try:
        known = json.loads(file.read_text())
    except (OSError, ValueError):
        known = None
    if known == {**facts, "valid": declared} and declared:
        # Only while inductor lists the valid sets (the list is kept for the process): its config stays as it
        # was, since torch.compile's cache keys read it.
        with config.patch({"cpp.vec_isa_ok": True}):
            isa.valid_vec_isa_list()
        return
    valid = [str(i) for i in isa.valid_vec_isa_list()]  # the probe, once in this process
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(json.dumps({**facts, "valid": valid}))
    except OSError as exc:
        log.warning(
            "the CPU's instruction sets could not be noted in %s (%s); each process probes them", file, exc
        )
