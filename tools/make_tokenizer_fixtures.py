#!/usr/bin/env python3
"""tools/make_tokenizer_fixtures.py — llama.cpp reference ids for the SPM tokenizer.

Writes tests/fixtures/tokenizer_gemma3.json from the llama.cpp oracle
(llama-cpp-python, vocab only) on Gemma 3 270M:
  cases:      text bytes (hex, plus the text when it is valid UTF-8), add_special,
              parse_special -> llama_tokenize ids;
  detokenize: ids, remove_special, unparse_special -> llama_detokenize bytes (hex);
  pieces:     id, special -> llama_token_to_piece bytes (hex).
Does not touch specula; tests/tokenizer/*_test.cpp compare against this file.

Usage: python3 tools/make_tokenizer_fixtures.py [--model PATH] [--out PATH]
"""
import argparse
import ctypes
import json
import os
import sys

import llama_cpp

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_MODEL = os.path.join(
    os.environ.get("SPECULA_MODELS", os.path.expanduser("~/.cache/specula/models")),
    "gemma-3-270m-q4_k_m.gguf")
DEFAULT_OUT = os.path.join(HERE, "..", "tests", "fixtures", "tokenizer_gemma3.json")

LONG_TEXT = (
    "The quick brown fox jumps over the lazy dog. "
    "Sphinx of black quartz, judge my vow! 1234567890 + 9876543210 = 11111111100.\n"
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n\n"
    "Ça va? Naïve café, Zürich, São Paulo, Ångström, Dvořák, Łódź, İstanbul. "
    "日本語のテキストと中文文本，还有한국어 문장. Привет, мир! Γειά σου κόσμε. "
    "مرحبا بالعالم שלום עולם नमस्ते दुनिया สวัสดีชาวโลก. "
    "Emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇫🇷🇯🇵 ❤️‍🔥 🏳️‍🌈.\n\t\tTabs\tand  double  spaces   triple.\n"
) * 4

# (name, text as str or bytes, [(add_special, parse_special), ...])
BOTH = [(True, False), (False, False)]
CASES = [
    ("empty", "", [(True, False), (False, False), (True, True)]),
    ("plain", "Hello world", BOTH),
    ("plain_sentence", "The quick brown fox jumps over the lazy dog.", BOTH),
    ("single_char", "a", BOTH),
    ("single_space", " ", BOTH),
    ("two_spaces", "  ", BOTH),
    ("multi_space", "Hello   world    with     many      spaces", BOTH),
    ("leading_space", " Hello", BOTH),
    ("leading_spaces", "   Hello", BOTH),
    ("trailing_space", "Hello ", BOTH),
    ("trailing_spaces", "Hello    ", BOTH),
    ("spaces_both_ends", "  padded text  ", BOTH),
    ("newline", "line one\nline two", BOTH),
    ("newlines_many", "a\n\nb\n\n\nc\n\n\n\n\n\n\nd", BOTH),
    ("only_newlines", "\n\n\n", BOTH),
    ("crlf", "windows\r\nline\r\n", BOTH),
    ("tabs", "col1\tcol2\t\tcol3\t\t\t", BOTH),
    ("space_newline_mix", " \n \n  \t \n", BOTH),
    ("code_python", "def add(a, b):\n    return a + b\n\nprint(add(2, 3))\n", BOTH),
    ("code_c", "int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}", BOTH),
    ("code_json", '{"key": [1, 2.5, -3e10], "nested": {"a": null, "b": true}}', BOTH),
    ("html_tags_user_defined", "<table><tr><td>cell</td></tr></table> <b>bold</b> <h1>T</h1>", BOTH),
    ("numbers", "0 1 12 123 1234 12345 3.14159 -42 1e-9 0xFF 1,000,000", BOTH),
    # Equal-score pairs (the same token twice): the leftmost merges first.
    ("tie_repeats", "jjj kkk nnn yyy uuuuu ああああ hahahaha abababa", BOTH),
    ("digits_long", "31415926535897932384626433832795028841971693993751", BOTH),
    ("punctuation", "!!! ??? ... --- ___ *** ((())) [[[]]] {{{}}} ~~~ ``` '''", BOTH),
    ("accents", "café naïve résumé Zürich Ångström façade jalapeño", BOTH),
    ("accents_decomposed", "cafe\u0301 nai\u0308ve", BOTH),
    ("german_long_word", "Donaudampfschifffahrtsgesellschaftskapitänsmütze", BOTH),
    ("cyrillic", "Привет, как дела? Всё хорошо.", BOTH),
    ("greek", "Γειά σου Κόσμε, αβγδε", BOTH),
    ("arabic", "مرحبا بالعالم", BOTH),
    ("hebrew", "שלום עולם", BOTH),
    ("hindi", "नमस्ते दुनिया", BOTH),
    ("thai", "สวัสดีชาวโลก", BOTH),
    ("cjk_chinese", "你好，世界！这是一个测试。", BOTH),
    ("cjk_japanese", "こんにちは世界。カタカナとひらがなと漢字。", BOTH),
    ("cjk_korean", "안녕하세요 세계", BOTH),
    ("cjk_rare", "龘靐齉爩鱻麤", BOTH),
    ("emoji_simple", "I love 🍕 and 🎉!", BOTH),
    ("emoji_skin_tone", "👍🏽👋🏿", BOTH),
    ("emoji_zwj_family", "👨‍👩‍👧‍👦", BOTH),
    ("emoji_zwj_mixed", "❤️‍🔥 🏳️‍🌈 🧑‍💻", BOTH),
    ("emoji_flags", "🇺🇸🇫🇷🇯🇵🇩🇪", BOTH),
    ("emoji_keycap", "1️⃣ #️⃣", BOTH),
    ("byte_fallback_supplementary", "\U0001D11E \U00010348 \U0001F9FF \U000E0041 \U0010FFFD", BOTH),
    ("byte_fallback_private_use", "\ue000\uf8ff\U000F0000", BOTH),
    ("byte_fallback_controls", "\x00\x01\x07\x1b[0m\x7f", BOTH),
    ("invalid_utf8", b"ok \xff\xfe bad \xc3 end \xe2\x82", BOTH),
    ("lone_continuation", b"\x80\x81 x \xbf", BOTH),
    ("space_marker_literal", "a\u2581b \u2581\u2581c", BOTH),
    ("replacement_char", "\ufffd\ufffd", BOTH),
    ("zero_width", "a\u200bb\u200dc\ufeffd", BOTH),
    ("chat_turn", "<start_of_turn>user\nHello!<end_of_turn>\n<start_of_turn>model\n",
     [(True, True), (True, False), (False, True), (False, False)]),
    ("chat_turn_spaces", " <start_of_turn> user \n<end_of_turn> ", [(True, True), (True, False)]),
    ("bos_in_text", "<bos>Hello", [(True, True), (True, False), (False, True), (False, False)]),
    ("eos_pad_unk_in_text", "x<eos>y<pad>z<unk>w<mask>", [(True, True), (True, False)]),
    ("eos_s_in_text", "end</s>next", [(True, True), (True, False)]),
    ("unused_token_text", "<unused0><unused99>", [(True, True), (True, False)]),
    ("image_tokens", "<start_of_image><end_of_image>", [(True, True), (True, False)]),
    ("adjacent_specials", "<start_of_turn><start_of_turn><end_of_turn>", [(True, True), (False, True)]),
    ("partial_special", "<start_of_tur <end_of_turn", [(True, True)]),
    ("long_mixed", LONG_TEXT, [(True, False), (True, True)]),
]

