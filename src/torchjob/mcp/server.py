"""`torchjob mcp`: the tools of `torchjob.mcp.tools` on the official MCP Python SDK's `MCPServer`, over
stdio (what desktop and command-line agents start) or streamable HTTP (bound to loopback, every request
carrying the token the URL was printed with, as the dashboard's). Each tool answers a short text and the
same facts as structured content; a mistake of the agent's is a tool error (`isError`) whose structured
content names the argument, the reason and the fix. Resources: the reference pages and the examples.
"""

from __future__ import annotations

import hmac
import secrets
import sys
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.resources import FileResource
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from torchjob.api.errors import UserError
from torchjob.mcp.answers import Answer, Mistake
from torchjob.mcp.places import Scope, Where
from torchjob.mcp.tools import ENDED, MAX_TAIL, MAX_WAIT_S, TAIL, Tools
from torchjob.version import __version__

INSTRUCTIONS = """torchjob runs PyTorch distributed training jobs on this machine (supervised processes) or,
with kube=true, on a Kubernetes cluster. To run a job: validate_job, then preview_job (the dry run: what
would run, exactly; it returns a plan_id), then submit_job with that plan_id and the same document or
command. Follow it with wait_job (until a state or a step, bounded by timeout_s), describe_job (state,
progress, ETA, metrics and their history, attempts, events, the root cause of a failure) and job_logs.
A job is a document in any dialect (TorchJob, Kubeflow PyTorchJob, Trainer TrainJob, Volcano Job, T9k)
or the command line's shape: '-j 2x4 train.py -- --lr 0.1' (2 replicas of 4 processes, through torchrun).
The resources torchjob://reference/... document every field and command."""

# The arguments every tool about a place takes (None: the server's own flags).
Kube = Annotated[bool | None, Field(description="Act on the Kubernetes cluster (true) or this machine (false); "
                                                "default: where the server was started for.")]
Namespace = Annotated[str | None, Field(description="With kube: the namespace (default: the server's, else the "
                                                     "kubeconfig context's).")]
Kubeconfig = Annotated[str | None, Field(description="With kube: the kubeconfig file (default: the server's, "
                                                      "else $KUBECONFIG or ~/.kube/config).")]
Context = Annotated[str | None, Field(description="With kube: the kubeconfig context (default: its current one).")]
Name = Annotated[str, Field(description="The job's name, as list_jobs shows it (on a cluster KIND/NAME where a "
                                        "TorchJob and a TrainJob share it).")]
Document = Annotated[str, Field(description="The job's YAML text, in any dialect torchjob reads (TorchJob, "
                                            "Kubeflow PyTorchJob, Trainer TrainJob, Volcano Job, T9k "
                                            "PyTorchTrainingJob).")]
MaybeDocument = Annotated[str | None, Field(description="The job's YAML text, in any dialect (or give command).")]
Command = Annotated[str | None, Field(description="Instead of a document, the job as `torchjob run` takes it: "
                                                  "'-j 1x2 train.py -- --steps 10', '-m pkg.train', '-- bash run.sh' "
                                                  "(paths relative to the server's working directory).")]

READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)


def _changing(destructive: bool, idempotent: bool) -> ToolAnnotations:
    return ToolAnnotations(read_only_hint=False, destructive_hint=destructive, idempotent_hint=idempotent,
                           open_world_hint=False)


def answered(call: Callable[[], Answer]) -> CallToolResult:
    """A tool's answer, or its mistake as a tool error with the argument, the reason and the fix: never a
    traceback, also for what torchjob did not foresee (said as torchjob's fault, the agent's call intact)."""
    try:
        a = call()
    except Mistake as mistake:
        return refused(mistake)
    except UserError as e:
        return refused(Mistake("arguments", e.message, e.fix))
    except Exception as e:  # a bug of torchjob's: said in one line, logged in full on the server's stderr
        import traceback

        traceback.print_exc(file=sys.stderr)
        return refused(Mistake("torchjob", f"{type(e).__name__}: {e}",
                               "this is torchjob's fault, not the call's: report it with the server's stderr"))
    return CallToolResult(content=[TextContent(type="text", text=a.text)], structured_content=a.data)


def refused(m: Mistake) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=m.text())], structured_content=m.data(), is_error=True)


# --- the reference pages and the examples, as resources ----------------------------------------------


def pages_root() -> tuple[Path | None, Path | None]:
    """(reference pages, examples): shipped in the wheel (torchjob/mcp/pages/), else the source tree's
    docs/reference and examples (an editable install)."""
    shipped = Path(str(resources.files("torchjob.mcp"))) / "pages"
    if (shipped / "reference").is_dir():
        return shipped / "reference", shipped / "examples" if (shipped / "examples").is_dir() else None
    repo = Path(__file__).resolve().parents[3]
    ref, ex = repo / "docs" / "reference", repo / "examples"
    return (ref if ref.is_dir() else None), (ex if ex.is_dir() else None)


MIME = {".md": "text/markdown", ".yaml": "application/yaml", ".yml": "application/yaml", ".py": "text/x-python"}


