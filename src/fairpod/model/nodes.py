"""Node states: a node's health status (can the engine place jobs on it) and its deep health check's outcome."""

from __future__ import annotations

from enum import StrEnum


class NodeHealth(StrEnum):
    SCHEDULABLE = "Schedulable"
    UNSCHEDULABLE = "Unschedulable"
    PENDING_REBOOT = "UnschedulablePendingReboot"
    PENDING_REPLACEMENT = "UnschedulablePendingReplacement"
    QUARANTINED = "UnschedulableQuarantined"  # no new work; the jobs on it keep running (fairpod node quarantine)


class DeepHealthCheck(StrEnum):
    IN_PROGRESS = "InProgress"
    PASSED = "Passed"
    FAILED = "Failed"
