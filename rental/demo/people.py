"""The demo's people: users, projects, memberships and SSH keys."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import OutputWrapper

from portal import audit
from portal.models import FINANCE_GROUP, Membership, Project
from rental.models import SshKey

MANAGER = Membership.Role.MANAGER
ENGINEER = Membership.Role.ENGINEER


@dataclass(frozen=True)
class DemoUser:
    username: str
    first_name: str
    last_name: str
    what: str
    staff: bool = False
    finance: bool = False
    memberships: tuple[tuple[str, str], ...] = ()

    @property
    def password(self) -> str:
        # Demo-only passwords, printed by ``manage.py demo``; never used outside the demo.
        return f"demo-{self.username}"


DEMO_USERS: tuple[DemoUser, ...] = (
    DemoUser("admin", "Ada", "Admin", "site admin", staff=True),
    DemoUser(
        "maria",
        "Maria",
        "Rossi",
        "manager of vision, engineer in speech",
        memberships=(("vision", MANAGER), ("speech", ENGINEER)),
    ),
    DemoUser("li.wei", "Li", "Wei", "manager of nlp", memberships=(("nlp", MANAGER),)),
    DemoUser("erik", "Erik", "Larsen", "engineer in vision", memberships=(("vision", ENGINEER),)),
    DemoUser("amira", "Amira", "Haddad", "engineer in nlp", memberships=(("nlp", ENGINEER),)),
    DemoUser(
        "chen",
        "Chen",
        "Jing",
        "engineer in speech and vision",
        memberships=(("speech", ENGINEER), ("vision", ENGINEER)),
    ),
    DemoUser("fiona", "Fiona", "Byrne", "finance: reads every statement", finance=True),
)

# slug, name, cost center
DEMO_PROJECTS: tuple[tuple[str, str, str], ...] = (
    ("vision", "Computer Vision", "CC-4100 Applied Vision"),
    ("nlp", "Language Models", "CC-4200 Language"),
    ("speech", "Speech", "CC-4300 Speech & Audio"),
)


def demo_public_key(username: str) -> str:
    """A real, stable ed25519 public key for a demo user (its private half is thrown away)."""
    seed = hashlib.sha256(f"gpu-portal-demo:{username}".encode()).digest()
    public = Ed25519PrivateKey.from_private_bytes(seed).public_key()
    blob = public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return f"{blob.decode()} {username}@demo-laptop"


def seed_people(stdout: OutputWrapper) -> dict[str, Any]:
    """The demo users (with their demo passwords), finance in the finance group."""
    finance, _created = Group.objects.get_or_create(name=FINANCE_GROUP)
    users = {}
    for spec in DEMO_USERS:
        user, created = get_user_model().objects.get_or_create(
            username=spec.username,
            defaults={
                "first_name": spec.first_name,
                "last_name": spec.last_name,
                "email": f"{spec.username}@example.com",
                "is_staff": spec.staff,
                "is_superuser": spec.staff,
            },
        )
        if created:
            user.set_password(spec.password)
            user.save(update_fields=["password"])
            stdout.write(f"  user {spec.username} ({spec.what})")
        if spec.finance:
            user.groups.add(finance)
        users[spec.username] = user
    return users


def seed_projects(users: dict[str, Any]) -> dict[str, Project]:
    """The demo projects and their members."""
    projects = {}
    for slug, name, cost_center in DEMO_PROJECTS:
        project, created = Project.objects.get_or_create(
            slug=slug, defaults={"name": name, "cost_center": cost_center}
        )
        if created:
            audit.record(
                actor=users["admin"],
                verb="project.created",
                obj=project,
                project=project,
                source="command",
                after={"name": name, "cost_center": cost_center},
            )
        projects[slug] = project
    for spec in DEMO_USERS:
        for slug, role in spec.memberships:
            Membership.objects.get_or_create(
                user=users[spec.username], project=projects[slug], defaults={"role": role}
            )
    return projects


def seed_ssh_keys(users: dict[str, Any]) -> None:
    """A laptop key for every engineer."""
    engineers = {
        spec.username
        for spec in DEMO_USERS
        if any(role == ENGINEER for _slug, role in spec.memberships)
    }
    for username in sorted(engineers):
        SshKey.objects.get_or_create(
            user=users[username],
            name="laptop",
            defaults={"public_key": demo_public_key(username)},
        )
