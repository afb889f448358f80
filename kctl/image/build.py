"""Build the serving image through the docker SDK's low-level API, with streamed progress.

Skipped when the content-addressed tag already exists (``rebuild=True`` forces a build
without the layer cache). The full engine log goes to ``<state_dir>/builds/<tag>.log``.
A failed build raises :class:`BuildFailed` naming the failing step and its last log
lines; the tag is only applied on success, so a failure leaves the host as it was
(the engine removes the intermediate containers).
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from kctl.errors import BuildFailed
from kctl.image.context import BuildContext, build_context, write_tar
from kctl.profile.model import Profile
from kctl.statedir import ensure_dir, open_fd, write_new

if TYPE_CHECKING:
    from docker import DockerClient

_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")
#: log lines quoted in a BuildFailed message
TAIL_LINES = 15


@dataclass(frozen=True)
class BuildProgress:
    """One progress event: the current step ("Step 3/7"), its instruction, time since
    the build started, and the log line that triggered the event."""

    step: str
    instruction: str
    elapsed_s: float
    line: str


@dataclass(frozen=True)
class BuildResult:
    tag: str
    image_id: str
    #: False when the tag already existed and nothing was built
    built: bool
    log_path: Path | None
    duration_s: float


def log_path_for(state_dir: Path, tag: str) -> Path:
    """``<state_dir>/builds/<tag with / and : replaced>.log``."""
    return Path(state_dir) / "builds" / (re.sub(r"[/:]", "_", tag) + ".log")


def image_labels(client: DockerClient, tag: str) -> dict[str, str] | None:
    """The labels of image ``tag``, or None when the engine does not have it."""
    import docker.errors

    from kctl.runtime.docker import engine_errors

    with engine_errors(f"inspect image {tag}"):
        try:
            image = client.images.get(tag)
        except docker.errors.ImageNotFound:
            return None
        return dict(image.labels or {})


def build_image(
    ctx: BuildContext,
    *,
    state_dir: Path,
    client: DockerClient | None = None,
    rebuild: bool = False,
    progress: Callable[[BuildProgress], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> BuildResult:
    """Build ``ctx`` as ``ctx.tag`` unless that image exists (or ``rebuild`` is set).

    ``progress`` is called for every log line with the current step and elapsed time.
    Raises BuildFailed (exit 5) on a failed build, RuntimeUnavailable without an engine.
    """
    import docker.errors

    from kctl.runtime.docker import connect, engine_errors

    own_client = client is None
    engine = client if client is not None else connect()
    try:
        start = clock()
        if not rebuild:
            with engine_errors(f"inspect image {ctx.tag}"):
                try:
                    existing = engine.images.get(ctx.tag)
                except docker.errors.ImageNotFound:
                    existing = None
            if existing is not None:
                return BuildResult(ctx.tag, str(existing.id), False, None, clock() - start)
        if ctx.base_image:
            _require_base(engine, ctx.base_image)
        log_path = log_path_for(state_dir, ctx.tag)
        ensure_dir(log_path.parent)
        image_id = _stream_build(engine, ctx, log_path, rebuild, progress, clock, start)
        return BuildResult(ctx.tag, image_id, True, log_path, clock() - start)
    finally:
        if own_client:
            engine.close()


def _require_base(engine: DockerClient, base: str) -> None:
    """The base image must be on the engine already: a build never pulls (reproducible,
    works offline, and a missing image fails in a second rather than after a registry
    timeout)."""
    import docker.errors

    from kctl.runtime.docker import engine_errors

    with engine_errors(f"inspect base image {base}"):
        try:
            engine.images.get(base)
        except docker.errors.ImageNotFound:
            raise BuildFailed(
                f"base image {base} is not on this docker engine; kctl does not pull",
                hint=f"docker pull {base}  (then pin its digest in image.base)",
            ) from None


def _new_log(path: Path) -> TextIO:
    write_new(path, b"")
    return os.fdopen(open_fd(path, os.O_WRONLY | os.O_APPEND), "w", encoding="utf-8")


def _stream_build(
    engine: DockerClient,
    ctx: BuildContext,
    log_path: Path,
    nocache: bool,
    progress: Callable[[BuildProgress], None] | None,
    clock: Callable[[], float],
    start: float,
) -> str:
    from kctl.runtime.docker import engine_errors

    step, instruction = "Step 0/?", "(sending build context)"
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    error: str | None = None
    image_id = ""
    # spooled: small contexts never touch the disk, big ones do not fill memory
    with (
        tempfile.SpooledTemporaryFile(max_size=64 << 20) as tar,
        # a predictable name: a new 0600 file, never written through a planted symlink
        _new_log(log_path) as log,
    ):
        write_tar(ctx, tar)
        tar.seek(0)
        log.write(f"# kctl build {ctx.tag} (source hash {ctx.source_hash})\n")
        with engine_errors(f"build {ctx.tag}"):
            chunks = engine.api.build(
                fileobj=tar,
                custom_context=True,
                tag=ctx.tag,
                rm=True,
                forcerm=True,  # remove intermediate containers even when a step fails
                nocache=nocache,
                pull=False,  # base images come from the local engine (pinned, pre-pulled)
                decode=True,
                buildargs=dict(ctx.buildargs),
            )
            for chunk in chunks:
                for line in _lines(chunk):
                    log.write(line + "\n")
                    tail.append(line)
                    m = _STEP.match(line)
                    if m:
                        step, instruction = f"Step {m.group(1)}/{m.group(2)}", m.group(3)
                    if progress is not None:
                        progress(BuildProgress(step, instruction, clock() - start, line))
                if "error" in chunk:
                    error = str(chunk.get("error") or "").strip()
                aux = chunk.get("aux")
                if isinstance(aux, dict) and "ID" in aux:
                    image_id = str(aux["ID"])
        log.write(f"# {'failed' if error else 'done'} after {clock() - start:.1f} s\n")
    if error is not None:
        last = "\n".join(f"    {line}" for line in tail)
        raise BuildFailed(
            f"image build {ctx.tag} failed at {step} ({instruction}): {error}\n"
            f"  last log lines:\n{last}",
            hint=f"full log: {log_path}; the running service was not touched",
        )
    if not image_id:
        with engine_errors(f"inspect image {ctx.tag}"):
            image_id = str(engine.images.get(ctx.tag).id)
    return image_id


def _lines(chunk: dict[str, Any]) -> list[str]:
    """The human-readable lines of one decoded build-stream chunk."""
    text = chunk.get("stream") or chunk.get("status") or ""
    if "error" in chunk:
        text = str(chunk.get("error") or "")
    return [ln.rstrip() for ln in str(text).splitlines() if ln.strip()]


def ensure_image(
    profile: Profile,
    *,
    state_dir: Path,
    repo_root: Path | None = None,
    rebuild: bool = False,
    progress: Callable[[str], None] | None = None,
    client: DockerClient | None = None,
) -> str:
    """The serving image tag of ``profile``, built first when the engine lacks it (or
    when ``rebuild``). ``progress`` receives one-line messages (step, elapsed) for a live
    status line. What ``kctl build`` and the first step of ``kctl deploy`` call."""
    ctx = build_context(profile, repo_root)

    def report(event: BuildProgress) -> None:
        if progress is not None:
            progress(
                f"build {ctx.tag}: {event.step} {event.instruction[:80]} ({event.elapsed_s:.0f} s)"
            )

    result = build_image(ctx, state_dir=state_dir, client=client, rebuild=rebuild, progress=report)
    if progress is not None:
        if result.built:
            progress(f"built {result.tag} in {result.duration_s:.0f} s (log: {result.log_path})")
        else:
            progress(f"image {result.tag} is up to date; not rebuilt")
    return result.tag
