"""``client.effects.tool(t)`` in a LangGraph graph against a real cluster (issue 30 item
14): a ToolNode runs a charge tool and a tool that crashes the superstep (a BaseException,
as a killed process: nothing of the step is checkpointed); the resumed graph re-runs the
ToolNode with the same tool call ids, and the charge tool is not called again: its recorded
ToolMessage comes back. Through both clients (invoke on a Client, ainvoke on an
AsyncClient), and the errors of a call that cannot be keyed."""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph.prebuilt")

from langchain_core.messages import AIMessage, AnyMessage, ToolMessage  # noqa: E402
from langchain_core.runnables import RunnableConfig  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.graph.message import add_messages  # noqa: E402
from langgraph.prebuilt import ToolNode  # noqa: E402

from statekeeper.client import AsyncClient, Client  # noqa: E402
from statekeeper.cluster.supervisor import LocalCluster  # noqa: E402

pytestmark = pytest.mark.integration


class Crash(BaseException):
    """The process dies mid-superstep (not an Exception: ToolNode does not turn it into a
    ToolMessage)."""


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def _urls(lc: LocalCluster) -> list[str]:
    return [lc.url(i) for i in lc.node_ids]


CALLS = [
    {"name": "charge", "args": {"amount": 4000}, "id": "call-charge", "type": "tool_call"},
    {"name": "flaky", "args": {}, "id": "call-flaky", "type": "tool_call"},
]


def _agent(state: State) -> dict[str, Any]:
    return {"messages": [AIMessage("", tool_calls=CALLS)]}


def _graph(tools: list[Any]) -> Any:
    g = StateGraph(State)
    g.add_node("agent", _agent)
    g.add_node("tools", ToolNode(tools))
    g.add_edge(START, "agent")
    g.add_edge("agent", "tools")
    g.add_edge("tools", END)
    return g.compile(checkpointer=InMemorySaver())


def _tools(c: Any, charged: list[Any], crash: list[bool], is_done: Any) -> list[Any]:
    @tool
    def charge(amount: int, config: RunnableConfig) -> str:
        """Charge the card (irreversible)."""
        ctx = config["configurable"].get("statekeeper_effect")  # None: not through the ledger
        charged.append(ctx)
        return f"receipt-{len(charged)}-{amount}"

    @tool
    def flaky() -> str:
        """Crashes the superstep once, after charge's effect is recorded."""
        if crash:
            crash.clear()
            deadline = time.monotonic() + 10
            while not is_done() and time.monotonic() < deadline:  # (10 s: no ledger)
                time.sleep(0.02)
            raise Crash
        return "ok"

    return [c.effects.tool(charge, ttl=5), flaky]


def _check(out: dict[str, Any], charged: list[Any], thread: str) -> None:
    by_id = {m.tool_call_id: m for m in out["messages"] if isinstance(m, ToolMessage)}
    assert by_id["call-charge"].content == "receipt-1-4000"  # the recorded one
    assert by_id["call-flaky"].content == "ok"
    assert len(charged) == 1 and charged[0].attempt == 1  # called once, crash and all
    assert charged[0].key == f"tool/{thread}/call-charge"


def test_a_tool_call_rerun_after_a_crash_returns_the_recorded_result(
    shared_cluster: LocalCluster,
) -> None:
    thread, charged, crash = f"t-{uuid.uuid4().hex[:8]}", [], [True]
    with Client(_urls(shared_cluster), ns=f"fxt-{uuid.uuid4().hex[:8]}") as c:
        key = f"tool/{thread}/call-charge"

        def is_done() -> bool:
            record = c.effects.get(key)
            return record is not None and record.done

        graph = _graph(_tools(c, charged, crash, is_done))
        config = {"configurable": {"thread_id": thread}}
        with pytest.raises(Crash):
            graph.invoke({"messages": []}, config)
        assert len(charged) == 1 and is_done()
        out = graph.invoke(None, config)  # resume: the ToolNode runs both calls again
        _check(out, charged, thread)


async def test_async_a_tool_call_rerun_after_a_crash_returns_the_recorded_result(
    shared_cluster: LocalCluster,
) -> None:
    thread, charged, crash = f"t-{uuid.uuid4().hex[:8]}", [], [True]
    ns = f"fxt-{uuid.uuid4().hex[:8]}"
    async with AsyncClient(_urls(shared_cluster), ns=ns) as c:
        with Client(_urls(shared_cluster), ns=ns) as probe:  # flaky polls from its thread

            def is_done() -> bool:
                record = probe.effects.get(f"tool/{thread}/call-charge")
                return record is not None and record.done

            graph = _graph(_tools(c, charged, crash, is_done))
            config = {"configurable": {"thread_id": thread}}
            with pytest.raises(Crash):
                await graph.ainvoke({"messages": []}, config)
            out = await graph.ainvoke(None, config)
            _check(out, charged, thread)


def test_a_call_without_a_tool_call_id_or_thread_is_refused(
    shared_cluster: LocalCluster,
) -> None:
    calls: list[int] = []
    with Client(_urls(shared_cluster), ns=f"fxt-{uuid.uuid4().hex[:8]}") as c:

        @c.effects.tool(key_prefix="pay/")
        def pay(amount: int) -> int:
            """Pay."""
            calls.append(amount)
            return amount

        assert pay.name == "pay" and "amount" in pay.get_input_schema().model_fields
        with pytest.raises(ValueError, match="ToolCall"):
            pay.invoke({"amount": 1}, {"configurable": {"thread_id": "t"}})
        call = {"name": "pay", "args": {"amount": 2}, "id": "c-1", "type": "tool_call"}
        with pytest.raises(ValueError, match="thread_id"):
            pay.invoke(call)
        first = pay.invoke(call, {"configurable": {"thread_id": "t"}})
        again = pay.invoke(call, {"configurable": {"thread_id": "t"}})
        assert first == again and first.content == "2" and calls == [2]
        assert c.effects.get("pay/t/c-1").done
