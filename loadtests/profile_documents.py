"""Where a document's CPU goes: py-spy flame graphs of the web and Celery worker processes.

    python3 -m venv var/py-spy
    var/py-spy/bin/pip install --require-hashes -r loadtests/requirements-profile.txt
    .venv/bin/python loadtests/profile_documents.py [--docs 400] [--workers 2] [--name docs]

The path as loadtests/ceiling.py runs it (2 uvicorn workers, --workers Celery worker processes
-c 1, DOCUMENTS_PROCESSING_SECONDS=0, 4 clients), in ceiling.py's first two phases, so each
profile is one component's own work with nobody queueing on the database: the web workers
while --docs documents are submitted with the Celery workers SIGSTOPped, then the Celery
workers while they drain the queue alone. py-spy samples every process of each tree at
250 Hz, only threads holding the GIL (Python on a CPU, not waiting on a socket,
the disk or a lock), and writes loadtests/results/flame_<name>_{web,worker}.svg
plus the folded stacks (.txt), so a before/after pair can be compared by function.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.ceiling import ENV, SUBMITTERS, WEB_ARGS, WEB_WORKERS, submit_all  # noqa: E402
from loadtests.common import RESULTS, progress  # noqa: E402
from tests.procs import Client, Stack, make_template_db, wait_until  # noqa: E402

FINISHED_SQL = "SELECT COUNT(*) AS n FROM documents_document WHERE state IN ('done', 'failed')"
RATE_HZ = 250
# Its own venv (loadtests/requirements-profile.txt): the project's venv stays exactly the lock.
PY_SPY = Path(__file__).resolve().parents[1] / "var" / "py-spy" / "bin" / "py-spy"


def record(pid: int, out: Path, fmt: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [str(PY_SPY), "record", "--pid", str(pid), "--subprocesses", "--rate",
         str(RATE_HZ), "--gil", "--format", fmt, "--output", str(out), "--nonblocking"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def profile(pid: int, name: str) -> list[subprocess.Popen[bytes]]:
    return [record(pid, RESULTS / f"flame_{name}.{ext}", fmt)
            for fmt, ext in (("flamegraph", "svg"), ("raw", "txt"))]


def stop(spies: list[subprocess.Popen[bytes]]) -> None:
    for spy in spies:
        spy.send_signal(signal.SIGINT)
    for spy in spies:
        try:
            spy.wait(timeout=30)
        except subprocess.TimeoutExpired:
            spy.kill()
    spies.clear()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=400)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--name", default="docs")
    args = parser.parse_args()
    if not PY_SPY.exists():
        parser.error(f"no {PY_SPY}: install it as this file's docstring says (a venv of its own, "
                     "loadtests/requirements-profile.txt)")
    work = Path(tempfile.mkdtemp(prefix="profile-"))
    stack = Stack(base_dir=work / "stack", template_db=make_template_db(work / "template"),
                  env_overrides=ENV)
    spies: list[subprocess.Popen[bytes]] = []
    try:
        workers = [stack.start_worker(f"c{i}", concurrency=1)
                   for i in range(1, args.workers + 1)]
        web = stack.start_web(workers=WEB_WORKERS, uvicorn_args=WEB_ARGS)
        clients = [Client.login(web.base, "tester", "tester-password-1")
                   for _ in range(SUBMITTERS)]
        submit_all(clients, 12, "warm-up")
        wait_until(lambda: int(stack.query(FINISHED_SQL)[0]["n"]) >= 12, timeout=120,
                   what="warm-up done")
        RESULTS.mkdir(exist_ok=True)
        for w in workers:
            w.signal(signal.SIGSTOP, group=True)
        spies += profile(web.proc.pid, f"{args.name}_web")
        time.sleep(2.0)  # py-spy attaches to every process of the tree
        started = time.monotonic()
        submit_all(clients, args.docs, "profiled")
        progress(f"{args.docs} documents submitted in {time.monotonic() - started:.1f} s")
        stop(spies)
        for w in workers:
            spies += profile(w.pid, f"{args.name}_worker{w.name}")
        time.sleep(2.0)
        for w in workers:
            w.signal(signal.SIGCONT, group=True)
        started = time.monotonic()
        wait_until(lambda: int(stack.query(FINISHED_SQL)[0]["n"]) >= 12 + args.docs,
                   timeout=600, interval=0.05, what="profiled documents done")
        progress(f"{args.docs} documents processed in {time.monotonic() - started:.1f} s")
    finally:
        stop(spies)
        stack.stop()
        shutil.rmtree(work, ignore_errors=True)
    for path in sorted(RESULTS.glob(f"flame_{args.name}_*")):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
