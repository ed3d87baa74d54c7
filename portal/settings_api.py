"""The published API description's settings (drf-spectacular): its title, where its docs
find their files, and the names of its choice sets."""

SPECTACULAR_SETTINGS = {
    "TITLE": "GPU Portal API",
    "DESCRIPTION": (
        "Request, watch and end GPU leases; quotas, budgets and statements. "
        "Authenticate with a personal token (Authorization: Bearer gpp_…) or a project's "
        "service token (gps_…), which acts only in its project and within its scopes."
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI and Redoc from our own static files: the docs work with no CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # One name per choice set, whatever the fields that use it are called.
    "SCHEMA_PATH_PREFIX": "/api/v1",
    # Several models have a "status" or "state"; each choice set gets its own name.
    "ENUM_NAME_OVERRIDES": {
        "LeaseStatusEnum": "rental.models.Reservation.Status",
        "InstanceStateEnum": "rental.models.Instance.State",
        "InstanceHealthEnum": "rental.models.Instance.Health",
        "TerminationReasonEnum": "rental.models.TerminationReason",
        "StatementStatusEnum": "billing.models.Statement.Status",
        "DisputeStatusEnum": "billing.models.LineDispute.Status",
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "portal.api.schema.add_error_responses",
        # Query strings as strict as the filters behind them (portal/api/openapi.py).
        "portal.api.openapi.describe_query_strings",
        # The agent's heartbeat is a plain view (speed); its operation is written here.
        "rental.api.heartbeat_schema.add_agent_heartbeat",
    ],
}
