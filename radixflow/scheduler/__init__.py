"""Scheduler: policies, checkpoint placement and the round scan (no torch, no runner)."""

from radixflow.scheduler.output import ScheduledChunk, SchedulerOutput, SnapshotSpec, StopReason
from radixflow.scheduler.placement import PLACEMENTS, CheckpointPlacement, make_placement
from radixflow.scheduler.policy import SCHEDULING_POLICIES, ScanAction, SchedulingPolicy, make_policy
from radixflow.scheduler.request import Request, RequestStatus
from radixflow.scheduler.scheduler import Scheduler, SchedulerConfig

__all__ = [
    "PLACEMENTS",
    "SCHEDULING_POLICIES",
    "CheckpointPlacement",
    "Request",
    "RequestStatus",
    "ScanAction",
    "ScheduledChunk",
    "Scheduler",
    "SchedulerConfig",
    "SchedulerOutput",
    "SchedulingPolicy",
    "SnapshotSpec",
    "StopReason",
    "make_placement",
    "make_policy",
]
