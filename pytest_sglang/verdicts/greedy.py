"""Greedy equivalence: a speculative server must return its baseline's greedy tokens.

With temperature 0 a correct speculative server returns exactly its target model's token
ids (``docs/speculation.md``); the first divergence is reported.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from pytest_sglang.errors import MeasurementFailed
from pytest_sglang.report.entries import VerdictKind
from pytest_sglang.verdicts.assertions import Verdict, conclude
from pytest_sglang.verdicts.decision import Outcome
from pytest_sglang.verdicts.stats import require

if TYPE_CHECKING:
    import httpx

    from pytest_sglang.server.handle import SGLangServer

# pytest reads __tracebackhide__ from a frame's globals too: a failed or refused verdict's
# traceback shows the test's line, none of this module's frames.
__tracebackhide__ = True

__all__ = ["assert_greedy_equivalent"]

Prompt = str | Sequence[int]
_AROUND = 40  # characters of text shown on each side of a divergence

#: ``/server_info`` keys that should match for a token-exact comparison: a different attention
#: backend or dtype changes numerics, and a near-tie then flips the greedy choice.
_NUMERICS = ("attention_backend", "decode_attention_backend", "dtype", "kv_cache_dtype", "tp_size")


def _outputs(
    server: SGLangServer | str | Callable[[], SGLangServer | str],
    prompts: Sequence[Prompt],
    max_new_tokens: int,
    timeout: float,
) -> tuple[str, dict[str, Any], list[dict[str, Any]]]:
    """Return the server's label, its ``/server_info`` (if known) and one answer per prompt."""
    import httpx

    server = server() if callable(server) else server
    if isinstance(server, str):
        url = httpx.URL(server)
        label, info = f"{url.scheme}://{url.host}" + (f":{url.port}" if url.port else ""), {}
        http = httpx.Client(base_url=url, timeout=timeout, trust_env=False)
    else:
        http, label, info = server.client(timeout=timeout), server.name, server.server_info
    with http:
        return label, info, [_generate(http, label, prompt, max_new_tokens) for prompt in prompts]


def _generate(
    http: httpx.Client, label: str, prompt: Prompt, max_new_tokens: int
) -> dict[str, Any]:
    import httpx

    key, value = ("text", prompt) if isinstance(prompt, str) else ("input_ids", list(prompt))
    body = {key: value, "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens}}
    try:
        response = http.post("/generate", json=body)
    except httpx.HTTPError as exc:
        raise MeasurementFailed(f"greedy request to {label} failed: {exc!r}") from None
    if response.status_code != 200:
        raise MeasurementFailed(
            f"greedy request to {label} failed: HTTP {response.status_code} {response.text[:300]}"
        )
    answer = None
    with contextlib.suppress(ValueError):
        answer = response.json()
    if not isinstance(answer, dict) or not isinstance(answer.get("output_ids"), list):
        raise MeasurementFailed(
            f"{label}'s /generate answer has no output_ids: {response.text[:300]}"
        )
    return answer


def _common(a: Sequence[Any], b: Sequence[Any]) -> int:
    """Return the length of the common prefix of ``a`` and ``b``."""
    pairs = enumerate(zip(a, b, strict=False))
    return next((i for i, (x, y) in pairs if x != y), min(len(a), len(b)))


def assert_greedy_equivalent(
    spec: SGLangServer | str | Callable[[], SGLangServer | str],
    base: SGLangServer | str | Callable[[], SGLangServer | str],
    prompts: Sequence[Prompt],
    *,
    max_new_tokens: int = 32,
    timeout: float = 120.0,
) -> Verdict:
    """Assert that ``spec`` returns ``base``'s greedy output ids for every prompt.

    Each prompt (text or token ids) goes to both servers as a native ``/generate`` at
    temperature 0. ``spec`` and ``base`` are server fixtures, base URLs, or callables returning
    one, called in turn (launch mode runs one server at a time). A failure names the first
    divergence; a warning says when the servers' numerics (backend, dtype) differ.
    """
    require(bool(prompts), "assert_greedy_equivalent needs at least one prompt")
    spec_label, spec_info, spec_answers = _outputs(spec, prompts, max_new_tokens, timeout)
    base_label, base_info, base_answers = _outputs(base, prompts, max_new_tokens, timeout)
    rows, divergences = [], []
    for index, (a, b) in enumerate(zip(spec_answers, base_answers, strict=True)):
        ids_a, ids_b = a["output_ids"], b["output_ids"]
        if ids_a == ids_b:
            rows.append(f"{index:>6} {len(ids_a):>6} identical")
            continue
        at = _common(ids_a, ids_b)
        tokens = [ids[at] if at < len(ids) else None for ids in (ids_a, ids_b)]
        texts = [str(a.get("text", "")), str(b.get("text", ""))]
        char = _common(*texts)
        lo = max(0, char - _AROUND)
        spec_text, base_text = (f"{t[lo:char]}|{t[char : char + _AROUND]}" for t in texts)
        divergences.append(
            {
                "request": index,
                "position": at,
                "spec_token": tokens[0],
                "base_token": tokens[1],
                "spec_text": spec_text,
                "base_text": base_text,
            }
        )
        rows.append(
            f"{index:>6} {len(ids_a):>6} differs at output token {at}: {tokens[0]} vs {tokens[1]}"
        )
    header = (
        f"{'prompt':>6} {'tokens':>6} {spec_label} vs {base_label} (greedy, {max_new_tokens} new)"
    )
    table = "\n".join([header, *rows])
    if divergences:
        first = divergences[0]
        summary = (
            f"FAIL: {spec_label} diverges from {base_label} on {len(divergences)} of "
            f"{len(prompts)} prompts; first: prompt {first['request']}, output token "
            f"{first['position']}: {first['spec_token']} vs {first['base_token']}"
        )
        table += f"\n{spec_label}: ...{first['spec_text']}\n{base_label}: ...{first['base_text']}"
    else:
        summary = (
            f"PASS: {spec_label} returned {base_label}'s greedy output ids for all "
            f"{len(prompts)} prompts"
        )
    warnings = [
        f"{key} differs: {spec_label} {spec_info[key]!r}, {base_label} {base_info[key]!r} "
        "(numerics differ; near-ties may flip greedy tokens)"
        for key in _NUMERICS
        if key in spec_info and key in base_info and spec_info[key] != base_info[key]
    ]
    if spec_info and not spec_info.get("speculative_algorithm"):
        warnings.append(f"{spec_label} runs no speculative decoding (speculative_algorithm null)")
    evidence = {"spec": spec_label, "base": base_label, "prompts": len(prompts)}
    evidence |= {"max_new_tokens": max_new_tokens, "divergences": divergences}
    outcome = Outcome.FAIL if divergences else Outcome.PASS
    kind: VerdictKind = "assert_greedy_equivalent"
    return conclude(Verdict(kind, outcome, "output_ids", summary, table, evidence, warnings))
