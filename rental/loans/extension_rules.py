"""Extension rules: what an extension needs, over plain numbers (R1, auto-approve limits)."""

from dataclasses import dataclass


@dataclass(frozen=True)
class ExtensionVerdict:
    outcome: str  # "ok" | "approval" | "too_long"
    total_hours: float


def judge_extension(
    *, length_hours: float, added_hours: float, max_lease_hours: int, max_auto_hours: int | None
) -> ExtensionVerdict:
    """The lease's new length must stay within the maximum lease (else refused); beyond
    the quota's auto-approve hours a manager decides."""
    total = length_hours + added_hours
    if total > max_lease_hours:
        return ExtensionVerdict("too_long", total)
    if max_auto_hours is not None and total > max_auto_hours:
        return ExtensionVerdict("approval", total)
    return ExtensionVerdict("ok", total)
