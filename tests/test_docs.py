"""The manual (README.md and docs/) holds together: every command it shows is in a block that
says the state it needs, nothing runnable is shown inline, links resolve, the illustrative
commands are valid and name things that exist, and the commands that need no platform run
as printed. Those that need one run in tests/platform/test_up.py. The rule:
tests/docs_commands.py and docs/development/README.md, "Commands in the manual".
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest
from django.core.management import get_commands, load_command_class

from tests.docs_commands import (
    MODES,
    NOT_COMMANDS,
    all_blocks,
    bare_env,
    by_page,
    inline_commands,
    manage_calls,
    manual_files,
    missing_paths,
    option_known,
    run_blocks,
    script_options,
    syntax_error,
)
from tests.procs import ROOT

README_MAX_LINES = 200


def test_every_fence_says_what_it_holds():
    unknown = [f"{b.where}: ```{b.info}" for b in all_blocks()
               if b.info not in MODES and b.info not in NOT_COMMANDS]
    assert unknown == [], f"blocks must be one of {MODES + NOT_COMMANDS}: {unknown}"
    empty = [b.where for b in all_blocks() if b.info in MODES and not b.commands]
    assert empty == [], f"console blocks without a `$ ` command: {empty}"


def test_no_command_is_shown_inline():
    shown = {str(p.relative_to(ROOT)): inline_commands(p) for p in manual_files()}
    assert {k: v for k, v in shown.items() if v} == {}, (
        "put commands in a console block (the test runs or checks them there)")


def test_links_resolve():
    broken = []
    for path in manual_files():
        text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.MULTILINE | re.DOTALL)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            resolved = (path.parent / file).resolve() if file else path
            if not resolved.exists():
                broken.append(f"{path.relative_to(ROOT)}: {target}")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                broken.append(f"{path.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []


def anchors(path: Path) -> set[str]:
    """GitHub's heading ids: lower case, punctuation dropped, spaces to hyphens."""
    found = set()
    for heading in re.findall(r"^#+ (.+)$", re.sub(r"^```.*?^```", "", path.read_text(),
                                                     flags=re.MULTILINE | re.DOTALL),
                              re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


def test_readme_is_a_front_door_and_its_figures_are_the_guarantees_pages():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= README_MAX_LINES
    guarantees = (ROOT / "docs/guarantees.md").read_text()
    table = readme.split("## What it guarantees", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) > 5
    figures = {figure for row in rows[1:]
               for figure in re.findall(r"\d[\d,.]*(?:-\d[\d,.]*)?(?: ?[%sx])?", row)}
    missing = sorted(f for f in figures if f.strip() not in guarantees)
    assert missing == [], f"README figures not on docs/guarantees.md (kept there): {missing}"


def illustrative_commands() -> list[tuple[str, str]]:
    return [(b.where, c.text) for b in all_blocks() if b.info == "console illustrative"
            for c in b.commands]


def test_illustrative_commands_are_valid_and_name_what_exists():
    problems = []
    for where, command in illustrative_commands():
        if error := syntax_error(command):
            problems.append(f"{where}: `{command}`: {error}")
        if missing := missing_paths(command):
            problems.append(f"{where}: `{command}` names missing {missing}")
        for script, option in script_options(command):
            if not option_known(script, option):
                problems.append(f"{where}: {script} does not read {option}")
    assert problems == []


@pytest.mark.django_db(databases=[])
def test_every_documented_manage_command_and_option_exists():
    commands = get_commands()
    problems = []
    for block in all_blocks():
        if block.info not in MODES:
            continue
        for command in block.commands:
            for call in manage_calls(command.text):
                if not call:
                    continue
                name, args = call[0], call[1:]
                if name not in commands:
                    problems.append(f"{block.where}: no command {name!r}")
                    continue
                command_class = load_command_class(commands[name], name)
                usage = command_class.create_parser("manage.py", name).format_help()
                for option in (arg.split("=")[0] for arg in args if arg.startswith("-")):
                    if not re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", usage):
                        problems.append(f"{block.where}: {name} has no {option}")
    assert problems == []


def test_python_blocks_compile_and_import_what_they_name():
    problems = []
    for block in all_blocks():
        if block.info != "python":
            continue
        tree = ast.parse(block.body)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                module = importlib.import_module(node.module)
                problems += [f"{block.where}: {node.module}.{alias.name}"
                             for alias in node.names if not hasattr(module, alias.name)]
    assert problems == []


@pytest.mark.processes
def test_commands_that_need_no_platform_run_as_printed(tmp_path):
    """Each ``console`` block, from the checkout, in a new shell; PLATFORM_VAR_DIR names an
    empty directory so no running platform's var/platform.env is read."""
    blocks = [b for b in all_blocks() if b.info == "console"]
    assert blocks
    env = bare_env(PLATFORM_VAR_DIR=str(tmp_path / "var"))
    failures = [failure for page in by_page(blocks) for failure in run_blocks(page, env=env)]
    assert failures == [], "\n\n".join(failures)
