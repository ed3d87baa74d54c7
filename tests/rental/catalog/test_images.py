"""Images: the catalog, the form's CUDA warning (and the refusal behind it), and saving a
lease's instance as an image against the local EC2 endpoint."""

import re
from datetime import timedelta

import pytest
from django.urls import reverse

from portal.models import AuditEvent
from rental import tasks
from rental.catalog import images
from rental.fleet import instances, sync
from rental.loans import admission
from rental.models import Image, Reservation
from rental.providers.base import CloudImage, ImageState
from tests import factories
from tests.notices import told


def form(f0, **changes):
    return {
        "project": f0.alpha.pk,
        "gpu_model": f0.model.pk,
        "gpu_count": "1",
        "duration_hours": "2",
        "priority": "experiment",
        "market": "on_demand",
        "start_mode": "now",
        "allow_other_instance_types": "on",
        **changes,
    }


@pytest.fixture
def old_driver(f0):
    """f0's offering runs driver 535.183 (CUDA ≤ 12.2); f0's image needs CUDA 12.4."""
    f0.offering.driver_version, f0.offering.max_cuda_version = "535.183", "12.2"
    f0.offering.save()
    return f0


# --- The form's warning ----------------------------------------------------------------


def test_it_warns_in_the_estimate_naming_both_versions(old_driver, client):
    f0 = old_driver
    client.force_login(f0.alice)
    response = client.post(reverse("rental:lease_estimate"), form(f0), HTTP_HX_REQUEST="true")
    page = response.content.decode()
    assert response.status_code == 200
    assert re.search(r'data-outcome="invalid" data-code="image_needs_newer_driver"', page)
    assert "needs CUDA 12.4" in page and "up to 12.2" in page
    assert not Reservation.objects.exists()


def test_it_says_nothing_when_the_driver_is_new_enough(f0, client):
    f0.offering.driver_version, f0.offering.max_cuda_version = "550.127", "12.4"
    f0.offering.save()
    client.force_login(f0.alice)
    page = client.post(
        reverse("rental:lease_estimate"), form(f0), HTTP_HX_REQUEST="true"
    ).content.decode()
    assert "image_needs_newer_driver" not in page
    assert 'data-outcome="guaranteed"' in page


def test_it_refuses_the_submission_on_the_image_field(old_driver, client):
    f0 = old_driver
    client.force_login(f0.alice)
    response = client.post(reverse("rental:lease_new"), form(f0, image=str(f0.image.pk)))
    page = response.content.decode()
    assert response.status_code == 400
    assert 'id="error-image"' in page and "needs CUDA 12.4" in page
    assert not Reservation.objects.exists()
    assert not AuditEvent.objects.filter(verb__startswith="lease.").exists()


def test_it_accepts_an_older_cuda_image_on_that_offering(old_driver, client):
    f0 = old_driver
    older = Image.objects.create(
        name="CUDA 12.0 base",
        account=f0.account,
        region="us-east-1",
        image_id="ami-0a1b2c3d4e5f60009",
        os="Ubuntu 22.04",
        cuda_version="12.0",
    )
    client.force_login(f0.alice)
    response = client.post(reverse("rental:lease_new"), form(f0, image=str(older.pk)))
    assert response.status_code == 302
    assert Reservation.objects.get().image == older


# --- The catalog -----------------------------------------------------------------------


def project_image(f0, project, name, state=Image.State.AVAILABLE, n=0):
    return Image.objects.create(
        name=name,
        account=f0.account,
        region="us-east-1",
        image_id=f"ami-0b{n:015d}" if state != Image.State.PENDING else "",
        os="Ubuntu 22.04",
        cuda_version="12.4",
        framework_versions={"PyTorch": "2.5.1", "PaddlePaddle": "2.6.2"},
        project=project,
        state=state,
    )


def test_it_shows_site_and_own_project_images_only(f0, client):
    f0.image.framework_versions = {"PyTorch": "2.5.1"}
    f0.image.driver_version = "550.54"
    f0.image.save()
    mine = project_image(f0, f0.alpha, "alpha env", Image.State.PENDING)
    theirs = project_image(f0, f0.beta, "beta env", n=2)
    client.force_login(f0.alice)
    response = client.get(reverse("rental:images"))
    page = response.content.decode()
    assert response.status_code == 200
    assert f'id="image-{f0.image.pk}"' in page and "≥ 550.54" in page and "2.5.1" in page
    assert f'id="image-{mine.pk}" data-state="pending"' in page and "PaddlePaddle" in page
    assert f'id="image-{theirs.pk}"' not in page


