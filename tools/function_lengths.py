#!/usr/bin/env python3
"""tools/function_lengths.py — the longest functions and files of some folders of src/
(the upper floors' size limits: no function over 100 lines, no file over 700).

A function is a definition that starts at the start of a line (namespace scope, the
project's style) with its opening brace at the end of a line, up to the matching brace;
lambdas and local classes count towards the function that holds them.

Usage: python3 tools/function_lengths.py [--top N] [DIR ...]   (default: src/server src/cli)
"""
import argparse
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
START = re.compile(r"^[A-Za-z_][\w:<>,\s\*&~]*\([^;]*$")


def functions(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        if START.match(line) and not line.startswith(("namespace", "struct", "class", "enum", "using", "template")):
            j = i
            while j < len(lines) and not lines[j].rstrip().endswith("{") and not lines[j].rstrip().endswith(";"):
                j += 1
            if j < len(lines) and lines[j].rstrip().endswith("{"):
                depth, k = 0, j
                while k < len(lines):
                    depth += lines[k].count("{") - lines[k].count("}")
                    if depth == 0:
                        break
                    k += 1
                name = re.sub(r"\s+", " ", line.split("(")[0]).split(" ")[-1]
                out.append((k - i + 1, name, i + 1))
                i = k + 1
                continue
        i += 1
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dirs", nargs="*", default=["src/server", "src/cli"])
    ap.add_argument("--top", type=int, default=8)
    args = ap.parse_args()
    funcs, files = [], []
    for d in args.dirs:
        for name in sorted(os.listdir(os.path.join(ROOT, d))):
            if not name.endswith((".cpp", ".h")):
                continue
            p = os.path.join(ROOT, d, name)
            rel = os.path.relpath(p, ROOT)
            files.append((sum(1 for _ in open(p, encoding="utf-8")), rel))
            funcs += [(n, f"{rel}:{line} {fn}") for n, fn, line in functions(p)]
    print("longest functions:")
    for n, where in sorted(funcs, reverse=True)[: args.top]:
        print(f"  {n:4d}  {where}")
    print("longest files:")
    for n, rel in sorted(files, reverse=True)[: args.top]:
        print(f"  {n:4d}  {rel}")


if __name__ == "__main__":
    main()
