"""Data-parallel training on `torch.distributed`, launched by torch's own `torchrun`.

    zoo train NAME --nproc-per-node 2                       # one machine, two processes
    zoo train NAME --nproc-per-node 8 --nnodes 2 --node-rank 0 --rdzv-endpoint host0:29500
    torchrun --nproc-per-node 2 -m zoo_core.training.distributed NAME --steps 100   # the same, by hand

`zoo train --nproc-per-node` hands torchrun's own argument parser the options it
knows and launches the workers through `torch.distributed.run`'s launcher, so
every option means what torchrun says it means. Each worker is an ordinary
`zoo train` run (its command line, less the launch options, read by the CLI, not
here) that `TORCHRUN_WORKER` in its environment makes a `run_worker`: a
`DataParallelPlacement`, Gloo on the CPU, NCCL on CUDA (one GPU per local rank),
the network wrapped in DistributedDataParallel. This module started by torchrun
by hand becomes such a `zoo train`.

The global batch is the recipe's. Every process draws the same windows a
one-process run draws (the batch generator is seeded alike everywhere) and keeps
its contiguous share; DDP averages the gradients, and the average of equal-sized
shares' mean losses is the whole batch's mean loss, so the weights equal the
one-process run's to float rounding. Only rank 0 writes the checkpoint, the card
and the resumable state (atomically), so `--resume` works the same; when any
process dies, torchrun stops the others and the launcher says which and why in
one line.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import uuid
from dataclasses import replace
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.launcher.api import elastic_launch
from torch.distributed.run import config_from_args, get_args_parser
from torch.nn.parallel import DistributedDataParallel

from ..catalogue.layers import set_command_line_registries
from ..devices import Placement, resolve_device, resolve_dtype
from ..errors import ZooError
from .job import TrainingJob
from .run import train_variant

# Set for each worker's `zoo train`: it runs as one process of a data-parallel run (`run_worker`).
TORCHRUN_WORKER = "ZOO_TORCHRUN_WORKER"
PEER_GONE = 3  # a worker's exit status when a collective failed because another process died


class DataParallelPlacement(Placement):
    """One process of a data-parallel run: its rank's share of every batch, on
    its device, with gradients averaged over all processes by DDP."""

    def __init__(self, device, dtype, rank: int, world_size: int):
        super().__init__(device, dtype)
        self.rank, self.world_size = rank, world_size

    def prepare(self, network):
        network.to(self.device)
        # Buffers are fixed tables (position frequencies) built alike everywhere:
        # nothing to broadcast at each step.
        ids = [self.device.index] if self.device.type == "cuda" else None
        return DistributedDataParallel(network, device_ids=ids, forward_sync_buffers=False)

    def local_batch(self, inputs, targets):
        rows = inputs.shape[0] // self.world_size  # train_variant refuses batches that do not split evenly
        share = slice(self.rank * rows, (self.rank + 1) * rows)
        return self.to_device(inputs[share]), self.to_device(targets[share])

    def reported_loss(self, loss) -> float:
        total = loss.detach().float().clone()
        dist.all_reduce(total)  # Gloo has no AVG: sum, then divide
        return total.item() / self.world_size


def worker_main(argv: list[str] | None = None) -> int:
    """A worker process started by torchrun by hand, given `zoo train`'s arguments:
    it becomes `zoo train` with them (the command line is the CLI's to read),
    which, started as a worker, runs `run_worker`."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        _check_torchrun()
    except ZooError as exc:
        print(f"zoo: error: {exc}", file=sys.stderr)
        return 1
    os.execve(sys.executable, _worker_command(argv), {**os.environ, TORCHRUN_WORKER: "1"})
    return 1  # not reached: execve replaces this process


def _worker_command(argv: list[str]) -> list[str]:
    return [sys.executable, "-m", "zoo_core.cli", "train", *argv]


def _check_torchrun() -> None:
    rank, world_size = _rank()
    if rank < 0 or world_size < 1:
        raise ZooError(
            "zoo_core.training.distributed is a torchrun worker: start it with `torchrun -m zoo_core.training.distributed NAME ...` "
            "or `zoo train NAME --nproc-per-node N`"
        )


def run_worker(job: TrainingJob, registries: list[Path], debug: bool) -> int:
    """This process's share of ``job``, in the data-parallel run torchrun started;
    rank 0 says what was trained. A mistake is one line (``debug``: the traceback)."""
    set_command_line_registries(registries)  # as `zoo train` does: --registry adds and redirects --publish
    rank, world_size = _rank()
    try:
        _check_torchrun()
        card, registry_file = _train_share(job, rank, world_size)
    except ZooError as exc:
        if debug:
            raise
        print(f"zoo: error: {exc}", file=sys.stderr)
        return 1
    except (torch.distributed.DistError, RuntimeError) as exc:
        # Another process died mid-collective; the launcher names it. A failure
        # of this process's own is still shown in full.
        if debug or not _peer_gone(exc):
            raise
        return PEER_GONE
    except KeyboardInterrupt:
        return 130
    if rank == 0:
        metrics = card.metrics
        print(
            f"{card.name}: train {metrics.train_loss:.4f}, validation {metrics.validation_loss:.4f} nats/token after "
            f"{card.recipe.steps} steps on {world_size} process{'es' if world_size > 1 else ''} ({metrics.training_seconds:.0f} s, "
            f"{metrics.tokens_per_second:,.0f} tokens/s)\n  card in {registry_file}"
        )
    return 0


def _rank() -> tuple[int, int]:
    """This process's rank and the number of processes, as torchrun sets them (-1, 0 outside it)."""
    return int(os.environ.get("RANK", -1)), int(os.environ.get("WORLD_SIZE", 0))


def _train_share(job: TrainingJob, rank: int, world_size: int):
    """`train_variant` with this process's placement, in a process group for the run's lifetime."""
    device = resolve_device(job.device)
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    elif device.type != "cpu":
        raise ZooError(f"data-parallel training runs on CPUs (Gloo) or CUDA GPUs (NCCL), not {device.type}")
    placement = DataParallelPlacement(device, resolve_dtype(job.dtype, device), rank, world_size)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    try:
        trained = train_variant(replace(job, placement=placement))
        # Leave together: no rank tears its Gloo connections down while
        # another still works. Once in CI, rank 1 aborted at exit ("terminate
        # called without an active exception") while rank 0 was still writing
        # the card.
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return trained


def _peer_gone(exc: BaseException) -> bool:
    text = str(exc).lower()
    return any(
        sign in text
        for sign in (
            "connection closed by peer",
            "connection reset",
            "broken pipe",
            "socket closed",
            "timed out",
            "nccl",
            "closed by peer",
        )
    )


def launch(
    worker_argv: list[str],
    *,
    nproc_per_node: int,
    nnodes: int = 1,
    node_rank: int | None = None,
    rdzv_endpoint: str | None = None,
    state_path: Path | None = None,
    debug: bool = False,
) -> int:
    """Run ``worker_argv`` (a `zoo train` command line without the launch options)
    on ``nproc_per_node`` processes here, as one of ``nnodes`` machines, through
    torchrun's launcher. A failed process becomes one ZooError naming it."""
    if nproc_per_node < 1 or nnodes < 1:
        raise ZooError("--nproc-per-node and --nnodes must be at least 1")
    if nnodes > 1 and (node_rank is None or rdzv_endpoint is None):
        raise ZooError(
            "with --nnodes above 1, give every machine --node-rank R (0 to nnodes-1) and the same --rdzv-endpoint HOST:PORT"
        )
    if node_rank is not None and not 0 <= node_rank < nnodes:
        raise ZooError(f"--node-rank must be between 0 and {nnodes - 1}, not {node_rank}")
    launcher = ["--nproc-per-node", str(nproc_per_node), "--nnodes", str(nnodes), "--max-restarts", "0"]
    if rdzv_endpoint is None:  # what torchrun --standalone does: a private rendezvous on a free local port
        launcher += ["--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0", "--rdzv-id", uuid.uuid4().hex]
    else:  # the static rendezvous: rank 0's machine listens on HOST:PORT, the others join it
        launcher += ["--node-rank", str(node_rank or 0), "--rdzv-endpoint", rdzv_endpoint]
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # torchrun's own default, without its warning
    # The workers are `zoo train` itself, told by TORCHRUN_WORKER (which they inherit) that they are workers.
    arguments = get_args_parser().parse_args([*launcher, *_worker_command(worker_argv)[1:]])
    if arguments.master_port is None:  # as torchrun's run() sets it; only the static rendezvous reads it
        arguments.master_port = 29500
    config, command, command_args = config_from_args(arguments)
    if not debug:
        _quiet_launcher_logs()
    os.environ[TORCHRUN_WORKER] = "1"
    try:
        elastic_launch(config, command)(*command_args)
    except SignalException as exc:  # Ctrl-C or a scheduler's SIGTERM: the agent has stopped the workers
        # Ctrl-C reaches every process of the terminal's group, and rank 0 says where its
        # state is; a SIGTERM (a scheduler's) reaches only this one, which says it instead.
        if exc.sigval != signal.SIGINT and state_path is not None and state_path.exists():
            print(
                f"\nstopped by {exc.sigval.name}; the same command with --resume continues from the state in {state_path}",
                file=sys.stderr,
            )
        raise KeyboardInterrupt from None
    except ChildFailedError as exc:
        line = _failure_line(exc, state_path)
        if line is None:
            return 1  # a worker has already said what was wrong, in its one line
        raise ZooError(line) from exc
    finally:
        del os.environ[TORCHRUN_WORKER]  # this process is the launcher, not a worker
    return 0


def _quiet_launcher_logs() -> None:
    """torchrun's agent logs every step of its life on stderr; the launcher
    reports what matters itself, in one line (`--debug` keeps the logs)."""
    for name in list(logging.root.manager.loggerDict):
        if name.startswith("torch.distributed"):
            logging.getLogger(name).setLevel(logging.CRITICAL)


def _failure_line(exc, state_path: Path | None) -> str | None:
    failures = exc.failures
    # The cause, not its echoes: processes that stopped only because a peer had gone come last.
    rank, failure = min(failures.items(), key=lambda item: (item[1].exitcode == PEER_GONE, item[1].timestamp))
    if failure.exitcode == 1:
        return None
    if failure.exitcode < 0:
        what = f"was killed by {signal.Signals(-failure.exitcode).name}"
    else:
        what = f"exited with status {failure.exitcode}"
    line = f"process {rank} of the data-parallel run (pid {failure.pid}) {what}; the whole run stopped"
    if state_path is not None and state_path.exists():
        line += f"; the last saved state is in {state_path}: the same command with --resume continues"
    return line


if __name__ == "__main__":
    sys.exit(worker_main())
