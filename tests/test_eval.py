"""The evaluator's held-out evaluation, in process on the tiny policy: greedy items are 0/1, sampled pass@1 items are
shares of k samples, and a sampled evaluation is reproducible and leaves the caller's random state alone."""

from __future__ import annotations

import pytest
import torch

from evotrainer import config as C
from evotrainer.rundir import RunDir
from tests.conftest import FAST


@pytest.fixture(scope="module")
def policy(tmp_path_factory, policy_cache):
    import os

    from evotrainer.domains import get_domain
    from evotrainer.trainer.model import load_policy

    os.environ["EVOTRAINER_CACHE"] = str(policy_cache)
    rd = RunDir(tmp_path_factory.mktemp("eval") / "run")
    rd.init(C.apply_overrides(C.parse({}), FAST), log=lambda _: None)
    model, tokenizer, _ = load_policy(rd.ensure_policy(log=lambda _: None), "cpu", "float32", False, 0)
    return model, tokenizer, get_domain("math"), rd


def _greedy(policy, tasks: list[dict], budget: int) -> torch.Tensor:
    """The policy's greedy completions of ``tasks`` (new tokens only), at most ``budget`` tokens each."""
    model, tokenizer, domain, _ = policy
    enc = tokenizer([domain.canonical_prompt(t) for t in tasks], return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=budget, do_sample=False, pad_token_id=tokenizer.pad_token_id,
                             eos_token_id=tokenizer.eos_token_id)
    return out[:, enc["input_ids"].shape[1]:]


def test_sampled_pass_at_1_scores_each_item_by_the_share_of_its_k_samples(policy):
    from evotrainer.trainer.model import evaluate

    model, tokenizer, domain, rd = policy
    # tasks whose answer is the policy's own greedy completion: greedy scores every one, while sampling at
    # temperature 1 departs from the greedy path on some samples, so item scores fall strictly between 0 and 1
    tasks = rd.eval_tasks()[:24]
    texts = tokenizer.batch_decode(_greedy(policy, tasks, 8), skip_special_tokens=True)
    own = [{**t, "answer": a} for t, text in zip(tasks, texts) if (a := domain.extract_answer(text)) is not None]
    assert len(own) >= 12, texts

    greedy = evaluate(model, tokenizer, domain, own, 8, "cpu")
    assert greedy.accuracy == 1.0 and set(greedy.items.values()) == {1.0}

    torch.manual_seed(123)
    before = torch.rand(3)
    torch.manual_seed(123)
    k = 8
    sampled = evaluate(model, tokenizer, domain, own, 8, "cpu", batch_size=32, samples=k)
    assert torch.equal(torch.rand(3), before), "sampling moved the caller's random state"
    assert sorted(sampled.items) == sorted(t["id"] for t in own) and sampled.n == len(own)
    assert all(round(v * k) == v * k for v in sampled.items.values())  # shares of k samples
    assert any(0 < v < 1 for v in sampled.items.values()), sampled.items
    assert sampled.accuracy == pytest.approx(sum(sampled.items.values()) / len(own))
    by_level = {lv: [v for t in own for i, v in sampled.items.items() if i == t["id"] and t["difficulty"] == lv]
                for lv in sampled.by_difficulty}
    assert sampled.by_difficulty == {lv: pytest.approx(sum(v) / len(v)) for lv, v in by_level.items()}
    # seeded: the same call gives the same items (batching included); another seed draws other samples
    assert evaluate(model, tokenizer, domain, own, 8, "cpu", batch_size=32, samples=k).items == sampled.items
    assert evaluate(model, tokenizer, domain, own, 8, "cpu", batch_size=32, samples=k, seed=1).items != sampled.items


def test_the_config_carries_eval_samples_to_the_trainer():
    from evotrainer.trainer.wire import EvalRequest, PhaseRequest

    cfg = C.apply_overrides(C.parse({}), ["training.eval_samples=4"])
    assert EvalRequest.make(cfg, "runs/x", "ckpt").training.eval_samples == 4
    assert PhaseRequest.make(cfg, "runs/x", 1, "0" * 40, "ckpt", 5).training.eval_samples == 4
    assert EvalRequest.make(C.parse({}), "runs/x", "ckpt").training.eval_samples == 0  # greedy by default
    with pytest.raises(C.ConfigError, match="eval_samples"):
        C.apply_overrides(C.parse({}), ["training.eval_samples=-1"])


