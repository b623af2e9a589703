"""One worker process that torchrun starts for `eas train --nproc N`: train the job given as
JSON on argv (eas.training.distributed.launch writes it)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from eas import interrupt
from eas.application import prepare_process
from eas.data.datasets import load_dataset
from eas.errors import UserError
from eas.training.full import TrainPlan, train_exported


def main() -> None:
    prepare_process()
    interrupt.install()
    job = json.loads(sys.argv[1])
    try:
        task = load_dataset(job["data"], seed=job["plan"]["seed"])
        train_exported(Path(job["folder"]), task, TrainPlan(**job["plan"]), job["device"], job["meter"],
                       job["grid"], job["pue"], show_progress=job["show_progress"], distributed=True)
    except UserError as error:
        print(f"eas: error: {error}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
