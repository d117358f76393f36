"""`torchjob ui`: bind, print the URL (with its token) as the first line on stdout, open the
browser, serve until interrupted.

The browser is opened on a file only this user can read (0600) that sends it on to the URL, as
Jupyter does, never on the URL itself: a browser's command line is readable by every local user
(/proc/PID/cmdline), the token with it."""

from __future__ import annotations

import html
import ipaddress
import os
import secrets
import signal
import socket
import sys
import tempfile
import webbrowser
from pathlib import Path
from typing import Any

from torchjob.api.errors import UserError
from torchjob.connect import Target
from torchjob.ui.source import Source


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """The listening socket; a port in use or a host that is not this machine's is the user's to fix."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise UserError(f"--host {host!r} is not an address of this machine ({e.strerror})",
                        fix="use 127.0.0.1 (the default), or an address this machine has") from None
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
    except OSError as e:
        sock.close()
        raise UserError(f"--port {port}: cannot listen on {host}:{port} ({e.strerror})",
                        fix="pick another port, or leave --port out to take a free one") from None
    sock.listen(128)
    return sock


def listen(host: str, port: int, beyond: str) -> socket.socket:
    """`bind` of a port the user gave (checked), with a warning, naming `beyond` (what anyone who sees
    the token can do), when the host is not loopback: the dashboard's and `torchjob mcp --http`'s."""
    if not 0 <= port <= 65535:
        raise UserError(f"--port {port} is not a port", fix="use 1-65535, or leave it out to take a free one")
    sock = bind(host, port)
    if not loopback(host):
        print(f"warning: --host {host} {beyond}", file=sys.stderr)
    return sock


def url_of(host: str, port: int, token: str) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/?token={token}"


LOOPBACK_NAMES = ["127.0.0.1", "localhost", "[::1]"]


def allowed_hosts(host: str) -> list[str] | None:
    """The Host names a request may carry: on loopback its own names only (a page of another site
    whose name resolves to 127.0.0.1, DNS rebinding, is refused); beyond loopback any (the names
    that reach this machine are many), as Jupyter's allow_remote_access."""
    if not loopback(host):
        return None
    return [*LOOPBACK_NAMES, f"[{host}]" if ":" in host else host]


def redirect_file(url: str) -> Path:
    """A 0600 HTML file that sends the browser on to `url` (its token inside, never on a command line)."""
    fd, path = tempfile.mkstemp(prefix="torchjob-ui-", suffix=".html")  # 0600, a name of its own
    with os.fdopen(fd, "w") as f:
        u = html.escape(url, quote=True)
        f.write(f'<!doctype html>\n<html><head><meta charset="utf-8"><meta http-equiv="refresh" content="0;url={u}">'
                f'<title>torchjob</title></head>\n<body><p>Opening <a href="{u}">the torchjob dashboard</a>.</p>'
                '</body></html>\n')
    return Path(path)


def remove_on_term(path: Path) -> None:
    """Remove `path` when SIGTERM ends the server (uvicorn raises the signal again once it has
    stopped, and its default action would skip every `finally`), then end as SIGTERM does."""
    def on_term(sig: int, frame: Any) -> None:
        path.unlink(missing_ok=True)
        signal.signal(sig, signal.SIG_DFL)
        signal.raise_signal(sig)

    signal.signal(signal.SIGTERM, on_term)


def serve(target: Target, host: str, port: int, open_browser: bool) -> None:
    import uvicorn

    from torchjob.ui.app import make_app

    sock = listen(host, port, "serves the dashboard beyond this machine, over plain HTTP: anyone who sees the "
                              "URL (and its token) can suspend and delete your jobs")
    bound = sock.getsockname()[1]
    token = secrets.token_hex(24)
    app = make_app(Source(target).start(), token, cookie=f"torchjob-ui-{bound}", hosts=allowed_hosts(host))
    url = url_of(host, bound, token)
    print(url, flush=True)  # the first line on stdout, for scripts and tests
    print(f"torchjob ui: serving {target.where}'s jobs at {url} "
          "(Ctrl-C stops it)", file=sys.stderr, flush=True)
    opened = redirect_file(url) if open_browser else None
    if opened is not None:
        remove_on_term(opened)
        webbrowser.open(opened.as_uri())
    config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
        if opened is not None:
            opened.unlink(missing_ok=True)
