"""Writes genservice_client/models.py from a node's OpenAPI document: one pydantic model per
response component (`#/components/schemas`) and one per event shape of its event streams
(named `<Event>Event` when the document gives it inline), with `STREAMS`: each stream's event
names and the model of their data. So the client's typed results and events are the
document's shapes and cannot drift from them (tests/test_client_models.py regenerates from a
live node and diffs against the checked-in file).

    python clients/python/scripts/gen_models.py openapi.json > clients/python/genservice_client/models.py
    curl -s $GENSERVICE_URL/v1/openapi.json | python clients/python/scripts/gen_models.py - > ...

The components are pydantic's own schemas of the node's response classes, so only their
subset of JSON Schema is read; anything else stops the script rather than guess. Models are
open (`extra="allow"`: the spec's additive changes); credits (the document's decimal-string
pattern) are `Decimal`, date-times `datetime`, ids plain `str`."""

from __future__ import annotations

import json
import keyword
import sys
import textwrap

SKIP = ("Error", "Unauthorized", "Forbidden", "Timeout")  # error bodies: the client's exceptions
CREDITS = r"^-?[0-9]+\.[0-9]{2}$"
# keywords read, or safe to pass over (they narrow a value the model types more loosely)
KNOWN = {"type", "format", "pattern", "description", "examples", "const", "anyOf", "oneOf", "discriminator", "$ref",
         "items", "additionalProperties", "properties", "required", "default", "minimum", "maximum", "minLength",
         "maxLength", "title"}
RESERVED = {"model_config", "model_fields", "json", "dict", "copy", "schema", "construct", "validate", "fields"}


class Unsupported(Exception):
    pass


def _ref(schema: dict) -> str:
    return schema["$ref"].rsplit("/", 1)[-1]


def py_type(schema: dict, used: set[str]) -> str:
    """The Python annotation of one JSON Schema (the pydantic subset)."""
    unknown = set(schema) - KNOWN
    if unknown:
        raise Unsupported(f"keywords this script does not read: {sorted(unknown)} in {schema}")
    if not schema:  # any JSON value
        used.add("Any")
        return "Any"
    if "$ref" in schema:
        return _ref(schema)
    for union in ("anyOf", "oneOf"):
        if union in schema:
            parts = [py_type(s, used) for s in schema[union]]
            return " | ".join(dict.fromkeys(p for p in parts if p != "None")) + (" | None" if "None" in parts else "")
    if "const" in schema:
        used.add("Literal")
        return f"Literal[{schema['const']!r}]"
    kind = schema.get("type")
    if isinstance(kind, list):  # {"type": ["string", "null"]}
        parts = [py_type({**schema, "type": k}, used) for k in kind]
        return " | ".join(p for p in parts if p != "None") + (" | None" if "None" in parts else "")
    if kind == "null":
        return "None"
    if kind == "string":
        if schema.get("pattern") == CREDITS:
            used.add("Decimal")
            return "Decimal"
        if schema.get("format") == "date-time":
            used.add("datetime")
            return "datetime"
        return "str"
    if kind in ("integer", "number", "boolean"):
        return {"integer": "int", "number": "float", "boolean": "bool"}[kind]
    if kind == "array":
        return f"list[{py_type(schema['items'], used)}]" if "items" in schema else "list[Any]"
    if kind == "object":
        extra = schema.get("additionalProperties", True)
        if schema.get("properties"):
            raise Unsupported(f"an inline object with properties: {schema}")
        used.add("Any")
        return "dict[str, Any]" if extra is True or extra == {} else f"dict[str, {py_type(extra, used)}]"
    raise Unsupported(f"a schema this script does not read: {schema}")


def render_class(name: str, schema: dict, used: set[str]) -> str:
    if schema.get("type") != "object":
        raise Unsupported(f"{name}: not an object")
    required = set(schema.get("required", []))
    lines = [f"class {name}(_Model):"]
    for prop, sub in schema.get("properties", {}).items():
        ann = py_type(sub, used)
        attr = prop + "_" if keyword.iskeyword(prop) or prop in RESERVED or prop.startswith("model_") else prop
        if prop in required:
            value = ""
        elif "default" in sub:
            value = f" = {sub['default']!r}"
        else:
            value = " = None"
            ann = ann if ann.endswith("| None") or ann == "None" else f"{ann} | None"
        if attr != prop:
            used.add("Field")
            value = f" = Field({value[3:] or '...'}, alias={prop!r})"
        lines.append(f"    {attr}: {ann}{value}")
    if len(lines) == 1:
        lines.append("    pass")
    return "\n".join(lines)


