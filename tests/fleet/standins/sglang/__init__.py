"""Stand-in package for SGLang: only ``python3 -m sglang.launch_server`` (with tests/fleet/standins on PYTHONPATH)."""
