"""The lease request form. Its choices depend on what is picked so far: the GPU models
come from the project's quotas, the offerings from the model, count and market, and the
images from the offering. The rules themselves are the services' (R1, Q2)."""

from decimal import Decimal
from typing import Any

from django import forms
from django.utils.functional import cached_property
from django.utils.translation import gettext_lazy as _

from portal import access
from portal.models import Project
from portal.templatetags.portal_tags import rate
from portal.text import COMMENT_LENGTH, REASON_LENGTH, PlainTextForm
from rental import request_form, selectors
from rental.catalog.capabilities import boots_images, can
from rental.catalog.own_room import in_placement_order
from rental.catalog.volumes import offerings_near
from rental.models import (
    DataVolume,
    GpuModel,
    Image,
    Market,
    Offering,
    Priority,
    Quota,
    SshKey,
)
from rental.providers.base import Capability

# The most GPUs one request may name (far above any pool; a larger number is a field error).
MAX_GPUS = 1024


class ListedChoiceIterator(forms.models.ModelChoiceIterator):
    """The choices of a ``ListedModelChoiceField``: its rows, read once by the form."""

    def __iter__(self) -> Any:
        if self.field.empty_label is not None:
            yield ("", self.field.empty_label)
        for row in self.field.rows:
            yield self.choice(row)

    def __len__(self) -> int:
        return len(self.field.rows) + (self.field.empty_label is not None)


class ListedModelChoiceField(forms.ModelChoiceField):
    """A choice of rows the form has already read (``rows``): drawing the select and
    checking the value sent ask the database nothing more."""

    iterator = ListedChoiceIterator

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rows: list[Any] = []

    def to_python(self, value: Any) -> Any:
        if value in self.empty_values:
            return None
        for row in self.rows:
            if str(row.pk) == str(value):
                return row
        raise forms.ValidationError(
            self.error_messages["invalid_choice"], code="invalid_choice", params={"value": value}
        )


