"""``/api/v1/…`` and the schema with its offline docs.

Each app adds its endpoints in its own modules, named in ``API_MODULES`` by their dotted
path (so portal imports neither rental nor billing): each has ``register(router)`` for
viewsets and ``urlpatterns`` for anything else. URL names live in the ``api``
namespace (``api:lease-list``); paths have no trailing slash.
"""

from importlib import import_module

from django.urls import include, path
from drf_spectacular.views import (
    SpectacularAPIView,
    SpectacularRedocView,
    SpectacularSwaggerSplitView,
)
from rest_framework.routers import DefaultRouter

from portal.api import config, me

router = DefaultRouter(trailing_slash=False)
router.include_root_view = False

v1 = [
    path("me", me.me, name="me"),
    path("projects/<slug:slug>/config", config.project_config, name="project-config"),
]

API_MODULES: tuple[str, ...] = (
    "rental.api.catalog",
    "rental.api.pools",
    "rental.api.quotas",
    "rental.api.images",
    "rental.api.keys",
    "rental.api.volumes",
    "rental.api.accounts",
    "portal.api.people",
    "portal.api.tokens",
    "portal.api.service_tokens",
    "portal.api.audit",
    "billing.api.statements",
    "billing.api.budgets",
    "billing.api.allocations",
    "rental.api.leases",
    "rental.api.instances",
    "rental.api.usage",
    "rental.api.watches",
    "billing.api.lease_cost",
)

for dotted in API_MODULES:
    module = import_module(dotted)
    module.register(router)
    v1 += module.urlpatterns

v1 += router.urls

urlpatterns = [
    path("api/v1/", include((v1, "api"))),
    path("api/schema/", SpectacularAPIView.as_view(), name="api_schema"),
    # The split view serves Swagger UI's start-up script from a URL, not inline (CSP).
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="api_schema"), name="api_docs"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="api_schema"), name="api_redoc"),
]
