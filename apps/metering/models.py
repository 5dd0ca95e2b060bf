"""One row per user and UTC day: how many metered calls were accepted."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class UsageCounter(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="usage_counters")
    day = models.DateField()  # UTC
    count = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "day"], name="metering_one_counter_per_day"),
        ]
        indexes = [models.Index(fields=["day"], name="metering_day")]

    def __str__(self) -> str:
        return f"{self.user_id} {self.day}: {self.count}"
