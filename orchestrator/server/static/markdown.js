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

// `text` as a sanitized DocumentFragment; code blocks get a copy button (`copy(text)`).
export function renderMarkdown(text, copy) {
  let fragment = cache.get(text);
  if (!fragment) {
    const html = marked.parse(text);
    fragment = purify.sanitize(html, {
      ALLOWED_TAGS: TAGS, ALLOWED_ATTR: ATTRS, RETURN_DOM_FRAGMENT: true,
    });
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
