"""tools/make_unicode_additions.py — where the character sets of the Hugging Face `tokenizers`
library's regex engine (Oniguruma, Unicode 16) differ from PCRE2 10.42's (Unicode 14.0), for
src/tokenizer/unicode_additions.h.

A letter added since Unicode 14.0 (e.g. U+11F04, Kawi, 15.0; U+11380, Tulu-Tigalari, 16.0) is
\\p{L} (and \\p{Lo}) there but not here, which changes pre-token boundaries; a code point whose
category changed (U+1171E AHOM CONSONANT SIGN MEDIAL RA, Mn in 14.0, Mc since 15.0) is in a
different two-letter category. For every general category, one- and two-letter (and LC, the
cased letters), and for the word characters \\w, this writes the code points Oniguruma puts in
the set that PCRE2 does not ("added") and those PCRE2 puts in it that Oniguruma does not
("removed"), as PCRE2 class ranges. \\w is written against the PCRE2 class
[\\p{L}\\p{M}\\p{Nd}\\p{Pc}] (PCRE2 10.42's own \\w is \\p{L}, \\p{N} and '_'); Oniguruma's
also has the Nl and Other_Alphabetic So code points (U+2160, U+24B6), and it is two sets there:
alone it has U+00B2, U+00B3, U+00B9 and U+00BC-U+00BE (Latin-1 No), inside a class ([\\w],
[^\\w], [\\W]) it has not.

Both sides are the libraries themselves: for each set a Split pre-tokenizer of `tokenizers` with
behaviour "removed" runs over every Unicode scalar value (those it removes are Oniguruma's set),
and libpcre2-8 (through ctypes; it must be 10.42, the version specula links) finds the runs of
the PCRE2 class in the same text. hf_tokenizer.cpp (to_pcre2) rewrites each \\p{X} / \\P{X} /
\\p{^X}, \\d / \\D (Oniguruma's \\d is \\p{Nd}), \\w / \\W and \\b / \\B of a tokenizer.json regex
with them.

Usage: python3 tools/make_unicode_additions.py > src/tokenizer/unicode_additions.h
  (needs the `tokenizers` package and libpcre2-8; about two minutes)
"""
import ctypes
import ctypes.util
import sys

from tokenizers import Regex, pre_tokenizers
import tokenizers

# (name, Oniguruma pattern, PCRE2 class items)
SETS = [(c, r"\p{" + c + "}", r"\p{" + c + "}") for c in (
    "L", "Lu", "Ll", "Lt", "Lm", "Lo", "M", "Mn", "Mc", "Me", "N", "Nd", "Nl", "No",
    "P", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "S", "Sm", "Sc", "Sk", "So",
    "Z", "Zs", "Zl", "Zp", "C", "Cc", "Cf", "Co", "Cn")]
SETS.insert(1, ("LC", r"\p{LC}", r"\p{L&}"))
SETS.append((r"\w", r"\w", r"\p{L}\p{M}\p{Nd}\p{Pc}"))
SETS.append((r"[\w]", r"[\w]", r"\p{L}\p{M}\p{Nd}\p{Pc}"))  # \w inside a class: another set

PCRE2_UTF = 0x00080000
PCRE2_UCP = 0x00020000
PCRE2_NO_UTF_CHECK = 0x40000000
PCRE2_CONFIG_UNICODE_VERSION = 10
PCRE2_CONFIG_VERSION = 11


class Pcre2:
    def __init__(self):
        self.lib = lib = ctypes.CDLL(ctypes.util.find_library("pcre2-8") or "libpcre2-8.so.0")
        lib.pcre2_config_8.argtypes = [ctypes.c_uint32, ctypes.c_void_p]
        lib.pcre2_compile_8.restype = ctypes.c_void_p
        lib.pcre2_compile_8.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint32,
                                        ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_size_t),
                                        ctypes.c_void_p]
        lib.pcre2_match_data_create_8.restype = ctypes.c_void_p
        lib.pcre2_match_data_create_8.argtypes = [ctypes.c_uint32, ctypes.c_void_p]
        lib.pcre2_get_ovector_pointer_8.restype = ctypes.POINTER(ctypes.c_size_t)
        lib.pcre2_get_ovector_pointer_8.argtypes = [ctypes.c_void_p]
        lib.pcre2_match_8.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t,
                                      ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p]

    def config(self, what):
        buf = ctypes.create_string_buffer(64)
        self.lib.pcre2_config_8(what, buf)
        return buf.value.decode()

    def runs(self, pattern, data):
        """Byte spans of the non-overlapping matches of pattern in data."""
        p = pattern.encode()
        err, off = ctypes.c_int(), ctypes.c_size_t()
        code = self.lib.pcre2_compile_8(p, len(p), PCRE2_UTF | PCRE2_UCP, ctypes.byref(err),
                                        ctypes.byref(off), None)
        if not code:
            sys.exit(f"PCRE2 cannot compile {pattern!r} (error {err.value} at {off.value})")
        md = self.lib.pcre2_match_data_create_8(1, None)
        pos, out = 0, []
        while pos < len(data):
            if self.lib.pcre2_match_8(code, data, len(data), pos, PCRE2_NO_UTF_CHECK, md, None) < 0:
                break
            ov = self.lib.pcre2_get_ovector_pointer_8(md)
            out.append((ov[0], ov[1]))
            pos = max(ov[1], ov[0] + 1)
        return out


