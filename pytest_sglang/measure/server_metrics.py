"""The server's own counters around a run: ``/metrics`` scraped before and after, as deltas.

Parsed with ``prometheus_client``; counters are summed over label sets, and a counter that
went down (a restart) refuses the delta. ``docs/metrics.md``, "Server-side counters", lists them.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["MetricsSnapshot", "delta", "parse_metrics", "scrape"]

#: One scrape of ``/metrics``: every sample's value summed over its label sets, by sample
#: name without SGLang's ``sglang:`` prefix.
MetricsSnapshot = Mapping[str, float]

#: The deltas a run reports, by the SGLang counter each comes from.
_COUNTERS = {
    "requests": "num_requests_total",
    "prompt_tokens": "prompt_tokens_total",
    "generation_tokens": "generation_tokens_total",
    "cached_tokens": "cached_tokens_total",
    "verify_calls": "spec_verify_calls_total",
    "queue_time_sum": "queue_time_seconds_sum",
    "queue_time_count": "queue_time_seconds_count",
}


def parse_metrics(text: str) -> MetricsSnapshot:
    """Parse Prometheus text exposition into a :data:`MetricsSnapshot`.

    :raises ValueError: the text is not Prometheus exposition format.
    """
    from prometheus_client.parser import text_string_to_metric_families

    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name.removeprefix("sglang:")
            totals[name] = totals.get(name, 0.0) + float(sample.value)
    return totals


def scrape(url: str, headers: Mapping[str, str] | None = None) -> MetricsSnapshot | None:
    """Scrape ``URL/metrics``; None when the server does not serve metrics (404).

    :raises httpx.HTTPError: the server could not be reached or answered another error.
    """
    import httpx

    with httpx.Client(timeout=10.0, trust_env=False) as client:
        response = client.get(f"{url.rstrip('/')}/metrics", headers=dict(headers or {}))
    if response.status_code == 404:
        return None
    response.raise_for_status()
    return parse_metrics(response.text)


def delta(before: MetricsSnapshot, after: MetricsSnapshot) -> dict[str, float | None]:
    """Return what the server counted between the scrapes, with the figures derived from it.

    :raises ValueError: a counter went down (the server restarted) or the scrapes lack the
        request and token counters (not SGLang's metrics).
    """
    counted: dict[str, float | None] = {}
    for key, name in _COUNTERS.items():
        old, new = before.get(name), after.get(name)
        if old is not None and new is not None and new < old:
            raise ValueError(
                f"sglang:{name} went down between the scrapes ({old:g} -> {new:g}): the server "
                "restarted during the run, so its counters say nothing about it"
            )
        counted[key] = None if old is None or new is None else new - old
    generated, prompt = counted["generation_tokens"], counted["prompt_tokens"] or 0.0
    if counted["requests"] is None or generated is None:
        raise ValueError(
            "the scrapes have no sglang:num_requests_total or sglang:generation_tokens_total: "
            "is this SGLang's /metrics (launched with --enable-metrics)?"
        )
    verify, cached = counted["verify_calls"], counted["cached_tokens"]
    queued, waited = counted.pop("queue_time_count"), counted.pop("queue_time_sum")
    return counted | {
        "prompt_tokens": prompt,
        "acceptance_length": generated / verify if verify else None,
        "cache_hit_ratio": cached / prompt if cached is not None and prompt else None,
        "mean_queue_time": waited / queued if queued and waited is not None else None,
    }
