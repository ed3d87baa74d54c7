"""Who may see and do what. Every view and API view asks here, nowhere else.

Rules (DESIGN.md §5): an engineer sees only their projects; a manager decides
only for projects they manage; admins (staff) see and configure everything;
finance reads everything. An object outside a user's reach is answered 404, so
its existence is not revealed. A project's service token acts as an engineer of that
project alone (``roles``), within its scopes (``portal.service_tokens``).
"""

import hmac
import ipaddress
from typing import Any, TypeVar

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Model, QuerySet
from django.http import Http404, HttpRequest

from portal import session_user
from portal.models import FINANCE_GROUP, Membership, Project

User = AbstractBaseUser | AnonymousUser
M = TypeVar("M", bound=Model)


def is_admin(user: User) -> bool:
    return bool(user.is_authenticated and user.is_active and user.is_staff)


def is_finance(user: User) -> bool:
    if not (user.is_authenticated and user.is_active):
        return False
    cached = getattr(user, "_portal_is_finance", None)
    if cached is None:
        cached = user.groups.filter(name=FINANCE_GROUP).exists()
        user._portal_is_finance = cached
    return cached


def sees_everything(user: User) -> bool:
    return is_admin(user) or is_finance(user)


def roles(user: User) -> dict[int, str]:
    """Project id → role for the user's active projects, read once per user object."""
    if not (user.is_authenticated and user.is_active):
        return {}
    cached = getattr(user, "_portal_roles", None)
    if cached is None:
        cached = session_user.roles(user.pk)
        user._portal_roles = cached
    return cached


def role_in(user: User, project: Project | int) -> str | None:
    project_id = project if isinstance(project, int) else project.pk
    return roles(user).get(project_id)


def visible_projects(user: User) -> QuerySet[Project]:
    if sees_everything(user):
        return Project.objects.all()
    return Project.objects.filter(pk__in=list(roles(user)))


def managed_project_ids(user: User) -> list[int]:
    if is_admin(user):
        return list(Project.objects.values_list("pk", flat=True))
    return [pid for pid, role in roles(user).items() if role == Membership.Role.MANAGER]


def manages_any(user: User) -> bool:
    """Admins, and managers of at least one project: who has an approvals inbox."""
    return is_admin(user) or Membership.Role.MANAGER in roles(user).values()


def can_view_project(user: User, project: Project | int) -> bool:
    return sees_everything(user) or role_in(user, project) is not None


def can_request_for(user: User, project: Project | int) -> bool:
    """Members (engineers and managers) rent GPUs for their project."""
    return role_in(user, project) is not None


def can_manage(user: User, project: Project | int) -> bool:
    return is_admin(user) or role_in(user, project) == Membership.Role.MANAGER


def can_act_on_lease(user: User, lease: Any) -> bool:
    """End, extend, stop, resume, cancel or save as image: the engineer who asked for the
    lease (while still a member), any manager of its project, admins."""
    if can_manage(user, lease.project_id):
        return True
    return lease.requester_id == user.pk and can_request_for(user, lease.project_id)


def can_see_connection(user: User, lease: Any) -> bool:
    """Instance addresses, SSH and Jupyter details: members of the project and admins.
    Finance reads costs and usage, never where an instance is or how to reach it."""
    return is_admin(user) or can_request_for(user, lease.project_id)


def another_decider_exists(user: User, project: Project | int) -> bool:
    """Whether someone other than ``user`` could decide the project's requests: another
    active manager of the project, or an active admin."""
    project_id = project if isinstance(project, int) else project.pk
    others = Membership.objects.filter(
        project_id=project_id, role=Membership.Role.MANAGER, user__is_active=True
    ).exclude(user_id=user.pk)
    if others.exists():
        return True
    admins = get_user_model().objects.filter(is_staff=True, is_active=True)
    return admins.exclude(pk=user.pk).exists()


def scope(queryset: QuerySet[M], user: User, *, project_field: str = "project") -> QuerySet[M]:
    """Restrict any project-owned queryset to what the user may see."""
    if sees_everything(user):
        return queryset
    return queryset.filter(**{f"{project_field}_id__in": list(roles(user))})


def get_visible_or_404(
    queryset: QuerySet[M], user: User, *, project_field: str = "project", **lookup: Any
) -> M:
    try:
        return scope(queryset, user, project_field=project_field).get(**lookup)
    except queryset.model.DoesNotExist:
        raise Http404 from None


def get_lease_to_act_on_or_404(queryset: QuerySet[M], user: User, **lookup: Any) -> M:
    """A lease the user may act on (``can_act_on_lease``); any other is a 404, as an
    outsider's is, so a reader (finance, another engineer) cannot even try."""
    lease = get_visible_or_404(queryset, user, **lookup)
    if not can_act_on_lease(user, lease):
        raise Http404
    return lease


def get_project_or_404(user: User, slug: str) -> Project:
    try:
        return visible_projects(user).get(slug=slug)
    except Project.DoesNotExist:
        raise Http404 from None


def require_manager(user: User, project: Project) -> None:
    """Managers of the project (and admins) only; others get 404 like any outsider."""
    if not can_manage(user, project):
        raise Http404


def require_member(user: User, project: Project) -> None:
    if not can_request_for(user, project):
        raise Http404


def require_admin(user: User) -> None:
    if not is_admin(user):
        raise Http404


# --- Operators' endpoints (docs/operations.md, "Health, metrics and logs") ------------------
# /healthz and /readyz are public, like a load balancer's probe: they answer with checks'
# names and plain words, never with data, hosts or credentials. /metrics is not.


def metrics_open() -> bool:
    """Whether /metrics answers anyone at all: a token or an address is configured."""
    return bool(settings.PORTAL_METRICS_TOKEN or settings.PORTAL_METRICS_NETWORKS)


def may_read_metrics(request: HttpRequest) -> bool:
    """A scraper with the bearer token ``PORTAL_METRICS_TOKEN``, or one connecting from a
    network of ``PORTAL_METRICS_ADDRESSES`` (its own address: a forwarded header is never
    believed). Signing in gives no access: metrics are for machines."""
    token = settings.PORTAL_METRICS_TOKEN
    scheme, _sep, given = request.headers.get("Authorization", "").partition(" ")
    if token and scheme == "Bearer" and hmac.compare_digest(given.strip().encode(), token.encode()):
        return True
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped  # a dual-stack socket's view of an IPv4 peer
    return any(address in network for network in settings.PORTAL_METRICS_NETWORKS)
