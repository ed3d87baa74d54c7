"""The local endpoint's fast DescribeInstances (used by bench/sync.py) answers what
moto's own answer does, for every field the driver reads, with its filters and pages."""

import pytest

from rental.fleet.cloud import provider_for
from rental.models import Instance
from rental.providers.aws import AwsProvider
from rental.providers.base import TAG_INSTALLATION, TAG_PROJECT, LaunchSpec

pytestmark = pytest.mark.django_db


def launch(provider, key, project):
    spec = LaunchSpec(
        region="us-east-1",
        instance_type="p4de.24xlarge",
        image_id="ami-0a1b2c3d4e5f60001",
        market="spot" if project == "beta" else "on_demand",
        tags=((TAG_INSTALLATION, "test"), (TAG_PROJECT, project)),
        zone="us-east-1b",
    )
    return provider.launch(spec, idempotency_key=key)


def test_it_answers_describe_like_moto(f0c, cloud):
    provider = provider_for(Instance(account=f0c.account))
    made = [launch(provider, f"k{n}", "alpha" if n % 2 else "beta") for n in range(7)]
    provider.terminate([made[0].external_id], region="us-east-1")
    paged = AwsProvider(f0c.account.config(), page_size=5)

    def views():
        return (
            provider.describe(region="us-east-1", tag_filter={TAG_INSTALLATION: "test"}),
            paged.describe(region="us-east-1", tag_filter={TAG_PROJECT: "beta"}),
            provider.describe_ids([m.external_id for m in made[:3]], region="us-east-1"),
        )

    slow = views()
    cloud.fast_describe()
    try:
        fast = views()
    finally:
        cloud.fast_describe(False)
    for moto_answer, fast_answer in zip(slow, fast, strict=True):
        key = sorted(moto_answer, key=lambda c: c.external_id)
        assert sorted(fast_answer, key=lambda c: c.external_id) == key
    assert len(fast[0]) == 7 and len(fast[1]) == 4 and len(fast[2]) == 3
