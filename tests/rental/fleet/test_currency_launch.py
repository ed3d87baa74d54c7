"""A launch captures the exchange rate in force (rental.catalog.exchange); an offering
priced in a currency with no rate in force does not launch, and the lease says why."""

from decimal import Decimal

from rental.catalog import exchange
from rental.models import Offering
from tests.rental.fleet.test_failover import T0, Status, drive, submit


def test_it_fails_a_lease_whose_offering_currency_has_no_rate(db, f0c, cloud):
    Offering.objects.filter(pk=f0c.offering.pk).update(currency="CNY")
    lease = submit(f0c)
    drive(lease.instances.get())
    lease.refresh_from_db()
    assert lease.status == Status.FAILED
    assert "No exchange rate from CNY to USD" in str(lease.status_message)
    assert cloud.count("RunInstances") == 0  # nothing ran that could not be billed


def test_it_launches_with_the_rate_in_force_captured(db, f0c, cloud):
    Offering.objects.filter(pk=f0c.offering.pk).update(currency="CNY")
    rate = exchange.add_exchange_rate(
        actor=None,
        currency="CNY",
        units_per_billing_unit="7.2500",
        valid_from=T0.replace(day=1),
        source="PBOC",
    )
    lease = submit(f0c)
    instance = lease.instances.get()
    drive(instance)
    instance.refresh_from_db()
    assert cloud.count("RunInstances") == 1
    assert (instance.currency, instance.exchange_rate, instance.exchange_rate_ref_id) == (
        "CNY",
        Decimal("7.25"),
        rate.pk,
    )
