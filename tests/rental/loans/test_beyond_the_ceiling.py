"""The ceiling behaves as the guide says, on the request form and in the API alike (issue
17, point 8): one lease of more GPUs than the ceiling is refused on its GPU count (R1);
a lease that would take the project's running GPUs past the ceiling waits for a manager
(Q2); and a project running above its ceiling after such an approval says why on its
page and in the request form's quota, in words, in English and in Chinese.

F0: alpha has G 2, L 6 on the A100 80GB pool of 8 GPUs; alma manages alpha."""

import html
import re

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from rental.loans import admission, quota_requests
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
    assert answer.status_code == 409  # well formed; the page's 400 is its form's
    body = answer.json()
    assert (body["code"], body["field"], body["detail"]) == (
        "over_ceiling",
        "gpu_count",
        CEILING_REFUSAL,
    )
    assert "errors" not in body
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
    # The form also says when it would start once approved (expected start, issue 22).
    assert words.startswith(
        f"Needs a manager's approval {waits} If you send this now and a manager approves it "
        "at once, it would most likely start at about "
    )

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


def approved_beyond(f0) -> Reservation:
    """alpha runs 4, asks 3 more, and alma approves: 7 of 6 run."""
    run_four(f0)
    asked = admission.submit_reservation(
        actor=f0.alice,
        project=f0.alpha,
        gpu_model=f0.model,
        gpu_count=3,
        duration_hours=8,
        priority="experiment",
        market="on_demand",
    )
    assert asked.status_code == "over_ceiling"
    approved = admission.approve_reservation(actor=f0.alpha_manager, reservation=asked)
    assert approved.status == Status.PROVISIONING
    return approved


def quota_words(page: str) -> str:
    above = re.search(r'<div class="quota-above[^>]*>(.*?)</div>', page, re.S)
    assert above, "no word on why the project runs above its ceiling"
    return text_of(above[1])


@pytest.mark.parametrize(
    ("language", "said"),
    [
        (
            "en",
            "7 of 6 running: 1 GPU above the ceiling, approved by alma on {day} for lease #{id}.",
        ),
        ("zh-hans", "运行 7 / 6：超出上限 1 块 GPU，由 alma 于 {day} 为租约 #{id} 批准。"),
    ],
)
def test_the_project_page_says_why_it_runs_above_its_ceiling(f0, language, said):
    approved = approved_beyond(f0)
    day = timezone.now().strftime("%Y-%m-%d")
    client = Client(HTTP_ACCEPT_LANGUAGE=language)
    client.force_login(f0.alice)

    page = client.get(reverse("rental:project", args=["alpha"])).content.decode()
    assert quota_words(page) == said.format(day=day, id=approved.pk)

    # The request form's quota says the same beside its ceiling.
    form = client.post(
        reverse("rental:lease_estimate"), on_the_form(f0, 1), HTTP_HX_REQUEST="true"
    ).content.decode()
    assert quota_words(form) == said.format(day=day, id=approved.pk)


def test_a_project_within_its_ceiling_says_nothing_about_it(f0, client):
    run_four(f0)
    client.force_login(f0.alice)
    page = client.get(reverse("rental:project", args=["alpha"])).content.decode()
    assert "quota-above" not in page


def test_several_approvals_are_each_named_and_a_lowered_ceiling_is_said_as_such(f0, client):
    first = approved_beyond(f0)  # 7 of 6
    Reservation.objects.filter(pk=first.pk).update(status=Status.ACTIVE)
    second = admission.submit_reservation(
        actor=f0.alice,
        project=f0.alpha,
        gpu_model=f0.model,
        gpu_count=1,
        duration_hours=8,
        priority="experiment",
        market="on_demand",
    )
    second = admission.approve_reservation(actor=f0.alpha_manager, reservation=second)
    day = timezone.now().strftime("%Y-%m-%d")
    client.force_login(f0.alice)
    page = client.get(reverse("rental:project", args=["alpha"])).content.decode()
    assert quota_words(page) == (
        "8 of 6 running: 2 GPUs above the ceiling, approved by a manager for these leases: "
        f"Lease #{first.pk}, approved by alma on {day}. "
        f"Lease #{second.pk}, approved by alma on {day}."
    )

    # Without an approval, the ceiling came down while the leases ran.
    Reservation.objects.filter(pk__in=[first.pk, second.pk]).update(status=Status.ENDED)
    asked = quota_requests.request_quota_change(
        actor=f0.alice, project=f0.alpha, gpu_model=f0.model, ceiling="3", reason="less"
    )
    quota_requests.decide_quota_request(actor=f0.alpha_manager, request=asked, approve=True)
    page = client.get(reverse("rental:project", args=["alpha"])).content.decode()
    assert quota_words(page) == (
        "4 of 3 running: 1 GPU above the ceiling, which was lowered while it ran."
    )
