"""No call in `studio/` passes more than `MAX_POSITIONAL` values by position: the rest are named, so that a
call reads without its callee's signature and a changed signature fails loudly instead of shifting values.
`*starred` arguments are not counted, and logging calls (`log.info("... %s ...", a, b, ...)`) are exempt:
their arguments are format values."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_POSITIONAL = 5
LOGGERS = {"log", "logger", "logging"}


def positional(call: ast.Call) -> int:
    """The values `call` passes by position, `*starred` ones left out."""
    return sum(1 for arg in call.args if not isinstance(arg, ast.Starred))


def is_logging(call: ast.Call) -> bool:
    """`log.info(...)`, `logger.warning(...)`, `logging.debug(...)` and the like."""
    func = call.func
    return isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in LOGGERS


def long_calls(source: str, where: str) -> list[str]:
    """`file:line callee (N positional)` for each call of `source` above the limit."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and not is_logging(node):
            count = positional(node)
            if count > MAX_POSITIONAL:
                found.append(f"{where}:{node.lineno} {ast.unparse(node.func)} ({count} positional)")
    return found


def test_the_rule_counts_values_by_position_and_exempts_logging():
    source = (
        "f(1, 2, 3, 4, 5)\n"
        "f(1, 2, 3, 4, 5, *rest)\n"
        "f(1, 2, 3, 4, 5, g=6)\n"
        "log.info('%s %s %s %s %s %s', 1, 2, 3, 4, 5, 6)\n"
        "obj.method(1, 2, 3, 4, 5, 6)\n"
    )
    assert long_calls(source, "x.py") == ["x.py:5 obj.method (6 positional)"]


def test_no_call_in_studio_passes_more_than_five_values_by_position():
    found = []
    for path in sorted((ROOT / "studio").rglob("*.py")):
        where = path.relative_to(ROOT).as_posix()
        found.extend(long_calls(path.read_text(encoding="utf-8"), where))
    assert not found, (
        f"Calls passing more than {MAX_POSITIONAL} values by position (name them with keywords):\n"
        + "\n".join(found)
    )
