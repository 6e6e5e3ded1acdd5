/* Wrapped code keeps its indentation (issue 43). A code block is one <pre> of text with newlines, so CSS alone
   cannot indent the continuation of one line: this script puts each line in a block of its own
   (span.hang-line) that knows its leading spaces (--indent, in characters), and hang-code rules in
   wrap-code.css indent the continuation of a wrapped line four characters past that line's own indentation.
   The text is unchanged, newlines included, so copying a block still gives the code as written. */
(function () {
  "use strict";
  const HANG = 4;  // characters a wrapped continuation sits to the right of its line's indentation

  // The nodes of `node` split at its newlines: one list of nodes per line, elements cloned around each piece.
  function linesOf(node) {
    if (node.nodeType === Node.TEXT_NODE) {
      return node.textContent.split("\n").map(t => (t ? [document.createTextNode(t)] : []));
    }
    if (node.nodeType !== Node.ELEMENT_NODE) return [[]];
    const lines = [[]];
    for (const child of Array.from(node.childNodes)) {
      const parts = linesOf(child);
      lines[lines.length - 1].push(...parts[0]);
      for (const part of parts.slice(1)) lines.push(part);
    }
    return lines.map(nodes => {
      if (!nodes.length) return [];
      const copy = node.cloneNode(false);
      nodes.forEach(n => copy.appendChild(n));
      return [copy];
    });
  }

  function hang(pre) {
    if (pre.classList.contains("hang-code")) return;
    const lines = [[]];
    for (const child of Array.from(pre.childNodes)) {
      const parts = linesOf(child);
      lines[lines.length - 1].push(...parts[0]);
      for (const part of parts.slice(1)) lines.push(part);
    }
    if (lines.length > 1 && !lines[lines.length - 1].some(n => n.textContent)) lines.pop();  // the final newline
    pre.textContent = "";
    lines.forEach((nodes, i) => {
      const line = document.createElement("span");
      line.className = "hang-line";
      nodes.forEach(n => line.appendChild(n));
      const text = line.textContent;
      const indent = text.length - text.replace(/^[ \t]+/, "").length;
      line.style.setProperty("--indent", String(indent + HANG));
      line.appendChild(document.createTextNode("\n"));  // kept, so the copied text has its line breaks
      pre.appendChild(line);
    });
    pre.classList.add("hang-code");
  }

  function hangAll(root) {
    (root || document).querySelectorAll("div.cell div.cell_input pre, div.highlight pre").forEach(hang);
  }

  window.attentionCourseHangCode = hangAll;  // for the book's own tests (tests/test_book_walk.py)
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", () => hangAll());
  else hangAll();
})();
