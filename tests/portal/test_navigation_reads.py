"""The navigation's bell counts the unread notifications with the session's user, in
the user's own query: right, and no query of its own."""

import re

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from portal.models import Notification


def bell(content: bytes) -> str:
    found = re.search(rb'<span class="badge badge-bell">(\d+)</span>', content)
    return found.group(1).decode() if found else ""


def test_the_bell_counts_the_unread_notifications_with_the_user(f0, client):
    for n in range(3):
        Notification.objects.create(user=f0.alice, subject=f"Ready: #{n}", body="b")
    Notification.objects.create(user=f0.alice, subject="Old", body="b", read_at=timezone.now())
    Notification.objects.create(user=f0.bob, subject="Not hers", body="b")
    client.force_login(f0.alice)
    with CaptureQueriesContext(connection) as queries:
        page = client.get(reverse("dashboard"))
    assert bell(page.content) == "3"
    counted_apart = 'SELECT COUNT(*) AS "__count" FROM "portal_notification"'
    assert not [q["sql"] for q in queries if q["sql"].startswith(counted_apart)]
    client.post(reverse("notifications_read"))
    assert bell(client.get(reverse("dashboard")).content) == ""
