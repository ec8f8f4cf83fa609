"""What keeps the control plane whole beside its turns: pruning by ``policy.retention_days`` (``retention``), a
database that cannot be reached (``outage``), a full disk under ``FAIRPOD_HOME`` (``diskfull``)."""
