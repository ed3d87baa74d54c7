"""A refusal that names a field lands on that field, on every page and in the API
(issue 17, point 7): every field name a service's refusal may carry (``InvalidInput``,
``QuotaExceeded`` … built with ``field=``, read from the source by ``field_errors``) is
a field of the form or serializer of each entry point that reaches the service, or the
name the page's view maps it to, or is listed below as deliberately said for the whole
form, with the reason.

The entry points are found, not listed: every URL's view (pages and API) and every
function of the admin modules. A page's inputs are those of the Django forms its view
builds and of the template forms that post to its URL; the pool page (whose inputs are
drawn from the view's lists) and the project page's auto-approve forms (drawn by a tag)
are read as they are rendered. A page module maps a service's name to its form's with
``FORM_FIELD_OF`` (``start`` → ``start_at``). An API action's fields are those of the
serializer it validates its body with (``self.validated(…)``); the API answers with the
service's names as they are (``errors`` keyed by ``field``), so there they must be the
serializer's own. An admin form's are its fields.

So a new refusal ``InvalidInput(…, field="x")`` in a service fails here until every form
and serializer that reaches it has a field ``x`` (or maps ``x`` to one), and a new view
that reaches a refusal is checked without being added anywhere.
"""

import ast
import importlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from django import forms
from django.contrib import admin as django_admin
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from rest_framework import serializers

from tests import factories
from tests.portal.field_errors import Named, Source, Unresolved, dotted_name

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "templates"

# --- Deliberately form-wide, each with its reason --------------------------------------

# A name a service gives a refusal that is said above the form wherever the form has no
# field of that name: (the function that names it, the name) → why.
NO_POOL = (
    "no pool is configured for the GPU model: the site's configuration, not a value typed "
    "here (on the request form it is still beside the GPU model)"
)
FORM_WIDE = {
    ("rental.loans.standing._pool_from", "gpu_model"): NO_POOL,
    ("rental.loans.quotas.set_quota", "gpu_model"): NO_POOL,
    ("rental.loans.admission_rules.decide", "priority"): (
        "production over the guarantee when a stopped lease resumes: the priority is the "
        "lease's, not typed again"
    ),
    ("rental.loans.pools.watch_availability", "count"): (
        "watching from a lease: the count is the lease's own GPU count, never typed"
    ),
}

# Services that judge again what was asked before (a manager's decision): what they
# refuse about the request itself is said above the decision's form, which has only a
# comment. What their callers type (the comment) is still checked.
DECISIONS = {
    "rental.loans.admission.approve_reservation": "a lease as it was asked",
    "rental.loans.extension.decide_extension": "an extension as it was asked",
    "rental.loans.quota_requests.decide_quota_request": "a quota change as it was asked",
}

# An entry point that passes services only some of the values they can name:
# (entry, services) → why those services name nothing else from there.
ONLY_WHAT_IS_ASKED = {
    (
        "rental.api.pools.PoolViewSet.capacity",
        ("rental.loans.pools.check_settings", "rental.loans.pools.placement_accounts"),
    ): (
        "check_settings names only a setting it is asked to change, or the capacity (and "
        "calls placement_accounts only when those are asked); this endpoint asks only the "
        "capacity"
    ),
}

# What the source reading cannot resolve, by where it is and its expression: the names it
# can be (checked like any other), or why it needs no form field.
UNRESOLVED: dict[tuple[str, str], tuple[str, ...] | str] = {
    ("rental.catalog.accounts._save_fields", "missing[0]"): ("name", "driver", "regions"),
    ("rental.catalog.accounts._checked_options", "problem.path"): (
        "a path inside the account's driver options (options.vswitch_ids.<zone>), the "
        "document the API's and the admin's `options` field carries, as a document path"
    ),
    ("rental.catalog.accounts.save_account", "sorted(unknown)[0]"): (
        "a key of the changes that is not an account field: the API's serializer passes "
        "only its own fields, so this never reaches a person"
    ),
}

