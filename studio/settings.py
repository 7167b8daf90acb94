"""Where the studio keeps its database and images, and library versions for the run log."""

from __future__ import annotations

import errno
import functools
import getpass
import logging
import os
import re
import shutil
import subprocess
import tempfile
import tomllib
from importlib import metadata
from pathlib import Path

log = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parent.parent  # the checkout (pyproject.toml, .git)

PACKAGES = (
    "torch",
    "diffusers",
    "transformers",
    "accelerate",
    "gradio",
    "sqlite-utils",
    "safetensors",
    "torchao",
    "tomesd",
    "openvino",
    "nncf",
)


TRUTHY = ("1", "t", "true", "yes", "on")


def on_zerogpu() -> bool:
    """Whether this process runs on a ZeroGPU Space (``SPACES_ZERO_GPU`` set to a true value): every request's
    GPU work then runs in a forked worker that keeps nothing in memory for the next request."""
    return os.environ.get("SPACES_ZERO_GPU", "").strip().lower() in TRUTHY


def home() -> Path:
    """`$STUDIO_HOME`, else /data/studio on a Space with persistent storage, else ./studio-data."""
    if os.environ.get("STUDIO_HOME"):
        return Path(os.environ["STUDIO_HOME"])
    data = Path("/data")
    if data.is_dir() and os.access(data, os.W_OK):
        return data / "studio"
    return Path.cwd() / "studio-data"


def db_path() -> Path:
    return Path(os.environ.get("STUDIO_DB") or home() / "runs.db")


def outputs_dir() -> Path:
    return Path(os.environ.get("STUDIO_OUTPUTS") or home() / "outputs")


CLIP_MODEL = "openai/clip-vit-base-patch32"
OFF = ("0", "off", "none", "false", "no")


def clip_model() -> str | None:
    """The CLIP model that scores how well an image shows its prompt (`STUDIO_CLIP_MODEL`: a hub id read from
    the local Hugging Face cache, or a local folder; default openai/clip-vit-base-patch32); None when set to
    `off`."""
    value = os.environ.get("STUDIO_CLIP_MODEL", "").strip()
    if value.lower() in OFF:
        return None
    return value or CLIP_MODEL


@functools.lru_cache(maxsize=1)
@functools.cache
def studio_version() -> str:
    """The studio's version (pyproject.toml, else the installed package's), with the commit when the
    checkout is a git repository: '0.1.0+cd0771f'."""
    try:
        version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        try:
            version = metadata.version("diffusion-studio")
        except metadata.PackageNotFoundError:
            version = "unknown"
    git = ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]
    commit = first_line_of(git) if (ROOT / ".git").exists() else None
    return f"{version}+{commit}" if commit else version


def first_line_of(command: list[str]) -> str | None:
    """A short command's first line of output, or None when it is missing or fails."""
    if shutil.which(command[0]) is None:
        return None
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        log.debug("%s failed: %s", command[0], exc)
        return None
    return done.stdout.strip().splitlines()[0] if done.stdout.strip() else None


def versions() -> dict[str, str]:
    """Installed versions of the libraries that shape a run's speed, and the studio's own
    (`studio_version`)."""
    found = {"studio": studio_version()}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def scratch(kind: str) -> Path:
    """A new folder under the studio's home for this process's `kind` of files (weights on disk while a
    technique is applied), named `kind-<pid>-...`; the folders of `kind` left by processes that no longer run
    (killed before they could revert) are removed first."""
    root = home()
    root.mkdir(parents=True, exist_ok=True)
    for old in root.glob(f"{kind}-*-*"):
        pid = old.name.split("-")[1]
        if old.is_dir() and pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{kind}-{os.getpid()}-", dir=root))


def _writable_folder(path: Path) -> OSError | None:
    """None when `path` is (or can be made) a folder this process can write a file in, else the error."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            return None
    except FileExistsError:  # a file where the folder would be: mkdir's "File exists" would not say that
        return NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path))
    except OSError as exc:
        return exc


def usable_compile_cache() -> str | None:
    """Point `TORCHINDUCTOR_CACHE_DIR` at a folder this process can write when the one torch would use cannot
    be written, and say so (a warning, and the sentence returned; None when nothing changed).

    torch 2.13 creates that folder when `torch._dynamo` is first imported (diffusers imports it), so one that
    cannot be created stops every command before it starts, and one that exists read-only fails every
    `torch.compile`. Its default is torch's: `torchinductor_<user>` in the temporary folder. The folder used
    instead is `inductor/` in the studio's home, else a new temporary one: kernels are built again there.
    Inductor keeps its precompiled C++ headers in that default folder whatever `TORCHINDUCTOR_CACHE_DIR`
    says: where the default cannot be written they go to `precompiled_headers/` in the folder used (else
    every kernel's build fails)."""
    configured = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    user = re.sub(r'[\\/:*?"<>|]', "_", getpass.getuser())
    default = Path(tempfile.gettempdir()) / f"torchinductor_{user}"
    wanted = Path(configured) if configured else default
    problem = _writable_folder(wanted)
    said = None
    if problem is not None:
        fallback = home() / "inductor"
        if _writable_folder(fallback) is not None:
            fallback = Path(tempfile.mkdtemp(prefix="torchinductor-"))
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(fallback)
        why = problem.strerror or problem
        said = (
            f"torch.compile's cache folder {wanted} cannot be written ({why}): its kernels go to "
            f"{fallback} instead and are built again there. "
            "Set TORCHINDUCTOR_CACHE_DIR to a writable folder to keep them."
        )
        log.warning(said)
    default_unwritable = problem is not None if wanted == default else not _could_be_written(default)
    if default_unwritable:  # where inductor would keep its precompiled headers
        precompiled_headers_in(Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]) / "precompiled_headers")
    return said


def _could_be_written(path: Path) -> bool:
    """Whether `path` is, or could be made, a folder this process can write, found without creating it (a
    folder torch may never need must not appear where another was asked for)."""
    for folder in (path, *path.parents):
        if folder.exists():
            return folder.is_dir() and os.access(folder, os.W_OK | os.X_OK)
    return False


def precompiled_headers_in(folder: Path) -> None:
    """Make inductor keep its precompiled C++ headers (~150 MB each) in `folder` from now on, in this process.
    Private names of torch 2.13's codecache: where they are gone, inductor's own folder stays in use."""
    from torch._inductor import codecache

    if hasattr(codecache, "_HEADER_DIR") and hasattr(codecache, "_HEADER_LOCK_DIR"):
        codecache._HEADER_DIR = str(folder)
        codecache._HEADER_LOCK_DIR = str(folder / "locks")
