"""The document task's outcome exceptions cross the prefork pool's pipe intact."""

from __future__ import annotations

import pickle

from apps.documents.delivery import ClaimSuperseded, DocumentFailed


def test_a_superseded_claim_survives_the_pool_pipe() -> None:
    """billiard pickles a pool process's exception to the main process, which rebuilds it
    from its args; a TypeError there stops the whole worker ("Unrecoverable error")."""
    raised = ClaimSuperseded("document 7: the claim moved to a later run")
    rebuilt = pickle.loads(pickle.dumps(raised))
    assert isinstance(rebuilt, ClaimSuperseded)
    assert rebuilt.reason == raised.reason and rebuilt.requeue is False


def test_a_failed_document_survives_the_pool_pipe() -> None:
    rebuilt = pickle.loads(pickle.dumps(DocumentFailed("document 7: bad input")))
    assert isinstance(rebuilt, DocumentFailed) and rebuilt.args == ("document 7: bad input",)
