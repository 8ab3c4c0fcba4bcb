"""Child process of test_locks.py's Kleppmann scenario: one lock holder that believes it
holds the lock for as long as nobody tells it otherwise.

Usage: python lock_child.py ENDPOINTS NS NAME TTL VALUE
It takes the lock (a lease of TTL seconds, kept alive by the client's keeper thread),
prints "ACQUIRED <fence>", then for each line on stdin: "write" -> put("shared", VALUE,
fence=lock) and prints "OK <revision>" or "FENCE_MISMATCH <holder_fence>"; "release" ->
releases the lock and exits. A SIGSTOP freezes all of it, keeper included: its lease then
expires while it still holds its old fence.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from statekeeper.client import Client, FenceMismatch  # noqa: E402


def main() -> None:
    endpoints, ns, name, ttl, value = sys.argv[1:6]
    with Client(endpoints.split(","), ns=ns) as c:
        lock = c.lock(name, ttl=float(ttl), owner=value)
        print("ACQUIRED", lock.fence, flush=True)
        for line in sys.stdin:
            command = line.strip()
            if command == "write":
                try:
                    r = c.put("shared", value, fence=lock)
                    print("OK", r.revision, flush=True)
                except FenceMismatch as e:
                    print("FENCE_MISMATCH", e.holder_fence, flush=True)
            elif command == "release":
                lock.release()
                print("RELEASED", flush=True)
                return


if __name__ == "__main__":
    main()
