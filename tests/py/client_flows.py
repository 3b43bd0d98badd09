#!/usr/bin/env python3
"""Drive MCP flows with the real Python SDK client (mcp==2.3.0) and report the outcome as JSON.

Usage:
    python tests/py/client_flows.py --url http://127.0.0.1:PORT/mcp [--mode MODE] [--timeout S] SCENARIO ...

Scenarios:
    auto-provision      `Client` with the SDK's automatic input_required loop calls
                        provision(name="web-1"); the elicitation callback answers region "eu-west-1".
                        -> {"text": ...}
    auto-all            every MRTR tool, prompt and resource of tests/py/legacy_server.py through the
                        automatic loop. -> {"results": {"tool:<name>": text, "prompt:<name>": text,
                        "resource:<uri>": text}, "progress": [...], "logs": [...]}
    manual KIND TARGET [--args JSON]
                        KIND is tool|prompt|resource, TARGET a name or URI. Drives the loop by hand
                        (`client.session.<method>(..., allow_input_required=True)`), recording every
                        requestState seen. -> {"states": [...], "rounds": N, "final": text}
    legacy-session      a 2025-era session (mode="legacy": initialize, Mcp-Session-Id, SSE) calls
                        legacy_elicit and answers the server->client elicitation.
                        -> {"text": ..., "session_id": ..., "protocol_version": ...}
    everything          against @modelcontextprotocol/server-everything, a 2025-era session (mode="legacy"):
                        the roots request it sends after `initialized`, echo, a tool with progress, a
                        tool asking the client for sampling, a resource subscription with updates, and
                        logging under logging/setLevel. -> {"session_id", "session_ids_consistent",
                        "protocol_version", "roots_requests", "echo", "progress", "long_running",
                        "sampling_requests": [{"prompt","system_prompt","max_tokens"}],
                        "sampling_result", "listed", "toggles", "updates": [uri, ...],
                        "logs": [{"level","logger","data"}, ...]}
    tamper              provision round 1, then retry with the state modified: "free" -> "enterprise"
                        when the state is plaintext, otherwise one character of the opaque token is
                        changed. -> {"retry_error": {"code","message","data"} | null, "text": ...,
                        "state_plaintext": bool, "original_state": ..., "tampered_state": ...}
                        Directly against the legacy server the text says tier=enterprise (the attack
                        works); through mcp-state-guard retry_error is the -32602 rejection.
    replay              provision round 1 answered twice with the same state.
                        -> {"first": {"text"|"error"}, "second": {"text"|"error"}}
    import-flow         against tests/py/import_server.py: start_import, append_rows twice
                        under one idempotency key (the `Idempotency-Key` header), then
                        commit_import, each taking the handle start_import returned.
                        -> {"handle": ..., "appends": [structuredContent, ...], "commit": {...}}

--mode is passed to `Client(mode=...)` (auto | legacy | 2026-07-28); default "auto" probes
server/discover like a real client would. `legacy-session` and `everything` always use "legacy".

--cafile trusts that CA for an https:// URL, --certfile/--keyfile present a client certificate
(mTLS), --bearer sends `Authorization: Bearer <token>` on every request: the SDK's own
transport over an httpx2 client configured that way.

Prints exactly one JSON object on stdout. Exit 0 when the scenario ran (even if what it observed is
a rejection, e.g. `tamper` through the sidecar), 1 with {"error": ...} when it could not.
"""

from __future__ import annotations

import argparse
import json
import ssl
import sys
import traceback
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp.client import Client
from mcp.client.session import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

# Values the callbacks hand back; keyed by the requested form field.
ELICIT_DEFAULTS: dict[str, Any] = {
    "region": "eu-west-1",
    "name": "Alice",
    "first": "one",
    "second": "two",
    "context": "test context",
    "color": "blue",
    "colour": "green",
}
SAMPLED_TEXT = "The capital of France is Paris."
ROOT = types.Root(uri="file:///tmp/mcp-state-guard-root", name="test root")
MAX_MANUAL_ROUNDS = 10


