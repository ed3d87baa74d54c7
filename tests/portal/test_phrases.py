"""Texts kept as phrases (portal.phrases): said in the language of whoever reads them, kept
exactly through JSON and the database, and never breaking a page."""

from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.utils.translation import gettext_noop

from portal.models import Notification
from portal.phrases import (
    Joined,
    Phrase,
    dump,
    duration,
    load,
    load_text,
    plural_noop,
    render,
    sentences,
)
from rental.loans import admission

AT = datetime(2026, 11, 3, 9, 30, tzinfo=UTC)


def test_it_says_a_phrase_in_the_language_asked_for():
    ready = Phrase(gettext_noop("Ready: %(lease)s"), lease="#7")
    assert render(ready, "en") == "Ready: #7"
    assert render(ready, "zh-hans") == "已就绪：#7"


def test_it_translates_nested_parts_and_keeps_a_persons_words_as_written():
    reason = Phrase(
        gettext_noop("Runs as burst. %(why)s"),
        why=Phrase(gettext_noop("A manager must approve.")),
    )
    assert render(reason, "en") == "Runs as burst. A manager must approve."
    assert "A manager" not in render(reason, "zh-hans")
    comment = Phrase(gettext_noop("Approved: %(lease)s"), lease="Alpha's run")
    assert render(comment, "zh-hans").endswith("Alpha's run")


def test_it_writes_times_one_way_with_seconds_only_when_there_are_some():
    booked = gettext_noop("Booked: the GPUs are held for it from %(at)s UTC.")
    assert "2026-11-03 09:30 UTC" in render(Phrase(booked, at=AT), "en")
    assert "2026-11-03 09:30:15 UTC" in render(Phrase(booked, at=AT.replace(second=15)), "en")


def test_it_joins_sentences_with_a_space_in_english_and_none_in_chinese():
    both = sentences(
        Phrase(gettext_noop("The provider ended the instance.")),
        Phrase(gettext_noop("A manager must approve.")),
    )
    assert render(both, "en") == "The provider ended the instance. A manager must approve."
    assert " " not in render(both, "zh-hans")
    assert sentences("", "Only this.") == "Only this."


def test_it_keeps_every_kind_of_parameter_exactly_through_json():
    said = Phrase(
        gettext_noop("%(value)s of %(budget)s"),
        value=Decimal("1234.50"),
        budget=7,
        at=AT,
        day=date(2026, 11, 1),
        parts=Joined(["A10G 24GB", Phrase(gettext_noop("spot"))], Phrase(gettext_noop(" or "))),
    )
    assert load(dump(said)) == said
    assert dump(said)["params"]["value"] == "1234.50"  # a decimal as its exact text


@pytest.mark.parametrize("wrong", [1.5, True, datetime(2026, 1, 1), object()])
def test_it_refuses_a_parameter_it_could_not_keep_exactly(wrong):
    with pytest.raises(TypeError):
        Phrase(gettext_noop("%(value)s of %(budget)s"), value=wrong, budget=1)


def test_a_counted_phrase_takes_the_form_its_number_needs_in_each_language():
    tries = [Phrase(plural_noop("%(n)s try", "%(n)s tries"), n=n) for n in (1, 8)]
    assert [render(said, "en") for said in tries] == ["1 try", "8 tries"]
    assert [render(said, "zh-hans") for said in tries] == ["1 次", "8 次"]
    assert load(dump(tries[0])) == tries[0]  # both forms kept through JSON
    assert dump(tries[1])["plural"] == "%(n)s tries"
    with pytest.raises(TypeError):
        Phrase(plural_noop("%(n)s try", "%(n)s tries"))  # counted by n, which is missing


@pytest.mark.parametrize(
    ("seconds", "english", "chinese"),
    [
        (0, "0 seconds", "0 秒"),
        (1, "1 second", "1 秒"),
        (14, "14 seconds", "14 秒"),
        (59.4, "59 seconds", "59 秒"),
        (60, "1 minute", "1 分钟"),
        (525, "9 minutes", "9 分钟"),
        (7200, "2 hours", "2 小时"),
        (7500, "2 hours 5 minutes", "2 小时 5 分钟"),
    ],
)
def test_it_says_how_long_something_took(seconds, english, chinese):
    assert render(duration(seconds), "en") == english
    assert render(duration(seconds), "zh-hans") == chinese


def test_a_phrase_missing_a_placeholder_is_said_as_written_instead_of_failing():
    assert render(Phrase("%(a)s and %(b)s", a=1), "zh-hans") == "%(a)s and %(b)s"


def test_a_row_edited_by_hand_reads_as_its_text():
    assert load_text({"what": "no msgid"}) == '{"what": "no msgid"}'
    assert load_text(None) == ""
    assert load_text("plain words") == "plain words"


@pytest.mark.django_db
def test_a_phrase_field_keeps_a_phrase_and_an_old_plain_text(f0):
    said = Phrase(gettext_noop("Ready: %(lease)s"), lease="#7")
    Notification.objects.create(user=f0.alice, subject=said, body="Old words, kept as they are.")
    row = Notification.objects.get()
    assert row.subject == said and row.body == "Old words, kept as they are."
    Notification.objects.filter(pk=row.pk).update(subject="x" * 300)
    assert len(Notification.objects.get().title) == Notification.SUBJECT_LENGTH


@pytest.mark.django_db
def test_the_admin_shows_a_kept_phrase_in_the_admins_language(f0, client):
    lease = admission.submit_reservation(
        actor=f0.alice,
        project=f0.alpha,
        gpu_model=f0.model,
        gpu_count=2,
        duration_hours=1,
        priority="experiment",
        market="spot",
        now=AT,
    )
    lease.status_message = Phrase(gettext_noop("The cloud reclaimed the spot capacity."))
    lease.save()
    Notification.objects.create(
        user=f0.alice, subject=Phrase(gettext_noop("Ready: %(lease)s"), lease="#7")
    )
    get_user_model().objects.filter(pk=f0.admin.pk).update(is_superuser=True)
    client.force_login(f0.admin)
    page = client.get(
        f"/admin/rental/reservation/{lease.pk}/change/", HTTP_ACCEPT_LANGUAGE="zh-hans"
    )
    assert page.status_code == 200 and "云端收回了竞价容量。" in page.content.decode()
    listing = client.get("/admin/portal/notification/?q=Ready")
    assert listing.status_code == 200 and "Ready: #7" in listing.content.decode()
