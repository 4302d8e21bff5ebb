"""Model specs: the presets' parameter totals and dims, --layers, and every bad SPEC refused with its file
named."""

import pytest

from commbench.config.launch import LaunchConfig
from commbench.errors import UsageError
from commbench.patterns.models import load_model, parse_model, preset_names
from tests.dist_helpers import commbench

# Published totals: GPT-2 small 124,439,808 (Hugging Face `gpt2`, tied head); Llama 7B 6,738,415,616;
# Mixtral 8x7B 46.7B (arXiv:2401.04088): 8 experts of 3 x 14336 x 4096, grouped-query k/v of 1024 rows.
GPT2_SMALL = 50257 * 768 + 1024 * 768 + 12 * (
    2 * 768 + 768 * 2304 + 2304 + 768 * 768 + 768 + 2 * 768 + 768 * 3072 + 3072 + 3072 * 768 + 768) + 2 * 768
LLAMA_7B = 32000 * 4096 + 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008 + 2 * 4096) + 4096 + 32000 * 4096
MIXTRAL = 2 * 32000 * 4096 + 4096 + 32 * (
    2 * 4096 * 4096 + 2 * 1024 * 4096 + 8 * 4096 + 8 * 3 * 14336 * 4096 + 2 * 4096)


def test_preset_totals_match_the_published_parameter_counts():
    assert GPT2_SMALL == 124_439_808 and LLAMA_7B == 6_738_415_616
    gpt2 = load_model("gpt2-small")
    assert gpt2.numel == GPT2_SMALL
    assert [unit.name for unit in gpt2.units] == ["root", *(f"block{i}" for i in range(12))]
    assert gpt2.units[0].root and gpt2.layer_count == 12 and len(gpt2.units[1].params) == 12
    assert gpt2.units[1].params[2].shape == (2304, 768)  # nn.Linear's [out, in]: FSDP2 shards dim 0
    llama = load_model("llama-7b")
    assert llama.numel == LLAMA_7B
    assert len(llama.units) == 33 and llama.units[1].numel == 202_383_360
    assert round(llama.numel / 1e9, 1) == 6.7 and round(gpt2.numel / 1e6) == 124
    mixtral = load_model("mixtral-8x7b")
    assert mixtral.numel == MIXTRAL == 46_702_792_704 and round(mixtral.numel / 1e9, 1) == 46.7
    assert (mixtral.dims.experts, mixtral.dims.top_k, mixtral.dims.kv_heads) == (8, 2, 8)
    assert {"gpt2-small", "llama-7b", "tiny", "mixtral-8x7b"} <= set(preset_names())


def test_every_preset_s_dims_agree_with_its_shapes():
    for name in preset_names():
        model = load_model(name)
        dims, block = model.dims, model.units[1]
        assert dims.layers == model.layer_count, name
        hidden_sized = [param.shape for param in block.params if len(param.shape) == 2]
        assert all(dims.hidden in shape for shape in hidden_sized), name
        assert any(dims.ffn in shape for shape in hidden_sized), name
        embedding = model.units[0].params[0].shape
        assert embedding == (dims.vocab, dims.hidden), name


def test_layers_cuts_a_model_down_and_names_the_cut():
    llama = load_model("llama-7b", layers=2)
    assert [unit.name for unit in llama.units] == ["root", "block0", "block1"] and llama.dims.layers == 2
    assert llama.numel == LLAMA_7B - 30 * 202_383_360
    assert llama.label == "llama-7b/layers=2" and load_model("llama-7b").label == "llama-7b"
    with pytest.raises(UsageError, match="--layers 33: model llama-7b has 32 layers; choose 1 to 32"):
        load_model("llama-7b", layers=33)
    with pytest.raises(UsageError, match="--layers 0 must be at least 1"):
        load_model("tiny", layers=0)


def _parse(document):
    return parse_model(document, "m.yaml")


