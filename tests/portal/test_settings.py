"""Settings come from the environment; production refuses to start half-configured."""

import os
import subprocess
import sys
from pathlib import Path

from cryptography.fernet import Fernet

ROOT = Path(__file__).resolve().parents[2]


def manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in {"SECRET_KEY", "PORTAL_ENCRYPTION_KEYS", "DJANGO_SETTINGS_MODULE"}
    }
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**clean, "DJANGO_SETTINGS_MODULE": "portal.settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


PRODUCTION = {
    "PORTAL_ENV": "production",
    "SECRET_KEY": "x7" * 40 + "Qz!v%k",
    "PORTAL_ENCRYPTION_KEYS": Fernet.generate_key().decode(),
    "ALLOWED_HOSTS": "gpu.example.com",
    "PORTAL_INSTALLATION_ID": "acme",
    "DATABASE_URL": os.environ["DATABASE_URL"],
    "REDIS_URL": "redis://127.0.0.1:6379/1",
}


def test_it_passes_the_deploy_check_in_production():
    result = manage("check", "--deploy", "--fail-level", "WARNING", **PRODUCTION)
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


def test_it_refuses_production_without_a_secret_key():
    result = manage("check", **{**PRODUCTION, "SECRET_KEY": ""})
    assert result.returncode != 0
    assert "SECRET_KEY must be set" in result.stderr


def test_it_refuses_production_without_encryption_keys():
    result = manage("check", **{**PRODUCTION, "PORTAL_ENCRYPTION_KEYS": ""})
    assert result.returncode != 0
    assert "PORTAL_ENCRYPTION_KEYS must be set" in result.stderr


def test_it_refuses_production_without_a_shared_cache():
    # The login throttle's counters would otherwise live in each worker process.
    result = manage("check", **{**PRODUCTION, "REDIS_URL": ""})
    assert result.returncode != 0
    assert "REDIS_URL must be set" in result.stderr


def test_it_fails_loudly_on_a_bad_value():
    result = manage("check", **{**PRODUCTION, "DEBUG": "maybe"})
    assert result.returncode != 0
    assert "DEBUG must be true or false" in result.stderr
    bad_key = manage("check", **{**PRODUCTION, "PORTAL_ENCRYPTION_KEYS": "not-a-key"})
    assert "not a Fernet key" in bad_key.stderr


def test_it_refuses_bad_operator_settings():
    for name, value, said in (
        ("PORTAL_METRICS_TOKEN", "too-short", "at least 24 characters"),
        ("PORTAL_METRICS_ADDRESSES", "10.0.0.0/33", "must list IP addresses or networks"),
        ("PORTAL_READY_BROKER_TIMEOUT", "0", "PORTAL_READY_BROKER_TIMEOUT must be at least 1"),
    ):
        result = manage("check", **{**PRODUCTION, name: value})
        assert result.returncode != 0, name
        assert said in result.stderr, (name, result.stderr[-500:])


def test_it_keeps_metrics_closed_in_production_until_a_token_or_address_is_set():
    said = "from portal import access; print('open', access.metrics_open())"
    closed = manage("shell", "-c", said, **PRODUCTION)
    assert closed.returncode == 0, closed.stderr
    assert "open False" in closed.stdout
    opened = manage("shell", "-c", said, **PRODUCTION, PORTAL_METRICS_ADDRESSES="10.0.0.0/8")
    assert "open True" in opened.stdout


def test_it_refuses_outage_timings_that_cannot_work():
    for name, value, says in (
        ("PORTAL_REDIS_TIMEOUT_SECONDS", "0", "PORTAL_REDIS_TIMEOUT_SECONDS must be at least 1"),
        ("PORTAL_OUTAGE_RETRY_SECONDS", "-1", "PORTAL_OUTAGE_RETRY_SECONDS must not be negative"),
        ("PORTAL_OUTBOX_SWEEP_INTERVAL", "0", "PORTAL_OUTBOX_SWEEP_INTERVAL must be at least 1"),
    ):
        result = manage("check", **{**PRODUCTION, name: value})
        assert result.returncode != 0, name
        assert says in result.stderr


def test_it_refuses_login_throttle_settings_that_would_turn_it_off_or_trust_anyone():
    no_count = manage("check", **{**PRODUCTION, "LOGIN_THROTTLE_ACCOUNT_ATTEMPTS": "0"})
    assert no_count.returncode != 0
    assert "LOGIN_THROTTLE_ACCOUNT_ATTEMPTS must be at least 1" in no_count.stderr
    proxies = manage("check", **{**PRODUCTION, "PORTAL_TRUSTED_PROXIES": "-1"})
    assert proxies.returncode != 0
    assert "PORTAL_TRUSTED_PROXIES must be 0 or more" in proxies.stderr
