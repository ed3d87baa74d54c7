"""The demo's data: people, projects, pools, quotas, images, SSH keys and history.

Every function here is idempotent: a second run adds nothing. They need the demo
provider account and its offerings (``load_catalog --account "Demo cloud (local EC2)"``)
to exist; ``manage.py seed_demo`` runs them in order.
"""

from rental.demo.capacity import DEMO_IMAGES, DEMO_POOLS, seed_images, seed_pools_and_quotas
from rental.demo.history import seed_history
from rental.demo.people import (
    DEMO_PROJECTS,
    DEMO_USERS,
    DemoUser,
    seed_people,
    seed_projects,
    seed_ssh_keys,
)

DEMO_ACCOUNT = "Demo cloud (local EC2)"

__all__ = [
    "DEMO_ACCOUNT",
    "DEMO_IMAGES",
    "DEMO_POOLS",
    "DEMO_PROJECTS",
    "DEMO_USERS",
    "DemoUser",
    "seed_history",
    "seed_images",
    "seed_people",
    "seed_pools_and_quotas",
    "seed_projects",
    "seed_ssh_keys",
]
