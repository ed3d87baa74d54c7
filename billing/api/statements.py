"""``/api/v1/statements``, ``/statement-lines/{id}/dispute`` and ``/disputes``: monthly
statements with their lines, the manager's sign-off, disputes and the admin's answer,
and the finance exports. The same selectors and services as the statement pages
(billing/views.py); finance and admins read every statement, members their projects'.
Lines carry costs, never where an instance runs or how to reach it."""

from datetime import UTC, datetime
from typing import Any

import django_filters
from django.db.models import QuerySet
from django.http import HttpResponse
from django.utils import timezone, translation
from django.utils.translation import gettext_lazy as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import exceptions, mixins, negotiation, serializers
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from billing import exports, services
from billing.models import LineDispute, Statement, StatementLine
from billing.periods import parse_period
from billing.selectors import StatementView, draft_statement, gpu_model_names
from portal import access
from portal.api.filters import IntegerFilter, PortalFilterSet
from portal.api.views import PortalViewSet
from portal.models import Project

# The months parse_period takes (2000-01 to 2999-12), so the schema allows no other.
PERIOD = OpenApiParameter(
    "period",
    str,
    description="A month as YYYY-MM (UTC).",
    pattern=r"^2[0-9]{3}-(0[1-9]|1[0-2])$",
)


def _period(value: str | None) -> datetime | None:
    try:
        day = parse_period(value)
    except ValueError as invalid:
        raise exceptions.ValidationError({"period": [str(invalid)]}) from None
    return None if day is None else datetime(day.year, day.month, 1, tzinfo=UTC)


class DisputeSerializer(serializers.ModelSerializer):
    line = serializers.IntegerField(source="line_id", read_only=True)
    statement = serializers.IntegerField(source="line.statement_id", read_only=True)
    raised_by = serializers.CharField(source="raised_by.username", read_only=True)
    answered_by = serializers.CharField(
        source="answered_by.username", read_only=True, allow_null=True, default=None
    )
    correction = serializers.IntegerField(
        source="correction_id", read_only=True, allow_null=True, default=None
    )

    class Meta:
        model = LineDispute
        fields = [
            "id",
            "line",
            "statement",
            "status",
            "comment",
            "raised_by",
            "raised_at",
            "answer",
            "answered_by",
            "answered_at",
            "correction",
        ]


class LineSerializer(serializers.Serializer):
    id = serializers.IntegerField(
        allow_null=True, help_text="Null for a line of an open period's live preview."
    )
    kind = serializers.ChoiceField(choices=StatementLine.Kind.choices)
    gpu_model = serializers.CharField(allow_blank=True)
    market = serializers.CharField(allow_blank=True)
    tier = serializers.CharField(allow_blank=True)
    # No max_digits: an open period's lines are computed, not read from their columns,
    # and prices and counts stored at their columns' edge make figures wider than those.
    quantity = serializers.DecimalField(max_digits=None, decimal_places=6, help_text="GPU-hours.")
    unit_price = serializers.DecimalField(max_digits=None, decimal_places=6)
    amount = serializers.DecimalField(max_digits=None, decimal_places=2)
    description = serializers.CharField()
    disputes = DisputeSerializer(many=True)


class StatementSerializer(serializers.ModelSerializer):
    project = serializers.SlugField(
        source="project.slug",
        read_only=True,
        allow_null=True,
        default=None,
        help_text="Null for the platform's own statement (overhead no project pays).",
    )
    period = serializers.SerializerMethodField(help_text="The month, as YYYY-MM.")
    decided_by = serializers.CharField(
        source="decided_by.username", read_only=True, allow_null=True, default=None
    )
    total = serializers.SerializerMethodField(
        help_text="As closed; null for a draft, whose total is live in its detail."
    )

    class Meta:
        model = Statement
        fields = [
            "id",
            "project",
            "period",
            "status",
            "currency",
            "total",
            "closed_at",
            "decided_by",
            "decided_at",
        ]

    def get_period(self, statement: Statement) -> str:
        return f"{statement.period:%Y-%m}"

    def get_total(self, statement: Statement) -> str | None:
        if statement.status == Statement.Status.DRAFT:
            return None
        return f"{statement.total:.2f}"


