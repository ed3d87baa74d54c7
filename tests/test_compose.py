"""docker-compose.yml scales as docs/operations.md says ("More than one machine"):
``docker compose up --scale web=2 --scale worker=2`` needs no web or worker replica to
claim a host port or a container name of its own, and the balancer, the one published
port, finds every web replica. (No Docker engine here: the file is read, not run.)"""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SCALED = ("web", "worker")


def services() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]


def test_the_scaled_services_claim_nothing_that_two_replicas_would_share():
    found = services()
    for name in SCALED:
        assert "ports" not in found[name], f"{name} publishes a host port"
        assert "container_name" not in found[name], f"{name} names its container"


def test_the_balancer_alone_publishes_the_portal_and_follows_the_web_replicas():
    found = services()
    published = sorted(name for name, service in found.items() if service.get("ports"))
    assert published == ["balancer"]
    (mount,) = found["balancer"]["volumes"]
    source = ROOT / mount.split(":")[0]
    conf = source.read_text()
    assert "server web:8000 resolve;" in conf  # every replica, found again as they change
    # It adds no X-Forwarded-For entry: PORTAL_TRUSTED_PROXIES counts the proxies in front.
    assert "proxy_set_header X-Forwarded-For" not in conf


def test_the_operations_guide_shows_the_scaling_and_one_beat():
    guide = (ROOT / "docs" / "operations.md").read_text()
    assert "docker compose up -d --scale web=2 --scale worker=2" in guide
    assert "**Beat: exactly one.**" in guide


def test_the_migrations_run_once_before_any_portal_process_not_in_each_replica():
    found = services()
    assert found["migrate"]["command"][-3:] == ["manage.py", "migrate", "--noinput"]
    assert found["migrate"]["restart"] == "no"
    for name in SCALED:
        assert "migrate" not in str(found[name]["command"]), f"{name} runs the migrations"
    waits = found["web"]["depends_on"]["migrate"]
    assert waits == {"condition": "service_completed_successfully"}
    for name in ("worker", "beat"):
        assert found[name]["depends_on"]["web"] == {"condition": "service_healthy"}
