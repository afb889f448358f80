"""The simulated server's life, in SGLang's order: log the args, "load" (port closed), print
the kernel activation line when applicable, bind the port, warm up by sending itself a
generation (``/health`` 503 meanwhile), print the readiness line, serve until SIGTERM or
SIGINT, then exit 0 within a second. Start-up faults (``crash_at_start``,
``crash_while_loading``, ``fatal_log``, ``never_ready``) act here.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import sys
import threading
import time
from types import FrameType

from kctl.sim import args as sim_args
from kctl.sim import calibration as sim_calibration
from kctl.sim import kernel
from kctl.sim import settings as sim_settings
from kctl.sim.engine import Engine, Status
from kctl.sim.logs import READY_LINE, Log
from kctl.sim.server import SimHTTPServer

#: how often the main thread looks at the stop flag while it waits (bounds SIGTERM latency)
_TICK_S = 0.05
#: SGLang's own warm-up request (``_wait_and_warmup``)
_WARMUP_BODY = {
    "text": "The capital city of France is",
    "sampling_params": {"temperature": 0, "max_new_tokens": 8},
}
#: shares of the load time spent per phase (the rest is model init)
_WEIGHTS_SHARE_GRAPHS, _WEIGHTS_SHARE_EAGER = 0.78, 0.92
_KV_SHARE, _GRAPH_SHARE = 0.03, 0.15


class Simulator:
    """One run of the simulated server. Signal handlers only set a flag; the main thread
    polls it, so no lock is ever taken inside a handler."""

    def __init__(
        self,
        args: sim_args.ServerArgs,
        settings: sim_settings.Settings,
        calibration: sim_calibration.Calibration,
        log: Log,
    ) -> None:
        self.args = args
        self.settings = settings
        self.log = log
        self.verify = kernel.choose(args, settings)
        self.stop = threading.Event()
        self.engine = Engine(args, settings, calibration, self.verify, self.stop)
        self.engine.log = log.scheduler
        self._stopping = False
        self._signal_name = ""

    # -- signals and waiting --------------------------------------------------------------
    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._stopping = True
        self._signal_name = signal.Signals(signum).name

    def _sleep(self, sim_seconds: float) -> bool:
        """Wait ``sim_seconds`` of simulated time; False when a stop signal came first."""
        deadline = time.monotonic() + self.settings.compress(sim_seconds)
        while not self._stopping:
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            time.sleep(min(_TICK_S, left))
        return False

    def _exit_on_signal(self) -> int:
        self.log.main(f"Received {self._signal_name}, exiting.")
        return 0

    # -- phases ---------------------------------------------------------------------------
    def run(self) -> int:
        a, s = self.args, self.settings
        self.log.main(f"server_args={a.as_dict()}")
        if s.has("crash_at_start"):
            self.log.raw(
                "RuntimeError: simulated crash at start (KCTL_SIM_FAULT=crash_at_start): "
                "CUDA driver initialization failed"
            )
            return 1
        code = self._load()
        if code is not None:
            return code
        return self._serve()

    def _load(self) -> int | None:
        """The load phases; an exit code when loading ends the process, else None."""
        a, s, log = self.args, self.settings, self.log
        load = s.load_s
        weights = load * (_WEIGHTS_SHARE_GRAPHS if a.cuda_graphs else _WEIGHTS_SHARE_EAGER)
        log.scheduler("Init torch distributed begin.")
        log.scheduler("Init torch distributed ends. mem usage=0.00 GB")
        log.scheduler("Load weight begin. avail mem=94.52 GB")
        if not self._sleep(weights / 2):
            return self._exit_on_signal()
        if s.has("crash_while_loading"):
            for line in (
                "Traceback (most recent call last):",
                '  File "/sgl-workspace/sglang/python/sglang/srt/model_loader/loader.py", '
                "line 412, in load_weights_and_postprocess",
                "    model.load_weights(weights)",
                "RuntimeError: simulated crash while loading weights "
                "(KCTL_SIM_FAULT=crash_while_loading)",
            ):
                log.raw(line)
            return 1
        if s.has("fatal_log"):
            log.scheduler(s.fatal_line)
            # a real process takes a moment to die after the line; health must not need it
            self._sleep(min(0.3 * s.speedup, weights / 2))
            return 1
        if not self._sleep(weights / 2):
            return self._exit_on_signal()
        log.scheduler(
            "Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, "
            "avail mem=22.12 GB, mem usage=72.40 GB."
        )
        if not self._sleep(load * _KV_SHARE):
            return self._exit_on_signal()
        log.scheduler("KV Cache is allocated. #tokens: 1048576, KV size: 13.10 GB")
        if a.cuda_graphs:
            log.scheduler(
                "Capture cuda graph begin. This can take up to several minutes. avail mem=9.02 GB"
            )
            if not self._sleep(load * _GRAPH_SHARE):
                return self._exit_on_signal()
            log.scheduler(
                f"Capture cuda graph end. Time elapsed: {load * _GRAPH_SHARE:.2f} s. "
                "mem usage=1.90 GB. avail mem=7.12 GB."
            )
        rest = load - weights - load * _KV_SHARE - (load * _GRAPH_SHARE if a.cuda_graphs else 0)
        if not self._sleep(max(0.0, rest)):
            return self._exit_on_signal()
        if self.verify.line:
            log.scheduler(self.verify.line)
        max_running = a.max_running_requests or (48 if a.speculative else 2048)
        log.scheduler(
            f"max_total_num_tokens=1048576, chunked_prefill_size={a.chunked_prefill_size or 8192}, "
            f"max_prefill_tokens=16384, max_running_requests={max_running}, "
            f"context_len={a.effective_context_length}, available_gpu_mem=7.12 GB"
        )
        return None

    def _serve(self) -> int:
        a, log = self.args, self.log
        try:
            server = SimHTTPServer((a.host, a.port), self.engine, log)
        except OSError as exc:
            log.raw(
                f"ERROR:    [Errno {exc.errno}] error while attempting to bind on address "
                f"('{a.host}', {a.port}): {exc.strerror}"
            )
            return 1
        thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": _TICK_S}, daemon=True
        )
        self.engine.set_status(Status.STARTING)
        thread.start()
        log.raw(f"INFO:     Started server process [{os.getpid()}]")
        log.raw("INFO:     Waiting for application startup.")
        log.raw("INFO:     Application startup complete.")
        log.raw(f"INFO:     Uvicorn running on http://{a.host}:{a.port} (Press CTRL+C to quit)")
        code = 0
        try:
            if self.settings.has("never_ready"):
                pass  # stays "starting": /health answers 503 until stopped
            elif a.skip_server_warmup or self._warmup():
                self.engine.set_status(Status.UP)
                log.main(READY_LINE)
            elif not self._stopping:
                log.main("Initialization failed. warmup error: the warm-up request failed")
                code = 1
            while code == 0 and not self._stopping:
                time.sleep(_TICK_S)
            if self._stopping:
                log.main(f"Received {self._signal_name}, shutting down.")
        finally:
            self.engine.set_status(Status.SHUTTING_DOWN)
            self.stop.set()
            server.shutdown()
            server.server_close()
            thread.join(timeout=1.0)
        return code

    def _warmup(self) -> bool:
        """Send SGLang's warm-up generation to ourselves over HTTP; True when it worked."""
        host = self.args.host
        if host in ("0.0.0.0", "", "::"):
            host = "127.0.0.1"
        conn = http.client.HTTPConnection(host, self.args.port, timeout=600)
        headers = {"Content-Type": "application/json"}
        if self.args.api_key:  # as SGLang's warm-up does
            headers["Authorization"] = f"Bearer {self.args.api_key}"
        try:
            conn.request("POST", "/generate", body=json.dumps(_WARMUP_BODY), headers=headers)
            resp = conn.getresponse()
            resp.read()
            return resp.status == 200
        except OSError:
            return False
        finally:
            conn.close()


def main(argv: list[str] | None = None) -> int:
    """Run the simulator with ``sglang.launch_server`` arguments; return the exit code
    (0 after SIGTERM/SIGINT, 1 on a simulated crash, 2 on bad arguments or env)."""
    log = Log()
    argv = sys.argv[1:] if argv is None else argv
    try:
        settings = sim_settings.from_env()
        args = sim_args.parse(argv, settings.sglang_version)
        calibration = sim_calibration.load(settings.calibration_path)
    except (
        sim_args.ArgsError,
        sim_settings.SettingsError,
        sim_calibration.CalibrationError,
    ) as exc:
        log.raw(f"kctl-sim (sglang.launch_server): error: {exc}")
        return 2
    sim = Simulator(args, settings, calibration, log)
    signal.signal(signal.SIGTERM, sim.on_signal)
    signal.signal(signal.SIGINT, sim.on_signal)
    return sim.run()
