"""Assemble the Hugging Face Space folder from the repository and, with --upload, push it.

    .venv/bin/python spaces/build_space.py                          # dry run: build into a temp dir, list it
    .venv/bin/python spaces/build_space.py --out build/space        # keep the folder
    HF_TOKEN=... .venv/bin/python spaces/build_space.py --upload --repo owner/diffusion-studio

The Space gets app.py, studio/, pipelines/ (without training runs or checkpoints), assets/,
spaces/README.md as its README.md (the front matter the Hub reads) and a requirements.txt made for its
hardware: the runtime requirements plus the optional accelerators that run there (on CPU hardware
OpenVINO and NNCF, the fastest path measured on CPUs; on GPU hardware token merging and torchao).
`--hardware` names the Space's hardware (default: the front matter's `suggested_hardware`) and is written
back into the front matter. On a Space the studio loads only the registry's models unless the owner sets
the STUDIO_MODEL_ALLOWLIST variable (`pipelines.sources.allowlist`).
Nothing is uploaded without --upload. The token is read from the HF_TOKEN environment variable
only, passed straight to huggingface_hub, and never printed or logged.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
FILES = ("app.py",)
# The optional accelerators (pinned in requirements-extras.txt) that run on each kind of Space hardware.
CPU_TORCH_INDEX = "--extra-index-url https://download.pytorch.org/whl/cpu\n"
EXTRAS = {"cpu": ("tomesd", "torchao", "openvino", "nncf"), "gpu": ("tomesd", "torchao")}
TREES = ("studio", "pipelines", "assets")
SKIP_DIRS = {"__pycache__", "runs", ".pytest_cache", ".ruff_cache"}
SKIP_SUFFIXES = {".pyc", ".pt", ".pth", ".ckpt", ".bin", ".npy"}
GRADIO_PIN = re.compile(r"^\s*gradio\s*(?:\[[\w,\s-]*\])?\s*==\s*([\w.]+)\s*$", re.MULTILINE)


def _tree(root: Path, top: str) -> list[tuple[Path, str]]:
    found = []
    for path in sorted((root / top).rglob("*")):
        rel = path.relative_to(root)
        if path.is_file() and not SKIP_DIRS.intersection(rel.parts) and path.suffix not in SKIP_SUFFIXES:
            found.append((path, rel.as_posix()))
    return found


def plan(root: Path = ROOT) -> list[tuple[Path, str]]:
    """What goes into the Space: (source file, path in the Space), README.md from spaces/README.md.

    Args:
        root: the repository root.
    """
    files = [(root / name, name) for name in FILES]
    for top in TREES:
        files += _tree(root, top)
    files.append((root / "spaces" / "README.md", "README.md"))
    missing = [str(src) for src, _ in files if not src.is_file()]
    if missing:
        raise FileNotFoundError(f"The Space needs files that are missing from the repository: {missing}")
    return files


def kind_of(hardware: str) -> str:
    """ "cpu" for a Space's CPU hardware (cpu-basic, cpu-upgrade), else "gpu" (zero-a10g, t4-small, ...)."""
    return "cpu" if hardware.startswith("cpu") else "gpu"


def requirements(hardware: str, root: Path = ROOT) -> str:
    """The Space's requirements.txt: the runtime requirements and the pinned extras that run on `hardware`.

    Args:
        hardware: the Space's hardware name, e.g. "cpu-basic" or "zero-a10g".
        root: the repository root.
    """
    wanted = EXTRAS[kind_of(hardware)]
    pins = {}
    for line in (root / "requirements-extras.txt").read_text(encoding="utf-8").splitlines():
        spec = line.split("#", 1)[0].strip()
        if spec:
            pins[re.split(r"[=<>~!\[ ]", spec, maxsplit=1)[0].lower()] = spec
    missing = [name for name in wanted if name not in pins]
    if missing:
        raise ValueError(f"requirements-extras.txt pins no {', '.join(missing)}.")
    base = (root / "requirements.txt").read_text(encoding="utf-8").rstrip()
    extras = "\n".join(pins[name] for name in wanted)
    # CPU hardware: torch's CPU build (a few hundred MB) instead of PyPI's CUDA build (several GB).
    index = CPU_TORCH_INDEX if kind_of(hardware) == "cpu" else ""
    return (
        f"{index}{base}\n# Optional accelerators that run on {hardware} (requirements-extras.txt)\n{extras}\n"
    )


def build(
    out: Path, root: Path = ROOT, hardware: str | None = None, packages: Path | None = None
) -> list[tuple[str, int]]:
    """Copy the Space's files into `out` (a new or empty directory); returns (path, bytes) per file.

    Args:
        out: where to assemble the Space.
        root: the repository root.
        hardware: the Space's hardware (default: the front matter's `suggested_hardware`).
        packages: a folder of compiled packages (`aot_package`: a studio home's `packages/`, built with the
            Space's GPU and torch) shipped as the Space's `packages/`, which the studio reads before its own:
            a request's worker loads them instead of compiling.
    """
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} is not empty; give --out a new or empty directory.")
    readme = (root / "spaces" / "README.md").read_text(encoding="utf-8")
    hardware = hardware or str(front_matter(root / "spaces" / "README.md")["suggested_hardware"])
    written = []
    for src, rel in plan(root) + shipped_packages(packages):
        dest = out / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest)
        written.append((rel, dest.stat().st_size))
    generated = {
        "requirements.txt": requirements(hardware, root),
        "README.md": re.sub(
            r"(?m)^suggested_hardware: .*$", f"suggested_hardware: {hardware}", readme, count=1
        ),
    }
    for rel, text in generated.items():
        (out / rel).write_text(text, encoding="utf-8")
    sizes = dict(written) | {rel: (out / rel).stat().st_size for rel in generated}
    return sorted(sizes.items())


