"""Generated requests against the live schema (schemathesis): valid and invalid data for
every operation, as an admin, as an engineer and as a service token of the engineer's
project (scopes read and leases: what its scopes do not cover must be a 403), through a
real HTTP server.

Every answer must be no server error, have a status, content type, headers and body the
schema documents; a request that breaks the schema must be refused, and one that keeps
to it must not be refused as malformed (no 400: a 404 or a 409 for what the schema cannot
say); and a request the API refused (4xx) must have written nothing: a
statement-level trigger on every table logs each INSERT, UPDATE and DELETE while the
run lasts, and the log must stay empty across every refused request (a token's
last-use time, written at most once a minute by authentication, aside).
"""

import math
from collections import Counter
from datetime import timedelta

import pytest
import schemathesis
from django.contrib.staticfiles.handlers import StaticFilesHandler
from django.core.servers.basehttp import WSGIServer
from django.db import connection, connections
from django.test.testcases import LiveServerThread
from django.utils import timezone
from hypothesis import HealthCheck, Phase, given, settings
from rest_framework.throttling import SimpleRateThrottle
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ignored_auth,
    negative_data_rejection,
    positive_data_acceptance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from portal import service_tokens, tokens
from rental.models import AvailabilityWatch
from tests.access import world as world_module
from tests.api.leases_world import running_lease

# Fresh sequences, so that the ids below name the world's rows.
pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True, reset_sequences=True)]

# At least this many requests in all (the issue asks for 1,000), spread over operations.
TARGET_REQUESTS = 1200
MIN_PER_OPERATION = 3
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    ignored_auth,
]
# Writes a refused request may leave: authentication records a token's last use.
ALLOWED_WRITES = {("portal_apitoken", "UPDATE"), ("portal_servicetoken", "UPDATE")}

TRIGGERS_ON = """
CREATE TABLE zz_write_log (id bigserial PRIMARY KEY, tbl text, op text);
CREATE FUNCTION zz_log_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO zz_write_log (tbl, op) VALUES (TG_TABLE_NAME, TG_OP);
    RETURN NULL;
END $$;
DO $$
DECLARE t text;
BEGIN
    FOR t IN SELECT tablename FROM pg_tables
             WHERE schemaname = 'public' AND tablename <> 'zz_write_log' LOOP
        EXECUTE format(
            'CREATE TRIGGER zz_log AFTER INSERT OR UPDATE OR DELETE ON %I '
            'FOR EACH STATEMENT EXECUTE FUNCTION zz_log_write()', t);
    END LOOP;
END $$;
"""
TRIGGERS_OFF = """
DO $$
DECLARE t text;
BEGIN
    FOR t IN SELECT tablename FROM pg_tables
             WHERE schemaname = 'public' AND tablename <> 'zz_write_log' LOOP
        EXECUTE format('DROP TRIGGER IF EXISTS zz_log ON %I', t);
    END LOOP;
END $$;
DROP FUNCTION IF EXISTS zz_log_write() CASCADE;
DROP TABLE IF EXISTS zz_write_log;
"""


@pytest.fixture
def write_log(transactional_db):
    with connection.cursor() as cursor:
        cursor.execute(TRIGGERS_ON)
    yield
    with connection.cursor() as cursor:
        cursor.execute(TRIGGERS_OFF)


class OneAtATime(WSGIServer):
    """Django's test server without a thread per request: it answers in its own thread,
    one request at a time (the test sends them one at a time), and says Connection: close."""

    def __init__(self, *args, connections_override=None, **kwargs):
        # LiveServerThread hands the threaded server the connections its request threads
        # share; this one answers in the thread that opened them, so it takes none.
        super().__init__(*args, **kwargs)


class ServerThread(LiveServerThread):
    """pytest-django's live server, answering with ``OneAtATime``: its thread keeps its
    database connection from one request to the next, as production's CONN_MAX_AGE
    does, instead of opening one per request (a quarter of the test's time). A connection
    that broke or was left in a transaction is still closed at a request's end."""

    server_class = OneAtATime

    def run(self) -> None:
        for each in connections.all():
            each.settings_dict = {**each.settings_dict, "CONN_MAX_AGE": None}
        super().run()


@pytest.fixture
def server(transactional_db, settings):
    """The URL of a live server like pytest-django's ``live_server`` (same handler, static
    files included), started for this test."""
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "localhost"]
    thread = ServerThread("localhost", StaticFilesHandler)
    thread.daemon = True
    thread.start()
    thread.is_ready.wait()
    if thread.error:
        raise thread.error
    yield f"http://localhost:{thread.port}"
    thread.terminate()


def last_write() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT coalesce(max(id), 0) FROM zz_write_log")
        return cursor.fetchone()[0]