class StatementDetailSerializer(serializers.Serializer):
    id = serializers.IntegerField(allow_null=True)
    project = serializers.SlugField(allow_null=True)
    period = serializers.CharField()
    status = serializers.ChoiceField(choices=Statement.Status.choices)
    currency = serializers.CharField()
    total = serializers.DecimalField(max_digits=None, decimal_places=2)
    closed_at = serializers.DateTimeField(allow_null=True)
    decided_by = serializers.CharField(allow_null=True)
    decided_at = serializers.DateTimeField(allow_null=True)
    lines = LineSerializer(many=True)


def statement_view(
    statement: Statement | None, *, project: Project | None, period: Any
) -> StatementView:
    """The statement as its page shows it: the stored lines once closed, the live preview
    (computed lines and the manual ones) while its period is open."""
    if project is not None:
        return draft_statement(project_id=project.pk, period=period, now=timezone.now())
    assert statement is not None
    return StatementView(
        project_id=0,
        period=datetime(period.year, period.month, 1, tzinfo=UTC),
        lines=list(statement.lines.order_by("id")),
        currency=statement.currency,
        status=statement.status,
        statement=statement,
    )


def detail(view: StatementView, project: Project | None) -> dict[str, Any]:
    stored = view.statement
    names = gpu_model_names(view.lines)
    disputes: dict[int, list[LineDispute]] = {}
    if stored is not None and not view.is_draft:
        for dispute in LineDispute.objects.filter(line__statement=stored).select_related(
            "line", "raised_by", "answered_by"
        ):
            disputes.setdefault(dispute.line_id, []).append(dispute)
    lines = []
    for line in view.lines:
        pk = getattr(line, "pk", None)
        lines.append(
            {
                "id": pk,
                "kind": line.kind,
                "gpu_model": names.get(getattr(line, "gpu_model_id", None) or 0, ""),
                "market": line.market,
                "tier": line.tier,
                "quantity": line.quantity,
                "unit_price": line.unit_price,
                "amount": line.amount,
                "description": line.description,
                "disputes": disputes.get(pk, []) if pk else [],
            }
        )
    decided = stored is not None and stored.decided_at is not None
    return {
        "id": stored.pk if stored is not None else None,
        "project": project.slug if project is not None else None,
        "period": f"{view.period:%Y-%m}",
        "status": view.status,
        "currency": view.currency,
        "total": view.total,
        "closed_at": stored.closed_at if stored is not None else None,
        "decided_by": stored.decided_by.username if decided and stored.decided_by else None,
        "decided_at": stored.decided_at if decided else None,
        "lines": lines,
    }


class StatementFilter(PortalFilterSet):
    project = django_filters.CharFilter(field_name="project__slug", max_length=50)
    period = django_filters.CharFilter(method="in_period", max_length=7)

    class Meta:
        model = Statement
        fields = ["project", "period", "status"]

    def in_period(self, queryset: QuerySet[Statement], name: str, value: str) -> QuerySet:
        start = _period(value)
        return queryset.filter(period=start.date()) if start else queryset


class FileNegotiation(negotiation.BaseContentNegotiation):
    """The export answers a file of the kind ``?format=`` names, and any error as JSON:
    DRF's own negotiation would read ``format`` as a renderer's name and answer 404."""

    def select_parser(self, request: Request, parsers: list) -> Any:
        return parsers[0] if parsers else None

    def select_renderer(self, request: Request, renderers: list, format_suffix: Any = None):
        return renderers[0], renderers[0].media_type


