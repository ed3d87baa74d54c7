"""Where a request comes from: the one place that reads a client's address.

Behind ``PORTAL_TRUSTED_PROXIES`` proxies (0 by default: the portal is reached directly),
each proxy appends the address it was reached from to ``X-Forwarded-For``, so the client
is the N-th address from the right; anything further left was written by the client
itself and is never believed. With 0 the header is ignored and the address is the
connection's own (``REMOTE_ADDR``). The login throttle and the API's rate limits both
read it here, so they agree on who is who.
"""

import ipaddress

from django.conf import settings
from django.http import HttpRequest


def client_address(request: HttpRequest) -> str:
    """The client's IP address as text (``""`` when there is none to read).

    With N trusted proxies: the N-th entry of ``X-Forwarded-For`` counted from the right,
    or its leftmost when there are fewer (the request came in past the outer proxies, so
    its first entry is the one the first proxy it met wrote). An entry that is not an IP
    address (a proxy is misconfigured) is not believed: the connection's address is used.
    """
    remote = request.META.get("REMOTE_ADDR", "")
    hops = settings.PORTAL_TRUSTED_PROXIES
    if hops <= 0:
        return remote
    forwarded = [
        entry.strip()
        for entry in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")
        if entry.strip()
    ]
    if not forwarded:
        return remote
    chosen = forwarded[-min(hops, len(forwarded))]
    try:
        return str(ipaddress.ip_address(chosen))
    except ValueError:
        return remote
