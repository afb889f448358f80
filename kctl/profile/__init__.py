"""Launch profiles: the model (:mod:`.model`), the validating loader (:mod:`.loader`,
rules in :mod:`.validate`) and JSON/hash serialisation (:mod:`.serialize`)."""

from kctl.profile.loader import load_profile, load_profiles
from kctl.profile.model import Profile
from kctl.profile.serialize import content_hash, profile_to_dict

__all__ = ["Profile", "content_hash", "load_profile", "load_profiles", "profile_to_dict"]
