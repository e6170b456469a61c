# Copyright: sparkfleet contributors
# Apache-2.0
"""Host attestation: parsers that turn the output of the commands a host answers (``nvidia-smi -q``,
``fwupdmgr get-devices --json``, ``/sys/class/dmi/id/*`` or ``dmidecode -t bios -t system``,
``/proc/buddyinfo``, ``/proc/meminfo``) into one flat, JSON-able dict per host (:func:`attestation`), plus the
throttle-counter deltas over a run (:func:`counter_deltas`) and the fields on which hosts differ
(:func:`differences`).

Pure: every function takes text (or a directory to read for DMI) and returns plain dicts/lists; running the
commands is the caller's business. A figure the host does not report is ``None``, never 0 (a GB10 answers
``N/A`` / ``[N/A]`` for the framebuffer and the power limit, and its memory is unified).

``nvidia-smi -q`` layouts handled (all real outputs under ``tests/fixtures/attestation/``):

* the clock-reason block is spelled ``Clocks Throttle Reasons`` up to driver 525 and ``Clocks Event Reasons``
  from 535 on; drivers of the 580 series add ``Clocks Event Reasons Counters`` (cumulative time per reason, in
  microseconds: ``SW Power Capping``, ``Sync Boost``, ``SW Thermal Slowdown``, ``HW Thermal Slowdown``,
  ``HW Power Braking``);
* power is ``Power Readings`` / ``Power Draw`` / ``Power Limit`` in older drivers, ``GPU Power Readings`` /
  ``Power Draw`` / ``Current Power Limit`` in 550, and ``Average Power Draw`` / ``Instantaneous Power Draw``
  in 580;
* a value with a trailing ``[...]`` annotation (``Driver Version : 610.57.04 [Deprecated; will be removed]``)
  keeps the value; ``KMD Version`` / ``CUDA UMD Version`` stand in when the older names are missing.

Stdlib only, Python 3.8+, relative imports: shipped to the hosts with the other module_utils.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from ..sensors.gpu import clean_value, parse_number
from ..sensors.meminfo import parse_meminfo_kib

#: Version of the dict :func:`attestation` returns.
ATTESTATION_FORMAT = 1

#: The DMI strings recorded, named as the files under /sys/class/dmi/id (the kernel's dmi-id.c).
DMI_FIELDS = ("bios_vendor", "bios_version", "bios_date", "board_name", "product_name", "sys_vendor")
DMI_ROOT = "/sys/class/dmi/id"

#: dmidecode section -> {dmidecode key: DMI_FIELDS name}.
_DMIDECODE_KEYS = {
    "BIOS Information": {"Vendor": "bios_vendor", "Version": "bios_version", "Release Date": "bios_date"},
    "System Information": {"Manufacturer": "sys_vendor", "Product Name": "product_name"},
    "Base Board Information": {"Product Name": "board_name"},
}

#: The two spellings of the clock-reason block (older first) and of its counters.
REASON_BLOCKS = ("Clocks Throttle Reasons", "Clocks Event Reasons")
COUNTER_BLOCKS = ("Clocks Throttle Reasons Counters", "Clocks Event Reasons Counters")

#: nvidia-smi -q reason labels whose snake_case differs from gpu.THROTTLE_REASONS' names.
_REASON_NAMES = {"idle": "gpu_idle"}

#: Values nvidia-smi -q prints for a figure it does not have, besides those gpu.clean_value knows.
_NOT_REPORTED = frozenset({"Not Found", "Unknown", "Requested functionality has been deprecated"})

_GPU_HEADER = re.compile(r"^GPU [0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-9A-Fa-f]+$")
_ANNOTATION = re.compile(r"\s*\[[^\]]*\]\s*$")
_DURATION_US = re.compile(r"^([0-9][0-9,]*)\s*(?:us|\u00b5s)\b")


class AttestationError(ValueError):
    """An input that cannot be read as what it claims to be; the message names the input."""


# --------------------------------------------------------------------------- helpers


def snake(label: str) -> str:
    """``"SW Power Capping"`` -> ``"sw_power_capping"``."""
    return re.sub(r"[^0-9a-z]+", "_", label.strip().lower()).strip("_")


def _value(raw: Optional[str]) -> Optional[str]:
    """A -q value without its trailing ``[...]`` note; ``None`` for the "not reported" markers."""
    value = clean_value(raw)
    if value is None:
        return None
    stripped = _ANNOTATION.sub("", value)
    if not stripped or stripped in _NOT_REPORTED:
        return None
    return stripped


def _number(raw: Optional[str]) -> Optional[float]:
    return parse_number(_value(raw))


def _get(tree: Mapping[str, Any], *path: str) -> Any:
    node: Any = tree
    for key in path:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node


def _first(tree: Mapping[str, Any], paths: Iterable[Tuple[str, ...]]) -> Any:
    for path in paths:
        found = _get(tree, *path)
        if found is not None:
            return found
    return None


# --------------------------------------------------------------------------- nvidia-smi -q


def parse_smi_q_tree(text: str) -> Dict[str, Any]:
    """``nvidia-smi -q`` text -> nested dict: the top-level keys (``Driver Version`` ...) and one dict per
    ``GPU <bus id>`` block under ``"gpus"`` (in order, each with ``"bus_id"``). A line ``Key : value`` is a
    leaf (its value as printed, stripped); a line without a colon opens a section that holds the more
    indented lines after it. Leaves indented under a leaf (``HW Slowdown`` -> ``HW Thermal Slowdown``) go to
    the enclosing section. A repeated key (the per-process entries) keeps the last value."""
    root: Dict[str, Any] = {"gpus": []}
    stack: List[Tuple[int, Dict[str, Any]]] = [(-1, root)]
    for raw in text.splitlines():
        line = raw.rstrip()
        body = line.strip()
        if not body or body.startswith("==="):
            continue
        indent = len(line) - len(line.lstrip(" "))
        while len(stack) > 1 and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        if _GPU_HEADER.match(body):
            gpu: Dict[str, Any] = {"bus_id": body[4:]}
            root["gpus"].append(gpu)
            del stack[1:]
            stack.append((indent, gpu))
        elif ":" in body:
            key, _, value = body.partition(":")
            parent[key.strip()] = value.strip()
        else:
            section: Dict[str, Any] = {}
            parent[body] = section
            stack.append((indent, section))
    return root


def _reason_block(gpu: Mapping[str, Any], names: Iterable[str]) -> Tuple[Optional[str], Optional[Dict[str, Any]]]:
    for name in names:
        block = gpu.get(name)
        if isinstance(block, dict):
            return name, block
        block = _get(gpu, "Performance", name)  # some layouts nest it under a Performance section
        if isinstance(block, dict):
            return name, block
    return None, None


def parse_duration_us(raw: Optional[str]) -> Optional[int]:
    """``"21051280 us"`` / ``"4,007,672,629 µs (cumulative)"`` -> microseconds; ``None`` when not a
    duration."""
    value = _value(raw)
    match = _DURATION_US.match(value or "")
    return int(match.group(1).replace(",", "")) if match else None


def _gpu_fields(gpu: Mapping[str, Any]) -> Dict[str, Any]:
    reasons_label, reasons = _reason_block(gpu, REASON_BLOCKS)
    active: Optional[List[str]] = None
    if reasons is not None:
        active = []
        for label, state in reasons.items():
            if isinstance(state, str) and state.strip() == "Active":
                name = snake(label)
                active.append(_REASON_NAMES.get(name, name))
    _, counters_block = _reason_block(gpu, COUNTER_BLOCKS)
    counters: Dict[str, int] = {}
    for label, raw in (counters_block or {}).items():
        duration = parse_duration_us(raw) if isinstance(raw, str) else None
        if duration is not None:
            counters[snake(label)] = duration

    power = ("GPU Power Readings", "Power Readings")
    draw = _number(_first(gpu, [(p, k) for p in power for k in ("Average Power Draw", "Power Draw")]))
    instant = _number(_first(gpu, [(p, "Instantaneous Power Draw") for p in power]))
    limit = _number(_first(gpu, [(p, k) for p in power
                                 for k in ("Current Power Limit", "Power Limit", "Enforced Power Limit")]))
    memory_total = _number(_get(gpu, "FB Memory Usage", "Total"))
    addressing = _value(gpu.get("Addressing Mode"))
    if memory_total is None and addressing == "ATS":
        unified: Optional[bool] = True
    elif memory_total is not None:
        unified = False
    else:
        unified = None
    return {
        "bus_id": gpu.get("bus_id"),
        "product_name": _value(gpu.get("Product Name")),
        "uuid": _value(gpu.get("GPU UUID")),
        "vbios_version": _value(gpu.get("VBIOS Version")),
        "gsp_firmware_version": _value(gpu.get("GSP Firmware Version")),
        "addressing_mode": addressing,
        "persistence_mode": _value(gpu.get("Persistence Mode")),
        "performance_state": _value(gpu.get("Performance State")),
        "sm_clock_mhz": _number(_get(gpu, "Clocks", "SM")),
        "graphics_clock_mhz": _number(_get(gpu, "Clocks", "Graphics")),
        "memory_clock_mhz": _number(_get(gpu, "Clocks", "Memory")),
        "max_sm_clock_mhz": _number(_get(gpu, "Max Clocks", "SM")),
        "max_graphics_clock_mhz": _number(_get(gpu, "Max Clocks", "Graphics")),
        "max_memory_clock_mhz": _number(_get(gpu, "Max Clocks", "Memory")),
        "applications_graphics_clock_mhz": _number(_get(gpu, "Applications Clocks", "Graphics")),
        "power_draw_w": draw if draw is not None else instant,
        "power_draw_instant_w": instant,
        "power_limit_w": limit,
        "temperature_c": _number(_get(gpu, "Temperature", "GPU Current Temp")),
        "memory_total_mib": memory_total,
        "unified_memory": unified,
        "clock_reasons_block": reasons_label,
        "clock_reasons_active": active,
        "clock_event_counters_us": counters,
    }


def parse_nvidia_smi_q(text: str) -> Dict[str, Any]:
    """``nvidia-smi -q`` (any ``-d`` subset) -> ``{"driver_version", "cuda_version", "gpus": [...]}``; each
    GPU a flat dict (see :func:`_gpu_fields`: clocks in MHz, power in W, ``clock_reasons_active`` names as in
    ``gpu.THROTTLE_REASONS``, ``clock_event_counters_us`` cumulative microseconds per reason). Raises
    :class:`AttestationError` when the text has no ``GPU <bus id>`` block."""
    tree = parse_smi_q_tree(text)
    if not tree["gpus"]:
        raise AttestationError("nvidia-smi -q: no 'GPU <bus id>' block in the output")
    return {
        "driver_version": _value(tree.get("Driver Version")) or _value(tree.get("KMD Version")),
        "cuda_version": _value(tree.get("CUDA Version")) or _value(tree.get("CUDA UMD Version")),
        "gpus": [_gpu_fields(gpu) for gpu in tree["gpus"]],
    }


def parse_event_counters(text: str) -> Dict[str, Dict[str, int]]:
    """``nvidia-smi -q -d PERFORMANCE`` -> ``{bus_id: {reason: cumulative_us}}``; ``{}`` for a GPU whose
    driver prints no counters (before the 580 series)."""
    return {gpu["bus_id"]: gpu["clock_event_counters_us"] for gpu in parse_nvidia_smi_q(text)["gpus"]}


def counter_deltas(before: Mapping[str, Optional[int]], after: Mapping[str, Optional[int]]) -> Dict[str, Any]:
    """Per-reason growth of cumulative throttle durations between two snapshots of one GPU (any unit, as
    long as both snapshots share it: nvidia-smi's counters are in us, NVML's violation times in ns).

    Returns ``{"deltas": {reason: after - before}, "reset": [...], "missing": [...]}``: a reason whose
    counter went down (driver reload, reboot) is listed in ``reset`` and has no delta; one present in only
    one snapshot, or ``None`` in either, is listed in ``missing``."""
    deltas: Dict[str, int] = {}
    reset: List[str] = []
    missing: List[str] = []
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name), after.get(name)
        if old is None or new is None:
            missing.append(name)
        elif new < old:
            reset.append(name)
        else:
            deltas[name] = new - old
    return {"deltas": deltas, "reset": reset, "missing": missing}


# --------------------------------------------------------------------------- firmware


def parse_fwupd_devices(text: str) -> List[Dict[str, Any]]:
    """``fwupdmgr get-devices --json`` -> ``[{"name", "version", "vendor", "plugin", "guids"}]``, in the
    order fwupd lists them; releases, flags, checksums and the rest are left out. Raises
    :class:`AttestationError` when the text is not JSON with a ``Devices`` list."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise AttestationError("fwupdmgr get-devices --json: not JSON (%s)" % exc) from None
    devices = data.get("Devices") if isinstance(data, dict) else None
    if not isinstance(devices, list):
        raise AttestationError("fwupdmgr get-devices --json: no 'Devices' list")
    out: List[Dict[str, Any]] = []
    for device in devices:
        if not isinstance(device, dict):
            continue
        guids = device.get("Guid") or []
        if isinstance(guids, str):
            guids = [guids]
        out.append({
            "name": device.get("Name"),
            "version": device.get("Version"),
            "vendor": device.get("Vendor"),
            "plugin": device.get("Plugin"),
            "guids": [str(g).strip() for g in guids],
        })
    return out


