"""The portal's own policy for launches, the sync, orphans, lease ends, notifications,
admission checks, statements and reports, read from the environment (imported by
``portal.settings``; the reasons for each bound are beside it)."""

from decimal import Decimal, InvalidOperation

from django.core.exceptions import ImproperlyConfigured

from portal.env import env_int, env_list, env_str

# Every cloud call is bounded: 2 s to connect, 10 s to read an answer (RunInstances and a
# describe page answer in 1-3 s on EC2), and no retry inside botocore (the tasks retry
# with backoff and fail over; a second SDK attempt would double the bound below).
PORTAL_CLOUD_CONNECT_TIMEOUT = env_int("PORTAL_CLOUD_CONNECT_TIMEOUT", 2)
PORTAL_CLOUD_READ_TIMEOUT = env_int("PORTAL_CLOUD_READ_TIMEOUT", 10)
PORTAL_CLOUD_MAX_ATTEMPTS = env_int("PORTAL_CLOUD_MAX_ATTEMPTS", 1)
# A launch claimed this long ago without a cloud id is taken to be dead and is launched
# again. A live claim makes two cloud calls (the look-up by tag, then RunInstances), each
# at most 2 + 10 = 12 s: 24 s, so 25 s. The launch sweep runs every 5 s
# (PORTAL_LAUNCH_SWEEP_INTERVAL), so a launch whose worker died runs again at most
# 25 + 5 = 30 s after its claim: within one sync period. Taking over a claim that is
# only slow is harmless: the same attempt reuses its ClientToken at the same place, so
# the cloud answers with the instance the first call created. Also how long a lease
# admitted without any claim of its launch (its message lost, or taken by a worker that
# died) waits before the sweep sends it again.
PORTAL_LAUNCH_STALE_SECONDS = env_int("PORTAL_LAUNCH_STALE_SECONDS", 25)
# One account and region's sync is claimed this long (a duplicate delivery skips it): at
# most ten describe pages of 1,000 plus a describe by id, each bounded as above; a worker
# that dies mid-sync holds that region back at most this long.
PORTAL_SYNC_CLAIM_SECONDS = env_int("PORTAL_SYNC_CLAIM_SECONDS", 120)
# L3: an instance missing from a describe is marked gone only when it has been missing this
# long and a describe by its id confirms it (EC2 lists a new instance late).
PORTAL_SYNC_GRACE_SECONDS = env_int("PORTAL_SYNC_GRACE_SECONDS", 60)
# L2: a launch gives up after this many calls, or when its lease has been provisioning
# this long (what it created is then terminated).
PORTAL_LAUNCH_MAX_ATTEMPTS = env_int("PORTAL_LAUNCH_MAX_ATTEMPTS", 8)
PORTAL_PROVISIONING_TIMEOUT_SECONDS = env_int("PORTAL_PROVISIONING_TIMEOUT_SECONDS", 600)
# L4: what the sync does with an instance carrying this installation's tag that no live
# row stands for, once a second sync still sees it: "report" to admins (the default:
# nothing is destroyed on a guess), "terminate" it, or "adopt" it into a lease of the
# project named in its tags (reported instead when that project or offering is unknown).
PORTAL_ORPHAN_POLICY = env_str("PORTAL_ORPHAN_POLICY", "report")
if PORTAL_ORPHAN_POLICY not in {"report", "terminate", "adopt"}:
    raise ImproperlyConfigured("PORTAL_ORPHAN_POLICY must be report, terminate or adopt.")
