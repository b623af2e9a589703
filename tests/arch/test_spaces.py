import optuna
import pytest
import torch

from eas.arch.builder import build
from eas.arch.profile import profile
from eas.arch.reference import reference
from eas.arch.space import SpaceError, list_spaces, load_space

SPACES = [s.name for s in list_spaces()]
optuna.logging.set_verbosity(optuna.logging.WARNING)


def sample_archs(space, n, seed=0):
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    return [space.sample(study.ask()) for _ in range(n)]


@pytest.mark.parametrize("name", SPACES)
@pytest.mark.parametrize("shape", [(1, 28, 28), (3, 32, 32)])
def test_random_samples_build_run_and_have_consistent_profiles(name, shape):
    space = load_space(name, shape)
    torch.manual_seed(0)
    for arch in sample_archs(space, 12):
        model = build(arch, shape, 10)
        x = torch.randn(4, *shape)
        out = model(x)
        assert out.shape == (4, 10)
        out.square().mean().backward()
        assert all(p.grad is not None for p in model.parameters())
        cost = profile(model, shape)
        assert cost.params == sum(t.numel() for t in model.parameters())
        assert cost.params == sum(layer.params for layer in cost.layers)
        assert cost.macs == sum(layer.macs for layer in cost.layers) > 0


@pytest.mark.parametrize("name", SPACES)
def test_a_trial_replays_from_its_params(name):
    space = load_space(name, (1, 28, 28))
    study = optuna.create_study(sampler=optuna.samplers.NSGAIISampler(seed=3))
    for _ in range(5):
        trial = study.ask()
        arch = space.sample(trial)
        assert space.arch_from_params(trial.params) == arch
        assert space.params_of(arch) is not None
        study.tell(trial, 0.0)


def test_every_sampler_works_with_fixed_choice_lists():
    space = load_space("tiny", (1, 28, 28))
    for sampler in [optuna.samplers.TPESampler(seed=0, multivariate=True),
                    optuna.samplers.NSGAIISampler(seed=0), optuna.samplers.RandomSampler(seed=0)]:
        study = optuna.create_study(directions=["maximize", "minimize"], sampler=sampler)
        for _ in range(4):
            trial = study.ask()
            arch = space.sample(trial)
            assert set(trial.params) == set(space.parameters())
            assert all(trial.params[name] in choices for name, choices in space.parameters().items())
            assert space.arch_from_params(trial.params) == arch
            study.tell(trial, [0.5, float(arch.depth)])
        assert [t.state.name for t in study.trials] == ["COMPLETE"] * 4


def test_spaces_adapt_to_the_input_resolution():
    mobile = load_space("mobile")
    assert mobile.for_task((3, 224, 224)).params_of(reference("mobilenet_v2")) is not None
    for size, expected in [(224, 5), (32, 3), (28, 3), (8, 1)]:
        arch = sample_archs(mobile.for_task((3, size, size)), 1)[0]
        assert arch.downsamplings == expected
        model = build(arch, (3, size, size), 10)
        assert model(torch.zeros(1, 3, size, size)).shape == (1, 10)


def test_stride_choices_say_where_the_network_downsamples_never_how_often():
    # mobile lets the stem and four stages choose their stride; at 28 px the rule allows three
    # stride-2 steps, at 224 px all five positions take one.
    for size, expected in [(28, 3), (224, 5)]:
        space = load_space("mobile", (1, size, size))
        archs = sample_archs(space, 40, seed=size)
        assert {arch.downsamplings for arch in archs} == {expected}
        if size == 28:  # and the places differ from network to network
            places = {tuple(s.stride for s in (arch.stem, *arch.stages)) for arch in archs}
            assert len(places) > 3
    # The sampled choices are kept where the count allows them: stride 2 chosen early stays early.
    space = load_space("mobile", (1, 28, 28))
    first = {n: c[0] for n, c in space.parameters().items()}
    early = {**first, "stem.stride": 2, "stage2.stride": 2, "stage3.stride": 2,
             "stage4.stride": 1, "stage6.stride": 1}
    arch = space.arch_from_params(early)
    assert [s.stride for s in (arch.stem, *arch.stages)][:4] == [2, 1, 2, 2]
    assert space.params_of(arch) is not None
    # All chosen: the earliest chosen are kept, the latest open ones give way.
    every = space.arch_from_params({**first, **{n: 2 for n in space.parameters() if n.endswith(".stride")}})
    assert [s.stride for s in (every.stem, *every.stages)] == [2, 1, 2, 2, 1, 1]
    # None chosen: the latest positions that may stride take it (stages 5 and 7 are skipped at
    # their first depth choice, 0: stem, stages 1-4 and 6 remain).
    late = space.arch_from_params({**first, **{n: 1 for n in space.parameters() if n.endswith(".stride")}})
    assert [s.stride for s in (late.stem, *late.stages)] == [1, 1, 1, 2, 2, 2]


