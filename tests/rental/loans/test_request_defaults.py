"""The request form opens ready to send (issue 17.3): on this person's last request when it
would still run now, else on the cheapest model one GPU would run on now; and its queries
do not grow with the number of models or leases."""

import re
from decimal import Decimal

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from rental.loans import admission
from rental.models import Pool, Quota
from tests import factories


def outcome(response) -> str:
    return re.search(r'data-outcome="([a-z]+)"', response.content.decode())[1]


def sold(f0, name: str, *, price: str, guaranteed: int = 0, ceiling: int = 4, capacity: int = 8):
    """A GPU model alpha may ask for: a pool, a one-GPU offering at ``price`` per GPU-hour
    and a quota."""
    model = factories.gpu_model(name)
    Pool.objects.create(gpu_model=model, capacity=capacity)
    factories.offering(
        f0.account, model, instance_type=f"test.{name.split()[0].lower()}x1", on_demand=price
    )
    Quota.objects.create(
        project=f0.alpha,
        gpu_model=model,
        guaranteed=guaranteed,
        ceiling=ceiling,
        weight=Decimal(1),
    )
    return model


def ask(f0, model, gpus: int, *, who=None):
    return admission.submit_reservation(
        actor=who or f0.alice,
        project=f0.alpha,
        gpu_model=model,
        gpu_count=gpus,
        duration_hours=4,
        priority="experiment",
        market="on_demand",
    )


def new_form(client, user):
    client.force_login(user)
    page = client.get(reverse("rental:lease_new"))
    assert page.status_code == 200
    return page, page.context["form"]


def test_it_opens_on_the_cheapest_model_the_project_may_run_now(f0, client):
    """T4 is the cheapest, but alpha's ceiling on it is used up by its running lease; L4 is
    the next cheapest and has room; A100 (f0's) costs more."""
    t4 = sold(f0, "T4 16GB", price="0.50", ceiling=1)
    l4 = sold(f0, "L4 24GB", price="0.80")
    ask(f0, t4, 1)
    page, form = new_form(client, f0.alpha_manager)
    assert form.current_gpu_model == l4
    assert form.current_gpu_count == 1
    assert f'<option value="{l4.pk}" selected>' in page.content.decode()
    assert outcome(page) in ("guaranteed", "burst")


def test_it_opens_on_the_last_request_while_it_would_still_run(f0, client):
    sold(f0, "L4 24GB", price="0.80")
    ask(f0, f0.model, 2)  # alice's last: 2 × A100, guaranteed; 2 more still fit as burst
    page, form = new_form(client, f0.alice)
    assert (form.current_gpu_model, form.current_gpu_count) == (f0.model, 2)
    assert 'name="gpu_count" value="2"' in page.content.decode()
    assert outcome(page) == "burst"


def test_it_leaves_the_last_request_that_would_no_longer_run(f0, client):
    l4 = sold(f0, "L4 24GB", price="0.80")
    ask(f0, f0.model, 6)  # alpha's whole ceiling on A100: 6 more would wait for a manager
    page, form = new_form(client, f0.alice)
    assert (form.current_gpu_model, form.current_gpu_count) == (l4, 1)
    assert outcome(page) in ("guaranteed", "burst")


def test_it_opens_on_a_model_one_gpu_fits_when_nothing_would_run_now(f0, client):
    """Every model is full for alpha: the form still opens (on a model a 1-GPU offering
    carries) and says in the estimate what would happen."""
    Quota.objects.filter(project=f0.alpha).update(guaranteed=0, ceiling=1)
    ask(f0, f0.model, 1)
    page, form = new_form(client, f0.alpha_manager)
    assert (form.current_gpu_model, form.current_gpu_count) == (f0.model, 1)
    assert outcome(page) == "approval"


def test_it_opens_empty_for_a_project_with_nothing_to_ask_for(f0, client):
    Quota.objects.filter(project=f0.alpha).delete()
    _page, form = new_form(client, f0.alice)
    assert form.current_gpu_model is None
    assert list(form.fields["gpu_model"].queryset) == []


def count_queries(client) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(reverse("rental:lease_new")).status_code == 200
    return len(queries)


def test_it_reads_a_fixed_number_of_queries_whatever_the_models_and_leases(f0, client, settings):
    settings.PORTAL_MAX_PENDING_PER_USER = 1000
    client.force_login(f0.alice)
    ask(f0, sold(f0, "X0 24GB", price="1.00"), 1)
    few = count_queries(client)
    for i in range(1, 6):
        ask(f0, sold(f0, f"X{i} 24GB", price=f"{1 + i}.00"), 1)
    assert count_queries(client) == few
    assert few <= 29, few  # 26 before the defaults were read (e36ff8d)
