#!/usr/bin/env node
// A deliberately vulnerable "legacy" MCP server on the TypeScript SDK v2: plaintext
// `requestState`, trusted on retry.
//
// The TypeScript twin of tests/py/legacy_server.py, built the way the SDK's docs tell users
// to serve over Streamable HTTP with plain node:http: `McpServer` instances from a factory,
// `createMcpHandler` (stateless, one instance per request), `toNodeHandler` from
// @modelcontextprotocol/node, and its `localhostHostValidation` guard. No
// `requestState.verify` hook is configured, which is the SDK's default: every state it
// emits is compact plaintext JSON and every state it receives is parsed and believed
// (`ctx.mcpReq.requestState()` returns the raw wire string). Tampering `"tier":"free"` into
// `"tier":"enterprise"` on the retry of `provision` works against it directly; through
// mcp-state-guard it must not.
//
// Usage (after tests/ts/install.sh):
//   node --import tests/ts/register.mjs tests/ts/legacy_server.mjs --port 0
//        [--response-mode json|sse|auto] [--keep-alive-ms N] [--no-host-check]
//        [--no-stdin-watchdog]
//   node --import tests/ts/register.mjs tests/ts/legacy_server.mjs --stdio
//
// With --stdio the same server is served over stdin/stdout by the SDK's `serveStdio`
// (a `StdioServerTransport` whose opening request picks the era), as a stdio server behind `mcp-state-guard run
// --upstream-command -- node ... --stdio`; no /debug/* there.
//
// Binds 127.0.0.1 (`--port 0` picks a free port) and prints exactly one line
// `LISTENING <port>` on stdout once it accepts connections; everything else goes to stderr.
// Exits 0 on SIGTERM/SIGINT and, unless --no-stdin-watchdog, when stdin reaches EOF, so a
// test harness that pipes stdin takes the server down with it.
//
// Response modes are the SDK's own (`createMcpHandler({ responseMode })`): `json` never
// streams (mid-call notifications are dropped), `sse` answers every 2026 request with an
// SSE stream, `auto` (the SDK default) answers JSON unless the handler emits a notification
// first. `--keep-alive-ms` is the SDK's SSE comment-frame interval (default 15000, 0 off).
// 2025-era traffic is served by the SDK's stateless legacy fallback.
//
// Debug endpoints (answered before the MCP handler and its Host check):
//   GET  /debug/seen   every JSON-RPC request POSTed to /mcp, in order, recorded from the raw
//                      body before the SDK sees it: {"era", "id", "method", "name",
//                      "requestState", "inputResponses"} (`requestState` verbatim, null when
//                      absent; `inputResponses` the sorted key list or null; `era` "2026" when
//                      the body claims 2026-07-28 in `_meta`, else "2025").
//   GET  /debug/http   every HTTP request that reached /mcp: {"method", "path", "query",
//                      "headers", "body"} (headers as [name, value] pairs in arrival order,
//                      body as text truncated to 64 KiB).
//   POST /debug/reset  clears both lists.
// So "not in /debug/seen" means "never arrived", even for requests the SDK would reject.
//
// Tools, prompts and resources are those of tests/py/legacy_server.py with the same state
// shapes (compact JSON, sorted keys) and the same answers, where the SDK allows:
//   provision(name)  asks "region"; state {"k":"provision","name":N,"r":1,"tier":"free"};
//                    retry answers "Provisioned <state.name> (tier=<state.tier>) in <region>".
//   two_step, state_only, progress_ask(delay_ms?), echo(text), param_echo(region) (the
//   argument carries "x-mcp-header": "Region"), the conformance fixtures
//   test_input_required_result_* (elicitation, sampling, roots, capabilities, ...);
//   prompts greet_prompt and test_input_required_result_prompt; resources config://{env}
//   (asks "confirm", state {"env":E,"k":"config","r":1,"role":"viewer"}) and info://server.
// Not ported: nonstring_state (the SDK refuses to emit a non-string state) and
// legacy_elicit (the 2025 back-channel; the SDK's legacy shim serves input_required
// handlers to 2025 sessions by itself).
// One addition: `ask_capabilities` asks for elicitation, sampling and roots at once with no
// fallback, so a client that declares fewer capabilities gets the SDK's own -32021.
//
// Where the SDK's behaviour differs from the Python SDK's (errors in-band on HTTP 200, LF
// SSE framing, port-agnostic Host check, ...), see tests/ts/WIRE-DIFFERENCES.md.
import http from "node:http";
import process from "node:process";
import { parseArgs } from "node:util";
import { localhostHostValidation, toNodeHandler } from "@modelcontextprotocol/node";
import {
  McpServer,
  ProtocolError,
  ProtocolErrorCode,
  ResourceTemplate,
  acceptedContent,
  createMcpHandler,
  inputRequired,
  inputResponse,
} from "@modelcontextprotocol/server";
import * as z from "zod";

