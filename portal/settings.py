"""Settings, read from the environment.

With no environment at all this is the embedded demo: SQLite, Celery on kombu's
filesystem transport, a generated secret and encryption key kept under var/.
``PORTAL_ENV=production`` refuses to start without an explicit secret key and
encryption keys, and turns on every secure-transport setting. Bad values fail
loudly at start-up, never silently fall back.
"""

import ipaddress
import json
import os
import secrets
from pathlib import Path

import dj_database_url
from celery.schedules import crontab
from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured
from django.utils.translation import gettext_lazy as _

from portal.env import env_bool, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("PORTAL_VAR_DIR", BASE_DIR / "var"))


PORTAL_ENV = env_str("PORTAL_ENV", "demo")
if PORTAL_ENV not in {"demo", "production"}:
    raise ImproperlyConfigured(f"PORTAL_ENV must be 'demo' or 'production', not {PORTAL_ENV!r}.")
PRODUCTION = PORTAL_ENV == "production"


def _demo_secrets() -> dict[str, str]:
    """Secrets for the demo only, generated once and kept out of the repository."""
    path = VAR_DIR / "demo-secrets.json"
    if path.exists():
        return json.loads(path.read_text())
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    values = {
        "secret_key": secrets.token_urlsafe(50),
        "encryption_key": Fernet.generate_key().decode(),
    }
    path.write_text(json.dumps(values))
    path.chmod(0o600)
    return values


SECRET_KEY = env_str("SECRET_KEY")
PORTAL_ENCRYPTION_KEYS = env_list("PORTAL_ENCRYPTION_KEYS")
if PRODUCTION:
    if not SECRET_KEY:
        raise ImproperlyConfigured("SECRET_KEY must be set when PORTAL_ENV=production.")
    if not PORTAL_ENCRYPTION_KEYS:
        raise ImproperlyConfigured(
            "PORTAL_ENCRYPTION_KEYS must be set when PORTAL_ENV=production "
            "(comma-separated Fernet keys, newest first)."
        )
elif not SECRET_KEY or not PORTAL_ENCRYPTION_KEYS:
    _generated = _demo_secrets()
    SECRET_KEY = SECRET_KEY or _generated["secret_key"]
    PORTAL_ENCRYPTION_KEYS = PORTAL_ENCRYPTION_KEYS or [_generated["encryption_key"]]
for _key in PORTAL_ENCRYPTION_KEYS:
    try:
        Fernet(_key)
    except ValueError:
        raise ImproperlyConfigured(
            "PORTAL_ENCRYPTION_KEYS holds a value that is not a Fernet key "
            "(32 url-safe base64-encoded bytes)."
        ) from None

DEBUG = env_bool("DEBUG", not PRODUCTION)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "" if PRODUCTION else "127.0.0.1,localhost,testserver")
if PRODUCTION and not ALLOWED_HOSTS:
    raise ImproperlyConfigured("ALLOWED_HOSTS must be set when PORTAL_ENV=production.")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "django_prometheus",
    "portal.apps.PortalConfig",
    "portal.messaging.apps.MessagingConfig",
    "portal.sso.apps.SsoConfig",
    "rental.apps.RentalConfig",
    "billing.apps.BillingConfig",
]

MIDDLEWARE = [
    # Outermost: every request is counted and timed for /metrics (django-prometheus).
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Each request's id (X-Request-ID, or a new one) on its log lines and its answer.
    "portal.logs.RequestIdMiddleware",
    # Outside everything that answers but the HTTPS redirect: every answer gets the
    # policy, error pages and 400s included.
    "portal.csp.ContentSecurityPolicyMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "portal.middleware.SessionTimeoutMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Before every view, after everything its 400 page needs (language, user, messages).
    "portal.middleware.RejectNulBytesMiddleware",
    "portal.errors.DomainErrorMiddleware",
    # Innermost: the answer's view and status for /metrics (django-prometheus).
    "django_prometheus.middleware.PrometheusAfterMiddleware",
]

