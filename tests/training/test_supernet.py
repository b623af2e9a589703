"""One-shot search: the supernet's weight sharing, its training and files, search with it."""

import json
import os
import random
import signal
import subprocess
import time

import pytest
import torch
from torch.func import functional_call

from eas.arch.elastic import Supernet, sort_channels
from eas.arch.space import load_space
from tests.conftest import EAS, ROOT, assert_user_error, built_once, run_eas

pytestmark = pytest.mark.slow  # agent processes, supernet training: end-to-end


def _random_archs(supernet, count, seed=0):
    rng = random.Random(seed)
    kinds = ["largest", "smallest"] + ["random"] * (count - 2)
    return [supernet.space.arch_from_params(supernet.sample_params(rng, kind)) for kind in kinds]


@pytest.mark.parametrize("space, shape", [("tiny", (1, 28, 28)), ("mobile", (1, 28, 28)), ("hybrid", (3, 32, 32))])
def test_every_subnetwork_runs_on_slices_of_the_shared_tensors(space, shape):
    torch.manual_seed(0)
    supernet = Supernet(load_space(space), shape, 10).eval()
    x = torch.randn(3, *shape)
    for arch in _random_archs(supernet, 8):
        skeleton = supernet.skeleton(arch).eval()
        tensors = supernet.tensors_for(arch, skeleton)
        extracted = supernet.extract(arch).eval()
        assert torch.allclose(functional_call(skeleton, tensors, (x,)), extracted(x), atol=1e-5)
        # a built network of the same genome has exactly these tensors, of these shapes
        assert {k: v.shape for k, v in extracted.state_dict().items()} == {k: v.shape for k, v in tensors.items()}


def test_resolution_is_elastic_every_subnetwork_resizes_its_input_and_shares_the_same_tensors(tmp_path):
    from eas.arch.space import SPACES_DIR

    path = tmp_path / "tiny-res.yaml"
    path.write_text("resolution: [16, 20, 28]\n" + (SPACES_DIR / "tiny.yaml").read_text())
    torch.manual_seed(0)
    supernet = Supernet(load_space(path), (1, 28, 28), 10).eval()
    x = torch.randn(3, 1, 28, 28)
    archs = _random_archs(supernet, 8)
    assert {a.stem.resolution for a in archs} >= {0, 16}  # the largest at 28 px (no resize), the smallest at 16
    for arch in archs:
        extracted = supernet.extract(arch).eval()
        assert torch.allclose(functional_call(supernet.skeleton(arch).eval(), supernet.tensors_for(arch), (x,)),
                              extracted(x), atol=1e-5)


def test_slices_are_leading_channels_and_kernel_centres():
    supernet = Supernet(load_space("mobile"), (1, 28, 28), 10)
    shared = dict(supernet.named_parameters())
    arch = _random_archs(supernet, 2)[1]  # the smallest: kernel 3 where the supernet holds 7
    tensors = supernet.tensors_for(arch)
    placement = supernet.placement(arch)
    stage = placement.stages[2]  # mobile stage 3: kernels 3, 5, 7
    block = sum(arch.stages[i].repeats for i in range(2))
    small = tensors[f"blocks.{block}.depthwise.0.weight"]
    full = shared[f"stages.{stage}.0.depthwise.0.weight"]
    assert small.shape[-1] == 3 and full.shape[-1] == 7
    assert torch.equal(small, full[:small.shape[0], :, 2:5, 2:5])
    project = tensors[f"blocks.{block}.project.0.weight"]
    assert torch.equal(project, shared[f"stages.{stage}.0.project.0.weight"][:project.shape[0], :project.shape[1]])


def test_linear_attention_slices_query_key_and_value_separately():
    supernet = Supernet(load_space("hybrid"), (3, 32, 32), 10)
    arch = _random_archs(supernet, 2)[1]
    tensors = supernet.tensors_for(arch)
    placement = supernet.placement(arch)
    position = next(i for i, s in enumerate(arch.stages) if s.kind == "la")
    block = sum(s.repeats for s in arch.stages[:position])
    name = next(k for k in tensors if k.startswith(f"blocks.{block}.") and k.endswith("attention.qkv.weight"))
    width = arch.stages[position].width
    full = dict(supernet.named_parameters())[f"stages.{placement.stages[position]}.0.1.attention.qkv.weight"]
    big = full.shape[1]
    for part in range(3):  # q, k, v rows of the sub-network = the first `width` rows of each part
        assert torch.equal(tensors[name][part * width:(part + 1) * width], full[part * big:part * big + width, :width])


