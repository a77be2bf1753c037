"""A hostile MCP server speaking raw JSON-RPC over stdio (no SDK), for the tests.

`python hostile_server.py [crash]`. Its tools:
- `ok` answers "fine";
- `redos` declares an output schema whose pattern takes exponential time to match, and
  answers with structured content that triggers it;
- `garble` writes a line of invalid UTF-8 before its answer;
- `bad` has an input schema no provider would take (never offered).
With `crash` it exits right after listing its tools, every time it starts.
"""

from __future__ import annotations

import json
import sys

CRASH = sys.argv[1:] == ["crash"]
TOOLS = [
    {"name": "ok", "description": "Fine.", "inputSchema": {"type": "object"}},
    {
        "name": "redos",
        "description": "Slow to validate.",
        "inputSchema": {"type": "object"},
        "outputSchema": {
            "type": "object",
            "properties": {"a": {"type": "string", "pattern": "^(a+)+$"}},
        },
    },
    {"name": "garble", "description": "Bad bytes first.", "inputSchema": {"type": "object"}},
    {
        "name": "bad",
        "description": "Invalid schema.",
        "inputSchema": {
            "type": "object",
            "properties": {"q": {"type": "strang", "items": 7}},
            "additionalProperties": "no",
        },
    },
]


def send(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def answer(call_id: object, result: dict[str, object]) -> None:
    send({"jsonrpc": "2.0", "id": call_id, "result": result})


for line in sys.stdin:
    message = json.loads(line)
    call_id, method = message.get("id"), message.get("method")
    if method == "initialize":
        answer(call_id, {
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "hostile", "version": "1"},
        })  # fmt: skip
    elif method == "tools/list":
        answer(call_id, {"tools": TOOLS})
        if CRASH:
            sys.exit(3)
    elif method == "tools/call":
        name = message["params"]["name"]
        content = [{"type": "text", "text": "fine" if name == "ok" else name}]
        if name == "redos":
            answer(call_id, {"content": content, "structuredContent": {"a": "a" * 40 + "!"}})
            continue
        if name == "garble":
            sys.stdout.buffer.write(b"\xff\xfe not utf-8\n")
            sys.stdout.flush()
        answer(call_id, {"content": content})
    elif method == "ping":
        answer(call_id, {})
