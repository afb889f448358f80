"""``--set FIELD=VALUE``: typed by the field's schema, refused with the field and the fix,
applied to a profile and its baseline alike, hashed as the same edit in the file would be,
and kept beside the profile (``Profile.overrides``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kctl.errors import ProfileError
from kctl.profile import load_profile
from kctl.profile.overrides import parse_overrides
from kctl.profile.serialize import profile_to_dict

Write = Callable[[str, str], str]


def refused(path: str, *sets: str) -> list[str]:
    with pytest.raises(ProfileError) as info:
        load_profile(path, overrides=sets)
    return info.value.problems


def test_values_are_typed_by_their_field(write: Write) -> None:
    p = load_profile(
        write("x.yaml", "extends: ok.yaml\n"),
        overrides=[
            "server.port=31000",
            "server.env.HF_HOME=31000",  # a string field: the same text stays a string
            "gate.contexts=[5700, 23000]",
            "image.cuda_archs=[12.0]",
            "runtime.gpus=[0,1]",
            "server.cuda_graphs=false",
            "server.mem_fraction_static=0.8",
            "gate.policy.min_ratio_per_context={5700: 0.9}",
            "runtime.volumes=[{host: /data//m/, container: /m}]",
            "gate.concurrency=null",
        ],
    )
    assert p.server.port == 31000 and p.server.env_dict()["HF_HOME"] == "31000"
    assert p.gate.contexts == (5700, 23000) and p.image.cuda_archs == ("12.0",)
    assert p.runtime.gpus == (0, 1) and p.server.cuda_graphs is False
    assert p.server.mem_fraction_static == 0.8
    assert p.gate.policy.min_ratio_per_context == ((5700, 0.9),)
    assert [(v.host, v.container) for v in p.runtime.volumes] == [("/data/m", "/m")]
    assert p.gate.concurrency is None


def test_the_effective_profile_is_hashed_as_the_file_edit_would_be(write: Write) -> None:
    edited = write("edited.yaml", "extends: ok.yaml\nserver:\n  port: 31000\n")
    p = load_profile(write("x.yaml", "extends: ok.yaml\n"), overrides=["server.port=31000"])
    assert p.content_hash == load_profile(edited).content_hash
    assert p.content_hash != load_profile("x.yaml").content_hash
    assert p.overrides == ("server.port=31000",)
    assert profile_to_dict(p)["overrides"] == ["server.port=31000"]
    assert load_profile(edited).overrides == ()


def test_the_baseline_gets_the_same_overrides(write: Write) -> None:
    write("base.yaml", "extends: ok.yaml\n")
    cand = write("cand.yaml", "extends: ok.yaml\nbaseline: base.yaml\n")
    p = load_profile(cand, overrides=["server.port=31000"])
    base = load_profile("base.yaml", overrides=["server.port=31000"])
    assert base.server.port == 31000 and base.overrides == ("server.port=31000",)
    # the candidate's hash covers its baseline's: the baseline with the override
    assert p.content_hash != load_profile(cand).content_hash


def test_a_later_set_of_the_same_field_wins(write: Write) -> None:
    p = load_profile(
        write("x.yaml", "extends: ok.yaml\n"), overrides=["server.port=1", "server.port=2"]
    )
    assert p.server.port == 2


@pytest.mark.parametrize(
    ("item", "line"),
    [
        ("server.portt=1", "--set server.portt=1: server.portt: unknown field; did you mean 'port'? "
         "(`kctl schema` lists the fields)"),
        ("server.port", "--set server.port: must be FIELD=VALUE, e.g. --set server.port=31000"),
        ("baseline=x.yaml", "--set baseline=x.yaml: baseline: says where the profile comes from, "
         "not what it runs; edit it in the profile file (--set sets fields such as server.port)"),
        ("server.port.x=1", "--set server.port.x=1: server.port.x: server.port has no fields or "
         "items to set (`kctl schema` lists the fields)"),
        ("a..b=1", "--set a..b=1: a..b: must be a field path as `kctl validate` prints it, e.g. "
         "server.port or runtime.volumes[0].host"),
        ("server.env.1A=x", "--set server.env.1A=x: server.env.1A: '1A' is not a key server.env "
         "takes (keys match ^[A-Za-z_][A-Za-z0-9_]*$) (`kctl schema` lists the fields)"),
    ],
)  # fmt: skip
def test_a_field_that_cannot_be_set_is_refused_before_any_file(item: str, line: str) -> None:
    with pytest.raises(ProfileError) as info:
        parse_overrides([item])
    assert info.value.problems == [line]


def test_a_bad_value_gets_the_fields_own_message_naming_the_set(write: Write) -> None:
    write("base.yaml", "extends: ok.yaml\n")
    cand = write("cand.yaml", "extends: ok.yaml\nbaseline: base.yaml\n")
    # said once, though it is wrong in the candidate and in its baseline
    assert refused(cand, "server.port=abc") == [
        "--set server.port=abc: server.port: must be a TCP port between 1 and 65535 (got 'abc')"
    ]
    assert refused(cand, "runtime.volumes=[{host: /a/../etc, container: /m}]") == [
        "--set runtime.volumes=[{host: /a/../etc, container: /m}]: runtime.volumes[0].host: "
        "contains '..'; write the path itself, without '..' (here '/etc', if that is what is "
        "meant), so that the profile shows what kctl uses (got '/a/../etc')"
    ]


def test_an_item_past_the_end_of_a_list_says_how_to_set_the_list(write: Write) -> None:
    assert refused(write("x.yaml", "extends: ok.yaml\n"), "runtime.volumes[2].host=/m") == [
        "--set runtime.volumes[2].host=/m: runtime.volumes[2]: runtime.volumes has 0 item(s) "
        "in this profile; set an existing item, or the whole list: --set 'runtime.volumes=[...]'"
    ]


def test_an_existing_item_can_be_set(write: Write) -> None:
    path = write("x.yaml", "extends: ok.yaml\nruntime:\n  volumes: [{host: /a, container: /m}]\n")
    p = load_profile(path, overrides=["runtime.volumes[0].host=/b"])
    assert p.runtime.volumes[0].host == "/b"


def test_a_file_cannot_set_overrides(write: Write) -> None:
    lines = refused(write("x.yaml", "extends: ok.yaml\noverrides: [server.port=1]\n"))
    assert lines[0].startswith("x.yaml: overrides: unknown key"), lines
