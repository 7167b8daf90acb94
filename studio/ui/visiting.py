"""Every web request served as its visitor (`studio.visitors`): each handler and MCP tool is wrapped so
that Gradio hands it the request (and, on a Space with OAuth, the signed-in profile), and the engine writes
and reads runs as the visitor it names.

A browser keeps an id of its own for the studio in a cookie (`COOKIE`, a year, set by `HEAD`'s script on the
first page load): a reload keeps one's history. A `gradio_client` caller sends no cookie: it is the Hugging
Face account of the token it sends (`Client(url, token="hf_...")`), else its session.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import re
import threading
from collections.abc import Callable
from typing import Any

import gradio as gr

from studio import visitors

COOKIE = "studio_visitor"
BROWSER_ID = re.compile(r"^[0-9a-f]{32}$")  # what HEAD's script writes: 128 random bits
HEAD = f"""<script>
(() => {{
  if (document.cookie.split('; ').some(c => c.startsWith('{COOKIE}='))) return;
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  const id = Array.from(bytes, b => b.toString(16).padStart(2, '0')).join('');
  document.cookie = '{COOKIE}=' + id + '; path=/; max-age=31536000; SameSite=Lax';
}})();
</script>"""
REQUEST = "visitor_request"  # the parameter a wrapper adds where the handler takes no request of its own
PROFILE = "visitor_profile"
# Where a caller's Hugging Face token comes: gradio_client sends the first, a plain HTTP call the second
TOKEN_HEADERS = ("x-hf-authorization", "authorization")
KNOWN_TOKENS = 1024  # accounts remembered per token, so a visitor's calls ask the hub once

log = logging.getLogger(__name__)
_accounts: dict[str, str | None] = {}
_accounts_lock = threading.Lock()


def oauth_on() -> bool:
    """Whether visitors sign in with Hugging Face (a Space with `hf_oauth: true` has OAUTH_CLIENT_ID set)."""
    return bool(os.environ.get("OAUTH_CLIENT_ID"))


def visitor_of(request: gr.Request | None, profile: gr.OAuthProfile | None = None) -> visitors.Visitor:
    """Who sent `request`: the signed-in account (OAuth, or `STUDIO_AUTH`'s login), else the browser's id,
    else the client's session."""
    if request is None:
        return visitors.identify(account=None, browser=None, session=None)
    account = getattr(profile, "username", None) or request.username
    if not account and visitors.mode() == "private":
        account = account_of_token(_bearer_token(request))
    try:
        cookies = dict(request.cookies)
    except AttributeError:  # a request Gradio built without its HTTP request
        cookies = {}
    browser = cookies.get(COOKIE) if BROWSER_ID.match(cookies.get(COOKIE) or "") else None
    return visitors.identify(account=account, browser=browser, session=request.session_hash)


def _bearer_token(request: gr.Request) -> str | None:
    """The Hugging Face token a caller sent, if any."""
    headers = getattr(request, "headers", None) or {}
    for name in TOKEN_HEADERS:
        scheme, _, token = (headers.get(name) or "").partition(" ")
        if scheme.lower() == "bearer" and token.startswith("hf_"):
            return token
    return None


def account_of_token(token: str | None) -> str | None:
    """The Hugging Face account a token belongs to (asked of the hub once per token), or None: no token, or
    one the hub does not know (the caller is then told apart by its session, as without one)."""
    if not token:
        return None
    with _accounts_lock:
        if token in _accounts:
            return _accounts[token]
    import httpx
    import huggingface_hub
    from huggingface_hub.errors import HfHubHTTPError

    try:
        name = huggingface_hub.whoami(token=token).get("name") or None
    except HfHubHTTPError as error:
        status = getattr(error.response, "status_code", None)
        if status not in (401, 403):
            log.warning(
                "The hub could not say whose token a caller sent (%s): this call is its session's.", error
            )
            return None  # asked again on the next call
        log.warning(
            "A caller sent a Hugging Face token the hub does not know (%s): told apart by session.", status
        )
        name = None
    except (httpx.HTTPError, OSError) as error:
        log.warning(
            "The hub could not be reached to say whose token a caller sent (%s): this call is its session's.",
            error,
        )
        return None
    with _accounts_lock:
        if len(_accounts) >= KNOWN_TOKENS:
            _accounts.pop(next(iter(_accounts)))
        _accounts[token] = name
    return name


def _request_parameter(signature: inspect.Signature, hints: dict[str, Any]) -> str | None:
    """The name of the handler's own `gr.Request` parameter, if it has one."""
    for name in signature.parameters:
        if hints.get(name) in (gr.Request, gr.Request | None):
            return name
    return None


def visiting(fn: Callable) -> Callable:
    """`fn`, served as the visitor of each request: Gradio hands the wrapper the request (the handler's own
    `gr.Request` parameter where it has one, else one more parameter, `REQUEST`) and, with OAuth on, the
    profile; the handler runs inside `visitors.acting_as` (a generator, each step of it)."""
    signature = inspect.signature(fn)
    hints = gr.utils.get_type_hints(fn)
    own = _request_parameter(signature, hints)
    names = ([REQUEST] if own is None else []) + ([PROFILE] if oauth_on() else [])
    added = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None) for n in names]
    params = list(signature.parameters.values())
    kind = inspect.Parameter
    variadic = (kind.VAR_POSITIONAL, kind.KEYWORD_ONLY, kind.VAR_KEYWORD)
    cut = next((i for i, p in enumerate(params) if p.kind in variadic), len(params))
    wrapped = signature.replace(parameters=[*params[:cut], *added, *params[cut:]])
    annotations = {**getattr(fn, "__annotations__", {}), REQUEST: gr.Request | None}
    annotations[PROFILE] = gr.OAuthProfile | None

    def split(args: tuple, kwargs: dict) -> tuple[visitors.Visitor, tuple, dict]:
        """The visitor, and the handler's own arguments (bound again to its own signature: a handler that
        takes `*values` after the added parameter gets them all)."""
        arguments = dict(wrapped.bind(*args, **kwargs).arguments)
        request = arguments.pop(REQUEST, None) if own is None else arguments.get(own)
        profile = arguments.pop(PROFILE, None)
        call = inspect.BoundArguments(signature, arguments)
        return visitor_of(request, profile), call.args, call.kwargs

    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def stepped(*args: Any, **kwargs: Any):
            visitor, args, kwargs = split(args, kwargs)
            steps = fn(*args, **kwargs)
            while True:
                with visitors.acting_as(visitor):  # each step in the thread that runs it
                    try:
                        item = next(steps)
                    except StopIteration as done:
                        return done.value
                yield item

        wrapper = stepped
    else:

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            visitor, args, kwargs = split(args, kwargs)
            with visitors.acting_as(visitor):
                return fn(*args, **kwargs)

    wrapper.__signature__ = wrapped
    wrapper.__annotations__ = annotations
    return wrapper


def visiting_all(handlers: dict[str, Callable]) -> dict[str, Callable]:
    """Every handler of the app served as its visitor (`visiting`)."""
    return {name: visiting(fn) for name, fn in handlers.items()}
