"""Run logs: a run's metrics as it goes, in the tools people watch it with.

Every run writes a JSON-lines log beside its checkpoint (``NAME.log.jsonl``): a
first line describing the run, one line per step and per evaluation, and a
last line saying how it ended. On request (``--log-to KIND[=WHERE]``) the same
metrics also go to a CSV file, to TensorBoard (an event file per run) or to
MLflow (a run in the variant's or study's experiment); each of those libraries
is imported only when its log is asked for.

The loop hands over each step's metrics as they are, tensors included: reading
a GPU tensor waits for the GPU, so the log keeps them and reads them all at
once (one host synchronisation) at every evaluation and at least every
``FLUSH_SECONDS`` or ``FLUSH_STEPS`` steps. Another process reading the files
sees them grow as the run goes: every flush appends whole lines, so a reader
takes the lines up to the last newline.

The step metrics are named ``train/NAME`` and the evaluation's ``eval/NAME`` in
TensorBoard and MLflow alike; the files keep the bare names with a ``kind``.
"""

from __future__ import annotations

import contextlib
import csv
import json
import logging
import math
import queue
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib.util import find_spec
from pathlib import Path
from typing import Any, Iterable, Mapping, Protocol, Sequence

import torch

from ..errors import ZooError, printable
from ..storage.files import make_folder

LOG_KINDS = ("jsonl", "csv", "tensorboard", "mlflow")

# How often buffered step metrics are read and written out, whichever comes
# first (every evaluation flushes too): often enough for someone watching, rarely
# enough that the host waits on the GPU only once in many steps.
FLUSH_SECONDS = 2.0
FLUSH_STEPS = 100

# What each optional log needs installed: the extra that brings it, and the modules.
_EXTRAS: dict[str, tuple[str, tuple[str, ...]]] = {
    "tensorboard": ("tensorboard", ("tensorboard",)),
    "mlflow": ("mlflow", ("mlflow",)),
}
# MLflow's SQLite store (the default: MLflow refuses a plain-folder store unless told
# to allow it) also needs these, which mlflow-skinny leaves out.
_SQL_STORE_MODULES = ("sqlalchemy", "alembic")

_PREFIXES = {"step": "train", "evaluation": "eval"}
_CSV_COLUMNS = (
    "step",
    "kind",
    "loss",
    "learning_rate",
    "tokens_per_second",
    "grad_norm",
    "train",
    "validation",
    "windows",
    "time",
)
_MLFLOW_STATUS = {"finished": "FINISHED", "interrupted": "KILLED", "failed": "FAILED"}


@dataclass(frozen=True)
class LogTarget:
    """One ``--log-to`` entry: a kind of log and where it goes (None: beside the run)."""

    kind: str
    where: str | None = None  # a folder; for mlflow also a tracking URI


@dataclass(frozen=True)
class RunDescription:
    """What the logs say about a run besides its metrics."""

    name: str  # the run, e.g. the variant or ARM-seedN: TensorBoard's sub-folder and MLflow's run name start with it
    experiment: str  # MLflow's experiment: the variant trained, or the study
    recipe: Mapping[str, Any] = field(default_factory=dict)  # MLflow's params, TensorBoard's text
    tags: Mapping[str, str | int] = field(default_factory=dict)  # variant, base, dataset, study, seed...


def parse_log_targets(entries: Iterable[str]) -> tuple[LogTarget, ...]:
    """The logs ``--log-to`` entries ask for, the jsonl log always among them.

    Refuses, in one line each, an unknown kind and a kind whose library is not
    installed (found without importing it, so checking costs nothing)."""
    targets: list[LogTarget] = []
    for entry in entries:
        kind, separator, where = entry.partition("=")
        kind = kind.strip().lower()
        if kind not in LOG_KINDS:
            raise ZooError(
                f"--log-to {printable(entry)}: unknown kind of log; the kinds are {', '.join(LOG_KINDS)} "
                f"(KIND, or KIND=FOLDER)"
            )
        if separator and not where.strip():
            raise ZooError(f"--log-to {printable(entry)}: nothing after '='; name a folder, or leave out the '='")
        target = LogTarget(kind, where.strip() or None)
        _check_installed(target)
        if target not in targets:
            targets.append(target)
    if not any(target.kind == "jsonl" for target in targets):
        targets.insert(0, LogTarget("jsonl"))
    return tuple(targets)


