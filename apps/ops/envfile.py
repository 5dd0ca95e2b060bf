"""The platform's one format for files of values, read and written here and nowhere else.

Every file of values (``/etc/platform/platform.env``, ``var/dev.env``, ``var/platform.env``, a
``--join`` copy) is in systemd's ``EnvironmentFile=`` format, because the units read the same
file (adr/0037). ``parse_env_file`` follows systemd 252's parser (``src/basic/env-file.c``)
state for state; ``env_file_render`` writes what that parser reads back byte for byte. Nothing
in a file is ever run: the shell tools call this file by path (``export`` hands the values to
bash as NUL-separated data, ``render`` writes a file from the caller's environment), and
``manage.py`` loads it before Django starts. Imports nothing but the standard library.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Mapping, MutableMapping
from pathlib import Path

ENV_FILE_VARIABLE = "PLATFORM_ENV_FILE"
ENV_FILE_NAME = "platform.env"

# systemd's env_name_is_valid(): the characters a shell variable name may hold.
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Written bare: nothing here means anything to systemd's parser (no quote, backslash,
# whitespace, comment character). Everything else is double-quoted.
BARE = re.compile(r"[A-Za-z0-9_@%+=:,./-]*")
# Inside double quotes systemd unescapes exactly these (SHELL_NEED_ESCAPE).
DOUBLE_QUOTE_ESCAPED = '"\\`$'
# Linux hands a process each KEY=value string whole or not at all: one longer than
# MAX_ARG_STRLEN (32 pages: 131,072 bytes with its NUL) makes every exec that carries it fail
# with E2BIG, "Argument list too long", in whatever unit or tool starts next, far from the
# file that set it. systemd's own check allows up to ARG_MAX (2 MiB here).
MAX_ENTRY_BYTES = 131072
WHITESPACE = " \t\n\r"
NEWLINE = "\n\r"
COMMENTS = "#;"


class EnvFileError(Exception):
    pass


def env_value_check(*, key: str, value: str) -> None:
    """Refuse what systemd would drop or misread, naming the key (never the value: a secret)."""
    if not NAME.fullmatch(key):
        raise EnvFileError(
            f"{key!r} is not a variable name (letters, digits, _; not a digit first)")
    for char in value:
        if char == "\n" or char == "\r":
            raise EnvFileError(f"{key}: a value cannot hold a line break")
        if char == "\0":
            raise EnvFileError(f"{key}: a value cannot hold a NUL character")
        # systemd drops a value with other control characters (env_value_is_valid), tab aside.
        if (ord(char) < 32 and char != "\t") or char == "\x7f":
            raise EnvFileError(f"{key}: a value cannot hold control character {ord(char):#04x}")
        if 0xD800 <= ord(char) <= 0xDFFF:
            raise EnvFileError(f"{key}: a value cannot hold a lone surrogate (not UTF-8)")
    longest = MAX_ENTRY_BYTES - len(key) - 2  # the "=" and the NUL
    if len(value.encode("utf-8")) > longest:
        raise EnvFileError(f"{key}: a value cannot be longer than {longest} bytes in UTF-8 "
                           "(what Linux passes to a process for one variable)")


def env_value_quote(value: str) -> str:
    if BARE.fullmatch(value):
        return value
    return '"' + "".join("\\" + c if c in DOUBLE_QUOTE_ESCAPED else c for c in value) + '"'


def env_file_render(values: Mapping[str, str], *, header: Iterable[str] = ()) -> str:
    """The file's text: ``header`` as comment lines, then one ``KEY=value`` line per value."""
    lines = [f"# {line}".rstrip() for line in header]
    for key, value in values.items():
        env_value_check(key=key, value=value)
        lines.append(f"{key}={env_value_quote(value)}")
    return "\n".join(lines) + "\n"


