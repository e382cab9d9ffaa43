// The explorer's English strings. Keys are shared with strings.ko.js; the page
// falls back to English for a key a language lacks. In a text, {name} is a
// live value (shown in bold), d_k and d_v are set as subscripts and
// `code` as code.
export default {
  "doc.title": "Why divide by √d_k? · sdpa explorer",
  "nav.scaling": "Try scaling",
  "nav.story": "Tom · New York · lives",
  "nav.growth": "Why it grows",
  "nav.map": "Attention map",
  "nav.myths": "Misunderstandings",
  title: "Why are attention scores divided by √d_k?",
  "term.raw_score": "Raw score q·k",
  "term.dk": "Key dimension d_k",
  "term.seed": "Random seed",

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
  "s5.lead": "Each claim below is checked live with the scores and d_k of section 3.",
  "s5.false": "FALSE",
  "m1.claim": "“Scaling changes which word wins.”",
  "m1.a": "Ranks before scaling: {before}. After: {after}.",
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

  intro:
    "Attention compares a Query with every Key by a dot product. The longer the vectors, the bigger these scores grow, and fed as they are into the softmax, a few weights take almost everything and learning can become unstable. Dividing the scores by the square root of the Key dimension keeps the idea intact and makes the computation stable.",
  "nav.menu": "Sections",
  "nav.simple": "A simple story",
  "nav.summary": "Summary",
  "aria.formula": "Attention of Q, K, V equals softmax of Q K transpose over root d k, times V",
  "aria.lang": "Language",
  "aria.presets": "d_k presets",
  "aria.nav": "Sections",

  "p2.title": "A bigger score is not a more important one",
  "p2.lead":
    "Three students give a presentation. Marked out of 10, Minsu gets 9, Cheolsu 8 and Younghee 7. Marked out of 1000, they get 930, 920 and 910.",
  "p2.student": "Student",
  "p2.of10": "out of 10",
  "p2.of1000": "out of 1000",
  "p2.rank": "rank",
  "p2.minsu": "Minsu",
  "p2.cheolsu": "Cheolsu",
  "p2.younghee": "Younghee",
  "p2.point":
    "The order is the same; only the numbers grew with the scale. Attention scores are alike: the longer the vectors, the bigger the numbers, without anyone becoming more important.",
  "p4.title": "A familiar scale",
  "p4.text": "180 cm and 1.8 m are the same height. Only the number changed, not the person.",
  "p4.cm": "180 cm",
  "p4.m": "1.8 m",

  "s1.title": "Try scaling",
  "s1.lead":
    "Move the score q·k and the key dimension d_k. The readout below works the division out in the lesson's form, and the pipeline shows where it sits in attention. These sliders also drive Tom's row in the next section.",
  "s1.readout": "The division, live",
  "s1.current": "current score",
  "s1.before": "before",
  "s1.after": "after",
  "s1.sentence_exact": "Dividing {score} by {sqrt}, the square root of {dk}, gives {scaled}.",
  "s1.sentence_approx": "Dividing {score} by √{dk} ≈ {sqrt} gives about {scaled}.",
  "s1.steps_title": "What “Scaled” means, in four steps",
  "s1.step1": "Compare the Query with a Key: a relevance score.",
  "s1.step2": "The score can get too big: longer vectors, bigger numbers.",
  "s1.step3": "Divide it by √d_k: only its size changes.",
  "s1.step4": "Apply the softmax: stable weights.",
  "s1.steps_name": "This division step is called Scaling.",
  "s1.divide_title": "What do we divide by?",
  "s1.divide":
    "d_k is the number of entries in each Key vector (and Query vector). The scores are divided by its square root, √d_k. No proof is needed to use it; section 4 shows where √d_k comes from, for the curious.",
  "s1.pipeline": "The whole idea as a pipeline",
  "s1.pipeline_sentence": "Divide the score from comparing the Query with a Key by √d_k, then feed it to the softmax.",
  "s1.box_dot": "Dot product",
  "s1.box_score": "Attention score",
  "s1.box_scale": "Scale",
  "s1.box_softmax": "Softmax",
  "s1.box_softmax_note": "{label}'s weight among {keys} keys",

  "s2.summary_one_raw": "Without scaling, {top} takes {p_raw} of the weight and the others almost nothing.",
  "s2.summary_lead_raw": "Without scaling, {top} leads with {p_raw}; the others get {rest} between them.",
  "s2.summary_tie_raw": "Without scaling, {tops} share the lead with {p_raw} each.",
  "s2.summary_one_scaled": "Divided by √{dk} = {sqrt}, the scores become {scaled}: {top} still takes {p_scaled}.",
  "s2.summary_lead_scaled":
    "Divided by √{dk} = {sqrt}, the scores become {scaled}: {top} still leads with {p_scaled}, and the other keys keep {rest} between them.",
  "s2.summary_tie_scaled": "Divided by √{dk} = {sqrt}, the scores become {scaled}: {tops} still share the lead with {p_scaled} each.",
  "s2.aria_key": "name of key {i}",
  "s2.aria_score": "raw score of key {i}",
  "s2.linked": "Tom's score and d_k are also set by the sliders of section 2.",

  "s3.c_max": "Largest softmax weight",
  "s3.uniform": "uniform 1/{keys} = {w}",
  "s3.peak":
    "Without scaling, the gradient first rises (largest at d_k = {dk}: the scores spread enough for the softmax to take sides), then falls towards 0 as the softmax saturates.",

  "s4.scores_title": "The scores themselves: QKᵀ and QKᵀ/√d",
  "s4.cap_qk": "QKᵀ (raw scores)",
  "s4.cap_qk_scaled": "QKᵀ/√{d} (scaled scores)",
  "s4.hover": "Point at or focus (Tab) a cell: the same query and key are marked in all four maps.",
  "s4.score_cell": "query “{q}” → key “{k}”: score {s}",

  "s4.real_title": "A real sentence, a real head (all-MiniLM-L6-v2)",
  "s4.real_lead":
    "These queries, keys and values are those of one sentence in a small trained model, all-MiniLM-L6-v2 (layer {layer}, heads of size d = {d}), exported by `scripts/export-minilm-head`. The model was trained with the scaling, so the map with scaling is what it really computes; without it, the same head turns much sharper.",
  "s4.real_head": "Head",
  "s4.real_note":
    "Sentence: “{sentence}”. Mean row entropy: {e_raw} nats without scaling, {e_scaled} with scaling; the largest weight of a row is {m_raw} on average without scaling, {m_scaled} with.",

  "m1.b":
    "This is a proof, not an experiment: dividing every score by the same positive number √d_k keeps their order, and the softmax is increasing, so it keeps it too. The {trials} random score vectors confirm it ({changed} orders changed, {winner} winners changed). What would break it is a number that is not the same for every key, or not positive: dividing by −1 reverses the order.",

  "s6.title": "Summary",
  "s6.p1": "Attention scores come from the dot product of a Query and a Key.",
  "s6.p2": "The scores grow with the length of the vectors.",
  "s6.p3": "Scores that are too big make the softmax pile almost everything on one word.",
  "s6.p4": "So the scores are divided by √d_k.",
  "s6.p5": "The order of the scores is kept.",
  "s6.p6": "The softmax after scaling gives the attention weights.",
  "s6.p7": "This is Scaled Dot-Product Attention.",

  footer:
    "Where the numbers come from: the attention maps of section 5 and the scale read back in misunderstanding 2 are calls to the sdpa attention kernel ({isa} kernels). The scaling, the softmax weights and ranks, the growth experiment and misunderstandings 1, 3 and 4 are computed by the server's teaching-maths module (plain double arithmetic). Both are served by `sdpa serve` through its JSON API under /api.",
  "err.score": "Score {i} ({label}) needs a number from {lo} to {hi}.",
  "err.dk": "d_k needs a whole number from {lo} to {hi}.",
  "err.field": "“{field}” needs a valid value; the server said: {message}",
  "err.network": "The server did not answer ({message}). Is `sdpa serve` still running?",
  "err.tokens": "Enter 1 to {max} tokens, separated by commas ({n} now).",
  "err.stale": "These results wait for valid scores in section 3.",

  // The glossary: the term in English, in Korean, and what it means here.
  glossary: [
    ["query", "쿼리 (질의)", "the vector of the word that is looking"],
    ["key", "키", "the vector every word is matched on"],
    ["value", "밸류 (값)", "the vector a word contributes to the output"],
    ["dot product q·k", "내적 q·k", "the raw attention score"],
    ["key dimension d_k", "키 차원 d_k", "the length of the query and key vectors"],
    ["scaling", "스케일링", "dividing the scores by √d_k"],
    ["softmax", "소프트맥스", "turns scores into weights that sum to 1"],
    ["attention weight", "어텐션 가중치", "one entry of the softmax"],
    ["standard deviation", "표준편차", "how widely the scores spread"],
    ["entropy", "엔트로피", "how evenly the weights spread (0: all on one key)"],
    ["saturation", "포화", "one weight ≈ 1, all others ≈ 0"],
    ["gradient", "기울기 (그래디언트)", "how much the weights move when the scores move"],
    ["causal mask", "인과 마스크", "hides later tokens from each query"],
    ["learned parameter", "학습 파라미터", "a number training adjusts (√d_k is not one)"],
  ],
};