def _check_installed(target: LogTarget) -> None:
    if target.kind not in _EXTRAS:
        return
    extra, modules = _EXTRAS[target.kind]
    if target.kind == "mlflow" and _mlflow_store(target.where, Path("."))[1] is not None:
        modules += _SQL_STORE_MODULES
    for module in modules:
        if not _installed(module):
            raise ZooError(
                f"--log-to {target.kind}: needs the {module} package, which is not installed; "
                f"pip install 'zoo-lm[{extra}]'"
            )


def _installed(module: str) -> bool:
    try:
        return find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: a module blocked in sys.modules
        return False


def read_run_header(path: Path) -> dict[str, Any] | None:
    """The first line of a jsonl run log (the run's description), or None."""
    try:
        with path.open(encoding="utf-8") as file:
            header = json.loads(file.readline())
    except (OSError, ValueError):
        return None
    return header if isinstance(header, dict) and header.get("kind") == "run" else None


def open_run_log(
    log_to: Iterable[str],
    folder: Path,
    stem: str,
    description: RunDescription,
    resumed_at: int | None = None,
) -> RunLog:
    """Start the logs ``log_to`` asks for (and the jsonl log) of one run.

    By default they go beside the run: ``folder/STEM.log.jsonl``,
    ``folder/STEM.log.csv``, ``folder/tensorboard/RUN/`` and the MLflow store
    ``folder/mlflow/`` (``sqlite:///folder/mlflow/mlflow.db``, artifacts beside
    it); ``KIND=WHERE`` puts a kind's in another folder, or for MLflow names any
    tracking URI. ``resumed_at`` (the last step before a resumed run goes on)
    appends to the logs instead of starting them over: the files grow, a new
    TensorBoard event file hides the old steps after it, and the MLflow run the
    jsonl log's first line names goes on."""
    targets = parse_log_targets(log_to)
    jsonl_paths = [_file(target, folder, stem, "jsonl") for target in targets if target.kind == "jsonl"]
    previous = read_run_header(jsonl_paths[0]) if resumed_at is not None else None
    run = previous["run"] if previous and _is_run_name(previous.get("run")) else _run_name(description.name)
    header: dict[str, Any] = {
        "kind": "run",
        "run": run,
        **description.tags,
        "experiment": description.experiment,
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "time": time.time(),
        "recipe": dict(description.recipe),
        "logs": {},
    }
    sinks: list[_Sink] = []
    # The jsonl logs come last: their first line records where the others went.
    with _closed_on_error(sinks):
        for target in sorted(targets, key=lambda target: target.kind == "jsonl"):
            sink = _open_sink(target, folder, stem, run, description, resumed_at, previous)
            header["logs"].update(sink.details)
            sinks.append(sink)
        for sink in sinks:
            sink.start(header, resumed_at)
    return RunLog(sinks, folder)


def whereabouts(folder: Path, logs: Mapping[str, Any]) -> str:
    """``logs in FOLDER: NAME.log.jsonl, tensorboard/RUN, mlflow/mlflow.db (run ID)``:
    where a run's logs are (``logs`` as the jsonl log's first line records them),
    each inside ``folder`` by its path there, one placed elsewhere by its own."""
    folder = folder.resolve()

    def shown(where: str) -> str:
        path = Path(where.removeprefix("sqlite:///"))  # MLflow's database by its file
        if not path.is_absolute():
            return where  # a tracking URI, shown as given
        return str(path.relative_to(folder)) if path.is_relative_to(folder) else str(path)

    parts = [shown(str(logs[kind])) for kind in LOG_KINDS if kind in logs]
    if "mlflow_run_id" in logs:
        parts[-1] += f" (run {logs['mlflow_run_id']})"
    return f"logs in {folder}: {', '.join(parts)}"


def prepare_run_logs(log_to: Iterable[str], folder: Path, experiment: str) -> None:
    """Make what the runs of a study share before they start at once in their
    own processes: MLflow's store and experiment (two processes creating one
    database would race)."""
    for target in parse_log_targets(log_to):
        if target.kind == "mlflow":
            _MLflow.experiment_id(target.where, folder, experiment)


def _run_name(base: str) -> str:
    """A run's own name: runs of one variant into the same folder stay apart in TensorBoard."""
    return f"{base}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


