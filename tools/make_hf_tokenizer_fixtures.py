#!/usr/bin/env python3
"""tools/make_hf_tokenizer_fixtures.py — Hugging Face `tokenizers` reference ids for tokenizer.json.

Writes tests/fixtures/hf_tokenizer_reference.json.gz (gzip of compact JSON), the oracle for specula's tokenizer.json
implementation, from the `tokenizers` package (PyPI; `pip install tokenizers`) run on the real
tokenizer.json files of Llama 3, Qwen 3, Gemma 3, DeepSeek V3, Llama 2, Gemma (1), Qwen 2.5 and
GPT-4o (o200k) that tools/fetch_hf_tokenizers.py places in
${SPECULA_CACHE:-~/.cache/specula}/tokenizers/<name>/ (this script runs it first; every file is
checked against the pinned sha256).

The corpus (>= 1,000 strings) is built deterministically: hand-written seeds (many scripts, emoji
with ZWJ / skin tones / flags / variation selectors, code, whitespace runs incl. NBSP, U+3000,
U+2009, \\r\\n, digit runs of 1..25 digits with separators, English contractions in mixed case,
punctuation runs, combining marks and NFD / Hangul jamo input, NFKC-relevant characters, letters
of recent Unicode versions, unassigned and private-use code points, long words and 500-char
strings, the empty string, single characters, every tokenizer's special-token texts embedded in
text and broken variants of them), then random mixtures of all of these from a seeded
random.Random. Then, appended so that the strings before keep their indices, the additions for
the second four files: spaces at either end and around special tokens (SentencePiece-style
Prepend / Replace normalizers, byte fallback, the Strip decoder), camelCase / ALLCAPS / title-case
words, modifier letters and marks, contractions in every case (o200k's pattern), digit runs and
'/' after punctuation, their added tokens, and random mixtures of these from a second generator.
Only valid Unicode scalar values (no lone surrogates).

For each tokenizer and each corpus string, one case:
  ids              tok.encode(text, add_special_tokens=False).ids (special tokens in the text
                   are matched as added tokens, the default);
  ids_no_special   the same with tok.encode_special_tokens = True (special tokens in the text
                   are tokenized as plain text; non-special added tokens still match);
  decoded          tok.decode(ids, skip_special_tokens=False), only when it differs from text;
  ids_with_special tok.encode(text, add_special_tokens=True).ids, for the first 50 strings and
                   the SentencePiece edge cases (SPM_FIRST) only.
Per tokenizer: npm package and version, sha256 of tokenizer.json, n_vocab
(get_vocab_size(with_added_tokens=True): the distinct tokens, not the highest id + 1), and
decode_cases: id sequences no encode gives (byte tokens that are not whole UTF-8 characters,
special / added / space tokens first, ids the vocabulary lacks, seeded random ids) with
tok.decode(ids, skip_special_tokens=False).
Once for all: regex, a sample text (code points where Unicode 14 and 16 differ, random code
points, words) and, for each of REGEX_PATTERNS (Oniguruma syntax that specula rewrites for
PCRE2), what a Split pre-tokenizer on it with behaviour "removed" leaves of the text. The file is written compactly (UTF-8, no ASCII
escaping). Also prints, per tokenizer, the corpus strings whose decode(encode(x)) != x.

Usage: python3 tools/make_hf_tokenizer_fixtures.py [--cache DIR] [--out PATH]
"""
import argparse
import gzip
import json
import os
import random
import sys
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fetch_hf_tokenizers as fetcher  # noqa: E402

import tokenizers  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

DEFAULT_OUT = os.path.join(HERE, "..", "tests", "fixtures", "hf_tokenizer_reference.json.gz")
SEED = 20240611
N_WITH_SPECIAL = 50
N_RANDOM_MIX = 620
N_RANDOM_CHARS = 120

# ---------------------------------------------------------------------------------------------
# Corpus pieces.

# The first strings: they also get ids_with_special, so they lead with the small edge cases.
FIRST = [
    "",
    " ",
    "a",
    "Hello world",
    " Hello",
    "Hello ",
    "  leading and trailing  ",
    "\n",
    "\n\n\n",
    "\r\n",
    "\t",
    "<|im_start|>user\nhi<|im_end|>",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nOK",
    "<start_of_turn>user\nhello<end_of_turn>\n<start_of_turn>model\n",
    "<bos><start_of_turn>model\nHi!<end_of_turn>",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "<|begin_of_text|>",
    "<|eot_id|>",
    "<｜begin▁of▁sentence｜>",
    "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜>hello<｜end▁of▁sentence｜>",
    "<|im_start",
    "<start_of_turn >",
    "<|im_start|><|im_start|>",
    "text<|endoftext|>more",
    "<bos>",
    "<eos>",
    "<pad><unk><mask>",
    "<|EOT|>",
    "café",
    "cafe\u0301",
    "ﬁ ﬂ ﬃ",
    "日本語",
    "한국어",
    "\u1100\u1161\u11a8",
    "👨‍👩‍👧‍👦",
    "12345678901234567890",
    "I'm you're WE'LL THEY'VE it'S",
    "def f(x):\n    return x + 1\n",
    "\u00a0",
    "\u3000",
    "▁",
    "▁▁hello▁world",
    "   ",
    "a  b   c    d",
    "x\u0000y",
    "\ufeffBOM",
    "\U0010ffff",
    "<h1>Title</h1>",
    "\t\t\tindent",
    "Ⅻ ½ ² ³ ①",
]

