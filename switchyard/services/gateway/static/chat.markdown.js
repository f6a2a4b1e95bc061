// A small markdown renderer for answers: escape everything first, then add a known set of tags, so
// text from the model can never become markup. It must also render half-written text well, because
// it runs on every animation frame while an answer streams (an unclosed ``` fence is still code).
"use strict";

const Markdown = (() => {
  const escapeHtml = (s) =>
    s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");

  // Inline spans of one line of already-escaped text. Code spans are cut out first so that nothing
  // inside them is formatted.
  function inline(text) {
    const codes = [];
    let s = text.replace(/`([^`]+)`/g, (_, c) => {
      codes.push(c);
      return `\u0000${codes.length - 1}\u0000`;
    });
    s = s
      .replace(/\[([^\]]+)\]\((https?:\/\/[^\s)]+)\)/g, '<a href="$2" target="_blank" rel="noopener noreferrer">$1</a>')
      .replace(/\*\*([^*]+)\*\*/g, "<strong>$1</strong>")
      .replace(/__([^_]+)__/g, "<strong>$1</strong>")
      .replace(/(^|[^*\w])\*([^*\s][^*]*)\*(?!\w)/g, "$1<em>$2</em>")
      .replace(/(^|[^_\w])_([^_\s][^_]*)_(?!\w)/g, "$1<em>$2</em>")
      .replace(/~~([^~]+)~~/g, "<del>$1</del>");
    return s.replace(/\u0000(\d+)\u0000/g, (_, i) => `<code>${codes[Number(i)]}</code>`);
  }

  function render(source) {
    const lines = escapeHtml(source.replace(/\r\n?/g, "\n")).split("\n");
    const out = [];
    let para = [];
    let list = null; // {tag, items}
    let quote = [];

    const flushPara = () => {
      if (para.length) out.push(`<p>${para.map(inline).join("<br>")}</p>`);
      para = [];
    };
    const flushList = () => {
      if (list) out.push(`<${list.tag}>${list.items.map((i) => `<li>${inline(i)}</li>`).join("")}</${list.tag}>`);
      list = null;
    };
    const flushQuote = () => {
      if (quote.length) out.push(`<blockquote>${render(quote.join("\n"))}</blockquote>`);
      quote = [];
    };
    const flushAll = () => {
      flushPara();
      flushList();
      flushQuote();
    };

    for (let i = 0; i < lines.length; i++) {
      const line = lines[i];
      const fence = line.match(/^\s*```\s*([\w+-]*)\s*$/);
      if (fence) {
        flushAll();
        const code = [];
        i++;
        while (i < lines.length && !/^\s*```\s*$/.test(lines[i])) code.push(lines[i++]);
        const lang = fence[1] ? ` data-lang="${fence[1]}"` : "";
        out.push(`<pre${lang}><code>${code.join("\n")}</code></pre>`);
        continue;
      }
      if (/^\s*&gt;\s?/.test(line)) {
        flushPara();
        flushList();
        quote.push(line.replace(/^\s*&gt;\s?/, ""));
        continue;
      }
      flushQuote();
      const heading = line.match(/^(#{1,6})\s+(.*)$/);
      if (heading) {
        flushAll();
        const level = Math.min(heading[1].length + 2, 6); // an answer's "#" is not the page's title
        out.push(`<h${level}>${inline(heading[2])}</h${level}>`);
        continue;
      }
      if (/^\s*([-*_])(\s*\1){2,}\s*$/.test(line)) {
        flushAll();
        out.push("<hr>");
        continue;
      }
      const item = line.match(/^\s*(?:([-*+])|(\d+)[.)])\s+(.*)$/);
      if (item) {
        flushPara();
        const tag = item[1] ? "ul" : "ol";
        if (list && list.tag !== tag) flushList();
        if (!list) list = { tag, items: [] };
        list.items.push(item[3]);
        continue;
      }
      if (!line.trim()) {
        flushAll();
        continue;
      }
      if (list && /^\s+\S/.test(line)) {
        list.items[list.items.length - 1] += " " + line.trim();
        continue;
      }
      flushList();
      para.push(line);
    }
    flushAll();
    return out.join("");
  }

  return { render, escapeHtml };
})();
