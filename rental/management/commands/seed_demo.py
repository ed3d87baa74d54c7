"""Load the demo's people, projects, pools, quotas, offering zones, images, SSH keys and three
weeks of history with the hourly utilization its agents would have reported.

Idempotent: a second run adds nothing. It needs the demo provider account and its
offerings (``load_catalog --account "Demo cloud (local EC2)"``) to exist. The history
is ended leases only, so nothing in it is expected to run in the local cloud; at every
instant it stays within each pool's capacity and each project's guarantee and ceiling.
The seeding itself lives in ``rental.demo``.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from django.utils import timezone

from rental.demo import (
    DEMO_ACCOUNT,
    seed_history,
    seed_images,
    seed_offering_zones,
    seed_people,
    seed_pools_and_quotas,
    seed_projects,
    seed_ssh_keys,
    seed_utilization,
)
from rental.demo.own_servers import seed_server_room
from rental.models import ProviderAccount

__all__ = ["DEMO_ACCOUNT", "Command"]


class Command(BaseCommand):
    help = "Load the demo's users, projects, pools, quotas, images, keys and history (idempotent)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--account", default=DEMO_ACCOUNT, help="the demo provider account")
        parser.add_argument(
            "--sample-seconds",
            type=int,
            default=settings.PORTAL_AGENT_HEARTBEAT_SECONDS,
            help="the agents' interval the history's utilization is counted in",
        )
        parser.add_argument(
            "--own-servers",
            action="store_true",
            help="also two own GPU servers (manage.py demo runs them as local processes)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        account = ProviderAccount.objects.filter(name=options["account"]).first()
        if account is None or not account.offerings.exists():
            raise CommandError(
                f'The provider account "{options["account"]}" and its offerings must exist '
                f'first: manage.py load_catalog --account "{options["account"]}".'
            )
        with transaction.atomic():
            users = seed_people(self.stdout)
            projects = seed_projects(users)
            seed_pools_and_quotas(users["admin"], projects, self.stderr)
            seed_offering_zones(account)
            images = seed_images(account)
            seed_ssh_keys(users)
            if options.get("own_servers"):
                seed_server_room(users["admin"], now=timezone.now(), stdout=self.stdout)
        for project in projects.values():
            with transaction.atomic():
                count = seed_history(project, account=account, images=images)
            if count:
                self.stdout.write(f"  {project.slug}: {count} ended leases of history")
            with transaction.atomic():
                seed_utilization(project, sample_seconds=max(1, options["sample_seconds"]))