SCRIPTS = [
    # Latin with diacritics
    "Ça va? Naïve café, Zürich, São Paulo, Ångström, Dvořák, Łódź, İstanbul, Reykjavík.",
    "Đặng Thị Ngọc Hương — tiếng Việt có dấu: ắ ằ ẳ ẵ ặ ố ồ ổ ỗ ộ",
    "Ærøskøbing, Œuvre, ß, ẞ, ŉ, ǅ, ǈ, Ĳ, ſt",
    "İIıi ǰ ΐ ﬀ Straße STRASSE",
    # Cyrillic
    "Привет, как дела? Всё хорошо. ЁЖИК ёжик",
    "Україна, Ґґ Єє Її; Србија Љљ Њњ Џџ; Қазақстан Ңң Өө Үү",
    # Greek
    "Γειά σου Κόσμε, αβγδε ΑΒΓΔΕ ς σ Σ ΐΰ",
    "Ἀθῆναι ὦ ἄνδρες Ἀθηναῖοι",
    # Arabic
    "مرحبا بالعالم، كيف حالك؟ ١٢٣٤٥",
    "اَلْعَرَبِيَّةُ لُغَةٌ جَمِيلَةٌ ﷺ ﷽",
    "فارسی: سلام دنیا ۱۲۳ گچپژ",
    # Hebrew
    "שלום עולם! מה שלומך?",
    "בְּרֵאשִׁית בָּרָא אֱלֹהִים",
    # Devanagari
    "नमस्ते दुनिया। हिन्दी भाषा ०१२३४५६७८९",
    "क़ ख़ ग़ ज़ ड़ ढ़ फ़ य़ क्ष त्र ज्ञ श्र",
    "संस्कृतम् ॐ",
    # Thai
    "สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่างระหว่างคำ ๑๒๓",
    # CJK Han
    "你好，世界！这是一个测试。",
    "繁體中文：臺灣、香港、澳門。龘靐齉爩鱻麤",
    "㐀㐁㐂 𠀀𠀁𠀂 𪚥 鿐鿑鿒鿿",
    # Japanese kana
    "こんにちは世界。カタカナとひらがなと漢字。",
    "ｶﾀｶﾅ ﾊﾝｶｸ ｰｰ ヴァ ヷ ゟ ヿ",
    "「吾輩は猫である。名前はまだ無い。」",
    # Korean Hangul
    "안녕하세요 세계! 한국어 문장입니다.",
    "ㄱㄴㄷㄹ ㅏㅑㅓㅕ 똠얌꿍 뷁",
    # Others
    "Ελληνικά, Русский, العربية, עברית, हिन्दी, ไทย, 中文, 日本語, 한국어",
    "ქართული ენა; Հայերեն; አማርኛ; ᏣᎳᎩ; ᐃᓄᒃᑎᑐᑦ; ꦗꦮ; ᠮᠣᠩᠭᠣᠯ",
    "தமிழ் తెలుగు ಕನ್ನಡ മലയാളം বাংলা ਪੰਜਾਬੀ ગુજરાતી ଓଡ଼ିଆ සිංහල",
    "မြန်မာ ខ្មែរ ລາວ བོད་ཡིག",
    "𝐁𝐨𝐥𝐝 𝑰𝒕𝒂𝒍𝒊𝒄 𝔉𝔯𝔞𝔨𝔱𝔲𝔯 𝕯𝖔𝖚𝖇𝖑𝖊",
    "𐌰𐌱𐌲 𐍈 𓀀𓀁 𒀀𒀁 𐤀𐤁",
]

EMOJI = [
    "😀😃😄😁😆",
    "👍 👍🏻 👍🏼 👍🏽 👍🏾 👍🏿",
    "👨‍👩‍👧‍👦 👩‍❤️‍👨 👨‍💻 🧑🏽‍🚀 🏳️‍🌈 🏴‍☠️ ❤️‍🔥",
    "🇫🇷🇯🇵🇺🇸🇩🇪 🇺🇳 🏴󠁧󠁢󠁳󠁣󠁴󠁿",
    "❤️ ❤ ☺️ ☺ ✔️ ✔ ©️ ® ™️ #️⃣ 1️⃣ *️⃣",
    "I love 🍕 and 🍣!",
    "🫠🫡🫥🪿🫎 🩷 🐦‍⬛ 🙂‍↔️",
    "👋🏽👋🏽👋🏽",
    "😀" * 40,
    "🇦🇧🇨",
]

CODE = [
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "import numpy as np\n\nx = np.arange(10, dtype=np.float32)\nprint(f\"{x.sum():.3f}\")\n",
    "class Foo(Bar):\n\t\"\"\"Docstring.\"\"\"\n\tdef __init__(self, *args, **kwargs):\n\t\tsuper().__init__()\n",
    "#include <vector>\n\nint main() {\n    std::vector<int> v{1, 2, 3};\n    for (auto& x : v) x *= 2;\n    return 0;\n}\n",
    "template <typename T>\nconstexpr T max(T a, T b) noexcept { return a > b ? a : b; }\n",
    "auto p = std::make_unique<Node>(); p->next = nullptr; // TODO: fix\n",
    '{"key": [1, 2.5, -3e10], "nested": {"a": null, "b": true, "c": "str\\n"}}',
    '{\n  "name": "specula",\n  "version": "0.1.0",\n  "deps": []\n}\n',
    "<!DOCTYPE html>\n<html>\n<head><title>Test</title></head>\n<body><p class=\"x\">Hello &amp; welcome</p></body>\n</html>\n",
    "<div><span>text</span><br/><img src=\"a.png\" alt=\"\"/></div>",
    "#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do echo \"$f\"; done | sort -u > out.log 2>&1\n",
    "ls -la ~/.cache && cd /tmp && grep -rn 'foo' . | wc -l",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC;",
    "fn main() { let v: Vec<u8> = vec![0; 16]; println!(\"{:?}\", v); }",
    "x+=1;y-=2;z*=3;w/=4;a<<=1;b>>=2;c&&d||e;f!=g;h==i;j<=k;l>=m;n->o;p::q",
    "    \n        \n\t\n",
    "if (a) {\r\n    b();\r\n}\r\n",
    "```python\nprint('hi')\n```",
    "$ export PATH=\"$HOME/.local/bin:$PATH\"\n$ echo $((1+2))",
    "matrix[i][j] = (a[i] * b[j]) % 1000000007;",
]

WHITESPACE = [
    " ", "  ", "   ", "    ", "        ", " " * 16, "\t", "\t\t", "\t \t", "\n", "\n\n",
    "\n\n\n", "\n\n\n\n\n\n\n\n", "\r", "\r\n", "\r\n\r\n", "\n\r", " \n", "\n ", " \n ",
    "  \n  \n", "\u00a0", "\u00a0\u00a0", "a\u00a0b", "\u3000", "日本\u3000語", "\u2009", "a\u2009b",
    "\u2002\u2003\u2004", "\u200b", "a\u200bb", "\u2028", "\u2029", "\u0085", "\x0b", "\x0c",
    "a\x0bb\x0cc", "\u202f", "\u205f", "\u1680", "\u180e", "word ", " word", "  word  ",
    "hello \n world", "hello  \n\n  world", "a \t b", "trailing\t", "end.\n", "x\n\n\ny",
    "line1\r\nline2\r\nline3", " \r\n ", "\n\t\n\t", "a" + " " * 7 + "b",
    "  \u00a0  ", "\t\u3000\t", " ! ", "  !!", "\n!", "! \n",
]

