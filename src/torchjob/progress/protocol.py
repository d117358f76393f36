"""What a replica may POST as a progress report, read into one `Report`. Pure.

Two shapes are accepted, alone or together in one body:

- Kubeflow Trainer's `UpdateTrainJobStatusRequest` (trainer v2.2+, `pkg/apis/trainer/v1alpha1/
  trainjob_types.go` @8c0f505): `{"trainerStatus": {"progressPercentage": 0-100,
  "estimatedRemainingSeconds": >= 0, "metrics": [{"name": "loss", "value": "0.1"}],
  "lastUpdatedTime": "..."}}`, metrics at most 256, names and values 1-64 characters, values strings.
  A body whose trainerStatus is null or missing is accepted and changes nothing, as Trainer's status
  server does (`pkg/statusserver/server.go`).
- torchjob's own: `{"step": 120, "total": 1000, "metrics": {"loss": 0.31, "tokens/s": 5120}}`, from
  which the runtime also works out the rate and the ETA.

Trainer's `lastUpdatedTime` is read but not trusted for stall detection: the time of a report is
when the runtime received it (a replica's clock may be off).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

MAX_BODY_BYTES = 1 << 16  # 64 KiB, as Trainer's status server (maxBodySize)
MAX_METRICS = 256
MAX_METRIC_TEXT = 64
STILL = "stillSeconds"  # a pod's stacks front: no rank of its replica moved for that long (a report of it alone)


class BadReport(ValueError):
    """The body is not a report; the message names the field, why, and what to send instead."""


@dataclass(frozen=True)
class Report:
    step: int | None = None
    total: int | None = None
    percent: float | None = None
    eta_seconds: int | None = None
    metrics: dict[str, str] = field(default_factory=dict)
    rank: int | None = None  # the reporting process's rank, where its replica has several (torchrun's workers)
    # Not progress: how long none of the replica's ranks moved, as its pod's stacks front samples them
    # (kube/inpod/torchjob_stacks.py; runPolicy.hangDeadlineSeconds on a cluster). A report of it alone.
    still_seconds: float | None = None

    @property
    def empty(self) -> bool:
        return self.step is None and self.percent is None and self.eta_seconds is None and not self.metrics


def _int(value: Any, where: str, *, low: int = 0, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or (isinstance(value, float) and not
                                                                          value.is_integer()):
        raise BadReport(f"{where}: must be an integer, got {value!r}")
    n = int(value)
    if n < low or (high is not None and n > high):
        span = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise BadReport(f"{where}: must be {span}, got {n}")
    return n


def _metric_text(value: Any, where: str) -> str:
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            text = str(value)  # nan, inf: worth seeing, and what Python prints for them
        else:
            text = f"{value:.6g}" if isinstance(value, float) else str(value)
    elif isinstance(value, str):
        text = value
    else:
        raise BadReport(f"{where}: a metric's value must be a number or a string, got {type(value).__name__}")
    if not 1 <= len(text) <= MAX_METRIC_TEXT:
        raise BadReport(f"{where}: must be 1-{MAX_METRIC_TEXT} characters, got {len(text)}")
    return text


def _metric_name(name: Any, where: str) -> str:
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_METRIC_TEXT:
        raise BadReport(f"{where}: a metric's name must be a string of 1-{MAX_METRIC_TEXT} characters, got {name!r}")
    return name


def _trainer_status(ts: Any, out: dict[str, Any]) -> None:
    if not isinstance(ts, dict):
        raise BadReport(f"trainerStatus: must be an object, got {type(ts).__name__}")
    if ts.get("progressPercentage") is not None:
        out["percent"] = float(_int(ts["progressPercentage"], "trainerStatus.progressPercentage", high=100))
    if ts.get("estimatedRemainingSeconds") is not None:
        out["eta_seconds"] = _int(ts["estimatedRemainingSeconds"], "trainerStatus.estimatedRemainingSeconds")
    metrics = ts.get("metrics")
    if metrics is not None:
        if not isinstance(metrics, list):
            raise BadReport("trainerStatus.metrics: must be a list of {name, value}")
        if len(metrics) > MAX_METRICS:
            raise BadReport(f"trainerStatus.metrics: at most {MAX_METRICS} entries, got {len(metrics)}")
        for i, m in enumerate(metrics):
            where = f"trainerStatus.metrics[{i}]"
            if not isinstance(m, dict):
                raise BadReport(f"{where}: must be an object with name and value")
            out["metrics"][_metric_name(m.get("name"), f"{where}.name")] = _metric_text(m.get("value"),
                                                                                       f"{where}.value")
    # transformers' KubeflowCallback sends the trainer's own step and total as metrics (Trainer's status
    # has no field for them): they are the report's step and total, so that the history's steps are the
    # trainer's, not a count of reports
    for name, key in (("current_step", "step"), ("total_steps", "total")):
        value = out["metrics"].get(name)
        if value is not None and value.isdigit() and (key == "step" or int(value) >= 1):
            out[key] = int(value)
            del out["metrics"][name]


def _still(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e9:
        raise BadReport(f"{STILL}: must be a number of seconds, 0 or more, got {value!r}")
    return float(value)


def _own(data: dict[str, Any], out: dict[str, Any]) -> None:
    if data.get("rank") is not None:
        out["rank"] = _int(data["rank"], "rank")
    if data.get("step") is not None:
        out["step"] = _int(data["step"], "step")
    if data.get("total") is not None:
        out["total"] = _int(data["total"], "total", low=1)
    if out.get("step") is not None and out.get("total") is not None:  # finer than Trainer's whole percent
        out["percent"] = min(100.0, 100.0 * out["step"] / out["total"])
    metrics = data.get("metrics")
    if metrics is not None:
        if not isinstance(metrics, dict):
            raise BadReport("metrics: must be an object of name: value (torchjob's shape), or send Kubeflow "
                            "Trainer's trainerStatus.metrics list")
        if len(metrics) > MAX_METRICS:
            raise BadReport(f"metrics: at most {MAX_METRICS} entries, got {len(metrics)}")
        for name, value in metrics.items():
            out["metrics"][_metric_name(name, "metrics")] = _metric_text(value, f"metrics.{name}")


def parse(body: bytes) -> Report:
    """The report in a request body; BadReport says what is wrong with it."""
    if len(body) > MAX_BODY_BYTES:
        raise BadReport(f"the body is {len(body)} bytes; at most {MAX_BODY_BYTES}")
    try:
        data = json.loads(body or b"null")
    except (ValueError, UnicodeDecodeError) as e:
        raise BadReport(f"the body is not JSON ({e})") from None
    except RecursionError:  # `[[[[...` 64 KiB deep: the decoder gives up, and so does the report
        raise BadReport("the body is nested too deeply to be a report") from None
    if not isinstance(data, dict):
        raise BadReport('the body must be a JSON object: {"step": N, "total": N, "metrics": {...}} or Kubeflow '
                        'Trainer\'s {"trainerStatus": {...}}')
    if data.keys() == {STILL}:
        return Report(still_seconds=_still(data[STILL]))
    known = {"trainerStatus", "step", "total", "metrics"}
    if not known & data.keys():
        raise BadReport(f"no report in the body (fields {sorted(data)}): send step/total/metrics or trainerStatus")
    out: dict[str, Any] = {"metrics": {}, "percent": None}
    if data.get("trainerStatus") is not None:
        _trainer_status(data["trainerStatus"], out)
    _own(data, out)
    return Report(**out)
