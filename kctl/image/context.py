"""What goes into a serving-image build, and the content-addressed tag derived from it.

:func:`build_context` lists files and renders the Dockerfile; it reads the source tree but
changes nothing. The tag ``kctl/<profile>:<sha256-12>`` hashes the rendered Dockerfile and
every file of the context in a stable order, so an unchanged profile and source give the
same tag and the build is skipped.

The kernel package says which of its files the build reads, in ``build-files.txt`` at its
root (one glob a line). Those files, and no others, are the context: editing the package's
docs, tests, scripts or an untracked note leaves the tag, and so the image, as it is.
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import kctl
from kctl.errors import BuildFailed
from kctl.image.dockerfile import render_dockerfile
from kctl.profile.model import Profile

#: directory names never copied from the simulator package: caches, whose presence must
#: not change the tag
EXCLUDED_DIRS = frozenset(
    {
        "__pycache__",
        ".git",
        ".pytest_cache",
        ".mypy_cache",
        ".ruff_cache",
        "build",
        "dist",
        ".whl",
        "_nvcc_out",
    }
)
EXCLUDED_SUFFIXES = (".pyc", ".pyo", ".so", ".o", ".egg-info")
#: the kernel package's list of the files its build reads, at its root
BUILD_FILES = "build-files.txt"


@dataclass(frozen=True)
class ContextFile:
    """One file of a build context."""

    #: POSIX path inside the context, e.g. ``kernels/setup.py``
    arcname: str
    #: where it is read from on this host
    source: Path
    sha256: str
    executable: bool = False


@dataclass(frozen=True)
class BuildContext:
    """Everything a build sends to the engine, as data (``kctl plan`` can show it)."""

    profile_name: str
    dockerfile: str
    files: tuple[ContextFile, ...]
    #: sha256 over the context files only (image label ``kctl.source-hash``)
    source_hash: str
    #: ``kctl/<profile>:<first 12 hex of sha256(Dockerfile + files)>``
    tag: str
    #: build arguments passed with the build (the Dockerfile declares them)
    buildargs: tuple[tuple[str, str], ...] = ()
    #: the FROM image; it must already be on the engine (kctl never pulls)
    base_image: str = ""

    def describe(self) -> list[str]:
        """One line per context file, for plans and logs."""
        return [f"{f.sha256[:12]}  {f.arcname}" for f in self.files]


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _context_file(path: Path, arcname: str) -> ContextFile:
    return ContextFile(
        arcname=arcname,
        source=path,
        sha256=_sha256_file(path),
        executable=os.access(path, os.X_OK),
    )


def _walk(root: Path, arc_prefix: str) -> Iterator[ContextFile]:
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = Path(dirpath).relative_to(root)
        # prune in place so os.walk does not descend; sorted for a stable order
        dirnames[:] = sorted(
            d for d in dirnames if d not in EXCLUDED_DIRS and not d.endswith(".egg-info")
        )
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if name.endswith(EXCLUDED_SUFFIXES) or not path.is_file():
                continue
            yield _context_file(path, f"{arc_prefix}/{(rel_dir / name).as_posix()}")


def read_build_files(src: Path) -> tuple[str, ...]:
    """The globs of ``src/build-files.txt`` (comments and blank lines dropped)."""
    listing = src / BUILD_FILES
    try:
        text = listing.read_text(encoding="utf-8")
    except OSError as exc:
        raise BuildFailed(
            f"the kernel package {src} has no readable {BUILD_FILES} ({exc.strerror or exc})",
            hint=f"list the files its build reads, one glob a line, in {listing}",
        ) from exc
    globs = (line.split("#", 1)[0].strip() for line in text.splitlines())
    return tuple(g for g in globs if g)


def _kernel_files(src: Path, arc_prefix: str) -> Iterator[ContextFile]:
    """The kernel package's files that its ``build-files.txt`` names."""
    for pattern in read_build_files(src):
        if Path(pattern).is_absolute() or ".." in Path(pattern).parts:
            raise BuildFailed(
                f"{src / BUILD_FILES}: {pattern!r} points outside the kernel package",
                hint="write globs relative to the kernel package's folder",
            )
        matches = sorted(p for p in src.glob(pattern) if p.is_file())
        if not matches:
            raise BuildFailed(
                f"{src / BUILD_FILES}: {pattern!r} matches no file",
                hint="remove the line, or restore the files the build reads",
            )
        for path in matches:
            yield _context_file(path, f"{arc_prefix}/{path.relative_to(src).as_posix()}")


def repository_of(profile: Profile) -> Path:
    """The repository that holds ``profile``'s file: the nearest folder above it that has
    the profile's ``image.kernel_source``. Independent of the working directory."""
    kernel_source = profile.image.kernel_source or "."
    start = Path(profile.source).expanduser().resolve().parent
    for folder in (start, *start.parents):
        if (folder / kernel_source).is_dir():
            return folder
    raise BuildFailed(
        f"no folder above {profile.source} holds the kernel source {kernel_source!r} "
        f"(image.kernel_source of {profile.name})",
        hint="keep the profile inside the repository that holds the kernel package, or fix "
        "image.kernel_source (relative to that repository's root)",
    )


