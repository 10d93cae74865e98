// Answers and thinking as Markdown, sanitized: marked (GFM) makes HTML, DOMPurify keeps
// only the tags and attributes listed here. Both are vendored (static/vendor/, with
// their licenses): the console has no build step and loads nothing from elsewhere.
//
// Nothing a model writes runs or loads: raw HTML in the Markdown is shown as text;
// images become their alt text (an image would load from anywhere: a tracking pixel);
// links keep only http(s) targets and open in a new tab with rel="noopener
// noreferrer"; every other href is dropped. DOMPurify then removes whatever else is
// not listed below, and the page's Content-Security-Policy forbids inline scripts and
// loads from other origins should anything slip through.

import { Marked } from "./vendor/marked.esm.js";
import DOMPurify from "./vendor/purify.es.mjs";

const escapeHtml = (text) => String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

const marked = new Marked({ gfm: true, async: false });
marked.use({
  renderer: {
    html(token) { return escapeHtml(token.text); },      // raw HTML: shown, never parsed
    image(token) { return escapeHtml(token.text || token.href || ""); },
  },
});

const TAGS = [
  "p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "em", "strong", "del", "s",
  "code", "pre", "blockquote", "ul", "ol", "li", "table", "thead", "tbody", "tr", "th",
  "td", "a",
];
const ATTRS = ["href", "title", "align", "start"];
const purify = DOMPurify(window);
purify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName !== "A") return;
  const href = node.getAttribute("href") || "";
  if (!/^https?:\/\//i.test(href)) {
    node.removeAttribute("href");
    return;
  }
  node.setAttribute("target", "_blank");
  node.setAttribute("rel", "noopener noreferrer");
});

const cache = new Map();   // text -> sanitized fragment (cloned for each use)
const CACHE_SIZE = 400;

// What a model writes is bounded before marked sees it: marked recurses once per
// nesting level (thousands of `>` or `- ` overflow the stack: RangeError) and its
// emphasis matching is quadratic in the delimiters (`*a` 80,000 times: 6 s). Past
// these, the text is shown as written, saying why; a renderer error does the same.
export const MAX_MARKDOWN_CHARS = 20000;
export const MAX_DELIMITERS = 1000;   // `*`, `_`, `~`, `[`, `]`
export const MAX_NESTING = 32;        // quote and list markers, plus indentation / 4, on a line

// Why `text` is not rendered as Markdown (null: it is). Linear in the text.
export function tooComplex(text) {
  if (text.length > MAX_MARKDOWN_CHARS) return `over ${MAX_MARKDOWN_CHARS} characters`;
  let delimiters = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === "*" || c === "_" || c === "~" || c === "[" || c === "]") delimiters++;
    if (i === 0 || text[i - 1] === "\n") {   // a line's start: how deep it goes
      let markers = 0, spaces = 0, j = i;
      for (; j < text.length; j++) {
        const d = text[j];
        if (d === ">") markers++;
        else if ((d === "-" || d === "*" || d === "+") && text[j + 1] === " ") { markers++; j++; }
        else if (d === " ") spaces++;
        else if (d === "\t") spaces += 4;
        else break;
      }
      if (markers + Math.floor(spaces / 4) > MAX_NESTING) return `nested over ${MAX_NESTING} levels`;
    }
  }
  if (delimiters > MAX_DELIMITERS) return `over ${MAX_DELIMITERS} emphasis and link marks`;
  return null;
}

function asWritten(text, why) {
  const out = document.createDocumentFragment();
  const note = document.createElement("div");
  note.className = "as-written";
  note.textContent = `shown as written (${why})`;
  const body = document.createElement("div");
  body.className = "plain";
  body.textContent = text;
  out.append(note, body);
  return out;
}

// `text` as a sanitized DocumentFragment; code blocks get a copy button (`copy(text)`).
// Text past the bounds above, or that the renderer fails on, comes as written.
export function renderMarkdown(text, copy) {
  let fragment = cache.get(text);
  if (!fragment) {
    const why = tooComplex(text);
    if (why) fragment = asWritten(text, why);
    else {
      try {
        const html = marked.parse(text);
        fragment = purify.sanitize(html, {
          ALLOWED_TAGS: TAGS, ALLOWED_ATTR: ATTRS, RETURN_DOM_FRAGMENT: true,
        });
      } catch (error) {
        fragment = asWritten(text, `the renderer failed: ${error.name}`);
      }
    }
    cache.set(text, fragment);
    if (cache.size > CACHE_SIZE) cache.delete(cache.keys().next().value);
  }
  const out = fragment.cloneNode(true);
  for (const pre of out.querySelectorAll("pre")) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "copy code-copy";
    button.textContent = "copy";
    button.onclick = () => copy(pre.querySelector("code")?.textContent ?? pre.textContent);
    pre.prepend(button);
  }
  return out;
}
