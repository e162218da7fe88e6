"""docs/architecture.md stays true: the layering it states is checked against the code's imports."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
SERVICES = [
    "agora",
    "calls",
    "keys",
    "llm",
    "memory",
    "store",
    "web",
    "monitor.py",
    "logs.py",
    "doctor.py",
    "config.py",
    "i18n",
]
LEAVES = ["agora", "llm", "store", "web", "config.py", "logs.py", "i18n"]


def imports(path: Path) -> set[str]:
    """Top two levels of every module a file imports (``bot.calls``, ``discord``, ...), lazy imports included."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(".".join(alias.name.split(".")[:2]) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(".".join(node.module.split(".")[:2]))
    return found


def files(part: str) -> list[Path]:
    path = ROOT / "bot" / part
    return sorted(path.rglob("*.py")) if path.is_dir() else [path]


@pytest.mark.parametrize("part", SERVICES)
def test_services_never_import_discord_or_cogs(part: str) -> None:
    for path in files(part):
        bad = {name for name in imports(path) if name.split(".")[0] in ("discord", "cogs")}
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


@pytest.mark.parametrize("part", LEAVES)
def test_leaf_packages_import_no_other_part_of_the_bot(part: str) -> None:
    own = "bot." + part.removesuffix(".py")
    for path in files(part):
        others = {name for name in imports(path) if name.startswith("bot.") and name != own}
        assert not others, f"{path.relative_to(ROOT)} imports {others}"


def test_nothing_in_bot_imports_the_cogs() -> None:
    for path in files(""):
        assert not any(name.split(".")[0] == "cogs" for name in imports(path)), path


def test_the_package_tree_in_the_doc_lists_every_module_and_package() -> None:
    tree = DOC.split("```", 2)[1]
    listed = set(re.findall(r"^  (\S+?)/?\s", tree, re.MULTILINE))
    actual = {p.name for p in (ROOT / "bot").iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    actual -= {"__init__.py"}
    assert actual == listed


def test_cogs_never_reach_the_store() -> None:
    """Cogs parse, call a service and render: no cog calls a store method or hands a store on, and the only part
    of the store a cog imports is its plain records (``bot.store.models``)."""
    for path in sorted((ROOT / "cogs").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        reached = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr == "store"]
        assert not reached, f"{path.relative_to(ROOT)} reaches a store on lines {reached}"
        modules = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
        modules |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        store_parts = {m for m in modules if m.startswith("bot.store") and m != "bot.store.models"}
        assert not store_parts, f"{path.relative_to(ROOT)} imports {store_parts}"
