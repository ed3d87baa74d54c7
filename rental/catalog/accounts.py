"""Provider accounts: their settings and credentials in, validation against the driver."""

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from portal import access, audit
from portal.errors import Conflict, InvalidInput, InvalidTransition, NotPermitted
from portal.text import plain_text, text_problem
from rental.models import ProviderAccount
from rental.providers.account_options import OptionProblem
from rental.providers.base import ProviderError
from rental.providers.registry import DRIVERS, clean_account_options, get_provider


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
    with the provider's message. An account without credentials has nothing to check."""
    if not account.has_credentials:
        raise InvalidTransition(
            _("“%(name)s” has no credentials to validate.") % {"name": account.name},
            code="no_credentials",
        )
    now = timezone.now()
    try:
        get_provider(account.config()).validate()
    except ProviderError as exc:
        status, message = ProviderAccount.Status.FAILED, f"{exc.kind}: {exc.message}"
    except ImproperlyConfigured:
        # Stored under a key no longer in PORTAL_ENCRYPTION_KEYS: the account cannot reach
        # its cloud until the key is restored or the credentials are entered again.
        status = ProviderAccount.Status.FAILED
        message = str(
            _(
                "The stored credentials cannot be decrypted with the configured encryption "
                "keys: restore the old key or enter the credentials again."
            )
        )
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


# What a change must touch for the stored validation result to be stale.
CONNECTION_FIELDS = ("driver", "regions", "endpoint_url")
ACCOUNT_FIELDS = ("name", *CONNECTION_FIELDS, "is_active", "options")


def save_account(
    *,
    actor,
    account: ProviderAccount | None = None,
    changes: dict[str, Any],
    credentials: dict[str, str] | None = None,
    source: str = "web",
) -> ProviderAccount:
    """Create an account (``account`` None) or change the named fields of one (admins).

    New credentials go through ``set_credentials`` (encrypted, audited by the key id's last
    four characters only). A change of credentials or of how the cloud is reached makes the
    account unverified and, once that is committed, it is validated with the provider, as
    the admin's page does: the provider call is never made inside the transaction."""
    if not access.is_admin(actor):
        raise NotPermitted(_("Only admins configure provider accounts."))
    unknown = set(changes) - set(ACCOUNT_FIELDS)
    if unknown:
        raise InvalidInput(_("This cannot be changed here."), field=sorted(unknown)[0])
    if "name" in changes:
        changes = {
            **changes,
            "name": plain_text(changes["name"], field="name", max_length=80, label=_("Name")),
        }
    entry = DRIVERS.get(changes.get("driver", ""))
    if entry is not None and (account is None or account.driver != entry.name):
        missing = entry.missing()  # an SDK or program this installation lacks
        if missing:
            raise Conflict(missing, code="driver_not_installed", field="driver")
    if "options" in changes or "driver" in changes:
        changes = {**changes, "options": _checked_options(account, changes)}
    given = credentials or {}
    for field in ("access_key_id", "secret_access_key", "session_token"):
        # Never shown, but an invisible character in a key is a key that cannot work.
        problem = text_problem(str(given.get(field) or ""))
        if problem:
            raise InvalidInput(problem, field=field)
    with transaction.atomic():
        account, reconnect = _save_fields(
            actor=actor, account=account, changes=changes, source=source
        )
        if credentials is not None:
            account = set_credentials(actor=actor, account=account, source=source, **credentials)
    if (reconnect or credentials is not None) and account.has_credentials:
        account = validate_account(actor=actor, account=account, source=source)
    return account


def _checked_options(account: ProviderAccount | None, changes: dict[str, Any]) -> dict:
    """The options the account will have, checked against the driver it will have."""
    driver = changes.get("driver", account.driver if account else "")
    options = changes.get("options", account.options if account else {})
    try:
        return clean_account_options(driver, options)
    except OptionProblem as problem:
        raise Conflict(str(problem), code="invalid_option", field=problem.path) from None


def _save_fields(
    *, actor, account: ProviderAccount | None, changes: dict[str, Any], source: str
) -> tuple[ProviderAccount, bool]:
    creating = account is None
    if creating:
        missing = [name for name in ("name", "driver", "regions") if name not in changes]
        if missing:
            raise InvalidInput(
                _("A new provider account needs a name, a driver and regions."),
                field=missing[0],
            )
        account = ProviderAccount()
    else:
        account = ProviderAccount.objects.select_for_update().get(pk=account.pk)
    name = changes.get("name", account.name)
    if ProviderAccount.objects.filter(name=name).exclude(pk=account.pk).exists():
        raise Conflict(
            _("Another provider account is named %(name)s.") % {"name": name},
            code="name_taken",
            field="name",
        )
    before = {field: getattr(account, field) for field in changes} if not creating else {}
    changed = [f for f in changes if creating or getattr(account, f) != changes[f]]
    for field in changed:
        setattr(account, field, changes[field])
    reconnect = not creating and bool(set(changed) & set(CONNECTION_FIELDS))
    if reconnect:
        account.status, account.status_message = ProviderAccount.Status.UNVERIFIED, ""
    try:
        with transaction.atomic():
            account.save()
    except IntegrityError:  # the same name saved at the same moment
        raise Conflict(
            _("Another provider account is named %(name)s.") % {"name": name},
            code="name_taken",
            field="name",
        ) from None
    if creating or changed:
        audit.record(
            actor=actor,
            verb="provider_account.created" if creating else "provider_account.changed",
            obj=account,
            source=source,
            before={field: before[field] for field in changed if field in before},
            after={field: changes[field] for field in changed},
        )
    return account, reconnect


def shared_cloud_account(account: ProviderAccount) -> list[str]:
    """The names of the other accounts of this installation that reach the same cloud
    account as ``account`` (as the last syncs found it), sorted; empty when none or unknown."""
    if not account.cloud_account_id:
        return []
    return list(
        ProviderAccount.objects.filter(cloud_account_id=account.cloud_account_id)
        .exclude(pk=account.pk)
        .order_by("name")
        .values_list("name", flat=True)
    )
