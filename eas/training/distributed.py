"""Data-parallel `eas train` on several processes or machines, through torchrun.

`eas train DIR --nproc N` starts torchrun, which starts N workers per machine (gloo on CPU,
NCCL on CUDA) and restarts all of them from the last checkpoint when one dies
(`--max-restarts`). Every worker runs the same training loop as a single process
(eas.training.full) with a Group that says who it is:

- the same global batch: every worker draws the same shuffled batch of `batch_size` images
  and trains on its share of it (every world-th image); DDP averages the gradients, so a step
  equals one process's step on the whole batch (BatchNorm statistics are per worker, as
  usual with DDP);
- checkpoints and weights are written by worker 0 only, after every worker has reached the
  same step; decisions that depend on a clock (time to checkpoint) are taken by worker 0 and
  shared, so no worker waits in a collective the others skip;
- energy: each worker's meter reading is summed over all workers (CPU time, or each GPU's
  NVML counter); a counter that covers a whole machine (RAPL) is counted once per machine.

Machines share the export folder (a network file system) so that a restart resumes from the
one checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from eas.errors import UserError


@dataclass
class Group:
    """This process's place among the training processes; one process alone by default."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    restarts: int = 0

    @property
    def leader(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_environment(cls, cuda: bool) -> Group:
        """Join the process group torchrun described in the environment."""
        group = cls(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"]),
                    int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)))
        # After a restart, the store still holds the previous attempt's addresses, and a worker
        # that reads them connects to a dead peer ("Connection refused"): each attempt gets its
        # own key prefix.
        agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), group.world,
                              is_master=group.leader and not agent_store, timeout=timedelta(minutes=5))
        dist.init_process_group("nccl" if cuda else "gloo", store=dist.PrefixStore(f"eas-{group.restarts}", store),
                                rank=group.rank, world_size=group.world, timeout=timedelta(minutes=5))
        return group

    def share(self, index):
        """This worker's images of a global batch."""
        return index[self.rank::self.world]

    def wrap(self, model, device):
        if self.world == 1:
            return model

        return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)

    def total(self, value: float) -> float:
        """The sum of `value` over all workers."""
        if self.world == 1:
            return value

        tensor = torch.tensor([value], dtype=torch.float64)
        dist.all_reduce(tensor)
        return float(tensor.item())

    def agree(self, flag: bool) -> bool:
        """Worker 0's `flag`, on every worker."""
        if self.world == 1:
            return flag

        tensor = torch.tensor([int(flag)])
        dist.broadcast(tensor, 0)
        return bool(tensor.item())

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def close(self) -> None:
        if self.world > 1:
            dist.destroy_process_group()


def energy_share(joules: float, source: str, group: Group) -> float:
    """What this worker adds to the total: a machine-wide counter is read by every worker on the
    machine, so only the first worker of each machine counts it."""
    return joules if source != "rapl" or group.local_rank == 0 else 0.0


def check_launch(nproc: int, nnodes: int, rdzv_endpoint: str | None, max_restarts: int) -> None:
    if not 1 <= nproc <= 1024:
        raise UserError(f"--nproc must be 1..1024 processes per machine (got {nproc})")
    if nproc > 1:
        cuda = torch.cuda.is_available()
        present = torch.cuda.device_count() if cuda else os.cpu_count() or 1
        if nproc > present:
            raise UserError(f"--nproc {nproc}: this machine has {present} {'GPUs' if cuda else 'CPU cores'}; "
                            "more processes than that only wait for each other")
    if not 1 <= nnodes <= 1024:
        raise UserError(f"--nnodes must be 1..1024 (got {nnodes})")
    if nnodes > 1 and not rdzv_endpoint:
        raise UserError("--nnodes above 1 needs --rdzv-endpoint HOST:PORT (the same on every machine)")
    if rdzv_endpoint is not None:
        host, _, port = rdzv_endpoint.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise UserError(f"--rdzv-endpoint must be HOST:PORT (got {rdzv_endpoint!r})")
    if not 0 <= max_restarts <= 100:
        raise UserError(f"--max-restarts must be 0..100 (got {max_restarts})")


def launch(job: dict, nproc: int, nnodes: int = 1, rdzv_endpoint: str | None = None, max_restarts: int = 3) -> int:
    """Run `job` (train_exported's arguments) on nproc x nnodes workers; torchrun's exit code."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
               "--max-restarts", str(max_restarts), "--monitor-interval", "1"]
    if rdzv_endpoint:
        command += ["--nnodes", str(nnodes), "--rdzv-backend", "c10d", "--rdzv-endpoint", rdzv_endpoint,
                    "--rdzv-id", "eas-" + hashlib.sha256(job["folder"].encode()).hexdigest()[:12]]
    else:
        command += ["--standalone"]
    command += ["-m", "eas.training.torchrun_worker", json.dumps(job)]
    # The machine's cores shared among its workers (torchrun would give each one thread and say so).
    threads = os.environ.get("OMP_NUM_THREADS") or str(max(1, (os.cpu_count() or 1) // nproc))
    return subprocess.run(command, env={**os.environ, "OMP_NUM_THREADS": threads}).returncode
