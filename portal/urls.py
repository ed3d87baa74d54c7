from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from portal import views
from rental import heartbeat

admin.site.login = views.throttled_admin_login(admin.site.login)

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("notifications/", views.notifications, name="notifications"),
    path("notifications/read/", views.notifications_read, name="notifications_read"),
    path("audit/", views.audit_log, name="audit_log"),
    path("admin/", admin.site.urls),
    path("i18n/", include("django.conf.urls.i18n")),
    path("api/v1/agent/heartbeat", heartbeat.heartbeat, name="agent_heartbeat"),
    path("", include("portal.api.urls")),
    path("", include("rental.urls")),
    path("billing/", include("billing.urls")),
]