# ---------------------------------------------------------------------------------------------
# Answers to input requests (shared by the SDK callbacks and the manual loop)
# ---------------------------------------------------------------------------------------------


def answer_elicitation(params: types.ElicitRequestParams) -> types.ElicitResult:
    """Accept every form, filling each requested property with a sensible default."""
    schema = getattr(params, "requested_schema", None) or {}
    content: dict[str, Any] = {}
    for field, spec in (schema.get("properties") or {}).items():
        kind = spec.get("type") if isinstance(spec, dict) else None
        if field in ELICIT_DEFAULTS:
            content[field] = ELICIT_DEFAULTS[field]
        elif kind == "boolean":
            content[field] = True
        elif kind in ("integer", "number"):
            content[field] = 1
        else:
            content[field] = "value"
    return types.ElicitResult(action="accept", content=content)


def answer_sampling() -> types.CreateMessageResult:
    return types.CreateMessageResult(
        role="assistant", content=types.TextContent(text=SAMPLED_TEXT), model="test-model", stop_reason="endTurn"
    )


def answer_roots() -> types.ListRootsResult:
    return types.ListRootsResult(roots=[ROOT])


def answer(request: types.InputRequest) -> types.InputResponse:
    if isinstance(request, types.ElicitRequest):
        return answer_elicitation(request.params)
    if isinstance(request, types.CreateMessageRequest):
        return answer_sampling()
    if isinstance(request, types.ListRootsRequest):
        return answer_roots()
    raise RuntimeError(f"unsupported input request {type(request).__name__}")


