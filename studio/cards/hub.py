"""Cards shared through a Hugging Face dataset repository: published one file per card (`cards/<name>.json`,
one commit each, so a card is in the repository whole or not at all) and loaded with the local ones.

Publishing reads the token from `HF_TOKEN` and never prints or logs it; without a token, or offline
(`HF_HUB_OFFLINE`), it says so in a sentence and uploads nothing. Loading offline, or when the repository
cannot be reached, says so and shows the local cards only.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from studio.cards.collection import DOCS_CARDS, Loaded, load_folder, machine_tables
from studio.errors import UnavailableError, ValidationError
from studio.optimizations import packages

log = logging.getLogger(__name__)
DATASET = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")
FOLDER = "cards"  # where the cards live in the dataset repository


def check_repo(repo_id: str) -> str:
    """`repo_id` when it names a repository as OWNER/DATASET."""
    if not isinstance(repo_id, str) or not DATASET.match(repo_id.strip()) or ".." in repo_id:
        raise ValidationError(f"{repo_id!r} is not a dataset repository; write it as OWNER/DATASET.")
    return repo_id.strip()


def _offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def _network_errors() -> tuple[type[BaseException], ...]:
    """What the hub client raises when the repository cannot be reached or refuses (its HTTP errors are
    OSErrors; its transport's are not)."""
    found: list[type[BaseException]] = [OSError]
    for module in ("httpx2", "httpx"):
        try:
            found.append(__import__(module).HTTPError)
        except (ImportError, AttributeError):
            continue
    return tuple(found)


def check_publish(repo_id: str) -> str:
    """Refuse, before anything runs, a publish that cannot happen: a malformed name, no token, offline."""
    repo_id = check_repo(repo_id)
    if not os.environ.get("HF_TOKEN"):
        raise UnavailableError(
            f"Publishing to {repo_id} needs a Hugging Face token with write access in HF_TOKEN; "
            "nothing was uploaded."
        )
    if _offline():
        raise UnavailableError(
            f"HF_HUB_OFFLINE is set, so nothing can be published to {repo_id}; unset it to publish."
        )
    return repo_id


@dataclass
class Published:
    uploaded: list[str] = field(default_factory=list)  # paths in the repository
    message: str = ""


def publish(paths: list[Path], repo_id: str, package_files: list[Path] = ()) -> Published:
    """Upload each card in `paths` to the dataset `repo_id` (created when missing) as `cards/<name>`, and the
    compiled packages' files (`package_files`: `studio.optimizations.packages.files()`) beside them as
    `packages/<key>/<name>`, where `aot_package`'s `source` setting finds them on another machine.

    Raises:
        UnavailableError, ValidationError: see `check_publish`; nothing is uploaded then.
    """
    from huggingface_hub import HfApi

    repo_id = check_publish(repo_id)
    token = os.environ["HF_TOKEN"]
    api = HfApi(token=token)
    done = Published()
    try:
        api.create_repo(repo_id, repo_type="dataset", exist_ok=True)
        uploads = [(p, f"{FOLDER}/{Path(p).name}") for p in paths]
        uploads += [(p, f"{packages.FOLDER}/{Path(p).parent.name}/{Path(p).name}") for p in package_files]
        for path, target in uploads:
            api.upload_file(
                path_or_fileobj=str(path),
                path_in_repo=target,
                repo_id=repo_id,
                repo_type="dataset",
                commit_message=f"card {Path(path).name}"
                if target.startswith(FOLDER)
                else f"compiled package {Path(path).parent.name}",
            )
            done.uploaded.append(target)
    except _network_errors() as exc:
        why = str(exc).replace(token, "***") or type(exc).__name__
        done.message = (
            f"Publishing to {repo_id} stopped after {len(done.uploaded)} of {len(uploads)} files ({why}); "
            "each file uploaded is whole, the others are only local."
        )
        return done
    kept = len(package_files) // 2
    with_packages = f" and {kept} compiled package(s)" if kept else ""
    done.message = (
        f"Published {len(paths)} card(s){with_packages} to https://huggingface.co/datasets/{repo_id}."
    )
    return done


def load_hub(repo_id: str, *local: str | Path) -> tuple[Loaded, str | None]:
    """The cards of the dataset `repo_id` and of the `local` folders; offline or unreachable, the local
    ones only, with a sentence saying so (None when the repository's cards are in)."""
    from huggingface_hub import snapshot_download

    repo_id = check_repo(repo_id)
    if _offline():
        return load_folder(
            *local
        ), f"Offline (HF_HUB_OFFLINE): the cards of {repo_id} are not loaded, only the local ones."
    try:
        folder = snapshot_download(repo_id, repo_type="dataset", allow_patterns="*.json")
    except _network_errors() as exc:
        log.info("cards of %s not loaded: %s", repo_id, exc)
        return load_folder(
            *local
        ), f"The cards of {repo_id} could not be loaded ({type(exc).__name__}): only the local ones."
    return load_folder(*local, folder, Path(folder) / FOLDER), None


@dataclass
class Machines:
    """What the Machines view shows: one table per model, sentences about what could not be read, and the
    cards loaded (whose winners the view offers to Generate)."""

    tables: dict[str, list[dict[str, Any]]]
    refused: list[str]  # a sentence per file that is no card this studio reads
    note: str | None  # why a dataset's cards are missing (offline, unreachable), None when they are in
    cards: list[dict[str, Any]] = field(default_factory=list)  # whole cards: rows, searches, commands

    def data(self) -> dict[str, Any]:
        """The tables, the refused files and the note: what `/machines` answers and `python -m studio cards
        --machines --json` prints (the cards stay out: their rows and searches would make it many times
        larger)."""
        return {"tables": self.tables, "refused": self.refused, "note": self.note}


def machines(
    source: str | None = None, folder: str | Path | None = None, here: str | None = None
) -> Machines:
    """The cards of this studio (`folder`, default its home's `cards/`), the project's own (docs/cards) and
    `source` (a folder, or a dataset repository as OWNER/DATASET), as one table per model, with the cards.

    Args:
        source: more cards: a local folder or OWNER/DATASET; None or "" for none.
        folder: this studio's cards (default `studio.cards.card.default_folder()`).
        here: the running machine's fingerprint (default: detected), whose cards are marked.
    """
    from studio.cards.card import default_folder
    from studio.cards.machine import this_fingerprint

    local = [Path(folder) if folder else default_folder(), DOCS_CARDS]
    note = None
    if source and not Path(source).is_dir() and DATASET.match(source):
        loaded, note = load_hub(source, *local)
    else:
        loaded = load_folder(*local, *([source] if source else []))
    tables = machine_tables(loaded.cards, here if here is not None else this_fingerprint())
    return Machines(tables, loaded.refused, note, loaded.cards)
