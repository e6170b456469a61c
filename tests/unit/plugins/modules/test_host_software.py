"""host_software reads its host tools' output whatever its encoding (issue 33): a Latin-1 byte in lscpu's text
is read, never a UnicodeDecodeError that fails the module."""

from __future__ import annotations

import sys

from _ansible_modules import load_module, run_module

host_software = load_module("host_software")


def test_a_latin1_byte_in_lscpu_is_read_not_fatal(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    lscpu = bin_dir / "lscpu"
    lscpu.write_text(f"#!{sys.executable}\nimport sys\n"
                     "sys.stdout.buffer.write(b'Architecture: aarch64\\nModel name: Cort\\xe9x-X925\\n')\n")
    lscpu.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))  # no docker, nvidia-ctk, nvidia-container-cli here
    out = run_module(host_software, {})
    assert "failed" not in out
    assert out["cpu_model_source"] == "lscpu"
    assert out["cpu_model"].startswith("Cort") and out["cpu_model"].endswith("x-X925")
    assert out["docker"] is None and "docker" in out["docker_error"]
