"""Finds in-process state in Python source by reading its syntax tree (nothing is imported).

What counts as state: module-level mutable objects, memoised functions, threads and timers
started at import or in ``AppConfig.ready``, in-memory queues, schedulers, class-level
mutable attributes, process-local singletons (a module global rebound with ``global``), and
per-connection streams (async generators: a response that lives in one process as long as
its client stays connected).
Immutable constants (tuples, frozensets, strings, numbers, compiled patterns) are not state.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path


class Kind(StrEnum):
    MODULE_MUTABLE = "module-level mutable object"
    CLASS_MUTABLE = "class-level mutable attribute"
    CACHE = "memoised function"
    THREAD = "thread or timer"
    QUEUE = "in-memory queue"
    SCHEDULER = "scheduler"
    SINGLETON = "process-local singleton"
    STREAM = "per-connection stream"


@dataclass(frozen=True, order=True)
class Finding:
    path: str  # relative to the scanned root, POSIX separators
    line: int
    symbol: str  # what the registry names: a variable, Class.attr, a function, or where:call
    kind: Kind

    @property
    def key(self) -> tuple[str, str]:
        return (self.path, self.symbol)


MUTABLE_CALLS = frozenset({
    "dict", "list", "set", "bytearray", "defaultdict", "OrderedDict", "Counter", "ChainMap",
    "WeakValueDictionary", "WeakKeyDictionary", "WeakSet",
})
QUEUE_CALLS = frozenset({"Queue", "SimpleQueue", "LifoQueue", "PriorityQueue", "deque",
                         "JoinableQueue"})
THREAD_CALLS = frozenset({"Thread", "Timer", "Process", "ThreadPoolExecutor",
                          "ProcessPoolExecutor", "start_new_thread"})
SCHEDULER_CALLS = frozenset({"scheduler", "BackgroundScheduler", "AsyncIOScheduler",
                             "call_later", "call_repeatedly"})
CACHE_DECORATORS = frozenset({"cache", "lru_cache", "cached", "memoize"})
MUTABLE_NODES = (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)
# Names the framework reads once as declarations, not state a process accumulates.
DECLARATIONS = frozenset({"__all__", "urlpatterns", "app_name", "websocket_urlpatterns"})
DJANGO_DECLARATIVE_ATTRS = frozenset({
    "ordering", "indexes", "constraints", "fields", "exclude", "list_display", "list_filter",
    "search_fields", "readonly_fields", "inlines", "fieldsets", "choices", "permissions",
    "unique_together", "dependencies", "operations", "initial", "replaces", "widgets",
    "labels", "help_texts", "error_messages", "list_select_related", "raw_id_fields",
    "autocomplete_fields", "list_display_links", "actions", "prepopulated_fields",
})
# Migrations are declarations; settings modules are configuration read once at start-up.
SKIP_PARTS = frozenset({"migrations", "__pycache__", "templates", "static", "settings"})


def scan(root: Path, packages: Sequence[str]) -> list[Finding]:
    """Scan ``root/<package>/**.py`` for in-process state."""
    findings: list[Finding] = []
    for package in packages:
        base = root / package
        files = [base] if base.is_file() else sorted(base.rglob("*.py"))
        for path in files:
            if SKIP_PARTS.intersection(path.relative_to(root).parts):
                continue
            rel = path.relative_to(root).as_posix()
            tree = ast.parse(path.read_text(), filename=rel)
            findings += _Visitor(rel).run(tree)
    return sorted(set(findings))


def _call_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name):
            return func.id
        if isinstance(func, ast.Attribute):
            return func.attr
    return None


def _is_mutable(value: ast.AST | None) -> bool:
    if value is None:
        return False
    return isinstance(value, MUTABLE_NODES) or _call_name(value) in MUTABLE_CALLS


def _yields(function: ast.AsyncFunctionDef) -> bool:
    """Whether the function itself (not a function nested in it) yields."""
    pending: list[ast.AST] = list(function.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return True
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            pending.extend(ast.iter_child_nodes(node))
    return False


def _targets(node: ast.Assign | ast.AnnAssign) -> list[str]:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return [t.id for t in targets if isinstance(t, ast.Name)]


class _Visitor:
    def __init__(self, path: str) -> None:
        self.path = path
        self.found: list[Finding] = []

    def add(self, node: ast.AST, symbol: str, kind: Kind) -> None:
        self.found.append(Finding(self.path, getattr(node, "lineno", 0), symbol, kind))

    def run(self, tree: ast.Module) -> list[Finding]:
        for node in tree.body:
            self.module_statement(node)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.function(node)
        return self.found

    # --- module level ------------------------------------------------------------------
    def module_statement(self, node: ast.stmt) -> None:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            for name in _targets(node):
                if name not in DECLARATIONS:
                    self.value(node.value, name, at_module=True)
        elif isinstance(node, ast.ClassDef):
            self.class_body(node, node.name)
        elif isinstance(node, ast.Expr):
            self.started(node.value, "<module>")
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.stmt):
                    self.module_statement(child)

    def value(self, value: ast.AST | None, symbol: str, *, at_module: bool) -> None:
        name = _call_name(value)
        if name in QUEUE_CALLS:
            self.add(value, symbol, Kind.QUEUE)
        elif name in THREAD_CALLS:
            self.add(value, symbol, Kind.THREAD)
        elif name in SCHEDULER_CALLS:
            self.add(value, symbol, Kind.SCHEDULER)
        elif _is_mutable(value):
            self.add(value, symbol, Kind.MODULE_MUTABLE if at_module else Kind.CLASS_MUTABLE)

    def class_body(self, node: ast.ClassDef, qualname: str) -> None:
        if node.name == "Meta":
            return
        for child in node.body:
            if isinstance(child, (ast.Assign, ast.AnnAssign)):
                for name in _targets(child):
                    if name not in DJANGO_DECLARATIVE_ATTRS and name not in DECLARATIONS:
                        self.value(child.value, f"{qualname}.{name}", at_module=False)
            elif isinstance(child, ast.ClassDef):
                self.class_body(child, f"{qualname}.{child.name}")

    # --- functions ---------------------------------------------------------------------
    def function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for decorator in node.decorator_list:
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
            if name in CACHE_DECORATORS:
                self.add(node, node.name, Kind.CACHE)
        if isinstance(node, ast.AsyncFunctionDef) and _yields(node):
            self.add(node, node.name, Kind.STREAM)
        for child in ast.walk(node):
            if isinstance(child, ast.Global):
                for name in child.names:
                    self.add(child, name, Kind.SINGLETON)
        if node.name == "ready":  # AppConfig.ready runs at start-up in every process
            for child in ast.walk(node):
                self.started(child, "ready")

    def started(self, node: ast.AST, where: str) -> None:
        """Threads, timers and schedulers created at import or in ready()."""
        for child in ast.walk(node):
            name = _call_name(child)
            if name in THREAD_CALLS:
                self.add(child, f"{where}:{name}", Kind.THREAD)
            elif name in SCHEDULER_CALLS:
                self.add(child, f"{where}:{name}", Kind.SCHEDULER)
