"""One date format everywhere, in both languages: the portal's pages and Django's admin
write "2026-12-03 16:03", never "Dec. 3, 2026, 4:03 p.m." (``portal/formats``)."""

from datetime import UTC, date, datetime

import pytest
from django.contrib.auth import get_user_model
from django.template import Context, Template
from django.urls import reverse
from django.utils import formats, translation

from portal import audit
from portal.models import AuditEvent
from tests import factories

AT = datetime(2026, 12, 3, 16, 3, 27, tzinfo=UTC)
LANGUAGES = ["en", "zh-hans"]


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_default_formats_are_the_portals(language):
    with translation.override(language):
        assert formats.date_format(AT, "DATETIME_FORMAT") == "2026-12-03 16:03"
        assert formats.date_format(AT, "SHORT_DATETIME_FORMAT") == "2026-12-03 16:03"
        assert formats.date_format(date(2026, 12, 3)) == "2026-12-03"
        assert formats.time_format(AT.time()) == "16:03"
        rendered = Template("{{ at }} · {{ day }} · {{ at|date }}").render(
            Context({"at": AT, "day": date(2026, 12, 3)})
        )
        assert rendered == "2026-12-03 16:03 · 2026-12-03 · 2026-12-03"


@pytest.mark.django_db
@pytest.mark.parametrize("language", LANGUAGES)
def test_djangos_admin_writes_dates_as_the_portal_does(client, language):
    superuser = get_user_model().objects.create_superuser(username="su", password="x")
    audit.record(
        actor=superuser, verb="project.created", obj=factories.project("p"), source="web", at=AT
    )
    client.force_login(superuser)
    page = client.get(
        reverse("admin:portal_auditevent_changelist"), HTTP_ACCEPT_LANGUAGE=language
    ).content.decode()
    assert "2026-12-03 16:03" in page
    assert "Dec. 3" not in page and "2026年12月3日" not in page and "p.m." not in page
    event = AuditEvent.objects.get()
    change = client.get(
        reverse("admin:portal_auditevent_change", args=[event.pk]), HTTP_ACCEPT_LANGUAGE=language
    ).content.decode()
    assert "Dec. 3" not in change and "2026年12月3日" not in change
