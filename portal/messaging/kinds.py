"""Each kind of channel's address: what a manager pastes (the service's webhook URL, as
the service shows it), how it is checked, how a page names it without its secret, and
the Apprise URL that sends to it."""

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.core.validators import EmailValidator
from django.utils.translation import gettext as _

from portal.errors import InvalidInput
from portal.messaging.models import Channel

Kind = Channel.Kind

# The addresses the services give out (and Apprise's own form of each, also accepted).
PATTERNS = {
    Kind.SLACK: [
        r"https://hooks\.slack\.com/services/(?P<a>[A-Z0-9]+)/(?P<b>[A-Z0-9]+)/(?P<c>[A-Za-z0-9]+)/?",
        r"slack://(?P<a>[A-Z0-9]+)/(?P<b>[A-Z0-9]+)/(?P<c>[A-Za-z0-9]+)/?",
    ],
    Kind.FEISHU: [
        r"https://open\.feishu\.cn/open-apis/bot/v2/hook/(?P<token>[A-Za-z0-9_-]+)/?",
        r"feishu://(?P<token>[A-Za-z0-9_-]+)/?",
    ],
    Kind.DINGTALK: [
        r"https://oapi\.dingtalk\.com/robot/send\?access_token=(?P<token>[A-Za-z0-9]+)",
        r"dingtalk://(?P<token>[A-Za-z0-9]+)/?",
    ],
    Kind.WECOM: [
        r"https://qyapi\.weixin\.qq\.com/cgi-bin/webhook/send\?key=(?P<key>[A-Za-z0-9_-]+)",
        r"wecombot://(?P<key>[A-Za-z0-9_-]+)/?",
    ],
}

EXAMPLES = {
    Kind.SLACK: "https://hooks.slack.com/services/T…/B…/…",
    Kind.FEISHU: "https://open.feishu.cn/open-apis/bot/v2/hook/…",
    Kind.DINGTALK: "https://oapi.dingtalk.com/robot/send?access_token=…",
    Kind.WECOM: "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=…",
    Kind.EMAIL: "team-gpu@example.com",
    Kind.WEBHOOK: "https://example.com/hooks/gpu-portal",
}

WEBHOOK_SECRET_MIN = 16
DINGTALK_SECRET = re.compile(r"[A-Za-z0-9]{1,200}")


@dataclass(frozen=True)
class Address:
    """A checked address: what is stored encrypted, and what a page may show."""

    secrets: dict[str, str]
    hint: str


def check(kind: str, address: str, secret: str) -> Address:
    """The channel's address and secret as stored, or InvalidInput naming the field."""
    address = address.strip()
    secret = secret.strip()
    if not address:
        raise InvalidInput(_("Give the channel's address."), field="address")
    if kind in PATTERNS:
        if _match(kind, address) is None:
            raise InvalidInput(
                _("This is not a %(kind)s webhook address; it looks like %(example)s")
                % {"kind": Kind(kind).label, "example": EXAMPLES[kind]},
                field="address",
            )
        if kind == Kind.DINGTALK and secret and not DINGTALK_SECRET.fullmatch(secret):
            raise InvalidInput(
                _("A DingTalk signing secret is letters and digits (it starts with SEC)."),
                field="secret",
            )
        host = urlsplit(EXAMPLES[kind]).hostname or ""
        return Address({"address": address, "secret": secret}, hint=host)
    if kind == Kind.EMAIL:
        try:
            EmailValidator()(address)
        except ValidationError:
            raise InvalidInput(_("Give one e-mail address."), field="address") from None
        return Address({"address": address}, hint="…@" + address.rpartition("@")[2])
    if kind == Kind.WEBHOOK:
        parts = urlsplit(address)
        if parts.scheme not in ("http", "https") or not parts.hostname or len(address) > 2000:
            raise InvalidInput(
                _("Give the receiver's address, starting with https://"), field="address"
            )
        if len(secret) < WEBHOOK_SECRET_MIN:
            raise InvalidInput(
                _("Give a signing secret of at least %(n)s characters.")
                % {"n": WEBHOOK_SECRET_MIN},
                field="secret",
            )
        return Address({"address": address, "secret": secret}, hint=parts.hostname)
    raise InvalidInput(_("Choose a kind of channel."), field="kind")


def _match(kind: str, address: str) -> re.Match | None:
    for pattern in PATTERNS[kind]:
        found = re.fullmatch(pattern, address)
        if found:
            return found
    return None


def apprise_url(kind: str, secrets: dict[str, str], *, timeout: int) -> str:
    """The Apprise URL for a checked chat address, with its connect and read timeouts."""
    found = _match(kind, secrets["address"])
    assert found is not None, "addresses are checked when they are stored"
    if kind == Kind.SLACK:
        url = "slack://{a}/{b}/{c}/".format(**found.groupdict())
    elif kind == Kind.FEISHU:
        url = "feishu://{token}/".format(**found.groupdict())
    elif kind == Kind.DINGTALK:
        signing = f"{secrets['secret']}@" if secrets.get("secret") else ""
        url = "dingtalk://{signing}{token}/".format(signing=signing, **found.groupdict())
    else:
        url = "wecombot://{key}/".format(**found.groupdict())
    return f"{url}?cto={timeout}&rto={timeout}"


def secret_words(secrets: dict[str, str]) -> list[str]:
    """Every part of an address that must never reach a record or a log line."""
    words = {value for value in secrets.values() if value}
    for value in list(words):
        words.update(part for part in re.split(r"[/?=&@:]", value) if len(part) >= 6)
    return sorted(words, key=len, reverse=True)
