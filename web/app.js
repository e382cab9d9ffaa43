// sdpa explorer: the page's logic. Every number shown comes from the JSON API
// (/api/...), which the sdpa C++ library backs; this file only asks, formats
// and draws (plain DOM and inline SVG, no libraries).
"use strict";

(() => {
  // ------------------------------------------------------------------ text

  const I18N = {
    en: {
      "doc.title": "Why divide by √d_k? · sdpa explorer",
      "nav.scaling": "Scaling",
      "nav.story": "Tom · New York · lives",
      "nav.growth": "Why it grows",
      "nav.map": "Attention map",
      "nav.myths": "Misunderstandings",
      title: "Why are attention scores divided by √d_k?",
      intro:
        "Scaled dot-product attention scores a query against every key with a dot product, divides the scores by √d_k, and turns them into weights with a softmax. This page shows what that division does. Every number on it is computed by the sdpa C++ library.",
      "term.raw_score": "Raw score q·k",
      "term.dk": "Key dimension d_k",
      "term.seed": "Random seed",

      "s1.title": "Scaling a score",
      "s1.lead":
        "Pick a raw score q·k and the key dimension d_k (the length of each query and key vector). The scaled score is the raw score divided by √d_k.",
      "s1.presets": "Common d_k:",
      "s1.caption_exact": "√{dk} = {sqrt} exactly, so the scale factor 1/√d_k is {scale}. It depends on d_k only.",
      "s1.caption_approx": "√{dk} ≈ {sqrt}, so the scale factor 1/√d_k ≈ {scale}. It depends on d_k only.",

      "s2.title": "Tom, New York, lives: softmax before and after",
      "s2.lead":
        "A query word is compared with three keys. Edit their raw scores and d_k; the softmax turns the scores into attention weights that sum to 1.",
      "s2.key": "Key",
      "s2.scaled": "Scaled (÷ √d_k)",
      "s2.before": "Before scaling: softmax(q·k)",
      "s2.after": "After scaling: softmax(q·k / √d_k)",
      "s2.same": "Same order of importance before and after scaling: {order}",
      "s2.differs": "The order differs: {before} before, {after} after scaling",
      "s2.summary":
        "Without scaling, {top} takes {p_raw} of the weight and the others almost nothing. Divided by √{dk} = {sqrt}, the scores become {scaled}: {top} still leads with {p_scaled}, and the other keys keep {rest} between them.",

      "s3.title": "Why the scores grow with d_k",
      "s3.lead":
        "Draw q and k with independent N(0, 1) entries. Their dot product is a sum of d_k products of variance 1, so its variance is d_k and its standard deviation √d_k. Dividing by √d_k brings the spread back to 1 for every d_k.",
      "s3.without": "without scaling",
      "s3.with": "with scaling",
      "s3.hist": "Histogram of the scores (one shared x axis)",
      "s3.jacobian":
        "The softmax's Jacobian is diag(p) − p·pᵀ. When one weight approaches 1 (saturation), every entry approaches 0: the gradient vanishes and the weights before the softmax stop learning.",
      "s3.curves": "Against d_k (log scale); the dots mark the slider's d_k",
      "s3.legend_raw": "without scaling: softmax(q·k)",
      "s3.legend_scaled": "with scaling: softmax(q·k / √d_k)",
      "s3.setup": "{trials} queries × {keys} keys = {samples} scores; one softmax over each query's {keys} keys.",
      "s3.row_std": "Std of the scores (√d_k = {sqrt})",
      "s3.row_max": "Largest softmax weight",
      "s3.row_entropy": "Entropy, nats (uniform: {max})",
      "s3.row_grad": "Gradient size ‖diag(p) − p·pᵀ‖_F",
      "s3.hist_raw": "raw q·k · std {std}",
      "s3.hist_scaled": "scaled q·k / √d_k · std {std}",
      "s3.c_std": "Std of the scores",
      "s3.c_max": "Largest softmax weight",
      "s3.c_entropy": "Entropy (nats)",
      "s3.c_grad": "Gradient size",
      "s3.axis": "d_k (log scale)",

      "s4.title": "A real attention map",
      "s4.lead":
        "Each token gets a query, a key and a value vector, random (seeded) or typed in. The sdpa library computes the attention twice: with its default scale 1/√d and with scale 1 (no scaling). Each row is one query token's softmax over the keys and sums to 1.",
      "s4.tokens": "Tokens (comma-separated)",
      "s4.source": "Q, K, V",
      "s4.random": "random",
      "s4.entered": "entered",
      "s4.causal": "causal mask (a token sees itself and earlier tokens)",
      "s4.d": "Head size d (= d_k)",
      "s4.dv": "Value size d_v",
      "s4.entered_help": "One row per token, numbers separated by spaces. Q and K rows have d numbers, V rows d_v numbers.",
      "s4.fill": "Start from the random vectors",
      "s4.outputs": "Output vectors O = P·V",
      "s4.cap_unscaled": "Without scaling (scale = 1)",
      "s4.cap_scaled": "With scaling (scale = 1/√{d} = {scale})",
      "s4.note":
        "Rows are queries, columns keys; Σ is each row's sum of the library's probabilities. Mean row entropy: {e_raw} nats without scaling, {e_scaled} with scaling ({isa} kernels).",
      "s4.cell": "query “{q}” → key “{k}”: q·k = {s}, weight {p}",
      "s4.out_token": "Token",
      "s4.out_scaled": "O with scaling",
      "s4.out_raw": "O without scaling",

      "s5.title": "Common misunderstandings, checked live",
      "s5.lead": "Each claim below is tested against the library with the scores and d_k of section 2.",
      "s5.false": "FALSE",
      "m1.claim": "“Scaling changes which word wins.”",
      "m1.a": "Ranks before scaling: {before}. After: {after}.",
      "m1.b":
        "Over {trials} random score vectors the order changed {changed} times and the winner {winner} times: dividing every score by the same positive number keeps their order, and the softmax preserves order.",
      "m2.claim": "“√d_k is a weight the model learns.”",
      "m2.a":
        "For d_k = {dk} the scale is 1/√{dk} = {scale}. Read back from the library's own output for two unrelated random inputs: {r1} and {r2}.",
      "m2.b": "It is fixed by the shape alone; trainable parameters involved: {params}.",
      "m1.col_before": "rank before",
      "m1.col_after": "rank after",
      "m2.col_scale": "scale 1/√d_k",
      "m3.claim": "“With a large d_k, attention is fine without scaling.”",
      "m3.a":
        "At d_k = {dk} the unscaled softmax saturates: one key takes {max_raw} of the weight on average and the gradient shrinks to {grad_raw} (with scaling: {grad_scaled}).",
      "m3.col_small": "d_k = {dk}",
      "m3.row_max": "largest weight",
      "m3.row_entropy": "entropy (nats)",
      "m3.row_grad": "gradient size",
      "m4.claim": "“Scaling makes every word equally important.”",
      "m4.a":
        "After scaling, {top} still gets {p_scaled} of the weight; a uniform softmax would give each key {uniform}. Scaling softens the softmax; it does not flatten it.",

      "m4.col_raw": "weight before",
      "m4.col_scaled": "weight after",
      "m4.col_uniform": "uniform",

      "gl.title": "Terms in both languages",
      "gl.meaning": "Meaning here",
      footer:
        "Every number on this page is computed by the sdpa C++ library ({isa} kernels) and served by `sdpa serve` through its JSON API under /api.",
      "err.request": "{endpoint}: {message}",
    },
    ko: {
      "doc.title": "왜 √d_k로 나눌까? · sdpa explorer",
      "nav.scaling": "스케일링",
      "nav.story": "Tom · New York · lives",
      "nav.growth": "왜 커질까",
      "nav.map": "어텐션 맵",
      "nav.myths": "흔한 오해",
      title: "어텐션 점수는 왜 √d_k로 나눌까?",
      intro:
        "스케일드 닷-프로덕트 어텐션(scaled dot-product attention)은 쿼리(query)를 모든 키(key)와 내적(dot product)으로 비교해 점수를 매기고, 그 점수를 √d_k로 나눈 뒤 소프트맥스(softmax)로 가중치를 만듭니다. 이 페이지는 그 나눗셈이 하는 일을 보여 줍니다. 화면의 모든 숫자는 sdpa C++ 라이브러리가 계산합니다.",
      "term.raw_score": "원점수 q·k (raw score)",
      "term.dk": "키 차원 d_k (key dimension)",
      "term.seed": "난수 시드 (seed)",

      "s1.title": "점수 스케일링 (scaling)",
      "s1.lead":
        "원점수 q·k와 키 차원 d_k(쿼리·키 벡터의 길이)를 골라 보세요. 스케일된 점수(scaled score)는 원점수를 √d_k로 나눈 값입니다.",
      "s1.presets": "자주 쓰는 d_k:",
      "s1.caption_exact": "√{dk} = {sqrt}로 딱 떨어지므로 스케일 계수 1/√d_k는 {scale}입니다. 이 값은 d_k만으로 정해집니다.",
      "s1.caption_approx": "√{dk} ≈ {sqrt}이므로 스케일 계수 1/√d_k ≈ {scale}입니다. 이 값은 d_k만으로 정해집니다.",

      "s2.title": "Tom, New York, lives: 스케일링 전후의 소프트맥스",
      "s2.lead":
        "쿼리 단어 하나를 세 개의 키와 비교합니다. 원점수와 d_k를 바꿔 보세요. 소프트맥스는 점수를 합이 1인 어텐션 가중치(attention weight)로 바꿉니다.",
      "s2.key": "키 (key)",
      "s2.scaled": "스케일된 점수 (÷ √d_k)",
      "s2.before": "스케일링 전: softmax(q·k)",
      "s2.after": "스케일링 후: softmax(q·k / √d_k)",
      "s2.same": "스케일링 전후의 중요도 순서가 같습니다: {order}",
      "s2.differs": "순서가 다릅니다: 스케일링 전 {before}, 후 {after}",
      "s2.summary":
        "스케일링하지 않으면 {top}이(가) 가중치의 {p_raw}를 가져가고 나머지는 거의 0입니다. √{dk} = {sqrt}로 나누면 점수는 {scaled}가 되고, {top}은(는) 여전히 {p_scaled}로 1위지만 나머지 키들도 합쳐서 {rest}를 받습니다.",

      "s3.title": "d_k가 커지면 점수는 왜 커질까",
      "s3.lead":
        "q와 k의 각 성분을 서로 독립인 N(0, 1)에서 뽑습니다. 내적은 분산이 1인 곱 d_k개의 합이므로 분산(variance)은 d_k, 표준편차(standard deviation)는 √d_k입니다. √d_k로 나누면 d_k가 얼마든 퍼짐이 다시 1이 됩니다.",
      "s3.without": "스케일링 없음",
      "s3.with": "스케일링 있음",
      "s3.hist": "점수의 히스토그램 (같은 x축)",
      "s3.jacobian":
        "소프트맥스의 야코비안(Jacobian)은 diag(p) − p·pᵀ입니다. 가중치 하나가 1에 가까워지면(포화, saturation) 모든 성분이 0에 가까워집니다. 기울기(gradient)가 사라져 소프트맥스 앞의 가중치가 더 이상 학습되지 않습니다.",
      "s3.curves": "d_k에 따른 변화 (로그 축); 점은 슬라이더의 d_k",
      "s3.legend_raw": "스케일링 없음: softmax(q·k)",
      "s3.legend_scaled": "스케일링 있음: softmax(q·k / √d_k)",
      "s3.setup": "쿼리 {trials}개 × 키 {keys}개 = 점수 {samples}개; 쿼리마다 키 {keys}개에 대해 소프트맥스를 한 번 계산합니다.",
      "s3.row_std": "점수의 표준편차 (√d_k = {sqrt})",
      "s3.row_max": "가장 큰 소프트맥스 가중치",
      "s3.row_entropy": "엔트로피, nat (균등 분포: {max})",
      "s3.row_grad": "기울기 크기 ‖diag(p) − p·pᵀ‖_F",
      "s3.hist_raw": "원점수 q·k · 표준편차 {std}",
      "s3.hist_scaled": "스케일된 점수 q·k / √d_k · 표준편차 {std}",
      "s3.c_std": "점수의 표준편차",
      "s3.c_max": "가장 큰 가중치",
      "s3.c_entropy": "엔트로피 (nat)",
      "s3.c_grad": "기울기 크기",
      "s3.axis": "d_k (로그 축)",

      "s4.title": "실제 어텐션 맵",
      "s4.lead":
        "각 토큰은 쿼리, 키, 밸류(value) 벡터를 하나씩 가집니다. 시드로 만든 난수이거나 직접 입력한 값입니다. sdpa 라이브러리가 어텐션을 두 번 계산합니다: 기본 스케일 1/√d로 한 번, 스케일 1(스케일링 없음)로 한 번. 각 행은 쿼리 토큰 하나의 키들에 대한 소프트맥스이며 합이 1입니다.",
      "s4.tokens": "토큰 (쉼표로 구분)",
      "s4.source": "Q, K, V",
      "s4.random": "난수",
      "s4.entered": "직접 입력",
      "s4.causal": "인과 마스크 (causal mask: 각 토큰은 자신과 앞선 토큰만 봄)",
      "s4.d": "헤드 크기 d (= d_k)",
      "s4.dv": "밸류 크기 d_v",
      "s4.entered_help": "토큰마다 한 줄, 숫자는 공백으로 구분합니다. Q와 K의 각 줄에는 d개, V의 각 줄에는 d_v개의 숫자가 들어갑니다.",
      "s4.fill": "난수 벡터에서 시작하기",
      "s4.outputs": "출력 벡터 O = P·V",
      "s4.cap_unscaled": "스케일링 없음 (scale = 1)",
      "s4.cap_scaled": "스케일링 있음 (scale = 1/√{d} = {scale})",
      "s4.note":
        "행은 쿼리, 열은 키입니다. Σ는 라이브러리가 낸 확률의 행 합입니다. 행 평균 엔트로피: 스케일링 없음 {e_raw} nat, 스케일링 있음 {e_scaled} nat ({isa} 커널).",
      "s4.cell": "쿼리 “{q}” → 키 “{k}”: q·k = {s}, 가중치 {p}",
      "s4.out_token": "토큰",
      "s4.out_scaled": "O (스케일링 있음)",
      "s4.out_raw": "O (스케일링 없음)",

      "s5.title": "흔한 오해, 실시간으로 확인하기",
      "s5.lead": "아래 주장들을 2번 항목의 점수와 d_k로 라이브러리에 직접 계산시켜 확인합니다.",
      "s5.false": "사실 아님",
      "m1.claim": "“스케일링하면 가장 중요한 단어가 바뀐다.”",
      "m1.a": "스케일링 전 순위: {before}. 스케일링 후: {after}.",
      "m1.b":
        "무작위 점수 벡터 {trials}개에서 순서가 바뀐 경우는 {changed}번, 1위가 바뀐 경우는 {winner}번입니다. 모든 점수를 같은 양수로 나누면 순서가 유지되고, 소프트맥스도 순서를 보존합니다.",
      "m2.claim": "“√d_k는 모델이 학습하는 가중치다.”",
      "m2.a":
        "d_k = {dk}이면 스케일은 1/√{dk} = {scale}입니다. 서로 무관한 두 무작위 입력에 대해 라이브러리의 출력에서 거꾸로 구한 값: {r1}, {r2}.",
      "m2.b": "벡터의 차원만으로 정해지는 상수이며, 관련된 학습 파라미터는 {params}개입니다.",
      "m1.col_before": "스케일링 전 순위",
      "m1.col_after": "스케일링 후 순위",
      "m2.col_scale": "스케일 1/√d_k",
      "m3.claim": "“d_k가 커도 스케일링 없이 괜찮다.”",
      "m3.a":
        "d_k = {dk}에서 스케일링하지 않은 소프트맥스는 포화됩니다. 평균적으로 키 하나가 가중치의 {max_raw}를 가져가고 기울기는 {grad_raw}로 줄어듭니다 (스케일링하면 {grad_scaled}).",
      "m3.col_small": "d_k = {dk}",
      "m3.row_max": "가장 큰 가중치",
      "m3.row_entropy": "엔트로피 (nat)",
      "m3.row_grad": "기울기 크기",
      "m4.claim": "“스케일링하면 모든 단어가 똑같이 중요해진다.”",
      "m4.a":
        "스케일링 후에도 {top}은(는) 가중치의 {p_scaled}를 받습니다. 균등하다면 키마다 {uniform}일 것입니다. 스케일링은 소프트맥스를 부드럽게 할 뿐, 평평하게 만들지는 않습니다.",

      "m4.col_raw": "스케일링 전 가중치",
      "m4.col_scaled": "스케일링 후 가중치",
      "m4.col_uniform": "균등",

      "gl.title": "용어 (영어 · 한국어)",
      "gl.meaning": "이 페이지에서의 뜻",
      footer:
        "이 페이지의 모든 숫자는 sdpa C++ 라이브러리({isa} 커널)가 계산하고, `sdpa serve`가 /api 아래의 JSON API로 제공합니다.",
      "err.request": "{endpoint}: {message}",
    },
  };

  // English, Korean, meaning (en), meaning (ko).
  const GLOSSARY = [
    ["query", "쿼리 (질의)", "the vector of the word that is looking", "찾는 쪽 단어의 벡터"],
    ["key", "키", "the vector every word is matched on", "각 단어가 비교되는 벡터"],
    ["value", "밸류 (값)", "the vector a word contributes to the output", "출력에 더해지는 단어의 벡터"],
    ["dot product q·k", "내적 q·k", "the raw attention score", "어텐션 원점수"],
    ["key dimension d_k", "키 차원 d_k", "the length of the query and key vectors", "쿼리·키 벡터의 길이"],
    ["scaling", "스케일링", "dividing the scores by √d_k", "점수를 √d_k로 나누기"],
    ["softmax", "소프트맥스", "turns scores into weights that sum to 1", "점수를 합이 1인 가중치로 바꿈"],
    ["attention weight", "어텐션 가중치", "one entry of the softmax", "소프트맥스 결과의 한 성분"],
    ["standard deviation", "표준편차", "how widely the scores spread", "점수가 퍼진 정도"],
    ["entropy", "엔트로피", "how evenly the weights spread (0: all on one key)", "가중치가 고르게 퍼진 정도 (0: 한 키에 몰림)"],
    ["saturation", "포화", "one weight ≈ 1, all others ≈ 0", "가중치 하나 ≈ 1, 나머지 ≈ 0"],
    ["gradient", "기울기 (그래디언트)", "how much the weights move when the scores move", "점수가 변할 때 가중치가 변하는 정도"],
    ["causal mask", "인과 마스크", "hides later tokens from each query", "각 쿼리에게 뒤쪽 토큰을 가림"],
    ["learned parameter", "학습 파라미터", "a number training adjusts (√d_k is not one)", "학습으로 조정되는 값 (√d_k는 아님)"],
  ];

  let lang = "en";

  function t(key) {
    return (I18N[lang] && I18N[lang][key]) ?? I18N.en[key] ?? key;
  }

  // Text with "d_k"/"d_v" as subscripts, "`code`" as code and {name}
  // placeholders replaced by vars[name] (a string, number or Node), in bold.
  function rich(text, vars = {}) {
    const frag = document.createDocumentFragment();
    for (const part of text.split(/(\{\w+\}|d_k|d_v|‖_F|`[^`]+`)/)) {
      if (!part) continue;
      const m = /^\{(\w+)\}$/.exec(part);
      if (m) {
        const v = vars[m[1]];
        const b = document.createElement("b");
        b.className = "v";
        if (v instanceof Node) b.append(v);
        else b.append(rich(String(v ?? "")));
        frag.append(b);
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

  function tr(key, vars) {
    return rich(t(key), vars);
  }

  // ------------------------------------------------------------------ formatting (display only)

  const SUPERSCRIPT = { "-": "⁻", 0: "⁰", 1: "¹", 2: "²", 3: "³", 4: "⁴", 5: "⁵", 6: "⁶", 7: "⁷", 8: "⁸", 9: "⁹" };

  function trim(s) {
    return s.includes(".") ? s.replace(/0+$/, "").replace(/\.$/, "") : s;
  }

  // Up to `digits` decimals, trailing zeros dropped.
  function num(x, digits = 3) {
    if (x === null || x === undefined || Number.isNaN(x)) return "–";
    if (Number.isInteger(x)) return String(x);
    const s = trim(x.toFixed(digits));
    return s === "-0" ? "0" : s;
  }

  // Fixed decimals (for columns of numbers).
  function fixed(x, digits = 3) {
    return x === null || x === undefined ? "–" : x.toFixed(digits);
  }

  function sci(x, digits = 1) {
    const [mant, exp] = x.toExponential(digits).split("e");
    const e = String(Number(exp)).split("").map((c) => SUPERSCRIPT[c]).join("");
    return `${trim(mant)}×10${e}`;
  }

  // A probability as a percentage; tiny ones in scientific notation.
  function pct(p) {
    if (p === 0) return "0%";
    const v = p * 100;
    if (v >= 0.05) {
      const text = trim(v.toFixed(1));
      return text === "100" && p < 1 ? "≈100%" : `${text}%`;
    }
    return `${sci(v)}%`;
  }

  // ------------------------------------------------------------------ DOM helpers

  const $ = (sel, root = document) => root.querySelector(sel);
  const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));

  function h(tag, props = {}, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(props)) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") el.className = v;
      else if (k === "dataset") Object.assign(el.dataset, v);
      else if (k === "text") el.textContent = v;
      else el.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children.flat()) if (c !== null && c !== undefined) el.append(c);
    return el;
  }

  const SVG_NS = "http://www.w3.org/2000/svg";
  function s(tag, attrs = {}, ...children) {
    const el = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) el.setAttribute(k, v);
    for (const c of children.flat()) if (c !== null && c !== undefined) el.append(c);
    return el;
  }

  // Tick positions for an axis (display only).
  function niceTicks(lo, hi, count) {
    const span = hi - lo;
    if (!(span > 0)) return [lo];
    const raw = span / count;
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((st) => st >= raw) || raw;
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
    return out;
  }

  // ------------------------------------------------------------------ API

  class ApiError extends Error {
    constructor(endpoint, status, message, field) {
      super(message);
      this.endpoint = endpoint;
      this.status = status;
      this.field = field;
    }
  }

  async function api(endpoint, body) {
    const init = body === undefined ? {} : {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    };
    // A busy server answers 503 with Retry-After: wait and ask again, a few times.
    let res = await fetch(`api/${endpoint}`, init);
    for (let tries = 0; res.status === 503 && tries < 3; ++tries) {
      const wait = Math.min(Math.max(Number(res.headers.get("Retry-After")) || 1, 1), 5);
      await new Promise((resolve) => setTimeout(resolve, wait * 1000));
      res = await fetch(`api/${endpoint}`, init);
    }
    let data = null;
    try {
      data = await res.json();
    } catch (e) {
      throw new ApiError(endpoint, res.status, `HTTP ${res.status}`, null);
    }
    if (!res.ok) throw new ApiError(endpoint, res.status, data.error || `HTTP ${res.status}`, data.field);
    return data;
  }

  // Runs `fn` now, or once more after the run in progress: the newest inputs always win.
  function updater(fn) {
    let current = null;
    let again = false;
    const loop = async () => {
      do {
        again = false;
        await fn();
      } while (again);
      current = null;
    };
    return () => {
      if (current) {
        again = true;
        return current;
      }
      current = loop();
      return current;
    };
  }

  // Shows (or clears) a section's error and marks the inputs of the offending field.
  function report(box, fields, err) {
    for (const el of Object.values(fields).flat()) el.classList.remove("invalid");
    if (!err) {
      box.hidden = true;
      box.textContent = "";
      return;
    }
    box.hidden = false;
    box.replaceChildren(tr("err.request", { endpoint: `/api/${err.endpoint}`, message: err.message }));
    const marked = fields[err.field];
    if (marked) for (const el of [marked].flat()) el.classList.add("invalid");
    if (!(err instanceof ApiError)) console.error(err);
  }

  // A number input's value, or its raw text when it is not a number (the API then names the field).
  function numberOf(input) {
    const v = input.valueAsNumber;
    return Number.isFinite(v) ? v : input.value;
  }

  const state = { info: null };

  // ------------------------------------------------------------------ 1. scaling

  const s1 = {
    score: $("#score"),
    dk: $("#dk"),
    scoreOut: $("#score-out"),
    dkOut: $("#dk-out"),
    error: $("#s1-error"),
    res: null,
  };

  const updateScale = updater(async () => {
    try {
      s1.res = await api("scale", { score: numberOf(s1.score), dk: numberOf(s1.dk) });
      report(s1.error, { score: s1.score, dk: s1.dk });
      renderScale();
    } catch (err) {
      report(s1.error, { score: s1.score, dk: s1.dk }, err);
    }
  });

  function renderScale() {
    const r = s1.res;
    if (!r) return;
    const sqrtText = num(r.sqrt_dk, 3);
    const scaledText = num(r.scaled, 3);
    $("#eq-score").textContent = num(r.score);
    $("#eq-score2").textContent = num(r.score);
    $("#eq-dk").textContent = String(r.dk);
    $("#eq-sqrt").textContent = sqrtText;
    $("#eq-rel1").textContent = "=";
    $("#eq-rel2").textContent = Number(sqrtText) === r.sqrt_dk && Number(scaledText) === r.scaled ? "=" : "≈";
    const out = $("#scaled-value");
    out.textContent = scaledText;
    out.dataset.value = String(r.scaled);
    out.dataset.dk = String(r.dk);
    out.dataset.score = String(r.score);
    $("#eq-caption").replaceChildren(
      tr(r.sqrt_is_integer ? "s1.caption_exact" : "s1.caption_approx", {
        dk: r.dk,
        sqrt: sqrtText,
        scale: num(r.scale, 5),
      }),
    );
  }

  s1.score.addEventListener("input", () => {
    s1.scoreOut.textContent = s1.score.value;
    updateScale();
  });
  s1.dk.addEventListener("input", () => {
    s1.dkOut.textContent = s1.dk.value;
    updateScale();
  });
  for (const chip of $$(".presets .chip")) {
    chip.addEventListener("click", () => {
      s1.dk.value = chip.dataset.dk;
      s1.dk.dispatchEvent(new Event("input"));
    });
  }

  // ------------------------------------------------------------------ 2. story

  const s2 = {
    rows: $("#story-rows"),
    dk: $("#story-dk"),
    error: $("#s2-error"),
    labels: [],
    scores: [],
    scaledCells: [],
    res: null,
  };

  function buildStoryRows(labels, scores) {
    s2.rows.replaceChildren();
    s2.labels = [];
    s2.scores = [];
    s2.scaledCells = [];
    labels.forEach((label, i) => {
      const l = h("input", { type: "text", value: label, maxlength: "32", "aria-label": `key ${i + 1}`, spellcheck: "false" });
      const sc = h("input", { type: "number", value: String(scores[i]), step: "any", "aria-label": `score ${i + 1}` });
      const cell = h("td", { class: "scaled-cell" });
      for (const el of [l, sc]) el.addEventListener("input", storyChanged);
      s2.labels.push(l);
      s2.scores.push(sc);
      s2.scaledCells.push(cell);
      s2.rows.append(h("tr", {}, h("td", {}, l), h("td", {}, sc), cell));
    });
  }

  function storyRequest() {
    return {
      labels: s2.labels.map((el) => el.value),
      scores: s2.scores.map(numberOf),
      dk: numberOf(s2.dk),
    };
  }

  const storyFields = () => ({ labels: s2.labels, scores: s2.scores, dk: s2.dk });

  const updateStory = updater(async () => {
    try {
      s2.res = await api("softmax", storyRequest());
      report(s2.error, storyFields());
      renderStory();
    } catch (err) {
      report(s2.error, storyFields(), err);
    }
  });

  function storyChanged() {
    updateStory();
    updateMyths();
  }
  s2.dk.addEventListener("input", storyChanged);

  function orderText(labels, ranks) {
    return labels
      .map((label, i) => [ranks[i], i, label])
      .sort((a, b) => a[0] - b[0] || a[1] - b[1])
      .map(([rank, , label], k, all) => (k === 0 ? label : `${all[k - 1][0] === rank ? "=" : ">"} ${label}`))
      .join(" ");
  }

  function renderBars(host, labels, stats, cls) {
    host.replaceChildren(
      ...labels.map((label, i) => {
        const fill = h("div", { class: "bar-fill" });
        fill.style.width = `${Math.max(0, Math.min(1, stats.probs[i])) * 100}%`;
        return h(
          "div",
          { class: `bar-row ${cls}`, dataset: { p: String(stats.probs[i]), rank: String(stats.ranks[i]) } },
          h("span", { class: "rank", text: `#${stats.ranks[i]}` }),
          h("span", { class: "bar-label", text: label, title: label }),
          h("div", { class: "bar-track" }, fill),
          h("span", { class: "bar-value", text: pct(stats.probs[i]), title: String(stats.probs[i]) }),
        );
      }),
    );
  }

  function renderStory() {
    const r = s2.res;
    if (!r) return;
    r.scaled_scores.forEach((x, i) => {
      if (s2.scaledCells[i]) s2.scaledCells[i].textContent = num(x, 3);
    });
    renderBars($("#bars-raw"), r.labels, r.raw, "raw");
    renderBars($("#bars-scaled"), r.labels, r.scaled, "scaled");
    const verdict = $("#story-verdict");
    verdict.classList.toggle("bad", !r.same_order);
    verdict.dataset.same = String(r.same_order);
    verdict.replaceChildren(
      h("span", { text: r.same_order ? "✓" : "✗" }),
      r.same_order
        ? h("span", {}, tr("s2.same", { order: orderText(r.labels, r.raw.ranks) }))
        : h("span", {}, tr("s2.differs", { before: orderText(r.labels, r.raw.ranks), after: orderText(r.labels, r.scaled.ranks) })),
    );
    const top = r.raw.ranks.indexOf(1);
    $("#story-summary").replaceChildren(
      tr("s2.summary", {
        top: r.labels[top],
        p_raw: pct(r.raw.probs[top]),
        dk: r.dk,
        sqrt: num(r.sqrt_dk, 3),
        scaled: r.scaled_scores.map((x) => num(x, 3)).join(", "),
        p_scaled: pct(r.scaled.probs[top]),
        rest: pct(r.scaled.probs.filter((_, i) => i !== top).reduce((a, b) => a + b, 0)),
      }),
    );
  }

  // ------------------------------------------------------------------ 3. growth

  const s3 = {
    dk: $("#g-dk"),
    dkOut: $("#g-dk-out"),
    seed: $("#g-seed"),
    error: $("#s3-error"),
    res: null,
    curve: null,
    curveSeed: null,
  };

  const updateGrowth = updater(async () => {
    const fields = { dk: s3.dk, seed: s3.seed };
    try {
      const seed = numberOf(s3.seed);
      const [res, curve] = await Promise.all([
        api("growth", { dk: numberOf(s3.dk), seed }),
        s3.curve && s3.curveSeed === seed ? Promise.resolve(s3.curve) : api("curve", { seed }),
      ]);
      s3.res = res;
      s3.curve = curve;
      s3.curveSeed = seed;
      report(s3.error, fields);
      renderGrowth();
    } catch (err) {
      report(s3.error, fields, err);
    }
  });

  s3.dk.addEventListener("input", () => {
    s3.dkOut.textContent = s3.dk.value;
    updateGrowth();
  });
  s3.seed.addEventListener("input", updateGrowth);

  function renderGrowth() {
    const r = s3.res;
    if (!r) return;
    $("#g-setup").replaceChildren(tr("s3.setup", { trials: r.trials, keys: r.keys, samples: r.histogram.samples }));
    const cols = [
      [tr("s3.row_std", { sqrt: num(r.sqrt_dk, 2) }), (x) => x.std, 2],
      [tr("s3.row_max"), (x) => x.max_weight, 3],
      [tr("s3.row_entropy", { max: num(r.max_entropy, 2) }), (x) => x.entropy, 3],
      [tr("s3.row_grad"), (x) => x.grad_norm, 3],
    ];
    const sides = [
      ["raw", t("s3.without"), { std: r.std_raw, ...r.raw }],
      ["scaled", t("s3.with"), { std: r.std_scaled, ...r.scaled }],
    ];
    $("#g-stats").replaceChildren(
      h("thead", {}, h("tr", {}, h("th"), cols.map(([label]) => h("th", {}, label)))),
      h(
        "tbody",
        {},
        sides.map(([cls, name, x]) => h("tr", { class: cls }, h("td", { text: name }), cols.map(([, f, d]) => h("td", { text: fixed(f(x), d) })))),
      ),
    );
    drawHistogram($("#histogram"), r);
    drawCurves($("#curves"), s3.curve, r);
  }

  // Raw scores above the axis, scaled ones below it, on one shared x axis;
  // each half is normalised to its own tallest bin.
  function drawHistogram(host, r) {
    const W = 640, H = 300, L = 16, R = 16, mid = 150, half = 112;
    const hist = r.histogram;
    const x = (v) => L + ((v - hist.lo) / (hist.hi - hist.lo)) * (W - L - R);
    const bw = (W - L - R) / hist.bins;
    const maxRaw = Math.max(1, ...hist.raw);
    const maxScaled = Math.max(1, ...hist.scaled);
    const g = s("g");
    for (const v of niceTicks(hist.lo, hist.hi, 8)) {
      g.append(
        s("line", { x1: x(v), x2: x(v), y1: 26, y2: H - 26, stroke: "#eef0f3" }),
        s("text", { x: x(v), y: H - 8, "text-anchor": "middle", "font-size": 12, fill: "#7a828c" }, num(v, 1)),
      );
    }
    hist.raw.forEach((c, i) => {
      const hgt = (c / maxRaw) * half;
      g.append(s("rect", { x: L + i * bw + 0.5, y: mid - hgt, width: Math.max(bw - 1, 0.5), height: hgt, fill: "#d9480f", "fill-opacity": 0.85 }));
    });
    hist.scaled.forEach((c, i) => {
      const hgt = (c / maxScaled) * half;
      g.append(s("rect", { x: L + i * bw + 0.5, y: mid, width: Math.max(bw - 1, 0.5), height: hgt, fill: "#1c6bb8", "fill-opacity": 0.85 }));
    });
    for (const sd of [-r.std_raw, r.std_raw]) {
      g.append(s("line", { x1: x(sd), x2: x(sd), y1: mid - half - 6, y2: mid, stroke: "#9c3309", "stroke-dasharray": "4 3" }));
    }
    for (const sd of [-r.std_scaled, r.std_scaled]) {
      g.append(s("line", { x1: x(sd), x2: x(sd), y1: mid, y2: mid + half + 6, stroke: "#124a80", "stroke-dasharray": "4 3" }));
    }
    g.append(s("line", { x1: L, x2: W - R, y1: mid, y2: mid, stroke: "#9aa1a9" }));
    const label = (y, color, key, std) =>
      s("text", { x: L + 4, y, "font-size": 13, fill: color, "font-weight": 600 }, t(key).replace("{std}", num(std, 2)).replace("d_k", "dₖ"));
    g.append(label(18, "#b23c0c", "s3.hist_raw", r.std_raw), label(H - 30, "#155a9c", "s3.hist_scaled", r.std_scaled));
    host.replaceChildren(s("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": t("s3.hist") }, g));
  }

  function drawCurves(host, curve, cur) {
    if (!curve) return;
    const pts = curve.points;
    const panels = [
      ["s3.c_std", (p) => p.std_raw, (p) => p.std_scaled, null, null],
      ["s3.c_max", (p) => p.raw.max_weight, (p) => p.scaled.max_weight, 1, null],
      ["s3.c_entropy", (p) => p.raw.entropy, (p) => p.scaled.entropy, null, curve.max_entropy],
      ["s3.c_grad", (p) => p.raw.grad_norm, (p) => p.scaled.grad_norm, null, null],
    ];
    const W = 260, H = 190, L = 38, R = 18, T = 12, B = 34;
    const lx0 = Math.log2(pts[0].dk), lx1 = Math.max(Math.log2(pts[pts.length - 1].dk), lx0 + 1);
    const X = (dk) => L + ((Math.log2(dk) - lx0) / (lx1 - lx0)) * (W - L - R);
    host.replaceChildren(
      ...panels.map(([key, fRaw, fScaled, fixedTop, ref]) => {
        let top = fixedTop;
        if (top === null) {
          top = Math.max(...pts.map(fRaw), ...pts.map(fScaled), fRaw(cur), fScaled(cur), ref ?? 0) * 1.08;
        }
        const ticks = niceTicks(0, top, 4);
        top = Math.max(top, ticks[ticks.length - 1]);
        const Y = (v) => T + (1 - v / top) * (H - T - B);
        const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": t(key) });
        for (const v of ticks) {
          svg.append(
            s("line", { x1: L, x2: W - R, y1: Y(v), y2: Y(v), stroke: "#eceef1" }),
            s("text", { x: L - 5, y: Y(v) + 4, "text-anchor": "end", "font-size": 11, fill: "#7a828c" }, num(v, 2)),
          );
        }
        for (const p of pts) {
          const lg = Math.round(Math.log2(p.dk));
          if (lg % 2 === 0 || p === pts[pts.length - 1]) {
            svg.append(s("text", { x: X(p.dk), y: H - B + 15, "text-anchor": "middle", "font-size": 11, fill: "#7a828c" }, String(p.dk)));
          }
        }
        svg.append(s("text", { x: (L + W - R) / 2, y: H - 4, "text-anchor": "middle", "font-size": 11, fill: "#5b6470" }, t("s3.axis").replace("d_k", "dₖ")));
        if (ref !== null) {
          svg.append(s("line", { x1: L, x2: W - R, y1: Y(ref), y2: Y(ref), stroke: "#9aa1a9", "stroke-dasharray": "4 4" }));
          svg.append(s("text", { x: W - R, y: Y(ref) - 4, "text-anchor": "end", "font-size": 10.5, fill: "#7a828c" }, `ln ${curve.keys} = ${num(ref, 2)}`));
        }
        // The slider's d_k.
        svg.append(s("line", { x1: X(cur.dk), x2: X(cur.dk), y1: T, y2: H - B, stroke: "#c3c8ce", "stroke-dasharray": "2 3" }));
        for (const [f, color] of [[fRaw, "#d9480f"], [fScaled, "#1c6bb8"]]) {
          const d = pts.map((p, i) => `${i ? "L" : "M"}${X(p.dk).toFixed(1)},${Y(f(p)).toFixed(1)}`).join(" ");
          svg.append(s("path", { d, fill: "none", stroke: color, "stroke-width": 2.2, "stroke-linejoin": "round" }));
          for (const p of pts) svg.append(s("circle", { cx: X(p.dk), cy: Y(f(p)), r: 2.2, fill: color }));
          svg.append(
            s("circle", { cx: X(cur.dk), cy: Y(f(cur)), r: 5, fill: "#fff", stroke: color, "stroke-width": 2.5 },
              s("title", {}, `d_k = ${cur.dk}: ${num(f(cur), 4)}`)),
          );
        }
        svg.append(s("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, stroke: "#9aa1a9" }));
        return h("figure", { class: "curve" }, h("figcaption", {}, tr(key)), svg);
      }),
    );
  }

  // ------------------------------------------------------------------ 4. attention map

  const s4 = {
    tokens: $("#tokens"),
    causal: $("#causal"),
    d: $("#map-d"),
    dOut: $("#map-d-out"),
    dv: $("#map-dv"),
    seed: $("#map-seed"),
    q: $("#m-q"),
    k: $("#m-k"),
    v: $("#m-v"),
    error: $("#s4-error"),
    res: null,
    lastRandom: null,
  };

  const source = () => $("input[name=source]:checked").value;

  function parseMatrix(text) {
    return text
      .split("\n")
      .map((line) => line.trim())
      .filter((line) => line.length > 0)
      .map((line) =>
        line.split(/[\s,;]+/).filter((x) => x.length > 0).map((tok) => {
          const x = Number(tok);
          return Number.isFinite(x) ? x : tok;
        }),
      );
  }

  function mapRequest() {
    const req = {
      tokens: s4.tokens.value.split(",").map((x) => x.trim()).filter((x) => x.length > 0),
      causal: s4.causal.checked,
    };
    if (source() === "random") {
      req.d = numberOf(s4.d);
      req.dv = numberOf(s4.dv);
      req.seed = numberOf(s4.seed);
    } else {
      req.q = parseMatrix(s4.q.value);
      req.k = parseMatrix(s4.k.value);
      req.v = parseMatrix(s4.v.value);
    }
    return req;
  }

  const mapFields = () => ({ tokens: s4.tokens, d: s4.d, dv: s4.dv, seed: s4.seed, q: s4.q, k: s4.k, v: s4.v, causal: s4.causal });

  const updateMap = updater(async () => {
    try {
      const res = await api("attention", mapRequest());
      s4.res = res;
      if (!res.entered) s4.lastRandom = res;
      report(s4.error, mapFields());
      renderMap();
    } catch (err) {
      report(s4.error, mapFields(), err);
    }
  });

  function matrixText(rows) {
    return rows.map((row) => row.map((x) => num(x, 2)).join(" ")).join("\n");
  }

  function fillFromRandom() {
    const r = s4.lastRandom;
    if (!r) return;
    s4.q.value = matrixText(r.q);
    s4.k.value = matrixText(r.k);
    s4.v.value = matrixText(r.v);
  }

  for (const el of [s4.tokens, s4.dv, s4.seed, s4.q, s4.k, s4.v]) el.addEventListener("input", updateMap);
  s4.causal.addEventListener("change", updateMap);
  s4.d.addEventListener("input", () => {
    s4.dOut.textContent = s4.d.value;
    updateMap();
  });
  for (const radio of $$("input[name=source]")) {
    radio.addEventListener("change", () => {
      const entered = source() === "entered";
      $("#entered-controls").hidden = !entered;
      $("#random-controls").hidden = entered;
      if (entered && !s4.q.value.trim()) fillFromRandom();
      updateMap();
    });
  }
  $("#fill-random").addEventListener("click", () => {
    fillFromRandom();
    updateMap();
  });

  // Light blue to dark blue, by probability.
  const STOPS = [[247, 251, 255], [198, 219, 239], [107, 174, 214], [33, 113, 181], [8, 48, 107]];
  function color(p) {
    const x = Math.max(0, Math.min(1, p)) * (STOPS.length - 1);
    const i = Math.min(Math.floor(x), STOPS.length - 2);
    const f = x - i;
    const c = STOPS[i].map((a, k) => Math.round(a + (STOPS[i + 1][k] - a) * f));
    return `rgb(${c[0]}, ${c[1]}, ${c[2]})`;
  }

  function drawHeatmap(host, r, side) {
    const n = r.n;
    host.style.gridTemplateColumns = `minmax(48px, max-content) repeat(${n}, minmax(38px, 1fr)) 50px`;
    const cells = [h("div", { class: "hd corner", text: "q \\ k" })];
    for (const tok of r.tokens) cells.push(h("div", { class: "hd col", text: tok, title: tok }));
    cells.push(h("div", { class: "hd col", text: "Σ" }));
    for (let i = 0; i < n; i++) {
      cells.push(h("div", { class: "hd rowh", text: r.tokens[i], title: r.tokens[i] }));
      for (let j = 0; j < n; j++) {
        const p = side.probs[i][j];
        const visible = r.visible[i][j];
        const cell = h("div", {
          class: visible ? "cell" : "cell masked",
          dataset: { row: String(i), col: String(j), p: String(p) },
          title: t("s4.cell").replace("{q}", r.tokens[i]).replace("{k}", r.tokens[j]).replace("{s}", num(r.scores[i][j], 3)).replace("{p}", num(p, 4)),
          text: visible ? num(p, 2) === "0" ? "0" : p.toFixed(2) : "·",
        });
        if (visible) {
          cell.style.background = color(p);
          cell.style.color = p > 0.5 ? "#fff" : "#1f2328";
        }
        cells.push(cell);
      }
      cells.push(h("div", { class: "sum", dataset: { sum: String(side.row_sums[i]) }, text: side.row_sums[i].toFixed(3) }));
    }
    host.replaceChildren(...cells);
    host.dataset.n = String(n);
    host.dataset.causal = String(r.causal);
    host.dataset.scale = String(side.scale);
  }

  function renderMap() {
    const r = s4.res;
    if (!r) return;
    $("#cap-unscaled").replaceChildren(tr("s4.cap_unscaled"));
    $("#cap-scaled").replaceChildren(tr("s4.cap_scaled", { d: r.d, scale: num(r.scaled.scale, 4) }));
    drawHeatmap($("#map-unscaled"), r, r.unscaled);
    drawHeatmap($("#map-scaled"), r, r.scaled);
    $("#map-note").replaceChildren(
      tr("s4.note", { e_raw: num(r.unscaled.mean_entropy, 3), e_scaled: num(r.scaled.mean_entropy, 3), isa: r.isa }),
    );
    const dv = r.dv;
    const head1 = h(
      "tr",
      {},
      h("th", { class: "tok" }),
      h("th", { class: "scaled", colspan: String(dv) }, tr("s4.out_scaled")),
      h("th", { class: "gap" }),
      h("th", { class: "raw", colspan: String(dv) }, tr("s4.out_raw")),
    );
    const comps = Array.from({ length: dv }, (_, c) => h("th", { text: `[${c}]` }));
    const head2 = h("tr", {}, h("th", { class: "tok" }, tr("s4.out_token")), comps, h("th", { class: "gap" }), comps.map((x) => x.cloneNode(true)));
    const body = r.tokens.map((tok, i) =>
      h(
        "tr",
        {},
        h("td", { class: "tok", text: tok }),
        r.scaled.out[i].map((x) => h("td", { class: "scaled", text: fixed(x, 3) })),
        h("td", { class: "gap" }),
        r.unscaled.out[i].map((x) => h("td", { class: "raw", text: fixed(x, 3) })),
      ),
    );
    $("#outputs").replaceChildren(h("thead", {}, head1, head2), h("tbody", {}, body));
  }

  // ------------------------------------------------------------------ 5. misunderstandings

  const s5 = { host: $("#myth-list"), error: $("#s5-error"), res: null };

  const updateMyths = updater(async () => {
    const req = storyRequest();
    const bigDk = state.info ? state.info.limits.dk[1] : 1024;
    try {
      s5.res = await api("misconceptions", { ...req, big_dk: bigDk });
      report(s5.error, {});
      renderMyths();
    } catch (err) {
      report(s5.error, {}, err);
    }
  });

  function miniTable(head, rows) {
    return h(
      "table",
      { class: "mini" },
      h("thead", {}, h("tr", {}, head.map((x) => h("th", {}, x)))),
      h("tbody", {}, rows.map((row) => h("tr", {}, row.map((x) => h("td", {}, x))))),
    );
  }

  // One misunderstanding: the claim and its live check, with an optional table beside it.
  function myth(id, claimKey, checks, table) {
    const text = h(
      "div",
      {},
      h("p", { class: "claim" }, h("span", { class: "badge", text: t("s5.false") }), h("span", {}, tr(claimKey))),
      checks,
    );
    return h("article", { class: table ? "myth with-table" : "myth", id }, text, table);
  }

  function renderMyths() {
    const r = s5.res;
    if (!r) return;
    const labels = s2.labels.map((el) => el.value);
    const o = r.order;
    const rankList = (ranks) => labels.map((l, i) => `${l} ${ranks[i]}`).join(", ");
    const learned = r.learned;
    const rec = learned.recovered.map((x) => (x.scale === null ? "–" : num(x.scale, 4)));
    const big = r.big_dk;
    const f = r.flat;
    const dkHead = (dk, sub) => h("span", {}, rich(t("m3.col_small").replace("{dk}", dk)), sub ? h("small", { text: sub }) : null);
    s5.host.replaceChildren(
      myth(
        "myth-order",
        "m1.claim",
        [
          h("p", { class: "check" }, tr("m1.a", { before: rankList(o.ranks_raw), after: rankList(o.ranks_scaled) })),
          h("p", { class: "check" }, tr("m1.b", { trials: o.random_trials, changed: o.random_changed, winner: o.random_winner_changed })),
        ],
        miniTable(
          [tr("s2.key"), tr("m1.col_before"), tr("m1.col_after")],
          labels.map((l, i) => [l, `#${o.ranks_raw[i]}`, `#${o.ranks_scaled[i]}`]),
        ),
      ),
      myth(
        "myth-learned",
        "m2.claim",
        [
          h("p", { class: "check" }, tr("m2.a", { dk: learned.dk, scale: num(learned.scale, 5), r1: rec[0], r2: rec[1] })),
          h("p", { class: "check" }, tr("m2.b", { params: learned.trainable_parameters })),
        ],
        miniTable([rich("d_k"), tr("m2.col_scale")], learned.table.map((row) => [String(row.dk), num(row.scale, 5)])),
      ),
      myth(
        "myth-big",
        "m3.claim",
        [
          h("p", { class: "check" }, tr("m3.a", {
            dk: big.dk,
            max_raw: pct(big.big.raw.max_weight),
            grad_raw: num(big.big.raw.grad_norm, 3),
            grad_scaled: num(big.big.scaled.grad_norm, 3),
          })),
        ],
        miniTable(
          ["", dkHead(big.small.dk), dkHead(big.dk, t("s3.without")), dkHead(big.dk, t("s3.with"))],
          [
            [t("m3.row_max"), big.small.raw.max_weight, big.big.raw.max_weight, big.big.scaled.max_weight],
            [`${t("m3.row_entropy")} ≤ ${num(big.max_entropy, 2)}`, big.small.raw.entropy, big.big.raw.entropy, big.big.scaled.entropy],
            [t("m3.row_grad"), big.small.raw.grad_norm, big.big.raw.grad_norm, big.big.scaled.grad_norm],
          ].map(([label, ...xs]) => [label, ...xs.map((x) => fixed(x, 3))]),
        ),
      ),
      myth(
        "myth-flat",
        "m4.claim",
        [h("p", { class: "check" }, tr("m4.a", { top: labels[f.top] ?? "", p_scaled: pct(f.top_scaled), uniform: pct(f.uniform) }))],
        miniTable(
          [tr("s2.key"), tr("m4.col_raw"), tr("m4.col_scaled"), tr("m4.col_uniform")],
          labels.map((l, i) => [l, pct(f.probs_raw[i]), pct(f.probs_scaled[i]), pct(f.uniform)]),
        ),
      ),
    );
  }

  // ------------------------------------------------------------------ language, glossary, start

  function applyLang(next) {
    lang = I18N[next] ? next : "en";
    document.documentElement.lang = lang;
    document.title = t("doc.title").replace("d_k", "dₖ");
    for (const el of $$("[data-i18n]")) el.replaceChildren(tr(el.dataset.i18n));
    for (const b of $$(".lang button")) b.setAttribute("aria-pressed", String(b.dataset.lang === lang));
    $("#glossary-table tbody").replaceChildren(
      ...GLOSSARY.map(([en, ko, mEn, mKo]) => h("tr", {}, h("td", {}, rich(en)), h("td", {}, rich(ko)), h("td", {}, rich(lang === "ko" ? mKo : mEn)))),
    );
    if (state.info) $("#footer-text").replaceChildren(tr("footer", { isa: state.info.isa }));
    renderScale();
    renderStory();
    renderGrowth();
    renderMap();
    renderMyths();
    try {
      localStorage.setItem("sdpa-explorer-lang", lang);
    } catch (e) {
      /* storage may be unavailable */
    }
  }

  for (const b of $$(".lang button")) b.addEventListener("click", () => applyLang(b.dataset.lang));

  function initialLang() {
    const param = new URLSearchParams(location.search).get("lang");
    if (param) return param;
    try {
      const saved = localStorage.getItem("sdpa-explorer-lang");
      if (saved) return saved;
    } catch (e) {
      /* ignore */
    }
    return (navigator.language || "en").toLowerCase().startsWith("ko") ? "ko" : "en";
  }

  function setRange(input, [lo, hi]) {
    input.min = String(lo);
    input.max = String(hi);
  }

  async function start() {
    applyLang(initialLang());
    try {
      state.info = await api("info");
      const L = state.info.limits;
      const D = state.info.defaults;
      setRange(s1.dk, L.dk);
      setRange(s3.dk, L.dk);
      setRange(s4.d, L.d);
      s2.dk.min = String(L.dk[0]);
      s2.dk.max = String(L.dk[1]);
      s4.dv.max = String(L.dv[1]);
      s2.dk.value = String(D.dk);
      buildStoryRows(D.labels, D.scores);
      $("#footer-text").replaceChildren(tr("footer", { isa: state.info.isa }));
    } catch (err) {
      report(s1.error, {}, err);
      return;
    }
    await Promise.all([updateScale(), updateStory(), updateGrowth(), updateMap(), updateMyths()]);
    document.body.dataset.ready = "1";
  }

  start();
})();