# L4: an orphan is handled (reported, terminated or adopted) only once two syncs at least
# this far apart have seen it, and an instance whose row ended less than this long ago is
# its termination on the way, never an orphan.
PORTAL_ORPHAN_GRACE_SECONDS = env_int("PORTAL_ORPHAN_GRACE_SECONDS", 120)
PORTAL_ADOPTED_LEASE_HOURS = env_int("PORTAL_ADOPTED_LEASE_HOURS", 8)
# An own GPU server that has not answered for this long is "not answering": its pools are
# degraded and its leases at risk, and people are told (rental.fleet.own_host_health).
PORTAL_OWN_HOST_GRACE_SECONDS = env_int("PORTAL_OWN_HOST_GRACE_SECONDS", 120)
# How the ssh driver reaches own servers: "" for the system's OpenSSH client, else the
# dotted path of a function like rental.providers.ssh_transport.run. Only the demo sets
# it (devcloud.own_servers.run: its servers are local processes); refused in production.
PORTAL_SSH_TRANSPORT = env_str("PORTAL_SSH_TRANSPORT", "")
# A termination the cloud keeps refusing is retried by every sync; after this many
# failures admins are told the instance may still be billing.
PORTAL_TERMINATE_MAX_ATTEMPTS = env_int("PORTAL_TERMINATE_MAX_ATTEMPTS", 6)
# L5: engineers are warned this long before their lease ends.
PORTAL_END_WARNING_MINUTES = env_int("PORTAL_END_WARNING_MINUTES", 15)
# How people are told things (portal.notifications): in the portal, by mail, and in the
# projects' chat channels (portal.messaging).
PORTAL_NOTIFICATION_CHANNELS = env_list("PORTAL_NOTIFICATION_CHANNELS", "portal,email,chat")
if not set(PORTAL_NOTIFICATION_CHANNELS) <= {"portal", "email", "chat"}:
    raise ImproperlyConfigured("PORTAL_NOTIFICATION_CHANNELS lists portal, email and/or chat.")
# Chat channels (portal.messaging): how long one send may take (connect, then answer),
# how often a failed send is tried again (with exponential backoff, at most 5 minutes
# apart), and the hour (UTC) of the daily digest.
PORTAL_MESSAGING_TIMEOUT_SECONDS = env_int("PORTAL_MESSAGING_TIMEOUT_SECONDS", 10)
PORTAL_MESSAGING_MAX_RETRIES = env_int("PORTAL_MESSAGING_MAX_RETRIES", 6)
PORTAL_MESSAGING_DIGEST_HOUR = env_int("PORTAL_MESSAGING_DIGEST_HOUR", 8)
if PORTAL_MESSAGING_TIMEOUT_SECONDS < 1 or PORTAL_MESSAGING_MAX_RETRIES < 0:
    raise ImproperlyConfigured(
        "PORTAL_MESSAGING_TIMEOUT_SECONDS must be at least 1 and "
        "PORTAL_MESSAGING_MAX_RETRIES at least 0."
    )
if not 0 <= PORTAL_MESSAGING_DIGEST_HOUR <= 23:
    raise ImproperlyConfigured("PORTAL_MESSAGING_DIGEST_HOUR must be an hour from 0 to 23.")
# The portal's own address, for links in mail.
PORTAL_BASE_URL = env_str("PORTAL_BASE_URL", "http://localhost:8000")
PORTAL_CURRENCY = env_str("PORTAL_CURRENCY", "USD")  # the billing currency (ISO 4217)
# The budget cap reads month-to-date spend refreshed every PORTAL_SPEND_SNAPSHOT_SECONDS
# (beat, above); a snapshot older than this is not trusted (computed in full instead).
PORTAL_SPEND_SNAPSHOT_MAX_AGE_SECONDS = env_int("PORTAL_SPEND_SNAPSHOT_MAX_AGE_SECONDS", 180)
# Dotted paths of admission checks, billing's budget cap (BU3) and GPU-hour allocations'
# hard stop (GA3) by default. Each is called with keyword arguments project, gpu_model,
# gpu_count, tier, market, starts_at, ends_at, is_reservation, now, and returns None to
# allow or (reason_code, message) to refuse.
PORTAL_ADMISSION_CHECKS: list[str] = env_list(
    "PORTAL_ADMISSION_CHECKS", "billing.admission.budget_cap,billing.admission.gpu_hour_cap"
)
# Dotted paths of the modules that own the sections of a project's configuration
# document (portal/projectconfig.py) other than project, name and members: rental's
# quotas, default image and volumes, billing's budget, single sign-on's idp_groups. Every
# such key needs one owner.
PORTAL_PROJECT_CONFIG_SECTIONS: list[str] = env_list(
    "PORTAL_PROJECT_CONFIG_SECTIONS",
    "rental.projectconfig,billing.projectconfig,portal.sso.projectconfig",
)
# Billing: a month's statements close this long after it ends (P1); the company name on PDFs.
# How each app's audit events read on the audit page (``portal.audit_log``).
PORTAL_AUDIT_VOCABULARIES = [
    "portal.audit_words",
    "portal.sso.audit_words",
    "portal.messaging.audit_words",
    "rental.audit_words",
    "billing.audit_words",
]
PORTAL_STATEMENT_GRACE_HOURS = env_int("PORTAL_STATEMENT_GRACE_HOURS", 48)
PORTAL_COMPANY_NAME = env_str("PORTAL_COMPANY_NAME", "GPU Portal")
# Reports: the price of a committed GPU-month where a pool has none yet, and what owning
# a card costs (rent-versus-buy advice). Decimal strings; money is never float.
PORTAL_COMMITTED_GPU_MONTH_PRICE = env_str("PORTAL_COMMITTED_GPU_MONTH_PRICE", "1400.00")
PORTAL_BUY_CARD_PRICE = env_str("PORTAL_BUY_CARD_PRICE", "25000.00")
PORTAL_BUY_LIFETIME_MONTHS = env_int("PORTAL_BUY_LIFETIME_MONTHS", 36)
PORTAL_BUY_POWER_PER_GPU_MONTH = env_str("PORTAL_BUY_POWER_PER_GPU_MONTH", "60.00")
PORTAL_BUY_HOSTING_PER_GPU_MONTH = env_str("PORTAL_BUY_HOSTING_PER_GPU_MONTH", "90.00")
for _name in (
    "PORTAL_COMMITTED_GPU_MONTH_PRICE",
    "PORTAL_BUY_CARD_PRICE",
    "PORTAL_BUY_POWER_PER_GPU_MONTH",
    "PORTAL_BUY_HOSTING_PER_GPU_MONTH",
):
    try:
        if Decimal(globals()[_name]) < 0:
            raise InvalidOperation
    except InvalidOperation:
        raise ImproperlyConfigured(f"{_name} must be an amount such as 25000.00.") from None
