"""Host attestation parsers (issue 24) on real command outputs (tests/fixtures/attestation/README.md says
where each comes from). Expected values are read off the fixture files, not recomputed by the parser's
logic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.health import attestation

FIX = Path(__file__).resolve().parents[3] / "fixtures" / "attestation"


def text(name: str) -> str:
    return (FIX / name).read_text(encoding="utf-8")


# --------------------------------------------------------------------------- nvidia-smi -q


def test_h100_580_full_query():
    smi = attestation.parse_nvidia_smi_q(text("nvidia-smi-q-h100-580.159.04.txt"))
    assert (smi["driver_version"], smi["cuda_version"]) == ("580.159.04", "13.0")
    (gpu,) = smi["gpus"]
    assert gpu["bus_id"] == "00000000:00:06.0"
    assert gpu["product_name"] == "NVIDIA H100 80GB HBM3"
    assert gpu["uuid"] == "GPU-41caa88b-1bc7-d205-bb3d-11e5afd95c5b"
    assert gpu["vbios_version"] == "96.00.DA.00.0C"
    assert gpu["gsp_firmware_version"] == "580.159.04"
    assert (gpu["sm_clock_mhz"], gpu["memory_clock_mhz"]) == (345.0, 2619.0)
    assert (gpu["max_sm_clock_mhz"], gpu["max_memory_clock_mhz"]) == (1980.0, 2619.0)
    assert gpu["applications_graphics_clock_mhz"] == 1980.0
    # 580 prints Average and Instantaneous power; the average is the draw
    assert (gpu["power_draw_w"], gpu["power_draw_instant_w"], gpu["power_limit_w"]) == (76.98, 76.86, 700.0)
    assert gpu["temperature_c"] == 47.0
    assert (gpu["memory_total_mib"], gpu["unified_memory"]) == (81559.0, False)
    assert gpu["clock_reasons_block"] == "Clocks Event Reasons"
    assert gpu["clock_reasons_active"] == ["gpu_idle"]
    assert gpu["clock_event_counters_us"] == {"sw_power_capping": 21051280, "sync_boost": 0,
                                              "sw_thermal_slowdown": 0, "hw_thermal_slowdown": 0,
                                              "hw_power_braking": 0}
    # "Display Mode : Requested functionality has been deprecated" is not a value
    assert attestation.parse_smi_q_tree(text("nvidia-smi-q-h100-580.159.04.txt"))["gpus"][0]["Display Mode"] \
        == "Requested functionality has been deprecated"


def test_h100_under_load_reads_the_power_cap_and_the_clock():
    (gpu,) = attestation.parse_nvidia_smi_q(
        text("nvidia-smi-q-d-performance-clock-power-h100-under-load.txt"))["gpus"]
    assert gpu["sm_clock_mhz"] == 1320.0 and gpu["max_sm_clock_mhz"] == 1980.0
    assert (gpu["power_draw_w"], gpu["power_draw_instant_w"], gpu["power_limit_w"]) == (698.53, 704.93, 700.0)
    assert gpu["clock_reasons_active"] == ["sw_power_cap"]
    assert gpu["clock_event_counters_us"]["sw_power_capping"] == 29159876
    # -d PERFORMANCE,CLOCK,POWER has no product section: absent, not invented
    assert gpu["product_name"] is None and gpu["memory_total_mib"] is None and gpu["unified_memory"] is None


def test_old_spelling_clocks_throttle_reasons_and_power_readings_h800_525():
    smi = attestation.parse_nvidia_smi_q(text("nvidia-smi-q-h800-525.105.17.txt"))
    assert (smi["driver_version"], smi["cuda_version"]) == ("525.105.17", "12.0")
    (gpu,) = smi["gpus"]
    assert gpu["clock_reasons_block"] == "Clocks Throttle Reasons"
    assert gpu["clock_reasons_active"] == ["gpu_idle"]
    assert gpu["clock_event_counters_us"] == {}  # no counters before the 580 series
    assert (gpu["power_draw_w"], gpu["power_draw_instant_w"], gpu["power_limit_w"]) == (74.71, None, 700.0)
    assert gpu["vbios_version"] == "96.00.51.00.0E" and gpu["product_name"] == "NVIDIA H800"
    assert gpu["temperature_c"] == 35.0 and gpu["max_sm_clock_mhz"] == 1980.0


def test_gh200_550_ats_with_its_own_memory_is_not_unified():
    (gpu,) = attestation.parse_nvidia_smi_q(text("nvidia-smi-q-gh200-550.127.05.txt"))["gpus"]
    assert gpu["product_name"] == "NVIDIA GH200 480GB" and gpu["addressing_mode"] == "ATS"
    assert gpu["memory_total_mib"] == 97871.0 and gpu["unified_memory"] is False
    assert gpu["power_draw_w"] == 87.88 and gpu["power_limit_w"] == 700.0  # "Current Power Limit"
    assert gpu["clock_reasons_block"] == "Clocks Event Reasons" and gpu["clock_event_counters_us"] == {}


def test_eight_gpus_in_order():
    smi = attestation.parse_nvidia_smi_q(text("nvidia-smi-q-v100x8-550.127.05.txt"))
    assert len(smi["gpus"]) == 8
    assert smi["gpus"][0]["bus_id"] == "00000000:00:04.0"
    assert {g["product_name"] for g in smi["gpus"]} == {"Tesla V100-SXM2-16GB"}
    assert smi["gpus"][0]["max_sm_clock_mhz"] == 1530.0 and smi["gpus"][0]["power_limit_w"] == 300.0


def test_n_a_everywhere_reads_as_none_gtx680_470():
    (gpu,) = attestation.parse_nvidia_smi_q(text("nvidia-smi-q-gtx680-470.256.02.txt"))["gpus"]
    assert gpu["product_name"] == "NVIDIA GeForce GTX 680"
    # "Clocks Throttle Reasons : N/A" is a leaf, not a block; every clock and power figure is N/A
    assert gpu["clock_reasons_block"] is None and gpu["clock_reasons_active"] is None
    for key in ("sm_clock_mhz", "max_sm_clock_mhz", "memory_clock_mhz", "power_draw_w", "power_limit_w"):
        assert gpu[key] is None, key
    assert gpu["memory_total_mib"] == 2000.0


def gb10_like() -> str:
    """No complete ``nvidia-smi -q`` of a GB10 is published (README). GB10's published differences, applied to
    the real H100 output: product name, ``Addressing Mode : ATS``, framebuffer ``N/A``, memory clock ``N/A``,
    power limit ``N/A`` (and a CSV-style ``[N/A]``), the 0000000F:01:00.0 bus id, max SM clock 3003 MHz."""
    out = text("nvidia-smi-q-h100-580.159.04.txt")
    for old, new in (
            ("GPU 00000000:00:06.0", "GPU 0000000F:01:00.0"),
            ("NVIDIA H100 80GB HBM3", "NVIDIA GB10"),
            ("Addressing Mode                                    : None",
             "Addressing Mode                                    : ATS"),
            ("Total                                          : 81559 MiB",
             "Total                                          : N/A"),
            ("Current Power Limit                            : 700.00 W",
             "Current Power Limit                            : [N/A]"),
            ("Memory                                         : 2619 MHz",
             "Memory                                         : N/A"),
            ("SM                                             : 1980 MHz",
             "SM                                             : 3003 MHz")):
        assert old in out, old
        out = out.replace(old, new, 1)
    return out


def test_gb10_unified_memory_and_n_a_fields():
    (gpu,) = attestation.parse_nvidia_smi_q(gb10_like())["gpus"]
    assert gpu["bus_id"] == "0000000F:01:00.0" and gpu["product_name"] == "NVIDIA GB10"
    assert gpu["memory_total_mib"] is None and gpu["unified_memory"] is True
    assert gpu["power_limit_w"] is None and gpu["memory_clock_mhz"] is None
    assert gpu["max_sm_clock_mhz"] == 3003.0 and gpu["power_draw_w"] == 76.98


def test_deprecation_notes_and_the_610_names():
    # the 610 layout as a published test of an nvidia-smi wrapper quotes it (README)
    head = ("Driver Version : 610.57.04 [Deprecated; will be removed]\n"
            "CUDA Version : 13.3 [Deprecated; use CUDA UMD Version instead]\n"
            "KMD Version : 610.57.04\nCUDA UMD Version : 13.3\nGPU 0000000F:01:00.0\n")
    smi = attestation.parse_nvidia_smi_q(head)
    assert (smi["driver_version"], smi["cuda_version"]) == ("610.57.04", "13.3")
    smi = attestation.parse_nvidia_smi_q("KMD Version : 610.57.04\nCUDA UMD Version : 13.3\nGPU 0000000F:01:00.0\n")
    assert (smi["driver_version"], smi["cuda_version"]) == ("610.57.04", "13.3")


def test_not_an_nvidia_smi_output_is_an_error_naming_it():
    with pytest.raises(attestation.AttestationError, match="nvidia-smi -q"):
        attestation.parse_nvidia_smi_q("NVIDIA-SMI has failed because it couldn't communicate with the driver")


# --------------------------------------------------------------------------- throttle counters


def test_counter_deltas_over_a_run_from_two_real_snapshots():
    bus = "00000000:00:06.0"
    before = attestation.parse_event_counters(text("nvidia-smi-q-d-performance-h100-before.txt"))[bus]
    after = attestation.parse_event_counters(text("nvidia-smi-q-d-performance-h100-after.txt"))[bus]
    delta = attestation.counter_deltas(before, after)
    # 47151374 - 21051280 us: 26.1 s of SW power capping during the 25 s bf16 matmul between the snapshots
    assert delta["deltas"] == {"sw_power_capping": 26100094, "sync_boost": 0, "sw_thermal_slowdown": 0,
                               "hw_thermal_slowdown": 0, "hw_power_braking": 0}
    assert delta["reset"] == [] and delta["missing"] == []


def test_counter_deltas_reset_and_missing():
    delta = attestation.counter_deltas({"a": 10, "b": 5, "c": None, "d": 1}, {"a": 3, "b": 9, "c": 4})
    assert delta == {"deltas": {"b": 4}, "reset": ["a"], "missing": ["c", "d"]}


def test_duration_spellings():
    assert attestation.parse_duration_us("21051280 us") == 21051280
    assert attestation.parse_duration_us("4,007,672,629 \u00b5s (cumulative)") == 4007672629
    assert attestation.parse_duration_us("N/A") is None and attestation.parse_duration_us("12 ms") is None


# --------------------------------------------------------------------------- firmware


def test_fwupd_device_list_keeps_name_version_vendor_guids():
    devices = attestation.parse_fwupd_devices(text("fwupdmgr-get-devices-fwupd-qubes-test.json"))
    assert [d["name"] for d in devices] == ["ColorHug2", "Display controller",
                                            "Intel(R) Core\u2122 i7-7700HQ CPU @ 2.80GHz"]
    assert devices[0] == {"name": "ColorHug2", "version": "2.0.6", "vendor": "Hughski Ltd.", "plugin": "colorhug",
                          "guids": ["2082b5e0-7a64-478a-b1b2-e3404fab6dad", "aa4b4156-9732-55db-9500-bf6388508ee3",
                                    "101ee86a-7bea-59fb-9f89-6b6297ceed3b", "2fa8891f-3ece-53a4-adc4-0dd875685f30"]}
    assert devices[1]["vendor"] is None and devices[1]["version"] == "02"  # no "Vendor" key in fwupd's output
    assert devices[2]["version"] == "0x000000de" and devices[2]["plugin"] == "cpu"
    assert "Releases" not in json.dumps(devices)


@pytest.mark.parametrize("bad, what", [("not json", "not JSON"), ('{"Devices": 3}', "no 'Devices' list"),
                                       ("[]", "no 'Devices' list")])
def test_fwupd_bad_input(bad, what):
    with pytest.raises(attestation.AttestationError, match=what):
        attestation.parse_fwupd_devices(bad)


SUPERMICRO = {"bios_vendor": "American Megatrends Inc.", "bios_version": "2.0a", "bios_date": "12/06/2017",
              "board_name": "X11DDW-L", "product_name": "SYS-6019P-WT", "sys_vendor": "Supermicro"}


def test_dmidecode_bios_system_and_board():
    # the censored-serial lines of the published dump have no "Key: value" form and are skipped
    assert attestation.parse_dmidecode(text("dmidecode-supermicro-sys-6019p-wt.txt")) == SUPERMICRO


def test_dmidecode_without_system_section_leaves_those_none():
    bios_only = text("dmidecode-supermicro-sys-6019p-wt.txt").split("Handle 0x0001")[0]
    values = attestation.parse_dmidecode(bios_only)
    assert values["bios_version"] == "2.0a" and values["sys_vendor"] is None and values["board_name"] is None


def test_dmi_sysfs_files(tmp_path):
    assert attestation.read_dmi_id(str(FIX / "dmi-id-supermicro-sys-6019p-wt")) == SUPERMICRO
    assert attestation.read_dmi_id(str(tmp_path)) == {name: None for name in attestation.DMI_FIELDS}


# --------------------------------------------------------------------------- memory


def test_buddyinfo_h100_host():
    buddy = attestation.parse_buddyinfo(text("buddyinfo-h100-lent-host.txt"))
    assert buddy["zones"]["Normal"] == [1226, 647, 142, 335, 240, 176, 124, 122, 74, 46, 86]
    assert buddy["zones"]["DMA32"][10] == 753 and buddy["huge_order"] == 9
    # 2 MiB units: order 9 counts once, order 10 twice. DMA 1 + 3*2, DMA32 0 + 753*2, Normal 46 + 86*2
    assert buddy["free_huge_blocks"] == (1 + 6) + 1506 + (46 + 172) == 1731
    assert buddy["free_blocks_ge_huge"] == 4 + 753 + 132 == 889
    assert buddy["free_huge_bytes"] == 1731 * 2 * 1024 * 1024


def test_buddyinfo_sums_nodes_and_64k_pages():
    two_nodes = ("Node 0, zone   Normal      1      0      0      0      0      2\n"
                 "Node 1, zone   Normal      3      0      0      0      0      5\n")
    buddy = attestation.parse_buddyinfo(two_nodes, page_size=65536)
    assert buddy["zones"] == {"Normal": [4, 0, 0, 0, 0, 7]} and buddy["huge_order"] == 5
    assert buddy["free_huge_blocks"] == 7  # order 5 of 64 KiB pages = 2 MiB


def test_buddyinfo_bad_line_names_it():
    with pytest.raises(attestation.AttestationError, match="line 2"):
        attestation.parse_buddyinfo("Node 0, zone   Normal 1 2\ngarbage here\n")
    with pytest.raises(attestation.AttestationError, match="page_size"):
        attestation.parse_buddyinfo("", page_size=3000)


def test_memory_state_uses_meminfo_and_buddyinfo():
    state = attestation.memory_state(text("meminfo-h100-lent-host.txt"), text("buddyinfo-build-machine.txt"))
    assert (state["mem_free_kib"], state["mem_available_kib"], state["cached_kib"]) == (129637964, 131470684,
                                                                                        2019684)
    assert state["mem_total_kib"] == 131981020
    assert state["buddy_free_by_zone"]["Normal"][9:] == [119, 810]
    assert state["free_huge_blocks"] == (1 + 3 * 2) + (2 + 752 * 2) + (119 + 810 * 2)


# --------------------------------------------------------------------------- the attestation


def test_attestation_of_a_host_without_fwupd_falls_back_to_dmi():
    att = attestation.attestation(
        kernel="6.18.44-fc-v657-gpu", smi_q=text("nvidia-smi-q-h100-580.159.04.txt"),
        dmidecode=text("dmidecode-supermicro-sys-6019p-wt.txt"), meminfo=text("meminfo-h100-lent-host.txt"),
        buddyinfo=text("buddyinfo-h100-lent-host.txt"), image_digest="sha256:abc",
        applied_controls={"locked_clocks_mhz": [0, 1980]})
    assert att["format"] == 1 and att["kernel"] == "6.18.44-fc-v657-gpu"
    assert att["driver_version"] == "580.159.04" and att["gpus"][0]["vbios_version"] == "96.00.DA.00.0C"
    assert att["firmware_source"] == "dmi" and att["firmware"] == [] and att["bios_version"] == "2.0a"
    assert att["mem_free_kib"] == 129637964 and att["free_huge_blocks"] == 1731
    assert att["applied_controls"] == {"locked_clocks_mhz": [0, 1980]}
    assert att["missing"] == ["fwupd"]
    assert json.loads(json.dumps(att)) == att


def test_attestation_sysfs_first_then_dmidecode_and_fwupd_source():
    partial_sysfs = dict.fromkeys(attestation.DMI_FIELDS)
    partial_sysfs["bios_version"] = "5.36_0ACUM018"
    att = attestation.attestation(dmi=partial_sysfs, dmidecode=text("dmidecode-supermicro-sys-6019p-wt.txt"),
                                  fwupd_json=text("fwupdmgr-get-devices-fwupd-qubes-test.json"))
    assert att["bios_version"] == "5.36_0ACUM018" and att["sys_vendor"] == "Supermicro"
    assert att["firmware_source"] == "fwupd" and len(att["firmware"]) == 3
    assert att["missing"] == ["kernel", "nvidia-smi", "meminfo", "buddyinfo"]
    empty = attestation.attestation()
    assert empty["firmware_source"] is None and "dmi" in empty["missing"] and empty["gpus"] == []


def test_differences_name_the_firmware_and_vbios_that_differ():
    h100 = text("nvidia-smi-q-h100-580.159.04.txt")
    same = attestation.attestation(kernel="k", smi_q=h100,
                                   fwupd_json=text("fwupdmgr-get-devices-fwupd-qubes-test.json"))
    other_fw = json.loads(text("fwupdmgr-get-devices-fwupd-qubes-test.json"))
    other_fw["Devices"][0]["Version"] = "2.0.7"
    other = attestation.attestation(kernel="k", smi_q=h100.replace("96.00.DA.00.0C", "96.00.DA.00.0D"),
                                    fwupd_json=json.dumps(other_fw))
    assert attestation.differences({"spark1": same, "spark2": same}) == {}
    diff = attestation.differences({"spark1": same, "spark2": same, "spark3": other})
    assert diff == {"firmware.ColorHug2": {"spark1": "2.0.6", "spark2": "2.0.6", "spark3": "2.0.7"},
                    "gpu0.vbios_version": {"spark1": "96.00.DA.00.0C", "spark2": "96.00.DA.00.0C",
                                           "spark3": "96.00.DA.00.0D"}}


def test_blocking_differences_are_firmware_and_driver_only():
    diff = {"kernel": {"a": "6.17.0-1014-nvidia", "b": "6.17.0-1029-nvidia"},
            "driver_version": {"a": "580.142", "b": "580.173.02"},
            "bios_version": {"a": "GX10DGX.0104.2026.0326", "b": "GX10DGX.0105.2026.0505"},
            "gpu0.vbios_version": {"a": "9A.0B.1E.00.00", "b": "9A.0B.25.00.00"},
            "gpu0.product_name": {"a": "NVIDIA GB10", "b": None},
            "firmware.UEFI Device Firmware": {"a": "0x03000006", "b": "0x03000007"},
            "image_digest": {"a": "sha256:1", "b": "sha256:2"}}
    assert sorted(attestation.blocking_differences(diff)) == ["bios_version", "driver_version",
                                                              "firmware.UEFI Device Firmware",
                                                              "gpu0.vbios_version"]

