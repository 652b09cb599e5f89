"""spool's errors as Python exceptions.

Every exception spool raises is a :class:`SpoolError`. A failed request is thrown into
the agent at its ``yield`` as a :class:`RequestError`; a child that failed, as the
child's :class:`TaskError`. An agent that lets either through ends with that very error.
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, Optional, Type


class SpoolError(Exception):
    """The base of every error spool raises."""


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _parse(text: str) -> "tuple[str, Dict[str, Any]]":
    """An externally tagged serde enum as (kind, fields)."""
    try:
        value = json.loads(text) if text else None
    except ValueError:
        return "unknown", {}
    if isinstance(value, str):
        return _snake(value), {}
    if isinstance(value, dict) and len(value) == 1:
        ((variant, fields),) = value.items()
        return _snake(variant), fields if isinstance(fields, dict) else {"value": fields}
    return "unknown", {}


class _Carried(SpoolError):
    """An error spool hands to Python, carrying its JSON (so that one let through ends
    the task with the very error) and its kind and fields."""

    kind: str
    details: Dict[str, Any]

    def __init__(self, message: str, kind: str = "failed", details: Optional[Dict[str, Any]] = None,
                 _json: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.details = dict(details or {})
        self._spool_json = _json or json.dumps({"Failed": {"message": message}})


class RequestError(_Carried):
    """A request failed: its executor said so, it timed out, or it was refused.

    ``kind`` says which (``"failed"``, ``"rate_limited"``, ``"timeout"``,
    ``"invalid_arguments"``, ``"malformed"``, ``"executor_died"``, ``"canceled"``, ...),
    ``details`` holds the error's fields, and ``str(error)`` says it in words.
    """

    _spool_what = "request"


def _duration(seconds: float) -> Dict[str, int]:
    whole = int(seconds)
    return {"secs": whole, "nanos": int(round((seconds - whole) * 1e9))}


class RateLimited(RequestError):
    """The provider said to slow down. Raised by a Python executor (or scripted in a
    mock), it is a 429: spool backs off and retries as it does for its own executors;
    ``retry_after`` is the seconds the provider asked for, if it said."""

    def __init__(self, message: str = "", kind: str = "rate_limited",
                 details: Optional[Dict[str, Any]] = None, _json: str = "", *,
                 retry_after: Optional[float] = None) -> None:
        if not _json:
            after = _duration(retry_after) if retry_after is not None else None
            _json = json.dumps({"RateLimited": {"retry_after": after}})
            details = {"retry_after": after}
            message = message or "rate limited by the provider"
        super().__init__(message, kind, details, _json)


class Timeout(RequestError):
    """The request took longer than its executor allows (``after`` seconds)."""

    def __init__(self, message: str = "", kind: str = "timeout",
                 details: Optional[Dict[str, Any]] = None, _json: str = "", *,
                 after: float = 0.0) -> None:
        if not _json:
            _json = json.dumps({"Timeout": {"after": _duration(after)}})
            details = {"after": _duration(after)}
            message = message or f"timed out after {after}s"
        super().__init__(message, kind, details, _json)


class InvalidArguments(RequestError):
    """A tool's arguments do not fit its schema; the tool did not run."""

    def __init__(self, message: str = "", kind: str = "invalid_arguments",
                 details: Optional[Dict[str, Any]] = None, _json: str = "") -> None:
        if not _json:
            _json = json.dumps({"InvalidArguments": {"message": message}})
            details = {"message": message}
        super().__init__(message, kind, details, _json)


_REQUEST_KINDS: Dict[str, Type[RequestError]] = {
    "rate_limited": RateLimited,
    "timeout": Timeout,
    "invalid_arguments": InvalidArguments,
}


class TaskError(_Carried):
    """A task ended without a result.

    ``kind`` says how (``"failed"``: its code raised; ``"request_failed"``: it let a
    request's error through, in ``request_error``; ``"canceled"``; ``"deadline_exceeded"``;
    ``"panicked"``; ``"no_executor"``; ``"stalled"``; ...), ``details`` holds the error's
    fields, and ``str(error)`` says it in words.
    """

    request_error: Optional[RequestError]
    _spool_what = "task"

    def __init__(self, message: str, kind: str = "failed", details: Optional[Dict[str, Any]] = None,
                 _json: str = "") -> None:
        super().__init__(message, kind, details, _json)
        self.request_error = None
        inner = self.details.get("error")
        if kind in ("request_failed", "request") and isinstance(inner, (dict, str)):
            # The request error says what it said when it was thrown into the agent: the
            # task's message is "a request failed: " and the request error's own words.
            prefix = "a request failed: "
            words = message[len(prefix):] if message.startswith(prefix) else _request_message(inner)
            self.request_error = _request_error(json.dumps(inner), words)


class TaskCanceled(TaskError):
    """The task was canceled: from outside, with its parent, or by a failed dependency."""


class DeadlineExceeded(TaskError):
    """The task missed its deadline."""


_TASK_KINDS: Dict[str, Type[TaskError]] = {
    "canceled": TaskCanceled,
    "deadline_exceeded": DeadlineExceeded,
}


class ReplayError(SpoolError):
    """A store's journal (or a snapshot) could not be replayed."""


class Nondeterminism(ReplayError):
    """Today's agent code asks for something else than a recorded run did.

    Raised when a runtime opens a store (or a test scheduler restores a snapshot)
    whose tasks, run again from their recorded answers, yield other requests than they
    did: ``task`` and ``step`` (the poll, from 0) say where, ``request`` the request's
    number when one differs, ``recorded`` and ``got`` what was asked then and now.
    """

    task: int
    step: int
    request: Optional[int]
    recorded: str
    got: str

    def __init__(self, message: str, task: int = 0, step: int = 0, request: Optional[int] = None,
                 recorded: str = "", got: str = "") -> None:
        super().__init__(message)
        self.task, self.step, self.request = task, step, request
        self.recorded, self.got = recorded, got


class StoreError(SpoolError):
    """A store could not be opened, read or written."""


def _request_message(inner: Any) -> str:
    kind, fields = _parse(json.dumps(inner))
    message = fields.get("message")
    return str(message) if message is not None else kind.replace("_", " ")


def _request_error(text: str, message: str) -> RequestError:
    kind, fields = _parse(text)
    cls = _REQUEST_KINDS.get(kind, RequestError)
    return cls(message, kind, fields, _json=text)


def _task_error(text: str, message: str) -> TaskError:
    kind, fields = _parse(text)
    cls = _TASK_KINDS.get(kind, TaskError)
    return cls(message, kind, fields, _json=text)


def _nondeterminism(text: str, message: str) -> Nondeterminism:
    fields = json.loads(text)
    return Nondeterminism(message, fields["task"], fields["step"], fields.get("request"),
                          fields.get("recorded", ""), fields.get("got", ""))


def _replay_error(text: str, message: str) -> ReplayError:
    return ReplayError(message)


def _store_error(text: str, message: str) -> StoreError:
    return StoreError(message)
