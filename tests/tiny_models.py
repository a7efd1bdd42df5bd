"""Tiny, randomly initialised models and tokenizers built from configs, for fast offline unit tests."""

from __future__ import annotations

from pathlib import Path

TINY_CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)

_CORPUS = [
    "The capital of France is Paris. Paris is a city on the Seine.",
    "Question: who wrote Hamlet? Answer: William Shakespeare wrote Hamlet.",
    "Albert Einstein developed the theory of relativity in 1905 and 1915.",
    "The Nile is a river in Africa. It flows north into the Mediterranean Sea.",
    "Context: a passage about a topic. Answer the question in a few words.",
    "True False yes no maybe the a an of in on at to is was were be been 0 1 2 3 4 5 6 7 8 9",
]


def build_tiny_tokenizer(save_dir: str | Path | None = None, chat_template: bool = True):
    """A byte-level BPE tokenizer (~400 tokens) trained on a few sentences, with pad/bos/eos and a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    special = ["<pad>", "<s>", "</s>", "<unk>", "<|end|>", "<|user|>", "<|assistant|>", "<|system|>"]
    core = Tokenizer(models.BPE(unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    core.train_from_iterator(_CORPUS * 4, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    if chat_template:
        tokenizer.chat_template = TINY_CHAT_TEMPLATE
    if save_dir is not None:
        tokenizer.save_pretrained(save_dir)
    return tokenizer


def build_tiny_llama(
    save_dir: str | Path,
    seed: int = 0,
    chat_template: bool = True,
    max_positions: int = 256,
    *,
    tie_embeddings: bool = True,
    initializer_range: float = 0.02,
):
    """Save a 2-layer, 32-wide random Llama with the tiny tokenizer to ``save_dir``; return the directory.

    A large ``initializer_range`` (e.g. 1.0, untied embeddings) gives peaked, varied next-token distributions, so
    greedy answers are non-empty text instead of one repeated special token."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = build_tiny_tokenizer(save_dir, chat_template=chat_template)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=tie_embeddings,
        initializer_range=initializer_range,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.save_pretrained(save_dir)
    return Path(save_dir)


def build_tiny_encoder(
    save_dir: str | Path, seed: int = 0, num_labels: int | None = None, *, sentence_transformers: bool = True
):
    """Save a 2-layer, 32-wide random BERT (optionally with a classification head) and a WordPiece tokenizer.

    Without a head and with ``sentence_transformers`` (the default) the directory is laid out like the embedded
    MiniLM: ``modules.json`` (Transformer → mean Pooling → Normalize), ``sentence_bert_config.json`` and
    ``1_Pooling/config.json``."""
    import torch
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    from tokenizers.processors import TemplateProcessing
    from transformers import BertConfig, BertForSequenceClassification, BertModel, PreTrainedTokenizerFast

    normalizer, pre_tokenizer = normalizers.BertNormalizer(lowercase=True), pre_tokenizers.BertPreTokenizer()
    core = Tokenizer(models.WordPiece(_wordpiece_vocab(normalizer, pre_tokenizer), unk_token="[UNK]"))
    core.normalizer, core.pre_tokenizer = normalizer, pre_tokenizer

    core.post_processor = TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", core.token_to_id("[CLS]")), ("[SEP]", core.token_to_id("[SEP]"))],
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )
    tokenizer.save_pretrained(save_dir)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=128,
    )
    torch.manual_seed(seed)
    if num_labels:
        config.num_labels = num_labels
        model = BertForSequenceClassification(config)
    else:
        model = BertModel(config)
    model.save_pretrained(save_dir)
    if sentence_transformers and not num_labels:
        write_sentence_transformers_layout(save_dir, dim=32, max_seq_length=128)
    return Path(save_dir)


def _wordpiece_vocab(normalizer, pre_tokenizer) -> dict[str, int]:
    """The tiny encoder's WordPiece vocabulary, the same in every process: the special tokens, every lowercase ASCII
    letter, digit and punctuation mark alone and as a ``##`` continuation (so any ASCII word splits into pieces
    rather than one [UNK]), then the corpus's words by falling count (ties alphabetical). Built by hand because
    ``tokenizers``' WordPiece trainer breaks ties in hash order: its vocabulary, and with it every embedding of the
    random encoder, changed from one process to the next."""
    import string
    from collections import Counter

    counts = Counter(
        word
        for line in _CORPUS
        for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(line))
        if len(word) > 1
    )
    pieces = list(string.ascii_lowercase + string.digits + string.punctuation)
    tokens = [
        "[PAD]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
        *pieces,
        *(f"##{p}" for p in pieces),
        *sorted(counts, key=lambda w: (-counts[w], w)),
    ]
    return {token: i for i, token in enumerate(tokens)}


def write_sentence_transformers_layout(save_dir: str | Path, dim: int, max_seq_length: int) -> None:
    """The three small JSON files that make a BERT directory a sentence-transformers one (mean pooling, normalised)."""
    import json

    root = Path(save_dir)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    (root / "modules.json").write_text(json.dumps(modules))
    (root / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": max_seq_length, "do_lower_case": False})
    )
    (root / "1_Pooling").mkdir(exist_ok=True)
    pooling = {
        "word_embedding_dimension": dim,
        "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": True,
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
    }
    (root / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
