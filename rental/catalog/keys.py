"""Engineers' SSH public keys: checked (type, length), fingerprinted, installed at launch."""

import base64
import binascii
import struct

from django.db import IntegrityError, transaction
from django.utils.translation import gettext as _

from portal import audit
from portal.errors import Conflict, InvalidInput, NotPermitted
from portal.text import ALLOWED, SPACE, plain_text
from rental.models import SshKey
from rental.models.leases import SSH_KEY_TYPES

MIN_RSA_BITS = 2048
MAX_KEY_LENGTH = 16_384
# A public key's shape: a known type, base64 (whole groups of four), an optional comment.
KEY_PATTERN = (
    f"^{SPACE}*(?:"
    + "|".join(kind.replace(".", r"\.") for kind in SSH_KEY_TYPES)
    + f"){SPACE}+"
    + r"(?:[A-Za-z0-9+/]{4})+(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?"
    + f"(?:{SPACE}{ALLOWED}*)?$"
)
KEY_NAME_LENGTH = SshKey._meta.get_field("name").max_length


def _fields(blob: bytes) -> list[bytes]:
    fields, offset = [], 0
    while offset < len(blob):
        if offset + 4 > len(blob):
            raise ValueError("truncated")
        (size,) = struct.unpack(">I", blob[offset : offset + 4])
        offset += 4
        if offset + size > len(blob):
            raise ValueError("truncated")
        fields.append(blob[offset : offset + size])
        offset += size
    return fields


def check_public_key(value: str) -> tuple[str, int | None]:
    """The key's type and, for RSA, its size in bits. A text that is not shaped as an
    OpenSSH public key (``KEY_PATTERN``, which the API's schema gives) is InvalidInput;
    one so shaped whose body is not a key of its type, or is too weak, is a Conflict
    (``malformed_key``, ``weak_key``): only decoding it tells."""
    text = " ".join(value.split())
    if len(text) > MAX_KEY_LENGTH:
        raise InvalidInput(_("That is too long for a public key."), field="public_key")
    parts = text.split(" ")
    if len(parts) < 2 or parts[0] not in SSH_KEY_TYPES:
        if "PRIVATE KEY" in value:
            raise InvalidInput(
                _("That is a private key. Paste the public one (the .pub file)."),
                field="public_key",
            )
        raise InvalidInput(
            _("Paste an OpenSSH public key, e.g. 'ssh-ed25519 AAAA… you@host'."),
            field="public_key",
        )
    try:
        fields = _fields(base64.b64decode(parts[1], validate=True))
    except (binascii.Error, ValueError):
        raise _malformed(_("The key's base64 part is not valid.")) from None
    if not fields or fields[0] != parts[0].encode():
        raise _malformed(_("The key's body does not match its type."))
    bits = None
    if parts[0] == "ssh-rsa":
        if len(fields) != 3:
            raise _malformed(_("The RSA key is malformed."))
        bits = int.from_bytes(fields[2], "big").bit_length()
        if bits < MIN_RSA_BITS:
            raise Conflict(
                _("RSA keys must have at least %(min)s bits; this one has %(bits)s.")
                % {"min": MIN_RSA_BITS, "bits": bits},
                code="weak_key",
                field="public_key",
            )
    elif parts[0] == "ssh-ed25519" and (len(fields) != 2 or len(fields[1]) != 32):
        raise _malformed(_("The Ed25519 key is malformed."))
    return parts[0], bits


def _malformed(message: str) -> Conflict:
    return Conflict(message, code="malformed_key", field="public_key")


@transaction.atomic
def add_ssh_key(*, actor, name: str, public_key: str, source: str = "web") -> SshKey:
    name = plain_text(name, field="name", max_length=KEY_NAME_LENGTH, label=_("Name"))
    if not name:
        raise InvalidInput(_("Give the key a name."), field="name")
    check_public_key(public_key)
    normalized = " ".join(public_key.split())
    if SshKey.objects.filter(user=actor, public_key=normalized).exists():
        raise Conflict(_("You have added this key already."), code="key_taken", field="public_key")
    try:
        with transaction.atomic():
            key = SshKey.objects.create(user=actor, name=name[:60], public_key=normalized)
    except IntegrityError:
        raise Conflict(
            _("You already have a key with this name."), code="name_taken", field="name"
        ) from None
    audit.record(
        actor=actor, verb="ssh_key.added", obj=key, source=source, after={"name": key.name}
    )
    return key


@transaction.atomic
def delete_ssh_key(*, actor, key: SshKey, source: str = "web") -> None:
    if key.user_id != actor.pk:
        raise NotPermitted(_("This is not your key."))
    audit.record(
        actor=actor, verb="ssh_key.deleted", obj=key, source=source, before={"name": key.name}
    )
    key.delete()


# --- Which keys a lease installs -------------------------------------------------------


def check_lease_keys(*, requester, keys: list[SshKey] | None) -> list[SshKey]:
    """The keys a lease of ``requester`` may install: only their own."""
    keys = list(keys or [])
    if any(key.user_id != requester.pk for key in keys):
        raise InvalidInput(
            _("Only your own SSH keys can be installed on your lease."), field="ssh_keys"
        )
    return keys


def keys_for_launch(lease) -> list[str]:
    """The public keys the lease's instances get in authorized_keys: the keys chosen for
    the lease; a lease with none recorded (made before the choice, or re-queued) gets all
    of its requester's keys."""
    chosen = list(lease.ssh_keys.all())
    keys = chosen or list(lease.requester.ssh_keys.all())
    return [key.public_key.strip() for key in keys]
