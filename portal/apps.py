from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = _("People and projects")

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_in

        from portal import login_throttle  # noqa: F401  (connects the failed-login counter)
        from portal.middleware import start_session_clock

        user_logged_in.connect(start_session_clock, dispatch_uid="portal-session-clock")