def _is_run_name(name: Any) -> bool:
    # Read back from a file: it names a folder, so it must not lead out of TensorBoard's.
    return isinstance(name, str) and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name) is not None


def _file(target: LogTarget, folder: Path, stem: str, suffix: str) -> Path:
    return (Path(target.where).expanduser() if target.where else folder).resolve() / f"{stem}.log.{suffix}"


@contextlib.contextmanager
def _closed_on_error(sinks: list[_Sink]):
    try:
        yield
    except BaseException:
        for sink in sinks:
            sink.close("failed")
        raise


class _Sink(Protocol):
    details: dict[str, Any]  # where it writes, for the jsonl log's first line

    def start(self, header: dict[str, Any], resumed_at: int | None) -> None: ...
    def write(self, records: list[dict[str, Any]]) -> None: ...
    def end(
        self, record: dict[str, Any], metrics: Mapping[str, Any], files: Sequence[Path], documents: Mapping[str, str]
    ) -> None: ...
    def close(self, status: str) -> None: ...


def _open_sink(target, folder, stem, run, description, resumed_at, previous) -> _Sink:
    if target.kind == "jsonl":
        return _JsonLines(_file(target, folder, stem, "jsonl"), resumed_at)
    if target.kind == "csv":
        return _Csv(_file(target, folder, stem, "csv"), resumed_at)
    if target.kind == "tensorboard":
        root = Path(target.where).expanduser() if target.where else folder / "tensorboard"
        return _TensorBoard(root.resolve() / run, resumed_at)
    logs = previous.get("logs") if previous else None
    previous_run = logs.get("mlflow_run_id") if isinstance(logs, dict) else None
    return _MLflow(target.where, folder, run, description, previous_run if isinstance(previous_run, str) else None)


class RunLog:
    """A run's logs: each step's and evaluation's metrics, then how it ended.

    A context manager: leaving it closes every log, and a run that ends in an
    exception says so in them (``interrupted`` after Ctrl-C, else ``failed``).
    The values are read on the caller's thread (the one wait for the device);
    the logs are written on a thread of their own, in order, so a slow one
    (MLflow's database, TensorBoard's records) does not hold up training. A log
    that fails raises its error at the next flush, or when the logs close."""

    def __init__(self, sinks: Sequence[_Sink], folder: Path):
        self.sinks = list(sinks)
        self.folder = folder  # where the logs go unless ``--log-to KIND=WHERE`` says otherwise
        self._buffer: list[tuple[str, int, Mapping[str, Any], float]] = []
        self._flushed = time.monotonic()
        self._last_step: int | None = None
        self._ended = self._closed = False
        self._writer = _Writer(self.sinks)

    @property
    def details(self) -> dict[str, Any]:
        """Where the logs are: kind (or ``mlflow_run_id``) to path or URI."""
        return {key: value for sink in self.sinks for key, value in sink.details.items()}

    def whereabouts(self) -> str:
        """Where the logs are, in one line (see `whereabouts`)."""
        return whereabouts(self.folder, self.details)

    def log_step(self, step: int, metrics: Mapping[str, Any]) -> None:
        """One update's metrics (numbers or one-element tensors), written out in batches."""
        self._buffer.append(("step", step, metrics, time.time()))
        self._last_step = step
        if len(self._buffer) >= FLUSH_STEPS or time.monotonic() - self._flushed >= FLUSH_SECONDS:
            self.flush()

    def log_evaluation(self, step: int, metrics: Mapping[str, Any]) -> None:
        """One evaluation's losses (and how many windows it scored); written out at once."""
        self._buffer.append(("evaluation", step, metrics, time.time()))
        self._last_step = step
        self.flush()

    def flush(self) -> None:
        """Read the buffered values (one wait for the device) and hand them to every log."""
        self._flushed = time.monotonic()
        if self._buffer:
            records = _records(self._buffer)
            self._buffer.clear()
            self._writer.submit("write", records)

    def sync(self) -> None:
        """Write out everything logged so far and wait until it is written: called
        before a checkpoint, so a run killed after saving its state never has logs
        that stop short of it (a resumed run appends after the saved step)."""
        self.flush()
        self._writer.wait()

    def log_end(
        self,
        metrics: Mapping[str, Any],
        *,
        checkpoint: Path | None = None,
        sha256: str | None = None,
        files: Sequence[Path] = (),
        documents: Mapping[str, str] | None = None,
    ) -> None:
        """The run finished: its final metrics and checkpoint; ``files`` (and
        ``documents``, name to text) are kept as MLflow artifacts."""
        self.flush()
        record: dict[str, Any] = {"step": self._last_step, "kind": "end", "status": "finished", **metrics}
        if checkpoint is not None:
            record.update(checkpoint=str(checkpoint), sha256=sha256)
        record["time"] = time.time()
        self._writer.submit("end", record, dict(metrics), [path for path in files if path.is_file()], documents or {})
        self._ended = True

    def close(self, status: str = "finished") -> None:
        """Write what is buffered and close every log; a run that did not reach
        `log_end` gets an end line with ``status`` (finished, interrupted, failed)."""
        if self._closed:
            return
        self._closed = True
        with contextlib.ExitStack() as closing:  # every log is closed, whichever fails
            for sink in self.sinks:
                closing.callback(sink.close, status)
            closing.callback(self._writer.finish)  # first: what is queued is written before the logs close
            self.flush()
            if not self._ended:
                record = {"step": self._last_step, "kind": "end", "status": status, "time": time.time()}
                self._writer.submit("end", record, {}, [], {})

    def __enter__(self) -> RunLog:
        return self

    def __exit__(self, kind, exception, traceback) -> None:
        status = "finished" if kind is None else "interrupted" if issubclass(kind, KeyboardInterrupt) else "failed"
        try:
            self.close(status)
        except Exception as problem:
            if kind is None:
                raise
            # The run's own exception is the news; a log that failed too must not replace it.
            print(f"zoo: warning: the run's logs could not be closed: {problem}", file=sys.stderr)


