"""Constants only: the audit must find nothing here."""

import re
from types import MappingProxyType
from typing import Final

NAMES = ("a", "b")
ALLOWED = frozenset({"x", "y"})
LIMIT: Final = 10
GREETING = "hello"
PATTERN = re.compile(r"\d+")
TABLE = MappingProxyType({"a": 1})
__all__ = ["NAMES"]
urlpatterns = []


class Settings:
    timeout = 5
    kinds = ("a", "b")


def build():
    local = {}  # a local variable, not state
    return local
