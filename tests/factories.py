"""Plain factory functions for tests: real rows, no magic."""

from dataclasses import dataclass
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from portal.models import FINANCE_GROUP, Membership, Project
from rental.models import GpuModel, Image, Offering, Pool, ProviderAccount, Quota

PASSWORD = "a-long-test-password"


def user(username: str, *, staff: bool = False, finance: bool = False):
    created = get_user_model().objects.create_user(
        username=username, email=f"{username}@example.com", password=PASSWORD, is_staff=staff
    )
    if finance:
        created.groups.add(Group.objects.get_or_create(name=FINANCE_GROUP)[0])
    return created


def project(slug: str, *, name: str = "") -> Project:
    return Project.objects.create(slug=slug, name=name or slug.title())


def member(who, where: Project, role: str = Membership.Role.ENGINEER) -> Membership:
    return Membership.objects.create(user=who, project=where, role=role)


def gpu_model(name: str = "A100 80GB") -> GpuModel:
    return GpuModel.objects.get_or_create(
        name=name,
        defaults={
            "vendor": "nvidia",
            "memory_gb": 80,
            "memory_bandwidth_gbps": 2039,
            "bf16_tflops": Decimal("312"),
            "fp16_tflops": Decimal("312"),
            "interconnect": "nvlink",
        },
    )[0]


def account(
    *,
    endpoint_url: str = "http://127.0.0.1:9",
    name: str = "Test cloud",
    access_key_id: str = "AKIDTESTGOOD0001",
    secret: str = "test-secret-value",
):
    acct = ProviderAccount(
        name=name, driver="aws", regions=["us-east-1"], endpoint_url=endpoint_url
    )
    acct.set_credentials(access_key_id=access_key_id, secret_access_key=secret)
    acct.save()
    return acct


def offering(
    acct: ProviderAccount,
    model: GpuModel,
    *,
    instance_type: str = "test.a100x1",
    gpus: int = 1,
    on_demand: str = "2.50",
    spot: str | None = "1.00",
) -> Offering:
    return Offering.objects.create(
        account=acct,
        region="us-east-1",
        instance_type=instance_type,
        gpu_model=model,
        gpus_per_instance=gpus,
        vcpus=12 * gpus,
        memory_gib=117 * gpus,
        on_demand_price_per_hour=Decimal(on_demand) * gpus,
        spot_price_per_hour=Decimal(spot) * gpus if spot else None,
    )


def image(acct: ProviderAccount, *, name: str = "Deep Learning Base") -> Image:
    return Image.objects.create(
        name=name,
        account=acct,
        region="us-east-1",
        image_id="ami-0a1b2c3d4e5f60001",
        os="Ubuntu 22.04",
        cuda_version="12.4",
        frameworks="PyTorch 2.5",
    )


@dataclass
class F0:
    model: GpuModel
    pool: Pool
    account: ProviderAccount
    offering: Offering
    image: Image
    alpha: Project
    beta: Project
    gamma: Project
    admin: object
    alice: object  # engineer in alpha
    bob: object  # engineer in beta
    gary: object  # engineer in gamma
    alpha_manager: object
    outsider: object

    def engineer_of(self, where: Project):
        return {self.alpha.pk: self.alice, self.beta.pk: self.bob, self.gamma.pk: self.gary}[
            where.pk
        ]


def fixture_f0(*, endpoint_url: str = "http://127.0.0.1:9") -> F0:
    model = gpu_model("A100 80GB")
    pool = Pool.objects.create(gpu_model=model, capacity=8)
    acct = account(endpoint_url=endpoint_url)
    off = offering(acct, model)
    img = image(acct)
    alpha, beta, gamma = project("alpha"), project("beta"), project("gamma")
    for where, guaranteed, ceiling in ((alpha, 2, 6), (beta, 4, 8), (gamma, 0, 4)):
        Quota.objects.create(
            project=where,
            gpu_model=model,
            guaranteed=guaranteed,
            ceiling=ceiling,
            weight=Decimal(1),
        )
    alice, bob, gary = user("alice"), user("bob"), user("gary")
    member(alice, alpha)
    member(bob, beta)
    member(gary, gamma)
    manager = user("alma")
    member(manager, alpha, Membership.Role.MANAGER)
    return F0(
        model=model,
        pool=pool,
        account=acct,
        offering=off,
        image=img,
        alpha=alpha,
        beta=beta,
        gamma=gamma,
        admin=user("root", staff=True),
        alice=alice,
        bob=bob,
        gary=gary,
        alpha_manager=manager,
        outsider=user("olga"),
    )
