"""The written-out statements every request runs (``portal.session_user`` and
``session_user.ROLES_SQL``) answer what the ORM's queries they replace answer, for every kind of
user: a member of active and inactive projects, finance, staff, with read and unread
notifications, inactive, a service token's account, and no user at all."""

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection
from django.db.models import CharField, Count, Exists, IntegerField, OuterRef, Subquery, Value
from django.db.models.functions import Coalesce
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from portal import access, service_tokens, session_user
from portal.login_throttle import ThrottledModelBackend
from portal.models import FINANCE_GROUP, Membership, Notification, ServiceToken
from tests import factories


def orm_user(pk):
    """The ORM's query the statement replaces, as it was written."""
    finance = Group.objects.filter(user=OuterRef("pk"), name=FINANCE_GROUP)
    unread = (
        Notification.objects.filter(user=OuterRef("pk"), read_at__isnull=True)
        .order_by()
        .values("user")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return (
        get_user_model()
        ._default_manager.annotate(
            is_finance=Exists(finance),
            unread=Coalesce(Subquery(unread, output_field=IntegerField()), 0),
            is_token=Exists(ServiceToken.objects.filter(account=OuterRef("pk"))),
        )
        .filter(pk=pk)
        .first()
    )


def orm_roles(user) -> dict[int, str]:
    """``access.roles`` as the ORM's union, as it was written."""
    members = Membership.objects.filter(user=user, project__is_active=True).values_list(
        "project_id", "role"
    )
    as_token = (
        ServiceToken.objects.filter(
            account=user,
            project__is_active=True,
            revoked_at__isnull=True,
            expires_at__gt=timezone.now(),
        )
        .annotate(role=Value(Membership.Role.ENGINEER.value, output_field=CharField()))
        .values_list("project_id", "role")
    )
    return dict(members.order_by().union(as_token.order_by()))


def fields(user) -> dict:
    return {f.attname: getattr(user, f.attname) for f in user._meta.concrete_fields}


def token(f0, name, *, days=30, project=None):
    row, _ = service_tokens.create_service_token(
        actor=f0.admin,
        project=project or f0.alpha,
        name=name,
        scopes=["read"],
        expires_at=timezone.now() + timedelta(days=days),
    )
    return row


def a_world(f0):
    """Users of every kind, with the rows that decide their answers."""
    dormant = factories.project("dormant")
    dormant.is_active = False
    dormant.save()
    many = factories.user("many", finance=True)
    factories.member(many, f0.alpha, Membership.Role.MANAGER)
    factories.member(many, f0.beta)
    factories.member(many, dormant, Membership.Role.MANAGER)
    for n in range(3):
        Notification.objects.create(user=many, subject=f"n{n}", body="b")
    Notification.objects.create(user=many, subject="read", body="b", read_at=timezone.now())
    only_dormant = factories.user("only-dormant")
    factories.member(only_dormant, dormant)
    gone = factories.user("gone")
    factories.member(gone, f0.alpha)
    gone.is_active = False
    gone.save()
    live = token(f0, "live")
    revoked = token(f0, "revoked")
    revoked.revoked_at = timezone.now()
    revoked.save()
    expired = token(f0, "expired")
    expired.expires_at = timezone.now() - timedelta(minutes=1)
    expired.save()
    on_dormant = token(f0, "dormant", project=f0.beta)
    on_dormant.project = dormant
    on_dormant.save()
    people = [f0.admin, f0.alice, f0.alpha_manager, f0.outsider, many, only_dormant, gone]
    return people, [live, revoked, expired, on_dormant]


def test_the_session_statement_answers_what_the_orm_does(f0):
    people, tokens = a_world(f0)
    for user in people + [t.account for t in tokens]:
        read = session_user.read(user.pk)
        expected = orm_user(user.pk)
        assert fields(read) == fields(expected), user.username
        assert read._portal_is_finance is expected.is_finance, user.username
        assert read._portal_unread == expected.unread, user.username
        assert read._portal_is_token is expected.is_token, user.username
        if not expected.is_token:  # a token's account has no session: its roles are read apart
            assert read._portal_roles == orm_roles(user), user.username
    many = session_user.read(people[4].pk)
    assert many._portal_is_finance is True and many._portal_unread == 3
    assert sorted(many._portal_roles.values()) == ["engineer", "manager"]
    assert session_user.read(10**9) is None


def test_the_roles_statement_answers_what_the_orm_does(f0):
    people, tokens = a_world(f0)
    for user in people + [t.account for t in tokens]:
        fresh = get_user_model().objects.get(pk=user.pk)  # no roles read with it
        expected = orm_roles(fresh) if fresh.is_active else {}  # roles' own rule
        assert access.roles(fresh) == expected, user.username
    live = get_user_model().objects.get(pk=tokens[0].account_id)
    assert access.roles(live) == {f0.alpha.pk: "engineer"}


def test_the_backend_gives_no_session_to_a_token_or_an_inactive_user(f0):
    people, tokens = a_world(f0)
    backend = ThrottledModelBackend()
    assert backend.get_user(f0.alice.pk) == f0.alice
    assert backend.get_user(people[-1].pk) is None  # inactive
    assert backend.get_user(tokens[0].account_id) is None
    assert backend.get_user(10**9) is None


def test_a_page_reads_its_user_and_roles_in_one_query(f0, client):
    client.force_login(f0.alpha_manager)
    with CaptureQueriesContext(connection) as queries:
        page = client.get(reverse("dashboard"))
    assert page.status_code == 200
    reads = [q["sql"] for q in queries if "portal_membership" in q["sql"]]
    assert len(reads) == 1 and "auth_user" in reads[0]
    assert b'href="/approvals/"' in page.content  # the manager's navigation
