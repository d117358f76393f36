"""How many inputs each fuzz test draws (tests/dialects/test_no_traceback.py, tests/progress/test_fuzz.py):
a few hundred in the quick suite; TORCHJOB_FUZZ_EXAMPLES=N draws N for each:

    TORCHJOB_FUZZ_EXAMPLES=3000 .venv/bin/python -m pytest -q -p no:cacheprovider \\
        tests/dialects/test_no_traceback.py tests/progress/test_fuzz.py
"""

from __future__ import annotations

import os

ANSWER_S = 2.0  # every input is answered (read, or refused with a message) within this


def examples(quick: int) -> int:
    return int(os.environ.get("TORCHJOB_FUZZ_EXAMPLES") or quick)
