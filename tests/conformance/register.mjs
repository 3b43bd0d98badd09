// Preload for `node --import <this file>`: makes the conformance suite start on Node 20.
//
// @modelcontextprotocol/conformance 0.2.0-alpha.12 declares `engines.node >=22` and its single
// bundle does `import { globSync } from "fs"` at top level. On Node 20 that named import does
// not exist, so the whole CLI dies with a SyntaxError before any scenario runs, although only
// `tier-check` ever calls globSync. A resolve hook (installed off-thread by module.register)
// points `fs` / `node:fs` at a shim that re-exports the real module plus a small globSync.
import { register } from "node:module";

register("./fs-globsync-loader.mjs", import.meta.url);
