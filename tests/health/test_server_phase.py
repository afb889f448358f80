"""The load phase read from SGLang's own log lines, shown next to the health deadline."""

from __future__ import annotations

import pytest

from kctl.health.server_phase import server_phase


@pytest.mark.parametrize(
    ("lines", "phase"),
    [
        ([], ""),
        (["[2026-12-05 09:00:00] server_args=ServerArgs(...)"], ""),
        (
            ["[TP0] Init torch distributed begin.", "[TP0] Load weight begin. avail mem=94.52 GB"],
            "loading weights",
        ),
        (["Loading safetensors checkpoint shards:  45% Completed | 29/64"], "loading weights"),
        (["[TP0] Load weight end. type=DeepseekV3ForCausalLM"], "weights loaded"),
        (["[TP0] KV Cache is allocated. #tokens: 1048576"], "KV cache allocated"),
        (
            ["[TP0] Capture cuda graph begin. This can take up to several minutes."],
            "capturing CUDA graphs",
        ),
        (
            ["Capture cuda graph begin.", "[TP0] Capture cuda graph end. Time elapsed: 40.00 s"],
            "CUDA graphs captured",
        ),
        (["INFO:     Uvicorn running on http://0.0.0.0:30000"], "HTTP server up, warming up"),
        (
            ["Load weight begin.", "The server is fired up and ready to roll!", "GET /health 200"],
            "ready",
        ),
    ],
)
def test_the_last_line_that_names_a_phase_wins(lines: list[str], phase: str) -> None:
    assert server_phase(lines) == phase