# Entry points whose refusals name something other than a form's field, by design.
DOCUMENT_PATHS = {
    "portal.api.config.ProjectConfigView.post": (
        "a project's configuration document: a refusal names the document's path "
        "(quotas[0].guaranteed), as docs/rules.md Q1 says"
    ),
}

SOURCE = Source()


# --- Entry points ----------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    qualname: str
    kind: str  # "page" | "api" | "admin"
    url_name: str = ""  # namespaced, for a page's template forms


def _patterns(patterns: list, namespace: str = "") -> Iterator[tuple[str, URLPattern]]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            inner = f"{namespace}{pattern.namespace}:" if pattern.namespace else namespace
            yield from _patterns(pattern.url_patterns, inner)
        else:
            yield namespace, pattern


def _own(module: str) -> bool:
    return module.split(".")[0] in {"portal", "rental", "billing"}


def _kind(module: str) -> str:
    return "api" if ".api." in f".{module}." else "page"


def url_entries() -> list[Entry]:
    """Every view of the site and the API: functions, and the actions of view classes."""
    found: dict[str, Entry] = {}
    for namespace, pattern in _patterns(get_resolver().url_patterns):
        callback = pattern.callback
        cls = getattr(callback, "cls", None) or getattr(callback, "view_class", None)
        if cls is not None:
            if _own(cls.__module__):
                actions = getattr(callback, "actions", None) or {}
                names = set(actions.values()) or {"get", "post", "put", "patch", "delete"}
                for name in sorted(n for n in names if hasattr(cls, n)):
                    qualname = f"{cls.__module__}.{cls.__qualname__}.{name}"
                    found[qualname] = Entry(qualname, _kind(cls.__module__))
            continue
        while hasattr(callback, "__wrapped__"):
            callback = callback.__wrapped__
        if _own(callback.__module__):
            qualname = f"{callback.__module__}.{callback.__qualname__}"
            url_name = f"{namespace}{pattern.name}" if pattern.name else ""
            found[qualname] = Entry(qualname, _kind(callback.__module__), url_name)
    return list(found.values())


def admin_entries() -> list[Entry]:
    """The functions of the admin modules that reach a refusal naming a field."""
    modules = ("portal.admin", "rental.admin", "billing.admin")
    return [Entry(qualname, "admin") for qualname in SOURCE.entry_points(modules)]


# --- What each entry point's form or serializer has ------------------------------------


class FormReader(HTMLParser):
    """The forms of a template or a rendered page: the URLs each posts to (its action,
    ``hx-post``, a button's ``formaction``), the names of its inputs (those inside it and
    those elsewhere that name it with ``form=``) and its source text."""

    URL = re.compile(r"""\{%\s*url\s+['"]([\w:-]+)['"]""")

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.text = text
        self.lines = [0]
        for line in text.splitlines(keepends=True):
            self.lines.append(self.lines[-1] + len(line))
        self.forms: list[dict[str, Any]] = []
        self.outside: list[tuple[str, str]] = []  # (form id, name)
        self.open: dict[str, Any] | None = None
        self.feed(text)

    def _offset(self) -> int:
        line, column = self.getpos()
        return self.lines[line - 1] + column

    def _targets(self, attrs: dict[str, str]) -> set[str]:
        found = set()
        for key in ("action", "hx-post", "formaction"):
            value = attrs.get(key) or ""
            found.update(self.URL.findall(value))
            if value.startswith("/"):
                found.add(value)
        return found

    def handle_starttag(self, tag: str, attrs_list: list) -> None:
        attrs = {key: value or "" for key, value in attrs_list}
        if tag == "form":
            self.open = {
                "id": attrs.get("id", ""),
                "posts": self._targets(attrs),
                "names": set(),
                "start": self._offset(),
            }
            self.forms.append(self.open)
            return
        if tag in {"input", "select", "textarea", "button"} and "name" in attrs:
            if attrs.get("form") and (self.open is None or attrs["form"] != self.open["id"]):
                self.outside.append((attrs["form"], attrs["name"]))
            elif self.open is not None:
                self.open["names"].add(attrs["name"])
        if self.open is not None and tag == "button":
            self.open["posts"] |= self._targets(attrs)

    def handle_endtag(self, tag: str) -> None:
        if tag == "form" and self.open is not None:
            self.open["source"] = self.text[self.open["start"] : self._offset()]
            self.open = None

    def posting_to(self, target: str) -> list[dict[str, Any]]:
        return [form for form in self.forms if target in form["posts"]]

    def names_posting_to(self, target: str) -> set[str] | None:
        """The inputs of the forms posting to ``target``; None: no form does."""
        chosen = self.posting_to(target)
        if not chosen:
            return None
        names = set().union(*(form["names"] for form in chosen))
        ids = {form["id"] for form in chosen if form["id"]}
        return names | {name for owner, name in self.outside if owner in ids}