const SERVER_NAME = "legacy-plaintext-state-ts";
const SERVER_VERSION = "0.1.0";
const CLIENT_CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities";
const PROTOCOL_VERSION_KEY = "io.modelcontextprotocol/protocolVersion";
const HTTP_BODY_RECORD_LIMIT = 64 * 1024;
const MAX_BODY_BYTES = 4 * 1024 * 1024;

// ---------------------------------------------------------------------------------------
// What the process has seen (served by /debug/*)
// ---------------------------------------------------------------------------------------

const SEEN = [];
const HTTP_SEEN = [];

/** Record one POSTed body: the HTTP request always, the JSON-RPC request when it is one. */
function record(req, url, body) {
  HTTP_SEEN.push({
    method: req.method,
    path: url.pathname,
    query: url.search.replace(/^\?/, ""),
    headers: pairs(req.rawHeaders),
    body: body.subarray(0, HTTP_BODY_RECORD_LIMIT).toString("utf8"),
  });
  let message;
  try {
    message = JSON.parse(body.toString("utf8"));
  } catch {
    return;
  }
  if (!message || typeof message !== "object" || Array.isArray(message) || !("id" in message)) return;
  if (typeof message.method !== "string") return;
  const params = message.params && typeof message.params === "object" ? message.params : {};
  const responses = params.inputResponses;
  const meta = params._meta && typeof params._meta === "object" ? params._meta : {};
  SEEN.push({
    era: meta[PROTOCOL_VERSION_KEY] === "2026-07-28" ? "2026" : "2025",
    id: message.id,
    method: message.method,
    name: (message.method === "resources/read" ? params.uri : params.name) ?? null,
    requestState: params.requestState ?? null,
    inputResponses:
      responses && typeof responses === "object" && !Array.isArray(responses)
        ? Object.keys(responses).sort()
        : (responses ?? null),
  });
}

function pairs(raw) {
  const out = [];
  for (let i = 0; i + 1 < raw.length; i += 2) out.push([raw[i].toLowerCase(), raw[i + 1]]);
  return out;
}

// ---------------------------------------------------------------------------------------
// Plaintext state: the vulnerability
// ---------------------------------------------------------------------------------------

/** Compact JSON with sorted keys, as Python's json.dumps(sort_keys=True) writes it here. */
function encodeState(state) {
  const sorted = Object.fromEntries(Object.keys(state).sort().map((k) => [k, state[k]]));
  return JSON.stringify(sorted);
}

/** Parse and TRUST a state from the client. No MAC, no expiry, no binding: that's the bug. */
function decodeState(raw, kind) {
  let state;
  try {
    state = JSON.parse(raw);
  } catch {
    state = undefined;
  }
  if (!state || typeof state !== "object" || Array.isArray(state) || state.k !== kind) {
    throw new ProtocolError(ProtocolErrorCode.InvalidParams, "legacy server could not parse requestState");
  }
  return state;
}

function ask(message, field, type = "string") {
  return inputRequired.elicit({
    message,
    requestedSchema: { type: "object", properties: { [field]: { type } }, required: [field] },
  });
}

function sample(text, maxTokens) {
  return inputRequired.createMessage({
    messages: [{ role: "user", content: { type: "text", text } }],
    maxTokens,
  });
}

function need(requests, state) {
  const spec = {};
  if (requests && Object.keys(requests).length > 0) spec.inputRequests = requests;
  if (state !== undefined) spec.requestState = encodeState(state);
  return inputRequired(spec);
}

/** The accepted elicitation value for `key.field`, or undefined. */
function accepted(ctx, key, field) {
  return acceptedContent(ctx.mcpReq.inputResponses, key)?.[field];
}

function declined(ctx, key) {
  const view = inputResponse(ctx.mcpReq.inputResponses, key);
  return view.kind === "elicit" && view.action !== "accept";
}