def test_it_lists_images_in_a_fixed_number_of_queries(f0, client, django_assert_max_num_queries):
    client.force_login(f0.alice)
    for n in range(3):
        project_image(f0, f0.alpha, f"env {n}", n=n)
    with django_assert_max_num_queries(12) as few:
        assert client.get(reverse("rental:images")).status_code == 200
    for n in range(3, 30):
        project_image(f0, f0.alpha, f"env {n}", n=n)
    with django_assert_max_num_queries(len(few.captured_queries)):
        assert client.get(reverse("rental:images")).status_code == 200


def test_it_keeps_pending_and_other_projects_images_out_of_the_form(f0, client):
    pending = project_image(f0, f0.alpha, "alpha pending", Image.State.PENDING)
    ready = project_image(f0, f0.alpha, "alpha ready", n=1)
    theirs = project_image(f0, f0.beta, "beta ready", n=2)
    client.force_login(f0.alice)
    page = client.get(reverse("rental:lease_new")).content.decode()
    # Only the image select: another select's option may carry the same number as a pk.
    images = re.search(r'<select name="image".*?</select>', page, re.S)[0]
    assert f'value="{ready.pk}"' in images
    assert f'value="{pending.pk}"' not in images and f'value="{theirs.pk}"' not in images


# --- Save as image (local EC2 endpoint) ------------------------------------------------


@pytest.fixture
def f0c(db, cloud):
    return factories.fixture_f0(endpoint_url=cloud.url)


def running_lease(f0c, t0, who=None):
    lease = admission.submit_reservation(
        actor=who or f0c.alice,
        project=f0c.alpha,
        gpu_model=f0c.model,
        gpu_count=1,
        duration_hours=4,
        priority="experiment",
        market="on_demand",
        now=t0,
    )
    for instance in lease.instances.all():
        instances.provision_instance(instance_id=instance.pk, now=t0)
    sync.sync_instances(now=t0 + timedelta(seconds=30))
    lease.refresh_from_db()
    assert lease.status == Reservation.Status.ACTIVE
    return lease


def test_it_saves_a_lease_as_an_image_once_and_tells_the_engineer(
    f0c, t0, cloud, client, django_capture_on_commit_callbacks
):
    lease = running_lease(f0c, t0)
    client.force_login(f0c.alice)
    with django_capture_on_commit_callbacks() as sent:
        response = client.post(
            reverse("rental:lease_save_image", args=[lease.pk]), {"name": "ranking env"}
        )
    assert response.status_code == 302
    image = Image.objects.get(project=f0c.alpha)
    assert (image.state, image.image_id, image.name) == ("pending", "", "ranking env")
    assert image.source_instance == lease.instances.get()
    assert len(sent) == 1  # the save task, on commit

    # A first delivery's CreateImage reached the cloud, but the worker died before it
    # recorded the answer; then the task is delivered twice more: still one image.
    provider = images.get_provider(f0c.account.config())
    lost = provider.create_image(
        lease.instances.get().external_id,
        region="us-east-1",
        name=images._cloud_name(image),
        idempotency_key=image.idempotency_key,
    )
    with django_capture_on_commit_callbacks(execute=True):
        tasks.save_image_task.apply(args=[image.pk])
        tasks.save_image_task.apply(args=[image.pk])
    image.refresh_from_db()
    assert image.image_id == lost.image_id
    assert cloud.count("CreateImage") == 1
    assert image.state == "available" and image.image_id.startswith("ami-")
    assert image.available_at is not None
    owned = images.get_provider(f0c.account.config()).describe_images(
        [image.image_id], region="us-east-1"
    )
    assert [found.image_id for found in owned] == [image.image_id]
    assert AuditEvent.objects.filter(verb="image.requested", object_id=str(image.pk)).exists()
    assert AuditEvent.objects.filter(verb="image.available").count() == 1
    assert len(told(f0c.alice, has="ranking env")) == 1

    # It appears in the request form.
    page = client.get(reverse("rental:lease_new")).content.decode()
    assert f'value="{image.pk}"' in page and "ranking env" in page


