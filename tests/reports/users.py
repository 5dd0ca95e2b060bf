"""Users for the digest's kill tests: enough that a pool child dies mid-run."""

from __future__ import annotations

from typing import Any


def users_add(stack: Any, *, count: int) -> None:
    """Insert ``count`` active users with an e-mail address, straight into the stack's database."""
    with stack.db() as conn:
        conn.executemany(
            "INSERT INTO auth_user (password, is_superuser, username, first_name, last_name, "
            "email, is_staff, is_active, date_joined) VALUES ('!', FALSE, ?, '', '', ?, FALSE, "
            "TRUE, CURRENT_TIMESTAMP)",
            [(f"user{n}", f"user{n}@example.com") for n in range(count)])
        conn.commit()
