"""JSON objects as spool hands them to Python: dicts whose keys read as attributes."""

from __future__ import annotations

from typing import Any


class Answer(dict):  # type: ignore[type-arg]
    """A JSON object from spool: a ``dict`` whose keys also read as attributes.

    ``answer["queries"]`` and ``answer.queries`` are the same value. ``answer.text`` is
    the ``"text"`` key, or, for an LLM answer (which has ``"content"``), its content. A
    key that is missing raises ``AttributeError`` (``KeyError`` with ``[]``).
    """

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            if name == "text" and "content" in self:
                return self["content"]
            raise AttributeError(
                f"the answer has no key {name!r} (its keys: {', '.join(map(repr, self)) or 'none'})"
            ) from None

    def __repr__(self) -> str:
        return f"Answer({dict.__repr__(self)})"