def test_it_lets_only_the_requester_and_managers_save(f0c, t0, client):
    lease = running_lease(f0c, t0)
    client.force_login(f0c.bob)  # another project: 404
    url = reverse("rental:lease_save_image", args=[lease.pk])
    assert client.post(url, {"name": "x"}).status_code == 404
    other = factories.user("amy")
    factories.member(other, f0c.alpha)  # same project, not the requester
    client.force_login(other)
    client.post(url, {"name": "x"})
    assert not Image.objects.filter(project=f0c.alpha).exists()
    client.force_login(f0c.alpha_manager)
    assert client.post(url, {"name": "by manager"}).status_code == 302
    assert Image.objects.get(project=f0c.alpha).created_by == f0c.alpha_manager


def test_it_refuses_a_duplicate_name_and_a_lease_without_instance(f0c, t0, client):
    lease = running_lease(f0c, t0)
    client.force_login(f0c.alice)
    url = reverse("rental:lease_save_image", args=[lease.pk])
    client.post(url, {"name": "env"})
    response = client.post(url, {"name": "env"}, follow=True)
    assert "already has an image named" in response.content.decode()
    assert Image.objects.filter(project=f0c.alpha).count() == 1
    response = client.post(url, {"name": "  "}, follow=True)
    assert "Give the image a name" in response.content.decode()
    assert Image.objects.filter(project=f0c.alpha).count() == 1


# --- The task's polling, with a scripted driver ----------------------------------------


class ScriptedProvider:
    """Answers CreateImage with a pending image, then describes it as the script says."""

    def __init__(self, states):
        self.states = list(states)
        self.created = 0

    def create_image(self, external_id, *, region, name, idempotency_key, tags=()):
        self.created += 1
        return CloudImage("ami-0feedface0000001", name, ImageState.PENDING, region)

    def describe_images(self, image_ids, *, region):
        state = self.states.pop(0)
        if isinstance(state, Exception):
            raise state
        return [CloudImage(image_ids[0], "x", ImageState(state), region, "disk error")]


@pytest.fixture
def pending_image(f0, monkeypatch):
    from rental.models import Instance

    lease = admission.submit_reservation(
        actor=f0.alice,
        project=f0.alpha,
        gpu_model=f0.model,
        gpu_count=1,
        duration_hours=2,
        priority="experiment",
        market="on_demand",
    )
    Instance.objects.filter(reservation=lease).update(external_id="i-0abc", state="running")
    image = Image.objects.create(
        name="env",
        account=f0.account,
        region="us-east-1",
        project=f0.alpha,
        state=Image.State.PENDING,
        source_instance=lease.instances.get(),
        created_by=f0.alice,
        idempotency_key="k-1",
    )
    return image


def test_it_polls_until_the_cloud_says_available(pending_image, monkeypatch):
    provider = ScriptedProvider(["pending", "available"])
    monkeypatch.setattr(images, "get_provider", lambda config: provider)
    assert images.advance_image(image_id=pending_image.pk) is False  # created, pending
    assert images.advance_image(image_id=pending_image.pk) is False  # still pending
    assert images.advance_image(image_id=pending_image.pk) is True
    pending_image.refresh_from_db()
    assert (pending_image.state, pending_image.image_id) == ("available", "ami-0feedface0000001")
    assert provider.created == 1


def test_it_fails_the_image_with_the_clouds_reason_and_tells_the_saver(
    pending_image, monkeypatch, django_capture_on_commit_callbacks
):
    from rental.providers.base import ProviderError

    provider = ScriptedProvider([ProviderError("transient", "InternalError"), "failed"])
    monkeypatch.setattr(images, "get_provider", lambda config: provider)
    images.advance_image(image_id=pending_image.pk)
    with pytest.raises(ProviderError):  # retryable: the task tries again
        images.advance_image(image_id=pending_image.pk)
    with django_capture_on_commit_callbacks(execute=True):
        assert images.advance_image(image_id=pending_image.pk) is True
    pending_image.refresh_from_db()
    assert (pending_image.state, pending_image.state_message) == ("failed", "disk error")
    assert told(pending_image.created_by, has="could not be saved")