def test_the_rule_for_strides_fills_only_the_positions_the_space_leaves_open():
    arch = reference("mobilenet_v3_small").with_strides([1] * 9)
    assert arch.adapted_to(28).downsamplings == 0  # a baseline: nothing marked, nothing added
    marked = [False, True, False, True, False, False, False, True, False]
    filled = arch.adapted_to(28, may_stride=marked)
    assert [s.stride for s in (filled.stem, *filled.stages)] == [1, 2, 1, 2, 1, 1, 1, 2, 1]
    assert arch.adapted_to(224, may_stride=marked).downsamplings == 3  # fewer places than allowed


def test_mobile_reaches_below_the_cheapest_mobilenet_at_28_px():
    space = load_space("mobile", (1, 28, 28))
    least, most = space.cost_ranges((1, 28, 28), 10)["macs"]
    cheapest_family = profile(build(reference("mobilenet_v3_small@0.35"), (1, 28, 28), 10), (1, 28, 28)).macs
    assert least < cheapest_family < 0.5e6
    assert most > 80e6  # and still reaches as high as before the strides were choices


def test_extremes_bound_the_costs():
    space = load_space("mobile", (1, 28, 28))
    low, high = space.extremes((1, 28, 28), 10)
    low_macs = profile(build(low, (1, 28, 28), 10), (1, 28, 28)).macs
    high_macs = profile(build(high, (1, 28, 28), 10), (1, 28, 28)).macs
    for arch in sample_archs(space, 10):
        macs = profile(build(arch, (1, 28, 28), 10), (1, 28, 28)).macs
        assert low_macs <= macs <= high_macs


RESOLUTION_SPACE = ("name: res\nresolution: [16, 20, 28]\n"
                    "stem: {width: [8, 16], kernel: 3, stride: [1, 2], act: relu}\n"
                    "stages:\n  - {kind: ds, depth: 1, width: 16, kernel: 3, stride: [1, 2], act: relu}\n"
                    "  - {kind: ir, depth: 1, width: 24, kernel: 3, expansion: 4, stride: [1, 2], act: relu}\n"
                    "head: {width: 0, hidden: 0, act: relu, dropout: 0.0}\n")


def test_resolution_is_a_choice_the_network_carries_counted_built_and_replayed(tmp_path):
    from dataclasses import replace

    from eas.arch.counting import arch_cost
    from eas.arch.genome import Arch

    path = tmp_path / "res.yaml"
    path.write_text(RESOLUTION_SPACE)
    space = load_space(path, (1, 28, 28))
    assert list(space.parameters())[0] == "resolution" and space.parameters()["resolution"] == [16, 20, 28]
    fixed = {"stem.width": 8, "stem.stride": 2, "stage1.stride": 2, "stage2.stride": 2}
    native = space.arch_from_params({**fixed, "resolution": 28})
    assert native.stem.resolution == 0  # the data's own size: no resize, the same genome as before
    small = space.arch_from_params({**fixed, "resolution": 16})
    assert small.stem.resolution == 16 and "stem_i16_" in small.encode()
    # 28 px allows 3 stride-2 steps to a 3-px map, 16 px only 2: the latest open one gives way
    assert [native.stem.stride, *(s.stride for s in native.stages)] == [2, 2, 2]
    assert [small.stem.stride, *(s.stride for s in small.stages)] == [2, 2, 1]
    model = build(small, (1, 28, 28), 10)
    assert model(torch.randn(2, 1, 28, 28)).shape == (2, 10)  # takes the data's images, resizes them itself
    counted = arch_cost(small, (1, 28, 28), 10)
    unresized = Arch(replace(small.stem, resolution=0), small.stages, small.head)
    assert counted.macs == profile(model, (1, 28, 28)).macs == arch_cost(unresized, (1, 16, 16), 10).macs
    assert space.params_of(small)["resolution"] == 16 and space.arch_from_params(space.params_of(small)) == small
    for arch in sample_archs(space, 20):
        assert space.arch_from_params(space.params_of(arch)) == arch


