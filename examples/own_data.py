"""A search on images this script makes itself: numpy arrays in, a front out.

    python examples/own_data.py

Any (x, y) pair works: x of shape (N, H, W), (N, C, H, W) or (N, H, W, C) (uint8 pixels, or
floats), y of shape (N,) with class indices. EAS writes the arrays once into studies/data/
(named by their content), so a resumed search and its workers read the same images.
"""

import numpy as np

import eas

eas.prepare_process()  # as the `eas` command does: threads wait passively, progress lines on stderr

# Two classes of 16x16 grey images: a bright square in the top-left corner, or in the bottom-right.
rng = np.random.default_rng(0)
n = 600
x = rng.integers(0, 60, size=(n, 16, 16), dtype=np.uint8)
y = rng.integers(0, 2, size=n)
for image, label in zip(x, y, strict=True):
    corner = slice(2, 8) if label == 0 else slice(8, 14)
    image[corner, corner] += 150

result = eas.search(space="tiny", data=(x, y), trials=8, epochs=3, study="own-data",
                    objectives=["accuracy", "params"])
print(f"{len(result.records)} trials on your arrays; the front:")
for trial in result.front:
    print(f"  trial {trial.number}: {trial.metrics['accuracy']:.1%} with {trial.metrics['params']:,} parameters")