class _Writer:
    """Calls the logs' methods on a thread of its own, in the order they were submitted."""

    def __init__(self, sinks: Sequence[_Sink]):
        self.sinks = sinks
        self.queue: queue.Queue[tuple[str, tuple] | None] = queue.Queue()
        self.error: Exception | None = None
        self.thread = threading.Thread(target=self._run, name="zoo-run-log", daemon=True)
        self.thread.start()

    def submit(self, method: str, *arguments: Any) -> None:
        self._raise()
        self.queue.put((method, arguments))

    def wait(self) -> None:
        """Wait until everything submitted so far is written; raise what failed."""
        self.queue.join()
        self._raise()

    def finish(self) -> None:
        """Wait until everything submitted is written; raise what failed."""
        if self.thread.is_alive():
            self.queue.put(None)
            self.thread.join()
        self._raise()

    def _raise(self) -> None:
        if self.error is not None:
            error, self.error = self.error, None
            raise error

    def _run(self) -> None:
        failed = False
        while (item := self.queue.get()) is not None:
            method, arguments = item
            try:
                if not failed:  # a log that failed once: nothing more goes out, the error is raised once
                    for sink in self.sinks:
                        getattr(sink, method)(*arguments)
            except Exception as exc:
                self.error, failed = exc, True
            finally:
                self.queue.task_done()


def _records(buffer: list[tuple[str, int, Mapping[str, Any], float]]) -> list[dict[str, Any]]:
    """The buffered metrics as plain numbers, every tensor read in one transfer per device."""
    records = [{"step": step, "kind": kind, **metrics, "time": moment} for kind, step, metrics, moment in buffer]
    tensors: dict[Any, list[tuple[dict[str, Any], str]]] = {}
    for record in records:
        for key, value in record.items():
            if hasattr(value, "detach"):
                tensors.setdefault(value.device, []).append((record, key))
    if tensors:
        for places in tensors.values():
            values = torch.stack([record[key].detach().reshape(()).float() for record, key in places]).tolist()
            for (record, key), number in zip(places, values):
                record[key] = number
    return records


def _json_line(record: Mapping[str, Any]) -> str:
    # Strict JSON (any reader's): a diverged loss is null, not NaN.
    safe = {
        key: None if isinstance(value, float) and not math.isfinite(value) else value for key, value in record.items()
    }
    return json.dumps(safe, default=str) + "\n"