def add_pages(server: MCPServer) -> int:
    """Each reference page (`torchjob://reference/cli.md`) and example file (`torchjob://examples/ddp/job.yaml`);
    read when asked, not at start."""
    ref, ex = pages_root()
    found = []
    if ref is not None:
        found += [(f"torchjob://reference/{p.name}", p, f"torchjob reference: {p.stem}")
                  for p in sorted(ref.glob("*.md"))]
    if ex is not None:
        found += [(f"torchjob://examples/{p.relative_to(ex).as_posix()}", p,
                   f"torchjob example: {p.relative_to(ex).as_posix()}")
                  for p in sorted(ex.rglob("*")) if p.is_file() and p.suffix in MIME]
    for uri, path, title in found:
        server.add_resource(FileResource(uri=uri, name=uri.removeprefix("torchjob://"), title=title,
                                         path=path.resolve(), mime_type=MIME[path.suffix]))
    return len(found)


# --- the server ----------------------------------------------------------------------------------------


def build(scope: Scope, tools: Tools | None = None) -> MCPServer:
    """The server with its tools (only those that read with `scope.read_only`) and resources."""
    t = tools or Tools(scope)
    server: MCPServer = MCPServer("torchjob", title="torchjob", version=__version__, instructions=INSTRUCTIONS,
                                  log_level="WARNING")

    def where(kube: bool | None, namespace: str | None, kubeconfig: str | None, context: str | None) -> Where:
        return Where(kube, namespace, kubeconfig, context)

    def list_jobs(kube: Kube = None, namespace: Namespace = None, kubeconfig: Kubeconfig = None,
                  context: Context = None) -> CallToolResult:
        """Every job: its name, state and progress (percent, step, ETA, latest metrics), restarts and failure
        reason; on this machine, or with kube in a namespace of the cluster."""
        return answered(lambda: t.list_jobs(where(kube, namespace, kubeconfig, context)))

    def describe_job(name: Name, kube: Kube = None, namespace: Namespace = None, kubeconfig: Kubeconfig = None,
                     context: Context = None) -> CallToolResult:
        """One job: state, progress (percent, step, ETA, rate), the latest metrics (loss, ...) and their history
        over steps, each replica's attempts with exit codes, conditions, the latest events, and the root cause
        of a failure (the first failing replica, its exit code or signal, and the error torch recorded)."""
        return answered(lambda: t.describe(name, where(kube, namespace, kubeconfig, context)))

    def job_logs(name: Name, tail: Annotated[int, Field(description=f"The last lines (1-{MAX_TAIL}).")] = TAIL,
                 replica: Annotated[str | None, Field(description="Only this replica, e.g. master-0.")] = None,
                 ranks: Annotated[str | None, Field(description="Only these global ranks' lines, e.g. '0' or '0,3'.")]
                 = None, kube: Kube = None, namespace: Namespace = None, kubeconfig: Kubeconfig = None,
                 context: Context = None) -> CallToolResult:
        """A job's output, its last `tail` lines: every replica's (each line prefixed [worker-1]), or one
        replica's; bounded (64 KiB at most)."""
        return answered(lambda: t.logs(name, tail, replica, ranks, where(kube, namespace, kubeconfig, context)))

    def validate_job(document: Document) -> CallToolResult:
        """Check a job document (any dialect): valid, or each problem with its field, line, reason and fix."""
        return answered(lambda: t.validate(document))

    def preview_job(document: MaybeDocument = None, command: Command = None, kube: Kube = None,
                    namespace: Namespace = None, kubeconfig: Kubeconfig = None, context: Context = None,
                    ) -> CallToolResult:
        """The dry run: exactly what would run (locally each process's command, env and ports; on a cluster
        the objects created), starting nothing. Returns a plan_id that submit_job needs."""
        return answered(lambda: t.preview(document, command, where(kube, namespace, kubeconfig, context)))

    def submit_job(plan_id: Annotated[str | None, Field(description="The plan_id preview_job returned for this "
                                                                    "very document or command.")] = None,
                   document: MaybeDocument = None, command: Command = None, kube: Kube = None,
                   namespace: Namespace = None, kubeconfig: Kubeconfig = None, context: Context = None,
                   ) -> CallToolResult:
        """Start a job detached: the plan preview_job made (pass its plan_id and the same document or command).
        Returns the job's name and state; follow it with wait_job."""
        return answered(lambda: t.submit(document, command, plan_id, where(kube, namespace, kubeconfig, context)))

    def suspend_job(name: Name, kube: Kube = None, namespace: Namespace = None, kubeconfig: Kubeconfig = None,
                    context: Context = None) -> CallToolResult:
        """Stop every replica of a running job (what it did not save is lost); resume_job starts it again."""
        return answered(lambda: t.act("suspend", name, where(kube, namespace, kubeconfig, context)))

    def resume_job(name: Name, kube: Kube = None, namespace: Namespace = None, kubeconfig: Kubeconfig = None,
                   context: Context = None) -> CallToolResult:
        """Start a suspended job's replicas again."""
        return answered(lambda: t.act("resume", name, where(kube, namespace, kubeconfig, context)))

    def delete_job(name: Name, kube: Kube = None, namespace: Namespace = None, kubeconfig: Kubeconfig = None,
                   context: Context = None) -> CallToolResult:
        """Stop a job if it runs, and remove it: its record and logs (on a cluster its pods)."""
        return answered(lambda: t.act("delete", name, where(kube, namespace, kubeconfig, context)))

    def job_stacks(name: Name, all_threads: Annotated[bool, Field(
            description="Every thread's stack, not only each process's main thread.")] = False,
                   kube: Kube = None, namespace: Namespace = None, kubeconfig: Kubeconfig = None,
                   context: Context = None) -> CallToolResult:
        """Where a running job's ranks are now (a hung job: where it hangs): the Python stack of every rank's
        process, identical stacks grouped, innermost call first with each frame's file and line, and the rank
        whose stack differs from the rest named; on a cluster too (not a job annotated torchjob.dev/stacks: "false").
        It stops nothing: each rank pauses while its stack is written (on a cluster, its pods are patched)."""
        return answered(lambda: t.stacks(name, all_threads, where(kube, namespace, kubeconfig, context)))

    def convert_job(document: Document, to: Annotated[str, Field(
            description="The dialect to write: torchjob, kubeflow, volcano or trainjob.")] = "torchjob",
                    ) -> CallToolResult:
        """A job document (any dialect) written in another; what the target cannot express is listed."""
        return answered(lambda: t.convert(document, to))

    def wait_job(name: Name,
                 state: Annotated[str | None, Field(description=f"Until this state ({ENDED!r}: Succeeded or Failed, "
                                                                "the default; or Running, Suspended, ...).")] = None,
                 step: Annotated[int | None, Field(description="Until the job has reported this step.")] = None,
                 timeout_s: Annotated[float, Field(description=f"Wait at most this long (0-{MAX_WAIT_S:g} s); the "
                                                               "job goes on after it.")] = 60.0,
                 kube: Kube = None, namespace: Namespace = None, kubeconfig: Kubeconfig = None,
                 context: Context = None) -> CallToolResult:
        """Wait, bounded, until a job reaches a state or a step, or ends; returns its state and progress and
        whether it got there (reached), with the root cause of a failure."""
        return answered(lambda: t.wait(name, state, step, timeout_s, where(kube, namespace, kubeconfig, context)))

    reading: list[Callable[..., CallToolResult]] = [list_jobs, describe_job, job_logs, validate_job, preview_job,
                                                    convert_job, wait_job]
    changing: list[tuple[Callable[..., CallToolResult], ToolAnnotations]] = [
        (submit_job, _changing(False, False)), (suspend_job, _changing(True, True)),
                (resume_job, _changing(False, True)), (delete_job, _changing(True, True)),
        (job_stacks, _changing(False, True))]  # it signals the ranks (on a cluster, patches the pods): not read-only
    for fn in reading:
        server.add_tool(fn, annotations=READ, structured_output=False)
    if not scope.read_only:
        for fn, note in changing:
            server.add_tool(fn, annotations=note, structured_output=False)
    add_pages(server)
    return server


