"""A service's stable address (``proxy``: one round-robin proxy per service) and spaces (``spaces``: their API;
``space_proxy``: their authenticating proxy); docs/workloads.md, docs/spaces.md."""
