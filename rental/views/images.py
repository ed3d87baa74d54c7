"""The image catalog and "Save as image" on a lease."""

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from portal import access
from portal.errors import DomainError
from rental import selectors
from rental.catalog import images
from rental.models import Reservation


def may_save_image(user: Any, lease: Reservation) -> bool:
    if lease.status not in images.SAVABLE_STATUSES:
        return False
    return access.can_manage(user, lease.project_id) or (
        lease.requester_id == user.pk and access.can_request_for(user, lease.project_id)
    )


@login_required
def image_list(request: HttpRequest) -> HttpResponse:
    rows = list(selectors.image_catalog(request.user))
    return render(
        request,
        "rental/images/images.html",
        {
            "site_images": [image for image in rows if image.project_id is None],
            "project_images": [image for image in rows if image.project_id is not None],
        },
    )


@login_required
@require_POST
def lease_save_image(request: HttpRequest, pk: int) -> HttpResponse:
    lease = access.get_lease_to_act_on_or_404(Reservation.objects.all(), request.user, pk=pk)
    try:
        image = images.save_as_image(
            actor=request.user, reservation=lease, name=request.POST.get("name", "")
        )
    except DomainError as error:
        messages.error(request, error.message)
        return redirect("rental:lease", pk=pk)
    messages.success(
        request,
        _("Saving “%(name)s”. It appears in the request form once the cloud has it ready.")
        % {"name": image.name},
    )
    return redirect("rental:images")
