"""No float anywhere on a money path: billing's code and templates, and the selectors that
feed it, are scanned for float literals, float() calls, total_seconds() and floatformat."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MONEY_PATHS = [
    *sorted((ROOT / "billing").rglob("*.py")),
    ROOT / "rental" / "selectors.py",
]
TEMPLATES = sorted((ROOT / "templates" / "billing").rglob("*"))


def offences(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Constant) and isinstance(node.value, float):
            found.append(f"{where} float literal {node.value!r}")
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id == "float":
                found.append(f"{where} float()")
            if isinstance(func, ast.Attribute) and func.attr in {"total_seconds", "fromtimestamp"}:
                found.append(f"{where} .{func.attr}() returns or takes a float")
            if (
                isinstance(func, ast.Name)
                and func.id == "Decimal"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, float)
            ):
                found.append(f"{where} Decimal(float)")
        elif (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Div)
            and all(
                isinstance(side, ast.Constant) and isinstance(side.value, int)
                for side in (node.left, node.right)
            )
        ):
            # `/` between two ints is a float; money divides Decimals only.
            found.append(f"{where} int / int is a float")
    return found


def test_no_money_path_uses_float():
    assert MONEY_PATHS, "nothing scanned"
    problems = [problem for path in MONEY_PATHS for problem in offences(path)]
    assert problems == []


def test_billing_templates_do_not_format_through_float():
    scanned = [path for path in TEMPLATES if path.is_file()]
    assert scanned
    assert [str(path) for path in scanned if "floatformat" in path.read_text()] == []


def test_the_scan_catches_a_float(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("x = 0.1\ny = float('2')\nz = (a - b).total_seconds()\n")
    bad_root = bad.relative_to(tmp_path)
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert len(offences(tmp_path / bad_root)) == 3
    finally:
        ROOT = saved
