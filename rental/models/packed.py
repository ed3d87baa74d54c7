"""A list of per-GPU readings stored compactly: fixed-width big-endian integers in one
binary column instead of a jsonb array.

A sample of 4 GPUs costs 9 bytes of utilization and 17 of memory this way, against about
60 each as jsonb; at 10,000 instances reporting once a minute that is most of the
samples table (docs/operations.md, "The samples table"). Python sees a plain list.
"""

import math
import struct
from typing import Any

from django.db import models

WIDTHS = {2: "H", 4: "I"}


class PackedReadingsField(models.Field):
    """A list of non-negative numbers (or None) as unsigned ``width``-byte integers of
    ``value × scale``, floored: utilization with ``scale=100`` keeps hundredths of a
    percent, so a reading below the idle threshold stays below it. The largest integer
    of the width stands for None (a GPU without a reading)."""

    description = "list of readings packed as fixed-width integers"

    def __init__(self, *args: Any, scale: int = 1, width: int = 2, **kwargs: Any) -> None:
        if width not in WIDTHS:
            raise ValueError("width is 2 or 4 bytes")
        self.scale, self.width = scale, width
        self.missing = 2 ** (8 * width) - 1
        kwargs.setdefault("default", list)
        super().__init__(*args, **kwargs)

    def deconstruct(self) -> tuple:
        name, path, args, kwargs = super().deconstruct()
        kwargs["scale"], kwargs["width"] = self.scale, self.width
        if kwargs.get("default") is list:
            del kwargs["default"]
        return name, path, args, kwargs

    def get_internal_type(self) -> str:
        return "BinaryField"

    def pack(self, values: Any) -> bytes:
        numbers = [
            self.missing
            if value is None
            # The epsilon keeps 0.29 × 100 (28.999…) at 29.
            else min(max(math.floor(float(value) * self.scale + 1e-6), 0), self.missing - 1)
            for value in values
        ]
        return struct.pack(f">{len(numbers)}{WIDTHS[self.width]}", *numbers)

    def unpack(self, data: bytes | memoryview) -> list[float | int | None]:
        raw = bytes(data)
        count = len(raw) // self.width
        numbers = struct.unpack(f">{count}{WIDTHS[self.width]}", raw[: count * self.width])
        if self.scale == 1:
            return [None if n == self.missing else n for n in numbers]
        return [None if n == self.missing else n / self.scale for n in numbers]

    def get_db_prep_value(self, value: Any, connection: Any, prepared: bool = False) -> Any:
        if value is None:
            return None
        if isinstance(value, bytes | memoryview):
            return connection.Database.Binary(bytes(value))
        return connection.Database.Binary(self.pack(value))

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        return None if value is None else self.unpack(value)

    def to_python(self, value: Any) -> Any:
        if isinstance(value, bytes | memoryview):
            return self.unpack(value)
        return value

    def value_to_string(self, obj: models.Model) -> str:
        return str(self.value_from_object(obj))
