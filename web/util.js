// Formatting for display, DOM and SVG helpers, and the JSON API client.
// Nothing here computes a number the page teaches: those come from /api.
import { plain, tr } from "./i18n.js";

// ------------------------------------------------------------------ formatting (display only)

const SUPERSCRIPT = { "-": "⁻", 0: "⁰", 1: "¹", 2: "²", 3: "³", 4: "⁴", 5: "⁵", 6: "⁶", 7: "⁷", 8: "⁸", 9: "⁹" };

function trimZeros(s) {
  return s.includes(".") ? s.replace(/0+$/, "").replace(/\.$/, "") : s;
}

// Up to `digits` decimals, trailing zeros dropped.
export function num(x, digits = 3) {
  if (x === null || x === undefined || Number.isNaN(x)) return "–";
  if (Number.isInteger(x)) return String(x);
  const s = trimZeros(x.toFixed(digits));
  return s === "-0" ? "0" : s;
}

// Fixed decimals (for columns of numbers).
export function fixed(x, digits = 3) {
  return x === null || x === undefined ? "–" : x.toFixed(digits);
}

function sci(x, digits = 1) {
  const [mant, exp] = x.toExponential(digits).split("e");
  const e = String(Number(exp)).split("").map((c) => SUPERSCRIPT[c]).join("");
  return `${trimZeros(mant)}×10${e}`;
}

// A probability as a percentage; tiny ones in scientific notation.
export function pct(p) {
  if (p === 0) return "0%";
  const v = p * 100;
  if (v >= 0.05) {
    const text = trimZeros(v.toFixed(1));
    return text === "100" && p < 1 ? "≈100%" : `${text}%`;
  }
  return `${sci(v)}%`;
}

// ------------------------------------------------------------------ DOM

export const $ = (sel, root = document) => root.querySelector(sel);
export const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));

export function h(tag, props = {}, ...children) {
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
export function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) el.setAttribute(k, v);
  for (const c of children.flat()) if (c !== null && c !== undefined) el.append(c);
  return el;
}

// Tick positions for an axis (display only).
export function niceTicks(lo, hi, count) {
  const span = hi - lo;
  if (!(span > 0)) return [lo];
  const raw = span / count;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((st) => st >= raw) || raw;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
  return out;
}

// The width an SVG chart is drawn at: its box's width in CSS pixels, so that
// its text keeps its size on a phone (a chart is redrawn, never scaled down).
export function widthOf(host, fallback) {
  const w = Math.floor(host.getBoundingClientRect().width);
  return w > 0 ? w : fallback;
}

// Calls `draw` again when any of `hosts` changes width.
export function onResize(hosts, draw) {
  if (typeof ResizeObserver === "undefined") return;
  const widths = new Map();
  let pending = false;
  const ro = new ResizeObserver((entries) => {
    let changed = false;
    for (const e of entries) {
      const w = Math.round(e.contentRect.width);
      if (widths.get(e.target) !== w) {
        widths.set(e.target, w);
        changed = true;
      }
    }
    if (changed && !pending) {
      pending = true;
      requestAnimationFrame(() => {
        pending = false;
        draw();
      });
    }
  });
  for (const el of hosts) ro.observe(el);
}

// ------------------------------------------------------------------ API

export class ApiError extends Error {
  constructor(endpoint, status, message, field) {
    super(message);
    this.endpoint = endpoint;
    this.status = status;
    this.field = field;
  }
}

export async function api(endpoint, body) {
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
export function updater(fn) {
  let current = null;
  let again = false;
  const loop = async () => {
    do {
      again = false;
      await fn();
    } while (again);
    current = null;
  };
  const run = () => {
    if (current) {
      again = true;
      return current;
    }
    current = loop();
    return current;
  };
  // The run in progress (if any), without asking for another.
  run.settled = () => current ?? Promise.resolve();
  return run;
}

// Shows (or clears) a section's error in the page's language and marks the
// inputs of the offending field. `err` is an ApiError, an Error, or a
// {key, vars, field} the page found itself before asking the server.
export function report(box, fields, err) {
  for (const el of Object.values(fields).flat()) {
    el.classList.remove("invalid");
    el.removeAttribute("aria-invalid");
  }
  if (!err) {
    box.hidden = true;
    box.textContent = "";
    return;
  }
  box.hidden = false;
  let message;
  if (err.key) {
    message = tr(err.key, err.vars);
  } else if (err instanceof ApiError) {
    message = tr("err.field", { field: err.field ?? err.endpoint, message: err.message });
  } else {
    message = tr("err.network", { message: String(err.message || err) });
    console.error(err);
  }
  box.replaceChildren(message);
  const marked = fields[err.field];
  if (marked) {
    for (const el of [marked].flat()) {
      el.classList.add("invalid");
      el.setAttribute("aria-invalid", "true");
    }
  }
}

// A number input's value, or null when it holds no number.
export function numberOf(input) {
  const v = input.valueAsNumber;
  if (Number.isFinite(v)) return v;
  const x = Number(input.value);
  return input.value.trim() !== "" && Number.isFinite(x) ? x : null;
}

export { plain };