def ranges(cps):
    out = []
    for cp in cps:
        if out and out[-1][1] == cp - 1:
            out[-1][1] = cp
        else:
            out.append([cp, cp])
    return out


def c_string(cps, indent):
    """The ranges as a C string literal (lines split between escapes)."""
    if not cps:
        return indent + '""'
    body = "".join(f"\\\\x{{{a:X}}}" + (f"-\\\\x{{{b:X}}}" if b != a else "") for a, b in ranges(cps))
    chunk, lines = "", []
    for piece in body.replace("\\\\x", "\n\\\\x").split("\n"):
        if len(chunk) + len(piece) > 96:
            lines.append(chunk)
            chunk = ""
        chunk += piece
    lines.append(chunk)
    return "\n".join(f'{indent}"{l}"' for l in lines if l)


def c_literal(s):
    return '"' + s.replace("\\", "\\\\") + '"'


def main():
    pcre2 = Pcre2()
    version, unicode_version = pcre2.config(PCRE2_CONFIG_VERSION), pcre2.config(PCRE2_CONFIG_UNICODE_VERSION)
    if not version.startswith("10.42"):
        sys.exit(f"libpcre2-8 is {version}; specula links 10.42 (Debian 12)")
    cps = [cp for cp in range(0x110000) if not (0xD800 <= cp <= 0xDFFF)]
    text = "".join(chr(cp) for cp in cps)
    data = text.encode("utf-8")
    cp_at = {}
    offset = 0
    for cp in cps:
        cp_at[offset] = cp
        offset += len(chr(cp).encode("utf-8"))
    rows = []
    for name, onig_pattern, items in SETS:
        split = pre_tokenizers.Split(Regex(onig_pattern), behavior="removed")
        kept = set("".join(piece for piece, _ in split.pre_tokenize_str(text)))
        onig = {cp for cp in cps if chr(cp) not in kept}
        mine = set()
        for b, e in pcre2.runs("[" + items + "]+", data):
            mine.update(ord(c) for c in data[b:e].decode("utf-8"))
        added, removed = sorted(onig - mine), sorted(mine - onig)
        rows.append((name, items, added, removed))
        print(f"{name}: +{len(added)} -{len(removed)}", file=sys.stderr)

    print("// tokenizer/unicode_additions.h — generated by tools/make_unicode_additions.py; do not edit.")
    print(f"// Where the character sets of Oniguruma in `tokenizers` {tokenizers.__version__} differ from those of")
    print(f"// PCRE2 {version} (Unicode {unicode_version}): per set the code points Oniguruma adds and those it does")
    print("// not have, as PCRE2 class ranges. hf_tokenizer.cpp (to_pcre2) rewrites the \\p{X} and \\w of a")
    print("// tokenizer.json regex with them.")
    print("#pragma once\n\nnamespace specula::tokenizer {\n")
    print("struct UnicodeSetDelta {")
    print("  const char* name;     // general category (LC: the cased letters Lu, Ll, Lt), or \\w")
    print("  const char* pcre2;    // PCRE2 class items for it")
    print("  const char* added;    // in Oniguruma's set, not in PCRE2's")
    print("  const char* removed;  // in PCRE2's set, not in Oniguruma's")
    print("};\n")
    print("inline constexpr UnicodeSetDelta kUnicodeSetDeltas[] = {")
    for name, items, added, removed in rows:
        print(f"    // {name}: {len(added)} code points added, {len(removed)} removed")
        print(f"    {{{c_literal(name)}, {c_literal(items)},")
        print(c_string(added, "     ") + ",")
        print(c_string(removed, "     ") + "},")
    print("};\n")
    print("}  // namespace specula::tokenizer")


if __name__ == "__main__":
    main()
