"""A refusal that names a field is said beside that field's input, on every form of the
pages (issue 17): the page comes back (with HTMX, the partial that holds the form) with
the error inside the input's field and named by its aria-describedby, the input holding
what was typed, and nothing written. A refusal that names no field is said inside the
form, above its fields, not at the top of the page.

Each form is sent as a person or a script could send it: empty, negative, 10^26, a NUL, a
100,000-character text; the page is read as a browser would (its elements, not its
text), so an error drawn anywhere else on the page does not count."""

from dataclasses import dataclass
from datetime import timedelta
from html.parser import HTMLParser
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse
from django.utils import timezone

from billing.models import Budget, LineDispute, StatementLine
from portal.models import AuditEvent
from rental.loans import admission
from rental.models import Image, Quota, QuotaRequest, Reservation
from tests.access import world as world_module
from tests.rental.agent.conftest import running_lease

HUGE = "1" + "0" * 26
LONG = "x" * 100_000
NUL = "a\x00b"

# --- Reading the page as a browser does ------------------------------------------------

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source"}


@dataclass(eq=False)
class Element:
    tag: str
    attrs: dict[str, str]
    parent: "Element | None"
    children: list["Element | str"]

    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def walk(self):
        yield self
        for child in self.children:
            if isinstance(child, Element):
                yield from child.walk()

    def ancestors(self):
        node = self.parent
        while node is not None:
            yield node
            node = node.parent

    def within(self, other: "Element") -> bool:
        return other is self or other in self.ancestors()


class Page(HTMLParser):
    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {}, None, [])
        self.open = self.root
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list) -> None:
        element = Element(tag, {k: v or "" for k, v in attrs}, self.open, [])
        self.open.children.append(element)
        if tag not in VOID:
            self.open = element

    def handle_endtag(self, tag: str) -> None:
        for node in [self.open, *self.open.ancestors()]:
            if node.tag == tag:
                self.open = node.parent or self.root
                return

    def handle_data(self, data: str) -> None:
        self.open.children.append(data)

    def by_id(self, id_: str) -> Element | None:
        return next((e for e in self.root.walk() if e.attrs.get("id") == id_), None)

    def form_posting_to(self, url: str) -> Element:
        """The form sent to ``url``: its action, or a button's (approve or reject)."""
        forms = [
            e
            for e in self.root.walk()
            if e.tag == "form"
            and any(x.attrs.get("action", x.attrs.get("formaction")) == url for x in e.walk())
        ]
        assert len(forms) == 1, f"{len(forms)} forms post to {url}"
        return forms[0]


def input_named(form: Element, name: str) -> Element:
    found = [
        e
        for e in form.walk()
        if e.tag in {"input", "select", "textarea"} and e.attrs.get("name") == name
    ]
    assert found, f"no input {name} in the form"
    return found[0]


def value_of(element: Element) -> str:
    if element.tag == "select":
        chosen = [e for e in element.walk() if e.tag == "option" and "selected" in e.attrs]
        return chosen[0].attrs.get("value", "") if chosen else ""
    if element.tag == "textarea":
        return element.text()
    return element.attrs.get("value", "")


# --- The forms, each in a world where it is shown -----------------------------------------


@dataclass
class Sent:
    user: Any
    url: str
    data: dict[str, Any]  # what a person would send, before the bad value replaces one


def extend(w) -> Sent:
    lease = running_lease(w.f0).lease
    return Sent(w.f0.alice, reverse("rental:lease_extend", args=[lease.pk]), {"hours": "1"})


def week_ahead():
    return (timezone.now() + timedelta(days=7)).replace(hour=9, minute=0, second=0, microsecond=0)


