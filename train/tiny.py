"""Tiny offline assets: a Llama LM, a BERT classifier, their tokenizers, and data.

    python -m train.tiny OUT [--seed N]

Builds in seconds without network, deterministic for a seed:
  OUT/lm/      LlamaForCausalLM (hidden 64, 2 layers) + byte-level BPE tokenizer (ChatML template)
  OUT/bert/    BertForSequenceClassification (2 labels) + WordPiece tokenizer
  OUT/data/    text.jsonl, chat.jsonl, labelled_train.jsonl, labelled_eval.jsonl

The data is an IMDB-like synthetic review set: the label is carried by sentiment words,
so a tiny model can learn it in a few dozen steps; lengths vary widely (packing matters).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

POSITIVE = ["great", "wonderful", "brilliant", "moving", "superb", "delightful",
            "excellent", "charming", "masterful", "beautiful", "gripping", "funny"]
NEGATIVE = ["awful", "boring", "terrible", "dull", "clumsy", "dreadful",
            "tedious", "weak", "messy", "painful", "bland", "forgettable"]
NOUNS = ["detective", "farmer", "pilot", "teacher", "robot", "singer", "doctor", "sailor",
         "painter", "student", "king", "dog", "mother", "soldier", "chef", "thief"]
PLACES = ["a small town", "the city", "space", "an old house", "the desert", "a school",
          "the mountains", "a ship", "a hospital", "the forest", "paris", "a prison"]
VERBS = ["gets lost", "falls in love", "solves a crime", "loses everything", "finds a map",
         "starts a band", "runs away", "meets a stranger", "builds a machine", "goes home"]
ASPECTS = ["acting", "script", "music", "camera work", "ending", "dialogue", "pacing",
           "cast", "story", "direction", "soundtrack", "editing"]
SENTIMENT_TEMPLATES = [
    "the {aspect} was {adj} .",
    "i found the {aspect} {adj} .",
    "overall it is a {adj} film .",
    "honestly the {aspect} felt {adj} .",
    "what a {adj} movie .",
    "the {aspect} is {adj} and the {aspect2} is {adj2} .",
]
NEUTRAL_TEMPLATES = [
    "the film follows a {noun} who {verb} in {place} .",
    "it was shot in {place} over two years .",
    "a {noun} and a {noun2} share the screen for most of it .",
    "the second half moves to {place} .",
    "there is a long scene where the {noun} {verb} .",
]

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


# ---------------------------------------------------------------------------- data
def review(rng: random.Random, label: int) -> str:
    words = POSITIVE if label == 1 else NEGATIVE
    # Geometric-ish number of sentences: many short reviews, a long tail of long ones.
    n = min(1 + int(rng.expovariate(0.25)), 24)
    sentences = []
    for _ in range(n):
        if rng.random() < 0.45:
            t = rng.choice(SENTIMENT_TEMPLATES)
            sentences.append(t.format(aspect=rng.choice(ASPECTS), aspect2=rng.choice(ASPECTS),
                                      adj=rng.choice(words), adj2=rng.choice(words)))
        else:
            t = rng.choice(NEUTRAL_TEMPLATES)
            sentences.append(t.format(noun=rng.choice(NOUNS), noun2=rng.choice(NOUNS),
                                      verb=rng.choice(VERBS), place=rng.choice(PLACES)))
    # Every review carries its label at least once.
    sentences.insert(rng.randrange(len(sentences) + 1),
                     rng.choice(SENTIMENT_TEMPLATES[:5]).format(aspect=rng.choice(ASPECTS),
                                                                adj=rng.choice(words)))
    return " ".join(sentences)


def make_reviews(rng: random.Random, n: int) -> list[dict]:
    return [{"text": review(rng, label), "label": label}
            for label in (rng.randrange(2) for _ in range(n))]


def write_jsonl(path: Path, rows: list[dict]) -> None:
    with open(path, "w") as fh:
        for row in rows:
            fh.write(json.dumps(row, sort_keys=True) + "\n")


def build_data(out: Path, rng: random.Random) -> dict[str, list[dict]]:
    out.mkdir(parents=True, exist_ok=True)
    train = make_reviews(rng, 800)
    evals = make_reviews(rng, 200)
    text = [{"text": r["text"]} for r in make_reviews(rng, 1000)]
    chat = [
        {"messages": [
            {"role": "user", "content": f"Review: {r['text']}\nIs this review positive or negative?"},
            {"role": "assistant", "content": "positive" if r["label"] else "negative"},
        ]}
        for r in make_reviews(rng, 400)
    ]
    files = {"text.jsonl": text, "chat.jsonl": chat,
             "labelled_train.jsonl": train, "labelled_eval.jsonl": evals}
    for name, rows in files.items():
        write_jsonl(out / name, rows)
    return files


def corpus(files: dict[str, list[dict]]) -> list[str]:
    lines = [r["text"] for r in files["text.jsonl"]] + [r["text"] for r in files["labelled_train.jsonl"]]
    lines += [m["content"] for r in files["chat.jsonl"] for m in r["messages"]]
    return lines


# ---------------------------------------------------------------------------- models
def build_lm(out: Path, lines: list[str], seed: int) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|pad|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(lines, trainers.BpeTrainer(
        vocab_size=768, special_tokens=specials, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|pad|>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"], model_max_length=512)
    hf_tok.chat_template = CHATML_TEMPLATE

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(hf_tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        eos_token_id=hf_tok.eos_token_id, pad_token_id=hf_tok.pad_token_id, bos_token_id=None,
        tie_word_embeddings=True)
    model = LlamaForCausalLM(config)
    model.save_pretrained(out)
    hf_tok.save_pretrained(out)


def build_bert(out: Path, lines: list[str], seed: int) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast

    # The vocabulary is built here, not by WordPieceTrainer, whose token order varies from
    # run to run: special tokens, every character (plain and ##), then every whole word.
    normalizer = normalizers.BertNormalizer(lowercase=True)
    pre = pre_tokenizers.BertPreTokenizer()
    words = sorted({w for line in lines for w, _ in pre.pre_tokenize_str(normalizer.normalize_str(line))})
    chars = sorted({c for w in words for c in w})
    vocab_list = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars + [f"##{c}" for c in chars]
    vocab_list += [w for w in words if w not in set(vocab_list)]
    tok = Tokenizer(models.WordPiece(vocab={t: i for i, t in enumerate(vocab_list)}, unk_token="[UNK]"))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    tok.decoder = decoders.WordPiece()
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)])
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
        sep_token="[SEP]", mask_token="[MASK]", model_max_length=512)

    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(hf_tok), hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=128, max_position_embeddings=512, num_labels=2,
        pad_token_id=hf_tok.pad_token_id, id2label={0: "negative", 1: "positive"},
        label2id={"negative": 0, "positive": 1})
    model = BertForSequenceClassification(config)
    model.save_pretrained(out)
    hf_tok.save_pretrained(out)


def build(out_dir: str | Path, seed: int = 0) -> Path:
    """Write the tiny assets under out_dir; returns it as a Path."""
    out = Path(out_dir)
    rng = random.Random(seed)
    files = build_data(out / "data", rng)
    lines = corpus(files)
    build_lm(out / "lm", lines, seed)
    build_bert(out / "bert", lines, seed)
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m train.tiny", description=__doc__.split("\n")[0])
    parser.add_argument("out", help="directory to write lm/, bert/ and data/ into")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    out = build(args.out, seed=args.seed)
    print(f"tiny assets written to {out}")
    return {"out": str(out), "seed": args.seed}


if __name__ == "__main__":
    main(sys.argv[1:])
