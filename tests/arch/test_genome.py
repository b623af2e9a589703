import pytest
from hypothesis import given
from hypothesis import strategies as st

from eas.arch.genome import ACTIVATIONS, Arch, GenomeError, Head, Stage, Stem
from eas.arch.reference import REFERENCES, reference

acts = st.sampled_from(ACTIVATIONS)
ratios = st.sampled_from([1.0, 2.0, 3.0, 3.67, 4.0, 4.5, 6.0])
stems = st.builds(Stem, width=st.integers(1, 64), kernel=st.sampled_from([1, 3, 5, 7]),
                  stride=st.sampled_from([1, 2]), act=acts, resolution=st.sampled_from([0, 4, 20, 224]))
conv_stages = st.builds(
    Stage, kind=st.sampled_from(["ds", "ir"]), repeats=st.integers(1, 4),
    kernel=st.sampled_from([3, 5, 7]), stride=st.sampled_from([1, 2]), width=st.integers(1, 512),
    se=st.booleans(), act=acts,
).map(lambda s: s if s.kind == "ds" else Stage(**{**s.__dict__, "expansion": 6.0}))
attention_stages = st.integers(1, 8).flatmap(lambda heads: st.builds(
    Stage, kind=st.just("la"), repeats=st.integers(1, 4), stride=st.sampled_from([1, 2]),
    width=st.integers(1, 32).map(lambda k: k * heads), heads=st.just(heads), ffn=ratios, act=acts))
ir_stages = st.builds(Stage, kind=st.just("ir"), expansion=ratios, width=st.integers(1, 512),
                      kernel=st.sampled_from([3, 5, 7]), act=acts)
heads = st.builds(Head, width=st.integers(0, 2048), ffn=st.integers(0, 2048), act=acts,
                  dropout=st.sampled_from([0.0, 0.1, 0.2, 0.5]))
archs = st.builds(Arch, stem=stems,
                  stages=st.lists(st.one_of(conv_stages, attention_stages, ir_stages),
                                  min_size=1, max_size=8).map(tuple),
                  head=heads)


@given(archs)
def test_decode_of_encode_is_identity(arch):
    text = arch.encode()
    assert Arch.decode(text) == arch
    assert Arch.decode(text).encode() == text
    assert Arch.decode(text).canonical_hash() == arch.canonical_hash()


@pytest.mark.parametrize("name", REFERENCES)
def test_canonical_strings_round_trip(name):
    text = REFERENCES[name]
    assert Arch.decode(text).encode() == text


def test_token_order_does_not_change_the_arch_or_its_hash():
    a = Arch.decode("stem_c16_k3_s2_relu-ir_r2_k5_s2_e4_c24_se_hswish-head_c0_f0_relu_d0")
    b = Arch.decode("stem_relu_s2_k3_c16-ir_hswish_se_c24_e4_s2_k5_r2-head_d0_relu_f0_c0")
    assert a == b and a.canonical_hash() == b.canonical_hash()
    other = Arch.decode("stem_c16_k3_s2_relu-ir_r2_k5_s2_e4_c32_se_hswish-head_c0_f0_relu_d0")
    assert other.canonical_hash() != a.canonical_hash()


@pytest.mark.parametrize("text, fragment", [
    ("stem_c16_k3_s2_relu-ir_r2_k4_s2_e4_c24_relu-head_c0_f0_relu_d0", "kernel"),
    ("stem_c16_k3_s2_relu-ir_r2_kx_s2_e4_c24_relu-head_c0_f0_relu_d0", "'kx'"),
    ("stem_c16_k3_s2_relu-ir_r2_k3_s2_e4_c24-head_c0_f0_relu_d0", "activation"),
    ("stem_c16_k3_s2_relu-xx_r2_k3_s2_e4_c24_relu-head_c0_f0_relu_d0", "'xx'"),
    ("stem_c16_k3_s2_relu-la_r1_s1_c30_h4_f2_relu-head_c0_f0_relu_d0", "divisible"),
    ("stem_c16_k3_s3_relu-ir_r2_k3_s2_e4_c24_relu-head_c0_f0_relu_d0", "stride"),
    ("stem_c16_k3_s2_relu-ds_r2_k3_s2_e4_c24_relu-head_c0_f0_relu_d0", "expansion"),
    ("stem_c16_k3_s2_relu-ir_r2_r3_k3_s2_e4_c24_relu-head_c0_f0_relu_d0", "twice"),
    ("stem_c16_k3_s2_relu-ir_r2.5_k3_s2_e4_c24_relu-head_c0_f0_relu_d0", "integer"),
    ("stem_i2_c16_k3_s2_relu-ir_r2_k3_s2_e4_c24_relu-head_c0_f0_relu_d0", "input resolution"),
    ("stem_c16_k3_s2_relu-ir_i20_r2_k3_s2_e4_c24_relu-head_c0_f0_relu_d0", "resolution does not apply to ir"),
    ("ir_r2_k3_s2_e4_c24_relu", "stem"),
    ("", "empty"),
])
def test_malformed_genomes_name_the_problem(text, fragment):
    with pytest.raises(GenomeError, match=fragment):
        Arch.decode(text)


def test_validation_on_construction_names_the_field():
    with pytest.raises(GenomeError, match="kernel"):
        Stage(kind="ir", kernel=9, expansion=6, width=8)
    with pytest.raises(GenomeError, match="width"):
        Stem(width=0)
    with pytest.raises(GenomeError, match="dropout"):
        Head(dropout=1.5)


def test_genome_module_imports_no_torch():
    import subprocess
    import sys
    code = "import sys, eas.arch.genome, eas.arch.space, eas.arch.reference; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_reference_lookup():
    assert reference("mobilenet_v2").depth == 17
    with pytest.raises(KeyError, match="mobilenet_v2"):
        reference("resnet")


def test_an_input_resolution_is_written_only_when_set_so_older_genomes_keep_their_text_and_hash():
    text = "stem_c16_k3_s1_relu-ds_r1_k3_s2_c24_relu-head_c0_f0_relu_d0"
    arch = Arch.decode(text)
    assert arch.stem.resolution == 0 and arch.encode() == text and arch.sees((1, 28, 28)) == (1, 28, 28)
    resized = Arch.decode("stem_i20_c16_k3_s1_relu-ds_r1_k3_s2_c24_relu-head_c0_f0_relu_d0")
    assert resized.stem.resolution == 20 and resized.sees((3, 28, 28)) == (3, 20, 20)
    assert resized.canonical_hash() != arch.canonical_hash()  # another network: it sees another image
