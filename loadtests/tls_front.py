"""What a reverse proxy in front of the web workers costs, against uvicorn's own TLS.

    .venv/bin/python loadtests/tls_front.py [--seconds 8] [--clients 8] [--web-workers 2]

Two fronts for the same 2 uvicorn workers (h11, the production flags of
platform/systemd/platform-web.service):
  direct: uvicorn terminates TLS itself; the body limit is apps/ops/limits.py;
  nginx:  nginx (Debian's nginx-light) terminates TLS, serves /static/ from disk, refuses
          large bodies and headers, proxies the rest unbuffered to uvicorn over loopback HTTP.
For each front: keep-alive requests from --clients threads for --seconds to /healthz (the
smallest dynamic answer) and to a static file, then one client opening a new TLS connection
per request (a monitor polling); latency p50/p99 and requests/s, and the resident memory of
the front's processes. Prints progress and a table; writes loadtests/results/tls_front.{json,png}.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import requests
import urllib3

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.common import new_figure, progress, save_figure, save_json, summary  # noqa: E402
from tests.procs import Stack, free_port, make_template_db, spawn, wait_until  # noqa: E402

STATIC = "/static/admin/css/base.css"
H11 = ("--http", "h11", "--h11-max-incomplete-event-size", "65536")

NGINX_CONF = """
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/nginx-error.log;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {dir}/body;
  proxy_temp_path {dir}/proxy;
  fastcgi_temp_path {dir}/fastcgi; uwsgi_temp_path {dir}/uwsgi; scgi_temp_path {dir}/scgi;
  include /etc/nginx/mime.types;
  client_max_body_size {body};
  large_client_header_buffers 4 64k;
  upstream web {{ server 127.0.0.1:{upstream}; keepalive 16; }}
  server {{
    listen 127.0.0.1:{port} ssl;
    ssl_certificate {cert}; ssl_certificate_key {key};
    location /static/ {{ alias {static}/; }}
    location / {{
      proxy_pass http://web;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $host;
      proxy_set_header X-Forwarded-Proto https;
      proxy_buffering off;
      proxy_request_buffering off;
    }}
  }}
}}
"""


def rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        proc = psutil.Process(pid)
        total += sum(p.memory_info().rss for p in [proc, *proc.children(recursive=True)])
    return round(total / 2**20, 1)


def session() -> requests.Session:
    http = requests.Session()
    http.trust_env = False
    http.verify = False
    return http


def keepalive_load(base: str, path: str, *, clients: int, seconds: float) -> dict[str, Any]:
    latencies: list[float] = []
    errors = 0
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def client() -> None:
        nonlocal errors
        http = session()
        mine = []
        while time.monotonic() < stop:
            started = time.perf_counter()
            try:
                ok = http.get(base + path, timeout=10).status_code == 200
            except requests.RequestException:
                ok = False
            if ok:
                mine.append((time.perf_counter() - started) * 1000)
            else:
                with lock:
                    errors += 1
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {**summary(latencies), "per_s": round(len(latencies) / seconds, 1), "errors": errors}


def new_connection_load(base: str, *, seconds: float) -> dict[str, Any]:
    latencies = []
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        started = time.perf_counter()
        with session() as http:
            http.get(base + "/healthz", timeout=10, headers={"Connection": "close"})
        latencies.append((time.perf_counter() - started) * 1000)
    return {**summary(latencies), "per_s": round(len(latencies) / seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--web-workers", type=int, default=2)
    args = parser.parse_args()
    urllib3.disable_warnings()
    if shutil.which("nginx") is None:
        sys.exit("nginx is not installed (apt-get install nginx-light): it is the compared front")
    work = Path(tempfile.mkdtemp(prefix="tls-front-"))
    work.chmod(0o755)  # nginx's workers (www-data) read the static files under it
    cert, key = work / "cert.pem", work / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    stack = Stack(base_dir=work / "stack", template_db=make_template_db(work / "template"))
    stack.manage("collectstatic", "--noinput", "-v", "0")
    body_limit = int(stack.manage("shell", "--no-imports", "-c", "from django.conf import "
                                  "settings; print(settings.DATA_UPLOAD_MAX_MEMORY_SIZE)"
                                  ).stdout.split()[-1])
    results: dict[str, Any] = {"clients": args.clients, "seconds": args.seconds,
                               "web_workers": args.web_workers, "fronts": {}}
    try:
        # direct: uvicorn's own TLS
        web = stack.start_web(workers=args.web_workers, wait=False, uvicorn_args=(
            *H11, "--ssl-certfile", str(cert), "--ssl-keyfile", str(key)))
        base = web.base.replace("http://", "https://")
        wait_until(lambda: web.proc.log().count("Application startup complete.")
                   >= args.web_workers, timeout=60, what="direct workers up")
        results["fronts"]["direct"] = measure(base, [web.proc.pid], args)
        web.proc.stop()

        # nginx in front of plain-HTTP uvicorn
        web = stack.start_web(workers=args.web_workers, uvicorn_args=H11)
        upstream = int(web.base.rsplit(":", 1)[1])
        port = free_port()
        for sub in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
            (work / sub).mkdir(exist_ok=True)
        (work / "nginx.conf").write_text(NGINX_CONF.format(
            dir=work, body=body_limit, upstream=upstream, port=port, cert=cert, key=key,
            static=stack.base_dir / "static"))
        nginx = spawn("nginx", ["nginx", "-c", str(work / "nginx.conf"), "-g", "daemon off;"],
                      env=dict(os.environ), log_dir=work)
        base = f"https://127.0.0.1:{port}"
        wait_until(lambda: _answers(base), timeout=30, what="nginx answers")
        results["fronts"]["nginx"] = measure(base, [web.proc.pid, nginx.pid], args)
        results["fronts"]["nginx"]["nginx_rss_mb"] = rss_mb([nginx.pid])
        nginx.signal(signal.SIGQUIT)
        nginx.wait_exit(timeout=30)
    finally:
        stack.stop()
    save_json("tls_front", results)
    plot(results)
    print(table(results))


def _answers(base: str) -> bool:
    try:
        return session().get(base + "/healthz", timeout=2).ok
    except requests.RequestException:
        return False


def measure(base: str, pids: list[int], args: argparse.Namespace) -> dict[str, Any]:
    front = {"rss_mb": rss_mb(pids)}
    for name, path in (("healthz", "/healthz"), ("static", STATIC)):
        progress(f"{base}: {args.clients} keep-alive clients on {path} for {args.seconds} s")
        front[name] = keepalive_load(base, path, clients=args.clients, seconds=args.seconds)
        progress(f"  {front[name]['per_s']}/s, p50 {front[name]['p50']:.1f} ms, "
                 f"p99 {front[name]['p99']:.1f} ms, errors {front[name]['errors']}")
    progress(f"{base}: one client, a new TLS connection per request, for {args.seconds} s")
    front["new_connection"] = new_connection_load(base, seconds=args.seconds)
    progress(f"  {front['new_connection']['per_s']}/s, p50 {front['new_connection']['p50']:.1f} ms")
    front["rss_mb_after"] = rss_mb(pids)
    return front


def table(results: dict[str, Any]) -> str:
    lines = ["front   | healthz /s, p50/p99 ms | static /s, p50/p99 ms | new TLS conn p50 ms"
             " | RSS MB"]
    for name, f in results["fronts"].items():
        h, s = f["healthz"], f["static"]
        lines.append(
            f"{name:<7} | {h['per_s']:>7}, {h['p50']:.1f}/{h['p99']:.1f}"
            f" | {s['per_s']:>7}, {s['p50']:.1f}/{s['p99']:.1f}"
            f" | {f['new_connection']['p50']:.1f} | {f['rss_mb_after']}")
    return "\n".join(lines)


def plot(results: dict[str, Any]) -> None:
    fig, axes = new_figure("TLS front: uvicorn direct vs nginx (2 uvicorn workers)", ncols=2)
    names = list(results["fronts"])
    for ax, metric in zip(axes, ("healthz", "static"), strict=True):
        ax.bar(names, [results["fronts"][n][metric]["per_s"] for n in names])
        ax.set_title(f"{metric}: requests/s ({results['clients']} keep-alive clients)")
    save_figure(fig, "tls_front")


if __name__ == "__main__":
    main()
