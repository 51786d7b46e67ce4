"""``GET /metrics``: Prometheus text exposition with SGLang's names, labels and buckets.

Only served with ``--enable-metrics`` (otherwise the path is a plain 404). Names, label sets,
bucket bounds and value formatting follow the real 0.5.23 exposition in
``sglang-metrics-0.5.23.prom``: ``# HELP`` then ``# TYPE``, labels sorted by name, values as
prometheus_client writes them (``1.0``, ``1e+06``, ``+Inf``), histogram ``_sum`` before the
buckets and ``_count`` after. Tokenizer-side series exist per ``is_streaming`` value once a
request of that kind has finished, as in SGLang. 0.5.5 uses the same metric names with fewer
labels (``model_name`` only on tokenizer-side series; an approximation, see the report).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from pytest_sglang.emulator.engine.stats import Histogram
from pytest_sglang.emulator.runtime.context import EmulatorContext

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PREFIX = "sglang:"


def go_float(value: float) -> str:
    """Format a float as prometheus_client does (Go's notation)."""
    if value == math.inf:
        return "+Inf"
    if value == -math.inf:
        return "-Inf"
    if math.isnan(value):
        return "NaN"
    text = repr(float(value))
    dot = text.find(".")
    if value > 0 and dot > 6:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+0{dot - 1}"
    return text


def _labels(labels: Mapping[str, str]) -> str:
    def escape(text: str) -> str:
        return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')

    inner = ",".join(f'{key}="{escape(labels[key])}"' for key in sorted(labels))
    return "{" + inner + "}"


class Exposition:
    """Accumulates metric families in text format."""

    def __init__(self) -> None:
        self._lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str) -> None:
        """Start a family: its HELP and TYPE lines."""
        self._lines.append(f"# HELP {PREFIX}{name} {help_text}")
        self._lines.append(f"# TYPE {PREFIX}{name} {kind}")

    def sample(self, name: str, labels: Mapping[str, str], value: float) -> None:
        """One sample line."""
        self._lines.append(f"{PREFIX}{name}{_labels(labels)} {go_float(value)}")

    def histogram(self, name: str, labels: Mapping[str, str], histogram: Histogram) -> None:
        """Add a histogram's ``_sum``, ``_bucket`` and ``_count`` lines."""
        self.sample(f"{name}_sum", labels, histogram.sum)
        for bound, count in histogram.cumulative():
            self.sample(f"{name}_bucket", {**labels, "le": go_float(bound)}, count)
        self.sample(f"{name}_count", labels, histogram.count)

    def text(self) -> str:
        """Return the exposition, newline-terminated."""
        return "\n".join(self._lines) + "\n"


