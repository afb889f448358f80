"""A deterministic stand-in for the tokenizer and the model's outputs.

- Text is tokenized as its UTF-8 bytes (one id per byte), so ``prompt_tokens`` is exact.
- Greedy (temperature 0) output ids are a pure function of the prompt ids: the same prompt
  gives the same ids on every verify path and graph mode, and the first N ids do not depend
  on ``max_new_tokens``. The ``wrong_output`` fault changes the function, not the timing.
"""

from __future__ import annotations

import hashlib
import random
from array import array

#: Kimi K2's vocabulary size
VOCAB_SIZE = 163840

_SALT_OK = b"kctl-sim/greedy/v1"
_SALT_WRONG = b"kctl-sim/greedy/v1/wrong-output"
_SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]


def tokenize(text: str) -> list[int]:
    """Token ids of ``text``: its UTF-8 bytes."""
    return list(text.encode("utf-8"))


def detokenize(ids: list[int]) -> str:
    """Readable, deterministic text for output ids (one short word per id)."""
    words = []
    n = len(_SYLLABLES)
    for i in ids:
        words.append(
            " " + _SYLLABLES[i % n] + _SYLLABLES[(i // n) % n] + _SYLLABLES[(i // n // n) % n]
        )
    return "".join(words)


def prompt_digest(prompt_ids: list[int]) -> bytes:
    """A stable digest of a prompt (fast enough for 100k-token prompts)."""
    return hashlib.sha256(array("q", prompt_ids).tobytes()).digest()


def output_ids(
    prompt_ids: list[int], n: int, *, wrong: bool = False, nonce: int | None = None
) -> list[int]:
    """The first ``n`` output ids for ``prompt_ids``. ``nonce`` (sampling with temperature
    > 0) makes them differ per request; ``wrong`` gives other ids for the same prompt."""
    salt = _SALT_WRONG if wrong else _SALT_OK
    seed_material = salt + prompt_digest(prompt_ids)
    if nonce is not None:
        seed_material += b"/nonce/" + str(nonce).encode()
    rng = random.Random(hashlib.sha256(seed_material).digest())
    return [rng.randrange(VOCAB_SIZE) for _ in range(n)]
