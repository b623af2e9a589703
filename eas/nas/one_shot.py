"""One-shot evaluation: a candidate inherits its weights from a trained supernet instead of
training, and how far that ranking can be trusted.

An inherited accuracy is its own fidelity ("inherited"): the candidate's network gets its slices
of the supernet's tensors, its BatchNorm statistics recalibrated on `RECALIBRATION_IMAGES` training
images (the supernet's running statistics belong to no single sub-network), and is validated on
the first `VALIDATION_IMAGES` validation images. Hardware costs are counted and measured exactly
as for any candidate.

Trust: Kendall tau between the inherited accuracy and the accuracy of the same sub-network trained
alone at the search's full fidelity, over random sub-networks; kept in `trust.json` beside the
supernet, with the supernet hash it was measured on, each sub-network stored as soon as it is done.
"""

from __future__ import annotations

import json
import math
import os
import random
from collections.abc import Callable
from pathlib import Path

from eas.errors import UserError
from eas.jsonfile import JsonFileError, read_json
from eas.nas.candidate import Candidate
from eas.pareto import kendall_tau
from eas.training.proxy import Fidelity
from eas.training.step import recalibrate_batchnorm
from eas.training.supernet_file import StoredSupernet, load_supernet

RECALIBRATION_IMAGES = 512
VALIDATION_IMAGES = 2000
TRUST = "trust.json"


def open_for_study(record: dict) -> StoredSupernet:
    """The supernet a one-shot study was created with; refused when it changed or went away."""
    stored = load_supernet(Path(str(record.get("path"))))
    if stored.hash != record.get("hash"):
        raise UserError(f"supernet {stored.folder} changed since the study was created (hash "
                        f"{stored.hash[:12]}, the study's {str(record.get('hash'))[:12]}): put the original back, "
                        "or start a new study")
    return stored


def inherited_fidelity(stored: StoredSupernet) -> dict:
    """What an inherited accuracy is, stored with each result in place of a training fidelity."""
    return {"kind": "inherited", "supernet": str(stored.folder), "supernet_hash": stored.hash[:16],
            "recalibration_images": RECALIBRATION_IMAGES, "val_images": VALIDATION_IMAGES}


def inherit(candidate: Candidate, stored: StoredSupernet) -> None:
    """Give the candidate's network its supernet weights and recalibrate its BatchNorm (energy
    and time metered as the candidate's "recalibration")."""
    candidate.metered("recalibration", lambda: load_inherited(candidate, stored.supernet))
    candidate.metrics["fidelity"] = inherited_fidelity(stored)


def load_inherited(candidate: Candidate, supernet) -> None:
    """The candidate's network takes its slices of the supernet's tensors (load_state_dict copies
    them: the supernet is untouched and may go on training) and recalibrates its BatchNorm."""
    # the candidate's own network names every tensor: no meta skeleton needs building
    tensors = supernet.tensors_for(candidate.arch, candidate.model)
    candidate.model.load_state_dict({k: v.detach() for k, v in tensors.items()})
    recalibrate_batchnorm(candidate.model, candidate.task.train_x, images=RECALIBRATION_IMAGES)


def inherited_accuracy(arch, stored: StoredSupernet, task, device: str = "auto", seed: int = 0) -> float:
    candidate = Candidate(arch, task, Fidelity(), device, seed, meter="estimated")
    inherit(candidate, stored)
    return candidate.validate(VALIDATION_IMAGES)["accuracy"]


# -- trust -------------------------------------------------------------------------------------

def read_trust(stored: StoredSupernet) -> dict | None:
    """trust.json when it was measured on this very supernet, else None."""
    path = stored.folder / TRUST
    try:
        trust = read_json(path)
    except (JsonFileError, FileNotFoundError):  # missing or damaged: measured again rather than misread
        return None
    if not isinstance(trust, dict) or trust.get("supernet_hash") != stored.hash or not isinstance(
            trust.get("samples"), list):
        return None
    if not all(isinstance(s, dict) and isinstance(s.get("genome"), str) and all(
            isinstance(s.get(k), (int, float)) and not isinstance(s.get(k), bool)
            for k in ("inherited_accuracy", "standalone_accuracy")) for s in trust["samples"]):
        return None  # damaged by hand: measured again rather than misread
    return {**trust, **trust_summary(trust["samples"])}


def _write_trust(stored: StoredSupernet, trust: dict) -> None:
    partial = stored.folder / (TRUST + ".partial")
    partial.write_text(json.dumps(trust, indent=1))
    os.replace(partial, stored.folder / TRUST)


def trust_summary(samples: list[dict]) -> dict:
    tau = kendall_tau([s["inherited_accuracy"] for s in samples], [s["standalone_accuracy"] for s in samples]) \
        if len(samples) >= 2 else math.nan
    return {"kendall_tau": None if not math.isfinite(tau) else round(tau, 4), "n": len(samples)}


def trust_subnetworks(supernet, samples: int, seed: int = 0) -> list:
    """`samples` distinct random sub-networks, in a fixed order for this seed."""
    rng = random.Random(seed)
    wanted: list = []
    for _ in range(100 * samples):
        if len(wanted) == samples:
            break
        arch = supernet.space.arch_from_params(supernet.sample_params(rng))
        if arch.encode() not in {a.encode() for a in wanted}:
            wanted.append(arch)
    return wanted


def measure_trust(stored: StoredSupernet, task, fidelity: Fidelity, samples: int, seed: int = 0,
                  device: str = "auto", on_sample: Callable[[int, dict], None] | None = None) -> dict:
    """Inherited vs stand-alone accuracy of `samples` distinct random sub-networks (continuing a
    measurement of the same supernet and fidelity that was cut short); the trust document."""
    trust = read_trust(stored)
    if trust is None or trust.get("fidelity") != fidelity.to_dict() or trust.get("seed") != seed:
        trust = {"supernet_hash": stored.hash, "fidelity": fidelity.to_dict(), "seed": seed,
                 "val_images": VALIDATION_IMAGES, "samples": []}
    done = {s["genome"] for s in trust["samples"]}
    for arch in trust_subnetworks(stored.supernet, samples, seed):
        if arch.encode() in done:
            continue
        alone = Candidate(arch, task, fidelity, device, seed, meter="estimated")
        trained = alone.train_segment(fidelity.total_steps(len(task.train_y)))
        if trained.diverged:
            raise UserError(f"sub-network {arch.encode()} diverged when trained alone ({trained.diverged}); "
                            "try a lower learning rate")
        standalone = alone.validate(VALIDATION_IMAGES)["accuracy"]
        sample = {"genome": arch.encode(), "macs": alone.metrics["macs"],
                  "inherited_accuracy": round(inherited_accuracy(arch, stored, task, device, seed), 5),
                  "standalone_accuracy": round(standalone, 5), "standalone_seconds": round(trained.seconds, 2)}
        trust["samples"].append(sample)
        trust.update(trust_summary(trust["samples"]))
        _write_trust(stored, trust)
        if on_sample:
            on_sample(len(trust["samples"]), sample)
    return {**trust, **trust_summary(trust["samples"])}

