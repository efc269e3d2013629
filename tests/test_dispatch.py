"""One way to dispatch a message (service/actors/runtime.py): a handler is marked `@on(Type)`
and found by the message's type. No actor finds a handler by name (`getattr(self, "on_" +
...)`), by an `isinstance` ladder on its own messages, or through a dict of message types."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import service.node  # noqa: F401  (imports every actor)
from service.actors.runtime import Actor, on

ROOT = Path(__file__).resolve().parent.parent
SERVICE = ROOT / "service"


def actors() -> list[type[Actor]]:
    out: list[type[Actor]] = []
    todo = list(Actor.__subclasses__())
    while todo:
        cls = todo.pop()
        out.append(cls)
        todo += cls.__subclasses__()
    return sorted(out, key=lambda c: c.__qualname__)


def test_the_actors_are_found():
    names = {c.__name__ for c in actors()}
    assert {"BalanceActor", "JobActor", "RunActor", "TopupActor", "TicketsActor", "DeliveryActor"} <= names


@pytest.mark.parametrize("cls", actors(), ids=lambda c: c.__name__)
def test_every_handler_is_marked_and_every_mark_is_in_the_table(cls):
    """A method named like a handler (`on_X`) is reached only through `@on`; the class's
    dispatch table holds every type its marked methods take."""
    unmarked = []
    for name, value in inspect.getmembers(cls, callable):
        if name.startswith("on_") and name != "on_deadline" and not getattr(value, "_handles", ()):
            unmarked.append(name)
        for t in getattr(value, "_handles", ()):
            assert t in cls._dispatch, (cls, t)
            assert t in getattr(getattr(cls, cls._dispatch[t]), "_handles", ()), (cls, t)
    assert unmarked == []


def message_types() -> dict[str, set[str]]:
    """module file -> names of the message types its actors take."""
    out: dict[str, set[str]] = {}
    for cls in actors():
        path = inspect.getsourcefile(cls)
        assert path is not None
        out.setdefault(str(Path(path).resolve().relative_to(ROOT)), set()).update(t.__name__ for t in cls._dispatch)
    return out


def other_dispatch(extra: dict[str, str] | None = None, own: dict[str, set[str]] | None = None) -> list[str]:
    """`getattr(x, "on_" + ...)` anywhere in service/; `isinstance(m, T)` and `{T: ...}` where T
    is a message type the module's own actor takes."""
    own = message_types() if own is None else own
    sources = {str(p.relative_to(ROOT)): p.read_text() for p in sorted(SERVICE.rglob("*.py"))} | (extra or {})
    found = []
    for path, text in sources.items():
        types = own.get(path, set())
        for node in ast.walk(ast.parse(text, path)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
                if node.func.id == "getattr" and len(node.args) >= 2 and "on_" in ast.unparse(node.args[1]):
                    found.append(f"{path}:{node.lineno}: getattr by name")
                if node.func.id == "isinstance" and len(node.args) == 2:
                    checked = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
                    if any(isinstance(t, ast.Name) and t.id in types for t in checked):
                        found.append(f"{path}:{node.lineno}: isinstance on a message")
            elif isinstance(node, ast.Dict) and any(isinstance(k, ast.Name) and k.id in types for k in node.keys):
                found.append(f"{path}:{node.lineno}: a dict of message types")
    return found


def test_no_actor_dispatches_another_way():
    assert other_dispatch() == []


def test_the_check_sees_the_other_ways():
    probe = ("class A:\n"
             "    async def handle(self, msg):\n"
             "        if isinstance(msg, (Ping, int)):\n"
             "            return await getattr(self, 'on_' + type(msg).__name__)(msg)\n"
             "        return await {Pong: self.pong}[type(msg)](msg)\n")
    assert other_dispatch({"probe.py": probe}, {"probe.py": {"Ping", "Pong"}}) == [
        "probe.py:3: isinstance on a message", "probe.py:4: getattr by name", "probe.py:5: a dict of message types"]


def test_a_subclass_handler_wins_and_an_unknown_message_is_refused():
    class Ping:
        pass

    class Base(Actor):
        @on(Ping)
        async def first(self, m: Ping) -> str:
            return "base"

    class Child(Base):
        @on(Ping)
        async def second(self, m: Ping) -> str:
            return "child"

    assert Child._dispatch == {Ping: "second"} and Base._dispatch == {Ping: "first"}
    with pytest.raises(TypeError, match="Child: unknown message int"):
        Child().handler_for(1)
