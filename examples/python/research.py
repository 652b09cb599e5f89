"""A research agent on spool's runtime: plan with the model, search in parallel, ask a
person before publishing.

    python examples/python/research.py "tides"             # a scripted model, offline
    OPENAI_BASE_URL=... python examples/python/research.py "tides"   # a real endpoint

The run is durable: its store (``research.spool`` in the working directory) keeps every
answer. Stop the program at the question (Ctrl-C, or kill it) and start it again: the
task goes on from the store, asking the same question, and no model call or search is
made twice.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, Generator, List

import spool

# A tiny offline corpus, so that the example needs no network for its tool.
CORPUS = {
    "tide": "Tides are the rise and fall of sea levels caused by the Moon and the Sun.",
    "moon": "The Moon's gravity pulls the ocean into two bulges, one on each side of Earth.",
    "spring": "Spring tides come at new and full moon, when Sun and Moon pull in line.",
    "neap": "Neap tides come at the quarter moons, when Sun and Moon pull at right angles.",
}


@spool.tool
def search(q: str, limit: int = 2) -> List[str]:
    """Searches the notes for passages about the query."""
    words = q.lower().split()
    hits = [text for key, text in sorted(CORPUS.items()) if any(key in w for w in words)]
    return hits[:limit]


@spool.agent("research")
def research(cx: spool.Cx, topic: str) -> Generator[Any, Any, Dict[str, Any]]:
    """Plans searches for ``topic``, runs them at once, and asks before publishing."""
    plan = yield cx.llm(messages=[
        {"role": "system", "content": "Answer with three short web search queries, one a line."},
        {"role": "user", "content": f"Plan: {topic}"},
    ])
    queries = [line.strip("-*0123456789. ") for line in plan.text.splitlines() if line.strip()]
    hits = yield cx.all([cx.tool("search", {"q": q}) for q in queries])
    findings = sorted({hit for found in hits for hit in found})
    ok = yield cx.confirm(f"Publish {len(findings)} findings?")
    return {"plan": plan.text, "findings": findings, "published": ok}


def scripted_llm(payload: Dict[str, Any]) -> Dict[str, Any]:
    """The model when no endpoint is configured: the same plan for every topic."""
    return {"content": "tide tables\nmoon and tides\nspring and neap tides", "finish_reason": "stop"}


def make_runtime(store: str = "research.spool") -> spool.Runtime:
    """The runtime: the real model when ``OPENAI_BASE_URL`` is set, else the script."""
    llm: Any = spool.OpenAI() if os.environ.get("OPENAI_BASE_URL") else scripted_llm
    return spool.Runtime(agents=[research], tools=[search], llm=llm, store=store)


def answer(question: Any) -> bool:
    """The person's answer: asked on the terminal, or yes when there is none."""
    if sys.stdin.isatty():
        return input(f"task {question.task} asks: {question.question} [y/N] ").strip().lower() == "y"
    print(f"task {question.task} asks: {question.question} -> yes")
    return True


def main(topic: str) -> None:
    with make_runtime() as rt:
        # A task the store holds goes on first: re-run from its recorded answers, it
        # waits again at the question it had asked, and no request is sent twice.
        rt.run_until_idle()
        waiting = rt.confirmations()
        if waiting:
            task = waiting[0].task
            print(f"task {task} recovered from the store")
        else:
            task = rt.submit("research", topic=topic)
            rt.run_until_idle()
        for question in rt.confirmations():
            rt.answer(question, answer(question))
        rt.run_until_idle()
        result = rt.result(task)
        print(f"task {task}: {rt.state(task).state}")
        print("plan:", result["plan"].replace("\n", " | "))
        for finding in result["findings"]:
            print(" -", finding)
        print("published:", result["published"])


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tides")
