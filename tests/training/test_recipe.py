"""The training recipe: augmentation on whole batches (what each policy may and may not do to an
image), its determinism, the choice `auto` makes for each kind of data, and the weights' moving
average."""

import pytest
import torch
from torch import nn

from eas.errors import UserError
from eas.training.recipe import Recipe, WeightAverage, augment_batch, batch_generator


def images(n=16, size=12):
    torch.manual_seed(0)
    return torch.rand(n, 3, size, size)


def translations(x: torch.Tensor, pad: int, flip: bool):
    """Every image `augment_batch` may make of x: each shift within pad (zeros come in), flipped or not."""
    padded = nn.functional.pad(x, (pad, pad, pad, pad))
    size = x.shape[-1]
    for dy in range(2 * pad + 1):
        for dx in range(2 * pad + 1):
            crop = padded[..., dy:dy + size, dx:dx + size]
            yield crop
            if flip:
                yield crop.flip(-1)


@pytest.mark.parametrize(("policy", "flip"), [("shift", False), ("standard", True)])
def test_each_augmented_image_is_a_shift_of_its_own_and_only_standard_flips(policy, flip):
    x = images()
    out = augment_batch(x, policy, batch_generator(torch.device("cpu"), 0, 5, 0))
    assert out.shape == x.shape
    flipped = 0
    for i in range(len(x)):
        allowed = list(translations(x[i], 2, flip))
        assert any(torch.equal(out[i], candidate) for candidate in allowed), i
        flipped += flip and not any(torch.equal(out[i], c) for c in translations(x[i], 2, False))
    moved = sum(not torch.equal(out[i], x[i]) for i in range(len(x)))
    assert moved >= len(x) // 2  # most images are changed (1 in 25 shifts is the identity)
    assert (flipped > 0) == flip


def test_augmentation_is_a_function_of_seed_step_and_worker():
    x = images()
    same = [augment_batch(x, "standard", batch_generator(torch.device("cpu"), 3, 7, 1)) for _ in range(2)]
    assert torch.equal(same[0], same[1])
    for other in ((4, 7, 1), (3, 8, 1), (3, 7, 0)):
        assert not torch.equal(same[0], augment_batch(x, "standard", batch_generator(torch.device("cpu"), *other)))
    assert augment_batch(x, "none", batch_generator(torch.device("cpu"), 0, 0, 0)) is x


def test_auto_suits_the_data_and_bad_values_are_refused():
    assert Recipe.parse("auto", 0.1, 0.999, "digits").augment == "shift"  # a flipped 2 is not a 2
    assert Recipe.parse("auto", 0, 0, "fashion-mnist").augment == "standard"
    assert Recipe.parse("auto", 0, 0, "cifar10:/data").augment == "standard"
    assert Recipe.parse("auto", 0, 0, "npz:/x.npz").augment == "none"
    for bad in (("sideways", 0, 0), ("none", 0.5, 0), ("none", -0.1, 0), ("none", 0, 1.0), ("none", 0, 0.2)):
        with pytest.raises(UserError):
            Recipe.parse(*bad, "digits")


def test_the_moving_average_ramps_up_and_swaps_back_exactly():
    model = nn.Linear(4, 2)
    start = {k: v.detach().clone() for k, v in model.named_parameters()}
    average = WeightAverage(model, decay=0.99)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    average.update(model, step=0)  # decay min(0.99, 1/10): mostly the new weights at the start
    for name, tensor in average.tensors.items():
        assert torch.allclose(tensor, start[name] + 0.9)
    trained = {k: v.detach().clone() for k, v in model.named_parameters()}
    average.swap(model)
    assert all(torch.allclose(p, start[k] + 0.9) for k, p in model.named_parameters())
    average.swap(model)
    assert all(torch.equal(p, trained[k]) for k, p in model.named_parameters())
