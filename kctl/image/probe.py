"""The serving image's own answer to "which SGLang do you hold, and what does its parser
accept": :mod:`kctl.sglang.probe` run inside the image (``python3 -c <probe>``, no network),
turned into a :class:`~kctl.sglang.releases.Release`, cached by image id in
``<state-dir>/images/<id>.json`` (an image id names its content, so the answer never goes
stale). A deploy checks the profile's launch argv with this parser after the image is built
and before anything is stopped (:func:`check_image_argv`)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from kctl.errors import PreflightFailed, ProfileError
from kctl.sglang.releases import Release, release_from_probe

if TYPE_CHECKING:
    from docker import DockerClient

    from kctl.profile.model import Profile

PROBE_SOURCE = (Path(__file__).resolve().parents[1] / "sglang" / "probe.py").read_text()
#: the probe imports SGLang's server_args (heavy on a real image): give it time
PROBE_TIMEOUT_S = 300


def cache_path(state_dir: Path, image_id: str) -> Path:
    return Path(state_dir) / "images" / f"{image_id.split(':')[-1]}.json"


def image_release(image: str, *, state_dir: Path, client: DockerClient | None = None) -> Release:
    """The release ``image`` holds, as its own SGLang describes it (cached by image id).
    :class:`~kctl.errors.PreflightFailed` (exit 5) when the image cannot answer."""
    from kctl.runtime.docker.engine import connect

    client = client or connect()
    try:
        image_id = str(client.images.get(image).id)
    except Exception as exc:  # docker.errors.ImageNotFound, APIError
        raise PreflightFailed(
            f"image {image}: not found in the engine ({exc})", hint="run `kctl build PROFILE`"
        ) from exc
    cache = cache_path(state_dir, image_id)
    if cache.is_file():
        return _parsed(cache.read_text(), image)
    text = _run_probe(client, image)
    release = _parsed(text, image)
    _write_atomic(cache, text)
    return release


def _run_probe(client: DockerClient, image: str) -> str:
    from docker.errors import APIError, ContainerError

    try:
        out = client.containers.run(
            image,
            entrypoint=["python3", "-c", PROBE_SOURCE],
            command=[],
            network_mode="none",
            remove=True,
            stdout=True,
            stderr=False,
            labels={"kctl.probe": "true"},
        )
    except ContainerError as exc:
        said = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
        tail = " | ".join(said.strip().splitlines()[-3:])
        raise PreflightFailed(
            f"image {image}: its SGLang could not describe its server parser ({tail or exc})",
            hint="the image must hold an importable sglang (sglang.srt.server_args); "
            "check image.base",
        ) from exc
    except APIError as exc:
        raise PreflightFailed(
            f"image {image}: the probe container did not run ({exc})",
            hint="check the engine (`docker info`)",
        ) from exc
    return out.decode(errors="replace") if isinstance(out, bytes) else str(out)


def _parsed(text: str, image: str) -> Release:
    try:
        return release_from_probe(text.strip().splitlines()[-1] if text.strip() else "")
    except ValueError as exc:
        raise PreflightFailed(
            f"image {image}: the SGLang probe's answer is not readable ({exc})",
            hint="check image.base",
        ) from exc


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".probe-")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_image_argv(profile: Profile, rel: Release) -> None:
    """Raise :class:`~kctl.errors.ProfileError` (exit 2) when the image's own release
    ``rel`` is not the one the profile names, or its parser refuses the profile's argv."""
    from kctl.launch import argv_problems
    from kctl.profile.release import profile_release
    from kctl.profile.validate import format_path

    where = profile.source or profile.name
    declared = profile_release(profile).version
    if rel.version != declared:
        field = "image.sglang" if profile.image.sglang else "image.base"
        raise ProfileError(
            [
                f"{where}: {field}: the image holds SGLang {rel.version} (asked the image), "
                f"but the profile renders its argv for {declared}; fix: set image.sglang: "
                f"'{rel.version}' (got {declared!r})"
            ]
        )
    lines = [
        f"{where}: {format_path(path)}: {msg} (the image's own parser) (got {value!r})"
        for path, msg, value in argv_problems(profile, rel)
    ]
    if lines:
        raise ProfileError(lines)
