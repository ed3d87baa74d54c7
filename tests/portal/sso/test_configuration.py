"""Setting single sign-on up: the provider in the admin (its client secret encrypted and
never shown), the login page's button, password login switched off but for the
break-glass admin, and the group roles in the admin and in the project's document."""

import base64

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from portal import projectconfig
from portal.errors import InvalidInput, NotPermitted
from portal.models import AuditEvent, Membership
from portal.sso import config, mappings
from portal.sso.models import GroupRole, IdentityProvider
from tests import factories
from tests.portal.sso.conftest import CLIENT_SECRET, sign_in

pytestmark = pytest.mark.django_db


def test_the_admin_sets_the_provider_up_with_a_write_only_secret(client, oidc_process, settings):
    settings.PORTAL_OIDC_ISSUER = ""
    root = factories.user("root", staff=True)
    root.is_superuser = True
    root.save()
    client.force_login(root)
    answer = client.post(
        "/admin/sso/identityprovider/add/",
        {
            "enabled": "on",
            "name": "Acme SSO",
            "issuer": oidc_process.issuer,
            "client_id": "gpu-portal",
            "client_secret": CLIENT_SECRET,
            "scopes": "openid  email profile",
            "groups_claim": "groups",
        },
    )
    assert answer.status_code == 302, answer.content.decode()[:2000]
    row = IdentityProvider.objects.get()
    assert CLIENT_SECRET not in row.client_secret_encrypted and row.client_secret() == CLIENT_SECRET
    assert row.scopes == "openid email profile"
    page = client.get(f"/admin/sso/identityprovider/{row.pk}/change/").content.decode()
    assert CLIENT_SECRET not in page and "/sso/callback/" in page
    event = AuditEvent.objects.get(verb="identity_provider.saved")
    assert CLIENT_SECRET not in str(event.after)
    assert config.current().client_secret == CLIENT_SECRET
    assert repr(config.current()).count(CLIENT_SECRET) == 0
    client.logout()
    assert "Sign in with Acme SSO" in client.get("/login/").content.decode()


def test_the_admin_form_refuses_a_provider_without_a_secret_or_openid(client, settings):
    settings.PORTAL_OIDC_ISSUER = ""
    root = factories.user("root", staff=True)
    root.is_superuser = True
    root.save()
    client.force_login(root)
    answer = client.post(
        "/admin/sso/identityprovider/add/",
        {
            "name": "X",
            "issuer": "https://idp.example",
            "client_id": "c",
            "scopes": "email",
            "groups_claim": "groups",
        },
    )
    assert answer.status_code == 200
    errors = answer.context["adminform"].form.errors
    assert set(errors) == {"client_secret", "scopes"}
    assert not IdentityProvider.objects.exists()


@pytest.fixture
def no_passwords(idp, settings):
    settings.PORTAL_PASSWORD_LOGIN = False
    settings.PORTAL_BREAK_GLASS_USERNAME = "root"
    return idp


def test_with_passwords_off_only_the_break_glass_admin_logs_in_with_one(no_passwords, client):
    factories.user("root", staff=True)
    factories.user("erik")
    page = client.get("/login/").content.decode()
    assert "Sign in with Test IdP" in page and 'id="break-glass"' in page
    refused = client.post("/login/", {"username": "erik", "password": factories.PASSWORD})
    assert refused.status_code == 403 and "_auth_user_id" not in client.session
    assert (
        "Password login is switched off. Sign in with Test IdP instead." in refused.content.decode()
    )
    admin_login = client.post("/admin/login/", {"username": "erik", "password": factories.PASSWORD})
    assert admin_login.status_code == 403 and "_auth_user_id" not in client.session
    api = APIClient()
    basic = base64.b64encode(f"erik:{factories.PASSWORD}".encode()).decode()
    api.credentials(HTTP_AUTHORIZATION=f"Basic {basic}")
    assert api.post("/api/v1/tokens", {"name": "ci"}, format="json").status_code == 401
    answer = client.post("/login/", {"username": "root", "password": factories.PASSWORD})
    assert answer.status_code == 302 and "_auth_user_id" in client.session


def test_with_passwords_off_people_still_sign_in_with_the_provider(no_passwords, client):
    no_passwords.control(users={"erik": {"groups": []}})
    assert sign_in(client, no_passwords, "erik").status_code == 302
    assert "_auth_user_id" in client.session


def test_with_passwords_on_both_ways_are_offered(idp, client):
    page = client.get("/login/").content.decode()
    assert "Sign in with Test IdP" in page and 'id="break-glass"' not in page
    assert 'name="password"' in page


def test_only_admins_change_group_roles_and_each_change_is_audited(db):
    admin, manager = factories.user("root", staff=True), factories.user("mia")
    alpha = factories.project("alpha")
    factories.member(manager, alpha, Membership.Role.MANAGER)
    with pytest.raises(NotPermitted):
        mappings.add_group_role(actor=manager, group="ml", role="engineer", project=alpha)
    with pytest.raises(InvalidInput) as bad:
        mappings.add_group_role(actor=admin, group="ml", role="engineer")
    assert bad.value.field == "project"
    with pytest.raises(InvalidInput) as bad:
        mappings.add_group_role(actor=admin, group="ml", role="admin", project=alpha)
    assert bad.value.field == "project"
    row = mappings.add_group_role(actor=admin, group="ml", role="engineer", project=alpha)
    again = mappings.add_group_role(actor=admin, group="ml", role="manager", project=alpha)
    assert GroupRole.objects.get().pk == again.pk != row.pk and again.role == "manager"
    mappings.remove_group_role(actor=admin, row=again)
    assert not GroupRole.objects.exists()
    verbs = list(AuditEvent.objects.order_by("id").values_list("verb", flat=True))
    assert verbs == [
        "group_role.added",
        "group_role.removed",
        "group_role.added",
        "group_role.removed",
    ]


def test_the_projects_document_carries_its_groups_and_only_an_admin_changes_them(db):
    admin, manager = factories.user("root", staff=True), factories.user("mia")
    alpha = factories.project("alpha")
    factories.member(manager, alpha, Membership.Role.MANAGER)
    GroupRole.objects.create(group="ml-team", role="engineer", project=alpha)
    text = projectconfig.export_project(alpha)
    assert "idp_groups:\n- group: ml-team\n  role: engineer\n" in text

    changed = text.replace(
        "role: engineer\n", "role: manager\n- group: ml-leads\n  role: manager\n", 1
    )
    with pytest.raises(NotPermitted) as refused:
        projectconfig.plan(changed, actor=manager)
    assert refused.value.message.startswith("idp_groups")
    plan = projectconfig.plan(changed, actor=admin)
    assert plan.changes == [
        "idp_groups[ml-leads]: — → manager",
        "idp_groups[ml-team]: engineer → manager",
    ]
    projectconfig.apply(plan, actor=admin)
    assert dict(GroupRole.objects.values_list("group", "role")) == {
        "ml-leads": "manager",
        "ml-team": "manager",
    }
    # A manager's document that leaves the groups as they are applies.
    projectconfig.apply(
        projectconfig.plan(projectconfig.export_project(alpha), actor=manager), actor=manager
    )

    bad = text.replace("role: engineer", "role: admin")
    with pytest.raises(Exception, match=r"idp_groups\[0\]\.role"):
        projectconfig.plan(bad, actor=admin)


def test_a_signed_in_session_is_ended_when_the_account_is_deactivated(idp, client):
    idp.control(users={"ada": {"groups": []}})
    sign_in(client, idp, "ada")
    get_user_model().objects.filter(username="ada").update(is_active=False)
    assert client.get("/").status_code == 302
