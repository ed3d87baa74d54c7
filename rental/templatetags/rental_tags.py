"""The rows of the projects list and of a project page's leases, and a quota's
auto-approve panel, each drawn in one step.

Each page shows 25 rows. Drawn by the template, a row was a dozen variables, filters and
tags, and the template engine's own work for each (looking the value up, filtering,
localizing, escaping: 10–20 µs apiece on the bench machine) was most of the page's
drawing: about 2 of 9 ms of the projects list, 4 of 22 ms of a project's page. These
tags write the same markup, escaping every value as the template did (``escaped``),
with the same cells (``moment``, ``label``, the pills) and the same words, translated
once per language. ``tests/rental/views/test_row_tags.py`` holds each to the template it
replaces, word for word, in English and in Chinese.

A quota's auto-approve panel on the project page (``auto_approve``: the limits and caps
in words, a manager's and an admin's forms) is drawn in one step too: as a template,
with a dozen tests of which form was refused, it cost about 0.35 ms a quota, 0.7 of the
4 ms the page's drawing took with two quotas. ``test_auto_approve_tag.py`` (beside the
row test) holds it to the template it replaced, kept there as the reference, in every
state of the forms.
"""

from dataclasses import dataclass
from functools import cache
from typing import Any

from django import template
from django.template.defaulttags import CsrfTokenNode
from django.urls import reverse
from django.utils.safestring import SafeString, mark_safe
from django.utils.timezone import template_localtime
from django.utils.translation import get_language, gettext, gettext_lazy, ngettext

from portal.choice_labels import choice_label
from portal.templatetags.portal_tags import escaped, moment, status_pill, tier_pill

register = template.Library()

ROW = (
    "<tr>\n"
    '          <td><a class="strong" href="{url}">#{pk}</a></td>\n'
    "          <td>{requester}</td>\n"
    '          <td class="nowrap">{count} × {model}<div class="muted small">'
    "{market} · {priority}</div></td>\n"
    "          <td>{tier}</td>\n"
    '          <td data-label="{label_status}">{status}</td>\n'
    '          <td class="nowrap small" data-label="{label_ends}">{ends}</td>\n'
    "        </tr>"
)


@register.simple_tag
def project_lease_row(lease: Any, label_status: str, label_ends: str) -> SafeString:
    """One lease in progress on its project's page: its number, who asked, its GPUs,
    market and priority, tier, status and end (as the ``moment`` filter draws it, in the
    request's time zone)."""
    row = ROW.format(
        url=escaped(lease.get_absolute_url()),
        pk=escaped(lease.pk),
        requester=escaped(lease.requester_name),
        count=escaped(lease.gpu_count),
        model=escaped(lease.gpu_model.name),
        market=escaped(choice_label(lease, "market")),
        priority=escaped(choice_label(lease, "priority")),
        tier=escaped(tier_pill(lease)),
        label_status=escaped(label_status),
        status=escaped(status_pill(lease)),
        label_ends=escaped(label_ends),
        ends=escaped(moment(template_localtime(lease.end), "M j, H:i")),
    )
    return mark_safe(row)  # every value escaped above


# The words of a row of the projects list, as its header says them.
PROJECT_WORDS = {
    "cost_center": gettext_lazy("Cost center"),
    "your_role": gettext_lazy("Your role"),
    "members": gettext_lazy("Members"),
    "running_leases": gettext_lazy("Running leases"),
    "gpus_running": gettext_lazy("GPUs running"),
    "manager": gettext_lazy("Manager"),
    "engineer": gettext_lazy("Engineer"),
    "inactive": gettext_lazy("Inactive"),
}
PROJECT_ROW = (
    '<tr id="project-row-{slug}"{muted}>\n'
    '      <td><a class="strong" href="{url}">{name}</a>'
    ' <span class="muted small mono">{slug}</span>{inactive_pill}</td>\n'
    '      <td data-label="{cost_center}">{cost}</td>\n'
    '      <td data-label="{your_role}">{role}</td>\n'
    '      <td class="num" data-label="{members}">{members_count}</td>\n'
    '      <td class="num" data-label="{running_leases}">{live_leases}</td>\n'
    '      <td class="num strong" data-label="{gpus_running}">{running_gpus}</td>\n'
    "    </tr>"
)
NO_ROLE = '<span class="muted">—</span>'


