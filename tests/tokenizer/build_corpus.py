"""Assemble the tokenizer corpus (tests/tokenizer/corpus.json) from the seed texts below.

    PYTHONPATH=$PWD python tests/tokenizer/build_corpus.py

Deterministic: the same seeds give the same file. The corpus is committed; rerun this only to change
it, then regenerate the llama.cpp references (tests/tokenizer/make_refs.py).

What it holds: prose in Latin, Cyrillic, Greek, CJK, Arabic, Hebrew, Devanagari, Thai and other
scripts; code in several languages; emoji (ZWJ sequences, flags, skin tones); runs of spaces, tabs
and newlines; digits and numbers; the special tokens of both bundled models written as text; and
mixtures of these, plus seeded random strings drawn from many Unicode blocks.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).with_name("corpus.json")

PROSE = [
    # English
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure you'll agree: it's what we'd've done, isn't it? They're here; we've gone.",
    "I'M SURE YOU'LL AGREE IT'S FINE. DON'T SHOUT!",
    "Rivers of the world: the Nile, the Amazon, the Yangtze and the Mississippi.",
    "Once upon a time, in a land far, far away, there lived a small robot who loved to read.",
    "Can you name three rivers in Europe?",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "Dear Sir or Madam,\n\nI am writing to enquire about the position advertised last week.\n\nYours faithfully,\nA. Smith",
    "Q: What is the capital of France?\nA: Paris.",
    "e.g. i.e. etc. Mr. Mrs. Dr. St. U.S.A. a.m. p.m.",
    "“Smart quotes” and ‘single ones’ — plus an em dash – an en dash … and an ellipsis.",
    "café naïve résumé coöperate façade jalapeño piñata Zürich Ångström",
    # other Latin-script languages
    "Der schnelle braune Fuchs springt über den faulen Hund. Größe, Straße, Maß.",
    "Le cœur a ses raisons que la raison ne connaît point. Où est l'hôtel ?",
    "¿Dónde está la biblioteca? ¡Qué sorpresa! El niño comió piña.",
    "Zażółć gęślą jaźń. Pchnąć w tę łódź jeża lub ośm skrzyń fig.",
    "Příliš žluťoučký kůň úpěl ďábelské ódy.",
    "Árvíztűrő tükörfúrógép.",
    "Türkçe: İstanbul'da ığdır şöyle çalışır.",
    "Tiếng Việt: Tôi yêu tiếng nước tôi từ khi mới ra đời.",
    "Þetta er íslenska: ð og þ eru stafir.",
    "Dansk og norsk: blåbærsyltetøy, æble, øl.",
    "Kiswahili: Habari za asubuhi? Nzuri sana, asante.",
    # Cyrillic
    "Привет, мир! Как дела?",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Україна: Ґанок, їжак, єнот, ґудзик.",
    "Српски: Љубав, њива, ђак, ћуприја, џеп.",
    "Москва — столица России. Население около 13 миллионов человек.",
    # Greek
    "Γειά σου Κόσμε! Τι κάνεις;",
    "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.",
    "Η Αθήνα είναι η πρωτεύουσα της Ελλάδας.",
    # CJK
    "你好，世界！今天天气很好。",
    "我们在北京大学学习中文，已经三年了。",
    "日本語のテキストです。東京は日本の首都です。",
    "ひらがなとカタカナ、そして漢字を混ぜて書きます。",
    "한국어 문장입니다. 서울은 대한민국의 수도입니다.",
    "繁體中文：臺灣的首都是臺北。",
    "全角文字：ＡＢＣ１２３！？",
    # Arabic, Hebrew, Persian, Urdu
    "مرحبا بالعالم! كيف حالك اليوم؟",
    "اللغة العربية جميلة جداً، وهي لغة القرآن.",
    "שלום עולם! מה שלומך?",
    "سلام دنیا! حال شما چطور است؟",
    "اردو ایک خوبصورت زبان ہے۔",
    "العدد ١٢٣٤٥ بالأرقام العربية الهندية.",
    # Indic
    "नमस्ते दुनिया! आप कैसे हैं?",
    "भारत एक विशाल देश है जिसकी राजधानी नई दिल्ली है।",
    "संस्कृतम् एका प्राचीना भाषा अस्ति।",
    "বাংলা ভাষা খুব সুন্দর।",
    "தமிழ் ஒரு பழமையான மொழி.",
    "తెలుగు భాష చాలా మధురమైనది.",
    "ગુજરાતી ભાષા",
    "ਪੰਜਾਬੀ ਭਾਸ਼ਾ",
    "१२३४५ देवनागरी अंक",
    # Southeast Asian and others
    "สวัสดีชาวโลก! วันนี้อากาศดีมาก",
    "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ",
    "ພາສາລາວ",
    "ភាសាខ្មែរ",
    "မြန်မာဘာသာ",
    "ქართული ენა ძალიან ლამაზია.",
    "Հայերեն լեզու",
    "አማርኛ ቋንቋ",
    "ᓀᐦᐃᔭᐍᐏᐣ",
    "ᚠᚢᚦᚨᚱᚲ runes",
    "𝔉𝔯𝔞𝔨𝔱𝔲𝔯 𝕕𝕠𝕦𝕓𝕝𝕖 𝒮𝒸𝓇𝒾𝓅𝓉",
]

CODE = [
    "def f(x):\n    return x**2  # sq\n\n\ttab",
    'import os\n\n\ndef main() -> None:\n    path = os.environ.get("HOME", "/")\n    print(f"{path!r}")\n',
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, x):\n        self.items.append(x)\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\n",
    '#include <stdio.h>\n\nint main(void) {\n    printf("Hello, %s!\\n", "world");\n    return 0;\n}\n',
    'fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!("{:?}", v);\n}\n',
    "const add = (a, b) => a + b;\nconsole.log(add(2, 3)); // 5\n",
    'SELECT id, name FROM users WHERE age >= 18 AND name LIKE "A%" ORDER BY name DESC;',
    '{"name": "Switchyard", "version": "1.0.0", "tags": ["a", "b"], "nested": {"x": 1, "y": [true, false, null]}}',
    '<html>\n  <body>\n    <div class="main"><p>Hi &amp; bye</p></div>\n  </body>\n</html>',
    "<table><tr><td>1</td><td>2</td></tr></table>",
    "<h1>Title</h1><strong>bold</strong> <em>it</em> <code>x = 1</code> <b>b</b> <i>i</i> <s>struck</s>",
    '#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do\n  echo "$f" | wc -c\ndone\n',
    "$ git log --oneline | head -n 5 && make test 2>&1 | tee log.txt",
    'x := map[string]int{"a": 1}\nif v, ok := x["a"]; ok {\n\tfmt.Println(v)\n}\n',
    "regex = r'^(?P<user>[\\w.+-]+)@(?P<host>[\\w-]+\\.[\\w.]+)$'",
    "a+=1;b-=2;c*=3;d/=4;e%=5;f**=6;g//=7;h<<=1;i>>=2;j&=k|l^m~n",
    "if (a != b && c <= d || e >= f) { return !g; } else { return h ?? i; }",
    "matrix = [[1, 2, 3],\n          [4, 5, 6],\n          [7, 8, 9]]",
    "key: value\nlist:\n  - one\n  - two\nnested:\n    deep: true\n",
    '[section]\nname = "value"\ncount = 42\n',
    "\\documentclass{article}\n\\begin{document}\n$E = mc^2$ and $\\int_0^\\infty e^{-x} dx = 1$\n\\end{document}",
    "// TODO(alice): handle the edge case where n == 0\n/* block\n   comment */",
    "    indented four\n        indented eight\n\t\tdouble tab\n  \t mixed",
    "lambda x: x if x > 0 else -x",
    "@decorator(arg=1)\nasync def handler(request: Request) -> Response:\n    await asyncio.sleep(0)\n",
    "print('a', \"b\", '''c''', \"\"\"d\"\"\", f'{e}', b'\\x00\\xff')",
    "0x1F 0o17 0b1010 1e-9 3.14e+10 1_000_000 -0.0 +5 .5 5.",
    "https://example.com/path/to/page?query=1&other=two#fragment",
    "user@example.com, first.last+tag@sub.domain.co.uk",
    "C:\\Users\\name\\Documents\\file.txt /usr/local/bin/python3",
]

EMOJI = [
    "🎉🚀",
    "ok 🎉 日本語 é🚀!",
    "I ❤️ NY",
    "👨‍👩‍👧‍👦 family, 👩🏽‍💻 coder, 🏳️‍🌈 flag",
    "🇫🇷 🇩🇪 🇯🇵 🇺🇸 🇮🇳",
    "👍🏻👍🏼👍🏽👍🏾👍🏿",
    "😀😃😄😁😆😅😂🤣🥲☺️😊",
    "✓ ✗ ★ ☆ ♠ ♣ ♥ ♦ ☀ ☁ ☂ ☃",
    "©®™ ℃ ℉ № ∞ ≈ ≠ ≤ ≥ ± × ÷ √ ∑ ∏ ∫ ∂ ∇",
    "→ ← ↑ ↓ ↔ ⇒ ⇔ ∀ ∃ ∈ ∉ ⊂ ⊃ ∩ ∪",
    "€100, £50, ¥1000, ₹500, ₽200, ₿0.01, $9.99",
    "🤖: beep boop 🛰️🛸🪐",
    "keycaps: 1️⃣ 2️⃣ #️⃣ *️⃣",
    "🧑‍🚀👩‍🔬🧑‍🍳",
]

WHITESPACE = [
    " ",
    "  ",
    "   ",
    "\n",
    "\n\n",
    "\n\n\n\n",
    "\t",
    "\t\t\t",
    " \n \n ",
    "\r\n",
    "line one\r\nline two\r\n",
    "  leading  spaces   and trailing ",
    "trailing newline\n",
    "\nleading newline",
    "a b  c   d    e     f      g       h        i",
    "a\tb\t\tc\t\t\td",
    "a\nb\n\nc\n\n\nd\n\n\n\ne",
    "mixed \t \n\t\n  \t  end",
    "word" + " " * 40 + "word",
    "x" + "\n" * 35 + "y",
    "tab" + "\t" * 33 + "tab",
    "\u00a0non-breaking\u00a0space",
    "thin\u2009space and em\u2003space and ideographic\u3000space",
    "zero\u200bwidth\u200cjoiner\u200dtest",
    "\u2028line sep\u2029para sep",
    "\x0bvertical tab\x0cform feed",
]

DIGITS = [
    "0",
    "7",
    "42",
    "123",
    "1234",
    "12345678901234567890",
    "3.14159265358979",
    "I'm 42 years old, it's 3.14159 and 2024-01-01",
    "Call 555-0123 or +1 (800) 555-0199 ext. 42",
    "1,234,567.89 and 1.234.567,89",
    "2024-12-05T03:00:00Z",
    "version 1.2.3-beta.4+build.567",
    "ISBN 978-3-16-148410-0",
    "10%, 50 %, 99.9%",
    "1st 2nd 3rd 4th 21st 100th",
    "Ⅰ Ⅱ Ⅲ Ⅳ Ⅴ ½ ¼ ¾ ² ³ ⁴",
    "٠١٢٣٤٥٦٧٨٩ ۰۱۲۳۴۵۶۷۸۹ ०१२३४५६७८९ ๐๑๒๓๔๕๖๗๘๙",
    "x1 y22 z333 a4444 b55555",
    "1+1=2 2*3=6 10/2=5 2^10=1024",
    " 1 22 333 4444 55555 ",
]

SPECIALS = [
    "<|im_start|>user\nhi<|im_end|>\n",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>",
    "text<|endoftext|>more text",
    "<|im_start|><|im_end|><|im_start|>",
    "<start_of_turn>user\nWhat is the capital of France?<end_of_turn>\n<start_of_turn>model\n",
    "<bos><start_of_turn>user\nhi<end_of_turn>\n",
    "<eos>",
    "<pad><unk><mask>",
    "<start_of_image><end_of_image>",
    "<unused0> <unused1> <unused99>",
    "<repo_name>switchyard<file_sep>main.py<filename>x.py",
    "<jupyter_code>print(1)<jupyter_output>1<empty_output>",
    "<|im_start|>user\n<start_of_turn>mixed formats<end_of_turn><|im_end|>",
    "< |im_start| > <im_start> |im_start| <|im_start",
    "<start_of_turn <end_of_turn>> <<start_of_turn>>",
    '<tool_call>{"name": "search", "arguments": {"q": "rivers"}}</tool_call>',
    '<tool_results>\n<tool_result id="1" name="web" status="ok">\narguments: {}\nbody\n</tool_result>\n</tool_results>',
    '<files>\n<file name="a.txt">\ncontent\n</file>\n</files>',
    "[multimodal] [INST] [/INST] <<SYS>> <</SYS>>",
    "<s>not special here</s>",
]

# Edge cases for the algorithms themselves: the space marker written literally, byte-token
# spellings, characters no vocabulary has (byte fallback), control characters, contractions in
# every case, very long runs.
HARD = [
    "\u2581 literal\u2581marker \u2581\u2581 twice",
    "<0x41><0xE3> spelled byte tokens",
    "private use: \ue000\ue001\U000f0000 and replacement \ufffd",
    "controls: \x01\x02\x07\x1b[31mred\x1b[0m \x7f",
    "combining: e\u0301 a\u0308 \u0301alone n\u0303\u0303",
    "'s 'S 't 'T 're 'RE 'Re 've 'VE 'm 'M 'll 'LL 'Ll 'd 'D",
    "don't DON'T Don'T we'Re",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "!!!!!!!!!!!!!!!!!!!!????????????........,,,,,,,;;;;;;::::::",
    "=" * 80,
    "-" * 61 + "\n" + "#" * 30,
    " " * 100,
    "\n" * 50,
    "\t" * 40 + "x",
    " \n" * 20,
    "a" + " " * 31 + "b" + " " * 32 + "c" + " " * 63 + "d",
    "Supercalifragilisticexpialidocious antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
    "ThisIsCamelCaseAndSnake_case_and-kebab-case_and.dot.case",
    "中文English混合text日本語にほんご한국어123",
    "Ελληνικά και English and русский вместе",
    "\U0001f600" * 12,
    "\u200d\u200d\u200d",
    "\ufeffbyte order mark",
    "\u00ad soft\u00adhyphen",
]


def _derived(rng: random.Random, pool: list[str]) -> list[str]:
    """Mixtures: a seed text wrapped in special tokens, whitespace, digits or another script."""
    out = []
    wraps = [
        "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n",
        "<start_of_turn>user\n{}<end_of_turn>\n<start_of_turn>model\n",
        "  {}  ",
        "\n\n{}\n\n",
        "\t{}\n",
        "{} 12345",
        "({})",
        '"{}"',
        "{}!!!???",
        "- {}\n- {}",
        "{}\n```python\nx = 1\n```",
        " {}",
    ]
    for i, text in enumerate(pool):
        out.append(wraps[i % len(wraps)].replace("{}", text))
        other = pool[rng.randrange(len(pool))]
        out.append(f"{text} {other}")
    for _ in range(40):
        a, b, c = (pool[rng.randrange(len(pool))] for _ in range(3))
        out.append(a + rng.choice(["", " ", "\n", "  ", "\t", "<|im_end|>", "<end_of_turn>"]) + b + " " + c)
    return out


# Unicode blocks the random strings draw from: scripts, symbols, combining marks, emoji, CJK.
_BLOCKS = [
    (0x20, 0x7E),
    (0xA0, 0x24F),
    (0x300, 0x36F),
    (0x370, 0x3FF),
    (0x400, 0x4FF),
    (0x590, 0x5FF),
    (0x600, 0x6FF),
    (0x900, 0x97F),
    (0xE00, 0xE7F),
    (0x1100, 0x11FF),
    (0x2000, 0x206F),
    (0x2190, 0x23FF),
    (0x2500, 0x27BF),
    (0x3000, 0x30FF),
    (0x4E00, 0x9FFF),
    (0xAC00, 0xD7A3),
    (0xFF00, 0xFFEF),
    (0x1F300, 0x1FAFF),
    (0x20000, 0x2A6DF),
]


def _random_strings(rng: random.Random, n: int) -> list[str]:
    out = []
    for _ in range(n):
        chars = []
        for _ in range(rng.randint(1, 40)):
            r = rng.random()
            if r < 0.15:
                chars.append(rng.choice([" ", "  ", "\n", "\t", " \n"]))
            elif r < 0.25:
                chars.append(str(rng.randint(0, 99999)))
            else:
                lo, hi = _BLOCKS[rng.randrange(len(_BLOCKS))]
                cp = rng.randint(lo, hi)
                if 0xD800 <= cp <= 0xDFFF:
                    continue
                chars.append(chr(cp))
        out.append("".join(chars))
    return out


def build() -> list[str]:
    rng = random.Random(29)
    seeds = PROSE + CODE + EMOJI + WHITESPACE + DIGITS + SPECIALS + HARD
    texts = seeds + _derived(rng, seeds) + _random_strings(rng, 120)
    # A few long ones: whole paragraphs of every kind at once.
    for _ in range(6):
        texts.append("\n".join(seeds[rng.randrange(len(seeds))] for _ in range(25)))
    seen: set[str] = set()
    return [t for t in texts if t and not (t in seen or seen.add(t))]  # type: ignore[func-returns-value]


def main() -> None:
    texts = build()
    OUT.write_text(json.dumps(texts, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    print(f"{len(texts)} texts -> {OUT}")


if __name__ == "__main__":
    main()
