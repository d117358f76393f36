"""Runs a function that torchjob shipped (torchjob.sdk.ship), in every process of a job: reads
function.py and call.json beside it, calls the function, and on rank 0 prints what it returned as one
JSON line. Standard library only (the image may not have torchjob); torch's error recording is used
when torch is there, so that a failure's traceback is the job's root cause."""

import json
import os
import sys

RESULT_MARK = "@@torchjob-result@@"
UNRETURNABLE_MARK = "@@torchjob-unreturnable@@"
HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    with open(os.path.join(HERE, "call.json")) as f:
        call = json.load(f)
    path = os.path.join(HERE, "function.py")
    with open(path) as f:
        namespace: dict[str, object] = {"__name__": "__torchjob_function__", "__file__": path}
        # named as the user's own file or notebook cell (its line numbers kept), so that a traceback
        # points at the user's lines, not at this generated file
        exec(compile(f.read(), call.get("filename") or path, "exec"), namespace)
    fn = namespace[call["function"]]
    assert callable(fn)
    value = fn(*call["args"], **call["kwargs"])
    if os.environ.get("RANK", "0") != "0":
        return
    nonce = call.get("nonce", "")
    try:
        text = json.dumps(value)
    except (TypeError, ValueError, RecursionError) as e:
        why = f"{call['function']} returned a {type(value).__name__}, which cannot travel back as JSON: {e}"
        print(f"{UNRETURNABLE_MARK} {nonce} {why}", file=sys.stderr, flush=True)
        raise TypeError(why) from None
    print(f"{RESULT_MARK} {nonce} {text}", flush=True)


def shown_from_the_function(e: BaseException) -> None:
    """The error's traceback from the function's own frames on (this runner's are not the user's),
    as Python prints an uncaught one."""
    import traceback

    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == os.path.abspath(__file__):
        tb = tb.tb_next
    traceback.print_exception(type(e), e, tb)


if __name__ == "__main__":
    handler = None
    try:
        from torch.distributed.elastic.multiprocessing.errors import get_error_handler
    except ImportError:
        pass
    else:
        handler = get_error_handler()
    if handler is not None:
        handler.initialize()
    try:
        main()
    except Exception as e:
        if handler is not None:
            handler.record_exception(e)  # torch's error file: the job's root cause (as @record writes it)
        shown_from_the_function(e)
        sys.stderr.flush()
        sys.exit(1)
