import json

import pytest

from moeserve import LLM


def test_unsupported_architecture_names_the_supported_ones(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}))
    with pytest.raises(ValueError, match="unsupported architecture 'GPT2LMHeadModel'.*MixtralForCausalLM"):
        LLM(model=str(tmp_path))
