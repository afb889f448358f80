"""The simulated serving engine: server status, request validation, the prefix cache,
and running a :class:`~kctl.sim.plan.RequestPlan` in (compressed) real time. It knows
nothing of HTTP; :mod:`kctl.sim.server` turns its results into responses.
"""

from __future__ import annotations

import enum
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from kctl.sglang.releases import release
from kctl.sim import plan as planning
from kctl.sim import tokens
from kctl.sim.args import ServerArgs
from kctl.sim.calibration import Calibration
from kctl.sim.kernel import VerifyChoice
from kctl.sim.request import GenRequest, RequestError, parse_request
from kctl.sim.settings import Settings

#: prefix-cache granularity: prompts share cached tokens in blocks of this many
CACHE_BLOCK = 64
#: forget the prefix cache past this many blocks (keeps memory bounded in long runs)
CACHE_MAX_BLOCKS = 1_000_000
#: weight/KV figures reported in /server_info (per GPU, GB; Kimi K2 on 8 x 96 GB)
MEMORY_USAGE = {"weight": 72.4, "kvcache": 13.1, "token_capacity": 1_048_576, "graph": 1.9}


class Status(enum.Enum):
    LOADING = "loading"
    STARTING = "starting"
    UP = "up"
    SHUTTING_DOWN = "shutting_down"


class Aborted(Exception):
    """The server is shutting down while a request waits."""


