"""Mail backends for the effects tests: a mail server that fails after its first message."""

from __future__ import annotations

from typing import Any

from django.core.mail.backends.locmem import EmailBackend


class FailsAfterFirstMessage(EmailBackend):
    """Accepts one message per test (into ``mail.outbox``), then refuses every other."""

    accepted = 0  # reset by the test; class-level so every connection shares it

    def send_messages(self, messages: Any) -> int:
        if type(self).accepted >= 1:
            raise ConnectionError("mail server went away")
        type(self).accepted += 1
        return super().send_messages(messages[:1]) if messages else 0
