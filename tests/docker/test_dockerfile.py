"""The Dockerfile is a pure function of the profile; compared as text."""

from __future__ import annotations

import pytest

from kctl.errors import ProfileError
from kctl.image import render_dockerfile
from kctl.profile.model import ImageSpec, Profile
from tests.docker.expected import kernel_dockerfile

KERNEL = Profile(
    name="kdtree-eager",
    source="profiles/kdtree-eager.yaml",
    image=ImageSpec(
        base="lmsysorg/sglang:v0.5.10-cu130", kernel_source="kernels", cuda_archs=("12.0",)
    ),
)

KERNEL_DOCKERFILE = kernel_dockerfile("kdtree-eager")


def test_kernel_profile_dockerfile() -> None:
    assert render_dockerfile(KERNEL) == KERNEL_DOCKERFILE


def test_render_is_pure() -> None:
    assert render_dockerfile(KERNEL) == render_dockerfile(KERNEL)


def test_arch_list_reaches_torch() -> None:
    import dataclasses

    multi = dataclasses.replace(
        KERNEL, image=dataclasses.replace(KERNEL.image, cuda_archs=("9.0a", "12.0"))
    )
    text = render_dockerfile(multi)
    assert 'ENV TORCH_CUDA_ARCH_LIST="9.0a;12.0"' in text
    assert 'kctl.cuda-archs="9.0a;12.0"' in text


def test_simulator_image_compiles_nothing() -> None:
    prof = Profile(
        name="docker-test",
        source="tests/docker/profiles/baseline.yaml",
        image=ImageSpec(
            base="kctl-test-base:bookworm", kernel_source="kernels", install_simulator=True
        ),
    )
    text = render_dockerfile(prof)
    assert text.count("FROM ") == 1
    assert "FROM kctl-test-base:bookworm\n" in text
    assert "COPY kctl/ /opt/kctl/kctl/" in text
    assert "pip" not in text and "TORCH_CUDA_ARCH_LIST" not in text
    assert 'kctl.cuda-archs="none"' in text


def test_no_kernel_is_the_base_image_plus_labels() -> None:
    text = render_dockerfile(Profile(name="triton-graphs", source="p.yaml"))
    body = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert body[0] == "FROM lmsysorg/sglang:v0.5.10-cu130"
    assert body[1] == "ARG KCTL_SOURCE_HASH=unknown"
    assert body[2].startswith('LABEL kctl.profile="triton-graphs"')


@pytest.mark.parametrize(
    ("image", "message"),
    [
        (
            ImageSpec(base="lmsysorg/sglang:v0.5.10\nRUN rm -rf /"),
            "p.yaml: image.base: not a docker image reference such as "
            "lmsysorg/sglang:v0.5.10-cu130 (got 'lmsysorg/sglang:v0.5.10\\nRUN rm -rf /')",
        ),
        (
            ImageSpec(cuda_archs=("sm_120",)),
            "p.yaml: image.cuda_archs[0]: must look like 12.0, 9.0a or 8.6+PTX (got 'sm_120')",
        ),
        (
            ImageSpec(kernel_source="../elsewhere"),
            "p.yaml: image.kernel_source: must be a relative path inside the repository "
            "such as kernels (got '../elsewhere')",
        ),
    ],
)
def test_unusable_image_fields_are_refused(image: ImageSpec, message: str) -> None:
    with pytest.raises(ProfileError) as err:
        render_dockerfile(Profile(name="p", source="p.yaml", image=image))
    assert err.value.problems == [message]