CONTRACTIONS = [
    "it's", "It'S", "IT'S", "that's what's", "I'll", "I'LL", "i'Ll", "you're", "YOU'RE", "You'Re",
    "we've", "WE'VE", "We'Ve", "he'd", "HE'D", "I'm", "I'M", "don't", "DON'T", "Don'T",
    "can't won't shouldn't", "'s", "'S", "'ll", "'LL", "'re", "'RE", "'ve", "'VE", "'d", "'D",
    "'m", "'t", "rock'n'roll", "o'clock", "'quoted'", "''s", "'''", "l'été", "dell'arte",
    "it’s (curly)", "JOHN'S DOG'S BONE'LL", "x's y'S z'll", "1's 2'S", " 's", "\n'll",
    "'sun 'Sun 'llama 'reality 'vehicle 'dog 'move 'times",
]

PUNCT = [
    "!!!", "???", "...", "…", "?!?!", "!?", "---", "—–-", "___", "***", "((()))", "[[[]]]",
    "{{{}}}", "~~~", "```", "'''", '"""', "<<<>>>", "///\\\\\\", "|||", "@@@", "###", "$$$",
    "%%%", "^^^", "&&&", ";;;", ":::", ",,,", "»«", "„“”", "‘’", "¿¡", "。、！？「」『』",
    "，；：（）【】《》", "·•◦‣", "§¶†‡", "±×÷", "←→↑↓⇒", "∀∃∈∉∑∏√∞≠≤≥", "€£¥₹₽¢",
    "Hello, world!", "Wait... what?!", "(a) [b] {c} <d>", "e.g., i.e., etc.", "--flag=value",
    "a.b.c.d", "foo_bar-baz", "http://example.com/path?q=1&r=2#frag", "user@example.org",
    ".!?", " .", " ..", "!\n\n", "?\r\n",
]

COMBINING = [
    "e\u0301", "cafe\u0301", "nai\u0308ve", "a\u0308o\u0308u\u0308", "n\u0303", "o\u0302\u0301",
    "A\u030a", "\u212b", "\u2126", "\u212a", "\u1100\u1161", "\u1112\u1161\u11ab\u1100\u1173\u11af",
    "\u1100\u1161\u11a8 \u1102\u1161", "\u1100", "\u1161\u11a8", "\u0915\u093c", "\u0958",
    "\u0344", "\u0340\u0341", "\u00e9 vs e\u0301", "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334",
    "a\u0300\u0301\u0302\u0303\u0304\u0305\u0306\u0307", "\u0301", "\u0301\u0301", " \u0301",
    "\u05d1\u05bc\u05b0", "\u0627\u064e", "\u0e01\u0e49\u0e33", "\u00c5\u0301", "\u1e9b\u0323",
    "\u0041\u030a\u0301", "\u01fa", "\u2000", "\u2001", "\u2adc", "\u0f73", "\u0f75",
    "\u3099\u309a", "\u304b\u3099", "\u30cf\u309a", "\uac00\u11a8", "\u1e0b\u0323", "q\u0307\u0323",
]

NFKC = [
    "ﬁ", "ﬂ", "ﬃ ﬄ ﬅ ﬆ", "ﬁnance ﬂow", "Ｆｕｌｌｗｉｄｔｈ", "ＡＢＣ１２３！？", "ｈｅｌｌｏ　ｗｏｒｌｄ",
    "x²", "x² + y³ = z⁴", "H₂O", "CO₂", "①②③", "⑴⑵", "⒈⒉", "㎞ ㎏ ㎡", "…", "™", "℃ ℉",
    "ｶﾀｶﾅ", "ﾊﾟﾋﾞ", "½ ¼ ¾ ⅓", "Ⅰ Ⅱ Ⅲ Ⅳ Ⅻ", "ⅰⅱⅲ", "µ μ", "Å Å", "ſ", "ǆ ǅ Ǆ",
    "㍻ ㋿", "㈱", "ℌℍℎ", "𝟏𝟐𝟑", "‼ ⁇ ⁈", "′ ″ ‴", "\ufb01\u0301", "ﾞ", "ㄱ ㅏ", "ᄀ",
]

# Letters and symbols of recent Unicode versions, unassigned and special code points.
RARE = [
    "\U0001e030\U0001e031\U0001e032",          # Cyrillic modifier letters (15.0)
    "\U00011f04\U00011f05\U00011f06",          # Kawi (15.0)
    "\U0001e4d0\U0001e4d1\U0001e4d2",          # Nag Mundari (15.0)
    "\U00031350\U00031351",                    # CJK Ext H (15.0)
    "\U0002ebf0\U0002ebf1",                    # CJK Ext I (15.1)
    "\U00010d4a\U00010d4b\U00010d4c",          # Garay (16.0)
    "\U00016d43\U00016d44",                    # Kirat Rai (16.0)
    "\U000105c0\U000105c1",                    # Todhri (16.0)
    "\U0001cc00\U0001cc01",                    # legacy computing supplement (16.0)
    "\U00011380\U00011381",                    # Tulu-Tigalari (16.0)
    "\U0001e5d0\U0001e5d1",                    # Ol Onal (16.0)
    "\u0378\u0379",                            # unassigned (Greek block)
    "\u08a0\u08b5\u08c7",                      # Arabic Extended-A (some late additions)
    "\u0870\u0871\u0872",                      # Arabic Extended-B (14.0)
    "\u0c5d\u0cdd\u1715\u171f",                # 14.0 letters
    "\U00010570\U00010571\U00010597",          # Vithkuqi (14.0)
    "\U0001e290\U0001e291",                    # Toto (14.0)
    "\ue000\ue001\uf8ff",                      # private use
    "\U000f0000\U0010fffd",                    # supplementary private use
    "\ufffe\uffff\U0001fffe",                  # noncharacters
    "\ufffd",                                  # replacement character
    "\x00", "\x01\x02\x7f", "\x1b[31mred\x1b[0m", "\u0080\u009f",
    "\u200d", "\u200c\u200d", "\u2060", "\ufe0f", "\ufe0e", "a\ufe0fb",
    "\U000e0001\U000e0041", "\u061c\u200e\u200f", "\u202a\u202e\u202c",
    "abc\U00031350def", "word\U0001e030word",
]

