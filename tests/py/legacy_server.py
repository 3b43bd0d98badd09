#!/usr/bin/env python3
"""A deliberately vulnerable "legacy" MCP server: plaintext `requestState`, trusted on retry.

This is the upstream mcp-state-guard exists to protect. It is built on the SDK's low-level
`mcp.server.lowlevel.Server`, which (unlike the high-level `MCPServer`) installs no
`RequestStateBoundary`: every `requestState` it emits is compact plaintext JSON and every
`requestState` it receives is parsed and believed. Tampering `"tier":"free"` into
`"tier":"enterprise"` on the retry of `provision` works against it directly; through the sidecar it
must not.

Served over Streamable HTTP (uvicorn) on 127.0.0.1, path `/mcp`, both eras on one endpoint:
2026-07-28 (sessionless, multi round-trip `input_required` results) and the 2025 session era
(initialize, `Mcp-Session-Id`, real server->client elicitation over SSE).

Usage:
    python tests/py/legacy_server.py --port 0 [--json-response] [--no-host-check]
                                     [--no-stdin-watchdog]
    python tests/py/legacy_server.py --stdio

With `--stdio` the same tools are served over stdin/stdout by the SDK's `stdio_server` (one
JSON-RPC message per line; logs on stderr), as a stdio server behind `mcp-state-guard run
--upstream-command -- python tests/py/legacy_server.py --stdio`; no `/debug/*` there.

With `--port 0` a free port is bound; once the server accepts connections exactly one line
`LISTENING <port>` is printed to stdout. Everything else goes to stderr. The process exits with
status 0 on SIGTERM/SIGINT and, unless `--no-stdin-watchdog`, when its stdin reaches EOF, so a test
harness that pipes stdin takes the server down with it even if it dies without cleaning up.
(Started from a non-interactive shell with `&`, stdin is /dev/null and the watchdog fires at once:
use `--no-stdin-watchdog` there.)

Debug endpoints beside the MCP app (outside the SDK's Host check):
    GET  /debug/seen    every request the MCP runner received in this process, in order:
                        {"era", "id", "method", "name", "requestState", "inputResponses"}
                        (`requestState` verbatim, whatever its JSON type, null when absent;
                        `inputResponses` is the sorted key list or null).
    GET  /debug/http    every HTTP request that reached /mcp: {"method", "path", "query",
                        "headers", "body"} (body as text, truncated to 64 KiB).
    POST /debug/reset   clears both lists.
Recording happens before the SDK validates params, so even a request the SDK itself rejects
(a non-string `requestState`, say) shows up: "not in /debug/seen" really means "never arrived".

Tools (2026-07-28 unless noted). State shapes are compact JSON with sorted keys:
    provision(name)     asks elicitation "region"; state {"k":"provision","name":N,"r":1,"tier":"free"};
                        retry answers "Provisioned <state.name> (tier=<state.tier>) in <region>".
    two_step            asks "first" (state {"k":"two_step","r":1}), then "second"
                        (state {"first":A,"k":"two_step","r":2}), then "two_step done first=A second=B".
    state_only          round 1 carries only requestState {"job":"job-42","k":"state_only","r":1};
                        round 2 answers "state_only done <state.job>".
    progress_ask(delay_ms?)  with `_meta.progressToken` emits 3 notifications/progress (and one
                        notifications/message when `_meta` opts into logging) before every
                        answer; asks elicitation "confirm" (state {"k":"progress_ask","r":1});
                        retry answers "progress_ask done ok=<bool>".
    echo(text)          never asks; answers text.
    param_echo(region)  never asks; `region` carries "x-mcp-header": "Region", so clients mirror it
                        into an `Mcp-Param-Region` header that the SDK cross-checks.
    nonstring_state     malformed upstream: an input_required whose requestState is the JSON
                        number 12345 (injected by middleware after the SDK's result validation).
    legacy_elicit       2025 era: a real server->client elicitation/create over the session's SSE
                        stream (SSE mode only; JSON mode has no back-channel). At 2026 it asks
                        through input_required instead (state {"k":"legacy_elicit","r":1}).
    test_input_required_result_*   fixtures of the official conformance suite 0.2.0-alpha.12
                        (`input-required-result-*` scenarios), see "Conformance fixtures" below.
Only echo, param_echo and legacy_elicit serve a 2025-era session; every other tool, prompt and
config:// read answers a 2025 session with -32602 (input_required does not exist before 2026-07-28).
Prompts: greet_prompt asks "name" (state {"k":"greet_prompt","r":1,"style":"formal"});
         test_input_required_result_prompt (conformance fixture, no state).
Resources: template config://{env}; resources/read asks "confirm"
         (state {"env":E,"k":"config","r":1,"role":"viewer"}) and answers "config for E (role=R)";
         info://server is a plain resource that never asks.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types
import peer_server
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError, NoBackChannelError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("legacy_server")

SERVER_NAME = "legacy-plaintext-state"
SERVER_VERSION = "0.1.0"
CLIENT_CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
HTTP_BODY_RECORD_LIMIT = 64 * 1024

# ---------------------------------------------------------------------------------------------
# What the process has seen (served by /debug/*)
# ---------------------------------------------------------------------------------------------

# Plain lists are enough: all writers run on the event loop thread.
SEEN: list[dict[str, Any]] = []
HTTP_SEEN: list[dict[str, Any]] = []


async def record_request(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Server middleware: record what arrived before the SDK validates params.

    Runs outermost, ahead of params validation, so requests the SDK rejects (a number as
    `requestState`, a malformed `inputResponses`) are recorded too.
    """
    if ctx.request_id is not None:
        params = ctx.params if isinstance(ctx.params, dict) else {}
        responses = params.get("inputResponses")
        SEEN.append(
            {
                "era": "2026" if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS else "2025",
                "id": ctx.request_id,
                "method": ctx.method,
                "name": params.get("uri") if ctx.method == "resources/read" else params.get("name"),
                "requestState": params.get("requestState"),
                "inputResponses": sorted(responses) if isinstance(responses, dict) else responses,
            }
        )
    return await call_next(ctx)


