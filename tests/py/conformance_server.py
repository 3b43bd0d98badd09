#!/usr/bin/env python3
"""The fixtures of the official MCP conformance suite's server scenarios, on the Python MCP SDK.

An MCP server of our own (the SDK's low-level `mcp.server.lowlevel.Server`) exposing exactly the
tools, resources, prompts and completions that `@modelcontextprotocol/conformance` 0.2.0-alpha.12
calls in its server scenarios, so the suite can run against it directly or through
mcp-state-guard. Both protocol eras are served on one endpoint, as the SDK does: 2026-07-28
(stateless requests carrying their own `_meta` envelope, multi round-trip `input_required`
results, `subscriptions/listen`) and the 2025-11-25 session era (`initialize`, `Mcp-Session-Id`,
real server->client sampling and elicitation, `logging/setLevel`, `resources/subscribe`).

Usage:
    python tests/py/conformance_server.py --port 0 [--json-response] [--no-host-check]
                                          [--no-stdin-watchdog] [--log-level LEVEL]
    python tests/py/conformance_server.py --stdio

Over HTTP (uvicorn on 127.0.0.1, path `/mcp`, SSE responses unless `--json-response`) the
process prints exactly one line `LISTENING <port>` on stdout once it accepts connections, exits 0
on SIGTERM/SIGINT and, unless `--no-stdin-watchdog`, when its stdin reaches EOF (see
`peer_server.py`). The SDK's Host/Origin allowlist (DNS rebinding protection) is on unless
`--no-host-check`. With `--stdio` the same server speaks one JSON-RPC message per line on
stdin/stdout (the SDK's `stdio_server`); logs go to stderr. In JSON mode a 2025 session has no
back-channel, so the sampling and elicitation tools answer with an error there.

Run the suite against it (Node 20 needs the shim):
    cd target/conformance && node --import ../../tests/conformance/register.mjs \\
        node_modules/@modelcontextprotocol/conformance/dist/index.js \\
        server --url http://127.0.0.1:<port>/mcp --requirements 2026-07-28 -o /tmp/conformance

Scenarios served (`--requirements 2026-07-28` and `--requirements 2025-11-25`):
    server-initialize, server-stateless, ping, logging-set-level, completion-complete,
    tools-list, tools-call-simple-text / -image / -audio / -embedded-resource / -mixed-content /
    -error / -with-progress / -with-logging / -sampling / -elicitation,
    elicitation-sep1034-defaults, elicitation-sep1330-enums, server-sse-multiple-streams,
    resources-list / -read-text / -read-binary / -templates-read / -subscribe / -unsubscribe,
    sep-2164-resource-not-found, prompts-list / -get-simple / -get-with-args /
    -get-embedded-resource / -get-with-image, dns-rebinding-protection, caching,
    the 14 input-required-result-* scenarios, and the pending http-header-validation,
    http-custom-header-server-validation and json-schema-2020-12.

The input-required-result-* fixtures are `legacy_server.py`'s: their `requestState` is PLAINTEXT
on purpose (input-required-result-tampered-state fails against this server alone and passes only
with mcp-state-guard in front, which seals the state). They need 2026-07-28 and answer a 2025
session with -32602.

Fixtures:
    tools       test_simple_text, test_image_content, test_audio_content, test_embedded_resource,
                test_multiple_content_types, test_error_handling, test_tool_with_progress,
                test_tool_with_logging / test_logging_tool (3 info logs; at 2026 only when the
                request's `_meta` opts into logging), test_sampling(prompt), test_elicitation(message),
                test_elicitation_sep1034_defaults, test_elicitation_sep1330_enums,
                test_streaming_elicitation, test_missing_capability (needs sampling: -32021 when
                the client did not declare it), test_trigger_tool_change / test_trigger_prompt_change
                (publish list_changed to `subscriptions/listen` streams, or on the 2025 session),
                test_header_param(region) (`region` carries "x-mcp-header": "Region"),
                json_schema_2020_12_tool (an inputSchema using JSON Schema 2020-12 keywords),
                test_input_required_result_* (legacy_server.py).
                Asking the client for input is one helper for both eras: at 2026-07-28 an
                `input_required` result answered on retry, at 2025 a real server->client request.
    resources   test://static-text, test://static-binary, test://watched-resource (subscribable),
                template test://template/{id}/data; an unknown URI is -32602 with data {"uri"}.
    prompts     test_simple_prompt, test_prompt_with_arguments(arg1, arg2),
                test_prompt_with_embedded_resource(resourceUri), test_prompt_with_image,
                test_input_required_result_prompt (legacy_server.py).
    completion  arg1/arg2 of test_prompt_with_arguments and {id} of the template, by prefix.
    caching     every cacheable result carries ttlMs/cacheScope (2026-07-28).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

import legacy_server
import mcp_types as types
import peer_server
from mcp.server.caching import CacheHint
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, PromptsListChanged, ToolsListChanged
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError, NoBackChannelError
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel
from starlette.types import ASGIApp

SERVER_NAME = "conformance-fixtures"
SERVER_VERSION = "0.1.0"

# A 1x1 red PNG and a 1-sample 8 kHz mono WAV: the smallest valid media the scenarios accept.
RED_PIXEL_PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)
SILENT_WAV = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQIAAAAAAA=="

Ctx = ServerRequestContext[Any, Any]
ToolResult = types.CallToolResult | types.InputRequiredResult
ToolFn = Callable[[Ctx, types.CallToolRequestParams], Awaitable[ToolResult]]

# Fan-out of 2026-07-28 change events to open `subscriptions/listen` streams.
SUBSCRIPTION_BUS = InMemorySubscriptionBus()

LOG_LEVELS: list[types.LoggingLevel] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
]


class SessionEraState:
    """What 2025-era clients set through `logging/setLevel` and `resources/subscribe`.

    Process-wide rather than per session: the suite drives one scenario at a time, and nothing
    here needs isolating between sessions.
    """

    def __init__(self) -> None:
        self.log_level: types.LoggingLevel = "debug"
        self.subscribed_uris: set[str] = set()


SESSION_ERA = SessionEraState()


def is_modern(ctx: Ctx) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def text_result(text: str, is_error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=is_error)


def text_contents(uri: str, text: str, mime_type: str = "text/plain") -> types.TextResourceContents:
    return types.TextResourceContents(uri=uri, mime_type=mime_type, text=text)


# ---------------------------------------------------------------------------------------------
# Asking the client for input, in either era
# ---------------------------------------------------------------------------------------------


def required_capability(request: types.ElicitRequest | types.CreateMessageRequest) -> types.ClientCapabilities:
    if isinstance(request, types.ElicitRequest):
        return types.ClientCapabilities(elicitation=types.ElicitationCapability())
    return types.ClientCapabilities(sampling=types.SamplingCapability())


def require_capability(ctx: Ctx, capability: types.ClientCapabilities) -> None:
    """Refuse with -32021 unless the client declared `capability`.

    At 2026-07-28 the capabilities are this request's own `_meta` declaration (the SDK builds a
    connection per request), at 2025 the session's `initialize`.
    """
    if ctx.session.check_client_capability(capability):
        return
    data = types.MissingRequiredClientCapabilityErrorData(required_capabilities=capability)
    raise MCPError(
        code=types.MISSING_REQUIRED_CLIENT_CAPABILITY,
        message="Client did not declare a capability this tool needs",
        data=data.model_dump(by_alias=True, mode="json", exclude_none=True),
    )


async def ask_client(
    ctx: Ctx,
    params: types.CallToolRequestParams,
    key: str,
    request: types.ElicitRequest | types.CreateMessageRequest,
) -> BaseModel | types.InputRequiredResult:
    """The client's answer to `request`, or the `input_required` result that asks for it.

    2026-07-28: the answer is `inputResponses[key]` of the retry; without it the caller returns
    the `InputRequiredResult` given back here. 2025: a real server->client request on this
    POST's SSE stream (`NoBackChannelError` in JSON mode).
    """
    require_capability(ctx, required_capability(request))
    if is_modern(ctx):
        answer = (params.input_responses or {}).get(key)
        if answer is None:
            return types.InputRequiredResult(input_requests={key: request})
        return answer
    result_type = types.ElicitResult if isinstance(request, types.ElicitRequest) else types.CreateMessageResult
    return await ctx.session.send_request(
        request, result_type, metadata=ServerMessageMetadata(related_request_id=ctx.request_id)
    )


def elicitation(message: str, schema: dict[str, Any]) -> types.ElicitRequest:
    return types.ElicitRequest(params=types.ElicitRequestFormParams(message=message, requested_schema=schema))


def elicitation_summary(answer: BaseModel) -> str:
    assert isinstance(answer, types.ElicitResult)
    return f"action={answer.action}, content={json.dumps(answer.content or {}, sort_keys=True)}"


# ---------------------------------------------------------------------------------------------
# Tools
# ---------------------------------------------------------------------------------------------


async def tool_simple_text(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    return text_result("This is a simple text response for testing.")


async def tool_image_content(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    return types.CallToolResult(content=[types.ImageContent(data=RED_PIXEL_PNG, mime_type="image/png")])


async def tool_audio_content(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    return types.CallToolResult(content=[types.AudioContent(data=SILENT_WAV, mime_type="audio/wav")])


async def tool_embedded_resource(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    resource = text_contents("test://embedded-resource", "This is an embedded resource content.")
    return types.CallToolResult(content=[types.EmbeddedResource(resource=resource)])


async def tool_multiple_content_types(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    resource = text_contents(
        "test://mixed-content-resource", json.dumps({"test": "data", "value": 123}), "application/json"
    )
    return types.CallToolResult(
        content=[
            types.TextContent(text="Multiple content types test:"),
            types.ImageContent(data=RED_PIXEL_PNG, mime_type="image/png"),
            types.EmbeddedResource(resource=resource),
        ]
    )


async def tool_error_handling(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    return text_result("This tool intentionally returns an error for testing", is_error=True)


async def tool_with_progress(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    # `report_progress` is a no-op unless the request carried `_meta.progressToken`.
    for step, progress in enumerate((0, 50, 100)):
        if step:
            await asyncio.sleep(0.05)
        await ctx.session.report_progress(progress, 100, f"{progress}% done")
    return text_result("Progress tool completed")


async def tool_with_logging(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    # 2026-07-28: the SDK sends nothing unless this request's `_meta` opted into logging (and
    # drops levels below the one it asked for). 2025: the level `logging/setLevel` chose.
    for step, message in enumerate(("Tool execution started", "Tool processing data", "Tool execution completed")):
        if step:
            await asyncio.sleep(0.05)
        if is_modern(ctx) or LOG_LEVELS.index("info") >= LOG_LEVELS.index(SESSION_ERA.log_level):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                await ctx.session.send_log_message(
                    "info", message, logger=SERVER_NAME, related_request_id=ctx.request_id
                )
    return text_result("Logging tool completed")


async def tool_sampling(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    prompt = str((params.arguments or {}).get("prompt", ""))
    request = types.CreateMessageRequest(
        params=types.CreateMessageRequestParams(
            messages=[types.SamplingMessage(role="user", content=types.TextContent(text=prompt))],
            max_tokens=100,
        )
    )
    answer = await ask_client(ctx, params, "sampling", request)
    if isinstance(answer, types.InputRequiredResult):
        return answer
    return text_result(f"LLM response: {legacy_server.sampled_text(answer)}")


async def tool_elicitation(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    message = str((params.arguments or {}).get("message", "Please provide your information"))
    schema = {
        "type": "object",
        "properties": {
            "username": {"type": "string", "description": "User's response"},
            "email": {"type": "string", "description": "User's email address"},
        },
        "required": ["username", "email"],
    }
    answer = await ask_client(ctx, params, "user_info", elicitation(message, schema))
    if isinstance(answer, types.InputRequiredResult):
        return answer
    return text_result(f"User response: {elicitation_summary(answer)}")


async def tool_elicitation_sep1034_defaults(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "User name", "default": "John Doe"},
            "age": {"type": "integer", "description": "User age", "default": 30},
            "score": {"type": "number", "description": "User score", "default": 95.5},
            "status": {
                "type": "string",
                "description": "User status",
                "enum": ["active", "inactive", "pending"],
                "default": "active",
            },
            "verified": {"type": "boolean", "description": "Verification status", "default": True},
        },
    }
    answer = await ask_client(ctx, params, "defaults", elicitation("Please review the defaults", schema))
    if isinstance(answer, types.InputRequiredResult):
        return answer
    return text_result(f"Elicitation completed: {elicitation_summary(answer)}")


async def tool_elicitation_sep1330_enums(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    schema = {
        "type": "object",
        "properties": {
            "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
            "titledSingle": {
                "type": "string",
                "oneOf": [
                    {"const": "value1", "title": "First Option"},
                    {"const": "value2", "title": "Second Option"},
                    {"const": "value3", "title": "Third Option"},
                ],
            },
            "legacyEnum": {
                "type": "string",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"],
            },
            "untitledMulti": {"type": "array", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
            "titledMulti": {
                "type": "array",
                "items": {
                    "anyOf": [
                        {"const": "value1", "title": "First Choice"},
                        {"const": "value2", "title": "Second Choice"},
                        {"const": "value3", "title": "Third Choice"},
                    ]
                },
            },
        },
    }
    answer = await ask_client(ctx, params, "enums", elicitation("Please pick from the enums", schema))
    if isinstance(answer, types.InputRequiredResult):
        return answer
    return text_result(f"Elicitation completed: {elicitation_summary(answer)}")


async def tool_streaming_elicitation(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    # server-stateless checks that a 2026 response stream carries notifications and the
    # `input_required` result only, never a server->client request.
    await ctx.session.report_progress(0, 1, "asking for a name")
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    answer = await ask_client(ctx, params, "user_name", elicitation("What is your name?", schema))
    if isinstance(answer, types.InputRequiredResult):
        return answer
    return text_result(f"Streaming elicitation completed: {elicitation_summary(answer)}")


async def tool_missing_capability(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    # Needs sampling: without the capability `ask_client` refuses with -32021 (HTTP 400).
    return await tool_sampling(ctx, params)


async def tool_trigger_tool_change(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    if is_modern(ctx):
        await SUBSCRIPTION_BUS.publish(ToolsListChanged())
    else:
        await ctx.session.send_tool_list_changed()
    return text_result("Tool list change announced")


async def tool_trigger_prompt_change(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    if is_modern(ctx):
        await SUBSCRIPTION_BUS.publish(PromptsListChanged())
    else:
        await ctx.session.send_prompt_list_changed()
    return text_result("Prompt list change announced")


async def tool_json_schema_2020_12(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    return text_result(f"arguments={json.dumps(params.arguments or {}, sort_keys=True)}")


async def tool_header_param(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    # The SDK cross-checks the `Mcp-Param-Region` header against `region` before this runs.
    return text_result(f"region={(params.arguments or {}).get('region', '')}")


def input_required_fixture(fixture: legacy_server.ToolFn) -> ToolFn:
    """A legacy_server.py conformance fixture, refused with -32602 on a 2025 session."""

    async def call(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
        legacy_server.require_modern(ctx, f"tool {params.name}")
        return await fixture(ctx, params)

    return call


NO_ARGUMENTS: dict[str, Any] = {"type": "object", "properties": {}}


def string_arguments(*names: str, header: tuple[str, str] | None = None) -> dict[str, Any]:
    """An input schema of required string arguments; `header` marks (argument, header name)."""
    properties: dict[str, Any] = {name: {"type": "string"} for name in names}
    if header is not None:
        properties[header[0]]["x-mcp-header"] = header[1]
    return {"type": "object", "properties": properties, "required": list(names)}


# JSON Schema 2020-12 keywords (SEP-1613, SEP-2106) that tools/list must carry through unchanged.
JSON_SCHEMA_2020_12: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}

# Name -> (function, input schema, description). Order is the tools/list order: the header
# scenarios call the first tool with no arguments, so it must need none.
TOOLS: dict[str, tuple[ToolFn, dict[str, Any], str]] = {
    "test_simple_text": (tool_simple_text, NO_ARGUMENTS, "Returns a simple text response."),
    "test_image_content": (tool_image_content, NO_ARGUMENTS, "Returns a PNG image."),
    "test_audio_content": (tool_audio_content, NO_ARGUMENTS, "Returns a WAV audio clip."),
    "test_embedded_resource": (tool_embedded_resource, NO_ARGUMENTS, "Returns an embedded text resource."),
    "test_multiple_content_types": (tool_multiple_content_types, NO_ARGUMENTS, "Returns text, image and resource."),
    "test_error_handling": (tool_error_handling, NO_ARGUMENTS, "Always returns an isError result."),
    "test_tool_with_progress": (tool_with_progress, NO_ARGUMENTS, "Reports progress 0, 50, 100 of 100."),
    "test_tool_with_logging": (tool_with_logging, NO_ARGUMENTS, "Sends three info log messages."),
    "test_logging_tool": (tool_with_logging, NO_ARGUMENTS, "Sends three info log messages."),
    "test_sampling": (tool_sampling, string_arguments("prompt"), "Asks the client to sample an LLM."),
    "test_elicitation": (tool_elicitation, string_arguments("message"), "Asks the user for a username and email."),
    "test_elicitation_sep1034_defaults": (
        tool_elicitation_sep1034_defaults,
        NO_ARGUMENTS,
        "Elicits fields that carry default values (SEP-1034).",
    ),
    "test_elicitation_sep1330_enums": (
        tool_elicitation_sep1330_enums,
        NO_ARGUMENTS,
        "Elicits the five enum schema variants (SEP-1330).",
    ),
    "test_streaming_elicitation": (
        tool_streaming_elicitation,
        NO_ARGUMENTS,
        "Reports progress, then asks the user for a name.",
    ),
    "test_missing_capability": (
        tool_missing_capability,
        NO_ARGUMENTS,
        "Needs the sampling capability; refuses with -32021 without it.",
    ),
    "test_trigger_tool_change": (tool_trigger_tool_change, NO_ARGUMENTS, "Announces a tool list change."),
    "test_trigger_prompt_change": (tool_trigger_prompt_change, NO_ARGUMENTS, "Announces a prompt list change."),
    "test_header_param": (
        tool_header_param,
        string_arguments("region", header=("region", "Region")),
        "Returns its region; the argument is mirrored into an Mcp-Param-Region header.",
    ),
    "json_schema_2020_12_tool": (
        tool_json_schema_2020_12,
        JSON_SCHEMA_2020_12,
        "Tool with JSON Schema 2020-12 features.",
    ),
    **{
        name: (input_required_fixture(fn), schema, description)
        for name, (fn, schema, description) in legacy_server.TOOLS.items()
        if name.startswith("test_input_required_result_")
    },
}


async def list_tools(ctx: Ctx, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    return types.ListToolsResult(
        tools=[
            types.Tool(name=name, description=description, input_schema=schema)
            for name, (_, schema, description) in TOOLS.items()
        ]
    )


async def call_tool(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    entry = TOOLS.get(params.name)
    if entry is None:
        raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {params.name}")
    try:
        return await entry[0](ctx, params)
    except NoBackChannelError:
        return text_result(f"{params.name} needs SSE mode (no back-channel in JSON mode)", is_error=True)


# ---------------------------------------------------------------------------------------------
# Resources
# ---------------------------------------------------------------------------------------------

TEMPLATE_PREFIX, TEMPLATE_SUFFIX = "test://template/", "/data"

# URI -> (name, description, contents). test://static-text comes first: the caching scenario
# reads the first listed resource.
RESOURCES: dict[str, tuple[str, str, types.TextResourceContents | types.BlobResourceContents]] = {
    "test://static-text": (
        "static-text",
        "A static text resource",
        text_contents("test://static-text", "This is the content of the static text resource."),
    ),
    "test://static-binary": (
        "static-binary",
        "A static binary resource (PNG)",
        types.BlobResourceContents(uri="test://static-binary", mime_type="image/png", blob=RED_PIXEL_PNG),
    ),
    "test://watched-resource": (
        "watched-resource",
        "A resource clients may subscribe to",
        text_contents("test://watched-resource", "This resource is watched for updates."),
    ),
}


async def list_resources(ctx: Ctx, params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
    return types.ListResourcesResult(
        resources=[
            types.Resource(uri=uri, name=name, description=description, mime_type=contents.mime_type)
            for uri, (name, description, contents) in RESOURCES.items()
        ]
    )


async def list_resource_templates(
    ctx: Ctx, params: types.PaginatedRequestParams | None
) -> types.ListResourceTemplatesResult:
    return types.ListResourceTemplatesResult(
        resource_templates=[
            types.ResourceTemplate(
                uri_template=f"{TEMPLATE_PREFIX}{{id}}{TEMPLATE_SUFFIX}",
                name="template-data",
                description="Data for an id, substituted into the URI",
                mime_type="application/json",
            )
        ]
    )


def template_id(uri: str) -> str | None:
    """The `{id}` of a test://template/{id}/data URI, or None for any other URI."""
    if uri.startswith(TEMPLATE_PREFIX) and uri.endswith(TEMPLATE_SUFFIX):
        value = uri[len(TEMPLATE_PREFIX) : -len(TEMPLATE_SUFFIX)]
        if value and "/" not in value:
            return value
    return None


