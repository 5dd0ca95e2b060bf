"""The documents pages render their state, facts and runs for the owner only."""

from __future__ import annotations

import pytest
from django.test import Client

from apps.documents.models import Document, DocumentFact, DocumentRun

pytestmark = pytest.mark.django_db


def test_list_and_detail_pages_show_state_facts_and_runs(client: Client, django_user_model):
    owner = django_user_model.objects.create_user(username="o", password="pw-owner-123")
    doc = Document.objects.create(owner=owner, title="Quarterly", source="paste", content="x",
                                  size_bytes=1, state="done", summary="All good.", word_count=2)
    DocumentFact.objects.create(document=doc, kind="email", value="a@example.com")
    DocumentRun.objects.create(document=doc, task_id="t", worker="w1@h", pid=7, outcome="done")
    client.force_login(owner)
    listing = client.get("/documents/").content.decode()
    assert "Quarterly" in listing and "state-done" in listing
    detail = client.get(f"/documents/{doc.pk}/").content.decode()
    assert "All good." in detail and "a@example.com" in detail and "w1@h (pid 7)" in detail


def test_form_errors_are_shown_with_their_status(client: Client, django_user_model):
    client.force_login(django_user_model.objects.create_user(username="o", password="pw-o-1234"))
    response = client.post("/documents/", {"text": "   "})
    assert response.status_code == 400
    assert "The document is empty." in response.content.decode()
    assert Document.objects.count() == 0


def test_a_refused_form_keeps_what_was_typed_and_states_sizes_in_its_units(
        client: Client, django_user_model):
    client.force_login(django_user_model.objects.create_user(username="o", password="pw-o-1234"))
    form = client.get("/documents/").content.decode()
    assert "up to 1 MiB" in form and "1.0 MB" not in form
    response = client.post("/documents/", {"title": "x" * 201, "text": "Kept <text> & all"})
    page = response.content.decode()
    assert response.status_code == 400 and "longer than 200 characters" in page
    assert f'value="{"x" * 201}"' in page
    assert "Kept &lt;text&gt; &amp; all</textarea>" in page
    assert Document.objects.count() == 0


def test_the_daily_limit_page_shows_what_was_sent(client: Client, django_user_model, settings):
    settings.METERING_DAILY_LIMIT = 0
    client.force_login(django_user_model.objects.create_user(username="o", password="pw-o-1234"))
    response = client.post("/documents/", {"title": "Mine", "text": "Please keep me"})
    page = response.content.decode()
    assert response.status_code == 429 and "Daily limit reached" in page
    assert 'value="Mine"' in page and "Please keep me</textarea>" in page
    assert Document.objects.count() == 0

