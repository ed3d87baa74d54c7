from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from portal import operator_views, service_token_views, token_views, views

admin.site.login = views.throttled_admin_login(admin.site.login)

handler400 = views.bad_request
handler403 = views.permission_denied
handler404 = views.page_not_found
handler500 = views.server_error

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("sso/", include("portal.sso.urls")),
    path("notifications/", views.notifications, name="notifications"),
    path("notifications/read/", views.notifications_read, name="notifications_read"),
    path("audit/", views.audit_log, name="audit_log"),
    path("tokens/", token_views.token_list, name="tokens"),
    path("tokens/<int:pk>/revoke/", token_views.token_revoke, name="token_revoke"),
    # Chat channels and subscriptions (portal.messaging).
    path("", include("portal.messaging.urls")),
    path(
        "projects/<slug:slug>/service-tokens/",
        service_token_views.service_token_list,
        name="service_tokens",
    ),
    path(
        "projects/<slug:slug>/service-tokens/<int:pk>/revoke/",
        service_token_views.service_token_revoke,
        name="service_token_revoke",
    ),
    path("admin/", admin.site.urls),
    path("i18n/setlang/", views.set_language, name="set_language"),
    # For probes and Prometheus (docs/operations.md, "Health, metrics and logs").
    path("healthz", operator_views.healthz, name="healthz"),
    path("readyz", operator_views.readyz, name="readyz"),
    path("metrics", operator_views.metrics_view, name="metrics"),
    # The agent's heartbeat (a plain view, off DRF), before the API's catch-all for
    # unknown /api/ paths; included by name, so that portal imports no app of its own.
    path("", include("rental.api.heartbeat")),
    path("", include("portal.api.urls")),
    path("", include("rental.urls")),
    path("billing/", include("billing.urls")),
]
