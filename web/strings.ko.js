// The explorer's Korean (한국어) strings. Keys are shared with strings.en.js; the page
// falls back to English for a key a language lacks. In a text, {name} is a
// live value (shown in bold) and {name:을} the value followed by the particle that
// fits it (을/를, 이/가, 은/는, 으로/로, 과/와: see josa() in i18n.js), d_k and d_v are set as subscripts and
// `code` as code.
export default {
  "doc.title": "왜 √d_k로 나눌까? · sdpa explorer",
  "nav.scaling": "직접 스케일링",
  "nav.story": "Tom · New York · lives",
  "nav.growth": "왜 커질까",
  "nav.map": "어텐션 맵",
  "nav.myths": "흔한 오해",
  title: "어텐션 점수는 왜 √d_k로 나눌까?",
  "term.raw_score": "원점수 q·k (raw score)",
  "term.dk": "키 차원 d_k (key dimension)",
  "term.seed": "난수 시드 (seed)",

  "s1.presets": "자주 쓰는 d_k:",
  "s1.caption_exact": "√{dk} = {sqrt:으로} 딱 떨어지므로 스케일 계수 1/√d_k는 {scale}입니다. 이 값은 d_k만으로 정해집니다.",
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
  "s5.lead": "아래 주장들을 3번 항목의 점수와 d_k로 직접 계산해 확인합니다.",
  "s5.false": "사실 아님",
  "m1.claim": "“스케일링하면 가장 중요한 단어가 바뀐다.”",
  "m1.a": "스케일링 전 순위: {before}. 스케일링 후: {after}.",
  "m2.claim": "“√d_k는 모델이 학습하는 가중치다.”",
  "m2.a":
    "d_k = {dk}이면 스케일은 1/√{dk} = {scale}입니다. 서로 무관한 두 무작위 입력에 대해 라이브러리의 출력에서 거꾸로 구한 값: {r1}, {r2}.",
  "m2.b": "벡터의 차원만으로 정해지는 상수이며, 관련된 학습 파라미터는 {params}개입니다.",
  "m1.col_before": "스케일링 전 순위",
  "m1.col_after": "스케일링 후 순위",
  "m2.col_scale": "스케일 1/√d_k",
  "m3.claim": "“d_k가 커도 스케일링 없이 괜찮다.”",
  "m3.a":
    "d_k = {dk}에서 스케일링하지 않은 소프트맥스는 포화됩니다. 평균적으로 키 하나가 가중치의 {max_raw}를 가져가고 기울기는 {grad_raw:으로} 줄어듭니다 (스케일링하면 {grad_scaled}).",
  "m3.col_small": "d_k = {dk}",
  "m3.row_max": "가장 큰 가중치",
  "m3.row_entropy": "엔트로피 (nat)",
  "m3.row_grad": "기울기 크기",
  "m4.claim": "“스케일링하면 모든 단어가 똑같이 중요해진다.”",
  "m4.a":
    "스케일링 후에도 {top:은} 가중치의 {p_scaled}를 받습니다. 균등하다면 키마다 {uniform}일 것입니다. 스케일링은 소프트맥스를 부드럽게 할 뿐, 평평하게 만들지는 않습니다.",

  "m4.col_raw": "스케일링 전 가중치",
  "m4.col_scaled": "스케일링 후 가중치",
  "m4.col_uniform": "균등",

  "gl.title": "용어 (영어 · 한국어)",
  "gl.meaning": "이 페이지에서의 뜻",

  intro:
    "어텐션은 Query와 모든 Key를 내적(dot product)으로 비교해 점수를 매깁니다. 벡터가 길수록 이 점수는 커지고, 그대로 소프트맥스(softmax)에 넣으면 몇몇 가중치가 거의 모든 것을 가져가 학습이 불안정해질 수 있습니다. 점수를 Key 차원의 제곱근으로 나누면 원리는 그대로 두고 계산은 안정적으로 만들 수 있습니다.",
  "nav.menu": "목차",
  "nav.simple": "쉬운 이야기",
  "nav.summary": "정리",
  "aria.formula": "Q, K, V의 어텐션은 Q 곱하기 K 전치를 루트 d k로 나눈 값의 소프트맥스에 V를 곱한 것",
  "aria.lang": "언어",
  "aria.presets": "d_k 예시 값",
  "aria.nav": "목차",

  "p2.title": "점수의 크기만 커졌다고 더 중요한 것은 아니다",
  "p2.lead":
    "세 학생이 발표를 했습니다. 10점 만점으로는 민수 9점, 철수 8점, 영희 7점이고, 1000점 만점으로는 민수 930점, 철수 920점, 영희 910점입니다.",
  "p2.student": "학생",
  "p2.of10": "10점 만점",
  "p2.of1000": "1000점 만점",
  "p2.rank": "순위",
  "p2.minsu": "민수",
  "p2.cheolsu": "철수",
  "p2.younghee": "영희",
  "p2.point":
    "순서는 같고, 점수의 단위에 따라 숫자만 커졌습니다. 어텐션 점수도 마찬가지입니다. 벡터가 길어지면 숫자가 커질 뿐, 누가 더 중요해지는 것은 아닙니다.",
  "p4.title": "익숙한 단위로 보기",
  "p4.text": "180 cm와 1.8 m는 같은 키입니다. 숫자만 바뀌었을 뿐 사람은 그대로입니다.",
  "p4.cm": "180 cm",
  "p4.m": "1.8 m",

  "s1.title": "직접 스케일링해 보기",
  "s1.lead":
    "점수 q·k와 키 차원 d_k를 움직여 보세요. 아래 계산판은 나눗셈을 수업에서처럼 풀어 보여 주고, 파이프라인은 그 나눗셈이 어텐션의 어디에 있는지 보여 줍니다. 이 슬라이더는 다음 항목의 Tom 행도 함께 바꿉니다.",
  "s1.readout": "실시간 계산",
  "s1.current": "현재 점수",
  "s1.before": "나누기 전",
  "s1.after": "나눈 후",
  "s1.sentence_exact": "{score:을} √{dk}인 {sqrt:으로} 나누면 {scaled:이} 됩니다.",
  "s1.sentence_approx": "{score:을} √{dk} ≈ {sqrt:으로} 나누면 약 {scaled:이} 됩니다.",
  "s1.steps_title": "“Scaled”의 뜻, 네 단계로",
  "s1.step1": "Query와 Key를 비교합니다: 관련도 점수.",
  "s1.step2": "점수가 너무 커질 수 있습니다: 벡터가 길수록 숫자가 큽니다.",
  "s1.step3": "√d_k로 나눕니다: 크기만 바뀝니다.",
  "s1.step4": "소프트맥스에 넣습니다: 안정적인 가중치.",
  "s1.steps_name": "이렇게 나누는 단계를 스케일링(Scaling)이라고 합니다.",
  "s1.divide_title": "무엇으로 나눌까?",
  "s1.divide":
    "d_k는 Key 벡터(그리고 Query 벡터)에 들어 있는 숫자의 개수입니다. 점수는 그 제곱근인 √d_k로 나눕니다. 쓰는 데 증명은 필요 없습니다. √d_k가 어디서 나오는지 궁금하다면 4번 항목을 보세요.",
  "s1.pipeline": "전체 흐름을 파이프라인으로",
  "s1.pipeline_sentence": "Query와 Key를 비교한 점수를 √d_k로 나눈 뒤 Softmax에 넣는다.",
  "s1.box_dot": "내적 (Dot Product)",
  "s1.box_score": "어텐션 점수 (Attention Score)",
  "s1.box_scale": "스케일 (Scale)",
  "s1.box_softmax": "소프트맥스 (Softmax)",
  "s1.box_softmax_note": "키 {keys}개 중 {label}의 가중치",

  "s2.summary_one_raw": "스케일링하지 않으면 {top:이} 가중치의 {p_raw}를 가져가고 나머지는 거의 받지 못합니다.",
  "s2.summary_lead_raw": "스케일링하지 않으면 {top:이} {p_raw}로 1위이고, 나머지는 합쳐서 {rest}를 받습니다.",
  "s2.summary_tie_raw": "스케일링하지 않으면 {tops:이} 각각 {p_raw}로 공동 1위입니다.",
  "s2.summary_one_scaled": "√{dk} = {sqrt:으로} 나누면 점수는 {scaled:이} 되고, {top:은} 여전히 {p_scaled}를 가져갑니다.",
  "s2.summary_lead_scaled":
    "√{dk} = {sqrt:으로} 나누면 점수는 {scaled:이} 되고, {top:은} 여전히 {p_scaled}로 1위지만 나머지 키들도 합쳐서 {rest}를 받습니다.",
  "s2.summary_tie_scaled": "√{dk} = {sqrt:으로} 나누면 점수는 {scaled:이} 되고, {tops:은} 여전히 각각 {p_scaled}로 공동 1위입니다.",
  "s2.aria_key": "키 {i}의 이름",
  "s2.aria_score": "키 {i}의 원점수",
  "s2.linked": "Tom의 점수와 d_k는 2번 항목의 슬라이더로도 바뀝니다.",

  "s3.c_max": "가장 큰 소프트맥스 가중치",
  "s3.uniform": "균등 1/{keys} = {w}",
  "s3.peak":
    "스케일링하지 않으면 기울기는 처음에는 커지다가(d_k = {dk}에서 가장 큼: 점수가 충분히 퍼져 소프트맥스가 한쪽을 고르기 시작함), 소프트맥스가 포화되면서 0을 향해 작아집니다.",

  "s4.scores_title": "점수 자체: QKᵀ와 QKᵀ/√d",
  "s4.cap_qk": "QKᵀ (원점수)",
  "s4.cap_qk_scaled": "QKᵀ/√{d} (스케일된 점수)",
  "s4.hover": "칸에 마우스를 올리거나 Tab으로 선택하면 네 맵 모두에서 같은 쿼리와 키가 표시됩니다.",
  "s4.score_cell": "쿼리 “{q}” → 키 “{k}”: 점수 {s}",

  "s4.real_title": "실제 문장, 실제 헤드 (all-MiniLM-L6-v2)",
  "s4.real_lead":
    "이 쿼리, 키, 밸류는 작은 학습된 모델 all-MiniLM-L6-v2(레이어 {layer}, 헤드 크기 d = {d})에 문장 하나를 넣었을 때의 값으로, `scripts/export-minilm-head`로 추출했습니다. 모델은 스케일링을 한 채로 학습되었으므로 스케일링한 맵이 모델이 실제로 계산하는 값입니다. 스케일링을 빼면 같은 헤드가 훨씬 날카로워집니다.",
  "s4.real_head": "헤드",
  "s4.real_note":
    "문장: “{sentence}”. 행 평균 엔트로피: 스케일링 없음 {e_raw} nat, 스케일링 있음 {e_scaled} nat. 행마다 가장 큰 가중치의 평균: 스케일링 없음 {m_raw}, 스케일링 있음 {m_scaled}.",

  "m1.b":
    "이것은 실험이 아니라 증명입니다. 모든 점수를 같은 양수 √d_k로 나누면 순서가 유지되고, 소프트맥스는 증가함수이므로 그 순서를 그대로 지킵니다. 무작위 점수 벡터 {trials}개도 이를 확인해 줍니다(순서가 바뀐 경우 {changed}번, 1위가 바뀐 경우 {winner}번). 이 성질이 깨지려면 키마다 다른 수로 나누거나 양수가 아닌 수로 나누어야 합니다. 예를 들어 −1로 나누면 순서가 뒤집힙니다.",

  "s6.title": "정리",
  "s6.p1": "어텐션 점수는 Query와 Key의 내적으로 만듭니다.",
  "s6.p2": "점수는 벡터의 길이가 길수록 커집니다.",
  "s6.p3": "점수가 너무 크면 소프트맥스가 한 단어에 거의 모든 가중치를 몰아줍니다.",
  "s6.p4": "그래서 점수를 √d_k로 나눕니다.",
  "s6.p5": "점수의 순서는 그대로 유지됩니다.",
  "s6.p6": "스케일링한 뒤 소프트맥스를 거치면 어텐션 가중치가 됩니다.",
  "s6.p7": "이것이 Scaled Dot-Product Attention입니다.",

  footer:
    "숫자의 출처: 5번 항목의 어텐션 맵과 오해 2에서 거꾸로 구한 스케일은 sdpa 어텐션 커널({isa} 커널)을 호출해 계산합니다. 스케일링, 소프트맥스 가중치와 순위, 점수 성장 실험, 오해 1, 3, 4는 서버의 교육용 수학 모듈(double 연산)이 계산합니다. 모두 `sdpa serve`가 /api 아래의 JSON API로 제공합니다.",
  "err.score": "점수 {i}({label})에는 {lo}부터 {hi}까지의 숫자를 넣어 주세요.",
  "err.dk": "d_k에는 {lo}부터 {hi}까지의 정수를 넣어 주세요.",
  "err.field": "“{field}” 값이 올바르지 않습니다. 서버의 설명: {message}",
  "err.network": "서버가 응답하지 않습니다({message}). `sdpa serve`가 아직 실행 중인지 확인해 주세요.",
  "err.tokens": "토큰은 쉼표로 구분해 1개부터 {max}개까지 넣어 주세요 (지금 {n}개).",
  "err.stale": "3번 항목의 점수가 올바르게 입력되면 결과가 다시 계산됩니다.",

  // The glossary: the term in English, in Korean, and what it means here.
  glossary: [
    ["query", "쿼리 (질의)", "찾는 쪽 단어의 벡터"],
    ["key", "키", "각 단어가 비교되는 벡터"],
    ["value", "밸류 (값)", "출력에 더해지는 단어의 벡터"],
    ["dot product q·k", "내적 q·k", "어텐션 원점수"],
    ["key dimension d_k", "키 차원 d_k", "쿼리·키 벡터의 길이"],
    ["scaling", "스케일링", "점수를 √d_k로 나누기"],
    ["softmax", "소프트맥스", "점수를 합이 1인 가중치로 바꿈"],
    ["attention weight", "어텐션 가중치", "소프트맥스 결과의 한 성분"],
    ["standard deviation", "표준편차", "점수가 퍼진 정도"],
    ["entropy", "엔트로피", "가중치가 고르게 퍼진 정도 (0: 한 키에 몰림)"],
    ["saturation", "포화", "가중치 하나 ≈ 1, 나머지 ≈ 0"],
    ["gradient", "기울기 (그래디언트)", "점수가 변할 때 가중치가 변하는 정도"],
    ["causal mask", "인과 마스크", "각 쿼리에게 뒤쪽 토큰을 가림"],
    ["learned parameter", "학습 파라미터", "학습으로 조정되는 값 (√d_k는 아님)"],
  ],
};
