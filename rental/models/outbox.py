"""Work for Celery kept in the database until the broker has taken it (the outbox).

``rental.jobs`` writes one row per message in the transaction of the change that asks
for it and publishes the rows after that commits; while the broker cannot be reached
they wait here, in order, for the outbox sweep.
"""

from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class OutboxMessage(models.Model):
    """One task to send by name with its arguments. ``not_before`` is the task's eta (a
    countdown is written as the moment it ends). ``retries``: how many times the task has
    been tried before (a retry is sent through the outbox too). ``sent_at`` is set in the
    transaction that publishes it; an unsent row is pending."""

    task = models.CharField(_("task"), max_length=200)
    args = models.JSONField(_("arguments"), default=list, blank=True)
    not_before = models.DateTimeField(_("not before"), null=True, blank=True)
    retries = models.PositiveIntegerField(_("retries"), default=0)
    created = models.DateTimeField(_("created"), default=timezone.now)
    sent_at = models.DateTimeField(_("sent at"), null=True, blank=True)

    class Meta:
        ordering = ["id"]
        verbose_name = _("outbox message")
        verbose_name_plural = _("outbox messages")
        indexes = [
            # The pending rows, oldest first: what every sender reads.
            models.Index(
                fields=["id"], condition=Q(sent_at__isnull=True), name="rental_outbox_pending"
            ),
            # The sent rows by age: what pruning deletes.
            models.Index(
                fields=["sent_at"], condition=Q(sent_at__isnull=False), name="rental_outbox_sent"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.task}{tuple(self.args)}"
