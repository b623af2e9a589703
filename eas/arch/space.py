"""Search spaces as data: YAML files of fixed values and choice lists.

A space file names a stem, a list of stages and a head. Every field is either one value or a
list of choices. Each choice list becomes one Optuna categorical parameter with a stable name
(`stem.width`, `stage3.kernel`, `head.width`), so every sampler works and a trial replays from
its params alone. A stage whose depth choices include 0 may be skipped (stride-1 stages only).

Spaces adapt to the task: `for_task(input_shape)` keeps only as many stride-2 steps as the
input resolution allows (the feature map never drops below `min_feature_size`), dropping the
earliest ones first, as CIFAR-sized variants of ImageNet networks do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from itertools import product
from pathlib import Path
from typing import Any

import yaml

from eas import arguments
from eas.arch.bounds import check_shape
from eas.arch.counting import arch_cost
from eas.arch.genome import Arch, GenomeError, Head, Stage, Stem
from eas.arch.microcontroller import flash_bytes, sram_bytes
from eas.errors import UserError
from eas.jsonfile import MAX_DEPTH, depth, nested_too_deeply

SPACES_DIR = Path(__file__).parent / "search_spaces"

# YAML key -> genome field, for each part.
STEM_FIELDS = {"width": "width", "kernel": "kernel", "stride": "stride", "act": "act"}
STAGE_FIELDS = {"depth": "repeats", "kernel": "kernel", "stride": "stride", "expansion": "expansion",
                "width": "width", "se": "se", "act": "act", "heads": "heads", "ffn": "ffn"}
HEAD_FIELDS = {"width": "width", "hidden": "ffn", "act": "act", "dropout": "dropout"}


class SpaceError(UserError, ValueError):
    """A space that cannot be found or read; the message names the file and field."""


MAX_SPACE_FILE_BYTES = 1 << 20
MAX_CHOICES = 256  # per field: more is a generated list, not a search space (and sampling would crawl)
MAX_STAGES = 64
TOP_LEVEL_KEYS = ("name", "description", "resolution", "stem", "stages", "head", "train", "min_feature_size")
MAX_UPSCALE = 4  # a resolution choice over 4x the data's own size is refused: nothing is left to see


class _SpaceLoader(yaml.SafeLoader):
    """YAML without aliases: `*name` can expand a few lines into billions of nodes (or into
    itself), and a space file has no use for it."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not allowed in a space file",
                                              self.peek_event().start_mark)
        return super().compose_node(parent, index)


def choices_of(value: Any) -> list:
    return list(value) if isinstance(value, list) else [value]


