// What the sections share: the server's /api/info, and a few events between
// sections (the sliders of "Try scaling" drive Tom's row of the story; the
// misunderstandings follow the story's scores).
export const state = {
  info: null,
  story: null, // the last /api/softmax answer of the story, or null while its inputs are invalid
};

const listeners = new Map();
export function on(event, fn) {
  if (!listeners.has(event)) listeners.set(event, []);
  listeners.get(event).push(fn);
}
export function emit(event, value) {
  for (const fn of listeners.get(event) ?? []) fn(value);
}
