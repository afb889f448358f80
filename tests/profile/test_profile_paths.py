"""Path fields of a profile: ``..`` refused with the file, the field and the path it may
mean, other paths normalized (what is mounted, read or hashed is what the profile shows),
and a file that ``extends:`` or ``baseline:`` names that is not a profile refused where it
is named, what it holds never shown."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from kctl.errors import ProfileError
from kctl.profile import load_profile

Write = Callable[[str, str], str]


def problems_of(path: str) -> list[str]:
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    return info.value.problems


def _climbs(field: str, got: str, meant: str) -> str:
    return (
        f"x.yaml: {field}: contains '..'; write the path itself, without '..' (here "
        f"{meant!r}, if that is what is meant), so that the profile shows what kctl uses "
        f"(got {got!r})"
    )


# (id, YAML after "extends: ok.yaml", the field, the value, the path it may mean)
CLIMBS = [
    (
        "volume-host",
        "runtime:\n  volumes: [{host: /models/../../etc, container: /models}]\n",
        "runtime.volumes[0].host",
        "/models/../../etc",
        "/etc",
    ),
    (
        "volume-container",
        "runtime:\n  volumes: [{host: /models, container: /models/../root}]\n",
        "runtime.volumes[0].container",
        "/models/../root",
        "/root",
    ),
    (
        "secret-file",
        "server:\n  secrets: {HF_TOKEN: {file: /etc/kctl/../shadow}}\n",
        "server.secrets.HF_TOKEN.file",
        "/etc/kctl/../shadow",
        "/etc/shadow",
    ),
    (
        "api-key-file",
        "server:\n  api_key: {file: /etc/kctl/../../key}\n",
        "server.api_key.file",
        "/etc/kctl/../../key",
        "/key",
    ),
    ("model-path", "server:\n  model_path: /models/../etc\n", "server.model_path", "/models/../etc", "/etc"),
    (
        "draft-model-path",
        "server:\n  speculative: {draft_model_path: /models/x/../../d}\n",
        "server.speculative.draft_model_path",
        "/models/x/../../d",
        "/d",
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "field", "got", "meant"), [c[1:] for c in CLIMBS], ids=[c[0] for c in CLIMBS]
)
def test_a_path_with_dotdot_is_refused_naming_file_field_and_fix(
    write: Write, text: str, field: str, got: str, meant: str
) -> None:
    assert problems_of(write("x.yaml", "extends: ok.yaml\n" + text)) == [_climbs(field, got, meant)]


def test_kernel_source_keeps_its_own_refusal(write: Write) -> None:
    path = write("x.yaml", "extends: ok.yaml\nimage:\n  kernel_source: kernels/../../etc\n")
    assert problems_of(path) == [
        "x.yaml: image.kernel_source: must stay inside the repository: a path relative to its "
        "root, without '..', e.g. 'kernels' (got 'kernels/../../etc')"
    ]


def test_every_path_field_is_normalized(write: Write) -> None:
    path = write(
        "x.yaml",
        """\
        extends: ok.yaml
        image: {kernel_source: ./kernels/}
        server:
          model_path: /models//Kimi-K2.6/
          speculative: {draft_model_path: /models/./eagle3/}
          secrets: {HF_TOKEN: {file: //etc/kctl//hf-token}}
        runtime:
          volumes: [{host: /data//models/, container: /models/./}]
        """,
    )
    p = load_profile(path)
    assert p.image.kernel_source == "kernels"
    assert p.server.model_path == "/models/Kimi-K2.6"
    assert p.server.speculative is not None
    assert p.server.speculative.draft_model_path == "/models/eagle3"
    assert p.server.secrets_dict()["HF_TOKEN"].file == "/etc/kctl/hf-token"
    assert [(v.host, v.container) for v in p.runtime.volumes] == [("/data/models", "/models")]


def test_a_normalized_path_hashes_as_its_plain_form(write: Write) -> None:
    plain = write("a.yaml", "extends: ok.yaml\nruntime:\n  volumes: [{host: /m, container: /m}]\n")
    slashed = write(
        "b.yaml", "extends: ok.yaml\nruntime:\n  volumes: [{host: /m//, container: /./m}]\n"
    )
    assert load_profile(plain).content_hash == load_profile(slashed).content_hash


def test_a_model_id_stays_relative(write: Write) -> None:
    # SGLang takes a Hugging Face id in --model-path: normalized, not made absolute
    p = load_profile(write("x.yaml", "extends: ok.yaml\nserver:\n  model_path: org//model/\n"))
    assert p.server.model_path == "org/model"


# -- references: extends: and baseline: naming a file that is not a profile ---------------

SECRET = "s3cr3t-do-not-echo"

# (id, the named file's bytes, why it is not a profile as the line says it)
FOREIGN: list[tuple[str, bytes, str]] = [
    ("passwd-like", f"root:x:0:0:{SECRET}:/root:/bin/bash\n".encode(), "its top level is a str"),
    ("json-credentials", f'{{"auths": {{"reg": "{SECRET}"}}}}'.encode(), "none of baseline, "),
    ("a-list", f"- {SECRET}\n".encode(), "its top level is a list"),
    ("broken-yaml", f"{SECRET}: [\n".encode(), "it cannot be read as one: line 2, column 1: "),
    ("binary", b"\xff\xfe" + SECRET.encode(), "it cannot be read as one: line 1, column 1: not UTF-8"),
    ("tagged", f"!!python/object:{SECRET} {{}}\n".encode(), "it cannot be read as one: line 1"),
    ("empty", b"", "it is empty"),
]  # fmt: skip


@pytest.mark.parametrize("field", ["extends", "baseline"])
@pytest.mark.parametrize(("content", "why"), [f[1:] for f in FOREIGN], ids=[f[0] for f in FOREIGN])
def test_a_reference_to_a_file_that_is_not_a_profile_names_the_referrer(
    write: Write, tmp_path: Path, field: str, content: bytes, why: str
) -> None:
    (tmp_path / "other").write_bytes(content)
    ref = write("ref.yaml", f"server:\n  model_path: /models/m\n{field}: other\n")
    lines = problems_of(ref)
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"ref.yaml: {field}: other is not a kctl profile ("), lines
    assert why in lines[0] and "name a profile file" in lines[0], lines
    assert SECRET not in lines[0]


def test_a_base_with_a_yaml_mistake_is_named_by_its_referrer(write: Write) -> None:
    write("base.yaml", "server:\n  model_path: [\n")
    lines = problems_of(write("x.yaml", "extends: base.yaml\n"))
    assert lines == [
        "x.yaml: extends: base.yaml is not a kctl profile (it cannot be read as one: line 3, "
        "column 1: invalid YAML); name a profile file (`kctl validate base.yaml` shows its "
        "own problems)"
    ]
    # named directly, the same file's problem is shown in full
    assert problems_of("base.yaml") == [
        "base.yaml: line 3, column 1: invalid YAML: expected the node content, but found "
        "'<stream end>'"
    ]
