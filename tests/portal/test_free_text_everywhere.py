"""Every text field of every form the site and the admin show follows the one rule for
text (portal.text: no bidirectional or other invisible control characters), found by
walking the forms, not listed by hand; and the admin's JSON fields refuse nesting past
the limit on their field, where Python's reader failed with a server error."""

import importlib
import pkgutil

import pytest
from django import forms
from django.contrib import admin
from django.test import RequestFactory
from django.urls import reverse

from portal.models import Project
from portal.text import PlainTextForm, validate_plain_text
from rental.admin.catalog import RegionListField
from tests import factories

APPS = ("portal", "rental", "billing")


def our_modules() -> None:
    """Import every module of the apps, so every form class is defined."""
    for app in APPS:
        package = importlib.import_module(app)
        for found in pkgutil.walk_packages(package.__path__, f"{app}."):
            parts = found.name.split(".")
            if not {"migrations", "management", "wsgi", "settings", "celery"} & set(parts):
                importlib.import_module(found.name)


def subclasses(cls: type) -> set[type]:
    found = set(cls.__subclasses__())
    for sub in list(found):
        found |= subclasses(sub)
    return found


# Text fields whose own cleaning takes only a few characters, each for its reason.
OWN_RULE = {
    RegionListField: "region and zone names: a-z, 0-9 and hyphens only",
}


def text_fields(form_fields) -> dict[str, forms.Field]:
    return {
        name: field
        for name, field in form_fields.items()
        if isinstance(field, forms.CharField)
        and not isinstance(field, forms.JSONField)
        and not isinstance(field.widget, forms.PasswordInput | forms.HiddenInput)
        and type(field) not in OWN_RULE
    }


def test_every_form_of_the_site_checks_its_text_fields():
    our_modules()
    site_forms = [form for form in subclasses(forms.Form) if form.__module__.split(".")[0] in APPS]
    assert len(site_forms) >= 8  # the walk finds them
    unchecked = [
        f"{form.__module__}.{form.__name__}.{name}"
        for form in site_forms
        if not issubclass(form, PlainTextForm)  # which checks every text field it has
        for name, field in text_fields(form.base_fields).items()
        if validate_plain_text not in field.validators
    ]
    assert unchecked == [], unchecked


def test_every_admin_form_checks_its_text_fields(db):
    root = factories.user("root", staff=True)
    root.is_superuser = True
    root.save()
    request = RequestFactory().get("/admin/")
    request.user = root
    walked, unchecked = 0, []
    for model, model_admin in admin.site._registry.items():
        adding, changing = model_admin.get_form(request), model_admin.get_form(request, model())
        for form in (adding, changing):
            for name, field in text_fields(form.base_fields).items():
                walked += 1
                if validate_plain_text not in field.validators:
                    unchecked.append(f"{model._meta.label}.{name}")
        for inline in model_admin.get_inline_instances(request):
            formset = inline.get_formset(request)
            for name, field in text_fields(formset.form.base_fields).items():
                walked += 1
                if validate_plain_text not in field.validators:
                    unchecked.append(
                        f"{model._meta.label} inline {inline.model._meta.label}.{name}"
                    )
    assert walked >= 20
    assert unchecked == [], unchecked


@pytest.mark.parametrize("typed", ["\u202eevil", "a\x07b"])
def test_the_admin_refuses_a_control_character_on_its_field(db, client, typed):
    root = factories.user("root", staff=True)
    root.is_superuser = True
    root.save()
    client.force_login(root)
    response = client.post(
        reverse("admin:portal_project_add"),
        {
            "name": typed,
            "slug": "evil",
            "cost_center": "",
            "is_active": "on",
            "memberships-TOTAL_FORMS": "0",
            "memberships-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 200
    assert "U+" in str(response.context["adminform"].form.errors["name"])
    assert not Project.objects.exists()


def test_the_admin_refuses_json_nested_too_deep_on_its_field(f0, client):
    f0.admin.is_superuser = True
    f0.admin.save()
    client.force_login(f0.admin)
    url = reverse("admin:billing_budget_add")
    deep = "[" * 10_000 + "]" * 10_000
    response = client.post(
        url,
        {
            "project": f0.gamma.pk,
            "monthly_amount": "100.00",
            "thresholds": deep,
            "cap_policy": "refuse_new",
        },
    )
    assert response.status_code == 200
    assert "nests more than 32 levels" in str(response.context["adminform"].form.errors)
