"""``GET /metrics``: Prometheus text exposition with SGLang's names, labels and buckets.

Only served with ``--enable-metrics`` (otherwise the path is a plain 404). Names, label sets,
bucket bounds and value formatting follow the real 0.5.23 exposition in
``sglang-metrics-0.5.23.prom``, written by prometheus-client as SGLang's is (``# HELP`` then
``# TYPE``, labels sorted by name, ``1.0``, ``1e+06``, ``+Inf``), histogram ``_sum`` before
the buckets and ``_count`` after, as SGLang's multiprocess collector orders them. Rendering
costs about 10 ms a scrape (the plugin scrapes before and after each run, outside the
measured requests). Tokenizer-side series exist per ``is_streaming`` value once a
request of that kind has finished, as in SGLang. 0.5.5 uses the same metric names with fewer
labels (``model_name`` only on tokenizer-side series; an approximation, see the report).

0.5.23 exposes 83 ``sglang:*`` families. Besides the ones above, the emulator writes every
other family of the real exposition (:mod:`~pytest_sglang.emulator.http.metric_catalog`) with
its type, help and label sets, so dashboards built on a real server find every name. Modelled
live: ``queue_time_seconds``, ``uncached_prompt_tokens_histogram``, ``cached_tokens_total``,
``http_requests_total`` / ``http_responses_total`` / ``http_requests_active``,
``max_total_num_tokens``, ``context_len``, ``page_size``, ``num_pages``, the memory gauges,
``startup_time_seconds``, ``startup_cuda_graph_time_seconds``, ``process_cpu_seconds_total``,
``full_token_usage``, ``decode_sum_seq_lens``, ``realtime_tokens_total``; the others
(PD-disaggregation queues, SWA and Mamba pools, DP attention, routing keys...) stay at 0 as
on a plain single-GPU server.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.utils import floatToGoString
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pytest_sglang.emulator.engine.stats import Histogram
from pytest_sglang.emulator.http.metric_catalog import FAMILIES, Family
from pytest_sglang.emulator.runtime.context import EmulatorContext

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PREFIX = "sglang:"


class Exposition:
    """Collects metric families for prometheus-client's text exposition.

    Families and samples keep the order they are added in (SGLang's multiprocess collector
    writes a histogram's ``_sum`` before its buckets); prometheus-client formats the names,
    sorted labels and values (``1.0``, ``1e+06``, ``+Inf``) exactly as SGLang's own output.
    """

    def __init__(self) -> None:
        self._families: list[Metric] = []

    def family(self, name: str, kind: str, help_text: str) -> None:
        """Start a family: its HELP and TYPE lines."""
        # prometheus-client names a counter family without the ``_total`` of its samples.
        base = name.removesuffix("_total") if kind == "counter" else name
        self._families.append(Metric(PREFIX + base, help_text, kind))

    def sample(self, name: str, labels: Mapping[str, str], value: float) -> None:
        """Add one sample to the family started last."""
        self._families[-1].add_sample(PREFIX + name, dict(labels), float(value))

    def histogram(self, name: str, labels: Mapping[str, str], histogram: Histogram) -> None:
        """Add a histogram's ``_sum``, ``_bucket`` and ``_count`` lines."""
        self.sample(f"{name}_sum", labels, histogram.sum)
        for bound, count in histogram.cumulative():
            self.sample(f"{name}_bucket", {**labels, "le": floatToGoString(bound)}, count)  # type: ignore[no-untyped-call]
        self.sample(f"{name}_count", labels, histogram.count)

    def collect(self) -> Iterator[Metric]:
        """Yield the families (prometheus-client's collector protocol)."""
        return iter(self._families)

    def text(self) -> str:
        """Return the exposition, newline-terminated."""
        return generate_latest(self).decode()


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
    if new:
        _catalog(out, ctx, scheduler_labels, {"engine_type": "unified", "model_name": model})
    return out.text()


def _catalog(
    out: Exposition,
    ctx: EmulatorContext,
    scheduler_labels: Mapping[str, str],
    tokenizer_labels: Mapping[str, str],
) -> None:
    """Write the rest of 0.5.23's families: live where modelled, zero otherwise."""
    values = _live_values(ctx)
    histograms = {
        "queue_time_seconds": ctx.stats.tokenizer.queue_time,
        "uncached_prompt_tokens_histogram": ctx.stats.tokenizer.uncached_prompt_tokens_hist,
    }
    for family in FAMILIES:
        base: dict[str, str] = {}
        if family.scope.startswith("scheduler"):
            base = dict(scheduler_labels)
            if family.scope == "scheduler_pid":
                base["pid"] = str(_pid())
        elif family.scope == "tokenizer":
            base = dict(tokenizer_labels)
        out.family(family.name, family.kind, family.help)
        if family.name in ("http_requests_total", "http_responses_total", "http_requests_active"):
            _http_samples(out, ctx, family)
            continue
        for extra in family.series:
            labels = {**base, **extra}
            if family.kind == "histogram":
                histogram = histograms.get(family.name) or Histogram(family.bounds)
                out.histogram(family.name, labels, histogram)
            else:
                value = values.get(family.name)
                out.sample(family.name, labels, value(extra) if value else 0.0)


def _pid() -> int:
    import os

    return os.getpid()


def _live_values(ctx: EmulatorContext) -> dict[str, Callable[[Mapping[str, str]], float]]:
    sched = ctx.stats.scheduler
    tok = ctx.stats.tokenizer
    capacity = ctx.scheduler.max_total_num_tokens
    args = ctx.config.server_args
    page = int(args.get("page_size") or 1)
    info_memory = _memory(ctx)
    startup = _startup(ctx)
    prompt_total = float(sum(tok.prompt_tokens.values()))
    generated = float(sum(tok.generation_tokens.values()))

    def const(value: float) -> Callable[[Mapping[str, str]], float]:
        return lambda _labels: value

    return {
        "max_total_num_tokens": const(capacity),
        "context_len": const(ctx.config.context_length),
        "page_size": const(page),
        "num_pages": const(capacity // page),
        "weight_memory_usage_gb": const(info_memory["weight"]),
        "kv_cache_memory_usage_gb": const(info_memory["kvcache"]),
        "startup_available_gpu_memory_gb": const(info_memory["startup_available"]),
        "graph_memory_usage_gb": lambda labels: float(
            info_memory["graph"].get(labels.get("phase", ""), 0.0)
        ),
        "startup_time_seconds": lambda labels: float(startup.get(labels.get("phase", ""), 0.0)),
        "startup_cuda_graph_time_seconds": lambda labels: float(
            startup["cuda_graph"].get(labels.get("phase", ""), 0.0)
        ),
        "process_cpu_seconds_total": lambda labels: (
            time.process_time() if labels.get("component") == "tokenizer" else 0.0
        ),
        "cached_tokens_total": const(tok.cached_tokens),
        "full_token_usage": const(sched.used_tokens / max(1, capacity)),
        "decode_sum_seq_lens": const(sched.used_tokens),
        "realtime_tokens_total": lambda labels: {
            "prefill_compute": prompt_total - tok.cached_tokens,
            "prefill_cache": float(tok.cached_tokens),
            "decode": generated,
        }.get(labels.get("mode", ""), 0.0),
        "prefill_effective_tokens_total": lambda labels: {
            "input": prompt_total,
            "device_hit": float(tok.cached_tokens),
        }.get(labels.get("mode", ""), 0.0),
        "new_token_ratio": const(0.0),
    }


def _memory(ctx: EmulatorContext) -> dict[str, Any]:
    from pytest_sglang.emulator.http.info import internal_state

    state = internal_state(ctx, dict(ctx.config.server_args))
    memory = state.get("memory_usage", {})
    if not isinstance(memory.get("graph"), dict):
        memory = {**memory, "graph": {}}
    memory.setdefault("startup_available", 0.0)
    return dict(memory)


def _startup(ctx: EmulatorContext) -> dict[str, Any]:
    from pytest_sglang.emulator.http.info import startup_times

    return {**startup_times(ctx), "tokenizer_e2e": ctx.state.startup_time}


def _http_samples(out: Exposition, ctx: EmulatorContext, family: Family) -> None:
    http = ctx.stats.http
    if family.name == "http_requests_total":
        for (path, method), count in sorted(http.requests.items()):
            out.sample(family.name, {"endpoint": path, "method": method}, count)
    elif family.name == "http_responses_total":
        for (path, method, status), count in sorted(http.responses.items()):
            labels = {"endpoint": path, "method": method, "status_code": status}
            out.sample(family.name, labels, count)
    else:
        for (path, method), count in sorted(http.active.items()):
            out.sample(family.name, {"endpoint": path, "method": method}, count)


class HttpMetricsMiddleware:
    """Count HTTP requests and responses by path, method and status (``http_*`` families)."""

    def __init__(self, app: ASGIApp, ctx: EmulatorContext) -> None:
        self.app = app
        self.http = ctx.stats.http

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        key = (str(scope["path"]), str(scope["method"]))
        http = self.http
        http.requests[key] = http.requests.get(key, 0) + 1
        http.active[key] = http.active.get(key, 0) + 1
        status = ["500"]

        async def counting(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = str(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, counting)
        finally:
            http.active[key] -= 1
            answer = (*key, status[0])
            http.responses[answer] = http.responses.get(answer, 0) + 1


def routes(ctx: EmulatorContext) -> list[BaseRoute]:
    """Return the ``/metrics`` route (the caller adds it only with ``--enable-metrics``)."""

    async def metrics(request: Request) -> Response:
        return Response(render(ctx), media_type=CONTENT_TYPE)

    return [Route("/metrics", metrics, methods=["GET"])]