@dataclass(frozen=True)
class Space:
    name: str
    description: str
    definition: dict  # the parsed file, kept so a study can store and rebuild the space
    resolution: int | None = None

    # -- parts of the definition -------------------------------------------------------
    @property
    def stages(self) -> list[dict]:
        return self.definition["stages"]

    @property
    def min_feature_size(self) -> int:
        return int(self.definition.get("min_feature_size", 3))

    @property
    def resolutions(self) -> list[int]:
        """The input resolutions the space offers (`resolution:`); empty: the data's own."""
        return [int(r) for r in choices_of(self.definition.get("resolution") or [])]  # null: none

    def for_task(self, input_shape: tuple[int, int, int]) -> Space:
        native = min(input_shape[1:])
        too_large = [r for r in self.resolutions if r > MAX_UPSCALE * native]
        if too_large:
            raise SpaceError(f"space {self.name!r}: resolution {too_large[0]} is over {MAX_UPSCALE}x the data's "
                             f"{native} px (choose resolutions up to {MAX_UPSCALE * native})")
        return replace(self, resolution=native)

    # -- sampling ----------------------------------------------------------------------
    def parameters(self) -> dict[str, list]:
        """Every choice parameter with its fixed choice list, in sampling order (the training
        hyperparameters of an optional `train:` section last, as `train.lr` and so on)."""
        params = {"resolution": self.resolutions} if len(self.resolutions) > 1 else {}
        for part, spec in [*self.parts(), ("train", self.definition.get("train") or {})]:
            for key, value in spec.items():
                if key != "kind" and isinstance(value, list) and len(value) > 1:
                    params[f"{part}.{key}"] = value
        return params

    def training_of(self, params: dict[str, Any]) -> dict[str, Any]:
        """The training hyperparameters a candidate uses: the space's `train:` section with the
        sampled choices (empty when the space has none)."""
        section = self.definition.get("train") or {}
        return {key: params.get(f"train.{key}", choices_of(value)[0]) for key, value in section.items()}

    def sample(self, trial) -> Arch:
        """Draw an Arch through `trial.suggest_categorical`, one call per choice parameter."""
        chosen = {name: trial.suggest_categorical(name, choices)
                  for name, choices in self.parameters().items()}
        return self.arch_from_params(chosen)

    def arch_from_params(self, params: dict[str, Any]) -> Arch:
        def pick(part: str, key: str, spec: dict):
            name = f"{part}.{key}"
            return params[name] if name in params else choices_of(spec[key])[0]

        specs = dict(self.parts())
        stem = Stem(**{f: pick("stem", k, specs["stem"]) for k, f in STEM_FIELDS.items()
                       if k in specs["stem"]})
        stages, may_stride = [], [_offers_stride_2(specs["stem"])]
        for index, spec in enumerate(self.stages, start=1):
            part = f"stage{index}"
            values = {f: pick(part, k, spec) for k, f in STAGE_FIELDS.items() if k in spec}
            if values.get("repeats", 1) == 0:
                continue
            stages.append(Stage(kind=spec["kind"], **values))
            may_stride.append(_offers_stride_2(spec))
        head = Head(**{f: pick("head", k, specs["head"]) for k, f in HEAD_FIELDS.items()
                       if k in specs["head"]})
        if self.resolutions:  # the data's own size is no resize at all: one network, one genome
            seen = params.get("resolution", self.resolutions[0])
            stem = replace(stem, resolution=0 if seen == self.resolution else seen)
        return self.adapt(Arch(stem, tuple(stages), head), may_stride)

    def adapt(self, arch: Arch, may_stride: list[bool] | None = None) -> Arch:
        """`arch` with as many stride-2 steps as the task's resolution allows (`Arch.adapted_to`);
        `may_stride` marks the parts whose stride the space leaves to the search."""
        if self.resolution is None:
            return arch
        return arch.adapted_to(arch.stem.resolution or self.resolution, self.min_feature_size, may_stride)

    def params_of(self, arch: Arch) -> dict[str, Any] | None:
        """The params that make this space produce `arch` (after adaptation), or None; training
        hyperparameters take their first choice."""
        target = self.adapt(arch)
        names = self.parameters()
        params: dict[str, Any] = {n: c[0] for n, c in names.items() if n.startswith("train.")}
        if "resolution" in names:
            params["resolution"] = target.stem.resolution or self.resolution
            if params["resolution"] not in names["resolution"]:
                return None
        for part, values in (("stem", {"width": target.stem.width, "kernel": target.stem.kernel,
                                       "stride": target.stem.stride,
                                       "act": target.stem.act}),
                             ("head", {"width": target.head.width, "hidden": target.head.ffn,
                                       "act": target.head.act, "dropout": target.head.dropout})):
            params.update({f"{part}.{k}": v for k, v in values.items() if f"{part}.{k}" in names})
        stage_params = self._align(0, list(target.stages), names)
        if stage_params is None:
            return None
        params.update(stage_params)
        try:
            return params if self.arch_from_params(params) == target else None
        except GenomeError:
            return None

    def _align(self, index: int, stages: list[Stage], names: dict) -> dict | None:
        """Match space stages from `index` on to `stages`, skipping depth-0 stages as needed."""
        if index == len(self.stages):
            return {} if not stages else None
        spec, part = self.stages[index], f"stage{index + 1}"
        if stages:
            own = {f"{part}.{k}": getattr(stages[0], f) for k, f in STAGE_FIELDS.items()
                   if f"{part}.{k}" in names}
            if all(v in names[n] for n, v in own.items()):
                rest = self._align(index + 1, stages[1:], names)
                if rest is not None:
                    return {**own, **rest}
        if 0 in choices_of(spec.get("depth", 1)):
            rest = self._align(index + 1, stages, names)
            if rest is not None:
                skipped = {n: c[0] for n, c in names.items() if n.startswith(f"{part}.")}
                return {**skipped, f"{part}.depth": 0, **rest}
        return None

    def parts(self):
        """(name, definition) of the stem, each stage (stage1, ...) and the head."""
        yield "stem", self.definition["stem"]
        for index, spec in enumerate(self.stages, start=1):
            yield f"stage{index}", spec
        yield "head", self.definition["head"]

    def extremes(self, input_shape: tuple[int, int, int], num_classes: int) -> tuple[Arch, Arch]:
        """The smallest and the largest arch of the space by counted cost (MACs, then params)."""
        def cost(arch: Arch) -> tuple[int, int]:
            counted = arch_cost(arch, input_shape, num_classes)
            return counted.macs, counted.params

        return self.least(cost), self.least(lambda arch: tuple(-v for v in cost(arch)))

    def cost_ranges(self, input_shape: tuple[int, int, int], num_classes: int) -> dict[str, tuple[int, int]]:
        """(least, most) of each counted cost over the space at this input: MACs, parameters,
        and a microcontroller's int8 SRAM and flash, each searched for on its own."""
        counts: dict[str, Callable[[Arch], int]] = {
            "macs": lambda arch: arch_cost(arch, input_shape, num_classes).macs,
            "params": lambda arch: arch_cost(arch, input_shape, num_classes).params,
            "sram_bytes": lambda arch: sram_bytes(arch, input_shape, num_classes),
            "flash_bytes": lambda arch: flash_bytes(arch, input_shape, num_classes)}
        def most(count: Callable[[Arch], int]) -> Arch:
            return self.least(lambda arch: -count(arch))

        return {name: (count(self.least(count)), count(most(count))) for name, count in counts.items()}

    def least(self, key: Callable[[Arch], Any]) -> Arch:
        """The arch with the lowest `key(arch)` (any comparable value).

        No assumption that cost grows with each choice: a stride of 2 makes everything after it
        cheaper, so "all smallest values" can be the costliest arch. Found by coordinate search
        on exact values (one choice at a time, every value of it, until no choice improves),
        started from the smallest and from the largest values of every list."""
        def of_params(params: dict) -> Any:
            return key(self.arch_from_params(params))

        starts = [{n: pick(c, key=cost_order) for n, c in self.parameters().items()} for pick in (min, max)]
        return self.arch_from_params(min((_coordinate_search(self.parameters(), start, of_params)
                                          for start in starts), key=of_params))