class _JsonLines:
    def __init__(self, path: Path, resumed_at: int | None):
        make_folder(path.parent)
        self.path, self.details = path, {"jsonl": str(path)}
        self.appending = resumed_at is not None and path.is_file() and path.stat().st_size > 0
        if self.appending:
            _drop_partial_line(path)
        try:
            self.file = path.open("a" if self.appending else "w", encoding="utf-8")
        except OSError as exc:
            raise ZooError(f"{path}: cannot write the run log: {exc.strerror or exc}") from None

    def start(self, header: dict[str, Any], resumed_at: int | None) -> None:
        if self.appending:
            self._write([{"step": resumed_at, "kind": "resumed", "time": header["time"]}])
        else:
            self._write([header])

    def write(self, records: list[dict[str, Any]]) -> None:
        self._write(records)

    def end(self, record, metrics, files, documents) -> None:
        self._write([record])

    def close(self, status: str) -> None:
        self.file.close()

    def _write(self, records: list[dict[str, Any]]) -> None:
        # One write of whole lines, then out of this process's buffer: a reader sees complete lines.
        self.file.write("".join(map(_json_line, records)))
        self.file.flush()


def _drop_partial_line(path: Path) -> None:
    """Cut a line that a killed run left half-written, so appending starts a line of its own."""
    data = path.read_bytes()
    if not data.endswith(b"\n"):
        with path.open("r+b") as file:
            file.truncate(data.rfind(b"\n") + 1)


class _Csv:
    """One row per step or evaluation, the columns of both (a row leaves the other's empty)."""

    def __init__(self, path: Path, resumed_at: int | None):
        make_folder(path.parent)
        self.details = {"csv": str(path)}
        appending = resumed_at is not None and path.is_file() and path.stat().st_size > 0
        if appending:
            _drop_partial_line(path)
        try:
            self.file = path.open("a" if appending else "w", encoding="utf-8", newline="")
        except OSError as exc:
            raise ZooError(f"{path}: cannot write the run log: {exc.strerror or exc}") from None
        self.rows = csv.DictWriter(self.file, _CSV_COLUMNS, extrasaction="ignore")
        if not appending:
            self.rows.writeheader()
            self.file.flush()

    def start(self, header, resumed_at) -> None:
        pass

    def write(self, records: list[dict[str, Any]]) -> None:
        self.rows.writerows(records)
        self.file.flush()

    def end(self, record, metrics, files, documents) -> None:
        pass  # the csv is the curve; how the run ended is in the jsonl log

    def close(self, status: str) -> None:
        self.file.close()


class _TensorBoard:
    def __init__(self, folder: Path, resumed_at: int | None):
        from torch.utils.tensorboard import SummaryWriter

        make_folder(folder)
        self.details = {"tensorboard": str(folder)}
        # purge_step: a resumed run hides what the interrupted one logged after its saved state.
        self.writer = SummaryWriter(log_dir=str(folder), purge_step=None if resumed_at is None else resumed_at + 1)

    def start(self, header: dict[str, Any], resumed_at: int | None) -> None:
        if resumed_at is None:
            described = {key: value for key, value in header.items() if key not in ("recipe", "logs", "time")}
            self.writer.add_text("run", _markdown_table(described), 0)
            self.writer.add_text("recipe", _markdown_table(header["recipe"]), 0)
            self.writer.flush()

    def write(self, records: list[dict[str, Any]]) -> None:
        for record in records:
            prefix = _PREFIXES[record["kind"]]
            for key, value in record.items():
                if key not in ("step", "kind", "time") and isinstance(value, (int, float)):
                    self.writer.add_scalar(f"{prefix}/{key}", value, record["step"], walltime=record["time"])
        self.writer.flush()

    def end(self, record, metrics, files, documents) -> None:
        ended = {key: value for key, value in record.items() if key not in ("kind", "time")}
        self.writer.add_text("end", _markdown_table(ended), record["step"] or 0)
        self.writer.flush()

    def close(self, status: str) -> None:
        self.writer.close()


def _markdown_table(values: Mapping[str, Any]) -> str:
    return "| | |\n|---|---|\n" + "\n".join(f"| {key} | {value} |" for key, value in values.items())