class LeaseRequestForm(PlainTextForm):
    project = ListedModelChoiceField(
        label=_("Project"), queryset=Project.objects.none(), empty_label=None
    )
    gpu_model = ListedModelChoiceField(
        label=_("GPU model"), queryset=GpuModel.objects.none(), empty_label=None
    )
    gpu_count = forms.IntegerField(label=_("GPUs"), min_value=1, max_value=MAX_GPUS, initial=1)
    offering = forms.ChoiceField(
        label=_("Instance type"),
        required=False,
        error_messages={
            "invalid_choice": _(
                "This instance type cannot carry the GPUs asked on this market; "
                "pick another or leave “cheapest that fits”."
            )
        },
    )
    duration_hours = forms.DecimalField(
        label=_("Duration (hours)"), max_digits=8, decimal_places=2, initial=Decimal("8")
    )
    priority = forms.ChoiceField(
        label=_("Priority"), choices=Priority.choices, initial=Priority.EXPERIMENT
    )
    market = forms.ChoiceField(label=_("Market"), choices=Market.choices, initial=Market.ON_DEMAND)
    image = forms.ChoiceField(
        label=_("Image"),
        required=False,
        error_messages={"invalid_choice": _("This image cannot be used with that instance type.")},
    )
    # A plain value, not a choice: a volume the list no longer shows (taken, another
    # project's) is looked up so that the service can say why it cannot be used.
    data_volume = forms.CharField(
        label=_("Data volume"),
        required=False,
        widget=forms.Select,
        help_text=_(
            "Attached to the instance at launch and kept when the lease ends; the instance "
            "starts in the volume's zone."
        ),
    )
    purpose = forms.CharField(
        label=_("Purpose"),
        max_length=300,
        required=False,
        widget=forms.TextInput(attrs={"placeholder": _("e.g. fine-tune the ranking model")}),
    )
    requeue_on_preemption = forms.BooleanField(label=_("Re-queue me if preempted"), required=False)
    allow_other_instance_types = forms.BooleanField(
        label=_("Any instance type with these GPUs"),
        help_text=_("If the chosen type has no capacity, start another type with the same GPUs."),
        required=False,
        initial=True,
    )
    ssh_keys = forms.ModelMultipleChoiceField(
        label=_("SSH keys installed"),
        queryset=SshKey.objects.none(),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text=_("Only these keys can log in to the lease's instances."),
        error_messages={
            "invalid_choice": _("Only your own SSH keys can be installed on your lease."),
            "invalid_pk_value": _("Only your own SSH keys can be installed on your lease."),
        },
    )
    start_mode = forms.ChoiceField(
        label=_("Start"),
        choices=[("now", _("Start now")), ("later", _("Book for a date and time"))],
        initial="now",
        widget=forms.RadioSelect,
        required=False,
    )
    start_at = forms.DateTimeField(
        label=_("Start at (UTC)"),
        required=False,
        input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M:%S"],
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
        error_messages={"invalid": _("Enter a date and time, e.g. 2026-04-06 09:00.")},
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        missing = data.get("start_mode") == "later" and not data.get("start_at")
        if missing and "start_at" not in self.errors:
            self.add_error("start_at", _("Enter when the booking starts."))
        keys_missing = not data.get("ssh_keys") and "ssh_keys" not in self.errors
        if self.checks_keys and keys_missing and self.user_keys:
            self.add_error(
                "ssh_keys", _("Pick at least one key; without one nobody can log in over SSH.")
            )
        return data

    @cached_property
    def user_keys(self) -> list[SshKey]:
        """The person's SSH keys, read when the form is drawn or checked (the estimate
        reads neither)."""
        return list(SshKey.objects.filter(user=self.user).order_by("name"))

    @property
    def wants_booking(self) -> bool:
        return self._raw("start_mode") == "later"

    @property
    def current_start(self) -> Any:
        """The booking's start as typed, or None (start now, or not a valid date yet)."""
        if not self.wants_booking:
            return None
        field = self.fields["start_at"]
        try:
            return field.clean(self._raw("start_at"))
        except forms.ValidationError:
            return None

    def __init__(
        self,
        *args: Any,
        user: Any,
        project_slug: str = "",
        checks_keys: bool = True,
        **kwargs: Any,
    ) -> None:
        """``project_slug``: the project a new form opens on, when it is one of the
        person's (the link from a project's page). ``checks_keys``: whether a request
        without an SSH key is refused here (the estimate panel shows no keys: it does not
        read them)."""
        super().__init__(*args, **kwargs)
        self.user = user
        self.checks_keys = checks_keys
        self.fields["ssh_keys"].queryset = SshKey.objects.filter(user=user).order_by("name")
        if not self.is_bound:
            self.initial.setdefault("ssh_keys", [key.pk for key in self.user_keys])
        member_ids = list(access.roles(user))
        projects = Project.objects.filter(pk__in=member_ids, is_active=True).order_by("name")
        self.fields["project"].queryset = projects
        self.projects = list(projects)
        self.fields["project"].rows = self.projects
        if project_slug and not self.is_bound:
            asked = next((p for p in self.projects if p.slug == project_slug), None)
            if asked is not None:
                self.initial["project"] = asked
        self.current_project = self._pick(
            "project", {str(p.pk): p for p in self.projects}, self.projects
        )
        # The project's quotas, running GPUs and offerings in two queries; the estimate
        # reads them here too (``choices``).
        self.choices = (
            request_form.request_choices(
                user=None if self.is_bound else user, project=self.current_project
            )
            if self.current_project
            else None
        )
        models = self.choices.gpu_models if self.choices else []
        self.fields["gpu_model"].queryset = GpuModel.objects.filter(
            pk__in=[m.pk for m in models]
        ).order_by("name")
        # Same order as ``models``: a select with no valid value shows its first option,
        # which must be the model the estimate falls back to.
        self.fields["gpu_model"].rows = models
        # A new form opens ready to send: on this person's last request in the project
        # if it would still run now, else on the cheapest model one GPU would run on now;
        # failing both, on a model one GPU on demand fits (never on a refusal if avoidable).
        preferred = models
        if self.choices and models and not self.is_bound and "gpu_model" not in self.initial:
            default = self.choices.default(m.pk for m in models)
            if default is not None:
                model_id, count = default
                preferred = sorted(models, key=lambda m: m.pk != model_id)
                self.initial.setdefault("gpu_count", count)
            else:
                fits = {
                    m.pk
                    for m in models
                    if selectors.fitting(
                        self.choices.on_sale(m.pk), gpu_count=1, market=Market.ON_DEMAND
                    )
                }
                preferred = sorted(models, key=lambda m: m.pk not in fits)
        self.current_gpu_model = self._pick("gpu_model", {str(m.pk): m for m in models}, preferred)
        if not self.is_bound:
            self.initial["project"] = self.current_project
            self.initial["gpu_model"] = self.current_gpu_model
        self.too_large: dict[str, int] = {}
        self.current_gpu_count = self._int("gpu_count", 1)
        # Spot is offered only for a model some offering's driver has a spot market for
        # (own GPU servers have none).
        spot = any(can(offering, Capability.SPOT) for offering in self.on_sale)
        markets = [
            (value, label) for value, label in Market.choices if spot or value != Market.SPOT
        ]
        self.fields["market"].choices = markets
        self.current_market = self._choice(
            "market", [value for value, _label in markets], Market.ON_DEMAND
        )
        self.current_priority = self._choice("priority", Priority.values, Priority.EXPERIMENT)
        self.fitting: list[Offering] = (
            selectors.fitting(
                self.on_sale, gpu_count=self.current_gpu_count, market=self.current_market
            )
            if self.current_gpu_model and self.current_gpu_count
            else []
        )
        by_pk = {str(o.pk): o for o in self.fitting}
        self.offerings_by_pk = by_pk
        self.volumes: list[DataVolume] = (
            list(selectors.available_volumes(self.current_project)) if self.current_project else []
        )
        self.volumes_by_pk = {str(v.pk): v for v in self.volumes}
        self.fields["data_volume"].widget.choices = [
            ("", _("No data volume")),
            *[(pk, _volume_label(v)) for pk, v in self.volumes_by_pk.items()],
        ]
        # Only the project's listed volumes steer the preview; any other value is refused
        # when the form is sent.
        self.current_volume = self.volumes_by_pk.get(self._raw("data_volume"))
        # With a volume, "cheapest" means the cheapest one instance in the volume's zone.
        near = (
            offerings_near(
                self.current_volume,
                gpu_model=self.current_gpu_model,
                gpu_count=self.current_gpu_count,
                market=self.current_market,
            )
            if self.current_volume and self.current_gpu_model
            # Without a volume: the pool's placement order (own servers with room first).
            else in_placement_order(self.fitting, gpu_count=self.current_gpu_count or 1)
        )
        default = near[0] if near else (self.fitting[0] if self.fitting else None)
        cheapest = default.instance_type if default else ""
        self.fields["offering"].choices = [
            ("", _("Cheapest that fits (%(type)s)") % {"type": cheapest} if cheapest else "—"),
            *[(pk, _offering_label(o, self.current_market)) for pk, o in by_pk.items()],
        ]
        chosen = by_pk.get(self._raw("offering"))
        self.current_offering = chosen or default
        # Every image the project may use, read once: the estimate checks the request
        # against them (``validated``), the choices are those on the offering.
        self.usable_images: list[Image] = (
            list(selectors.images_for(project=self.current_project))
            if self.current_project and self.current_offering
            else []
        )
        offering = self.current_offering
        # An own server runs its host's system and takes any image (kept for a failover
        # to a cloud); a cloud offers the images of its account and region.
        images = [
            image
            for image in self.usable_images
            if offering is not None
            and (
                not boots_images(offering)
                or (image.account_id, image.region) == (offering.account_id, offering.region)
            )
        ]
        self.images_by_pk = {str(i.pk): i for i in images}
        self.fields["image"].choices = [
            ("", _("Default: %(name)s") % {"name": images[0].name} if images else "—"),
            *[(pk, _image_label(i)) for pk, i in self.images_by_pk.items()],
        ]
        chosen_image = self.images_by_pk.get(self._raw("image"))
        self.current_image = chosen_image or (images[0] if images else None)

    @property
    def on_sale(self) -> list[Offering]:
        """The offerings that sell the GPU model picked (``selectors.offerings_of``)."""
        if self.choices is None or self.current_gpu_model is None:
            return []
        return self.choices.on_sale(self.current_gpu_model.pk)

    def _raw(self, name: str) -> str:
        if self.is_bound:
            return str(self.data.get(self.add_prefix(name), "") or "")
        value = self.initial.get(name, self.fields[name].initial)
        if isinstance(value, Project | GpuModel | Offering | Image | DataVolume):
            return str(value.pk)
        return "" if value is None else str(value)

    def _pick(self, name: str, by_pk: dict[str, Any], ordered: list[Any]) -> Any:
        return by_pk.get(self._raw(name)) or (ordered[0] if ordered else None)

    def _int(self, name: str, default: int) -> int:
        try:
            value = int(self._raw(name))
        except ValueError:
            return default
        limit = self.fields[name].max_value
        if limit is not None and value > limit:
            # Past the field's limit (a huge number would overflow the database's integer):
            # the preview says so instead of computing anything with it.
            self.too_large[name] = limit
            return default
        return value if value >= 1 else default

    def _choice(self, name: str, allowed: list[str], default: str) -> str:
        value = self._raw(name)
        return value if value in allowed else default

    @property
    def raw_duration(self) -> str:
        return self._raw("duration_hours")

    @property
    def raw_offering(self) -> str:
        return self._raw("offering")

    def clean_offering(self) -> Offering | None:
        return self.offerings_by_pk.get(self.cleaned_data.get("offering") or "")

    def clean_image(self) -> Image | None:
        return self.images_by_pk.get(self.cleaned_data.get("image") or "")

    def clean_data_volume(self) -> DataVolume | None:
        value = (self.cleaned_data.get("data_volume") or "").strip()
        if not value:
            return None
        if value in self.volumes_by_pk:
            return self.volumes_by_pk[value]
        # Another of the user's projects' volumes, or one taken since the list was drawn:
        # the service names the reason. Anything else does not exist for this user.
        found = (
            DataVolume.objects.filter(project__in=self.projects, pk=value)
            .exclude(state=DataVolume.State.DELETED)
            .first()
            if value.isascii() and value.isdigit() and len(value) <= 18
            else None
        )
        if found is None:
            raise forms.ValidationError(
                _("Pick one of the project's available data volumes."), code="invalid_choice"
            )
        return found


def _offering_label(offering: Offering, market: str) -> str:
    return _("%(type)s · %(n)s GPU/instance · %(rate)s per GPU-hour · %(region)s") % {
        "type": offering.instance_type,
        "n": offering.gpus_per_instance,
        "rate": rate(offering.rate_per_gpu_hour(market)),
        "region": offering.region,
    }


def _volume_label(volume: DataVolume) -> str:
    return _("%(name)s · %(size)s GB · %(zone)s") % {
        "name": volume.name,
        "size": volume.size_gb,
        "zone": volume.zone,
    }


def _image_label(image: Image) -> str:
    cuda = f"CUDA {image.cuda_version}" if image.cuda_version else ""
    software = image.frameworks or ", ".join(
        f"{name} {version}" for name, version in sorted(image.framework_versions.items())
    )
    saved = _("saved by %(project)s") % {"project": image.project} if image.project_id else ""
    details = " · ".join(part for part in (image.os, cuda, software, saved) if part)
    return f"{image.name} ({details})" if details else image.name


class DecisionForm(PlainTextForm):
    """A manager's comment on a request; the service decides whether it is required.
    Several may share a page (one per request): each is made with its own ``auto_id``."""

    comment = forms.CharField(label=_("Comment"), max_length=COMMENT_LENGTH, required=False)

    def __init__(self, *args: Any, placeholder: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if placeholder:
            self.fields["comment"].widget.attrs["placeholder"] = placeholder


class ExtendForm(PlainTextForm):
    """Extend a lease by some hours. The number is read by the service, which names what
    is wrong with it (R1's limits, the pool's room) on this field."""

    hours = forms.CharField(
        label=_("Extend by (hours)"),
        required=False,
        initial="1",
        widget=forms.NumberInput(attrs={"min": "0.25", "step": "0.25"}),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("auto_id", "extend-%s")  # one of several forms on the lease page
        super().__init__(*args, **kwargs)


class SaveImageForm(PlainTextForm):
    """The name of the image a lease's disk is saved as; the service checks it."""

    name = forms.CharField(
        label=_("Image name"),
        required=False,
        widget=forms.TextInput(
            attrs={"maxlength": "100", "placeholder": _("e.g. ranking env, torch 2.5 + deps")}
        ),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("auto_id", "id_image_%s")  # one of several forms on the lease page
        super().__init__(*args, **kwargs)


class QuotaRequestForm(PlainTextForm):
    """A member asks for a new guarantee, a new ceiling, or both, for one of the project's
    GPU models; the service checks the numbers and the reason (Q1)."""

    gpu_model = forms.ChoiceField(
        label=_("GPU model"),
        widget=forms.Select(attrs={"id": "qr-model"}),
        error_messages={
            "required": _("Choose one of the project's GPU models."),
            "invalid_choice": _("Choose one of the project's GPU models."),
        },
    )
    guaranteed = forms.CharField(
        label=_("New guarantee G (decided by an admin)"),
        required=False,
        widget=forms.NumberInput(attrs={"id": "qr-g", "min": "0"}),
    )
    ceiling = forms.CharField(
        label=_("New ceiling L (decided by a manager)"),
        required=False,
        widget=forms.NumberInput(attrs={"id": "qr-l", "min": "0"}),
    )
    # Its length is the service's to say (with the field's name), like every free text.
    reason = forms.CharField(
        label=_("Why"),
        required=False,
        widget=forms.TextInput(attrs={"id": "qr-reason", "maxlength": str(REASON_LENGTH)}),
    )

    def __init__(
        self, *args: Any, project: Project, quotas: list[Quota] | None = None, **kwargs: Any
    ) -> None:
        """``quotas``: the project's, with their GPU models, by model name, when the
        page has read them already."""
        kwargs.setdefault("auto_id", "qr-%s")
        super().__init__(*args, **kwargs)
        if quotas is None:
            quotas = list(
                Quota.objects.filter(project=project)
                .select_related("gpu_model")
                .order_by("gpu_model__name")
            )
        self.models = {str(quota.gpu_model_id): quota.gpu_model for quota in quotas}
        self.fields["gpu_model"].choices = [(pk, m.name) for pk, m in self.models.items()]

    def clean_gpu_model(self) -> GpuModel:
        return self.models[self.cleaned_data["gpu_model"]]


class RescheduleForm(PlainTextForm):
    """Move or resize a booking that has not started (R2, R3): the new start (UTC), its
    length and its GPUs. The service decides whether the window fits."""

    start = forms.DateTimeField(
        label=_("Starts at (UTC)"),
        input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M:%S"],
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
        error_messages={"invalid": _("Enter a date and time, e.g. 2026-04-06 09:00.")},
    )
    duration_hours = forms.DecimalField(
        label=_("Duration (hours)"), min_value=Decimal("0.25"), max_digits=8, decimal_places=2
    )
    gpu_count = forms.IntegerField(label=_("GPUs"), min_value=1, max_value=MAX_GPUS)

    @classmethod
    def of(cls, lease: Any) -> "RescheduleForm":
        seconds = Decimal(int((lease.end - lease.start).total_seconds()))
        hours = (seconds / 3600).quantize(Decimal("0.01"))
        return cls(
            initial={"start": lease.start, "duration_hours": hours, "gpu_count": lease.gpu_count}
        )
