"""train.tiny: offline, deterministic tiny assets with the promised layout."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # train_fixtures, whatever the import mode
from train_fixtures import REPO, hf_cache, subprocess_env, tiny  # noqa: F401


def digests(root):
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.timeout(180)
def test_cli_build_is_deterministic_for_a_seed(tmp_path, hf_cache, tiny):
    from train import tiny as tiny_mod

    result = subprocess.run([sys.executable, "-m", "train.tiny", str(tmp_path / "cli"), "--seed", "3"],
                            cwd=REPO, env=subprocess_env(hf_cache), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    tiny_mod.build(tmp_path / "fn", seed=3)
    assert digests(tmp_path / "cli") == digests(tmp_path / "fn")
    # Another seed, other data and weights.
    assert digests(tmp_path / "cli")["data/text.jsonl"] != digests(tiny)["data/text.jsonl"]


def test_layout_and_data(tiny):
    for sub in ("lm", "bert"):
        assert (tiny / sub / "config.json").is_file() and (tiny / sub / "model.safetensors").is_file()
    text = rows(tiny / "data" / "text.jsonl")
    assert all(set(r) == {"text"} for r in text)
    lengths = [len(r["text"].split()) for r in text]
    assert min(lengths) < 20 and max(lengths) > 120  # variable lengths: packing has work to do
    for split in ("labelled_train.jsonl", "labelled_eval.jsonl"):
        data = rows(tiny / "data" / split)
        assert all(set(r) == {"text", "label"} for r in data)
        assert {r["label"] for r in data} == {0, 1}
    chat = rows(tiny / "data" / "chat.jsonl")
    assert all([m["role"] for m in r["messages"]] == ["user", "assistant"] for r in chat)


def test_models_and_tokenizers_load_offline(tiny):
    from transformers import AutoConfig, AutoTokenizer

    lm_cfg, bert_cfg = AutoConfig.from_pretrained(tiny / "lm"), AutoConfig.from_pretrained(tiny / "bert")
    assert lm_cfg.architectures == ["LlamaForCausalLM"] and lm_cfg.hidden_size == 64
    assert lm_cfg.num_hidden_layers == 2
    assert bert_cfg.architectures == ["BertForSequenceClassification"] and bert_cfg.num_labels == 2
    tok = AutoTokenizer.from_pretrained(tiny / "lm")
    assert tok.pad_token and tok.eos_token and tok.pad_token != tok.eos_token
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    bert_tok = AutoTokenizer.from_pretrained(tiny / "bert")
    ids = bert_tok("what a superb movie")["input_ids"]
    assert bert_tok.convert_ids_to_tokens(ids) == ["[CLS]", "what", "a", "superb", "movie", "[SEP]"]
