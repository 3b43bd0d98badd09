// Preload for `node --import tests/ts/register.mjs <peer>.mjs`: resolves the TypeScript
// peers' package imports from target/ts/node_modules, where tests/ts/install.sh installs
// the pinned SDK (installs go under target/, never into the source tree, and Node's ESM
// resolution only looks in node_modules folders above the importing file).
//
// Only bare specifiers imported by modules in this directory are redirected; everything
// the packages import themselves resolves normally from inside target/ts.
import { register } from "node:module";

register("./deps-loader.mjs", import.meta.url, {
  data: { peers: new URL("./", import.meta.url).href, deps: process.env.STATE_GUARD_TS_DEPS },
});
