from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class SsoConfig(AppConfig):
    name = "portal.sso"
    label = "sso"
    verbose_name = _("Single sign-on")
