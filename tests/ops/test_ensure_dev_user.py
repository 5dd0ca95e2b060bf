"""The development login is created once; a restart never changes it (no save: sessions,
a changed password and changed flags all survive, and nothing is published)."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

pytestmark = pytest.mark.django_db

PASSWORD = "first-password-123"


@pytest.fixture(autouse=True)
def dev_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEV_USER_PASSWORD", PASSWORD)


@override_settings(DEBUG=True)
def test_created_once_then_left_exactly_as_it_is(django_user_model, capsys):
    call_command("ensure_dev_user", username="dev")
    assert "created development user 'dev'" in capsys.readouterr().out
    user = django_user_model.objects.get(username="dev")
    assert user.is_superuser and user.check_password(PASSWORD)

    user.set_password("changed-in-the-admin-1")
    user.is_staff = False
    user.save()
    before = django_user_model.objects.values().get(username="dev")
    call_command("ensure_dev_user", username="dev")
    assert django_user_model.objects.values().get(username="dev") == before  # not even saved
    out = capsys.readouterr().out
    assert "kept as it was: its password was changed since var/dev.env was written" in out


@override_settings(DEBUG=True)
def test_a_restart_with_the_same_password_says_kept(django_user_model, capsys):
    call_command("ensure_dev_user", username="dev")
    call_command("ensure_dev_user", username="dev")
    assert capsys.readouterr().out.splitlines()[-1] == "development user 'dev' kept as it was"


@override_settings(DEBUG=False)
def test_refused_outside_development():
    with pytest.raises(CommandError, match="development only"):
        call_command("ensure_dev_user", username="dev")
