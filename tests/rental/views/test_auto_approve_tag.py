"""A quota's auto-approve panel drawn in one step (``auto_approve``) is the template it
replaced, word for word but for runs of blank space: the limits and caps in words (none
set, one, many), the manager's and the admin's forms, a refused form drawn again with
its values and its error beside its field or below the form, values that need escaping,
with and without a CSRF token, in English and in Chinese. The reference is that
template, with one fix: the caps form shows an error that names no field, which the
template dropped."""

import itertools
import re
from pathlib import Path

import pytest
from django.template import Context, Template
from django.utils import translation

from rental.models import Quota

# The panel as the template drew it before the tag, the reference.
TEMPLATE_PANEL = Template((Path(__file__).parent / "auto_approve_reference.html").read_text())
# Django's own csrf_token tag warns of its deprecated format_html("") without a token.
pytestmark = pytest.mark.filterwarnings("ignore:Calling format_html:DeprecationWarning")
TAG_PANEL = Template("{% load rental_tags %}{% auto_approve quota %}")
ODD = "<b>\"9\"</b> & 'x'"


def quotas() -> list[Quota]:
    made = []
    settings = itertools.product([None, 1, 3], [None, 1, 24], [None, 1, 5], [None, 1, 48])
    for n, (gpus, hours, gpus_cap, hours_cap) in enumerate(settings):
        made.append(
            Quota(
                pk=n + 1,
                ceiling=(4, 1, 1000)[n % 3],
                max_gpus_per_lease=gpus,
                max_hours_per_lease=hours,
                auto_approve_gpus_cap=gpus_cap,
                auto_approve_hours_cap=hours_cap,
            )
        )
    return made


def refusals(pk: int) -> list[dict]:
    values = {
        "max_gpus_per_lease": ODD,
        "max_hours_per_lease": "",
        "auto_approve_gpus_cap": "-1",
    }
    refused = [{}, {"key": f"{pk + 1}:limits", "field": "max_gpus_per_lease"}]
    for form, field in [
        ("limits", "max_gpus_per_lease"),
        ("limits", "max_hours_per_lease"),
        ("limits", ""),
        ("caps", "auto_approve_gpus_cap"),
        ("caps", "auto_approve_hours_cap"),
        ("caps", "max_gpus_per_lease"),
    ]:
        refused.append({"key": f"{pk}:{form}", "field": field})
    return [
        {**errors, "message": f"Refused {ODD}", "values": values} if errors else errors
        for errors in refused
    ]


def spaced(html: str) -> str:
    return re.sub(r"\s+", " ", html).strip()


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_the_panel_is_the_templates_word_for_word(language):
    class Project:
        slug = "vision-7"

    drawn = 0
    with translation.override(language):
        for quota in quotas():
            roles = itertools.product([False, True], [False, True], ["tok<en>", "", "NOTPROVIDED"])
            for may_manage, is_admin, csrf in roles:
                for errors in refusals(quota.pk) if may_manage or is_admin else [{}]:
                    context = {
                        "quota": quota,
                        "project": Project(),
                        "may_manage": may_manage,
                        "is_admin": is_admin,
                        "csrf_token": csrf,
                        "quota_errors": errors,
                        "max_lease_hours": 168,
                    }
                    expected = TEMPLATE_PANEL.render(Context(context))
                    assert spaced(TAG_PANEL.render(Context(context))) == spaced(expected)
                    drawn += 1
    assert drawn > 1000