def _mlflow_store(where: str | None, folder: Path) -> tuple[str, Path | None]:
    """The tracking URI and, for a local database, the artifacts' folder beside it.

    A folder (the default: ``folder/mlflow``) holds a SQLite database: MLflow
    refuses a plain-folder store unless told to allow it (it is in maintenance
    mode), and its UI reads the database as it is. Anything like ``SCHEME:...``
    is a tracking URI, used as given."""
    if where and re.match(r"[A-Za-z][A-Za-z0-9+.-]+:", where):
        if where.startswith("sqlite:///") and where != "sqlite:///:memory:":
            return where, Path(where.removeprefix("sqlite:///")).expanduser().resolve().parent / "artifacts"
        return where, None
    store = (Path(where).expanduser() if where else folder / "mlflow").resolve()
    return f"sqlite:///{store / 'mlflow.db'}", store / "artifacts"


class _MLflow:
    def __init__(
        self, where: str | None, folder: Path, run: str, description: RunDescription, previous_run: str | None
    ):
        from mlflow.entities import Param
        from mlflow.exceptions import MlflowException

        client, experiment_id, uri = self.experiment_id(where, folder, description.experiment)
        self.client = client
        try:
            self.run_id = previous_run if previous_run and self._reopened(previous_run) else None
            if self.run_id is None:
                tags = {key: str(value) for key, value in description.tags.items()}
                self.run_id = client.create_run(experiment_id, run_name=run, tags=tags).info.run_id
                params = [
                    Param(key, str(value)) for key, value in _flat(description.recipe).items() if value is not None
                ]
                for start in range(0, len(params), 100):  # MLflow takes at most 100 params per call
                    client.log_batch(self.run_id, params=params[start : start + 100])
        except MlflowException as exc:
            raise ZooError(f"--log-to mlflow: {uri}: {_first_line(exc)}") from None
        self.details = {"mlflow": uri, "mlflow_run_id": self.run_id}

    @staticmethod
    def experiment_id(where: str | None, folder: Path, experiment: str):
        """The client of the store ``where`` names, the id of ``experiment`` in it (made when new), and the URI."""
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        uri, artifacts = _mlflow_store(where, folder)
        if artifacts is not None:
            make_folder(artifacts)
        # A new store announces its tables at INFO level: not news about the run.
        logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)
        try:
            client = MlflowClient(tracking_uri=uri)
            found = client.get_experiment_by_name(experiment)
            if found is None:
                try:
                    return client, client.create_experiment(experiment, artifact_location=_uri(artifacts)), uri
                except MlflowException:  # made meanwhile by a run in another process
                    found = client.get_experiment_by_name(experiment)
                    if found is None:
                        raise
            return client, found.experiment_id, uri
        except MlflowException as exc:
            raise ZooError(f"--log-to mlflow: {uri}: {_first_line(exc)}") from None

    def _reopened(self, run_id: str) -> bool:
        from mlflow.exceptions import MlflowException

        try:
            self.client.update_run(run_id, status="RUNNING")
        except MlflowException:  # not in this store (another URI): a new run instead
            return False
        return True

    def start(self, header, resumed_at) -> None:
        pass

    def write(self, records: list[dict[str, Any]]) -> None:
        from mlflow.entities import Metric

        metrics = [
            Metric(f"{_PREFIXES[record['kind']]}/{key}", float(value), int(record["time"] * 1000), record["step"])
            for record in records
            for key, value in record.items()
            if key not in ("step", "kind", "time") and isinstance(value, (int, float))
        ]
        for start in range(0, len(metrics), 1000):  # MLflow takes at most 1000 metrics per call
            self.client.log_batch(self.run_id, metrics=metrics[start : start + 1000])

    def end(self, record, metrics, files, documents) -> None:
        from mlflow.entities import Metric

        moment, step = int(record["time"] * 1000), record["step"] or 0
        final = [
            Metric(key, float(value), moment, step)
            for key, value in metrics.items()
            if isinstance(value, (int, float)) and not isinstance(value, bool)
        ]
        if final:
            self.client.log_batch(self.run_id, metrics=final)
        for path in files:
            self.client.log_artifact(self.run_id, str(path))
        for name, text in documents.items():
            self.client.log_text(self.run_id, text, name)

    def close(self, status: str) -> None:
        self.client.set_terminated(self.run_id, _MLFLOW_STATUS[status])


def _flat(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A table inside the recipe (a trainer's options) as one param per entry: ``options.rank``."""
    flat: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, Mapping):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _uri(folder: Path | None) -> str | None:
    return folder.as_uri() if folder is not None else None


def _first_line(exc: Exception) -> str:
    message = getattr(exc, "message", None) or str(exc)
    return message.strip().splitlines()[0] if message.strip() else type(exc).__name__