async def elicitation_callback(_ctx: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
    return answer_elicitation(params)


async def sampling_callback(
    _ctx: ClientRequestContext, _params: types.CreateMessageRequestParams
) -> types.CreateMessageResult:
    return answer_sampling()


async def list_roots_callback(_ctx: ClientRequestContext) -> types.ListRootsResult:
    return answer_roots()


# ---------------------------------------------------------------------------------------------
# Result rendering
# ---------------------------------------------------------------------------------------------


def text_of(result: Any) -> str:
    """The text of a tool, prompt or resource result, blocks joined by newlines."""
    if isinstance(result, types.CallToolResult):
        texts = [b.text for b in result.content if isinstance(b, types.TextContent)]
        return ("ERROR: " if result.is_error else "") + "\n".join(texts)
    if isinstance(result, types.GetPromptResult):
        return "\n".join(m.content.text for m in result.messages if isinstance(m.content, types.TextContent))
    if isinstance(result, types.ReadResourceResult):
        return "\n".join(c.text for c in result.contents if isinstance(c, types.TextResourceContents))
    return json.dumps(result.model_dump(by_alias=True, mode="json", exclude_none=True))


def error_of(exc: MCPError) -> dict[str, Any]:
    return {"code": exc.code, "message": exc.message, "data": exc.data}


# Set from the command line: how the SDK's HTTP client reaches the server.
TRANSPORT: dict[str, Any] = {}


def server_for(url: Any) -> Any:
    """The URL itself, or the SDK's streamable HTTP transport over a configured httpx2 client."""
    if not TRANSPORT or not isinstance(url, str):
        return url
    context = ssl.create_default_context(cafile=TRANSPORT.get("cafile"))
    if TRANSPORT.get("certfile"):
        context.load_cert_chain(TRANSPORT["certfile"], TRANSPORT.get("keyfile"))
    headers = {"Authorization": f"Bearer {TRANSPORT['bearer']}"} if TRANSPORT.get("bearer") else None
    http_client = httpx2.AsyncClient(
        verify=context, headers=headers, timeout=httpx2.Timeout(10.0, read=30.0)
    )
    return streamable_http_client(url, http_client=http_client)


def make_client(url: Any, mode: str, **kwargs: Any) -> Client:
    """A Client answering every input request; `kwargs` add options or replace a callback."""
    callbacks: dict[str, Any] = {
        "elicitation_callback": elicitation_callback,
        "sampling_callback": sampling_callback,
        "list_roots_callback": list_roots_callback,
    }
    return Client(
        server_for(url),
        mode=mode,
        read_timeout_seconds=10,
        # Cached results would hide what the server (or the sidecar) actually answered.
        cache=None,
        **{**callbacks, **kwargs},
    )


# ---------------------------------------------------------------------------------------------
# Scenarios
# ---------------------------------------------------------------------------------------------


async def auto_provision(args: argparse.Namespace) -> dict[str, Any]:
    async with make_client(args.url, args.mode) as client:
        result = await client.call_tool("provision", {"name": "web-1"})
    return {"text": text_of(result)}


AUTO_TOOLS: list[tuple[str, dict[str, Any]]] = [
    ("provision", {"name": "web-1"}),
    ("two_step", {}),
    ("state_only", {}),
    ("progress_ask", {}),
    ("echo", {"text": "hello"}),
    ("test_input_required_result_elicitation", {}),
    ("test_input_required_result_sampling", {}),
    ("test_input_required_result_list_roots", {}),
    ("test_input_required_result_request_state", {}),
    ("test_input_required_result_multiple_inputs", {}),
    ("test_input_required_result_multi_round", {}),
    ("test_input_required_result_tampered_state", {}),
    ("test_input_required_result_capabilities", {}),
]
AUTO_PROMPTS = ["greet_prompt", "test_input_required_result_prompt"]
AUTO_RESOURCES = ["config://prod", "info://server"]


async def auto_all(args: argparse.Namespace) -> dict[str, Any]:
    progress: list[dict[str, Any]] = []
    logs: list[Any] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append({"progress": value, "total": total, "message": message})

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params.data)

    results: dict[str, str] = {}
    # log_level opts every request into notifications/message (2026: per-request `_meta`).
    async with make_client(args.url, args.mode, logging_callback=on_log, log_level="info") as client:
        for name, arguments in AUTO_TOOLS:
            callback = on_progress if name == "progress_ask" else None
            results[f"tool:{name}"] = text_of(await client.call_tool(name, arguments, progress_callback=callback))
        for name in AUTO_PROMPTS:
            results[f"prompt:{name}"] = text_of(await client.get_prompt(name))
        for uri in AUTO_RESOURCES:
            results[f"resource:{uri}"] = text_of(await client.read_resource(uri))
    return {"results": results, "progress": progress, "logs": logs}


def parse_manual(rest: list[str]) -> tuple[str, str, dict[str, Any]]:
    parser = argparse.ArgumentParser(prog="client_flows.py manual")
    parser.add_argument("kind", choices=["tool", "prompt", "resource"])
    parser.add_argument("target")
    parser.add_argument("--args", default="{}", help="JSON object of arguments (tool/prompt)")
    ns = parser.parse_args(rest)
    arguments = json.loads(ns.args)
    if not isinstance(arguments, dict):
        raise ValueError("--args must be a JSON object")
    return ns.kind, ns.target, arguments


Send = Callable[[types.InputResponses | None, str | None], Awaitable[Any]]


def sender(client: Client, kind: str, target: str, arguments: dict[str, Any]) -> Send:
    """One round of the original request, re-sent with responses and state."""

    async def send(responses: types.InputResponses | None, state: str | None) -> Any:
        if kind == "tool":
            return await client.session.call_tool(
                target, arguments, input_responses=responses, request_state=state, allow_input_required=True
            )
        if kind == "prompt":
            return await client.session.get_prompt(
                target,
                {k: str(v) for k, v in arguments.items()} or None,
                input_responses=responses,
                request_state=state,
                allow_input_required=True,
            )
        return await client.session.read_resource(
            target, input_responses=responses, request_state=state, allow_input_required=True
        )

    return send


