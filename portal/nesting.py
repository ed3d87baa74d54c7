"""How deep a document may nest. No input the portal takes nests more than a few levels
(a budget's thresholds: a list of mappings), while Python reads and walks nested data
recursively: 10,000 levels of ``[`` would end in a RecursionError, a server error. So a
JSON body or a YAML document deeper than ``MAX_DEPTH`` is refused as bad input, naming
the rule, before anything walks it."""

from typing import Any

MAX_DEPTH = 32


def too_deep(data: Any, *, limit: int = MAX_DEPTH) -> bool:
    """Whether lists and mappings in ``data`` nest more than ``limit`` levels (a scalar
    is 0 levels, ``[1]`` one, ``{"a": [1]}`` two). Walked without recursion, and each
    list or mapping once per depth (YAML's aliases share one many times)."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    deepest: dict[int, int] = {}
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, list | tuple):
            children = value
        else:
            continue
        if depth > limit:
            return True
        if deepest.get(id(value), 0) >= depth:
            continue
        deepest[id(value)] = depth
        stack.extend((child, depth + 1) for child in children)
    return False
