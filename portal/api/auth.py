"""``Authorization: Bearer …`` with a personal token (``gpp_…``, portal/tokens.py) or a
project's service token (``gps_…``, portal/service_tokens.py), and the scopes that bound
what a service token may call."""

from django.utils.translation import gettext_lazy as _
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions

from portal import service_tokens, tokens
from portal.models import ServiceToken


class TokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed(_("Send one token: Authorization: Bearer …"))
        try:
            raw = header[1].decode("ascii")
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed(_("The token is not valid.")) from None
        if raw.startswith(service_tokens.PREFIX):
            service = service_tokens.authenticate(raw)
            if service is not None:
                return service.account, service
        else:
            row = tokens.authenticate(raw)
            if row is not None:
                return row.user, row
        raise exceptions.AuthenticationFailed(_("The token is not valid, expired or revoked."))

    def authenticate_header(self, request) -> str:
        return f'{self.keyword} realm="api"'


class ServiceTokenScopes(permissions.BasePermission):
    """A service token's call must fall under one of its scopes
    (``service_tokens.scope_needed``); any other caller passes. Refused: a 403 that
    names the scope missing, before the view looks anything up."""

    def has_permission(self, request, view) -> bool:
        token = request.auth
        if not isinstance(token, ServiceToken):
            return True
        needed = service_tokens.scope_needed(
            request.method, getattr(view, "basename", None), getattr(view, "action", None)
        )
        if needed is None:
            raise exceptions.PermissionDenied(
                _(
                    "A service token may not make this call, whatever its scopes: it reads "
                    "(scope “read”) and asks for, extends, ends and cancels leases (scope "
                    "“leases”)."
                ),
                code="not_for_service_tokens",
            )
        if needed not in token.scopes:
            raise exceptions.PermissionDenied(
                _("This call needs the scope “%(scope)s”, which this service token does not have.")
                % {"scope": needed},
                code="missing_scope",
            )
        return True


class TokenScheme(OpenApiAuthenticationExtension):
    """Describes the token in the OpenAPI schema (a bearer token)."""

    target_class = "portal.api.auth.TokenAuthentication"
    name = "personalToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A personal API token (gpp_…) made on your tokens page, or a "
            "project's service token (gps_…) made by its manager: it acts only in its "
            "project and within its scopes (read: GET; leases: ask for, extend, end and "
            "cancel its leases, with their SSH keys); any other call is a 403.",
        }
