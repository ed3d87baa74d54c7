"""Cloud time after billing stopped (L5): an instance's usage closes when its lease ends
(the end second), and the cloud stops charging only when it has terminated it. Whatever
lies between is recorded when the row is marked terminated, at the cloud's own time, so
that the pool's page shows it and billing carries it as the platform's line."""

from datetime import datetime, timedelta

from rental.models import Instance, UnbilledCloudTime, UsageRecord


def whole_seconds(span: timedelta) -> int:
    return int(span.total_seconds())


def record_unbilled(ended: dict[int, datetime]) -> int:
    """Within the caller's transaction, after the rows' usage was closed: for each
    instance id in ``ended`` (→ the cloud's termination time), the time from its last
    usage end to then, when there is any, at that usage's rate. A second call for the
    same instance records nothing (one row per instance). Returns the rows offered. Three
    queries at any size."""
    if not ended:
        return 0
    last: dict[int, dict] = {}
    for usage in UsageRecord.objects.filter(instance_id__in=list(ended), end__isnull=False).values(
        "instance_id", "end", "rate", "currency", "exchange_rate"
    ):
        known = last.get(usage["instance_id"])
        if known is None or usage["end"] > known["end"]:
            last[usage["instance_id"]] = usage
    gaps = {pk: at for pk, at in ended.items() if pk in last and at > last[pk]["end"]}
    if not gaps:
        return 0
    rows = [
        UnbilledCloudTime(
            instance_id=pk,
            gpu_model_id=gpu_model_id,
            gpu_count=gpu_count,
            market=market,
            start=last[pk]["end"],
            end=gaps[pk],
            gpu_seconds=gpu_count * whole_seconds(gaps[pk] - last[pk]["end"]),
            rate=last[pk]["rate"],
            currency=last[pk]["currency"],
            exchange_rate=last[pk]["exchange_rate"],
        )
        for pk, gpu_model_id, gpu_count, market in Instance.objects.filter(
            pk__in=list(gaps)
        ).values_list("pk", "reservation__gpu_model_id", "gpu_count", "market")
    ]
    return len(UnbilledCloudTime.objects.bulk_create(rows, ignore_conflicts=True))