# Special-token texts of all four tokenizers, plus broken variants.
SPECIAL_TEXTS = [
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|object_ref_start|>", "<|vision_pad|>",
    "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
    "<|repo_name|>", "<|file_sep|>", "<think>", "</think>", "<tool_response>",
    "<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>", "<pad>", "<unk>", "<mask>",
    "[multimodal]", "<start_of_image>", "<end_of_image>", "<image_soft_token>", "<unused0>",
    "<unused99>", "<h1>", "</h1>", "<blockquote>", "<strong>", "</code>", "<s>", "</s>",
    "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
    "<|eot_id|>", "<|eom_id|>", "<|python_tag|>", "<|finetune_right_pad_id|>",
    "<|reserved_special_token_0|>", "<|reserved_special_token_247|>",
    "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>", "<｜User｜>",
    "<｜Assistant｜>", "<|EOT|>", "<｜fim▁hole｜>", "<｜fim▁begin｜>", "<｜fim▁end｜>",
    "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜place▁holder▁no▁0｜>",
]
BROKEN_SPECIAL = [
    "<|im_start", "im_start|>", "<|im_start |>", "<| im_start|>", "<|IM_START|>", "<|im_star|>",
    "<start_of_turn >", "< start_of_turn>", "<start_of_turn", "start_of_turn>", "<START_OF_TURN>",
    "<|begin_of_text", "<|begin_of_text|", "|begin_of_text|>", "<|eot_id", "<|eot_id||>",
    "<｜begin▁of▁sentence", "<|begin▁of▁sentence|>", "<｜begin of sentence｜>", "<｜User|>",
    "<bos", "bos>", "<<bos>>", "<b os>", "<think", "</think", "<unused>", "<unused-1>", "<h7>",
    "<|EOT", "<|eot|>", "<|im_end|", "<|<|im_end|>|>",
]
SPECIAL_IN_TEXT = [
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n",
    "<|im_start|>assistant\n<think>\nLet me think.\n</think>\n\n<tool_call>\n{\"name\": \"f\"}\n</tool_call><|im_end|>",
    "prefix <|im_start|> infix <|im_end|> suffix",
    " <|im_start|> ", "<|im_start|>\n", "\n<|im_end|>\n", "a<|endoftext|>b<|endoftext|>c",
    "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>return 1",
    "<bos><start_of_turn>user\nWrite a poem.<end_of_turn>\n<start_of_turn>model\nRoses are red.<end_of_turn>\n",
    "<start_of_turn>model\n", " <start_of_turn>", "<start_of_turn><start_of_turn>",
    "<start_of_image><image_soft_token><image_soft_token><end_of_image>",
    "Use <strong>bold</strong> and <em>italic</em> and <code>x</code>.",
    "<h1>Header</h1>\n<h2>Sub</h2>\n<blockquote>quote</blockquote>",
    "<unused0><unused1> <unused2>", "text<mask>text", "[multimodal] image",
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a bot.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
    "<|python_tag|>print(1)<|eom_id|>", " <|eot_id|> ", "<|eot_id|><|eot_id|>",
    "<|reserved_special_token_10|>x<|reserved_special_token_200|>",
    "<｜begin▁of▁sentence｜>You are helpful.<｜User｜>Hello<｜Assistant｜><think>\nok\n</think>\nHi<｜end▁of▁sentence｜>",
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
    "<｜fim▁begin｜>def f():<｜fim▁hole｜>\n<｜fim▁end｜>", "<|EOT|>done", " <|EOT|>",
    "<s>[INST] hello [/INST]</s>", "<|im_start|>user\n<start_of_turn><|eot_id|><｜User｜>mixed",
    "▁<|im_start|>▁", "\u00a0<bos>\u00a0", "<|im_start|>" * 5, "<bos>" * 4 + "x",
]

LONG = [
    "a" * 200, "A" * 230, "é" * 210, "e\u0301" * 120, "日" * 220, "😀" * 120,
    "ab" * 150, "abc " * 125, " " * 300, "\n" * 200, "\t" * 120, "-" * 300, "=" * 257,
    "1" * 300, "9" * 499, "Donaudampfschifffahrtsgesellschaftskapitänsmütze" * 5,
    "pneumonoultramicroscopicsilicovolcanoconiosis" * 6, "▁" * 100, "ありがとう" * 60,
    "z" * 500, "x" + " " * 498 + "y", "\n" * 31, "\n" * 32, "\t" * 31, "\t" * 32,
    "▁" * 31, "▁" * 32, "Ж" * 250, "한" * 220, "ก" * 230,
]

DIGIT_SEPARATORS = [",", ".", " ", "_", "'", "\u00a0", "\u2009", "-", "/", ":"]

WORDS = [
    "the", "The", "THE", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "hello", "world",
    "Hello", "WORLD", "tokenizer", "tokenization", "unbelievable", "antidisestablishmentarianism",
    "GPU", "CUDA", "llama.cpp", "specula", "résumé", "naïve", "über", "Straße", "façade", "año",
    "Москва", "данные", "Αθήνα", "λόγος", "القاهرة", "ירושלים", "भारत", "กรุงเทพ", "北京", "東京",
    "서울", "カタカナ", "ひらがな", "漢字", "中文", "x", "y", "I", "a", "an", "of", "to", "is",
    "iPhone", "eBay", "McDonald", "O'Neil", "JSON", "HTTP/2", "C++20", "std::vector", "__init__",
    "snake_case", "camelCase", "PascalCase", "kebab-case", "SCREAMING_CASE", "v1.2.3", "#hashtag",
    "@mention", "3D", "4K", "100%", "$5", "€10", "50°C", "24/7", "1st", "2nd", "ａｂｃ",
]

SEPARATORS = ["", " ", " ", " ", "  ", "\n", "\n\n", "\t", "\r\n", ", ", ". ", "\u00a0",
              "\u3000", "\u2009", " - ", "'", "_", "/", "\n   "]

