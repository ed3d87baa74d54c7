"""The company's own GPU servers as admins register them: a host of a provider account
whose driver is ``ssh``, reached with a private key that is stored encrypted and never
shown again. Every change is audited; the key itself never reaches an audit row, a page
or a log line (only "changed")."""

from typing import Any

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.serialization import (
    load_pem_private_key,
    load_ssh_private_key,
)
from django.db import transaction
from django.utils.translation import gettext as _

from portal import access, audit
from portal.errors import InvalidInput, NotPermitted
from rental.models import OwnHost

# What an audit row keeps of a host (never the key: only whether it changed).
AUDITED_FIELDS = (
    "account_id",
    "name",
    "address",
    "port",
    "username",
    "host_key",
    "purchase_price",
    "currency",
    "amortisation_months",
    "in_service_since",
    "power_price_per_gpu_hour",
    "is_active",
)
# A private key is a few kilobytes at most (an RSA key of 16,384 bits is about 12 KB).
MAX_KEY_LENGTH = 16_000


def private_key_problem(text: str) -> str:
    """Why ``text`` is not a private key the portal can log in with ("" when it is): an
    OpenSSH or PEM private key, not protected by a passphrase. The message never quotes
    the text."""
    data = text.strip().encode()
    if len(data) > MAX_KEY_LENGTH or b"PRIVATE KEY-----" not in data:
        return _(
            "Paste a private key in OpenSSH or PEM form (it begins with “-----BEGIN” and "
            "ends with “PRIVATE KEY-----”)."
        )
    try:
        if data.startswith(b"-----BEGIN OPENSSH PRIVATE KEY-----"):
            load_ssh_private_key(data, password=None)
        else:
            load_pem_private_key(data, password=None)
    except TypeError:
        return _(
            "This key is protected by a passphrase: the portal logs in unattended and needs "
            "a key without one."
        )
    except (ValueError, NotImplementedError, UnsupportedAlgorithm):
        return _("This is not a private key the portal can read (damaged, or of an unknown type).")
    return ""


def _snapshot(host: OwnHost) -> dict[str, Any]:
    return {name: getattr(host, name) for name in AUDITED_FIELDS}


def save_host(
    *, actor: Any, host: OwnHost, private_key: str = "", source: str = "admin"
) -> OwnHost:
    """Create or change ``host`` as its fields are set now (admins). A non-empty
    ``private_key`` replaces the stored one, encrypted; empty keeps it. A new host needs a
    key. Raises InvalidInput naming the field at fault. Audited as ``own_host.saved`` with
    what changed; the key as "changed" only."""
    if not access.is_admin(actor):
        raise NotPermitted(_("Only admins register own GPU servers."))
    if private_key:
        problem = private_key_problem(private_key)
        if problem:
            raise InvalidInput(
                _("Private key: %(problem)s") % {"problem": problem}, field="private_key"
            )
    elif not host.has_private_key:
        raise InvalidInput(
            _("Private key: enter the key the portal logs in with."), field="private_key"
        )
    with transaction.atomic():
        before = {}
        if host.pk is not None:
            old = OwnHost.objects.select_for_update().filter(pk=host.pk).first()
            before = _snapshot(old) if old is not None else {}
        if private_key:
            host.set_private_key(private_key.strip() + "\n")
        host.save()
        after = _snapshot(host)
        changed = {name: value for name, value in after.items() if before.get(name) != value}
        if private_key:
            changed["private_key"] = "changed"
        audit.record(
            actor=actor,
            verb="own_host.saved",
            obj=host,
            source=source,
            before={name: before[name] for name in changed if name in before},
            after=changed,
        )
    return host


@transaction.atomic
def delete_host(*, actor: Any, host: OwnHost, source: str = "admin") -> None:
    """Remove a host (admins); audited as ``own_host.deleted`` with what it was."""
    if not access.is_admin(actor):
        raise NotPermitted(_("Only admins register own GPU servers."))
    before = _snapshot(host)
    audit.record(actor=actor, verb="own_host.deleted", obj=host, source=source, before=before)
    host.delete()
