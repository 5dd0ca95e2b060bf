"""The locks (adr/0029) agree with requirements.txt and with what is installed.

requirements.txt is the list people edit; ``bash platform/lock`` turns it into
requirements.lock (development and tests) and requirements-runtime.lock (the release), every
package pinned with its hashes. These tests fail when someone edits one without the other, and
when the virtual environment running the suite holds anything the lock does not say.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.procs import ROOT

REQUIREMENTS = ROOT / "requirements.txt"
LOCK = ROOT / "requirements.lock"
RUNTIME_LOCK = ROOT / "requirements-runtime.lock"
PREVIOUS_LOCK = ROOT / "requirements-compat-previous.lock"
PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;\\]+)"
                 r"(?:\s*;\s*(?P<marker>[^\\]+?))?\s*\\?$")
HASH = re.compile(r"^\s+--hash=sha256:[0-9a-f]{64}\s*\\?$")


@dataclass
class Locked:
    version: str
    marker: str | None
    hashes: int = 0
    lines: list[str] = field(default_factory=list)

    def applies(self) -> bool:
        return self.marker is None or Marker(self.marker).evaluate()


def parse_lock(path: Path) -> dict[str, list[Locked]]:
    """Package name -> its entries (one per marker fork: numpy differs by Python version)."""
    entries: dict[str, list[Locked]] = {}
    current: Locked | None = None
    for line in path.read_text().splitlines():
        if not line or line.lstrip().startswith("#"):
            continue
        if match := PIN.match(line):
            current = Locked(match["version"], match["marker"])
            entries.setdefault(canonicalize_name(match["name"]), []).append(current)
        elif HASH.match(line):
            assert current is not None, f"{path.name}: a hash before any package: {line!r}"
            current.hashes += 1
        else:
            raise AssertionError(f"{path.name}: a line that is neither a pin nor a hash: {line!r}")
    return entries


def direct_pins(text: str) -> dict[str, str]:
    pins = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            requirement = Requirement(line)
            specs = list(requirement.specifier)
            assert len(specs) == 1 and specs[0].operator == "==", f"not pinned: {line!r}"
            pins[canonicalize_name(requirement.name)] = specs[0].version
    return pins


def runtime_section() -> str:
    return REQUIREMENTS.read_text().split("\n# tests", 1)[0]


def test_each_lock_was_made_from_this_requirements_txt():
    want = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    for lock in (LOCK, RUNTIME_LOCK, PREVIOUS_LOCK):
        recorded = lock.read_text().splitlines()[1]
        assert recorded == f"# requirements.txt sha256 {want}", (
            f"{lock.name} is stale: run bash platform/lock and commit it with requirements.txt")


def test_every_locked_package_is_pinned_and_hashed():
    for lock in (LOCK, RUNTIME_LOCK, PREVIOUS_LOCK):
        entries = parse_lock(lock)
        assert entries, lock.name
        for name, forks in entries.items():
            for entry in forks:
                assert entry.hashes >= 1, f"{lock.name}: {name}=={entry.version} has no hash"


def test_every_direct_pin_is_locked_at_its_version():
    locked = parse_lock(LOCK)
    runtime = parse_lock(RUNTIME_LOCK)
    for name, version in direct_pins(REQUIREMENTS.read_text()).items():
        assert version in {e.version for e in locked.get(name, [])}, (name, version)
    for name, version in direct_pins(runtime_section()).items():
        assert version in {e.version for e in runtime.get(name, [])}, (name, version)


def test_the_release_lock_is_the_development_lock_cut_to_the_runtime():
    locked = parse_lock(LOCK)
    for name, forks in parse_lock(RUNTIME_LOCK).items():
        for entry in forks:
            assert (entry.version, entry.marker) in {(e.version, e.marker)
                                                     for e in locked.get(name, [])}, name
    # Nothing for the tests or benchmarks ships to a customer box.
    for name in direct_pins(REQUIREMENTS.read_text().split("\n# tests", 1)[1]):
        assert name not in parse_lock(RUNTIME_LOCK), f"{name} is a test dependency"


def test_the_suite_runs_on_exactly_the_lock():
    """Every distribution in this venv is locked at its version, and every locked package that
    applies to this Python and platform is installed: two installs give the same code."""
    locked = {name: [e for e in forks if e.applies()] for name, forks in parse_lock(LOCK).items()}
    locked = {name: forks[0].version for name, forks in locked.items() if forks}
    installed = {canonicalize_name(d.metadata["Name"]): d.version
                 for d in metadata.distributions()}
    # The venv's own installer, from the interpreter's bundled ensurepip (no download): pip,
    # and on Python 3.11 setuptools.
    for bundled in ("pip", "setuptools"):
        installed.pop(bundled, None)
    assert installed == locked, {
        "installed, not locked": sorted(set(installed) - set(locked)),
        "locked, not installed": sorted(set(locked) - set(installed)),
        "other version": sorted((n, installed[n], locked[n]) for n in set(installed) & set(locked)
                                if installed[n] != locked[n]),
    }


def test_the_previous_leg_differs_from_the_lock_by_celery_and_kombu_only():
    """platform/compat's "previous" leg: the previous minor of Celery and kombu, the rest as
    locked (COMPAT_PREVIOUS in platform/lib.sh names them)."""
    lib = (ROOT / "platform" / "lib.sh").read_text()
    wanted = dict(pin.split("==") for pin in re.findall(r'"([a-z\[\]]+==[0-9.]+)"',
                                                          lib.split("COMPAT_PREVIOUS=(", 1)[1]
                                                          .split(")", 1)[0]))
    wanted = {canonicalize_name(n.split("[")[0]): v for n, v in wanted.items()}
    assert set(wanted) == {"celery", "kombu"}
    previous = {n: {e.version for e in f} for n, f in parse_lock(PREVIOUS_LOCK).items()}
    assert all(previous[n] == {v} for n, v in wanted.items()), previous
    # Every other direct pin as locked (their own dependencies may differ: Celery 5.6 still
    # needs python-dateutil, for one).
    for name, version in direct_pins(REQUIREMENTS.read_text()).items():
        if name not in wanted:
            assert version in previous.get(name, set()), (name, version)
