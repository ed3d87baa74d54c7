"""Project configuration as code: export, plan (dry run) and apply."""

from decimal import Decimal

import pytest
from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command

from billing.models import Budget
from portal import projectconfig
from portal.errors import InvalidInput, NotPermitted
from portal.models import AuditEvent, Membership
from rental.models import Pool, Quota
from tests import factories as f

pytestmark = pytest.mark.django_db


@pytest.fixture
def world():
    admin = f.user("root", staff=True)
    manager, engineer = f.user("mia"), f.user("eli")
    alpha = f.project("alpha")
    f.member(manager, alpha, Membership.Role.MANAGER)
    f.member(engineer, alpha)
    model = f.gpu_model("A100 80GB")
    Pool.objects.create(gpu_model=model, capacity=8)
    Quota.objects.create(
        project=alpha,
        gpu_model=model,
        guaranteed=2,
        ceiling=4,
        max_gpus_per_lease=2,
        max_hours_per_lease=8,
    )
    Budget.objects.create(
        project=alpha,
        monthly_amount=Decimal("1000.00"),
        thresholds=[{"percent": 80, "kind": "actual"}],
    )
    return type(
        "W",
        (),
        {"admin": admin, "manager": manager, "engineer": engineer, "alpha": alpha, "model": model},
    )


def _counts() -> dict[str, int]:
    return {m._meta.label: m.objects.count() for m in apps.get_models()}


def test_it_exports_then_applies_to_a_fresh_project_and_exports_the_same(world):
    text = projectconfig.export_project(world.alpha)
    assert "guaranteed: 2" in text and "monthly_amount: '1000.00'" in text
    fresh = text.replace("project: alpha", "project: beta")
    plan = projectconfig.plan(fresh, actor=world.admin)
    projectconfig.apply(plan, actor=world.admin)
    beta = type(world.alpha).objects.get(slug="beta")
    assert projectconfig.export_project(beta).replace("project: beta", "project: alpha") == text
    assert Quota.objects.get(project=beta).guaranteed == 2
    assert AuditEvent.objects.filter(project=beta, verb="quota.set").count() == 1


def test_it_writes_nothing_on_a_dry_run(world):
    text = projectconfig.export_project(world.alpha).replace("ceiling: 4", "ceiling: 6")
    before = _counts()
    plan = projectconfig.plan(text, actor=world.admin)
    assert _counts() == before
    assert any("ceiling" in c and "4 → 6" in c for c in plan.changes)
    assert Quota.objects.get(project=world.alpha).ceiling == 4


def test_it_refuses_a_change_of_g_by_a_manager_with_the_rule(world):
    text = projectconfig.export_project(world.alpha).replace("guaranteed: 2", "guaranteed: 3")
    with pytest.raises(NotPermitted) as refused:
        projectconfig.plan(text, actor=world.manager)
    assert "quotas[0]" in refused.value.message and "admin" in refused.value.message
    assert Quota.objects.get(project=world.alpha).guaranteed == 2


def test_it_refuses_guarantees_over_the_pool_with_figures(world):
    text = projectconfig.export_project(world.alpha)
    text = text.replace("guaranteed: 2", "guaranteed: 9").replace("ceiling: 4", "ceiling: 9")
    with pytest.raises(InvalidInput) as refused:
        projectconfig.plan(text, actor=world.admin)
    assert refused.value.code == "guarantees_over_capacity"
    assert refused.value.field == "quotas[0].guaranteed"
    assert refused.value.figures == {"total": 9, "bound": 8, "left": 8}


def test_it_applies_all_or_nothing(world):
    text = projectconfig.export_project(world.alpha)
    text = text.replace("max_gpus: 2", "max_gpus: 3").replace("role: engineer", "role: boss")
    with pytest.raises(InvalidInput) as bad:
        projectconfig.plan(text, actor=world.manager)
    assert bad.value.field == "members[0].role"
    assert Quota.objects.get(project=world.alpha).max_gpus_per_lease == 2


@pytest.mark.parametrize(
    ("old", "new", "path"),
    [
        ("ceiling: 4", "ceiling: 1", "quotas[0].ceiling"),
        ("ceiling: 4", "ceiling: four", "quotas[0].ceiling"),
        ("ceiling: 4", "ceiling: 4\n  colour: red", "quotas[0].colour"),
        ("gpu_model: A100 80GB", "gpu_model: Z9", "quotas[0].gpu_model"),
        ("username: eli", "username: nobody", "members[0].username"),
        ("quotas:", "quotas: [", "document"),
    ],
)
def test_it_names_the_path_of_a_bad_document(world, old, new, path):
    text = projectconfig.export_project(world.alpha).replace(old, new)
    before = _counts()
    with pytest.raises(InvalidInput) as bad:
        projectconfig.plan(text, actor=world.admin)
    assert bad.value.field == path and bad.value.message.startswith(path)
    assert _counts() == before


