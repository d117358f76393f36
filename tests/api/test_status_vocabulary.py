"""The typed vocabularies of the status and the spec name the same strings as the documents."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import get_args

import yaml

from torchjob.api import model
from torchjob.api.status import STATE_ORDER, ConditionType, JobState, JobStatus, Reason
from torchjob.core.round.reconcile import set_condition


def test_the_policy_literals_and_enums_agree() -> None:
    assert get_args(model.PolicyEvent) == model.POLICY_EVENTS
    assert get_args(model.PolicyAction) == model.POLICY_ACTIONS


def test_every_condition_type_names_a_state() -> None:
    # but Scheduled: only ever False (a replica waits for a node), dropped once every pod has one
    named = {c.value for c in ConditionType} - {ConditionType.SCHEDULED.value}
    assert {c.value for c in STATE_ORDER} == named
    assert {s.value for s in JobState} == named | {"Pending"}


def test_a_typed_status_writes_the_same_strings() -> None:
    status = JobStatus()
    now = datetime(2026, 1, 1, tzinfo=UTC)
    set_condition(status, ConditionType.CREATED, True, Reason.CREATED, "made", now)
    set_condition(status, ConditionType.FAILED, True, Reason.BACKOFF_LIMIT_EXCEEDED, "out of restarts", now)
    data = status.model_dump(mode="json")
    assert [(c["type"], c["reason"]) for c in data["conditions"]] == [
        ("Created", "Created"), ("Failed", "BackoffLimitExceeded")]
    assert status.state == "Failed" and json.dumps(status.state) == '"Failed"'
    assert yaml.safe_load(yaml.safe_dump(data)) == data  # plain strings, not enum members
    assert all(type(c.reason) is str for c in status.conditions)
    again = JobStatus.model_validate(json.loads(json.dumps(data)))
    assert again == status