async def read_resource(ctx: Ctx, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
    uri = str(params.uri)
    if uri in RESOURCES:
        return types.ReadResourceResult(contents=[RESOURCES[uri][2]])
    if (item := template_id(uri)) is not None:
        data = json.dumps({"id": item, "templateTest": True, "data": f"Data for ID: {item}"})
        return types.ReadResourceResult(contents=[text_contents(uri, data, "application/json")])
    # SEP-2164: an unknown resource is -32602 naming the URI, never an empty `contents`.
    raise MCPError(code=types.INVALID_PARAMS, message="Resource not found", data={"uri": uri})


async def subscribe_resource(ctx: Ctx, params: types.SubscribeRequestParams) -> types.EmptyResult:
    SESSION_ERA.subscribed_uris.add(str(params.uri))
    return types.EmptyResult()


async def unsubscribe_resource(ctx: Ctx, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
    SESSION_ERA.subscribed_uris.discard(str(params.uri))
    return types.EmptyResult()


# ---------------------------------------------------------------------------------------------
# Prompts and completions
# ---------------------------------------------------------------------------------------------


def argument(name: str, description: str) -> types.PromptArgument:
    return types.PromptArgument(name=name, description=description, required=True)


PROMPTS = [
    types.Prompt(name="test_simple_prompt", description="A simple prompt without arguments."),
    types.Prompt(
        name="test_prompt_with_arguments",
        description="A prompt with two required arguments.",
        arguments=[argument("arg1", "First test argument"), argument("arg2", "Second test argument")],
    ),
    types.Prompt(
        name="test_prompt_with_embedded_resource",
        description="A prompt embedding a resource.",
        arguments=[argument("resourceUri", "URI of the resource to embed")],
    ),
    types.Prompt(name="test_prompt_with_image", description="A prompt with an image."),
    types.Prompt(
        name="test_input_required_result_prompt",
        description="Asks for context through input_required (2026-07-28).",
    ),
]


async def list_prompts(ctx: Ctx, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
    return types.ListPromptsResult(prompts=PROMPTS)


def user_message(content: types.ContentBlock) -> types.PromptMessage:
    return types.PromptMessage(role="user", content=content)


async def get_prompt(
    ctx: Ctx, params: types.GetPromptRequestParams
) -> types.GetPromptResult | types.InputRequiredResult:
    args = params.arguments or {}
    if params.name == "test_simple_prompt":
        return types.GetPromptResult(
            messages=[user_message(types.TextContent(text="This is a simple prompt for testing."))]
        )
    if params.name == "test_prompt_with_arguments":
        text = f"Prompt with arguments: arg1='{args.get('arg1', '')}', arg2='{args.get('arg2', '')}'"
        return types.GetPromptResult(messages=[user_message(types.TextContent(text=text))])
    if params.name == "test_prompt_with_embedded_resource":
        uri = args.get("resourceUri", "test://embedded-resource")
        resource = text_contents(uri, "Embedded resource content for testing.")
        return types.GetPromptResult(
            messages=[
                user_message(types.EmbeddedResource(resource=resource)),
                user_message(types.TextContent(text="Please process the embedded resource above.")),
            ]
        )
    if params.name == "test_prompt_with_image":
        return types.GetPromptResult(
            messages=[
                user_message(types.ImageContent(data=RED_PIXEL_PNG, mime_type="image/png")),
                user_message(types.TextContent(text="Please analyze the image above.")),
            ]
        )
    if params.name == "test_input_required_result_prompt":
        return await legacy_server.get_prompt(ctx, params)
    raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown prompt: {params.name}")


# (reference kind, prompt name or URI template) -> argument -> candidate values.
COMPLETIONS: dict[tuple[str, str], dict[str, list[str]]] = {
    ("ref/prompt", "test_prompt_with_arguments"): {
        "arg1": ["paris", "park", "party", "test", "testing"],
        "arg2": ["hello", "world"],
    },
    ("ref/resource", f"{TEMPLATE_PREFIX}{{id}}{TEMPLATE_SUFFIX}"): {"id": ["1", "123", "42"]},
}


async def complete(ctx: Ctx, params: types.CompleteRequestParams) -> types.CompleteResult:
    ref = params.ref
    key = (ref.type, ref.name if isinstance(ref, types.PromptReference) else ref.uri)
    candidates = COMPLETIONS.get(key, {}).get(params.argument.name, [])
    values = [value for value in candidates if value.startswith(params.argument.value)]
    return types.CompleteResult(completion=types.Completion(values=values, total=len(values), has_more=False))


async def set_logging_level(ctx: Ctx, params: types.SetLevelRequestParams) -> types.EmptyResult:
    SESSION_ERA.log_level = params.level
    return types.EmptyResult()


# ---------------------------------------------------------------------------------------------
# Serving
# ---------------------------------------------------------------------------------------------

# SEP-2549 caching hints on every cacheable result (the SDK applies them at 2026-07-28 only).
CACHE_HINTS = {
    method: CacheHint(ttl_ms=60_000, scope="public")
    for method in ("tools/list", "prompts/list", "resources/list", "resources/templates/list", "resources/read")
}


def build_server() -> Server[Any]:
    with warnings.catch_warnings():
        # `on_set_logging_level` is deprecated at 2026-07-28, but 2025 sessions still use it.
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        return Server(
            SERVER_NAME,
            version=SERVER_VERSION,
            instructions="Fixtures of the official MCP conformance suite's server scenarios.",
            cache_hints=CACHE_HINTS,
            # Lets the SDK check `Mcp-Param-*` headers without running the tools/list handler.
            get_tool_input_schema=lambda name: TOOLS[name][1] if name in TOOLS else None,
            on_list_tools=list_tools,
            on_call_tool=call_tool,
            on_list_resources=list_resources,
            on_list_resource_templates=list_resource_templates,
            on_read_resource=read_resource,
            on_subscribe_resource=subscribe_resource,
            on_unsubscribe_resource=unsubscribe_resource,
            on_subscriptions_listen=ListenHandler(SUBSCRIPTION_BUS),
            on_list_prompts=list_prompts,
            on_get_prompt=get_prompt,
            on_completion=complete,
            on_set_logging_level=set_logging_level,
        )


def build_app(json_response: bool, host_check: bool) -> ASGIApp:
    security = None if host_check else TransportSecuritySettings(enable_dns_rebinding_protection=False)
    return build_server().streamable_http_app(
        json_response=json_response, transport_security=security, host="127.0.0.1"
    )


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
