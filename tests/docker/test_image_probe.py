"""The serving image answers which SGLang it holds: kctl's probe runs inside a real image
(the simulator test image, whose ``sglang`` shim parses as the release it imitates), the
answer is cached by image id, and a profile that names another release than the image holds
is refused with the field and the fix before anything is stopped."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from kctl.errors import ProfileError
from kctl.image import ensure_image
from kctl.image.probe import cache_path, check_image_argv, image_release

from .conftest import REPO, load

if TYPE_CHECKING:
    from docker import DockerClient

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_the_image_names_its_release_and_parses_the_argv(
    engine: DockerClient, profiles: Path, tmp_path: Path
) -> None:
    text = (profiles / "baseline.yaml").read_text().replace('sglang: "0.5.10"', 'sglang: "0.5.23"')
    (profiles / "new.yaml").write_text(text)
    profile = load(profiles / "new.yaml")
    tag = ensure_image(profile, state_dir=tmp_path, repo_root=REPO, client=engine)
    rel = image_release(tag, state_dir=tmp_path, client=engine)
    assert rel.version == "0.5.23"
    assert rel.has("--cuda-graph-max-bs-decode") and not rel.has("--cuda-graph-max-bs")
    check_image_argv(profile, rel)  # the profile's own argv passes the image's parser
    cached = cache_path(tmp_path, str(engine.images.get(tag).id))
    assert cached.is_file() and '"version": "0.5.23"' in cached.read_text()
    # the cache answers the second time: no container is run for it
    before = len(engine.containers.list(all=True, filters={"label": "kctl.probe=true"}))
    assert image_release(tag, state_dir=tmp_path, client=engine).version == "0.5.23"
    assert len(engine.containers.list(all=True, filters={"label": "kctl.probe=true"})) == before
    # a profile naming 0.5.10 on this image: refused with the field and the fix
    old = dataclasses.replace(profile, image=dataclasses.replace(profile.image, sglang="0.5.10"))
    with pytest.raises(ProfileError) as refused:
        check_image_argv(old, rel)
    (line,) = refused.value.problems
    assert line.startswith(f"{profile.source}: image.sglang: the image holds SGLang 0.5.23")
    assert "fix: set image.sglang: '0.5.23'" in line