def shipped_packages(folder: Path | None) -> list[tuple[Path, str]]:
    """The files of every compiled package under `folder` (one folder each, with package.pt2 and
    package.json), as (source, path in the Space under packages/)."""
    if folder is None:
        return []
    found = sorted(p.parent for p in folder.glob("*/package.json") if (p.parent / "package.pt2").is_file())
    if not found:
        raise FileNotFoundError(
            f"{folder} holds no compiled package (a folder with package.pt2 and package.json)."
        )
    return [
        (pkg / name, f"packages/{pkg.name}/{name}")
        for pkg in found
        for name in ("package.pt2", "package.json")
    ]


def front_matter(readme: Path) -> dict[str, Any]:
    """The YAML block between the first two `---` lines of a Space README."""
    text = readme.read_text(encoding="utf-8")
    match = re.match(r"^---\s*\n(.*?)\n---\s*\n", text, re.DOTALL)
    if not match:
        raise ValueError(f"{readme} has no YAML front matter between '---' lines.")
    return yaml.safe_load(match.group(1))


def gradio_pin(requirements: Path) -> str | None:
    """The exact gradio version pinned in a requirements file (`gradio==X`, extras allowed), or None."""
    match = GRADIO_PIN.search(requirements.read_text(encoding="utf-8"))
    return match.group(1) if match else None


def check(folder: Path) -> list[str]:
    """What is wrong with an assembled Space folder (empty when it is ready to upload).

    Args:
        folder: the assembled Space.
    """
    meta = front_matter(folder / "README.md")
    problems = []
    if meta.get("sdk") != "gradio":
        problems.append(f"sdk is {meta.get('sdk')!r}, expected 'gradio'")
    if not (folder / str(meta.get("app_file", ""))).is_file():
        problems.append(f"app_file {meta.get('app_file')!r} is not in the Space")
    pin = gradio_pin(folder / "requirements.txt")
    if str(meta.get("sdk_version")) != pin:
        problems.append(
            f"sdk_version {meta.get('sdk_version')!r} differs from the gradio pin {pin!r} in requirements.txt"
        )
    if not isinstance(meta.get("python_version"), str):
        problems.append('python_version must be a quoted string such as "3.11"')
    if len(str(meta.get("short_description", ""))) > 60:
        problems.append("short_description is longer than 60 characters")
    return problems


def upload(folder: Path, repo_id: str, token: str) -> str:
    """Create the Space if needed and upload `folder` to it; returns the commit URL.

    Args:
        folder: the assembled Space.
        repo_id: "owner/name" of the Space.
        token: a Hugging Face write token (from HF_TOKEN; never printed).
    """
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    api.create_repo(repo_id, repo_type="space", space_sdk="gradio", exist_ok=True)
    info = api.upload_folder(
        repo_id=repo_id,
        folder_path=folder,
        repo_type="space",
        commit_message="Deploy Diffusion Studio from spaces/build_space.py",
    )
    return str(getattr(info, "commit_url", info))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--out", type=Path, help="assemble here (default: a temporary directory, removed afterwards)"
    )
    p.add_argument(
        "--packages",
        type=Path,
        help="ship the compiled packages in this folder (a studio home's packages/, built on the Space's GPU "
        "kind and torch version) as the Space's packages/",
    )
    p.add_argument("--upload", action="store_true", help="upload to the Space (needs --repo and HF_TOKEN)")
    p.add_argument("--repo", help="the Space, owner/name")
    p.add_argument(
        "--hardware",
        help="the Space's hardware, e.g. cpu-basic (the free 2 vCPUs) or zero-a10g "
        "(default: the README's suggested_hardware)",
    )
    return p


def _run(args: argparse.Namespace, out: Path, token: str | None) -> int:
    """Build into `out`, list it, check it; upload only when a token was given (that is, with --upload)."""
    files = build(out, hardware=args.hardware, packages=args.packages)
    for rel, size in files:
        print(f"{size:>12,}  {rel}")
    print(f"{sum(s for _, s in files):>12,}  total, {len(files)} files in {out}")
    problems = check(out)
    if problems:
        print("error: the Space is not ready: " + "; ".join(problems), file=sys.stderr)
        return 2
    if token is None:
        print("dry run: nothing uploaded (add --upload --repo owner/name, with HF_TOKEN set)")
        return 0
    print(f"uploaded to {upload(out, args.repo, token)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Build (and optionally upload) the Space; 0 on success, 2 on a usage or readiness problem."""
    args = _parser().parse_args(argv)
    token = os.environ.get("HF_TOKEN") if args.upload else None
    if args.upload and not (args.repo and token):
        print(
            "error: --upload needs --repo owner/name and a write token in the HF_TOKEN environment variable.",
            file=sys.stderr,
        )
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.out is not None:
            return _run(args, args.out, token)
        with tempfile.TemporaryDirectory(prefix="space-") as tmp:
            return _run(args, Path(tmp), token)
    except (FileExistsError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
