// Module customization hooks that give Node 20 an `fs.globSync` (added natively in Node 22).
//
// Imports of `fs` / `node:fs` from any module other than the shim itself resolve to the shim,
// which re-exports every real export and adds `globSync` only when the runtime lacks one, so
// on Node >= 22 the shim is transparent.
const SHIM_URL = "mcp-state-guard:fs-shim";

export async function resolve(specifier, context, nextResolve) {
  if ((specifier === "fs" || specifier === "node:fs") && context.parentURL !== SHIM_URL) {
    return { url: SHIM_URL, shortCircuit: true };
  }
  return nextResolve(specifier, context);
}

export async function load(url, context, nextLoad) {
  if (url !== SHIM_URL) {
    return nextLoad(url, context);
  }
  return { format: "module", shortCircuit: true, source: SHIM_SOURCE };
}

// Kept deliberately small: the suite's only caller is `globSync("**/checks.json", { cwd })`,
// which expects paths relative to `cwd`. Supports `**`, `*`, `?` and the `cwd` option.
const SHIM_SOURCE = `
import fs from "node:fs";
import path from "node:path";
export * from "node:fs";
export default fs;

function toRegExp(pattern) {
  let re = "";
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i];
    if (c === "*" && pattern[i + 1] === "*") {
      // "**/" matches zero or more whole directories.
      i++;
      if (pattern[i + 1] === "/") { i++; re += "(?:.*/)?"; } else { re += ".*"; }
    } else if (c === "*") {
      re += "[^/]*";
    } else if (c === "?") {
      re += "[^/]";
    } else {
      re += c.replace(/[.+^\${}()|[\\]\\\\]/g, "\\\\$&");
    }
  }
  return new RegExp("^" + re + "$");
}

function shimGlobSync(patterns, options = {}) {
  const cwd = options.cwd ? String(options.cwd) : process.cwd();
  const regexps = (Array.isArray(patterns) ? patterns : [patterns]).map(toRegExp);
  const out = [];
  const walk = (rel) => {
    let entries;
    try {
      entries = fs.readdirSync(path.join(cwd, rel), { withFileTypes: true });
    } catch {
      return;
    }
    for (const entry of entries) {
      const child = rel ? rel + "/" + entry.name : entry.name;
      if (regexps.some((r) => r.test(child))) out.push(child.split("/").join(path.sep));
      if (entry.isDirectory()) walk(child);
    }
  };
  walk("");
  return out;
}

export const globSync = fs.globSync ?? shimGlobSync;
`;
