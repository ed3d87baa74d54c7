"""The rows of the projects list and of a project page's leases, each drawn in one step.

Each page shows 25 rows. Drawn by the template, a row was a dozen variables, filters and
tags, and the template engine's own work for each (looking the value up, filtering,
localizing, escaping: 10–20 µs apiece on the bench machine) was most of the page's
drawing: about 2 of 9 ms of the projects list, 4 of 22 ms of a project's page. These
tags write the same markup, escaping every value as the template did (``escaped``),
with the same cells (``moment``, ``label``, the pills) and the same words, translated
once per language. ``tests/rental/views/test_row_tags.py`` holds each to the template it
replaces, word for word, in English and in Chinese.
"""

from functools import cache
from typing import Any

from django import template
from django.utils.safestring import SafeString, mark_safe
from django.utils.timezone import template_localtime
from django.utils.translation import get_language, gettext_lazy

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
