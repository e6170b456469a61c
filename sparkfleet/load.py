"""Load every ``record.json`` under a results directory into one tidy DataFrame (a row per run).

Metrics become columns with their DESIGN names (``output_tok_s``, ``peak_memory_gib``, ...); nested
objects (workload parameters, cooldown, telemetry summary, versions, metric sources, raw samples as JSON
text) are flattened with a prefix; the memory section and the memory-state factor levels become
``mem_*``, ``cuda_*``, ``aa_group``/``aa_member`` and ``factor_*`` columns (MEMORY_COLUMNS). A record of an
older format version is read through its migrations (``sparkfleet_host.contract.record.upgrade``, docs/RECORD.md);
one newer than this code, not JSON, or breaking the run-record contract is reported by path and skipped: one
bad file never stops a report, and never disappears without a word. A serving run's points (its ``serving``
section) also become rows of a second table, one per run x point (sparkfleet.serving, ``LoadResult.serving``).
The nodes of a multi-node run (issue 36) become a third, one row per run x node (``LoadResult.nodes``): rank 0 from
its record, each worker from the node file it wrote in its own tree (contract/node_file.py), joined by run id; a
worker whose readiness probe found it suspect makes the run's ``workers_readiness_state`` suspect, and a node file
that cannot be read is named in ``LoadResult.node_problems``.

The run's readiness is read here once: ``readiness_state`` and ``readiness_reasons`` (stats.READINESS_STATE) from
the record's ``readiness`` section, "suspect" where a worker's was too (its reasons after rank 0's), on the runs and
on their serving points (a column present where some record carries the section). stats.kept_apart reads it: a
suspect run enters no statistic.
"""

from __future__ import annotations

import errno
import json
import multiprocessing as mp
import os
import stat
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import node_file
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import record as contract
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import RECORD_NAME
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.unpack import STAGING_PREFIXES
from sparkfleet import serving as serving_points
from sparkfleet.accounting import Accounting, account
from sparkfleet.stats import READINESS_REASONS, READINESS_STATE, SUSPECT

#: Directories under a results tree that never hold run records (the report writes its own files there).
_SKIP_DIRS = frozenset({"report", ".git", "__pycache__"})

IDENTITY_COLUMNS = ("run_id", "campaign", "host", "model", "environment", "workload", "iteration")
#: Nested objects flattened to ``<prefix><key>`` columns (scalars only; lists/objects are kept as JSON text).
_NESTED_PREFIXES = {
    "workload_params": "workload_",
    "cooldown": "cooldown_",
    "telemetry": "telemetry_",
    "versions": "version_",
    "metric_sources": "source_",
    "samples": "samples_",
}
METRIC_COLUMNS = tuple(contract.METRICS)
_MEMINFO = ("mem_total_gib", "mem_free_gib", "mem_available_gib", "buffers_gib", "cached_gib", "shmem_gib",
            "used_gib", "not_free_gib")
#: The record's ``memory`` section (docs/MEMORY.md) as flat columns: (column, path into the section).
MEMORY_COLUMNS = (
    *((f"mem_{when}_{name.removeprefix('mem_')}", (when, "meminfo", name)) for when in ("start", "peak")
      for name in _MEMINFO),
    ("mem_peak_t_s", ("peak", "t_s")),
    *((f"mem_peak_cgroup_{name}", ("peak", "cgroup", name)) for name in (
        "current_gib", "peak_gib", "limit_gib", "file_gib", "anon_gib", "shmem_gib")),
    ("mem_cgroup_limit_gib", ("cgroup", "limit_gib")),
    ("mem_cgroup_peak_gib", ("cgroup", "peak_gib")),
    ("mem_cgroup_current_max_gib", ("cgroup", "current_gib_max")),
    ("mem_cgroup_first_current_gib", ("cgroup", "first", "current_gib")),
    ("mem_max_cached_gib", ("max_cached_gib",)),
    ("mem_min_available_gib", ("min_mem_available_gib",)),
    ("mem_samples", ("samples",)),
    ("mem_drop_requested", ("drop_caches", "requested")),
    ("mem_drop_done", ("drop_caches", "done")),
    ("mem_drop_seconds", ("drop_caches", "seconds")),
    ("mem_drop_cached_before_gib", ("drop_caches", "cached_before_gib")),
    ("mem_drop_cached_after_gib", ("drop_caches", "cached_after_gib")),
    ("mem_container_flags", ("container_memory_flags",)),
    ("cuda_source", ("start", "cuda", "source")),
    ("cuda_free_start_gib", ("start", "cuda", "free_gib")),
    ("cuda_free_peak_gib", ("peak", "cuda_free_gib")),
    ("cuda_free_min_gib", ("min_cuda_free_gib",)),
    ("env_variant", ("environment", "variant")),
    ("aa_group", ("environment", "aa_group")),
    ("aa_member", ("environment", "aa_member")),
)


