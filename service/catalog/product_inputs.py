"""Checking the inputs of a product run (or a product estimate) against its definition.

Every refusal is 422 `request.validation_failed` with the input's name in
`details.input`. Order: unknown names (in the order sent), then each declared
input in definition order (missing, type, choice), then asset inputs (ours,
found in the project, right kind). A `null` value counts as omitted. An empty
or blank text counts as omitted too, so a required text needs real content.
"""

from __future__ import annotations

import math
from typing import Any

from service.errors import Unprocessable

from .assets import NOT_OURS, ResolveInputs, find_assets, parse_asset_ref
from .product_types import ASSET_TYPES, Input, Product


def validate_run_inputs(
    product: Product,
    inputs: dict[str, Any],
    resolve_inputs: ResolveInputs,
    *,
    project_id: str,
    base_url: str | None,
) -> dict[str, Any]:
    """The run's effective values: every declared input (default or None when omitted),
    asset inputs as bare asset ids, plus the preset's fixed values.

    Steps read these values; store the caller's `inputs` as the run's submitted inputs.
    """
    if not isinstance(inputs, dict):
        raise Unprocessable("inputs must be an object.", {"input": None})
    for name in inputs:
        if name in product.fixed:
            raise Unprocessable(
                f"Input '{name}' is fixed to {product.fixed[name]} by this preset.", {"input": name},
            )
        if name not in product.inputs:
            known = ", ".join(product.inputs) or "none"
            raise Unprocessable(f"Unknown input '{name}'. Known: {known}.", {"input": name})
    values: dict[str, Any] = {}
    for name, inp in product.inputs.items():
        values[name] = _value(name, inp, inputs.get(name), base_url)
    for name, inp in product.inputs.items():
        if inp.type in ASSET_TYPES and values[name] is not None:
            _check_asset(name, inp, values[name], resolve_inputs, project_id)
    return {**values, **product.fixed}


def _value(name: str, inp: Input, value: Any, base_url: str | None) -> Any:
    if value is None or (inp.type == "text" and isinstance(value, str) and not value.strip()):
        if inp.default is not None:
            return inp.default
        if inp.required:
            raise Unprocessable(f"{name} is required.", {"input": name})
        return None
    if inp.type == "text" and not isinstance(value, str):
        raise Unprocessable(f"{name} must be a string.", {"input": name})
    if inp.type == "number" and not _is_number(value):
        raise Unprocessable(f"{name} must be a number.", {"input": name})
    if inp.type == "choice" and value not in inp.options:
        raise Unprocessable(
            f"{name} must be one of {', '.join(inp.options)}.",
            {"input": name, "allowed": list(inp.options)},
        )
    if inp.type in ASSET_TYPES:
        if not isinstance(value, str):
            raise Unprocessable(f"{name} must be one asset id or URL.", {"input": name})
        asset_id = parse_asset_ref(value, base_url)
        if asset_id is None:
            raise Unprocessable(NOT_OURS, {"input": name, "values": [value]})
        return asset_id
    return value


def _is_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer past a float's range (a 400-digit seed): no engine takes it
        return False


def _check_asset(name: str, inp: Input, asset_id: str, resolve_inputs: ResolveInputs, project_id: str) -> None:
    info = find_assets([asset_id], resolve_inputs, project_id, {"input": name})[asset_id]
    if info.kind != inp.type:
        raise Unprocessable(
            f"Input '{name}' takes {inp.type} assets.", {"input": name, "asset_ids": [asset_id]},
        )