def event_item(media: dict) -> dict:
    """One event of a `text/event-stream` answer: 3.2's `itemSchema`, or the event object of the
    3.1 document's `schema` (the branch of its `anyOf` beside the body read whole)."""
    if "itemSchema" in media:
        return media["itemSchema"]
    objects = [s for s in media["schema"].get("anyOf", [media["schema"]]) if s.get("type") == "object"]
    if len(objects) != 1:
        raise Unsupported(f"a text/event-stream schema without its one event object: {media['schema']}")
    return objects[0]


def streams(doc: dict) -> tuple[dict[str, dict], dict[str, dict[str, str]]]:
    """(inline event shapes by class name, stream operationId -> event name -> class name)."""
    shapes: dict[str, dict] = {}
    table: dict[str, dict[str, str]] = {}
    for ops in doc.get("paths", {}).values():
        for op in ops.values():
            for answer in op.get("responses", {}).values():
                media = answer.get("content", {}).get("text/event-stream")
                if media is None:
                    continue
                events = table.setdefault(op["operationId"], {})
                for branch in event_item(media).get("allOf", []):
                    event = branch["if"]["properties"]["event"]["const"]
                    data = branch["then"]["properties"]["data"]["contentSchema"]
                    if "$ref" in data:
                        events[event] = _ref(data)
                        continue
                    name = "".join(part.title() for part in event.split("_")) + "Event"
                    if shapes.setdefault(name, data) != data:
                        raise Unsupported(f"event {event!r}: two different inline shapes")
                    events[event] = name
    return shapes, {k: dict(sorted(v.items())) for k, v in sorted(table.items())}


def render(doc: dict) -> str:
    used: set[str] = set()
    schemas = {n: s for n, s in doc["components"]["schemas"].items() if n not in SKIP}
    events, table = streams(doc)
    for name in events:
        if name in schemas:
            raise Unsupported(f"{name}: an event shape named like a component")
    classes = [render_class(name, schema, used) for name, schema in sorted({**schemas, **events}.items())]
    head = ['"""The node\'s response shapes as pydantic models. GENERATED by clients/python/scripts/gen_models.py',
            'from the node\'s OpenAPI document (`GET /v1/openapi.json`): do not edit; regenerate."""', "",
            "from __future__ import annotations", ""]
    if "datetime" in used:
        head.append("from datetime import datetime")
    if "Decimal" in used:
        head.append("from decimal import Decimal")
    typing = sorted(used & {"Any", "Literal"})
    if typing:
        head.append(f"from typing import {', '.join(typing)}")
    head += ["", f"from pydantic import BaseModel, ConfigDict{', Field' if 'Field' in used else ''}", "", "",
             "class _Model(BaseModel):",
             '    """Open like every answer of the node: a field added later is kept, not refused."""',
             "",
             '    model_config = ConfigDict(extra="allow", populate_by_name=True, protected_namespaces=())']
    names = [c.split("(", 1)[0][6:] for c in classes]
    listed = textwrap.fill(", ".join(json.dumps(n) for n in names), 110, initial_indent="    ", subsequent_indent="    ")
    stream_lines = ["", "", "# Each event stream (by operationId): its event names and the model of their `data`.",
                    "STREAMS: dict[str, dict[str, type[_Model]]] = {"]
    for op_id, by_event in table.items():
        stream_lines.append(f"    {json.dumps(op_id)}: {{")
        stream_lines += [f"        {json.dumps(e)}: {c}," for e, c in by_event.items()]
        stream_lines.append("    },")
    stream_lines.append("}")
    tail = ["", "", "__all__ = [", listed, "]", "",
            "# Resolved now, not at first use: a model never looks its module up again.",
            "for _name in __all__:", "    globals()[_name].model_rebuild()", ""]
    return "\n".join(head) + "\n\n\n" + "\n\n\n".join(classes) + "\n" + "\n".join(stream_lines + tail)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: gen_models.py OPENAPI_JSON|-", file=sys.stderr)
        return 2
    if argv[0] == "-":
        doc = json.load(sys.stdin)
    else:
        with open(argv[0]) as f:
            doc = json.load(f)
    sys.stdout.write(render(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