def parse_env_file(text: str) -> dict[str, str]:
    """systemd 252's ``parse_env_file_internal``, then its validity checks, refused loudly.

    systemd silently drops an invalid name or value; here it is an error naming the key, so a
    value the units would not see is never half-used.
    """
    pairs: list[tuple[int, str, str]] = []
    state = "pre_key"
    key: list[str] = []
    value: list[str] = []
    key_ws: int | None = None
    value_ws: int | None = None
    line = 1  # counted by "\n" alone: a CRLF line is one line, as an editor shows it
    key_line = 1

    def push() -> None:
        name = "".join(key[:key_ws] if key_ws is not None else key)
        pairs.append((key_line, name, "".join(value)))

    for c in text:
        if state == "pre_key":
            if c in COMMENTS:
                state = "comment"
            elif c not in WHITESPACE:
                state, key, key_ws, key_line = "key", [c], None, line
            elif c == "\n":
                line += 1
        elif state == "key":
            if c in NEWLINE:
                raise EnvFileError(f"line {line}: expected KEY=VALUE")
            if c == "=":
                state, value, value_ws = "pre_value", [], None
            else:
                if c not in WHITESPACE:
                    key_ws = None
                elif key_ws is None:
                    key_ws = len(key)
                key.append(c)
        elif state == "pre_value":
            if c in NEWLINE:
                push()
                state, line = "pre_key", line + (c == "\n")
            elif c == "'":
                state = "single"
            elif c == '"':
                state = "double"
            elif c == "\\":
                state = "value_escape"
            elif c not in WHITESPACE:
                state = "value"
                value.append(c)
        elif state == "value":
            if c in NEWLINE:
                if value_ws is not None:
                    del value[value_ws:]
                push()
                state, line = "pre_key", line + (c == "\n")
            elif c == "\\":
                state, value_ws = "value_escape", None
            else:
                if c not in WHITESPACE:
                    value_ws = None
                elif value_ws is None:
                    value_ws = len(value)
                value.append(c)
        elif state == "value_escape":
            state = "value"
            if c not in NEWLINE:
                value.append(c)
            else:
                line += c == "\n"
        elif state == "single":
            if c == "'":
                state = "pre_value"
            else:
                value.append(c)
                line += c == "\n"
        elif state == "double":
            if c == '"':
                state = "pre_value"
            elif c == "\\":
                state = "double_escape"
            else:
                value.append(c)
                line += c == "\n"
        elif state == "double_escape":
            state = "double"
            if c in DOUBLE_QUOTE_ESCAPED:
                value.append(c)
            elif c == "\n":
                line += 1
            else:
                value.extend(("\\", c))
        elif state == "comment":
            if c == "\\":
                state = "comment_escape"
            elif c in NEWLINE:
                state, line = "pre_key", line + (c == "\n")
        elif state == "comment_escape":
            state = "comment"
            line += c == "\n"
    if state == "key":
        raise EnvFileError(f"line {line}: expected KEY=VALUE")
    if state in ("single", "double", "double_escape"):
        raise EnvFileError(f"line {line}: a quote is not closed")
    if state in ("pre_value", "value", "value_escape"):
        if state == "value" and value_ws is not None:
            del value[value_ws:]
        push()
    values: dict[str, str] = {}
    for number, name, text_value in pairs:
        try:
            env_value_check(key=name, value=text_value)
        except EnvFileError as exc:
            raise EnvFileError(f"line {number}: {exc}") from None
        values[name] = text_value
    return values


def env_file_path(*, root: Path, environ: Mapping[str, str]) -> Path:
    """``$PLATFORM_ENV_FILE``, else ``platform.env`` in ``$PLATFORM_VAR_DIR`` (default var/)."""
    if environ.get(ENV_FILE_VARIABLE):
        return Path(environ[ENV_FILE_VARIABLE])
    return Path(environ.get("PLATFORM_VAR_DIR") or root / "var") / ENV_FILE_NAME


