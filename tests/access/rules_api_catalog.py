"""Access-matrix rules for the catalog and capacity side of the API: GPU models,
offerings, pools, quotas and quota requests, images, SSH keys, data volumes and provider
accounts."""

from rental.catalog import keys, volumes
from rental.loans import quota_requests
from rental.models import DataVolume, Image, QuotaRequest, SshKey
from tests.access.spec import Expect

# ROLES order: engineer, other_engineer, manager, admin, finance, anonymous.
ANON = (401, 403)
EVERYONE = (200, 200, 200, 200, 200, ANON)  # members of some project, admins, finance
VISIBLE = (200, 404, 200, 200, 200, ANON)  # alpha's object: bob is not in alpha
ADMINS = (404, 404, 404, 200, 404, ANON)  # the admin's pages' rule
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEB x"
OTHER_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgIC x"


def _quota(world, project):
    return {"pk": project.quotas.get().pk}


def _quota_request(world, name, project, who):
    def make() -> QuotaRequest:
        return quota_requests.request_quota_change(
            actor=who, project=project, gpu_model=world.model, ceiling=7, reason="a bigger run"
        )

    return {"pk": world.once(name, make).pk}


def _gamma_image(world):
    def make() -> Image:
        return Image.objects.create(
            name="gamma env",
            account=world.f0.account,
            region="us-east-1",
            os="Ubuntu 22.04",
            project=world.other_project,
            state=Image.State.PENDING,
        )

    return {"pk": world.once("gamma_image", make).pk}


def _key(world, name, user, text):
    def make() -> SshKey:
        return keys.add_ssh_key(actor=user, name="laptop", public_key=text)

    return {"pk": world.once(name, make).pk}


def _volume(world, name, project, who):
    def make() -> DataVolume:
        world.f0.offering.zones = ["us-east-1a"]
        world.f0.offering.save()
        return volumes.create_volume(
            actor=who, project=project, name="datasets", size_gb=10, zone="us-east-1a"
        )

    return {"pk": world.once(name, make).pk}


RULES: dict[str, Expect] = {
    "api:gpu-model-list": Expect(get=EVERYONE),
    "api:gpu-model-detail": Expect(get=EVERYONE, kwargs=lambda w: {"pk": w.model.pk}),
    "api:offering-list": Expect(get=EVERYONE),
    "api:offering-detail": Expect(get=EVERYONE, kwargs=lambda w: {"pk": w.f0.offering.pk}),
    "api:pool-list": Expect(get=EVERYONE),
    "api:pool-detail": Expect(get=EVERYONE, kwargs=lambda w: {"pk": w.f0.pool.pk}),
    "api:pool-week": Expect(get=EVERYONE, kwargs=lambda w: {"pk": w.f0.pool.pk}),
    "api:pool-capacity": Expect(
        post=(403, 403, 403, 400, 403, ANON),
        kwargs=lambda w: {"pk": w.f0.pool.pk},
        note="Admins set C; everyone who sees the pool is told no.",
    ),
    "api:pool-degraded": Expect(
        post=(403, 403, 403, 400, 403, ANON),
        kwargs=lambda w: {"pk": w.f0.pool.pk},
        note="Admins mark a pool degraded or clear the mark.",
    ),
    "api:quota-list": Expect(
        get=EVERYONE,
        post=(403, 403, 403, 400, 403, ANON),
        note="Scoped to visible projects; admins create quotas.",
    ),
    "api:quota-detail": Expect(
        get=VISIBLE,
        kwargs=lambda w: _quota(w, w.project),
        outsider_kwargs=lambda w: _quota(w, w.other_project),
    ),
    "api:quota-auto-approve-limits": Expect(
        post=(403, 404, 400, 400, 403, ANON),
        kwargs=lambda w: _quota(w, w.project),
        outsider_kwargs=lambda w: _quota(w, w.other_project),
        note="Managers of the project (and admins) set the auto-approve limits.",
    ),
    "api:quota-auto-approve-caps": Expect(
        post=(403, 404, 403, 400, 403, ANON),
        kwargs=lambda w: _quota(w, w.project),
        outsider_kwargs=lambda w: _quota(w, w.other_project),
        note="Admins cap the limits; an empty body names the missing fields.",
    ),
    "api:quota-request-list": Expect(
        get=EVERYONE,
        post=(400, 400, 400, 400, 400, ANON),
        note="Members ask; an empty body names the missing fields.",
    ),
    "api:quota-request-detail": Expect(
        get=VISIBLE,
        kwargs=lambda w: _quota_request(w, "alpha_qr", w.project, w.f0.alice),
        outsider_kwargs=lambda w: _quota_request(w, "gamma_qr", w.other_project, w.f0.gary),
    ),
    "api:quota-request-approve": Expect(
        post=(403, 404, 200, 200, 403, ANON),
        kwargs=lambda w: _quota_request(w, "alpha_qr", w.project, w.f0.alice),
        outsider_kwargs=lambda w: _quota_request(w, "gamma_qr", w.other_project, w.f0.gary),
        note="A ceiling: alpha's manager or an admin approves (no comment needed).",
    ),
    "api:quota-request-reject": Expect(
        post=(403, 404, 409, 409, 403, ANON),
        kwargs=lambda w: _quota_request(w, "alpha_qr", w.project, w.f0.alice),
        outsider_kwargs=lambda w: _quota_request(w, "gamma_qr", w.other_project, w.f0.gary),
        note="Rejecting needs a comment: 409 comment_required.",
    ),
    "api:image-list": Expect(get=EVERYONE, post=(400, 400, 400, 400, 400, ANON)),
    "api:image-detail": Expect(
        get=EVERYONE,
        kwargs=lambda w: {"pk": w.f0.image.pk},  # a site image: every project's
        outsider_kwargs=_gamma_image,
    ),
    "api:ssh-key-list": Expect(get=EVERYONE, post=(400, 400, 400, 400, 400, ANON)),
    "api:ssh-key-detail": Expect(
        get=(200, 404, 404, 404, 404, ANON),
        kwargs=lambda w: _key(w, "alice_key", w.f0.alice, KEY),
        outsider_kwargs=lambda w: _key(w, "gary_key", w.f0.gary, OTHER_KEY),
        note="A key is its owner's alone, admins included.",
        service={"get": 404},  # alice's key is not the token's
    ),
    "api:volume-list": Expect(get=EVERYONE, post=(400, 400, 400, 400, 400, ANON)),
    "api:volume-detail": Expect(
        get=VISIBLE,
        kwargs=lambda w: _volume(w, "alpha_volume", w.project, w.f0.alice),
        outsider_kwargs=lambda w: _volume(w, "gamma_volume", w.other_project, w.f0.gary),
    ),
    "api:provider-account-list": Expect(get=ADMINS, post=(404, 404, 404, 400, 404, ANON)),
    "api:provider-account-detail": Expect(get=ADMINS, kwargs=lambda w: {"pk": w.f0.account.pk}),
    "api:provider-account-validate": Expect(
        post=(404, 404, 404, 200, 404, ANON),
        kwargs=lambda w: {"pk": w.f0.account.pk},
        note="Admins check stored credentials (the answer says ok or failed).",
    ),
}
