"""Export a chosen architecture for training elsewhere.

Writes, into a fresh folder (nothing is overwritten unless forced, and nothing is left half
written: files go to a temporary folder that replaces the target at the end):
- arch.json: genome, space, task shape, metrics with their sources, provenance, checks;
- model.py: standalone PyTorch code (eas/blocks.py verbatim + this arch), needs only torch;
- model.pt2: torch.export program (initial weights);
- model.onnx: when the `export` extra is installed, checked against PyTorch with onnxruntime;
- model.pte, model.ort: the deployment formats asked for (eas.deploy.formats), each checked in its
  own runtime; `eas train` rewrites them from the trained weights (and adds model.int8.pte).
Parameter and MAC counts of every artifact are checked against the numbers in the study.
"""

from __future__ import annotations

import errno
import glob
import importlib.util
import json
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from eas.arch.bounds import check_buildable, check_classes, check_shape
from eas.arch.genome import Arch
from eas.arch.profile import profile
from eas.deploy.arch_files import ARCH_FORMAT, arch_document, standalone_source
from eas.deploy.formats import FORMATS, DeployFormat
from eas.errors import UserError
from eas.jsonfile import read_json
from eas.lazy import available, lazy_import
from eas.measure.runtime import to_onnx

onnxruntime = lazy_import("onnxruntime")


def load_standalone(path: Path):
    """Import an exported model.py by path (as a user without EAS would)."""
    spec = importlib.util.spec_from_file_location(f"eas_exported_{abs(hash(str(path)))}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# What a previous export folder may hold: the export itself and what `eas train` adds to it.
EXPORT_FILES = {"arch.json", "model.py", "model.pt2", "model.onnx", "model.onnx.data", "model.int8.onnx",
                "inherited.safetensors", "model.pte", "model.int8.pte", "model.ort", "model.int8.ort"}
TRAINED_FILES = {"checkpoint", "checkpoint.old", "checkpoint.partial", "best.safetensors", "model.safetensors",
                 "report.json", "best.safetensors.partial", "model.safetensors.partial", "model.partial.onnx",
                 "model.partial.pt2", "arch.json.partial", "report.json.partial", "model.partial.pte",
                 "model.int8.partial.pte", "model.partial.ort", "model.partial.source.onnx",
                 ".eas-train.lock"}  # eas.training.folder_lock.LOCK_FILE


def _is_previous_export(folder: Path, derived_from: Path | None = None) -> bool:
    """An EAS export and nothing else; with `derived_from`, one compressed from that folder."""
    names = {p.name for p in folder.iterdir()}
    if "arch.json" not in names or not names <= EXPORT_FILES | TRAINED_FILES:
        return False
    try:
        document = read_json(folder / "arch.json")
        if derived_from is not None:
            source = (document.get("derived_from") or {}).get("folder")
            return source == str(Path(derived_from).resolve()) and document.get("format") == ARCH_FORMAT
        return document.get("format") == ARCH_FORMAT
    except (OSError, ValueError, AttributeError, TypeError):
        return False


def prepare_output(out: Path, force: bool, derived_from: Path | None = None) -> None:
    """Refuse an output folder that cannot be written, or whose contents would be lost: without
    --force only a new or empty folder; with --force also a folder holding a previous EAS
    export and nothing else (for a compressed model: an earlier output of the same source);
    never the current folder or one of its parents, and never the source or a folder that
    holds it or lies in it. Leftovers of a killed earlier run are cleaned up first."""
    if not str(out) or Path.cwd().resolve().is_relative_to(out.resolve()):
        raise UserError(f"--out must name a folder to write, not the current folder or one of its parents "
                        f"({str(out)!r})")
    if derived_from is not None:
        source, target = Path(derived_from).resolve(), out.resolve()
        if target.is_relative_to(source) or source.is_relative_to(target):
            raise UserError(f"--out {out} overlaps the export it compresses ({derived_from}); choose another folder")
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} exists and is not a folder")
    _remove_leftovers(out)
    if out.exists() and any(out.iterdir()):
        if not force:
            raise UserError(f"{out} exists and is not empty; use --force to replace a previous export")
        if not _is_previous_export(out, derived_from):
            what = f"an earlier compressed model of {derived_from}" if derived_from else "a previous EAS export"
            raise UserError(f"--force replaces only a folder that holds {what} and nothing else; "
                            f"{out} holds other files, so it was left untouched")
    parent = out.resolve().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)  # `--out models/knee` in a fresh clone: models/ is made
    except OSError as error:
        raise UserError(f"cannot make folder {parent}: {error.strerror or error}") from None
    try:
        probe = tempfile.TemporaryDirectory(dir=parent, prefix=f".{out.name}.check-")
        probe.cleanup()
    except OSError as error:
        raise UserError(f"cannot write to {parent}: {error.strerror}") from None


def _scratch(out: Path, kind: str) -> Path:
    """A new hidden folder beside `out`, named with this process's id (see _remove_leftovers)."""
    return Path(tempfile.mkdtemp(dir=out.resolve().parent, prefix=f".{out.name}.{kind}-{os.getpid()}-"))