def _offers_stride_2(spec: dict) -> bool:
    """Whether a part's stride is the search's to choose (a choice list holding 2)."""
    strides = choices_of(spec.get("stride", 1))
    return len(strides) > 1 and 2 in strides


def _coordinate_search(choices: dict[str, list], start: dict, cost, sweeps: int = 8) -> dict:
    """Lower `cost(params)` one choice at a time until no single change lowers it."""
    best, best_cost = dict(start), cost(start)
    for _ in range(sweeps):
        improved = False
        for name, values in choices.items():
            for value in values:
                trial = {**best, name: value}
                trial_cost = cost(trial)
                if trial_cost < best_cost:
                    best, best_cost, improved = trial, trial_cost, True
        if not improved:
            break
    return best


def cost_order(value: Any):
    # Activations are not ordered by cost; keep their listed order (first is the minimum).
    return value if isinstance(value, (int, float)) else 0


def list_spaces() -> list[Space]:
    return [load_space(path.stem) for path in sorted(SPACES_DIR.glob("*.yaml"))]


def load_space(name_or_path: str | Path, input_shape: tuple[int, int, int] | None = None) -> Space:
    """A built-in space by name (`mobile`) or a user's YAML file by path."""
    arguments.path("eas.load_space", "name_or_path", name_or_path)
    if input_shape is not None:
        input_shape = check_shape(input_shape, "eas.load_space: input_shape")
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml") and not path.exists():
        path = SPACES_DIR / f"{name_or_path}.yaml"
        if not path.exists():
            known = ", ".join(p.stem for p in sorted(SPACES_DIR.glob("*.yaml")))
            raise SpaceError(f"unknown space {str(name_or_path)!r} (available: {known}; "
                             "or give the path of a .yaml space file)")
    try:
        if path.stat().st_size > MAX_SPACE_FILE_BYTES:
            raise SpaceError(f"space file {path} is larger than {MAX_SPACE_FILE_BYTES // 1024} KiB")
        definition = yaml.load(path.read_bytes().decode("utf-8"), Loader=_SpaceLoader)
    except OSError as error:
        raise SpaceError(f"cannot read space file {path}: {error.strerror}") from None
    except UnicodeDecodeError:
        raise SpaceError(f"space file {path} is not a text (UTF-8 YAML) file") from None
    except yaml.YAMLError as error:
        raise SpaceError(f"space file {path} is not valid YAML: {str(error).splitlines()[0]}") from None
    except RecursionError:  # the YAML parser recurses: [[[...]]] 100,000 deep
        raise SpaceError(nested_too_deeply(f"space file {path}")) from None
    space = space_from_definition(definition, source=str(path), default_name=path.stem)
    return space.for_task(input_shape) if input_shape else space


