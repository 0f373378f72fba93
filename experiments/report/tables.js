// Chinese text where the reader's browser has no CJK font would draw as empty boxes: then it is
// hidden, with a note. (A glyph a font lacks is drawn as the same box whatever the character.)
(function () {
  function pixels(text) {
    const canvas = document.createElement("canvas");
    canvas.width = canvas.height = 24;
    const c = canvas.getContext("2d");
    c.font = getComputedStyle(document.body).fontSize + " " + getComputedStyle(document.body).fontFamily;
    c.fillText(text, 2, 20);
    return Array.from(c.getImageData(0, 0, 24, 24).data).join(",");
  }
  if (pixels("\u7406") === pixels("\uE000")) {  // 理 drawn as the box of a private-use code point
    document.querySelectorAll('[lang="zh"]').forEach((e) => { e.hidden = true; });
    const note = document.getElementById("no-cjk");
    if (note) note.hidden = false;
  }
})();
// Every table.data: sort on a click on its header (numbers with SI prefixes as numbers), a CSV
// of what it shows, and at narrow widths its optional columns (th.opt) behind "all columns".
(function () {
  const PREFIX = {P: 1e15, T: 1e12, G: 1e9, M: 1e6, k: 1e3, m: 1e-3, "µ": 1e-6, n: 1e-9};
  function value(text) {
    const m = text.trim().match(/^([-+]?[\d,]*\.?\d+)\s*([PTGMkmµn]?)/);
    if (!m) return null;
    const v = parseFloat(m[1].replace(/,/g, ""));
    return m[2] && /^[PTGMkmµn][A-Za-z\/]/.test(text.trim().slice(m[0].length - 1)) ? v * PREFIX[m[2]] : v;
  }
  function csv(table) {
    const q = (t) => '"' + t.replace(/\s+/g, " ").trim().replace(/"/g, '""') + '"';
    return Array.from(table.rows).map((r) => Array.from(r.cells).map((c) => q(c.innerText)).join(",")).join("\n");
  }
  document.querySelectorAll("table.data").forEach(function (table, n) {
    const head = table.tHead ? table.tHead.rows[0] : table.rows[0];
    const body = table.tBodies[0];
    const opt = Array.from(head.cells).map((c) => c.classList.contains("opt"));
    Array.from(table.rows).forEach((r) => Array.from(r.cells).forEach((c, i) => { if (opt[i]) c.classList.add("opt"); }));
    const bar = document.createElement("div");
    bar.className = "tablebar";
    const save = document.createElement("button");
    save.textContent = "CSV";
    save.title = "save this table as CSV";
    save.onclick = function () {
      const a = document.createElement("a");
      a.href = URL.createObjectURL(new Blob([csv(table)], {type: "text/csv"}));
      a.download = (table.dataset.name || "table-" + n) + ".csv";
      a.click();
    };
    bar.appendChild(save);
    if (opt.some(Boolean)) {
      const all = document.createElement("button");
      all.className = "allcols";
      all.textContent = "all columns";
      all.onclick = function () { table.classList.toggle("all"); };
      bar.appendChild(all);
    }
    table.parentNode.insertBefore(bar, table);
    Array.from(head.cells).forEach(function (th, i) {
      th.classList.add("sortable");
      th.title = "sort";
      th.onclick = function () {
        const down = th.dataset.sorted !== "up";
        Array.from(head.cells).forEach((c) => delete c.dataset.sorted);
        th.dataset.sorted = down ? "up" : "down";
        const rows = Array.from(body.rows).filter((r) => r !== head);
        rows.sort(function (a, b) {
          const x = a.cells[i] ? a.cells[i].innerText : "", y = b.cells[i] ? b.cells[i].innerText : "";
          const vx = value(x), vy = value(y);
          const c = vx !== null && vy !== null ? vx - vy : x.localeCompare(y);
          return down ? c : -c;
        });
        rows.forEach((r) => body.appendChild(r));
      };
    });
  });
})();
