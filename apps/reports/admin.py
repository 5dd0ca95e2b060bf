from django.contrib import admin

from .models import JobRun, UsageRollup


@admin.register(JobRun)
class JobRunAdmin(admin.ModelAdmin):
    list_display = ("job", "kind", "slot", "covers_from", "outcome", "worker", "started_at",
                    "finished_at", "duplicates", "fired_by")
    list_filter = ("job", "kind", "outcome")
    date_hierarchy = "slot"
    # Run records are evidence: read-only here, written only by the runs themselves.
    readonly_fields = [f.name for f in JobRun._meta.fields]

    def has_add_permission(self, request) -> bool:  # type: ignore[no-untyped-def]
        return False


@admin.register(UsageRollup)
class UsageRollupAdmin(admin.ModelAdmin):
    list_display = ("user", "period_start", "period_seconds", "documents", "words",
                    "computed_at")
    list_filter = ("period_seconds",)
    readonly_fields = ("user", "period_start", "period_seconds", "documents", "words",
                       "computed_at")