#: Memory columns holding numbers (float64 columns, NaN where a record has none).
_MEMORY_NUMERIC = tuple(name for name, _ in MEMORY_COLUMNS
                        if name.endswith(("_gib", "_t_s", "_seconds", "_samples", "_fraction")))


def dig(data: Any, path: tuple[str | int, ...]) -> Any:
    """The value at ``path`` (keys, list indices) inside nested JSON; None where the path leads nowhere."""
    for key in path:
        if isinstance(data, dict):
            data = data.get(key)
        elif isinstance(data, list) and isinstance(key, int) and -len(data) <= key < len(data):
            data = data[key]
        else:
            return None
    return data


def memory_columns(data: dict[str, Any]) -> dict[str, Any] | None:
    """A record's memory section (MEMORY_COLUMNS) and factor levels (``factor_<name>`` for each name in
    ``workload_params.factors``, the level being the workload's own parameter of that name) as flat columns;
    None for a record with neither."""
    memory, params = data.get("memory"), data.get("workload_params")
    factors = params.get("factors") if isinstance(params, dict) else None
    if not isinstance(memory, dict) and not isinstance(factors, (dict, list)):
        return None
    out: dict[str, Any] = {}
    if isinstance(memory, dict):
        out = {name: dig(memory, path) for name, path in MEMORY_COLUMNS}
        flags = out["mem_container_flags"]
        out["mem_container_flags"] = " ".join(map(str, flags)) if isinstance(flags, list) else flags
    if isinstance(factors, (dict, list)):  # names; older records: names with their levels
        levels = factors if isinstance(factors, dict) else {}
        out |= {FACTOR_PREFIX + name: params.get(name, levels.get(name)) for name in factors if isinstance(name, str)}
    return out


#: A factor's level per run: ``factor_<name>`` (memory_columns). The report reads factors and the KV fraction only
#: through the accessors below.
FACTOR_PREFIX = "factor_"
#: TensorRT-LLM's default ``free_gpu_memory_fraction``: the KV fraction assumed where a run's engine output
#: states none (``sparkfleet report --kv-fraction`` assumes another).
DEFAULT_KV_FRACTION = 0.9


def numbers(frame: pd.DataFrame, column: str) -> pd.Series:
    """A column as float64 (NaN where a value is not a number); all NaN where the frame lacks it."""
    if column not in frame:
        return pd.Series(np.nan, index=frame.index, dtype="float64")
    return pd.to_numeric(frame[column], errors="coerce").astype("float64")


def kv_fraction(runs: pd.DataFrame, assumed: float = DEFAULT_KV_FRACTION) -> tuple[pd.Series, pd.Series]:
    """Each run's KV-cache fraction, and whether its record states it: the engine's own statement (the metric)
    where its output has one, else ``assumed``."""
    stated = numbers(runs, "kv_fraction")
    return stated.fillna(assumed), stated.notna()


def factors(runs: pd.DataFrame) -> list[tuple[str, pd.Series]]:
    """The campaign's factors (``workload_params.factors``), each with its level per run (NaN where a run has
    none): those with numbers for levels first, then the true/false ones (is_flag)."""
    found = [(c.removeprefix(FACTOR_PREFIX), runs[c]) for c in sorted(runs) if c.startswith(FACTOR_PREFIX)]
    return sorted(found, key=lambda item: is_flag(item[1]))


def is_flag(levels: pd.Series) -> bool:
    return all(isinstance(v, (bool, np.bool_)) for v in levels.dropna().unique())


@dataclass(frozen=True)
class LoadProblem:
    path: Path
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


@dataclass
class LoadResult:
    runs: pd.DataFrame
    problems: list[LoadProblem] = field(default_factory=list)
    root: Path | None = None
    #: Every planned run accounted for: the runs without a usable record, named (sparkfleet.accounting).
    accounting: Accounting = field(default_factory=Accounting)
    #: One row per serving run x point (sparkfleet.serving.POINT_COLUMNS); empty without serving runs.
    serving: pd.DataFrame = field(default_factory=lambda: serving_points.points_frame([]))
    #: One row per multi-node run x node (NODE_COLUMNS); empty without multi-node runs or node files.
    nodes: pd.DataFrame = field(default_factory=lambda: nodes_frame([]))
    #: Node files (cluster_nodes/<run_id>/node.json) that could not be read or joined, and why.
    node_problems: list[LoadProblem] = field(default_factory=list)


