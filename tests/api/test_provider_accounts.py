"""``/api/v1/provider-accounts``: admins only; credentials write-only (stored encrypted,
never answered, never logged, never in the audit), validated against the local cloud."""

import json
import logging

import pytest

from portal import crypto
from portal.models import AuditEvent
from rental.models import ProviderAccount
from tests import factories
from tests.api.catalog_support import HUGE, NOT_JSON, client_for, counts, finance, post_raw

pytestmark = pytest.mark.django_db

LIST = "/api/v1/provider-accounts"
GOOD_KEY = "AKIDAPIGOOD00042"
SECRET = "wJalrXUtnFEMI-api-secret-never-shown"
TOKEN = "FwoGZXIvYXdzE-api-session-token-never-shown"
NEW_KEY = "AKIDAPIROTATED07"
NEW_SECRET = "rotated-api-secret-never-shown-either"


def body(cloud, **overrides):
    return {
        "name": "Main cloud",
        "driver": "aws",
        "regions": ["us-east-1", "US-WEST-2", "us-east-1"],
        "endpoint_url": cloud.url,
        "access_key_id": GOOD_KEY,
        "secret_access_key": SECRET,
        **overrides,
    }


def test_it_creates_an_account_stores_its_credentials_encrypted_and_validates_it(f0, cloud):
    cloud.require_access_keys({GOOD_KEY})
    answer = client_for(f0.admin).post(LIST, body(cloud), format="json")
    assert answer.status_code == 201, answer.content
    account = ProviderAccount.objects.get(name="Main cloud")
    assert answer.json() == {
        "id": account.pk,
        "name": "Main cloud",
        "driver": "aws",
        "regions": ["us-east-1", "us-west-2"],
        "endpoint_url": cloud.url,
        "is_active": True,
        "options": {},
        "credentials_set": True,
        "status": "ok",
        "status_message": "",
        "checked_at": answer.json()["checked_at"],
        "synced_at": None,
        "sync_error": "",
        "sync_failed_at": None,
    }
    assert answer.json()["checked_at"] is not None
    assert crypto.decrypt(account.credentials_encrypted)["secret_access_key"] == SECRET
    assert SECRET not in account.credentials_encrypted
    events = AuditEvent.objects.filter(object_id=str(account.pk)).order_by("pk")
    verbs = list(events.values_list("verb", "source"))
    assert verbs == [
        ("provider_account.created", "api"),
        ("provider_account.credentials_set", "api"),
        ("provider_account.validated", "api"),
    ]


def test_it_records_a_failed_validation_with_the_providers_reason(f0, cloud):
    cloud.require_access_keys({"AKIDSOMEONEELSE1"})
    answer = client_for(f0.admin).post(LIST, body(cloud), format="json")
    assert answer.status_code == 201
    assert answer.json()["status"] == "failed"
    assert answer.json()["status_message"].startswith("auth:")
    cloud.require_access_keys({GOOD_KEY})
    account = ProviderAccount.objects.get(name="Main cloud")
    again = client_for(f0.admin).post(f"{LIST}/{account.pk}/validate")
    assert (again.status_code, again.json()["status"]) == (200, "ok")


def test_it_records_credentials_it_cannot_decrypt_as_a_failed_validation(f0, settings):
    from cryptography.fernet import Fernet

    settings.PORTAL_ENCRYPTION_KEYS = [Fernet.generate_key().decode()]  # the old key is lost
    answer = client_for(f0.admin).post(f"{LIST}/{f0.account.pk}/validate")
    assert answer.status_code == 200
    assert answer.json()["status"] == "failed"
    assert "cannot be decrypted" in answer.json()["status_message"]
    assert "test-secret-value" not in answer.content.decode()


def test_it_adds_an_account_without_credentials_unverified(f0, cloud):
    plain = {
        k: v for k, v in body(cloud).items() if k not in ("access_key_id", "secret_access_key")
    }
    answer = client_for(f0.admin).post(LIST, plain, format="json")
    assert answer.status_code == 201
    assert (answer.json()["credentials_set"], answer.json()["status"]) == (False, "unverified")
    assert cloud.count("DescribeRegions") == 0
    account_id = answer.json()["id"]
    nothing = client_for(f0.admin).post(f"{LIST}/{account_id}/validate")
    assert nothing.status_code == 409 and nothing.json()["code"] == "no_credentials"


