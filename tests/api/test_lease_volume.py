"""A data volume picked on ``POST /api/v1/leases``, as on the form: the lease is placed in
the volume's zone; a volume that cannot be used is a 409 on ``data_volume`` with nothing
written, one of a project the caller cannot see does not exist for them (404), and an id
that is not a number is a 400."""

from rental.models import Reservation
from tests.api.leases_world import client_for
from tests.rental.loans.test_request_volume import f0v, volume  # noqa: F401 (fixture)


def body(f0, **changes) -> dict:
    return {
        "project": "alpha",
        "gpu_model": f0.model.pk,
        "gpu_count": 1,
        "duration_hours": "3",
        "purpose": "tests",
        **changes,
    }


def test_it_places_a_lease_with_a_volume_in_the_volumes_zone(f0v):  # noqa: F811
    datasets = volume(f0v, zone="us-east-1b")
    response = client_for(f0v.alice).post(
        "/api/v1/leases", body(f0v, data_volume=datasets.pk), format="json"
    )
    assert response.status_code == 201, response.content
    lease = Reservation.objects.get(pk=response.json()["id"])
    assert lease.data_volume_id == datasets.pk


def test_it_refuses_a_volume_that_cannot_be_attached_on_its_field(f0v):  # noqa: F811
    busy = volume(f0v, name="busy", state="in_use")
    theirs = volume(f0v, name="theirs", project=f0v.gamma)
    for picked, status, code in (
        (busy.pk, 409, "volume_unavailable"),
        (theirs.pk, 404, "not_found"),
        (999_999, 404, "not_found"),
    ):
        response = client_for(f0v.alice).post(
            "/api/v1/leases", body(f0v, data_volume=picked), format="json"
        )
        assert response.status_code == status, (picked, response.content)
        assert response.json()["code"] == code, picked
        assert response.json()["field"] == "data_volume", picked
        assert "errors" not in response.json(), picked
        assert "theirs" not in response.content.decode()
    response = client_for(f0v.alice).post(
        "/api/v1/leases", body(f0v, data_volume="x"), format="json"
    )
    assert response.status_code == 400, response.content
    assert list(response.json()["errors"]) == ["data_volume"]
    assert not Reservation.objects.exists()
