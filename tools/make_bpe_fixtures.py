#!/usr/bin/env python3
"""tools/make_bpe_fixtures.py — llama.cpp reference ids for the byte-level BPE tokenizer.

Writes tests/fixtures/tokenizer_qwen2.json from the llama.cpp oracle (llama-cpp-python,
vocab only) on Qwen2.5-Coder 1.5B Instruct (tokenizer.ggml.model "gpt2", pre "qwen2"):
  cases:  text bytes (hex, plus the text when it is valid UTF-8), add_special,
          parse_special -> llama_tokenize ids, and each id's piece
          (llama_token_to_piece, special=True) as hex;
  pieces: id, special -> llama_token_to_piece bytes (hex), for control, user-defined,
          unused and ordinary tokens.
Invalid UTF-8 is included only where llama.cpp accepts it: a code point above U+10FFFF
(e.g. F4 90 80 80) makes llama.cpp throw and abort, so it is not a case.
Hugging Face `tokenizers` is not installed here, so there is no second oracle.
Does not touch specula; tests/tokenizer/bpe_test.cpp compares against this file.

Usage: python3 tools/make_bpe_fixtures.py [--model PATH] [--out PATH]
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
    "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
DEFAULT_OUT = os.path.join(HERE, "..", "tests", "fixtures", "tokenizer_qwen2.json")

CODE_CPP = (
    "#include <vector>\n\ntemplate <typename T>\nstruct Stack {\n  std::vector<T> items_;\n"
    "  void push(const T& v) { items_.push_back(v); }\n  T pop() {\n    T v = items_.back();\n"
    "    items_.pop_back();\n    return v;\n  }\n};\n"
)
LONG_TEXT = (
    "The quick brown fox jumps over the lazy dog. It's 12:45; we'll see.\n"
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n\n"
    "Ça va? Naïve café, Zürich. 日本語のテキストと中文文本，还有한국어 문장. Привет, мир!\n"
    "مرحبا بالعالم नमस्ते दुनिया. Emoji: 😀 👍🏽 👨‍👩‍👧‍👦 🇫🇷.\n\t\tTabs\tand  double  spaces   .\r\n"
) * 3

# (name, text as str or bytes, [(add_special, parse_special), ...])
PLAIN = [(False, False)]
BOTH = [(False, False), (True, False)]
SPECIAL = [(False, True), (False, False), (True, True)]
CASES = [
    ("empty", "", [(False, False), (True, True)]),
    ("plain", "Hello world", BOTH),
    ("sentence", "The quick brown fox jumps over the lazy dog.", PLAIN),
    ("single_char", "a", PLAIN),
    ("single_space", " ", PLAIN),
    ("two_spaces", "  ", PLAIN),
    ("multi_space", "Hello   world    with     many      spaces", PLAIN),
    ("leading_space", " Hello", PLAIN),
    ("leading_spaces", "   Hello", PLAIN),
    ("trailing_space", "Hello ", PLAIN),
    ("trailing_spaces", "Hello    ", PLAIN),
    ("spaces_both_ends", "  padded text  ", PLAIN),
    ("newline", "line one\nline two", PLAIN),
    ("newlines_many", "a\n\nb\n\n\nc\n\n\n\n\n\n\nd", PLAIN),
    ("only_newlines", "\n\n\n", PLAIN),
    ("leading_newline", "\nstart", PLAIN),
    ("crlf", "windows\r\nline\r\n\r\nend", PLAIN),
    ("lone_cr", "a\rb\r\rc", PLAIN),
    ("tabs", "col1\tcol2\t\tcol3\t\t\t", PLAIN),
    ("space_newline_mix", " \n \n  \t \n  x", PLAIN),
    ("spaces_then_newline", "x   \n   y", PLAIN),
    ("punct_then_newlines", "end.\n\n\nnext;\r\n}", PLAIN),
    ("code_python", "def add(a, b):\n    return a + b\n\n\nprint(add(2, 3))\n", PLAIN),
    ("code_python_class", "class Foo:\n    def __init__(self, x: int) -> None:\n        self._x = x  # note\n", PLAIN),
    ("code_cpp", CODE_CPP, PLAIN),
    ("code_c_tabs", "int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}", PLAIN),
    ("code_json", '{\n  "key": [1, 2.5, -3e10],\n  "nested": {"a": null, "b": true}\n}', PLAIN),
    ("code_crlf", "if (x) {\r\n    y();\r\n}\r\n", PLAIN),
    ("code_operators", "a+=b; c->d; e::f; g<<=1; h!=i && j||k; l=>m ?? n", PLAIN),
    ("code_deep_indent", "                if x:\n                    return", PLAIN),
    ("numbers", "0 1 12 123 1234 12345 3.14159 -42 1e-9 0xFF 1,000,000", PLAIN),
    ("digits_long", "31415926535897932384626433832795028841971693993751", PLAIN),
    ("decimals", "3.14 2.718281828 0.000001 -0.5 1_000.25", PLAIN),
    ("digits_letters", "abc123def 4x4 x86_64 v2.0.1", PLAIN),
    ("fullwidth_digits", "\uff11\uff12\uff13 \u0661\u0662\u0663 \u00b2\u00bd", PLAIN),
    ("contractions", "it's I'm you're we've they'll he'd don't can't", PLAIN),
    ("contractions_upper", "IT'S I'M YOU'RE WE'VE THEY'LL HE'D 'S 'LL 'Ll", PLAIN),
    ("apostrophe_edge", "' 's 'x '' rock'n'roll ’s", PLAIN),
    ("punctuation", "!!! ??? ... --- ___ *** ((())) [[[]]] {{{}}} ~~~ ``` '''", PLAIN),
    ("accents", "café naïve résumé Zürich Ångström façade jalapeño", PLAIN),
    ("accents_decomposed", "cafe\u0301 nai\u0308ve", PLAIN),
    ("german_long_word", "Donaudampfschifffahrtsgesellschaftskapitänsmütze", PLAIN),
    ("cyrillic", "Привет, как дела? Всё хорошо.", PLAIN),
    ("greek", "Γειά σου Κόσμε, αβγδε", PLAIN),
    ("arabic", "مرحبا بالعالم", PLAIN),
    ("hebrew", "שלום עולם", PLAIN),
    ("hindi", "नमस्ते दुनिया", PLAIN),
    ("thai", "สวัสดีชาวโลก", PLAIN),
    ("cjk_chinese", "你好，世界！这是一个测试。", PLAIN),
    ("cjk_japanese", "こんにちは世界。カタカナとひらがなと漢字。", PLAIN),
    ("cjk_korean", "안녕하세요 세계", PLAIN),
    ("cjk_rare", "龘靐齉爩鱻麤", PLAIN),
    ("emoji_simple", "I love 🍕 and 🎉!", PLAIN),
    ("emoji_skin_tone", "👍🏽👋🏿", PLAIN),
    ("emoji_zwj_family", "👨‍👩‍👧‍👦", PLAIN),
    ("emoji_zwj_mixed", "❤️‍🔥 🏳️‍🌈 🧑‍💻", PLAIN),
    ("emoji_flags", "🇺🇸🇫🇷🇯🇵🇩🇪", PLAIN),
    ("emoji_keycap", "1️⃣ #️⃣", PLAIN),
    ("supplementary", "\U0001D11E \U00010348 \U0001F9FF \U000E0041 \U0010FFFD", PLAIN),
    # Letters/digits new in Unicode 15 (llama.cpp's tables know them, PCRE2 10.42 does not).
    ("unicode15_letters", "\U00031350's \U0001E030's x\U00011F50\U00011F51 \U0002EBF0\U0002EBF1", PLAIN),
    ("private_use", "\ue000\uf8ff\U000F0000", PLAIN),
    ("controls", "\x00\x01\x07\x1b[0m\x7f", PLAIN),
    ("unicode_spaces", "a\u00a0b\u3000c\u2003d\u0085e\u2028f \u00a0 g", PLAIN),
    ("zero_width", "a\u200bb\u200dc\ufeffd", PLAIN),
    ("replacement_char", "\ufffd\ufffd x", PLAIN),
    ("gpt2_alphabet_chars", "Ġ Ċ ĉ ĠĠ Ā", PLAIN),
    ("invalid_utf8", b"ok \xff\xfe bad \xc3 end \xe2\x82", PLAIN),
    ("lone_continuation", b"\x80\x81 x \xbf", PLAIN),
    ("truncated_4byte", b"emoji \xf0\x9f\x98 cut", PLAIN),
    ("overlong", b"a\xc0\x80b \xe0\x80\xafc \xf0\x80\x80\x80z", PLAIN),
    ("surrogate", b"x\xed\xa0\x80y \xed\xbf\xbf", PLAIN),
    ("chat_turn", "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n"
                  "<|im_start|>assistant\n", SPECIAL),
    ("chat_turn_spaces", " <|im_start|> user \n<|im_end|> ", SPECIAL),
    ("endoftext_in_text", "a<|endoftext|>b", SPECIAL),
    ("fim_tokens", "<|fim_prefix|>def f():\n<|fim_suffix|>\n    return 1<|fim_middle|>", SPECIAL),
    ("tool_call_user_defined", "<tool_call>{\"name\": \"f\"}</tool_call>", SPECIAL),
    ("adjacent_specials", "<|im_start|><|im_start|><|im_end|>", SPECIAL),
    ("partial_special", "<|im_start <|im_end|", SPECIAL),
    ("pad_token_text", "[PAD151665]x", SPECIAL),
    ("long_mixed", LONG_TEXT, [(False, False), (False, True)]),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--out", default=DEFAULT_OUT)
    args = ap.parse_args()

    llm = llama_cpp.Llama(model_path=args.model, vocab_only=True, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)

    def piece(tok, special):
        buf = ctypes.create_string_buffer(512)
        n = llama_cpp.llama_token_to_piece(vocab, tok, buf, 512, 0, special)
        assert 0 <= n <= 512, n
        return buf.raw[:n]

    out_cases = []
    for name, text, modes in CASES:
        data = text if isinstance(text, bytes) else text.encode("utf-8")
        for add_special, parse_special in modes:
            ids = llm.tokenize(data, add_bos=add_special, special=parse_special)
            case = {
                "name": name,
                "text_hex": data.hex(),
                "add_special": add_special,
                "parse_special": parse_special,
                "ids": ids,
                "pieces_hex": [piece(t, True).hex() for t in ids],
            }
            try:
                case["text"] = data.decode("utf-8")
            except UnicodeDecodeError:
                pass
            out_cases.append(case)

    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
    piece_ids = [0, 11, 13, 198, 220, 271, 256, 1572, 9707, 151643, 151644, 151645, 151657, 151658, 151664,
                 151665, 151935]
    piece_ids += list(range(500, 151643, 4999))
    out_pieces = []
    for tok in piece_ids:
        for special in (False, True):
            out_pieces.append({"id": tok, "special": special, "piece_hex": piece(tok, special).hex()})

    fixture = {
        "generator": "tools/make_bpe_fixtures.py",
        "oracle": "llama-cpp-python " + llama_cpp.__version__ + " (llama_tokenize / llama_token_to_piece, "
                  "vocab_only)",
        "llama_cpp_python_version": llama_cpp.__version__,
        "model": os.path.basename(args.model),
        "n_vocab": n_vocab,
        "cases": out_cases,
        "pieces": out_pieces,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(fixture, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {args.out}: {len(out_cases)} tokenize cases, {len(out_pieces)} pieces", file=sys.stderr)


if __name__ == "__main__":
    main()