@cache
def _project_words(language: str | None) -> dict[str, str]:
    """The row's words in ``language``, the language active when first asked, escaped."""
    return {key: escaped(word) for key, word in PROJECT_WORDS.items()}


@register.simple_tag
def project_row(project: Any, role: str | None) -> SafeString:
    """One project of the projects list: its name and slug (and Inactive), cost center,
    the person's role in it, and its members, running leases and GPUs."""
    words = _project_words(get_language())
    inactive = (
        ""
        if project.is_active
        else (f' <span class="pill pill-status-cancelled">{words["inactive"]}</span>')
    )
    row = PROJECT_ROW.format(
        **words,
        slug=escaped(project.slug),
        muted="" if project.is_active else ' class="is-muted"',
        url=escaped(project.get_absolute_url()),
        name=escaped(project.name),
        inactive_pill=inactive,
        cost=escaped(project.cost_center or "—"),
        role=words[role] if role in ("manager", "engineer") else NO_ROLE,
        members_count=escaped(project.members_count),
        live_leases=escaped(project.live_leases),
        running_gpus=escaped(project.running_gpus),
    )
    return mark_safe(row)  # every value escaped above


# --- A quota's auto-approve limits --------------------------------------------------------

# The markup of ``auto_approve``, each part drawn by it.
AUTO_APPROVE = (
    '<div class="auto-approve" id="auto-approve-{pk}">\n'
    '  <p class="small" id="auto-approve-now-{pk}">\n'
    "    <strong>{auto_approve}:</strong>\n"
    "    {now}\n"
    "  </p>\n"
    '  <p class="small muted" id="auto-approve-caps-now-{pk}">{caps_now}</p>\n'
    "{forms}"
    "</div>"
)
AUTO_APPROVE_FORM = (
    '  <form method="post" action="{action}" class="form-grid form-compact" id="{form_id}">\n'
    "    {csrf}\n"
    "{fields}"
    "{other_error}"
    '    <div class="form-actions"><button type="submit" class="btn" id="{button_id}">'
    "{button}</button></div>\n"
    "  </form>\n"
)
AUTO_APPROVE_FIELD = (
    '    <div class="field{has_error}">\n'
    '      <label for="{input_id}">{label}</label>\n'
    '      <input type="number" min="0" name="{name}" id="{input_id}"{placeholder}'
    ' value="{value}">\n'
    "{error}"
    "    </div>\n"
)


def _auto_approve_words(quota: Any, max_lease_hours: Any) -> dict[str, str]:
    """The limits and the caps in words, as ``blocktranslate`` writes them: the
    translated sentence with each value escaped."""
    if quota.max_gpus_per_lease is None:
        gpus = gettext("up to %(l)s GPUs (the ceiling)") % {"l": escaped(quota.ceiling)}
    else:
        n = quota.max_gpus_per_lease
        gpus = ngettext("up to %(n)s GPU", "up to %(n)s GPUs", n) % {"n": escaped(n)}
    if quota.max_hours_per_lease is None:
        hours = gettext("up to %(h)s hours (the maximum lease)") % {"h": escaped(max_lease_hours)}
    else:
        n = quota.max_hours_per_lease
        hours = ngettext("up to %(n)s hour", "up to %(n)s hours", n) % {"n": escaped(n)}
    if quota.auto_approve_gpus_cap is None:
        cap_gpus = escaped(gettext("the ceiling"))
    else:
        n = quota.auto_approve_gpus_cap
        cap_gpus = ngettext("%(n)s GPU", "%(n)s GPUs", n) % {"n": escaped(n)}
    if quota.auto_approve_hours_cap is None:
        cap_hours = escaped(gettext("the maximum lease"))
    else:
        n = quota.auto_approve_hours_cap
        cap_hours = ngettext("%(n)s hour", "%(n)s hours", n) % {"n": escaped(n)}
    return {
        "now": gettext("%(gpus)s and %(hours)s per lease; beyond, a manager approves.")
        % {"gpus": gpus, "hours": hours},
        "caps_now": gettext("The admin lets managers raise them to %(gpus)s and %(hours)s.")
        % {"gpus": cap_gpus, "hours": cap_hours},
    }


