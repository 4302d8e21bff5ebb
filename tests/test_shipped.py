"""Sweep files and model presets by bare name, from the source tree or an installed wheel's data."""

from commbench.core.shipped import configs_dir, shipped_file, shipped_names
from commbench.patterns.models import load_model, preset_names


def test_bare_names_find_the_shipped_files():
    root = configs_dir()
    assert root is not None and (root / "smoke.yaml").is_file()
    assert shipped_file("smoke") == root / "smoke.yaml"
    assert shipped_file("gpt2-small", "models") == root / "models" / "gpt2-small.yaml"
    assert shipped_file("no-such-sweep") is None
    assert shipped_file("baselines") is None and "baselines" not in shipped_names()  # --expect's data
    assert shipped_file("configs/smoke.yaml") is None  # a path is a path, not a name
    assert {"gpt2-small", "llama-7b", "tiny"} <= set(preset_names())
    assert load_model("tiny").name == "tiny"