def test_eval_batch_size_sets_the_generate_calls_and_leaves_greedy_scores_alone(policy, monkeypatch):
    """``training.eval_batch_size`` is read wherever a checkpoint is scored (evaluate_as_configured): it decides how
    many completions each generate call holds (a throughput knob), never a greedy score."""
    from evotrainer.trainer.model import evaluate_as_configured

    model, tokenizer, domain, rd = policy
    tasks = rd.dev_tasks()[:40]
    calls: list[int] = []
    generate = model.generate

    def counted(**kw):
        calls.append(kw["input_ids"].shape[0])
        return generate(**kw)

    monkeypatch.setattr(model, "generate", counted)
    scored = {}
    for size in (7, 40):
        cfg = C.apply_overrides(C.parse({}), [f"training.eval_batch_size={size}"])
        calls.clear()
        scored[size] = evaluate_as_configured(model, tokenizer, domain, tasks, "cpu", cfg.training, cfg.policy)
        assert max(calls) == size and sum(calls) == len(tasks), calls
    assert scored[7].items == scored[40].items and scored[7].n == len(tasks)


def test_ended_length_counts_the_tokens_of_completions_that_ended_and_leaves_cut_ones_out(policy):
    """``EvalResult.ended_length`` is what the policy writes when the budget does not cut it (the Engineer sizes a
    completion budget from it): each completion's tokens up to and including end-of-sequence, cut ones left out."""
    from evotrainer.trainer.model import ended_length, evaluate

    model, tokenizer, domain, rd = policy
    tasks = rd.dev_tasks()[:40]
    rows = _greedy(policy, tasks, 16).tolist()
    eos = tokenizer.eos_token_id
    lengths = sorted(r.index(eos) + 1 for r in rows if eos in r)
    assert len(lengths) >= 30 and lengths[-1] > 1, lengths  # the warmed-up policy ends its answers
    full = evaluate(model, tokenizer, domain, tasks, 16, "cpu")
    assert full.ended_length == ended_length(lengths, 16)
    assert full.ended_length["max"] == lengths[-1] and full.ended_length["p50"] == lengths[len(lengths) // 2]
    assert full.truncated_rate == pytest.approx(1 - len(lengths) / len(tasks))
    # a budget under the longest answer: those answers are cut, so they leave the lengths and count as truncated
    short = evaluate(model, tokenizer, domain, tasks, lengths[-1] - 1, "cpu")
    assert short.ended_length["max"] < lengths[-1] and short.ended_length["budget"] == lengths[-1] - 1
    assert short.truncated_rate > full.truncated_rate
    assert ended_length([], 16) == {"n": 0, "budget": 16} and full.ended_length["n"] == len(lengths)


def test_the_tolerant_score_reads_the_same_completions_and_forgives_only_the_format_slip(monkeypatch):
    """A real (very small) policy warmed up to answer every sum with the format slip ``7.``, scored by the real
    evaluation: where the answer is 7 it is wrong strictly and right under the tolerant verdict, where it is 8 wrong
    under both, per level too; and the tolerant score costs no generation of its own."""
    from evotrainer.domains.math import MathDomain
    from evotrainer.policy import build
    from evotrainer.trainer.model import evaluate

    domain = MathDomain()
    split = domain.splits(0, {"dev": 40, "warmup": 260})
    tokenizer = build.build_tokenizer()
    cfg = C.TinyPolicyConfig(hidden_size=16, num_layers=1, num_heads=2, warmup_steps=300, warmup_batch_size=8,
                             warmup_lr=1e-2, warmup_target_accuracy=1.0, warmup_slip=0.9)
    model = build.build_model(cfg, len(tokenizer), 0)
    build.warm_up(model, tokenizer, [(domain.canonical_prompt(t), "7", "7.") for t in split["warmup"]], cfg, 0,
                  log=lambda _: None)
    tasks = [{**t, "answer": "78"[n % 2]} for n, t in enumerate(split["dev"])]  # each level: half 7, half 8
    said = build.greedy_answers(model, tokenizer, [domain.canonical_prompt(t) for t in tasks])
    assert said.count("7.") >= 36, said  # the slip is what the policy writes

    rows: list[int] = []
    generate = model.generate
    monkeypatch.setattr(model, "generate", lambda **kw: rows.append(kw["input_ids"].shape[0]) or generate(**kw))
    result = evaluate(model, tokenizer, domain, tasks, 8, "cpu")
    assert sum(rows) == len(tasks)  # one completion per task, read by both verdicts
    expected = {t["id"]: float(domain.verify_tolerant(t, s + "\n")) for t, s in zip(tasks, said)}
    assert result.tolerant_items == expected and set(result.items.values()) == {0.0}
    assert result.accuracy == 0.0 and result.tolerant_accuracy == pytest.approx(sum(expected.values()) / len(tasks))
    assert result.tolerant_accuracy >= 0.4  # the 7s, not the 8s (at least 16 of the 20 said "7.")
    assert result.tolerant_by_difficulty == {lv: pytest.approx(sum(expected[t["id"]] for t in tasks if t["difficulty"]
                                             == lv) / 10) for lv in domain.levels}  # 10 dev tasks a level
    assert result.tolerant().items == result.tolerant_items and result.tolerant().accuracy == result.tolerant_accuracy
