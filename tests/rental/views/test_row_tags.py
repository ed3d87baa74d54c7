"""The rows drawn in one step are the rows the templates drew, word for word: a project
page's lease row (``project_lease_row``: every status, tier, market and priority, a
requester whose account is gone, in several time zones) and a row of the projects list
(``project_row``: active or not, with or without a cost center, every role), with names
that need escaping, in English and in Chinese; and the pills and the escaping they use
say what Django's would."""

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.template import Context, Template
from django.utils import timezone, translation
from django.utils.html import conditional_escape, format_html
from django.utils.safestring import mark_safe
from django.utils.translation import gettext_lazy

from portal.models import Project
from portal.templatetags.portal_tags import escaped, pill
from rental.models import GpuModel, Reservation

# The row as the template drew it before the tag, the reference.
TEMPLATE_ROW = Template(
    "{% load portal_tags %}{% for lease in leases %}\n"
    "        <tr>\n"
    '          <td><a class="strong" href="{{ lease.get_absolute_url }}">#{{ lease.pk }}</a>'
    "</td>\n"
    "          <td>{{ lease.requester_name }}</td>\n"
    '          <td class="nowrap">{{ lease.gpu_count }} × {{ lease.gpu_model.name }}'
    '<div class="muted small">{{ lease|label:"market" }} · {{ lease|label:"priority" }}'
    "</div></td>\n"
    "          <td>{% tier_pill lease %}</td>\n"
    '          <td data-label="{{ label_status }}">{% status_pill lease %}</td>\n'
    '          <td class="nowrap small" data-label="{{ label_ends_utc }}">'
    '{{ lease.end|moment:"M j, H:i" }}</td>\n'
    "        </tr>{% endfor %}"
)
TAG_ROW = Template(
    "{% load rental_tags %}{% for lease in leases %}\n"
    "        {% project_lease_row lease label_status label_ends_utc %}{% endfor %}"
)


def leases() -> list[Reservation]:
    models = [GpuModel(name="A100 80GB"), GpuModel(name='H100 <"SXM"> & co')]
    made = []
    combos = itertools.product(
        Reservation.Status.values,
        ["", *Reservation._meta.get_field("tier").get_choices(include_blank=False)],
        Reservation._meta.get_field("market").get_choices(include_blank=False),
        Reservation._meta.get_field("priority").get_choices(include_blank=False),
    )
    start = datetime(2026, 12, 31, 20, 5, tzinfo=UTC)
    for n, (status, tier, (market, _m), (priority, _p)) in enumerate(combos):
        lease = Reservation(
            pk=n + 1 + (10**6 if n % 7 == 0 else 0),
            status=status,
            tier=tier[0] if isinstance(tier, tuple) else tier,
            market=market,
            priority=priority,
            gpu_count=1 + n % 16,
            end=None if n % 11 == 0 else start + timedelta(minutes=97 * n),
        )
        lease.gpu_model = models[n % 2]
        lease.requester_name = (None, "alice", "<b>bob</b> & 'eve'")[n % 3]
        made.append(lease)
    return made


@pytest.mark.parametrize("language", ["en", "zh-hans"])
@pytest.mark.parametrize("zone", ["UTC", "Asia/Shanghai"])
def test_the_row_is_the_templates_word_for_word(language, zone):
    with translation.override(language), timezone.override(ZoneInfo(zone)):
        context = {
            "leases": leases(),
            "label_status": translation.gettext("Status"),
            "label_ends_utc": '"Ends" <UTC>',
        }
        expected = TEMPLATE_ROW.render(Context(context))
        assert TAG_ROW.render(Context(context)) == expected
    assert expected.count("<tr>") > 100 and "&lt;b&gt;bob&lt;/b&gt;" in expected


def test_escaped_is_conditional_escape():
    values = [
        "<a href='x'>&amp;</a>",
        mark_safe("<b>kept</b>"),
        gettext_lazy("Status"),
        None,
        42,
        format_html("<i>{}</i>", "<x>"),
    ]
    for value in values:
        assert escaped(value) == conditional_escape(value)


def test_a_pill_is_the_markup_format_html_made():
    for value, label, kind, element_id in [
        ("active", "Active", "status", ""),
        ("a<b", '"x" & y', "tier", 'id-"1"'),
        ("queued", mark_safe("<em>Queued</em>"), "state", "row-7"),
    ]:
        attrs = f' id="{conditional_escape(element_id)}"' if element_id else ""
        expected = format_html(
            '<span class="pill pill-{}-{}"{}>{}</span>', kind, value, mark_safe(attrs), label
        )
        assert pill(value, label, kind, element_id) == expected
    assert pill("", "Nothing") == "—"


# A row of the projects list as the template drew it before the tag, the reference.
TEMPLATE_PROJECT_ROW = Template(
    '{% load i18n %}{% translate "Cost center" as label_cost_center %}'
    '{% translate "Your role" as label_your_role %}{% translate "Members" as label_members %}'
    '{% translate "Running leases" as label_running_leases %}'
    '{% translate "GPUs running" as label_gpus_running %}'
    '{% translate "Manager" as role_manager %}{% translate "Engineer" as role_engineer %}'
    '{% translate "Inactive" as inactive %}{% for project, role in rows %}\n'
    '    <tr id="project-row-{{ project.slug }}"{% if not project.is_active %}'
    ' class="is-muted"{% endif %}>\n'
    '      <td><a class="strong" href="{{ project.get_absolute_url }}">{{ project.name }}</a>'
    ' <span class="muted small mono">{{ project.slug }}</span>{% if not project.is_active %}'
    ' <span class="pill pill-status-cancelled">{{ inactive }}</span>{% endif %}</td>\n'
    '      <td data-label="{{ label_cost_center }}">{{ project.cost_center|default:"—" }}</td>\n'
    '      <td data-label="{{ label_your_role }}">{% if role == "manager" %}{{ role_manager }}'
    '{% elif role == "engineer" %}{{ role_engineer }}{% else %}<span class="muted">—</span>'
    "{% endif %}</td>\n"
    '      <td class="num" data-label="{{ label_members }}">{{ project.members_count }}</td>\n'
    '      <td class="num" data-label="{{ label_running_leases }}">{{ project.live_leases }}'
    "</td>\n"
    '      <td class="num strong" data-label="{{ label_gpus_running }}">'
    "{{ project.running_gpus }}</td>\n"
    "    </tr>{% endfor %}"
)
TAG_PROJECT_ROW = Template(
    "{% load rental_tags %}{% for project, role in rows %}\n"
    "    {% project_row project role %}{% endfor %}"
)


def project_rows() -> list[tuple[Project, str | None]]:
    rows = []
    names = ["Alpha", 'R&D <"vision">', "模型训练"]
    for n, role in enumerate([None, "manager", "engineer", "auditor"] * 3):
        project = Project(
            slug=f"p-{n}",
            name=names[n % 3],
            cost_center=("", None, "CC-<7>")[n % 3],
            is_active=n % 4 != 3,
        )
        project.members_count, project.live_leases = n, 10**6 + n
        project.running_gpus = (0, 8, 1234)[n % 3]
        rows.append((project, role))
    return rows


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_the_project_row_is_the_templates_word_for_word(language):
    with translation.override(language):
        context = {"rows": project_rows()}
        expected = TEMPLATE_PROJECT_ROW.render(Context(context))
        assert TAG_PROJECT_ROW.render(Context(context)) == expected
    assert "is-muted" in expected and "R&amp;D &lt;&quot;vision&quot;&gt;" in expected