if PRODUCTION:  # gunicorn serves the collected static files itself
    MIDDLEWARE.insert(2, "whitenoise.middleware.WhiteNoiseMiddleware")

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "portal.context_processors.navigation",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'demo.sqlite3'}"),
        conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 60 if PRODUCTION else 0),
        # A kept connection is checked before a request or task reuses it, so a restarted
        # PostgreSQL costs only the requests that were in flight (they answer 503).
        conn_health_checks=env_bool("DATABASE_CONN_HEALTH_CHECKS", True),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The demo's web, worker and beat share one file; wait for the writer instead of failing.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"timeout": 20, "transaction_mode": "IMMEDIATE", "init_command": "PRAGMA journal_mode=WAL;"}
    )
elif DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # A server that does not answer fails the connection (and /readyz) after this long,
    # instead of holding a request for the operating system's TCP timeout.
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault(
        "connect_timeout", env_int("DATABASE_CONNECT_TIMEOUT", 5)
    )
# Query counts, durations and errors for /metrics: django-prometheus's wrapper of the
# same backend (psycopg 3 or SQLite), nothing else changes; on PostgreSQL the portal's
# own subclass of it, which waits for a restarting server (portal.db_backend).
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    DATABASES["default"]["ENGINE"] = "portal.db_backend"
elif DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["ENGINE"] = "django_prometheus.db.backends.sqlite3"
# Seconds a request or task waits for a PostgreSQL that refuses connections (restarting)
# before it fails; a restart shorter than this costs only the requests in flight.
DATABASE_RESTART_WAIT_SECONDS = env_int("DATABASE_RESTART_WAIT_SECONDS", 5)
if DATABASE_RESTART_WAIT_SECONDS < 0:
    raise ImproperlyConfigured("DATABASE_RESTART_WAIT_SECONDS must not be negative.")
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

_redis_url = env_str("REDIS_URL")
if PRODUCTION and not _redis_url:
    # Login and API throttle counters must be shared by every worker process; a per-process
    # cache would multiply the allowed failures by the number of workers.
    raise ImproperlyConfigured(
        "REDIS_URL must be set when PORTAL_ENV=production (a shared cache for the login "
        "and API throttle counters)."
    )
# Seconds to connect to Redis (the cache and the broker) and, for the cache, to wait for an
# answer: a dead or unreachable Redis costs a request at most this long.
PORTAL_REDIS_TIMEOUT_SECONDS = env_int("PORTAL_REDIS_TIMEOUT_SECONDS", 1)
# After Redis failed, a process leaves it alone this long (portal.outages): the cache
# answers as empty and new work waits in the outbox, without a connection attempt each time.
PORTAL_OUTAGE_RETRY_SECONDS = env_int("PORTAL_OUTAGE_RETRY_SECONDS", 5)
# Retry-After on a 503 (the database or another service could not answer).
PORTAL_RETRY_AFTER_SECONDS = env_int("PORTAL_RETRY_AFTER_SECONDS", 5)
for _name in ("PORTAL_REDIS_TIMEOUT_SECONDS", "PORTAL_RETRY_AFTER_SECONDS"):
    if globals()[_name] < 1:
        raise ImproperlyConfigured(f"{_name} must be at least 1 (seconds).")
if PORTAL_OUTAGE_RETRY_SECONDS < 0:
    raise ImproperlyConfigured("PORTAL_OUTAGE_RETRY_SECONDS must not be negative.")
