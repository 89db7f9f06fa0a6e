// The gallery index: sort the variants and each results table by a column, filter
// the variants by tag / architecture / tokenizer / name. Everything is in the page
// already, so it works from file://.
"use strict";
(function () {
  // Clicking a heading sorts by its column, ascending then descending; cells hold
  // their value in data-value, and a row without a number stays last either way.
  function sortable(table) {
    const body = table.tBodies[0];
    const rows = Array.from(body.rows);
    Array.from(table.tHead.rows[0].cells).forEach(function (header, column) {
      if (!header.classList.contains("sortable")) return;
      header.addEventListener("click", function () {
        const ascending = header.dataset.order !== "ascending";
        for (const other of table.tHead.rows[0].cells) delete other.dataset.order;
        header.dataset.order = ascending ? "ascending" : "descending";
        const numeric = header.dataset.type === "number";
        const key = function (row) {
          const raw = row.cells[column].dataset.value;
          return numeric ? (raw === "" ? Infinity : parseFloat(raw)) : raw;
        };
        const sorted = rows.slice().sort(function (a, b) {
          const x = key(a), y = key(b);
          if (numeric) {
            if (x === Infinity || y === Infinity) return (x === Infinity) - (y === Infinity);
            return ascending ? x - y : y - x;
          }
          return ascending ? x.localeCompare(y) : y.localeCompare(x);
        });
        for (const row of sorted) body.appendChild(row);
      });
    });
  }

  document.querySelectorAll("table.results").forEach(sortable);
  const table = document.getElementById("variants");
  if (!table) return;
  sortable(table);
  const rows = Array.from(table.tBodies[0].rows);
  const selects = Array.from(document.querySelectorAll(".filters select"));
  const nameFilter = document.getElementById("filter-name");
  const count = document.getElementById("shown-count");

  function applyFilters() {
    const text = nameFilter.value.trim().toLowerCase();
    let shown = 0;
    for (const row of rows) {
      let visible = row.dataset.name.includes(text);
      for (const select of selects) {
        const wanted = select.value;
        if (!wanted) continue;
        const values = select.dataset.key === "tags" ? row.dataset.tags.split(" ") : [row.dataset[select.dataset.key]];
        if (!values.includes(wanted)) visible = false;
      }
      row.hidden = !visible;
      if (visible) shown += 1;
    }
    count.textContent = shown + " of " + rows.length + " shown";
  }

  selects.forEach(function (s) { s.addEventListener("change", applyFilters); });
  nameFilter.addEventListener("input", applyFilters);
  applyFilters();
})();
