"""The manual's commands, read from README.md and docs/, so that tests run what users type.

The rule (docs/development/README.md, "Commands in the manual"): every command shown is in a
fenced block whose info string says the state it needs, and prose never shows one inline.

- ``console``: run as shown from the checkout, in a shell without the platform's variables,
  no platform needed (``tests/test_docs.py``).
- ``console running``: the same with the development platform running, started by
  ``bash platform/up`` (``tests/platform/test_up.py``, one platform for all of them). The
  platform under test has its own ports and data directory: the documented defaults
  (``127.0.0.1:8000``, ``:5555``, ``-p 6390``, ``var/``) are replaced by that platform's, and
  ``PLATFORM_VAR_DIR`` names its directory (what ``manage.py`` reads).
- ``console illustrative``: not run: commands for a customer box (systemd, ``/etc/platform``,
  ``sudo``), long benchmarks, other configurations each started by its own test. They are
  checked: valid shell syntax once placeholders (``<backup>``, ``...``) are filled, every
  repository path they name exists, every ``manage.py``/``platform-manage`` command and
  option exists, every ``--option`` of a script under ``platform/`` or ``loadtests/`` is one
  it reads.

In a console block, ``$ `` starts a command (a trailing backslash continues it); the lines
up to the next command are its expected output, matched in order against what it printed,
``...`` standing for any text. A page's blocks of one mode run, in order, as one shell
script, so a variable or function set by one command is there for the next; each command
must exit 0.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tests.procs import ROOT

MODES = ("console", "console running", "console illustrative")
# Blocks that show no command: sample output, file contents, code, pictures' sources.
NOT_COMMANDS = ("text", "python", "ini", "dot")
DOCUMENTED_PORTS = {"web": "8000", "flower": "5555", "redis": "6390"}


def manual_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


@dataclass
class Command:
    text: str  # as shown, continuation lines joined with their backslashes
    expected: list[str] = field(default_factory=list)


@dataclass
class Block:
    path: Path
    line: int
    info: str
    body: str
    commands: list[Command] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


FENCE = re.compile(r"^(```+)(.*)$")


def blocks_of(path: Path) -> list[Block]:
    found: list[Block] = []
    lines = path.read_text().splitlines()
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index].strip())
        if not opening:
            index += 1
            continue
        start, fence, info = index, opening.group(1), opening.group(2).strip()
        body: list[str] = []
        index += 1
        while index < len(lines) and lines[index].strip() != fence:
            body.append(lines[index])
            index += 1
        index += 1
        block = Block(path, start + 1, info, "\n".join(body))
        if info in MODES:
            block.commands = parse_console(body)
        found.append(block)
    return found


def parse_console(body: list[str]) -> list[Command]:
    commands: list[Command] = []
    continuing = False
    for raw in body:
        line = raw.rstrip()
        if continuing:
            commands[-1].text += "\n" + line
            continuing = line.endswith("\\")
        elif line.lstrip().startswith("$ "):
            commands.append(Command(line.lstrip()[2:]))
            continuing = line.endswith("\\")
        elif line.strip() and commands:
            commands[-1].expected.append(line.strip())
    return commands


def all_blocks() -> list[Block]:
    return [block for path in manual_files() for block in blocks_of(path)]


# --- inline code: commands belong in blocks ---------------------------------------------------
COMMAND_WORDS = (".venv/bin/", "python", "bash ", "sudo ", "curl ", "redis-cli", "systemctl ",
                 "journalctl ", "platform-manage ", "supervisorctl", "$ ")
ASSIGNMENT = re.compile(r"^(?:[A-Z_][A-Z0-9_]*=\S*\s+)+")


def inline_commands(path: Path) -> list[str]:
    """Inline code spans outside fences that read as a command (they could not be run)."""
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.MULTILINE | re.DOTALL)
    shown = []
    for span in re.findall(r"`([^`\n]+)`", text):
        bare = ASSIGNMENT.sub("", span.strip())
        if bare.startswith(COMMAND_WORDS) and " " in bare:
            shown.append(span)
    return shown


# --- running ----------------------------------------------------------------------------------
def substituted(command: str, *, ports: dict[str, str], var_dir: Path) -> str:
    """The documented defaults replaced by the platform under test's ports and directory."""
    text = command.replace("127.0.0.1:8000", f"127.0.0.1:{ports['web']}")
    text = text.replace("127.0.0.1:5555", f"127.0.0.1:{ports['flower']}")
    text = re.sub(r"(-p\s+)6390\b", rf"\g<1>{ports['redis']}", text)
    text = text.replace("$PWD/var/", f"{var_dir}/")
    return re.sub(r"(?<![\w/.$-])var/", f"{var_dir}/", text)


def matches(expected: list[str], output: str) -> str | None:
    """None when every expected line is found, in order; else the first one missing."""
    lines = [" ".join(line.split()) for line in output.splitlines()]
    position = 0
    for want in expected:
        if want == "...":
            continue
        pattern = re.compile(".*".join(re.escape(" ".join(part.split()))
                                       for part in want.split("...")) + "$")
        while position < len(lines) and not pattern.match(lines[position]):
            position += 1
        if position == len(lines):
            return want
        position += 1
    return None


MARK = "@@docs-command"


