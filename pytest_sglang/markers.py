"""The plugin's markers: their documentation, their validation at collection, what they select."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_sglang.config.settings import Settings
    from pytest_sglang.config.values import Expectation
    from pytest_sglang.gpu.model import GpuSnapshot

#: Marker lines for ``config.addinivalue_line("markers", ...)``; ``pytest --markers`` shows them.
MARKERS = (
    "sglang_profile(name): run this test against the SGLang server called NAME; the closest "
    "marker wins.",
    "sglang_expect(**key_values): check that the server serves what this test expects: "
    "model_id, max_model_len or any /server_info key (tp_size=8...).",
    "sglang_requires(gpus=1, gpu_name=None, min_free_gib=None): skip the test unless this "
    "machine has such GPUs (fail under --sglang-require).",
    "sglang_measure(*servers, workload, concurrency=1, repeats=5): declare the measurements "
    "this test takes with sglang_bench (each server at each concurrency level), so that "
    "they are taken while the server is up, whichever test launched it: each launched "
    "profile is launched once per session, whatever the test order. A test may still "
    "measure what it did not declare, at the price of a relaunch the summary points out.",
)

#: Why a test's ``sglang_requires`` is unmet (set at collection, acted on at setup).
UNMET_KEY = pytest.StashKey[str]()

#: The fixture that carries the server name of an unmarked test run once per server.
TARGET_FIXTURE = "sglang_target"


#: ``sglang_requires``' keywords and the test each value must pass.
REQUIRES: dict[str, Callable[[object], bool]] = {
    "gpus": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1,
    "gpu_name": lambda v: v is None or isinstance(v, str),
    "min_free_gib": lambda v: isinstance(v, int | float) and not isinstance(v, bool) and v >= 0,
}


def profile_of(item: pytest.Item) -> str | None:
    """Return the server this test asks for: its closest ``sglang_profile``, else its run's."""
    marker = item.get_closest_marker("sglang_profile")
    if marker is not None and marker.args:  # without: validate_markers says what is wrong
        return str(marker.args[0])
    callspec = getattr(item, "callspec", None)
    if callspec is not None and TARGET_FIXTURE in callspec.params:
        return str(callspec.params[TARGET_FIXTURE])
    return None


def servers_named(item: pytest.Item) -> frozenset[str]:
    """Return the servers pytest can see ``item`` use: its profile and declared servers."""
    names = {str(arg) for marker in item.iter_markers("sglang_measure") for arg in marker.args}
    return frozenset(names | {profile} if (profile := profile_of(item)) else names)


def parametrize_over_servers(metafunc: pytest.Metafunc, settings: Settings) -> None:
    """Run a test that needs a server but names none once per configured server.

    Only with two or more servers (attached or profiles) and none called ``default``: then
    checks such as "the served model is the expected one" cover every server.
    """
    from pytest_sglang.config.options import DEFAULT_SERVER_NAME

    if TARGET_FIXTURE not in metafunc.fixturenames:
        return
    if metafunc.definition.get_closest_marker("sglang_profile") is not None:
        return
    names = [s.name for s in settings.servers]
    names += [name for name in settings.profiles if name not in names]
    if len(names) >= 2 and DEFAULT_SERVER_NAME not in names:
        metafunc.parametrize(TARGET_FIXTURE, names, ids=names)


def expectations_of(item: pytest.Item) -> list[Expectation]:
    """Return the test's ``sglang_expect`` expectations, closest marker first for each key."""
    from pytest_sglang.config.values import Expectation

    source = f"@pytest.mark.sglang_expect on {item.nodeid}"
    found: dict[str, Expectation] = {}
    for marker in item.iter_markers("sglang_expect"):
        for key, value in marker.kwargs.items():
            found.setdefault(key, Expectation(key=key, value=value, source=source))
    return list(found.values())


