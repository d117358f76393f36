"""How many inputs each fuzz test draws (tests/dialects/test_no_traceback.py, tests/progress/test_fuzz.py):
a few hundred in the quick suite; TORCHJOB_FUZZ_EXAMPLES=N draws N for each:

    TORCHJOB_FUZZ_EXAMPLES=3000 .venv/bin/python -m pytest -q -p no:cacheprovider \\
        tests/dialects/test_no_traceback.py tests/progress/test_fuzz.py
"""

from __future__ import annotations

import os

# every input is answered (read, or refused with a message) within this: a bound against the pathological
# (a YAML bomb, a regex that backtracks), not a speed target; 2 s failed under a load of 20 on two cores
ANSWER_S = 10.0


def examples(quick: int) -> int:
    return int(os.environ.get("TORCHJOB_FUZZ_EXAMPLES") or quick)