def reschedule(w) -> Sent:
    booking = admission.submit_reservation(
        actor=w.f0.alice,
        project=w.f0.alpha,
        gpu_model=w.f0.model,
        gpu_count=2,
        duration_hours="8",
        priority="experiment",
        market="on_demand",
        start=week_ahead(),
    )
    assert booking.status == Reservation.Status.SCHEDULED
    start = (week_ahead() + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    return Sent(
        w.f0.alice,
        reverse("rental:lease_reschedule", args=[booking.pk]),
        {"start": start, "duration_hours": "8", "gpu_count": "2"},
    )


def extension_decision(w) -> Sent:
    lease = running_lease(w.f0).lease
    Reservation.objects.filter(pk=lease.pk).update(extension_until=lease.end + timedelta(hours=2))
    return Sent(
        w.f0.alpha_manager,
        reverse("rental:lease_extension_decide", args=[lease.pk]),
        {"decision": "reject", "comment": "not this week"},
    )


def save_image(w) -> Sent:
    lease = running_lease(w.f0).lease
    Image.objects.create(
        name="ranking env",
        account=w.f0.account,
        region="us-east-1",
        image_id="ami-0a1b2c3d4e5f60002",
        project=w.f0.alpha,
    )
    return Sent(
        w.f0.alice, reverse("rental:lease_save_image", args=[lease.pk]), {"name": "torch env"}
    )


def lease_decision(w) -> Sent:
    return Sent(
        w.f0.alpha_manager,
        reverse("rental:lease_reject", args=[w.lease.pk]),
        {"comment": "too long"},
    )


def quota_change(w) -> Sent:
    return Sent(
        w.f0.alice,
        reverse("rental:quota_request_new", args=[w.f0.alpha.slug]),
        {"gpu_model": str(w.f0.model.pk), "guaranteed": "", "ceiling": "7", "reason": "a sweep"},
    )


def quota_decision(w) -> Sent:
    asked = world_module.quota_request_of(w.f0.alpha, w.f0.alice)
    return Sent(
        w.f0.alpha_manager,
        reverse("rental:quota_request_decide", args=[asked.pk]),
        {"decision": "reject", "comment": "not now"},
    )


def budget(w) -> Sent:
    return Sent(
        w.f0.alpha_manager,
        reverse("billing:budget_set", args=[w.f0.alpha.slug]),
        {"monthly_amount": "5000.00", "thresholds": ["80:actual"], "cap_policy": "refuse_new"},
    )


def dispute(w) -> Sent:
    _statement, line, _dispute = world_module.statement_of(w.f0.alpha)
    return Sent(
        w.f0.alpha_manager,
        reverse("billing:line_dispute", args=[line.pk]),
        {"comment": "we were down for a day"},
    )


def answer(w) -> Sent:
    _statement, _line, open_dispute = world_module.statement_of(w.f0.alpha)
    return Sent(
        w.f0.admin,
        reverse("billing:dispute_answer", args=[open_dispute.pk]),
        {"answer": "a day is credited", "kind": "credit", "amount": "12.50"},
    )


@dataclass(frozen=True)
class Case:
    form: Any
    field: str
    typed: Any
    says: str
    kept: bool = True  # the input shows the value as typed (not a NUL, not a lost choice)
    also: tuple[tuple[str, Any], ...] = ()  # other values changed with it

    def __str__(self) -> str:
        shown = self.typed if len(self.typed) < 20 else f"{self.typed[:8]}…({len(self.typed)})"
        return f"{self.form.__name__}-{self.field}-{shown!r}"


CASES = [
    # The service reads the hours (R1): empty, not positive, beyond the longest lease.
    Case(extend, "hours", "", "Enter the duration in hours."),
    Case(extend, "hours", "-1", "more than zero hours"),
    Case(extend, "hours", HUGE, "at most"),
    Case(extend, "hours", NUL, "NUL", kept=False),
    Case(extend, "hours", LONG, "Enter the duration in hours."),
    # The form reads the window's shape; the service says a start in the past.
    Case(reschedule, "start", "", "required"),
    Case(reschedule, "start", "2001-01-01T09:00", "past"),
    Case(reschedule, "start", LONG, "Enter a date and time"),
    Case(reschedule, "duration_hours", "-1", "0.25"),
    Case(reschedule, "gpu_count", HUGE, "1024"),
    Case(extension_decision, "comment", NUL, "NUL", kept=False),
    Case(extension_decision, "comment", LONG, "2000"),
    # The service checks the name, then that no image of the project has it.
    Case(save_image, "name", "", "Give the image a name."),
    Case(save_image, "name", "ranking env", "already has an image named"),
    Case(save_image, "name", NUL, "NUL", kept=False),
    Case(save_image, "name", LONG, "100"),
    Case(lease_decision, "comment", "", "Say why the request is rejected."),
    Case(lease_decision, "comment", NUL, "NUL", kept=False),
    Case(lease_decision, "comment", LONG, "2000"),
    Case(quota_change, "ceiling", "-1", "from 0 to 100,000"),
    Case(quota_change, "guaranteed", HUGE, "from 0 to 100,000"),
    Case(quota_change, "ceiling", "", "Ask for a new guarantee", also=(("guaranteed", ""),)),
    Case(quota_change, "reason", "", "Say why the project needs the change."),
    Case(quota_change, "reason", NUL, "NUL", kept=False),
    Case(quota_change, "reason", LONG, "100000"),
    Case(quota_change, "gpu_model", "999999", "Choose one of the project's GPU models.", False),
    Case(quota_decision, "comment", "", "Say why the request is rejected."),
    Case(quota_decision, "comment", NUL, "NUL", kept=False),
    Case(quota_decision, "comment", LONG, "2000"),
    Case(budget, "monthly_amount", "", "Enter an amount such as 12.50."),
    Case(budget, "monthly_amount", "-1", "not negative"),
    Case(budget, "monthly_amount", HUGE, "below 1,000,000,000,000"),
    Case(budget, "monthly_amount", NUL, "NUL", kept=False),
    Case(budget, "thresholds", LONG, "whole number from 1 to 1000"),
    Case(budget, "cap_policy", "nope", "Choose a cap policy.", kept=False),
    Case(dispute, "comment", "", "Say what is wrong with the line."),
    Case(dispute, "comment", NUL, "NUL", kept=False),
    Case(dispute, "comment", LONG, "100000"),
    Case(answer, "answer", "", "Write the answer the manager will read."),
    Case(answer, "answer", NUL, "NUL", kept=False),
    Case(answer, "amount", "-1", "A credit is a positive amount given back."),
    Case(answer, "amount", HUGE, "below 1,000,000,000,000"),
    Case(answer, "amount", LONG, "Enter an amount such as 12.50."),
    Case(answer, "kind", "refund", "A correction is an adjustment or a credit.", kept=False),
]


def written() -> tuple:
    """Everything these forms could write: rows, their changing columns, the audit log."""
    return (
        AuditEvent.objects.count(),
        sorted(
            Reservation.objects.values_list(
                "pk", "status", "start", "end", "gpu_count", "extension_until", "updated_at"
            )
        ),
        Image.objects.count(),
        sorted(QuotaRequest.objects.values_list("pk", "status", "decision_comment")),
        sorted(Quota.objects.values_list("pk", "guaranteed", "ceiling")),
        sorted(Budget.objects.values_list("pk", "monthly_amount")),
        sorted(LineDispute.objects.values_list("pk", "status", "answer")),
        StatementLine.objects.count(),
    )


@pytest.fixture
def world(db, settings):
    settings.PORTAL_MAX_PENDING_PER_USER = 100
    return world_module.build()


@pytest.mark.parametrize("htmx", [False, True], ids=["page", "htmx"])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_it_says_a_bad_value_beside_its_input_and_writes_nothing(world, client, case, htmx):
    sent = case.form(world)
    client.force_login(sent.user)
    data = {**sent.data, case.field: case.typed, **dict(case.also)}
    before = written()
    headers = {"HTTP_HX_REQUEST": "true"} if htmx else {}
    response = client.post(sent.url, data, **headers)

    assert response.status_code == (200 if htmx else 400), response.status_code
    assert written() == before
    assert not list(get_messages(response.wsgi_request)), "said at the top of the page"
    said_beside(response, sent.url, case.field, case.says, case.typed if case.kept else None)


def said_beside(response, url: str, name: str, says: str, typed: str | None) -> None:
    """The error ``says`` is in the field of input ``name`` of the form sent to ``url``,
    named by the input's aria-describedby, said there once and not for the whole form;
    the input holds ``typed`` (None: not checked)."""
    page = Page(response.content.decode())
    form = page.form_posting_to(url)
    field = input_named(form, name)
    assert field.attrs.get("aria-invalid") == "true"
    wrapper = next(e for e in field.ancestors() if "field" in e.classes())
    assert "has-error" in wrapper.classes()
    described = [page.by_id(i) for i in field.attrs.get("aria-describedby", "").split()]
    errors = [e for e in described if e is not None and "field-errors" in e.classes()]
    assert len(errors) == 1, field.attrs
    assert errors[0].within(wrapper) and wrapper.within(form)
    assert says in errors[0].text(), errors[0].text()
    said = [e for e in page.root.walk() if "field-error" in e.classes() and says in e.text()]
    assert all(e.within(errors[0]) for e in said)
    assert not any("alert-error" in e.classes() and says in e.text() for e in form.walk())
    if typed is not None:
        assert value_of(field) == typed


def test_the_request_form_says_a_booking_in_the_past_beside_its_start(world, client):
    """The same mechanism on the form it comes from: the service's ``start`` is the
    form's ``start_at`` (``FORM_FIELD_OF``)."""
    client.force_login(world.f0.alice)
    url = reverse("rental:lease_new")
    data = {
        "project": world.f0.alpha.pk,
        "gpu_model": world.f0.model.pk,
        "gpu_count": "1",
        "duration_hours": "2",
        "priority": "experiment",
        "market": "on_demand",
        "start_mode": "later",
        "start_at": "2001-01-01T09:00",
    }
    before = written()
    response = client.post(url, data)
    assert response.status_code == 400
    assert written() == before
    said_beside(response, url, "start_at", "past", "2001-01-01T09:00")


@dataclass(frozen=True)
class Wide:
    form: Any
    change: Any  # what makes the service refuse for a reason no field holds
    says: str
    status: int

    def __str__(self) -> str:
        return self.form.__name__


def nothing_waits(w, sent: Sent) -> None:
    Reservation.objects.filter(extension_until__isnull=False).update(extension_until=None)


def not_running(w, sent: Sent) -> None:
    Reservation.objects.filter(status=Reservation.Status.ACTIVE).update(
        status=Reservation.Status.ENDED
    )


def answered(w, sent: Sent) -> None:
    LineDispute.objects.update(status=LineDispute.Status.ANSWERED, answer="done")


WIDE = [
    Wide(extension_decision, nothing_waits, "No extension of this lease is waiting.", 409),
    Wide(save_image, not_running, "Only a running or stopped lease can be saved", 409),
    Wide(answer, answered, "This dispute is already answered.", 409),
]


@pytest.mark.parametrize("htmx", [False, True], ids=["page", "htmx"])
@pytest.mark.parametrize("case", WIDE, ids=str)
def test_it_says_a_refusal_of_no_field_inside_the_form(world, client, case, htmx):
    sent = case.form(world)
    case.change(world, sent)
    client.force_login(sent.user)
    before = written()
    headers = {"HTTP_HX_REQUEST": "true"} if htmx else {}
    response = client.post(sent.url, sent.data, **headers)

    assert response.status_code == (200 if htmx else case.status)
    assert written() == before
    assert not list(get_messages(response.wsgi_request)), "said at the top of the page"
    form = Page(response.content.decode()).form_posting_to(sent.url)
    alerts = [e for e in form.walk() if "alert-error" in e.classes()]
    assert len(alerts) == 1 and case.says in alerts[0].text()
    assert not any("has-error" in e.classes() for e in form.walk())
    # The values stay as they were sent, to send again once the cause is gone.
    for name, value in sent.data.items():
        if name != "decision":
            assert value_of(input_named(form, name)) == value


def test_the_language_switch_of_a_page_drawn_again_leads_back_to_the_page(world, client):
    """A refused form's page is served at the address it posted to; switching language
    there must go back to the page the form was on, not GET that address (a 405)."""
    sent = CASES[0].form(world)
    client.force_login(sent.user)
    came_from = "http://testserver/leases/somewhere/"
    response = client.post(sent.url, {**sent.data, "hours": ""}, HTTP_REFERER=came_from)
    assert response.status_code == 400
    switch = Page(response.content.decode()).by_id("language-switch")
    nexts = [e.attrs["value"] for e in switch.walk() if e.attrs.get("name") == "next"]
    assert nexts == [came_from]
    # A page fetched as usual leads back to itself.
    page = client.get("/leases/")
    switch = Page(page.content.decode()).by_id("language-switch")
    assert [e.attrs["value"] for e in switch.walk() if e.attrs.get("name") == "next"] == [
        "/leases/"
    ]