def serve_stdio(scope: Scope) -> None:
    build(scope).run("stdio")


def token_app(app: Any, token: str) -> Any:
    """The MCP app behind the token: `Authorization: Bearer TOKEN` or `?token=TOKEN` (compared in constant
    time); anything else is a 401 before the SDK sees it."""
    from urllib.parse import parse_qs

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            auth = headers.get(b"authorization", b"").decode("latin-1")
            given = auth[7:].strip() if auth[:7].lower() == "bearer " else None
            if given is None:
                given = (parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token") or [None])[0]
            if given is None or not hmac.compare_digest(given.encode(), token.encode()):
                body = b'{"error": "a token is needed: Authorization: Bearer TOKEN, or ?token=TOKEN (torchjob mcp ' \
                       b'--http printed it)"}'
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return guarded


def serve_http(scope: Scope, host: str, port: int, token: str | None = None) -> None:
    """Streamable HTTP at http://HOST:PORT/mcp; the URL with its token is the first line on stdout."""
    import uvicorn

    from torchjob.ui.serve import listen, loopback, url_of

    sock = listen(host, port, "serves torchjob's tools beyond this machine, over plain HTTP: anyone who sees the "
                              "token can start and delete your jobs")
    bound = sock.getsockname()[1]
    token = token or secrets.token_hex(24)
    server = build(scope)
    # the SDK's DNS-rebinding guard: on loopback only loopback Host and Origin headers
    app = token_app(server.streamable_http_app(host=host if loopback(host) else "0.0.0.0"), token)
    url = url_of(host, bound, token).replace("/?token=", "/mcp?token=")
    print(url, flush=True)  # the first line on stdout, for scripts and tests
    print(f"torchjob mcp: serving {scope.target.where}'s jobs at {url}" + (" (read-only)" if scope.read_only else "")
          + "; give agents the URL, or the header 'Authorization: Bearer <token>' (Ctrl-C stops it)",
          file=sys.stderr, flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=1)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
