"""The session engine (apps/session_store.py) answers as Django's database engine does.

Each case is run against both: the platform's ``SessionStore`` and
``django.contrib.sessions.backends.db.SessionStore``, on the test run's database (SQLite in
the first pass, PostgreSQL in the second). A live session loads the same data; a key no live
row answers (unknown, expired, deleted) loads empty and is forgotten, so what is stored next
goes under a new key, never the client's; tampered data loads empty.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.contrib.auth import SESSION_KEY
from django.contrib.sessions.backends import db as django_db
from django.contrib.sessions.models import Session
from django.test import Client
from django.utils import timezone

from apps import session_store

pytestmark = pytest.mark.django_db

ENGINES = [session_store.SessionStore, django_db.SessionStore]


def stored(data: dict) -> str:
    store = django_db.SessionStore()
    store.update(data)
    store.save()
    return store.session_key


def test_the_platform_uses_it() -> None:
    assert settings.SESSION_ENGINE == "apps.session_store"


@pytest.mark.parametrize("engine", ENGINES)
def test_a_live_session_loads_its_data(engine) -> None:
    key = stored({"a": 1, "text": "\u00e9\u4e2d\U0001f600"})
    store = engine(key)
    assert dict(store.items()) == {"a": 1, "text": "\u00e9\u4e2d\U0001f600"}
    assert store.session_key == key


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("case", ["unknown", "expired", "deleted", "tampered"])
def test_a_key_no_live_row_answers_loads_empty_and_is_not_reused(engine, case) -> None:
    key = stored({"a": 1})
    if case == "unknown":
        key = "k" * 32
    elif case == "expired":
        Session.objects.filter(pk=key).update(expire_date=timezone.now() - timedelta(seconds=1))
    elif case == "deleted":
        Session.objects.filter(pk=key).delete()
    elif case == "tampered":
        Session.objects.filter(pk=key).update(session_data="not-signed:data")
    store = engine(key)
    assert dict(store.items()) == {}
    store["b"] = 2
    store.save()
    if case == "tampered":  # the row is live: Django keeps its key and stores over the data
        assert store.session_key == key
    else:
        assert store.session_key != key  # a new key: a client's chosen one is never saved
        # Nothing written under the old key (an expired row waits for clearsessions).
        assert Session.objects.filter(pk=key).exists() == (case == "expired")
    assert engine(store.session_key)["b"] == 2


@pytest.mark.parametrize("engine", ENGINES)
def test_no_key_is_an_empty_session(engine) -> None:
    store = engine(None)
    assert dict(store.items()) == {} and store.session_key is None


def test_a_logged_in_request_is_answered_through_it(django_user_model) -> None:
    user = django_user_model.objects.create_user(username="s", password="pw-session-123")
    client = Client()
    client.force_login(user)
    key = client.cookies[settings.SESSION_COOKIE_NAME].value
    assert session_store.SessionStore(key)[SESSION_KEY] == str(user.pk)
    assert client.get("/api/documents/").status_code == 200
    Session.objects.filter(pk=key).update(expire_date=timezone.now() - timedelta(seconds=1))
    assert client.get("/api/documents/").status_code == 401
