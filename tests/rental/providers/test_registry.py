"""The table of drivers: static capabilities, hidden drivers whose SDK or program is
missing, and drivers imported only when used."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from portal.models import AuditEvent
from rental.models import ProviderAccount
from rental.providers import registry
from rental.providers.account_options import OptionProblem
from rental.providers.base import AccountConfig, Capability, Credentials, ProviderError
from tests import factories
from tests.api.leases_world import client_for

ROOT = Path(__file__).resolve().parents[3]
real_find_spec = importlib.util.find_spec


@pytest.fixture
def without_boto3(monkeypatch: pytest.MonkeyPatch) -> None:
    """An installation without the aws extra: boto3 cannot be found."""

    def find_spec(name: str, *args, **kwargs):
        return None if name == "boto3" else real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


@pytest.fixture
def without_ssh(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine without the OpenSSH client on the PATH."""
    real_which = shutil.which
    monkeypatch.setattr(
        shutil, "which", lambda name, *a, **k: None if name == "ssh" else real_which(name, *a, **k)
    )


def aws_config() -> AccountConfig:
    return AccountConfig(driver="aws", credentials=Credentials("AKIDREGISTRY", "secret"))


def test_it_lists_every_driver_for_the_model_field_installed_or_not(without_boto3) -> None:
    names = [name for name, _label in registry.DRIVER_CHOICES]
    assert names[:2] == ["aws", "alibaba"] and "ssh" in names
    # The labels the migrations recorded: no new migration for the table.
    assert [str(label) for _name, label in registry.DRIVER_CHOICES][:3] == [
        "AWS EC2 (or any EC2-compatible endpoint)",
        "Alibaba Cloud ECS",
        "Own GPU servers (SSH)",
    ]


def test_it_offers_only_the_drivers_this_installation_can_run(without_boto3) -> None:
    names = [name for name, _label in registry.available_choices()]
    assert "aws" not in names and {"ssh", "alibaba"} <= set(names)
    assert registry.driver("aws").missing() == (
        "The aws driver needs the Python package boto3: install gpu-portal[aws]."
    )


def test_it_offers_aws_when_boto3_is_installed() -> None:
    assert registry.driver("aws").available
    assert "aws" in dict(registry.available_choices())


def test_it_hides_the_ssh_driver_without_the_openssh_client(without_ssh) -> None:
    names = [name for name, _label in registry.available_choices()]
    assert "ssh" not in names and "aws" in names
    assert "“ssh”" in registry.driver("ssh").missing()


def test_it_refuses_to_build_a_driver_whose_sdk_is_missing(without_boto3) -> None:
    with pytest.raises(ProviderError) as caught:
        registry.get_provider(aws_config())

    assert caught.value.kind == "invalid"
    assert "install gpu-portal[aws]" in str(caught.value)


def test_it_refuses_an_unknown_driver_name() -> None:
    with pytest.raises(ProviderError) as caught:
        registry.driver("gcp")

    assert caught.value.kind == "invalid"
    assert registry.capabilities("gcp") == frozenset()


def test_it_declares_the_capabilities_its_drivers_declare() -> None:
    assert registry.capabilities("aws") == frozenset(Capability)
    assert registry.capabilities("ssh") == frozenset()
    checked = 0
    for entry in registry.DRIVERS.values():
        if real_find_spec(entry.module) is None:
            continue  # a driver still being written
        assert entry.driver_class().capabilities == entry.capabilities, entry.name
        checked += 1
    assert checked >= 1


