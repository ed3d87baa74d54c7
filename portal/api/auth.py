"""``Authorization: Bearer gpp_…`` with a personal token (portal/tokens.py)."""

from django.utils.translation import gettext_lazy as _
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from portal import tokens


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
        row = tokens.authenticate(raw)
        if row is None:
            raise exceptions.AuthenticationFailed(_("The token is not valid, expired or revoked."))
        return row.user, row

    def authenticate_header(self, request) -> str:
        return f'{self.keyword} realm="api"'


class TokenScheme(OpenApiAuthenticationExtension):
    """Describes the token in the OpenAPI schema (a bearer token)."""

    target_class = "portal.api.auth.TokenAuthentication"
    name = "personalToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A personal API token (gpp_…) made on your tokens page.",
        }