def render(ctx: EmulatorContext) -> str:
    """Render the current exposition."""
    out = Exposition()
    new = ctx.is_new
    model = ctx.config.served_model_name
    tok = ctx.stats.tokenizer
    sched = ctx.stats.scheduler
    base = {"engine_type": "unified", "model_name": model} if new else {"model_name": model}
    scheduler_labels = {
        "engine_type": "unified",
        "model_name": model,
        "pp_rank": "0",
        "tp_rank": "0",
    }
    if new:
        scheduler_labels["moe_ep_rank"] = "0"
        if int(ctx.config.server_args["dp_size"]) > 1:
            scheduler_labels["dp_rank"] = "0"

    def streaming(flag: bool) -> dict[str, str]:
        return {**base, "is_streaming": "true" if flag else "false"} if new else dict(base)

    counters = (
        ("prompt_tokens_total", "Number of prefill tokens processed.", tok.prompt_tokens),
        (
            "generation_tokens_total",
            "Number of generation tokens processed.",
            tok.generation_tokens,
        ),
    )
    for name, help_text, values in counters:
        out.family(name, "counter", help_text)
        for flag in sorted(values):
            out.sample(name, streaming(flag), values[flag])
    if new and ctx.spec is not None:
        out.family(
            "spec_verify_calls_total",
            "counter",
            "Number of speculative decoding verification calls.",
        )
        out.sample("spec_verify_calls_total", base, sched.verify_calls_total)
    out.family("num_requests_total", "counter", "Number of requests processed.")
    for flag in sorted(tok.requests):
        out.sample("num_requests_total", streaming(flag), tok.requests[flag])

    histograms: list[tuple[str, str, Mapping[bool, Histogram]]] = [
        (
            "e2e_request_latency_seconds",
            "Histogram of End-to-end request latency in seconds",
            tok.e2e,
        ),
    ]
    if new:
        histograms.append(
            (
                "request_time_per_output_token_seconds",
                "Per-request TPOT in seconds: (finished_time - first_token_time) / "
                "(completion_tokens - 1).",
                tok.tpot,
            )
        )
    for name, help_text, by_flag in histograms:
        out.family(name, "histogram", help_text)
        for flag in sorted(by_flag):
            out.histogram(name, streaming(flag), by_flag[flag])
    out.family("prompt_tokens_histogram", "histogram", "Histogram of prompt token length.")
    out.histogram("prompt_tokens_histogram", base, tok.prompt_tokens_hist)
    out.family("generation_tokens_histogram", "histogram", "Histogram of generation token length.")
    out.histogram("generation_tokens_histogram", base, tok.generation_tokens_hist)
    out.family(
        "time_to_first_token_seconds", "histogram", "Histogram of time to first token in seconds."
    )
    for flag in sorted(tok.ttft):
        out.histogram("time_to_first_token_seconds", streaming(flag), tok.ttft[flag])
    out.family(
        "inter_token_latency_seconds", "histogram", "Histogram of inter-token latency in seconds."
    )
    out.histogram("inter_token_latency_seconds", base, tok.itl)

    capacity = ctx.scheduler.max_total_num_tokens
    spec = ctx.spec
    gauges: list[tuple[str, str, float]] = [
        ("num_running_reqs", "The number of running requests.", sched.num_running),
        ("num_queue_reqs", "The number of requests in the waiting queue.", sched.num_queued),
        ("num_grammar_queue_reqs", "The number of requests in the grammar waiting queue.", 0),
        ("gen_throughput", "The generation throughput (token/s).", sched.gen_throughput),
        ("cache_hit_rate", "The prefix cache hit rate.", 0.0),
        ("token_usage", "The token usage.", sched.used_tokens / capacity),
        ("num_used_tokens", "The number of used tokens.", sched.used_tokens),
        (
            "spec_accept_length",
            "Mean acceptance length of speculative decoding (accepted "
            "drafts + bonus token per forward).",
            sched.spec_accept_length,
        ),
        (
            "spec_accept_rate",
            "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch).",
            sched.spec_accept_rate,
        ),
    ]
    if new:
        gauges += [
            (
                "spec_num_steps",
                "Currently active speculative_num_steps.",
                spec.num_steps if spec else 0,
            ),
            (
                "spec_num_draft_tokens",
                "Currently active speculative_num_draft_tokens "
                "(decouples from steps under topk>1).",
                spec.num_draft_tokens if spec else 0,
            ),
            (
                "kv_available_tokens",
                "Number of free token slots in the KV cache pool.",
                capacity - sched.used_tokens,
            ),
            (
                "kv_used_tokens",
                "Number of actively used token slots in the KV cache pool.",
                sched.used_tokens,
            ),
            ("utilization", "The utilization.", 1.0 if sched.num_running else 0.0),
            (
                "is_cuda_graph",
                "Whether the batch is using CUDA graph.",
                0.0 if ctx.config.server_args["disable_cuda_graph"] else 1.0,
            ),
        ]
    for name, help_text, value in gauges:
        out.family(name, "gauge", help_text)
        out.sample(name, scheduler_labels, value)
    return out.text()


def routes(ctx: EmulatorContext) -> list[BaseRoute]:
    """Return the ``/metrics`` route (the caller adds it only with ``--enable-metrics``)."""

    async def metrics(request: Request) -> Response:
        return Response(render(ctx), media_type=CONTENT_TYPE)

    return [Route("/metrics", metrics, methods=["GET"])]
