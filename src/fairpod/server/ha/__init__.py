"""Standby control planes: leader election and fencing (``leader``), the standby's answers (``ha_app``), a replica
that serves as standby until it is elected (``ha_serve``); docs/ha.md."""
