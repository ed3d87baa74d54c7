"""A notification is said in the language of whoever reads it, whatever language was
active when it was sent: the portal's list in the page's language, a mail in the
recipient's (kept when they pick one, or from their browser at their first login)."""

from datetime import UTC, datetime

import pytest
from django.conf import settings
from django.core import mail
from django.test import Client
from django.utils import translation
from django.utils.translation import gettext_noop

from portal import notifications
from portal.models import LanguagePreference, Notification
from portal.phrases import Phrase
from rental.loans import admission

NOW = datetime(2026, 4, 6, 10, 0, tzinfo=UTC)


def ask(f0, gpus: int):
    return admission.submit_reservation(
        actor=f0.alice,
        project=f0.alpha,
        gpu_model=f0.model,
        gpu_count=gpus,
        duration_hours=2,
        priority="experiment",
        market="on_demand",
        now=NOW,
    )


def ask_beyond_the_ceiling(f0):
    """With 4 GPUs running, Alice asks 4 more, over alpha's ceiling of 6: alpha's manager
    is told, with why."""
    ask(f0, 4)
    return ask(f0, 4)


def notifications_page(user, language: str) -> str:
    client = Client(HTTP_ACCEPT_LANGUAGE=language)
    client.force_login(user)
    response = client.get("/notifications/")
    assert response.status_code == 200
    return response.content.decode()


def test_one_sent_while_english_was_active_reads_in_chinese_for_a_chinese_reader(f0):
    with translation.override("en"):
        lease = ask_beyond_the_ceiling(f0)

    chinese = notifications_page(f0.alpha_manager, "zh-hans")
    assert f"需要审批：Alpha 的 #{lease.pk} 4× A100 80GB" in chinese
    assert "超出项目上限：6 块 GPU 中已用 4 块，申请 4 块。" in chinese
    assert "Approval needed" not in chinese and "ceiling" not in chinese

    english = notifications_page(f0.alpha_manager, "en")
    assert f"Approval needed: #{lease.pk} 4× A100 80GB for Alpha" in english
    assert "Over the project&#x27;s ceiling: 4 of 6 GPUs in use, 4 asked." in english


def test_one_sent_while_chinese_was_active_reads_in_english_for_an_english_reader(f0):
    with translation.override("zh-hans"):
        lease = ask_beyond_the_ceiling(f0)

    english = notifications_page(f0.alpha_manager, "en")
    assert f"Approval needed: #{lease.pk} 4× A100 80GB for Alpha" in english
    assert "需要审批" not in english
    assert "需要审批" in notifications_page(f0.alpha_manager, "zh-hans")


def test_the_lease_reason_reads_in_each_readers_language_on_the_page_and_in_the_api(f0):
    with translation.override("en"):
        lease = ask_beyond_the_ceiling(f0)
    client = Client(HTTP_ACCEPT_LANGUAGE="zh-hans")
    client.force_login(f0.alice)
    page = client.get(f"/leases/{lease.pk}/").content.decode()
    assert "超出项目上限：6 块 GPU 中已用 4 块，申请 4 块。" in page
    assert "Over the project" not in page

    client = Client()  # no language asked for: the site's, English
    client.force_login(f0.alice)
    answer = client.get(f"/api/v1/leases/{lease.pk}").json()
    assert answer["reason_code"] == "over_ceiling"
    assert answer["reason"].startswith("Over the project's ceiling: 4 of 6 GPUs in use")
    client = Client(HTTP_ACCEPT_LANGUAGE="zh-hans")  # a program that asks for Chinese
    client.force_login(f0.alice)
    answer = client.get(f"/api/v1/leases/{lease.pk}").json()
    assert answer["reason"].startswith("超出项目上限")