# A Django form drawn field by field in a template: {{ form.start }}, field=form.gpu_count.
DRAWN_FIELD = re.compile(r"\bform\.(\w+)")

# {% include "x.html" %} with a quoted name: its text stands where the tag is, so a form's
# fields drawn by an included template count as the form's.
INCLUDE = re.compile(r"""\{%\s*include\s+['"]([\w/.-]+)['"][^%]*%\}""")


def expanded(text: str, depth: int = 0) -> str:
    if depth > 5:
        return text
    return INCLUDE.sub(
        lambda match: expanded((TEMPLATES / match.group(1)).read_text(), depth + 1), text
    )


TEMPLATE_FORMS = {
    path: FormReader(expanded(path.read_text())) for path in TEMPLATES.rglob("*.html")
}


def template_inputs(url_name: str) -> set[str] | None:
    """The inputs of every template form that posts to ``url_name``; None: no form does."""
    found: set[str] | None = None
    for reader in TEMPLATE_FORMS.values():
        names = reader.names_posting_to(url_name)
        if names is None:
            continue
        for form in reader.posting_to(url_name):
            names |= set(DRAWN_FIELD.findall(form.get("source", "")))
        found = (found or set()) | names
    return found


def _import(qualname: str) -> Any:
    module, _, name = qualname.rpartition(".")
    while module:
        try:
            found: Any = importlib.import_module(module)
        except ImportError:
            module, _, more = module.rpartition(".")
            name = f"{more}.{name}"
            continue
        for part in name.split("."):
            found = getattr(found, part, None)
            if found is None:
                return None
        return found
    return None


def classes_used(qualname: str, seen: set[str] | None = None) -> Iterator[type]:
    """The classes the function names in its calls (as the callee or an argument), and
    those of the functions of its own module or class it calls: where a view builds its
    form and an API action names the serializer it validates with."""
    seen = seen if seen is not None else set()
    if qualname in seen or qualname not in SOURCE.functions:
        return
    seen.add(qualname)
    function = SOURCE.functions[qualname]
    for node in ast.walk(function.node):
        if not isinstance(node, ast.Call):
            continue
        for candidate in [node.func, *node.args]:
            written = dotted_name(candidate)
            if not written:
                continue
            if written.startswith(("self.", "cls.")) and function.cls:
                method = SOURCE.method(function.cls, written.split(".", 1)[1])
                if method:
                    yield from classes_used(method, seen)
                continue
            target = SOURCE.resolve(function.module, written)
            if target in SOURCE.functions:
                if SOURCE.functions[target].module == function.module:
                    yield from classes_used(target, seen)
                continue
            found = _import(target)
            if isinstance(found, type):
                yield found


def writable(serializer: type[serializers.BaseSerializer]) -> set[str]:
    return {name for name, field in serializer().fields.items() if not field.read_only}


@dataclass
class Inputs:
    """What a person (or a program) sends to an entry point, and how its view renames a
    service's field names to them."""

    names: set[str]
    mapping: dict[str, str]
    read_from: str


