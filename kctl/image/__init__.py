"""The serving image: the Dockerfile rendered from a profile (:mod:`.dockerfile`), the
content-addressed build context (:mod:`.context`) and the build itself (:mod:`.build`).

Importing this package imports neither docker nor jinja2; the functions that need them
import them when called.
"""

from kctl.image.build import (
    BuildProgress,
    BuildResult,
    build_image,
    ensure_image,
    image_labels,
    log_path_for,
)
from kctl.image.context import BuildContext, ContextFile, build_context, plan_image, write_tar
from kctl.image.dockerfile import render_dockerfile, torch_cuda_arch_list

__all__ = [
    "BuildContext",
    "BuildProgress",
    "BuildResult",
    "ContextFile",
    "build_context",
    "build_image",
    "ensure_image",
    "image_labels",
    "log_path_for",
    "plan_image",
    "render_dockerfile",
    "torch_cuda_arch_list",
    "write_tar",
]
