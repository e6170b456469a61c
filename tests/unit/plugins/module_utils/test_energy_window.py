"""Energy over the load's steady window (issue 32, host_state.energy_split): telemetry.csv files with known power
and utilisation steps; the steady power, its J per output token at a stated rate, the start-up and the after-load
energy are stated as numbers worked out by hand in the comments."""

from __future__ import annotations

from pathlib import Path

import pytest
from _ansible_modules import host_util

host_state = host_util("host_state")
HEADER = "t_s,gpu,gpu_temp_c,gpu_power_w,sm_clock_mhz,gpu_util_pct,throttle_reasons,mem_used_gib,cgroup_mem_gib\n"


def write_csv(path: Path, rows: list[tuple]) -> str:
    """rows: (t_s, gpu, power W or None, utilisation % or None)."""
    def cell(v: float | None) -> str:
        return "" if v is None else str(v)
    path.write_text(HEADER + "".join(f"{t},{g},40,{cell(p)},2400,{cell(u)},none,10,\n" for t, g, p, u in rows))
    return str(path)


def startup_load_idle() -> list[tuple]:
    """0-4 s start-up at 100 W / 0%, 5-8 s the load at 300 W / 80%, 9-10 s idle at 100 W / 0%."""
    return [(t, 0, 300.0 if 5 <= t <= 8 else 100.0, 80.0 if 5 <= t <= 8 else 0.0) for t in range(11)]


def test_the_load_window_its_power_and_j_per_token(tmp_path: Path) -> None:
    split = host_state.energy_split(write_csv(tmp_path / "t.csv", startup_load_idle()), output_tok_s=600.0)
    steady = split["steady"]
    assert steady["window_s"] == [5.0, 8.0] and steady["error"] is None
    assert steady["energy_j"] == pytest.approx(900.0)  # 300 W x 3 s
    assert steady["power_w"] == pytest.approx(300.0) and steady["seconds"] == pytest.approx(3.0)
    assert steady["j_per_output_token"] == pytest.approx(0.5)  # 300 W / 600 tok/s
    # start-up 0-5 s: 4 s at 100 W + the ramp 4-5 s at (100 + 300) / 2 = 600 J; after 8-10 s: 200 + 100 = 300 J
    assert split["startup"]["energy_j"] == pytest.approx(600.0) and split["startup"]["window_s"] == [0.0, 5.0]
    assert split["after_load"]["energy_j"] == pytest.approx(300.0)
    assert "not part of J per output token" in split["startup"]["label"]


def test_a_start_up_ten_times_longer_leaves_the_steady_figure_alone(tmp_path: Path) -> None:
    """The A/A case: the same load after a short and after a long start-up (one side tuned its kernels)."""
    short = startup_load_idle()
    long = [(t, 0, 100.0, 0.0) for t in range(50)] + [(t + 50, g, p, u) for t, g, p, u in short]
    a = host_state.energy_split(write_csv(tmp_path / "a.csv", short), output_tok_s=600.0)
    b = host_state.energy_split(write_csv(tmp_path / "b.csv", long), output_tok_s=600.0)
    assert a["steady"]["j_per_output_token"] == b["steady"]["j_per_output_token"]
    assert b["startup"]["energy_j"] == pytest.approx(5600.0)  # 50 s more at 100 W on top of the 600 J


def test_a_busy_server_start_before_ready_is_start_up(tmp_path: Path) -> None:
    """A serving run: the server's CUDA graph capture keeps the GPU busy at 1-2 s, it is ready at 3 s; the load
    runs 5-8 s. Without not_before_s the window would begin at the capture."""
    rows = [(t, 0, 250.0 if t in (1, 2) else p, 90.0 if t in (1, 2) else u) for t, _, p, u in startup_load_idle()]
    path = write_csv(tmp_path / "t.csv", rows)
    assert host_state.energy_split(path, 600.0)["steady"]["window_s"] == [1.0, 8.0]
    assert host_state.energy_split(path, 600.0, not_before_s=3.0)["steady"]["window_s"] == [5.0, 8.0]


def test_several_gpus_sum_their_power_over_the_window(tmp_path: Path) -> None:
    rows = startup_load_idle() + [(t, 1, p / 2, u) for t, _, p, u in startup_load_idle()]
    steady = host_state.energy_split(write_csv(tmp_path / "t.csv", rows), output_tok_s=900.0)["steady"]
    assert steady["power_w"] == pytest.approx(450.0)  # 300 W + 150 W
    assert steady["j_per_output_token"] == pytest.approx(0.5)  # 450 W / 900 tok/s


def test_why_there_is_no_steady_figure(tmp_path: Path) -> None:
    no_util = write_csv(tmp_path / "a.csv", [(t, 0, 100.0, None) for t in range(5)])
    assert "no GPU utilisation" in host_state.energy_split(no_util, 600.0)["steady"]["error"]
    idle = write_csv(tmp_path / "b.csv", [(t, 0, 100.0, 0.0) for t in range(5)])
    assert "never busy" in host_state.energy_split(idle, 600.0)["steady"]["error"]
    blip = write_csv(tmp_path / "c.csv", [(t, 0, 100.0, 80.0 if t == 2 else 0.0) for t in range(5)])
    assert "fewer than two power samples" in host_state.energy_split(blip, 600.0)["steady"]["error"]
    no_rate = host_state.energy_split(write_csv(tmp_path / "d.csv", startup_load_idle()), None)["steady"]
    assert no_rate["power_w"] == pytest.approx(300.0) and no_rate["j_per_output_token"] is None
    assert "no output rate" in no_rate["error"]
    assert "No such file" in host_state.energy_split(str(tmp_path / "absent.csv"), 600.0)["steady"]["error"]


def test_the_output_rate_of_a_run() -> None:
    assert host_state.output_rate({"output_tok_s": 633.9}, None) == 633.9
    assert host_state.output_rate({"output_tok_s": None}, None) is None
    points = [{"status": "ok", "duration_s": 20.0}, {"status": "ok", "duration_s": 30.0},
              {"status": "failed", "duration_s": 5.0}]
    assert host_state.output_rate({}, {"points": points}, output_tokens=1000.0) == pytest.approx(20.0)  # 1000 / 50 s
    assert host_state.output_rate({}, {"points": points}) is None


def test_the_attestation_section_keeps_its_keys_and_adds_the_split(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "telemetry.csv", startup_load_idle())
    token = {"counters": None, "gpu_names": ["NVIDIA H200"]}
    section = host_state.run_state_after(token, path, 96, nvidia_smi="/nonexistent/nvidia-smi", output_tok_s=600.0)
    energy = section["energy"]
    assert energy["energy_j"] == pytest.approx(1800.0)  # 600 + 900 + 300 J: the whole run, as before
    assert energy["j_per_output_token"] == pytest.approx(18.75)  # 1800 J / 96 tokens, as before
    assert energy["steady"]["j_per_output_token"] == pytest.approx(0.5)
    assert energy["startup"]["energy_j"] == pytest.approx(600.0)