def env_file_read(path: Path) -> dict[str, str]:
    try:
        text = path.read_bytes().decode("utf-8")
    except PermissionError:
        raise EnvFileError(
            f"cannot read {path}: it holds the platform's secrets and only root and the "
            "platform's user may read it (use sudo)") from None
    except UnicodeDecodeError:
        raise EnvFileError(f"{path}: not UTF-8 text") from None
    except OSError as exc:  # a directory, a dangling link, an I/O error
        raise EnvFileError(f"{path}: cannot read it: {exc.strerror}") from None
    try:
        return parse_env_file(text)
    except EnvFileError as exc:
        raise EnvFileError(f"{path}: {exc}") from None


def env_file_load(*, root: Path, environ: MutableMapping[str, str] = os.environ) -> Path | None:
    """Fill unset variables from the environment file; the file used, or None if there is none.

    Raises EnvFileError when the file exists but cannot be read or parsed.
    """
    path = env_file_path(root=root, environ=environ)
    if not path.exists():
        if environ.get(ENV_FILE_VARIABLE):
            raise EnvFileError(f"{ENV_FILE_VARIABLE} names {path}, which does not exist")
        return None
    for key, value in env_file_read(path).items():
        environ.setdefault(key, value)
    return path


# Names the shell tools never take from a file: they change how the tools themselves run,
# what they run (SYSTEM_PYTHON ran as root for every later step of an upgrade) or where they
# write (the layout, the release being switched, the arguments they were given).
SHELL_RESERVED = re.compile(
    r"(PATH|IFS|ENV|BASH_ENV|BASHOPTS|SHELLOPTS|PS4|CDPATH|GLOBIGNORE|HOME|LD_\w*|PYTHON\w*"
    r"|SYSTEM_PYTHON|PLATFORM_PYTHON|PLATFORM_ROOT|PLATFORM_PREFIX|PLATFORM_USER|ENVFILE_TOOL"
    r"|VENV|PREFIX|APP_DIR|ETC_DIR|DATA_DIR|UNIT_DIR|ENV_FILE|MANAGE_WRAPPER|RESTART_ORDER"
    r"|JOIN_FILE|JOIN_KEYS|CERT_ARG|KEY_ARG|HOSTNAME_ARG|CHECK_ARGS|CHECK_DIR|FINISH"
    r"|CURRENT|PREVIOUS|PENDING|OLD|NEW|VERSION|ALL_ROLES|KNOWN_ROLES|LOCK_PYTHON"
    r"|COMPAT_PREVIOUS)")


def main(argv: list[str]) -> int:
    """``export FILE [KEY...]``: the file's values (or only those KEYs) as NUL-separated
    ``KEY=value`` on stdout, for bash's ``read -d ''`` and ``export "$pair"`` (data, never run).
    ``render KEY... [--header LINE]...``: a file of the named variables of this process's
    environment (unset ones left out) on stdout.
    """
    try:
        if len(argv) >= 2 and argv[0] == "export":
            values = env_file_read(Path(argv[1]))
            wanted = argv[2:]
            out = sys.stdout.buffer
            for key, value in values.items():
                if wanted and key not in wanted:
                    continue
                if SHELL_RESERVED.fullmatch(key):
                    raise EnvFileError(f"{argv[1]}: {key} is not a platform setting")
                out.write(f"{key}={value}\0".encode())
            return 0
        if argv and argv[0] == "render":
            header: list[str] = []
            keys: list[str] = []
            rest = iter(argv[1:])
            for arg in rest:
                if arg == "--header":
                    header.append(next(rest, ""))
                else:
                    keys.append(arg)
            values = {k: os.environ[k] for k in keys if k in os.environ}
            sys.stdout.write(env_file_render(values, header=header))
            return 0
    except EnvFileError as exc:
        print(f"platform: {exc}", file=sys.stderr)
        return 1
    print("usage: envfile.py export FILE [KEY...] | render KEY... [--header LINE]",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
