"""The chat channels' pages: a project's channels and their delivery record (its managers
and admins), and each person's subscriptions (members of the channel's project)."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Count, Q
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import get_language
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from portal import access, languages
from portal.errors import DomainError
from portal.messaging import kinds, services, subscriptions
from portal.messaging.models import Channel, Delivery, Subscription
from portal.models import Project
from portal.notifications import Event

RECORD_SIZE = 50
EMPTY_FORM = {"name": "", "kind": Channel.Kind.SLACK, "address": "", "secret": ""}


def _managed(request: HttpRequest, slug: str) -> Project:
    project = access.get_project_or_404(request.user, slug)
    access.require_manager(request.user, project)
    return project


def _channel_page(
    request: HttpRequest,
    project: Project,
    *,
    values: dict[str, str] | None = None,
    errors: dict[str, str] | None = None,
    status: int = 200,
) -> HttpResponse:
    channels = list(
        Channel.objects.filter(project=project).annotate(
            sent=Count("deliveries", filter=_status(Delivery.Status.SENT)),
            failed=Count("deliveries", filter=_status(Delivery.Status.FAILED)),
        )
    )
    record = list(
        Delivery.objects.filter(channel__project=project)
        .select_related("channel")
        .order_by("-created_at", "-id")[:RECORD_SIZE]
    )
    context = {
        "project": project,
        "channels": channels,
        "record": record,
        "kinds": Channel.Kind.choices,
        "examples": {kind: kinds.EXAMPLES[kind] for kind in Channel.Kind.values},
        "values": values or EMPTY_FORM,
        "errors": errors or {},
    }
    return render(request, "messaging/channels.html", context, status=status)


def _status(status: str) -> Q:
    return Q(deliveries__status=status)


@never_cache
@login_required
def channels(request: HttpRequest, slug: str) -> HttpResponse:
    project = _managed(request, slug)
    if request.method != "POST":
        return _channel_page(request, project)
    values = {key: request.POST.get(key, "") for key in EMPTY_FORM}
    try:
        channel = services.add_channel(
            actor=request.user,
            project=project,
            name=values["name"],
            kind=values["kind"],
            address=values["address"],
            secret=values["secret"],
        )
    except DomainError as error:
        # The address and secret are never sent back into the page.
        kept = {**values, "address": "", "secret": ""}
        field = error.field if error.field in EMPTY_FORM else "name"
        return _channel_page(
            request, project, values=kept, errors={field: error.message}, status=error.page_status
        )
    messages.success(request, _("Channel %(name)s added.") % {"name": channel.name})
    return redirect("messaging:channels", slug=project.slug)


def _channel_of(request: HttpRequest, slug: str, pk: int) -> Channel:
    project = _managed(request, slug)
    channel = Channel.objects.filter(project=project, pk=pk).select_related("project").first()
    if channel is None:
        raise Http404
    return channel


@never_cache
@login_required
@require_POST
def channel_test(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    channel = _channel_of(request, slug, pk)
    services.send_test(
        actor=request.user,
        channel=channel,
        language=languages.supported(get_language()) or "en",
        link=request.build_absolute_uri(reverse("messaging:subscriptions")),
    )
    messages.info(
        request,
        _("A test message to %(name)s is on its way; its result appears in the record below.")
        % {"name": channel.name},
    )
    return redirect("messaging:channels", slug=slug)


@never_cache
@login_required
@require_POST
def channel_remove(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    channel = _channel_of(request, slug, pk)
    services.remove_channel(actor=request.user, channel=channel)
    messages.info(request, _("Channel %(name)s removed.") % {"name": channel.name})
    return redirect("messaging:channels", slug=slug)


def _member_channels(request: HttpRequest) -> list[tuple[Channel, str]]:
    roles = access.roles(request.user)
    found = Channel.objects.filter(project_id__in=list(roles)).select_related("project")
    return [(channel, roles[channel.project_id]) for channel in found]


@never_cache
@login_required
def subscription_list(request: HttpRequest) -> HttpResponse:
    rows = []
    for channel, role in _member_channels(request):
        chosen = subscriptions.choices_of(request.user, channel, role)
        rows.append(
            {
                "channel": channel,
                "events": [(value, label, chosen[value]) for value, label in Event.choices],
            }
        )
    context = {"rows": rows, "modes": Subscription.Mode.choices}
    return render(request, "messaging/subscriptions.html", context)


@never_cache
@login_required
@require_POST
def subscription_save(request: HttpRequest, pk: int) -> HttpResponse:
    channel = Channel.objects.filter(pk=pk).first()
    if channel is None or access.role_in(request.user, channel.project_id) is None:
        raise Http404
    # Each select sends "event=mode" under one name, so the form's fields are fixed.
    choices = dict(item.partition("=")[::2] for item in request.POST.getlist("choice"))
    if not choices:
        messages.error(request, _("Choose how you want each event."))
        return redirect("messaging:subscriptions")
    services.set_subscriptions(user=request.user, channel=channel, choices=choices)
    messages.success(
        request, _("Your subscriptions to %(name)s are saved.") % {"name": channel.name}
    )
    return redirect("messaging:subscriptions")
