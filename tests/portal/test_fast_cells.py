"""The cells a list draws on every row, written out for speed, say exactly what Django's
own would: ``moment`` as the ``date`` filter, ``label`` and the pills as
``get_FOO_display``, ``path_of`` as ``reverse``."""

import random
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.template import Context, Template
from django.urls import reverse, set_script_prefix
from django.utils import timezone, translation

from portal.choice_labels import choice_label
from portal.models import Membership, Project
from portal.paths import path_of
from rental.models import Reservation

LANGUAGES = ["en", "zh-hans"]


def moments(count: int) -> list[datetime]:
    rng = random.Random(19)
    start = datetime(2024, 1, 1, tzinfo=UTC)
    return [start + timedelta(seconds=rng.randrange(3 * 365 * 86400)) for _ in range(count)]


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("zone", ["UTC", "Asia/Shanghai", "America/New_York"])
@pytest.mark.parametrize("fmt", ["Y-m-d H:i", "M j, H:i", "Y-m-d", "H:i:s"])
def test_moment_says_what_the_date_filter_says(language, zone, fmt):
    fast = Template("{% load portal_tags %}{{ at|moment:fmt }}")
    django = Template("{{ at|date:fmt }}")
    with translation.override(language), timezone.override(ZoneInfo(zone)):
        for at in [*moments(200), datetime(2026, 12, 31, 23, 59, tzinfo=UTC)]:
            context = Context({"at": at, "fmt": fmt})
            assert fast.render(context) == django.render(context)


def test_moment_of_nothing_is_empty_and_of_a_day_is_dates():
    fast = Template('{% load portal_tags %}[{{ none|moment }}][{{ day|moment:"Y-m-d" }}]')
    day = datetime(2026, 3, 4, tzinfo=UTC).date()
    assert fast.render(Context({"none": None, "day": day})) == "[][2026-03-04]"


@pytest.mark.parametrize("language", LANGUAGES)
def test_label_is_get_display_for_every_choice(language):
    with translation.override(language):
        for status in [*Reservation.Status.values, "no-such-status"]:
            lease = Reservation(status=status, market="spot", priority="production", tier="")
            assert choice_label(lease, "status") == lease.get_status_display()
            assert choice_label(lease, "market") == lease.get_market_display()
            assert choice_label(lease, "priority") == lease.get_priority_display()
        for role in Membership.Role.values:
            membership = Membership(role=role)
            rendered = Template('{% load portal_tags %}{{ m|label:"role" }}').render(
                Context({"m": membership})
            )
            assert rendered == membership.get_role_display()


def test_the_label_follows_the_language_of_the_moment():
    lease = Reservation(status=Reservation.Status.QUEUED)
    with translation.override("en"):
        english = choice_label(lease, "status")
    with translation.override("zh-hans"):
        chinese = choice_label(lease, "status")
    assert english == "Queued" and chinese != english


@pytest.mark.parametrize("prefix", ["/", "/portal/"])
def test_path_of_is_reverse(prefix):
    set_script_prefix(prefix)
    try:
        for pk in (1, 7, 4242, 10**12):
            assert path_of("rental:lease", "pk", pk) == reverse("rental:lease", kwargs={"pk": pk})
        for slug in ("a", "ml-research", "team_42"):
            project = Project(slug=slug)
            assert project.get_absolute_url() == reverse("rental:project", kwargs={"slug": slug})
    finally:
        set_script_prefix("/")


@pytest.mark.parametrize("prefix", ["/", "/portal/"])
def test_the_path_tag_is_the_url_tag(prefix):
    names = ["dashboard", "rental:leases", "rental:projects", "billing:finance", "logout"]
    set_script_prefix(prefix)
    try:
        for name in names:
            fast = Template("{% load portal_tags %}{% path name %}").render(Context({"name": name}))
            assert fast == Template("{% url name %}").render(Context({"name": name}))
            assert fast == reverse(name)
    finally:
        set_script_prefix("/")
