"""Whether a trained network deploys in a format, and how it behaves there.

`eas verify STUDY --deploy pte` hands each retrained front member to `check_deployable`: the
network is written in the format (and its int8 twin where the format has one, calibrated on
training images as `eas train` does), loaded in the format's own runtime, run on validation
images and compared with PyTorch's outputs (top-1 agreement, largest logit difference), timed
there one image at a time at the study's runtime threads, and weighed (file bytes). A converter
or runtime that fails makes the member not deployable, with the reason; so does a float file
whose answers differ from PyTorch's on more than 1% of the images.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from eas.deploy.export import failure
from eas.deploy.formats import DeployFormat
from eas.deploy.handover import CHECK_IMAGES, agreement, check_images, torch_outputs
from eas.deploy.quantize import calibration_images

MIN_FLOAT_AGREEMENT = 0.99  # float files differ from PyTorch by rounding only: a top-1 flip is rare


def check_deployable(model: torch.nn.Module, task, deploy_format: DeployFormat, threads: int = 1,
                     images: int = CHECK_IMAGES) -> dict:
    """{"format", "deployable", "reason", "float": figures, "int8": figures} for `model`."""
    model = model.cpu().eval().to(memory_format=torch.contiguous_format)
    x = check_images(task, images)
    expected = torch_outputs(model, x)
    result: dict = {"format": deploy_format.name, "threads": threads, "images": len(x)}
    variants = {"float": (deploy_format.file, lambda path: deploy_format.write(model, x[:2], path))}
    if deploy_format.int8_file and deploy_format.write_int8:
        write_int8 = deploy_format.write_int8
        variants["int8"] = (deploy_format.int8_file, lambda path: write_int8(
            model, torch.from_numpy(calibration_images(task.train_x)), path))
    with tempfile.TemporaryDirectory(prefix="eas-deploy-") as folder:
        for variant, (file, write) in variants.items():
            path = Path(folder) / file
            try:
                write(path)
                figures = agreement(expected, deploy_format.run(path, x, threads))
                figures["latency_ms"] = deploy_format.latency_ms(path, x[:1], threads)
                figures["bytes"] = path.stat().st_size
            except Exception as error:  # a converter or runtime that cannot take this network: the finding
                figures = {"failed": failure(error)}
            result[variant] = figures
    floating = result["float"]
    if "failed" in floating:
        result["deployable"], result["reason"] = False, floating["failed"]
    elif floating["top1_agreement"] < MIN_FLOAT_AGREEMENT:
        result["deployable"] = False
        result["reason"] = (f"its answers differ from PyTorch's on {1 - floating['top1_agreement']:.1%} of "
                            f"{floating['images']} images (largest logit difference {floating['max_abs_diff']:.3g})")
    else:
        result["deployable"], result["reason"] = True, None
    return result