def _remove_leftovers(out: Path) -> None:
    """Scratch folders of an export or compress that was killed (its process is gone): a
    half-written one is removed; a previous export moved aside goes back when `out` is missing."""
    parent = out.resolve().parent
    if not parent.is_dir():
        return
    for kind in ("tmp", "previous"):
        for scratch in parent.glob(f".{glob.escape(out.name)}.{kind}-*-*"):
            pid = scratch.name[len(f".{out.name}.{kind}-"):].split("-", 1)[0]
            if not pid.isdigit() or _alive(int(pid)):
                continue
            if kind == "previous" and not out.exists():
                scratch.rename(out)
            else:
                shutil.rmtree(scratch, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def replace_folder(work: Path, out: Path, force: bool) -> None:
    """Put the finished `work` folder at `out`. Without --force `out` must still be new or empty
    (another export may have written it meanwhile); with it, a previous export is moved aside
    first and removed only once the new one is in place; if that fails, it is put back."""
    if not force or not out.exists():
        try:
            os.rename(work, out)  # atomic; fails when `out` became a non-empty folder meanwhile
        except OSError as error:
            if error.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                raise UserError(f"{out} was written by someone else meanwhile; use --force to replace it") from None
            raise
        return
    aside = _scratch(out, "previous")
    aside.rmdir()
    out.rename(aside)
    try:
        work.rename(out)
    except OSError:
        aside.rename(out)
        raise
    shutil.rmtree(aside, ignore_errors=True)


@contextmanager
def writing_folder(out: Path, force: bool, derived_from: Path | None = None) -> Iterator[Path]:
    """A scratch folder beside `out` that becomes `out` when the block completes; removed if not."""
    prepare_output(out, force, derived_from)
    work = _scratch(out, "tmp")
    try:
        yield work
        replace_folder(work, out, force)
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)


def export_trial(record, settings: dict, study_name: str, out: Path, force: bool = False,
                 onnx: bool = True, formats: list[str] | None = None) -> dict:
    """Write the artifacts of a stored trial into `out`, with the deployment formats asked for
    (eas.deploy.formats: "pte", "ort"); returns what arch.json holds."""
    arch = Arch.decode(record.genome)
    input_shape = check_shape(settings["input_shape"], "stored input shape")
    num_classes = check_classes(settings["num_classes"], "stored number of classes")
    check_buildable(arch, input_shape, num_classes)
    stored = record.metrics
    with writing_folder(out, force) as work:
        (work / "model.py").write_text(standalone_source(arch, input_shape, num_classes))
        module = load_standalone(work / "model.py")
        torch.manual_seed(0)
        model = module.build_model().eval()
        cost = profile(model, input_shape)
        checks = {"params": cost.params, "macs": cost.macs}
        if (cost.params, cost.macs) != (stored.get("params"), stored.get("macs")):
            raise UserError(f"trial {record.number}: its genome builds {cost.params:,} params / {cost.macs:,} MACs, "
                            f"but the study stored {stored.get('params')} / {stored.get('macs')}; not exported")
        example = torch.randn(2, *input_shape)
        checks["pt2_params"], checks["pt2_max_abs_diff"] = _export_pt2(model, example, work / "model.pt2")
        if onnx:
            checks.update(export_onnx(model, example, work / "model.onnx"))
        for name in formats or []:
            checks.update(export_format(FORMATS[name], model, example, work))
        document = arch_document(record, settings, study_name, checks)
        document["formats"] = list(formats or [])
        (work / "arch.json").write_text(json.dumps(document, indent=2, default=str))
    return document


def export_format(deploy_format: DeployFormat, model, example, folder: Path) -> dict:
    """One deployment format written from `model` and checked against it in its own runtime; a
    converter that fails leaves no file, only its reason."""
    path = folder / deploy_format.file
    try:
        deploy_format.write(model, example, path)
        probe = torch.randn(3, *example.shape[1:])
        with torch.no_grad():
            expected = model(probe).numpy()
        return {f"{deploy_format.name}_max_abs_diff": float(abs(deploy_format.run(path, probe) - expected).max())}
    except Exception as error:  # a converter that cannot take this network: the reason is the result
        path.unlink(missing_ok=True)
        return {deploy_format.name: f"not written: {failure(error)}"}


def failure(error: BaseException) -> str:
    """An exporter's or converter's error as one short line."""
    text = str(error).splitlines()[0][:200] if str(error) else ""
    return f"{type(error).__name__}: {text}"


def export_pt2_file(model, example, path: Path) -> None:
    """model.pt2: the torch.export program of `model` as it is now (its weights inside), taking
    any batch size as model.onnx does."""
    batch = torch.export.Dim("batch", min=1, max=2**16)
    # traced at batch 2: at 1, a network that resizes its input (stem `i`) has the batch fixed to 1
    example = example[:1].expand(2, *example.shape[1:])
    torch.export.save(torch.export.export(model, (example,), dynamic_shapes=({0: batch},)), str(path))


def export_onnx_file(model, example, path: Path) -> None:
    """model.onnx: written by the exporter the search timed its latency with."""
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    to_onnx(model, example, str(path))


def _export_pt2(model, example, path: Path) -> tuple[int, float]:
    """Saves the program; returns its parameter count (buffers excluded) and the max output
    difference of the reloaded program."""
    export_pt2_file(model, example, path)
    reloaded = torch.export.load(str(path))
    params = sum(reloaded.state_dict[name].numel() for name in reloaded.graph_signature.parameters)
    with torch.no_grad():
        return params, float((reloaded.module()(example) - model(example)).abs().max())


def export_onnx(model, example, path: Path) -> dict:
    """model.onnx, written by the exporter the search timed its latency with, and checked against
    the PyTorch model in ONNX Runtime."""
    if not available("onnxruntime"):
        return {"onnx": "skipped: install onnxruntime (pip install onnxruntime)"}
    export_onnx_file(model, example, path)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    probe = torch.randn(3, *example.shape[1:])
    with torch.no_grad():
        expected = model(probe).numpy()
    got = session.run(None, {"input": probe.numpy()})[0]
    return {"onnx_max_abs_diff": float(abs(got - expected).max())}