def run_blocks(blocks: list[Block], *, env: dict[str, str], ports: dict[str, str] | None = None,
               var_dir: Path | None = None, timeout: float = 600) -> list[str]:
    """Run one page's console blocks, in order, as one script from the checkout (what one
    command sets, the next can use); the failures, described."""
    script = []
    commands = [(block, command) for block in blocks for command in block.commands]
    for number, (_, command) in enumerate(commands):
        text = command.text if ports is None or var_dir is None else substituted(
            command.text, ports=ports, var_dir=var_dir)
        # The newline: output that does not end with one still ends before the mark.
        script += [f"echo {MARK} {number}", text,
                   f"__status=$?; echo; echo {MARK} {number} exit $__status"]
    result = subprocess.run(["bash", "-c", "\n".join(script)], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=timeout)
    failures = []
    for number, (block, command) in enumerate(commands):
        found = re.search(rf"^{MARK} {number}\n(.*?)^{MARK} {number} exit (\d+)$",
                          result.stdout, re.MULTILINE | re.DOTALL)
        if found is None:
            failures.append(f"{block.where}: `{command.text}` never finished:\n"
                            f"{result.stdout[-2000:]}{result.stderr[-2000:]}")
            break
        output, status = found.group(1), int(found.group(2))
        if status != 0:
            failures.append(f"{block.where}: `{command.text}` exited {status}:\n{output}"
                            f"{result.stderr[-2000:]}")
            continue
        missing = matches(command.expected, output)
        if missing is not None:
            failures.append(f"{block.where}: `{command.text}` did not print {missing!r}:\n"
                            f"{output}")
    return failures


def by_page(blocks: list[Block]) -> list[list[Block]]:
    pages: dict[Path, list[Block]] = {}
    for block in blocks:
        pages.setdefault(block.path, []).append(block)
    return list(pages.values())


def bare_env(**extra: str) -> dict[str, str]:
    """A user's new terminal: none of the platform's or the test run's variables."""
    import os

    env = {k: v for k, v in os.environ.items() if k in ("HOME", "LANG", "LC_ALL", "TERM", "USER")}
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
    env.update(extra)
    return env


# --- checking what is not run -----------------------------------------------------------------
PLACEHOLDER = re.compile(r"<[^<>\s]+>|\.\.\.")
OPTIONAL = re.compile(r"\[(-[^\]]*)\]")  # [--docs 200]: an optional part, shown in brackets


def filled(command: str) -> str:
    """Placeholders made words, optional parts made plain: what a user might type."""
    return PLACEHOLDER.sub("X", OPTIONAL.sub(r"\1", command))
REPO_PATH = re.compile(r"(?<![\w/.-])((?:platform|loadtests|tests|apps|config|adr|docs|scheduler|"
                       r"celery_conf)/[\w./-]*|\.venv/bin/[\w.-]+|manage\.py)")


def shell_words(command: str) -> list[str]:
    try:
        return shlex.split(filled(command.replace("\\\n", " ")), comments=True)
    except ValueError:
        return []


def syntax_error(command: str) -> str | None:
    result = subprocess.run(["bash", "-n"], input=filled(command), capture_output=True,
                            text=True, timeout=30)
    return result.stderr.strip() or None if result.returncode else None


def missing_paths(command: str) -> list[str]:
    missing = []
    for word in shell_words(command):
        for path in REPO_PATH.findall(word):
            path = path.split("::")[0].rstrip(".,")
            if path.startswith(".venv/bin/"):
                from tests.procs import BIN

                exists = (BIN / path.removeprefix(".venv/bin/")).exists()
            else:
                exists = (ROOT / path).exists()
            if not exists:
                missing.append(path)
    return missing


def script_options(command: str) -> list[tuple[str, str]]:
    """(script, --option) pairs for scripts run by path: platform/*, loadtests/*."""
    pairs = []
    words = shell_words(command)
    script = None
    for word in words:
        if re.fullmatch(r"(platform/[\w-]+|loadtests/[\w/]+\.py)", word):
            script = word
        elif word == "-m" or word.startswith("loadtests."):
            if word.startswith("loadtests."):
                script = word.replace(".", "/") + ".py"
        elif script and word.startswith("--"):
            pairs.append((script, word.split("=")[0]))
    return pairs


def option_known(script: str, option: str) -> bool:
    """The option's literal appears in the script or what it sources or imports locally."""
    path = ROOT / script
    sources = [path]
    if script.startswith("platform/"):
        sources += [ROOT / "platform" / name for name in ("lib.sh", "release.sh", "sentinel.sh")]
        sources += sorted((ROOT / "apps/ops").rglob("*.py"))  # logic run by path (issue 17)
    else:
        sources += sorted((ROOT / "loadtests").glob("*.py"))
    return any(option in source.read_text() for source in sources if source.exists())


def manage_calls(command: str) -> list[list[str]]:
    """The argument lists given to manage.py or platform-manage in a command."""
    calls = []
    words = shell_words(command)
    for index, word in enumerate(words):
        if word.endswith("manage.py") or word == "platform-manage":
            rest = []
            for arg in words[index + 1:]:
                if arg in ("|", "&&", ";", "||"):
                    break
                rest.append(arg)
            calls.append(rest)
    return calls
