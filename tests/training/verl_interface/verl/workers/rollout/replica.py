# ruff: noqa  (a verbatim copy of verl 0.9.1 source: its style, not ours)
"""verl 0.9.1 ``verl/workers/rollout/replica.py``: ``TokenOutput`` (pinned copy)."""

from typing import Any, Optional

from pydantic import BaseModel


class TokenOutput(BaseModel):
    token_ids: list[int]
    """response token ids"""
    log_probs: Optional[list[float]] = None
    """logprobs of response token ids"""
    routed_experts: Optional[Any] = None
    """routed experts of response token ids"""
    stop_reason: Optional[str] = None
    """stop reason: 'completed', 'aborted', or None for unknown"""
    num_preempted: Optional[int] = None
    """number of preempted times for metric calculation"""
    extra_fields: dict[str, Any] = {}
    """Extra fields for dynamic addition."""
