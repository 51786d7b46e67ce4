"""A cut run's finished part is reported with the measurement it was cut from, and only
with it: a later measurement on the same server that ends before its first run starts
carries none of it (its records would be reported as another workload's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_sglang.config.settings import Settings
from pytest_sglang.config.values import ServerUrl, Sourced
from pytest_sglang.loadgen import placement
from pytest_sglang.loadgen.records import LoadRun, RequestRecord
from pytest_sglang.loadgen.runner import LoadGenerator
from pytest_sglang.loadgen.schedule import ClosedLoop
from pytest_sglang.loadgen.workload import Workload
from pytest_sglang.measure.bench import Bench
from pytest_sglang.measure.results import BenchResult
from pytest_sglang.server.handle import ModelCard, ReadinessTimings, SGLangServer
from pytest_sglang.server.pool import ServerPool

CARD = ModelCard("org/model", None, None, None, "org", {})


def _finished_part(workload: Workload) -> LoadRun:
    """What a run cut by a test timeout leaves: two measured requests that finished."""
    records = tuple(
        RequestRecord(
            index=i, warmup=False, input_len=workload.input_len, output_len=2, sent=0.0,
            end=1.0, chunk_times=[0.5, 1.0], chunk_tokens=[1, 1], output_tokens_server=2,
            prompt_tokens=workload.input_len, finish_reason="length", status=200,
        )
        for i in range(2)
    )  # fmt: skip
    return LoadRun(workload=workload, load=ClosedLoop(2), records=records, started=0.0)


def _cut_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every run that starts is cut (Ctrl-C) after two requests finished."""

    def cut(generator: LoadGenerator, workload: Workload, load: Any, **options: Any) -> LoadRun:
        generator.interrupted_run = _finished_part(workload)
        raise KeyboardInterrupt

    monkeypatch.setattr(placement, "run_on_workers", cut)


def _bench(tmp_path: Path) -> tuple[Bench, SGLangServer]:
    """A bench, and an OpenAI-compatible server: a /generate workload ends before its run."""
    settings = Settings(
        servers=(ServerUrl("api", "http://127.0.0.1:9", "test"),),
        api_key=Sourced(None, "default"),
        require=Sourced(False, "default"),
        expectations=(),
    )
    pool = ServerPool(settings, log_dir=tmp_path, lock_dir=tmp_path)
    server = SGLangServer(
        name="api", url="http://127.0.0.1:9", model=CARD, models=(CARD,), model_info={},
        server_info={}, readiness=ReadinessTimings({}, 0), kind="openai",
    )  # fmt: skip
    return Bench(pool), server


def test_a_cut_run_is_reported_once_never_with_a_later_measurement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bench, server = _bench(tmp_path)
    _cut_runs(monkeypatch)
    recorded: list[BenchResult] = []
    view = bench.with_recorder(lambda result, handle: recorded.append(result))
    first = Workload(input_len=4, output_len=2, requests=2, warmup=0, endpoint="completions")
    second = Workload(input_len=8, output_len=2, requests=2, warmup=0)
    # The first measurement's run was cut: its finished part is reported with it.
    with pytest.raises(KeyboardInterrupt):
        view(server, first, concurrency=2, repeats=1)
    assert [r.workload for r in recorded] == [first]
    assert recorded[0].cut is not None
    # The next one on the same server ends before any run: nothing of the first goes with it.
    with pytest.raises(ValueError, match="/generate"):
        view(server, second, concurrency=2, repeats=1)
    assert [r.workload for r in recorded] == [first]
    bench.close()


def test_a_cut_run_of_run_once_goes_with_no_later_measurement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bench, server = _bench(tmp_path)
    _cut_runs(monkeypatch)
    recorded: list[BenchResult] = []
    view = bench.with_recorder(lambda result, handle: recorded.append(result))
    searched = Workload(input_len=4, output_len=2, requests=2, warmup=0, endpoint="completions")
    # A capacity search's run (run_once: never reported) was cut.
    with pytest.raises(KeyboardInterrupt):
        view.run_once(server, searched, concurrency=2)
    with pytest.raises(ValueError, match="/generate"):
        view(server, Workload(input_len=8, output_len=2, requests=2, warmup=0), concurrency=2)
    assert recorded == []
    bench.close()
