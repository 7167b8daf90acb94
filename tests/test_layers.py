"""Layers only point down: every import inside `studio/` (module-level or inside a function) goes to its own
layer or a lower one, and `pipelines/` imports nothing from `studio/`. The order is docs/architecture.md's."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Lowest first. A module belongs to the first layer one of whose prefixes names it or a package above it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "foundation",
        (
            "studio.errors",
            "studio.settings",
            "studio.checks",
            "studio.devices",
            "studio.phases",
            "studio.recompiles",
            "studio.visitors",
            "studio.__init__",
        ),
    ),
    ("run log", ("studio.runlog",)),
    ("techniques", ("studio.optimizations",)),
    ("requests", ("studio.request",)),
    ("measurement", ("studio.measure",)),
    ("vocabulary", ("studio.report",)),
    ("pipeline manager", ("studio.manager",)),
    ("engine", ("studio.engine",)),
    ("sweeps", ("studio.sweeps",)),
    ("cards", ("studio.cards",)),
    ("faces", ("studio.cli", "studio.distributed", "studio.ui", "studio.__main__")),
)


def layer_of(module: str) -> int | None:
    """The index in LAYERS of `module` (dotted), None for what no layer names (`studio` itself)."""
    for index, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return index
    return None


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 2 else parts)


def imports_of(path: Path, module: str | None = None) -> set[str]:
    """Every `studio…` module `path` imports, `from studio import x` counted as `studio.x`: absolute and
    relative imports (resolved against the module's package; `module` names it where `path` is elsewhere), and
    modules named by a string to `importlib.import_module` or `__import__`."""
    module = module or module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("studio"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            if base == "studio" or (node.level and not node.module):
                found.update(f"{base}.{a.name}" for a in node.names)
            elif base.startswith("studio."):
                found.add(base)
        elif isinstance(node, ast.Call) and _names_a_module(node):
            found.add(node.args[0].value)
    return {name for name in found if name.startswith("studio")}


def _names_a_module(call: ast.Call) -> bool:
    """`importlib.import_module("studio.x")`, `import_module("studio.x")` or `__import__("studio.x")`."""
    name = ast.unparse(call.func)
    first = call.args[0] if call.args else None
    return (
        name in ("importlib.import_module", "import_module", "__import__")
        and isinstance(first, ast.Constant)
        and isinstance(first.value, str)
        and first.value.startswith("studio")
    )


def upward_imports() -> list[str]:
    wrong = []
    for path in sorted((ROOT / "studio").rglob("*.py")):
        here = module_name(path)
        mine = layer_of(here)
        assert mine is not None, f"{here} belongs to no layer: add it to LAYERS and docs/architecture.md"
        for target in sorted(imports_of(path)):
            theirs = layer_of(target)
            if theirs is not None and theirs > mine:
                wrong.append(f"{here} ({LAYERS[mine][0]}) imports {target} ({LAYERS[theirs][0]})")
    return wrong


def test_no_import_points_up():
    assert not upward_imports(), "\n".join(upward_imports())


def test_the_model_side_imports_nothing_from_the_studio():
    offenders = [
        f"{module_name(p)} imports {', '.join(sorted(imports_of(p)))}"
        for p in sorted((ROOT / "pipelines").rglob("*.py"))
        if imports_of(p)
    ]
    assert not offenders, "\n".join(offenders)


def test_an_upward_import_is_caught(tmp_path):
    """The check itself: the run log importing the engine is reported."""
    fake = tmp_path / "bad.py"
    fake.write_text("from studio.engine import Studio\nimport studio.ui\n")
    targets = imports_of(fake, module="studio.runlog.bad")
    assert targets == {"studio.engine", "studio.ui"}
    assert all(layer_of(t) > layer_of("studio.runlog.migrations") for t in targets)


def test_the_architecture_doc_names_the_layers_in_order():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    positions = [doc.find(f"`{prefixes[0].replace('.', '/')}") for _, prefixes in LAYERS]
    assert -1 not in positions, [p for (_, (p, *_)), at in zip(LAYERS, positions, strict=True) if at < 0]
    assert positions == sorted(positions), "docs/architecture.md lists the layers out of order"


def test_the_top_level_stays_short():
    """At most 12 modules at `studio/`'s top level: the rest lives in packages named for what they hold."""
    top = sorted(p.name for p in (ROOT / "studio").glob("*.py"))
    assert len(top) <= 12, top


def test_relative_imports_and_import_strings_are_seen(tmp_path):
    """A relative import or a module named by a string is an import like any other."""
    planted = tmp_path / "planted.py"
    planted.write_text(
        "import importlib\n"
        "from ..ui import views\n"
        "from .. import engine\n"
        "from . import base\n"
        "def f():\n"
        "    importlib.import_module('studio.sweeps.compare')\n"
        "    __import__('studio.cli')\n"
    )
    found = imports_of(planted, module="studio.optimizations.planted")
    assert found == {
        "studio.ui",
        "studio.engine",
        "studio.optimizations.base",
        "studio.sweeps.compare",
        "studio.cli",
    }


def test_no_two_modules_of_the_studio_share_a_name():
    """A module's name says what it is: two modules of one name in two packages (a `runner` here and a
    `runner` there) make a reader open both to learn which is meant."""
    seen: dict[str, list[str]] = {}
    for path in sorted((ROOT / "studio").rglob("*.py")):
        if path.name not in ("__init__.py", "__main__.py"):
            seen.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}


def pipelines_imports(path: Path) -> set[str]:
    """The `pipelines` modules `path` imports, at module level or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("pipelines."))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pipelines"):
            if node.module == "pipelines":
                found.update(f"pipelines.{a.name}" for a in node.names)
            else:
                found.add(node.module)
    return found


def test_the_model_side_has_no_import_circle():
    """No two modules of `pipelines/` import each other, directly or through others: a circle is what
    forces imports inside functions, and a reader cannot tell which module the knowledge belongs to."""
    graph = {
        module_name(p): pipelines_imports(p)
        for p in (ROOT / "pipelines").rglob("*.py")
        if "tiny_shapes" not in p.parts
    }

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in graph.get(start, ()):
            if nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})):
                return True
        return False

    assert sorted(m for m in graph if reaches(m, m, {m})) == []
