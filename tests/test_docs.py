"""The docs describe the project as it is: every technique, command, endpoint, key and setting is documented,
and no line reads like a lab diary."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from studio import report
from studio.cli import COMMANDS
from studio.optimizations import REGISTRY, table

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
API_DOC = (ROOT / "docs" / "api.md").read_text()
DIARY = re.compile(
    r"\bsession \d|\bsessions? [0-9]+\b|\bissue \d|\bissue #|\bthe issue\b|seed documents?\b|"
    r"\bissue's\b",
    re.IGNORECASE,
)
# How the work on the project was organised, which is no concern of the project's users, and one machine's
# limits stated as if every user had them (an output folder, a time limit and a size limit are options).
WORKPLACE = re.compile(
    r"\blent\b|\blease[sd]?\b|\bleasing\b|budget_left|device tool|tool library|\bwork sessions?\b|"
    r"\$OUT\b|\bthe machine receives\b|\b10-minute (?:limit|commands)\b|\b(?:the|a|for a) 10-minute\b|"
    r"--budget-s 540\b|\bmachine's 600 s\b",
    re.IGNORECASE,
)


def test_the_readme_techniques_table_is_the_registry():
    block = README.split(table.START, 1)[1].split(table.END, 1)[0].strip()
    assert block == table.markdown(), "the README's technique table is stale: run `make docs`"
    for name, opt in REGISTRY.items():
        assert f"| `{name}` |" in block
        for setting in opt.defaults:
            assert f"`{setting}`=" in block.split(f"| `{name}` |", 1)[1].split("\n", 1)[0], (name, setting)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_cli_command_is_in_the_readme(command):
    assert f"python -m studio {command}" in README


def test_every_api_endpoint_is_in_the_readme(studio):
    """Every endpoint the app serves to clients (the private events of the forms are not endpoints)."""
    from studio.ui import build_demo

    endpoints = {name.strip("/") for name in build_demo(studio).get_api_info()["named_endpoints"]}
    assert endpoints >= {"generate", "compare", "ladder", "autotune", "history", "system"}
    for name in endpoints:
        assert f"`/{name}`" in README, name


def test_every_environment_variable_the_code_reads_is_listed():
    source = "\n".join(p.read_text() for d in ("studio", "pipelines") for p in (ROOT / d).rglob("*.py"))
    source += (ROOT / "app.py").read_text()
    names = set(re.findall(r'environ(?:\.get)?[\[(]"([A-Z0-9_]+)"', source))
    names |= set(re.findall(r'getenv\("([A-Z0-9_]+)"', source))
    assert {"STUDIO_HOME", "STUDIO_MAX_REQUEST_S"} <= names
    for name in names:
        assert f"`{name}`" in README, name


def test_every_shared_key_is_documented():
    for key in report.KEYS:
        assert f"| `{key}` |" in API_DOC, key


def test_the_readme_is_for_users():
    assert len(README.splitlines()) < 200
    assert README.startswith("# Diffusion Studio\n\n```bash\nmake run")


def _lines_matching(pattern: re.Pattern[str], checked) -> list[str]:
    """'file:line: text' for every tracked file `checked(name, path)` keeps whose line `pattern` finds."""
    files = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    found = []
    for name in files:
        path = ROOT / name
        if name == "tests/test_docs.py" or not checked(name, path) or not path.is_file():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if pattern.search(line):
                found.append(f"{name}:{number}: {line.strip()[:100]}")
    return found


def test_no_diary_lines_in_the_tree():
    suffixes = {".py", ".md", ".txt", ".toml", ".css", ".yml", ".yaml", ""}
    offenders = _lines_matching(DIARY, lambda name, path: path.suffix in suffixes)
    assert not offenders, "\n".join(offenders)


def test_docs_and_code_speak_of_the_project_and_its_users_only():
    def checked(name: str, path: Path) -> bool:
        top = name.split("/", 1)[0]
        code = {"studio", "pipelines", "benchmarks", "tests"}
        return path.suffix in {".md", ".sh"} or (path.suffix == ".py" and top in code)

    offenders = _lines_matching(WORKPLACE, checked)
    assert not offenders, "\n".join(offenders)


def test_every_benchmark_script_is_in_the_benchmarks_index():
    index = (ROOT / "benchmarks" / "README.md").read_text()
    for script in sorted((ROOT / "benchmarks").glob("*.py")):
        if script.stem != "__init__":
            assert f"`{script.stem}`" in index, f"benchmarks/README.md does not list {script.name}"
    for target in re.findall(r"\]\(\.\./([^)#]+)", index):
        assert (ROOT / target).exists(), f"benchmarks/README.md names {target}, which does not exist"


def test_the_contributors_guide_names_only_what_exists():
    guide = (ROOT / "CONTRIBUTING.md").read_text()
    named = re.findall(r"`((?:studio|tests|benchmarks|docs|pipelines|spaces)/[\w/.-]*\w)", guide)
    named += re.findall(r"\]\(([^)#]+)", guide)
    assert len(named) > 20
    for path in named:
        assert (ROOT / path).exists(), f"CONTRIBUTING.md names {path}, which does not exist"
    for test in re.findall(r"`(test_\w+)`", guide):
        assert subprocess.run(["git", "grep", "-q", f"def {test}("], cwd=ROOT).returncode == 0, test
