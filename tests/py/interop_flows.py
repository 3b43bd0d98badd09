#!/usr/bin/env python3
"""Several client_flows.py scenarios in one Python SDK client process, for the interop matrix.

Usage:
    python tests/py/interop_flows.py --url http://127.0.0.1:PORT/mcp [--timeout S] SCENARIO ...

Scenarios, with the same names and output shapes as tests/ts/client_flows.mjs so one Rust
test can drive either client (the output object has one key per scenario run):
    auto-all    client_flows.py auto-all (every MRTR tool, prompt and resource through the SDK's
                automatic loop). -> {"results": {...}, "progress": [...], "logs": [...]}
    manual      client_flows.py manual for each flow of MANUAL, on one connection.
                -> {"<kind> <target>": {"states": [...], "rounds": N, "final": text}}
    tamper      client_flows.py tamper. -> {"state_plaintext", "original_state",
                "tampered_state", "retry_error", "text"}
    param-echo  param_echo(region="eu-west-1"), whose argument the tool's schema mirrors into an
                Mcp-Param-Region header: the SDK sends it once it has listed the tools (and
                re-lists by itself on the server's -32020). -> {"text": ...}

Starting the interpreter and importing the SDK costs about a second, so a test cell runs all
its flows here instead of one process per flow. Prints exactly one JSON object on stdout; exit 1
with {"error": ..., "scenario": ...} when a scenario could not run.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import client_flows as flows

# (kind, target, arguments): the same flows as MANUAL in tests/ts/client_flows.mjs.
MANUAL: list[tuple[str, str, dict[str, Any]]] = [
    ("tool", "provision", {"name": "web-1"}),
    ("tool", "two_step", {}),
    ("tool", "state_only", {}),
    ("tool", "progress_ask", {}),
    ("tool", "test_input_required_result_multiple_inputs", {}),
    ("prompt", "greet_prompt", {}),
    ("resource", "config://prod", {}),
    # Not printable ASCII: the SDK sends Mcp-Name as `=?base64?...?=`.
    ("resource", "config://été", {}),
]


def namespace(url: str, rest: list[str] | None = None) -> argparse.Namespace:
    return argparse.Namespace(url=url, mode="auto", rest=rest or [])


async def auto_all(url: str) -> dict[str, Any]:
    return await flows.auto_all(namespace(url))


async def manual(url: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind, target, arguments in MANUAL:
        rest = [kind, target, "--args", json.dumps(arguments)]
        out[f"{kind} {target}"] = await flows.manual(namespace(url, rest))
    return out


async def tamper(url: str) -> dict[str, Any]:
    return await flows.tamper(namespace(url))


async def param_echo(url: str) -> dict[str, Any]:
    async with flows.make_client(url, "auto") as client:
        result = await client.call_tool("param_echo", {"region": "eu-west-1"})
    return {"text": flows.text_of(result)}


SCENARIOS: dict[str, Callable[[str], Awaitable[dict[str, Any]]]] = {
    "auto-all": auto_all,
    "manual": manual,
    "tamper": tamper,
    "param-echo": param_echo,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True, help="MCP endpoint, e.g. http://127.0.0.1:8080/mcp")
    parser.add_argument("--timeout", type=float, default=120.0, help="overall deadline in seconds")
    parser.add_argument("scenarios", nargs="+", choices=sorted(SCENARIOS))
    args = parser.parse_args()

    out: dict[str, Any] = {}

    async def run() -> None:
        with anyio.fail_after(args.timeout):
            for scenario in args.scenarios:
                current[0] = scenario
                out[scenario] = await SCENARIOS[scenario](args.url)

    current = [""]
    try:
        anyio.run(run)
    except Exception as exc:  # noqa: BLE001 - everything becomes the JSON error report
        print(json.dumps({"error": flows.describe(exc), "scenario": current[0]}))
        traceback.print_exc(file=sys.stderr)
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