# Code point ranges that random single characters and random character strings draw from.
CHAR_RANGES = [
    (0x20, 0x7e), (0xa0, 0x24f), (0x300, 0x36f), (0x370, 0x3ff), (0x400, 0x4ff), (0x590, 0x5ff),
    (0x600, 0x6ff), (0x900, 0x97f), (0xe00, 0xe7f), (0x1100, 0x11ff), (0x1e00, 0x1eff),
    (0x2000, 0x206f), (0x2100, 0x214f), (0x2190, 0x21ff), (0x2200, 0x22ff), (0x2460, 0x24ff),
    (0x3000, 0x303f), (0x3040, 0x30ff), (0x3130, 0x318f), (0x4e00, 0x9fff), (0xac00, 0xd7a3),
    (0xf900, 0xfaff), (0xfb00, 0xfb4f), (0xfe00, 0xfe0f), (0xff00, 0xffef), (0x1d400, 0x1d7ff),
    (0x1f300, 0x1f64f), (0x1f900, 0x1f9ff), (0x20000, 0x2a6df), (0xe0000, 0xe007f),
    (0x10000, 0x1007f), (0x16fe0, 0x16fff), (0x1e000, 0x1e0ff), (0x31350, 0x323af),
]

# ---------------------------------------------------------------------------------------------
# Additions for the second set of tokenizers (Llama 2, Gemma 1, Qwen2.5, GPT-4o). They are
# appended after the corpus above, which stays exactly as it was (same seed, the same added-token
# samples of the first four files), so its strings keep their indices.

ORIGINAL = ("llama3", "qwen3", "gemma3", "deepseek_v3")

# SentencePiece-style files (Prepend / Replace normalizers, byte fallback, the Strip decoder):
# spaces at either end, around special tokens, the literal U+2581 and byte-token texts. These
# also get ids_with_special.
SPM_FIRST = [
    " hello", "  hello", "   hello", "hello ", "hello  ", "hello   ", " hello ", "  hello  ",
    "\thello", "hello\t", "\nhello", "hello\n", " \nhello", "hello\n ", "\u00a0hello",
    "<s>", "</s>", "<s> hello", "<s>hello", " <s>hello", "<s>  hello", "hello</s>", "hello </s>",
    "hello</s> ", "</s> hello", "<s><s></s>", "<unk>", "a<unk>b", " <unk> ", "<bos> hi", " <bos>",
    "hi<eos> ", "<pad> ", "▁hello", "▁ hello", " ▁hello", "▁▁", "▁ ▁", "<0x41>", "<0x0A>\n",
    "🦙 llama", " 🦙", "\U00031350 x", " \x00", "x\x7f ", "\u2581\u2581 \u2581",
    "Hello World", " Hello World ", "[INST] hi [/INST]", "<s>[INST] <<SYS>>\nsys\n<</SYS>>\n\nhi [/INST]",
]

# o200k's pattern: runs of upper-case letters before lower-case ones, title case, modifier and
# other letters, marks, contractions in any case (and their case-folding equivalents), digits
# in threes, '/' and line breaks after punctuation.
CASE_WORDS = [
    "camelCase", "camelCaseWord", "lowerCamelCaseIdentifierName", "PascalCase", "XMLHttpRequest",
    "HTTPServer", "getHTTPResponseCode", "parseJSONString", "iOS", "macOS", "iPhoneXS", "McDonald's",
    "ALLCAPS", "ALL CAPS WORDS", "NASA's", "NASA'S", "U.S.A.", "A", "Aa", "aA", "AaA", "aAa",
    "ABCdef", "abcDEF", "ABCdefGHI", "a1B2c3", "ABC123def", "OpenAI GPT-4o", "GPT4o", "x86_64",
    "snake_Case_MIXED", "SCREAMING_SNAKE_CASE", "dromedaryCASE", "ÉCOLE école Écoles", "ÀÉÎÕÜ",
    "E\u0301COLE", "e\u0301cole", "ÉcoleNormale", "ΑθήναΕλλάδα", "МоскваРОССИЯ", "ЖжЖж",
    "ǅemal ǈubljana ǋegoš", "ǅǅǅ", "ᾈᾉᾊ ᾀ", "Ǆǅǆ", "ʰʲʷ", "aʰb", "Aʰ", "ˈstress", "ー", "カーテン",
    "スーパーマン", "々", "人々", "ｰｰ", "ªº", "Aª", "ßẞ", "ǰ", "İstanbul", "ǉubljana", "ﬁNAL",
    "ⓐⓑⓒ ⒶⒷⒸ", "ᏣᎳᎩ ꮳꮃꭹ", "ႠႡႢ ⴀⴁ Ა Ბ", "\U00010d50\U00010d70\U00010d71",
    "\U00010d70\U00010d50", "\ua7cb\ua7cd \ua7da\ua7db\ua7dc", "\u1c89\u1c8a", "\U0001e030a",
    "A\U0001e030", "\U0001e4d0a", "\U00016d40\U00016d43", "\U0001171e",
    "Naïve Café", "NAÏVE CAFÉ", "日本語English", "EnglishЖ", "Ж日本",
]
O200K_CONTRACTIONS = [
    "don't", "DON'T", "Don't", "dON'T", "I'm", "I'M", "i'M", "you're", "You'RE", "YOU'Re",
    "we've", "WE'VE", "he'd", "HE'D", "she'll", "SHE'LL", "She'Ll", "it's", "IT'S", "It'S",
    "NASA's mission's", "John'sBook", "JOHN'sbook", "camelCase's", "ABC'd", "ǅemal's",
    "it'ſ", "IT'ſ", "it'\u212a", "i'ǉ", "it’s", "it`s", "'s'S's", "x'sy", "XY'SZ", "a'b'c'd",
    "l'homme L'HOMME", "o'clock O'CLOCK", "'twas 'Twas", "rock'n'roll", "'", "''", "Ж's", "日本's",
]
O200K_MISC = [
    "1", "12", "123", "1234", "12345", "123456", "1234567", "12345678901", "1,234,567", "3.14159265",
    "a/b/c", "path/to/file.txt", "/usr/local/bin/", "http://x.com/a/b/", "!/", "!/\n", ")//", "?!\n\n",
    "...\r\n", "--\n/", "a+/b", " //comment", "x /= 2", "(a)/(b)", "}\n\n\n", "};\r\n",
    "\u0661\u0662\u0663\u0664", "\U00011f50\U00011f51\U00011f52\U00011f53", "ⅠⅡⅢⅣ", "¹²³⁴",
    " \n", "  \n\n", "a \n b", "\n\n  x", "   x", "x   ", "\t\tx", "x\n\n\n",
]

# The added tokens of the new files that the corpus above does not already have.
NEW_SPECIAL_TEXTS = [
    "<|endofprompt|>", "<|box_start|>", "<|quad_end|>", "<|vision_start|>", "<|image_pad|>",
    "<|video_pad|>", "<s><unk></s>",
]

N_RANDOM_MIX_NEW = 160


