"""The reference SDK's cost per MRTR round (seal + unseal), for comparison with
`cargo bench --bench token` in the same run on the same machine.

    target/pyvenv/bin/python benches/reference_token.py

Prints µs per round trip (best of 5 repeats) for 64 B and 4 KiB states, with and
without a bound principal, through `RequestStateBoundary` (`mcp==2.3.0`).
"""

import timeit
from types import SimpleNamespace

from mcp.server import request_state as rs

SECRET = b"5f1c0b6a9e2d4f8a7b3c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a"
PRINCIPAL = '["client-1","https://issuer.example","user-42"]'


def state(n: int) -> str:
    head = '{"k":"provision","tier":"free","pad":"'
    return head + "x" * (n - len(head) - 2) + '"}'


def main() -> None:
    for size in (64, 4096):
        for label, principal in (("anonymous", None), ("principal", PRINCIPAL)):
            security = rs.RequestStateSecurity(keys=[SECRET], bind_principal=lambda ctx: ctx.principal)
            boundary = rs.RequestStateBoundary(security, default_audience="svc")
            ctx = SimpleNamespace(
                method="tools/call",
                params={"name": "provision", "arguments": {"name": "web-1", "size": 3}},
                principal=principal,
            )
            s = state(size)

            def round_trip() -> None:
                token = boundary._seal(ctx, s)
                retry = SimpleNamespace(method=ctx.method, params={**ctx.params, "requestState": token}, principal=principal)
                boundary._unseal(retry)

            n = 5000
            best = min(timeit.repeat(round_trip, number=n, repeat=5)) / n * 1e6
            print(f"reference/round_trip/{label}/{size}: {best:.1f} µs")


if __name__ == "__main__":
    main()
