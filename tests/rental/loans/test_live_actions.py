"""The lease page's live part: the status poll sends the side actions again (out of band)
when what the lease's state allows changes, and only then (a half-typed extension stays)."""

import re

from django.urls import reverse

from rental.models import Instance, Reservation
from tests.rental.agent.conftest import running_lease


def key_of(page: str) -> str:
    return re.search(r'id="lease-actions-key" value="([^"]*)"', page)[1]


def test_the_poll_brings_stop_and_save_image_once_the_lease_runs(f0, client):
    running = running_lease(f0)
    Reservation.objects.filter(pk=running.lease.pk).update(status=Reservation.Status.PROVISIONING)
    Instance.objects.filter(pk=running.instance.pk).update(state=Instance.State.LAUNCHING)
    client.force_login(f0.alice)
    page = client.get(running.lease.get_absolute_url()).content.decode()
    assert 'id="stop-lease"' not in page and 'id="lease-save-image"' not in page
    poll = reverse("rental:lease_status_partial", args=[running.lease.pk])
    quiet = client.get(poll, {"actions": key_of(page)}, HTTP_HX_REQUEST="true").content.decode()
    assert "hx-swap-oob" not in quiet  # nothing changed: the side is left as it is

    Reservation.objects.filter(pk=running.lease.pk).update(status=Reservation.Status.ACTIVE)
    Instance.objects.filter(pk=running.instance.pk).update(state=Instance.State.RUNNING)
    live = client.get(poll, {"actions": key_of(page)}, HTTP_HX_REQUEST="true").content.decode()
    assert 'id="lease-side-actions" class="side-actions" hx-swap-oob="true"' in live
    assert 'id="stop-lease"' in live and 'id="lease-save-image"' in live
    assert 'id="extend-lease"' in live
    again = client.get(poll, {"actions": key_of(live)}, HTTP_HX_REQUEST="true").content.decode()
    assert "hx-swap-oob" not in again
