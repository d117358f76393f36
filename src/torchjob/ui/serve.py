"""`torchjob ui`: bind, print the URL (with its token) as the first line on stdout, open the
browser, serve until interrupted."""

from __future__ import annotations

import ipaddress
import secrets
import socket
import sys
import webbrowser

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


def url_of(host: str, port: int, token: str) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/?token={token}"


def serve(target: Target, host: str, port: int, open_browser: bool) -> None:
    import uvicorn

    from torchjob.ui.app import make_app

    if not 0 <= port <= 65535:
        raise UserError(f"--port {port} is not a port", fix="use 1-65535, or leave it out to take a free one")
    sock = bind(host, port)
    if not loopback(host):
        print(f"warning: --host {host} serves the dashboard beyond this machine, over plain HTTP: anyone who "
              "sees the URL (and its token) can suspend and delete your jobs", file=sys.stderr)
    bound = sock.getsockname()[1]
    token = secrets.token_hex(24)
    app = make_app(Source(target).start(), token, cookie=f"torchjob-ui-{bound}")
    url = url_of(host, bound, token)
    print(url, flush=True)  # the first line on stdout, for scripts and tests
    print(f"torchjob ui: serving {target.where}'s jobs at {url} "
          "(Ctrl-C stops it)", file=sys.stderr, flush=True)
    if open_browser:
        webbrowser.open(url)
    config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
