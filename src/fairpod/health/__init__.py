"""Node health: deep health checks, the monitoring agent, fault injection and automatic recovery.

- ``probe``    — what a node reports about itself (CPU, memory, disk, heartbeat, NVML) and injected faults
- ``checks``   — deep health checks (InstanceStress, InstanceConnectivity) with structured JSON events
- ``agent``    — cheap periodic checks and the condition each finding calls for (reboot, replace)
- ``manager``  — runs the agent and the deep checks for every node and carries out recovery
"""
