"""Finds every use of a third-party package's private or undocumented parts in the source.

    .venv/bin/python tests/public_ground.py [ROOT]

Walks the project's Python files (AST, nothing imported but the third-party modules it must
inspect) and reports, per file and line:

- an import of a private name or module of a third-party package (``from x import _y``,
  ``import x._y``);
- an attribute that starts with one underscore (not a dunder) read, written or named in
  ``getattr``/``setattr``/``hasattr``/``delattr``, where the project itself defines no
  attribute, function, class or variable of that name, or where the object is a third-party
  module or class imported by name (``RedisSentinel._get_redis_client``);
- a method whose name starts with one underscore defined in a class with a third-party base
  that has that attribute (overriding a private method: kombu's ``Channel._put``);
- a name on ``UNDOCUMENTED``: public-looking, but in no library's documentation.

``ALLOWED`` is the one module that may (adr/0030): it names the versions it was verified on
and falls back to public ground on any other. tests/test_public_ground.py fails on any
finding elsewhere.
"""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("apps", "celery_conf", "config", "scheduler", "loadtests", "tests", "manage.py")
SKIP_PARTS = {".venv", "var", "__pycache__", "migrations", "fixture_apps"}
# The one module allowed to reach past public APIs (relative to the root).
ALLOWED = {"apps/stream_wire.py"}
# Documented, despite the underscore: Django's model _meta API.
DOCUMENTED_PRIVATE = {"_meta"}
# Public-looking names that no library documents; used, they tie the platform to one release.
UNDOCUMENTED = {
    "split_domain_port": "django.http.request: not in Django's documentation",
    "validate_host": "django.http.request: not in Django's documentation",
    "parse_cookie": "django.http: not in Django's reference (HttpRequest.COOKIES is)",
    "conn_or_acquire": "kombu.transport.redis.Channel: undocumented",
    "REDBEAT_REDIS_KEY": "redbeat.schedulers: an undocumented cache attribute",
    "sentinel_manager": "redis.sentinel.SentinelConnectionPool: undocumented attribute",
}
# Packages of this project: everything else importable is third-party (or the stdlib).
PROJECT = {"apps", "celery_conf", "config", "scheduler", "loadtests", "tests", "manage"}


@dataclass(frozen=True, order=True)
class Finding:
    path: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def python_files(root: Path) -> Iterator[Path]:
    for source in SOURCES:
        base = root / source
        paths = [base] if base.suffix == ".py" else sorted(base.rglob("*.py"))
        for path in paths:
            if path.exists() and not SKIP_PARTS & set(path.relative_to(root).parts):
                yield path


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in DOCUMENTED_PRIVATE


def _third_party(module: str) -> bool:
    top = module.split(".")[0]
    return bool(top) and top not in PROJECT and top not in sys.stdlib_module_names