CACHES = {
    "default": (
        {
            # Django's RedisCache that answers as an empty cache while Redis is down, so
            # the throttles fail open instead of failing the request (portal.cache).
            "BACKEND": "portal.cache.FailOpenRedisCache",
            "LOCATION": _redis_url,
            "OPTIONS": {
                "socket_connect_timeout": PORTAL_REDIS_TIMEOUT_SECONDS,
                "socket_timeout": PORTAL_REDIS_TIMEOUT_SECONDS,
            },
        }
        if _redis_url
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    )
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard"
LOGOUT_REDIRECT_URL = "login"
# Failed logins (portal.login_throttle), each count over LOGIN_THROTTLE_WINDOW seconds:
# one account from one address tries freely ATTEMPTS times, then waits 1, 2, 4 … seconds
# (at most DELAY_MAX) between tries; one address stops after ADDRESS_ATTEMPTS failures on
# any accounts; one account is locked (an admin can lift it) after ACCOUNT_ATTEMPTS
# failures from any addresses. Counted in the shared cache.
LOGIN_THROTTLE_ATTEMPTS = env_int("LOGIN_THROTTLE_ATTEMPTS", 5)
LOGIN_THROTTLE_DELAY_MAX = env_int("LOGIN_THROTTLE_DELAY_MAX", 300)
LOGIN_THROTTLE_ADDRESS_ATTEMPTS = env_int("LOGIN_THROTTLE_ADDRESS_ATTEMPTS", 50)
LOGIN_THROTTLE_ACCOUNT_ATTEMPTS = env_int("LOGIN_THROTTLE_ACCOUNT_ATTEMPTS", 50)
LOGIN_THROTTLE_WINDOW = env_int("LOGIN_THROTTLE_WINDOW", 900)
for _name in (
    "LOGIN_THROTTLE_ATTEMPTS",
    "LOGIN_THROTTLE_DELAY_MAX",
    "LOGIN_THROTTLE_ADDRESS_ATTEMPTS",
    "LOGIN_THROTTLE_ACCOUNT_ATTEMPTS",
    "LOGIN_THROTTLE_WINDOW",
):
    if globals()[_name] < 1:
        raise ImproperlyConfigured(f"{_name} must be at least 1.")
# How many proxies in front of the portal append to X-Forwarded-For (portal.client_address):
# the client is that many entries from the right. 0: the header is ignored.
PORTAL_TRUSTED_PROXIES = env_int("PORTAL_TRUSTED_PROXIES", 0)
if PORTAL_TRUSTED_PROXIES < 0:
    raise ImproperlyConfigured("PORTAL_TRUSTED_PROXIES must be 0 or more.")
# Passwords (throttled, and kept to the break-glass admin when PORTAL_PASSWORD_LOGIN is
# off), then the OpenID Connect callback's (portal/settings_sso.py).
AUTHENTICATION_BACKENDS = [
    "portal.sso.backends.PasswordBackend",
    "portal.sso.backends.OidcBackend",
]

LANGUAGE_CODE = "en"
LANGUAGES = [("en", _("English")), ("zh-hans", _("Simplified Chinese"))]
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
# One date format in both languages, the admin's pages included: "2026-12-03 16:03".
FORMAT_MODULE_PATH = ["portal.formats"]

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(env_str("STATIC_ROOT", str(VAR_DIR / "static")))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "whitenoise.storage.CompressedManifestStaticFilesStorage"
            if PRODUCTION
            else "django.contrib.staticfiles.storage.StaticFilesStorage"
        )
    },
}

# Email: console in the demo; SMTP when EMAIL_HOST is set.
EMAIL_HOST = env_str("EMAIL_HOST")
EMAIL_PORT = env_int("EMAIL_PORT", 587)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", True)
EMAIL_BACKEND = (
    "django.core.mail.backends.smtp.EmailBackend"
    if EMAIL_HOST
    else "django.core.mail.backends.console.EmailBackend"
)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "GPU Portal <gpu-portal@localhost>")

# Celery: Redis in production and tests; kombu's filesystem transport in the demo.
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "filesystem://")
if CELERY_BROKER_URL.startswith("filesystem://"):
    # kombu's filesystem transport, with messages that appear whole (portal.demo_broker).
    CELERY_BROKER_TRANSPORT = "portal.demo_broker:Transport"
    _broker_dir = VAR_DIR / "broker"
    for _sub in ("queue", "processed", "control"):
        (_broker_dir / _sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "processed_folder": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
    }
