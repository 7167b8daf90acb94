"""Assemble the Hugging Face Space folder from the repository and, with --upload, push it.

    .venv/bin/python spaces/build_space.py                          # dry run: build into a temp dir, list it
    .venv/bin/python spaces/build_space.py --out build/space        # keep the folder
    HF_TOKEN=... .venv/bin/python spaces/build_space.py --upload --repo owner/diffusion-studio

The Space gets app.py, requirements.txt, studio/, pipelines/ (without training runs or
checkpoints), assets/ and spaces/README.md as its README.md (the front matter the Hub reads).
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
FILES = ("app.py", "requirements.txt")
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


def build(out: Path, root: Path = ROOT) -> list[tuple[str, int]]:
    """Copy the Space's files into `out` (a new or empty directory); returns (path, bytes) per file.

    Args:
        out: where to assemble the Space.
        root: the repository root.
    """
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} is not empty; give --out a new or empty directory.")
    written = []
    for src, rel in plan(root):
        dest = out / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest)
        written.append((rel, dest.stat().st_size))
    return written


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
    p.add_argument("--upload", action="store_true", help="upload to the Space (needs --repo and HF_TOKEN)")
    p.add_argument("--repo", help="the Space, owner/name")
    return p


def _run(args: argparse.Namespace, out: Path, token: str | None) -> int:
    """Build into `out`, list it, check it; upload only when a token was given (that is, with --upload)."""
    files = build(out)
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