def _module_of(path: Path, root: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def defined_names(trees: dict[str, ast.AST]) -> dict[str, set[str]]:
    """Every name a project module defines (functions, classes, variables, attributes it
    assigns, arguments, __slots__ entries) -> the modules that define it."""
    names: dict[str, set[str]] = {}
    for module, tree in trees.items():
        for node in ast.walk(tree):
            found: list[str] = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found.append(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                found.append(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                    and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                found.append(node.attr)
            elif isinstance(node, ast.arg):
                found.append(node.arg)
            elif isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets):
                found += [e.value for e in getattr(node.value, "elts", [])
                          if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            for name in found:
                names.setdefault(name, set()).add(module)
    return names


def _project_imports(tree: ast.AST, module: str) -> set[str]:
    """The project modules ``module`` imports, and itself."""
    seen = {module}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            seen |= {a.name for a in node.names if not _third_party(a.name)}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = module.rsplit(".", node.level)[0]
                base = f"{package}.{node.module}" if node.module else package
            else:
                base = node.module or ""
            if base and not _third_party(base):
                seen.add(base)
                seen |= {f"{base}.{a.name}" for a in node.names}
    return seen


def _imported(tree: ast.AST) -> dict[str, str]:
    """Local name -> the third-party module path it was imported as."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _third_party(alias.name):
                    names[alias.asname or alias.name.split(".")[0]] = (
                        alias.name if alias.asname else alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and _third_party(node.module):
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _resolve(path: str) -> object | None:
    """Import a third-party module or object by dotted path; None when it cannot be had."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except Exception:  # noqa: BLE001 - not a module at this cut, or not importable here
            continue
        try:
            for part in parts[cut:]:
                obj = getattr(obj, part)
        except AttributeError:
            return None
        return obj
    return None


def check_file(path: Path, root: Path, tree: ast.AST,
               project_names: dict[str, set[str]]) -> list[Finding]:
    rel = str(path.relative_to(root))
    imported = _imported(tree)
    reachable = _project_imports(tree, _module_of(path, root))
    found: list[Finding] = []

    def ours(name: str) -> bool:
        """Defined by this module or a project module it imports (a test poking the hub)."""
        return any(m in reachable or any(r.startswith(m + ".") or m.startswith(r + ".")
                                          for r in reachable)
                   for m in project_names.get(name, ()))

    def dotted(node: ast.AST) -> str | None:
        """The third-party path of ``Name`` or ``Name.attr`` bases and targets, if any."""
        if isinstance(node, ast.Name) and node.id in imported:
            return imported[node.id]
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in imported:
            return f"{imported[node.value.id]}.{node.attr}"
        return None

    def add(node: ast.AST, what: str) -> None:
        found.append(Finding(rel, getattr(node, "lineno", 0), what))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _third_party(alias.name) and any(_is_private(p)
                                                    for p in alias.name.split(".")):
                    add(node, f"imports the private module {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and _third_party(node.module):
            if any(_is_private(p) for p in node.module.split(".")):
                add(node, f"imports from the private module {node.module}")
            for alias in node.names:
                if _is_private(alias.name):
                    add(node, f"imports the private {node.module}.{alias.name}")
                if alias.name in UNDOCUMENTED:
                    add(node, f"imports {alias.name} ({UNDOCUMENTED[alias.name]})")
        elif isinstance(node, ast.Attribute):
            base = node.value
            owner = dotted(base)
            mine = isinstance(base, ast.Name) and base.id in ("self", "cls")
            if isinstance(node.ctx, ast.Store) and owner is not None:
                if owner != "django.conf.settings":  # overriding settings is documented
                    add(node, f"patches {owner}.{node.attr}")
            elif _is_private(node.attr) and not mine and (owner is not None
                                                           or not ours(node.attr)):
                add(node, f"uses the private attribute {node.attr}"
                          + (f" of {owner}" if owner else ", defined in no module it imports"))
            elif node.attr in UNDOCUMENTED:
                add(node, f"uses {node.attr} ({UNDOCUMENTED[node.attr]})")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("getattr", "setattr", "hasattr", "delattr") \
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) \
                and isinstance(node.args[1].value, str):
            name = node.args[1].value
            if _is_private(name) and not ours(name):
                add(node, f"{node.func.id} of the private attribute {name}")
        elif isinstance(node, ast.ClassDef):
            bases = [path for path in map(dotted, node.bases) if path]
            resolved = [obj for obj in map(_resolve, bases) if isinstance(obj, type)]
            # self._x inside it, where a third-party base has _x and the project sets none.
            for sub in ast.walk(node):
                if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) \
                        and sub.value.id in ("self", "cls") and _is_private(sub.attr) \
                        and not ours(sub.attr) \
                        and any(hasattr(base, sub.attr) for base in resolved):
                    add(sub, f"uses the private attribute {sub.attr} of a third-party base")
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                        and _is_private(item.name) \
                        and any(hasattr(base, item.name) for base in resolved):
                    add(item, f"overrides the private method {item.name} of a third-party base")
    return found


def scan(root: Path = ROOT) -> list[Finding]:
    files = list(python_files(root))
    trees = {_module_of(p, root): ast.parse(p.read_text()) for p in files}
    project_names = defined_names(trees)
    findings: list[Finding] = []
    for path in files:
        findings += check_file(path, root, trees[_module_of(path, root)], project_names)
    return sorted(findings)


if __name__ == "__main__":
    # Run by path, Python puts tests/ first on the path, where tests/celery_conf and the like
    # would shadow the project's packages that third-party modules are resolved beside.
    sys.path[0] = str(ROOT)
    root = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT
    results = scan(root)
    for finding in results:
        print(finding)
    outside = [f for f in results if f.path not in ALLOWED]
    print(f"{len(results)} use(s) of private or undocumented third-party parts, "
          f"{len(outside)} outside {', '.join(sorted(ALLOWED))}")
