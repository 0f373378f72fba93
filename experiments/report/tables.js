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
  // a cell as data: its raw number where the page has one (data-v), else its whole text (a
  // folded text's body, not its summary), whatever the window's width shows
  function raw(c) {
    if (c.dataset.v !== undefined) return c.dataset.v;
    const whole = c.cloneNode(true);
    whole.querySelectorAll("summary").forEach((s) => s.remove());
    return whole.textContent.replace(/\s+/g, " ").trim();
  }
  function csv(table) {
    const q = (t) => '"' + t.replace(/"/g, '""') + '"';
    return Array.from(table.rows).map((r) => Array.from(r.cells).map((c) => q(raw(c))).join(",")).join("\n");
  }
  document.querySelectorAll("table.data").forEach(function (table, n) {
    const head = table.tHead ? table.tHead.rows[0] : table.rows[0];
    const body = table.tBodies[0];
    // a column with nothing in it is left out at every width (the CSV keeps it)
    const empty = Array.from(head.cells).map((c, i) => body.rows.length > 0 &&
      Array.from(body.rows).every((r) => !r.cells[i] || !r.cells[i].textContent.trim()));
    Array.from(table.rows).forEach((r) => Array.from(r.cells).forEach((c, i) => { if (empty[i]) c.classList.add("empty"); }));
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
          const num = (c, t) => c && c.dataset.v !== undefined ? parseFloat(c.dataset.v) : value(t);
          const vx = num(a.cells[i], x), vy = num(b.cells[i], y);
          const c = vx !== null && vy !== null ? vx - vy : x.localeCompare(y);
          return down ? c : -c;
        });
        rows.forEach((r) => body.appendChild(r));
      };
    });
  });
})();
// The interactive roofline's legend: a renderer shows while every box that holds it is ticked
// (its entry, its kind of point); a system's own box ticks or unticks all its entries.
(function () {
  const boxes = Array.from(document.querySelectorAll(".rl-legend input[data-names]"));
  const holders = {};
  boxes.forEach((b) => b.dataset.names.split(" ").forEach((n) => { (holders[n] = holders[n] || []).push(b); }));
  function apply(names) {
    if (!window.Bokeh) return;
    names.forEach(function (n) {
      const on = holders[n].every((b) => b.checked);
      Bokeh.documents.forEach(function (doc) {
        const m = doc.get_model_by_name(n);
        if (m) m.visible = on;
      });
    });
  }
  boxes.forEach((b) => b.addEventListener("change", () => apply(b.dataset.names.split(" "))));
  document.querySelectorAll(".rl-legend input.all").forEach(function (all) {
    all.addEventListener("change", function () {
      const mine = Array.from(all.closest("fieldset").querySelectorAll("input[data-names]"));
      mine.forEach((b) => { b.checked = all.checked; });
      apply(mine.flatMap((b) => b.dataset.names.split(" ")));
    });
  });
})();
