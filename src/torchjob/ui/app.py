"""The dashboard's web app (Starlette, an ASGI toolkit; uvicorn serves it): one page of static
files shipped in the package, a JSON API over `Source`, and one Server-Sent Events stream per page
that pushes the jobs (and the open job) when they change, so that no page reloads or polls.

Every request carries the token the URL was printed with (`?token=` or the `X-Torchjob-Token`
header), as Jupyter's does: other users of the machine can reach 127.0.0.1. The first page sets a
cookie whose value is a key of its own (random, not the token): cookies are not kept apart by port,
so every other service on 127.0.0.1 receives it, and it lets a page read, never act. A
state-changing request (POST) must carry the token in the header: neither the cookie nor the query
(which a browser also sends from another site's form or link) is enough. A request whose Host is
not one of the dashboard's own names is refused (DNS rebinding), and no page sends a Referer.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import resources
from typing import Any
from urllib.parse import quote, urlencode

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from torchjob.api.errors import UserError
from torchjob.runtime import AmbiguousJob, JobNotFound
from torchjob.ui.source import Action, OutOfScope, Source

STATIC = resources.files("torchjob.ui") / "static"
ASSETS = {"app.js": "text/javascript", "app.css": "text/css", "uPlot.iife.min.js": "text/javascript",
          "uPlot.min.css": "text/css"}
PUSH_S = 1.0  # how often a stream looks for changes
# what the jobs page shows of each job (the fields of source.row it reads), in the order the page is sent them
PAGE_COLUMNS = ["name", "namespace", "kind", "state", "percent", "eta", "replicas", "procs", "world", "restarts",
                "created", "reason"]
# the page's rules: its own scripts only (no inline script, no eval), so injected markup cannot run
CSP = ("default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def _same(given: str | None, want: str) -> bool:
    """Constant-time equality of any text a client sent (compare_digest takes ASCII str only)."""
    return given is not None and secrets.compare_digest(given.encode("utf-8", "replace"), want.encode())


def make_app(source: Source, token: str, cookie: str, hosts: list[str] | None = None) -> Starlette:
    """`token`: what the URL carries (reads and actions); `cookie`: the cookie's name, its value a
    read-only key of its own; `hosts`: the Host names a request may carry (None: any)."""
    read_key = secrets.token_hex(24)

    def allowed(request: Request, header_only: bool = False) -> bool:
        if _same(request.headers.get("x-torchjob-token"), token):
            return True
        if header_only:
            return False
        return _same(request.query_params.get("token"), token) or _same(request.cookies.get(cookie), read_key)

    def secure(response: Response) -> Response:
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Cache-Control"] = "no-store"
        response.headers["Referrer-Policy"] = "no-referrer"
        return response

    def guarded(handler: Callable[[Request], Awaitable[Response]], header_only: bool = False,
                ) -> Callable[[Request], Awaitable[Response]]:
        async def run(request: Request) -> Response:
            if not allowed(request, header_only):
                need = "the token in the X-Torchjob-Token header" if header_only else "a token"
                return secure(JSONResponse({"error": f"{need} is needed: open the URL `torchjob ui` printed"}, 403))
            try:
                response = await handler(request)
            except OutOfScope as e:
                response = JSONResponse({"error": e.render()}, 403)
            except AmbiguousJob as e:  # a bare name two kinds hold: which, and the URL of each
                response = JSONResponse(ambiguous(request, e), 409)
            except UserError as e:
                response = JSONResponse({"error": e.render()}, 404 if isinstance(e, JobNotFound) else 409)
            except Exception as e:  # a cluster that refused (RBAC), or went away: the page says so
                response = JSONResponse({"error": f"{type(e).__name__}: {e}"}, 502)
            return secure(response)
        return run

    async def index(request: Request) -> Response:
        """The page, with the latest listing in it when there is one (a data block, which the CSP lets
        be: it is never run): the first screen of rows is drawn as the page loads, not after a second
        round trip for the stream's first event; the stream then leaves out a listing the page has."""
        page = (STATIC / "index.html").read_text()
        rows = source.latest()
        if rows is not None:
            data, digest = jobs_json(rows)
            data = data.replace("<", "\\u003c")  # a job's "</script>" ends nothing: JSON reads it as "<"
            block = f'<script type="application/json" id="jobs-data" data-digest="{digest}">{data}</script>\n'
            page = page.replace('<script src="static/app.js">', block + '<script src="static/app.js">', 1)
        response = Response(page.encode(), media_type="text/html; charset=utf-8")
        response.set_cookie(cookie, read_key, httponly=True, samesite="strict")
        return response

    async def asset(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in ASSETS:
            return JSONResponse({"error": "no such file"}, 404)
        # read here, a few kB from the package: no thread hop per file (FileResponse's stat, open and reads)
        return Response((STATIC / name).read_bytes(), media_type=ASSETS[name])

    async def jobs(request: Request) -> Response:
        return JSONResponse({"where": where(), "jobs": await run_in_threadpool(source.jobs)})

    def where() -> dict[str, Any]:
        w = source.target
        return {"local": not w.kube, "namespace": w.namespace, "context": w.context}

    async def job(request: Request) -> Response:
        ns, name = request.path_params["ns"], request.path_params["name"]
        every = request.query_params.get("replicas") == "all"  # each replica's attempt, however many
        return JSONResponse(await run_in_threadpool(source.job, _ns(ns), name, _kind(request), every))

    async def log(request: Request) -> Response:
        ns, name = request.path_params["ns"], request.path_params["name"]
        attempt = request.query_params.get("attempt")
        out = await run_in_threadpool(source.log, _ns(ns), name, request.query_params.get("replica", ""),
                                      int(attempt) if attempt and attempt.isdigit() else None, _kind(request))
        return JSONResponse(out)

    async def act(request: Request) -> Response:
        ns, name, verb = request.path_params["ns"], request.path_params["name"], request.path_params["verb"]
        if verb not in set(Action):
            return JSONResponse({"error": f"no action {verb!r}: suspend, resume or delete"}, 404)
        kind = _kind(request)
        await run_in_threadpool(source.act, _ns(ns), name, verb, kind)
        return JSONResponse({"ok": True, "verb": verb, "name": name, "kind": kind})

    async def stacks(request: Request) -> Response:
        """Every rank's stacks, taken now (a POST: it signals the job's processes, on a cluster patches its pods)."""
        ns, name = request.path_params["ns"], request.path_params["name"]
        return JSONResponse(await run_in_threadpool(source.stacks, _ns(ns), name, _kind(request)))

    listed: list[Any] = [None, "", ""]  # the latest listing (its rows object), its event's JSON, its digest

    def jobs_json(rows: list[dict[str, Any]]) -> tuple[str, str]:
        """The jobs event's data and its digest, made once per listing for every open page (not again
        per page and per second). Columns once, then each row's values in their order: what the jobs
        page shows and nothing else (a thousand jobs: about 80 kB, not the 330 kB of /api/jobs)."""
        if listed[0] is not rows:
            listed[1] = json.dumps({"where": where(), "cols": PAGE_COLUMNS,
                                    "rows": [[r.get(c) for c in PAGE_COLUMNS] for r in rows]},
                                   default=str, separators=(",", ":"))
            listed[2] = _digest(listed[1])
            listed[0] = rows
        return listed[1], listed[2]

    async def stream(request: Request) -> Response:
        """`event: jobs` with every row, and with ?job=NS/NAME (and &kind=KIND on a cluster) `event: job`
        with that job's page, each when it changed (and at once on connecting)."""
        open_job, open_kind = request.query_params.get("job"), _kind(request)
        have = request.query_params.get("have")  # the digest of the listing the page came with

        async def events() -> AsyncIterator[str]:
            sent: dict[str, str] = {"jobs": have} if have else {}
            while not await request.is_disconnected():
                out: list[tuple[str, str]] = []
                problem: str | None = None
                try:
                    rows = await run_in_threadpool(source.jobs)
                    out.append(("jobs", jobs_json(rows)[0]))
                    problem = source.problem  # the latest listing's (RBAC, a cluster away), else none
                    if open_job:
                        ns, _, name = open_job.partition("/")
                        job = await run_in_threadpool(source.job, _ns(ns), name, open_kind)
                        out.append(("job", json.dumps(job, default=str)))
                except AmbiguousJob as e:  # a page of a bare name two kinds hold: the pages to open
                    problem = ambiguous(request, e)["error"]
                except UserError as e:  # the open job was deleted, say
                    problem = e.render()
                except Exception as e:
                    problem = f"{type(e).__name__}: {e}"
                out.append(("problem", json.dumps({"error": problem})))  # sent when it changes: null clears it
                for kind, data in out:
                    d = _digest(data)
                    if sent.get(kind) != d:
                        sent[kind] = d
                        yield f"event: {kind}\ndata: {data}\n\n"
                yield ": keep-alive\n\n"
                await asyncio.sleep(PUSH_S)

        return StreamingResponse(events(), media_type="text/event-stream")

    routes = [
        Route("/", guarded(index)),
        Route("/static/{name}", guarded(asset)),
        Route("/api/jobs", guarded(jobs)),
        Route("/api/stream", guarded(stream)),
        Route("/api/jobs/{ns}/{name}", guarded(job)),
        Route("/api/jobs/{ns}/{name}/log", guarded(log)),
        Route("/api/jobs/{ns}/{name}/stacks", guarded(stacks, header_only=True), methods=["POST"]),
        Route("/api/jobs/{ns}/{name}/{verb}", guarded(act, header_only=True), methods=["POST"]),
    ]
    middleware = [Middleware(TrustedHostMiddleware, allowed_hosts=hosts)] if hosts is not None else []
    return Starlette(routes=routes, middleware=middleware)


def ambiguous(request: Request, e: AmbiguousJob) -> dict[str, Any]:
    """The answer to a bare name that jobs of several kinds hold: the kinds, and for each the URL that
    names it (this request's with `kind=`, without the token) and its job page's address."""
    ns = request.path_params.get("ns") or (request.query_params.get("job") or "-").partition("/")[0]
    query = {k: v for k, v in request.query_params.items() if k not in ("token", "kind")}
    choices = [{"kind": k, "url": f"{request.url.path}?{urlencode({**query, 'kind': k.lower()})}",
                "page": f"/#/job/{quote(ns, safe='')}/{k.lower()}/{quote(e.name, safe='')}"} for k in e.kinds]
    fix = "ask for one by its kind: " + " or ".join(c["url"] for c in choices) + \
        " (its page: " + " or ".join(c["page"] for c in choices) + ")"
    return {"error": f"{e.message}\n    fix: {fix}", "kinds": e.kinds, "choices": choices}


def _kind(request: Request) -> str | None:
    """The kind a request names (`?kind=trainjob`; a TorchJob's `torchjob`), or None for a bare name."""
    return request.query_params.get("kind") or None


def _ns(ns: str) -> str:
    return "" if ns == "-" else ns  # "-": a local job (no namespace)
