"""Single sign-on's section of a project's configuration document
(``portal/projectconfig.py``): ``idp_groups``, the identity-provider groups whose people
are the project's engineers or managers, named in ``PORTAL_PROJECT_CONFIG_SECTIONS``::

    idp_groups:
      - group: ml-team
        role: engineer
      - group: ml-leads
        role: manager

Applied through ``portal.sso.mappings``, so only an admin changes it (a manager's
document that changes it is refused, naming the path); a document without the key
leaves the project's groups as they are. Admin and finance groups belong to no project:
they are set in the admin or with ``PORTAL_OIDC_ADMIN_GROUPS`` /
``PORTAL_OIDC_FINANCE_GROUPS``.
"""

from typing import Any

from django.utils.translation import gettext as _

from portal.errors import DomainError
from portal.models import Project
from portal.projectconfig import SOURCE, arrow, prefixed
from portal.projectconfig_schema import fail, mapping, text
from portal.sso import mappings
from portal.sso.models import GroupRole

KEYS = ("idp_groups",)
ENTRY_KEYS = ("group", "role")


def _rows(project: Project | None) -> dict[str, str]:
    if project is None:
        return {}
    return dict(
        GroupRole.objects.filter(project=project).order_by("group").values_list("group", "role")
    )


def read(project: Project | None) -> dict[str, Any]:
    return {
        "idp_groups": [{"group": group, "role": role} for group, role in _rows(project).items()]
    }


def validate(key: str, value: Any) -> list[dict[str, str]] | None:
    """A list of {group, role}, each group once; None when the key is absent."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise fail(key, _("must be a list"))
    seen: set[str] = set()
    entries = []
    for index, item in enumerate(value):
        path = f"{key}[{index}]"
        mapping(item, path, ENTRY_KEYS, ENTRY_KEYS)
        group = text(item["group"], f"{path}.group", max_length=200)
        if item["role"] not in GroupRole.PROJECT_ROLES:
            raise fail(f"{path}.role", _("must be “engineer” or “manager”"))
        if group in seen:
            raise fail(f"{path}.group", _("names the group “%(group)s” twice") % {"group": group})
        seen.add(group)
        entries.append({"group": group, "role": str(item["role"])})
    return entries


def changes(key: str, want: list[dict[str, str]] | None, *, project: Project | None) -> list[str]:
    if want is None:
        return []
    have = _rows(project)
    wanted = {entry["group"]: entry["role"] for entry in want}
    return [
        f"{key}[{group}]: {arrow(have.get(group), wanted.get(group))}"
        for group in sorted(set(have) | set(wanted))
        if have.get(group) != wanted.get(group)
    ]


def apply(key: str, want: list[dict[str, str]] | None, *, project: Project, actor: Any) -> None:
    if want is None or not changes(key, want, project=project):
        return
    wanted = {entry["group"]: entry["role"] for entry in want}
    try:
        for index, entry in enumerate(want):
            try:
                mappings.add_group_role(
                    actor=actor,
                    group=entry["group"],
                    role=entry["role"],
                    project=project,
                    source=SOURCE,
                )
            except DomainError as error:
                raise prefixed(error, f"{key}[{index}]") from None
        for row in GroupRole.objects.filter(project=project).exclude(group__in=list(wanted)):
            mappings.remove_group_role(actor=actor, row=row, source=SOURCE)
    except DomainError as error:
        if error.field and error.field.startswith(key):
            raise
        raise prefixed(error, key) from None
