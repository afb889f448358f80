"""The typed results of the commands whose result the CLI itself makes (validate, logs,
lock), and :data:`RESULTS`: every command's result model by the name the JSON envelope
gives it, from which ``kctl schema COMMAND`` and docs/json-output.md are generated."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, TypeAdapter
from pydantic.json_schema import JsonSchemaValue

from kctl.lock.holder import LockInfo


class Validated(BaseModel):
    """One profile file as ``validate`` found it."""

    path: str
    ok: bool
    hash: str | None = Field(default=None, description="the profile's content hash; null: invalid")
    problems: list[str] = Field(default_factory=list, description="file: field: problem (got ...)")
    warnings: list[str] = Field(
        default_factory=list,
        description="valid profiles: flags the release deprecates, with the replacement",
    )


class LogsResult(BaseModel):
    """The result of ``logs``."""

    log: str


class LockRelease(BaseModel):
    """The result of ``lock release``."""

    released: bool
    lock: LockInfo | None = Field(default=None, description="the lock released; null: it was free")


def _registry() -> dict[str, Any]:
    """Command name (as the envelope's ``command``, ``--fleet`` variants apart) -> the
    type of its result."""
    from kctl.controller.bench import BenchResult
    from kctl.controller.deploy import DeployResult
    from kctl.controller.maintenance import BuildResult, GcResult, StopResult
    from kctl.controller.plan import PlanResult
    from kctl.controller.report import ReportResult
    from kctl.controller.rollback import RollbackResult
    from kctl.controller.status import Record, StatusReport
    from kctl.fleet.preview import FleetPlan
    from kctl.fleet.results import FleetDeployResult, FleetRollbackResult
    from kctl.fleet.status import FleetStatus
    from kctl.fleet.stop import FleetStopResult
    from kctl.k8s.results import RenderResult
    from kctl.render import Envelope

    return {
        "envelope": Envelope,
        "deploy": DeployResult,
        "deploy --fleet": FleetDeployResult,
        "rollback": RollbackResult,
        "rollback --fleet": FleetRollbackResult,
        "status": StatusReport,
        "status --fleet": FleetStatus,
        "history": list[Record],
        "history --fleet": list[Record],
        "plan": PlanResult,
        "plan --fleet": FleetPlan,
        "bench": BenchResult,
        "render": RenderResult,
        "validate": list[Validated],
        "report": ReportResult,
        "logs": LogsResult,
        "stop": StopResult,
        "stop --fleet": FleetStopResult,
        "lock show": LockInfo | None,
        "lock release": LockRelease,
        "build": BuildResult,
        "gc": GcResult,
    }


def result_names() -> list[str]:
    """Every name :func:`result_schema` knows, in the order of docs/json-output.md."""
    return [*_registry(), "schema"]


def result_schema(name: str) -> JsonSchemaValue:
    """The JSON Schema (draft 2020-12) of the result of command ``name`` (``deploy``,
    ``deploy --fleet``, ``lock show`` ...; ``envelope``: the envelope around each;
    ``schema``: the JSON Schema of a profile file, which is what ``kctl schema`` prints).
    KeyError for a name it does not know."""
    if name == "schema":
        return {"type": "object", "description": "the JSON Schema of a profile file"}
    kind = _registry()[name]
    schema: JsonSchemaValue = _every_field_present(
        TypeAdapter(kind).json_schema(mode="serialization")
    )
    return schema


def _every_field_present(node: Any) -> Any:
    """The schema as the dumps are: every field of an object is always there (``null``
    where it has no value), so every property is required; the properties' titles (their
    names again) left out."""
    if isinstance(node, list):
        return [_every_field_present(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _every_field_present(v) for k, v in node.items()}
    props = out.get("properties")
    if isinstance(props, dict):
        out["properties"] = {
            k: {a: b for a, b in v.items() if a != "title"} for k, v in props.items()
        }
        out["required"] = list(props)
    return out
