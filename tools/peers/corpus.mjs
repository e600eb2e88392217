// The tokenizer test corpus: deterministic (seeded) strings of many kinds. Shared by the parity
// data writer and the encoding benchmark.

// A small seeded generator (mulberry32), so every run builds the same corpus.
export function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const WORDS = (
  "the of and to in is that it was for on are as with his they at be this from have or by one " +
  "had not but what all were when we there can an your which their said if do will each about " +
  "how up out them then she many some so these would other into has more her two like him see " +
  "time could no make than first been its who now people my made over did down only way find " +
  "use may water long little very after words called just where most know get through back " +
  "don't I'm you're we've they'll she'd it's O'Neil rock'n'roll e-mail state-of-the-art"
).split(" ");

const FRAGMENTS = {
  code: [
    "def f(x):\n    return x * 2\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
    '{"key": [1, 2.5, null, true], "nested": {"a": "b"}}',
    "#include <vector>\nint main() { return 0; }",
    "SELECT id, name FROM users WHERE age >= 21 ORDER BY name;",
    "const x = (a, b) => a ?? b; // comment",
    "if x != None and y <= 3: print(f'{x!r:>10}')",
    "fn main() { let v: Vec<u8> = vec![0xFF; 16]; }",
    "<div class=\"a\">&amp; &lt;tag&gt;</div>",
    "$ ls -la ~/.config | grep -E '^d' && echo \"done\"",
  ],
  whitespace: [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\t\t  \n", "        ", "\u00a0", "\u3000", "\u2003", " \t \t"],
  digits: ["0", "7", "42", "123", "1234", "12345", "3.14159", "1,000,000", "2026-11-30", "0x1F", "1e-9", "٣٤٥", "１２３", "½", "²"],
  cjk: ["你好，世界", "我们今天去公园散步。", "東京は日本の首都です", "こんにちは", "カタカナ", "안녕하세요", "漢字かな交じり文", "中文（繁體）測試"],
  cyrillic: ["Привет, мир!", "Съешь же ещё этих мягких французских булок", "ёЁ", "Україна", "Ђорђе"],
  other_scripts: ["Γειά σου Κόσμε", "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก", "Ողջույն", "ሰላም"],
  accents: ["café", "naïve", "résumé", "Ångström", "São Paulo", "Zürich", "façade", "e\u0301", "a\u0308o\u0308", "\u1e9b\u0323", "ﬁ ligature", "Ⅻ", "ｆｕｌｌｗｉｄｔｈ"],
  emoji: ["🤗", "😀😃😄", "👍🏽", "👨‍👩‍👧‍👦", "🇯🇵🇫🇷", "❤️", "🏳️‍🌈", "✨ sparkle ✨", "🧑‍💻 coding"],
  odd: ["\ufffd", "\\xff\\xfe", "<0xFF>", "<0x41><0x42>", "Ã©tÃ©", "\u200b", "\ufeff", "\u0085", "\u0301alone", "\ue000\uf8ff", "\u0000", "\u0007bell", "a\u200db", "\u2028\u2029", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "ſ", "İstanbul", "ß", "Ꙋ"],
};

function sentence(next) {
  const n = 3 + Math.floor(next() * 12);
  const words = [];
  for (let i = 0; i < n; i++) words.push(WORDS[Math.floor(next() * WORDS.length)]);
  let s = words.join(" ");
  if (next() < 0.5) s = s[0].toUpperCase() + s.slice(1);
  return s + [".", "!", "?", ",", ";", " .", "...", ""][Math.floor(next() * 8)];
}

function pick(next, list) {
  return list[Math.floor(next() * list.length)];
}

// At least 2000 strings; `specials` are the tokenizer's added tokens to embed in text.
export function build_corpus(specials, seed = 1) {
  const next = rng(seed);
  const corpus = ["", " ", "a", "Hello world", "Hello  world", " leading space", "trailing space ", "\n"];
  for (const list of Object.values(FRAGMENTS)) corpus.push(...list);
  for (let i = 0; i < 300; i++) corpus.push(sentence(next));
  for (let i = 0; i < 100; i++) corpus.push(pick(next, FRAGMENTS.code) + pick(next, FRAGMENTS.code));
  for (let i = 0; i < 150; i++) {
    let s = "";
    const n = 1 + Math.floor(next() * 6);
    for (let j = 0; j < n; j++) s += pick(next, FRAGMENTS.whitespace) + (next() < 0.5 ? pick(next, WORDS) : "");
    corpus.push(s);
  }
  for (let i = 0; i < 150; i++) {
    let s = "";
    const n = 1 + Math.floor(next() * 4);
    for (let j = 0; j < n; j++) s += pick(next, FRAGMENTS.digits) + pick(next, [" ", "", "-", ".", ", "]);
    corpus.push(s);
  }
  const scripts = ["cjk", "cyrillic", "other_scripts", "accents", "emoji", "odd"];
  for (let i = 0; i < 600; i++) {
    const kind = pick(next, scripts);
    let s = pick(next, FRAGMENTS[kind]);
    if (next() < 0.6) s = (next() < 0.5 ? sentence(next) + " " : "") + s + (next() < 0.5 ? " " + pick(next, FRAGMENTS[pick(next, scripts)]) : "");
    corpus.push(s);
  }
  const usable = specials.filter((t) => t.length > 0);
  for (let i = 0; i < 400 && usable.length > 0; i++) {
    const special = pick(next, usable);
    const forms = [
      () => special,
      () => sentence(next) + special + sentence(next),
      () => sentence(next) + " " + special + " " + sentence(next),
      () => special + special,
      () => special.slice(0, Math.max(1, special.length - 2)) + " " + sentence(next),
      () => "\n" + special + "\n" + pick(next, FRAGMENTS.cjk),
      () => pick(next, FRAGMENTS.whitespace) + special + pick(next, FRAGMENTS.whitespace),
    ];
    corpus.push(pick(next, forms)());
  }
  const all = Object.values(FRAGMENTS).flat();
  for (let i = 0; i < 400; i++) {
    let s = "";
    const n = 2 + Math.floor(next() * 8);
    for (let j = 0; j < n; j++) {
      const r = next();
      s += r < 0.4 ? pick(next, all) : r < 0.8 ? sentence(next) : usable.length > 0 && r < 0.85 ? pick(next, usable) : pick(next, FRAGMENTS.whitespace);
    }
    corpus.push(s);
  }
  // Long texts: whole paragraphs and a long run of one character.
  for (let i = 0; i < 20; i++) {
    let s = "";
    for (let j = 0; j < 40; j++) s += sentence(next) + (next() < 0.2 ? "\n\n" : " ");
    corpus.push(s);
  }
  corpus.push("a".repeat(3000), " ".repeat(500), "\n".repeat(100), "🤗".repeat(200), "1".repeat(1000));
  return corpus;
}
