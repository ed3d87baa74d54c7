"""Signing in with OpenID Connect against a real provider in a second process: the first
login creates the person with the roles their groups give, a group change changes them
at the next login (hand-given roles stay), and a tampered ID token, a wrong nonce, a key
the provider does not publish, a replayed code or state, a deactivated account and a
provider that is down are refused with a page that says why, having written nothing."""

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model

from portal import access
from portal.models import AuditEvent, Membership
from portal.sso.models import GrantedMembership, GrantedRole, GroupRole, Identity
from tests import factories
from tests.portal.sso.conftest import callback, sign_in, start

pytestmark = pytest.mark.django_db

User = get_user_model()


@pytest.fixture
def world(idp):
    alpha, beta, gamma = (
        factories.project("alpha"),
        factories.project("beta"),
        factories.project("gamma"),
    )
    GroupRole.objects.create(group="ml-team", role="engineer", project=alpha)
    GroupRole.objects.create(group="ml-leads", role="manager", project=beta)
    GroupRole.objects.create(group="money", role="finance")
    return type("W", (), {"alpha": alpha, "beta": beta, "gamma": gamma, "idp": idp})


def _roles(username: str) -> dict[str, str]:
    return dict(
        Membership.objects.filter(user__username=username).values_list("project__slug", "role")
    )


def _counts() -> dict[str, int]:
    """Rows of every model but sessions (pressing "Sign in" keeps its state in one)."""
    return {
        m._meta.label: m.objects.count()
        for m in apps.get_models()
        if m._meta.label != "sessions.Session"
    }


def test_the_first_login_creates_the_person_with_the_roles_of_their_groups(world, client):
    world.idp.control(users={"ada": {"groups": ["ml-team", "ml-leads", "portal-admins", "x"]}})
    answer = sign_in(client, world.idp, "ada")
    assert answer.status_code == 302 and answer["Location"] == "/"
    ada = User.objects.get(username="ada")
    assert client.session["_auth_user_id"] == str(ada.pk)
    assert (ada.email, ada.first_name, ada.has_usable_password()) == (
        "ada@example.com",
        "Ada",
        False,
    )
    assert Identity.objects.get(user=ada).subject == "sub-ada"
    assert _roles("ada") == {"alpha": "engineer", "beta": "manager"}
    assert ada.is_staff and ada.is_superuser and not access.is_finance(ada)
    assert GrantedMembership.objects.filter(membership__user=ada).count() == 2
    assert set(GrantedRole.objects.filter(user=ada).values_list("role", flat=True)) == {"admin"}
    verbs = sorted(AuditEvent.objects.values_list("verb", flat=True))
    assert verbs == ["membership.set", "membership.set", "user.admin_granted"]
    event = AuditEvent.objects.get(verb="membership.set", project=world.beta)
    assert event.actor is None and event.after["groups"] == ["ml-leads"]
    assert client.get("/").status_code == 200


def test_a_group_change_at_the_provider_changes_the_roles_at_the_next_login(world, client):
    world.idp.control(users={"ada": {"groups": ["ml-team", "portal-admins"]}})
    sign_in(client, world.idp, "ada")
    ada = User.objects.get(username="ada")
    # Given by hand: a membership, and finance rights; neither is the groups' to take.
    factories.member(ada, world.gamma, Membership.Role.MANAGER)
    ada.groups.add(factories.user("fin", finance=True).groups.get())
    client.logout()

    world.idp.control(users={"ada": {"groups": ["ml-leads"]}})
    before = AuditEvent.objects.count()
    assert sign_in(client, world.idp, "ada").status_code == 302
    ada.refresh_from_db()
    assert _roles("ada") == {"beta": "manager", "gamma": "manager"}
    assert not ada.is_staff and not ada.is_superuser and access.is_finance(ada)
    assert not GrantedRole.objects.filter(user=ada).exists()
    new = AuditEvent.objects.order_by("id")[before:]
    assert sorted(e.verb for e in new) == [
        "membership.removed",
        "membership.set",
        "user.admin_revoked",
    ]
    removed = next(e for e in new if e.verb == "membership.removed")
    assert removed.project == world.alpha and removed.before["groups"] == ["ml-team"]

    # The same groups again: nothing changes, nothing is recorded.
    client.logout()
    before = AuditEvent.objects.count()
    sign_in(client, world.idp, "ada")
    assert AuditEvent.objects.count() == before


def test_a_hand_given_role_in_a_project_stays_whatever_the_groups_say(world, client):
    ada = factories.user("someone-else")
    world.idp.control(users={"ada": {"groups": ["ml-team"]}})
    sign_in(client, world.idp, "ada")
    ada = User.objects.get(username="ada")
    Membership.objects.filter(user=ada).delete()  # an admin takes ada out by hand
    factories.member(ada, world.alpha, Membership.Role.MANAGER)  # and makes her manager
    client.logout()
    sign_in(client, world.idp, "ada")
    assert _roles("ada") == {"alpha": "manager"}
    assert not GrantedMembership.objects.filter(membership__user=ada).exists()