class Engine:
    """Thread-safe state of one simulated server. ``stop`` is set on shutdown; every wait
    returns early when it is."""

    def __init__(
        self,
        args: ServerArgs,
        settings: Settings,
        calibration: Calibration,
        verify: VerifyChoice,
        stop: threading.Event,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.args = args
        self.settings = settings
        self.calibration = calibration
        self.verify = verify
        self.stop = stop
        self.clock = clock
        #: the imitated release's meta_info field names
        self.spec_metrics = release(settings.sglang_version).spec_metrics
        self._lock = threading.Lock()
        self._status = Status.LOADING
        self._counter = itertools.count()
        self._running = 0
        self._cache: set[int] = set()
        self._last_gen_throughput = 0.0
        self.log: Callable[[str], None] = lambda line: None

    # -- status ---------------------------------------------------------------------------
    @property
    def status(self) -> Status:
        with self._lock:
            return self._status

    def set_status(self, status: Status) -> None:
        with self._lock:
            self._status = status

    # -- requests -------------------------------------------------------------------------
    def parse(self, body: Any) -> list[GenRequest]:
        """Validate a ``/generate`` body against this server's context length."""
        return parse_request(body, self.args.effective_context_length)

    def _request_faults_apply(self, req: GenRequest) -> bool:
        # request faults start once the server is up, so the warm-up passes and the server
        # looks healthy until real traffic arrives
        return not req.internal and self.status is Status.UP

    def admit(self, req: GenRequest) -> None:
        """Checks made before any response byte: ``hang`` blocks here until shutdown,
        ``generate_error`` raises. Raises :class:`Aborted` on shutdown."""
        if self.status is Status.SHUTTING_DOWN:
            raise RequestError("The server is shutting down.", 503)
        if self._request_faults_apply(req):
            if self.settings.has("hang"):
                self.stop.wait()
                raise Aborted()
            if self.settings.has("generate_error"):
                raise RequestError(
                    "simulated generation failure (KCTL_SIM_FAULT=generate_error)", 500
                )

    def _cached_tokens(self, ids: list[int]) -> int:
        """Prefix-cache hits in whole blocks (never the whole prompt: the last token is
        always computed), then remember this prompt's blocks."""
        if self.args.disable_radix_cache:
            return 0
        keys, h = [], 0
        for start in range(0, len(ids) - len(ids) % CACHE_BLOCK, CACHE_BLOCK):
            h = hash((h, tuple(ids[start : start + CACHE_BLOCK])))
            keys.append(h)
        with self._lock:
            hit = 0
            for k in keys:
                if k not in self._cache:
                    break
                hit += 1
            if len(self._cache) + len(keys) > CACHE_MAX_BLOCKS:
                self._cache.clear()
            self._cache.update(keys)
        return min(hit * CACHE_BLOCK, len(ids) - 1)

    def flush_cache(self) -> bool:
        """Empty the prefix cache; False (nothing done) while requests run, as SGLang."""
        with self._lock:
            if self._running:
                return False
            self._cache.clear()
            return True

    def plan(self, req: GenRequest) -> planning.RequestPlan:
        counter = 0 if req.internal else next(self._counter)
        factor = planning.noise_factor(self.settings.noise, self.settings.seed, counter)
        return planning.plan_request(
            calibration=self.calibration,
            verify_path=self.verify.path,
            cuda_graphs=self.args.cuda_graphs,
            prompt_tokens=len(req.input_ids),
            cached_tokens=self._cached_tokens(req.input_ids),
            max_new_tokens=req.max_new_tokens,
            speculative=self.args.speculative,
            num_draft_tokens=self.args.num_draft_tokens,
            slowdown=self.settings.slowdown,
            speed_factor=factor,
        )

    def run(self, req: GenRequest) -> Iterator[dict[str, Any]]:
        """Yield SGLang stream chunks for ``req`` at their due (compressed) times; the last
        one carries ``finish_reason`` and ``e2e_latency``. Raises :class:`Aborted` on
        shutdown."""
        start = self.clock()
        p = self.plan(req)
        wrong = self._request_faults_apply(req) and self.settings.has("wrong_output")
        nonce = None if req.temperature == 0 else hash((req.rid, start))
        ids = tokens.output_ids(req.input_ids, p.completion_tokens, wrong=wrong, nonce=nonce)
        incremental = self.args.incremental_streaming_output
        if not req.internal:
            with self._lock:
                self._running += 1
            self.log(
                f"Prefill batch. #new-seq: 1, #new-token: {p.prompt_tokens - p.cached_tokens}, "
                f"#cached-token: {p.cached_tokens}, #running-req: {self._running - 1}, #queue-req: 0"
            )
        try:
            done, text = 0, ""
            for i, step in enumerate(p.steps):
                # absolute deadlines: per-chunk overhead never accumulates into the rate
                delay = start + self.settings.compress(step.at_s) - self.clock()
                if delay > 0 and self.stop.wait(delay):
                    raise Aborted()
                if self.stop.is_set():
                    raise Aborted()
                new = ids[done : done + step.tokens]
                done += step.tokens
                # the cumulative text grows by the new pieces only: no quadratic re-rendering
                new_text = tokens.detokenize(new)
                text += new_text
                last = i == len(p.steps) - 1
                out = (new, new_text) if incremental else (ids[:done], text)
                yield self._chunk(req, p, out, done, last, start)
        finally:
            if not req.internal:
                with self._lock:
                    self._running -= 1
                    self._last_gen_throughput = p.decode_tps
        if not req.internal:
            accept = f", accept len: {p.spec_accept_length:.2f}" if self.args.speculative else ""
            self.log(
                f"Decode batch. #running-req: 1, #token: {p.prompt_tokens + p.completion_tokens}, "
                f"cuda graph: {self.args.cuda_graphs}{accept}, "
                f"gen throughput (token/s): {p.decode_tps:.2f}, #queue-req: 0"
            )

    def _chunk(
        self,
        req: GenRequest,
        p: planning.RequestPlan,
        out: tuple[list[int], str],
        done: int,
        last: bool,
        start: float,
    ) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "id": req.rid,
            "finish_reason": {"type": "length", "length": p.completion_tokens} if last else None,
            "prompt_tokens": p.prompt_tokens,
            "completion_tokens": done,
            "cached_tokens": p.cached_tokens,
            "weight_version": "default",
            "total_retractions": 0,
        }
        if last:
            meta["e2e_latency"] = self.clock() - start
            if self.args.speculative:
                low = self._request_faults_apply(req) and self.settings.has("low_acceptance")
                factor = planning.LOW_ACCEPTANCE_FACTOR if low else 1.0
                meta.update(planning.spec_fields(self.spec_metrics, p, acceptance_factor=factor))
        return {"text": out[1], "output_ids": out[0], "meta_info": meta}

    def generate(self, req: GenRequest) -> dict[str, Any]:
        """Non-streaming: the final chunk, with the whole output."""
        final: dict[str, Any] = {}
        ids: list[int] = []
        for chunk in self.run(req):
            final = chunk
            ids = (
                ids + chunk["output_ids"]
                if self.args.incremental_streaming_output
                else chunk["output_ids"]
            )
        # incremental mode only changes streams; a plain response carries the whole output
        return {**final, "output_ids": ids, "text": tokens.detokenize(ids)}

    # -- health and info ------------------------------------------------------------------
    def health(self) -> int:
        """HTTP status of ``/health`` and ``/health_generate`` (SGLang 0.5.10 semantics)."""
        if self.status is not Status.UP:
            return 503
        if not self.settings.health_generation:
            return 200
        if self.settings.has("hang"):
            # no output ever arrives: SGLang gives up after SGLANG_HEALTH_CHECK_TIMEOUT
            self.stop.wait(self.settings.compress(self.settings.health_check_timeout_s))
            return 503
        probe = GenRequest("health", [0], 1, 0.0, False, False, internal=True)
        try:
            for _ in self.run(probe):
                pass
        except Aborted:
            return 503
        return 200

    def model_info(self) -> dict[str, Any]:
        a = self.args
        return {
            "model_path": a.model_path,
            "tokenizer_path": a.tokenizer_path or a.model_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": "kimi_k2",
            "architectures": ["DeepseekV3ForCausalLM"],
            "served_model_name": a.served_model_name or a.model_path,
            # token ids at or above it are refused (see kctl.sim.request)
            "vocab_size": tokens.VOCAB_SIZE,
        }

    def server_info(self) -> dict[str, Any]:
        a, s = self.args, self.settings
        state: dict[str, Any] = {
            "last_gen_throughput": self._last_gen_throughput,
            "memory_usage": dict(MEMORY_USAGE),
            "effective_max_running_requests_per_dp": a.max_running_requests
            or (48 if a.speculative else 2048),
        }
        if a.speculative:
            state["avg_spec_accept_length"] = planning.avg_accept_length(a.num_draft_tokens)
        return {
            **a.as_dict(),
            "max_total_num_tokens": MEMORY_USAGE["token_capacity"],
            "version": s.sglang_version,
            "internal_states": [state],
            "status": self.status.value,
            "cuda_graphs": a.cuda_graphs,
            "verify_path": self.verify.path,
            "kdtree_verify": s.kdtree_verify,
            "kernel_line": self.verify.line,
            "env": dict(s.env),
            "simulator": {
                "speedup": s.speedup,
                "load_s": s.load_s,
                "slowdown": s.slowdown,
                "faults": sorted(s.faults),
                "noise": s.noise,
                "seed": s.seed,
                "calibration": self.calibration.source,
            },
        }
