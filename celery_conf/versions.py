"""The releases of the libraries the guarantees rest on that this platform was verified on.

Every process checks at start-up (config/settings/base.py calls ``versions_check`` while the
settings load: web, workers, beats, Flower, ``manage.py``) and refuses to start on a release
outside these ranges, naming the package, the release found and the range verified
(adr/0032). The ranges are what the compatibility legs in CI run (``bash platform/compat``):
the locked set, the newest releases, and the previous minor of Celery and kombu. Within a
range the platform uses only public, documented APIs (tests/public_ground.py), so a patch
release is trusted; a new minor or major is not until a leg has run on it.

An operator who must run a release outside a range (a security fix, before the platform is
re-released) names it exactly in ``PLATFORM_ACCEPT_UNTESTED`` (``celery==5.8.0,kombu==5.8.0``):
the process then starts and logs a warning with what it accepted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from importlib.metadata import PackageNotFoundError, version

from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

logger = logging.getLogger(__name__)

# Package -> the releases verified. Widen a range only with a compatibility leg that ran on
# the new release (platform/compat) and passed.
VERIFIED: dict[str, str] = {
    # acks_late, reject on worker lost, soft shutdown, custom headers kept across retries,
    # worker_shutdown after the pool has finished (the heartbeat's end).
    "celery": ">=5.6.0,<5.8",
    # The Redis transport's documented options: visibility_timeout, unacked_restore_*,
    # priority_steps and sep (a queue as one list per step, step 0
    # served first), unacked_key; JSON envelopes with the Celery headers.
    "kombu": ">=5.6.0,<5.8",
    # The lock and schedule keys and their JSON; 2.5 changes how the Redis URL is configured.
    "celery-redbeat": ">=2.4.1,<2.5",
    "redis": ">=8.0,<9",
    "django": ">=5.2,<5.3",
    # Started with --enable_events=False; viewers seen in Tornado's access log (adr/0036).
    "flower": ">=2.0,<3",
    "uvicorn": ">=0.54,<1",
}


class UntestedRelease(RuntimeError):
    """A library release outside the ranges the platform was verified on."""


def _installed(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def _same_release(accepted: str | None, found: str) -> bool:
    """``==`` as PEP 440 compares (5.8 is 5.8.0); the exact text for what is not a version."""
    if accepted is None:
        return False
    try:
        return Version(accepted) == Version(found)
    except InvalidVersion:
        return accepted == found


def versions_check(*, accept: Iterable[str] = (),
                   installed: Callable[[str], str | None] = _installed) -> list[str]:
    """Raise UntestedRelease for any package outside its verified range unless ``accept``
    names its exact release (``name==version``); returns the accepted ones."""
    accepted: dict[str, str] = {}
    for item in accept:
        name, sep, release = item.strip().partition("==")
        release = release.strip()
        # One release, nothing after it (a ";" or a space for the comma between items).
        if not sep or not name.strip() or not release or any(
                c in release for c in "=;, \t"):
            raise UntestedRelease(
                f"PLATFORM_ACCEPT_UNTESTED takes name==version items, got {item!r}")
        name = canonicalize_name(name.strip())
        if name not in {canonicalize_name(package) for package in VERIFIED}:
            raise UntestedRelease(
                f"PLATFORM_ACCEPT_UNTESTED: {name!r} is not one of the packages the platform "
                f"checks ({', '.join(VERIFIED)})")
        accepted[name] = release
    problems: list[str] = []
    waived: list[str] = []
    for package, verified in VERIFIED.items():
        found = installed(package)
        if found is None:
            problems.append(f"{package} is not installed (verified: {verified})")
            continue
        try:
            ok = Version(found) in SpecifierSet(verified)
        except InvalidVersion:
            ok = False
        if ok:
            continue
        if _same_release(accepted.get(canonicalize_name(package)), found):
            waived.append(f"{package}=={found}")
            continue
        problems.append(f"{package} {found} is outside the releases this platform was "
                        f"verified on ({verified})")
    if problems:
        raise UntestedRelease(
            "refusing to start: " + "; ".join(problems) + ". Install the locked releases "
            "(requirements-runtime.lock), or, knowing the risk, name the exact releases in "
            "PLATFORM_ACCEPT_UNTESTED (adr/0032).")
    if waived:
        logger.warning("running on releases nobody verified, accepted by "
                       "PLATFORM_ACCEPT_UNTESTED: %s", ", ".join(waived))
    return waived
