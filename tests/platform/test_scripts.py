"""No value reaches program source in the platform's scripts: Python run with ``-c`` takes its
code in single quotes (nothing expanded) and its values as arguments or environment.
platform/up's readiness check put WEB_HOST and WEB_PORT inside the code it ran, so
``WEB_HOST="x'+str(open('/tmp/f','w'))+'"`` created that file on every poll."""

from __future__ import annotations

import re
import subprocess

from tests.procs import ROOT

# `-c "...$..."`: a double-quoted program with an expansion inside it.
EXPANDED_PROGRAM = re.compile(r'''\s-c\s+"[^"]*\$''')


def scripts() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "platform"], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout.split()
    return [name for name in listed if "systemd/" not in name
            and (ROOT / name).read_bytes()[:2] in (b"#!", b"# ")]


def test_no_script_expands_a_value_inside_the_code_it_runs():
    found = [f"{name}:{number}: {line.strip()}"
             for name in scripts()
             for number, line in enumerate((ROOT / name).read_text().splitlines(), 1)
             if EXPANDED_PROGRAM.search(line)]
    assert "platform/up" in scripts() and "platform/lib.sh" in scripts()
    assert found == []
