"""What a gate judges together with the change under test: the differences between a
candidate and the profile it is measured against (its baseline, or a fleet's incumbent) that
change the service on their own. Pure; the deploy commands and ``kctl plan`` print them as
warnings, since comparing such a pair is sometimes exactly what the user wants."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kctl.profile.checks import BF16_KV_DTYPES

if TYPE_CHECKING:
    from kctl.profile.model import Profile


def kv_cache(profile: Profile) -> str:
    """The profile's KV cache type, ``bf16`` for every spelling of the model's own."""
    dtype = profile.server.kv_cache_dtype
    return "bf16" if dtype in BF16_KV_DTYPES else dtype


def gate_mismatches(candidate: Profile, reference: Profile, role: str) -> list[str]:
    """One line per difference the gate of ``candidate`` against ``reference`` (named
    ``role`` in the line: "its baseline", "the incumbent") judges along with it."""
    found: list[str] = []
    mine, theirs = kv_cache(candidate), kv_cache(reference)
    if mine != theirs:
        found.append(
            f"server.kv_cache_dtype: the candidate {candidate.name} keeps its KV cache in {mine} "
            f"and {role} {reference.name} in {theirs}, so the gate judges the cache change "
            "together with the rest (an fp8 cache holds twice the context and reads half the "
            "bytes); to judge one change at a time, gate against a profile with the same "
            "kv_cache_dtype"
        )
    return found
