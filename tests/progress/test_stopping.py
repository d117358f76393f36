"""torchjob.report.stopping in a real process sent a real SIGTERM: True once the notice came (the
loop saves and exits 143), SIGTERM's default where stopping() was never called (the process ends at
once, as before), the script's own handler still run, and no handler taken outside the main thread."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

LOOP = """\
import sys, time
from torchjob.report import stopping
{setup}
print("ready", flush=True)
for step in range(2000):
    time.sleep(0.005)
    if {check}:
        print("saved at", step, flush=True)
        sys.exit(143)
print("never told", flush=True)
"""


def notice(setup: str = "", check: str = "stopping()") -> tuple[int, str]:
    """Start the loop, SIGTERM it once it is ready; its exit status (negative: killed by that
    signal) and its output."""
    return signalled(LOOP.format(setup=textwrap.dedent(setup), check=check))


def signalled(src: str) -> tuple[int, str]:
    proc = subprocess.Popen([sys.executable, "-c", src], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    assert proc.stdout is not None
    before = ""
    while (line := proc.stdout.readline()) != "ready\n":
        assert line, before
        before += line
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    return proc.returncode, before + out


def test_a_loop_that_asks_saves_and_exits_143() -> None:
    rc, out = notice(setup="stopping()")
    assert rc == 143 and out.startswith("saved at "), (rc, out)


def test_a_script_that_never_asks_ends_at_sigterm_as_before() -> None:
    # imported (report() users), never called: SIGTERM keeps its default, not a deaf process
    rc, out = notice(check="False")
    assert rc == -signal.SIGTERM and out == "", (rc, out)


def test_the_scripts_own_handler_runs_too() -> None:
    setup = """\
    import signal
    signal.signal(signal.SIGTERM, lambda s, f: print("mine", flush=True))
    stopping()
    """
    rc, out = notice(setup=setup)
    assert rc == 143 and out.splitlines()[0] == "mine" and out.splitlines()[1].startswith("saved at"), (rc, out)


def test_outside_the_main_thread_sigterm_keeps_its_default() -> None:
    setup = """\
    import threading
    t = threading.Thread(target=stopping); t.start(); t.join()
    """
    rc, out = notice(setup=setup)
    assert rc == -signal.SIGTERM and "outside the main thread" in out, (rc, out)


def test_the_docs_handler_without_torchjob() -> None:
    """docs/how-to/preemption.md's handler for a script that does not import torchjob: the loop reads
    the flag, saves and exits 143."""
    from tests.docs.blocks import tested

    (handler,) = tested("how-to/preemption.md", "test_the_docs_handler_without_torchjob", "python")
    rc, out = notice(setup=handler, check="told")
    assert rc == 143 and out.startswith("saved at "), (rc, out)


def test_the_docs_loop_saves_on_notice() -> None:
    """docs/how-to/preemption.md's loop, with a step and a save of its own."""
    from tests.docs.blocks import tested

    (loop,) = tested("how-to/preemption.md", "test_the_docs_loop_saves_on_notice", "python")
    prelude = ("import time\nstart, steps = 0, 100000\ndef train_one_step(): time.sleep(0.005)\n"
               "def save(step): print('saved at', step, flush=True)\n")
    rc, out = signalled(prelude + loop.replace("for step", "print('ready', flush=True)\nfor step", 1))
    assert rc == 143 and out.startswith("saved at "), (rc, out)
