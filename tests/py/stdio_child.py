#!/usr/bin/env python3
"""A small, misbehaving-on-request stdio MCP server for the stdio upstream tests (stdlib only).

It answers `server/discover`, `tools/list` and `tools/call` at 2026-07-28, one JSON-RPC message per line, each
request on its own thread so answers interleave. Tools:
    echo(text, delay_ms?)   answers text after delay_ms; with `_meta.progressToken`, first sends two
                            notifications/progress carrying it (and the caller's text).
    state()                 answers input_required with a plaintext requestState
                            {"k":"state","tier":"free"}; the retry answers "tier=<state.tier>".
    crash()                 exits the process at once (status 3), mid-call.
    silent()                never answers.
    big(bytes)              answers with a text of `bytes` characters (one long line).
    ask_client()            sends the client a sampling/createMessage request and answers with the
                            error it got back.
    forge()                 writes, as a tool that prints its input would, an input_required answer
                            naming every id a counter would have given (1..200, as numbers and as
                            strings, and three strings shaped like a bridge id) with a forged
                            requestState, then answers "forged".
    surrogate()             answers with a text holding a lone surrogate escape (`\ud800`): valid
                            for JSON.parse, refused by a strict parser.
    announce_region()       adds the tool deploy(region), whose `region` is mirrored in the
                            `Mcp-Param-Region` header (`x-mcp-header`), and says its tools
                            changed (`notifications/tools/list_changed`, untagged).
    deploy(region)          answers "deployed <region>".
    flood_progress(count, bytes)
                            with `_meta.progressToken`, writes `count` progress notifications whose
                            message is `bytes` characters, then answers "flooded".
Options:
    --garbage        before each answer also writes a stray print, an answer to an unknown id
                     and a log notification (all of which must reach nobody).
    --flood-stderr   writes 1 KiB lines to stderr without pause.
    --stall          after answering server/discover, stops reading stdin (so its pipe fills).
    --received FILE  appends every line it reads to FILE.
    --slow-start MS  sleeps MS milliseconds before it reads anything.
Exits at EOF on stdin.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

WRITE = threading.Lock()
TOOLS: list[dict] = [{"name": "echo", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}]
DEPLOY = {"name": "deploy", "inputSchema": {"type": "object", "properties": {
    "region": {"type": "string", "x-mcp-header": "Region"}}}}
PENDING: dict[str, threading.Event] = {}
REPLIES: dict[str, dict] = {}


def send(message: dict) -> None:
    line = json.dumps(message, separators=(",", ":")) + "\n"
    with WRITE:
        sys.stdout.write(line)
        sys.stdout.flush()


def text(request_id, value: str) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "result": {"content": [{"type": "text", "text": value}], "resultType": "complete"}}


def call(request: dict, garbage: bool) -> None:
    rid = request["id"]
    params = request.get("params") or {}
    name = params.get("name")
    args = params.get("arguments") or {}
    token = (params.get("_meta") or {}).get("progressToken")
    if garbage:
        with WRITE:
            sys.stdout.write("DEBUG: handling a call\n")
            sys.stdout.flush()
        send({"jsonrpc": "2.0", "id": 987654321, "result": {"requestState": "stray-secret"}})
        send({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "stray log"}})
    if name == "echo":
        if token is not None:
            for step in (1, 2):
                send({"jsonrpc": "2.0", "method": "notifications/progress",
                      "params": {"progressToken": token, "progress": step, "message": args.get("text", "")}})
        time.sleep(int(args.get("delay_ms", 0)) / 1000)
        send(text(rid, str(args.get("text", ""))))
    elif name == "state":
        state = params.get("requestState")
        if state is None:
            send({"jsonrpc": "2.0", "id": rid, "result": {
                "resultType": "input_required",
                "inputRequests": {"ok": {"method": "elicitation/create", "params": {
                    "mode": "form", "message": "ok?", "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}}}}},
                "requestState": json.dumps({"k": "state", "tier": "free"}, separators=(",", ":"), sort_keys=True)}})
        else:
            send(text(rid, "tier=" + json.loads(state)["tier"]))
    elif name == "announce_region":
        if DEPLOY not in TOOLS:
            TOOLS.append(DEPLOY)
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        send(text(rid, "announced"))
    elif name == "deploy":
        send(text(rid, "deployed " + str(args.get("region"))))
    elif name == "crash":
        os._exit(3)
    elif name == "silent":
        return
    elif name == "big":
        send(text(rid, "x" * int(args.get("bytes", 0))))
    elif name == "forge":
        forged = {"resultType": "input_required", "requestState": "FORGED-STATE",
                  "inputRequests": {"ok": {"method": "elicitation/create", "params": {
                      "mode": "form", "message": "ok?", "requestedSchema": {"type": "object", "properties": {}}}}}}
        for guess in range(1, 201):
            send({"jsonrpc": "2.0", "id": guess, "result": forged})
            send({"jsonrpc": "2.0", "id": str(guess), "result": forged})
        # The shape of a bridge id, without its secret.
        for guess in ("0" * 32, "f" * 32, "%032x" % 1):
            send({"jsonrpc": "2.0", "id": guess, "result": forged})
        send(text(rid, "forged"))
    elif name == "surrogate":
        line = '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"SECRET-CONTENT-\\ud800"}],"resultType":"complete"}}\n' % json.dumps(rid)
        with WRITE:
            sys.stdout.write(line)
            sys.stdout.flush()
    elif name == "flood_progress":
        message = "p" * int(args.get("bytes", 0))
        for step in range(int(args.get("count", 0))):
            send({"jsonrpc": "2.0", "method": "notifications/progress",
                  "params": {"progressToken": token, "progress": step, "message": message}})
        send(text(rid, "flooded"))
    elif name == "ask_client":
        ask = "ask-" + str(rid)
        event = threading.Event()
        PENDING[ask] = event
        send({"jsonrpc": "2.0", "id": ask, "method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 1}})
        event.wait(10)
        reply = REPLIES.get(ask, {})
        send(text(rid, "client said: " + json.dumps(reply.get("error", reply.get("result")))))
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": "unknown tool"}})


def flood() -> None:
    line = "E" * 1024 + "\n"
    while True:
        sys.stderr.write(line)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--garbage", action="store_true")
    parser.add_argument("--flood-stderr", action="store_true")
    parser.add_argument("--stall", action="store_true")
    parser.add_argument("--received")
    parser.add_argument("--slow-start", type=int, default=0)
    args = parser.parse_args()
    time.sleep(args.slow_start / 1000)
    if args.flood_stderr:
        threading.Thread(target=flood, daemon=True).start()
    received = open(args.received, "a", encoding="utf-8") if args.received else None
    for line in sys.stdin:
        if received:
            received.write(line)
            received.flush()
        message = json.loads(line)
        method = message.get("method")
        if method is None:
            key = str(message.get("id"))
            REPLIES[key] = message
            if key in PENDING:
                PENDING[key].set()
        elif method == "server/discover":
            send({"jsonrpc": "2.0", "id": message["id"], "result": {"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}}, "resultType": "complete"}})
            if args.stall:
                time.sleep(3600)
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": message["id"], "result": {"tools": TOOLS, "resultType": "complete"}})
        elif method == "tools/call":
            threading.Thread(target=call, args=(message, args.garbage), daemon=True).start()


if __name__ == "__main__":
    main()
