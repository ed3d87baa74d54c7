"""Explain for the lines that share a pool's committed cost (B4, B5): a project's share of
the commitment, the residual shared by burst usage, and the platform's own overhead line,
each in sentences with the figures it was split by."""

from decimal import Decimal
from typing import Any

from django.utils.translation import gettext as _

from billing.explain_parts import (
    Context,
    Explanation,
    gpu_seconds_of,
    money_ref,
    refs_of,
    say,
    span_of,
)
from billing.linewords import (
    hours_of,
    percent,
)
from portal.templatetags.portal_tags import money, rate

# Shares of a pool's committed cost.


def committed_share(line: Any, context: Context, result: Explanation) -> None:
    refs = refs_of(line)
    g, k, sum_g = int(refs.get("G") or 0), int(refs.get("K") or 0), int(refs.get("sum_G") or 0)
    fixed = money_ref(refs, "F")
    by_project = refs.get("mode") == "by_project"
    if by_project:
        result.sentences.append(
            say(
                _(
                    "This project's share of the %(model)s pool's committed capacity, split by "
                    "guarantees: the projects' guarantees add up to %(sum_g)s GPUs, and this "
                    "project is guaranteed %(g)s of them."
                ),
                model=context.model,
                sum_g=sum_g,
                g=g,
            )
        )
    else:
        result.sentences.append(
            say(
                _(
                    "This project's share of the %(model)s pool's committed capacity: the pool "
                    "has %(k)s committed GPUs, and this project is guaranteed %(g)s of them."
                ),
                model=context.model,
                k=k,
                g=g,
            )
        )
    result.sentences.append(
        say(
            _("The committed GPUs cost %(fixed)s %(span)s, whether they are used or not."),
            fixed=fixed,
            span=span_of(context, refs),
        )
    )
    pool = context.view.pools.get(line.gpu_model_id or 0) or {}
    if pool.get("month_total") and pool.get("covered_seconds") != pool.get("month_seconds"):
        result.sentences.append(
            say(
                _(
                    "That is the month's %(month_total)s prorated per second to the %(elapsed)s "
                    "hours elapsed of its %(hours)s."
                ),
                month_total=money_ref(pool, "month_total"),
                elapsed=hours_of(int(pool.get("covered_seconds") or 0)),
                hours=hours_of(int(pool.get("month_seconds") or 0)),
            )
        )
    if pool.get("amortized") and Decimal(str(pool["amortized"])) > 0:
        result.sentences.append(
            say(
                _(
                    "The month's cost is %(monthly)s a month plus %(amortized)s of upfront "
                    "payments spread over their term."
                ),
                monthly=money_ref(pool, "monthly"),
                amortized=money_ref(pool, "amortized"),
            )
        )
    if pool.get("own_hardware") and Decimal(str(pool["own_hardware"])) > 0:
        result.sentences.append(
            say(
                _(
                    "It includes %(own)s of the own servers' purchase price, written off "
                    "over their months of amortisation."
                ),
                own=money_ref(pool, "own_hardware"),
            )
        )
    divisor = sum_g if by_project else k
    result.sentences.append(
        say(
            _(
                "This project pays %(fixed)s × %(g)s / %(divisor)s = %(amount)s (%(percent)s %% "
                "of the committed cost)."
            ),
            fixed=fixed,
            g=g,
            divisor=divisor,
            amount=money(line.amount),
            percent=percent(g, divisor),
        )
    )
    seconds = gpu_seconds_of(line)
    if g and seconds:
        result.sentences.append(
            say(
                _(
                    "Its %(gpu_hours)s GPU-hours are the %(g)s guaranteed GPUs × %(hours)s "
                    "hours, so a guaranteed GPU-hour cost %(unit)s."
                ),
                gpu_hours=hours_of(seconds),
                g=g,
                hours=hours_of(seconds // g),
                unit=rate(line.unit_price),
            )
        )
    result.sentences.append(
        say(
            _("Shares are rounded to the cent so that together they add up to %(fixed)s."),
            fixed=fixed,
        )
    )


def platform(line: Any, context: Context, result: Explanation) -> None:
    refs = refs_of(line)
    why = refs.get("why")
    values = {
        "model": context.model,
        "span": span_of(context, refs),
        "residual": money_ref(refs, "R") if "R" in refs else money(line.amount),
        "fixed": money_ref(refs, "F"),
        "pot": money_ref(refs, "pot") if "pot" in refs else money(line.amount),
        "hours": hours_of(int(refs.get("gpu_seconds") or 0)),
        "instances": refs.get("instances", 0),
    }
    messages = {
        "policy": _(
            "No project pays this part of the %(model)s pool's committed cost: by site "
            "policy, the commitment no guarantee covers (%(residual)s %(span)s) is the "
            "platform's overhead."
        ),
        "no_burst": _(
            "The commitment no guarantee covers (%(residual)s) is shared by burst use, but no "
            "project ran burst usage on the %(model)s pool %(span)s, so the platform carries "
            "it."
        ),
        "no_guarantee": _(
            "No project has a guarantee in the %(model)s pool, so its committed cost, "
            "%(fixed)s %(span)s, is the platform's overhead."
        ),
        "no_usage": _(
            "Nobody used the %(model)s pool %(span)s, so its cost, %(pot)s, has no usage to "
            "be split over and is the platform's overhead."
        ),
        "unbilled": _(
            "Instances of the %(model)s pool ran %(hours)s GPU-hours in the cloud %(span)s "
            "after their billing had stopped (between a lease's end and the cloud's own "
            "termination time, %(instances)s instances). The cloud charges it and no project "
            "does, so the platform carries %(pot)s."
        ),
    }
    message = messages.get(
        why,
        _("No project pays this part of the %(model)s pool's cost: it is the platform's overhead."),
    )
    result.sentences.append(say(message, **values))


def shared_residual(line: Any, context: Context, result: Explanation) -> None:
    refs = refs_of(line)
    if "burst_gpu_seconds" not in refs:
        platform(line, context, result)
        return
    k, sum_g = int(refs.get("K") or 0), int(refs.get("sum_G") or 0)
    fixed, residual = money_ref(refs, "F"), money_ref(refs, "R")
    if k:
        result.sentences.append(
            say(
                _(
                    "The %(model)s pool has %(k)s committed GPUs costing %(fixed)s %(span)s, but "
                    "the projects' guarantees cover only %(sum_g)s of them. The unassigned "
                    "part, %(fixed)s × (%(k)s − %(sum_g)s) / %(k)s = %(residual)s, is shared by "
                    "burst use."
                ),
                model=context.model,
                k=k,
                fixed=fixed,
                span=span_of(context, refs),
                sum_g=sum_g,
                residual=residual,
            )
        )
    else:
        result.sentences.append(
            say(
                _(
                    "The %(model)s pool has a committed cost of %(fixed)s %(span)s but no "
                    "committed GPUs to guarantee, so the whole of it is shared by burst use."
                ),
                model=context.model,
                fixed=fixed,
                span=span_of(context, refs),
            )
        )
    mine, total = int(refs["burst_gpu_seconds"]), int(refs.get("total_burst_gpu_seconds") or 0)
    result.sentences.append(
        say(
            _(
                "This project ran %(mine)s of the %(all)s burst GPU-hours on the pool "
                "(%(percent)s %%), so it pays %(amount)s of the %(residual)s."
            ),
            mine=hours_of(mine),
            all=hours_of(total),
            percent=percent(mine, total),
            amount=money(line.amount),
            residual=residual,
        )
    )
    result.sentences.append(
        say(
            _("Shares are rounded to the cent so that together they add up to %(fixed)s."),
            fixed=residual,
        )
    )