def test_it_changes_only_what_is_sent_and_revalidates_a_new_connection(f0, cloud):
    account = factories.account(name="Edge", endpoint_url=cloud.url, access_key_id=GOOD_KEY)
    ProviderAccount.objects.filter(pk=account.pk).update(status="ok")
    renamed = client_for(f0.admin).patch(f"{LIST}/{account.pk}", {"name": "Edge 2"})
    assert renamed.status_code == 200
    assert (renamed.json()["name"], renamed.json()["status"]) == ("Edge 2", "ok")
    before = ProviderAccount.objects.get(pk=account.pk).credentials_encrypted
    cloud.require_access_keys({NEW_KEY})
    moved = client_for(f0.admin).patch(
        f"{LIST}/{account.pk}", {"regions": ["eu-west-1"]}, format="json"
    )
    assert (moved.json()["regions"], moved.json()["status"]) == (["eu-west-1"], "failed")
    rotated = client_for(f0.admin).patch(
        f"{LIST}/{account.pk}",
        {"access_key_id": NEW_KEY, "secret_access_key": NEW_SECRET},
        format="json",
    )
    assert rotated.json()["status"] == "ok"
    account.refresh_from_db()
    assert account.credentials_encrypted != before
    assert crypto.decrypt(account.credentials_encrypted)["access_key_id"] == NEW_KEY
    changed = AuditEvent.objects.filter(verb="provider_account.changed").order_by("pk")
    assert [event.after for event in changed] == [
        {"name": "Edge 2"},
        {"regions": ["eu-west-1"]},  # a list is kept as a list
    ]


def test_it_answers_404_to_everyone_but_admins(f0, cloud):
    account = f0.account
    for who in (f0.alice, f0.alpha_manager, finance(), f0.outsider):
        client = client_for(who)
        assert client.get(LIST).status_code == 404
        assert client.get(f"{LIST}/{account.pk}").status_code == 404
        assert client.post(LIST, body(cloud), format="json").status_code == 404
        assert client.patch(f"{LIST}/{account.pk}", {"name": "x"}).status_code == 404
        assert client.post(f"{LIST}/{account.pk}/validate").status_code == 404
    assert client_for(None).get(LIST).status_code == 401
    assert ProviderAccount.objects.get().name == "Test cloud"
    assert not ProviderAccount.objects.filter(name="Main cloud").exists()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"name": HUGE}, "name"),
        ({"name": "n\x00ul"}, "name"),
        ({"driver": "gcp"}, "driver"),
        ({"regions": []}, "regions"),
        ({"regions": "us-east-1"}, "regions"),
        ({"regions": ["us east 1"]}, "regions"),
        ({"regions": ["r"] * 51}, "regions"),
        ({"endpoint_url": "not a url"}, "endpoint_url"),
        ({"access_key_id": HUGE}, "access_key_id"),
        ({"is_active": "perhaps"}, "is_active"),
    ],
)
def test_it_answers_400_naming_the_field_and_writes_nothing(f0, cloud, change, field):
    before = counts()
    answer = client_for(f0.admin).post(LIST, body(cloud, **change), format="json")
    assert answer.status_code == 400, answer.content
    assert field in answer.json()["errors"]
    assert counts() == before
    assert cloud.count("DescribeRegions") == 0


@pytest.mark.parametrize(
    ("change", "field", "code"),
    [
        ({"name": "Test cloud"}, "name", "name_taken"),  # F0's account
        ({"secret_access_key": ""}, "secret_access_key", "credentials_incomplete"),
        ({"access_key_id": ""}, "access_key_id", "credentials_incomplete"),
    ],
)
def test_it_answers_409_to_a_body_a_rule_refuses_and_writes_nothing(f0, cloud, change, field, code):
    """Well formed, but a name another account has or half a pair of credentials."""
    before = counts()
    answer = client_for(f0.admin).post(LIST, body(cloud, **change), format="json")
    assert answer.status_code == 409, answer.content
    assert (answer.json()["code"], answer.json()["field"]) == (code, field)
    assert "errors" not in answer.json()
    assert counts() == before
    assert cloud.count("DescribeRegions") == 0


ALIBABA_OPTIONS = {
    "security_group_id": "sg-bp1portal01",
    "vswitch_ids": {"cn-hangzhou-h": "vsw-bp1hzh", "cn-hangzhou-i": "vsw-bp1hzi"},
}


def alibaba_body(**overrides):
    """An Alibaba Cloud account without credentials: nothing is called to validate it."""
    return {"name": "Ali", "driver": "alibaba", "regions": ["cn-hangzhou"], **overrides}