def test_it_answers_without_importing_any_sdk() -> None:
    """What the web asks of the table loads no driver and no SDK."""
    code = (
        "import sys\n"
        "from rental.providers import registry\n"
        "registry.available_choices(); registry.capabilities('aws'); registry.DRIVER_CHOICES\n"
        "loaded = [m for m in ('boto3', 'botocore', 'rental.providers.aws') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)


# --- the provider account admin ----------------------------------------------------------


@pytest.fixture
def admin_web(client, db):
    admin = get_user_model().objects.create_superuser(
        username="site-admin", email="site-admin@example.com", password=factories.PASSWORD
    )
    client.force_login(admin)
    return client


def test_it_leaves_a_missing_driver_out_of_a_new_accounts_choices(admin_web, without_boto3) -> None:
    page = admin_web.get(reverse("admin:rental_provideraccount_add"))

    choices = [value for value, _label in page.context["adminform"].form.fields["driver"].choices]
    assert "aws" not in choices and choices[0] == "" and "ssh" in choices
    refused = admin_web.post(
        reverse("admin:rental_provideraccount_add"),
        {"name": "Main AWS", "driver": "aws", "regions": "us-east-1", "is_active": "on"},
    )
    assert refused.status_code == 200
    assert "driver" in refused.context["adminform"].form.errors
    assert not ProviderAccount.objects.exists()


def test_it_tells_what_to_install_on_an_account_of_a_missing_driver(
    admin_web, without_boto3
) -> None:
    account = factories.account()

    page = admin_web.get(reverse("admin:rental_provideraccount_change", args=[account.pk]))

    text = page.content.decode()
    assert page.status_code == 200
    assert "needs the Python package boto3: install gpu-portal[aws]" in text
    choices = dict(page.context["adminform"].form.fields["driver"].choices)
    assert "aws" in choices  # the account keeps its driver


def test_it_says_the_driver_is_installed_when_it_is(admin_web) -> None:
    account = factories.account()

    page = admin_web.get(reverse("admin:rental_provideraccount_change", args=[account.pk]))

    assert "Installed." in page.content.decode()
    assert "gpu-portal[aws]" not in page.content.decode()


def test_it_refuses_an_api_account_of_a_missing_driver(db, without_boto3) -> None:
    admin = factories.user("root", staff=True)

    answer = client_for(admin).post(
        "/api/v1/provider-accounts",
        {"name": "Main AWS", "driver": "aws", "regions": ["us-east-1"]},
        format="json",
    )

    assert answer.status_code == 409
    assert (answer.json()["code"], answer.json()["field"]) == ("driver_not_installed", "driver")
    assert "gpu-portal[aws]" in answer.json()["detail"]
    assert not ProviderAccount.objects.exists()
    assert not AuditEvent.objects.exists()


# -- each driver's account options -----------------------------------------------------


def test_each_driver_declares_its_account_options_and_they_are_checked() -> None:
    alibaba = {option.name: option for option in registry.DRIVERS["alibaba"].account_options}
    good = {
        "security_group_id": " sg-bp1abc ",
        "vswitch_ids": {"cn-hangzhou-i": "vsw-i1", "cn-hangzhou-h": "vsw-h1"},
    }

    cleaned = registry.clean_account_options("alibaba", good)

    assert alibaba["security_group_id"].required and not alibaba["vswitch_ids"].required
    assert all(str(option.help) for option in alibaba.values())
    assert cleaned["security_group_id"] == "sg-bp1abc"
    assert registry.DRIVERS["aws"].account_options == ()
    assert registry.clean_account_options("aws", None) == {}
    with pytest.raises(OptionProblem) as unknown:
        registry.clean_account_options("aws", {"subnet_ids": []})
    with pytest.raises(OptionProblem) as bad_switch:
        registry.clean_account_options(
            "alibaba", {**good, "vswitch_ids": {"cn-hangzhou-h": "vsw-H1!"}}
        )
    assert unknown.value.path == "options.subnet_ids"
    assert bad_switch.value.path == "options.vswitch_ids.cn-hangzhou-h"


@pytest.mark.django_db
def test_an_accounts_options_reach_its_driver_frozen() -> None:
    account = ProviderAccount.objects.create(
        name="Ali",
        driver="alibaba",
        regions=["cn-hangzhou"],
        options={"security_group_id": "sg-1", "vswitch_ids": {"cn-hangzhou-i": "vsw-i"}},
    )

    config = ProviderAccount.objects.get(pk=account.pk).config()

    assert config.options == (
        ("security_group_id", "sg-1"),
        ("vswitch_ids", (("cn-hangzhou-i", "vsw-i"),)),
    )
    assert config.option("vswitch_ids") == (("cn-hangzhou-i", "vsw-i"),)
    assert config.option("nothing", "default") == "default"
    hash(config)  # immutable all the way down