async def inject_nonstring_state(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Server middleware: turn `nonstring_state`'s requestState into a JSON number.

    The SDK validates a handler's result against the 2026 schema (`ServerRunner._serialize`), so a
    handler cannot emit a non-string state. A middleware's return value is trusted as-is
    (`runner.py`: "a middleware ... is trusted to return its own well-formed result"), which is
    the seam this malformed-upstream fixture uses.
    """
    result = await call_next(ctx)
    params = ctx.params if isinstance(ctx.params, dict) else {}
    if (
        ctx.method == "tools/call"
        and params.get("name") == "nonstring_state"
        and isinstance(result, dict)
        and result.get("resultType") == "input_required"
    ):
        result = {**result, "requestState": 12345}
    return result


class RecordHttp:
    """ASGI wrapper recording every HTTP request to the MCP endpoint (headers and body).

    Lets tests assert what the upstream received byte-for-byte (Host rewrite, forwarded
    `Mcp-*` headers, identity encoding) and that a rejected request never arrived at all.
    """

    def __init__(self, app: ASGIApp, path: str) -> None:
        self.app = app
        self.path = path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != self.path:
            await self.app(scope, receive, send)
            return
        entry: dict[str, Any] = {
            "method": scope["method"],
            "path": scope["path"],
            "query": scope.get("query_string", b"").decode("latin-1"),
            "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in scope["headers"]],
            "body": "",
        }
        HTTP_SEEN.append(entry)
        body = bytearray()

        async def recording_receive() -> Message:
            message = await receive()
            if message["type"] == "http.request" and len(body) < HTTP_BODY_RECORD_LIMIT:
                body.extend(message.get("body", b"")[: HTTP_BODY_RECORD_LIMIT - len(body)])
                entry["body"] = body.decode("utf-8", errors="replace")
            return message

        await self.app(scope, recording_receive, send)


async def debug_seen(_: Request) -> Response:
    return JSONResponse(SEEN)


async def debug_http(_: Request) -> Response:
    return JSONResponse(HTTP_SEEN)


async def debug_reset(_: Request) -> Response:
    SEEN.clear()
    HTTP_SEEN.clear()
    return JSONResponse({"ok": True})


# ---------------------------------------------------------------------------------------------
# Plaintext state: the vulnerability
# ---------------------------------------------------------------------------------------------


def encode_state(state: dict[str, Any]) -> str:
    """Plaintext JSON, compact with sorted keys so tests can predict it byte for byte."""
    return json.dumps(state, sort_keys=True, separators=(",", ":"))


def decode_state(raw: str, kind: str) -> dict[str, Any]:
    """Parse and TRUST a state from the client. No MAC, no expiry, no binding: that's the bug."""
    try:
        state = json.loads(raw)
    except ValueError:
        state = None
    if not isinstance(state, dict) or state.get("k") != kind:
        raise MCPError(code=types.INVALID_PARAMS, message="legacy server could not parse requestState")
    return state


def ask(message: str, field: str, kind: str = "string") -> types.ElicitRequest:
    """A form elicitation asking for one field."""
    return types.ElicitRequest(
        params=types.ElicitRequestFormParams(
            message=message,
            requested_schema={"type": "object", "properties": {field: {"type": kind}}, "required": [field]},
        )
    )


def sample(text: str, max_tokens: int) -> types.CreateMessageRequest:
    return types.CreateMessageRequest(
        params=types.CreateMessageRequestParams(
            messages=[types.SamplingMessage(role="user", content=types.TextContent(text=text))],
            max_tokens=max_tokens,
        )
    )


def list_roots() -> types.ListRootsRequest:
    # Explicit empty params so the wire form is `"params": {}` as in the conformance examples.
    return types.ListRootsRequest(params=types.RequestParams())


def need(requests: dict[str, Any], state: dict[str, Any] | None = None) -> types.InputRequiredResult:
    return types.InputRequiredResult(
        input_requests=requests or None,
        request_state=None if state is None else encode_state(state),
    )


def responses_of(params: types.InputResponseRequestParams) -> dict[str, Any]:
    return dict(params.input_responses or {})


def accepted(params: types.InputResponseRequestParams, key: str, field: str) -> Any | None:
    """The accepted elicitation value for `key.field`, or None when absent/declined/other shape."""
    response = responses_of(params).get(key)
    if isinstance(response, types.ElicitResult) and response.action == "accept" and response.content:
        return response.content.get(field)
    return None


def declined(params: types.InputResponseRequestParams, key: str) -> bool:
    response = responses_of(params).get(key)
    return isinstance(response, types.ElicitResult) and response.action != "accept"


def text_result(text: str, is_error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=is_error)


def sampled_text(response: Any) -> str:
    content = getattr(response, "content", None)
    blocks = content if isinstance(content, list) else [content]
    return " ".join(b.text for b in blocks if isinstance(b, types.TextContent))


def root_uris(response: Any) -> list[str]:
    if isinstance(response, types.ListRootsResult):
        return [str(root.uri) for root in response.roots]
    return []


Ctx = ServerRequestContext[Any, Any]
ToolResult = types.CallToolResult | types.InputRequiredResult
ToolFn = Callable[[Ctx, types.CallToolRequestParams], Awaitable[ToolResult]]

# ---------------------------------------------------------------------------------------------
# Tools of our own
# ---------------------------------------------------------------------------------------------


async def tool_provision(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    args = params.arguments or {}
    if params.request_state is None:
        state = {"k": "provision", "name": str(args.get("name", "")), "r": 1, "tier": "free"}
        return need({"region": ask("Which region should be used?", "region")}, state)
    state = decode_state(params.request_state, "provision")
    if declined(params, "region"):
        return text_result("Provisioning cancelled", is_error=True)
    region = accepted(params, "region", "region")
    if region is None:
        # Re-ask with the state we were given: a legacy server keeps trusting it.
        return need({"region": ask("Which region should be used?", "region")}, state)
    return text_result(f"Provisioned {state.get('name')} (tier={state.get('tier')}) in {region}")


async def tool_two_step(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    if params.request_state is None:
        return need({"first": ask("First answer?", "first")}, {"k": "two_step", "r": 1})
    state = decode_state(params.request_state, "two_step")
    if state.get("r") == 1:
        first = accepted(params, "first", "first")
        if first is None:
            return need({"first": ask("First answer?", "first")}, state)
        return need({"second": ask("Second answer?", "second")}, {"first": first, "k": "two_step", "r": 2})
    second = accepted(params, "second", "second")
    if second is None:
        return need({"second": ask("Second answer?", "second")}, state)
    return text_result(f"two_step done first={state.get('first')} second={second}")


async def tool_state_only(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    if params.request_state is None:
        # No inputRequests at all: the client just waits briefly and retries with the state.
        return need({}, {"job": "job-42", "k": "state_only", "r": 1})
    state = decode_state(params.request_state, "state_only")
    return text_result(f"state_only done {state.get('job')}")


async def tool_progress_ask(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    delay = max(0, int((params.arguments or {}).get("delay_ms", 0))) / 1000
    # `report_progress` is a no-op without `_meta.progressToken`, and the SDK drops the log
    # entry unless this request's `_meta` opted into logging, so both are safe to call always.
    # Emitting before the answer forces SSE mode to commit `text/event-stream`.
    for step in (1, 2, 3):
        await ctx.session.report_progress(step, 3, f"step {step}")
        if delay:
            await asyncio.sleep(delay)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        await ctx.session.send_log_message("info", "progress_ask working", logger=SERVER_NAME)
    if params.request_state is None:
        return need({"confirm": ask("Proceed?", "ok", "boolean")}, {"k": "progress_ask", "r": 1})
    decode_state(params.request_state, "progress_ask")
    ok = accepted(params, "confirm", "ok")
    if ok is None and not declined(params, "confirm"):
        return need({"confirm": ask("Proceed?", "ok", "boolean")}, {"k": "progress_ask", "r": 1})
    return text_result(f"progress_ask done ok={'true' if ok is True else 'false'}")


async def tool_echo(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    return text_result(str((params.arguments or {}).get("text", "")))


async def tool_param_echo(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    return text_result(f"param_echo {(params.arguments or {}).get('region', '')}")


async def tool_nonstring_state(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    # `inject_nonstring_state` swaps this placeholder for a number after validation.
    return need({}, {"k": "nonstring_state", "r": 1})


async def tool_legacy_elicit(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        # 2025 era: a real server->client request riding this POST's SSE stream.
        try:
            answer = await ctx.session.elicit_form(
                "What is your favourite colour?",
                {"type": "object", "properties": {"colour": {"type": "string"}}, "required": ["colour"]},
                related_request_id=ctx.request_id,
            )
        except NoBackChannelError:
            return text_result("legacy_elicit needs SSE mode (no back-channel in JSON mode)", is_error=True)
        if answer.action != "accept" or not answer.content:
            return text_result(f"legacy_elicit {answer.action}", is_error=True)
        return text_result(f"legacy_elicit colour={answer.content.get('colour')}")
    if params.request_state is None:
        return need({"colour": ask("What is your favourite colour?", "colour")}, {"k": "legacy_elicit", "r": 1})
    decode_state(params.request_state, "legacy_elicit")
    colour = accepted(params, "colour", "colour")
    if colour is None:
        return need({"colour": ask("What is your favourite colour?", "colour")}, {"k": "legacy_elicit", "r": 1})
    return text_result(f"legacy_elicit colour={colour}")


# ---------------------------------------------------------------------------------------------
# Conformance fixtures (@modelcontextprotocol/conformance 0.2.0-alpha.12, input-required-result-*)
# Keys and messages follow the scenario descriptions in the suite's dist/index.js.
# ---------------------------------------------------------------------------------------------


async def fixture_elicitation(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    # Used by basic-elicitation, missing-input-response, result-type, ignore-extra-params and
    # validate-input. Stateless by design: it completes whenever `user_name` was answered, and
    # re-asks (never errors) when the answer is missing or under a wrong key.
    name = accepted(params, "user_name", "name")
    if name is None:
        return need({"user_name": ask("What is your name?", "name")})
    return text_result(f"Hello, {name}!")


async def fixture_sampling(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    response = responses_of(params).get("capital_question")
    if response is None:
        return need({"capital_question": sample("What is the capital of France?", 100)})
    return text_result(f"Sampling said: {sampled_text(response)}")


async def fixture_list_roots(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    response = responses_of(params).get("client_roots")
    if response is None:
        return need({"client_roots": list_roots()})
    return text_result(f"Roots: {', '.join(root_uris(response))}")


async def fixture_request_state(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    if params.request_state is None:
        return need({"confirm": ask("Please confirm", "ok", "boolean")}, {"k": "request_state", "r": 1})
    state = decode_state(params.request_state, "request_state")
    if accepted(params, "confirm", "ok") is None:
        return need({"confirm": ask("Please confirm", "ok", "boolean")}, state)
    return text_result(f"state-ok (round {state.get('r')})")


async def fixture_multiple_inputs(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    requests = {
        "user_name": ask("What is your name?", "name"),
        "greeting": sample("Generate a greeting", 50),
        "client_roots": list_roots(),
    }
    if params.request_state is None:
        return need(requests, {"k": "multiple_inputs", "r": 1})
    state = decode_state(params.request_state, "multiple_inputs")
    got = responses_of(params)
    if any(key not in got for key in requests):
        return need({k: v for k, v in requests.items() if k not in got}, state)
    name = accepted(params, "user_name", "name")
    greeting = sampled_text(got["greeting"])
    roots = ", ".join(root_uris(got["client_roots"]))
    return text_result(f"multiple_inputs done name={name} greeting={greeting} roots={roots}")


async def fixture_multi_round(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    step1 = ask("Step 1: What is your name?", "name")
    step2 = ask("Step 2: What is your favorite color?", "color")
    if params.request_state is None:
        return need({"step1": step1}, {"k": "multi_round", "r": 1})
    state = decode_state(params.request_state, "multi_round")
    if state.get("r") == 1:
        name = accepted(params, "step1", "name")
        if name is None:
            return need({"step1": step1}, state)
        return need({"step2": step2}, {"k": "multi_round", "name": name, "r": 2})
    color = accepted(params, "step2", "color")
    if color is None:
        return need({"step2": step2}, state)
    return text_result(f"multi_round done name={state.get('name')} color={color}")


async def fixture_tampered_state(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    # The one scenario a plaintext server must fail: the retry's state is echoed and believed
    # without even being parsed, so `<state>-TAMPERED` is accepted. Only the sidecar fixes this.
    if params.request_state is None:
        return need({"confirm": ask("Please confirm", "ok", "boolean")}, {"k": "tampered_state", "r": 1})
    return text_result(f"tampered_state accepted state {params.request_state}")


async def fixture_capabilities(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    # 2026-07-28 declares capabilities per request; a server MUST NOT infer them from earlier
    # requests, so read this request's `_meta`, not anything connection-wide.
    if responses_of(params):
        return text_result("capabilities done")
    meta = (ctx.params or {}).get("_meta") or {}
    caps = meta.get(CLIENT_CAPABILITIES_KEY) or {}
    requests: dict[str, Any] = {}
    if "elicitation" in caps:
        requests["user_name"] = ask("What is your name?", "name")
    if "sampling" in caps:
        requests["greeting"] = sample("Generate a greeting", 50)
    if "roots" in caps:
        requests["client_roots"] = list_roots()
    if not requests:
        return text_result("capabilities done (client declared no input capabilities)")
    return need(requests)


TOOLS: dict[str, tuple[ToolFn, dict[str, Any], str]] = {
    "provision": (
        tool_provision,
        {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
        "Provision a machine; asks for the region. Trusts its plaintext requestState (tier).",
    ),
    "two_step": (tool_two_step, {"type": "object"}, "Asks twice, state carries the first answer."),
    "state_only": (tool_state_only, {"type": "object"}, "First round returns only requestState."),
    "progress_ask": (
        tool_progress_ask,
        {"type": "object", "properties": {"delay_ms": {"type": "integer", "minimum": 0}}},
        "Emits progress (and a log message when opted in) before asking.",
    ),
    "echo": (
        tool_echo,
        {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        "Returns its text; never asks.",
    ),
    "param_echo": (
        tool_param_echo,
        {
            "type": "object",
            "properties": {"region": {"type": "string", "x-mcp-header": "Region"}},
            "required": ["region"],
        },
        "Returns its region; the argument is mirrored into an Mcp-Param-Region header.",
    ),
    "nonstring_state": (tool_nonstring_state, {"type": "object"}, "Malformed: a numeric requestState."),
    "legacy_elicit": (tool_legacy_elicit, {"type": "object"}, "2025 era: real server->client elicitation."),
    "test_input_required_result_elicitation": (fixture_elicitation, {"type": "object"}, "Conformance fixture."),
    "test_input_required_result_sampling": (fixture_sampling, {"type": "object"}, "Conformance fixture."),
    "test_input_required_result_list_roots": (fixture_list_roots, {"type": "object"}, "Conformance fixture."),
    "test_input_required_result_request_state": (fixture_request_state, {"type": "object"}, "Conformance fixture."),
    "test_input_required_result_multiple_inputs": (
        fixture_multiple_inputs,
        {"type": "object"},
        "Conformance fixture.",
    ),
    "test_input_required_result_multi_round": (fixture_multi_round, {"type": "object"}, "Conformance fixture."),
    "test_input_required_result_tampered_state": (
        fixture_tampered_state,
        {"type": "object"},
        "Conformance fixture (plaintext: accepts tampered state).",
    ),
    "test_input_required_result_capabilities": (fixture_capabilities, {"type": "object"}, "Conformance fixture."),
}


async def list_tools(ctx: Ctx, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    return types.ListToolsResult(
        tools=[
            types.Tool(name=name, description=description, input_schema=schema)
            for name, (_, schema, description) in TOOLS.items()
        ]
    )


# Tools that also work for a 2025-era session. The others answer `input_required`, which the
# SDK cannot serialize at handshake versions (it would fail with -32603 "Handler returned an
# invalid result"), so they refuse politely instead.
SESSION_ERA_TOOLS = {"echo", "param_echo", "legacy_elicit"}


def require_modern(ctx: Ctx, what: str) -> None:
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        raise MCPError(code=types.INVALID_PARAMS, message=f"{what} needs protocol 2026-07-28 (input_required)")


async def call_tool(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    entry = TOOLS.get(params.name)
    if entry is None:
        raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {params.name}")
    if params.name not in SESSION_ERA_TOOLS:
        require_modern(ctx, f"tool {params.name}")
    return await entry[0](ctx, params)


# ---------------------------------------------------------------------------------------------
# Prompts
# ---------------------------------------------------------------------------------------------


def prompt_result(text: str, description: str) -> types.GetPromptResult:
    return types.GetPromptResult(
        description=description,
        messages=[types.PromptMessage(role="user", content=types.TextContent(text=text))],
    )


async def list_prompts(ctx: Ctx, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
    return types.ListPromptsResult(
        prompts=[
            types.Prompt(name="greet_prompt", description="Asks for a name, then greets (style from state)."),
            types.Prompt(name="test_input_required_result_prompt", description="Conformance fixture."),
        ]
    )


async def get_prompt(
    ctx: Ctx, params: types.GetPromptRequestParams
) -> types.GetPromptResult | types.InputRequiredResult:
    require_modern(ctx, f"prompt {params.name}")
    if params.name == "greet_prompt":
        if params.request_state is None:
            return need(
                {"name": ask("Who should be greeted?", "name")}, {"k": "greet_prompt", "r": 1, "style": "formal"}
            )
        state = decode_state(params.request_state, "greet_prompt")
        name = accepted(params, "name", "name")
        if name is None:
            return need({"name": ask("Who should be greeted?", "name")}, state)
        return prompt_result(f"Greet {name} (style={state.get('style')})", "greeting")
    if params.name == "test_input_required_result_prompt":
        context = accepted(params, "user_context", "context")
        if context is None:
            return need({"user_context": ask("What context should the prompt use?", "context")})
        return prompt_result(f"Use this context: {context}", "conformance prompt")
    raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown prompt: {params.name}")


# ---------------------------------------------------------------------------------------------
# Resources
# ---------------------------------------------------------------------------------------------

CONFIG_PREFIX = "config://"


async def list_resources(ctx: Ctx, params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
    return types.ListResourcesResult(
        resources=[types.Resource(uri="info://server", name="info", mime_type="text/plain")]
    )


async def list_resource_templates(
    ctx: Ctx, params: types.PaginatedRequestParams | None
) -> types.ListResourceTemplatesResult:
    return types.ListResourceTemplatesResult(
        resource_templates=[
            types.ResourceTemplate(uri_template="config://{env}", name="config", mime_type="text/plain")
        ]
    )


async def read_resource(
    ctx: Ctx, params: types.ReadResourceRequestParams
) -> types.ReadResourceResult | types.InputRequiredResult:
    uri = str(params.uri)
    if uri == "info://server":
        return types.ReadResourceResult(
            contents=[
                types.TextResourceContents(uri=uri, mime_type="text/plain", text=f"{SERVER_NAME} {SERVER_VERSION}")
            ]
        )
    if not uri.startswith(CONFIG_PREFIX) or not uri[len(CONFIG_PREFIX) :]:
        raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown resource: {uri}")
    require_modern(ctx, f"resource {uri}")
    env = uri[len(CONFIG_PREFIX) :]
    confirm = ask(f"Reveal the {env} configuration?", "ok", "boolean")
    if params.request_state is None:
        return need({"confirm": confirm}, {"env": env, "k": "config", "r": 1, "role": "viewer"})
    state = decode_state(params.request_state, "config")
    ok = accepted(params, "confirm", "ok")
    if ok is None:
        return need({"confirm": confirm}, state)
    if ok is not True:
        raise MCPError(code=types.INVALID_PARAMS, message="configuration read not confirmed")
    # The env comes from the (trusted) state, not the URI: a swapped state reads another env.
    text = f"config for {state.get('env')} (role={state.get('role')})"
    return types.ReadResourceResult(contents=[types.TextResourceContents(uri=uri, mime_type="text/plain", text=text)])


# ---------------------------------------------------------------------------------------------
# Serving
# ---------------------------------------------------------------------------------------------


def build_server() -> Server[Any]:
    server: Server[Any] = Server(
        SERVER_NAME,
        version=SERVER_VERSION,
        instructions="Deliberately vulnerable plaintext-requestState server for mcp-state-guard tests.",
        # Without this the SDK runs the tools/list handler (through the middleware chain) on every
        # 2026 tools/call to check Mcp-Param-* headers, which would pollute /debug/seen.
        get_tool_input_schema=lambda name: TOOLS[name][1] if name in TOOLS else None,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
        on_list_resources=list_resources,
        on_list_resource_templates=list_resource_templates,
        on_read_resource=read_resource,
    )
    # Outermost first: recording must see requests the rest of the chain (and the SDK's params
    # validation inside `call_next`) rejects.
    server.middleware = [record_request, inject_nonstring_state, *server.middleware]
    return server


def build_app(json_response: bool, host_check: bool) -> ASGIApp:
    server = build_server()
    security = None if host_check else TransportSecuritySettings(enable_dns_rebinding_protection=False)
    app = server.streamable_http_app(
        json_response=json_response,
        transport_security=security,
        host="127.0.0.1",
        # Extra Starlette routes sit outside the session manager, so the Host check (which
        # lives in the MCP transport) never applies to them.
        custom_starlette_routes=[
            Route("/debug/seen", debug_seen, methods=["GET"]),
            Route("/debug/http", debug_http, methods=["GET"]),
            Route("/debug/reset", debug_reset, methods=["POST"]),
        ],
    )
    return RecordHttp(app, "/mcp")


async def serve_stdio() -> None:
    """The same server over stdio (the SDK's `stdio_server`): one JSON-RPC message per line."""
    from mcp.server.stdio import stdio_server

    server = build_server()
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def main() -> None:
    parser = peer_server.arguments(__doc__)
    parser.add_argument("--no-host-check", action="store_true", help="disable the SDK's Host/Origin allowlist")
    parser.add_argument("--stdio", action="store_true", help="serve over stdin/stdout instead of HTTP")
    args = parser.parse_args()
    if args.stdio:
        import anyio

        logging.basicConfig(stream=sys.stderr, level=args.log_level.upper())
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        anyio.run(serve_stdio)
        return
    peer_server.serve(args, build_app(args.json_response, not args.no_host_check))


if __name__ == "__main__":
    main()
