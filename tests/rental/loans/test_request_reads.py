"""What a submission reads before the pool lock (rental/loans/request_reads.py) is
written out for PostgreSQL. It must return what the ORM's selectors return, row for row
and field for field, over every combination of the filters: offerings available or not,
on active accounts or not, of this model or another; images of the site, of the project
or of another project, active or not, in every state, in every account and region."""

import itertools
from decimal import Decimal

import pytest

from rental import selectors
from rental.loans import pending_limit
from rental.loans.request_reads import _read_with_orm, read_for_request
from rental.models import Image, Offering, Quota, Reservation
from tests import factories

Status = Reservation.Status


def values(obj) -> dict | None:
    if obj is None:
        return None
    return {field.attname: getattr(obj, field.attname) for field in obj._meta.concrete_fields}


@pytest.fixture
def catalog(f0):
    """Offerings and images of every kind beside F0's."""
    closed = factories.account(name="Closed cloud")
    closed.is_active = False
    closed.save()
    other_model = factories.gpu_model("H100 80GB")
    offerings = [f0.offering]
    for index, (where, region, available, model) in enumerate(
        itertools.product(
            (f0.account, closed), ("us-east-1", "eu-west-1"), (True, False), (f0.model, other_model)
        )
    ):
        offering = factories.offering(where, model, instance_type=f"kind{index}.x1")
        offering.region, offering.is_available = region, available
        offering.zones = [f"{region}a", f"{region}b"]
        offering.on_demand_price_per_hour = Decimal("20.50") - index  # not in key order
        offering.save()
        offerings.append(offering)
    for index, (where, region, owner, active, state) in enumerate(
        itertools.product(
            (f0.account, closed),
            ("us-east-1", "eu-west-1", "ap-south-1"),
            (None, f0.alpha, f0.beta),
            (True, False),
            Image.State.values,
        )
    ):
        Image.objects.create(
            name=f"Image {index % 7} {index}",
            account=where,
            region=region,
            image_id=f"ami-{index:04d}",
            project=owner,
            is_active=active,
            state=state,
            framework_versions={"torch": f"2.{index % 5}"},
        )
    return offerings


def test_it_reads_what_the_selectors_read(f0, catalog, lease):
    from tests.rental.loans.conftest import at

    lease(f0.alpha, 1, at("09:00"), hours=1, priority="production", market="spot")
    f0.pool.capacity = 0
    f0.pool.save()
    lease(f0.alpha, 2, at("09:01"))  # queued: alice has one waiting
    Quota.objects.filter(project=f0.gamma).delete()
    for project, actor in itertools.product((f0.alpha, f0.beta, f0.gamma), (f0.alice, None)):
        reads = read_for_request(actor=actor, project=project, gpu_model=f0.model)
        reference = _read_with_orm(actor=actor, project=project, gpu_model=f0.model)
        assert reads.waiting == reference.waiting
        assert values(reads.quota) == values(reference.quota)
        assert [values(o) for o in reads.offerings] == [values(o) for o in reference.offerings]
        assert [values(o.account) for o in reads.offerings] == [
            values(o.account) for o in reference.offerings
        ]
        assert all(o.gpu_model == f0.model for o in reads.offerings)
        for offering in Offering.objects.filter(gpu_model=f0.model):
            expected = list(selectors.images_for(project=project, offering=offering))
            got = reads.images_on(offering)
            assert [values(i) for i in got] == [values(i) for i in expected], offering
            assert [values(i.project) for i in got] == [values(i.project) for i in expected]
    assert read_for_request(actor=f0.alice, project=f0.alpha, gpu_model=f0.model).waiting == 1
    assert pending_limit.waiting_count(f0.alice) == 1
    assert read_for_request(actor=None, project=f0.gamma, gpu_model=f0.model).quota is None


def test_the_offerings_and_images_a_submission_picks_are_the_selectors_choice(f0, catalog):
    reads = read_for_request(actor=None, project=f0.alpha, gpu_model=f0.model)
    for market in ("on_demand", "spot"):
        assert selectors.fitting(reads.offerings, gpu_count=2, market=market) == (
            selectors.fitting_offerings(gpu_model=f0.model, gpu_count=2, market=market)
        )