elif CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    if CELERY_BROKER_URL.startswith("redis://"):
        # kombu's Redis transport with a worker that reconnects after losing Redis
        # mid-task instead of stopping (portal.broker). (rediss:// keeps kombu's own: its
        # TLS defaults are chosen by the scheme's name.)
        CELERY_BROKER_TRANSPORT = "portal.broker:Transport"
    # A message taken by a worker that dies stays invisible for this long (Redis's default
    # is an hour). Nothing waits on it: the launch sweep (below) finds a dead launch from
    # its row within 30 s, and a redelivered duplicate finds nothing to claim. It must
    # still exceed the longest countdown a retry is scheduled with (5 minutes,
    # rental.fleet.retry) and the longest eta (a spot notice, 2 minutes), or Redis would
    # hand a waiting message to a second worker before it is due: 6 minutes.
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "visibility_timeout": env_int("PORTAL_BROKER_VISIBILITY_TIMEOUT", 360),
        # A dead Redis is noticed at once rather than after the system's TCP timeouts; the
        # command timeout must exceed the worker's 1 s wait for a message (BRPOP).
        "socket_connect_timeout": PORTAL_REDIS_TIMEOUT_SECONDS,
        "socket_timeout": PORTAL_REDIS_TIMEOUT_SECONDS + 5,
    }
# Publishing fails fast: one connection attempt of PORTAL_REDIS_TIMEOUT_SECONDS and one
# immediate retry (a pooled connection from before a Redis restart fails once), then the
# message stays in the outbox for the sweep (rental.jobs). A request never waits on a
# dead broker.
CELERY_BROKER_CONNECTION_TIMEOUT = PORTAL_REDIS_TIMEOUT_SECONDS
CELERY_TASK_PUBLISH_RETRY_POLICY = {
    "max_retries": 1,
    "interval_start": 0,
    "interval_step": 0.2,
    "interval_max": 0.2,
}
# Workers and beat wait for the broker at start and reconnect after losing it, however
# long it is away (Celery's default gives up after 100 attempts).
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
CELERY_TASK_ALWAYS_EAGER = False
# A task is acknowledged when it has finished, not when it starts: a worker killed mid-task
# leaves the message to be delivered again (every task is idempotent: claims by conditional
# update). A child process that dies is requeued at once (reject on worker lost).
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
# One message reserved per worker process: a dead worker takes at most one launch down
# with it, and a long launch never holds others queued behind it.
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_TIMEZONE = "UTC"
# Beat's heartbeat (portal.health, /readyz): how often beat sends it to a worker.
PORTAL_BEAT_HEARTBEAT_SECONDS = env_int("PORTAL_BEAT_HEARTBEAT_SECONDS", 30)
if PORTAL_BEAT_HEARTBEAT_SECONDS < 1:
    raise ImproperlyConfigured("PORTAL_BEAT_HEARTBEAT_SECONDS must be at least 1.")
