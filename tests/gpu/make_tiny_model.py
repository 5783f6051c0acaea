#!/usr/bin/env python3
"""Write a tiny random Qwen3 target model and a tiny random DFlash draft model.

Standard library only (json, struct, array, random): it runs on any Python 3.8+
with no torch, numpy, tokenizers or transformers, and writes the same bytes on
every machine for a given --seed, so the result can be built here and carried,
or rebuilt on the GPU host.

  python3 make_tiny_model.py --out DIR [--seed 0] [--hidden 256] [--layers 4]

writes

  DIR/target/   config.json (Qwen3ForCausalLM, model_type qwen3), generation_config.json,
                model.safetensors (bf16), tokenizer.json (byte-level BPE: the 256 byte
                symbols, no merges, plus special tokens), tokenizer_config.json
                (PreTrainedTokenizerFast + a ChatML chat template), special_tokens_map.json
  DIR/draft/    config.json (architectures DFlashDraftModel, model_type qwen3,
                block_size, num_target_layers, dflash_config{target_layer_ids,
                mask_token, mask_token_id}), model.safetensors (bf16): layers.*,
                fc.weight, hidden_norm.weight, norm.weight -- the tensor names of
                z-lab's DFlash checkpoints, which sglang's models/dflash.py loads
                (q/k/v_proj -> qkv_proj, gate/up_proj -> gate_up_proj)
  DIR/MANIFEST.json  sizes and sha256 of every file, and the parameter counts

The weights are random (normal-ish, std 0.02; norms 1.0): the server generates
tokens, not sense, and the DFlash draft's acceptance rate is near zero -- the
point is to run the real code paths (loading, prefill, decode, DFlash draft and
verify), not to measure quality.

Shapes default to head_dim 128 (as Qwen3-8B), so RoPE and attention take the
same kernel branches as the real model (sglang's CUDA RoPE takes its main JIT
kernel only for head sizes 64/128/256/512).
"""
from __future__ import annotations

import argparse
import array
import hashlib
import json
import math
import os
import random
import struct
import sys

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|MASK|>"]
CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


# --------------------------------------------------------------------------- tensors
def bf16_bytes(values: array.array) -> bytes:
    """float32 array -> little-endian bf16 bytes (round to nearest even)."""
    bits = array.array("I")
    bits.frombytes(values.tobytes())
    if sys.byteorder != "little":
        bits.byteswap()
    out = array.array("H", bytes(2 * len(bits)))
    for i, b in enumerate(bits):
        out[i] = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF
    if sys.byteorder != "little":
        out.byteswap()
    return out.tobytes()


def randn(rng: random.Random, n: int, std: float) -> array.array:
    # Irwin-Hall(4) approximation of a normal: cheap and deterministic across platforms.
    r = rng.random
    k = std * math.sqrt(3.0)
    return array.array("f", ((r() + r() + r() + r() - 2.0) * k for _ in range(n)))


def ones(n: int) -> array.array:
    return array.array("f", [1.0]) * n


def write_safetensors(path: str, tensors: list[tuple[str, list[int], bytes]], meta: dict) -> None:
    header: dict = {"__metadata__": {k: str(v) for k, v in meta.items()}}
    offset = 0
    for name, shape, data in tensors:
        n = 1
        for d in shape:
            n *= d
        assert len(data) == 2 * n, (name, shape, len(data))
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    hjson = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    hjson += b" " * ((8 - len(hjson) % 8) % 8)  # align the data start to 8 bytes
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(hjson)))
        fh.write(hjson)
        for _, _, data in tensors:
            fh.write(data)


class Builder:
    def __init__(self, seed: int, std: float = 0.02):
        self.rng = random.Random(seed)
        self.std = std
        self.tensors: list[tuple[str, list[int], bytes]] = []
        self.params = 0

    def linear(self, name: str, out_f: int, in_f: int) -> None:
        self._add(name, [out_f, in_f], randn(self.rng, out_f * in_f, self.std))

    def norm(self, name: str, n: int) -> None:
        self._add(name, [n], ones(n))

    def _add(self, name: str, shape: list[int], vals: array.array) -> None:
        self.tensors.append((name, shape, bf16_bytes(vals)))
        self.params += len(vals)


def decoder_layer(b: Builder, p: str, h: int, nh: int, nkv: int, hd: int, inter: int) -> None:
    b.norm(f"{p}.input_layernorm.weight", h)
    b.linear(f"{p}.self_attn.q_proj.weight", nh * hd, h)
    b.linear(f"{p}.self_attn.k_proj.weight", nkv * hd, h)
    b.linear(f"{p}.self_attn.v_proj.weight", nkv * hd, h)
    b.linear(f"{p}.self_attn.o_proj.weight", h, nh * hd)
    b.norm(f"{p}.self_attn.q_norm.weight", hd)
    b.norm(f"{p}.self_attn.k_norm.weight", hd)
    b.norm(f"{p}.post_attention_layernorm.weight", h)
    b.linear(f"{p}.mlp.gate_proj.weight", inter, h)
    b.linear(f"{p}.mlp.up_proj.weight", inter, h)
    b.linear(f"{p}.mlp.down_proj.weight", h, inter)


# --------------------------------------------------------------------------- tokenizer
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable-unicode map (what ByteLevel uses)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs, strict=True)}


