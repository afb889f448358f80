"""SGLang server arguments as the simulator understands them.

The argv is parsed by the parser of the release the simulator imitates
(``KCTL_SIM_SGLANG_VERSION``, default 0.5.10), rebuilt from kctl's release table
(:mod:`kctl.sglang.releases`): it accepts and refuses what that release's ``ServerArgs``
parser does, aliases and abbreviations included. The simulator keeps the settings it
models (:class:`ServerArgs`, field names as SGLang's ``ServerArgs``); SGLang's own
defaults fill the rest.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any

from kctl.sim.settings import DEFAULT_SGLANG_VERSION

#: Kimi K2's context window (text_config.max_position_embeddings of K2.5/K2.6)
DEFAULT_CONTEXT_LENGTH = 262144


@dataclass(frozen=True)
class ServerArgs:
    """The launch settings received; field names are SGLang's ``ServerArgs`` names."""

    model_path: str = ""
    tokenizer_path: str | None = None
    served_model_name: str | None = None
    host: str = "127.0.0.1"
    port: int = 30000
    tp_size: int = 1
    dp_size: int = 1
    ep_size: int = 1
    attention_backend: str | None = None
    prefill_attention_backend: str | None = None
    decode_attention_backend: str | None = None
    disable_cuda_graph: bool = False
    cuda_graph_max_bs: int | None = None
    cuda_graph_bs: list[int] | None = None
    mem_fraction_static: float | None = None
    trust_remote_code: bool = False
    kv_cache_dtype: str = "auto"
    page_size: int = 1
    dtype: str = "auto"
    context_length: int | None = None
    chunked_prefill_size: int | None = None
    max_running_requests: int | None = None
    disable_radix_cache: bool = False
    skip_server_warmup: bool = False
    incremental_streaming_output: bool = False
    speculative_algorithm: str | None = None
    speculative_draft_model_path: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    speculative_attention_mode: str = "prefill"
    random_seed: int | None = None
    log_level: str = "info"
    #: SGLang's ``--api-key``: every endpoint but ``/health*`` and ``/metrics*`` wants it
    api_key: str | None = None

    @property
    def cuda_graphs(self) -> bool:
        return not self.disable_cuda_graph

    @property
    def speculative(self) -> bool:
        return bool(self.speculative_algorithm)

    @property
    def effective_attention_backend(self) -> str:
        """The backend that runs target verify. On sm_120 SGLang picks triton for MLA
        models when none is given; ``--speculative-attention-mode decode`` moves verify to
        the decode backend."""
        if self.speculative_attention_mode == "decode" and self.decode_attention_backend:
            return self.decode_attention_backend
        if self.prefill_attention_backend and self.speculative_attention_mode == "prefill":
            return self.prefill_attention_backend
        return self.attention_backend or "triton"

    @property
    def num_draft_tokens(self) -> int:
        """Tokens verified per step under speculative decoding (SGLang: with topk 1 it is
        steps + 1; for DeepseekV3-like models the auto choice is steps 3, topk 1, 4 tokens)."""
        if not self.speculative:
            return 1
        if self.speculative_num_draft_tokens:
            return max(1, self.speculative_num_draft_tokens)
        steps = self.speculative_num_steps or 3
        return steps + 1

    @property
    def effective_context_length(self) -> int:
        return self.context_length or DEFAULT_CONTEXT_LENGTH

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field (the shape of SGLang's ``/server_info`` args)."""
        return asdict(self)


class ArgsError(ValueError):
    """The release's parser refused the argv (SGLang exits 2 on these too)."""


#: ServerArgs fields whose dest is spelt differently in some releases: the first present wins
_DEST_ALIASES = {
    "tp_size": ("tp_size", "tensor_parallel_size"),
    "dp_size": ("dp_size", "data_parallel_size"),
    "ep_size": ("ep_size", "expert_parallel_size"),
    "cuda_graph_max_bs": ("cuda_graph_max_bs", "cuda_graph_max_bs_decode"),
    "cuda_graph_bs": ("cuda_graph_bs", "cuda_graph_bs_decode"),
}


def _value(values: dict[str, Any], name: str, default: Any) -> Any:
    for dest in _DEST_ALIASES.get(name, (name,)):
        if values.get(dest) is not None:
            return values[dest]
    return default


def _with_config(argv: list[str]) -> list[str]:
    """SGLang's ``--config FILE``: the file's keys become flags placed before the command
    line's (which win). kctl writes the file as JSON, which is YAML; the simulator reads
    JSON only (standard library)."""
    if "--config" not in argv:
        return argv
    at = argv.index("--config")
    if at + 1 >= len(argv):
        raise ArgsError("No config file specified after --config flag!")
    path = argv[at + 1]
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as exc:
        raise ArgsError(f"cannot read config file {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ArgsError("Config file must contain a dictionary at root level")
    config: list[str] = []
    for key, value in data.items():
        flag = "--" + str(key).replace("_", "-")
        if value is True:
            config.append(flag)
        elif value is not False and value is not None:
            config += [flag, str(value)]
    return config + argv[:at] + argv[at + 2 :]


def parse(argv: list[str], version: str = DEFAULT_SGLANG_VERSION) -> ServerArgs:
    """Parse server arguments with the parser of SGLang ``version`` (rebuilt from kctl's
    release table): what that release refuses (an unknown or removed flag, a value outside
    the choices, a bad number) raises :class:`ArgsError` with its message.
    """
    from kctl.sglang.kernel_support import kernel_choices
    from kctl.sglang.releases import ParserError, UnknownRelease, release

    try:
        rel = release(version)
        argv = _with_config(argv)
        values = vars(rel.parser(kernel_choices(rel)).parse_args(argv))
    except UnknownRelease as exc:
        raise ArgsError(f"KCTL_SIM_SGLANG_VERSION: {exc}") from None
    except ParserError as exc:
        raise ArgsError(f"SGLang {version}: {exc}") from None
    defaults = {f.name: f.default for f in fields(ServerArgs)}
    out = {name: _value(values, name, default) for name, default in defaults.items()}
    # 0.5.14 on: --cuda-graph-backend-decode disabled turns decode graphs off
    out["disable_cuda_graph"] = bool(values.get("disable_cuda_graph")) or (
        values.get("cuda_graph_backend_decode") == "disabled"
    )
    for name in ("port", "tp_size", "dp_size", "ep_size", "page_size"):
        out[name] = int(out[name])
    if out["speculative_algorithm"]:
        # SGLang aliases NEXTN to EAGLE
        algo = str(out["speculative_algorithm"]).upper()
        out["speculative_algorithm"] = "EAGLE" if algo == "NEXTN" else algo
    return ServerArgs(**out)
