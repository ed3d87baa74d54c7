"""The ssh driver against real OpenSSH servers (tests/own_hosts.py): each host a network
namespace running sshd, with a fake nvidia-smi reporting the GPUs a test chose. Nothing of
the driver is patched: it runs the system's ssh client, the host program runs as root on
the host and makes real Unix accounts, and the engineer logs in over SSH."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from rental.providers.base import (
    MARKET_ON_DEMAND,
    TAG_INSTALLATION,
    AccountConfig,
    CloudState,
    Credentials,
    LaunchSpec,
    ProviderError,
    ProviderErrorKind,
)
from rental.providers.ssh import SshProvider, instance_type, lease_account
from rental.providers.ssh_host import catalog_name
from tests import own_hosts
from tests.own_hosts import A100_80GB, H100_80GB, L4, RTX_4090, Site

UNAVAILABLE = own_hosts.unavailable()
needs_hosts = pytest.mark.skipif(bool(UNAVAILABLE), reason=UNAVAILABLE or "available")
REGION = "dc-1"
TWO_4090 = instance_type("RTX 4090 24GB", 2)


def spec(site: Site, kind: str = TWO_4090, *, zone: str = "", **fields: str) -> LaunchSpec:
    return LaunchSpec(
        region=REGION,
        instance_type=kind,
        image_id="",
        market=MARKET_ON_DEMAND,
        tags=((TAG_INSTALLATION, "ssh-driver-test"),),
        zone=zone,
        ssh_public_keys=(site.engineer_key.public,),
        **fields,
    )


def driver(site: Site, **options: float) -> SshProvider:
    return SshProvider(site.account_config(region=REGION), connect_timeout=2, **options)


@pytest.fixture
def site() -> Iterator[Site]:
    with own_hosts.site({"box-a": 4 * [RTX_4090], "box-b": 4 * [RTX_4090]}) as made:
        yield made


def account_exists(user: str) -> bool:
    try:
        pwd.getpwnam(user)
    except KeyError:
        return False
    return True


# -- naming cards (pure) --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reported", "memory_mib", "name"),
    [
        ("NVIDIA GeForce RTX 4090", 24564, "RTX 4090 24GB"),
        ("NVIDIA GeForce RTX 3090", 24576, "RTX 3090 24GB"),
        ("NVIDIA A10G", 23028, "A10G 24GB"),
        ("NVIDIA L4", 23034, "L4 24GB"),
        ("Tesla T4", 15360, "T4 16GB"),
        ("NVIDIA L40S", 46068, "L40S 48GB"),
        ("NVIDIA A100-PCIE-40GB", 40960, "A100 40GB"),
        ("NVIDIA A100-SXM4-80GB", 81920, "A100 80GB"),
        ("NVIDIA H100 80GB HBM3", 81559, "H100 80GB"),
        ("NVIDIA H100 PCIe", 81559, "H100 80GB"),
        ("NVIDIA H200", 143771, "H200 141GB"),
        ("NVIDIA H20", 97871, "H20 96GB"),
        ("NVIDIA H800", 81559, "H800 80GB"),
    ],
)
def test_it_names_cards_as_the_catalog_does(reported: str, memory_mib: int, name: str) -> None:
    catalog = json.loads(
        (Path(__file__).resolve().parents[3] / "rental/data/catalog.json").read_text()
    )
    names = {model["name"] for model in catalog["gpu_models"]}

    assert catalog_name(reported, memory_mib) == name
    assert name in names


def test_it_names_instance_types_from_the_model() -> None:
    assert instance_type("RTX 4090 24GB", 2) == "own-2x-rtx-4090-24gb"
    assert lease_account("box-1/gp-0a1b2c3d4e") == "gp-0a1b2c3d4e"


NO_SERVERS = AccountConfig(driver="ssh", credentials=Credentials("", ""))


def test_it_refuses_an_instance_type_not_of_own_servers() -> None:
    bad = LaunchSpec(
        region=REGION, instance_type="g5.xlarge", image_id="", market=MARKET_ON_DEMAND, tags=()
    )

    with pytest.raises(ProviderError) as refused:
        SshProvider(NO_SERVERS).launch(bad, idempotency_key="k")

    assert refused.value.kind == ProviderErrorKind.INVALID
    assert "g5.xlarge" in str(refused.value)


def test_it_refuses_to_validate_a_site_without_servers() -> None:
    with pytest.raises(ProviderError) as refused:
        SshProvider(NO_SERVERS).validate()

    assert refused.value.kind == ProviderErrorKind.INVALID


# -- discovery ------------------------------------------------------------------------------


@needs_hosts
def test_it_discovers_each_servers_gpus_and_learns_its_host_key() -> None:
    with own_hosts.site({"box-a": 2 * [RTX_4090] + [L4], "box-b": [A100_80GB, H100_80GB]}) as s:
        provider = driver(s)
        provider.validate()

        reports = {report.name: report for report in provider.inspect_hosts()}

        box_a, box_b = reports["box-a"], reports["box-b"]
        assert box_a.reachable and box_b.reachable
        assert [(g.index, g.name, g.memory_mib, g.uuid) for g in box_a.gpus] == [
            (0, "NVIDIA GeForce RTX 4090", 24564, "GPU-box-a-0"),
            (1, "NVIDIA GeForce RTX 4090", 24564, "GPU-box-a-1"),
            (2, "NVIDIA L4", 23034, "GPU-box-a-2"),
        ]
        assert [catalog_name(g.name, g.memory_mib) for g in box_b.gpus] == [
            "A100 80GB",
            "H100 80GB",
        ]
        assert box_a.leases == ()
        assert box_a.host_key == s.hosts["box-a"].host_key
        assert box_b.host_key == s.hosts["box-b"].host_key


@needs_hosts
def test_it_holds_a_server_to_its_pinned_host_key(site: Site) -> None:
    box_a, box_b = site.hosts["box-a"], site.hosts["box-b"]
    pinned = SshProvider(
        site.account_config(hosts=[box_a.config(host_key=box_a.host_key)]), connect_timeout=2
    )
    impostor = SshProvider(
        site.account_config(hosts=[box_a.config(host_key=box_b.host_key)]), connect_timeout=2
    )

    pinned.validate()
    with pytest.raises(ProviderError) as refused:
        impostor.validate()

    assert refused.value.kind == ProviderErrorKind.AUTH
    assert "host key" in str(refused.value)
    [report] = impostor.inspect_hosts()
    assert not report.reachable
    assert "host key" in report.message


# -- a lease --------------------------------------------------------------------------------


@needs_hosts
def test_it_leases_two_gpus_and_the_engineer_logs_in_and_sees_them(site: Site) -> None:
    provider = driver(site)

    instance = provider.launch(spec(site, zone="box-a"), idempotency_key="lease-1")

    user = lease_account(instance.external_id)
    box = site.hosts["box-a"]
    assert instance.external_id == f"box-a/{user}"
    assert user.startswith("gp-")
    assert instance.login_user == user
    assert instance.state == CloudState.RUNNING
    assert (instance.zone, instance.region) == ("box-a", REGION)
    assert instance.public_address == box.address
    assert instance.instance_type == TWO_4090
    assert instance.idempotency_key == "lease-1"
    assert instance.tag(TAG_INSTALLATION) == "ssh-driver-test"
    command = box.ssh(user, site.engineer_key, "echo $CUDA_VISIBLE_DEVICES; id -un")
    assert command.stdout.split() == ["0,1", user], command.stderr
    login = box.ssh(user, site.engineer_key, "bash -lc 'echo $CUDA_VISIBLE_DEVICES'")
    assert login.stdout.strip() == "0,1"
    assert box.ssh(user, site.admin_key, "true").returncode == 255  # only the engineer's key
    [report] = [r for r in provider.inspect_hosts() if r.name == "box-a"]
    assert report.leases == (("lease-1", (0, 1)),)


@needs_hosts
def test_it_gives_a_second_lease_other_gpus(site: Site) -> None:
    provider = driver(site)

    first = provider.launch(spec(site, zone="box-a"), idempotency_key="lease-1")
    second = provider.launch(spec(site, zone="box-a"), idempotency_key="lease-2")
    third = provider.launch(spec(site), idempotency_key="lease-3")

    box = site.hosts["box-a"]
    seen = box.ssh(
        lease_account(second.external_id), site.engineer_key, "echo $CUDA_VISIBLE_DEVICES"
    )
    assert seen.stdout.strip() == "2,3"
    assert first.external_id != second.external_id
    assert third.zone == "box-b"  # box-a is full
    with pytest.raises(ProviderError) as refused:
        provider.launch(spec(site, zone="box-a"), idempotency_key="lease-4")
    assert refused.value.kind == ProviderErrorKind.CAPACITY
    assert refused.value.retryable


@needs_hosts
def test_it_launches_once_for_a_key_given_twice(site: Site) -> None:
    provider = driver(site)

    first = provider.launch(spec(site), idempotency_key="lease-1")
    again = provider.launch(spec(site), idempotency_key="lease-1")
    elsewhere = provider.launch(
        spec(site, zone="box-b" if first.zone == "box-a" else "box-a"), idempotency_key="lease-1"
    )

    assert again.external_id == first.external_id == elsewhere.external_id
    held = [key for box in site.hosts.values() for key in box.allocations()]
    assert held == ["lease-1"]
    found = provider.describe(region=REGION, tag_filter={TAG_INSTALLATION: "ssh-driver-test"})
    assert [instance.external_id for instance in found] == [first.external_id]


@needs_hosts
def test_it_ends_a_lease_with_its_processes_and_account(site: Site) -> None:
    provider = driver(site)
    instance = provider.launch(spec(site, zone="box-a"), idempotency_key="lease-1")
    user = lease_account(instance.external_id)
    box = site.hosts["box-a"]
    started = box.ssh(user, site.engineer_key, "setsid sleep 1000 >/dev/null 2>&1 & echo $!")
    sleeper = int(started.stdout.strip())
    assert Path(f"/proc/{sleeper}").exists()

    provider.terminate([instance.external_id], region=REGION)
    provider.terminate([instance.external_id, "box-a/gp-0000000000"], region=REGION)

    assert not Path(f"/proc/{sleeper}").exists() or _zombie(sleeper)
    assert not account_exists(user)
    assert not Path(f"/home/{user}").exists()
    [gone] = provider.describe_ids([instance.external_id], region=REGION)
    assert gone.state == CloudState.TERMINATED
    [report] = [r for r in provider.inspect_hosts() if r.name == "box-a"]
    assert report.leases == ()
    again = provider.launch(spec(site, zone="box-a"), idempotency_key="lease-2")
    seen = box.ssh(
        lease_account(again.external_id), site.engineer_key, "echo $CUDA_VISIBLE_DEVICES"
    )
    assert seen.stdout.strip() == "0,1"  # the GPUs are free again


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return True


@needs_hosts
def test_it_runs_the_agent_seeing_only_the_leases_gpus(site: Site) -> None:
    heard: list[dict] = []

    class Portal(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers["Content-Length"])
            heard.append(
                {
                    "token": self.headers.get("Authorization", ""),
                    "body": json.loads(self.rfile.read(length)),
                }
            )
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer((site.network.gateway, 0), Portal)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        config = {
            "url": f"http://{site.network.gateway}:{server.server_port}/api/v1/agent/heartbeat",
            "token": "agent-token-1",
            "interval": 1,
            "burn_seconds": 0,
        }
        provider = driver(site)
        provider.launch(spec(site, zone="box-a"), idempotency_key="lease-1")
        site.hosts["box-a"].set_utilization({2: 97.0, 3: 3.0})

        provider.launch(
            spec(site, zone="box-a", agent_config=json.dumps(config)), idempotency_key="lease-2"
        )

        deadline = time.monotonic() + 20
        while not any(h["body"].get("health") for h in heard) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        server.shutdown()
    health = next(h["body"]["health"] for h in heard if h["body"].get("health"))
    assert [gpu["index"] for gpu in health["gpus"]] == [2, 3]
    samples = [s for h in heard for s in h["body"]["samples"] if s["gpus"]]
    assert [gpu["utilization"] for gpu in samples[0]["gpus"]] == [97.0, 3.0]
    assert "agent-token-1" in heard[0]["token"]


# -- what goes wrong --------------------------------------------------------------------------


@needs_hosts
@pytest.mark.parametrize("how", ["sshd stopped", "cable pulled"])
def test_a_server_that_stops_answering_is_reported_and_skipped(site: Site, how: str) -> None:
    provider = driver(site)
    held = provider.launch(spec(site, zone="box-a"), idempotency_key="lease-1")
    box = site.hosts["box-a"]
    if how == "sshd stopped":
        box.stop()
    else:
        box.unplug()

    reports = {report.name: report for report in provider.inspect_hosts()}
    elsewhere = provider.launch(spec(site), idempotency_key="lease-2")

    assert not reports["box-a"].reachable
    assert "box-a" in reports["box-a"].message
    assert reports["box-b"].reachable
    assert elsewhere.zone == "box-b"
    with pytest.raises(ProviderError) as down:
        provider.launch(spec(site, zone="box-a"), idempotency_key="lease-3")
    assert down.value.kind == ProviderErrorKind.TRANSIENT
    with pytest.raises(ProviderError) as unknown:
        provider.describe_ids([held.external_id], region=REGION)
    assert unknown.value.kind == ProviderErrorKind.TRANSIENT  # never taken for gone
    listed = provider.describe(region=REGION, tag_filter={})
    assert [instance.external_id for instance in listed] == [elsewhere.external_id]
    if how == "sshd stopped":
        box.start()
    else:
        box.plug()
    [back] = provider.describe_ids([held.external_id], region=REGION)
    assert back.state == CloudState.RUNNING


@needs_hosts
def test_a_wrong_key_is_refused_as_auth_and_never_shown(site: Site) -> None:
    box = site.hosts["box-a"]
    wrong = SshProvider(
        site.account_config(hosts=[box.config(private_key=site.engineer_key.private)]),
        connect_timeout=2,
    )
    garbage = SshProvider(
        site.account_config(hosts=[box.config(private_key="not-a-key-at-all-s3cr3t")]),
        connect_timeout=2,
    )

    errors = []
    for provider in (wrong, garbage):
        for call in (
            provider.validate,
            lambda p=provider: p.launch(spec(site), idempotency_key="k"),
        ):
            with pytest.raises(ProviderError) as refused:
                call()
            errors.append(refused.value)
    [report] = wrong.inspect_hosts()

    assert [error.kind for error in errors] == [ProviderErrorKind.AUTH] * 4
    assert not any(error.retryable for error in errors)
    secret_lines = [line for line in site.engineer_key.private.splitlines() if "---" not in line]
    for text in [*(str(e) for e in errors), *(repr(e) for e in errors), report.message]:
        assert "PRIVATE KEY" not in text
        assert "s3cr3t" not in text
        assert not any(line in text for line in secret_lines)
    assert "refused the SSH key" in str(errors[0])
    assert not report.reachable


@needs_hosts
def test_a_gpu_that_disappears_shows_in_the_report(site: Site) -> None:
    provider = driver(site)
    provider.launch(spec(site, zone="box-a"), idempotency_key="lease-1")
    box = site.hosts["box-a"]

    box.set_gpus(3 * [RTX_4090], indexes=[0, 2, 3])  # GPU 1 fell off the bus

    [report] = [r for r in provider.inspect_hosts() if r.name == "box-a"]
    assert [gpu.index for gpu in report.gpus] == [0, 2, 3]
    assert report.leases == (("lease-1", (0, 1)),)
    with pytest.raises(ProviderError) as refused:  # 2 and 3 are left, not three
        provider.launch(
            spec(site, instance_type("RTX 4090 24GB", 3), zone="box-a"), idempotency_key="k"
        )
    assert refused.value.kind == ProviderErrorKind.CAPACITY


@needs_hosts
def test_a_busy_gpu_of_no_lease_is_reported_and_never_leased(site: Site) -> None:
    provider = driver(site)
    box = site.hosts["box-a"]
    box.set_processes([(2, 4242)])

    [report] = [r for r in provider.inspect_hosts() if r.name == "box-a"]
    four = spec(site, instance_type("RTX 4090 24GB", 4), zone="box-a")
    with pytest.raises(ProviderError) as refused:
        provider.launch(four, idempotency_key="lease-1")
    three = provider.launch(
        spec(site, instance_type("RTX 4090 24GB", 3), zone="box-a"), idempotency_key="lease-2"
    )

    assert [gpu.busy_pids for gpu in report.gpus] == [(), (), (4242,), ()]
    assert report.leases == ()
    assert refused.value.kind == ProviderErrorKind.CAPACITY
    seen = box.ssh(
        lease_account(three.external_id), site.engineer_key, "echo $CUDA_VISIBLE_DEVICES"
    )
    assert seen.stdout.strip() == "0,1,3"


@needs_hosts
def test_concurrent_launches_never_share_a_gpu(site: Site) -> None:
    provider = driver(site, command_timeout=60)
    counts = [2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1]  # 18 GPUs asked of 8

    def launch(number: int) -> tuple[int, object]:
        count = counts[number]
        try:
            return count, provider.launch(
                spec(site, instance_type("RTX 4090 24GB", count)), idempotency_key=f"lease-{number}"
            )
        except ProviderError as error:
            return count, error

    with ThreadPoolExecutor(max_workers=len(counts)) as pool:
        results = list(pool.map(launch, range(len(counts))))

    launched = [(count, r) for count, r in results if not isinstance(r, ProviderError)]
    refused = [(count, r) for count, r in results if isinstance(r, ProviderError)]
    assert {error.kind for _, error in refused} == {ProviderErrorKind.CAPACITY}
    held = {name: box.allocations() for name, box in site.hosts.items()}
    for allocations in held.values():
        indexes = Counter(i for a in allocations.values() for i in a["gpus"])
        assert all(times == 1 for times in indexes.values()), indexes
    assert sum(len(a["gpus"]) for allocs in held.values() for a in allocs.values()) == sum(
        count for count, _ in launched
    )
    free = {name: 4 - sum(len(a["gpus"]) for a in held[name].values()) for name in held}
    for count, _ in refused:  # refused only where no server had room for it
        assert all(left < count for left in free.values()), (count, free)
    for count, instance in launched:
        box = site.hosts[instance.zone]
        seen = box.ssh(
            lease_account(instance.external_id), site.engineer_key, "echo $CUDA_VISIBLE_DEVICES"
        )
        assert len(seen.stdout.strip().split(",")) == count


@needs_hosts
def test_a_server_whose_nvidia_smi_fails_answers_but_does_not_validate(site: Site) -> None:
    provider = driver(site)
    (site.hosts["box-b"].smi.parent / "gpus.json").write_text("{broken")

    reports = {report.name: report for report in provider.inspect_hosts()}
    with pytest.raises(ProviderError) as refused:
        provider.validate()

    assert reports["box-b"].reachable
    assert reports["box-b"].gpus == ()
    assert "nvidia-smi failed" in reports["box-b"].message
    assert refused.value.kind == ProviderErrorKind.INVALID
    assert "box-b" in str(refused.value)
    assert provider.launch(spec(site), idempotency_key="lease-1").zone == "box-a"


@pytest.fixture
def sudoer(site: Site) -> Iterator[str]:
    """An account on the hosts that may run anything through sudo without a password, let
    in with the site's admin key: how a server is reached where root may not log in."""
    if shutil.which("sudo") is None:
        pytest.skip("sudo is not installed (Debian package sudo)")
    user = f"gpadm{os.getpid() % 100000}"
    subprocess.run(
        ["useradd", "--create-home", "--shell", "/bin/bash", "-p", "*", user], check=True
    )
    rule = Path(f"/etc/sudoers.d/gpu-portal-test-{user}")
    try:
        rule.write_text(f"{user} ALL=(root) NOPASSWD: ALL\n")
        rule.chmod(0o440)
        keys = Path(f"/home/{user}/.ssh")
        keys.mkdir(mode=0o700)
        (keys / "authorized_keys").write_text(site.admin_key.public + "\n")
        shutil.chown(keys, user, user)
        shutil.chown(keys / "authorized_keys", user, user)
        yield user
    finally:
        rule.unlink(missing_ok=True)
        subprocess.run(["userdel", "-r", "-f", user], capture_output=True, check=False)


@needs_hosts
def test_it_works_through_sudo_and_says_when_sudo_asks_for_a_password(
    site: Site, sudoer: str
) -> None:
    box = site.hosts["box-a"]
    through_sudo = replace(box.config(), username=sudoer)
    provider = SshProvider(site.account_config(hosts=[through_sudo]), connect_timeout=2)

    provider.validate()
    instance = provider.launch(spec(site), idempotency_key="lease-1")
    seen = box.ssh(instance.login_user, site.engineer_key, "echo $CUDA_VISIBLE_DEVICES")
    provider.terminate([instance.external_id], region=REGION)
    Path(f"/etc/sudoers.d/gpu-portal-test-{sudoer}").write_text(f"{sudoer} ALL=(root) ALL\n")
    with pytest.raises(ProviderError) as refused:
        provider.validate()

    assert seen.stdout.strip() == "0,1"
    assert box.allocations()["lease-1"]["state"] == "terminated"  # the test's state dir
    assert not account_exists(instance.login_user)
    assert refused.value.kind == ProviderErrorKind.AUTH
    assert "sudo without a password" in str(refused.value)
