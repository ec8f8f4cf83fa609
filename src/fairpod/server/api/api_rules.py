"""The rules the API enforces that a JSON schema cannot state, stated in the API document next to the schemas.

A schema says which requests are well formed. Some well-formed requests are still refused, for one of two
reasons a schema has no words for: the request names something that must exist *now* (a team, a group, an
instance type of the cluster: data, not a fixed enum) or it breaks a rule between two of its fields (``from``
before ``to``, priority class names unique, the team's name in the body the one in the URL). Each route that
has such rules declares them with :func:`rules`: the operation then carries ``x-fairpod-rules`` (status ->
the rules refused with that status), and the description of that response lists them. Clients, and a schema
fuzzer's "valid data is accepted" check, read there which refusals of a schema-valid request are by design.
Everything a schema *can* say (enums, formats, bounds, unknown fields, list lengths) is said in the schemas.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

EXTENSION = "x-fairpod-rules"

TEAM_EXISTS = "team: a team of the cluster spec"
JOB_FITS = ("the job fits the cluster spec: its team, priority class, instance type(s) and accelerator partition "
            "type exist; a command is given; the job can ever fit the cluster (else: never fits); "
            "min_runtime_seconds is within policy.max_min_runtime_seconds")
JOB_FIELDS = ("rules between fields of the job: min_nodes needs max_nodes, nodes equals min_nodes, min_nodes is "
              "at most max_nodes; command and env are valid UTF-8 without NUL bytes, within the size limits; "
              "env names are variable names")
SERVICE_QUOTA = ("a service's minimum replicas (nodes) fit its team's own quota of at least one instance type it "
                 "names: its minimum never borrows, so beyond that it could never run")
PRIORITY_CLASS = "priority_class: a priority class of the cluster spec (null: none)"
SERVICE_EXECUTOR = ("a service or space needs an executor that restarts one replica of a running job (the local "
                    "executor): the cluster's executor is state, not part of the request")
SPEC_RULES = ("the spec holds together: names are unique (instance groups, instance types, topology levels, groups, "
              "teams, priority classes, a team's quota entries); every instance type, group, parent, deep health "
              "check and MIG profile named exists; groups form a tree; a quota or limit gives count or "
              "accelerators/vcpu/memory_gib, not both, and fits the cluster; executor.kind is an executor a spec "
              "may name; ray_address is auto or HOST:PORT; checkpoint_dir is absolute without '..'; "
              "default_max_runtime_seconds is at most max_runtime_seconds; no team with unfinished jobs is removed "
              "(409)")
TEAM_RULES = ("the cluster spec with this team holds together: group is a group of the spec; every instance_type "
              "(quota, lending and borrow limits, budgets) is an instance type of the cluster, once per list; a "
              "quota or limit gives count or accelerators/vcpu/memory_gib, not both, and fits the cluster")
POLICY_RULES = ("priority class names are unique; a class's default_max_runtime_seconds is at most its "
                "max_runtime_seconds")
USER_RULES = ("teams: teams of the cluster spec, at least one for a member; for a group admin: groups of the cluster "
              "spec, at least one")


def rules(by_status: dict[int, list[str]]) -> dict[str, Any]:
    """``openapi_extra`` for a route: ``x-fairpod-rules`` and, on each status's response, the rules in words."""
    return {EXTENSION: {str(status): list(texts) for status, texts in by_status.items()},
            "responses": {str(status): {"description": "refused by a rule the schema cannot state: "
                                        + "; ".join(texts)} for status, texts in by_status.items()}}


def statuses(operation: dict[str, Any]) -> list[int]:
    """The statuses an operation of the API document refuses a schema-valid request with, by its rules."""
    return sorted(int(s) for s in operation.get(EXTENSION, {}))


BODY = "x-fairpod-body"  # in a route's openapi_extra: the model whose schema its JSON body has (see document)


def body_of(model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` for a route that reads its JSON body as a dict itself (to word its own errors): the body's
    schema in the API document is ``model``'s (:func:`document` writes it there)."""
    return {BODY: model.__name__}


def document(doc: dict[str, Any], models: list[type[BaseModel]]) -> dict[str, Any]:
    """FastAPI's document ``doc`` with ``models`` (and the models they hold) in its components, and the bodies
    marked by :func:`body_of` given their schemas. A model FastAPI put in the components already (the same
    pydantic model: names are unique in fairpod) is kept as FastAPI wrote it."""
    _, top = models_json_schema([(m, "validation") for m in models], ref_template="#/components/schemas/{model}")
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    for name, schema in top.get("$defs", {}).items():
        schemas.setdefault(name, schema)
    for ops in doc.get("paths", {}).values():
        for op in ops.values():
            name = op.pop(BODY, None) if isinstance(op, dict) else None
            if name is not None:
                op["requestBody"]["content"]["application/json"]["schema"] = {"$ref": f"#/components/schemas/{name}"}
    return doc
