"""``/api/v1/budgets``: projects' monthly budgets and their alert thresholds (BU1–BU3).
Members and finance read them; a project's managers (and admins) set them through the
service the project page's budget form uses (billing.budgets.set_budget)."""

from typing import Any

import django_filters
from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_field, extend_schema_view
from rest_framework import mixins, serializers
from rest_framework.request import Request
from rest_framework.response import Response

from billing import budgets
from billing.models import Budget, BudgetAlert
from billing.thresholds import readable_thresholds
from portal import access
from portal.api.filters import PortalFilterSet
from portal.api.views import PortalViewSet


class ThresholdSerializer(serializers.Serializer):
    percent = serializers.IntegerField(min_value=1, max_value=1000)
    kind = serializers.ChoiceField(choices=BudgetAlert.Kind.choices)


class BudgetSerializer(serializers.ModelSerializer):
    project = serializers.SlugField(source="project.slug", read_only=True)
    thresholds = serializers.SerializerMethodField()

    class Meta:
        model = Budget
        fields = ["id", "project", "monthly_amount", "cap_policy", "thresholds"]

    @extend_schema_field(ThresholdSerializer(many=True))
    def get_thresholds(self, budget: Budget) -> list[dict[str, Any]]:
        """The thresholds that read as thresholds: one stored malformed (an old version,
        the admin, an import) is left out rather than failing the whole list."""
        return readable_thresholds(budget.thresholds)[0]


class BudgetWriteSerializer(serializers.Serializer):
    monthly_amount = serializers.DecimalField(max_digits=14, decimal_places=2, min_value=0)
    cap_policy = serializers.ChoiceField(
        choices=Budget.CapPolicy.choices, default=Budget.CapPolicy.REFUSE_NEW
    )
    thresholds = ThresholdSerializer(many=True, max_length=20, default=list)


class BudgetCreateSerializer(BudgetWriteSerializer):
    project = serializers.SlugField(max_length=50, help_text="The project's slug.")


class BudgetFilter(PortalFilterSet):
    project = django_filters.CharFilter(field_name="project__slug", max_length=50)

    class Meta:
        model = Budget
        fields = ["project", "cap_policy"]


@extend_schema_view(
    list=extend_schema(summary="Budgets of the projects you can see."),
    retrieve=extend_schema(summary="One project's budget."),
    create=extend_schema(
        summary="Set a project's budget (its managers, admins): made or replaced.",
        request=BudgetCreateSerializer,
        responses={200: BudgetSerializer, 201: BudgetSerializer},
    ),
    update=extend_schema(
        summary="Replace a budget (the project's managers, admins).",
        request=BudgetWriteSerializer,
    ),
)
class BudgetViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, PortalViewSet):
    serializer_class = BudgetSerializer
    filterset_class = BudgetFilter
    ordering = ["project__slug"]
    ordering_fields = ["project__slug", "monthly_amount"]
    http_method_names = ["get", "post", "put", "head", "options"]

    def get_queryset(self) -> QuerySet[Budget]:
        if getattr(self, "swagger_fake_view", False):
            return Budget.objects.none()
        return access.scope(Budget.objects.select_related("project"), self.request.user)

    def create(self, request: Request) -> Response:
        data = self.validated(BudgetCreateSerializer, request)
        project = access.get_project_or_404(request.user, data["project"])
        access.require_manager(request.user, project)
        existed = Budget.objects.filter(project=project).exists()
        budget = self._set(project, data)
        return self.answer(budget, status=200 if existed else 201)

    def update(self, request: Request, pk: Any = None) -> Response:
        budget = self.get_object()
        access.require_manager(request.user, budget.project)
        data = self.validated(BudgetWriteSerializer, request)
        return self.answer(self._set(budget.project, data))

    def _set(self, project: Any, data: dict[str, Any]) -> Budget:
        return budgets.set_budget(
            project=project,
            actor=self.request.user,
            monthly_amount=data["monthly_amount"],
            thresholds=[dict(item) for item in data["thresholds"]],
            cap_policy=data["cap_policy"],
            source="api",
        )


def register(router: Any) -> None:
    router.register("budgets", BudgetViewSet, basename="budget")


urlpatterns: list[Any] = []
