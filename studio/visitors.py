"""Who is asking, and whose runs they may read.

Run locally the studio has one user, who reads every run. Deployed as a public Space it has many visitors at
once, and each reads only their own runs, prompts and images; its owners read everything. Which of the two is
`STUDIO_VISITORS` (`private` or `shared`), by default `private` where `SPACE_ID` is set (a Hugging Face Space)
and `shared` elsewhere.

A visitor is named by the face that serves them (`studio.ui.visiting` for the web app and its API): the
Hugging Face account they signed in with (a Space with OAuth) or the login of `STUDIO_AUTH`, else the id their
browser keeps for the studio (a reload keeps their history), else their `gradio_client` session. The owners
are the Space's owner (`SPACE_AUTHOR_NAME`, set on Spaces), the accounts named in `STUDIO_ADMINS` and the
`STUDIO_AUTH` login.

The visitor of the request at hand is a context variable: the face sets it around each call (`acting_as`),
the engine reads it where runs are written and read (`current`, `scope`). The CLI and scripts are the local
user.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator
from dataclasses import dataclass

MODES = ("shared", "private")


@dataclass(frozen=True)
class Visitor:
    """One person using the studio: `id` is what their runs are logged under (None: not told apart, the local
    user), `sees_all` whether they read every visitor's runs (the local user and the owners)."""

    id: str | None
    sees_all: bool

    @property
    def words(self) -> str:
        """How the page names them."""
        if self.id is None:
            return "the studio's user (every run)"
        kind, _, name = self.id.partition(":")
        who = {"user": f"signed in as {name}", "browser": "visiting from this browser"}.get(
            kind, "visiting through this client session"
        )
        return f"{who}{' (an owner: every visitor’s runs)' if self.sees_all else ''}"


LOCAL = Visitor(id=None, sees_all=True)
_CURRENT: contextvars.ContextVar[Visitor] = contextvars.ContextVar("visitor", default=LOCAL)


def mode() -> str:
    """`private` (each visitor reads their own runs) or `shared` (one user: everyone reads everything)."""
    given = os.environ.get("STUDIO_VISITORS", "").strip().lower()
    if given in MODES:
        return given
    if given:
        raise ValueError(f"STUDIO_VISITORS must be one of {', '.join(MODES)}, not {given!r}.")
    return "private" if os.environ.get("SPACE_ID") else "shared"


def owners() -> set[str]:
    """The accounts that read every visitor's runs: the Space's owner, `STUDIO_ADMINS` and the `STUDIO_AUTH`
    login."""
    names = {n.strip() for n in os.environ.get("STUDIO_ADMINS", "").split(",")}
    names.add(os.environ.get("SPACE_AUTHOR_NAME", ""))
    auth = os.environ.get("STUDIO_AUTH", "")
    if ":" in auth:
        names.add(auth.split(":", 1)[0])
    return {n for n in names if n}


def identify(*, account: str | None, browser: str | None, session: str | None) -> Visitor:
    """The visitor of a request: by the account they signed in with, else their browser's id, else their
    session; everyone is the local user where the studio is not private."""
    if mode() == "shared":
        return LOCAL
    if account:
        return Visitor(id=f"user:{account}", sees_all=account in owners())
    if browser:
        return Visitor(id=f"browser:{browser}", sees_all=False)
    return Visitor(id=f"session:{session or 'unknown'}", sees_all=False)


def current() -> Visitor:
    """The visitor of the request being served (the local user outside any)."""
    return _CURRENT.get()


def scope() -> str | None:
    """Whose runs the current visitor reads: their id, or None for every run."""
    visitor = current()
    return None if visitor.sees_all else visitor.id


@contextlib.contextmanager
def acting_as(visitor: Visitor) -> Iterator[None]:
    """Serve the block for `visitor`."""
    token = _CURRENT.set(visitor)
    try:
        yield
    finally:
        _CURRENT.reset(token)
