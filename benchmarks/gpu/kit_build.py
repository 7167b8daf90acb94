"""Build and check the GPU kit (`make gpu-kit`): download the wheels of `kit.txt` for the machine's Python
3.12 on x86-64 Linux, look for an xformers wheel built for its torch, and check that the kit installs offline.

    .venv/bin/python -m benchmarks.gpu.kit_build [--kit .gpu-kit] [--no-xformers] [--max-mib N]

It prints the kit's size alone and with the files git tracks (what you copy to the GPU machine); with
`--max-mib`, it stops with an error when the two together exceed that many MiB (for when what you can copy
over is limited).

The install check runs here, on this machine's Python (3.11 on the development machines): every wheel of the
kit is pure Python or abi3, so it installs the same way; the engine's modules are then imported with `python
-S` from the kit and a copy of this virtualenv's site-packages without the kit's packages, so nothing the kit
should carry can come from here.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from packaging.version import Version

from benchmarks.gpu.kit import (
    KIT_DIR,
    MACHINE_TORCH,
    NO_XFORMERS,
    ROOT,
    XFORMERS_NOTE,
    missing_dependencies,
    pin_problems,
    read_kit,
    runtime_requirements,
    wheel_id,
    wheel_metadata,
)

log = logging.getLogger("benchmarks.gpu.kit_build")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "any")
DOWNLOAD = [
    "download",
    "--no-deps",
    "--only-binary=:all:",
    "--python-version",
    "3.12",
    "--implementation",
    "cp",
    *(arg for platform in PLATFORMS for arg in ("--platform", platform)),
]
MIB = 2**20
IMPORTS = ("diffusers", "sqlite_utils", "sqlite_fts4", "click_default_group", "torchao", "tomesd")
XFORMERS_TRIES = 3


def pip(*args: str) -> str:
    """Run this interpreter's pip; its output."""
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def download(kit: Path) -> list[Path]:
    """The wheels of kit.txt, fresh, in `kit` (older wheels there are removed first)."""
    kit.mkdir(exist_ok=True)
    for old in kit.glob("*.whl"):
        old.unlink()
    pip(*DOWNLOAD, "-d", str(kit), "-r", str(ROOT / "benchmarks" / "gpu" / "kit.txt"))
    return sorted(kit.glob("*.whl"))


def built_for(wheel: Path) -> tuple[str | None, str]:
    """The torch an xformers wheel was built for (its cpp_lib.json), and its torch requirement."""
    with zipfile.ZipFile(wheel) as whl:
        name = next((n for n in whl.namelist() if n.endswith("xformers/cpp_lib.json")), None)
        build = json.loads(whl.read(name))["version"] if name else {}
    declared = runtime_requirements(wheel_metadata(wheel).get_all("Requires-Dist"))
    torch = next((str(r) for r in declared if r.name == "torch"), "torch (no requirement)")
    cuda = build.get("cuda")
    built = build.get("torch")
    if built and cuda:
        built += f" (CUDA {cuda // 100}.{cuda % 100})"
    return built, torch


def fits_machine(built: str | None, torch: str) -> bool:
    """Whether an xformers wheel built for torch `built` (or, when unknown, requiring `torch`) is made for the
    machine's torch: the same version and, where the build says, the same CUDA."""
    if built:
        return built.split(" ")[0] == MACHINE_TORCH
    return f"torch=={MACHINE_TORCH.split('+')[0]}" in torch.replace(" ", "")


def xformers_versions() -> list[str]:
    """xformers' versions on the package index, newest first."""
    out = pip("index", "versions", "xformers")
    match = re.search(r"Available versions: (.+)", out)
    return [v.strip() for v in match.group(1).split(",")] if match else []


def find_xformers(kit: Path) -> str:
    """Carry an xformers wheel built for the machine's torch if one exists (newest first, stopping at the
    first built for an older torch); the sentence saying what was found, also written to the kit."""
    want = Version(MACHINE_TORCH.split("+")[0])
    seen = []
    with tempfile.TemporaryDirectory() as tmp:
        for version in xformers_versions()[:XFORMERS_TRIES]:
            pip(*DOWNLOAD, "-d", tmp, f"xformers=={version}")
            wheel = next(Path(tmp).glob(f"xformers-{version}-*.whl"))
            built, torch = built_for(wheel)
            seen.append(f"xformers {version}: built for torch {built or 'unknown'}, requires {torch}")
            if fits_machine(built, torch):
                wheel.rename(kit / wheel.name)
                note = f"carried: xformers {version} ({seen[-1]})"
                break
            if built and Version(built.split("+")[0]) < want:
                note = f"not carried: {NO_XFORMERS} ({'; '.join(seen)})"
                break
        else:
            note = f"not carried: {NO_XFORMERS} ({'; '.join(seen) or 'no version found'})"
    (kit / XFORMERS_NOTE).write_text(note + "\n")
    return note


