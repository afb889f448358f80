"""The serving image's Dockerfile, rendered from a profile by a pure function.

``kctl plan`` prints :func:`render_dockerfile`'s output; ``kctl build`` builds exactly that
text (see :mod:`kctl.image.context` for what enters the build context).
"""

from __future__ import annotations

import re
from importlib import resources

import kctl
from kctl.errors import ProfileError
from kctl.profile.model import Profile
from kctl.profile.release import DEFAULT_VERSION, release_version

TEMPLATE = "Dockerfile.j2"

# name[:tag][@digest], as docker accepts it (lower-case repository path, optional registry
# host with port). Checked here too because the value lands verbatim in a FROM line.
_IMAGE_REF = re.compile(
    r"^(?:[a-zA-Z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:[._-]+[a-z0-9]+)*"
    r"(?:/[a-z0-9]+(?:[._-]+[a-z0-9]+)*)*(?::[\w][\w.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$"
)
_ARCH = re.compile(r"^[0-9]+\.[0-9]+[af]?(?:\+PTX)?$")
_REL_PATH = re.compile(r"^[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*$")


def torch_cuda_arch_list(archs: tuple[str, ...]) -> str:
    """``TORCH_CUDA_ARCH_LIST`` for ``image.cuda_archs`` (torch accepts ``;``-separated)."""
    return ";".join(archs)


def _check(profile: Profile) -> None:
    """Refuse values that would break or inject into the Dockerfile text."""
    img = profile.image
    problems: list[str] = []
    where = profile.source or profile.name
    if not _IMAGE_REF.match(img.base):
        problems.append(
            f"{where}: image.base: not a docker image reference such as "
            f"lmsysorg/sglang:v0.5.10-cu130 (got {img.base!r})"
        )
    for i, arch in enumerate(img.cuda_archs):
        if not _ARCH.match(arch):
            problems.append(
                f"{where}: image.cuda_archs[{i}]: must look like 12.0, 9.0a or 8.6+PTX "
                f"(got {arch!r})"
            )
    if not img.cuda_archs:
        problems.append(f'{where}: image.cuda_archs: needs at least one arch, e.g. ["12.0"]')
    if img.kernel_source is not None and (
        not _REL_PATH.match(img.kernel_source) or ".." in img.kernel_source.split("/")
    ):
        problems.append(
            f"{where}: image.kernel_source: must be a relative path inside the repository "
            f"such as kernels (got {img.kernel_source!r})"
        )
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", profile.name):
        problems.append(
            f"{where}: name: must be letters, digits, '.', '_' or '-' (got {profile.name!r})"
        )
    if problems:
        raise ProfileError(problems)


def render_dockerfile(profile: Profile) -> str:
    """The Dockerfile text for ``profile``: a pure function of the profile's ``image``
    section, its name and the kctl version (raises ProfileError on unusable values).

    With ``image.install_simulator`` the image carries the simulator and its ``sglang``
    shim instead of a compiled kernel (test images), imitating the profile's release (the
    image answers kctl's probe as that release would). The source hash label is filled in
    at build time through the ``KCTL_SOURCE_HASH`` build argument, so this text does not
    depend on the files it builds.
    """
    import jinja2  # lazy: keep jinja2 off the `kctl --help` / `kctl status` path

    _check(profile)
    img = profile.image
    text = (
        resources.files("kctl").joinpath("templates").joinpath(TEMPLATE).read_text(encoding="utf-8")
    )
    env = jinja2.Environment(
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,  # Dockerfile text, not HTML
    )
    compiles_kernel = img.kernel_source is not None and not img.install_simulator
    rendered = env.from_string(text).render(
        base=img.base,
        kernel_source=img.kernel_source if compiles_kernel else None,
        install_simulator=img.install_simulator,
        sglang_version=release_version(img) or DEFAULT_VERSION,
        torch_cuda_arch_list=torch_cuda_arch_list(img.cuda_archs),
        # the label states what kctl compiled: "none" when no kernel is built into it
        cuda_archs=torch_cuda_arch_list(img.cuda_archs) if compiles_kernel else "none",
        profile_name=profile.name,
        kctl_version=kctl.__version__,
    )
    return rendered if rendered.endswith("\n") else rendered + "\n"
