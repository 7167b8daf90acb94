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
        ("studio.errors", "studio.settings", "studio.checks", "studio.devices", "studio.__init__"),
    ),
    ("run log", ("studio.runlog",)),
    ("techniques", ("studio.optimizations",)),
    ("requests", ("studio.request",)),
    ("measurement", ("studio.measure",)),
    ("vocabulary", ("studio.report",)),
    ("pipeline manager", ("studio.manager",)),
    ("engine", ("studio.engine",)),
    ("sweeps", ("studio.sweeps",)),
    ("benchmark", ("studio.benchmark",)),
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


def imports_of(path: Path) -> set[str]:
    """Every `studio…` module `path` imports, `from studio import x` counted as `studio.x`."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("studio"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "studio":
                found.update(f"studio.{a.name}" for a in node.names)
            elif node.module.startswith("studio."):
                found.add(node.module)
    return found


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
    targets = imports_of(fake)
    assert targets == {"studio.engine", "studio.ui"}
    assert all(layer_of(t) > layer_of("studio.runlog.migrations") for t in targets)


def test_the_architecture_doc_names_the_layers_in_order():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    positions = [doc.find(f"`{prefixes[0].replace('.', '/')}") for _, prefixes in LAYERS]
    assert -1 not in positions, [p for (_, (p, *_)), at in zip(LAYERS, positions, strict=True) if at < 0]
    assert positions == sorted(positions), "docs/architecture.md lists the layers out of order"


def test_modules_stay_small_and_the_top_level_short():
    """At most 12 modules at `studio/`'s top level and none over 330 lines: a module that grows past that is
    split into parts whose names say what they are."""
    top = sorted(p.name for p in (ROOT / "studio").glob("*.py"))
    assert len(top) <= 12, top
    long = {
        str(p.relative_to(ROOT)): n
        for p in (ROOT / "studio").rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 330
    }
    assert not long, long
