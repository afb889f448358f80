"""``/generate`` requests as data: validation of SGLang's ``GenerateReqInput`` subset into
:class:`GenRequest` values, and the error SGLang would answer with. Pure functions."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from kctl.sim import tokens


class RequestError(Exception):
    """A request SGLang would refuse; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status

    def payload(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "code": self.status}}


@dataclass(frozen=True)
class GenRequest:
    rid: str
    input_ids: list[int]
    max_new_tokens: int
    temperature: float
    ignore_eos: bool
    stream: bool
    #: sent by the server to itself (warm-up, /health); no request faults, not counted
    internal: bool = False


def _int_list(value: Any, what: str) -> list[int]:
    if not isinstance(value, list) or not all(
        isinstance(x, int) and not isinstance(x, bool) for x in value
    ):
        raise RequestError(f"{what} must be a list of integers")
    bad = next((x for x in value if not 0 <= x < tokens.VOCAB_SIZE), None)
    if bad is not None:
        raise RequestError(
            f"{what}: token id {bad} is outside the vocabulary [0, {tokens.VOCAB_SIZE})"
        )
    return value


def _prompts(body: dict[str, Any]) -> list[list[int]]:
    text, ids = body.get("text"), body.get("input_ids")
    if (text is None) == (ids is None):
        raise RequestError("Either text or input_ids should be provided (exactly one).")
    prompts: list[list[int]]
    if text is not None:
        if isinstance(text, str):
            prompts = [tokens.tokenize(text)]
        elif isinstance(text, list) and text and all(isinstance(t, str) for t in text):
            prompts = [tokens.tokenize(t) for t in text]
        else:
            raise RequestError("text must be a string or a non-empty list of strings")
    elif isinstance(ids, list) and ids and all(isinstance(x, list) for x in ids):
        prompts = [_int_list(x, "input_ids[]") for x in ids]
    else:
        prompts = [_int_list(ids, "input_ids")]
    if any(not p for p in prompts):
        raise RequestError("the prompt is empty")
    return prompts


def _sampling(sp: Any) -> tuple[int, float]:
    """``(max_new_tokens, temperature)`` of a ``sampling_params`` object."""
    if not isinstance(sp, dict):
        raise RequestError("sampling_params must be an object")
    max_new = sp.get("max_new_tokens", 128)
    if max_new is None:
        max_new = 128
    if not isinstance(max_new, int) or isinstance(max_new, bool) or max_new < 0:
        raise RequestError("sampling_params.max_new_tokens must be a non-negative integer")
    temperature = sp.get("temperature", 1.0)
    if not isinstance(temperature, (int, float)) or isinstance(temperature, bool):
        raise RequestError("sampling_params.temperature must be a number")
    if temperature < 0:
        raise RequestError("sampling_params.temperature must be non-negative")
    return max_new, float(temperature)


def parse_request(body: Any, context_length: int) -> list[GenRequest]:
    """Validate a ``/generate`` body (SGLang's ``GenerateReqInput`` subset) into one
    request per prompt; raise :class:`RequestError` (400) with SGLang-like messages."""
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object")
    prompts = _prompts(body)
    sp = body.get("sampling_params") or {}
    max_new, temperature = _sampling(sp)
    stream = bool(body.get("stream", False))
    if stream and len(prompts) > 1:
        raise RequestError("the simulator does not stream batched requests", 400)
    limit = context_length
    for p in prompts:
        if len(p) >= limit:
            raise RequestError(
                f"The input ({len(p)} tokens) is longer than the model's context length "
                f"({limit} tokens)."
            )
    rid = body.get("rid")
    base = rid if isinstance(rid, str) and rid else uuid.uuid4().hex
    return [
        GenRequest(
            rid=base if len(prompts) == 1 else f"{base}-{i}",
            input_ids=p,
            max_new_tokens=max_new,
            temperature=temperature,
            ignore_eos=bool(sp.get("ignore_eos", False)),
            stream=stream,
        )
        for i, p in enumerate(prompts)
    ]
