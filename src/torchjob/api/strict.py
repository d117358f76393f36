"""The base of every document type: unknown fields are errors, so a typo never silently changes a job."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
