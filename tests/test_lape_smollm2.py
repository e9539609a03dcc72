"""LAPE's two top-K rules on the real SmolLM2-135M (issue 13): slow, needs the fetched GGUF."""

from pathlib import Path

import pytest

from .conftest import load_experiment

GGUF = Path("/root/.cache/mathneuro-models/smollm2-135m/model.gguf")


@pytest.mark.slow
@pytest.mark.skipif(not GGUF.is_file(), reason=f"{GGUF} not fetched (../shared/models/fetch-models.sh)")
def test_lape_rules_on_smollm2_with_the_embedded_demo_data():
    from mathneuro.models import load_model

    script = load_experiment("studies/lape_rule_counts")
    model, tok = load_model(str(GGUF), device="cpu")
    out = script.rule_counts(model, tok, num_samples=24, top_ks=[0.0001, 0.05, 0.15])
    # measured on the project's machine (bf16, CPU): 3,126 + 1,291 tokens, 3,108 candidates of 46,080
    assert out["num_neurons"] == 46080
    assert out["num_candidates"] == pytest.approx(3108, rel=0.02)
    tiny, low, high = out["points"]
    assert tiny["all/num_kept"] == 5 and tiny["candidates/num_kept"] == 0  # round(4.6) against floor(0.31)
    assert low["all/num_kept"] == 2304 and high["all/num_kept"] == 6912
    assert low["all/math"] == pytest.approx(1790, rel=0.03) and low["candidates/math"] == pytest.approx(98, rel=0.1)
    assert high["all/math"] == pytest.approx(2588, rel=0.03) and high["candidates/math"] == pytest.approx(299, rel=0.1)
    assert low["candidates_in_all"] and high["candidates_in_all"]  # the variant is the low-entropy end
    assert not low["all/saturated"] and high["all/saturated"]  # 0.15 · 46,080 > 3,108 candidates
    assert out["saturation_top_k"] == pytest.approx(3108 / 46080, rel=0.02)
