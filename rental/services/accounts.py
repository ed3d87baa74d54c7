"""Provider accounts: credentials in, validation against the driver."""

from django.db import transaction
from django.utils import timezone

from portal import audit
from rental.models import ProviderAccount
from rental.providers.base import ProviderError
from rental.providers.registry import get_provider


@transaction.atomic
def set_credentials(
    *,
    actor,
    account: ProviderAccount,
    access_key_id: str,
    secret_access_key: str,
    session_token: str = "",
    source: str = "admin",
) -> ProviderAccount:
    """Store new credentials encrypted; the account is unverified until validated.
    The audit event names the key id's last four characters only."""
    account.set_credentials(
        access_key_id=access_key_id,
        secret_access_key=secret_access_key,
        session_token=session_token,
    )
    account.status = ProviderAccount.Status.UNVERIFIED
    account.status_message = ""
    account.save()
    audit.record(
        actor=actor,
        verb="provider_account.credentials_set",
        obj=account,
        source=source,
        after={"access_key_id": f"…{access_key_id[-4:]}"},
    )
    return account


def validate_account(*, actor, account: ProviderAccount, source: str = "admin") -> ProviderAccount:
    """Call the driver's validate() (outside any transaction) and record ok or failed
    with the provider's message."""
    now = timezone.now()
    try:
        get_provider(account.config()).validate()
    except ProviderError as exc:
        status, message = ProviderAccount.Status.FAILED, f"{exc.kind}: {exc.message}"
    else:
        status, message = ProviderAccount.Status.OK, ""
    with transaction.atomic():
        locked = ProviderAccount.objects.select_for_update().get(pk=account.pk)
        before = locked.status
        locked.status, locked.status_message, locked.checked_at = status, message[:2000], now
        locked.save(update_fields=["status", "status_message", "checked_at"])
        audit.record(
            actor=actor,
            verb="provider_account.validated",
            obj=locked,
            source=source,
            at=now,
            before={"status": before},
            after={"status": status, "message": message[:200]},
        )
    return locked