def read_dmi_id(root: str = DMI_ROOT) -> Dict[str, Optional[str]]:
    """The :data:`DMI_FIELDS` files under ``root`` (one string each, stripped); a file that is missing or
    unreadable reads as ``None``."""
    values: Dict[str, Optional[str]] = {}
    for name in DMI_FIELDS:
        try:
            with open(os.path.join(root, name), encoding="utf-8", errors="replace") as fh:
                values[name] = fh.read().strip() or None
        except OSError:
            values[name] = None
    return values


def parse_dmidecode(text: str) -> Dict[str, Optional[str]]:
    """``dmidecode -t bios -t system`` (or a full ``dmidecode``) -> the :data:`DMI_FIELDS`, from the first
    BIOS, System and Base Board structures; a field not printed is ``None``."""
    values: Dict[str, Optional[str]] = {name: None for name in DMI_FIELDS}
    seen: set = set()
    section: Optional[str] = None
    for line in text.splitlines():
        if not line.strip():
            section = None
            continue
        if not line[0].isspace():
            section = line.strip() if line.strip() in _DMIDECODE_KEYS and line.strip() not in seen else None
            if section:
                seen.add(section)
            continue
        if section is None:
            continue
        key, sep, value = line.strip().partition(": ")
        field = _DMIDECODE_KEYS[section].get(key)
        if sep and field and values[field] is None:
            values[field] = value.strip() or None
    return values