def space_from_definition(definition: Any, source: str = "space", default_name: str = "custom") -> Space:
    """Validate a parsed space definition; errors name the file and the field."""
    def fail(where: str, message: str):
        raise SpaceError(f"{source}: {where}: {message}")

    if not isinstance(definition, dict):
        fail("top level", "expected a mapping with stem, stages and head")
    if depth(definition) > MAX_DEPTH:
        raise SpaceError(nested_too_deeply(source))
    for key in ("stem", "stages", "head"):
        if key not in definition:
            fail(key, "missing")
    for key in definition:
        if key not in TOP_LEVEL_KEYS:
            fail(str(key)[:40], f"unknown field (known: {', '.join(TOP_LEVEL_KEYS)})")
    if not isinstance(definition["stages"], list) or not definition["stages"]:
        fail("stages", "expected a non-empty list of stages")
    if len(definition["stages"]) > MAX_STAGES:
        fail("stages", f"at most {MAX_STAGES} stages (got {len(definition['stages'])})")
    feature = definition.get("min_feature_size", 3)
    if isinstance(feature, bool) or not isinstance(feature, int) or not 1 <= feature <= 64:
        fail("min_feature_size", f"expected an integer 1..64 (got {str(feature)[:40]})")
    _validate_training(definition.get("train"), fail)
    _validate_resolution(definition.get("resolution"), fail)
    parts: list[tuple[str, object, dict, type]] = [("stem", definition["stem"], STEM_FIELDS, Stem)]
    parts += [(f"stages[{i}]", spec, STAGE_FIELDS, Stage) for i, spec in enumerate(definition["stages"])]
    parts.append(("head", definition["head"], HEAD_FIELDS, Head))
    for where, spec, known, cls in parts:
        _validate_part(where, spec, known, cls, fail)
    name = str(definition.get("name", default_name))
    return Space(name=name, description=str(definition.get("description", "")), definition=definition)


TRAIN_FIELDS = {  # optional `train:` section: key -> (check, what it must be)
    "lr": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 10 and v == v,
           "a learning rate in (0, 10)"),
    "weight_decay": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 10,
                     "a weight decay in [0, 10)"),
    "batch_size": (lambda v: isinstance(v, int) and not isinstance(v, bool) and 2 <= v <= 65536,
                   "an integer batch size 2..65536"),
}