function hasResponses(ctx) {
  return Object.keys(ctx.mcpReq.inputResponses ?? {}).length > 0;
}

function sampledText(ctx, key) {
  const view = inputResponse(ctx.mcpReq.inputResponses, key);
  if (view.kind !== "sampling") return "";
  const content = view.result.content;
  const blocks = Array.isArray(content) ? content : [content];
  return blocks.filter((b) => b?.type === "text").map((b) => b.text).join(" ");
}

function rootUris(ctx, key) {
  const view = inputResponse(ctx.mcpReq.inputResponses, key);
  return view.kind === "roots" ? view.roots.map((r) => r.uri) : [];
}

function text(value, isError = false) {
  return { content: [{ type: "text", text: value }], ...(isError && { isError: true }) };
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// ---------------------------------------------------------------------------------------
// Tools of our own
// ---------------------------------------------------------------------------------------

async function provision({ name }, ctx) {
  const raw = ctx.mcpReq.requestState();
  const question = () => ({ region: ask("Which region should be used?", "region") });
  if (raw === undefined) return need(question(), { k: "provision", name, r: 1, tier: "free" });
  const state = decodeState(raw, "provision");
  if (declined(ctx, "region")) return text("Provisioning cancelled", true);
  const region = accepted(ctx, "region", "region");
  // Re-ask with the state we were given: a legacy server keeps trusting it.
  if (region === undefined) return need(question(), state);
  return text(`Provisioned ${state.name} (tier=${state.tier}) in ${region}`);
}

async function twoStep(ctx) {
  const raw = ctx.mcpReq.requestState();
  if (raw === undefined) return need({ first: ask("First answer?", "first") }, { k: "two_step", r: 1 });
  const state = decodeState(raw, "two_step");
  if (state.r === 1) {
    const first = accepted(ctx, "first", "first");
    if (first === undefined) return need({ first: ask("First answer?", "first") }, state);
    return need({ second: ask("Second answer?", "second") }, { first, k: "two_step", r: 2 });
  }
  const second = accepted(ctx, "second", "second");
  if (second === undefined) return need({ second: ask("Second answer?", "second") }, state);
  return text(`two_step done first=${state.first} second=${second}`);
}

async function stateOnly(ctx) {
  const raw = ctx.mcpReq.requestState();
  // No inputRequests at all: the client just waits briefly and retries with the state.
  if (raw === undefined) return need({}, { job: "job-42", k: "state_only", r: 1 });
  return text(`state_only done ${decodeState(raw, "state_only").job}`);
}

async function progressAsk({ delay_ms: delay = 0 }, ctx) {
  // Emitting before the answer upgrades an `auto` response to SSE. Progress only with a
  // token, as the spec says; the SDK drops the log line unless `_meta` opted into logging.
  const token = ctx.mcpReq._meta?.progressToken;
  for (const step of [1, 2, 3]) {
    if (token !== undefined) {
      await ctx.mcpReq.notify({
        method: "notifications/progress",
        params: { progressToken: token, progress: step, total: 3, message: `step ${step}` },
      });
    }
    if (delay) await sleep(delay);
  }
  await ctx.mcpReq.log("info", "progress_ask working", SERVER_NAME);
  const raw = ctx.mcpReq.requestState();
  const confirm = () => ({ confirm: ask("Proceed?", "ok", "boolean") });
  if (raw === undefined) return need(confirm(), { k: "progress_ask", r: 1 });
  decodeState(raw, "progress_ask");
  const ok = accepted(ctx, "confirm", "ok");
  if (ok === undefined && !declined(ctx, "confirm")) return need(confirm(), { k: "progress_ask", r: 1 });
  return text(`progress_ask done ok=${ok === true ? "true" : "false"}`);
}

/** Asks for every input kind at once, no fallback: the SDK's own -32021 when undeclared. */
async function askCapabilities(ctx) {
  if (hasResponses(ctx)) return text("ask_capabilities done");
  return need({
    user_name: ask("What is your name?", "name"),
    greeting: sample("Generate a greeting", 50),
    client_roots: inputRequired.listRoots(),
  });
}

// ---------------------------------------------------------------------------------------
// Conformance fixtures (@modelcontextprotocol/conformance 0.2.0-alpha.12,
// input-required-result-*): the same keys, messages and answers as the Python fixtures.
// ---------------------------------------------------------------------------------------

async function fixtureElicitation(ctx) {
  // Stateless by design: completes whenever `user_name` was answered, re-asks otherwise.
  const name = accepted(ctx, "user_name", "name");
  if (name === undefined) return need({ user_name: ask("What is your name?", "name") });
  return text(`Hello, ${name}!`);
}

async function fixtureSampling(ctx) {
  if (inputResponse(ctx.mcpReq.inputResponses, "capital_question").kind === "missing") {
    return need({ capital_question: sample("What is the capital of France?", 100) });
  }
  return text(`Sampling said: ${sampledText(ctx, "capital_question")}`);
}

async function fixtureListRoots(ctx) {
  if (inputResponse(ctx.mcpReq.inputResponses, "client_roots").kind === "missing") {
    return need({ client_roots: inputRequired.listRoots() });
  }
  return text(`Roots: ${rootUris(ctx, "client_roots").join(", ")}`);
}

async function fixtureRequestState(ctx) {
  const raw = ctx.mcpReq.requestState();
  const confirm = () => ({ confirm: ask("Please confirm", "ok", "boolean") });
  if (raw === undefined) return need(confirm(), { k: "request_state", r: 1 });
  const state = decodeState(raw, "request_state");
  if (accepted(ctx, "confirm", "ok") === undefined) return need(confirm(), state);
  return text(`state-ok (round ${state.r})`);
}

async function fixtureMultipleInputs(ctx) {
  const requests = () => ({
    user_name: ask("What is your name?", "name"),
    greeting: sample("Generate a greeting", 50),
    client_roots: inputRequired.listRoots(),
  });
  const raw = ctx.mcpReq.requestState();
  if (raw === undefined) return need(requests(), { k: "multiple_inputs", r: 1 });
  const state = decodeState(raw, "multiple_inputs");
  const got = ctx.mcpReq.inputResponses ?? {};
  const missing = Object.entries(requests()).filter(([key]) => !(key in got));
  if (missing.length > 0) return need(Object.fromEntries(missing), state);
  const name = accepted(ctx, "user_name", "name");
  const greeting = sampledText(ctx, "greeting");
  const roots = rootUris(ctx, "client_roots").join(", ");
  return text(`multiple_inputs done name=${name} greeting=${greeting} roots=${roots}`);
}

async function fixtureMultiRound(ctx) {
  const step1 = () => ({ step1: ask("Step 1: What is your name?", "name") });
  const step2 = () => ({ step2: ask("Step 2: What is your favorite color?", "color") });
  const raw = ctx.mcpReq.requestState();
  if (raw === undefined) return need(step1(), { k: "multi_round", r: 1 });
  const state = decodeState(raw, "multi_round");
  if (state.r === 1) {
    const name = accepted(ctx, "step1", "name");
    if (name === undefined) return need(step1(), state);
    return need(step2(), { k: "multi_round", name, r: 2 });
  }
  const color = accepted(ctx, "step2", "color");
  if (color === undefined) return need(step2(), state);
  return text(`multi_round done name=${state.name} color=${color}`);
}

async function fixtureTamperedState(ctx) {
  // The one scenario a plaintext server must fail: the retry's state is echoed and believed
  // without even being parsed, so `<state>-TAMPERED` is accepted. Only the sidecar fixes this.
  const raw = ctx.mcpReq.requestState();
  if (raw === undefined) return need({ confirm: ask("Please confirm", "ok", "boolean") }, { k: "tampered_state", r: 1 });
  return text(`tampered_state accepted state ${raw}`);
}

async function fixtureCapabilities(ctx) {
  // 2026-07-28 declares capabilities per request: read this request's envelope only.
  if (hasResponses(ctx)) return text("capabilities done");
  const caps = ctx.mcpReq.envelope?.[CLIENT_CAPABILITIES_KEY] ?? {};
  const requests = {};
  if ("elicitation" in caps) requests.user_name = ask("What is your name?", "name");
  if ("sampling" in caps) requests.greeting = sample("Generate a greeting", 50);
  if ("roots" in caps) requests.client_roots = inputRequired.listRoots();
  if (Object.keys(requests).length === 0) return text("capabilities done (client declared no input capabilities)");
  return need(requests);
}

const EMPTY = undefined;
const FIXTURE = "Conformance fixture.";

/** [name, description, input schema (zod) or EMPTY, handler]. */
const TOOLS = [
  [
    "provision",
    "Provision a machine; asks for the region. Trusts its plaintext requestState (tier).",
    z.object({ name: z.string() }),
    provision,
  ],
  ["two_step", "Asks twice, state carries the first answer.", EMPTY, twoStep],
  ["state_only", "First round returns only requestState.", EMPTY, stateOnly],
  [
    "progress_ask",
    "Emits progress (and a log message when opted in) before asking.",
    z.object({ delay_ms: z.number().int().min(0).optional() }),
    progressAsk,
  ],
  ["echo", "Returns its text; never asks.", z.object({ text: z.string() }), async ({ text: t }) => text(t)],
  [
    "param_echo",
    "Returns its region; the argument is mirrored into an Mcp-Param-Region header.",
    // `.meta()` lands in the JSON Schema the SDK lists and checks Mcp-Param-* against.
    z.object({ region: z.string().meta({ "x-mcp-header": "Region" }) }),
    async ({ region }) => text(`param_echo ${region}`),
  ],
  ["ask_capabilities", "Asks for elicitation, sampling and roots; -32021 when undeclared.", EMPTY, askCapabilities],
  ["test_input_required_result_elicitation", FIXTURE, EMPTY, fixtureElicitation],
  ["test_input_required_result_sampling", FIXTURE, EMPTY, fixtureSampling],
  ["test_input_required_result_list_roots", FIXTURE, EMPTY, fixtureListRoots],
  ["test_input_required_result_request_state", FIXTURE, EMPTY, fixtureRequestState],
  ["test_input_required_result_multiple_inputs", FIXTURE, EMPTY, fixtureMultipleInputs],
  ["test_input_required_result_multi_round", FIXTURE, EMPTY, fixtureMultiRound],
  ["test_input_required_result_tampered_state", "Conformance fixture (plaintext: accepts tampered state).", EMPTY, fixtureTamperedState],
  ["test_input_required_result_capabilities", FIXTURE, EMPTY, fixtureCapabilities],
];

// ---------------------------------------------------------------------------------------
// Prompts and resources
// ---------------------------------------------------------------------------------------

function promptResult(value, description) {
  return { description, messages: [{ role: "user", content: { type: "text", text: value } }] };
}

async function greetPrompt(ctx) {
  const raw = ctx.mcpReq.requestState();
  const who = () => ({ name: ask("Who should be greeted?", "name") });
  if (raw === undefined) return need(who(), { k: "greet_prompt", r: 1, style: "formal" });
  const state = decodeState(raw, "greet_prompt");
  const name = accepted(ctx, "name", "name");
  if (name === undefined) return need(who(), state);
  return promptResult(`Greet ${name} (style=${state.style})`, "greeting");
}

async function fixturePrompt(ctx) {
  const context = accepted(ctx, "user_context", "context");
  if (context === undefined) return need({ user_context: ask("What context should the prompt use?", "context") });
  return promptResult(`Use this context: ${context}`, "conformance prompt");
}

async function readConfig(uri, variables, ctx) {
  const env = String(variables.env);
  const confirm = () => ({ confirm: ask(`Reveal the ${env} configuration?`, "ok", "boolean") });
  const raw = ctx.mcpReq.requestState();
  if (raw === undefined) return need(confirm(), { env, k: "config", r: 1, role: "viewer" });
  const state = decodeState(raw, "config");
  const ok = accepted(ctx, "confirm", "ok");
  if (ok === undefined) return need(confirm(), state);
  if (ok !== true) throw new ProtocolError(ProtocolErrorCode.InvalidParams, "configuration read not confirmed");
  // The env comes from the (trusted) state, not the URI: a swapped state reads another env.
  const body = `config for ${state.env} (role=${state.role})`;
  return { contents: [{ uri: uri.href, mimeType: "text/plain", text: body }] };
}

function buildServer() {
  const server = new McpServer(
    { name: SERVER_NAME, version: SERVER_VERSION },
    {
      instructions: "Deliberately vulnerable plaintext-requestState server for mcp-state-guard tests.",
      // Without the capability the SDK drops ctx.mcpReq.log() silently.
      capabilities: { logging: {} },
    },
  );
  for (const [name, description, inputSchema, handler] of TOOLS) {
    const config = inputSchema === EMPTY ? { description } : { description, inputSchema };
    server.registerTool(name, config, handler);
  }
  server.registerPrompt("greet_prompt", { description: "Asks for a name, then greets (style from state)." }, greetPrompt);
  server.registerPrompt("test_input_required_result_prompt", { description: FIXTURE }, fixturePrompt);
  server.registerResource("info", "info://server", { mimeType: "text/plain" }, async (uri) => ({
    contents: [{ uri: uri.href, mimeType: "text/plain", text: `${SERVER_NAME} ${SERVER_VERSION}` }],
  }));
  server.registerResource(
    "config",
    new ResourceTemplate("config://{env}", { list: undefined }),
    { mimeType: "text/plain" },
    readConfig,
  );
  return server;
}

// ---------------------------------------------------------------------------------------
// Serving
// ---------------------------------------------------------------------------------------

function json(res, status, value) {
  const body = JSON.stringify(value);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
  res.end(body);
}

/** Read the whole body (bounded), so it can be recorded and then handed to the SDK as is. */
async function readBody(req) {
  const chunks = [];
  let size = 0;
  for await (const chunk of req) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) return undefined;
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

/** The request as @modelcontextprotocol/node reads it, with the body already buffered. */
function replay(req, body) {
  return {
    method: req.method,
    url: req.url,
    headers: req.headers,
    async *[Symbol.asyncIterator]() {
      if (body.length > 0) yield body;
    },
  };
}

/**
 * The same server over stdio: the SDK's `serveStdio` entry over its `StdioServerTransport`
 * (one message per line). A hand-wired `McpServer.connect(new StdioServerTransport())`
 * serves only the 2025 era (`server/discover` is -32601 there); `serveStdio` lets the
 * opening request choose the era, as the Python SDK's stdio server does.
 */
async function serveStdio() {
  const { serveStdio: serve } = await import("@modelcontextprotocol/server/stdio");
  serve(() => buildServer(), { onerror: (error) => process.stderr.write(`mcp: ${error?.message ?? error}\n`) });
}

function main() {
  const { values } = parseArgs({
    options: {
      stdio: { type: "boolean", default: false },
      port: { type: "string", default: "0" },
      "response-mode": { type: "string", default: "auto" },
      "keep-alive-ms": { type: "string", default: "15000" },
      "no-host-check": { type: "boolean", default: false },
      "no-stdin-watchdog": { type: "boolean", default: false },
    },
  });
  if (values.stdio) {
    void serveStdio();
    return;
  }
  const responseMode = values["response-mode"];
  if (!["json", "sse", "auto"].includes(responseMode)) throw new Error(`bad --response-mode ${responseMode}`);

  const handler = createMcpHandler(() => buildServer(), {
    responseMode,
    keepAliveMs: Number(values["keep-alive-ms"]),
    onerror: (error) => process.stderr.write(`mcp: ${error?.message ?? error}\n`),
  });
  const serve = toNodeHandler(handler);
  const checkHost = values["no-host-check"] ? () => true : localhostHostValidation();

  const server = http.createServer(async (req, res) => {
    const url = new URL(req.url ?? "/", "http://127.0.0.1");
    try {
      if (url.pathname === "/debug/seen" && req.method === "GET") return json(res, 200, SEEN);
      if (url.pathname === "/debug/http" && req.method === "GET") return json(res, 200, HTTP_SEEN);
      if (url.pathname === "/debug/reset" && req.method === "POST") {
        SEEN.length = 0;
        HTTP_SEEN.length = 0;
        return json(res, 200, { ok: true });
      }
      if (url.pathname !== "/mcp") return json(res, 404, { error: "not found" });
      const body = await readBody(req);
      if (body === undefined) return json(res, 413, { error: "body too large" });
      record(req, url, body);
      if (!checkHost(req, res)) return;
      await serve(replay(req, body), res);
    } catch (error) {
      process.stderr.write(`request failed: ${error?.stack ?? error}\n`);
      if (!res.headersSent) json(res, 500, { error: "internal" });
      else res.destroy();
    }
  });

  const stop = () => {
    server.close();
    server.closeAllConnections();
    void handler.close();
    // Bounded: leave even if a stream refuses to end.
    setTimeout(() => process.exit(0), 2000).unref();
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
  if (!values["no-stdin-watchdog"]) {
    process.stdin.on("end", stop);
    process.stdin.on("error", stop);
    process.stdin.resume();
  }
  server.listen(Number(values.port), "127.0.0.1", () => {
    process.stdout.write(`LISTENING ${server.address().port}\n`);
  });
}

main();