def test_it_applies_a_budget_and_members_as_a_manager(world):
    text = projectconfig.export_project(world.alpha)
    text = text.replace("'1000.00'", "'1500'").replace("role: engineer", "role: manager")
    projectconfig.apply(projectconfig.plan(text, actor=world.manager), actor=world.manager)
    assert Budget.objects.get(project=world.alpha).monthly_amount == Decimal("1500.00")
    assert Membership.objects.get(user=world.engineer).role == "manager"
    assert AuditEvent.objects.filter(verb="membership.set").count() == 1


def test_it_refuses_an_engineer(world):
    text = projectconfig.export_project(world.alpha)
    with pytest.raises(NotPermitted):
        projectconfig.plan(text, actor=world.engineer)


def test_it_exports_and_dry_runs_from_the_command(world, tmp_path, capsys):
    call_command("project", "export", "alpha")
    text = capsys.readouterr().out
    path = tmp_path / "alpha.yaml"
    path.write_text(text.replace("ceiling: 4", "ceiling: 5"))
    before = _counts()
    call_command("project", "apply", str(path), "--dry-run", "--as", "root")
    assert "4 → 5" in capsys.readouterr().out
    assert _counts() == before
    call_command("project", "apply", str(path), "--as", "root")
    assert Quota.objects.get(project=world.alpha).ceiling == 5


def test_an_admin_sets_the_caps_on_the_auto_approve_limits_from_the_document(world):
    text = projectconfig.export_project(world.alpha)
    assert "gpus_cap: null" in text and "hours_cap: null" in text
    capped = text.replace("gpus_cap: null", "gpus_cap: 1").replace(
        "hours_cap: null", "hours_cap: 6"
    )
    with pytest.raises(InvalidInput) as bad:  # the limits (2 GPUs, 8 h) above the new caps
        projectconfig.plan(capped, actor=world.admin)
    assert bad.value.field == "quotas[0].auto_approve.max_gpus"
    capped = capped.replace("max_gpus: 2", "max_gpus: 1").replace("max_hours: 8", "max_hours: 6")
    plan = projectconfig.plan(capped, actor=world.admin)
    assert any("auto_approve.gpus_cap" in c and "— → 1" in c for c in plan.changes)
    assert Quota.objects.get(project=world.alpha).auto_approve_gpus_cap is None  # a dry run
    projectconfig.apply(plan, actor=world.admin)
    quota = Quota.objects.get(project=world.alpha)
    assert (quota.auto_approve_gpus_cap, quota.auto_approve_hours_cap) == (1, 6)
    assert (quota.max_gpus_per_lease, quota.max_hours_per_lease) == (1, 6)
    assert AuditEvent.objects.filter(verb="quota.auto_approve_caps_set", source="config").exists()
    assert projectconfig.export_project(world.alpha) == capped


def test_a_manager_cannot_change_the_caps_and_a_document_without_them_keeps_them(world):
    Quota.objects.filter(project=world.alpha).update(auto_approve_gpus_cap=3)
    text = projectconfig.export_project(world.alpha)
    with pytest.raises(NotPermitted) as refused:
        projectconfig.plan(text.replace("gpus_cap: 3", "gpus_cap: 4"), actor=world.manager)
    assert refused.value.message.startswith("quotas[0]")
    older = text.replace("    gpus_cap: 3\n", "").replace("    hours_cap: null\n", "")
    assert "gpus_cap" not in older
    plan = projectconfig.plan(older.replace("max_hours: 8", "max_hours: 6"), actor=world.manager)
    projectconfig.apply(plan, actor=world.manager)
    quota = Quota.objects.get(project=world.alpha)
    assert (quota.auto_approve_gpus_cap, quota.max_hours_per_lease) == (3, 6)


@pytest.mark.parametrize(
    ("paths", "words"),
    [
        (["rental.projectconfig"], "no section owns 'budget'"),
        (["rental.projectconfig", "billing.projectconfig", "billing.projectconfig"], "both"),
    ],
)
def test_it_refuses_sections_that_leave_a_key_without_one_owner(world, settings, paths, words):
    settings.PORTAL_PROJECT_CONFIG_SECTIONS = paths
    with pytest.raises(ImproperlyConfigured, match=words):
        projectconfig.export_project(world.alpha)