# --------------------------------------------------------------------------- memory


def huge_order(page_size: int = 4096, huge_bytes: int = 2 << 20) -> int:
    """The buddy order whose blocks are ``huge_bytes`` (2 MiB) long: 9 with 4 KiB pages, 5 with 64 KiB."""
    if page_size <= 0 or huge_bytes < page_size or huge_bytes % page_size:
        raise AttestationError("page_size %r does not divide huge block size %r" % (page_size, huge_bytes))
    blocks = huge_bytes // page_size
    if blocks & (blocks - 1):
        raise AttestationError("huge block size %r is not a power-of-two number of pages" % huge_bytes)
    return blocks.bit_length() - 1


def parse_buddyinfo(text: str, page_size: int = 4096) -> Dict[str, Any]:
    """``/proc/buddyinfo`` -> free blocks per order summed over nodes for each zone type, and the free
    memory available in contiguous 2 MiB pieces.

    ``free_huge_blocks`` counts 2 MiB units: a free block of order ``o >= huge_order`` holds
    ``2 ** (o - huge_order)`` of them (an order-10 block on 4 KiB pages is two 2 MiB blocks).
    ``free_blocks_ge_huge`` counts the blocks themselves. Raises :class:`AttestationError` on a line that is
    not ``Node N, zone NAME c0 c1 ...``."""
    order = huge_order(page_size)
    zones: Dict[str, List[int]] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        match = re.match(r"^Node\s+(\d+),\s*zone\s+(\S+)\s+([\d\s]+)$", line.strip())
        if not match:
            raise AttestationError("/proc/buddyinfo line %d: not 'Node N, zone NAME counts...': %r"
                                   % (number, line.strip()[:60]))
        counts = [int(c) for c in match.group(3).split()]
        total = zones.setdefault(match.group(2), [0] * len(counts))
        if len(total) < len(counts):
            total.extend([0] * (len(counts) - len(total)))
        for i, count in enumerate(counts):
            total[i] += count
    huge_units = sum(count << (o - order) for counts in zones.values()
                     for o, count in enumerate(counts) if o >= order)
    huge_blocks = sum(count for counts in zones.values() for o, count in enumerate(counts) if o >= order)
    free_pages = sum(count << o for counts in zones.values() for o, count in enumerate(counts))
    return {
        "page_size": page_size,
        "huge_order": order,
        "zones": zones,
        "free_bytes": free_pages * page_size,
        "free_huge_blocks": huge_units,
        "free_blocks_ge_huge": huge_blocks,
        "free_huge_bytes": huge_units * (page_size << order),
    }


