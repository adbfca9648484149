"""The tiny policy's character-level tokenizer reads back from disk exactly as the warm-up used it: every character
one token, spaces and newlines included. (``AutoTokenizer`` on the saved folder picks Qwen2's class from the model's
type and drops whitespace: every run trained and was scored on prompts the warm-up never showed.)"""

from __future__ import annotations

from evotrainer.config import TinyPolicyConfig
from evotrainer.policy.build import build_model, build_tokenizer
from evotrainer.trainer.model import load_policy

TEXTS = ["def f(x):\n    # f(0) == 30, f(2) == 32\n    return x + 30", "What is 12 + 7?", " a\n b  c "]


def test_a_saved_tiny_policy_tokenizes_and_decodes_as_the_warm_up_did(tmp_path):
    tokenizer = build_tokenizer()
    build_model(TinyPolicyConfig(hidden_size=16, num_layers=1, num_heads=1), len(tokenizer), 0).save_pretrained(
        tmp_path)
    tokenizer.save_pretrained(tmp_path)
    _, loaded, _ = load_policy(str(tmp_path), "cpu", "float32", False, 0)
    for text in TEXTS:
        ids = tokenizer(text)["input_ids"]
        assert len(ids) == len(text) and loaded(text)["input_ids"] == ids
        assert loaded.decode(ids) == text
    assert (loaded.eos_token_id, loaded.pad_token_id) == (tokenizer.eos_token_id, tokenizer.pad_token_id)
