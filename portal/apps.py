from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = _("People and projects")

    def ready(self) -> None:
        from portal import login_throttle  # noqa: F401  (connects the failed-login counter)
