"""Which fields the services' refusals name, read from the source without running it:
for the test that each one lands on a field of the form or serializer that sends it.

Every ``DomainError`` (``InvalidInput``, ``QuotaExceeded`` …) built with ``field=`` in
``portal/``, ``rental/`` and ``billing/`` is found with ``ast``. A literal is a field
name; a name bound by a ``for`` over a literal tuple is each of its strings; a parameter
of the function (``field=field`` in ``whole_number``, ``parse_amount``, ``plain_text``)
is resolved at every call site, from the argument given there or the parameter's default.
Calls are followed through the modules' imports (``from rental.loans import admission``
then ``admission.submit_reservation(…)``, a name imported or defined in the module,
``self.method``), so an entry point (a view, an API view) is credited with every field
any service it calls may name; a call inside a ``try`` that catches every domain error
and does not raise again is not followed, except in the views and API views, where
catching is how a refusal is shown. What cannot be read this way is kept as
``Unresolved`` with its function and expression, for the test to account for by hand.

It over-counts on purpose: a refusal raised only under a condition the caller never meets
is still credited to it (the test's lists say where that is so, and why).
"""

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("portal", "rental", "billing")
BASE_ERROR = "portal.errors.DomainError"
# Where a caught refusal is shown to the person rather than dropped.
DISPLAYING = (
    "portal.views",
    "portal.token_views",
    "portal.audit_log",
    "portal.api",
    "portal.admin",
    "rental.views",
    "rental.api",
    "rental.admin",
    "billing.views",
    "billing.spend_views",
    "billing.api",
    "billing.admin",
)


@dataclass(frozen=True)
class Named:
    """A field name given as a literal (or a loop over literals) in ``origin``."""

    name: str
    origin: str  # the qualified name of the function where the literal is written


@dataclass(frozen=True)
class Param:
    """The value of the function's own parameter: resolved where it is called."""

    name: str


@dataclass(frozen=True)
class Unresolved:
    """A value this reading cannot tell (``sorted(unknown)[0]``): where and its text."""

    origin: str
    expression: str


Value = Named | Param | Unresolved


@dataclass
class Function:
    qualname: str  # "rental.loans.admission.submit_reservation", "pkg.mod.Class.method"
    module: str
    path: Path
    node: ast.FunctionDef | ast.AsyncFunctionDef
    cls: str | None = None
    raises: list[Value] = field(default_factory=list)
    # (callee's qualname, its parameters bound at the call site, where)
    calls: list[tuple[str, dict[str, Value], str]] = field(default_factory=list)

    @property
    def params(self) -> list[str]:
        args = self.node.args
        return [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]]

    def default(self, name: str) -> ast.expr | None:
        args = self.node.args
        positional = [*args.posonlyargs, *args.args]
        for arg, value in zip(
            positional[len(positional) - len(args.defaults) :], args.defaults, strict=True
        ):
            if arg.arg == name:
                return value
        for arg, value in zip(args.kwonlyargs, args.kw_defaults, strict=True):
            if arg.arg == name:
                return value
        return None


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources() -> Iterator[Path]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" not in path.parts:
                yield path


