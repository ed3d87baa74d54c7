"""Each channel's message as its service receives it: the signed webhook at a local
receiver (its signature checked here as a receiver would), e-mail in the outbox, and for
Slack, Feishu, DingTalk and WeCom (whose addresses are the services' own hosts) the exact
request Apprise sends, caught at requests' boundary without the network."""

import base64
import hashlib
import hmac
import json
import urllib.parse

import pytest
import requests
from django.core import mail

from portal import crypto
from portal.messaging import delivery, kinds, services
from portal.messaging.models import Channel, Delivery
from portal.messaging.transports import Outgoing, SendFailed, send
from tests import factories
from tests.portal.chat_receiver import receiver

SECRET = "s3cret-signing-key-for-tests"
MESSAGE = Outgoing(
    delivery_id=7,
    event="lease.started",
    project="alpha",
    language="zh-hans",
    subject="就绪：Alpha 的 #12 2× A100 80GB",
    text="SSH: ubuntu@203.0.113.9\n\nhttps://gpu.example.com/leases/12/",
    link="https://gpu.example.com/leases/12/",
)


def verify(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """What the user guide tells a receiver to do."""
    timestamp = headers["X-Portal-Timestamp"]
    expected = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return hmac.compare_digest("sha256=" + expected.hexdigest(), headers["X-Portal-Signature"])


def test_it_signs_the_webhook_so_that_the_receiver_can_verify_it():
    with receiver() as hook:
        send("webhook", {"address": hook.url, "secret": SECRET}, MESSAGE)
    (got,) = hook.requests
    assert got.path == "/hooks/portal"
    assert verify(SECRET, got.headers, got.body)
    assert not verify("another-secret-of-16+", got.headers, got.body)
    tampered = got.body.replace(b"12", b"13")
    assert not verify(SECRET, got.headers, tampered)
    assert got.headers["X-Portal-Event"] == "lease.started"
    assert got.headers["X-Portal-Delivery"] == "7"
    assert json.loads(got.body) == {
        "id": 7,
        "event": "lease.started",
        "project": "alpha",
        "language": "zh-hans",
        "subject": "就绪：Alpha 的 #12 2× A100 80GB",
        "text": "SSH: ubuntu@203.0.113.9\n\nhttps://gpu.example.com/leases/12/",
        "link": "https://gpu.example.com/leases/12/",
    }


def test_it_says_why_a_webhook_failed_and_whether_to_try_again(settings):
    settings.PORTAL_MESSAGING_TIMEOUT_SECONDS = 1
    with receiver() as hook:
        hook.statuses = [500, 404]
        secrets = {"address": hook.url, "secret": SECRET}
        with pytest.raises(SendFailed) as server_error:
            send("webhook", secrets, MESSAGE)
        with pytest.raises(SendFailed) as not_found:
            send("webhook", secrets, MESSAGE)
        hook.delay = 2
        with pytest.raises(SendFailed) as slow:
            send("webhook", secrets, MESSAGE)
    assert (server_error.value.reason, server_error.value.retryable) == (
        "the receiver answered HTTP 500",
        True,
    )
    assert (not_found.value.reason, not_found.value.retryable) == (
        "the receiver answered HTTP 404",
        False,
    )
    assert (slow.value.reason, slow.value.retryable) == ("no answer within 1 s", True)


def test_it_mails_the_channels_address():
    send("email", {"address": "team-gpu@example.com"}, MESSAGE)
    (sent,) = mail.outbox
    assert sent.to == ["team-gpu@example.com"]
    assert sent.subject == MESSAGE.subject
    assert sent.body == MESSAGE.text


class Caught:
    def __init__(self, status: int = 200, content: bytes = b'{"code": 0, "ok": true}'):
        self.calls: list[dict] = []
        self.status = status
        self.content = content

    def answer(self):
        response = requests.Response()
        response.status_code = self.status
        response._content = self.content
        return response

    def post(self, url, data=None, headers=None, params=None, **kwargs):
        self.calls.append({"url": url, "data": data, "headers": headers, "params": params})
        return self.answer()

    def request(self, method, url, data=None, headers=None, params=None, **kwargs):
        self.calls.append({"url": url, "data": data, "headers": headers, "params": params})
        return self.answer()


@pytest.fixture
def caught(monkeypatch) -> Caught:
    """Apprise's plugins call requests.post / requests.request: caught there."""
    catcher = Caught()
    monkeypatch.setattr(requests, "post", catcher.post)
    monkeypatch.setattr(requests, "request", catcher.request)
    return catcher


def body_of(call: dict) -> dict:
    data = call["data"]
    return json.loads(data.decode() if isinstance(data, bytes) else data)


def test_slack_gets_the_message_at_its_incoming_webhook(caught):
    caught.content = b"ok"  # what Slack's incoming webhook answers
    address = "https://hooks.slack.com/services/T0001/B0002/abcDEF123"
    send("slack", kinds.check("slack", address, "").secrets, MESSAGE)
    (call,) = caught.calls
    assert call["url"] == "https://hooks.slack.com/services/T0001/B0002/abcDEF123"
    payload = body_of(call)
    text = json.dumps(payload, ensure_ascii=False)
    assert MESSAGE.subject in text
    assert "ubuntu@203.0.113.9" in text and MESSAGE.link in text


def test_feishu_gets_a_text_message_at_its_bot_hook(caught):
    address = "https://open.feishu.cn/open-apis/bot/v2/hook/0f1e2d3c-aaaa-bbbb"
    send("feishu", kinds.check("feishu", address, "").secrets, MESSAGE)
    (call,) = caught.calls
    assert call["url"] == "https://open.feishu.cn/open-apis/bot/v2/hook/0f1e2d3c-aaaa-bbbb/"
    assert body_of(call) == {
        "msg_type": "text",
        "content": {"text": f"{MESSAGE.subject}\r\n{MESSAGE.text}"},
    }


def test_dingtalk_gets_a_signed_text_message(caught):
    address = "https://oapi.dingtalk.com/robot/send?access_token=abc123def456"
    secret = "SEC0123456789abcdef"
    send("dingtalk", kinds.check("dingtalk", address, secret).secrets, MESSAGE)
    (call,) = caught.calls
    assert call["url"] == "https://oapi.dingtalk.com/robot/send?access_token=abc123def456"
    assert body_of(call)["msgtype"] == "text"
    assert body_of(call)["text"] == {"content": f"{MESSAGE.subject}\r\n{MESSAGE.text}"}
    # DingTalk's own signing: base64(HMAC-SHA256(secret, timestamp + "\n" + secret)).
    timestamp = call["params"]["timestamp"]
    signed = hmac.new(secret.encode(), f"{timestamp}\n{secret}".encode(), hashlib.sha256)
    expected = urllib.parse.quote(base64.b64encode(signed.digest()), safe="")
    assert call["params"]["sign"] == expected


def test_wecom_gets_a_text_message_at_its_robot(caught):
    address = "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=693a91f6-7xxx-4bc4"
    send("wecom", kinds.check("wecom", address, "").secrets, MESSAGE)
    (call,) = caught.calls
    assert call["url"] == "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=693a91f6-7xxx-4bc4"
    payload = body_of(call)
    assert payload["msgtype"] == "text"
    assert MESSAGE.subject in payload["text"]["content"]
    assert MESSAGE.link in payload["text"]["content"]


def test_a_service_refusal_is_recorded_without_the_token(caught):
    caught.status = 500
    address = "https://open.feishu.cn/open-apis/bot/v2/hook/tok-SECRET-9999"
    with pytest.raises(SendFailed) as failed:
        send("feishu", kinds.check("feishu", address, "").secrets, MESSAGE)
    assert failed.value.retryable
    assert "500" in failed.value.reason
    assert "tok-SECRET-9999" not in failed.value.reason


@pytest.mark.parametrize(
    ("kind", "address", "secret", "field"),
    [
        ("slack", "https://example.com/services/T/B/C", "", "address"),
        ("feishu", "https://hooks.slack.com/services/T0001/B0002/abc", "", "address"),
        ("dingtalk", "https://oapi.dingtalk.com/robot/send?access_token=abc", "SEC-bad!", "secret"),
        ("email", "not an address", "", "address"),
        ("webhook", "ftp://example.com/x", SECRET, "address"),
        ("webhook", "https://example.com/x", "short", "secret"),
        ("teams", "https://example.com/x", "", "kind"),
        ("slack", "", "", "address"),
    ],
)
def test_a_bad_address_is_refused_on_its_field_and_nothing_is_written(
    db, kind, address, secret, field
):
    manager = factories.user("mia")
    project = factories.project("alpha")
    with pytest.raises(Exception) as refused:
        services.add_channel(
            actor=manager, project=project, name="team", kind=kind, address=address, secret=secret
        )
    assert getattr(refused.value, "field", None) == field
    assert not Channel.objects.exists()


def test_the_address_and_secret_are_stored_encrypted(db):
    project = factories.project("alpha")
    with receiver() as hook:
        channel = services.add_channel(
            actor=factories.user("mia"),
            project=project,
            name="hook",
            kind="webhook",
            address=hook.url,
            secret=SECRET,
        )
    assert hook.url not in channel.secrets_encrypted and SECRET not in channel.secrets_encrypted
    assert crypto.decrypt(channel.secrets_encrypted) == {"address": hook.url, "secret": SECRET}
    assert channel.hint == "127.0.0.1"


def test_a_test_message_is_sent_like_any_delivery(db, django_capture_on_commit_callbacks):
    project = factories.project("alpha", name="Alpha")
    with receiver() as hook:
        channel = services.add_channel(
            actor=factories.user("mia"),
            project=project,
            name="hook",
            kind="webhook",
            address=hook.url,
            secret=SECRET,
        )
        made = services.send_test(
            actor=None, channel=channel, language="zh-hans", link="https://gpu.example.com/x"
        )
        assert delivery.deliver(made.pk, final=False) == Delivery.Status.SENT
    (got,) = hook.requests
    payload = json.loads(got.body)
    assert payload["event"] == "channel.test"
    assert payload["subject"] == "来自 GPU 门户的测试消息"
