"""The host_differences filter (issue 24): which firmware/driver differences across hosts block a reproducibility
campaign. The attestations come from the real parser (attestation.attestation) over the real H100 ``nvidia-smi -q``
in tests/fixtures/attestation/, with one line changed per host where a host is to differ; the expected values are
read off that file."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.sparkfleet.bench.plugins.filter.host_differences import FilterModule, host_differences
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.health import attestation

FIX = Path(__file__).resolve().parents[3] / "fixtures" / "attestation"
SMI_Q = (FIX / "nvidia-smi-q-h100-580.159.04.txt").read_text(encoding="utf-8")
KERNEL = "6.18.44-fc-v657-gpu"  # the kernel the fixture was captured on (its README)
# The fixture's own lines, changed below for the host that differs.
VBIOS_LINE = "    VBIOS Version                                      : 96.00.DA.00.0C"
DRIVER_LINE = "Driver Version                                         : 580.159.04"


def smi_q(old: str | None = None, new: str | None = None) -> str:
    """The real output, with the line ``old`` replaced by ``new`` (and checked to be there)."""
    if old is None:
        return SMI_Q
    assert SMI_Q.count(old) == 1, f"the fixture no longer holds {old!r}"
    return SMI_Q.replace(old, new)


def host(text: str = SMI_Q, kernel: str = KERNEL) -> dict:
    return attestation.attestation(kernel=kernel, smi_q=text)


def test_the_filter_is_registered_under_its_name():
    assert FilterModule().filters() == {"host_differences": host_differences}


def test_identical_hosts_give_nothing_blocking_or_not():
    fleet = {"spark1": host(), "spark2": host(), "spark3": host()}
    assert host_differences(fleet) == {}
    assert host_differences(fleet, blocking=False) == {}


def test_a_vbios_difference_is_blocking_and_names_every_host():
    other = smi_q(VBIOS_LINE, VBIOS_LINE.replace("96.00.DA.00.0C", "96.00.DA.00.0D"))
    fleet = {"spark1": host(), "spark2": host(other), "spark3": host()}
    assert host_differences(fleet) == {"gpu0.vbios_version": {"spark1": "96.00.DA.00.0C", "spark2": "96.00.DA.00.0D",
                                                              "spark3": "96.00.DA.00.0C"}}


def test_a_driver_difference_is_blocking():
    other = smi_q(DRIVER_LINE, DRIVER_LINE.replace("580.159.04", "580.126.09"))
    got = host_differences({"spark1": host(), "spark2": host(other)})
    assert got == {"driver_version": {"spark1": "580.159.04", "spark2": "580.126.09"}}


def test_a_kernel_only_difference_is_not_blocking_but_shows_when_asked():
    fleet = {"spark1": host(), "spark2": host(kernel="6.11.0-1016-nvidia")}
    assert host_differences(fleet) == {}
    assert host_differences(fleet, blocking=False) == {"kernel": {"spark1": KERNEL, "spark2": "6.11.0-1016-nvidia"}}


def test_blocking_keeps_only_the_firmware_part_of_a_mixed_difference():
    other = smi_q(VBIOS_LINE, VBIOS_LINE.replace("96.00.DA.00.0C", "96.00.DA.00.0D"))
    fleet = {"spark1": host(), "spark2": host(other, kernel="6.11.0-1016-nvidia")}
    assert set(host_differences(fleet)) == {"gpu0.vbios_version"}
    assert set(host_differences(fleet, blocking=False)) == {"gpu0.vbios_version", "kernel"}


def test_hosts_without_an_attestation_are_left_out():
    other = smi_q(VBIOS_LINE, VBIOS_LINE.replace("96.00.DA.00.0C", "96.00.DA.00.0D"))
    fleet = {"spark1": host(), "spark2": host(other), "spark3": None, "spark4": {}}
    assert host_differences(fleet) == {"gpu0.vbios_version": {"spark1": "96.00.DA.00.0C",
                                                              "spark2": "96.00.DA.00.0D"}}
    # the one host that attested has nobody to differ from
    assert host_differences({"spark1": host(), "spark2": None}) == {}
    assert host_differences({}) == {}


def test_a_bad_input_is_refused_naming_it():
    with pytest.raises(AnsibleFilterError, match="expected a mapping of host to attestation, got list"):
        host_differences([host()])
    with pytest.raises(AnsibleFilterError, match="the attestation of spark2 is not a mapping"):
        host_differences({"spark1": host(), "spark2": "580.159.04"})