# Beat's scheduler: Celery's own, with one warning per broker outage instead of a
# traceback for each task it cannot send (portal.beat).
CELERY_BEAT_SCHEDULER = "portal.beat:Scheduler"
CELERY_BEAT_SCHEDULE = {
    "record-beat": {
        "task": "portal.tasks.record_beat_task",
        "schedule": float(PORTAL_BEAT_HEARTBEAT_SECONDS),
        # A heartbeat queued while no worker ran is dropped, not run late.
        "options": {"expires": float(PORTAL_BEAT_HEARTBEAT_SECONDS)},
    },
    "sync-instances": {
        "task": "rental.tasks.sync_instances_task",
        "schedule": float(env_int("PORTAL_SYNC_INTERVAL", 30)),
    },
    # The company's own GPU servers (rental.fleet.own_hosts): each ssh account's hosts
    # looked at over SSH (nvidia-smi), their GPUs and the account's offerings kept in step;
    # Kubernetes pools' offerings kept in step with their nodes (rental.fleet.node_offerings).
    "check-own-hosts": {
        "task": "rental.tasks.check_own_hosts_task",
        "schedule": float(env_int("PORTAL_OWN_HOST_CHECK_INTERVAL", 60)),
    },
    "end-expired-leases": {
        "task": "rental.tasks.end_expired_leases_task",
        "schedule": float(env_int("PORTAL_LEASE_CHECK_INTERVAL", 30)),
    },
    # L1: launches whose worker died or whose message was lost are sent again from their
    # rows (rental.fleet.recovery); no cloud call, a handful of indexed queries.
    "sweep-launches": {
        "task": "rental.tasks.sweep_launches_task",
        "schedule": float(env_int("PORTAL_LAUNCH_SWEEP_INTERVAL", 5)),
    },
    # Work for Celery that the broker could not take when its change committed (the
    # outbox, rental.jobs), sent oldest first; sent rows are pruned after a while.
    "send-outbox": {
        "task": "rental.tasks.send_outbox_task",
        "schedule": float(env_int("PORTAL_OUTBOX_SWEEP_INTERVAL", 5)),
    },
    # Due times are rows; this sweep acts on them even after a worker restart (Q8, R4).
    "process-due": {
        "task": "rental.tasks.process_due_task",
        "schedule": float(env_int("PORTAL_DUE_SWEEP_INTERVAL", 5)),
    },
    # Budgets are evaluated hourly (BU1); closing is tried hourly and acts once per month.
    "evaluate-budgets": {"task": "billing.tasks.evaluate_budgets_task", "schedule": 3600.0},
    "close-due-periods": {"task": "billing.tasks.close_due_periods_task", "schedule": 3600.0},
    # The reports' committed-capacity advice reads every project's last 90 days: computed
    # hourly and kept in the cache (billing.reports), so a page view does not.
    "keep-commitment-advice": {
        "task": "billing.tasks.keep_commitment_advice_task",
        "schedule": 3600.0,
    },
    "refresh-spend": {
        "task": "billing.tasks.refresh_spend_task",
        "schedule": float(env_int("PORTAL_SPEND_SNAPSHOT_SECONDS", 60)),
    },
}

# The portal's own policy.
PORTAL_INSTALLATION_ID = env_str("PORTAL_INSTALLATION_ID", "demo" if not PRODUCTION else "")
if not PORTAL_INSTALLATION_ID:
    raise ImproperlyConfigured("PORTAL_INSTALLATION_ID must name this installation (cloud tags).")
PORTAL_MAX_LEASE_HOURS = env_int("PORTAL_MAX_LEASE_HOURS", 168)
# How many requests one person may have waiting (pending approval or queued) at once.
PORTAL_MAX_PENDING_PER_USER = env_int("PORTAL_MAX_PENDING_PER_USER", 10)
PORTAL_PREEMPTION_NOTICE_SECONDS = env_int("PORTAL_PREEMPTION_NOTICE_SECONDS", 120)
PORTAL_MINIMUM_BILLED_SECONDS = env_int("PORTAL_MINIMUM_BILLED_SECONDS", 60)
# Sent outbox rows are kept this long (to see what was sent when), then deleted.
PORTAL_OUTBOX_RETENTION_HOURS = env_int("PORTAL_OUTBOX_RETENTION_HOURS", 24)
if PORTAL_OUTBOX_RETENTION_HOURS < 1 or CELERY_BEAT_SCHEDULE["send-outbox"]["schedule"] < 1:
    raise ImproperlyConfigured(
        "PORTAL_OUTBOX_RETENTION_HOURS and PORTAL_OUTBOX_SWEEP_INTERVAL must be at least 1."
    )
from portal.settings_policy import *  # noqa: E402, F403
from portal.settings_sso import *  # noqa: E402, F403

