"""``/api/v1/projects/{slug}/config``: a project's configuration as YAML (or JSON), and
``POST`` of a YAML document: the diff (``?dry_run=1``) or the diff, applied."""

import json

from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import OpenApiParameter, OpenApiTypes, extend_schema
from rest_framework import exceptions, parsers, renderers, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal import access, projectconfig
from portal.api.filters import refuse_empty
from portal.errors import NotPermitted


class YAMLTextParser(parsers.BaseParser):
    """A YAML body as its text; the service parses it (safely) and names bad paths."""

    media_type = "application/yaml"

    def parse(self, stream, media_type=None, parser_context=None) -> str:
        raw = stream.read() if stream is not None else b""
        if len(raw) > 256 * 1024:
            raise exceptions.ParseError(_("The document is too long."))
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise exceptions.ParseError(_("The document is not UTF-8 text.")) from None


class YAMLRenderer(renderers.BaseRenderer):
    media_type = "application/yaml"
    format = "yaml"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        if isinstance(data, str):
            return data.encode("utf-8")
        return projectconfig.dump(json.loads(json.dumps(data, default=str))).encode("utf-8")


class PlanSerializer(serializers.Serializer):
    project = serializers.CharField()
    dry_run = serializers.BooleanField()
    applied = serializers.BooleanField()
    changes = serializers.ListField(child=serializers.CharField())


def _truthy(value: str | None) -> bool:
    return (value or "").lower() in ("1", "true", "yes")


class ProjectConfigView(APIView):
    parser_classes = [YAMLTextParser]

    def get_renderers(self):
        if getattr(self, "request", None) is not None and self.request.method == "GET":
            return [YAMLRenderer(), renderers.JSONRenderer()]
        return [renderers.JSONRenderer()]

    def handle_exception(self, exc: Exception) -> Response:
        # Errors keep the API's one JSON shape, whatever format the document was asked in.
        self.request.accepted_renderer = renderers.JSONRenderer()
        self.request.accepted_media_type = renderers.JSONRenderer.media_type
        return super().handle_exception(exc)

    @extend_schema(
        operation_id="projects_config_retrieve",
        tags=["projects"],
        parameters=[OpenApiParameter("format", str, enum=["yaml", "json"])],
        responses={
            (200, "application/json"): OpenApiTypes.OBJECT,
            # The YAML text is one mapping, like the JSON answer (a schema describes the
            # parsed document, whatever its media type).
            (200, "application/yaml"): OpenApiTypes.OBJECT,
        },
    )
    def get(self, request: Request, slug: str) -> Response:
        project = access.get_project_or_404(request.user, slug)
        refuse_empty(request.query_params, ["format"])  # content negotiation skips it
        if request.accepted_renderer.format == "json":
            return Response(json.loads(json.dumps(projectconfig.document(project), default=str)))
        return Response(projectconfig.export_project(project))

    @extend_schema(
        operation_id="projects_config_apply",
        tags=["projects"],
        parameters=[OpenApiParameter("dry_run", bool)],
        request={"application/yaml": OpenApiTypes.STR},
        responses=PlanSerializer,
    )
    def post(self, request: Request, slug: str) -> Response:
        project = access.get_project_or_404(request.user, slug)
        if not access.can_manage(request.user, project):
            raise NotPermitted(
                _("Only a manager of the project or an admin applies its configuration.")
            )
        # No body at all is an empty document (refused by its rules, 409); a body in any
        # other media type never reaches here (415).
        text = request.data if isinstance(request.data, str) else ""
        dry_run = _truthy(request.query_params.get("dry_run"))
        plan = projectconfig.plan(text, actor=request.user, project=project)
        if not dry_run:
            projectconfig.apply(plan, actor=request.user)
        return Response(
            PlanSerializer(
                {
                    "project": plan.slug,
                    "dry_run": dry_run,
                    "applied": not dry_run,
                    "changes": plan.changes,
                }
            ).data
        )


project_config = ProjectConfigView.as_view()
