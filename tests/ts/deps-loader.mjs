// Module customization hook behind register.mjs: a bare specifier (`zod`,
// `@modelcontextprotocol/server`, ...) imported from a file directly in tests/ts is resolved
// as if it were imported from target/ts/package.json (or $STATE_GUARD_TS_DEPS).
import { pathToFileURL } from "node:url";

let peers;
let depsParent;

export async function initialize(data) {
  peers = data.peers;
  const root = data.deps ? pathToFileURL(data.deps.replace(/\/?$/, "/")).href : new URL("../../target/ts/", peers).href;
  depsParent = new URL("package.json", root).href;
}

function isBare(specifier) {
  return !/^(?:[a-z][a-z0-9+.-]*:|\.{0,2}\/)/i.test(specifier);
}

export async function resolve(specifier, context, nextResolve) {
  const parent = context.parentURL ?? "";
  const fromPeer = parent.startsWith(peers) && !parent.slice(peers.length).includes("/");
  if (fromPeer && isBare(specifier)) {
    return nextResolve(specifier, { ...context, parentURL: depsParent });
  }
  return nextResolve(specifier, context);
}
