"""The provider account form's driver options: a JSON object typed in a textarea, with
the options of every driver listed under it, checked against the chosen driver's
declaration (rental.providers.registry: ``account_options``)."""

from typing import Any

from django import forms
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from rental.providers.account_options import OptionProblem
from rental.providers.registry import DRIVERS, clean_account_options


def options_field() -> forms.JSONField:
    return forms.JSONField(
        label=_("Driver options"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 5, "cols": 80, "spellcheck": "false"}),
    )


def options_help() -> SafeString:
    """Every driver's options, with whether each is required, what it is and an example."""
    rows = []
    for entry in DRIVERS.values():
        for option in entry.account_options:
            rows.append(
                (
                    entry.label,
                    option.name,
                    gettext("required") if option.required else gettext("optional"),
                    option.help,
                    option.example,
                )
            )
    bare = ", ".join(str(e.label) for e in DRIVERS.values() if not e.account_options)
    return format_html(
        "{}<ul>{}</ul>{}",
        gettext("A JSON object; not secrets. Each driver takes these options:"),
        format_html_join(
            "",
            "<li>{}: <code>{}</code> ({}). {} <code>{}</code></li>",
            rows,
        ),
        gettext("These take none (leave it empty): %(drivers)s.") % {"drivers": bare},
    )


def checked_options(form: forms.ModelForm, cleaned: dict[str, Any]) -> None:
    """Put the chosen driver's cleaned options into ``cleaned``, or an error naming the
    bad option's path on the options field (nothing is saved then)."""
    driver = cleaned.get("driver") or form.instance.driver
    if not driver or "options" not in cleaned:
        return  # the driver or the JSON itself has an error of its own already
    try:
        cleaned["options"] = clean_account_options(driver, cleaned["options"])
    except OptionProblem as problem:
        form.add_error("options", str(problem))
