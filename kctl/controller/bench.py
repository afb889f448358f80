"""``kctl bench [PROFILE]``: run a gate workload against what serves now and store it.
Changes nothing on the host, but holds the deploy lock while it measures, so no deploy
replaces the server under it."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from kctl.backend import noted
from kctl.controller import common
from kctl.controller.host import changing_host
from kctl.controller.recover import serving_now
from kctl.controller.signals import InterruptGuard
from kctl.errors import PreconditionFailed

if TYPE_CHECKING:
    from kctl.controller.context import Context


class BenchServingFile(BaseModel):
    """Where ``--bench-serving FILE`` appended the bench_serving lines."""

    path: str
    lines: int


class BenchResult(BaseModel):
    """The result of ``bench``: a measurement of what serves, stored."""

    deployment_id: str = Field(description="the deployment measured (what serves)")
    profile: str
    measurement: dict[str, Any]
    compared_with: str | None = Field(
        default=None, description="the baseline profile compared with"
    )
    table: str | None = None
    verdict: dict[str, Any] | None = None
    warnings: list[str] = Field(default_factory=list)
    bench_serving: BenchServingFile | None = Field(
        default=None,
        description="with --bench-serving FILE: where the bench_serving lines were appended",
    )


def bench(
    ctx: Context, profile_path: str | None = None, *, bench_serving: str | None = None
) -> BenchResult:
    """Measure what serves now with ``profile_path``'s gate (the serving profile's when
    None) and store it; with ``bench_serving``, also append the measurement to that file
    in SGLang's ``bench_serving`` result format (one JSON line per bucket)."""
    from kctl.gate import (
        Measurement,
        check_correctness,
        judge,
        measure,
        plan_workload,
        render_table,
    )

    if ctx.overrides and profile_path is None:
        from kctl.errors import UsageError

        raise UsageError(
            "--set changes a profile's fields, and no PROFILE was given",
            hint="name the profile whose gate to run: kctl bench PROFILE --set FIELD=VALUE",
        )
    if bench_serving is not None and not Path(bench_serving).resolve().parent.is_dir():
        from kctl.errors import UsageError

        raise UsageError(
            f"--bench-serving {bench_serving}: its directory does not exist",
            hint="name a file in an existing directory",
        )
    with changing_host(ctx, "kctl bench") as host:
        store = host.store
        dep = store.serving()
        if dep is None:
            raise PreconditionFailed(
                "nothing serves now, so there is nothing to benchmark",
                hint="deploy a profile first",
            )
        serving_profile = common.profile_of(dep)
        runtime = ctx.runtime(ctx.runtime_kind(serving_profile))
        live = serving_now(store, runtime)
        if live is None or live[0].id != dep.id:
            raise PreconditionFailed(
                f"{dep.id} is recorded as serving but does not run",
                hint="run `kctl status`, then `kctl rollback`",
            )
        gate_profile = common.load(profile_path, ctx.overrides) if profile_path else serving_profile
        fp = common.fingerprint(ctx, gate_profile, serving_profile)
        # a SIGINT is an Interrupted (exit 130, nothing stored) wherever it lands; SIGTERM
        # keeps its default action (bench changes nothing that needs undoing)
        with InterruptGuard(signals=(signal.SIGINT,)):
            meas = measure(
                common.endpoint_of(serving_profile),
                plan_workload(gate_profile.gate),
                fingerprint=fp,
                progress=lambda p: ctx.reporter.progress(f"bench: {p}"),
                clock=ctx.gate_clock(serving_profile),
            )
        store.save_measurement(
            deployment_id=dep.id,
            profile_hash=serving_profile.content_hash,
            fingerprint=fp,
            data=meas.to_dict(),
        )
        result = BenchResult(
            deployment_id=dep.id, profile=serving_profile.name, measurement=meas.to_dict()
        )
        if bench_serving is not None:
            result.bench_serving = _append_bench_serving(
                bench_serving, meas, gate_profile, f"kctl {dep.id} {serving_profile.name}",
                dep.server,
            )  # fmt: skip
        base_path = serving_profile.baseline or gate_profile.baseline
        if base_path:
            # as it was deployed: with the --set given now, else the serving one's
            base = common.load(base_path, ctx.overrides or serving_profile.overrides)
            bfp = common.fingerprint(ctx, gate_profile, base)
            stored = store.latest_measurement(
                base.content_hash, bfp, max_age_s=float("inf"), now=ctx.clock()
            )
            if stored is not None:
                base_meas = Measurement.from_dict(stored[0])
                correctness = check_correctness(
                    base_meas,
                    meas,
                    max_mismatched=gate_profile.gate.correctness.max_mismatched_prompts,
                )
                verdict = judge(base_meas, meas, gate_profile.gate.policy, correctness)
                result.compared_with = base.name
                result.table = noted(ctx.backend, serving_profile, render_table(verdict))
                result.verdict = verdict.to_dict()
            else:
                result.warnings.append(
                    f"no stored measurement of baseline {base.name} under this workload to compare with"
                )
        return result


def _append_bench_serving(
    path: str, meas: Any, gate_profile: Any, tag: str, server_info: dict[str, Any] | None
) -> BenchServingFile:
    """Append ``meas`` to ``path`` as SGLang's bench_serving writes its results."""
    import json

    from kctl.errors import UsageError
    from kctl.gate.bench_serving import bench_serving_rows

    rows = bench_serving_rows(
        meas, output_len=gate_profile.gate.output_tokens, tag=tag, server_info=server_info
    )
    text = "".join(json.dumps(r, allow_nan=False) + "\n" for r in rows)
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        raise UsageError(
            f"--bench-serving {path}: cannot write: {exc.strerror}",
            hint="name a writable file; the measurement itself is stored",
        ) from exc
    return BenchServingFile(path=path, lines=len(rows))
