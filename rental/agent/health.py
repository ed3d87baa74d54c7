"""An instance's health (L8): is it what it claims (the card, the count, the driver for
the image's CUDA, the frameworks seeing the GPU, the acceptance burn's speed)? The
judgement is a pure function over the agent's report; ``judge_health`` records it and
tells the engineer and the admins once."""

import re
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.utils.translation import gettext_noop

from portal import audit
from portal.notifications import admins, notify
from portal.phrases import Joined, Phrase
from rental.loans.messages import lease_name
from rental.models import Instance


def _tokens(name: str) -> list[str]:
    return [t for t in re.split(r"[^a-z0-9]+", name.lower()) if t]


def gpu_name_matches(reported: str, expected: str) -> bool:
    """'NVIDIA A100-SXM4-80GB' is an 'A100 80GB'; 'NVIDIA L40S' is not an 'L4 24GB'
    (memory sizes are compared by token only when the card reports them)."""
    got = _tokens(reported)
    want = _tokens(expected)
    if not want:
        return False
    model, *rest = want
    if model not in got:
        return False
    sizes = [t for t in got if re.fullmatch(r"\d+gb", t)]
    return not sizes or all(t in got for t in rest if re.fullmatch(r"\d+gb", t))


def _version(value: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", value or "")[:3])


def health_problems(
    *,
    expected_model: str,
    expected_count: int,
    image_cuda: str,
    rated_tflops: Decimal | None,
    health: dict | None,
    burn: dict | None,
    min_percent: int,
) -> list[Phrase]:
    """Why an instance is not what it claims, in words for the engineer; empty if it is.
    A pure function over the agent's report."""
    problems: list[Phrase] = []
    if health:
        gpus = health.get("gpus", [])
        if len(gpus) != expected_count:
            problems.append(
                Phrase(
                    gettext_noop("%(got)s GPUs found, %(want)s expected."),
                    got=len(gpus),
                    want=expected_count,
                )
            )
        wrong = sorted({g["name"] for g in gpus if not gpu_name_matches(g["name"], expected_model)})
        if wrong:
            problems.append(
                Phrase(
                    gettext_noop("The card is %(got)s, not %(want)s."),
                    got=", ".join(wrong),
                    want=expected_model,
                )
            )
        cuda = health.get("cuda_version", "")
        if image_cuda and cuda and _version(cuda) < _version(image_cuda):
            problems.append(
                Phrase(
                    gettext_noop(
                        "Driver %(driver)s supports CUDA up to %(cuda)s; the image needs CUDA "
                        "%(need)s."
                    ),
                    driver=str(health.get("driver_version", "?")),
                    cuda=str(cuda),
                    need=image_cuda,
                )
            )
        for name, sees in sorted((health.get("frameworks") or {}).items()):
            if sees.get("installed") and not sees.get("cuda"):
                problems.append(
                    Phrase(gettext_noop("%(framework)s does not see the GPU."), framework=name)
                )
    if burn and burn.get("tflops") and rated_tflops:
        slowest = min(burn["tflops"])
        if Decimal(str(slowest)) * 100 < rated_tflops * min_percent:
            problems.append(
                Phrase(
                    gettext_noop(
                        "The acceptance burn reached %(got)s TFLOPS, under %(percent)s %% of "
                        "the rated %(rated)s."
                    ),
                    got=f"{slowest:.1f}",
                    percent=min_percent,
                    rated=rated_tflops,
                )
            )
    return problems


def judge_health(instance: Instance, *, now: datetime) -> None:
    report = instance.agent_report
    lease = instance.reservation
    gpu_model = instance.offering.gpu_model
    problems = health_problems(
        expected_model=gpu_model.name,
        expected_count=instance.gpu_count,
        image_cuda=lease.image.cuda_version if lease.image else "",
        rated_tflops=gpu_model.bf16_tflops,
        health=report.get("health"),
        burn=report.get("burn"),
        min_percent=settings.PORTAL_BURN_MIN_PERCENT,
    )
    before = instance.health
    if problems:
        instance.health = Instance.Health.UNHEALTHY
        instance.health_message = Joined(problems)
    elif before != Instance.Health.UNHEALTHY:
        instance.health = Instance.Health.HEALTHY
        instance.health_message = ""
    instance.save(update_fields=["health", "health_message"])
    if instance.health == Instance.Health.UNHEALTHY and before != Instance.Health.UNHEALTHY:
        notify(
            [lease.requester, *admins()],
            subject=Phrase(
                gettext_noop("Unhealthy instance in %(lease)s"), lease=lease_name(lease)
            ),
            body=instance.health_message,
            link=lease.get_absolute_url(),
        )
        audit.record(
            actor=None,
            verb="instance.unhealthy",
            obj=instance,
            project=lease.project_id,
            source="api",
            at=now,
            after={"reason": instance.health_message},
        )