def inputs_of(entry: Entry, rendered: dict[str, set[str]]) -> Inputs:
    if entry.kind == "api":
        used = [c for c in classes_used(entry.qualname) if issubclass(c, serializers.Serializer)]
        names = set().union(*(writable(c) for c in used))
        return Inputs(names, {}, ", ".join(c.__name__ for c in used) or "no body")
    if entry.kind == "admin":
        owner = _import(entry.qualname.rsplit(".", 1)[0])
        if issubclass(owner, forms.BaseForm):
            return Inputs(set(owner.base_fields), {}, owner.__name__)
        assert issubclass(owner, django_admin.ModelAdmin), entry
        if owner.form is not forms.ModelForm:
            return Inputs(set(owner.form.base_fields), {}, owner.form.__name__)
        return Inputs(set(owner.fields or []), {}, f"{owner.__name__}.fields")
    names: set[str] = set()
    read_from = []
    for cls in classes_used(entry.qualname):
        if issubclass(cls, forms.BaseForm):
            names |= set(cls.base_fields)
            read_from.append(cls.__name__)
    if entry.url_name in rendered:
        names |= rendered[entry.url_name]
        read_from.append("the rendered page")
    elif entry.url_name and (typed := template_inputs(entry.url_name)) is not None:
        drawn_at_run_time = {name for name in typed if "{" in name}
        assert not drawn_at_run_time, (entry.url_name, drawn_at_run_time)
        names |= typed
        read_from.append("its template form")
    module = importlib.import_module(SOURCE.functions[entry.qualname].module)
    mapping = dict(getattr(module, "FORM_FIELD_OF", {}))
    return Inputs(names, mapping, ", ".join(read_from) or "no form")


# --- The check -------------------------------------------------------------------------


def mismatches(
    entries: list[Entry], rendered: dict[str, set[str]], source: Source = SOURCE
) -> list[str]:
    """One line for each field name an entry point may be refused with that is not one of
    its inputs (after its view's mapping) and not deliberately form-wide."""
    problems = []
    for entry in entries:
        values = source.fields(entry.qualname)
        if not values or entry.qualname in DOCUMENT_PATHS:
            continue
        inputs = inputs_of(entry, rendered)
        typed_here = source.fields(entry.qualname, avoiding=frozenset(DECISIONS))
        asked_only = {
            service
            for e, services in ONLY_WHAT_IS_ASKED
            if e == entry.qualname
            for service in services
        }
        for value in sorted(values, key=str):
            if value not in typed_here or getattr(value, "origin", "") in asked_only:
                continue
            if isinstance(value, Unresolved):
                known = UNRESOLVED.get((value.origin, value.expression))
                if known is None:
                    problems.append(
                        f"{entry.qualname}: {value.origin} names the field "
                        f"`{value.expression}`, which the reading cannot resolve"
                    )
                    continue
                if isinstance(known, str):
                    continue
                names = [(value.origin, name) for name in known]
            elif isinstance(value, Named):
                names = [(value.origin, value.name)]
            else:
                continue
            for origin, name in names:
                if inputs.mapping.get(name, name) in inputs.names or (origin, name) in FORM_WIDE:
                    continue
                problems.append(
                    f"{entry.qualname} ({entry.kind}; the fields of {inputs.read_from}: "
                    f"{sorted(inputs.names)}): {origin} names `{name}`"
                )
    return sorted(set(problems))


@pytest.fixture
def rendered(db, client: Client) -> dict[str, set[str]]:
    """The forms read as drawn: the pool page's admin forms, whose inputs come from the
    view's lists, and the project page's auto-approve forms, which a tag draws."""
    f0 = factories.fixture_f0()
    client.force_login(f0.admin)
    page = FormReader(client.get(reverse("rental:pool", args=[f0.pool.pk])).content.decode())
    found = {}
    for url_name, args in (
        ("rental:pool_settings", [f0.pool.pk]),
        ("rental:pool_degraded", [f0.pool.pk]),
        ("rental:offering_terms", [f0.pool.pk, f0.offering.pk]),
    ):
        names = page.names_posting_to(reverse(url_name, args=args))
        assert names, f"the pool page has no form posting to {url_name}"
        found[url_name] = names
    # A quota's auto-approve forms on the project page, drawn by a tag (``auto_approve``).
    quota = f0.alpha.quotas.get()
    for who, url_name in (
        (f0.alpha_manager, "rental:quota_auto_approve"),
        (f0.admin, "rental:quota_auto_approve_caps"),
    ):
        client.force_login(who)
        page = FormReader(client.get(f0.alpha.get_absolute_url()).content.decode())
        names = page.names_posting_to(reverse(url_name, args=[f0.alpha.slug, quota.pk]))
        assert names, f"the project page has no form posting to {url_name}"
        found[url_name] = names
    return found


