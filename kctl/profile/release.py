"""Which SGLang release a profile runs: ``image.sglang`` when set, else the version in
``image.base``'s tag (``lmsysorg/sglang:v0.5.10-cu130`` -> ``0.5.10``). The release's
table (:mod:`kctl.sglang.releases`) then says how kctl spells the launch and what the
server's parser accepts.
"""

from __future__ import annotations

import re
from typing import Protocol

from kctl.profile.rules import Found
from kctl.sglang.releases import Release, UnknownRelease, known_versions, release


class ImageNames(Protocol):
    """What of a profile's ``image:`` names its release (the model's
    :class:`~kctl.profile.model.ImageSpec` is one; this module sits below the model,
    whose validators call :func:`release_problems`)."""

    @property
    def base(self) -> str: ...

    @property
    def sglang(self) -> str | None: ...


class Imaged(Protocol):
    """A profile, as far as its release goes (:class:`~kctl.profile.model.Profile`)."""

    @property
    def image(self) -> ImageNames: ...


#: the release a tag names: ``v0.5.10-cu130``, ``0.5.10.post1``, ``v0.5.23-cu129-amd64``
_TAG_VERSION = re.compile(r"^v?(\d+\.\d+\.\d+(?:\.post\d+)?)(?=$|-)")
#: what kctl imitates when nothing names a release (the simulator's default)
DEFAULT_VERSION = "0.5.10"


def tag_version(image_ref: str) -> str | None:
    """The SGLang version in an image reference's tag, or None (no tag, no version)."""
    ref = image_ref.split("@", 1)[0]
    name, _, tag = ref.rpartition(":")
    if not name or "/" in tag:
        return None  # no tag: the colon belonged to a registry port
    m = _TAG_VERSION.match(tag)
    return m.group(1) if m else None


def release_version(image: ImageNames) -> str | None:
    """The version the profile names: ``image.sglang``, else ``image.base``'s tag."""
    return image.sglang or tag_version(image.base)


def image_release(image: ImageNames) -> Release:
    """The release of ``image``; :class:`UnknownRelease` (exit 2) when it names none kctl
    knows."""
    version = release_version(image)
    if version is None:
        raise UnknownRelease(
            f"the image tag of {image.base!r} names no SGLang release",
            hint=f"set image.sglang to the release the image holds ({_range()})",
        )
    return release(version)


def profile_release(profile: Imaged) -> Release:
    """The release ``profile`` runs (see :func:`image_release`)."""
    return image_release(profile.image)


def _range() -> str:
    known = known_versions()
    return f"kctl knows {known[0]} to {known[-1]}"


def release_problems(image: ImageNames) -> list[Found]:
    """Why ``image`` names no known release (path relative to ``image``), or nothing."""
    if image.sglang is not None:
        try:
            release(image.sglang)
        except UnknownRelease:
            return [
                (
                    ("sglang",),
                    f"is not an SGLang release kctl knows ({_range()}); set the release "
                    "the image holds, or regenerate the table: python -m kctl.sglang.generate",
                    image.sglang,
                )
            ]
        return []
    version = tag_version(image.base)
    if version is None:
        return [
            (
                ("base",),
                "names no SGLang release in its tag; set image.sglang to the release the "
                f"image holds, e.g. '0.5.10' ({_range()})",
                image.base,
            )
        ]
    try:
        release(version)
    except UnknownRelease:
        return [
            (
                ("base",),
                f"holds SGLang {version}, which kctl does not know ({_range()}); use an image "
                "of a known release, or regenerate the table: python -m kctl.sglang.generate",
                image.base,
            )
        ]
    return []