@pytest.mark.parametrize("line, fragment", [
    ("resolution: [0, 20]", "not a size in pixels"),
    ("resolution: [-20]", "not a size in pixels"),
    ("resolution: [20, 24, 20]", "20 is listed twice"),
    ("resolution: [twenty]", "not a size in pixels"),
    ("resolution: []", "empty choice list"),
])
def test_resolution_lists_that_are_refused_when_the_space_is_read(tmp_path, line, fragment):
    path = tmp_path / "bad.yaml"
    path.write_text(RESOLUTION_SPACE.replace("resolution: [16, 20, 28]", line))
    with pytest.raises(SpaceError, match="resolution") as refused:
        load_space(str(path))
    assert fragment in str(refused.value) and "\n" not in str(refused.value)


def test_a_resolution_over_four_times_the_datas_size_is_refused_for_that_data(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text(RESOLUTION_SPACE.replace("[16, 20, 28]", "[28, 120]"))
    assert load_space(str(path), (3, 32, 32)).resolution == 32  # 120 <= 4 x 32
    with pytest.raises(SpaceError, match="resolution 120 is over 4x the data's 28 px"):
        load_space(str(path), (1, 28, 28))


def test_unknown_space_lists_the_available_ones():
    with pytest.raises(SpaceError, match="mobile.*tiny"):
        load_space("nope")


@pytest.mark.parametrize("text, fragment", [
    ("stem: {width: 8}\nhead: {width: 0}\n", "stages: missing"),
    ("stem: {width: 8, act: relu}\nstages: [{kind: ir, kernel: [3, 4]}]\nhead: {width: 0}", "stages[0].kernel"),
    ("stem: {width: 8, act: relu}\nstages: [{kind: ir, colour: 3}]\nhead: {width: 0}", "stages[0].colour"),
    ("stem: {width: 8, act: relu}\nstages: [{kind: zz}]\nhead: {width: 0}", "stages[0].kind"),
    ("stem: {width: 8, act: relu}\nstages: [{kind: la, width: [30], heads: [4], ffn: 2}]\nhead: {}", "stages[0].width"),
    ("stem: {width: 8, act: relu}\nstages: [{kind: ir, depth: [0, 1], stride: 2}]\nhead: {}", "stages[0].depth"),
    ("stem: [oops", "not valid YAML"),
])
def test_malformed_space_file_names_the_field(tmp_path, text, fragment):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(SpaceError) as error:
        load_space(str(path))
    assert fragment in str(error.value)
    assert str(path) in str(error.value)


def test_a_users_own_space_file_by_path(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("name: mine\nstem: {width: 8, act: relu}\n"
                    "stages: [{kind: ds, width: [8, 16], stride: 2}]\nhead: {width: 0}\n")
    space = load_space(str(path), (1, 28, 28))
    assert space.name == "mine" and list(space.parameters()) == ["stage1.width"]
    assert {a.stages[0].width for a in sample_archs(space, 20)} == {8, 16}


def test_extremes_are_found_by_counting_not_by_assuming_cost_grows_with_each_choice(tmp_path):
    """With `stride: [1, 2]` the larger value makes everything after it cheaper: the smallest
    arch has stride 2. Checked against every arch of a small space."""
    import itertools

    from eas.arch.counting import arch_cost

    path = tmp_path / "strided.yaml"
    path.write_text("stem: {width: [8, 16], kernel: 3, stride: 1, act: relu}\n"
                    "stages:\n"
                    "  - {kind: ds, depth: 1, width: [16, 24], kernel: 3, stride: [1, 2], act: relu}\n"
                    "  - {kind: ir, depth: [1, 2], width: [24, 32], kernel: 3, expansion: 4, stride: 1, act: relu}\n"
                    "head: {width: [0, 64], hidden: 0, act: relu, dropout: 0.0}\n")
    space = load_space(path, (1, 28, 28))

    def cost(arch):
        counted = arch_cost(arch, (1, 28, 28), 10)
        return counted.macs, counted.params

    names, lists = zip(*space.parameters().items(), strict=True)
    every = [space.arch_from_params(dict(zip(names, values, strict=True))) for values in itertools.product(*lists)]
    low, high = space.extremes((1, 28, 28), 10)
    assert cost(low) == min(map(cost, every)) and cost(high) == max(map(cost, every))
    assert low.stages[0].stride == 2