def find_record_files(root: Path, plans: list[str] | None = None, staging: list[str] | None = None,
                      nodes: list[str] | None = None) -> list[str]:
    """Candidate record.json paths under ``root`` in a stable (sorted) order.

    ``plans`` (when given) receives the campaign.json paths seen on the way, ``staging`` the unpack staging
    directories (``plugin_utils.unpack.STAGING_PREFIXES``), which are never read: what lies there is a copy
    being moved into place, or left by an interrupted unpack, never a result. ``nodes`` receives the candidate
    node files of multi-node runs (``<host>/cluster_nodes/<run_id>/node.json``, named like records in ``runs``).

    The results tree puts records at ``<host>/runs/<run_id>/record.json``: inside a ``runs`` directory we
    name ``<entry>/record.json`` without listing or stat-ing each run directory (100k fewer system calls);
    a run directory without a record (a run still going, or one that died first) is found missing when
    read, and named by the accounting (sparkfleet.accounting). Anywhere else the walk is generic.
    """
    found: list[str] = []
    stack = [str(root)]
    while stack:
        directory = stack.pop()
        try:
            with os.scandir(directory) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            continue
        subdirs = [e.path for e in entries if e.name not in _SKIP_DIRS and not e.name.startswith(STAGING_PREFIXES)
                   and e.is_dir(follow_symlinks=False)]
        found += [e.path for e in entries if e.name == RECORD_NAME and e.is_file()]
        if staging is not None:
            staging += [e.path for e in entries if e.name.startswith(STAGING_PREFIXES)]
        if os.path.basename(directory) == "runs":
            found += [os.path.join(d, RECORD_NAME) for d in subdirs]
            continue  # deeper layouts inside a run directory are not part of the contract
        if os.path.basename(directory) == node_file.NODES_DIR:
            if nodes is not None:
                nodes += [os.path.join(d, node_file.NODE_NAME) for d in subdirs]
            continue  # a node directory holds no record
        if plans is not None:
            plans += [e.path for e in entries if e.name == "campaign.json" and e.is_file()]
        stack.extend(reversed(subdirs))
    return found


