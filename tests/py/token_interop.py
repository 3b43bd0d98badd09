"""Drive the reference `RequestStateBoundary` (mcp==2.3.0) for the Rust interop tests.

Reads one JSON request on stdin, writes one JSON answer on stdout:

  {"op": "mint",   "keys": [...], "audience": str|null, "ttl": float,
   "cases": [{"method", "params", "principal", "state"}]}          -> {"tokens": [...]}
  {"op": "open",   "keys": [...], "audience": str|null,
   "cases": [{"method", "params", "principal", "token"}]}          -> {"results": [{"ok", "state"|"reason"}]}
  {"op": "claims", "keys": [...], "tokens": [...]}                  -> {"claims": [<decrypted claims object>...]}
  {"op": "digest", "texts": [<JSON text of params.arguments>...]}  -> {"digests": [...]}
  {"op": "vectors"}                                                -> fixed-nonce reference vectors
  {"op": "principals", "access_tokens": [{"client_id", "iss", "sub"}...]} -> {"principals": [...]}

A case may give `"access_token": {"client_id", "iss", "sub"}` instead of `"principal"`: the
principal is then the one the reference binds for that verified access token
(`authenticated_principal`, from `AccessToken(client_id, subject, claims={"iss": ...})`).

Keys are operator secrets as UTF-8 strings, exactly as a key file line holds them.
The SDK's private helpers are used on purpose: they are the reference being tested.
"""

from __future__ import annotations

import json
import logging
import sys
from types import SimpleNamespace
from unittest import mock

from mcp.server import request_state as rs
from mcp.server.auth.provider import AccessToken
from mcp.shared.exceptions import MCPError


class _Capture(logging.Handler):
    """Collects the boundary's log-only rejection reasons."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _boundary(keys, audience, ttl=600.0, principal=None):
    security = rs.RequestStateSecurity(
        keys=[k.encode() for k in keys], ttl=ttl, bind_principal=lambda ctx: ctx.principal
    )
    return rs.RequestStateBoundary(security, default_audience=audience)


def _reference_principal(access):
    """What the reference binds a state to for a request authenticated with this token."""
    token = AccessToken(
        token="opaque", client_id=access["client_id"], scopes=[], subject=access.get("sub"),
        claims={"iss": access["iss"]},
    )
    with mock.patch.object(rs, "get_access_token", lambda: token):
        return rs.authenticated_principal(None)


def _ctx(case):
    principal = case.get("principal")
    if "access_token" in case:
        principal = _reference_principal(case["access_token"])
    return SimpleNamespace(method=case["method"], params=case.get("params"), principal=principal)


def mint(req):
    boundary = _boundary(req["keys"], req.get("audience"), req.get("ttl", 600.0))
    return {"tokens": [boundary._seal(_ctx(c), c["state"]) for c in req["cases"]]}


def open_(req):
    boundary = _boundary(req["keys"], req.get("audience"))
    capture = _Capture()
    logging.getLogger(rs.__name__).addHandler(capture)
    results = []
    for case in req["cases"]:
        ctx = _ctx(case)
        ctx.params = {**(ctx.params or {}), "requestState": case["token"]}
        capture.messages.clear()
        try:
            state, _binding = boundary._unseal(ctx)
            results.append({"ok": True, "state": state})
        except MCPError as exc:
            results.append({"ok": False, "reason": capture.messages[-1] if capture.messages else str(exc)})
    return {"results": results}


def claims(req):
    """The claims as the reference's codec decrypts and Python's `json` reads them."""
    codec = _boundary(req["keys"], None)._security.codec
    return {"claims": [json.loads(codec.unseal(token)) for token in req["tokens"]]}


def digest(req):
    out = []
    for text in req["texts"]:
        args = json.loads(text)
        _target, d = rs._request_identity("tools/call", {"name": "x", "arguments": args})
        out.append(d)
    return {"digests": out}


def vectors(_req):
    """Deterministic tokens: secret 00..1f as hex text, nonce 0a..15, salt a0..a7, iat 1.8e9."""
    secret = bytes(range(32)).hex()
    nonce = bytes(range(0x0A, 0x16))
    salt = bytes(range(0xA0, 0xA8))
    cases = [
        {"method": "tools/call", "params": {"name": "provision", "arguments": {"name": "web-1", "n": [1, 2.5]}},
         "principal": None, "state": '{"tier":"free"}', "audience": "svc-a"},
        {"method": "prompts/get", "params": {"name": "greet", "arguments": {"who": "\u00e9\U0001f600"}},
         "principal": "alice@example.com", "state": "r=1", "audience": "svc-a"},
        {"method": "resources/read", "params": {"uri": "config://prod"},
         "principal": None, "state": "confirm", "audience": None},
    ]

    def fake_urandom(n):
        return {12: nonce, 8: salt}[n]

    out = []
    for case in cases:
        boundary = _boundary([secret], case["audience"], 600.0)
        with mock.patch.object(rs.os, "urandom", fake_urandom), mock.patch.object(rs.time, "time", lambda: 1.8e9):
            token = boundary._seal(_ctx(case), case["state"])
        out.append({**case, "secret": secret, "token": token})
    return {"vectors": out}


def principals(req):
    return {"principals": [_reference_principal(a) for a in req["access_tokens"]]}


def main() -> None:
    req = json.load(sys.stdin)
    op = {"mint": mint, "open": open_, "claims": claims, "digest": digest, "vectors": vectors,
          "principals": principals}[req["op"]]
    json.dump(op(req), sys.stdout)


if __name__ == "__main__":
    main()
