"""Child process of test_agent_fence.py: one agent instance that holds the agent's lock
and believes it holds it for as long as nobody tells it otherwise (lock_child.py's
scenario, for the agent layer).

Usage: python agent_fence_child.py ENDPOINTS NS AGENT TTL
It takes lock "agent/AGENT" (a lease of TTL seconds, kept alive by the client's keeper
thread), hydrates Agent(AGENT, fence=lock) and prints "ACQUIRED <fence>", then for each
line on stdin: "log" -> agent.log("add", 1), prints "OK <seq>"; "checkpoint" ->
agent.checkpoint(its state + 1), prints "OK <n>"; either prints "FENCE_MISMATCH
<holder_fence>" when refused. "exit" ends it. A SIGSTOP freezes all of it, keeper
included: its lease then expires while it still holds its old fence.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from statekeeper.client import Client, FenceMismatch  # noqa: E402
from statekeeper.client.agent import Agent  # noqa: E402
from tests.integration.agent_helpers import reducer  # noqa: E402


def main() -> None:
    endpoints, ns, agent_id, ttl = sys.argv[1:5]
    with Client(endpoints.split(","), ns=ns) as c:
        lock = c.lock(f"agent/{agent_id}", ttl=float(ttl))
        agent = Agent(c, agent_id, reducer=reducer, initial={}, fence=lock)
        state = agent.hydrate().state
        print("ACQUIRED", lock.fence, flush=True)
        for line in sys.stdin:
            command = line.strip()
            try:
                if command == "log":
                    print("OK", agent.log("add", 1).last_seq, flush=True)
                    state = {**state, "total": state.get("total", 0) + 1}
                elif command == "checkpoint":
                    print("OK", agent.checkpoint(state).n, flush=True)
                elif command == "exit":
                    return
            except FenceMismatch as e:
                print("FENCE_MISMATCH", e.holder_fence, flush=True)


if __name__ == "__main__":
    main()