@extend_schema_view(
    list=extend_schema(
        summary="Statements: all for finance and admins, your projects' for members.",
        parameters=[PERIOD],
    ),
    retrieve=extend_schema(
        summary="One statement with its lines and their disputes.",
        responses=StatementDetailSerializer,
    ),
    preview=extend_schema(
        summary="A project's statement for a month as its page shows it (the open "
        "period's live preview by default).",
        parameters=[
            OpenApiParameter(
                "project",
                str,
                required=True,
                description="The project's slug.",
                pattern=r"^[-a-zA-Z0-9_]+$",  # a slug, never empty (that is a 400)
            ),
            PERIOD,
        ],
        responses=StatementDetailSerializer,
    ),
    approve=extend_schema(
        summary="Sign off a closed statement (the project's managers).",
        request=None,
        responses=StatementDetailSerializer,
    ),
    export=extend_schema(
        summary="The statement as CSV (one row per line) or as a PDF to file.",
        parameters=[
            OpenApiParameter("format", str, enum=["csv", "pdf"], required=True),
        ],
        responses={
            (200, "text/csv"): OpenApiResponse(OpenApiTypes.STR),
            (200, "application/pdf"): OpenApiResponse(OpenApiTypes.BINARY),
        },
    ),
)
class StatementViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, PortalViewSet):
    serializer_class = StatementSerializer
    filterset_class = StatementFilter
    ordering = ["-period", "project__slug"]
    ordering_fields = ["period", "status", "total"]

    def get_queryset(self) -> QuerySet[Statement]:
        if getattr(self, "swagger_fake_view", False):
            return Statement.objects.none()
        statements = Statement.objects.select_related("project", "decided_by")
        return access.scope(statements, self.request.user)

    def retrieve(self, request: Request, pk: Any = None) -> Response:
        statement = self.get_object()
        view = statement_view(statement, project=statement.project, period=statement.period)
        return Response(StatementDetailSerializer(detail(view, statement.project)).data)

    @action(detail=False, methods=["get"], filter_backends=[], pagination_class=None)
    def preview(self, request: Request) -> Response:
        slug = request.query_params.get("project", "")
        if not slug:
            raise exceptions.ValidationError({"project": [_("Name the project by its slug.")]})
        project = access.get_project_or_404(request.user, slug[:50])
        view = draft_statement(
            project_id=project.pk,
            period=_period(request.query_params.get("period")),
            now=timezone.now(),
        )
        return Response(StatementDetailSerializer(detail(view, project)).data)

    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: Any = None) -> Response:
        statement = self.get_object()
        if statement.project is None:
            raise exceptions.NotFound
        access.require_manager(request.user, statement.project)
        statement = services.approve_statement(
            statement_id=statement.pk, actor=request.user, source="api"
        )
        view = statement_view(statement, project=statement.project, period=statement.period)
        return Response(StatementDetailSerializer(detail(view, statement.project)).data)

    @action(
        detail=True,
        methods=["get"],
        content_negotiation_class=FileNegotiation,
        filter_backends=[],
    )
    def export(self, request: Request, pk: Any = None) -> HttpResponse:
        statement = self.get_object()
        wanted = request.query_params.get("format", "")
        if wanted not in ("csv", "pdf"):
            raise exceptions.ValidationError({"format": [_("Ask for format=csv or format=pdf.")]})
        project = statement.project
        view = statement_view(statement, project=project, period=statement.period)
        slug = project.slug if project is not None else "platform"
        item = exports.ExportStatement(slug, project.name if project else "platform", view)
        names = gpu_model_names(view.lines)
        if wanted == "csv":
            response = HttpResponse(
                exports.to_csv([item], names=names), content_type="text/csv; charset=utf-8"
            )
        else:
            response = HttpResponse(
                exports.to_pdf(
                    [item],
                    names=names,
                    title=_export_title(item.project_name),
                    period=view.period,
                    generated_at=timezone.now(),
                ),
                content_type="application/pdf",
            )
        response["Content-Disposition"] = (
            f'attachment; filename="statement-{slug}-{view.period:%Y-%m}.{wanted}"'
        )
        return response