async def manual(args: argparse.Namespace) -> dict[str, Any]:
    kind, target, arguments = parse_manual(args.rest)
    states: list[str | None] = []
    async with make_client(args.url, args.mode) as client:
        if kind == "tool":
            # The session mirrors `x-mcp-header` arguments into Mcp-Param-* headers only for tools
            # it has listed (the high-level Client re-lists on -32020 by itself; the session doesn't).
            await client.list_tools()
        send = sender(client, kind, target, arguments)
        result = await send(None, None)
        while isinstance(result, types.InputRequiredResult):
            states.append(result.request_state)
            if len(states) > MAX_MANUAL_ROUNDS:
                raise RuntimeError(f"still input_required after {MAX_MANUAL_ROUNDS} rounds")
            requests = result.input_requests or {}
            if not requests:
                # State-only round: the server wants us back shortly with just the state.
                await anyio.sleep(0.05)
            responses = {key: answer(request) for key, request in requests.items()} or None
            result = await send(responses, result.request_state)
    return {"states": states, "rounds": len(states) + 1, "final": text_of(result)}


async def legacy_session(args: argparse.Namespace) -> dict[str, Any]:
    session_ids: list[str] = []

    async def remember_session_id(response: httpx2.Response) -> None:
        if sid := response.headers.get("mcp-session-id"):
            session_ids.append(sid)

    http_client = create_mcp_http_client(timeout=httpx2.Timeout(10.0, read=30.0))
    http_client.event_hooks["response"].append(remember_session_id)
    async with http_client:
        transport = streamable_http_client(args.url, http_client=http_client)
        async with make_client(transport, "legacy") as client:  # type: ignore[arg-type]
            result = await client.call_tool("legacy_elicit", {})
            version = client.protocol_version
    return {
        "text": text_of(result),
        "session_id": session_ids[0] if session_ids else None,
        "session_ids_consistent": len(set(session_ids)) <= 1,
        "protocol_version": version,
    }


# The `everything` scenario: @modelcontextprotocol/server-everything's names and arguments.
EVERYTHING_URI = "demo://resource/static/document/features.md"
EVERYTHING_ECHO = "hello everything"
EVERYTHING_PROMPT = "What is the capital of France?"
EVERYTHING_WAIT_S = 10.0


