"""Child process of test_langgraph_graph.py: one agent process running a real LangGraph
graph with StatekeeperSaver as its checkpointer.

The graph: `agent` asks for a tool call; `tools` (LangGraph's prebuilt ToolNode) runs the
`lookup` tool, whose side effect is a line appended to SIDE_EFFECTS; `research` runs in the
same superstep and, in the first process, blocks until the parent kills it; `approve`
interrupts for a human decision; `answer` writes the answer.

Usage: python langgraph_child.py MODE ENDPOINTS_JSON THREAD_ID WORKDIR
  MODE start    invoke with the question (killed by the parent while `research` blocks)
  MODE resume   invoke(None): continue from the last checkpoint up to the interrupt
  MODE approve  invoke(Command(resume="yes")): finish the run
Prints one line of JSON with the invoke's result.
"""

from __future__ import annotations

import json
import operator
import os
import sys
import time
from pathlib import Path
from typing import Annotated, TypedDict

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.graph.message import add_messages  # noqa: E402
from langgraph.prebuilt import ToolNode  # noqa: E402
from langgraph.types import Command, interrupt  # noqa: E402

from statekeeper.client.langgraph import StatekeeperSaver  # noqa: E402

MODE, ENDPOINTS, THREAD, WORKDIR = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
SIDE_EFFECTS = WORKDIR / "side-effects.log"
RESEARCH_MAY_FINISH = WORKDIR / "research-may-finish"


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    notes: Annotated[list[str], operator.add]
    approved: str
    answer: str


@tool
def lookup(city: str) -> str:
    """Look up the weather of a city (an irreversible call: it is logged)."""
    with open(SIDE_EFFECTS, "a") as f:
        f.write(f"lookup {city} pid={os.getpid()}\n")
        f.flush()
        os.fsync(f.fileno())
    return f"sunny in {city}"


def agent(state: State) -> dict:
    call = {"name": "lookup", "args": {"city": "Paris"}, "id": "call-1", "type": "tool_call"}
    return {"messages": [AIMessage(content="", tool_calls=[call])]}


def research(state: State) -> dict:
    while not RESEARCH_MAY_FINISH.exists():  # the first process is killed here
        time.sleep(0.05)
    return {"notes": [f"researched by pid {os.getpid()}"]}


def approve(state: State) -> dict:
    decision = interrupt({"question": "send the answer?", "tool": state["messages"][-1].content})
    return {"approved": decision}


def answer(state: State) -> dict:
    return {"answer": f"{state['messages'][-1].content}; approved={state['approved']}"}


def build(saver: StatekeeperSaver):
    g = StateGraph(State)
    g.add_node("agent", agent)
    g.add_node("tools", ToolNode([lookup]))
    g.add_node("research", research)
    g.add_node("approve", approve)
    g.add_node("answer", answer)
    g.add_edge(START, "agent")
    g.add_edge("agent", "tools")
    g.add_edge("agent", "research")
    g.add_edge(["tools", "research"], "approve")
    g.add_edge("approve", "answer")
    g.add_edge("answer", END)
    return g.compile(checkpointer=saver)


def main() -> None:
    config = {"configurable": {"thread_id": THREAD}}
    with StatekeeperSaver.from_endpoints(ENDPOINTS) as saver:
        graph = build(saver)
        if MODE == "start":
            print("STARTED", flush=True)
            arg = {"messages": [HumanMessage("What is the weather in Paris?")]}
        elif MODE == "resume":
            arg = None
        else:
            arg = Command(resume="yes")
        out = graph.invoke(arg, config, durability="sync")
        interrupts = [i.value for i in out.get("__interrupt__", ())]
        print(json.dumps({"answer": out.get("answer"), "notes": out.get("notes"), "interrupts": interrupts}), flush=True)


if __name__ == "__main__":
    main()
