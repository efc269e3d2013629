"""A product run's steps as a small graph (SVG drawn on the server): one column per depth
(a step sits one column right of the deepest step it needs), an arrow per need, each box
coloured by its step's status. The run page re-reads itself on every run event, so the
graph fills in live without script of its own."""

from __future__ import annotations

BOX_W, BOX_H, GAP_X, GAP_Y, PAD = 132, 40, 36, 14, 4


def layout(steps: list[dict], needs: dict[str, list[str]]) -> dict:
    """`{width, height, nodes: [{key, label, status, x, y}], edges: [{x1, y1, x2, y2}]}`;
    needs naming no step of the run are ignored (a graph of what is shown)."""
    keys = [s["key"] for s in steps]
    depth: dict[str, int] = {}

    def depth_of(key: str, seen: tuple = ()) -> int:
        if key not in depth:
            before = [n for n in needs.get(key, []) if n in keys and n not in seen]
            depth[key] = 1 + max((depth_of(n, seen + (key,)) for n in before), default=-1)
        return depth[key]

    columns: dict[int, list[dict]] = {}
    for s in steps:
        columns.setdefault(depth_of(s["key"]), []).append(s)
    nodes, where = [], {}
    for col, members in sorted(columns.items()):
        for row, s in enumerate(members):
            x, y = PAD + col * (BOX_W + GAP_X), PAD + row * (BOX_H + GAP_Y)
            where[s["key"]] = (x, y)
            nodes.append({"key": s["key"], "label": s.get("capability") or s.get("op") or "", "status": s["status"],
                          "x": x, "y": y})
    edges = []
    for key, (x, y) in where.items():
        for n in needs.get(key, []):
            if n in where:
                nx, ny = where[n]
                edges.append({"x1": nx + BOX_W, "y1": ny + BOX_H / 2, "x2": x, "y2": y + BOX_H / 2})
    width = PAD * 2 + (max(columns, default=0) + 1) * (BOX_W + GAP_X) - GAP_X
    height = PAD * 2 + max((len(m) for m in columns.values()), default=1) * (BOX_H + GAP_Y) - GAP_Y
    return {"width": width, "height": height, "nodes": nodes, "edges": edges, "box_w": BOX_W, "box_h": BOX_H}
