"""Re-encrypt every stored secret with the newest encryption key: provider accounts'
credentials (each an audit event), the identity provider's client secret, the chat
channels' addresses and the own GPU servers' private keys.

Rotation: put a new Fernet key first in PORTAL_ENCRYPTION_KEYS (keep the old ones after
it), restart, run this command, then drop the old keys. The credentials are decrypted in
memory only and never printed.
"""

from typing import Any

from cryptography.fernet import InvalidToken
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils.translation import gettext as _

from portal import audit, crypto
from portal.messaging.models import Channel
from portal.models import AuditEvent
from portal.sso.models import IdentityProvider
from rental.models import OwnHost, ProviderAccount


class Command(BaseCommand):
    @property
    def help(self) -> str:  # argparse needs a str, so translate when asked, not lazily
        return _(
            "Re-encrypt every provider account's stored credentials with the first key of "
            "PORTAL_ENCRYPTION_KEYS, writing one audit event per account. Run it after putting "
            "a new key first; remove the old keys only once it has succeeded."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        rotated = 0
        unreadable: list[str] = []
        account_ids = (
            ProviderAccount.objects.exclude(credentials_encrypted="")
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        for account_id in account_ids:
            with transaction.atomic():
                account = ProviderAccount.objects.select_for_update().get(pk=account_id)
                if not account.credentials_encrypted:
                    continue
                try:
                    account.credentials_encrypted = crypto.rotate(account.credentials_encrypted)
                except InvalidToken:
                    unreadable.append(account.name)
                    continue
                account.save(update_fields=["credentials_encrypted"])
                audit.record(
                    actor=None,
                    verb="provider_account.credentials_rotated",
                    obj=account,
                    source=AuditEvent.Source.COMMAND,
                )
                rotated += 1
        self.stdout.write(
            _("Re-encrypted the credentials of %(count)d provider account(s) with the first key.")
            % {"count": rotated}
        )
        others = 0
        for model, field, name in (
            (IdentityProvider, "client_secret_encrypted", lambda row: str(row)),
            (Channel, "secrets_encrypted", lambda row: f"{row.project.slug}/{row.name}"),
            # Own GPU servers' private keys (their hosts are named by site and server).
            (OwnHost, "private_key_encrypted", lambda row: f"{row.account.name}/{row.name}"),
        ):
            ids = model.objects.exclude(**{field: ""}).order_by("pk").values_list("pk", flat=True)
            for pk in ids:
                with transaction.atomic():
                    row = model.objects.select_for_update().get(pk=pk)
                    try:
                        setattr(row, field, crypto.rotate(getattr(row, field)))
                    except InvalidToken:
                        unreadable.append(name(row))
                        continue
                    row.save(update_fields=[field])
                    others += 1
        self.stdout.write(
            _("Re-encrypted %(count)d other secret(s): the identity provider's, chat channels'.")
            % {"count": others}
        )
        if unreadable:
            raise CommandError(
                _(
                    "No key in PORTAL_ENCRYPTION_KEYS decrypts the credentials of: %(names)s. "
                    "Put their old key back (after the new one) and run again, or enter new "
                    "credentials for them in the admin."
                )
                % {"names": ", ".join(unreadable)}
            )
