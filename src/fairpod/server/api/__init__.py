"""The REST API: the FastAPI app (``app``), one module of routes per area (``routes_*``), what they show (``views``),
the rules of request bodies (``api_rules``), the bounds of what the API accepts (``limits``), job references
(``array_refs``), a spec change's dry run (``spec_changes``), a replica's log (``logs``), the dashboard's queue
positions (``queue_positions``) and Prometheus's ``/metrics`` (``metrics``). It sees the core through ``core.api``
and ``core.queries`` only; a route imports of the server only those, ``errors``, ``api/``, ``access/`` and
``accounting/`` (``tests/test_layers.py``)."""
