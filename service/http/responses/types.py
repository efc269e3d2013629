"""Field types of the response models: strings with a documented format, and open enums.

An open enum is a string whose known values are listed (`examples`) but not closed: the
spec lets a new status or event name appear, and a client generated from the document must
still parse it. The values come from their owner (service/machines.py, the catalog, the
actors), never restated here.
"""

from __future__ import annotations

from typing import Annotated, Iterable

from pydantic import BaseModel, ConfigDict, WithJsonSchema

Uuid = Annotated[str, WithJsonSchema({"type": "string", "format": "uuid"})]
Timestamp = Annotated[str, WithJsonSchema({"type": "string", "format": "date-time"})]
Day = Annotated[str, WithJsonSchema({"type": "string", "format": "date"})]
Credits = Annotated[str, WithJsonSchema({"type": "string", "pattern": r"^-?[0-9]+\.[0-9]{2}$",
                                         "description": "Decimal string of credits."})]
Sha256 = Annotated[str, WithJsonSchema({"type": "string", "pattern": "^[0-9a-f]{64}$"})]


def known(values: Iterable[str], what: str = "value") -> WithJsonSchema:
    """The schema of a string with known values (`Annotated[str, known(...)]`): `examples`
    lists them; another value may appear."""
    vals = list(values)
    return WithJsonSchema({
        "type": "string", "examples": vals,
        "description": f"Known values ({what}): {', '.join(vals)}. Others may appear: treat an unknown one as opaque.",
    })


def sorted_states(machine) -> list[str]:
    """A machine's states in a stable order (the machine keeps a set)."""
    return sorted(machine.states)


class Shape(BaseModel):
    """Base of response objects: open (a field added later must not break a reader); every
    field without a default is always sent, null where it has no value."""

    model_config = ConfigDict(extra="ignore")