def test_sorting_channels_keeps_every_function_of_the_largest_network():
    torch.manual_seed(1)
    supernet = Supernet(load_space("hybrid"), (3, 32, 32), 10).eval()
    for module in supernet.modules():  # BatchNorm statistics that are not the identity
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
    largest = _random_archs(supernet, 2)[0]
    x = torch.randn(2, 3, 32, 32)
    before = supernet.extract(largest).eval()(x)
    project = dict(supernet.named_parameters())["stages.1.0.project.0.weight"]
    optimizer = torch.optim.AdamW(supernet.parameters())
    supernet.extract(largest)(x).sum().backward()  # no grads on the supernet: state made by hand below
    optimizer.state[project]["exp_avg"] = project.detach().clone()
    assert sort_channels(supernet, optimizer.state) > 0
    after = supernet.extract(largest).eval()(x)
    assert torch.allclose(before, after, atol=1e-4)
    importance = project.abs().sum(dim=(0, 2, 3))
    assert torch.all(importance[:-1] >= importance[1:])  # most important first
    assert torch.equal(optimizer.state[project]["exp_avg"], project.detach())  # moments moved with them


@pytest.fixture(scope="session")
def trained(tmp_path_factory):
    """A tiny supernet trained on digits by the CLI, with its trust measured on 3 sub-networks;
    trained once for all test processes (tests copy it before changing it)."""
    def train(root):
        result = run_eas("supernet", "train", "--space", "tiny", "--data", "digits", "--steps", "200", "--out",
                         "sn", "--samples", "3", "--trust-subset", "600", "--trust-epochs", "1", cwd=root)
        assert result.returncode == 0, result.stderr

    return built_once(tmp_path_factory, "supernet", train)


def test_training_teaches_the_smallest_and_largest_networks(trained):
    from eas.data.datasets import load_dataset
    from eas.nas.one_shot import inherited_accuracy
    from eas.training.supernet_file import load_supernet

    stored = load_supernet(trained / "sn")
    task = load_dataset("digits", seed=0)
    for arch in _random_archs(stored.supernet, 2):  # chance is 10%
        assert inherited_accuracy(arch, stored, task, "cpu") > 0.6, arch.encode()
    shown = run_eas("supernet", "show", "sn", "--json", cwd=trained)
    document = json.loads(shown.stdout)
    assert document["trained"]["steps"] == 200 and document["trust"]["n"] == 3
    assert all(0 < s["standalone_accuracy"] <= 1 for s in document["trust"]["samples"])
    assert "Kendall tau" in run_eas("supernet", "show", "sn", cwd=trained).stdout


def test_damaged_supernet_files_are_refused(trained, tmp_path):
    import shutil

    for damage in ("truncate", "edit"):
        copy = tmp_path / damage
        shutil.copytree(trained / "sn", copy)
        if damage == "truncate":
            path = copy / "supernet.safetensors"
            path.write_bytes(path.read_bytes()[:-100])
            expected = "SHA-256"
        else:
            path = copy / "supernet.json"
            document = json.loads(path.read_text())
            document["data"] = "fashion-mnist"
            path.write_text(json.dumps(document))
            expected = "edited"
        assert_user_error(run_eas("supernet", "show", str(copy)), expected)
    assert_user_error(run_eas("supernet", "show", str(tmp_path / "missing")), "does not exist")


def test_search_refuses_a_supernet_of_another_space_or_data(trained):
    env = {"EAS_STUDIES_DIR": str(trained / "other-studies")}
    assert_user_error(run_eas("search", "--space", "mobile", "--data", "digits", "--supernet", "sn", "--trials", "1",
                              cwd=trained, env=env), "trained for space")
    assert_user_error(run_eas("search", "--space", "tiny", "--data", "fashion-mnist", "--supernet", "sn",
                              "--trials", "1", cwd=trained, env=env), "trained on data digits")
    # another split would validate on images the supernet trained on
    assert_user_error(run_eas("search", "--space", "tiny", "--data", "digits", "--seed", "1", "--supernet", "sn",
                              "--trials", "1", cwd=trained, env=env), "--seed 0")
    assert not (trained / "other-studies").exists() or not list((trained / "other-studies").iterdir())


