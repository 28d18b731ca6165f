#!/usr/bin/env python3
"""How the shipped model's int8 recipe was chosen (docs/PERFORMANCE.md, "The model's matrix
products in int8"): for each recipe, texts/s, the cosine of each text's vector to the published
model's, and how far pair cosines move when texts share a model call.

    python3 -m pip install --target /tmp/int8-tools onnx==1.23.2 onnxruntime==1.24.4 \
        numpy==2.4.6 tokenizers
    PYTHONPATH=/tmp/int8-tools python3 docs/model/int8_recipes.py ../shared/data/runs/swe_agent_labelled_dev.jsonl

Needs `python3 models/fetch.py` first (the published model). Texts are every
string of 21-2999 characters in the runs file, shuffled with a fixed seed, as loopguard's model
sees them (truncated to 128 tokens, mean pooled, L2-normalised). Speeds drift by ±10 % between
minutes on a shared machine; compare rows of one run.
"""

import json
import os
import random
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort
from onnxruntime.quantization import QuantType, quantize_dynamic
from tokenizers import Tokenizer

MODELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models")
SOURCE = os.path.join(MODELS, "all-MiniLM-L6-v2", "model.onnx")
TOKENIZER = os.path.join(MODELS, "all-MiniLM-L6-v2", "tokenizer.json")


def texts_of(path, n, seed):
    out = []

    def walk(o):
        if isinstance(o, str):
            if 20 < len(o) < 3000:
                out.append(o)
        elif isinstance(o, dict):
            for v in o.values():
                walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)

    with open(path) as f:
        for line in f:
            walk(json.loads(line))
    random.Random(seed).shuffle(out)
    return out[:n]


def embed(session, tok, texts, per_call):
    out = []
    for i in range(0, len(texts), per_call):
        enc = tok.encode_batch(texts[i:i + per_call])
        ids = np.array([e.ids for e in enc], dtype=np.int64)
        mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
        hidden = session.run(None, {"input_ids": ids, "attention_mask": mask,
                                    "token_type_ids": np.zeros_like(ids)})[0]
        v = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
        out.append(v / np.linalg.norm(v, axis=1, keepdims=True))
    return np.concatenate(out)


def session(path):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def main():
    runs = sys.argv[1]
    tok = Tokenizer.from_file(TOKENIZER)
    tok.enable_truncation(128)
    tok.enable_padding()
    texts = texts_of(runs, 2000, 1)
    work = tempfile.mkdtemp(prefix="int8-recipes-")
    folded = os.path.join(work, "folded.onnx")
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = folded
    ort.InferenceSession(SOURCE, options, providers=["CPUExecutionProvider"])

    import onnx
    graph = onnx.load(folded)
    weights = {i.name: tuple(i.dims) for i in graph.graph.initializer}
    ffn_out = [n.name for n in graph.graph.node if n.op_type == "MatMul"
               and any(weights.get(x) == (1536, 384) for x in n.input)]
    recipes = {
        "per-tensor, signed": dict(weight_type=QuantType.QInt8),
        "per-tensor, unsigned": dict(weight_type=QuantType.QUInt8),
        "per-channel, signed": dict(weight_type=QuantType.QInt8, per_channel=True),
        "per-channel, signed, reduce_range": dict(weight_type=QuantType.QInt8, per_channel=True,
                                                  reduce_range=True),
        "per-channel, signed, FFN output in fp32": dict(weight_type=QuantType.QInt8,
                                                        per_channel=True,
                                                        nodes_to_exclude=ffn_out),
        "per-channel, unsigned (fetch.py --int8)": dict(weight_type=QuantType.QUInt8, per_channel=True),
    }
    paths = {"shipped model (fp32 products)": SOURCE}
    for name, kwargs in recipes.items():
        paths[name] = os.path.join(work, f"{len(paths)}.onnx")
        quantize_dynamic(folded, paths[name], **kwargs)

    reference = None
    reference_pairs = None
    pair_texts = texts_of(runs, 320, 2)
    print("| recipe | texts/s, calls of 32 | texts/s, one per call | cosine to the shipped model's, "
          "mean / min | near pairs' cosine against the shipped model's, mean / max change "
          "| pair cosine moved by sharing a call, max / mean |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, path in paths.items():
        s = session(path)
        embed(s, tok, texts[:64], 32)
        started = time.time()
        vectors = embed(s, tok, texts, 32)
        batched = len(texts) / (time.time() - started)
        started = time.time()
        embed(s, tok, texts[:1000], 1)
        alone_speed = 1000 / (time.time() - started)
        if reference is None:
            reference = vectors
        cos = (vectors * reference).sum(1)
        alone = embed(s, tok, pair_texts, 1)
        shared = embed(s, tok, pair_texts, 32)
        i = np.arange(0, len(pair_texts) - 1, 2)
        moved = np.abs((alone[i] * alone[i + 1]).sum(1) - (shared[i] * shared[i + 1]).sum(1))
        # Every pair of the 320 texts, each embedded alone; the near ones are where thresholds
        # sit (the shipped model's cosine 0.7-0.97).
        upper = np.triu_indices(len(pair_texts), 1)
        pairs = (alone @ alone.T)[upper]
        if reference_pairs is None:
            reference_pairs = pairs
        near = (reference_pairs > 0.7) & (reference_pairs < 0.97)
        shift = np.abs(pairs - reference_pairs)[near]
        print(f"| {name} | {batched:.0f} | {alone_speed:.0f} | {cos.mean():.3f} / {cos.min():.3f} "
              f"| {shift.mean():.4f} / {shift.max():.4f} ({near.sum()} pairs) "
              f"| {moved.max():.4f} / {moved.mean():.4f} |", flush=True)


if __name__ == "__main__":
    main()
