"""Invalid profiles: each asserts the exact, complete problem lines kctl prints."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kctl.errors import InvalidInput, ProfileError
from kctl.profile import load_profile, load_profiles

Write = Callable[[str, str], str]


def problems_of(path: str) -> list[str]:
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    return info.value.problems


# (name, YAML of x.yaml, the expected problem lines)
CASES: list[tuple[str, str, list[str]]] = [
    (
        "unknown key with a suggestion",
        "extends: ok.yaml\nhealth:\n  deadline: 30\n",
        ["x.yaml: health.deadline: unknown key; did you mean 'deadline_s'? (got 30)"],
    ),
    (
        "unknown section without a close match",
        "extends: ok.yaml\nwhatever: 1\n",
        [
            "x.yaml: whatever: unknown key; valid keys: extends, name, baseline, description, "
            "image, server, runtime, health, gate, simulator (got 1)"
        ],
    ),
    (
        "misspelt extends",
        "extend: ok.yaml\n",
        [
            "x.yaml: extend: unknown key; did you mean 'extends'? (got 'ok.yaml')",
            "x.yaml: server.model_path: is required: the model directory as the server sees "
            "it, e.g. '/models/Kimi-K2.6' (got '')",
        ],
    ),
    (
        "wrong type",
        "extends: ok.yaml\nserver:\n  cuda_graphs: 'no'\n",
        ["x.yaml: server.cuda_graphs: must be true or false (got 'no')"],
    ),
    (
        "negative number",
        "extends: ok.yaml\nhealth:\n  deadline_s: -5\n",
        ["x.yaml: health.deadline_s: must be a positive number (got -5)"],
    ),
    (
        "bad context list entry",
        "extends: ok.yaml\ngate:\n  contexts: [5700, 23k tokens]\n",
        [
            "x.yaml: gate.contexts[1]: must be an integer from 1 to 4194304 "
            "(prompt tokens of one gate context) (got '23k tokens')"
        ],
    ),
    (
        "gate sizes past their bounds",
        "extends: ok.yaml\ngate:\n  output_tokens: 100000000000000000000000\n"
        "  concurrency: 5000\n  correctness:\n    prompts: 1001\n",
        [
            "x.yaml: gate.output_tokens: must be an integer from 1 to 32768 "
            "(tokens generated per request) (got 100000000000000000000000)",
            "x.yaml: gate.concurrency: must be an integer from 1 to 1024, "
            "or null for one request at a time (got 5000)",
            "x.yaml: gate.correctness.prompts: must be an integer from 0 to 1000 (got 1001)",
        ],
    ),
    (
        "duplicate context",
        "extends: ok.yaml\ngate:\n  contexts: [5700, 5700]\n",
        ["x.yaml: gate.contexts[1]: is listed twice; remove the duplicate (got 5700)"],
    ),
    (
        "missing baseline file",
        "extends: ok.yaml\nbaseline: nope.yaml\n",
        [
            "x.yaml: baseline: file not found: nope.yaml; the path is relative to the file "
            "that declares it (got 'nope.yaml')"
        ],
    ),
    (
        "missing extends file",
        "extends: base/nope.yaml\n",
        [
            "x.yaml: extends: file not found: base/nope.yaml; the path is relative to this "
            "file's directory (got 'base/nope.yaml')"
        ],
    ),
    (
        "YAML syntax error names the line",
        "extends: ok.yaml\nserver:\n  port: 1\n   host: x\n",
        ["x.yaml: line 4, column 8: invalid YAML: mapping values are not allowed here"],
    ),
    (
        "duplicate key",
        "extends: ok.yaml\nserver:\n  port: 1\n  port: 2\n",
        ["x.yaml: line 4, column 3: invalid YAML: found duplicate key 'port' (first at line 3)"],
    ),
    (
        "bad verify_kernel value",
        "extends: ok.yaml\nserver:\n  verify_kernel: fast\n",
        ["x.yaml: server.verify_kernel: must be one of 'kdtree', 'none' (got 'fast')"],
    ),
    (
        "port out of range",
        "extends: ok.yaml\nserver:\n  port: 70000\n",
        ["x.yaml: server.port: must be a TCP port between 1 and 65535 (got 70000)"],
    ),
    (
        "bad cuda arch, and an unquoted one YAML reads as a float",
        "extends: ok.yaml\nimage:\n  cuda_archs: [sm_120, 12.0]\n",
        [
            "x.yaml: image.cuda_archs[0]: must be a CUDA arch as TORCH_CUDA_ARCH_LIST spells it, "
            "a quoted string such as '12.0' (sm_120) or '9.0a' (got 'sm_120')",
            "x.yaml: image.cuda_archs[1]: must be a CUDA arch as TORCH_CUDA_ARCH_LIST spells it, "
            "a quoted string such as '12.0' (sm_120) or '9.0a' (got 12.0)",
        ],
    ),
    (
        "bad on_inconclusive",
        "extends: ok.yaml\ngate:\n  policy:\n    on_inconclusive: maybe\n",
        ["x.yaml: gate.policy.on_inconclusive: must be one of 'revert', 'promote' (got 'maybe')"],
    ),
    (
        "min_ratio <= 0",
        "extends: ok.yaml\ngate:\n  policy:\n    min_ratio: 0\n",
        [
            "x.yaml: gate.policy.min_ratio: must be a ratio > 0 (candidate tok/s over baseline "
            "tok/s; 1.0 = no slower) (got 0)"
        ],
    ),
    (
        "env value not a string",
        "extends: ok.yaml\nserver:\n  env:\n    SOME_FLAG: 1\n",
        [
            "x.yaml: server.env.SOME_FLAG: must be a string; quote it in YAML, e.g. '1' (null "
            "removes an inherited variable) (got 1)"
        ],
    ),
    (
        "kdtree kernel without its switch",
        "extends: ok.yaml\nserver:\n  verify_kernel: kdtree\n  speculative: {draft_model_path: /d}\n",
        [
            "x.yaml: server.env.KDTREE_VERIFY: server.verify_kernel is 'kdtree' on the triton "
            "backend, so the kernel's startup hook must be switched on: set "
            "server.env.KDTREE_VERIFY: '1' (or attention_backend: kdtree on SGLang 0.5.11 and "
            "later) (got None)"
        ],
    ),
    (
        "kernel switched on without verify_kernel",
        "extends: ok.yaml\nserver:\n  env: {KDTREE_VERIFY: '1'}\n",
        [
            "x.yaml: server.env.KDTREE_VERIFY: switches the kdtree kernel on but "
            "server.verify_kernel is 'none'; set server.verify_kernel: kdtree or remove the "
            "variable (got '1')"
        ],
    ),
    (
        "a managed flag in extra_args",
        "extends: ok.yaml\nserver:\n  extra_args: ['--log-level', 'info', '--port=1']\n",
        [
            "x.yaml: server.extra_args[2]: SGLang 0.5.10: --port sets port, which kctl manages; "
            "as an extra argument it would override kctl's value; fix: set server.port instead "
            "(got '--port=1')"
        ],
    ),
    (
        "draft tokens SGLang would override",
        "extends: ok.yaml\nserver:\n  speculative: {draft_model_path: /d, num_draft_tokens: 8}\n",
        [
            "x.yaml: server.speculative.num_draft_tokens: must be num_steps + 1 (4) when "
            "eagle_topk is 1 (SGLang would silently override it) (got 8)"
        ],
    ),
    (
        "per-context threshold for a context the gate does not measure",
        "extends: ok.yaml\ngate:\n  contexts: [5700]\n  policy:\n"
        "    min_ratio_per_context: {91000: 0.9}\n",
        [
            "x.yaml: gate.policy.min_ratio_per_context.91000: names a context that gate.contexts "
            "does not measure; add it there or remove this override (got 91000)"
        ],
    ),
    (
        "required field missing",
        "runtime: {kind: local}\n",
        [
            "x.yaml: server.model_path: is required: the model directory as the server sees it, "
            "e.g. '/models/Kimi-K2.6' (got '')"
        ],
    ),
    (
        "volume without its container path",
        "extends: ok.yaml\nruntime:\n  volumes: [{host: /models}]\n",
        ["x.yaml: runtime.volumes[0].container: is required (got None)"],
    ),
    (
        "a section that is not a mapping",
        "extends: ok.yaml\nserver: 5\n",
        [
            "x.yaml: server: must be a mapping of model_path, served_model_name, host, port, tp, "
            "attention_backend, cuda_graphs, cuda_graph_max_bs, mem_fraction_static, "
            "trust_remote_code, kv_cache_dtype, speculative, verify_kernel, extra_args, env, "
            "secrets, api_key (got 5)"
        ],
    ),
    (
        "a scalar where a list belongs",
        "extends: ok.yaml\ngate:\n  contexts: 5700\n",
        ["x.yaml: gate.contexts: must be a list (got 5700)"],
    ),
    (
        "env as a list",
        "extends: ok.yaml\nserver:\n  env: [A]\n",
        ["x.yaml: server.env: must be a mapping (got ['A'])"],
    ),
    (
        "a GPU listed twice",
        "extends: ok.yaml\nruntime:\n  gpus: [0, 0]\n",
        [
            "x.yaml: runtime.gpus: must be 'all' or a list of distinct GPU indices, e.g. [0, 1] "
            "([] for no GPUs) (got [0, 0])"
        ],
    ),
    (
        "a field the loader fills in",
        "extends: ok.yaml\ncontent_hash: abc\n",
        [
            "x.yaml: content_hash: unknown key; valid keys: extends, name, baseline, "
            "description, image, server, runtime, health, gate, simulator (got 'abc')"
        ],
    ),
    (
        "a name with a space",
        "extends: ok.yaml\nname: bad name\n",
        [
            "x.yaml: name: must be letters, digits, '.', '_' or '-', starting with a letter or "
            "digit (got 'bad name')"
        ],
    ),
    (
        "an objective without weights",
        "extends: ok.yaml\ngate:\n  policy:\n    objective: {min_ratio: 2}\n",
        ["x.yaml: gate.policy.objective.weights: is required (got None)"],
    ),
    (
        "empty file",
        "",
        ["x.yaml: the file is empty; a profile needs at least server.model_path"],
    ),
    (
        "top level is not a mapping",
        "- server\n",
        ["x.yaml: (top level): must be a mapping of profile sections (got list)"],
    ),
]


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_invalid_profile_exact_message(write: Write, text: str, expected: list[str]) -> None:
    assert problems_of(write("x.yaml", text)) == expected


def test_the_cases_are_distinct() -> None:
    assert len({c[1] for c in CASES}) == len(CASES) >= 12


def test_a_missing_model_path_is_the_only_required_field(write: Write) -> None:
    # the fixture's ok.yaml must itself be valid, or every case above tests nothing
    assert load_profile(write("y.yaml", "extends: ok.yaml\n")).server.model_path == "/models/m"


def test_every_problem_is_reported_together(write: Write) -> None:
    path = write(
        "x.yaml",
        """\
        extends: ok.yaml
        server:
          port: 0
          tp: two
        gate:
          repeats: -1
        """,
    )
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    lines = [
        "x.yaml: server.port: must be a TCP port between 1 and 65535 (got 0)",
        "x.yaml: server.tp: must be a positive integer (got 'two')",
        "x.yaml: gate.repeats: must be an integer from 1 to 1000 (got -1)",
    ]
    assert info.value.problems == lines
    assert str(info.value) == "3 problems in profile\n" + "\n".join(f"  {x}" for x in lines)
    assert isinstance(info.value, InvalidInput) and info.value.exit_code == 2


def test_extends_cycle(write: Write) -> None:
    write("a.yaml", "extends: b.yaml\n")
    write("b.yaml", "extends: sub/../a.yaml\n")
    assert problems_of("a.yaml") == [
        "b.yaml: extends: cycle a.yaml -> b.yaml -> a.yaml; remove one of these extends "
        "(got 'sub/../a.yaml')"
    ]


def test_extends_of_itself(write: Write) -> None:
    write("a.yaml", "extends: a.yaml\n")
    assert problems_of("a.yaml") == [
        "a.yaml: extends: cycle a.yaml -> a.yaml; remove one of these extends (got 'a.yaml')"
    ]


def test_circular_baseline_chain(write: Write) -> None:
    write("a.yaml", "extends: ok.yaml\nbaseline: b.yaml\n")
    write("b.yaml", "extends: ok.yaml\nbaseline: a.yaml\n")
    cycle = (
        "circular baseline chain a.yaml -> b.yaml -> a.yaml; the known-good baseline must not "
        "lead back to this profile (set baseline: null in the known-good one)"
    )
    assert problems_of("a.yaml") == [
        "a.yaml: baseline: the baseline profile is invalid (its problems follow) (got 'b.yaml')",
        f"b.yaml: baseline: {cycle} (got 'a.yaml')",
    ]


def test_baseline_of_itself(write: Write) -> None:
    write("a.yaml", "extends: ok.yaml\nbaseline: a.yaml\n")
    assert problems_of("a.yaml") == [
        "a.yaml: baseline: circular baseline chain a.yaml -> a.yaml; the known-good baseline "
        "must not lead back to this profile (set baseline: null in the known-good one) "
        "(got 'a.yaml')"
    ]


def test_an_invalid_baseline_reports_its_own_file(write: Write) -> None:
    write("base.yaml", "extends: ok.yaml\nserver:\n  port: -1\n")
    write("cand.yaml", "extends: ok.yaml\nbaseline: base.yaml\n")
    assert problems_of("cand.yaml") == [
        "cand.yaml: baseline: the baseline profile is invalid (its problems follow) "
        "(got 'base.yaml')",
        "base.yaml: server.port: must be a TCP port between 1 and 65535 (got -1)",
    ]


def test_baseline_on_another_runtime_is_refused(write: Write) -> None:
    write("base.yaml", "extends: ok.yaml\nruntime: {kind: docker}\n")
    write("cand.yaml", "extends: ok.yaml\nbaseline: base.yaml\n")
    assert problems_of("cand.yaml") == [
        # named after the file that set the candidate's value
        "ok.yaml: runtime.kind: differs from the baseline's ('docker' in base.yaml); a "
        "candidate and its baseline must use the same runtime (got 'local')"
    ]


def test_a_mistake_inherited_from_a_base_names_the_base(write: Write) -> None:
    write("bases/common.yaml", "extends: ../ok.yaml\nhealth: {poll_interval_s: fast}\n")
    write("x.yaml", "extends: bases/common.yaml\nserver: {port: 40000}\n")
    assert problems_of("x.yaml") == [
        "bases/common.yaml: health.poll_interval_s: must be a positive number (got 'fast')"
    ]


def test_load_profiles_collects_every_file(write: Write) -> None:
    write("a.yaml", "extends: ok.yaml\nserver: {port: 0}\n")
    write("b.yaml", "extends: ok.yaml\n")
    write("c.yaml", "extends: ok.yaml\ngate: {warmup: -1}\n")
    with pytest.raises(ProfileError) as info:
        load_profiles(["a.yaml", "b.yaml", "c.yaml"])
    assert info.value.problems == [
        "a.yaml: server.port: must be a TCP port between 1 and 65535 (got 0)",
        "c.yaml: gate.warmup: must be an integer from 0 to 1000 (got -1)",
    ]


def test_a_missing_file(write: Write) -> None:
    assert problems_of(write("x.yaml", "x: 1\n").replace("x.yaml", "nothere.yaml")) == [
        "nothere.yaml: file not found"
    ]


def test_the_file_rules_do_not_overreach(write: Write) -> None:
    # a URL with "&" in env, JSON in an argument, "$" not starting an expansion, an
    # abbreviation of no managed flag, anchors reused: all fine
    path = write(
        "x.yaml",
        """\
        extends: ok.yaml
        x-vol: &vol {host: /models, container: /models}
        server:
          env: {HF_ENDPOINT: "https://hub.example/?a=1&b=2", PRICE: "5$"}
          extra_args: ["--preferred-sampling-params", '{"rope": [1, 2]}', "--max-running-requests", "48"]
        runtime:
          volumes: [*vol]
        """,
    )
    server = load_profile(path).server
    assert server.env_dict()["HF_ENDPOINT"] == "https://hub.example/?a=1&b=2"
    assert server.extra_args[1] == '{"rope": [1, 2]}'