def _manifest(files: tuple[ContextFile, ...]) -> bytes:
    """One line per file (path, executable bit, content hash): what the hashes cover."""
    return b"".join(f"{f.arcname}\0{int(f.executable)}\0{f.sha256}\n".encode() for f in files)


def context_files(profile: Profile, repo_root: Path | None = None) -> tuple[ContextFile, ...]:
    """The files a profile's build needs, sorted by path (raises BuildFailed when the
    kernel source is missing). ``repo_root`` defaults to :func:`repository_of`."""
    img = profile.image
    files: list[ContextFile] = []
    if img.install_simulator:
        # the simulator is part of kctl itself: take it from the running package so a
        # test image always carries the simulator of the kctl under test
        pkg = Path(kctl.__file__).resolve().parent
        init = pkg / "__init__.py"
        files.append(ContextFile("kctl/__init__.py", init, _sha256_file(init)))
        sim = pkg / "sim"
        if not (sim / "__main__.py").is_file() and not (sim / "__init__.py").is_file():
            raise BuildFailed(
                f"the simulator package {sim} is missing",
                hint="install kctl from a complete checkout",
            )
        files.extend(_walk(sim, "kctl/sim"))
        # the simulator parses its argv with the release table's parser (kctl.sglang)
        errors = pkg / "errors.py"
        files.append(ContextFile("kctl/errors.py", errors, _sha256_file(errors)))
        files.extend(_walk(pkg / "sglang", "kctl/sglang"))
    elif img.kernel_source is not None:
        root = repository_of(profile) if repo_root is None else Path(repo_root)
        src = (root / img.kernel_source).resolve()
        if not src.is_dir():
            raise BuildFailed(
                f"kernel source {src} (image.kernel_source of {profile.source or profile.name}) "
                "is not a directory",
                hint="image.kernel_source is relative to the root of the repository that "
                "holds the profile",
            )
        files.extend(_kernel_files(src, img.kernel_source))
        if not any(
            f.arcname in (f"{img.kernel_source}/pyproject.toml", f"{img.kernel_source}/setup.py")
            for f in files
        ):
            raise BuildFailed(
                f"kernel source {src} has neither pyproject.toml nor setup.py",
                hint="image.kernel_source must point at the kernel package (kernels)",
            )
    return tuple(sorted(files, key=lambda f: f.arcname))


def build_context(profile: Profile, repo_root: Path | None = None) -> BuildContext:
    """Render the Dockerfile and list the context files of ``profile``; compute the tag.

    Reads the kernel package's listed files under ``repo_root`` (default: the repository
    that holds the profile, :func:`repository_of`), or the kctl package for simulator
    images; writes nothing. Raises ProfileError for unusable image fields, BuildFailed for
    missing source.
    """
    dockerfile = render_dockerfile(profile)
    files = context_files(profile, repo_root)
    manifest = _manifest(files)
    source_hash = hashlib.sha256(manifest).hexdigest()
    dockerfile_hash = hashlib.sha256(dockerfile.encode()).hexdigest()
    full = hashlib.sha256(manifest + f"Dockerfile\0{dockerfile_hash}\n".encode())
    tag = f"kctl/{profile.name.lower()}:{full.hexdigest()[:12]}"
    return BuildContext(
        profile_name=profile.name,
        dockerfile=dockerfile,
        files=files,
        source_hash=source_hash,
        tag=tag,
        buildargs=(("KCTL_SOURCE_HASH", source_hash),),
        base_image=profile.image.base,
    )


def write_tar(ctx: BuildContext, out: IO[bytes]) -> None:
    """Write the build context as a tar stream with fixed owners and times, so the same
    context gives the same bytes. Fails with BuildFailed when a file changed since
    :func:`build_context` hashed it (the tag would lie about the content)."""
    with tarfile.open(fileobj=out, mode="w") as tar:
        data = ctx.dockerfile.encode()
        tar.addfile(_tarinfo("Dockerfile", len(data), 0o644), io.BytesIO(data))
        for f in ctx.files:
            content = f.source.read_bytes()
            if hashlib.sha256(content).hexdigest() != f.sha256:
                raise BuildFailed(
                    f"{f.source} changed while the build context was being prepared",
                    hint="run the build again",
                )
            mode = 0o755 if f.executable else 0o644
            tar.addfile(_tarinfo(f.arcname, len(content), mode), io.BytesIO(content))


def _tarinfo(name: str, size: int, mode: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mode = mode
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def plan_image(profile: Profile, *, repo_root: Path | None = None) -> dict[str, object]:
    """What ``kctl plan`` shows about the image: tag, base, Dockerfile text and context
    files. Reads the source tree; needs no docker engine."""
    ctx = build_context(profile, repo_root)
    return {
        "tag": ctx.tag,
        "base": profile.image.base,
        "cuda_archs": list(profile.image.cuda_archs),
        "source_hash": ctx.source_hash,
        "dockerfile": ctx.dockerfile,
        "files": ctx.describe(),
        "buildargs": dict(ctx.buildargs),
    }
