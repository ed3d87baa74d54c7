"""API rate limits: per token (personal or service) and per user (so many tokens do not multiply a
user's allowance), and per address for anonymous calls. Rates are site settings
(``API_THROTTLE_*``); the counters live in the shared cache. A throttled call is a 429
with ``Retry-After``. The address is the client's as ``portal.client_address`` reads it
(behind ``PORTAL_TRUSTED_PROXIES``), as the login throttle's is. While the cache cannot
be reached nothing is counted and every call goes through (``portal.cache``): an outage
never turns into refused calls.
"""

from rest_framework.throttling import AnonRateThrottle, SimpleRateThrottle, UserRateThrottle

from portal.client_address import client_address
from portal.models import ApiToken, ServiceToken


class ClientAddressMixin:
    def get_ident(self, request) -> str:
        return client_address(request._request)


class TokenRateThrottle(ClientAddressMixin, SimpleRateThrottle):
    scope = "token"

    def get_cache_key(self, request, view):
        if isinstance(request.auth, ApiToken):
            ident = str(request.auth.pk)
        elif isinstance(request.auth, ServiceToken):
            ident = f"service-{request.auth.pk}"
        else:
            return None
        return self.cache_format % {"scope": self.scope, "ident": ident}


class PerUserRateThrottle(ClientAddressMixin, UserRateThrottle):
    scope = "user"


class PerAddressAnonThrottle(ClientAddressMixin, AnonRateThrottle):
    scope = "anon"
