"""A latency predictor for one device and runtime, fitted on measured networks of one space.

Two kinds are fitted on the same measurements and the one that predicts held-out networks
better is kept (`fit`):

- "additive": the latency is a sum over the network's operators, each kind priced by its MACs,
  the values it reads and writes, and a fixed cost per call (nn-Meter predicts kernel by
  kernel and sums; Once-for-All sums a per-block lookup table). The prices are fitted by
  non-negative least squares on relative error, from whole networks, so no block needs timing
  on its own and every price stays physical (nothing costs less than nothing).
- "boosted": gradient-boosted regression trees on the same operator features, predicting the
  log of the latency: no assumption that costs add up (caches, threads, fused kernels).

Features come from counting the genome (eas.arch.counting: microseconds, no torch), so the search
can refuse a proposal over --max-latency before it builds anything. The error is reported the
way nn-Meter reports it: the share of held-out networks predicted within +-10%.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import asdict, dataclass, field

import numpy as np

from eas.arch.counting import arch_cost
from eas.arch.genome import Arch
from eas.errors import UserError
from eas.jsonfile import read_json
from eas.lazy import lazy_import

ensemble = lazy_import("sklearn.ensemble")
optimize = lazy_import("scipy.optimize")

KINDS = ("additive", "boosted")
WITHIN = 0.10  # the error band reported (nn-Meter's +-10%)


def features(arch: Arch, input_shape: tuple[int, int, int], num_classes: int) -> dict[str, float]:
    """The operator tallies of `arch` at batch 1 (MACs, values, calls per kind of operator)."""
    return {k: float(v) for k, v in arch_cost(arch, input_shape, num_classes).operators.items()}


@dataclass(frozen=True)
class PredictionError:
    """How far predictions fell from measurements on networks the fit did not see."""

    n: int
    within: float  # share within +-10%
    median_abs: float  # median |predicted / measured - 1|
    worst_abs: float

    @classmethod
    def of(cls, predicted, measured) -> PredictionError:
        errors = [abs(p / m - 1) for p, m in zip(predicted, measured, strict=True)]
        return cls(len(errors), sum(e <= WITHIN for e in errors) / len(errors), statistics.median(errors),
                   max(errors))

    def text(self) -> str:
        return (f"{self.within:.0%} of {self.n} held-out networks within +-{WITHIN:.0%} "
                f"(median error {self.median_abs:.1%}, worst {self.worst_abs:.0%})")


@dataclass
class Predictor:
    kind: str  # one of KINDS
    names: list[str]  # feature names, in the order of the fitted numbers
    scale: list[float]  # each feature divided by this before fitting (numbers near 1)
    model: dict  # additive: {"intercept", "prices"}; boosted: {"base", "rate", "trees"}
    input_shape: tuple[int, int, int]
    num_classes: int
    space: str
    runtime: dict  # where the measurements came from: runtime, provider, threads, device, url
    error: dict = field(default_factory=dict)  # PredictionError on held-out networks, as a dict
    compared: dict = field(default_factory=dict)  # kind -> cross-validated share within +-10%

    def _row(self, arch: Arch) -> np.ndarray:
        tallies = features(arch, self.input_shape, self.num_classes)
        return np.array([tallies.get(name, 0.0) / s for name, s in zip(self.names, self.scale, strict=True)])

    def predict(self, arch: Arch) -> float:
        """Predicted median latency at batch 1, in milliseconds."""
        return float(_predict(self.kind, self.model, self._row(arch)[None, :])[0])

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data) -> Predictor:
        """A stored predictor, checked: a hand-edited file is refused in one line, not trusted."""
        try:
            predictor = cls(**{**data, "input_shape": tuple(data["input_shape"])})
            problem = predictor._problem()
        except (TypeError, KeyError, ValueError, IndexError, AttributeError, OverflowError):
            problem = "its fields are not a predictor's"
        if problem:
            raise UserError(f"not a latency predictor written by `eas agent calibrate` (or it was edited): {problem}")
        return predictor

    def _problem(self) -> str | None:
        """What is wrong with a predictor read from a file (None: nothing)."""
        width = len(self.names) if isinstance(self.names, list) else 0
        if self.kind not in KINDS:
            return f"kind {str(self.kind)[:20]!r}"
        # Names as the fit writes them: operator tallies, each once, printable (they reach messages and logs)
        if not width or not all(isinstance(n, str) and 0 < len(n) <= 100 and n.isprintable() and n.isascii()
                                for n in self.names):
            return "feature names"
        if len(set(self.names)) != width:
            return "feature names (one listed twice)"
        if not (isinstance(self.scale, list) and len(self.scale) == width and all(_finite(s) and s > 0
                                                                                   for s in self.scale)):
            return "feature scales"
        if not (len(self.input_shape) == 3 and all(isinstance(d, int) and 0 < d <= 4096 for d in self.input_shape)
                and isinstance(self.num_classes, int) and 1 < self.num_classes <= 100_000):
            return "input shape or classes"
        if not isinstance(self.space, str) or not isinstance(self.runtime, dict):
            return "space or runtime"
        problem = _model_problem(self.kind, self.model, width)
        if problem:
            return problem
        if not 0 < float(_predict(self.kind, self.model, np.ones((1, width)))[0]) < math.inf:
            return "it predicts no positive latency"
        return None

    def check_fits(self, space_name: str, extremes: list[Arch]) -> None:
        """Refuse a predictor fitted on another space, or one whose predictions for the space's
        own networks are not positive, finite latencies."""
        if self.space != space_name:
            raise UserError(f"the latency predictor was fitted on space {self.space!r}, not {space_name!r}; "
                            f"calibrate one for this space (eas agent calibrate --space {space_name})")
        for arch in extremes:
            predicted = self.predict(arch)
            if not sane_latency(predicted):
                raise UserError(f"the latency predictor predicts {predicted:.4g} ms for a network of space "
                                f"{space_name!r}: not a latency; calibrate it again")


MAX_LATENCY_MS = 3.6e6


def sane_latency(milliseconds: float) -> bool:
    return math.isfinite(milliseconds) and 0 < milliseconds <= MAX_LATENCY_MS


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _model_problem(kind: str, model, width: int) -> str | None:
    """What is wrong with a fitted model's numbers (lists of the right lengths, indices in range)."""
    if not isinstance(model, dict):
        return "model is not a mapping"
    if kind == "additive":
        prices = model.get("prices")
        if not (_finite(model.get("intercept")) and isinstance(prices, list) and len(prices) == width
                and all(_finite(p) for p in prices)):
            return "additive prices"
        return None
    trees = model.get("trees")
    if not (_finite(model.get("base")) and _finite(model.get("rate")) and isinstance(trees, list)
            and 0 < len(trees) <= 10_000):
        return "boosted base, rate or trees"
    for number, tree in enumerate(trees):
        if not isinstance(tree, dict):
            return f"tree {number}"
        arrays = [tree.get(k) for k in ("feature", "threshold", "left", "right", "value")]
        if not all(isinstance(a, list) for a in arrays) or len({len(a) for a in arrays}) != 1:
            return f"tree {number}: arrays"
        feature, threshold, left, right, value = arrays
        nodes = len(feature)
        if not 0 < nodes <= 100_000:
            return f"tree {number}: size"
        for node in range(nodes):
            leaf = left[node] == -1
            children_ok = (leaf and right[node] == -1) or (
                isinstance(left[node], int) and isinstance(right[node], int) and node < left[node] < nodes
                and node < right[node] < nodes)  # children come after their parent: no cycles
            if not children_ok or not _finite(value[node]) or not _finite(threshold[node]) or not (
                    isinstance(feature[node], int) and (leaf or 0 <= feature[node] < width)):
                return f"tree {number}: node {node}"
    return None