def rand_char(rng):
    lo, hi = rng.choice(CHAR_RANGES)
    c = rng.randint(lo, hi)
    if 0xd800 <= c <= 0xdfff:
        c = 0xfffd
    return chr(c)


def digit_cases(rng):
    out = []
    for n in range(1, 26):
        out.append("".join(rng.choice("0123456789") for _ in range(n)))
    for n in (1, 2, 3, 4, 5, 6, 7, 9, 10, 12, 16, 19, 25):
        d = "".join(rng.choice("0123456789") for _ in range(n))
        sep = rng.choice(DIGIT_SEPARATORS)
        # group from the right in threes, as a thousands separator
        groups = []
        while d:
            groups.insert(0, d[-3:])
            d = d[:-3]
        out.append(sep.join(groups))
        out.append(f"x{n}y" + "".join(rng.choice("0123456789") for _ in range(n)) + "z")
    out += [
        "0", "00", "000", "0000", "3.14159", "-42", "+7", "1e-9", "6.022e23", "0xFF", "0b1010",
        "1,000,000", "1.000.000,50", "1 000 000", "1_000_000", "12:34:56", "2024-06-11",
        "192.168.0.1", "+1 (555) 123-4567", "１２３４５", "٠١٢٣٤٥٦٧٨٩", "۰۱۲۳", "०१२३४५",
        "๑๒๓๔", "①②③④⑤", "²³⁴", "₁₂₃", "ⅠⅡⅢ", "½¾", "𝟘𝟙𝟚", "abc123def4567ghi", "a1b22c333d4444",
        "1a", "12ab", "123abc", "1234abcd", "v2", "R2D2", "3.0.0-rc.1", "99.9%", "$1,234.56",
        "12345 67890", "1\n2\n3", "1 2 3 4 5 6 7 8 9 10", "007", "π≈3.14", "1/2", "10^9+7",
    ]
    return out


def single_chars(rng):
    fixed = list("aZ0 !~\t\n") + ["\r", "é", "ß", "Ж", "λ", "ש", "ع", "क", "ก", "日", "あ", "ア",
                                 "한", "ᄀ", "😀", "\U0001f3fd", "\u200d", "\ufe0f", "\u00a0",
                                 "\u3000", "\u0301", "▁", "｜", "�", "\u2028", "\U0010ffff", "'",
                                 "\"", "\\", "<", ">", "|"]
    rnd = [rand_char(rng) for _ in range(40)]
    return fixed + rnd


def special_fragments(specials):
    """Adds a deterministic sample of the added tokens of each tokenizer.json file."""
    return list(SPECIAL_TEXTS) + specials


def random_mix(rng, pools):
    k = rng.choice((1, 2, 2, 3, 3, 4, 5, 6, 8, 12))
    parts = []
    for _ in range(k):
        pool = rng.choice(pools)
        frag = rng.choice(pool)
        if len(frag) > 80:
            start = rng.randrange(len(frag) - 40)
            frag = frag[start:start + rng.randint(5, 60)]
        parts.append(frag)
        parts.append(rng.choice(SEPARATORS))
    s = "".join(parts[:-1] if rng.random() < 0.7 else parts)
    r = rng.random()
    if r < 0.1:
        s = " " + s
    elif r < 0.2:
        s = "  " + s
    elif r < 0.25:
        s = s.upper()
    elif r < 0.3:
        s = unicodedata.normalize("NFD", s)
    elif r < 0.33:
        s = unicodedata.normalize("NFKD", s)
    return s


def random_chars(rng):
    n = rng.choice((1, 2, 3, 5, 8, 13, 21, 40))
    return "".join(rand_char(rng) for _ in range(n))


def random_long(rng, pools):
    parts = []
    while sum(len(p) for p in parts) < 500:
        parts.append(rng.choice(rng.choice(pools)))
        parts.append(rng.choice(SEPARATORS))
    return "".join(parts)[:500]


def build_corpus(added_samples, new_added_samples=()):
    """The corpus and the indices of the strings that also get ids_with_special."""
    rng = random.Random(SEED)
    specials = special_fragments(added_samples)
    digits = digit_cases(rng)
    singles = single_chars(rng)
    seeds = (SCRIPTS + EMOJI + CODE + WHITESPACE + CONTRACTIONS + PUNCT + COMBINING + NFKC +
             RARE + specials + BROKEN_SPECIAL + SPECIAL_IN_TEXT + digits + singles + LONG)
    # NFD / NFKD variants of the script seeds (differ from the input: NFC changes them back)
    seeds += [unicodedata.normalize("NFD", s) for s in SCRIPTS[:14]]
    seeds += [unicodedata.normalize("NFKD", s) for s in NFKC[:12]]
    pools = [SCRIPTS, EMOJI, CODE, WHITESPACE, CONTRACTIONS, PUNCT, COMBINING, NFKC, RARE,
             specials, BROKEN_SPECIAL, SPECIAL_IN_TEXT, digits, singles, WORDS, WORDS, WORDS]
    mixes = [random_mix(rng, pools) for _ in range(N_RANDOM_MIX)]
    chars = [random_chars(rng) for _ in range(N_RANDOM_CHARS)]
    longs = [random_long(rng, pools) for _ in range(8)]
    corpus, seen, with_special = [], set(), set()

    def add(strings, special=False):
        for s in strings:
            if s in seen:
                continue
            s.encode("utf-8")  # raises on a lone surrogate
            seen.add(s)
            if special:
                with_special.add(len(corpus))
            corpus.append(s)

    add(FIRST, special=True)
    assert len(corpus) == N_WITH_SPECIAL
    add(seeds + mixes + chars + longs)
    # the second set: its own seeds, added-token samples and random mixes (a separate generator,
    # so the strings above do not change)
    rng2 = random.Random(SEED + 2)
    new_specials = NEW_SPECIAL_TEXTS + [t for t in new_added_samples if t not in seen]
    add(SPM_FIRST, special=True)
    add(CASE_WORDS + O200K_CONTRACTIONS + O200K_MISC + new_specials)
    new_pools = [CASE_WORDS, CASE_WORDS, O200K_CONTRACTIONS, O200K_MISC, SPM_FIRST, new_specials,
                 WHITESPACE, CONTRACTIONS, WORDS, WORDS, SCRIPTS, EMOJI, RARE, singles]
    add([random_mix(rng2, new_pools) for _ in range(N_RANDOM_MIX_NEW)])
    return corpus, with_special


