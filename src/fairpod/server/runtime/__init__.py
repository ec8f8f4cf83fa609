"""The server as a process: ``fairpod up/down`` (``daemon``), the checks before it starts (``startup``), the
composition root that builds the control plane, its executor and its app (``wiring``), the CLI config ``up`` writes
(``cli_config``), the control plane's clock (``steadyclock``), the heap's cycle collector (``heap``)."""
