"""Real image builds on a real engine: the simulator serving image FROM the debootstrap base."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from kctl.errors import BuildFailed
from kctl.image import BuildProgress, build_context, build_image, ensure_image, image_labels

from .conftest import load

if TYPE_CHECKING:
    from docker import DockerClient

pytestmark = pytest.mark.docker


def test_build_skip_when_unchanged_and_forced_rebuild(
    engine: DockerClient, profiles: Path, tmp_path: Path
) -> None:
    # a name of its own: the forced rebuild must not re-tag an image that other tests (or a
    # concurrent run on the same engine) are running containers of
    profile = dataclasses.replace(
        load(profiles / "baseline.yaml"), name=f"buildtest-{uuid.uuid4().hex[:8]}"
    )
    ctx = build_context(profile, Path("."))
    state = tmp_path / "state"
    events: list[BuildProgress] = []

    first = build_image(ctx, state_dir=state, client=engine, rebuild=True, progress=events.append)
    assert first.built and first.tag == ctx.tag
    assert first.log_path is not None and "Successfully built" in first.log_path.read_text()
    steps = {e.step for e in events}
    assert "Step 1/6" in steps and "Step 6/6" in steps
    assert all(e.elapsed_s >= 0 for e in events)
    labels = image_labels(engine, ctx.tag) or {}
    labels.pop("kctl.test-base", None)  # inherited from the base image
    assert labels == {
        "kctl.profile": profile.name,
        "kctl.cuda-archs": "none",
        "kctl.version": "0.1.0.dev0",
        "kctl.source-hash": ctx.source_hash,
    }

    again = build_image(ctx, state_dir=state, client=engine)
    assert not again.built and again.image_id == first.image_id and again.log_path is None

    messages: list[str] = []
    tag = ensure_image(
        profile, repo_root=Path("."), state_dir=state, client=engine, progress=messages.append
    )
    assert tag == ctx.tag and messages == [f"image {ctx.tag} is up to date; not rebuilt"]

    try:
        forced = build_image(ctx, state_dir=state, client=engine, rebuild=True)
        assert forced.built
        # --rebuild bypasses the layer cache: the RUN step ran again
        assert forced.log_path is not None and "Using cache" not in forced.log_path.read_text()
    finally:
        engine.images.remove(ctx.tag, force=True)


def test_the_image_runs_the_unchanged_sglang_command(engine: DockerClient, profiles: Path) -> None:
    tag = ensure_image(
        load(profiles / "baseline.yaml"), repo_root=Path("."), state_dir=profiles, client=engine
    )
    out = engine.containers.run(
        tag,
        ["python3", "-c", "import sglang, kctl.sim; print(sglang.__version__)"],
        remove=True,
        network_mode="none",
    )
    assert out.decode().strip() == "0.5.10"


def test_failed_build_names_the_step_and_changes_nothing(
    engine: DockerClient, profiles: Path, tmp_path: Path
) -> None:
    import docker.errors

    good = build_context(load(profiles / "baseline.yaml"), Path("."))
    bad = dataclasses.replace(
        good,
        dockerfile=good.dockerfile
        + 'RUN echo "kctl-test: compiling" && echo "nvcc fatal" >&2 && exit 3\n',
        tag=good.tag.split(":")[0] + ":brokenbuild0",
    )
    with pytest.raises(BuildFailed) as err:
        build_image(bad, state_dir=tmp_path, client=engine, rebuild=True)
    message = str(err.value)
    assert "failed at Step 7/7 (RUN echo" in message
    assert "returned a non-zero code: 3" in message
    assert "nvcc fatal" in message  # the last log lines are quoted
    assert err.value.exit_code == 5
    assert "the running service was not touched" in message
    with pytest.raises(docker.errors.ImageNotFound):
        engine.images.get(bad.tag)
    # the intermediate container of the failed step was removed
    leftovers = engine.containers.list(all=True, filters={"status": "exited"})
    assert not [
        c for c in leftovers if "kctl-test: compiling" in " ".join(c.attrs["Config"]["Cmd"] or [])
    ]


def test_kernel_profile_image_compiles_for_the_profile_archs_and_installs_the_hook(
    engine: DockerClient, tmp_path: Path
) -> None:
    """The two-stage kernel Dockerfile for real: a pure-Python stand-in for kernels/ is
    built into a wheel with the profile's TORCH_CUDA_ARCH_LIST and installed, startup hook
    included, into the system interpreter of a PEP 668 base (as SGLang's image is)."""
    from kctl.profile.model import ImageSpec, Profile

    from .conftest import BASE_IMAGE, REPO

    profile = Profile(
        name=f"fake-kernel-{uuid.uuid4().hex[:8]}",  # its own tag: removed at the end
        source="test",
        image=ImageSpec(
            base=BASE_IMAGE,
            kernel_source="tests/docker/fixtures/kernelpkg",
            cuda_archs=("9.0a", "12.0"),
        ),
    )
    ctx = build_context(profile, REPO)
    result = build_image(ctx, state_dir=tmp_path, client=engine, rebuild=True)
    assert result.built
    labels = image_labels(engine, ctx.tag) or {}
    assert labels["kctl.cuda-archs"] == "9.0a;12.0"
    code = "import fake_kdtree._build_info as b; print(b.TORCH_CUDA_ARCH_LIST)"
    quiet = engine.containers.run(
        ctx.tag, ["python3", "-c", code], remove=True, network_mode="none", stderr=True
    )
    assert quiet.decode().strip() == "9.0a;12.0"  # no hook line without KDTREE_VERIFY
    active = engine.containers.run(
        ctx.tag,
        ["python3", "-c", "pass"],
        remove=True,
        network_mode="none",
        stderr=True,
        stdout=True,
        environment={"KDTREE_VERIFY": "1"},
    )
    assert active.decode().strip() == "kdtree-verify: active kernel=fake archs=9.0a;12.0"
    engine.images.remove(ctx.tag, force=True)


def test_missing_base_image_fails_at_once_without_pulling(
    engine: DockerClient, tmp_path: Path
) -> None:
    from kctl.profile.model import ImageSpec, Profile

    profile = Profile(
        name="nobase",
        source="test",
        image=ImageSpec(base="kctl-test-base:no-such-tag", install_simulator=True),
    )
    ctx = build_context(profile, Path("."))
    with pytest.raises(BuildFailed) as err:
        build_image(ctx, state_dir=tmp_path, client=engine)
    assert str(err.value) == (
        "base image kctl-test-base:no-such-tag is not on this docker engine; kctl does not pull\n"
        "  hint: docker pull kctl-test-base:no-such-tag  (then pin its digest in image.base)"
    )
    assert not (tmp_path / "builds").exists()