DETOK_IDS = [
    # (name, text to tokenize with add_special, parse_special) - ids come from the oracle
    ("plain", "Hello world", True, False),
    ("chat", "<start_of_turn>user\nHi<end_of_turn>\n", True, True),
    ("emoji", "😀 👨‍👩‍👧‍👦 🇫🇷", True, False),
    ("byte_fallback", "\U0001D11E\U000E0041", False, False),
    ("spaces", "  two  spaces   ", False, False),
    ("eos_s", "a</s>b", False, True),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--out", default=DEFAULT_OUT)
    args = ap.parse_args()

    llm = llama_cpp.Llama(model_path=args.model, vocab_only=True, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)

    def tokenize(data, add_special, parse_special):
        return llm.tokenize(data, add_bos=add_special, special=parse_special)

    def detokenize(ids, remove_special, unparse_special):
        arr = (llama_cpp.llama_token * max(1, len(ids)))(*ids)
        cap = 64 + 64 * len(ids)
        buf = ctypes.create_string_buffer(cap)
        n = llama_cpp.llama_detokenize(vocab, arr, len(ids), buf, cap, remove_special, unparse_special)
        assert 0 <= n <= cap, n
        return buf.raw[:n]

    def piece(tok, special):
        buf = ctypes.create_string_buffer(256)
        n = llama_cpp.llama_token_to_piece(vocab, tok, buf, 256, 0, special)
        assert 0 <= n <= 256, n
        return buf.raw[:n]

    out_cases = []
    for name, text, modes in CASES:
        data = text if isinstance(text, bytes) else text.encode("utf-8")
        for add_special, parse_special in modes:
            case = {
                "name": name,
                "text_hex": data.hex(),
                "add_special": add_special,
                "parse_special": parse_special,
                "ids": tokenize(data, add_special, parse_special),
            }
            try:
                case["text"] = data.decode("utf-8")
            except UnicodeDecodeError:
                pass
            out_cases.append(case)

    out_detok = []
    for name, text, add_special, parse_special in DETOK_IDS:
        ids = tokenize(text.encode("utf-8"), add_special, parse_special)
        for remove_special in (False, True):
            for unparse_special in (False, True):
                out_detok.append({
                    "name": name,
                    "ids": ids,
                    "remove_special": remove_special,
                    "render_special": unparse_special,
                    "text_hex": detokenize(ids, remove_special, unparse_special).hex(),
                })

    piece_ids = [0, 1, 2, 3, 4, 5, 6, 105, 106, 107, 108, 138, 168, 212, 238, 248, 493, 494, 506,
                 255968, 255999, 256000, 262143]
    # Plus a spread of ordinary tokens.
    piece_ids += list(range(1000, 262144, 9973))
    out_pieces = []
    for tok in piece_ids:
        for special in (False, True):
            out_pieces.append({"id": tok, "special": special, "piece_hex": piece(tok, special).hex()})

    fixture = {
        "generator": "tools/make_tokenizer_fixtures.py",
        "oracle": "llama-cpp-python " + llama_cpp.__version__ + " (llama_tokenize / llama_detokenize / "
                  "llama_token_to_piece, vocab_only)",
        "llama_cpp_python_version": llama_cpp.__version__,
        "model": os.path.basename(args.model),
        "n_vocab": llama_cpp.llama_vocab_n_tokens(vocab),
        "cases": out_cases,
        "detokenize": out_detok,
        "pieces": out_pieces,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(fixture, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {args.out}: {len(out_cases)} tokenize cases, {len(out_detok)} detokenize cases, "
          f"{len(out_pieces)} pieces", file=sys.stderr)


if __name__ == "__main__":
    main()