def test_one_shot_search_inherits_marks_and_guards_its_supernet(trained, tmp_path):
    import shutil

    shutil.copytree(trained / "sn", tmp_path / "sn")
    env = {"EAS_STUDIES_DIR": str(tmp_path / "studies")}
    search = ["search", "--space", "tiny", "--data", "digits", "--supernet", "sn", "--study", "os", "--quiet"]
    result = run_eas(*search, "--trials", "6", "--sampler", "random", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    shown = run_eas("show", "os", cwd=tmp_path, env=env)
    assert "inherited from supernet" in shown.stdout and "% inherited" in shown.stdout
    trials = json.loads(run_eas("show", "os", "--json", cwd=tmp_path, env=env).stdout)
    assert trials["pareto"] and all(t["fidelity"]["kind"] == "inherited" for t in trials["pareto"])
    # verify: two steps from the inherited weights keep what the supernet taught; from scratch they cannot
    verified = {init: json.loads(run_eas("verify", "os", "--top", "1", "--epochs", "0.5", "--subset", "300",
                                         "--seeds", "1", "--baselines", "none", "--init", init, "--json",
                                         cwd=tmp_path, env=env).stdout) for init in ("scratch", "inherited")}
    accuracy = {init: v["members"][0]["verified_accuracy"] for init, v in verified.items()}
    assert verified["inherited"]["init"] == "inherited" and verified["inherited"]["steps"] == 2
    assert accuracy["inherited"] > accuracy["scratch"] + 0.2, accuracy
    # the supernet changes: resuming the study on it is refused, and nothing is written
    changed = run_eas("supernet", "train", "--space", "tiny", "--data", "digits", "--steps", "5", "--out", "sn",
                      "--samples", "0", "--restart", cwd=tmp_path)
    assert changed.returncode == 0, changed.stderr
    before = (tmp_path / "studies" / "os.db").read_bytes()
    assert_user_error(run_eas(*search, "--trials", "2", cwd=tmp_path, env=env), "different supernet")
    assert_user_error(run_eas("worker", "--study", "os", "--trials", "1", cwd=tmp_path, env=env), "changed since")
    assert (tmp_path / "studies" / "os.db").read_bytes() == before


def _checkpoint_step(folder) -> int:
    try:
        return json.loads((folder / "checkpoint" / "state.json").read_text())["progress"]["step"]
    except (OSError, ValueError, KeyError):
        return 0


def test_kill_9_loses_only_the_steps_since_the_last_checkpoint(tmp_path):
    train = ["supernet", "train", "--space", "tiny", "--data", "digits", "--steps", "60", "--checkpoint-every", "20",
             "--samples", "0"]
    whole = run_eas(*train, "--out", "whole", cwd=tmp_path)
    assert whole.returncode == 0, whole.stderr
    process = subprocess.Popen([*EAS, *train, "--out", "killed"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 240
    while _checkpoint_step(tmp_path / "killed") < 20 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    saved = _checkpoint_step(tmp_path / "killed")
    assert saved in (20, 40), saved  # killed after a checkpoint, before the end
    resumed = run_eas(*train, "--out", "killed", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming at step {saved} of 60" in resumed.stderr
    weights = [json.loads((tmp_path / f / "supernet.json").read_text())["weights_sha256"] for f in ("whole", "killed")]
    assert weights[0] == weights[1]  # the resumed run took exactly the uninterrupted run's steps
    assert not (tmp_path / "killed" / "checkpoint").exists()


def test_ctrl_c_stops_at_once_and_the_same_command_resumes(tmp_path):
    train = ["supernet", "train", "--space", "tiny", "--data", "digits", "--steps", "60", "--checkpoint-every", "20",
             "--samples", "0", "--out", "sn"]
    # a suite started in the background inherits SIGINT ignored: the child gets Ctrl-C as a terminal gives it
    process = subprocess.Popen([*EAS, *train], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 240
    while _checkpoint_step(tmp_path / "sn") < 20 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("interrupted at step") and "run the same command to resume" in last
    assert "Traceback" not in stderr
    saved = _checkpoint_step(tmp_path / "sn")
    assert f"the checkpoint holds step {saved}" in last and saved >= 20
    resumed = run_eas(*train, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming at step {saved} of 60" in resumed.stderr
    assert json.loads((tmp_path / "sn" / "supernet.json").read_text())["trained"]["steps"] == 60