def validate_markers(items: Iterable[pytest.Item]) -> None:
    """Reject malformed markers before any test runs, naming the test, the marker and the fix.

    :raises pytest.UsageError:
    """
    for item in items:
        for marker in item.iter_markers("sglang_profile"):
            from pytest_sglang.config.values import NAME_RE

            name = marker.args[0] if len(marker.args) == 1 else None
            if marker.kwargs or not isinstance(name, str):
                raise pytest.UsageError(
                    f"{item.nodeid}: @pytest.mark.sglang_profile takes exactly one server "
                    f"name, got args={marker.args!r} kwargs={marker.kwargs!r}; write e.g. "
                    "@pytest.mark.sglang_profile('eagle3')"
                )
            if not NAME_RE.match(name):
                raise pytest.UsageError(
                    f"{item.nodeid}: @pytest.mark.sglang_profile({name!r}): not a valid "
                    "server name; use letters, digits, '_', '.' or '-'"
                )
        for marker in item.iter_markers("sglang_requires"):
            unknown = sorted(set(marker.kwargs) - set(REQUIRES))
            if marker.args or unknown:
                raise pytest.UsageError(
                    f"{item.nodeid}: @pytest.mark.sglang_requires takes the keywords "
                    f"{', '.join(REQUIRES)}, got args={marker.args!r} and unknown {unknown!r}; "
                    "write e.g. @pytest.mark.sglang_requires(gpus=8, gpu_name='H200', "
                    "min_free_gib=70)"
                )
            if not all(REQUIRES[key](value) for key, value in marker.kwargs.items()):
                raise pytest.UsageError(
                    f"{item.nodeid}: @pytest.mark.sglang_requires({marker.kwargs!r}): gpus must "
                    "be an integer >= 1, min_free_gib a number >= 0, gpu_name a string"
                )
        for marker in item.iter_markers("sglang_expect"):
            if marker.args or not marker.kwargs:
                raise pytest.UsageError(
                    f"{item.nodeid}: @pytest.mark.sglang_expect takes keyword arguments only, "
                    f"got args={marker.args!r}; write e.g. "
                    "@pytest.mark.sglang_expect(max_model_len=131072, tp_size=8)"
                )


def order_by_profile(items: list[pytest.Item]) -> list[pytest.Item]:
    """Group tests by their ``sglang_profile``, in order of first appearance, stable within.

    Launched servers share the GPUs: interleaved profiles would cost a launch per switch.
    Tests of no single profile come last, to read what the launched profiles measured for
    them (``sglang_measure``). A no-op unless two profiles are used, or one and a declaration.
    """
    groups: dict[str | None, list[pytest.Item]] = {}
    for item in items:
        groups.setdefault(profile_of(item), []).append(item)
    named = len(groups) - (None in groups)
    declares = any(item.get_closest_marker("sglang_measure") for item in items)
    if named < 2 and not (named == 1 and declares):
        return items
    rest = groups.pop(None, [])
    return [item for group in groups.values() for item in group] + rest


def gpu_snapshot(settings: Settings) -> tuple[GpuSnapshot, str]:
    """Return one snapshot of the GPUs the settings read, and what read them.

    :raises GpuUnavailable: GPU state cannot be read here.
    """
    from pytest_sglang.gpu.probes import make_probe

    probe = make_probe(host=settings.gpu_host.value, fake_dir=settings.gpu_fake.value)
    try:
        return probe.snapshot(), probe.describe()
    finally:
        probe.close()


def evaluate_requirements(items: list[pytest.Item], settings: Settings) -> None:
    """Evaluate the ``sglang_requires`` markers of ``items`` against one GPU snapshot.

    An unmet requirement's reason, which says what was found, goes to ``UNMET_KEY``.
    """
    from pytest_sglang.errors import GpuUnavailable
    from pytest_sglang.gpu.model import unmet_requirement

    try:
        snapshot, _ = gpu_snapshot(settings)
    except GpuUnavailable as exc:
        for item in items:
            item.stash[UNMET_KEY] = f"GPU state unavailable: {exc}"
        return
    for item in items:
        marker = item.get_closest_marker("sglang_requires")
        reason = unmet_requirement(snapshot, dict(marker.kwargs)) if marker else None
        if reason is not None:
            item.stash[UNMET_KEY] = reason
