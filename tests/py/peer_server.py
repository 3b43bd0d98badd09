"""How the test peers serve: bind 127.0.0.1 first (the port is known before anyone can grab
it), print `LISTENING <port>` on stdout once listening (stdout carries nothing else), exit 0
on a signal, and exit when stdin reaches EOF (the parent that piped it has gone), so a test
that dies never leaves a server behind. `tests/support/peer.rs` is the other side.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import threading
import warnings
from typing import Any

import uvicorn
from mcp.shared.exceptions import MCPDeprecationWarning
from starlette.types import ASGIApp

log = logging.getLogger("peer_server")


class AnnouncingServer(uvicorn.Server):
    """uvicorn server that announces its port once listening and exits 0 on signals."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started and not self.should_exit and sockets:
            port = sockets[0].getsockname()[1]
            sys.stdout.write(f"LISTENING {port}\n")
            sys.stdout.flush()

    def handle_exit(self, sig: int, frame: Any) -> None:
        # uvicorn records the signal and re-raises it after a graceful shutdown, which would make
        # the exit status -15 instead of 0; a second signal still forces the exit.
        if self.should_exit:
            self.force_exit = True
        self.should_exit = True


def watch_stdin(server: AnnouncingServer) -> None:
    """Stop the server when stdin reaches EOF, i.e. when the parent that piped it has gone."""
    try:
        while os.read(0, 4096):
            pass
    except OSError:
        pass
    log.info("stdin closed; shutting down")
    server.should_exit = True
    # Bounded: if graceful shutdown hangs on a long-lived stream, leave anyway.
    timer = threading.Timer(5.0, lambda: os._exit(0))
    timer.daemon = True
    timer.start()


def arguments(description: str | None) -> argparse.ArgumentParser:
    """The options every peer takes; a peer adds its own before `serve`."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0 = pick a free one)")
    parser.add_argument("--json-response", action="store_true", help="answer application/json instead of SSE")
    parser.add_argument("--no-stdin-watchdog", action="store_true", help="do not exit when stdin reaches EOF")
    parser.add_argument("--log-level", default="warning", help="stderr log level (default: warning)")
    return parser


def serve(args: argparse.Namespace, app: ASGIApp) -> None:
    """Serve `app` as the module docstring says, with the options `arguments` parsed."""
    logging.basicConfig(stream=sys.stderr, level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    warnings.simplefilter("ignore", MCPDeprecationWarning)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    config = uvicorn.Config(
        app,
        log_config=None,  # keep uvicorn's access log off stdout: stdout carries only LISTENING
        access_log=False,
        log_level=args.log_level.lower(),
        lifespan="on",
        timeout_graceful_shutdown=2,
    )
    server = AnnouncingServer(config)
    if not args.no_stdin_watchdog:
        threading.Thread(target=watch_stdin, args=(server,), name="stdin-watchdog", daemon=True).start()
    server.run(sockets=[sock])
