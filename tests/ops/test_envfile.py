"""The one format for files of values (apps/ops/envfile.py): any value of printable characters
round-trips byte for byte through the writer, systemd's own parser, the installer's write and
the load that install, upgrade and rollback share; a line break or NUL is refused, naming the
key; nothing in a value ever runs."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.ops.envfile import MAX_ENTRY_BYTES, EnvFileError, env_file_render, parse_env_file
from tests.procs import ROOT

# Every printable character (letters, marks, numbers, punctuation, symbols, spaces in any
# script), plus the ones a shell or a parser might take for syntax, drawn often.
SYNTAX = " \t'\"$`&;#\\|<>(){}[]*?!~=%"
PRINTABLE = st.text(
    st.one_of(st.characters(codec="utf-8", exclude_categories=("Cc", "Cs", "Zl", "Zp")),
              st.sampled_from(SYNTAX)),
    max_size=40)
CANARY = "$(touch {p})`touch {p}`;touch {p}&&touch {p}|touch {p}"


def test_values_of_every_kind_round_trip_through_the_one_format():
    values = {
        "SPACES": "10.0.0.2 127.0.0.1", "EMPTY": "", "AMP": "postgres://u:p@h/db?a=1&b=2",
        "DJANGO": "k8#$^&*(-_=+)y@!z%v`q'\"\\;", "EDGE": "  padded\t ", "UNI": "é€😀",
    }
    assert parse_env_file(env_file_render(values)) == values


@settings(max_examples=300, deadline=None)
@given(key=st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True), value=PRINTABLE)
def test_render_then_parse_is_the_identity(key, value):
    assert parse_env_file(env_file_render({key: value})) == {key: value}


@pytest.mark.parametrize("bad", ["a\nb", "a\rb", "a\0b", "a\x1bb", "\ud800"])
def test_line_breaks_nul_and_controls_are_refused_naming_the_key(bad):
    with pytest.raises(EnvFileError, match="^DJANGO_SECRET_KEY: ") as refused:
        env_file_render({"DJANGO_SECRET_KEY": bad})
    assert bad not in str(refused.value)


def test_a_value_longer_than_linux_passes_to_a_process_is_refused_at_the_kernels_boundary():
    key = "DJANGO_SECRET_KEY"
    longest = "k" * (MAX_ENTRY_BYTES - len(key) - 2)
    true = shutil.which("true")
    assert true is not None
    # The kernel's own line: the longest value reaches a process, one byte more does not.
    subprocess.run([true], env={key: longest}, check=True, timeout=30)
    with pytest.raises(OSError) as too_long:
        subprocess.run([true], env={key: longest + "k"}, timeout=30)
    assert too_long.value.errno == errno.E2BIG
    # The file's tools draw it in the same place, in UTF-8 bytes, naming the key only.
    assert parse_env_file(env_file_render({key: longest})) == {key: longest}
    for over in (longest + "k", "\u00e9" * (len(longest) // 2 + 1)):
        with pytest.raises(EnvFileError, match=f"^{key}: a value cannot be longer than "
                                               f"{len(longest)} bytes") as refused:
            env_file_render({key: over})
        assert over not in str(refused.value)
        with pytest.raises(EnvFileError, match=f"^line 2: {key}: a value cannot be longer"):
            parse_env_file(f"A=1\n{key}={over}\n")


@pytest.mark.parametrize(("text", "message"), [
    ("A=1\n$(touch /tmp/x)\n", "line 2: expected KEY=VALUE"),
    ('A="never closed\n', "a quote is not closed"),
    ('A="two\nlines"\n', "A: a value cannot hold a line break"),
    ("1A=x\n", "'1A' is not a variable name"),
])
def test_a_file_systemd_would_misread_is_refused(text, message):
    with pytest.raises(EnvFileError, match=message):
        parse_env_file(text)


def test_what_operators_write_by_hand_reads_as_systemd_reads_it():
    text = ("# comment\n; also a comment\n  A = 'single $x'  \nB=\"a \\$b \\\\ \\n\"\n"
            "C=bare value  \nD=a\\ b\nE='x'\"y\"\n")
    assert parse_env_file(text) == {"A": "single $x", "B": "a $b \\ \\n", "C": "bare value",
                                    "D": "a b", "E": "xy"}


def systemd_holds(text: str, key: str, expected: str) -> bool:
    """Does systemd's own env-file parser (parse_env_file, the code behind EnvironmentFile=)
    read ``expected`` for ``key`` in ``text``? The file is bind-mounted over os-release in a
    private mount namespace and ``systemd-analyze condition ConditionOSRelease=`` compares."""
    with tempfile.NamedTemporaryFile("w", suffix=".env", delete=False) as file:
        file.write(text)
    try:
        # The condition's own quoting (extract_first_word) and specifiers (%% is a %).
        quoted = ('"' + expected.replace("\\", "\\\\").replace('"', '\\"')
                  .replace("%", "%%") + '"')
        result = subprocess.run(
            ["unshare", "-m", "sh", "-c",
             'mount --bind "$0" /usr/lib/os-release && exec systemd-analyze condition "$1"',
             file.name, f"ConditionOSRelease={key}={quoted}"],
            capture_output=True, text=True, timeout=30)
    finally:
        os.unlink(file.name)
    output = result.stdout + result.stderr
    assert "succeeded" in output or "failed" in output, output
    return result.returncode == 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=PRINTABLE)
def test_systemd_reads_back_exactly_what_the_writer_wrote(value):
    # Framed by "v": the condition's own syntax would take a leading "=" for its operator and
    # eat blanks at the edges; inside the frame every character is checked.
    value = f"v{value}v"
    text = env_file_render({"ID": "x", "PLATFORM_VALUE": value})
    assert systemd_holds(text, "PLATFORM_VALUE", value)
    assert not systemd_holds(text, "PLATFORM_VALUE", value + "x")


def install_env_then_load(tmp_path: Path, values: dict[str, str]) -> dict[str, str]:
    """platform/release.sh's ensure_env_file (the first install writes the file) and then
    env_file_load_installed (what install, upgrade and rollback run) in a temporary root; the
    shell's environment afterwards, as the next command it starts sees it."""
    root = tmp_path / "root"
    script = ('set -euo pipefail; . platform/lib.sh; . platform/release.sh; '
              'release_layout "$ROOT_DIR"; PLATFORM_USER=root; mkdir -p "$ETC_DIR/tls"; '
              'ensure_env_file box.example; '
              'unset DJANGO_SECRET_KEY REDIS_PASSWORD REDIS_BIND; env_file_load_installed; '
              'exec env -0')
    env = {"PATH": os.environ["PATH"], "ROOT_DIR": str(root), "PLATFORM_ROLES": "web,data",
           **values}
    result = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env,
                            capture_output=True, timeout=60)
    assert result.returncode == 0, result.stderr.decode()
    return dict(pair.split("=", 1) for pair in result.stdout.decode().split("\0") if pair)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(secret=PRINTABLE.filter(bool), password=PRINTABLE.filter(bool))
