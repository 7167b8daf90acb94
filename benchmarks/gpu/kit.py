"""The GPU kit: the wheels an offline GPU machine lacks, read from `kit.txt`, and what is known about that
machine.

The machine (Python 3.12, torch 2.11.0+cu130, no network, no package index) has the packages in `MACHINE`;
the kit carries the rest of what the engine imports. `make gpu-kit` builds and checks the kit
(`benchmarks.gpu.kit_build`); on the machine `benchmarks/gpu/run.sh` installs it and the environment section
of the results lists any declared requirement the installed versions do not meet (`unmet_requirements`).
"""

from __future__ import annotations

import email
import re
import zipfile
from email.message import Message
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
KIT_LIST = HERE / "kit.txt"
KIT_DIR = ROOT / ".gpu-kit"
XFORMERS_NOTE = "xformers.txt"  # in the kit folder: whether an xformers wheel is carried, and why not
NO_XFORMERS = "no xformers wheel built for torch 2.11 could be carried"

PYTHON = "3.12"
MACHINE_TORCH = "2.11.0+cu130"
# What the machine has installed (versions where they are known), and nothing else that matters here.
MACHINE: dict[str, str | None] = {
    "torch": "2.11.0",
    "accelerate": "1.15",
    "transformers": "5.17",
    "huggingface-hub": "1.33",
    "numpy": "2.5",
    "safetensors": None,
    "pillow": None,
    "pandas": None,
    "psutil": None,
    "pytest": None,
    "regex": None,
    "requests": None,
    "tqdm": None,
    "filelock": None,
    "click": None,
    "tabulate": None,
    "python-dateutil": None,
    "pluggy": None,
    "pyyaml": None,
    "pip": None,
}
# Declared requirements the kit leaves out on purpose, with the reason.
NOT_NEEDED = {
    "importlib-metadata": "diffusers imports it only on Python < 3.8 (diffusers/utils/import_utils.py)",
}


def project(name: str) -> str:
    """A distribution name normalised as PEP 503 does ('Sqlite_Utils' -> 'sqlite-utils')."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_kit(path: Path = KIT_LIST) -> list[Requirement]:
    """The requirements listed in `kit.txt` (comments and blank lines skipped)."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [Requirement(line) for line in lines if line]


def wheel_id(path: Path) -> tuple[str, Version]:
    """(project, version) from a wheel's file name."""
    name, version = path.name.split("-")[:2]
    return project(name), Version(version)


def wheel_metadata(path: Path) -> Message:
    """The METADATA of a wheel's .dist-info folder."""
    with zipfile.ZipFile(path) as whl:
        name = next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
        return email.message_from_bytes(whl.read(name))


def runtime_requirements(declared: list[str] | None) -> list[Requirement]:
    """The `Requires-Dist` lines that apply on the machine's Python without extras."""
    found = []
    for line in declared or []:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate({"python_version": PYTHON, "extra": ""}):
            found.append(req)
    return found


def missing_dependencies(wheels: list[Path]) -> list[str]:
    """Requirements of the kit's wheels that neither the kit nor the machine provides (nor are left out on
    purpose), one sentence each."""
    carried = {wheel_id(w)[0] for w in wheels}
    problems = []
    for wheel in wheels:
        for req in runtime_requirements(wheel_metadata(wheel).get_all("Requires-Dist")):
            name = project(req.name)
            if name not in carried and name not in MACHINE and name not in NOT_NEEDED:
                problems.append(f"{wheel.name} requires {req}, which neither the kit nor the machine has")
    return problems


def pin_problems(wheels: list[Path], kit: list[Requirement]) -> list[str]:
    """Each requirement of `kit.txt` met by exactly one wheel, and no wheel that the list does not name."""
    problems = []
    by_project: dict[str, list[Version]] = {}
    for wheel in wheels:
        name, version = wheel_id(wheel)
        by_project.setdefault(name, []).append(version)
    for req in kit:
        versions = by_project.pop(project(req.name), [])
        if len(versions) != 1:
            problems.append(f"{req.name}: {len(versions)} wheels in the kit, expected one")
        elif versions[0] not in req.specifier:
            problems.append(f"{req.name} {versions[0]} does not meet {req}")
    by_project.pop("xformers", None)  # carried only when one was built for the machine's torch
    problems += [f"{name}: in the kit but not in kit.txt" for name in by_project]
    return problems


def xformers_note(kit_dir: Path = KIT_DIR) -> str:
    """What `make gpu-kit` found about xformers (the default sentence when the kit has no note)."""
    note = kit_dir / XFORMERS_NOTE
    return note.read_text().strip() if note.is_file() else NO_XFORMERS


def unmet_requirements(names: list[str]) -> list[str]:
    """On the machine: the installed versions that do not meet a requirement the named packages declare."""
    problems = []
    for name in names:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            problems.append(f"{name} is not installed")
            continue
        for req in runtime_requirements(dist.requires):
            if project(req.name) in NOT_NEEDED:
                continue
            try:
                have = metadata.version(req.name)
            except metadata.PackageNotFoundError:
                problems.append(f"{name} requires {req}; it is not installed")
                continue
            if not SpecifierSet(str(req.specifier)).contains(have, prereleases=True):
                problems.append(f"{name} requires {req}; {have} is installed")
    return problems
