"""Structured (JSON) logs, one object a line, as log collectors read them."""

from __future__ import annotations

import json
import logging
import os
from datetime import UTC, datetime


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps({"ts": datetime.now(UTC).isoformat(), "level": record.levelname.lower(),
                           "logger": record.name, "msg": record.getMessage()})


def configure_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("torchjob")
    root.handlers[:] = [handler]
    root.setLevel(os.environ.get("TORCHJOB_LOG_LEVEL", level))