def test_a_mail_goes_out_in_each_recipients_language(f0, django_capture_on_commit_callbacks):
    LanguagePreference.objects.create(user=f0.alice, language="zh-hans")
    with translation.override("en"), django_capture_on_commit_callbacks(execute=True):
        notifications.notify(
            [f0.alice, f0.bob],
            subject=Phrase(gettext_noop("Starting: %(lease)s"), lease="#7"),
            body=Phrase(gettext_noop("The provider ended the instance.")),
            link="/leases/7/",
        )

    by_address = {tuple(message.to): message for message in mail.outbox}
    assert set(by_address) == {("alice@example.com",), ("bob@example.com",)}
    chinese, english = by_address[("alice@example.com",)], by_address[("bob@example.com",)]
    assert chinese.subject == "正在启动：#7"
    assert chinese.body.startswith("云厂商结束了该实例。")
    assert chinese.body.endswith("http://localhost:8000/leases/7/")
    assert english.subject == "Starting: #7"
    assert english.body.startswith("The provider ended the instance.")
    # The portal keeps one notification each, said when read.
    assert Notification.objects.count() == 2


def test_no_mail_goes_out_when_the_change_rolls_back(f0, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        notifications.notify(
            [f0.alice], subject=Phrase(gettext_noop("Starting: %(lease)s"), lease="#7")
        )
    assert mail.outbox == [] and len(callbacks) == 1  # sent only by the commit


def test_an_old_plain_text_notification_still_reads_as_it_was_written(f0):
    Notification.objects.create(user=f0.alice, subject="Ready: #3 (old row)", body="SSH: ubuntu@h")
    page = notifications_page(f0.alice, "zh-hans")
    assert "Ready: #3 (old row)" in page and "SSH: ubuntu@h" in page


def test_a_subject_is_shown_within_its_bound_in_every_language(f0):
    notifications.notify([f0.alice], subject="x" * 500)
    assert Notification.objects.get().title == "x" * Notification.SUBJECT_LENGTH


def test_it_keeps_the_language_a_person_picks_in_the_user_menu(f0):
    client = Client()
    client.force_login(f0.alice)
    response = client.post("/i18n/setlang/", {"language": "zh-hans", "next": "/"})
    assert response.status_code == 302
    kept = LanguagePreference.objects.get(user=f0.alice)
    assert (kept.language, kept.chosen) == ("zh-hans", True)
    client.post("/i18n/setlang/", {"language": "en", "next": "/"})
    assert LanguagePreference.objects.get(user=f0.alice).language == "en"
    client.post("/i18n/setlang/", {"language": "xx", "next": "/"})
    assert LanguagePreference.objects.get(user=f0.alice).language == "en"


def log_in(user, language: str) -> tuple[Client, object]:
    user.set_password("pw-for-this-test")
    user.save()
    client = Client(HTTP_ACCEPT_LANGUAGE=language)
    response = client.post("/login/", {"username": user.username, "password": "pw-for-this-test"})
    assert response.status_code == 302
    return client, response


def test_until_a_person_picks_one_the_browsers_language_at_login_is_kept(f0):
    log_in(f0.alice, "zh-CN,zh;q=0.9")
    kept = LanguagePreference.objects.get(user=f0.alice)
    assert (kept.language, kept.chosen) == ("zh-hans", False)
    client, response = log_in(f0.alice, "en-US,en;q=0.9")  # another browser, in English
    assert settings.LANGUAGE_COOKIE_NAME not in response.cookies
    assert 'lang="en"' in client.get("/").content.decode()
    assert LanguagePreference.objects.get(user=f0.alice).language == "en"


def test_a_login_elsewhere_opens_the_portal_in_the_language_picked(f0):
    LanguagePreference.objects.create(user=f0.alice, language="zh-hans", chosen=True)
    client, response = log_in(f0.alice, "en")
    assert response.cookies[settings.LANGUAGE_COOKIE_NAME].value == "zh-hans"
    assert 'lang="zh-hans"' in client.get("/").content.decode()
    kept = LanguagePreference.objects.get(user=f0.alice)
    assert (kept.language, kept.chosen) == ("zh-hans", True)


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_a_mail_to_someone_with_no_language_kept_is_in_the_sites(
    f0, language, settings, django_capture_on_commit_callbacks
):
    settings.LANGUAGE_CODE = language
    with django_capture_on_commit_callbacks(execute=True):
        notifications.notify(
            [f0.bob], subject=Phrase(gettext_noop("Starting: %(lease)s"), lease="#7")
        )
    [message] = mail.outbox
    assert message.subject == ("Starting: #7" if language == "en" else "正在启动：#7")
