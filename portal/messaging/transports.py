"""Sending one delivery to its channel: Apprise for the chat services, Django's mail for
e-mail, and the signed JSON webhook here (Apprise's json:// does not sign).

Each send either returns (the service took it) or raises ``SendFailed`` with a reason fit
for the delivery record: never an address, a token or a secret.
"""

import hashlib
import hmac
import json
import logging
import re
import smtplib
import time
from dataclasses import dataclass

import apprise
import requests
from django.conf import settings
from django.core.mail import send_mail

from portal.messaging import kinds
from portal.messaging.models import Channel

Kind = Channel.Kind

SIGNATURE_HEADER = "X-Portal-Signature"
TIMESTAMP_HEADER = "X-Portal-Timestamp"
EVENT_HEADER = "X-Portal-Event"
DELIVERY_HEADER = "X-Portal-Delivery"
REASON_LENGTH = 300


class SendFailed(Exception):
    def __init__(self, reason: str, *, retryable: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable


@dataclass(frozen=True)
class Outgoing:
    """What is sent: one delivery, already written in its language."""

    delivery_id: int
    event: str
    project: str
    language: str
    subject: str
    text: str
    link: str


def send(kind: str, secrets: dict[str, str], message: Outgoing) -> None:
    """Send ``message`` once to the channel; raise SendFailed when it did not go."""
    try:
        if kind == Kind.WEBHOOK:
            _webhook(secrets, message)
        elif kind == Kind.EMAIL:
            _email(secrets, message)
        else:
            _apprise(kind, secrets, message)
    except SendFailed as failure:
        failure.reason = scrub(failure.reason, secrets)
        raise


def scrub(reason: str, secrets: dict[str, str]) -> str:
    """``reason`` with every part of the address and secret taken out, and bounded."""
    for word in kinds.secret_words(secrets):
        reason = reason.replace(word, "…")
    return " ".join(reason.split())[:REASON_LENGTH]


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """The webhook's signature: HMAC-SHA256 over ``timestamp + "." + body``, in hex."""
    signed = timestamp.encode() + b"." + body
    return "sha256=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def webhook_body(message: Outgoing) -> bytes:
    payload = {
        "id": message.delivery_id,
        "event": message.event,
        "project": message.project,
        "language": message.language,
        "subject": message.subject,
        "text": message.text,
        "link": message.link,
    }
    return json.dumps(payload, ensure_ascii=False, sort_keys=True).encode()


def _webhook(secrets: dict[str, str], message: Outgoing) -> None:
    body = webhook_body(message)
    timestamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/json; charset=utf-8",
        "User-Agent": "GPU-Portal",
        EVENT_HEADER: message.event,
        DELIVERY_HEADER: str(message.delivery_id),
        TIMESTAMP_HEADER: timestamp,
        SIGNATURE_HEADER: signature(secrets["secret"], timestamp, body),
    }
    timeout = settings.PORTAL_MESSAGING_TIMEOUT_SECONDS
    try:
        answer = requests.post(
            secrets["address"],
            data=body,
            headers=headers,
            timeout=(timeout, timeout),
            allow_redirects=False,
        )
    except requests.Timeout:
        raise SendFailed(f"no answer within {timeout} s", retryable=True) from None
    except requests.RequestException as error:
        raise SendFailed(f"could not connect ({type(error).__name__})", retryable=True) from None
    if not 200 <= answer.status_code < 300:
        raise SendFailed(
            f"the receiver answered HTTP {answer.status_code}",
            retryable=_retryable_status(answer.status_code),
        )


def _email(secrets: dict[str, str], message: Outgoing) -> None:
    try:
        send_mail(
            message.subject,
            message.text,
            settings.DEFAULT_FROM_EMAIL,
            [secrets["address"]],
            fail_silently=False,
        )
    except (smtplib.SMTPException, OSError) as error:
        raise SendFailed(
            f"the mail server refused it ({type(error).__name__})", retryable=True
        ) from None


HTTP_STATUS = re.compile(r"error=(\d{3})")


def _apprise(kind: str, secrets: dict[str, str], message: Outgoing) -> None:
    # Apprise keeps nothing on disk for us, and sends as plain text (no Markdown surprises).
    asset = apprise.AppriseAsset(storage_mode=apprise.PersistentStoreMode.MEMORY)
    sender = apprise.Apprise(asset=asset)
    url = kinds.apprise_url(kind, secrets, timeout=settings.PORTAL_MESSAGING_TIMEOUT_SECONDS)
    if not sender.add(url):
        raise SendFailed("the address was not understood", retryable=False)
    # Apprise answers only True or False; why it failed is in its warnings (which name the
    # HTTP status or the connection error, never the token: scrubbed anyway).
    with apprise.LogCapture(level=logging.WARNING, fmt="%(message)s") as said:
        sent = sender.notify(
            title=message.subject, body=message.text, body_format=apprise.NotifyFormat.TEXT
        )
    if sent:
        return
    why = " ".join(said.getvalue().split()) or "the service did not take it"
    status = HTTP_STATUS.search(why)
    retryable = _retryable_status(int(status.group(1))) if status else True
    raise SendFailed(why, retryable=retryable)


def _retryable_status(status: int) -> bool:
    """A server's trouble or a rate limit may pass; another refusal will not."""
    return status >= 500 or status in (408, 429)
