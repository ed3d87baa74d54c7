"""The image catalog and "Save as image" on a lease."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from portal import access
from portal.errors import DomainError, put_on_form
from rental import selectors
from rental.catalog import images
from rental.forms import SaveImageForm
from rental.models import Reservation
from rental.views.leases import lease_form_again


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
    form = SaveImageForm(request.POST)
    if not form.is_valid():
        return lease_form_again(request, pk, save_image_form=form, status=400)
    try:
        image = images.save_as_image(
            actor=request.user, reservation=lease, name=form.cleaned_data["name"]
        )
    except DomainError as error:
        put_on_form(form, error)
        return lease_form_again(request, pk, save_image_form=form, status=error.page_status)
    messages.success(
        request,
        _("Saving “%(name)s”. It appears in the request form once the cloud has it ready.")
        % {"name": image.name},
    )
    return redirect("rental:images")
