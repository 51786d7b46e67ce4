"""GPU state: probes (fake directory, nvidia-smi CSV, NVML absent), hygiene, requirements."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_sglang.errors import GpuMemoryNotReleased, GpuNotClean, GpuUnavailable
from pytest_sglang.gpu.hygiene import postflight, preflight, server_gpus
from pytest_sglang.gpu.model import GIB, MIB, unmet_requirement
from pytest_sglang.gpu.probes import FakeProbe, NvmlProbe, SmiProbe, write_fake_gpus
from tests.fake_clock import FakeClock


def hold(directory: Path, pid: int, gpus: list[str], used_mib: int, name: str = "python") -> Path:
    path = directory / f"holder-{pid}.json"
    path.write_text(json.dumps({"pid": pid, "gpus": gpus, "used_mib": used_mib, "name": name}))
    return path


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process
    process.kill()
    process.wait()


def test_fake_probe_counts_holders_only_while_alive(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    uuids = write_fake_gpus(tmp_path, 2)
    hold(tmp_path, sleeper.pid, uuids, 76 * 1024, "sglang::scheduler")
    probe = FakeProbe(tmp_path)
    snap = probe.snapshot()
    assert [g.memory_used for g in snap.gpus] == [76 * GIB, 76 * GIB]
    assert snap.only([uuids[0]]).processes[0].describe() == (
        f"pid {sleeper.pid} (sglang::scheduler) 76.0 GiB"
    )
    sleeper.kill()
    sleeper.wait()
    later = probe.snapshot()
    assert later.processes == ()
    diff = snap.diff(later)
    assert diff.memory_delta == {uuids[0]: -76 * GIB, uuids[1]: -76 * GIB}
    assert len(diff.gone_processes) == 2 and diff.new_processes == ()


def test_fake_probe_counts_no_holder_that_exited_unreaped(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    """A zombie (exited, its parent has not waited yet) holds no GPU memory any more."""
    import psutil

    uuids = write_fake_gpus(tmp_path, 1)
    hold(tmp_path, sleeper.pid, uuids, 1024)
    sleeper.kill()
    deadline = time.monotonic() + 30
    while psutil.Process(sleeper.pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the killed process never became a zombie"
    assert FakeProbe(tmp_path).snapshot().processes == ()


def test_fake_probe_needs_gpus_json(tmp_path: Path) -> None:
    with pytest.raises(GpuUnavailable, match=r"has no gpus\.json"):
        FakeProbe(tmp_path)


def test_nvml_unavailable_here_is_a_reason_not_a_crash() -> None:
    # This machine (and CI) has no NVIDIA driver: the probe must say why, not crash.
    if Path("/dev/nvidiactl").exists():
        pytest.skip("a GPU driver is present")
    with pytest.raises(GpuUnavailable, match=r"NVML unavailable|not installed"):
        NvmlProbe()


FAKE_SMI = r"""#!/bin/sh
case "$*" in
  *query-gpu*)
    echo '0, GPU-aaaa, 143771, 76000, 67771, 97, 350.5, 1980, 71, 0x20, 0, NVIDIA H200'
    echo '1, GPU-bbbb, 143771, 1, 143770, 0, 80, 210, 35, 0x1, 0, NVIDIA H200, rev B' ;;
  *query-compute-apps*)
    echo '4242, GPU-aaaa, 75990, /usr/bin/python3'
    echo '4243, GPU-aaaa, [N/A], sglang, scheduler' ;;