def _export_title(project_name: str) -> str:
    """The PDF's title, in the exports' language like the rest of the file."""
    with translation.override(exports.LANGUAGE):
        return str(_("Statement of %(project)s") % {"project": project_name})


class DisputeRaiseSerializer(serializers.Serializer):
    comment = serializers.CharField(max_length=2000)


class DisputeAnswerSerializer(serializers.Serializer):
    answer = serializers.CharField(max_length=2000)
    kind = serializers.ChoiceField(
        choices=["adjustment", "credit"],
        required=False,
        allow_blank=True,
        help_text="A correction line in the open period; empty: an explanation alone.",
    )
    amount = serializers.DecimalField(
        max_digits=14, decimal_places=2, required=False, allow_null=True
    )


@extend_schema_view(
    dispute=extend_schema(
        summary="Dispute a line of a closed statement (the project's managers).",
        request=DisputeRaiseSerializer,
        responses={201: DisputeSerializer},
    )
)
class StatementLineViewSet(PortalViewSet):
    serializer_class = DisputeSerializer
    queryset = StatementLine.objects.none()

    @action(detail=True, methods=["post"])
    def dispute(self, request: Request, pk: Any = None) -> Response:
        lines = StatementLine.objects.select_related("statement__project").filter(
            statement__project__isnull=False
        )
        line = access.get_visible_or_404(
            lines, request.user, project_field="statement__project", pk=_int(pk)
        )
        access.require_manager(request.user, line.statement.project)
        data = self.validated(DisputeRaiseSerializer, request)
        dispute = services.dispute_line(
            line_id=line.pk, actor=request.user, comment=data["comment"], source="api"
        )
        return Response(DisputeSerializer(dispute).data, status=201)


def _int(pk: Any) -> int:
    try:
        return int(pk)
    except (TypeError, ValueError):
        raise exceptions.NotFound from None


class DisputeFilter(PortalFilterSet):
    project = django_filters.CharFilter(field_name="line__statement__project__slug", max_length=50)
    statement = IntegerFilter(field_name="line__statement_id")

    class Meta:
        model = LineDispute
        fields = ["status", "project", "statement"]


@extend_schema_view(
    list=extend_schema(summary="Disputes of statement lines you can see."),
    retrieve=extend_schema(summary="One dispute."),
    answer_dispute=extend_schema(
        summary="Answer a dispute, with a correction line or an explanation (admins).",
        request=DisputeAnswerSerializer,
    ),
)
class DisputeViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, PortalViewSet):
    serializer_class = DisputeSerializer
    filterset_class = DisputeFilter
    ordering = ["-raised_at", "-id"]
    ordering_fields = ["raised_at", "status"]

    def get_queryset(self) -> QuerySet[LineDispute]:
        if getattr(self, "swagger_fake_view", False):
            return LineDispute.objects.none()
        disputes = LineDispute.objects.select_related("line", "raised_by", "answered_by")
        return access.scope(disputes, self.request.user, project_field="line__statement__project")

    @action(detail=True, methods=["post"], url_path="answer", url_name="answer")
    def answer_dispute(self, request: Request, pk: Any = None) -> Response:
        access.require_admin(request.user)
        dispute = self.get_object()
        data = self.validated(DisputeAnswerSerializer, request)
        dispute = services.answer_dispute(
            dispute_id=dispute.pk,
            actor=request.user,
            answer=data["answer"],
            kind=data.get("kind", ""),
            amount=data.get("amount"),
            source="api",
        )
        return self.answer(self.get_queryset().get(pk=dispute.pk))


def register(router: Any) -> None:
    router.register("statements", StatementViewSet, basename="statement")
    router.register("statement-lines", StatementLineViewSet, basename="statement-line")
    router.register("disputes", DisputeViewSet, basename="dispute")


urlpatterns: list[Any] = []