def test_a_spec_file_is_parsed_in_order(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("units:\n  - name: a\n    params: {w: [3, 5], b: 7}\n"
                    "  - name: layer\n    repeat: 2\n    params: {w: [2]}\n")
    model = load_model(str(path))
    assert model.name == "mine" and model.source == str(path)
    assert [(u.name, [(p.name, p.shape) for p in u.params]) for u in model.units] == [
        ("a", [("w", (3, 5)), ("b", (7,))]), ("layer0", [("w", (2,))]), ("layer1", [("w", (2,))])]
    assert model.numel == 26 and model.cut(1).numel == 24


@pytest.mark.parametrize("document, message", [
    ([1, 2], "m.yaml: expected a mapping with 'units', got list"),
    ({"units": []}, "m.yaml: 'units' must be a non-empty list"),
    ({"unit": []}, "m.yaml: unknown key 'unit' (did you mean units?)"),
    ({"units": ["x"]}, "m.yaml: units[0]: expected a mapping with 'name' and 'params', got str"),
    ({"units": [{"params": {"w": [1]}}]}, "m.yaml: units[0]: 'name' must be a non-empty string"),
    ({"units": [{"name": "a"}]}, "m.yaml: units[0] (a): 'params' must be a non-empty mapping"),
    ({"units": [{"name": "a", "params": {"w": [768, -1]}}]},
     "m.yaml: units[0] (a): parameter 'w': shape must be a list of positive whole numbers, got [768, -1]"),
    ({"units": [{"name": "a", "params": {"w": [2.5]}}]}, "parameter 'w': shape must be a list of positive"),
    ({"units": [{"name": "a", "params": {"w": "big"}}]}, "parameter 'w': shape must be a list of positive"),
    ({"units": [{"name": "a", "parms": {"w": [1]}}]}, "units[0]: unknown key 'parms' (did you mean params?)"),
    ({"units": [{"name": "a", "repeat": 0, "params": {"w": [1]}}]},
     "'repeat' must be a whole number of at least 1"),
    ({"units": [{"name": "a", "params": {"w": [1]}}, {"name": "a", "params": {"w": [1]}}]},
     "m.yaml: unit name 'a' appears twice"),
    ({"units": [{"name": "a", "params": {"w": [1]}}, {"name": "r", "root": True, "params": {"w": [1]}}]},
     "m.yaml: the root unit must come first"),
    ({"units": [{"name": "r", "root": "yes", "params": {"w": [1]}}]}, "'root' must be true or false"),
    ({"units": [{"name": "r", "root": True, "repeat": 2, "params": {"w": [1]}}]},
     "a root unit cannot repeat"),
    ({"dims": {"hidden": 4}, "units": [{"name": "a", "params": {"w": [1]}}]},
     "m.yaml: dims: 'layers' is missing"),
    ({"dims": {"hidden": 4, "layers": 2, "heads": 1, "ffn": 8, "vocab": 9, "context": 0},
      "units": [{"name": "a", "params": {"w": [1]}}]}, "dims: context must be a whole number of at least 1"),
    ({"dims": {"hidden": 4, "layers": 2, "heads": 1, "ffn": 8, "vocab": 9, "context": 5, "expert": 2},
      "units": [{"name": "a", "params": {"w": [1]}}]}, "dims: unknown key 'expert' (did you mean experts?)"),
    ({"dims": {"hidden": 4, "layers": 3, "heads": 1, "ffn": 8, "vocab": 9, "context": 5},
      "units": [{"name": "a", "repeat": 2, "params": {"w": [1]}}]},
     "layers is 3 but the spec has 2 layer units"),
    ({"dims": {"hidden": 4, "layers": 1, "heads": 1, "ffn": 8, "vocab": 9, "context": 5, "experts": 4,
               "top_k": 5},
      "units": [{"name": "a", "params": {"w": [1]}}]}, "top_k must be 1 to experts (4), got 5"),
])
def test_bad_specs_name_the_file_and_the_problem(document, message):
    with pytest.raises(UsageError) as caught:
        _parse(document)
    assert message in str(caught.value)


def test_layers_needs_repeated_units():
    model = _parse({"units": [{"name": "a", "params": {"w": [4]}}]})
    with pytest.raises(UsageError, match="has no layer units"):
        model.cut(1)


BAD_COMMANDS = [
    (["--model", "gpt2-smal"], "unknown model 'gpt2-smal' (did you mean gpt2-small?): give a preset"),
    (["--model", "missing.yaml"], "model spec missing.yaml: no such file"),
    (["--model", "tiny", "--layers", "3"], "--layers 3: model tiny has 2 layers"),
    (["--model", "tiny", "--bucket-mb", "1,big"], "--bucket-mb: 'big' is neither a size in MiB nor 'unit'"),
    (["--model", "tiny", "--fallback", "lists"], "unknown --fallback 'lists' (did you mean list?)"),
]


@pytest.mark.parametrize("changes, message", [
    ({"buckets": ["-1"]}, "--bucket-mb: '-1' must be a size of at least 0 MiB"),
    ({"buckets": [""]}, "--bucket-mb: no bucket size given"),
    ({"predivide": 0.0}, "--predivide 0 must be above 0"),
    ({"postdivide": -2.0}, "--postdivide -2 must be above 0"),
    ({"check": True, "predivide": 3.0}, "--check needs a power-of-two --predivide"),
    ({"dtype": "int32"}, "--dtype int32: FSDP parameters and gradients are floating point"),
    ({"reduce_dtype": "int8"}, "--reduce-dtype int8: FSDP parameters and gradients are floating point"),
    ({"param_dtype": "fp17"}, "unknown dtype 'fp17'"),
    ({"fsdp_version": 3}, "--fsdp-version 3: choose 2 (fully_shard) or 1"),
    ({"dtype": "float7"}, "unknown dtype 'float7'"),
    ({"compute_size": "huge"}, "--compute-size 'huge'"),
    ({"iters": 0}, "--iters 0 must be at least 1"),
    ({"launch": LaunchConfig(backend="nccl")}, "backend nccl is not available"),
])
def test_resolve_refuses_bad_options(changes, message):
    from commbench.patterns.fsdp import FsdpConfig, resolve_fsdp

    with pytest.raises(UsageError) as caught:
        resolve_fsdp(FsdpConfig(model="tiny", **changes))
    assert message in str(caught.value)


@pytest.mark.processes
@pytest.mark.parametrize("args, message", BAD_COMMANDS, ids=[" ".join(a) for a, _ in BAD_COMMANDS])
def test_bad_pattern_input_exits_2_with_one_line(args, message):
    result = commbench("pattern", "fsdp", *args, timeout=60)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("commbench: error: "), result.stderr
    assert message in lines[0]
    assert result.stdout == ""


@pytest.mark.processes
def test_a_broken_yaml_file_exits_2_naming_file_and_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("units:\n  - name: a\n    params: {w: [1, 2}\n")
    result = commbench("pattern", "fsdp", "--model", str(path), timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"{path}: not valid YAML at line 3" in result.stderr