esac
"""
FAKE_SSH = """#!/bin/sh
# Stand-in for ssh: check the options, drop them and the host, run the quoted command.
[ "$1" = "-o" ] && [ "$2" = "BatchMode=yes" ] || { echo "no BatchMode" >&2; exit 255; }
shift 6
[ "$1" = "--" ] && shift
exec sh -c "$1"
"""


def install(bin_dir: Path, name: str, text: str) -> None:
    path = bin_dir / name
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def smi_probe(bin_dir: Path, monkeypatch: pytest.MonkeyPatch, smi: str) -> SmiProbe:
    """Return a probe of host "gpu-box" whose ssh and nvidia-smi are these stand-ins."""
    install(bin_dir, "nvidia-smi", smi)
    install(bin_dir, "ssh", FAKE_SSH)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return SmiProbe("gpu-box")


def test_smi_probe_parses_csv_with_na_and_commas(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    snap = smi_probe(tmp_path, monkeypatch, FAKE_SMI).snapshot()
    assert [(g.index, g.uuid, g.name) for g in snap.gpus] == [
        (0, "GPU-aaaa", "NVIDIA H200"), (1, "GPU-bbbb", "NVIDIA H200, rev B"),
    ]  # fmt: skip
    assert snap.gpus[0].memory_used == 76000 * MIB
    assert [(p.pid, p.used_memory, p.name) for p in snap.processes] == [
        (4242, 75990 * MIB, "python3"), (4243, None, "sglang, scheduler"),
    ]  # fmt: skip


def test_smi_probe_failure_is_unavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    probe = smi_probe(tmp_path, monkeypatch, "#!/bin/sh\necho 'Failed to initialize NVML: "
                      "Driver/library version mismatch'\nexit 18\n")  # fmt: skip
    with pytest.raises(GpuUnavailable, match="gpu-box failed with exit code 18: Failed to init"):
        probe.snapshot()


@pytest.mark.parametrize(
    "line", ["NVIDIA-SMI has failed", "x, GPU-a, 1, 1, 0, 0, 0, 0, 0, 0x0, 0, NVIDIA H200"]
)
def test_smi_probe_refuses_a_line_it_cannot_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line: str
) -> None:
    probe = smi_probe(tmp_path, monkeypatch, f"#!/bin/sh\necho '{line}'\n")
    with pytest.raises(GpuUnavailable, match="unexpected nvidia-smi line: '"):
        probe.snapshot()


def test_server_gpus_honours_cuda_visible_devices(tmp_path: Path) -> None:
    uuids = write_fake_gpus(tmp_path, 4)
    snap = FakeProbe(tmp_path).snapshot()
    assert server_gpus(snap, 2, {}) == tuple(uuids[:2])
    assert server_gpus(snap, 2, {"CUDA_VISIBLE_DEVICES": "3,1"}) == (uuids[3], uuids[1])
    assert server_gpus(snap, 1, {"CUDA_VISIBLE_DEVICES": uuids[2][:12]}) == (uuids[2],)
    with pytest.raises(GpuNotClean, match=r"needs 2 GPUs \(tp=2\) but only 1 are visible"):
        server_gpus(snap, 2, {"CUDA_VISIBLE_DEVICES": "0,-1,1"})  # CUDA stops at -1
    with pytest.raises(GpuNotClean, match=r"needs 2 GPUs \(tp=2\) but only 1 are visible"):
        server_gpus(snap, 2, {"CUDA_VISIBLE_DEVICES": "0,\u00b2,1"})  # no digit CUDA reads
    with pytest.raises(GpuNotClean, match="needs 8 GPUs"):
        server_gpus(snap, 8, {})


def test_preflight_names_the_zombie(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    uuids = write_fake_gpus(tmp_path, 2)
    hold(tmp_path, sleeper.pid, [uuids[1]], 76 * 1024, "sglang::scheduler_TP1")
    clock = FakeClock()
    probe = FakeProbe(tmp_path)
    assert preflight(probe, [uuids[0]], clock=clock, sleep=clock.sleep).gpu(uuids[0])
    with pytest.raises(GpuNotClean) as info:
        preflight(probe, uuids, clock=clock, sleep=clock.sleep)
    message = str(info.value)
    assert f"GPU 1 (NVIDIA H200, {uuids[1]}): 76.0 GiB used by pid {sleeper.pid} " in message
    assert "(sglang::scheduler_TP1) 76.0 GiB" in message
    assert "GPU 0" not in message


def test_postflight_waits_for_release_then_names_holders(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    uuids = write_fake_gpus(tmp_path, 1)
    probe = FakeProbe(tmp_path)
    clock = FakeClock()
    baseline = probe.snapshot()
    holder = hold(tmp_path, sleeper.pid, uuids, 2048)
    with pytest.raises(GpuMemoryNotReleased) as info:
        postflight(probe, uuids, baseline, clock=clock, sleep=clock.sleep)
    assert f"still held by pid(s) {sleeper.pid}" in str(info.value)
    holder.unlink()
    assert postflight(probe, uuids, baseline, clock=clock, sleep=clock.sleep) == 0


def test_requirements(tmp_path: Path) -> None:
    write_fake_gpus(tmp_path, 2, name="NVIDIA H200")
    snap = FakeProbe(tmp_path).snapshot()
    assert unmet_requirement(snap, {"gpus": 2, "gpu_name": "h200"}) is None
    assert unmet_requirement(snap, {"min_free_gib": 100}) is None
    reason = unmet_requirement(snap, {"gpus": 8, "gpu_name": "B200", "min_free_gib": 70})
    assert reason is not None
    assert reason.startswith("requires 8 GPUs named like 'B200' with >= 70 GiB free; found 0")
    assert "GPU 0 NVIDIA H200 (140.4 GiB free)" in reason


def test_requires_marker_and_gpu_fixture(pytester: pytest.Pytester, tmp_path: Path) -> None:
    write_fake_gpus(tmp_path / "gpus", 1)
    pytester.makepyfile("""
        import pytest

        @pytest.mark.sglang_requires(gpus=1, gpu_name="H200")
        def test_one(sglang_gpu):
            snap = sglang_gpu.snapshot()
            assert snap.gpus[0].name == "NVIDIA H200"

        @pytest.mark.sglang_requires(gpus=8)
        def test_eight():
            pass
    """)
    result = pytester.runpytest(f"-osglang_gpu_fake={tmp_path / 'gpus'}", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*requires 8 GPUs; found 1 such: GPU 0 NVIDIA H200*"])
    result = pytester.runpytest(f"-osglang_gpu_fake={tmp_path / 'gpus'}", "--sglang-require")
    result.assert_outcomes(passed=1, errors=1)
    # The same rule as any missing requirement: it names where --sglang-require was set.
    result.stdout.fnmatch_lines(["*requires 8 GPUs*(--sglang-require is set, from *)*"])


def test_without_nvml_gpu_tests_skip_with_reason(pytester: pytest.Pytester) -> None:
    if Path("/dev/nvidiactl").exists():
        pytest.skip("a GPU driver is present")
    pytester.makepyfile("""
        import pytest

        def test_state(sglang_gpu):
            pass

        @pytest.mark.sglang_requires(gpus=1)
        def test_marked():
            pass
    """)
    result = pytester.runpytest("-rs")
    result.assert_outcomes(skipped=2)
    # "NVML unavailable: ..." with nvidia-ml-py installed, "nvidia-ml-py is not installed" without.
    assert "GPU state unavailable: " in result.stdout.str()
    result = pytester.runpytest("--sglang-require")
    result.assert_outcomes(errors=2)


@pytest.mark.parametrize("kwargs", ["gpus='eight'", "min_free_gib='a'", "gpus=0"])
def test_bad_requires_values(pytester: pytest.Pytester, kwargs: str) -> None:
    pytester.makepyfile(
        f"import pytest\n\n@pytest.mark.sglang_requires({kwargs})\ndef test_x(): pass\n"
    )
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "gpus must be an integer >= 1" in result.stderr.str()


def test_bad_requires_marker(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        "import pytest\n\n@pytest.mark.sglang_requires(gpu=8)\ndef test_x(): pass\n"
    )
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "unknown ['gpu']" in result.stderr.str()
