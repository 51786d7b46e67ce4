"""The plugin's markers: their documentation and their validation at collection time."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from pytest_sglang.config.defaults import DEFAULT_SERVER_NAME
from pytest_sglang.config.settings import Settings
from pytest_sglang.config.values import NAME_RE, Expectation

__all__ = [
    "MARKERS",
    "TARGET_FIXTURE",
    "UNMET_KEY",
    "evaluate_requirements",
    "expectations_of",
    "order_by_profile",
    "parametrize_over_servers",
    "profile_of",
    "validate_markers",
]

#: Marker lines for ``config.addinivalue_line("markers", ...)``; ``pytest --markers`` shows them.
MARKERS = (
    "sglang_profile(name): run this test against the SGLang server called NAME "
    "(attach one with --sglang-url NAME=URL). The closest marker wins, so a test can "
    "override its module's or class's choice.",
    "sglang_expect(**key_values): check, for this test, that the server serves what it "
    "expects: model_id=..., max_model_len=..., or any /server_info key such as tp_size=8 or "
    "speculative_algorithm='EAGLE3'. These add to --sglang-expect and the profile's expect, "
    "which the readiness gate checks for every test of the server.",
    "sglang_requires(gpus=1, gpu_name=None, min_free_gib=None): skip the test unless this "
    "machine has that many GPUs (named like gpu_name, with that much free memory), checked "
    "through NVML at collection; fails instead under --sglang-require.",
)

#: Why a test's ``sglang_requires`` is unmet (set at collection, acted on at setup).
UNMET_KEY = pytest.StashKey[str]()


#: The fixture that carries the server name of an unmarked test run once per server.
TARGET_FIXTURE = "sglang_target"


def profile_of(item: pytest.Item) -> str | None:
    """Return the server this test asks for, or None.

    That is its closest ``sglang_profile`` marker, else the server it was parametrized with
    (see :func:`parametrize_over_servers`).
    """
    marker = item.get_closest_marker("sglang_profile")
    if marker is not None and marker.args:  # without: validate_markers says what is wrong
        return str(marker.args[0])
    callspec = getattr(item, "callspec", None)
    if callspec is not None and TARGET_FIXTURE in callspec.params:
        return str(callspec.params[TARGET_FIXTURE])
    return None


def parametrize_over_servers(metafunc: pytest.Metafunc, settings: Settings) -> None:
    """Run a test that needs a server but names none once per configured server.

    Only when that is the only sensible reading: two or more servers (attached or profiles)
    and none called ``default``. Checks such as "the served model is the expected one" then
    cover every server, and each run is grouped with its server's other tests.
    """
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
    found: dict[str, Expectation] = {}
    for marker in item.iter_markers("sglang_expect"):
        for key, value in marker.kwargs.items():
            found.setdefault(
                key,
                Expectation(
                    key=key, value=value, source=f"@pytest.mark.sglang_expect on {item.nodeid}"
                ),
            )
    return list(found.values())


def validate_markers(items: Iterable[pytest.Item]) -> None:
    """Reject malformed markers before any test runs.

    :raises pytest.UsageError: naming the test, the marker and the fix.
    """
    for item in items:
        for marker in item.iter_markers("sglang_profile"):
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
            unknown = sorted(set(marker.kwargs) - {"gpus", "gpu_name", "min_free_gib"})
            if marker.args or unknown:
                raise pytest.UsageError(
                    f"{item.nodeid}: @pytest.mark.sglang_requires takes the keywords gpus, "
                    f"gpu_name and min_free_gib, got args={marker.args!r} and unknown "
                    f"{unknown!r}; write e.g. @pytest.mark.sglang_requires(gpus=8, "
                    "gpu_name='H200', min_free_gib=70)"
                )
            kwargs = marker.kwargs
            if not (
                _at_least(kwargs.get("gpus", 1), 1, integer=True)
                and _at_least(kwargs.get("min_free_gib", 0), 0)
                and isinstance(kwargs.get("gpu_name"), (str, type(None)))
            ):
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


def _at_least(value: object, least: float, *, integer: bool = False) -> bool:
    """Whether ``value`` is a number (an integer if asked; never a bool) of at least ``least``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return value >= least and (isinstance(value, int) or not integer)


def order_by_profile(items: list[pytest.Item]) -> list[pytest.Item]:
    """Group tests by their ``sglang_profile``, in order of first appearance, stable within.

    Launched servers share the GPUs: interleaved profiles would cost a launch per switch.
    Tests of no single profile come last, when every launched profile has taken its declared
    measurements (``sglang_measure``) for them to read from the session cache. A no-op unless
    two or more profiles are used, or one and some test declares measurements.
    """
    groups: dict[str | None, list[pytest.Item]] = {}
    for item in items:
        groups.setdefault(profile_of(item), []).append(item)
    named = len([name for name in groups if name is not None])
    declares = any(item.get_closest_marker("sglang_measure") for item in items)
    if named < 2 and not (named == 1 and declares):
        return items
    rest = groups.pop(None, [])
    return [item for group in groups.values() for item in group] + rest


def evaluate_requirements(items: list[pytest.Item], settings: Settings) -> None:
    """Evaluate every ``sglang_requires`` marker against one GPU snapshot.

    Unmet requirements are stored on the item (``UNMET_KEY``) with the reason, which
    says what was found; ``pytest_runtest_setup`` skips or fails them.
    """
    from pytest_sglang.errors import GpuUnavailable
    from pytest_sglang.gpu.model import unmet_requirement
    from pytest_sglang.gpu.probes import make_probe

    marked = [(item, item.get_closest_marker("sglang_requires")) for item in items]
    marked = [(item, marker) for item, marker in marked if marker is not None]
    if not marked:
        return
    try:
        probe = make_probe(host=settings.gpu_host.value, fake_dir=settings.gpu_fake.value)
        try:
            snapshot = probe.snapshot()
        finally:
            probe.close()
    except GpuUnavailable as exc:
        for item, _ in marked:
            item.stash[UNMET_KEY] = f"GPU state unavailable: {exc}"
        return
    for item, marker in marked:
        assert marker is not None
        reason = unmet_requirement(snapshot, dict(marker.kwargs))
        if reason is not None:
            item.stash[UNMET_KEY] = reason
