"""LangChain / LangGraph tools run through the effect ledger (issue 30 item 14): an
irreversible tool is called once per tool call, with no glue code::

    charge = client.effects.tool(charge)            # a BaseTool, or a plain function
    graph.add_node("tools", ToolNode([charge, search]))

    @client.effects.tool(ttl=60, runner=os.environ["HOSTNAME"])   # as a decorator
    @tool
    def book_flight(flight: str, config: RunnableConfig) -> str: ...

LangGraph's ToolNode calls a tool with a ToolCall ``{"name", "args", "id", "type":
"tool_call"}`` and a config whose ``configurable.thread_id`` names the thread. The wrapper
(:class:`EffectTool`, a BaseTool with the inner tool's name, description and argument
schema, so ``bind_tools`` and ToolNode's injected arguments see the same tool) runs the
inner tool through ``effects.run`` under the effect key ``{key_prefix}{thread_id}/{id}``:
a tool call that is re-run after a crash or a retry (LangGraph re-runs a whole superstep
that did not finish, with the same tool call ids) gets the recorded ToolMessage (or
Command) back and the tool is not called again. A run that finds a dead runner's claim
calls it again with ``maybe_happened``: the tool sees the :class:`EffectContext` as
``config["configurable"]["statekeeper_effect"]`` (declare a ``config: RunnableConfig``
parameter) and should give ``ctx.idempotency_key`` to the external API (docs/effects.md).

The recorded result is the inner tool's answer to the ToolCall encoded by LangGraph's
JsonPlusSerializer (msgpack, never pickle: a ToolMessage, its artifact, a Command), stored
as the ledger's result ``[type, bytes]``. On a Client the wrapper's ``ainvoke`` runs the
sync ledger in an executor; on an AsyncClient only ``ainvoke`` works (``invoke`` raises
TypeError: a blocking call cannot drive the asyncio client). A call that is not a ToolCall
(no id) or has no thread_id raises ValueError: there is nothing stable to key it by.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_core.runnables import RunnableConfig, ensure_config
from langchain_core.runnables.config import run_in_executor
from langchain_core.tools import BaseTool
from langchain_core.tools import tool as as_tool
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from pydantic import ConfigDict

from .plan import EffectContext

__all__ = ["CONTEXT_KEY", "EffectTool", "effect_tool"]

CONTEXT_KEY = "statekeeper_effect"  # config["configurable"][CONTEXT_KEY]: the EffectContext
SERDE = JsonPlusSerializer()  # pickle_fallback is off by default: nothing is pickled


class EffectTool(BaseTool):
    """``inner`` run through the effect ledger ``ledger`` (see the module docstring)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    inner: BaseTool
    ledger: Any  # Effects or AsyncEffects
    key_prefix: str = "tool/"
    ttl: float = 30.0
    timeout: float | None = None
    runner: str | None = None
    # the inner tool's function: ToolNode reads its annotations for injected arguments
    func: Callable[..., Any] | None = None
    coroutine: Callable[..., Any] | None = None

    def get_input_schema(self, config: RunnableConfig | None = None) -> Any:
        return self.inner.get_input_schema(config)

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("EffectTool runs through invoke/ainvoke")

    def effect_key(self, call: Any, config: RunnableConfig | None) -> str:
        """``{key_prefix}{thread_id}/{tool_call_id}``; ValueError without either."""
        if not (isinstance(call, dict) and call.get("type") == "tool_call" and call.get("id")):
            raise ValueError(
                f"tool {self.name!r} runs through the effect ledger, keyed by its tool call "
                f"id: call it with a ToolCall ({{'name', 'args', 'id', 'type': 'tool_call'}}, "
                f"as LangGraph's ToolNode does), not {type(call).__name__}"
            )
        thread = ensure_config(config).get("configurable", {}).get("thread_id")
        if thread is None or thread == "":
            raise ValueError(
                f"tool {self.name!r} runs through the effect ledger, keyed by thread: the "
                f"config has no configurable.thread_id"
            )
        return f"{self.key_prefix}{thread}/{call['id']}"

    def _options(self) -> dict[str, Any]:
        return {"ttl": self.ttl, "timeout": self.timeout, "runner": self.runner}

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        if not self.ledger.blocking:
            raise TypeError(
                f"tool {self.name!r} is on an AsyncClient's effect ledger: call ainvoke "
                f"(an async graph: graph.ainvoke / astream)"
            )
        key = self.effect_key(input, config)

        def call(ctx: EffectContext) -> list[Any]:
            return _dump(self.inner.invoke(input, _with_context(config, ctx), **kwargs))

        return _load(self.ledger.run(key, call, **self._options()))

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        if self.ledger.blocking:  # a Client: its blocking ledger
            return await run_in_executor(config, self.invoke, input, config, **kwargs)
        key = self.effect_key(input, config)

        async def call(ctx: EffectContext) -> list[Any]:
            answer = await self.inner.ainvoke(input, _with_context(config, ctx), **kwargs)
            return _dump(answer)

        return _load(await self.ledger.run(key, call, **self._options()))


def _with_context(config: RunnableConfig | None, ctx: EffectContext) -> RunnableConfig:
    config = ensure_config(config)
    return {**config, "configurable": {**config.get("configurable", {}), CONTEXT_KEY: ctx}}


def _dump(answer: Any) -> list[Any]:
    type_, data = SERDE.dumps_typed(answer)
    return [type_, data]


def _load(stored: Any) -> Any:
    return SERDE.loads_typed((stored[0], stored[1]))


def effect_tool(
    ledger: Any,
    tool: Any,
    *,
    key_prefix: str = "tool/",
    ttl: float = 30.0,
    timeout: float | None = None,
    runner: str | None = None,
) -> EffectTool:
    """``tool`` (a BaseTool, or a function made one with langchain's ``@tool``) run through
    ``ledger``."""
    inner = tool if isinstance(tool, BaseTool) else as_tool(tool)
    if not isinstance(inner, BaseTool):
        raise TypeError(f"not a tool or a function: {tool!r}")
    return EffectTool(
        name=inner.name,
        description=inner.description,
        args_schema=inner.args_schema,
        return_direct=inner.return_direct,
        inner=inner,
        ledger=ledger,
        key_prefix=key_prefix,
        ttl=ttl,
        timeout=timeout,
        runner=runner,
        func=getattr(inner, "func", None),
        coroutine=getattr(inner, "coroutine", None),
    )
