"""The layer rules of the team's DESIGN.md ("Layers"), checked on the source with `ast`:
who may import what. A new module breaking a rule fails here with the import named."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

SERVICE = Path(__file__).resolve().parent.parent / "service"

# package (under service/) -> imports it must not make (prefixes of module names)
FORBIDDEN = {
    "machines": ("trio", "sqlite3", "sqlite_utils", "quart", "httpx", "hypercorn", "service.storage",
                 "service.actors", "service.http"),
    # the binding of the tables' effects: as pure as the tables (the money core imports it)
    "effects": ("trio", "sqlite3", "sqlite_utils", "quart", "httpx", "hypercorn", "service.storage",
                "service.actors", "service.http"),
    "catalog": ("trio", "sqlite3", "sqlite_utils", "quart", "httpx", "hypercorn", "service.storage",
                "service.actors", "service.http"),
    # storage keeps rows; what a mail says is the mail layer's (service/mail/notices.py)
    "storage": ("service.actors", "service.http", "service.mail", "quart", "hypercorn"),
    "actors": ("service.http", "quart", "hypercorn"),
    "streams": ("service.storage", "service.actors", "sqlite3"),
    # the money rules: pure, so they are tested without trio; service.clock brings trio in
    "credits": ("trio", "sqlite3", "sqlite_utils", "quart", "httpx", "hypercorn", "service.storage",
                "service.actors", "service.http", "service.clock", "service.engines"),
    # views shape rows into responses: they read storage at most, never ask an actor
    "views": ("service.actors", "service.http", "quart", "hypercorn", "sqlite3", "sqlite_utils", "trio"),
    "senders": ("service.actors", "service.http", "quart", "hypercorn"),
}


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def package_of(path: Path) -> str:
    rel = path.relative_to(SERVICE)
    return rel.parts[0].removesuffix(".py")


def test_every_module_keeps_to_its_layer():
    broken = []
    checked = 0
    for path in sorted(SERVICE.rglob("*.py")):
        rules = FORBIDDEN.get(package_of(path))
        if not rules:
            continue
        checked += 1
        for name in imports_of(path):
            if any(name == r or name.startswith(r + ".") for r in rules):
                broken.append(f"{path.relative_to(SERVICE.parent)} imports {name}")
    assert broken == []
    assert checked > 40


# what only code holding a connection calls (the writer's and the readers' live in storage)
CONNECTION_CALLS = {"execute", "executemany", "executescript", "fetchone", "fetchall", "cursor"}


def test_only_storage_opens_sqlite():
    """Only service/storage opens SQLite (the one writer and its readers live there): no
    other package imports sqlite3 or sqlite_utils, nor calls a connection's methods."""
    found = []
    for path in sorted(SERVICE.rglob("*.py")):
        if package_of(path) == "storage":
            continue
        where = path.relative_to(SERVICE.parent)
        found += [f"{where} imports {name}" for name in sorted(imports_of(path))
                  if name.split(".")[0] in ("sqlite3", "sqlite_utils")]
        found += [f"{where}:{node.lineno} calls .{node.func.attr}(" for node in ast.walk(ast.parse(path.read_text()))
                  if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and node.func.attr in CONNECTION_CALLS]
    assert found == []


def test_the_credit_rules_load_without_trio_or_sqlite():
    """Not only no direct import: nothing the money core pulls in loads trio or sqlite3."""
    code = ("import sys; import service.credits.book, service.credits.rules; "
            "print(sorted(m for m in ('trio', 'sqlite3', 'sqlite_utils', 'quart') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=SERVICE.parent, capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


# Values an actor facade takes as an argument, not messages.
FACADE_ARGUMENTS = {"Identity"}


def test_http_reaches_actors_only_through_their_facades():
    """service/http neither asks nor tells an actor, nor builds or imports an actor message:
    it calls the typed facade methods of service/actors/facades.py."""
    import importlib

    broken = []
    for path in sorted((SERVICE / "http").rglob("*.py")):
        where = path.relative_to(SERVICE.parent)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in ("ask", "tell", "ask_actor"):
                broken.append(f"{where}:{node.lineno} calls .{node.func.attr}(")
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("service.actors"):
                module = importlib.import_module(node.module or "")
                for alias in node.names:
                    value = getattr(module, alias.name)
                    if isinstance(value, type) and alias.name not in FACADE_ARGUMENTS:
                        broken.append(f"{where}:{node.lineno} imports the class {alias.name}")
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "delivery" \
                    and node.attr[:1].isupper() and node.attr != node.attr.upper():
                broken.append(f"{where}:{node.lineno} uses the class delivery.{node.attr}")
    assert broken == []


def test_production_code_never_detects_a_test_clock():
    """Time-based rules take the service's Clock; nothing under service/ asks which trio clock
    runs (no `trio.testing` import, no MockClock check)."""
    found = []
    for path in sorted(SERVICE.rglob("*.py")):
        names = {n.attr for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Attribute)}
        if "trio.testing" in imports_of(path) or names & {"MockClock", "autojump_threshold", "current_clock"}:
            found.append(str(path.relative_to(SERVICE.parent)))
    assert found == []


SQL_START = ("SELECT ", "INSERT ", "UPDATE ", "DELETE ", "CREATE ", "ALTER ", "DROP ", "PRAGMA ")


def test_no_sql_outside_storage():
    """SQL is written in service/storage/ only (the store's own pragmas and triggers too):
    any other package calls a named function there."""
    found = []
    for path in sorted(SERVICE.rglob("*.py")):
        if path.parent.name == "storage":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and node.value.lstrip().startswith(SQL_START):
                found.append(f"{path.relative_to(SERVICE.parent)}:{node.lineno}")
    assert found == []


def test_no_test_module_defines_a_name_twice():
    """A second `def test_x` in one module silently replaces the first, which then never
    runs (this file had one): every top-level function and class of tests/ is defined once."""
    found = []
    for path in sorted(SERVICE.parent.joinpath("tests").rglob("*.py")):
        seen: set[str] = set()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if node.name in seen:
                    found.append(f"{path.relative_to(SERVICE.parent)}:{node.lineno} {node.name}")
                seen.add(node.name)
    assert found == []
