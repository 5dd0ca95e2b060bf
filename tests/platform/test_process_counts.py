"""No process type is limited to one copy by the process definitions, except the beat, whose
lock election is the point: web and Celery workers default to two and scale by a variable."""

from __future__ import annotations

import configparser
import re

from tests.procs import ROOT

CONF = ROOT / "platform" / "supervisord.conf"
LIB = ROOT / "platform" / "lib.sh"
# Processes that are one copy by design: the one shared service, the supervisor's UI.
SINGLE_BY_DESIGN = {"redis", "flower"}


def programs() -> dict[str, configparser.SectionProxy]:
    parser = configparser.RawConfigParser(inline_comment_prefixes=(";",))
    parser.read(CONF)
    return {s.split(":", 1)[1]: parser[s] for s in parser.sections() if s.startswith("program:")}


def default_of(variable: str) -> int:
    match = re.search(rf'export {variable}="\$\{{{variable}:-(\d+)\}}"', LIB.read_text())
    assert match, f"platform/lib.sh gives {variable} no numeric default"
    return int(match.group(1))


def copies(program: configparser.SectionProxy) -> int:
    """How many processes doing this program's work platform/up starts by default."""
    numprocs = program.get("numprocs", "1")
    if (env := re.fullmatch(r"%\(ENV_(\w+)\)s", numprocs)) is not None:
        return default_of(env.group(1))
    workers = re.search(r"--workers (\S+)", program["command"])
    if workers is not None:  # one uvicorn parent with N worker processes
        env = re.fullmatch(r"%\(ENV_(\w+)\)s", workers.group(1))
        return default_of(env.group(1)) if env else int(workers.group(1))
    return int(numprocs)


def test_every_process_type_but_the_shared_service_runs_at_least_two_copies():
    found = programs()
    assert {"web", "worker", "beat"} <= set(found)
    single = {name for name, program in found.items() if copies(program) < 2}
    assert single <= SINGLE_BY_DESIGN, f"limited to one copy: {sorted(single - SINGLE_BY_DESIGN)}"


def test_copies_scale_by_variable_and_cannot_collide():
    found = programs()
    assert "--workers %(ENV_WEB_WORKERS)s" in found["web"]["command"]
    assert found["worker"]["numprocs"] == "%(ENV_CELERY_WORKERS)s"
    # Each Celery worker needs its own node name, or a second copy clashes with the first.
    assert "-n worker%(process_num)d@" in found["worker"]["command"]
    assert "%(process_num)d" in found["worker"]["process_name"]
    # Two beats, one elected by the RedBeat lock: the only deliberate "exactly one".
    assert found["beat"]["numprocs"] == "2"
    assert "RedBeatScheduler" in found["beat"]["command"]