def test_install_and_upgrade_load_every_value_as_written_and_run_none(tmp_path, secret,
                                                                       password):
    canary = tmp_path / "pwned"
    secret = secret + CANARY.format(p=canary)
    seen = install_env_then_load(tmp_path, {"DJANGO_SECRET_KEY": secret,
                                            "REDIS_PASSWORD": password,
                                            "REDIS_BIND": "127.0.0.1 ::1"})
    assert seen["DJANGO_SECRET_KEY"] == secret
    assert seen["REDIS_PASSWORD"] == password
    assert seen["REDIS_BIND"] == "127.0.0.1 ::1"
    assert not canary.exists()
    subprocess.run(["rm", "-rf", str(tmp_path / "root")], check=True)


def test_install_refuses_a_line_break_naming_the_key_and_writes_nothing(tmp_path):
    root = tmp_path / "root"
    script = ('set -euo pipefail; . platform/lib.sh; . platform/release.sh; '
              'release_layout "$ROOT_DIR"; PLATFORM_USER=root; mkdir -p "$ETC_DIR/tls"; '
              'ensure_env_file box.example')
    result = subprocess.run(
        ["bash", "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={"PATH": os.environ["PATH"], "ROOT_DIR": str(root), "PLATFORM_ROLES": "web,data",
             "DJANGO_SECRET_KEY": "first\nREDIS_URL=redis://evil"})
    assert result.returncode == 1
    assert "DJANGO_SECRET_KEY: a value cannot hold a line break" in result.stderr
    assert "evil" not in result.stderr
    assert not (root / "etc/platform/platform.env").exists()


@pytest.mark.parametrize("text", [
    "A=1\r\nB='2'\r\n# note\r\n1C=3\r\n",  # saved on Windows: CRLF
    "A=1\n# a comment \\\nthat goes on\n1C=3\n",  # a comment continued by its backslash
    'B="one\\\ntwo"\n\n1C=3\n',  # a value continued by its backslash inside quotes
])
def test_a_refusal_names_the_line_an_editor_shows(text):
    with pytest.raises(EnvFileError, match="^line 4: '1C' is not a variable name"):
        parse_env_file(text)
    with pytest.raises(EnvFileError, match="^line 2: B: a value cannot hold a line break"):
        parse_env_file("A=1\r\nB='one\ntwo'\r\n")  # the line its key is on


@pytest.mark.parametrize("name", ["SYSTEM_PYTHON", "APP_DIR", "ENV_FILE", "PLATFORM_USER"])
def test_a_file_cannot_set_what_the_tools_run_or_write_to(tmp_path, name):
    # The installed file's keys were exported into the tools' own shell: SYSTEM_PYTHON there
    # was the program upgrade then ran as root (secret, the venv, every later file read),
    # APP_DIR where it switched releases.
    canary = tmp_path / "ran"
    program = tmp_path / "python3"
    program.write_text(f"#!/bin/sh\ntouch {canary}\n")
    program.chmod(0o755)
    root = tmp_path / "root"
    script = ('set -euo pipefail; . platform/lib.sh; . platform/release.sh; '
              'release_layout "$ROOT_DIR"; PLATFORM_USER=root; mkdir -p "$ETC_DIR/tls"; '
              'ensure_env_file box.example; echo "$NAME=$VALUE" >> "$ENV_FILE"; '
              'env_file_load_installed; secret 8')
    result = subprocess.run(
        ["bash", "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={"PATH": os.environ["PATH"], "ROOT_DIR": str(root), "PLATFORM_ROLES": "web,data",
             "NAME": name, "VALUE": str(program)})
    assert result.returncode == 1, result.stdout
    assert f"{name} is not a platform setting" in result.stderr
    assert not canary.exists()


@pytest.mark.parametrize("kind", ["directory", "not utf-8", "bad line"])
def test_manage_py_names_a_file_it_cannot_read_and_stops(tmp_path, kind):
    # PLATFORM_ENV_FILE naming a directory ended manage.py in a traceback (IsADirectoryError).
    path = tmp_path / "platform.env"
    if kind == "directory":
        path.mkdir()
    else:
        path.write_bytes(b"A=\xff\n" if kind == "not utf-8" else b"A=1\n1B=2\n")
    result = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60,
                            env={"PATH": os.environ["PATH"], "PLATFORM_ENV_FILE": str(path)})
    assert result.returncode == 1
    assert result.stderr.startswith(f"manage.py: {path}"), result.stderr
    assert "Traceback" not in result.stderr