def test_every_field_a_refusal_names_is_a_field_of_the_form_that_sends_it(rendered):
    assert mismatches(url_entries() + admin_entries(), rendered) == []


def named(qualname: str, source: Source = SOURCE) -> set[str]:
    return {value.name for value in source.fields(qualname) if isinstance(value, Named)}


def test_the_reading_credits_each_entry_point_with_the_refusals_it_reaches():
    assert {"start", "gpu_count", "duration_hours", "data_volume", "purpose"} <= named(
        "rental.views.leases.lease_new"
    )
    assert {"start", "gpu_count", "image"} <= named("rental.api.leases.LeaseViewSet.create")
    # Through a helper's parameter: whole_number(…, field="capacity"), and a loop.
    assert {"capacity", "committed_gpus", "committed_monthly_cost", "residual"} <= named(
        "rental.views.pools.pool_settings"
    )
    # A parameter's default: parse_amount(field="amount").
    assert "amount" in named("billing.views.dispute_answer")
    # A refusal caught and dropped inside a service is not credited (spot re-queueing).
    assert not named("rental.fleet.spot._requeue")
    entries = {entry.qualname for entry in url_entries()}
    assert {"rental.views.leases.lease_new", "rental.api.leases.LeaseViewSet.extend"} <= entries


def test_a_refusal_naming_a_field_no_form_has_is_reported(rendered):
    """What the test is for. A new refusal on a field the request form and the API do not
    have (``gpus``), added to the request's R1 checks, is reported for both; so is the
    booking's ``start`` on the page without the view's mapping to ``start_at``."""
    source = Source()
    source.functions["rental.loans.validation.validated"].raises.append(
        Named("gpus", "rental.loans.validation.validated")
    )
    entries = [
        entry
        for entry in url_entries()
        if entry.qualname
        in {"rental.views.leases.lease_new", "rental.api.leases.LeaseViewSet.create"}
    ]
    assert mismatches(entries, rendered) == []
    found = mismatches(entries, rendered, source)
    assert [line.split(" ")[0] for line in found if line.endswith("names `gpus`")] == [
        "rental.api.leases.LeaseViewSet.create",
        "rental.views.leases.lease_new",
    ], found

    import rental.views.leases as leases_views

    saved = dict(leases_views.FORM_FIELD_OF)
    leases_views.FORM_FIELD_OF.clear()
    try:
        found = mismatches(entries, rendered)
    finally:
        leases_views.FORM_FIELD_OF.update(saved)
    assert any(line.endswith("names `start`") for line in found), found


def test_the_lists_are_short_give_reasons_and_are_all_still_needed():
    lists = (FORM_WIDE, DECISIONS, ONLY_WHAT_IS_ASKED, UNRESOLVED, DOCUMENT_PATHS)
    assert sum(len(items) for items in lists) <= 12
    assert all(reason for items in lists for reason in items.values())
    everything = set()
    for entry in url_entries() + admin_entries():
        everything |= SOURCE.fields(entry.qualname)
    named_anywhere = {(v.origin, v.name) for v in everything if isinstance(v, Named)}
    unresolved = {(v.origin, v.expression) for v in everything if isinstance(v, Unresolved)}
    assert set(FORM_WIDE) <= named_anywhere
    assert set(UNRESOLVED) <= unresolved
    assert set(DECISIONS) <= set(SOURCE.functions)
    for entry, services in ONLY_WHAT_IS_ASKED:
        assert set(services) <= set(SOURCE.functions)
        assert entry in {e.qualname for e in url_entries()}
    assert set(DOCUMENT_PATHS) <= {e.qualname for e in url_entries()}