def read_record(path: str) -> dict[str, Any] | LoadProblem | None:
    """The record as every reader takes it (record.checked_record: migrated, screened, validated), the problem
    that makes it unusable, or None when there is no file."""
    try:
        raw = _read_bytes(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return LoadProblem(Path(path), f"not readable JSON: {exc}")
    return record_from_bytes(raw, path)


def usable_record(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """:func:`read_record`'s record; None where there is none or it is unusable (the loader names those)."""
    data = read_record(os.fspath(path))
    return data if isinstance(data, dict) else None


def record_from_bytes(raw: bytes, path: str | os.PathLike[str]) -> dict[str, Any] | LoadProblem:
    """:func:`read_record` of a file already read (``path``: where it came from, for the problem's words)."""
    try:
        return contract.checked_record(json.loads(raw))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return LoadProblem(Path(path), f"not readable JSON: {exc}")
    except contract.RecordError as exc:
        return LoadProblem(Path(path), str(exc))


def _read_bytes(path: str) -> bytes:
    """The whole file in three system calls (open, read, read to the end), where a buffered file object
    takes about twice as many, plus its own overhead: 100k records make that a second of CPU time."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO named record.json must not hang the report
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        if st.st_size > MAX_RECORD_BYTES:
            raise OSError(errno.EFBIG, f"{st.st_size} bytes, more than a record's {MAX_RECORD_BYTES}", path)
        chunks = []
        while chunk := os.read(fd, _READ_SIZE):
            chunks.append(chunk)
    except OSError as exc:  # e.g. a directory named record.json: name it, as open() would
        if exc.filename is None:
            exc.filename = path
        raise
    finally:
        os.close(fd)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


_READ_SIZE = 1 << 16
#: A record is a few KiB (raw samples included); anything this large is not one.
MAX_RECORD_BYTES = 16 * 1024 * 1024


def _scalar(value: Any) -> Any:
    return value if not isinstance(value, (dict, list)) else json.dumps(value)


_ROW_FIELDS = IDENTITY_COLUMNS + contract.SCALAR_FIELDS  # the contract's scalar fields, in its order
#: The key `_Columns` files memory_columns under (not a record field: its columns have no prefix).
_MEMORY_KEY = " memory"
#: The metrics rejected as outside their physical range (record.METRIC_RANGES) and why, "; "-joined: a column
#: present only when some run has one (the report's warnings name them).
REJECTED_COLUMN = "rejected_metrics"
_REJECTED_KEY = " rejected"
#: The record's provenance verdict as columns (the model cards it compared stay in record.json).
PROVENANCE_COLUMNS = ("provenance_status", "provenance_reason")
_PROVENANCE_KEY = " provenance"
#: How the engine said it measured (the record's extra.engine, written since 2026-11-27): column <- fact.
ENGINE_FACT_COLUMNS = {"engine_decoder": "decoder", "engine_decode_path": "decode_path",
                       "engine_launch_bound": "launch_bound", "engine_compile_tuning": "compile_tuning",
                       "engine_compile_tuned_now": "compile_tuned_now"}
_ENGINE_FACTS_KEY = " engine facts"
#: The run's own readiness probe (the record's readiness section) as columns; with_workers_readiness folds its
#: workers' in.
READINESS_COLUMNS = (READINESS_STATE, READINESS_REASONS)
_READINESS_KEY = " readiness"
#: Below this many records one process is quicker than starting workers.
PARALLEL_MIN_RECORDS = 4000


def engine_fact_columns(data: dict[str, Any]) -> dict[str, Any] | None:
    """The record's extra.engine facts the report reads, as columns; None for a record without them."""
    extra = data.get("extra")
    facts = extra.get("engine") if isinstance(extra, dict) else None
    if not isinstance(facts, dict):
        return None
    return {column: _scalar(facts.get(fact)) for column, fact in ENGINE_FACT_COLUMNS.items()}


class _Columns:
    """The runs of one chunk gathered column by column: a row per run (identity, scalar fields, metrics under
    their own names, nested objects prefixed), without building (and then taking apart) a dict per run.

    Fixed fields and metrics go into one flat list each, a run's values after the previous run's, so a
    column is a strided slice; each nested object is filed under its key set (one producer writes the
    same keys every time) the same way, and only a column that some runs lack is filled in place by place.
    """

    def __init__(self) -> None:
        self.fixed: list[Any] = []
        self.metrics: list[Any] = []
        self.dirs: list[str] = []
        self.points: list[dict[str, Any]] = []  # serving runs' points, one row each (sparkfleet.serving)
        self.nodes: list[dict[str, Any]] = []  # multi-node runs' nodes as the record names them (NODE_COLUMNS)
        #: (nested field, its keys) -> (row positions, the rows' values one after another)
        self.nested: dict[tuple[str, tuple[str, ...]], tuple[list[int], list[Any]]] = {}

    def add(self, data: dict[str, Any], record_dir: str) -> None:
        get = data.get
        row = len(self.dirs)
        self.fixed += map(get, _ROW_FIELDS)
        self.metrics += map(data["metrics"].get, METRIC_COLUMNS)
        for key in _NESTED_PREFIXES:
            nested = get(key)
            if nested:
                self._file((key, tuple(nested)), row, nested.values())
        provenance = get("provenance")
        if isinstance(provenance, dict):  # its verdict only: the cards stay in the record
            self._file((_PROVENANCE_KEY, PROVENANCE_COLUMNS), row, (provenance.get("status"), provenance.get("reason")))
        flat = memory_columns(data)
        if flat:  # filed like a nested object whose columns carry no prefix
            self._file((_MEMORY_KEY, tuple(flat)), row, flat.values())
        facts = engine_fact_columns(data)
        if facts:
            self._file((_ENGINE_FACTS_KEY, tuple(facts)), row, facts.values())
        ready = get("readiness")
        if isinstance(ready, dict):  # its state and reasons only: the probe's figures stay in the record
            state = ready.get("state")
            self._file((_READINESS_KEY, READINESS_COLUMNS), row,
                       (state if isinstance(state, str) else None, readiness_reasons(ready)))
        rejected = contract.rejected_metrics(data)
        if rejected:  # the metrics the producer or the loader left out, and why (one text column)
            self._file((_REJECTED_KEY, (REJECTED_COLUMN,)), row, ("; ".join(rejected),))
        self.dirs.append(record_dir)
        if "serving" in data:
            self.points += serving_points.point_rows(data, record_dir)
            self.nodes += record_node_rows(data, record_dir)

    def _file(self, shape: tuple[str, tuple[str, ...]], row: int, values: Any) -> None:
        bucket = self.nested.get(shape)
        if bucket is None:
            bucket = self.nested[shape] = ([], [])
        bucket[0].append(row)
        bucket[1].extend(values)

    def frame(self) -> pd.DataFrame:
        count = len(self.dirs)
        if not count:
            return runs_frame([])
        width = len(_ROW_FIELDS)
        columns: dict[str, Any] = {name: self.fixed[i::width] for i, name in enumerate(_ROW_FIELDS)}
        # Metrics are float64 in the end whatever they hold (None, an int), so straight to one array.
        metrics = np.array(self.metrics, dtype="float64").reshape(count, len(METRIC_COLUMNS))
        columns |= {name: metrics[:, i].copy() for i, name in enumerate(METRIC_COLUMNS)}
        nested: dict[str, list[tuple[list[int], list[Any]]]] = {}
        for (key, subs), (rows, values) in self.nested.items():
            prefix = _NESTED_PREFIXES.get(key, "")
            for i, sub in enumerate(subs):
                nested.setdefault(prefix + sub, []).append((rows, values[i::len(subs)]))
        for name, parts in nested.items():
            if len(parts) == 1 and len(parts[0][0]) == count:
                values = parts[0][1]
            else:  # missing (NaN) where a run lacks the key, as a frame built from rows has it
                filled = np.full(count, np.nan, dtype=object)
                for rows, column in parts:
                    filled[rows] = _object_array(column)
                values = filled.tolist()
            if any(issubclass(t, (dict, list)) for t in set(map(type, values))):
                values = [_scalar(v) for v in values]
            columns[name] = values
        columns["record_dir"] = self.dirs
        return _typed_frame(pd.DataFrame(columns))


def _object_array(values: list[Any]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def _load_chunk(paths: list[str], root: str) -> tuple[pd.DataFrame, list[LoadProblem], list[str], pd.DataFrame,
                                                    list[dict[str, Any]]]:
    """(the runs, the records skipped, the candidate record paths that do not exist, the serving points, the nodes
    the multi-node runs' records name)."""
    columns = _Columns()
    problems: list[LoadProblem] = []
    absent: list[str] = []
    prefix = len(root.rstrip(os.sep)) + 1
    suffix = len(RECORD_NAME) + 1
    for path in paths:
        data = read_record(path)
        if data is None:
            absent.append(path)
            continue
        if isinstance(data, LoadProblem):
            problems.append(data)
            continue
        if "serving" in data:  # a serving run without any ok point is a failed run
            data = serving_points.screen_status(data)
        # Paths come from find_record_files(root), so slicing is relpath without its cost.
        columns.add(data, path[prefix:-suffix])
    return columns.frame(), problems, absent, serving_points.points_frame(columns.points), columns.nodes


def _workers(count: int) -> int:
    if count < PARALLEL_MIN_RECORDS or "fork" not in mp.get_all_start_methods():
        return 1
    return max(1, min(len(os.sched_getaffinity(0)), 8))


def load_runs(root: str | os.PathLike[str], workers: int | None = None,
              while_loading: Callable[[], object] | None = None,
              exclude: tuple[str | os.PathLike[str], ...] = ()) -> LoadResult:
    """All runs under ``root`` as a DataFrame, plus every record that had to be skipped and why.

    Large trees are read by forked worker processes (JSON parsing is CPU-bound, so threads would only
    take turns on the GIL), each returning a DataFrame of its share. ``while_loading`` runs here while
    they work (the report imports its statistics and plotting libraries meanwhile, which the workers
    then need not carry); without workers it runs first. Nothing under an ``exclude`` directory is read
    (a tree inside ``root`` that is read on its own: `sparkfleet compare` with CURRENT inside BASELINE).
    """
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(2, "results directory not found", str(root))
    plans: list[str] = []
    staging: list[str] = []
    node_paths: list[str] = []
    paths = find_record_files(root, plans, staging, node_paths)
    if exclude:
        paths, plans, staging, node_paths = (_outside(items, root, exclude)
                                             for items in (paths, plans, staging, node_paths))
    workers = workers or _workers(len(paths))
    if workers > 1:
        size = -(-len(paths) // workers)
        chunks = [paths[i:i + size] for i in range(0, len(paths), size)]
        with ProcessPoolExecutor(workers, mp_context=mp.get_context("fork")) as pool:
            results = pool.map(_load_chunk, chunks, [str(root)] * len(chunks))  # the workers fork here
            if while_loading:
                while_loading()
            parts = list(results)
    else:
        if while_loading:
            while_loading()
        parts = [_load_chunk(paths, str(root))]
    frames = [frame for frame, _, _, _, _ in parts if len(frame)]
    runs = runs_frame([]) if not frames else frames[0] if len(frames) == 1 else _concat(frames)
    problems = [problem for _, chunk_problems, _, _, _ in parts for problem in chunk_problems]
    runs, duplicates = _drop_duplicate_runs(runs, root)
    serving = _serving_points([points for _, _, _, points, _ in parts], runs)
    accounting = account(root, runs, [(p.path, p.reason) for p in problems], [a for part in parts for a in part[2]],
                         plans, staging, serving=serving)  # its serving runs, and their missing points named
    kept = set(runs["record_dir"])  # a duplicate record's nodes are left out with it
    named = [row for part in parts for row in part[4] if row["record_dir"] in kept]
    nodes, node_problems = join_nodes(root, named, node_paths)
    runs = with_workers_readiness(runs, nodes)
    return LoadResult(runs=runs, problems=problems + duplicates, root=root, accounting=accounting,
                      serving=with_run_readiness(serving, runs), nodes=nodes, node_problems=node_problems)


def _outside(paths: list[str], root: Path, exclude: tuple[str | os.PathLike[str], ...]) -> list[str]:
    """The paths (found under ``root``, symlinks not followed) that lie under none of ``exclude``."""
    real_root = os.path.realpath(root)
    prefixes = []
    for directory in exclude:
        relative = os.path.relpath(os.path.realpath(directory), real_root)
        if relative == os.curdir:
            return []
        if relative != os.pardir and not relative.startswith(os.pardir + os.sep):
            prefixes.append(os.path.join(str(root), relative) + os.sep)
    return [p for p in paths if not p.startswith(tuple(prefixes))] if prefixes else paths


def _serving_points(parts: list[pd.DataFrame], runs: pd.DataFrame) -> pd.DataFrame:
    """The chunks' serving points, those of a duplicate record (dropped from the runs) left out with it."""
    found = [part for part in parts if len(part)]
    if not found:
        return serving_points.points_frame([])
    points = found[0] if len(found) == 1 else pd.concat(found, ignore_index=True)
    return points[points["record_dir"].isin(runs["record_dir"])].reset_index(drop=True)


# --- the nodes of multi-node runs (issue 36) ------------------------------------------------------------------

#: One row per run x node: rank 0 from its record (source "record"), a worker from its node file ("node file"), or a
#: worker its run's record names whose node file was not found ("no node file"). ``record_dir``: rank 0's record
#: (the run's row in the runs table); ``node_dir``: where the node's own files lie, both relative to the root.
NODE_COLUMNS = ["run_id", "campaign", "cluster", "host", "rank", "address", "source", "readiness_state",
                "readiness_clock_mhz", "readiness_reasons", "power_w_mean", "gpu_temp_c_max", "sm_clock_mhz_mean",
                "clock_events", "samples", "telemetry_note", "record_dir", "node_dir"]
FROM_RECORD, FROM_NODE_FILE, NO_NODE_FILE = "record", "node file", "no node file"
#: The runs' columns a suspect worker sets (with_workers_readiness), beside the run's READINESS_COLUMNS it folds
#: them into: they tell a run another node made suspect from one whose own probe was (hostcheck.run_states).
WORKERS_STATE, WORKERS_REASONS = "workers_readiness_state", "workers_readiness_reasons"


def nodes_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=NODE_COLUMNS)
    return frame.sort_values(["campaign", "run_id", "rank"], kind="stable").reset_index(drop=True) if rows else frame


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
        return None
    return float(value)


def readiness_reasons(section: Any) -> str | None:
    """A readiness section's reasons in words, "; "-joined (each its message, else its cause); None for none."""
    reasons = section.get("reasons") if isinstance(section, dict) else None
    words = [str(r.get("message") or r.get("cause")) for r in reasons or [] if isinstance(r, dict)]
    return "; ".join(words) or None


def readiness_columns(section: Any) -> dict[str, Any]:
    """A node's readiness section (host_state.readiness_probe) as NODE_COLUMNS; all None where it was not probed."""
    ready = section if isinstance(section, dict) else {}
    state = ready.get("state")
    return {"readiness_state": state if isinstance(state, str) else None,
            "readiness_clock_mhz": _finite(ready.get("sm_clock_mhz")), "readiness_reasons": readiness_reasons(ready)}


def telemetry_columns(summary: Any) -> dict[str, Any]:
    """A node's telemetry summary (TelemetrySampler.stop) as NODE_COLUMNS; ``clock_events`` "" where none was seen,
    None where the summary does not say; ``telemetry_note`` why there is no summary."""
    data = summary if isinstance(summary, dict) else {}
    seen = data.get("throttle_reasons_seen")
    samples = _finite(data.get("samples"))
    note = data.get("note") if isinstance(data.get("note"), str) else None if data else "no telemetry summary"
    return {"power_w_mean": _finite(data.get("gpu_power_w_mean")),
            "gpu_temp_c_max": _finite(data.get("gpu_temp_c_max")),
            "sm_clock_mhz_mean": _finite(data.get("sm_clock_mhz_mean")),
            "clock_events": ", ".join(map(str, seen)) if isinstance(seen, list) else None,
            "samples": None if samples is None else int(samples), "telemetry_note": note}


def record_node_rows(data: dict[str, Any], record_dir: str) -> list[dict[str, Any]]:
    """The nodes a multi-node run's record names (serving.cluster): rank 0 itself, and each worker as without a
    node file until join_nodes finds it; [] for a record of one node."""
    section = data.get("serving")
    cluster = section.get("cluster") if isinstance(section, dict) else None
    nodes = cluster.get("nodes") if isinstance(cluster, dict) else None
    if not isinstance(nodes, list) or len(nodes) < 2:
        return []
    workers = cluster.get("workers") if isinstance(cluster.get("workers"), list) else []
    base = {"run_id": data.get("run_id"), "campaign": data.get("campaign"), "cluster": cluster.get("name"),
            "record_dir": record_dir}
    rows = [{**base, "host": data.get("host"), "rank": 0, "address": None, "source": FROM_RECORD,
             **readiness_columns(data.get("readiness")), **telemetry_columns(data.get("telemetry")),
             "node_dir": record_dir}]
    for rank, host in enumerate(nodes[1:], start=1):
        rows.append({**base, "host": str(host), "rank": rank, "source": NO_NODE_FILE, "node_dir": None,
                     "address": workers[rank - 1] if rank - 1 < len(workers) else None, **readiness_columns(None),
                     **telemetry_columns(None), "telemetry_note": "no node file: its telemetry was not collected"})
    return rows


def read_node_file(path: str) -> dict[str, Any] | LoadProblem | None:
    """A worker's node.json (contract/node_file.py), the problem that makes it unusable, or None when there is none."""
    try:
        raw = _read_bytes(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return LoadProblem(Path(path), f"node file not readable: {exc}")
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return LoadProblem(Path(path), f"node file not readable JSON: {exc}")
    why = node_file.node_problem(data)
    return LoadProblem(Path(path), f"not a node file: {why}") if why else data


def csv_clock_events(path: Path) -> str | None:
    """The clock-event reasons a telemetry.csv's ``throttle_reasons`` column shows ("" none); None without it."""
    try:
        reasons = pd.read_csv(path, usecols=["throttle_reasons"], dtype=str)["throttle_reasons"].dropna()
    except (OSError, ValueError):
        return None
    return ", ".join(sorted({r for cell in reasons for r in cell.split("|") if r not in ("", "none")}))


def _node_file_row(data: dict[str, Any], head: dict[str, Any], node_dir: str) -> dict[str, Any]:
    """A worker's row from its node file, with its run's identity from rank 0's record."""
    return {**head, "host": data["host"], "rank": data["rank"], "address": data.get("address"),
            "source": FROM_NODE_FILE, **readiness_columns(data.get("readiness")),
            **telemetry_columns(data.get("telemetry")), "node_dir": node_dir}


def _join_problem(data: dict[str, Any], path: str, head: dict[str, Any] | None,
                  worker: dict[str, Any] | None) -> str | None:
    """Why a node file read well does not join its run: no such run loaded, another campaign, another directory, a
    host the run's record does not name as a worker (``worker``: the record's row of that host, if any)."""
    if os.path.basename(os.path.dirname(path)) != data["run_id"]:
        return f"its run_id {data['run_id']} is not its directory's name"
    if head is None:
        return (f"no record of its run {data['run_id']} was loaded (rank 0's: the run did not start, or its record "
                "was not collected)")
    if data.get("campaign") not in (None, head["campaign"]):
        return f"campaign {data['campaign']}, its run's record says {head['campaign']}"
    if worker is None or worker["rank"] == 0:
        return f"host {data['host']} is not a worker node of run {data['run_id']} as its record names them"
    return None


def join_nodes(root: Path, named: list[dict[str, Any]], paths: list[str]) -> tuple[pd.DataFrame, list[LoadProblem]]:
    """The nodes the loaded multi-node runs' records name (record_node_rows), each worker's row replaced by its
    node file's (joined by run id and host), and the node files that could not be read or joined."""
    rows = {(row["run_id"], row["host"]): row for row in named}
    heads = {row["run_id"]: row for row in named if row["rank"] == 0}
    problems: list[LoadProblem] = []
    for path in paths:
        data = read_node_file(path)
        if data is None or isinstance(data, LoadProblem):
            problems += [data] if data else []  # a directory without a file: the run's row names it
            continue
        head = heads.get(data["run_id"])
        why = _join_problem(data, path, head, rows.get((data["run_id"], data["host"])))
        if why or head is None:
            problems.append(LoadProblem(Path(path), why or "no run"))
            continue
        rows[(data["run_id"], data["host"])] = _node_file_row(data, head, os.path.relpath(os.path.dirname(path), root))
    for row in rows.values():  # a summary written without the reasons seen: the csv has them
        if row["clock_events"] is None and row["node_dir"] is not None:
            row["clock_events"] = csv_clock_events(root / row["node_dir"] / "telemetry.csv")
    return nodes_frame(list(rows.values())), problems


def with_workers_readiness(runs: pd.DataFrame, nodes: pd.DataFrame) -> pd.DataFrame:
    """``runs`` with WORKERS_STATE "suspect" and WORKERS_REASONS naming each node ("spark2 (rank 1): <reason>") on
    the runs where a worker's readiness probe found it suspect: such a run is suspect as if its own probe had said
    so (its READINESS_STATE "suspect", the nodes' reasons after rank 0's own). Unchanged where no worker was."""
    suspect = nodes[(nodes["rank"] > 0) & (nodes["readiness_state"] == SUSPECT)]
    if suspect.empty:
        return runs
    named = suspect.assign(said=[f"{h} (rank {r}): {why or SUSPECT}" for h, r, why in
                                 zip(suspect["host"], suspect["rank"], suspect["readiness_reasons"], strict=True)])
    reasons = named.groupby("record_dir", sort=False)["said"].agg("; ".join)
    hit = runs["record_dir"].map(reasons)
    at = list(runs.columns).index("record_dir")
    runs = runs.copy()
    runs.insert(at, WORKERS_REASONS, hit)
    runs.insert(at, WORKERS_STATE, hit.notna().map({True: SUSPECT, False: None}))
    for column in READINESS_COLUMNS:  # records without their own readiness section: the workers' alone
        if column not in runs:
            runs.insert(list(runs.columns).index(WORKERS_STATE), column, None)
    runs[READINESS_STATE] = runs[READINESS_STATE].astype(object).where(hit.isna(), SUSPECT)
    runs[READINESS_REASONS] = [_joined(own, workers) for own, workers in zip(runs[READINESS_REASONS], hit, strict=True)]
    return runs


def _joined(*reasons: Any) -> str | None:
    """The reasons given (text; NaN and None are none), "; "-joined; None for none."""
    return "; ".join(r for r in reasons if isinstance(r, str) and r) or None


def with_run_readiness(points: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """The serving points with their run's READINESS_COLUMNS (the loader's word, workers folded in), so that the
    points of a suspect run are kept apart as the run is (stats.kept_apart)."""
    if points.empty or READINESS_STATE not in runs:
        return points
    readiness = runs.set_index("record_dir")[list(READINESS_COLUMNS)]
    return points.assign(**{column: points["record_dir"].map(readiness[column]) for column in READINESS_COLUMNS})


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    combined = pd.concat(frames, ignore_index=True)
    base = [c for c in frames[0].columns if c != "record_dir"]
    extras = [c for c in combined.columns if c not in base and c != "record_dir"]
    return combined[base + sorted(extras) + ["record_dir"]]


def _drop_duplicate_runs(runs: pd.DataFrame, root: Path) -> tuple[pd.DataFrame, list[LoadProblem]]:
    """Two files claiming one run would be counted twice: keep the first (path order), report the rest."""
    duplicated = runs["run_id"].duplicated(keep="first")
    if not duplicated.any():
        return runs, []
    first = runs.loc[~duplicated].set_index("run_id")["record_dir"]
    problems = [
        LoadProblem(root / d / RECORD_NAME, f"duplicate run_id {r} (also {root / first[r] / RECORD_NAME})")
        for r, d in zip(runs.loc[duplicated, "run_id"], runs.loc[duplicated, "record_dir"], strict=True)
    ]
    return runs.loc[~duplicated].reset_index(drop=True), problems


_BASE_COLUMNS = [*_ROW_FIELDS, *METRIC_COLUMNS]


def runs_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Build the frame once from all rows (never append row by row) with stable dtypes."""
    return _typed_frame(pd.DataFrame.from_records(rows) if rows else pd.DataFrame(columns=[*_BASE_COLUMNS,
                                                                                            "record_dir"]))


def _typed_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Columns in their fixed order (contract fields, metrics, nested fields sorted, record_dir) and dtypes."""
    base = _BASE_COLUMNS
    for column in base:
        if column not in frame.columns:
            frame[column] = None
    extras = sorted(c for c in frame.columns if c not in base and c != "record_dir")
    frame = frame[base + extras + ["record_dir"]]
    numeric = {name: "float64" for name in METRIC_COLUMNS}
    numeric |= {"iteration": "int64", "order_index": "Int64", "exit_code": "Int64", "duration_s": "float64"}
    numeric |= {name: "float64" for name in _MEMORY_NUMERIC if name in frame.columns}
    frame = frame.astype(numeric)
    frame["warmup"] = frame["warmup"].astype("boolean")
    frame["started_utc"] = parse_timestamps(frame["started_utc"])
    frame["ended_utc"] = parse_timestamps(frame["ended_utc"])
    # Records older than environment_kind: the environment's own name says native or not.
    named_native = frame["environment"].astype("string") == "native"
    fallback = named_native.map({True: "native", False: "container"}).astype("string")
    frame["environment_kind"] = frame["environment_kind"].astype("string").fillna(fallback)
    # A bare run uses no image: records written before issue 35 named the campaign's all the same.
    bare = (frame["environment_kind"] == "bare").fillna(False).to_numpy(dtype=bool)
    for column in BARE_WITHOUT:
        if column in frame.columns and bare.any():
            frame[column] = frame[column].astype(object)
            frame.loc[bare, column] = None
    return frame.reset_index(drop=True)


#: The columns a bare run never has a value in, whatever an older record says (the campaign's image).
BARE_WITHOUT = ("version_image", "version_image_ref")


def parse_timestamps(values: pd.Series) -> pd.Series:
    """ISO timestamps as UTC. A timestamp without an offset (the study's local clock, zone unknown) is
    read as if UTC: good enough to order runs of one host, not to compare wall clocks across hosts."""
    return pd.to_datetime(values, utc=True, errors="coerce", format="ISO8601")


def export_runs(runs: pd.DataFrame, directory: str | os.PathLike[str]) -> tuple[Path, Path]:
    """Write runs.csv and runs.parquet into ``directory``; returns both paths."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    csv_path, parquet_path = directory / "runs.csv", directory / "runs.parquet"
    table = arrow_table(runs)
    pq.write_table(table, parquet_path)
    pa_csv.write_csv(table, csv_path)  # Arrow's writer: about 10x pandas' to_csv on 100k rows
    return csv_path, parquet_path


def arrow_table(frame: pd.DataFrame) -> pa.Table:
    """The frame as an Arrow table; free-form object columns (versions, params) may mix str and numbers,
    and Arrow needs one type per column, so those become text."""
    fixed = {c: frame[c].map(lambda v: None if v is None or v is pd.NA else str(v))
             for c in frame.columns if frame[c].dtype == object}
    return pa.Table.from_pandas(frame.assign(**fixed) if fixed else frame, preserve_index=False)


def write_csv(frame: pd.DataFrame, path: str | os.PathLike[str]) -> None:
    pa_csv.write_csv(arrow_table(frame), path)