def test_a_person_whose_groups_map_to_nothing_signs_in_and_sees_nothing(world, client):
    world.idp.control(users={"bob": {"groups": ["nobody-maps-this"]}})
    assert sign_in(client, world.idp, "bob").status_code == 302
    bob = User.objects.get(username="bob")
    assert _roles("bob") == {} and not access.visible_projects(bob).exists()
    assert client.get("/").status_code == 200
    assert client.get(f"/projects/{world.alpha.slug}/").status_code == 404


def test_an_existing_username_is_never_taken_over(world, client):
    local = factories.user("ada", staff=True)
    world.idp.control(users={"ada": {"groups": []}})
    sign_in(client, world.idp, "ada")
    assert client.session["_auth_user_id"] != str(local.pk)
    assert User.objects.get(pk=int(client.session["_auth_user_id"])).username == "ada-2"


@pytest.mark.parametrize("fault", ["tamper", "wrong_nonce", "wrong_key"])
def test_an_id_token_that_does_not_check_out_is_refused_and_writes_nothing(world, client, fault):
    world.idp.control(users={"ada": {"groups": ["ml-team"]}}, **{fault: True})
    before = _counts()
    answer = sign_in(client, world.idp, "ada")
    assert answer.status_code == 400
    assert 'data-reason="unverified"' in answer.content.decode()
    assert "could not be verified" in answer.content.decode()
    assert "_auth_user_id" not in client.session
    assert _counts() == before


def test_a_replayed_code_or_state_is_refused_and_writes_nothing(world, client):
    world.idp.control(users={"ada": {"groups": ["ml-team"]}})
    back = world.idp.log_in(start(client), "ada")
    assert callback(client, back).status_code == 302
    client.logout()
    world.idp.control(users={"ada": {"groups": ["ml-leads"]}})
    before = _counts()

    # The same callback again (its state used): refused before the provider is asked.
    again = callback(client, back)
    assert again.status_code == 400 and 'data-reason="expired"' in again.content.decode()
    # The used code with a fresh state of this session: the provider refuses the code.
    fresh = start(client)
    state = dict(p.split("=", 1) for p in fresh.split("?", 1)[1].split("&"))["state"]
    code = dict(p.split("=", 1) for p in back.split("?", 1)[1].split("&"))["code"]
    replayed = client.get(f"/sso/callback/?code={code}&state={state}")
    assert replayed.status_code == 400
    assert 'data-reason="code_refused"' in replayed.content.decode()
    assert "already used" in replayed.content.decode()
    assert "_auth_user_id" not in client.session
    assert _counts() == before and _roles("ada") == {"alpha": "engineer"}


def test_a_state_this_browser_never_sent_is_refused(world, client):
    answer = client.get("/sso/callback/?code=abc&state=made-up")
    assert answer.status_code == 400 and 'data-reason="expired"' in answer.content.decode()


def test_a_deactivated_account_cannot_get_in_and_its_session_ends(world, client):
    world.idp.control(users={"ada": {"groups": ["ml-team"]}})
    sign_in(client, world.idp, "ada")
    assert client.get("/").status_code == 200
    User.objects.filter(username="ada").update(is_active=False)
    assert client.get("/").status_code == 302  # the session no longer counts
    world.idp.control(users={"ada": {"groups": ["ml-leads"]}})
    before = _counts()
    answer = sign_in(client, world.idp, "ada")
    assert answer.status_code == 403 and 'data-reason="inactive"' in answer.content.decode()
    assert _counts() == before and _roles("ada") == {"alpha": "engineer"}


def test_an_account_the_provider_deactivated_is_turned_away_there(world, client):
    world.idp.control(users={"ada": {"groups": ["ml-team"], "active": False}})
    answer = sign_in(client, world.idp, "ada")
    assert answer.status_code == 403 and 'data-reason="denied"' in answer.content.decode()
    assert not User.objects.filter(username="ada").exists()


def test_a_provider_that_cannot_be_reached_is_said_so(world, client, settings):
    settings.PORTAL_OIDC_ISSUER = "http://127.0.0.1:9"
    answer = client.get("/sso/sign-in/")
    assert answer.status_code == 502 and 'data-reason="unreachable"' in answer.content.decode()


def test_without_a_provider_there_is_no_button_and_no_sign_in(db, client, settings):
    settings.PORTAL_OIDC_ISSUER = ""
    assert "sso-sign-in" not in client.get("/login/").content.decode()
    answer = client.get("/sso/sign-in/")
    assert answer.status_code == 404 and 'data-reason="not_configured"' in answer.content.decode()


def test_it_returns_to_the_page_asked_for(world, client):
    world.idp.control(users={"ada": {"groups": []}})
    answer = callback(client, world.idp.log_in(start(client, "/tokens/"), "ada"))
    assert answer["Location"] == "/tokens/"
