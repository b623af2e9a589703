"""A trained supernet on disk: `supernet.safetensors` (the shared tensors, no pickle) and
`supernet.json` (space, data, input shape, recipe, what training cost) with two hashes.

`weights_sha256` is the tensor file's SHA-256 and `hash` the SHA-256 of the JSON document without
itself: a truncated tensor file or a hand-edited description is detected on every load and
refused. Both files are written aside and renamed into place, the description last, so a folder
holds a whole supernet or none. `trust.json` (eas.nas.one_shot) names the hash it measured.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from eas.arch.bounds import check_classes, check_shape
from eas.arch.elastic import Supernet
from eas.arch.space import space_from_definition
from eas.errors import UserError
from eas.jsonfile import read_json

FORMAT = "eas-supernet/1"
WEIGHTS, DESCRIPTION = "supernet.safetensors", "supernet.json"
CHUNK = 1 << 20


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def document_hash(document: dict) -> str:
    body = {k: v for k, v in document.items() if k != "hash"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class StoredSupernet:
    folder: Path
    description: dict
    supernet: Supernet

    @property
    def hash(self) -> str:
        return self.description["hash"]

    @property
    def data(self) -> str:
        return self.description["data"]

    @property
    def seed(self) -> int:
        """The seed of the data split it was trained on (its validation images are held out)."""
        return int(self.description["recipe"]["seed"])


def save_supernet(folder: Path, supernet: Supernet, description: dict) -> dict:
    """Write the tensors, then the description with both hashes; returns the description."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    weights = folder / WEIGHTS
    partial = folder / (WEIGHTS + ".partial")
    save_file({k: v.detach().cpu().contiguous() for k, v in supernet.state_dict().items()}, str(partial))
    document = {**description, "format": FORMAT, "weights_sha256": file_sha256(partial)}
    document["hash"] = document_hash(document)
    os.replace(partial, weights)
    text = folder / (DESCRIPTION + ".partial")
    text.write_text(json.dumps(document, indent=1, sort_keys=True))
    os.replace(text, folder / DESCRIPTION)
    return document


def read_description(folder: Path) -> dict:
    """supernet.json, checked against its own hash and the tensor file's (no tensors loaded)."""
    folder = Path(folder)
    path = folder / DESCRIPTION
    if not folder.is_dir():
        raise UserError(f"supernet {folder} does not exist (train one with `eas supernet train --out {folder}`)")
    if not path.is_file():
        raise UserError(f"{folder} holds no trained supernet ({DESCRIPTION} is missing; an unfinished "
                        "`eas supernet train` resumes when run again)")
    try:
        document = read_json(path)
        if not isinstance(document, dict):
            raise TypeError(f"a {type(document).__name__}, not a mapping")
        if document.get("format") != FORMAT:
            raise ValueError(f"format {str(document.get('format'))[:40]!r}, not {FORMAT}")
    except (OSError, UnicodeDecodeError, ValueError, TypeError) as error:
        raise UserError(f"{path} is not an EAS supernet description ({type(error).__name__}: "
                        f"{str(error)[:120]})") from None
    if document.get("hash") != document_hash(document):
        raise UserError(f"{path} was edited or damaged: its contents no longer match its hash; "
                        "train the supernet again")
    weights = folder / WEIGHTS
    if not weights.is_file() or file_sha256(weights) != document.get("weights_sha256"):
        raise UserError(f"{weights} is missing, truncated or edited: its SHA-256 does not match "
                        f"{DESCRIPTION}; train the supernet again")
    return document


def load_supernet(folder: Path) -> StoredSupernet:
    """The supernet in `folder`, every check passed: hashes, a space that builds, tensors of the
    shapes that space makes."""
    document = read_description(folder)
    try:
        shape = check_shape(document["input_shape"], "supernet input_shape")
        classes = check_classes(document["num_classes"], "supernet num_classes")
        space = space_from_definition(document["space"], source=f"supernet {folder}")
        supernet = Supernet(space, shape, classes)
        supernet.load_state_dict(load_file(str(Path(folder) / WEIGHTS)))
        int(document["recipe"]["seed"])
    except UserError:
        raise
    except (KeyError, TypeError, ValueError, RuntimeError, SafetensorError) as error:
        raise UserError(f"supernet {folder} cannot be read ({type(error).__name__}: "
                        f"{(str(error).splitlines() or [''])[0][:160]})") from None
    return StoredSupernet(Path(folder), document, supernet.eval())


def check_serves(stored: StoredSupernet, space_definition: dict, data: str, input_shape, num_classes: int,
                 seed: int) -> None:
    """Refuse a supernet trained for another space, dataset, input shape or data split, in one line."""
    d = stored.description
    if d["space"] != space_definition:
        raise UserError(f"supernet {stored.folder} was trained for space {d.get('space_name')!r}, not this one; "
                        "train a supernet for this space")
    if d["data"] != data:
        raise UserError(f"supernet {stored.folder} was trained on data {d['data']}, not {data}")
    if tuple(d["input_shape"]) != tuple(input_shape) or d["num_classes"] != num_classes:
        raise UserError(f"supernet {stored.folder} takes input {tuple(d['input_shape'])} with {d['num_classes']} "
                        f"classes, not {tuple(input_shape)} with {num_classes}")
    if stored.seed != seed:  # another split: the search would validate on images the supernet trained on
        raise UserError(f"supernet {stored.folder} was trained on the data split of --seed {stored.seed}; search "
                        f"with --seed {stored.seed}")
