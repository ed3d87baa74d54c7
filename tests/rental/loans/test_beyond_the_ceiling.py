"""The ceiling behaves as the guide says, on the request form and in the API alike (issue
17, point 8): one lease of more GPUs than the ceiling is refused on its GPU count (R1);
a lease that would take the project's running GPUs past the ceiling waits for a manager
(Q2).

F0: alpha has G 2, L 6 on the A100 80GB pool of 8 GPUs; alma manages alpha."""

import html
import re

from django.urls import reverse

from rental.loans import admission
from rental.models import Reservation
from tests.api.leases_world import client_for, row_counts

Status = Reservation.Status
API = reverse("api:lease-list")
CEILING_REFUSAL = "At most 6 GPUs: the project's ceiling for A100 80GB."


def on_the_form(f0, gpus: int) -> dict:
    return {
        "project": f0.alpha.pk,
        "gpu_model": f0.model.pk,
        "gpu_count": str(gpus),
        "duration_hours": "4",
        "priority": "experiment",
        "market": "on_demand",
    }


def in_the_api(f0, gpus: int) -> dict:
    return {
        "project": "alpha",
        "gpu_model": f0.model.pk,
        "gpu_count": gpus,
        "duration_hours": "4",
        "priority": "experiment",
        "market": "on_demand",
    }


def estimate(client, f0, gpus: int) -> tuple[str, str, str]:
    """(outcome, code, the verdict's words) of the request form's estimate."""
    panel = client.post(
        reverse("rental:lease_estimate"), on_the_form(f0, gpus), HTTP_HX_REQUEST="true"
    ).content.decode()
    verdict = re.search(
        r'id="estimate-outcome" data-outcome="(\w+)"(?: data-code="(\w+)")?>(.*?)</div>',
        panel,
        re.S,
    )
    assert verdict, panel
    return verdict[1], verdict[2] or "", text_of(verdict[3])


def text_of(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def run_four(f0) -> Reservation:
    lease = admission.submit_reservation(
        actor=f0.alice,
        project=f0.alpha,
        gpu_model=f0.model,
        gpu_count=4,
        duration_hours=8,
        priority="experiment",
        market="on_demand",
    )
    assert (lease.status, lease.tier) == (Status.PROVISIONING, "burst")
    return lease


def test_one_lease_bigger_than_the_ceiling_is_refused_on_its_gpu_count_by_form_and_api(f0, client):
    client.force_login(f0.alice)
    before = row_counts()

    outcome, code, words = estimate(client, f0, 7)
    assert (outcome, code) == ("invalid", "over_ceiling")
    assert words == f"Cannot be sent as it is {CEILING_REFUSAL}"

    page = client.post(reverse("rental:lease_new"), on_the_form(f0, 7))
    assert page.status_code == 400
    assert page.context["form"].errors == {"gpu_count": [CEILING_REFUSAL]}

    answer = client_for(f0.alice).post(API, in_the_api(f0, 7), format="json")
    assert answer.status_code == 400
    body = answer.json()
    assert (body["code"], body["field"], body["detail"]) == (
        "over_ceiling",
        "gpu_count",
        CEILING_REFUSAL,
    )
    assert body["errors"] == {"gpu_count": [CEILING_REFUSAL]}
    assert body["figures"] == {"asked": 7, "ceiling": 6}
    assert row_counts() == before  # neither wrote anything


def test_a_lease_taking_the_project_past_its_ceiling_waits_for_a_manager_on_form_and_api(
    f0, client
):
    run_four(f0)  # alpha runs 4 of its 6
    client.force_login(f0.alice)
    waits = "Over the project's ceiling: 4 of 6 GPUs in use, 3 asked. A manager must approve."

    outcome, code, words = estimate(client, f0, 3)
    assert (outcome, code) == ("approval", "over_ceiling")
    assert words == f"Needs a manager's approval {waits}"

    page = client.post(reverse("rental:lease_new"), on_the_form(f0, 3))
    assert page.status_code == 302
    from_the_form = Reservation.objects.get(gpu_count=3)

    answer = client_for(f0.alice).post(API, in_the_api(f0, 3), format="json")
    assert answer.status_code == 201
    body = answer.json()
    from_the_api = Reservation.objects.get(pk=body["id"])

    for lease in (from_the_form, from_the_api):
        assert (lease.status, lease.status_code, lease.tier) == (
            Status.PENDING_APPROVAL,
            "over_ceiling",
            "burst",
        )
        assert str(lease.status_message) == waits
    assert (body["status"], body["reason_code"], body["reason"]) == (
        "pending_approval",
        "over_ceiling",
        waits,
    )
