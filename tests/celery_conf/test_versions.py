"""A library release nobody verified gets a clear refusal at start-up, never a silent loss."""

from __future__ import annotations

import subprocess
import sys

import pytest

from celery_conf.versions import VERIFIED, UntestedRelease, versions_check
from tests.procs import ROOT

LOCKED = {"celery": "5.7.0", "kombu": "5.7.0", "celery-redbeat": "2.4.2", "redis": "8.1.0",
          "django": "5.2.19", "flower": "2.2.0", "uvicorn": "0.54.0"}


def test_the_locked_releases_are_verified():
    assert set(LOCKED) == set(VERIFIED)
    assert versions_check(installed=LOCKED.get) == []
    assert versions_check() == []  # what this venv holds


@pytest.mark.parametrize(("package", "release"), [
    ("celery", "5.8.0"), ("kombu", "6.0.0"), ("celery-redbeat", "2.5.0"), ("django", "6.0"),
    ("redis", "9.0.0"), ("flower", "3.0.0"), ("celery", "5.5.3"), ("kombu", "not-a-version")])
def test_a_release_outside_its_range_is_refused_naming_it(package: str, release: str):
    installed = {**LOCKED, package: release}
    with pytest.raises(UntestedRelease) as refused:
        versions_check(installed=installed.get)
    assert f"{package} {release}" in str(refused.value)
    assert VERIFIED[package] in str(refused.value)


def test_a_missing_package_is_refused():
    installed = {k: v for k, v in LOCKED.items() if k != "flower"}
    with pytest.raises(UntestedRelease, match="flower is not installed"):
        versions_check(installed=installed.get)


def test_the_operator_may_accept_one_exact_release():
    installed = {**LOCKED, "celery": "5.8.0"}
    assert versions_check(accept=["celery==5.8.0"], installed=installed.get) == [
        "celery==5.8.0"]
    with pytest.raises(UntestedRelease):  # another release than the one accepted
        versions_check(accept=["celery==5.8.1"], installed=installed.get)
    with pytest.raises(UntestedRelease, match="name==version"):
        versions_check(accept=["celery>=5.8"], installed=installed.get)
    # Another separator than the comma: read as one release "5.8.0;kombu==5.8.0" and
    # refused as "outside the releases", as if the release had not been named.
    for item in ("celery==5.8.0;kombu==5.8.0", "celery==5.8.0 kombu==5.8.0",
                 "celery===5.8.0"):
        with pytest.raises(UntestedRelease, match="name==version"):
            versions_check(accept=[item], installed=installed.get)


def test_every_process_refuses_at_start_up_with_the_reason():
    # A real start-up, with an acceptance list that is malformed: the settings refuse to load.
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, capture_output=True, text=True,
        timeout=60, env={"PATH": "/usr/bin:/bin", "PLATFORM_ACCEPT_UNTESTED": "celery",
                         "DJANGO_SETTINGS_MODULE": "config.settings.development"})
    assert result.returncode != 0
    assert "PLATFORM_ACCEPT_UNTESTED takes name==version items" in result.stderr


@pytest.mark.parametrize("item", ["celery == 5.8.0", "Celery==5.8", "celery==5.8.0.0",
                                  "celery==5.8.0rc1"])
def test_an_acceptance_matches_the_release_as_pep_440_compares_it(item: str):
    # Spaces around ==, a shorter spelling of the same release: the operator named it, so it
    # is accepted (it was refused with "name the exact release", which they had done).
    installed = {**LOCKED, "celery": "5.8.0rc1" if "rc" in item else "5.8.0"}
    assert versions_check(accept=[item], installed=installed.get) == [
        f"celery=={installed['celery']}"]


def test_an_acceptance_naming_no_checked_package_is_refused_naming_it():
    # A typo accepted nothing and the refusal blamed the release instead of the typo.
    with pytest.raises(UntestedRelease, match="'celey' is not one of the packages"):
        versions_check(accept=["celey==5.8.0"], installed={**LOCKED, "celery": "5.8.0"}.get)
