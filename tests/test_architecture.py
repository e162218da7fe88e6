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
    "places.py",
]
LEAVES = ["agora", "llm", "store", "web", "config.py", "logs.py", "i18n", "places.py"]


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


WORDS = "bot.i18n"
"""The message catalogues, themselves a leaf: the call page (``web``) reads its texts from them."""


@pytest.mark.parametrize("part", LEAVES)
def test_leaf_packages_import_no_other_part_of_the_bot(part: str) -> None:
    own = "bot." + part.removesuffix(".py")
    for path in files(part):
        others = {name for name in imports(path) if name.startswith("bot.") and name not in (own, WORDS)}
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


CALLS_SURFACE = {"bot.calls.service", "bot.calls.errors", "bot.calls.settings", "bot.calls.page", "bot.calls.language"}
"""What the rest of the bot may import of the calls package: the façade (``CallService`` and the values it hands
out), its errors, the server settings service, the call page's backend and the call-language table; the parts the
façade is built of (starting, ending, leases, ...) stay inside."""


def modules_imported(path: Path) -> set[str]:
    """Every module a file imports, in full (``bot.calls.service``), lazy imports included."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def test_the_rest_of_the_bot_uses_the_calls_package_through_its_facade() -> None:
    outside = [p for p in files("") if (ROOT / "bot" / "calls") not in p.parents]
    outside += sorted((ROOT / "cogs").glob("*.py"))
    for path in outside:
        reached = {m for m in modules_imported(path) if m.startswith("bot.calls.")} - CALLS_SURFACE
        assert not reached, f"{path.relative_to(ROOT)} imports {reached}: use bot.calls.service"


def test_the_parts_of_the_calls_package_never_import_its_facade() -> None:
    """The façade builds the parts and hands each what it needs; a part that imported it would reach back."""
    callers = {"service.py", "page.py", "settings.py"}  # the façade itself, and the two services built on it
    for path in files("calls"):
        if path.name not in callers:
            assert "bot.calls.service" not in modules_imported(path), path.relative_to(ROOT)


@pytest.mark.parametrize("part", ["calls", "web"])
def test_no_module_of_the_calls_package_or_the_web_layer_is_over_600_lines(part: str) -> None:
    for path in files(part):
        lines = path.read_text(encoding="utf-8").count("\n")
        assert lines <= 600, f"{path.relative_to(ROOT)} has {lines} lines"


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


def protocol_members(protocol: type) -> set[str]:
    """The methods and properties a protocol (with the protocols it extends) declares."""
    return {
        name
        for cls in protocol.__mro__
        if getattr(cls, "_is_protocol", False)
        for name, value in vars(cls).items()
        if not name.startswith("_") and (callable(value) or isinstance(value, property))
    }


def store_stack() -> list[type]:
    from bot.keys.encrypted import EncryptedStore
    from bot.store.postgres import PostgresStore
    from bot.store.sqlite import SqliteStore

    return [SqliteStore, PostgresStore, EncryptedStore]


@pytest.mark.parametrize("store", store_stack(), ids=lambda store: store.__name__)
def test_no_class_of_the_store_stack_dispatches_by_name(store: type) -> None:
    """Every method is written out where the type checker sees it: none is found at run time by its name."""
    for cls in store.__mro__[:-1]:  # object's own __getattribute__ is the ordinary lookup
        assert "__getattr__" not in vars(cls) and "__getattribute__" not in vars(cls), cls


def test_nothing_in_the_store_stack_is_found_by_name_at_run_time() -> None:
    """Not the stores alone: the records they hand out (the encrypting layer's texts opened on first read are
    ``cached_property`` fields) and every other class in bot/store and bot/keys are read as the type checker sees."""
    for package in ("store", "keys"):
        for path in sorted((ROOT / "bot" / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef) and node.name in ("__getattr__", "__getattribute__"):
                    pytest.fail(f"{path.relative_to(ROOT)} defines {node.name}")


def test_each_store_implements_every_method_of_the_protocols_itself(tmp_path: Path) -> None:
    """What mypy checks where the stores are built (``bot.app.build_store``), checked here on the objects too."""
    from bot.keys.crypto import generate_master_key_text, parse_master_key
    from bot.keys.encrypted import EncryptedStore
    from bot.keys.store import SqliteKeyStore
    from bot.store.postgres import PostgresStore
    from bot.store.repository import Backend, Store
    from bot.store.sqlite import SqliteStore

    keys = SqliteKeyStore(tmp_path / "keys.db", parse_master_key(generate_master_key_text()))
    stores = {
        SqliteStore(tmp_path / "memory.db"): Backend,
        PostgresStore("postgresql://nowhere/none"): Backend,
        EncryptedStore(SqliteStore(tmp_path / "memory.db"), keys): Store,
    }
    for store, protocol in stores.items():
        missing = {name for name in protocol_members(protocol) if not hasattr(store, name)}
        assert not missing, f"{type(store).__name__} lacks {sorted(missing)}"


STORE_USERS = ["memory", "calls", "web", "llm", "monitor.py"]
WHOLE_STORE = {"Store", "Backend", "StoreLifecycle", "AccountStore", "GuildSettingsStore", "ConversationStore"}
WHOLE_STORE |= {"CallStepStore", "CallStartStore", "FactStore", "PrivacyStore", "JobStore", "VectorStore"}


def declared_store_protocols(tree: ast.Module) -> dict[str, set[str]]:
    """The ``...Store`` protocols a module declares, each with the methods it declares itself."""
    return {
        node.name: {item.name for item in node.body if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)}
        for node in tree.body
        if isinstance(node, ast.ClassDef)
        and node.name.endswith("Store")
        and any(isinstance(base, ast.Name) and base.id == "Protocol" for base in node.bases)
    }


@pytest.mark.parametrize("part", STORE_USERS)
def test_a_service_is_handed_only_the_store_operations_it_calls(part: str) -> None:
    """A service declares the few store operations it uses (a protocol of its own, or one of the parts it builds
    on); none takes the whole store or one of its aggregates."""
    for path in files(part):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        wide = {
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module in ("bot.store.repository", "bot.store.vectors")
            for alias in node.names
            if alias.name in WHOLE_STORE
        }
        assert not wide, f"{path.relative_to(ROOT)} takes {sorted(wide)}"
        used = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
        for name, methods in declared_store_protocols(tree).items():
            assert methods <= used, f"{path.relative_to(ROOT)}: {name} lists {sorted(methods - used)}, never called"


@pytest.mark.parametrize("part", ["bench", "demo", "standins"])
def test_benches_the_demo_and_the_stand_ins_never_import_the_tests(part: str) -> None:
    """What they share with the tests (the stand-ins, the harness, PostgreSQL, record builders) is in standins/,
    which the tests import too: the test suite stays theirs alone to change."""
    paths = sorted((ROOT / part).rglob("*.py"))
    assert paths
    for path in paths:
        tests = {name for name in imports(path) if name.split(".")[0] == "tests"}
        assert not tests, f"{path.relative_to(ROOT)} imports {tests}"
