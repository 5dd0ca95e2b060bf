from django.contrib import admin

from .models import Document, DocumentFact, DocumentRun


class DocumentRunInline(admin.TabularInline):
    model = DocumentRun
    extra = 0
    can_delete = False
    readonly_fields = ("task_id", "worker", "pid", "redelivered", "started_at", "finished_at",
                       "outcome", "detail")


class DocumentFactInline(admin.TabularInline):
    model = DocumentFact
    extra = 0
    can_delete = False
    readonly_fields = ("kind", "value")


@admin.register(Document)
class DocumentAdmin(admin.ModelAdmin):
    list_display = ("id", "title", "owner", "state", "starts", "processed_by", "created_at",
                    "finished_at")
    list_filter = ("state", "source")
    search_fields = ("title",)
    readonly_fields = ("claim_token", "starts", "processed_by", "created_at", "updated_at",
                       "finished_at")
    inlines = (DocumentRunInline, DocumentFactInline)
