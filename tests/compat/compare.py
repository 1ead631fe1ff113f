#!/usr/bin/env python3
"""compare.py — llama.cpp's server suite, specula beside the native llama-server.

  python3 tests/compat/compare.py build/compat/native.xml build/compat/specula.xml [--markdown]

Reads the two JUnit files run_llama_server_suite.sh wrote and prints: every test's outcome
on both engines; the tests that pass on the native llama-server with the same local models
(the ones that are neither model-specific nor need the internet: a test that fails
natively on these models checks the text of the suite's own tiny models, or downloads
something) and how many of those pass on specula; and the tests that pass natively but
fail on specula, with the first line of specula's failure."""
import sys
import xml.etree.ElementTree as ET


def outcomes(path):
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        if case.find("skipped") is not None:
            out[name] = ("skipped", "")
        elif case.find("failure") is not None or case.find("error") is not None:
            node = case.find("failure") if case.find("failure") is not None else case.find("error")
            msg = (node.get("message") or node.text or "").strip().splitlines()
            out[name] = ("failed", msg[0][:160] if msg else "")
        else:
            out[name] = ("passed", "")
    return out


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    markdown = "--markdown" in sys.argv
    native, specula = outcomes(args[0]), outcomes(args[1])
    names = sorted(set(native) | set(specula))
    base = [n for n in names if native.get(n, ("missing",))[0] == "passed"]
    both = [n for n in base if specula.get(n, ("missing",))[0] == "passed"]
    lost = [n for n in base if specula.get(n, ("missing",))[0] != "passed"]
    gained = [n for n in names if specula.get(n, ("missing",))[0] == "passed" and native.get(n, ("missing",))[0] != "passed"]
    n_native = sum(1 for n in names if native.get(n, ("missing",))[0] != "skipped")
    n_spec_pass = sum(1 for n in names if specula.get(n, ("missing",))[0] == "passed")
    print(f"tests: {len(names)}; native llama-server passes {len(base)} of {n_native} run; "
          f"specula passes {n_spec_pass}")
    print(f"of the {len(base)} that pass natively (not model-specific, no internet): specula passes {len(both)} "
          f"({100.0 * len(both) / max(1, len(base)):.1f}%)")
    print(f"specula passes {len(gained)} that the native server fails on these models")
    if lost:
        print("\npass natively, fail on specula:")
        for n in lost:
            print(f"  {n}: {specula.get(n, ('missing', ''))[1]}")
    if markdown:
        print("\n| test | llama-server | specula |\n| --- | --- | --- |")
        for n in names:
            print(f"| {n} | {native.get(n, ('-',))[0]} | {specula.get(n, ('-',))[0]} |")


if __name__ == "__main__":
    main()