def writes_since(mark: int) -> set[tuple[str, str]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT DISTINCT tbl, op FROM zz_write_log WHERE id > %s", [mark])
        return set(cursor.fetchall())


@pytest.fixture
def callers(settings, monkeypatch):
    """Bearer headers for an admin, an engineer of the world and a service token of her
    project, throttles out of the way."""
    settings.PORTAL_MAX_PENDING_PER_USER = 10_000
    monkeypatch.setattr(
        SimpleRateThrottle,
        "THROTTLE_RATES",
        {"token": "100000/min", "user": "100000/min", "anon": "100000/min"},
    )
    world = world_module.build()
    # Rows of most kinds, so that ids 1–3 in a path reach real objects: running leases with
    # instances and usage, a closed statement with a disputed line, a key, a volume, a
    # quota request, a watch.
    running_lease(world.f0)
    running_lease(world.f0, project=world.other_project)
    world_module.statement_of(world.project)
    world_module.ssh_key_of(world.users["engineer"])
    world_module.volume_of(world.project)
    world_module.quota_request_of(world.project, world.users["engineer"])
    AvailabilityWatch.objects.create(user=world.users["engineer"], gpu_model=world.model, count=2)
    headers = {}
    for role in ("admin", "engineer"):
        _row, raw = tokens.create_token(
            actor=world.users[role],
            name="generated",
            expires_at=timezone.now() + timedelta(days=1),
        )
        headers[role] = {"Authorization": f"Bearer {raw}"}
    _row, raw = service_tokens.create_service_token(
        actor=world.f0.alpha_manager,
        project=world.project,
        name="generated",
        scopes=["read", "leases"],
        expires_at=timezone.now() + timedelta(days=1),
    )
    headers["service"] = {"Authorization": f"Bearer {raw}"}
    return headers


def sender(send, *, mode: GenerationMode, role: str):
    """One caller and mode per hypothesis run (@given takes no defaults or partials)."""

    def run(case) -> None:
        send(case, mode=mode, role=role)

    return run


def toward_real_rows(context, path_parameters: dict) -> dict:
    """Half the generated ids and slugs are turned into ones that exist (ids 1–3, the
    world's projects), so that operations reach real objects, not only 404s."""
    if not path_parameters:
        return path_parameters
    mapped = dict(path_parameters)
    for name, value in path_parameters.items():
        if isinstance(value, int) and value % 2 == 0:
            mapped[name] = 1 + value % 3
        elif name == "slug" and isinstance(value, str) and len(value) % 2 == 0:
            mapped[name] = ("alpha", "beta", "gamma")[len(value) % 3]
    return mapped


def test_it_answers_generated_requests_as_its_schema_says(server, callers, write_log):
    schema = schemathesis.openapi.from_url(f"{server}/api/schema/")
    schema.hook("map_path_parameters")(toward_real_rows)
    operations = [result.ok() for result in schema.get_all_operations()]
    runs = [
        (operation, mode, role)
        for operation in operations
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
        for role in callers
    ]
    per_run = max(MIN_PER_OPERATION, math.ceil(TARGET_REQUESTS / len(runs)))
    sent: Counter[str] = Counter()
    failures: Counter[str] = Counter()  # "what failed where" → how many times
    examples: dict[str, str] = {}

    def fail(key: str, example: str) -> None:
        failures[key] += 1
        examples.setdefault(key, example[:3000])

    def send(case, *, mode: GenerationMode, role: str) -> None:
        mark = last_write()
        response = case.call(base_url=server, headers=callers[role])
        sent[f"{response.status_code // 100}xx"] += 1
        where = f"{case.method} {case.operation.path} → {response.status_code} ({mode.value})"
        # A request the schema refuses must be refused (4xx); one it takes must not be
        # refused as malformed (400): what the schema cannot say is a 404 or a 409.
        extra = negative_data_rejection if mode.is_negative else positive_data_acceptance
        checks = [*CHECKS, extra]
        try:
            case.validate_response(response, checks=checks, headers=callers[role])
        except (AssertionError, BaseExceptionGroup) as failure:  # the checks that failed
            found = getattr(failure, "exceptions", [failure])
            for each in found:
                fail(f"{where}: {getattr(each, 'title', type(each).__name__)}", str(each))
        if response.status_code >= 400:
            wrote = writes_since(mark) - ALLOWED_WRITES
            if wrote:
                fail(f"{where}: wrote {sorted(wrote)}", case.as_curl_command())

    for operation, mode, role in runs:
        generated = given(case=operation.as_strategy(generation_mode=mode))(
            sender(send, mode=mode, role=role)
        )
        settings(
            max_examples=per_run,
            deadline=None,
            database=None,
            derandomize=True,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )(generated)()

    total = sum(sent.values())
    print(f"\n{total} generated requests over {len(operations)} operations: {dict(sent)}")  # noqa: T201 (the figure)
    assert total >= 1000
    assert sent["5xx"] == 0
    report = "\n".join(f"{count:4} × {key}" for key, count in failures.most_common())
    first = "\n\n".join(f"{key}\n{examples[key]}" for key, _count in failures.most_common(5))
    assert not failures, f"{sum(failures.values())} failures:\n{report}\n\n{first}"