# ---------------------------------------------------------------------------------------------
# Regex cases: Oniguruma syntax that specula rewrites for PCRE2 (hf_tokenizer.cpp to_pcre2), run
# by the library as a Split pre-tokenizer with behaviour "removed" over one sample text; the
# fixture keeps what is left (the test reads it through a byte-fallback model).

REGEX_PATTERNS = [
    r"\p{L}", r"\p{Lu}", r"\p{Ll}", r"\p{Lt}", r"\p{Lm}", r"\p{Lo}", r"\p{LC}", r"\p{lu}",
    r"\p{L_u}", r"\p{M}", r"\p{Mn}", r"\p{Mc}", r"\p{N}", r"\p{Nd}", r"\p{No}", r"\p{P}",
    r"\p{Pd}", r"\p{Po}", r"\p{S}", r"\p{Sm}", r"\p{So}", r"\p{Cf}", r"\p{Cn}", r"\p{C}",
    r"\P{L}", r"\P{Lu}", r"\P{Mn}", r"\p{^Mn}", r"\P{^Lo}", r"\P{Cn}",
    r"[\p{Lu}\p{Lt}]", r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]", r"[^\p{Ll}]", r"[^\r\n\p{L}\p{N}]",
    r"[\P{Lu}]", r"[^\P{Lu}]", r"[a\P{L}]", r"[^a\P{L}]", r"[\p{Mn}]", r"[^\p{Mn}x]",
    r"[\P{Mn}]", r"[\p{Mn}\p{Mc}]", r"[\p{Cn}a]", r"[^\p{Cn}\p{Co}]",
    r"\d", r"\D", r"[\d]", r"[^\d]", r"[\D]", r"[x\D]", r"\h", r"\H", r"[\h_]", r"[^\h]",
    r"\s", r"\S", r"[\S]", r"[^\S]", r"[\s\d]", r"[^\s\p{L}\p{N}]+", r"[]a]", r"[^]a]",
    r"\w", r"\W", r"[\w]", r"[^\w]", r"[\W]", r"[^\W\d]", r"\w+|[^\w\s]+", r"\b.", r".\b", r"\B.",
    r"\b\w+\b", r"[\b]",
    # not rewritten (scripts, POSIX classes): the test expects these to differ
    r"[[:alpha:]]", r"\p{Han}", r"\p{Latin}",
    r"\p{N}{1,3}", r"\p{Lu}+\p{Ll}*", r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
]

# Code points where Unicode 14.0 (PCRE2 10.42) and Oniguruma's tables differ, and neighbours.
REGEX_SAMPLE_CPS = [
    0x1C89, 0x1C8A, 0xA7CB, 0xA7CC, 0xA7CD, 0xA7DA, 0xA7DB, 0xA7DC, 0x10D50, 0x10D65, 0x10D70,
    0x10D85, 0x10D4A, 0x10D40, 0x10D69, 0x10D8E, 0x1E030, 0x1E06D, 0x11F04, 0x11F02, 0x11F03,
    0x11F34, 0x11F36, 0x11F50, 0x11F59, 0x11F5A, 0x0897, 0x0CF3, 0x0ECE, 0x1171D, 0x1171E, 0x1171F,
    0x11380, 0x113B8, 0x113BB, 0x16100, 0x1611E, 0x1612A, 0x16D40, 0x16D70, 0x1E4D0, 0x1E4F0,
    0x1E5D0, 0x1E5FF, 0x1CC00, 0x1CCF0, 0x2427, 0x2FFC, 0x31E4, 0x31EF, 0x1B4E, 0x1B7F, 0x1F6DC,
    0x1FA75, 0x1FBCB, 0x13430, 0x13439, 0x1343A, 0x13440, 0x1343F, 0x2B739, 0x31350, 0x2EBF0,
    0x0378, 0x0380, 0xE000, 0xF8FF, 0xF0000, 0xFFFE, 0x10FFFF, 0x00AD, 0x0600, 0x200B, 0x200D,
    0x2060, 0xFEFF, 0x0085, 0x180E, 0x00A0, 0x1680, 0x2000, 0x200A, 0x2028, 0x2029, 0x202F,
    0x205F, 0x3000, 0x01C5, 0x1F88, 0x02B0, 0x30FC, 0x3005, 0x00AA, 0x0301, 0x0903, 0x20DD,
    0x0660, 0x0966, 0xFF10, 0x1D7CE, 0x2160, 0x00B2, 0x00BD, 0x2070, 0x005F, 0x203F, 0x2010,
    0x00AB, 0x00BB, 0x2018, 0x2019, 0x00A7, 0x002B, 0x00A2, 0x005E, 0x00A9, 0x1F600, 0x01C4,
    0x01C6, 0x0130, 0x0131, 0x017F, 0x212A, 0x00DF, 0x1E9E, 0xFB05, 0x03A3, 0x03C2, 0x13A0,
    0xAB70, 0x10A0, 0x2D00, 0x1C90, 0x24B6, 0x24D0, 0x4E00, 0xAC00, 0x0E01, 0x0627, 0x05D0,
]
REGEX_SAMPLE_ASCII = "aZ09_ !\"#$%&'()*+,-./:;<=>?@[\\]^`{|}~\t\n\r\x0b\x0c\x00\x1f\x7f"


