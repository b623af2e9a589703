import json
import subprocess
import sys

import pytest

from tests.conftest import assert_user_error


def test_help_does_not_import_torch():
    code = ("import sys; from typer.testing import CliRunner; from eas.cli import app; "
            "r = CliRunner().invoke(app, ['--help']); assert r.exit_code == 0, r.output; "
            "print('torch' in sys.modules, 'optuna' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_spaces_json_lists_the_builtin_spaces(eas_cli):
    result = eas_cli("spaces", "--json")
    assert result.returncode == 0
    assert {"mobile", "hybrid", "tiny"} <= {s["name"] for s in json.loads(result.stdout)}


def test_spaces_at_an_input_give_each_space_its_cost_ranges(eas_cli):
    from eas.arch.space import load_space

    result = eas_cli("spaces", "--input", "1x28x28", "--classes", "10", "--json")
    assert result.returncode == 0, result.stderr
    tiny = next(s for s in json.loads(result.stdout) if s["name"] == "tiny")
    expected = load_space("tiny").for_task((1, 28, 28)).cost_ranges((1, 28, 28), 10)
    assert {name: tuple(pair) for name, pair in tiny["ranges"].items()} == expected
    shown = eas_cli("spaces", "--input", "1x28x28").stdout
    assert shown.count("int8 SRAM") == 3


def test_arch_sample_prints_valid_genomes_and_is_seeded(eas_cli):
    from eas.arch.genome import Arch

    first = eas_cli("arch", "sample", "--space", "hybrid", "--n", "4", "--seed", "7", "--input", "1x28x28")
    again = eas_cli("arch", "sample", "--space", "hybrid", "--n", "4", "--seed", "7", "--input", "1x28x28")
    lines = first.stdout.split()
    assert first.returncode == 0 and len(lines) == 4 and lines == again.stdout.split()
    assert all(Arch.decode(line).encode() == line for line in lines)


def test_arch_show_json_has_the_profile(eas_cli):
    result = eas_cli("arch", "show", "mobilenet_v2", "--input", "3x224x224", "--classes", "1000", "--json")
    data = json.loads(result.stdout)
    assert (data["params"], data["macs"], data["flops"]) == (3_504_872, 300_774_272, 601_548_544)
    assert sum(layer["macs"] for layer in data["layers"]) == data["macs"]


def test_arch_show_table(eas_cli):
    result = eas_cli("arch", "show", "stem_c8_k3_s1_relu-ds_r1_k3_s2_c16_relu-head_c0_f0_relu_d0",
                     "--input", "1x28x28", "--classes", "10")
    assert result.returncode == 0
    assert "blocks.0.depthwise.0" in result.stdout and "= 2 x MACs" in result.stdout


@pytest.mark.parametrize("args, fragment", [
    (["arch", "sample", "--space", "nope"], "available: hybrid, mobile, tiny"),
    (["arch", "show", "stem_c8_k3_s1_relu-ds_r1_k9_s2_c16_relu-head_c0_f0_relu_d0"], "kernel"),
    (["arch", "show", "stem_c8_k3_s1_relu-ds_r1_kk_s2_c16_relu-head_c0_f0_relu_d0"], "'kk'"),
    (["arch", "show", "resnet50"], "mobilenet_v2"),
    (["arch", "show", "mobilenet_v2", "--input", "3x0x5"], "--input"),
])
def test_bad_input_is_one_line_and_exit_2(eas_cli, args, fragment):
    assert_user_error(eas_cli(*args), fragment)


def test_malformed_space_file_names_the_field(eas_cli, tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("stem: {width: 8, act: relu}\nstages: [{kind: ir, kernel: 4}]\nhead: {}\n")
    assert_user_error(eas_cli("arch", "sample", "--space", str(path)), "stages[0].kernel")


def test_arch_show_adapted_applies_the_small_input_rule(eas_cli):
    published = json.loads(eas_cli("arch", "show", "mobilenet_v3_small@0.35", "--input", "1x28x28", "--classes", "10",
                                   "--json").stdout)
    adapted = json.loads(eas_cli("arch", "show", "mobilenet_v3_small@0.35", "--input", "1x28x28", "--classes", "10",
                                 "--adapted", "--json").stdout)
    assert published["macs"] == 448_328 and adapted["macs"] > 4 * published["macs"]  # two networks, two costs
    assert published["params"] == adapted["params"]  # strides change the maps, not the weights
    assert published["genome"].startswith("stem_c8_k3_s2") and adapted["genome"].startswith("stem_c8_k3_s1")