def dotted_name(node: ast.expr) -> str | None:
    """``a.b.c`` for a name or an attribute chain; None for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = dotted_name(node.value)
        return f"{inner}.{node.attr}" if inner else None
    return None


def within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == name or module.startswith(f"{name}.") for name in packages)


class Source:
    """Every module of the packages, its functions, classes and imports."""

    def __init__(self) -> None:
        self.modules: dict[str, ast.Module] = {}
        self.paths: dict[str, Path] = {}
        self.imports: dict[str, dict[str, str]] = {}
        self.functions: dict[str, Function] = {}
        self.bases: dict[str, list[str]] = {}  # class qualname → base qualnames
        for path in _sources():
            name = _module_name(path)
            self.modules[name] = ast.parse(path.read_text(), filename=str(path))
            self.paths[name] = path
        for name, tree in self.modules.items():
            self.imports[name] = self._read_imports(name, tree)
        for name, tree in self.modules.items():
            self._index(name, tree)
        self.errors = self._error_classes()
        for function in self.functions.values():
            self._read_body(function)
        self._fields: dict[frozenset[str], dict[str, frozenset[Value]]] = {}

    # --- Reading -------------------------------------------------------------------

    def _read_imports(self, module: str, tree: ast.Module) -> dict[str, str]:
        names: dict[str, str] = {}
        package = module if self.paths[module].name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        names[alias.asname] = alias.name
                    else:
                        names[alias.name.split(".")[0]] = alias.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")
                    parent = parent[: len(parent) - (node.level - 1)]
                    base = ".".join([*parent, *([base] if base else [])])
                for alias in node.names:
                    names[alias.asname or alias.name] = f"{base}.{alias.name}"
        return names

    def _index(self, module: str, tree: ast.Module) -> None:
        path = self.paths[module]
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                qualname = f"{module}.{node.name}"
                self.functions[qualname] = Function(qualname, module, path, node)
            elif isinstance(node, ast.ClassDef):
                cls = f"{module}.{node.name}"
                self.bases[cls] = [
                    self.resolve(module, dotted)
                    for dotted in (dotted_name(base) for base in node.bases)
                    if dotted
                ]
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                        qualname = f"{cls}.{item.name}"
                        self.functions[qualname] = Function(qualname, module, path, item, cls)

    def resolve(self, module: str, dotted: str) -> str:
        """A dotted name as written in ``module`` → its qualified name."""
        head, _, rest = dotted.partition(".")
        imported = self.imports.get(module, {})
        base = imported.get(head, f"{module}.{head}")
        return f"{base}.{rest}" if rest else base

    def _error_classes(self) -> set[str]:
        errors = {BASE_ERROR}
        grew = True
        while grew:
            grew = False
            for cls, bases in self.bases.items():
                if cls not in errors and any(base in errors for base in bases):
                    errors.add(cls)
                    grew = True
        return errors

    def _callee(self, function: Function, call: ast.Call) -> str | None:
        dotted = dotted_name(call.func)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        if function.cls and head in {"self", "cls"} and rest and "." not in rest:
            return self.method(function.cls, rest)
        qualname = self.resolve(function.module, dotted)
        if qualname in self.functions or qualname in self.errors:
            return qualname
        # A function imported under a module's name re-exported elsewhere: not followed.
        return None

    def method(self, cls: str, name: str) -> str | None:
        """``name`` as the class or the first of its bases (in the packages) defines it."""
        if f"{cls}.{name}" in self.functions:
            return f"{cls}.{name}"
        for base in self.bases.get(cls, []):
            found = self.method(base, name)
            if found:
                return found
        return None

    def _loop_values(self, function: Function) -> dict[str, list[str]]:
        """Names bound by ``for name, … in ((literal, …), …)``: each one's strings."""
        values: dict[str, list[str]] = {}
        for node in ast.walk(function.node):
            if not isinstance(node, ast.For) or not isinstance(node.iter, ast.Tuple | ast.List):
                continue
            targets = node.target.elts if isinstance(node.target, ast.Tuple) else [node.target]
            for index, target in enumerate(targets):
                if not isinstance(target, ast.Name):
                    continue
                strings = []
                for item in node.iter.elts:
                    part = item.elts[index] if isinstance(item, ast.Tuple) else item
                    if isinstance(part, ast.Constant) and isinstance(part.value, str):
                        strings.append(part.value)
                if len(strings) == len(node.iter.elts):
                    values[target.id] = strings
        return values

    def _value(
        self, function: Function, expr: ast.expr, loops: dict[str, list[str]]
    ) -> list[Value]:
        origin = function.qualname
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return [Named(expr.value, origin)] if expr.value else []
        if isinstance(expr, ast.Name):
            if expr.id in loops:
                return [Named(value, origin) for value in loops[expr.id]]
            if expr.id in function.params:
                return [Param(expr.id)]
        return [Unresolved(origin, ast.unparse(expr))]

    def _swallowed(self, function: Function) -> set[int]:
        """The calls (by id) in a ``try`` whose handler catches every domain error and
        does not raise again: the refusal never leaves the function (``spot._requeue``
        logs it). In the views and API views catching is how a refusal is shown, so
        there ``Source`` counts them anyway (``DISPLAYING``)."""
        inside: set[int] = set()
        for node in ast.walk(function.node):
            if not isinstance(node, ast.Try):
                continue
            for handler in node.handlers:
                caught = [handler.type] if handler.type is not None else []
                if isinstance(handler.type, ast.Tuple):
                    caught = list(handler.type.elts)
                names = {
                    self.resolve(function.module, dotted)
                    for dotted in (dotted_name(item) for item in caught)
                    if dotted
                }
                everything = handler.type is None or bool(
                    names & {BASE_ERROR, f"{function.module}.Exception", "Exception"}
                )
                raises = any(isinstance(item, ast.Raise) for item in ast.walk(handler))
                if everything and not raises:
                    for statement in node.body:
                        inside.update(id(item) for item in ast.walk(statement))
                    break
        return inside

    def _read_body(self, function: Function) -> None:
        loops = self._loop_values(function)
        displaying = within(function.module, DISPLAYING)
        swallowed = set() if displaying else self._swallowed(function)
        for node in ast.walk(function.node):
            if not isinstance(node, ast.Call) or id(node) in swallowed:
                continue
            callee = self._callee(function, node)
            if callee is None:
                continue
            where = f"{function.path.relative_to(ROOT)}:{node.lineno}"
            if callee in self.errors:
                for keyword in node.keywords:
                    if keyword.arg == "field":
                        function.raises.extend(self._value(function, keyword.value, loops))
                continue
            target = self.functions[callee]
            params = target.params
            if target.cls is not None and params and params[0] in {"self", "cls"}:
                params = params[1:]
            bound: dict[str, Value] = {}
            for index, arg in enumerate(node.args):
                if isinstance(arg, ast.Starred) or index >= len(params):
                    break
                values = self._value(function, arg, loops)
                if len(values) == 1:
                    bound[params[index]] = values[0]
            for keyword in node.keywords:
                if keyword.arg is not None:
                    values = self._value(function, keyword.value, loops)
                    if len(values) == 1:
                        bound[keyword.arg] = values[0]
                    elif values:  # a loop: one call per value
                        for value in values:
                            function.calls.append((callee, {**bound, keyword.arg: value}, where))
                        bound = {}
                        break
            else:
                function.calls.append((callee, bound, where))

    # --- Fields --------------------------------------------------------------------

    def fields(self, qualname: str, *, avoiding: frozenset[str] = frozenset()) -> frozenset[Value]:
        """Every field a refusal raised by the function, or by anything it calls, may
        name; ``Param`` for the function's own parameters. ``avoiding``: functions whose
        refusals are left out (not followed into)."""
        if avoiding not in self._fields:
            self._fields[avoiding] = self._solve(avoiding)
        return self._fields[avoiding].get(qualname, frozenset())

    def _solve(self, avoiding: frozenset[str]) -> dict[str, frozenset[Value]]:
        known: dict[str, set[Value]] = {name: set(f.raises) for name, f in self.functions.items()}
        for name in avoiding:
            known[name] = set()
        changed = True
        while changed:
            changed = False
            for name, function in self.functions.items():
                if name in avoiding:
                    continue
                mine = known[name]
                before = len(mine)
                for callee, bound, where in function.calls:
                    for value in list(known[callee]):
                        mine.update(self._bind(self.functions[callee], value, bound, where))
                changed = changed or len(mine) != before
        return {name: frozenset(values) for name, values in known.items()}

    def _bind(
        self, callee: Function, value: Value, bound: dict[str, Value], where: str
    ) -> list[Value]:
        if not isinstance(value, Param):
            return [value]
        if value.name in bound:
            return [bound[value.name]]
        default = callee.default(value.name)
        if isinstance(default, ast.Constant) and isinstance(default.value, str):
            return [Named(default.value, callee.qualname)] if default.value else []
        return [Unresolved(callee.qualname, f"{value.name}, not given at {where}")]

    def entry_points(self, modules: tuple[str, ...]) -> dict[str, frozenset[Value]]:
        """The functions and methods of ``modules`` (and the modules under them) that
        may raise a refusal naming a field, with those fields."""
        found = {}
        for name, function in self.functions.items():
            if not within(function.module, modules):
                continue
            values = frozenset(v for v in self.fields(name) if not isinstance(v, Param))
            if values:
                found[name] = values
        return found