# The expected starts' forecast (settings_policy's interval): a late one is dropped.
_forecast = float(PORTAL_EXPECTED_START_FORECAST_SECONDS)  # noqa: F405
CELERY_BEAT_SCHEDULE["forecast-expected-starts"] = {
    "task": "rental.tasks.forecast_expected_starts_task",
    "schedule": _forecast,
    "options": {"expires": _forecast},
}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Tokens first: its challenge makes a call without credentials a 401, not a 403.
        "portal.api.auth.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": [
        "rest_framework.permissions.IsAuthenticated",
        # A project's service token calls only what its scopes allow (portal/service_tokens.py).
        "portal.api.auth.ServiceTokenScopes",
    ],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["portal.api.parsers.JSONParser"],
    "DEFAULT_PAGINATION_CLASS": "portal.api.pagination.PortalPagination",
    "DEFAULT_FILTER_BACKENDS": [
        "portal.api.filters.FilterBackend",
        "rest_framework.filters.OrderingFilter",
    ],
    "DEFAULT_SCHEMA_CLASS": "portal.api.openapi.PortalAutoSchema",
    "EXCEPTION_HANDLER": "portal.api.errors.api_exception_handler",
    "DEFAULT_THROTTLE_CLASSES": [
        "portal.api.throttling.TokenRateThrottle",
        "portal.api.throttling.PerUserRateThrottle",
        "portal.api.throttling.PerAddressAnonThrottle",
    ],
    # DRF's own reading of X-Forwarded-For, for any throttle that uses it; ours read the
    # address from portal.client_address, which follows the same setting.
    "NUM_PROXIES": PORTAL_TRUSTED_PROXIES,
    # Per token, per user (all their tokens and their browser together), per address.
    "DEFAULT_THROTTLE_RATES": {
        "token": env_str("API_THROTTLE_TOKEN", "600/min"),
        "user": env_str("API_THROTTLE_USER", "1200/min"),
        "anon": env_str("API_THROTTLE_ANON", "60/min"),
    },
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
}

# The published API description (drf-spectacular): portal/settings_api.py.
from portal.settings_api import SPECTACULAR_SETTINGS  # noqa: E402, F401

if PRODUCTION and PORTAL_SSH_TRANSPORT:  # noqa: F405 (settings_policy)
    raise ImproperlyConfigured("PORTAL_SSH_TRANSPORT is the demo's; unset it in production.")
if PRODUCTION:
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31_536_000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
SESSION_COOKIE_HTTPONLY = True
# A session ends after this long without a request (sliding), and after the maximum
# however active it is (portal.middleware.SessionTimeoutMiddleware).
PORTAL_SESSION_IDLE_SECONDS = env_int("PORTAL_SESSION_IDLE_SECONDS", 8 * 3600)
PORTAL_SESSION_MAX_SECONDS = env_int("PORTAL_SESSION_MAX_SECONDS", 24 * 3600)
SESSION_COOKIE_AGE = PORTAL_SESSION_MAX_SECONDS
X_FRAME_OPTIONS = "DENY"

# Log lines as text, or one JSON object a line (portal.logs.JsonFormatter) for a log
# collector. Either way each line written while a request is served carries its id.
PORTAL_LOG_FORMAT = env_str("PORTAL_LOG_FORMAT", "plain")
if PORTAL_LOG_FORMAT not in {"plain", "json"}:
    raise ImproperlyConfigured("PORTAL_LOG_FORMAT must be plain or json.")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "portal.logs.RequestIdFilter"}},
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(request_id)s %(message)s"},
        "json": {"()": "portal.logs.JsonFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": PORTAL_LOG_FORMAT,
            "filters": ["request_id"],
        }
    },
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    # The SDK logs request headers at DEBUG; never let them reach a log line.
    "loggers": {
        "botocore": {"level": "WARNING"},
        "boto3": {"level": "WARNING"},
        "urllib3": {"level": "WARNING"},
    },
}

# Celery workers and beat log through the handler above too (so in JSON when asked),
# instead of replacing the root logger's handlers with Celery's own.
CELERY_WORKER_HIJACK_ROOT_LOGGER = PORTAL_LOG_FORMAT == "plain"

# The dashboard is a shell; each app serves its own panel as an HTMX partial.
PORTAL_DASHBOARD_PANELS = ["rental:panel_leases", "rental:panel_approvals", "billing:panel_spend"]

from portal.settings_agent import *  # noqa: E402, F403