MAX_FILE_BYTES = 16 * 2**20


def load_predictor(path) -> Predictor:
    """The predictor `eas agent calibrate` wrote at `path`; anything else is refused in one line."""
    try:
        data = read_json(path, max_bytes=MAX_FILE_BYTES)
    except FileNotFoundError:
        raise UserError(f"--predictor {path}: no such file (make one with `eas agent calibrate`)") from None
    if not isinstance(data, dict):
        raise UserError(f"--predictor {path}: not a latency predictor")
    return Predictor.from_dict(data)


def _predict(kind: str, model: dict, rows: np.ndarray) -> np.ndarray:
    if kind == "additive":
        prices = np.asarray(model["prices"], dtype=float)
        if prices.shape != (rows.shape[1],) or not np.all(np.isfinite(prices)):
            raise ValueError("prices do not match the features")
        return float(model["intercept"]) + rows @ prices
    total = np.full(len(rows), float(model["base"]))
    for tree in model["trees"]:
        total += float(model["rate"]) * _tree_values(tree, rows)
    return np.exp(total)


def _tree_values(tree: dict, rows: np.ndarray) -> np.ndarray:
    """One regression tree, stored as sklearn's arrays (feature, threshold, left, right, value)."""
    out = np.empty(len(rows))
    for i, row in enumerate(rows):
        node, steps = 0, 0
        while tree["left"][node] != -1:
            node = tree["left"][node] if row[tree["feature"][node]] <= tree["threshold"][node] else tree["right"][node]
            steps += 1
            if steps > 64:
                raise ValueError("a tree deeper than any fit makes")
        out[i] = tree["value"][node]
    return out


