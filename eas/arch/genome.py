"""Architecture genomes: frozen values with a compact, human-readable string form.

A genome is a '-'-separated list of parts; each part is '_'-separated tokens:

    stem_c32_k3_s2_relu6-ir_r1_k3_s1_e1_c16_relu6-ir_r2_k3_s2_e6_c24_se_hswish-head_c1280_f0_relu6_d0.2

Tokens: r repeats, k kernel, s stride (of the first block of a stage), e expansion ratio,
c width (output channels), h attention heads, f FFN ratio (in `head`: hidden units of an extra
fully-connected layer, 0 for none), d dropout, `se` squeeze-excite, and an activation name;
in `stem` only, i input resolution: the network resizes its input to i x i pixels before the stem
(`stem_i20_c16_...`: a 28-px image is seen at 20 px), written only when set.
Part kinds: `stem`, `ds` (depthwise-separable conv), `ir` (inverted residual / MBConv),
`la` (linear-attention block with its FFN), `head` (c0 = no final 1x1 conv).

`Arch.decode` accepts tokens in any order; `encode` writes the canonical order below, so
`decode(s).encode() == s` for canonical strings and `decode(encode(a)) == a` always.
This module imports no torch: the genome is the currency every part of EAS shares.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
from dataclasses import asdict, dataclass, replace

from eas.errors import UserError

ACTIVATIONS = ("relu", "relu6", "hswish", "gelu", "silu")
KERNELS = (3, 5, 7)
STAGE_KINDS = ("ds", "ir", "la")

# Canonical token order of each part kind; the letter tokens map to dataclass fields.
TOKEN_FIELDS = {"r": "repeats", "k": "kernel", "s": "stride", "e": "expansion", "c": "width",
                "h": "heads", "f": "ffn", "d": "dropout", "i": "resolution"}
OPTIONAL_TOKENS = {"se", "i"}  # absent: no squeeze-excite; the input at the size it comes
FIELD_TOKENS = {name: token for token, name in TOKEN_FIELDS.items()}
PART_TOKENS = {
    "stem": ("i", "c", "k", "s", "act"),
    "ds": ("r", "k", "s", "c", "se", "act"),
    "ir": ("r", "k", "s", "e", "c", "se", "act"),
    "la": ("r", "s", "c", "h", "f", "act"),
    "head": ("c", "f", "act", "d"),
}
_NUMBER_TOKEN = re.compile(r"^([a-z])(\d+(?:\.\d+)?)$")


class GenomeError(UserError, ValueError):
    """A genome string or value that does not describe a valid architecture."""


def _format_number(x: float) -> str:
    """Shortest exact text for a number: 6.0 -> '6', 3.67 -> '3.67'."""
    text = repr(float(x))
    return text[:-2] if text.endswith(".0") else text


def _check(condition: bool, where: str, message: str) -> None:
    if not condition:
        raise GenomeError(f"{where}: {message}")


@dataclass(frozen=True)
class Stem:
    width: int = 32
    kernel: int = 3
    stride: int = 2
    act: str = "relu6"
    resolution: int = 0  # the input resized to this many pixels a side first; 0: as it comes

    def __post_init__(self) -> None:
        _check_common(self, "stem")
        _check(self.kernel in (1, 3, 5, 7), "stem", f"kernel must be 1, 3, 5 or 7 (got {self.kernel})")
        _check(isinstance(self.resolution, int) and (self.resolution == 0 or 4 <= self.resolution <= 4096), "stem",
               f"input resolution must be 4..4096 pixels (got {self.resolution})")


@dataclass(frozen=True)
class Stage:
    """`repeats` blocks of one kind; the first has `stride`, the rest stride 1."""

    kind: str
    repeats: int = 1
    kernel: int = 3
    stride: int = 1
    expansion: float = 1.0
    width: int = 16
    se: bool = False
    act: str = "relu6"
    heads: int = 0
    ffn: float = 0.0

    def __post_init__(self) -> None:
        where = f"{self.kind} stage"
        _check(self.kind in STAGE_KINDS, "stage", f"kind must be one of {', '.join(STAGE_KINDS)} (got {self.kind!r})")
        _check_common(self, where)
        _check(isinstance(self.repeats, int) and 1 <= self.repeats <= 32, where,
               f"repeats must be an integer 1..32 (got {self.repeats!r})")
        object.__setattr__(self, "expansion", float(self.expansion))
        object.__setattr__(self, "ffn", float(self.ffn))
        if self.kind == "la":
            _check(self.kernel == 3 and self.expansion == 1.0 and not self.se, where,
                   "kernel, expansion and se do not apply to linear attention")
            _check(isinstance(self.heads, int) and self.heads >= 1, where,
                   f"heads must be a positive integer (got {self.heads!r})")
            _check(self.width % self.heads == 0, where,
                   f"width {self.width} is not divisible by heads {self.heads}")
            _check(0 < self.ffn <= 16, where, f"ffn ratio must be in (0, 16] (got {_format_number(self.ffn)})")
            return
        _check(self.kernel in KERNELS, where, f"kernel must be one of 3, 5, 7 (got {self.kernel!r})")
        _check(self.heads == 0 and self.ffn == 0.0, where, "heads and ffn apply to linear attention only")
        if self.kind == "ds":
            _check(self.expansion == 1.0, where, "expansion does not apply to depthwise-separable conv")
        _check(1.0 <= self.expansion <= 16, where,
               f"expansion must be in [1, 16] (got {_format_number(self.expansion)})")


@dataclass(frozen=True)
class Head:
    """Optional 1x1 conv to `width` channels, global pooling, optional hidden FC, classifier."""

    width: int = 0
    ffn: int = 0
    act: str = "relu6"
    dropout: float = 0.0

    def __post_init__(self) -> None:
        _check(isinstance(self.width, int) and 0 <= self.width <= 8192, "head",
               f"width must be an integer 0..8192 (got {self.width!r})")
        _check(float(self.ffn).is_integer() and 0 <= self.ffn <= 8192, "head",
               f"hidden units (f) must be an integer 0..8192 (got {self.ffn!r})")
        object.__setattr__(self, "ffn", int(self.ffn))
        object.__setattr__(self, "dropout", float(self.dropout))
        _check(self.act in ACTIVATIONS, "head", f"unknown activation {self.act!r}")
        _check(0.0 <= self.dropout < 1.0, "head", f"dropout must be in [0, 1) (got {self.dropout})")


def _check_common(part: Stem | Stage, where: str) -> None:
    _check(isinstance(part.width, int) and 1 <= part.width <= 8192, where,
           f"width must be an integer 1..8192 (got {part.width!r})")
    _check(part.stride in (1, 2), where, f"stride must be 1 or 2 (got {part.stride!r})")
    _check(part.act in ACTIVATIONS, where,
           f"unknown activation {part.act!r} (known: {', '.join(ACTIVATIONS)})")


@dataclass(frozen=True)
class Arch:
    stem: Stem
    stages: tuple[Stage, ...]
    head: Head

    def __post_init__(self) -> None:
        object.__setattr__(self, "stages", tuple(self.stages))
        _check(len(self.stages) >= 1, "arch", "needs at least one stage")

    @property
    def depth(self) -> int:
        return sum(stage.repeats for stage in self.stages)

    @property
    def downsamplings(self) -> int:
        return int(self.stem.stride == 2) + sum(stage.stride == 2 for stage in self.stages)

    def encode(self) -> str:
        return "-".join(_encode_part(kind, part) for kind, part in self._parts())

    def sees(self, input_shape: tuple[int, int, int]) -> tuple[int, int, int]:
        """The shape the stem takes: the input's, or its channels at the stem's resolution."""
        r = self.stem.resolution
        return (input_shape[0], r, r) if r else (input_shape[0], input_shape[1], input_shape[2])

    @classmethod
    def decode(cls, text: str) -> Arch:
        if not isinstance(text, str):
            raise GenomeError(f"a genome is a string (got {text!r:.40} ({type(text).__name__}))")
        if not text.strip():
            raise GenomeError("empty genome")
        parts = text.strip().split("-")
        kinds = [part.split("_", 1)[0] for part in parts]
        if kinds[0] != "stem" or kinds[-1] != "head" or len(parts) < 3:
            raise GenomeError(f"genome must be 'stem_...-<stages>-head_...' (got parts {kinds})")
        stem = _build_part(Stem, parts[0], "stem")
        stages = []
        for part, kind in zip(parts[1:-1], kinds[1:-1], strict=True):
            if kind not in STAGE_KINDS:
                raise GenomeError(f"part {part!r}: unknown kind {kind!r} (known: {', '.join(STAGE_KINDS)})")
            stages.append(_build_part(Stage, part, kind))
        return cls(stem, tuple(stages), _build_part(Head, parts[-1], "head"))

    def canonical(self) -> Arch:
        """The same network with fields that change nothing set to fixed values, so genomes that
        build the same network are equal (as NAS-Bench-101 prunes a spec before hashing it).
        A head without its 1x1 conv and hidden layer has no activation to choose."""
        if self.head.width == 0 and self.head.ffn == 0 and self.head.act != ACTIVATIONS[0]:
            return Arch(self.stem, self.stages, replace(self.head, act=ACTIVATIONS[0]))
        return self

    def canonical_hash(self) -> str:
        """Equal for genomes that build the same network, whatever token order or unused field."""
        return hashlib.sha256(self.canonical().encode().encode()).hexdigest()[:16]

    def adapted_to(self, resolution: int, min_feature_size: int = 3,
                   may_stride: list[bool] | None = None) -> Arch:
        """The one written rule for small inputs (the search spaces' and the baselines' alike):
        a network takes as many stride-2 steps as `resolution` allows, so that the last feature
        map is at least `min_feature_size` pixels. With more, the earliest become stride 1, as the
        common small-input versions of MobileNets set the stem and first strides to 1.

        `may_stride` marks the parts (the stem, then each stage) whose stride a space leaves to the
        search; their choices say *where* the network downsamples, never how often: with more
        steps than allowed, the latest of the open ones go first (the earliest chosen are kept),
        then fixed ones, earliest first; with fewer, the latest open ones take stride 2. An input
        large enough keeps every stride."""
        allowed = max(0, math.floor(math.log2(resolution / min_feature_size)))
        strides = [self.stem.stride] + [s.stride for s in self.stages]
        open_ = may_stride or [False] * len(strides)
        excess = sum(s == 2 for s in strides) - allowed
        dropping = [i for i in reversed(range(len(strides))) if open_[i]] + \
            [i for i in range(len(strides)) if not open_[i]]
        for i in dropping:
            if excess > 0 and strides[i] == 2:
                strides[i], excess = 1, excess - 1
        for i in reversed(range(len(strides))):
            if excess < 0 and open_[i] and strides[i] == 1:
                strides[i], excess = 2, excess + 1
        return self.with_strides(strides)

    def with_strides(self, strides: list[int]) -> Arch:
        """The same arch with the stem's and each stage's stride replaced, in order."""
        stem = replace(self.stem, stride=strides[0])
        stages = tuple(replace(s, stride=k) for s, k in zip(self.stages, strides[1:], strict=True))
        return Arch(stem, stages, self.head)

    def _parts(self):
        yield "stem", self.stem
        for stage in self.stages:
            yield stage.kind, stage
        yield "head", self.head


def _encode_part(kind: str, part: Stem | Stage | Head) -> str:
    tokens = [kind]
    for token in PART_TOKENS[kind]:
        if token == "act":
            tokens.append(part.act)
        elif token == "se":
            if getattr(part, "se", False):  # only a stage has one
                tokens.append("se")
        elif token == "i":
            if isinstance(part, Stem) and part.resolution:  # only a stem has one
                tokens.append(f"i{part.resolution}")
        else:
            tokens.append(token + _format_number(getattr(part, TOKEN_FIELDS[token])))
    return "_".join(tokens)


@functools.lru_cache(maxsize=4096)
def _build_part(cls: type, text: str, kind: str):
    """Parts are immutable and repeat across a study's genomes: reading 10,000 stored trials
    decodes a few hundred distinct parts, not 45,000."""
    values = _decode_part(text, kind)
    if cls is Stage:
        values["kind"] = kind
    try:
        return cls(**values)
    except GenomeError as error:
        raise GenomeError(f"part {text!r}: {error}") from None


def _decode_part(text: str, kind: str) -> dict:
    allowed = PART_TOKENS[kind]
    values: dict = {}
    for token in text.split("_")[1:]:
        where = f"token {token!r} in {text!r}"
        value: str | bool | float | int
        if token in ACTIVATIONS:
            token_name, key, value = "act", "act", token
        elif token == "se":
            token_name, key, value = "se", "se", True
        else:
            match = _NUMBER_TOKEN.match(token)
            if not match or match.group(1) not in TOKEN_FIELDS:
                raise GenomeError(f"{where}: not a known token (expected {', '.join(allowed)})")
            token_name, number = match.groups()
            key = TOKEN_FIELDS[token_name]
            if token_name in "efd":
                value = float(number)
            elif "." in number:
                raise GenomeError(f"{where}: {key} must be an integer")
            else:
                value = int(number)
        if token_name not in allowed:
            raise GenomeError(f"{where}: {key} does not apply to {kind}")
        if key in values:
            raise GenomeError(f"{where}: {key} given twice")
        values[key] = value
    missing = [t for t in allowed if t not in OPTIONAL_TOKENS and _field(t) not in values]
    if missing:
        names = ", ".join(f"{t} ({_field(t)})" if t != "act" else "activation" for t in missing)
        raise GenomeError(f"part {text!r}: missing {names}")
    return values


def _field(token: str) -> str:
    return "act" if token == "act" else TOKEN_FIELDS.get(token, token)


def arch_spec(arch: Arch) -> dict:
    """The plain-dict description eas.arch.blocks.Network takes: {"stem": {...}, "stages": [...], "head": {...}}."""
    return {"stem": asdict(arch.stem), "stages": [asdict(s) for s in arch.stages], "head": asdict(arch.head)}
