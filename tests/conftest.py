"""Shared fixtures: the local EC2 endpoint (tests.fixtures_cloud) and fixture F0."""

import os
import socket
from contextlib import contextmanager
from datetime import UTC, datetime

import pytest
from django.core.servers.basehttp import ThreadedWSGIServer
from django.db import connection, connections, transaction
from django.test import override_settings
from pytest_django.live_server_helper import LiveServer

from tests import factories, servers

pytest_plugins = [
    "tests.fixtures_cloud",
    "tests.fixtures_worker",
    "tests.fixtures_outages",
    "tests.fixtures_alibaba",
    "tests.fixtures_kubernetes",
]


def pytest_configure(config):
    if hasattr(config, "workerinput"):
        return  # an xdist worker: the controlling process compiled them before it started
    from portal.i18n import compile_catalogs

    compile_catalogs()  # the .mo files are build products; pages are tested in Chinese too


def pytest_unconfigure(config):
    servers.stop()  # the throwaway PostgreSQL and Redis of this run, if it started them


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """pytest-django's test database, and at its end no session left on it: a thread or
    subprocess that kept a connection (a live server's, a worker's) would make dropping
    the database fail with "being accessed by other users" (a warning, and a database
    left behind when the server is not a throwaway one)."""
    yield
    if connection.vendor != "postgresql":
        return
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


class LiveWSGIServer(ThreadedWSGIServer):
    """Django's threaded test server (a thread per browser connection, kept alive from one
    request to the next), made as quick to answer as production's server:

    - Its threads keep their database connection from one request to the next, as
      production's CONN_MAX_AGE does, instead of opening one per request (a quarter of a
      browser walk's server time). A connection that broke or was left in a transaction
      is still closed at a request's end; each is closed with its browser connection
      (``ThreadedWSGIServer.close_request``).
    - Its sockets send at once (TCP_NODELAY, as gunicorn's do): wsgiref writes an answer's
      headers and its body in two sends, and with Nagle's algorithm the body waited for
      the browser's delayed acknowledgement of the headers, 40 ms on Linux, on every page
      and every HTMX partial (half of a browser walk's time).
    """

    def process_request_thread(self, request, client_address):
        request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for each in connections.all():
            each.settings_dict = {**each.settings_dict, "CONN_MAX_AGE": None}
        super().process_request_thread(request, client_address)


@pytest.fixture(scope="session")
def live_server(request):
    """pytest-django's ``live_server`` (same address, handler and static files), answering
    with ``LiveWSGIServer``."""
    addr = (
        request.config.getvalue("liveserver")
        or os.getenv("DJANGO_LIVE_TEST_SERVER_ADDRESS")
        or "localhost"
    )
    server = LiveServer(addr, start=False)
    server.thread.server_class = LiveWSGIServer
    server.start()
    yield server
    server.stop()


# The policy every test runs under, whatever the environment's settings say.
TEST_POLICY = {
    "PORTAL_INSTALLATION_ID": "test",
    "PORTAL_PREEMPTION_NOTICE_SECONDS": 120,
    "PORTAL_MINIMUM_BILLED_SECONDS": 60,
    "EMAIL_BACKEND": "django.core.mail.backends.locmem.EmailBackend",
}


@pytest.fixture(autouse=True)
def _test_policy(settings):
    for name, value in TEST_POLICY.items():
        setattr(settings, name, value)
    from django.core.cache import cache

    cache.clear()  # throttle counters (login, API) never carry over between tests
    from django.utils import translation

    # A page requested in Chinese leaves Chinese active in the thread (LocaleMiddleware
    # activates and never resets); every test starts in the site's language.
    translation.activate(settings.LANGUAGE_CODE)


@pytest.fixture(scope="module")
def module_db(django_db_setup, django_db_blocker):
    """Rows a whole module's tests start from, built once (Django's ``setUpTestData`` for
    pytest). A module-scoped fixture builds them inside ``with module_db():``; they are
    written in a transaction kept open around the module, each test's ``db`` runs in a
    savepoint inside it and is rolled back at the test's end, and the module's rows at the
    module's end. The objects such a fixture returns are shared by the module's tests: a
    test reads their ids and refreshes what it needs, never changes them in memory."""
    with django_db_blocker.unblock():
        around = transaction.atomic()
        around.__enter__()

    @contextmanager
    def building():
        with django_db_blocker.unblock(), override_settings(**TEST_POLICY):
            yield

    yield building
    with django_db_blocker.unblock():
        transaction.set_rollback(True)
        around.__exit__(None, None, None)


@pytest.fixture
def t0() -> datetime:
    """A fixed 'now' for services that accept now=."""
    return datetime(2026, 4, 6, 10, 0, tzinfo=UTC)


@pytest.fixture
def f0(db):
    """SCENARIOS.md fixture F0: pool A100 80GB, C = 8; alpha (G 2, L 6), beta (G 4, L 8),
    gamma (G 0, L 4), weights 1; $2.50 on-demand and $1.00 spot per GPU-hour."""
    return factories.fixture_f0()


@pytest.fixture
def cloud_account(db, cloud):
    return factories.account(endpoint_url=cloud.url)
