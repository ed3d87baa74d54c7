"""The client's address: the connection's own unless trusted proxies are configured, then
the entry of ``X-Forwarded-For`` that the outermost trusted proxy wrote, never one the
client could write. The login throttle and the API's rate limits read the same."""

import pytest
from django.test import RequestFactory
from rest_framework.request import Request

from portal.api.throttling import PerAddressAnonThrottle, PerUserRateThrottle
from portal.client_address import client_address


def request(forwarded: str | None = None, remote: str = "10.0.0.1"):
    extra = {"REMOTE_ADDR": remote}
    if forwarded is not None:
        extra["HTTP_X_FORWARDED_FOR"] = forwarded
    return RequestFactory().get("/", **extra)


def test_it_ignores_the_header_without_trusted_proxies(settings):
    settings.PORTAL_TRUSTED_PROXIES = 0
    assert client_address(request("203.0.113.7")) == "10.0.0.1"
    assert client_address(request()) == "10.0.0.1"


@pytest.mark.parametrize(
    ("hops", "forwarded", "client"),
    [
        (1, "203.0.113.7", "203.0.113.7"),
        # What the client wrote itself is on the left, before the proxy's own entry.
        (1, "198.51.100.1, 203.0.113.7", "203.0.113.7"),
        (1, "1.1.1.1,2.2.2.2,  203.0.113.7", "203.0.113.7"),
        (2, "198.51.100.1, 203.0.113.7, 10.0.0.5", "203.0.113.7"),
        # Fewer entries than proxies: the first one the first proxy met wrote.
        (3, "203.0.113.7, 10.0.0.5", "203.0.113.7"),
        (1, "2001:db8:0:0:0:0:0:1", "2001:db8::1"),
        # Not an address (a misconfigured proxy): the connection's own.
        (1, "198.51.100.1, not-an-address", "10.0.0.1"),
        (1, "", "10.0.0.1"),
    ],
)
def test_it_takes_the_entry_the_trusted_proxies_wrote(settings, hops, forwarded, client):
    settings.PORTAL_TRUSTED_PROXIES = hops
    assert client_address(request(forwarded)) == client


@pytest.mark.parametrize("throttle", [PerAddressAnonThrottle, PerUserRateThrottle])
def test_the_apis_rate_limits_read_the_same_address(settings, throttle):
    settings.PORTAL_TRUSTED_PROXIES = 1
    spoofed = Request(request("198.51.100.1, 203.0.113.7"))
    assert throttle().get_ident(spoofed) == "203.0.113.7"
    settings.PORTAL_TRUSTED_PROXIES = 0
    assert throttle().get_ident(spoofed) == "10.0.0.1"
