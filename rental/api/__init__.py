"""The compute side's REST API (v1): each module mounts its endpoints with ``register``
(viewsets) and ``urlpatterns``, named in ``portal.api.urls.API_MODULES``. Views parse
input, ask ``portal.access``, call the one service the web page calls, and answer."""
