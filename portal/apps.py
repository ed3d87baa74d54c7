from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = _("People and projects")

    def ready(self) -> None:
        # In ready() on purpose: these modules use models, which may be imported only
        # once the app registry is ready.
        from django.contrib.auth.signals import user_logged_in  # noqa: PLC0415

        from portal import login_throttle  # noqa: F401, PLC0415  (connects the failed-login counter)
        from portal.middleware import start_session_clock  # noqa: PLC0415

        user_logged_in.connect(start_session_clock, dispatch_uid="portal-session-clock")
