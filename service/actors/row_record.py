"""The base of the records actors hold for their table rows (`JobRecord`, `RunRecord`,
`StepRecord`): a frozen dataclass built from its row and written back as one, so each
record declares only its columns and what it decodes."""

from __future__ import annotations

from dataclasses import Field, fields
from typing import Any, ClassVar, Self


class RowRecord:
    """Mixed into a frozen dataclass whose fields are the row's columns."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]  # set by @dataclass on the record

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Self:
        """A column the row lacks (a row older than the column) takes the field's default."""
        names = [f.name for f in fields(cls)]
        return cls(**{n: row[n] for n in names if n in row})

    def row(self) -> dict[str, Any]:
        """The row as the views and the storage functions take it."""
        return {f.name: getattr(self, f.name) for f in fields(self)}  # scalars: no deep copy (asdict)

    def changes(self, new: Self) -> dict[str, Any]:
        """The columns `new` changes (what an update of the row writes)."""
        before = self.row()
        return {k: v for k, v in new.row().items() if before[k] != v}
