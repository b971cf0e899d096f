"""The house rules of docs/architecture.md that import-linter cannot check: ``server/`` is the HTTP shell (no
module there starts a background task; that work lives in ``services/``), and the map names every package and
every test tier."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "queenpy"
ARCHITECTURE = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
TASK_STARTERS = {"create_task", "ensure_future", "TaskGroup"}


def _task_starts(path: Path) -> list[str]:
    """``file:line name`` of every call of asyncio's task starters in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            function = node.func
            name = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", None)
            if name in TASK_STARTERS:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
    return found


def test_no_server_module_starts_a_background_task() -> None:
    modules = sorted((PACKAGE / "server").rglob("*.py"))
    assert len(modules) > 20  # the walk found the package
    assert [start for module in modules for start in _task_starts(module)] == []


def test_the_task_check_finds_what_it_looks_for() -> None:
    starts = _task_starts(PACKAGE / "services" / "spark_apply.py")
    assert starts and all(start.endswith("create_task") for start in starts)


def test_the_architecture_map_names_every_package_and_test_tier() -> None:
    packages = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
    tiers = sorted(p.name for p in (ROOT / "tests").iterdir() if p.is_dir() and any(p.glob("test_*.py")))
    assert len(packages) >= 10 and len(tiers) >= 8
    assert [p for p in packages if f"`queenpy.{p}`" not in ARCHITECTURE] == []
    assert [t for t in tiers if f"`tests/{t}`" not in ARCHITECTURE] == []
