"""Launch profiles: the model (:mod:`.model`) and the validating loader (:mod:`.loader`)."""

from kctl.profile.model import Profile

__all__ = ["Profile"]