# Raw per-minute samples, then hourly rollups (docs/operations.md, "The samples table").
PORTAL_SAMPLE_RETENTION_DAYS = env_int("PORTAL_SAMPLE_RETENTION_DAYS", 7)
PORTAL_ROLLUP_RETENTION_DAYS = env_int("PORTAL_ROLLUP_RETENTION_DAYS", 400)
CELERY_BEAT_SCHEDULE["roll-up-utilization"] = {
    "task": "rental.tasks.roll_up_utilization_task",
    "schedule": 3600.0,
}
PORTAL_STOPPED_RETENTION_DAYS = env_int("PORTAL_STOPPED_RETENTION_DAYS", 15)  # L9
PORTAL_STOPPED_WARNING_DAYS = env_int("PORTAL_STOPPED_WARNING_DAYS", 3)
CELERY_BEAT_SCHEDULE["expire-stopped-leases"] = {
    "task": "rental.tasks.expire_stopped_leases_task",
    "schedule": 3600.0,
}
# Chat channels (portal.messaging): deliveries whose task was lost are queued again each
# minute; each channel's daily digest goes out at PORTAL_MESSAGING_DIGEST_HOUR (UTC).
CELERY_BEAT_SCHEDULE["sweep-chat-deliveries"] = {
    "task": "portal.messaging.tasks.sweep_deliveries_task",
    "schedule": 60.0,
}
CELERY_BEAT_SCHEDULE["send-chat-digests"] = {
    "task": "portal.messaging.tasks.send_digests_task",
    "schedule": crontab(minute=0, hour=PORTAL_MESSAGING_DIGEST_HOUR),  # noqa: F405
}

# An operator's view (docs/operations.md, "Health, metrics and logs").
# /readyz: how long the broker's ping may take to connect, and again to answer (seconds);
# then the checks that read the database, each a function (*, now) -> portal.health.Check.
PORTAL_READY_BROKER_TIMEOUT = env_int("PORTAL_READY_BROKER_TIMEOUT", 1)
if PORTAL_READY_BROKER_TIMEOUT < 1:
    raise ImproperlyConfigured("PORTAL_READY_BROKER_TIMEOUT must be at least 1 (seconds).")
PORTAL_READINESS_CHECKS = ["portal.health.beat", "rental.health.sync"]
# /metrics: who may read it. A scraper that sends "Authorization: Bearer <token>", or one
# whose own address (REMOTE_ADDR, never a forwarded header) is in these networks. In
# production neither is set by default, and /metrics answers 404.
PORTAL_METRICS_TOKEN = env_str("PORTAL_METRICS_TOKEN")
if PORTAL_METRICS_TOKEN and len(PORTAL_METRICS_TOKEN) < 24:
    raise ImproperlyConfigured(
        "PORTAL_METRICS_TOKEN must be at least 24 characters: "
        'python -c "import secrets; print(secrets.token_urlsafe(32))"'
    )
PORTAL_METRICS_ADDRESSES = env_list(
    "PORTAL_METRICS_ADDRESSES", "" if PRODUCTION else "127.0.0.1,::1"
)
try:
    PORTAL_METRICS_NETWORKS = [
        ipaddress.ip_network(item, strict=False) for item in PORTAL_METRICS_ADDRESSES
    ]
except ValueError:
    raise ImproperlyConfigured(
        "PORTAL_METRICS_ADDRESSES must list IP addresses or networks, e.g. 10.0.0.0/8,::1."
    ) from None
# The portal's own gauges, computed from the database at each scrape: each a function
# (*, now) -> a list of prometheus_client metric families.
PORTAL_METRICS_FAMILIES = [
    "portal.metrics.families",
    "rental.metrics.families",
    "billing.metrics.families",
]
# The probes and the scrape answer over plain HTTP too (inside the network, from the
# orchestrator or Prometheus), not with a redirect to HTTPS.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]

# Data volumes (issue 8.9): the largest volume a member may create, in GB (EBS gp3: 16 TiB).
PORTAL_VOLUME_MAX_GB = env_int("PORTAL_VOLUME_MAX_GB", 16384)
