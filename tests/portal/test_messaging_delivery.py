"""From notify() to the channel: who gets what on which channel (subscriptions, role
defaults, digest), in the recipient's language with absolute links; sent once however
often the task runs; retried with backoff and recorded; and a channel that fails or hangs
never holds up or undoes the change that caused the message."""

import json
import time

import pytest
from django.utils import translation

from portal import notifications
from portal.messaging import delivery, services, subscriptions
from portal.messaging.models import Delivery, DigestEntry, Subscription
from portal.messaging.tasks import deliver_task
from portal.models import LanguagePreference, Notification
from portal.notifications import Event
from rental.loans import admission
from tests.portal.chat_receiver import receiver
from tests.portal.test_messaging_channels import SECRET, verify
from tests.portal.test_notification_language import NOW, ask_beyond_the_ceiling

Status = Delivery.Status


@pytest.fixture
def hook():
    with receiver() as running:
        yield running


@pytest.fixture
def chat(f0, hook, settings):
    settings.PORTAL_BASE_URL = "https://gpu.example.com/"
    settings.PORTAL_MESSAGING_TIMEOUT_SECONDS = 1
    return services.add_channel(
        actor=f0.alpha_manager,
        project=f0.alpha,
        name="alpha-team",
        kind="webhook",
        address=hook.url,
        secret=SECRET,
    )


def sent_payloads(hook) -> list[dict]:
    for got in hook.requests:
        assert verify(SECRET, got.headers, got.body)
    return [json.loads(got.body) for got in hook.requests]


@pytest.mark.parametrize(
    ("language", "subject", "why"),
    [
        (
            "en",
            "Approval needed: #{id} 4× A100 80GB for Alpha",
            "Over the project's ceiling: 4 of 6 GPUs in use",
        ),
        (
            "zh-hans",
            "需要审批：Alpha 的 #{id} 4× A100 80GB",
            "超出项目上限：6 块 GPU 中已用 4 块，申请 4 块。",
        ),
    ],
)
def test_the_manager_reads_approval_needed_in_their_language_with_an_absolute_link(
    f0, chat, hook, language, subject, why
):
    LanguagePreference.objects.create(user=f0.alpha_manager, language=language, chosen=True)
    with translation.override("en" if language != "en" else "zh-hans"):
        lease = ask_beyond_the_ceiling(f0)
    (row,) = Delivery.objects.filter(channel=chat)
    assert (row.event, row.language, row.status) == (Event.APPROVAL_NEEDED, language, "pending")

    assert delivery.deliver(row.pk, final=False) == Status.SENT

    (payload,) = sent_payloads(hook)
    assert payload["subject"] == subject.format(id=lease.pk)
    assert why in payload["text"]
    assert payload["link"] == f"https://gpu.example.com/leases/{lease.pk}/"
    assert payload["text"].endswith(payload["link"])
    assert payload["project"] == "alpha" and payload["language"] == language
    other = "Approval needed" if language == "zh-hans" else "需要审批"
    assert other not in payload["subject"]


def tell_alice(f0, event=Event.LEASE_STARTED):
    notifications.notify(
        [f0.alice],
        subject="Ready: #1",
        body="SSH: ubuntu@203.0.113.9",
        link="/leases/1/",
        event=event,
        project=f0.alpha,
    )


def test_engineers_get_their_lease_events_by_default_and_not_the_managers_ones(f0, chat):
    tell_alice(f0)
    tell_alice(f0, Event.BUDGET_THRESHOLD)
    assert list(Delivery.objects.values_list("event", flat=True)) == [Event.LEASE_STARTED]
    assert subscriptions.choices_of(f0.alice, chat, "engineer")[Event.APPROVAL_NEEDED] == "off"
    assert (
        subscriptions.choices_of(f0.alpha_manager, chat, "manager")[Event.STATEMENT_READY]
        == "instant"
    )


def test_a_person_who_turns_an_event_off_gets_nothing_on_that_channel(f0, chat):
    services.set_subscriptions(user=f0.alice, channel=chat, choices={Event.LEASE_STARTED: "off"})
    tell_alice(f0)
    assert not Delivery.objects.exists() and not DigestEntry.objects.exists()
    assert Notification.objects.filter(user=f0.alice).count() == 1  # the portal still says it


def test_someone_outside_the_project_is_never_sent_to_its_channels(f0, chat):
    notifications.notify([f0.bob], subject="x", event=Event.LEASE_STARTED, project=f0.alpha)
    assert not Delivery.objects.exists()


def test_a_message_without_an_event_stays_out_of_chat(f0, chat):
    notifications.notify([f0.alice], subject="Image saved")
    assert not Delivery.objects.exists()


def test_the_digest_gathers_the_days_messages_into_one_per_channel_and_language(f0, chat, hook):
    services.set_subscriptions(
        user=f0.alice,
        channel=chat,
        choices={Event.LEASE_STARTED: "digest", Event.LEASE_ENDING: "digest"},
    )
    tell_alice(f0)
    tell_alice(f0, Event.LEASE_ENDING)
    assert not Delivery.objects.exists()
    assert DigestEntry.objects.filter(digest__isnull=True).count() == 2

    (made,) = delivery.make_digests()
    assert delivery.make_digests() == []  # each entry in one digest only
    assert delivery.deliver(made, final=False) == Status.SENT
    (payload,) = sent_payloads(hook)
    assert payload["event"] == "digest"
    assert payload["subject"] == "Daily digest: 2 messages from the GPU portal"
    assert payload["text"].count("• Ready: #1") == 2
    assert "https://gpu.example.com/leases/1/" in payload["text"]


