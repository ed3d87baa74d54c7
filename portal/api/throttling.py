"""API rate limits: per personal token and per user (so many tokens do not multiply a
user's allowance), and per address for anonymous calls. Rates are site settings
(``API_THROTTLE_*``); the counters live in the shared cache. A throttled call is a 429
with ``Retry-After``. While the cache cannot be reached nothing is counted and every call
goes through (``portal.cache``): an outage never turns into refused calls.
"""

from rest_framework.throttling import AnonRateThrottle, SimpleRateThrottle, UserRateThrottle

from portal.models import ApiToken


class TokenRateThrottle(SimpleRateThrottle):
    scope = "token"

    def get_cache_key(self, request, view):
        if not isinstance(request.auth, ApiToken):
            return None
        return self.cache_format % {"scope": self.scope, "ident": request.auth.pk}


class PerUserRateThrottle(UserRateThrottle):
    scope = "user"


class PerAddressAnonThrottle(AnonRateThrottle):
    scope = "anon"