class Inbox:
    """What a session's server sent unasked, in arrival order, with waiting (bounded)."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self._changed = anyio.Event()

    def add(self, item: Any) -> None:
        self.items.append(item)
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_for(self, what: str, found: Callable[[Any], bool]) -> None:
        with anyio.move_on_after(EVERYTHING_WAIT_S):
            while not any(found(item) for item in self.items):
                await self._changed.wait()
            return
        raise TimeoutError(f"no {what} within {EVERYTHING_WAIT_S} s (received {self.items})")


async def everything(args: argparse.Namespace) -> dict[str, Any]:
    """server-everything in a 2025-era session: its roots request at start, echo, a tool
    with progress, a tool that asks the client for sampling, a resource subscription with
    updates, and logging under logging/setLevel."""
    # The 2025-era methods this scenario is about (setLevel, subscribe) warn on every call.
    warnings.filterwarnings("ignore", category=MCPDeprecationWarning)
    session_ids: list[str] = []
    logs = Inbox()
    updates = Inbox()
    progress: list[dict[str, Any]] = []
    sampling: list[dict[str, Any]] = []
    roots_requests = 0

    async def remember_session_id(response: httpx2.Response) -> None:
        if sid := response.headers.get("mcp-session-id"):
            session_ids.append(sid)

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.add({"level": params.level, "logger": params.logger, "data": params.data})

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            updates.add(message.params.uri)

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append({"progress": value, "total": total, "message": message})

    async def on_sampling(
        _ctx: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        first = params.messages[0].content
        sampling.append(
            {
                "prompt": first.text if isinstance(first, types.TextContent) else None,
                "system_prompt": params.system_prompt,
                "max_tokens": params.max_tokens,
            }
        )
        return answer_sampling()

    async def on_roots(_ctx: ClientRequestContext) -> types.ListRootsResult:
        nonlocal roots_requests
        roots_requests += 1
        return answer_roots()

    http_client = create_mcp_http_client(timeout=httpx2.Timeout(10.0, read=30.0))
    http_client.event_hooks["response"].append(remember_session_id)
    async with http_client:
        transport = streamable_http_client(args.url, http_client=http_client)
        async with make_client(
            transport,  # type: ignore[arg-type]
            "legacy",
            logging_callback=on_log,
            message_handler=on_message,
            sampling_callback=on_sampling,
            list_roots_callback=on_roots,
        ) as client:
            version = client.protocol_version
            # Unasked, 350 ms after `initialized`: roots/list, then a log line saying so.
            await logs.wait_for("the roots log", lambda log: str(log["data"]).startswith("Roots updated"))
            echo = text_of(await client.call_tool("echo", {"message": EVERYTHING_ECHO}))
            long_running = text_of(
                await client.call_tool(
                    "trigger-long-running-operation", {"duration": 1, "steps": 4}, progress_callback=on_progress
                )
            )
            sampled = text_of(
                await client.call_tool("trigger-sampling-request", {"prompt": EVERYTHING_PROMPT, "maxTokens": 50})
            )
            listed = [r.uri for r in (await client.list_resources()).resources]
            # Above the acknowledgement's level (info): the subscribe's log is filtered out.
            await client.set_logging_level("warning")
            await client.subscribe_resource(EVERYTHING_URI)  # pyright: ignore[reportDeprecated]
            toggled_on = text_of(await client.call_tool("toggle-subscriber-updates", {}))
            await updates.wait_for("an update", lambda uri: True)
            await client.set_logging_level("info")
            await client.unsubscribe_resource(EVERYTHING_URI)  # pyright: ignore[reportDeprecated]
            received = list(updates.items)
            await logs.wait_for("the unsubscribe log", lambda log: "Unsubscribe" in str(log["data"]))
            toggled_off = text_of(await client.call_tool("toggle-subscriber-updates", {}))
    return {
        "session_id": session_ids[0] if session_ids else None,
        "session_ids_consistent": len(set(session_ids)) == 1,
        "protocol_version": version,
        "roots_requests": roots_requests,
        "echo": echo,
        "progress": progress,
        "long_running": long_running,
        "sampling_requests": sampling,
        "sampling_result": sampled,
        "listed": EVERYTHING_URI in listed,
        "toggles": [toggled_on, toggled_off],
        "updates": received,
        "logs": logs.items,
    }


def tamper_state(state: str) -> tuple[str, bool]:
    """Forge the state: the real attack when it is plaintext, a one-character flip otherwise."""
    if '"tier":"free"' in state:
        return state.replace('"tier":"free"', '"tier":"enterprise"'), True
    middle = len(state) // 2
    flipped = "A" if state[middle] != "A" else "B"
    return state[:middle] + flipped + state[middle + 1 :], False


async def tamper(args: argparse.Namespace) -> dict[str, Any]:
    async with make_client(args.url, args.mode) as client:
        send = sender(client, "tool", "provision", {"name": "web-1"})
        first = await send(None, None)
        if not isinstance(first, types.InputRequiredResult) or first.request_state is None:
            raise RuntimeError(f"provision round 1 did not return a requestState: {text_of(first)}")
        forged, plaintext = tamper_state(first.request_state)
        responses = {key: answer(request) for key, request in (first.input_requests or {}).items()}
        out: dict[str, Any] = {
            "state_plaintext": plaintext,
            "original_state": first.request_state,
            "tampered_state": forged,
            "retry_error": None,
            "text": None,
        }
        try:
            out["text"] = text_of(await send(responses, forged))
        except MCPError as exc:
            out["retry_error"] = error_of(exc)
    return out


async def replay(args: argparse.Namespace) -> dict[str, Any]:
    async with make_client(args.url, args.mode) as client:
        send = sender(client, "tool", "provision", {"name": "web-1"})
        first = await send(None, None)
        if not isinstance(first, types.InputRequiredResult) or first.request_state is None:
            raise RuntimeError(f"provision round 1 did not return a requestState: {text_of(first)}")
        responses = {key: answer(request) for key, request in (first.input_requests or {}).items()}
        outcomes: list[dict[str, Any]] = []
        for _ in range(2):
            try:
                outcomes.append({"text": text_of(await send(responses, first.request_state))})
            except MCPError as exc:
                outcomes.append({"error": error_of(exc)})
    return {"state": first.request_state, "first": outcomes[0], "second": outcomes[1]}


async def import_flow(args: argparse.Namespace) -> dict[str, Any]:
    # `Client.call_tool` has no idempotency-key parameter (and the request models drop
    # unknown params), so the key rides in the `Idempotency-Key` header of the SDK's own
    # transport: the sidecar reads it for idempotent tools and ignores it for the others.
    http_client = httpx2.AsyncClient(
        headers={"Idempotency-Key": "sdk-append-1"}, timeout=httpx2.Timeout(10.0, read=30.0)
    )
    transport = streamable_http_client(args.url, http_client=http_client)
    async with make_client(transport, args.mode) as client:
        started = await client.call_tool("start_import", {"name": "sdk"})
        handle = (started.structured_content or {})["importId"]
        appends = []
        for _ in range(2):
            appended = await client.call_tool("append_rows", {"importId": handle, "rows": [1, 2, 3]})
            appends.append(appended.structured_content)
        committed = await client.call_tool("commit_import", {"importId": handle})
    return {"handle": handle, "appends": appends, "commit": committed.structured_content}


SCENARIOS: dict[str, Callable[[argparse.Namespace], Awaitable[dict[str, Any]]]] = {
    "auto-provision": auto_provision,
    "auto-all": auto_all,
    "manual": manual,
    "legacy-session": legacy_session,
    "everything": everything,
    "tamper": tamper,
    "replay": replay,
    "import-flow": import_flow,
}


def describe(exc: BaseException) -> str:
    """Readable message for an exception, unwrapping anyio's single-member exception groups."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        return f"MCPError {exc.code}: {exc.message}"
    return f"{type(exc).__name__}: {exc}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True, help="MCP endpoint, e.g. http://127.0.0.1:8080/mcp")
    parser.add_argument("--mode", default="auto", help='Client mode: "auto", "legacy" or "2026-07-28"')
    parser.add_argument("--timeout", type=float, default=60.0, help="overall deadline in seconds")
    parser.add_argument("--cafile", help="CA bundle (PEM) to trust for an https:// URL")
    parser.add_argument("--certfile", help="client certificate chain (PEM) for mTLS")
    parser.add_argument("--keyfile", help="client private key (PEM) for mTLS")
    parser.add_argument("--bearer", help="access token sent as Authorization: Bearer")
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    parser.add_argument("rest", nargs=argparse.REMAINDER, help="scenario arguments (manual)")
    args = parser.parse_args()
    for option in ("cafile", "certfile", "keyfile", "bearer"):
        if getattr(args, option):
            TRANSPORT[option] = getattr(args, option)

    async def run() -> dict[str, Any]:
        with anyio.fail_after(args.timeout):
            return await SCENARIOS[args.scenario](args)

    try:
        out = anyio.run(run)
    except Exception as exc:  # noqa: BLE001 - everything becomes the JSON error report
        print(json.dumps({"error": describe(exc), "scenario": args.scenario}))
        traceback.print_exc(file=sys.stderr)
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