def test_a_task_delivered_twice_sends_once(f0, chat, hook):
    tell_alice(f0)
    (row,) = Delivery.objects.all()
    deliver_task.apply(args=[row.pk])
    deliver_task.apply(args=[row.pk])
    assert len(hook.requests) == 1
    # Being sent by another worker right now: this one leaves it alone.
    Delivery.objects.filter(pk=row.pk).update(status=Status.PENDING)
    Delivery.objects.filter(pk=row.pk).update(status=Status.SENDING)
    assert delivery.deliver(row.pk, final=False) == Status.SENDING
    assert len(hook.requests) == 1


def test_a_channel_answering_500_is_retried_with_backoff_and_each_try_recorded(f0, chat, hook):
    hook.statuses = [500, 503]
    tell_alice(f0)
    (row,) = Delivery.objects.all()
    assert deliver_task.autoretry_for == (delivery.TryAgain,)
    assert deliver_task.retry_backoff is True and deliver_task.max_retries == 6

    deliver_task.apply(args=[row.pk])  # eager: the retries run at once, without the wait

    row.refresh_from_db()
    assert (row.status, row.attempts, row.last_error) == (Status.SENT, 3, "")
    assert [(t.ok, t.error) for t in row.tries.all()] == [
        (False, "the receiver answered HTTP 500"),
        (False, "the receiver answered HTTP 503"),
        (True, ""),
    ]
    assert len(hook.requests) == 3


def test_a_channel_that_keeps_failing_is_marked_failed_with_why(f0, chat, hook):
    hook.statuses = [500] * 10
    tell_alice(f0)
    (row,) = Delivery.objects.all()
    deliver_task.apply(args=[row.pk])
    row.refresh_from_db()
    assert (row.status, row.attempts) == (Status.FAILED, 7)  # the first try and 6 retries
    assert row.last_error == "the receiver answered HTTP 500"
    assert SECRET not in row.last_error and hook.url not in row.last_error


def test_a_refusal_that_will_not_pass_is_not_retried(f0, chat, hook):
    hook.statuses = [410]
    tell_alice(f0)
    (row,) = Delivery.objects.all()
    deliver_task.apply(args=[row.pk])
    row.refresh_from_db()
    assert (row.status, row.attempts) == (Status.FAILED, 1)


def test_a_hanging_channel_never_holds_up_the_transition(
    f0, chat, hook, django_capture_on_commit_callbacks, settings
):
    settings.PORTAL_MESSAGING_TIMEOUT_SECONDS = 2  # a send in the transition would show
    hook.delay = 3  # longer than the sender waits
    admission.submit_reservation(
        actor=f0.alice,
        project=f0.alpha,
        gpu_model=f0.model,
        gpu_count=4,
        duration_hours=2,
        priority="experiment",
        market="on_demand",
        now=NOW,
    )
    started = time.monotonic()
    with django_capture_on_commit_callbacks(execute=True):
        lease = admission.submit_reservation(
            actor=f0.alice,
            project=f0.alpha,
            gpu_model=f0.model,
            gpu_count=4,
            duration_hours=2,
            priority="experiment",
            market="on_demand",
            now=NOW,
        )
    assert time.monotonic() - started < 1.5
    assert lease.status == lease.Status.PENDING_APPROVAL
    (row,) = Delivery.objects.filter(event=Event.APPROVAL_NEEDED)
    assert row.status == Status.PENDING and hook.requests == []

    # The worker's try times out, is recorded, and waits for the next one.
    with pytest.raises(delivery.TryAgain):
        delivery.deliver(row.pk, final=False)
    row.refresh_from_db()
    assert (row.status, row.attempts, row.last_error) == (
        Status.PENDING,
        1,
        "no answer within 2 s",
    )


def test_an_error_in_chat_never_undoes_the_change(f0, chat, monkeypatch):
    def broken(**kwargs):
        raise RuntimeError("a bug in the chat code")

    monkeypatch.setattr(subscriptions, "wanted", broken)
    monkeypatch.setattr("portal.messaging.recording.wanted", broken)
    lease = ask_beyond_the_ceiling(f0)
    assert lease.pk and Notification.objects.filter(user=f0.alpha_manager).exists()
    assert not Delivery.objects.exists()


def test_the_sweep_sends_again_what_was_lost_and_never_twice_what_may_have_gone(f0, chat):
    tell_alice(f0)
    tell_alice(f0, Event.LEASE_ENDING)
    lost, stuck = Delivery.objects.order_by("pk")
    later = lost.created_at + delivery.LOST_AFTER + delivery.STALE_CLAIM
    Delivery.objects.filter(pk=stuck.pk).update(status=Status.SENDING, claimed_at=lost.created_at)
    assert delivery.lost(now=later) == [lost.pk]
    stuck.refresh_from_db()
    assert stuck.status == Status.FAILED and "never sent twice" in stuck.last_error


def test_each_subscriber_language_gets_its_own_delivery_once(f0, chat):
    """A manager in Chinese and another in English: one message each, in their language;
    two managers in one language share one."""
    from portal.models import Membership
    from tests import factories

    zhang = factories.user("zhang")
    factories.member(zhang, f0.alpha, Membership.Role.MANAGER)
    LanguagePreference.objects.create(user=zhang, language="zh-hans", chosen=True)
    other = factories.user("otto")
    factories.member(other, f0.alpha, Membership.Role.MANAGER)
    ask_beyond_the_ceiling(f0)
    assert sorted(
        Delivery.objects.filter(event=Event.APPROVAL_NEEDED).values_list("language", flat=True)
    ) == ["en", "zh-hans"]
    assert Subscription.objects.count() == 0  # defaults, no rows written
