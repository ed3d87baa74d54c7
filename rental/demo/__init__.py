"""The demo's data: people, projects, pools, quotas, offering zones, images, SSH keys,
history with its utilization, and the leases running at its start.

Every function here is idempotent: a second run adds nothing. They need the demo
provider account and its offerings (``load_catalog --account "Demo cloud (local EC2)"``)
to exist; ``manage.py seed_demo`` runs them in order.
"""

from rental.demo.capacity import (
    DEMO_IMAGES,
    DEMO_POOLS,
    DEMO_ZONES,
    seed_images,
    seed_offering_zones,
    seed_pools_and_quotas,
)
from rental.demo.history import seed_history
from rental.demo.live import DEMO_LIVE_LEASES, restore_volumes, start_live_leases
from rental.demo.people import (
    DEMO_PROJECTS,
    DEMO_USERS,
    DemoUser,
    seed_people,
    seed_projects,
    seed_ssh_keys,
)
from rental.demo.utilization import seed_utilization

DEMO_ACCOUNT = "Demo cloud (local EC2)"

__all__ = [
    "DEMO_ACCOUNT",
    "DEMO_IMAGES",
    "DEMO_LIVE_LEASES",
    "DEMO_POOLS",
    "DEMO_PROJECTS",
    "DEMO_USERS",
    "DEMO_ZONES",
    "DemoUser",
    "restore_volumes",
    "seed_history",
    "seed_images",
    "seed_offering_zones",
    "seed_people",
    "seed_pools_and_quotas",
    "seed_projects",
    "seed_ssh_keys",
    "seed_utilization",
    "start_live_leases",
]
