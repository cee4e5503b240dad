"""gpu_tests/trace_gaps.py reads a device's idle time out of a profiler trace: checked on a
made-up trace (an XSpace in text form) whose idle time is known by hand."""

import pytest

ProfileData = pytest.importorskip("jax.profiler").ProfileData

from gpu_tests.trace_gaps import read  # noqa: E402

MS = 1_000_000_000  # picoseconds


def space(host, device, copies=()) -> str:
    """host: [(name, start ms, end ms)] on the main thread; device: compute [(start, end)]."""
    names = sorted({n for n, *_ in host} | {"kernel", "memcpy"})
    meta = "".join(f' event_metadata {{ key: {i} value {{ id: {i} name: "{n}" }} }}' for i, n in enumerate(names, 1))

    def ev(n, s, e):
        return (
            f" events {{ metadata_id: {names.index(n) + 1} offset_ps: {int(s * MS)} duration_ps: {int((e - s) * MS)} }}"
        )

    return (
        'planes { id: 1 name: "/host:CPU" lines { id: 1 name: "main" timestamp_ns: 0'
        + "".join(ev(*h) for h in host)
        + " }"
        + ' lines { id: 2 name: "other" timestamp_ns: 0'
        + ev("J:flush", 0, 10)
        + " }"
        + meta
        + ' } planes { id: 2 name: "/device:GPU:0" lines { id: 1 name: "Stream #1(Compute)" timestamp_ns: 0'
        + "".join(ev("kernel", s, e) for s, e in device)
        + ' } lines { id: 2 name: "Stream #2(MemcpyD2H)" timestamp_ns: 0'
        + "".join(ev("memcpy", s, e) for s, e in copies)
        + ' } lines { id: 3 name: "XLA Ops" timestamp_ns: 0'
        + ev("kernel", 0, 10)
        + " }"
        + meta
        + " }"
    )


def test_idle_time_is_split_by_the_innermost_annotations():
    host = [("J:round", 0, 10), ("J:verify_head", 0.5, 3.5), ("J:flush", 1, 3), ("J:_get", 2, 3), ("J:run_call", 7, 8)]
    # kernels 0-1 and 5-6, overlapping ones merged; the round's idle: 1-5 and 6-10 (8 ms)
    kernels = [(0, 0.6), (0.4, 1), (5, 5.5), (5.55, 6)]  # a launch gap of 0.05 ms between the last two
    out = read(ProfileData.from_text_proto(space(host, kernels, copies=[(3, 3.5)])))
    assert out["wall_ms"] == pytest.approx(10)
    assert out["device_busy_ms"] == pytest.approx(1.95) and out["copy_ms"] == pytest.approx(0.5)
    assert out["idle_ms"] == pytest.approx(8.05) and out["idle_gaps"] == 3
    assert out["idle_short_ms"] == pytest.approx(0.05) and out["idle_short_gaps"] == 1  # not attributed
    assert out["device_launches"] == 4 and out["device_by_kernel"]["kernel"] == [
        pytest.approx(2.15),
        4,
    ]  # overlaps counted
    idle = out["idle_by"]
    assert idle["verify_head>flush"] == pytest.approx(1)  # 1-2 (flush inside verify_head here)
    assert idle["flush>_get"] == pytest.approx(1)  # 2-3: the two innermost of three
    assert idle["verify_head"] == pytest.approx(0.5) and idle["run_call"] == pytest.approx(1)
    assert idle["(between annotations)"] == pytest.approx(4.5)  # 3.5-5, 6-7 and 8-10
    assert out["host_ms"]["flush"] == pytest.approx(2)  # the main thread's only: not the other line's


def test_no_round_annotation_is_an_error():
    with pytest.raises(AssertionError, match="J:round"):
        read(ProfileData.from_text_proto(space([("J:flush", 0, 1)], [(0, 1)])))