def _fit_additive(x: np.ndarray, y: np.ndarray) -> dict:
    # Relative error: every row divided by its measured latency, so a 0.2 ms network counts as
    # much as a 5 ms one (the goal is a share within +-10%, not milliseconds).
    design = np.hstack([np.ones((len(x), 1)), x]) / y[:, None]
    solution, _ = optimize.nnls(design, np.ones(len(y)), maxiter=50 * design.shape[1])
    return {"intercept": float(solution[0]), "prices": [float(v) for v in solution[1:]]}


def _fit_boosted(x: np.ndarray, y: np.ndarray, seed: int) -> dict:
    fitted = ensemble.GradientBoostingRegressor(n_estimators=300, max_depth=3, learning_rate=0.05, subsample=0.8,
                                                random_state=seed).fit(x, np.log(y))
    trees = []
    for (estimator,) in fitted.estimators_:
        t = estimator.tree_
        trees.append({"feature": t.feature.tolist(), "threshold": t.threshold.tolist(),
                      "left": t.children_left.tolist(), "right": t.children_right.tolist(),
                      "value": t.value[:, 0, 0].tolist()})
    return {"base": float(fitted.init_.constant_.ravel()[0]), "rate": fitted.learning_rate, "trees": trees}


def _fit(kind: str, x: np.ndarray, y: np.ndarray, seed: int) -> dict:
    return _fit_additive(x, y) if kind == "additive" else _fit_boosted(x, y, seed)


def _cross_validated(kind: str, x: np.ndarray, y: np.ndarray, seed: int, folds: int = 5) -> float:
    order = list(range(len(y)))
    random.Random(seed).shuffle(order)
    predicted, measured = [], []
    for fold in range(folds):
        test = order[fold::folds]
        held = set(test)
        train = [i for i in order if i not in held]
        model = _fit(kind, x[train], y[train], seed)
        predicted.extend(_predict(kind, model, x[test]))
        measured.extend(y[test])
    return PredictionError.of(predicted, measured).within


def fit(archs: list[Arch], latencies_ms: list[float], input_shape: tuple[int, int, int], num_classes: int,
        space: str, runtime: dict, held_out: float = 0.2, seed: int = 0) -> Predictor:
    """Fit both kinds on the first (1 - held_out) of the measurements, keep the one that predicts
    better under 5-fold cross-validation there, refit it on all of them, and report its error on
    the held-out rest (networks no fit saw)."""
    if len(archs) != len(latencies_ms) or len(archs) < 20:
        raise UserError(f"a predictor needs at least 20 measured networks (got {len(archs)})")
    if not all(math.isfinite(v) and v > 0 for v in latencies_ms):
        raise UserError("every measured latency must be a positive number")
    tallies = [features(a, input_shape, num_classes) for a in archs]
    names = sorted(set().union(*tallies))
    raw = np.array([[t.get(n, 0.0) for n in names] for t in tallies])
    scale = np.where(raw.max(axis=0) > 0, raw.max(axis=0), 1.0)
    x, y = raw / scale, np.asarray(latencies_ms, dtype=float)
    cut = len(y) - max(1, round(held_out * len(y)))
    compared = {kind: _cross_validated(kind, x[:cut], y[:cut], seed) for kind in KINDS}
    kind = max(KINDS, key=lambda k: (compared[k], k == "additive"))  # a tie goes to the simpler model
    error = PredictionError.of(_predict(kind, _fit(kind, x[:cut], y[:cut], seed), x[cut:]), y[cut:])
    return Predictor(kind, names, scale.tolist(), _fit(kind, x, y, seed), tuple(input_shape), num_classes, space,
                     runtime, asdict(error), compared)

