"""Small things the code says about itself, held true: the exception tree drawn in
service/errors.py, one constant for how often "last seen" is written, the job's final
statuses stated once (the state machine), and no import circle inside service/http."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import service.errors
from service.machines import JOB, RUN
from tests.test_dashboard_http import logged_in

SERVICE = Path(__file__).resolve().parent.parent / "service"


def test_the_error_tree_names_every_error_class():
    tree = service.errors.__doc__ or ""
    drawn = set(re.findall(r"[├└]── (\w+)", tree)) | {"ServiceError"}
    defined = {name for name, value in vars(service.errors).items()
               if isinstance(value, type) and issubclass(value, service.errors.ServiceError)}
    assert drawn == defined
    for name in drawn - {"ServiceError", "ApiError", "ActorGone", "AskTimeout"}:
        cls = getattr(service.errors, name)
        line = next(line for line in tree.splitlines() if f"── {name} " in line)
        assert f" {cls.status} {cls.code}" in line, line  # the drawn status and code are the class's


def _top_level_assignments(name: str) -> list[str]:
    found = []
    for path in sorted(SERVICE.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, ast.AnnAssign) else []
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                found.append(str(path.relative_to(SERVICE.parent)))
    return found


def test_touch_every_is_defined_once():
    assert _top_level_assignments("TOUCH_EVERY") == ["service/clock.py"]


def test_the_job_final_statuses_are_stated_only_by_the_job_machine():
    """No literal list of a job's final statuses outside service/machines.py (a literal with
    "nsfw" and another final status); the page script reads them from the page."""
    found = []
    for path in sorted(SERVICE.rglob("*.py")):
        if path.name == "machines.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                words = {e.value for e in node.elts if isinstance(e, ast.Constant)}
                if "nsfw" in words and len(words & JOB.final) > 1:
                    found.append(f"{path.relative_to(SERVICE.parent)}:{node.lineno}")
    for path in sorted((SERVICE / "http" / "static").glob("*.js")):
        if '"nsfw"' in path.read_text():
            found.append(str(path.relative_to(SERVICE.parent)))
    assert found == []


async def test_the_page_script_gets_the_final_statuses_from_the_page(node, cheap_hashes):
    await logged_in(node)
    r = await node.client.get("/keys")
    html = await r.get_data(as_text=True)
    assert r.status_code == 200
    want = " ".join(sorted(JOB.final | RUN.final))
    assert f'<script src="/static/dash-2.js" data-final="{want}" defer></script>' in html
    assert want == "canceled completed failed nsfw"


# -- no import circle in service/http --------------------------------------------------------------
HTTP = SERVICE / "http"


def _module_name(path: Path) -> str:
    parts = path.relative_to(SERVICE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, *, top_level: bool) -> set[str]:
    """service.http modules `path` imports: at module level (outside `if TYPE_CHECKING:`),
    or inside functions."""
    tree = ast.parse(path.read_text())
    names: set[str] = set()

    def visit(nodes: list[ast.stmt], in_function: bool) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            if isinstance(node, (ast.Import, ast.ImportFrom)) and in_function != top_level:
                if isinstance(node, ast.Import):
                    names.update(a.name for a in node.names)
                elif node.module and node.level == 0:
                    names.add(node.module)
                    names.update(f"{node.module}.{a.name}" for a in node.names)
            inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            for field in ("body", "orelse", "finalbody", "handlers"):
                visit(getattr(node, field, []) or [], inner)

    visit(tree.body, False)
    return names


def _http_modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(HTTP.rglob("*.py"))}


def test_service_http_has_no_import_circle():
    modules = _http_modules()
    graph = {m: {n for n in _imports(p, top_level=True) if n in modules and n != m} for m, p in modules.items()}
    # Tarjan's strongly connected components: a component of two or more is a circle
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                circles.append(sorted(part))

    for v in graph:
        if v not in index:
            strong(v)
    assert circles == []


def test_service_http_hides_no_import_inside_a_function():
    """An import inside a function is how a circle is kept loadable: none of service/http's
    own modules is imported that way (others may be, to load a heavy library late)."""
    modules = _http_modules()
    hidden = {f"{m} imports {n}" for m, p in modules.items() for n in _imports(p, top_level=False) if n in modules}
    assert hidden == set()