def memory_state(meminfo_text: Optional[str] = None, buddyinfo_text: Optional[str] = None,
                 page_size: int = 4096) -> Dict[str, Any]:
    """MemFree / MemAvailable / Cached (KiB, through meminfo.parse_meminfo_kib) and the buddyinfo summary, as
    flat keys; what was not given is ``None``."""
    mem = parse_meminfo_kib(meminfo_text, ("MemTotal", "MemFree", "MemAvailable", "Cached")) \
        if meminfo_text is not None else {}
    buddy = parse_buddyinfo(buddyinfo_text, page_size) if buddyinfo_text is not None else None
    return {
        "mem_total_kib": mem.get("MemTotal"),
        "mem_free_kib": mem.get("MemFree"),
        "mem_available_kib": mem.get("MemAvailable"),
        "cached_kib": mem.get("Cached"),
        "buddy_page_size": page_size if buddy else None,
        "buddy_free_by_zone": buddy["zones"] if buddy else None,
        "free_huge_blocks": buddy["free_huge_blocks"] if buddy else None,
        "free_huge_bytes": buddy["free_huge_bytes"] if buddy else None,
    }


# --------------------------------------------------------------------------- the attestation


def attestation(*, kernel: Optional[str] = None, smi_q: Optional[str] = None, fwupd_json: Optional[str] = None,
                dmi: Optional[Mapping[str, Optional[str]]] = None, dmidecode: Optional[str] = None,
                meminfo: Optional[str] = None, buddyinfo: Optional[str] = None, page_size: int = 4096,
                image_digest: Optional[str] = None,
                applied_controls: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """One host's attestation from whatever the caller could collect (each input optional).

    ``dmi`` is :func:`read_dmi_id`'s dict; ``dmidecode`` is used for a DMI field the sysfs read left
    ``None``. ``firmware`` is fwupd's device list when fwupd answered, else ``[]``, with
    ``firmware_source`` "fwupd", "dmi" (sysfs or dmidecode gave a BIOS version) or ``None``.
    ``applied_controls`` is recorded as given (the clocks/power sparkfleet applied: nvidia-smi cannot read
    an ``-lgc`` lock back). ``missing`` names the inputs that were not given."""
    att: Dict[str, Any] = {"format": ATTESTATION_FORMAT, "kernel": kernel, "image_digest": image_digest,
                           "applied_controls": dict(applied_controls) if applied_controls else None}
    missing = [name for name, value in (("kernel", kernel), ("nvidia-smi", smi_q), ("meminfo", meminfo),
                                        ("buddyinfo", buddyinfo)) if value is None]
    smi = parse_nvidia_smi_q(smi_q) if smi_q is not None else {"driver_version": None, "cuda_version": None,
                                                               "gpus": []}
    att.update(smi)

    dmi_values: Dict[str, Optional[str]] = {name: None for name in DMI_FIELDS}
    if dmi:
        dmi_values.update({k: dmi.get(k) for k in DMI_FIELDS})
    if dmidecode is not None:
        for key, value in parse_dmidecode(dmidecode).items():
            if dmi_values[key] is None:
                dmi_values[key] = value
    att.update(dmi_values)
    if fwupd_json is not None:
        att["firmware"] = parse_fwupd_devices(fwupd_json)
        att["firmware_source"] = "fwupd"
    else:
        att["firmware"] = []
        att["firmware_source"] = "dmi" if dmi_values["bios_version"] else None
        missing.append("fwupd")
    if att["firmware_source"] is None:
        missing.append("dmi")
    att.update(memory_state(meminfo, buddyinfo, page_size))
    att["missing"] = missing
    return att


def identity(att: Mapping[str, Any]) -> Dict[str, Any]:
    """The fields of an attestation that should match across the hosts of one fleet (software and
    firmware, not the momentary state): kernel, driver, CUDA, image, BIOS, each GPU's name and VBIOS, each
    fwupd device's version. Flat keys, e.g. ``"gpu0.vbios_version"``, ``"firmware.UEFI Device Firmware"``."""
    out: Dict[str, Any] = {key: att.get(key) for key in ("kernel", "driver_version", "cuda_version",
                                                          "image_digest", "bios_vendor", "bios_version",
                                                          "bios_date", "product_name")}
    for i, gpu in enumerate(att.get("gpus") or []):
        out["gpu%d.product_name" % i] = gpu.get("product_name")
        out["gpu%d.vbios_version" % i] = gpu.get("vbios_version")
    for device in att.get("firmware") or []:
        out["firmware.%s" % device.get("name")] = device.get("version")
    return out


#: Texts a host records for a fact it could not read (lower case): "N/A", "Unknown", "Not Supported", ...
_UNREAD_TEXTS = frozenset({"", "n/a", "na", "none", "null", "unknown", "not found", "not available", "unavailable",
                           "not supported", "not specified", "err!", "to be filled by o.e.m."})


def is_unread(value: Any) -> bool:
    """Whether ``value`` is what a host records for a fact it could not read, never a value to compare: ``None``,
    NaN, an empty or "not reported" text (:data:`_UNREAD_TEXTS`), a bracketed marker (``[N/A]``, ``[Unknown
    Error]``), an error text (``ERROR: ...``), an empty list or mapping."""
    if value is None:
        return True
    if isinstance(value, float):
        return value != value
    if isinstance(value, str):
        text = value.strip()
        low = text.lower()
        return (low in _UNREAD_TEXTS or (text.startswith("[") and text.endswith("]") and '"' not in text)
                or low.startswith(("error", "err:", "failed")))
    if isinstance(value, (list, dict)):
        return not value
    return False


def differences(attestations: Mapping[str, Mapping[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """``{host: attestation}`` -> ``{field: {host: value}}`` for each :func:`identity` field read on two or more
    hosts with values that are not all the same; only the hosts that read it are listed. A field a host could
    not read (absent, null, an error marker: :func:`is_unread`) is never a difference: :func:`unread` names it.
    Empty when the fleet agrees."""
    per_host = {host: identity(att) for host, att in attestations.items()}
    fields = sorted({field for ident in per_host.values() for field in ident})
    out: Dict[str, Dict[str, Any]] = {}
    for field in fields:
        read = {host: ident.get(field) for host, ident in per_host.items() if not is_unread(ident.get(field))}
        if len({json.dumps(v, sort_keys=True) for v in read.values()}) > 1:
            out[field] = read
    return out


def unread(attestations: Mapping[str, Mapping[str, Any]]) -> Dict[str, List[str]]:
    """``{host: attestation}`` -> ``{field: [hosts]}``: each :func:`identity` field that some host read and the
    listed hosts could not (fwupd not installed, nvidia-smi failing, a DMI file missing). Not compared: what a
    host could not read is unknown, not different."""
    per_host = {host: identity(att) for host, att in attestations.items()}
    fields = sorted({field for ident in per_host.values() for field in ident})
    out: Dict[str, List[str]] = {}
    for field in fields:
        missing = sorted(host for host, ident in per_host.items() if is_unread(ident.get(field)))
        if missing and len(missing) < len(per_host):
            out[field] = missing
    return out


#: :func:`identity` fields whose mismatch across hosts blocks a reproducibility campaign (firmware and
#: driver: worth ~2x on identical GB10 hardware); the others (kernel, CUDA, image, DMI product) are reported.
BLOCKING_FIELDS = ("driver_version", "bios_version", "bios_date")
BLOCKING_SUFFIXES = (".vbios_version",)
BLOCKING_PREFIXES = ("firmware.",)


def blocking_differences(diff: Mapping[str, Mapping[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """The part of :func:`differences` that is a firmware or driver mismatch."""
    return {field: dict(values) for field, values in diff.items()
            if field in BLOCKING_FIELDS or field.endswith(BLOCKING_SUFFIXES) or field.startswith(BLOCKING_PREFIXES)}