def tokenizer_files(model_max_length: int) -> dict[str, dict]:
    byte_map = bytes_to_unicode()
    vocab = {byte_map[b]: b for b in range(256)}
    added = []
    for i, tok in enumerate(SPECIAL_TOKENS):
        added.append({"id": 256 + i, "content": tok, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": True})
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tok_json = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": vocab, "merges": []},
    }
    tok_cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": model_max_length,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "mask_token": "<|MASK|>",
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "clean_up_tokenization_spaces": False,
        "chat_template": CHATML,
        "added_tokens_decoder": {str(a["id"]): {k: v for k, v in a.items() if k != "id"} for a in added},
    }
    special_map = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "mask_token": "<|MASK|>",
                   "additional_special_tokens": ["<|im_start|>", "<|im_end|>"]}
    return {"tokenizer.json": tok_json, "tokenizer_config.json": tok_cfg, "special_tokens_map.json": special_map}


# --------------------------------------------------------------------------- models
def qwen3_config(a, arch: str, layers: int) -> dict:
    return {
        "architectures": [arch],
        "model_type": "qwen3",
        "vocab_size": a.vocab,
        "hidden_size": a.hidden,
        "intermediate_size": a.intermediate,
        "num_hidden_layers": layers,
        "num_attention_heads": a.heads,
        "num_key_value_heads": a.kv_heads,
        "head_dim": a.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": a.max_pos,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "use_sliding_window": False,
        "sliding_window": None,
        "max_window_layers": layers,
        "layer_types": ["full_attention"] * layers,
        "tie_word_embeddings": False,
        "initializer_range": 0.02,
        "use_cache": True,
        "bos_token_id": 256,
        "eos_token_id": 258,
        "pad_token_id": 256,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.57.1",
    }


def build(a) -> dict:
    if a.heads % a.kv_heads:
        raise SystemExit("--heads must be a multiple of --kv-heads")
    if a.vocab < 256 + len(SPECIAL_TOKENS):
        raise SystemExit(f"--vocab must be at least {256 + len(SPECIAL_TOKENS)}")
    ids = [int(x) for x in a.target_layer_ids.split(",")]
    if any(i < 0 or i + 1 >= a.layers for i in ids):
        # sglang captures "before layer i+1": keep i+1 inside the target.
        raise SystemExit(f"--target-layer-ids must lie in [0, {a.layers - 2}]")
    tdir, ddir = os.path.join(a.out, "target"), os.path.join(a.out, "draft")
    os.makedirs(tdir, exist_ok=True)
    os.makedirs(ddir, exist_ok=True)
    h, nh, nkv, hd, inter = a.hidden, a.heads, a.kv_heads, a.head_dim, a.intermediate

    # target: Qwen3ForCausalLM (HF tensor names)
    t = Builder(a.seed)
    t.linear("model.embed_tokens.weight", a.vocab, h)
    for i in range(a.layers):
        decoder_layer(t, f"model.layers.{i}", h, nh, nkv, hd, inter)
    t.norm("model.norm.weight", h)
    t.linear("lm_head.weight", a.vocab, h)
    write_safetensors(os.path.join(tdir, "model.safetensors"), t.tensors, {"format": "pt"})
    cfg = qwen3_config(a, "Qwen3ForCausalLM", a.layers)
    mask_id = 256 + SPECIAL_TOKENS.index("<|MASK|>")
    files = {"config.json": cfg,
             "generation_config.json": {"bos_token_id": 256, "eos_token_id": [258, 256], "pad_token_id": 256,
                                        "do_sample": False, "transformers_version": "4.57.1"}}
    files.update(tokenizer_files(a.max_pos))
    for name, obj in files.items():
        with open(os.path.join(tdir, name), "w") as fh:
            json.dump(obj, fh, indent=1, ensure_ascii=False, sort_keys=False)
            fh.write("\n")

    # draft: DFlashDraftModel (z-lab checkpoint layout, no embedding / lm_head)
    d = Builder(a.seed + 1)
    for i in range(a.draft_layers):
        decoder_layer(d, f"layers.{i}", h, nh, nkv, hd, inter)
    d.norm("norm.weight", h)
    d.linear("fc.weight", h, len(ids) * h)
    d.norm("hidden_norm.weight", h)
    write_safetensors(os.path.join(ddir, "model.safetensors"), d.tensors, {"format": "pt"})
    dcfg = qwen3_config(a, "DFlashDraftModel", a.draft_layers)
    dcfg.update({
        "block_size": a.block_size,
        "num_target_layers": a.layers,
        "dflash_config": {"target_layer_ids": ids, "mask_token": "<|MASK|>", "mask_token_id": mask_id},
    })
    with open(os.path.join(ddir, "config.json"), "w") as fh:
        json.dump(dcfg, fh, indent=1)
        fh.write("\n")

    manifest = {"seed": a.seed, "target_params": t.params, "draft_params": d.params, "files": {}}
    for sub in ("target", "draft"):
        for name in sorted(os.listdir(os.path.join(a.out, sub))):
            p = os.path.join(a.out, sub, name)
            with open(p, "rb") as fh:
                data = fh.read()
            manifest["files"][f"{sub}/{name}"] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    with open(os.path.join(a.out, "MANIFEST.json"), "w") as fh:
        json.dump(manifest, fh, indent=1)
        fh.write("\n")
    return manifest


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--intermediate", type=int, default=512)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--kv-heads", type=int, default=1)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4, help="target layers")
    ap.add_argument("--draft-layers", type=int, default=2)
    ap.add_argument("--target-layer-ids", default="1,2", help="dflash_config.target_layer_ids")
    ap.add_argument("--block-size", type=int, default=16, help="DFlash block size (as the b16 drafts)")
    ap.add_argument("--max-pos", type=int, default=4096)
    a = ap.parse_args(argv)
    m = build(a)
    total = sum(f["bytes"] for f in m["files"].values())
    print(f"target {m['target_params']:,} params, draft {m['draft_params']:,} params, "
          f"{total / 2**20:.1f} MiB in {len(m['files'])} files under {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
