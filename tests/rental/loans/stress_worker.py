"""One process of the admission stress test (run by tests/rental/loans/test_stress.py).

    DATABASE_URL=… python -m tests.rental.loans.stress_worker WORKER COUNT SEED

Submits COUNT random requests into the one pool as the worker's user, ends a random
live lease every third step and admits the queue; after every step it reads the pool's
standing under the pool lock and counts any overcommit of C, of a ceiling L or of a
guarantee G. Prints one JSON line.
"""

import contextlib
import json
import os
import random
import sys
import time


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.db import transaction
    from django.db.models import Q, Sum

    from portal.errors import DomainError
    from portal.models import Project
    from rental.loans import admission, due, ending, queue
    from rental.loans.standing import CLAIMING, HOLDING_GPUS, NOTICED
    from rental.models import GpuModel, Pool, Quota, Reservation, Tier

    worker, count, seed = (int(arg) for arg in sys.argv[1:4])
    rng = random.Random(seed)
    user = get_user_model().objects.get(username=f"stress{worker}")
    model = GpuModel.objects.get(name="A100 80GB")
    projects = list(Project.objects.filter(slug__startswith="stress-").order_by("slug"))
    quotas = {q.project_id: q for q in Quota.objects.filter(gpu_model=model)}
    outcomes: dict[str, int] = {}
    violations: list[str] = []
    latencies: list[float] = []

    def check() -> None:
        with transaction.atomic():
            pool = Pool.objects.select_for_update().get(gpu_model=model)
            live = Reservation.objects.filter(gpu_model=model)
            running = live.filter(HOLDING_GPUS).aggregate(n=Sum("gpu_count"))["n"] or 0
            after = (
                live.filter((HOLDING_GPUS & ~NOTICED) | CLAIMING).aggregate(n=Sum("gpu_count"))["n"]
                or 0
            )
            if max(running, after) > pool.capacity:
                violations.append(f"C: {running}, {after} after notices > {pool.capacity}")
            # Physically running, and what runs once every notice is over (a victim and
            # the lease that takes its GPUs are never counted twice).
            for label, where in (
                ("now", HOLDING_GPUS),
                ("after notices", (HOLDING_GPUS & ~NOTICED) | CLAIMING),
            ):
                check_projects(live.filter(where), label)

    def check_projects(leases, label: str) -> None:
        rows = leases.values("project_id").annotate(
            used=Sum("gpu_count", filter=~Q(tier=Tier.SPOT)),
            guaranteed=Sum("gpu_count", filter=Q(tier=Tier.GUARANTEED)),
        )
        for row in rows:
            quota = quotas[row["project_id"]]
            if (row["used"] or 0) > quota.ceiling:
                violations.append(f"L {label}: {row}")
            if (row["guaranteed"] or 0) > quota.guaranteed:
                violations.append(f"G {label}: {row}")

    for step in range(count):
        project = rng.choice(projects)
        started = time.perf_counter()
        try:
            lease = admission.submit_reservation(
                actor=user,
                project=project,
                gpu_model=model,
                gpu_count=rng.choice((1, 1, 2, 3)),
                duration_hours=1,
                priority=rng.choice(("production", "experiment", "learning")),
                market=rng.choice(("on_demand", "on_demand", "on_demand", "spot")),
                requeue_on_preemption=rng.random() < 0.3,
            )
            outcomes[lease.status] = outcomes.get(lease.status, 0) + 1
        except DomainError as refused:
            outcomes[refused.code] = outcomes.get(refused.code, 0) + 1
        latencies.append(time.perf_counter() - started)
        if step % 3 == 2:
            live = list(
                Reservation.objects.filter(
                    gpu_model=model, status__in=(Reservation.Status.PROVISIONING,)
                ).values_list("pk", flat=True)[:20]
            )
            if live:
                with contextlib.suppress(DomainError):
                    ending.end_reservation(
                        actor=user, reservation=Reservation.objects.get(pk=rng.choice(live))
                    )
            due.process_due()
            queue.admit_queued(gpu_model=model)
        check()
    result = {"outcomes": outcomes, "violations": violations, "latencies": latencies}
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
