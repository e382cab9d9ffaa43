// The page's languages: the current one, t() for a string, rich() for a
// string with live values, and josa() for the Korean particle after a word or
// a number (이/가, 을/를, 은/는, 으로/로, 과/와).
import en from "./strings.en.js";
import ko from "./strings.ko.js";

export const STRINGS = { en, ko };
let lang = "en";

export function currentLang() {
  return lang;
}

export function setLang(next) {
  lang = STRINGS[next] ? next : "en";
  return lang;
}

export function t(key) {
  return STRINGS[lang][key] ?? STRINGS.en[key] ?? key;
}

// Has the word a final consonant (받침) when read aloud in Korean, and is it ㄹ?
// Hangul by its last syllable; numbers by how their last non-zero digit (or
// the place of trailing zeros: 십, 백, 천, 만) is read; Latin words by their
// last letter as usually read in Korean (Tom → 톰, York → 욕, lives → 리브스).
const DIGIT = { 0: "ㅇ", 1: "ㄹ", 2: "", 3: "ㅁ", 4: "", 5: "", 6: "ㄱ", 7: "ㄹ", 8: "ㄹ", 9: "" };
const PLACE = ["", "ㅂ", "ㄱ", "ㄴ", "ㄴ"]; // 십, 백, 천, 만 (10^1 .. 10^4)
export function finalConsonant(word) {
  const s = String(word).trim().replace(/[)\]}”"'’%]+$/u, "");
  if (!s) return "";
  const last = s[s.length - 1];
  const code = last.codePointAt(0);
  if (code >= 0xac00 && code <= 0xd7a3) {
    const jong = (code - 0xac00) % 28;
    return jong === 0 ? "" : jong === 8 ? "ㄹ" : "ㅇ";
  }
  const num = /(\d+)(?:\.(\d+))?$/.exec(s);
  if (num && num.index + num[0].length === s.length) {
    if (num[2]) return DIGIT[num[2][num[2].length - 1]];
    const digits = num[1];
    if (/^0+$/.test(digits)) return DIGIT[0];
    const zeros = digits.length - digits.replace(/0+$/, "").length;
    if (zeros === 0) return DIGIT[digits[digits.length - 1]];
    return PLACE[Math.min(zeros, 4)] || "ㄴ";
  }
  const lower = s.toLowerCase();
  if (/[a-z]$/.test(lower)) {
    if (lower.endsWith("l")) return "ㄹ";
    if (/(ng|[mnkptbdgc])$/.test(lower)) return "ㅇ";
    return "";
  }
  return "";
}

const PAIRS = {
  이: ["이", "가"], 가: ["이", "가"],
  을: ["을", "를"], 를: ["을", "를"],
  은: ["은", "는"], 는: ["은", "는"],
  과: ["과", "와"], 와: ["과", "와"],
};
// The particle `p` (either form: "이" or "가", "으로" or "로", ...) as it fits after `word`.
export function josa(word, p) {
  const f = finalConsonant(word);
  if (p === "으로" || p === "로") return f && f !== "ㄹ" ? "으로" : "로";
  const pair = PAIRS[p];
  if (!pair) return p;
  return f ? pair[0] : pair[1];
}

// Korean lists join with 과/와 before the last item, English with "and".
export function joinNames(names) {
  if (names.length <= 1) return names.join("");
  const head = names.slice(0, -1);
  const last = names[names.length - 1];
  if (lang === "ko") {
    const before = head.join(", ");
    return `${before}${josa(head[head.length - 1], "과")} ${last}`;
  }
  return head.length === 1 ? `${head[0]} and ${last}` : `${head.join(", ")} and ${last}`;
}

// Text with "d_k"/"d_v" as subscripts, "`code`" as code and {name} (or
// {name:particle}) placeholders replaced by vars[name] (a string, number or
// Node), in bold, followed by the particle that fits.
export function rich(text, vars = {}) {
  const frag = document.createDocumentFragment();
  for (const part of text.split(/(\{\w+(?::[^}]+)?\}|d_k|d_v|‖_F|`[^`]+`)/)) {
    if (!part) continue;
    const m = /^\{(\w+)(?::([^}]+))?\}$/.exec(part);
    if (m) {
      const v = vars[m[1]];
      const b = document.createElement("b");
      b.className = "v";
      if (v instanceof Node) b.append(v);
      else b.append(rich(String(v ?? "")));
      frag.append(b);
      if (m[2]) frag.append(josa(v instanceof Node ? v.textContent : String(v ?? ""), m[2]));
    } else if (part === "d_k" || part === "d_v") {
      const sub = document.createElement("sub");
      sub.textContent = part[2];
      frag.append("d", sub);
    } else if (part === "‖_F") {
      const sub = document.createElement("sub");
      sub.textContent = "F";
      frag.append("‖", sub);
    } else if (part.startsWith("`")) {
      const code = document.createElement("code");
      code.textContent = part.slice(1, -1);
      frag.append(code);
    } else {
      frag.append(part);
    }
  }
  return frag;
}

export function tr(key, vars) {
  return rich(t(key), vars);
}

// A string's plain text with its placeholders filled (for titles and aria labels).
export function plain(key, vars = {}) {
  return t(key)
    .replace(/\{(\w+)(?::([^}]+))?\}/g, (_, name, p) => {
      const v = String(vars[name] ?? "");
      return p ? v + josa(v, p) : v;
    })
    .replace(/d_k/g, "dₖ")
    .replace(/d_v/g, "dᵥ");
}