if PORTAL_BUY_LIFETIME_MONTHS < 1:
    raise ImproperlyConfigured("PORTAL_BUY_LIFETIME_MONTHS must be at least 1.")
# Reconciliation with the provider's bill (billing.reconcile): a difference beyond this
# percent of the larger of the two costs is flagged, and the month's close waits until
# someone has looked at it. A Decimal string from 0 to 100.
PORTAL_RECONCILE_THRESHOLD_PERCENT = env_str("PORTAL_RECONCILE_THRESHOLD_PERCENT", "0.5")
try:
    if not 0 <= Decimal(PORTAL_RECONCILE_THRESHOLD_PERCENT) <= 100:
        raise InvalidOperation
except InvalidOperation:
    raise ImproperlyConfigured(
        "PORTAL_RECONCILE_THRESHOLD_PERCENT must be a percent from 0 to 100, such as 0.5."
    ) from None
# Expected start (rental.loans.expected_start): the beat plays every pool with waiting
# leases every PORTAL_EXPECTED_START_FORECAST_SECONDS, whatever its size (the bench's pool
# of 9,870 live leases: read about 150 ms, played about 65 ms), and pages read that. A page
# plays a pool itself only for what the beat has not played yet (a lease queued since, an
# approval's "if approved", the request form), and only a pool of at most this many live
# leases, stopping after this many milliseconds; past either it shows no estimate rather
# than a slow page.
PORTAL_EXPECTED_START_MAX_LEASES = env_int("PORTAL_EXPECTED_START_MAX_LEASES", 2000)
PORTAL_EXPECTED_START_SECONDS = env_int("PORTAL_EXPECTED_START_MILLISECONDS", 60) / 1000
PORTAL_EXPECTED_START_FORECAST_SECONDS = env_int("PORTAL_EXPECTED_START_FORECAST_SECONDS", 60)
# A forecast older than three beats is not shown (the beat stopped): pages play live again.
PORTAL_EXPECTED_START_FORECAST_TTL = 3 * PORTAL_EXPECTED_START_FORECAST_SECONDS
# Two indexes of the leases carry extra columns (INCLUDE) so that PostgreSQL answers the
# running sums from the index alone; SQLite (the demo) indexes their key columns only and
# says so on every command (models.W040), which is expected there and nothing to act on.
SILENCED_SYSTEM_CHECKS = ["models.W040"]
# Form widgets are drawn from Django's own Jinja2 copies of its widget templates, the same
# markup several times faster (portal/form_renderer.py); the admin's, which exist for
# Django's template engine only, by that engine.
FORM_RENDERER = "portal.form_renderer.JinjaFirst"
