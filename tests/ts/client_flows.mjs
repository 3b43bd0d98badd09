#!/usr/bin/env node
// Drive MCP 2026-07-28 flows with the real TypeScript SDK v2 client
// (@modelcontextprotocol/client 2.4.0) and report what it saw as one JSON object.
//
// The TypeScript twin of tests/py/client_flows.py. Several scenarios run in one process
// (one Node start per test cell instead of one per flow), each on its own Client.
//
// Usage (after tests/ts/install.sh):
//   node --import tests/ts/register.mjs tests/ts/client_flows.mjs --url URL [--timeout S]
//        SCENARIO...
//
// Every Client is pinned to protocol 2026-07-28 (`versionNegotiation: { mode: { pin } }`):
// the SDK's default is still the 2025 `initialize` handshake, and `auto` would fall back to
// it silently. A pinned client probes `server/discover` once at connect.
//
// Scenarios (the output object has one key per scenario run):
//   auto-all          every MRTR tool, prompt and resource of the legacy servers through the
//                     SDK's own retry loop (`inputRequired.autoFulfill`, the default), answering
//                     through the registered elicitation/sampling/roots handlers.
//                     -> {"results": {"tool:<name>": text, "prompt:<name>": text,
//                        "resource:<uri>": text}, "progress": [...], "logs": [...]}
//   manual            the same flows driven by hand (`allowInputRequired: true`), recording
//                     every requestState seen. -> {"<kind> <target>": {"states": [...],
//                     "rounds": N, "final": text}}
//   tamper            provision round 1, then the retry with the state forged: "free" ->
//                     "enterprise" when it is plaintext, else one character of the token
//                     changed. -> {"state_plaintext", "original_state", "tampered_state",
//                     "retry_error": {"code","message","data"} | null, "text"}
//   capability-error  a client declaring only elicitation calls ask_capabilities (which also
//                     asks for sampling and roots). -> {"error": {"code","message","data"} |
//                     null, "text"}
//   param-echo        param_echo(region="eu-west-1"), whose argument the tool's schema mirrors
//                     into an Mcp-Param-Region header. The client knows no schema yet, sends
//                     without the header, gets the server's -32020 (on HTTP 400, the only
//                     status whose JSON-RPC body it reads), re-lists the tools and retries with
//                     the header. -> {"text": ...}
//   unpinned          a Client left on the SDK's default negotiation (`legacy`: the 2025
//                     initialize handshake) calls echo and provision. -> {"protocol_version",
//                     "era", "echo": {"text"|"error"}, "provision": {"text"|"error"}}
//   everything        against @modelcontextprotocol/server-everything, a 2025-era session (the
//                     SDK's default `legacy` negotiation): the roots request it sends after
//                     `initialized`, echo, a tool with progress, a tool asking the client for
//                     sampling, a resource subscription with updates, and logging under
//                     logging/setLevel; ends with DELETE. -> {"session_id",
//                     "session_ids_consistent", "protocol_version", "roots_requests", "echo",
//                     "progress", "long_running", "sampling_requests": [{"prompt",
//                     "system_prompt", "max_tokens"}], "sampling_result", "listed", "toggles",
//                     "updates": [uri, ...], "logs": [{"level","logger","data"}, ...]}
//
// Exit 0 when every scenario ran (even when what it observed is a rejection), 1 with
// {"error": ..., "scenario": ...} when one could not.
import process from "node:process";
import { parseArgs } from "node:util";
import { Client, ProtocolError, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";

const PROTOCOL_VERSION = "2026-07-28";
const LOG_LEVEL_KEY = "io.modelcontextprotocol/logLevel";
const MAX_MANUAL_ROUNDS = 10;
const REQUEST_TIMEOUT_MS = 10_000;

// Values the handlers hand back; keyed by the requested form field (as in client_flows.py).
const ELICIT_DEFAULTS = {
  region: "eu-west-1",
  name: "Alice",
  first: "one",
  second: "two",
  context: "test context",
  color: "blue",
  colour: "green",
};
const SAMPLED_TEXT = "The capital of France is Paris.";
const ROOT = { uri: "file:///tmp/mcp-state-guard-root", name: "test root" };
const ALL_CAPABILITIES = { elicitation: { form: {} }, sampling: {}, roots: {} };

// ---------------------------------------------------------------------------------------
// Answers to input requests (shared by the SDK handlers and the manual loop)
// ---------------------------------------------------------------------------------------

function answerElicitation(params) {
  const content = {};
  for (const [field, spec] of Object.entries(params?.requestedSchema?.properties ?? {})) {
    if (field in ELICIT_DEFAULTS) content[field] = ELICIT_DEFAULTS[field];
    else if (spec?.type === "boolean") content[field] = true;
    else if (spec?.type === "integer" || spec?.type === "number") content[field] = 1;
    else content[field] = "value";
  }
  return { action: "accept", content };
}

function answerSampling() {
  return { role: "assistant", content: { type: "text", text: SAMPLED_TEXT }, model: "test-model", stopReason: "endTurn" };
}

function answerRoots() {
  return { roots: [ROOT] };
}

function answer(request) {
  switch (request.method) {
    case "elicitation/create":
      return answerElicitation(request.params);
    case "sampling/createMessage":
      return answerSampling();
    case "roots/list":
      return answerRoots();
    default:
      throw new Error(`unsupported input request ${request.method}`);
  }
}

// ---------------------------------------------------------------------------------------
// Clients and rendering
// ---------------------------------------------------------------------------------------

async function connect(url, { capabilities = ALL_CAPABILITIES, autoFulfill = true, onLog, pin = true } = {}) {
  const client = new Client(
    { name: "mcp-state-guard-ts-tests", version: "0" },
    {
      capabilities,
      ...(pin && { versionNegotiation: { mode: { pin: PROTOCOL_VERSION } } }),
      inputRequired: { autoFulfill, maxRounds: MAX_MANUAL_ROUNDS },
      // Cached results would hide what the server (or the sidecar) actually answered.
      cacheMode: "bypass",
    },
  );
  if ("elicitation" in capabilities) client.setRequestHandler("elicitation/create", async (r) => answerElicitation(r.params));
  if ("sampling" in capabilities) client.setRequestHandler("sampling/createMessage", async () => answerSampling());
  if ("roots" in capabilities) client.setRequestHandler("roots/list", async () => answerRoots());
  if (onLog) client.setNotificationHandler("notifications/message", async (n) => onLog(n.params.data));
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  return client;
}

/** The text of a tool, prompt or resource result, blocks joined by newlines. */
function textOf(result) {
  if (Array.isArray(result?.content)) {
    const texts = result.content.filter((b) => b.type === "text").map((b) => b.text);
    return (result.isError ? "ERROR: " : "") + texts.join("\n");
  }
  if (Array.isArray(result?.messages)) {
    return result.messages.filter((m) => m.content?.type === "text").map((m) => m.content.text).join("\n");
  }
  if (Array.isArray(result?.contents)) {
    return result.contents.filter((c) => typeof c.text === "string").map((c) => c.text).join("\n");
  }
  return JSON.stringify(result);
}

function errorOf(error) {
  if (error instanceof ProtocolError) return { code: error.code, message: error.message, data: error.data ?? null };
  throw error;
}

const isInputRequired = (result) => result?.resultType === "input_required";
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const options = (extra = {}) => ({ timeout: REQUEST_TIMEOUT_MS, ...extra });

// ---------------------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------------------

const AUTO_TOOLS = [
  ["provision", { name: "web-1" }],
  ["two_step", {}],
  ["state_only", {}],
  ["progress_ask", {}],
  ["echo", { text: "hello" }],
  ["test_input_required_result_elicitation", {}],
  ["test_input_required_result_sampling", {}],
  ["test_input_required_result_list_roots", {}],
  ["test_input_required_result_request_state", {}],
  ["test_input_required_result_multiple_inputs", {}],
  ["test_input_required_result_multi_round", {}],
  ["test_input_required_result_tampered_state", {}],
  ["test_input_required_result_capabilities", {}],
];
const AUTO_PROMPTS = ["greet_prompt", "test_input_required_result_prompt"];
const AUTO_RESOURCES = ["config://prod", "info://server"];

async function autoAll(url) {
  const progress = [];
  const logs = [];
  const client = await connect(url, { onLog: (data) => logs.push(data) });
  const results = {};
  try {
    for (const [name, args] of AUTO_TOOLS) {
      const params = { name, arguments: args };
      let extra = {};
      if (name === "progress_ask") {
        // Progress opts in through the SDK (`onprogress` stamps a progressToken); logging has
        // no client option at 2026, so the per-request `_meta` key is set by hand.
        params._meta = { [LOG_LEVEL_KEY]: "info" };
        extra = { onprogress: (p) => progress.push({ progress: p.progress, total: p.total ?? null, message: p.message ?? null }) };
      }
      results[`tool:${name}`] = textOf(await client.callTool(params, options(extra)));
    }
    for (const name of AUTO_PROMPTS) results[`prompt:${name}`] = textOf(await client.getPrompt({ name }, options()));
    for (const uri of AUTO_RESOURCES) results[`resource:${uri}`] = textOf(await client.readResource({ uri }, options()));
  } finally {
    await client.close();
  }
  return { results, progress, logs };
}

/** Manual flows: [kind, target, arguments]. */
const MANUAL = [
  ["tool", "provision", { name: "web-1" }],
  ["tool", "two_step", {}],
  ["tool", "state_only", {}],
  ["tool", "progress_ask", {}],
  ["tool", "test_input_required_result_multiple_inputs", {}],
  ["prompt", "greet_prompt", {}],
  ["resource", "config://prod", {}],
  // Not printable ASCII: the SDK sends Mcp-Name as `=?base64?...?=`.
  ["resource", "config://été", {}],
];

/** One round of the original request, re-sent with responses and state. */
function sender(client, kind, target, args) {
  return (responses, state) => {
    const retry = {
      ...(responses !== undefined && { inputResponses: responses }),
      ...(state !== undefined && { requestState: state }),
    };
    const manual = options({ allowInputRequired: true });
    if (kind === "tool") return client.callTool({ name: target, arguments: args, ...retry }, manual);
    if (kind === "prompt") return client.getPrompt({ name: target, ...retry }, manual);
    return client.readResource({ uri: target, ...retry }, manual);
  };
}

async function manualOne(client, kind, target, args) {
  const send = sender(client, kind, target, args);
  const states = [];
  let result = await send(undefined, undefined);
  while (isInputRequired(result)) {
    states.push(result.requestState ?? null);
    if (states.length > MAX_MANUAL_ROUNDS) throw new Error(`still input_required after ${MAX_MANUAL_ROUNDS} rounds`);
    const requests = Object.entries(result.inputRequests ?? {});
    // State-only round: the server wants us back shortly with just the state.
    if (requests.length === 0) await sleep(50);
    const responses = requests.length ? Object.fromEntries(requests.map(([k, r]) => [k, answer(r)])) : undefined;
    result = await send(responses, result.requestState);
  }
  return { states, rounds: states.length + 1, final: textOf(result) };
}

async function manual(url) {
  const client = await connect(url, { autoFulfill: false });
  const out = {};
  try {
    for (const [kind, target, args] of MANUAL) out[`${kind} ${target}`] = await manualOne(client, kind, target, args);
  } finally {
    await client.close();
  }
  return out;
}

/** Forge the state: the real attack when it is plaintext, a one-character flip otherwise. */
function tamperState(state) {
  if (state.includes('"tier":"free"')) return [state.replace('"tier":"free"', '"tier":"enterprise"'), true];
  const middle = Math.floor(state.length / 2);
  const flipped = state[middle] !== "A" ? "A" : "B";
  return [state.slice(0, middle) + flipped + state.slice(middle + 1), false];
}

async function tamper(url) {
  const client = await connect(url, { autoFulfill: false });
  try {
    const send = sender(client, "tool", "provision", { name: "web-1" });
    const first = await send(undefined, undefined);
    if (!isInputRequired(first) || typeof first.requestState !== "string") {
      throw new Error(`provision round 1 did not return a requestState: ${JSON.stringify(first)}`);
    }
    const [forged, plaintext] = tamperState(first.requestState);
    const responses = Object.fromEntries(Object.entries(first.inputRequests ?? {}).map(([k, r]) => [k, answer(r)]));
    const out = { state_plaintext: plaintext, original_state: first.requestState, tampered_state: forged, retry_error: null, text: null };
    try {
      out.text = textOf(await send(responses, forged));
    } catch (error) {
      out.retry_error = errorOf(error);
    }
    return out;
  } finally {
    await client.close();
  }
}

async function capabilityError(url) {
  const client = await connect(url, { capabilities: { elicitation: { form: {} } } });
  try {
    return { error: null, text: textOf(await client.callTool({ name: "ask_capabilities", arguments: {} }, options())) };
  } catch (error) {
    return { error: errorOf(error), text: null };
  } finally {
    await client.close();
  }
}

async function paramEcho(url) {
  const client = await connect(url);
  try {
    return { text: textOf(await client.callTool({ name: "param_echo", arguments: { region: "eu-west-1" } }, options())) };
  } finally {
    await client.close();
  }
}

async function unpinned(url) {
  const client = await connect(url, { pin: false });
  const outcome = async (name, args) => {
    try {
      return { text: textOf(await client.callTool({ name, arguments: args }, options())) };
    } catch (error) {
      return { error: errorOf(error) };
    }
  };
  try {
    const echo = await outcome("echo", { text: "hello" });
    const provision = await outcome("provision", { name: "web-1" });
    return { protocol_version: client.getNegotiatedProtocolVersion(), era: client.getProtocolEra(), echo, provision };
  } finally {
    await client.close();
  }
}

// The `everything` scenario: @modelcontextprotocol/server-everything's names and arguments
// (as in client_flows.py).
const EVERYTHING_URI = "demo://resource/static/document/features.md";
const EVERYTHING_ECHO = "hello everything";
const EVERYTHING_PROMPT = "What is the capital of France?";
const EVERYTHING_WAIT_MS = 10_000;

/** What a session's server sent unasked, in arrival order, with waiting (bounded). */
class Inbox {
  items = [];
  #waiters = [];

  add(item) {
    this.items.push(item);
    for (const wake of this.#waiters.splice(0)) wake();
  }

  async waitFor(what, found) {
    const deadline = Date.now() + EVERYTHING_WAIT_MS;
    while (!this.items.some(found)) {
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no ${what} within ${EVERYTHING_WAIT_MS} ms (received ${JSON.stringify(this.items)})`);
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, left);
        this.#waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }
}

/**
 * server-everything in a 2025-era session (the SDK's default `legacy` negotiation): its roots
 * request at start, echo, a tool with progress, a tool that asks the client for sampling, a
 * resource subscription with updates, and logging under logging/setLevel.
 */
async function everything(url) {
  const sessionIds = [];
  const logs = new Inbox();
  const updates = new Inbox();
  const progress = [];
  const sampling = [];
  let rootsRequests = 0;

  const client = new Client(
    { name: "mcp-state-guard-ts-tests", version: "0" },
    { capabilities: ALL_CAPABILITIES, cacheMode: "bypass" },
  );
  client.setRequestHandler("sampling/createMessage", async (request) => {
    const first = request.params.messages[0]?.content;
    sampling.push({
      prompt: first?.type === "text" ? first.text : null,
      system_prompt: request.params.systemPrompt ?? null,
      max_tokens: request.params.maxTokens,
    });
    return answerSampling();
  });
  client.setRequestHandler("roots/list", async () => {
    rootsRequests += 1;
    return answerRoots();
  });
  client.setNotificationHandler("notifications/message", async (n) =>
    logs.add({ level: n.params.level, logger: n.params.logger ?? null, data: n.params.data }),
  );
  client.setNotificationHandler("notifications/resources/updated", async (n) => updates.add(n.params.uri));
  // Every session id the sidecar answered with, as the Python scenario records them.
  const recording = async (input, init) => {
    const response = await fetch(input, init);
    const sid = response.headers.get("mcp-session-id");
    if (sid) sessionIds.push(sid);
    return response;
  };
  const transport = new StreamableHTTPClientTransport(new URL(url), { fetch: recording });
  await client.connect(transport);
  try {
    const version = client.getNegotiatedProtocolVersion();
    // Unasked, 350 ms after `initialized`: roots/list, then a log line saying so.
    await logs.waitFor("roots log", (log) => String(log.data).startsWith("Roots updated"));
    const call = async (name, args, extra) => textOf(await client.callTool({ name, arguments: args }, options(extra)));
    const echo = await call("echo", { message: EVERYTHING_ECHO });
    const longRunning = await call(
      "trigger-long-running-operation",
      { duration: 1, steps: 4 },
      { onprogress: (p) => progress.push({ progress: p.progress, total: p.total ?? null, message: p.message ?? null }) },
    );
    const sampled = await call("trigger-sampling-request", { prompt: EVERYTHING_PROMPT, maxTokens: 50 });
    const listed = (await client.listResources({}, options())).resources.map((r) => r.uri);
    // Above the acknowledgement's level (info): the subscribe's log is filtered out.
    await client.setLoggingLevel("warning", options());
    await client.subscribeResource({ uri: EVERYTHING_URI }, options());
    const toggledOn = await call("toggle-subscriber-updates", {});
    await updates.waitFor("update", () => true);
    await client.setLoggingLevel("info", options());
    await client.unsubscribeResource({ uri: EVERYTHING_URI }, options());
    const received = [...updates.items];
    await logs.waitFor("unsubscribe log", (log) => String(log.data).includes("Unsubscribe"));
    const toggledOff = await call("toggle-subscriber-updates", {});
    // The SDK's close() leaves the session open; the Python SDK sends DELETE on close.
    await transport.terminateSession();
    return {
      session_id: sessionIds[0] ?? null,
      session_ids_consistent: new Set(sessionIds).size === 1,
      protocol_version: version,
      roots_requests: rootsRequests,
      echo,
      progress,
      long_running: longRunning,
      sampling_requests: sampling,
      sampling_result: sampled,
      listed: listed.includes(EVERYTHING_URI),
      toggles: [toggledOn, toggledOff],
      updates: received,
      logs: logs.items,
    };
  } finally {
    await client.close();
  }
}

const SCENARIOS = { "auto-all": autoAll, manual, tamper, "capability-error": capabilityError, "param-echo": paramEcho, unpinned, everything };

function describe(error) {
  if (error instanceof ProtocolError) return `ProtocolError ${error.code}: ${error.message}`;
  return `${error?.name ?? "Error"}: ${error?.message ?? error}`;
}

async function main() {
  const { values, positionals } = parseArgs({
    options: { url: { type: "string" }, timeout: { type: "string", default: "60" } },
    allowPositionals: true,
  });
  if (!values.url || positionals.length === 0) {
    process.stderr.write(`usage: client_flows.mjs --url URL [--timeout S] (${Object.keys(SCENARIOS).join("|")})...\n`);
    return 2;
  }
  const unknown = positionals.filter((s) => !(s in SCENARIOS));
  if (unknown.length) throw new Error(`unknown scenario(s) ${unknown.join(", ")}`);
  const deadline = setTimeout(() => {
    process.stdout.write(`${JSON.stringify({ error: `timed out after ${values.timeout} s` })}\n`);
    process.exit(1);
  }, Number(values.timeout) * 1000);
  const out = {};
  for (const scenario of positionals) {
    try {
      out[scenario] = await SCENARIOS[scenario](values.url);
    } catch (error) {
      process.stdout.write(`${JSON.stringify({ error: describe(error), scenario })}\n`);
      process.stderr.write(`${error?.stack ?? error}\n`);
      return 1;
    }
  }
  clearTimeout(deadline);
  process.stdout.write(`${JSON.stringify(out)}\n`);
  return 0;
}

process.exitCode = await main();