@dataclass(frozen=True)
class _Form:
    """One of a quota's two auto-approve forms: where it posts, its ids' prefixes, its
    button and its fields as (name, id prefix, label, placeholder)."""

    route: str
    form_id: str
    button_id: str
    button: Any
    fields: tuple[tuple[str, str, Any, Any], ...]


AUTO_APPROVE_FORMS = {
    "limits": _Form(
        "rental:quota_auto_approve",
        "auto-approve-form",
        "save-auto-approve",
        gettext_lazy("Save limits"),
        (
            (
                "max_gpus_per_lease",
                "aa-gpus",
                gettext_lazy("Auto-approve: most GPUs per lease"),
                "",
            ),
            (
                "max_hours_per_lease",
                "aa-hours",
                gettext_lazy("Auto-approve: most hours per lease"),
                "",
            ),
        ),
    ),
    "caps": _Form(
        "rental:quota_auto_approve_caps",
        "auto-approve-caps-form",
        "save-auto-approve-caps",
        gettext_lazy("Save caps"),
        (
            (
                "auto_approve_gpus_cap",
                "cap-gpus",
                gettext_lazy("Admin cap: GPUs managers may auto-approve"),
                gettext_lazy("the ceiling"),
            ),
            (
                "auto_approve_hours_cap",
                "cap-hours",
                gettext_lazy("Admin cap: hours managers may auto-approve"),
                gettext_lazy("the maximum lease"),
            ),
        ),
    ),
}


def _auto_approve_form(context: Any, quota: Any, key: str) -> str:
    """The form ``AUTO_APPROVE_FORMS[key]`` for ``quota``, with a refused value and its
    error where the page was drawn again for it (``quota_errors``, keyed
    "<quota pk>:<key>"): beside its field, or below the form for another field."""
    form = AUTO_APPROVE_FORMS[key]
    errors = context.get("quota_errors") or {}
    refused = errors.get("key") == f"{quota.pk}:{key}"
    error_field = errors.get("field") if refused else None
    message = escaped(errors.get("message", "")) if refused else ""
    pk = escaped(quota.pk)
    drawn = []
    for name, prefix, label, placeholder in form.fields:
        value = (errors.get("values") or {}).get(name, "") if refused else getattr(quota, name)
        drawn.append(
            AUTO_APPROVE_FIELD.format(
                has_error=" has-error" if error_field == name else "",
                input_id=f"{prefix}-{pk}",
                label=escaped(label),
                name=name,
                placeholder=f' placeholder="{escaped(placeholder)}"' if placeholder else "",
                value="" if value is None else escaped(value),
                error=(
                    f'      <p class="field-error" id="error-{prefix}-{pk}">{message}</p>\n'
                    if error_field == name
                    else ""
                ),
            )
        )
    other = refused and error_field not in {name for name, *_ in form.fields}
    return AUTO_APPROVE_FORM.format(
        action=escaped(reverse(form.route, args=[context["project"].slug, quota.pk])),
        form_id=f"{form.form_id}-{pk}",
        csrf=CsrfTokenNode().render(context),  # Django's own {% csrf_token %}
        fields="".join(drawn),
        other_error=f'    <p class="field-error field-wide">{message}</p>\n' if other else "",
        button_id=f"{form.button_id}-{pk}",
        button=escaped(form.button),
    )


@register.simple_tag(takes_context=True)
def auto_approve(context: Any, quota: Any) -> SafeString:
    """One quota's auto-approve limits in words and the admin's caps on them; for a
    manager of the project (``may_manage``) the form to set the limits, for an admin
    (``is_admin``) the form to set the caps."""
    forms = [
        _auto_approve_form(context, quota, key)
        for key, shown in (("limits", "may_manage"), ("caps", "is_admin"))
        if context.get(shown)
    ]
    panel = AUTO_APPROVE.format(
        pk=escaped(quota.pk),
        auto_approve=escaped(gettext("Auto-approve")),
        forms="".join(forms),
        **_auto_approve_words(quota, context.get("max_lease_hours")),
    )
    return mark_safe(panel)  # every value escaped above
