#!/usr/bin/env python3
"""A legacy MCP server with an import flow that trusts any handle and applies every write.

The upstream of the handle and idempotency tests: built on the SDK's low-level
`mcp.server.lowlevel.Server`, it hands out plain import ids and applies whatever it is sent,
as servers written before 2026-07-28 do. It does not check who owns an import id, and it
applies a retried write twice. Through the sidecar, neither may happen.

Served over Streamable HTTP (uvicorn) on 127.0.0.1, path `/mcp`.

Usage:
    python tests/py/import_server.py --port 0 [--json-response] [--no-stdin-watchdog]

Prints exactly one line `LISTENING <port>` once it accepts connections; exits 0 on SIGTERM and,
unless `--no-stdin-watchdog`, when its stdin reaches EOF.

Tools:
    start_import(name)              a new import; structuredContent {"importId": "imp-<n>"}, and
                                    the id echoed in its text ("started import imp-<n>").
    append_rows(importId, rows, delay_ms?)   applies `rows` (a list) to the import after an
                                    optional delay; structuredContent {"importId", "applied", "total"}.
                                    An unknown import id is a tool error (isError).
    commit_import(importId)         marks the import committed; structuredContent {"importId",
                                    "committed": true, "total"}.
Debug endpoints (outside the SDK's Host check):
    GET  /debug/counts   {"<importId>": {"rows": total rows applied, "appends": calls applied,
                         "committed": bool}}
    GET  /debug/calls    every tools/call that reached a handler: {"name", "arguments"}
    POST /debug/reset    forgets every import and call
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any

import mcp_types as types
import peer_server
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

log = logging.getLogger("import_server")

# All writers run on the event loop thread: plain containers are enough.
IMPORTS: dict[str, dict[str, Any]] = {}
CALLS: list[dict[str, Any]] = []
NUMBERS = itertools.count(1)

Ctx = ServerRequestContext[Any, Any]


async def debug_counts(_: Request) -> Response:
    return JSONResponse(IMPORTS)


async def debug_calls(_: Request) -> Response:
    return JSONResponse(CALLS)


async def debug_reset(_: Request) -> Response:
    IMPORTS.clear()
    CALLS.clear()
    return JSONResponse({"ok": True})


def result(text: str, structured: dict[str, Any] | None = None, is_error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=text)], structured_content=structured, is_error=is_error
    )


def the_import(args: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
    import_id = args.get("importId")
    return str(import_id), IMPORTS.get(str(import_id))


async def start_import(args: dict[str, Any]) -> types.CallToolResult:
    import_id = f"imp-{next(NUMBERS)}"
    IMPORTS[import_id] = {"rows": 0, "appends": 0, "committed": False, "name": str(args.get("name", ""))}
    return result(f"started import {import_id}", {"importId": import_id})


async def append_rows(args: dict[str, Any]) -> types.CallToolResult:
    delay_ms = args.get("delay_ms") or 0
    if delay_ms:
        await asyncio.sleep(float(delay_ms) / 1000)
    import_id, entry = the_import(args)
    if entry is None:
        return result(f"unknown import {import_id}", is_error=True)
    rows = args.get("rows") or []
    entry["rows"] += len(rows)
    entry["appends"] += 1
    return result(
        f"applied {len(rows)} rows",
        {"importId": import_id, "applied": len(rows), "total": entry["rows"]},
    )


async def commit_import(args: dict[str, Any]) -> types.CallToolResult:
    import_id, entry = the_import(args)
    if entry is None:
        return result(f"unknown import {import_id}", is_error=True)
    entry["committed"] = True
    return result(f"committed {import_id}", {"importId": import_id, "committed": True, "total": entry["rows"]})


TOOLS = {
    "start_import": (start_import, {"type": "object", "properties": {"name": {"type": "string"}}}),
    "append_rows": (
        append_rows,
        {
            "type": "object",
            "properties": {"importId": {}, "rows": {"type": "array"}, "delay_ms": {"type": "number"}},
            "required": ["importId", "rows"],
        },
    ),
    "commit_import": (commit_import, {"type": "object", "properties": {"importId": {}}, "required": ["importId"]}),
}


async def list_tools(ctx: Ctx, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    return types.ListToolsResult(
        tools=[types.Tool(name=name, input_schema=schema) for name, (_, schema) in TOOLS.items()]
    )


async def call_tool(ctx: Ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    entry = TOOLS.get(params.name)
    if entry is None:
        raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {params.name}")
    args = dict(params.arguments or {})
    CALLS.append({"name": params.name, "arguments": args})
    return await entry[0](args)


def build_app(json_response: bool) -> ASGIApp:
    server: Server[Any] = Server(
        "legacy-import",
        version="0.1.0",
        get_tool_input_schema=lambda name: TOOLS[name][1] if name in TOOLS else None,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
    return server.streamable_http_app(
        json_response=json_response,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        host="127.0.0.1",
        custom_starlette_routes=[
            Route("/debug/counts", debug_counts, methods=["GET"]),
            Route("/debug/calls", debug_calls, methods=["GET"]),
            Route("/debug/reset", debug_reset, methods=["POST"]),
        ],
    )


def main() -> None:
    args = peer_server.arguments(__doc__).parse_args()
    peer_server.serve(args, build_app(args.json_response))


if __name__ == "__main__":
    main()