def site_packages() -> Path:
    """This virtualenv's site-packages."""
    return Path(next(p for p in sys.path if p.endswith("site-packages")))


def _top(name: str) -> str:
    """'sqlite_utils-4.2.1.dist-info', 'click_default_group.py' -> the module name they belong to."""
    return name.split("/")[0].split("-")[0].split(".")[0].lower()


def without_kit(view: Path, wheels: list[Path]) -> None:
    """Fill `view` with links to this virtualenv's site-packages entries, except the kit's own packages."""
    carried = set()
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as whl:
            carried |= {_top(n) for n in whl.namelist()}
    for entry in site_packages().iterdir():
        if _top(entry.name) not in carried:
            (view / entry.name).symlink_to(entry)


def install_check(wheels: list[Path]) -> str:
    """Install the kit offline into a folder and import the engine from it alone; the modules' versions."""
    with tempfile.TemporaryDirectory() as tmp:
        target, view = Path(tmp, "site"), Path(tmp, "view")
        view.mkdir()
        pip(
            "install",
            "-q",
            "--no-index",
            "--no-deps",
            "--no-compile",
            "--target",
            str(target),
            *map(str, wheels),
        )
        without_kit(view, wheels)
        code = (
            "import importlib, sys\n"
            f"for name in {IMPORTS!r}:\n"
            "    module = importlib.import_module(name)\n"
            f"    assert module.__file__.startswith({str(target)!r}), (name, module.__file__)\n"
            "from studio.engine import Studio\n"
            "from studio.runlog import RunLog\n"
            "import diffusers, sqlite_utils\n"
            "print('diffusers', diffusers.__version__, 'and sqlite-utils import from the kit alone')\n"
        )
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), str(view), str(ROOT)])}
        done = subprocess.run(
            [sys.executable, "-S", "-c", code], env=env, capture_output=True, text=True, cwd=ROOT
        )
        if done.returncode:
            raise SystemExit(f"the kit does not import offline:\n{done.stderr[-3000:]}")
        return done.stdout.strip()


def tree_bytes() -> int:
    """The bytes of the files git tracks (what is copied to the GPU machine besides the kit)."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return sum((ROOT / f).stat().st_size for f in files.decode().split("\0") if f and (ROOT / f).is_file())


def check_size(kit_bytes: int, total: int, max_mib: float | None) -> str:
    """The line saying the kit's size alone and with the tracked files; with `max_mib` (the size limit you
    gave), stops with an error when the two together exceed it.

    Args:
        kit_bytes: the kit's files.
        total: the kit and the tracked files together.
        max_mib: the most MiB the two may take together, or None for no size limit.
    """
    limit = f" (size limit {max_mib:g} MiB)" if max_mib is not None else ""
    line = f"kit: {kit_bytes / MIB:.1f} MiB; with the tracked tree {total / MIB:.1f} MiB{limit}"
    if max_mib is not None and total > max_mib * MIB:
        raise SystemExit(
            f"{line}: the tracked files and the kit together exceed the size limit you gave (--max-mib "
            f"{max_mib:g}); leave out what the GPU machine does not need or give a larger limit"
        )
    return line


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kit", type=Path, default=KIT_DIR)
    parser.add_argument("--no-xformers", action="store_true", help="skip the xformers search")
    parser.add_argument(
        "--max-mib",
        type=float,
        default=None,
        help="stop with an error when the kit and the tracked files together exceed this many MiB "
        "(default: no size limit)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    wheels = download(args.kit)
    note = NO_XFORMERS if args.no_xformers else find_xformers(args.kit)
    print(f"xformers: {note}")
    wheels = sorted(args.kit.glob("*.whl"))
    problems = pin_problems(wheels, read_kit()) + missing_dependencies(wheels)
    if problems:
        raise SystemExit("the kit is not right:\n  " + "\n  ".join(problems))
    for wheel in wheels:
        name, version = wheel_id(wheel)
        print(f"  {name} {version}  ({wheel.stat().st_size / MIB:.1f} MiB)")
    print(install_check(wheels))
    kit_bytes = sum(f.stat().st_size for f in args.kit.iterdir() if f.is_file())
    total = kit_bytes + tree_bytes()
    print(check_size(kit_bytes, total, args.max_mib))


if __name__ == "__main__":
    main()
