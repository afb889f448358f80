"""``sglang.launch_server`` arguments as the simulator understands them.

Names and defaults follow SGLang 0.5.10's ``srt/server_args.py`` for the flags kctl
passes; anything else is accepted, ignored and reported (``unknown_args`` in
``/server_info``) so a profile's ``extra_args`` never stops the simulator.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, field
from typing import Any, NoReturn

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
    unknown_args: list[str] = field(default_factory=list)

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
    """A known flag got a value of the wrong type (SGLang exits 2 on these too)."""


class _RaisingParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ArgsError(message)


def _parser() -> argparse.ArgumentParser:
    # allow_abbrev off: an abbreviation of a flag we do not model must land in unknown_args
    p = _RaisingParser(prog="sglang.launch_server", add_help=False, allow_abbrev=False)
    a = p.add_argument
    a("--model-path", "--model", dest="model_path", default="")
    a("--tokenizer-path", dest="tokenizer_path")
    a("--served-model-name", dest="served_model_name")
    a("--host", default="127.0.0.1")
    a("--port", type=int, default=30000)
    a("--tensor-parallel-size", "--tp-size", "--tp", dest="tp_size", type=int, default=1)
    a("--data-parallel-size", "--dp-size", "--dp", dest="dp_size", type=int, default=1)
    a("--expert-parallel-size", "--ep-size", "--ep", dest="ep_size", type=int, default=1)
    a("--attention-backend", dest="attention_backend")
    a("--prefill-attention-backend", dest="prefill_attention_backend")
    a("--decode-attention-backend", dest="decode_attention_backend")
    a("--disable-cuda-graph", dest="disable_cuda_graph", action="store_true")
    a("--cuda-graph-max-bs", dest="cuda_graph_max_bs", type=int)
    a("--cuda-graph-bs", dest="cuda_graph_bs", type=int, nargs="+")
    a("--mem-fraction-static", dest="mem_fraction_static", type=float)
    a("--trust-remote-code", dest="trust_remote_code", action="store_true")
    a("--kv-cache-dtype", dest="kv_cache_dtype", default="auto")
    a("--page-size", dest="page_size", type=int, default=1)
    a("--dtype", default="auto")
    a("--context-length", dest="context_length", type=int)
    a("--chunked-prefill-size", dest="chunked_prefill_size", type=int)
    a("--max-running-requests", dest="max_running_requests", type=int)
    a("--disable-radix-cache", dest="disable_radix_cache", action="store_true")
    a("--skip-server-warmup", dest="skip_server_warmup", action="store_true")
    a("--incremental-streaming-output", dest="incremental_streaming_output", action="store_true")
    a("--speculative-algorithm", dest="speculative_algorithm")
    a(
        "--speculative-draft-model-path",
        "--speculative-draft-model",
        dest="speculative_draft_model_path",
    )
    a("--speculative-num-steps", dest="speculative_num_steps", type=int)
    a("--speculative-eagle-topk", dest="speculative_eagle_topk", type=int)
    a("--speculative-num-draft-tokens", dest="speculative_num_draft_tokens", type=int)
    a("--speculative-attention-mode", dest="speculative_attention_mode", default="prefill")
    a("--random-seed", dest="random_seed", type=int)
    a("--log-level", dest="log_level", default="info")
    return p


def parse(argv: list[str]) -> ServerArgs:
    """Parse ``sglang.launch_server`` arguments; unknown ones are kept in ``unknown_args``.

    Raises :class:`ArgsError` when a known flag has a bad value (e.g. ``--port abc``).
    """
    ns, unknown = _parser().parse_known_args(argv)
    values = vars(ns)
    if values["speculative_algorithm"]:
        # SGLang aliases NEXTN to EAGLE
        algo = str(values["speculative_algorithm"]).upper()
        values["speculative_algorithm"] = "EAGLE" if algo == "NEXTN" else algo
    return ServerArgs(**values, unknown_args=list(unknown))
