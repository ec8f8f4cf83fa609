"""Who is calling and what they may do: API tokens and team RBAC (``auth``), the Unix identity of a caller and the
account a job runs as (``identity``; docs/identity.md), job-scoped tokens for the SDK (``jobtoken``), a team's
container registry logins (``registries``)."""
