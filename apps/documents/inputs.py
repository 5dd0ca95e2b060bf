"""Turns a request (JSON, a pasted form, an uploaded file) into a checked submission.

Every refusal is a SubmissionError carrying the HTTP status and a sentence for the user;
nothing is stored before a submission passes all checks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import PurePath

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest

from apps.humanize import size_text

from .models import Document

TEXT_EXTENSIONS = frozenset({".txt", ".md", ".csv", ".log", ".text", ""})
TITLE_MAX = 200


class SubmissionError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Submission:
    title: str
    content: str
    source: str
    filename: str = ""


def too_large() -> SubmissionError:
    limit = settings.DOCUMENTS_MAX_BYTES
    return SubmissionError(413, f"The document is larger than the limit of {size_text(limit)} "
                                f"({limit} bytes); nothing was saved.")


def submission_from_request(request: HttpRequest) -> Submission:
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        raise SubmissionError(400, "Content-Length is not a number.") from None
    if declared > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
        raise too_large()
    try:
        if request.content_type == "application/json":
            return _from_json(request.body)
        if request.content_type in ("multipart/form-data", "application/x-www-form-urlencoded"):
            return _from_form(request)
    except RequestDataTooBig:
        raise too_large() from None
    raise SubmissionError(
        415, "Send the document as application/json or multipart/form-data."
    )


def _from_json(body: bytes) -> Submission:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SubmissionError(400, f"The request body is not valid JSON: {exc}") from None
    except RecursionError:
        # json.loads recurses once per nesting level; a few thousand "[" exhaust the stack.
        raise SubmissionError(400, "The request body is nested too deeply.") from None
    if not isinstance(data, dict):
        raise SubmissionError(400, 'Send a JSON object: {"title": "...", "text": "..."}.')
    title, text = data.get("title", ""), data.get("text")
    if not isinstance(text, str):
        raise SubmissionError(400, 'The JSON object needs a "text" string.')
    if not isinstance(title, str):
        raise SubmissionError(400, 'The "title" must be a string.')
    return _checked(title, text, Document.Source.PASTE, "")


def _from_form(request: HttpRequest) -> Submission:
    title = request.POST.get("title", "")
    text = request.POST.get("text", "")
    upload = request.FILES.get("file")
    if upload is None:
        return _checked(title, text, Document.Source.PASTE, "")
    if text.strip():
        raise SubmissionError(400, "Give either pasted text or a file, not both.")
    if upload.size is not None and upload.size > settings.DOCUMENTS_MAX_BYTES:
        raise too_large()
    name = PurePath(upload.name or "").name
    if PurePath(name).suffix.lower() not in TEXT_EXTENSIONS:
        raise SubmissionError(415, f"{name!r} is not a text file (.txt, .md, .csv, .log).")
    try:
        content = upload.read().decode("utf-8")
    except UnicodeDecodeError:
        raise SubmissionError(415, f"{name!r} is not UTF-8 text.") from None
    return _checked(title or name, content, Document.Source.UPLOAD, name)


def _unencodable(value: str) -> bool:
    """A lone surrogate (JSON's "\\ud800"): text no UTF-8 store or page can hold."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _checked(title: str, text: str, source: str, filename: str) -> Submission:
    if _unencodable(text) or _unencodable(title):
        raise SubmissionError(
            400, "The text or title holds a lone surrogate (such as \\ud800), which is not "
            "a character: send valid Unicode.")
    if not text.strip():
        raise SubmissionError(400, "The document is empty.")
    if "\x00" in text:
        raise SubmissionError(415, "The document contains binary data; send plain text.")
    if "\x00" in title:  # PostgreSQL's text columns refuse it (a 500 there)
        raise SubmissionError(400, "The title holds a NUL character (\\u0000); send text.")
    if len(text.encode()) > settings.DOCUMENTS_MAX_BYTES:
        raise too_large()
    title = " ".join(title.split())
    if len(title) > TITLE_MAX:
        raise SubmissionError(400, f"The title is longer than {TITLE_MAX} characters.")
    if not title:
        title = " ".join(text.split())[:80]
    return Submission(title=title, content=text, source=source, filename=filename)