def regex_sample(rng):
    cps = list(REGEX_SAMPLE_CPS)
    while len(cps) < 700:
        c = rng.randrange(0x110000) if rng.random() < 0.3 else rng.randrange(0x20000)
        if not 0xD800 <= c <= 0xDFFF:
            cps.append(c)
    # Words too: case runs, contractions, digit runs, punctuation before '/' and line breaks.
    words = ["camelCaseWORD", "ǅemal's", "IT'S", "it'ſ", "12345", "a!/\n", "x \r\n", "ÉCOLEé"]
    parts = []
    for i, c in enumerate(cps):
        parts.append(chr(c))
        if i % 3 == 0:
            parts.append(REGEX_SAMPLE_ASCII[i % len(REGEX_SAMPLE_ASCII)])
        if i % 50 == 0:
            parts.append(words[(i // 50) % len(words)])
    return "".join(parts)


def regex_cases():
    from tokenizers import Regex, pre_tokenizers
    text = regex_sample(random.Random(SEED + 3))
    cases = []
    for pat in REGEX_PATTERNS:
        split = pre_tokenizers.Split(Regex(pat), behavior="removed")
        cases.append({"pattern": pat,
                      "kept": "".join(piece for piece, _ in split.pre_tokenize_str(text))})
    return {"text": text, "cases": cases}


# ---------------------------------------------------------------------------------------------
# Decode cases: id sequences that no encode gives (byte tokens that are not whole UTF-8
# characters, special and added tokens first, space tokens first, ids the vocabulary lacks,
# random ids) and the library's decode(ids, skip_special_tokens=False) of them.

def _bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def decode_cases(tok, rng):
    vocab = tok.get_vocab(with_added_tokens=True)
    b2u = _bytes_to_unicode()

    def tid(*texts):
        for t in texts:
            if t in vocab:
                return vocab[t]
        return None

    def byte_tok(b):  # a token for the single byte b: <0xXX> or the byte-level character
        return tid(f"<0x{b:02X}>", b2u[b])

    word = tid("▁hello", "Ġhello", "hello")
    world = tid("▁world", "Ġworld", "world")
    space = tid("▁", "Ġ", " ")
    seqs = []
    for bs in ([0xE6], [0xE6, 0x97], [0xE6, 0x97, 0xA5], [0xE6, 0x97, 0xA5, 0xE6], [0x80],
               [0x80, 0x41], [0x41, 0xE6, 0x42], [0xC3, 0xA9], [0xC3], [0xF0, 0x9F, 0x98],
               [0xF0, 0x9F, 0x98, 0x80], [0xFF], [0xED, 0xA0, 0x80], [0x20], [0x20, 0x41],
               [0xC0, 0x80], [0xE6, 0x41, 0x97]):
        ids = [byte_tok(b) for b in bs]
        if all(i is not None for i in ids):
            seqs.append(ids)
            if word is not None and world is not None:
                seqs.append([word] + ids + [world])
                seqs.append(ids + [world])
    for extra in ([space], [space, word], [space, space], [word, space], [word, world]):
        if all(i is not None for i in extra):
            seqs.append(extra)
    added = sorted(tok.get_added_tokens_decoder())
    for a in added[:6] + added[-2:]:
        seqs.append([a])
        if word is not None:
            seqs.append([a, word])
            seqs.append([word, a, word])
    n = max(vocab.values()) + 1
    holes = [i for i in range(n) if tok.id_to_token(i) is None][:3]
    for h in holes:
        seqs.append([h])
        if word is not None:
            seqs.append([h, word])
    for _ in range(40):
        seqs.append([rng.randrange(n) for _ in range(rng.randint(1, 6))])
    out, seen = [], set()
    for ids in seqs:
        if tuple(ids) in seen:
            continue
        seen.add(tuple(ids))
        out.append({"ids": ids, "text": tok.decode(ids, skip_special_tokens=False)})
    return out


def sample_added_tokens(paths):
    """A few added tokens from each file, chosen with a fixed seed (plus the first ones)."""
    rng = random.Random(SEED + 1)
    out = []
    for name in sorted(paths):
        with open(paths[name], encoding="utf-8") as f:
            added = [a["content"] for a in json.load(f)["added_tokens"]]
        picks = added[:4] + rng.sample(added, min(8, len(added)))
        out += [p for p in picks if p not in out and p not in SPECIAL_TEXTS]
    return out


def encode_all(tok, corpus, with_special):
    cases = []
    for i, text in enumerate(corpus):
        case = {"ids": tok.encode(text, add_special_tokens=False).ids}
        tok.encode_special_tokens = True
        try:
            case["ids_no_special"] = tok.encode(text, add_special_tokens=False).ids
        finally:
            tok.encode_special_tokens = False
        decoded = tok.decode(case["ids"], skip_special_tokens=False)
        if decoded != text:
            case["decoded"] = decoded
        if i in with_special:
            case["ids_with_special"] = tok.encode(text, add_special_tokens=True).ids
        cases.append(case)
    return cases


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", default=None,
                    help="tokenizers folder (default ${SPECULA_CACHE:-~/.cache/specula}/tokenizers)")
    ap.add_argument("--out", default=DEFAULT_OUT)
    args = ap.parse_args()
    root = args.cache or fetcher.cache_root()

    paths = {}
    for name in fetcher.TOKENIZERS:
        folder = fetcher.fetch(name, root)
        paths[name] = os.path.join(folder, "tokenizer.json")

    first = {n: paths[n] for n in ORIGINAL}
    rest = {n: p for n, p in paths.items() if n not in ORIGINAL}
    corpus, with_special = build_corpus(sample_added_tokens(first), sample_added_tokens(rest))
    out = {
        "generator": "tools/make_hf_tokenizer_fixtures.py",
        "oracle": f"tokenizers {tokenizers.__version__}",
        "corpus": corpus,
        "regex": regex_cases(),
        "tokenizers": {},
    }
    print(f"corpus: {len(corpus)} strings, {sum(len(s) for s in corpus)} code points")
    for name, (package, hashes) in fetcher.TOKENIZERS.items():
        tok = Tokenizer.from_file(paths[name])
        assert not tok.encode_special_tokens
        cases = encode_all(tok, corpus, with_special)
        out["tokenizers"][name] = {
            "package": package,
            "version": fetcher.VERSION,
            "sha256": hashes["tokenizer.json"],
            "n_vocab": tok.get_vocab_size(with_added_tokens=True),
            "cases": cases,
            "decode_cases": decode_cases(tok, random.Random(SEED + 4)),
        }
        n_ids = sum(len(c["ids"]) for c in cases)
        n_ns = sum(len(c["ids_no_special"]) for c in cases)
        n_diff_special = sum(c["ids"] != c["ids_no_special"] for c in cases)
        bad = [i for i, c in enumerate(cases) if "decoded" in c]
        print(f"{name}: n_vocab {out['tokenizers'][name]['n_vocab']}, ids {n_ids}, "
              f"ids_no_special {n_ns} ({n_diff_special} strings differ), "
              f"decode(encode(x)) != x for {len(bad)} strings")
        for i in bad[:3]:
            print(f"    #{i}: {corpus[i]!r} -> {cases[i]['decoded']!r}")

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tmp = args.out + ".tmp"
    # gzip (mtime 0: the same bytes each run); 4.7 MB of JSON is 0.7 MB compressed.
    with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0) as f:
        f.write((json.dumps(out, separators=(",", ":"), ensure_ascii=False) + "\n").encode("utf-8"))
    os.replace(tmp, args.out)
    print(f"wrote {os.path.relpath(args.out)}: {os.path.getsize(args.out)} bytes")


if __name__ == "__main__":
    main()