def _validate_resolution(value, fail) -> None:
    """`resolution:` one size or a list of sizes in pixels (4..4096), each once."""
    if value is None:
        return
    _check_choice_list("resolution", value, fail)
    choices = choices_of(value)
    for choice in choices:
        if isinstance(choice, bool) or not isinstance(choice, int) or not 4 <= choice <= 4096:
            fail("resolution", f"{str(choice)[:40]!r} is not a size in pixels (an integer 4..4096)")
    if len(set(choices)) != len(choices):
        fail("resolution", f"{next(c for c in choices if choices.count(c) > 1)} is listed twice")


def _validate_training(section, fail) -> None:
    if section is None:
        return
    if not isinstance(section, dict):
        fail("train", "expected a mapping of lr, weight_decay, batch_size")
    for key, value in section.items():
        if key not in TRAIN_FIELDS:
            fail(f"train.{key}", f"unknown field (known: {', '.join(TRAIN_FIELDS)})")
        _check_choice_list(f"train.{key}", value, fail)
        check, what = TRAIN_FIELDS[key]
        for choice in choices_of(value):
            if not check(choice):
                fail(f"train.{key}", f"{choice!r} is not {what}")


def _check_choice_list(where: str, value, fail) -> None:
    if isinstance(value, list) and not value:
        fail(where, "empty choice list")
    if isinstance(value, list) and len(value) > MAX_CHOICES:
        fail(where, f"at most {MAX_CHOICES} choices (got {len(value)})")
    if isinstance(value, dict):
        fail(where, "expected a value or a list of choices, not a mapping")
    if isinstance(value, list):
        # A choice listed twice would be drawn twice as often: a bias nobody asked for. (True and 1
        # are one value to Python, so they are told apart by type as well.)
        seen = [(type(v).__name__, repr(v)) for v in value]
        if len(set(seen)) != len(seen):
            twice = next(v for v, key in zip(value, seen, strict=True) if seen.count(key) > 1)
            fail(where, f"{str(twice)[:40]} is listed twice")


def _validate_part(where, spec, known, cls, fail) -> None:
    if not isinstance(spec, dict):
        fail(where, "expected a mapping of fields")
    extra = {"kind"} if cls is Stage else set()
    for key, value in spec.items():
        if key not in known and key not in extra:
            fail(f"{where}.{str(key)[:40]}", f"unknown field (known: {', '.join(known)})")
        _check_choice_list(f"{where}.{key}", value, fail)
        if key not in ("se", "kind") and any(isinstance(choice, bool) for choice in choices_of(value)):
            fail(f"{where}.{key}", "true/false is not a value of this field")
    if cls is Stage and spec.get("kind") not in ("ds", "ir", "la"):
        fail(f"{where}.kind", f"must be ds, ir or la (got {spec.get('kind')!r})")
    depths = choices_of(spec.get("depth", 1))
    if cls is Stage and 0 in depths and 2 in choices_of(spec.get("stride", 1)):
        fail(f"{where}.depth", "0 (skip the stage) is allowed only for stride-1 stages")
    # Every value of every field must build, together with every value of the fields it
    # interacts with (width x heads); other fields take their first choice.
    keys = [k for k in spec if k != "kind"]
    for key in keys:
        partners = ["heads"] if key == "width" else ["width"] if key == "heads" else []
        for value in choices_of(spec[key]):
            if key == "depth" and value == 0:
                continue
            for partner_values in product(*(choices_of(spec[p]) for p in partners if p in spec)):
                values = {known[k]: choices_of(spec[k])[0] for k in keys}
                values[known["depth"] if key == "depth" else known[key]] = value
                for p, v in zip([p for p in partners if p in spec], partner_values, strict=True):
                    values[known[p]] = v
                if values.get("repeats") == 0:
                    values["repeats"] = 1
                try:
                    cls(kind=spec["kind"], **values) if cls is Stage else cls(**values)
                except (GenomeError, TypeError) as error:
                    fail(f"{where}.{key}", str(error).split(": ", 1)[-1])
