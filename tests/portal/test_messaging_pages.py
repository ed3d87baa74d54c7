"""The channels page (the project's managers and admins) and the subscriptions page
(members): what each may see and do, and that an address or secret never shows."""

import pytest
from django.test import Client

from portal.messaging import services
from portal.messaging.models import Channel, Delivery, Subscription
from portal.notifications import Event

HOOK = "https://hooks.slack.com/services/T0001/B0002/topSECRETtoken"


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def channel(f0):
    return services.add_channel(
        actor=f0.alpha_manager, project=f0.alpha, name="alpha-team", kind="slack", address=HOOK
    )


def test_it_lets_the_manager_add_a_channel_and_never_shows_its_address(f0):
    page = client_for(f0.alpha_manager)
    answer = page.post(
        "/projects/alpha/channels/",
        {"name": "alpha-team", "kind": "slack", "address": HOOK, "secret": ""},
    )
    assert answer.status_code == 302
    (made,) = Channel.objects.all()
    assert (made.project, made.kind, made.hint) == (f0.alpha, "slack", "hooks.slack.com")
    shown = page.get("/projects/alpha/channels/").content.decode()
    assert "alpha-team" in shown and "hooks.slack.com" in shown
    assert "topSECRETtoken" not in shown and "T0001" not in shown


def test_a_refused_address_is_said_on_its_field_and_not_sent_back(f0):
    answer = client_for(f0.alpha_manager).post(
        "/projects/alpha/channels/",
        {"name": "x", "kind": "feishu", "address": HOOK, "secret": ""},
    )
    assert answer.status_code == 400
    body = answer.content.decode()
    assert 'id="channel-address-error"' in body and "topSECRETtoken" not in body
    assert not Channel.objects.exists()


def test_only_the_projects_managers_and_admins_reach_its_channels(f0, channel):
    for user, status in [
        (f0.alpha_manager, 200),
        (f0.admin, 200),
        (f0.alice, 404),  # an engineer of alpha
        (f0.bob, 404),  # not in alpha
    ]:
        assert client_for(user).get("/projects/alpha/channels/").status_code == status, user
        test = client_for(user).post(f"/projects/alpha/channels/{channel.pk}/test/")
        assert test.status_code == (302 if status == 200 else 404), user
    assert Delivery.objects.count() == 2  # the manager's and the admin's tests only
    assert (
        client_for(f0.alice).post(f"/projects/alpha/channels/{channel.pk}/remove/").status_code
        == 404
    )
    assert Channel.objects.filter(pk=channel.pk).exists()


def test_the_test_button_records_a_test_message_in_the_managers_language(f0, channel):
    page = Client(HTTP_ACCEPT_LANGUAGE="en")
    page.force_login(f0.alpha_manager)
    assert page.post(f"/projects/alpha/channels/{channel.pk}/test/").status_code == 302
    (test,) = Delivery.objects.all()
    assert (test.event, test.language, test.status) == ("channel.test", "en", "pending")
    assert test.subject == "Test message from the GPU portal"
    assert test.link == "http://testserver/subscriptions/"


def test_the_record_shows_what_failed_and_why(f0, channel):
    Delivery.objects.create(
        channel=channel,
        message_key="00000000-0000-0000-0000-000000000001",
        language="en",
        event=Event.LEASE_STARTED,
        subject="Ready: #5",
        status=Delivery.Status.FAILED,
        attempts=7,
        last_error="the receiver answered HTTP 500",
    )
    shown = client_for(f0.alpha_manager).get("/projects/alpha/channels/").content.decode()
    assert "Ready: #5" in shown and "the receiver answered HTTP 500" in shown


def test_removing_a_channel_takes_its_subscriptions(f0, channel):
    Subscription.objects.create(user=f0.alice, channel=channel, event="lease.idle", mode="off")
    assert (
        client_for(f0.alpha_manager)
        .post(f"/projects/alpha/channels/{channel.pk}/remove/")
        .status_code
        == 302
    )
    assert not Channel.objects.exists() and not Subscription.objects.exists()


def test_a_member_sees_their_role_defaults_and_saves_their_choices(f0, channel):
    page = client_for(f0.alice)
    shown = page.get("/subscriptions/").content.decode()
    assert "alpha-team" in shown
    assert 'value="lease.started=instant" selected' in shown  # an engineer's default
    assert 'value="approval.needed=off" selected' in shown
    answer = page.post(
        f"/subscriptions/{channel.pk}/",
        {"choice": [f"{Event.LEASE_STARTED}=digest", f"{Event.IDLE_WARNING}=off"]},
    )
    assert answer.status_code == 302
    assert dict(Subscription.objects.values_list("event", "mode")) == {
        Event.LEASE_STARTED: "digest",
        Event.IDLE_WARNING: "off",
    }


def test_a_bad_choice_writes_nothing(f0, channel):
    client_for(f0.alice).post(
        f"/subscriptions/{channel.pk}/",
        {"choice": [f"{Event.LEASE_STARTED}=digest", f"{Event.IDLE_WARNING}=loud"]},
    )
    assert not Subscription.objects.exists()


def test_someone_outside_the_project_cannot_subscribe_or_see_its_channels(f0, channel):
    page = client_for(f0.bob)
    assert "alpha-team" not in page.get("/subscriptions/").content.decode()
    answer = page.post(f"/subscriptions/{channel.pk}/", {"choice": "lease.started=instant"})
    assert answer.status_code == 404 and not Subscription.objects.exists()


def test_the_pages_read_in_chinese(f0, channel):
    page = Client(HTTP_ACCEPT_LANGUAGE="zh-hans")
    page.force_login(f0.alpha_manager)
    assert page.get("/projects/alpha/channels/").status_code == 200
    assert page.get("/subscriptions/").status_code == 200
