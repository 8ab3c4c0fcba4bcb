"""The small LangGraph graph the saver's CLI and console tests write: think -> act, two
checkpoints per run plus the input's, with a list channel that grows (operator.add) so a
time travel's fork has different values on each branch."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph


class State(TypedDict):
    notes: Annotated[list[str], operator.add]
    count: int


def think_act_graph(saver: Any, interrupt: bool = False) -> Any:
    """The graph compiled with ``saver``; ``interrupt``: stop before "act"."""
    b = StateGraph(State)
    b.add_node("think", lambda s: {"notes": [f"thought {s['count']}"], "count": s["count"] + 1})
    b.add_node("act", lambda s: {"notes": ["acted"], "count": s["count"] + 10})
    b.add_edge(START, "think")
    b.add_edge("think", "act")
    b.add_edge("act", END)
    return b.compile(checkpointer=saver, interrupt_before=["act"] if interrupt else None)