def test_it_takes_and_answers_the_drivers_options(f0):
    made = client_for(f0.admin).post(LIST, alibaba_body(options=ALIBABA_OPTIONS), format="json")
    assert made.status_code == 201, made.content
    assert made.json()["options"] == ALIBABA_OPTIONS
    account = ProviderAccount.objects.get(name="Ali")
    assert account.options == ALIBABA_OPTIONS
    assert dict(account.config().option("vswitch_ids")) == ALIBABA_OPTIONS["vswitch_ids"]

    changed = client_for(f0.admin).patch(
        f"{LIST}/{account.pk}",
        {"options": {**ALIBABA_OPTIONS, "security_group_id": " sg-bp1other02 "}},
        format="json",
    )

    assert changed.status_code == 200, changed.content
    assert changed.json()["options"]["security_group_id"] == "sg-bp1other02"
    event = AuditEvent.objects.filter(verb="provider_account.changed").get()
    assert event.after["options"]["security_group_id"] == "sg-bp1other02"


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({}, "options.security_group_id"),
        ({**ALIBABA_OPTIONS, "security_group_id": "vsw-notagroup"}, "options.security_group_id"),
        ({**ALIBABA_OPTIONS, "security_group_id": 7}, "options.security_group_id"),
        (
            {**ALIBABA_OPTIONS, "vswitch_ids": {"cn-hangzhou-h": "sg-notaswitch"}},
            "options.vswitch_ids.cn-hangzhou-h",
        ),
        ({**ALIBABA_OPTIONS, "vswitch_ids": ["vsw-bp1hzh"]}, "options.vswitch_ids"),
        ({**ALIBABA_OPTIONS, "vswitch_ids": {"Hang Zhou": "vsw-bp1"}}, "options.vswitch_ids"),
        ({**ALIBABA_OPTIONS, "subnet": "x"}, "options.subnet"),
        (["sg-bp1portal01"], "options"),
    ],
)
def test_it_refuses_bad_options_naming_the_option_and_writes_nothing(f0, options, field):
    before = counts()
    answer = client_for(f0.admin).post(LIST, alibaba_body(options=options), format="json")
    assert answer.status_code == 409, answer.content  # the right shape, refused by a rule
    assert (answer.json()["code"], answer.json()["field"]) == ("invalid_option", field)
    assert field in answer.json()["detail"]
    assert counts() == before


def test_a_driver_without_options_refuses_any_and_a_change_of_driver_rechecks(f0, cloud):
    before = counts()
    refused = client_for(f0.admin).post(
        LIST, body(cloud, options={"security_group_id": "sg-1"}), format="json"
    )
    assert (refused.status_code, refused.json()["field"]) == (
        409,
        "options.security_group_id",
    )
    assert counts() == before
    account = ProviderAccount.objects.create(
        name="Ali", driver="alibaba", regions=["cn-hangzhou"], options=ALIBABA_OPTIONS
    )

    to_aws = client_for(f0.admin).patch(f"{LIST}/{account.pk}", {"driver": "aws"}, format="json")

    assert (to_aws.status_code, to_aws.json()["field"]) == (409, "options.security_group_id")
    assert ProviderAccount.objects.get(pk=account.pk).driver == "alibaba"


def test_it_answers_400_to_a_body_that_is_not_json(f0):
    before = counts()
    assert post_raw(client_for(f0.admin), LIST, NOT_JSON).status_code == 400
    url = f"{LIST}/{f0.account.pk}"
    assert post_raw(client_for(f0.admin), url, NOT_JSON, method="patch").status_code == 400
    assert counts() == before


def test_credentials_never_appear_in_an_answer_a_log_line_or_the_audit(f0, cloud, caplog):
    caplog.set_level(logging.DEBUG)
    cloud.require_access_keys({GOOD_KEY})
    admin = client_for(f0.admin)
    answers = [admin.post(LIST, body(cloud, session_token=TOKEN), format="json")]
    account_id = answers[0].json()["id"]
    url = f"{LIST}/{account_id}"
    answers += [
        admin.get(LIST),
        admin.get(url),
        admin.post(f"{url}/validate"),
        admin.patch(url, {"access_key_id": NEW_KEY, "secret_access_key": NEW_SECRET}),
        # refused: the answer names the field, never the value
        admin.patch(url, {"access_key_id": GOOD_KEY, "regions": ["bad region"]}, format="json"),
        admin.patch(url, {"secret_access_key": SECRET}, format="json"),
        admin.post(LIST, body(cloud, name="Main cloud"), format="json"),  # a name taken
        client_for(f0.alice).post(LIST, body(cloud, name="x"), format="json"),
    ]
    assert [a.status_code for a in answers] == [201, 200, 200, 200, 200, 400, 409, 409, 404]
    audit = json.dumps(list(AuditEvent.objects.values("before", "after", "verb")))
    for secret in (SECRET, TOKEN, NEW_SECRET, GOOD_KEY, NEW_KEY):
        for answer in answers:
            assert secret not in answer.content.decode(), answer.request["PATH_INFO"]
        assert secret not in caplog.text
        assert secret not in audit
    assert "credentials_set" in answers[2].json() and answers[2].json()["credentials_set"]


def test_it_lists_accounts_in_a_fixed_number_of_queries(f0, django_assert_num_queries):
    client = client_for(f0.admin)
    with django_assert_num_queries(2):  # count, page
        assert len(client.get(LIST).json()["results"]) == 1
    for n in range(14):
        factories.account(name=f"Cloud {n}")
    client = client_for(f0.admin)
    with django_assert_num_queries(2):
        assert len(client.get(LIST).json()["results"]) == 15
