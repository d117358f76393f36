"""Prometheus metrics named like controller-runtime's, so existing dashboards work."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

CONTROLLER = "torchjob"

RECONCILE_TOTAL = Counter(
    "controller_runtime_reconcile_total", "Total number of reconciliations per controller", ["controller", "result"]
)
RECONCILE_ERRORS = Counter(
    "controller_runtime_reconcile_errors_total", "Total number of reconciliation errors per controller", ["controller"]
)
RECONCILE_TIME = Histogram(
    "controller_runtime_reconcile_time_seconds", "Length of time per reconciliation per controller", ["controller"]
)
ACTIVE_WORKERS = Gauge(
    "controller_runtime_active_workers", "Number of currently used workers per controller", ["controller"]
)
WORKQUEUE_DEPTH = Gauge("workqueue_depth", "Current depth of workqueue", ["name"])
WORKQUEUE_ADDS = Counter("workqueue_adds_total", "Total number of adds handled by workqueue", ["name"])
WORKQUEUE_QUEUE_DURATION = Histogram(
    "workqueue_queue_duration_seconds", "How long in seconds an item stays in workqueue before being requested",
    ["name"],
)
LEADER = Gauge("leader_election_master_status", "Whether this instance is the leader (1) or not (0)", ["name"])

# The progress endpoint (kube/progress/receiver.py and writer.py); the per-job gauges come from its collector.
PROGRESS_REPORTS = Counter("torchjob_progress_reports_total", "Progress reports taken from replicas")
PROGRESS_WRITES = Counter("torchjob_progress_status_writes_total", "Writes of status.progress to the API server")
PROGRESS_REVIEWS = Counter("torchjob_progress_token_reviews_total", "TokenReviews of reporting replicas' tokens",
                           ["result"])
