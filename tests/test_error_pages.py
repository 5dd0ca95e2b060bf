"""Error answers: JSON on the API, a page in the site's layout otherwise, with DEBUG on (the
development platform) as with it off (the customer box); nothing changed by any of them."""

from __future__ import annotations

import pytest
from django.test import Client, override_settings
from django.urls import path

from apps.documents.models import Document
from apps.error_pages import wants_html
from config.urls import urlpatterns as project_urls

pytestmark = pytest.mark.django_db

PAGE = {"HTTP_ACCEPT": "text/html,application/xhtml+xml"}


def boom(request):  # type: ignore[no-untyped-def]
    raise RuntimeError("a bug")


urlpatterns = [path("boom/", boom), path("api/boom/", boom), *project_urls]
handler500 = "apps.error_pages.server_error"


@pytest.fixture
def user_client(client: Client, django_user_model) -> Client:
    client.force_login(django_user_model.objects.create_user(username="u", password="pw-u-12345"))
    return client


def test_which_answer_a_client_gets():
    assert wants_html("/documents/", "text/html,*/*")
    assert not wants_html("/api/documents/", "text/html")  # the API is JSON, always
    assert not wants_html("/documents/", "*/*")  # curl, scripts


@pytest.mark.parametrize("debug", [True, False])
def test_not_found_is_a_page_or_json_whatever_debug_says(user_client: Client, debug: bool):
    with override_settings(DEBUG=debug):
        page = user_client.get("/no-such-page/", **PAGE)
        api = user_client.get("/api/no-such-thing/", **PAGE)
        document = user_client.get("/documents/987654/", **PAGE)
    assert page.status_code == 404 and page["Content-Type"].startswith("text/html")
    text = page.content.decode()
    assert "Not found" in text and "There is nothing at /no-such-page/." in text
    assert "<header>" in text and "Documents" in text  # the site's layout, the user's menu
    assert "URLconf" not in text  # never Django's technical page
    assert api.status_code == 404
    assert api.json() == {"error": "There is nothing at /api/no-such-thing/."}
    assert document.status_code == 404 and "No such document." in document.content.decode()


def test_a_missing_slash_still_redirects(user_client: Client):
    response = user_client.get("/documents", **PAGE)
    assert response.status_code == 301 and response["Location"] == "/documents/"


@pytest.mark.parametrize("debug", [True, False])
def test_a_refused_csrf_check_is_a_page_or_json(client: Client, debug: bool):
    csrf_client = Client(enforce_csrf_checks=True)
    with override_settings(DEBUG=debug):
        page = csrf_client.post("/documents/", {"text": "x"}, **PAGE)
        api = csrf_client.post("/api/documents/", {"text": "x"}, content_type="application/json")
    assert page.status_code == 403 and "security token" in page.content.decode()
    assert "Back to what you typed" in page.content.decode()
    assert api.status_code == 403
    assert api.json()["error"].startswith("CSRF check failed (CSRF cookie not set.)")
    assert Document.objects.count() == 0


def test_a_method_not_allowed_says_so(user_client: Client):
    page = user_client.delete("/documents/", **PAGE)
    api = user_client.delete("/api/documents/")
    assert page.status_code == 405 and "DELETE is not accepted here." in page.content.decode()
    assert "GET" in page["Allow"]
    assert api.status_code == 405 and api.json() == {"error": "DELETE is not accepted here."}


@override_settings(ROOT_URLCONF="tests.test_error_pages", DEBUG=False)
def test_a_server_error_is_a_page_without_the_request_or_json():
    client = Client(raise_request_exception=False)
    page = client.get("/boom/", **PAGE)
    api = client.get("/api/boom/")
    assert page.status_code == 500 and "Server error" in page.content.decode()
    assert "a bug" not in page.content.decode() and "Traceback" not in page.content.decode()
    assert api.status_code == 500 and "went wrong on the server" in api.json()["error"]


@override_settings(ROOT_URLCONF="tests.test_error_pages", DEBUG=True)
def test_under_debug_the_api_still_answers_json_and_a_page_keeps_the_traceback():
    client = Client(raise_request_exception=False)
    api = client.get("/api/boom/")
    assert api.status_code == 500 and api["Content-Type"] == "application/json"
    page = client.get("/boom/", **PAGE)
    assert page.status_code == 500 and "RuntimeError" in page.content.decode()
