// The report's trace browser (mai.dashboards.traces): filters and pages the JSON document #trace-data.
// A sample: {id, category, question, options, reference, error, image (index into data.images),
// o: {runIndex: [route, score, final, [[stage, genIndex], ...], error]}};
// a generation: [model, kind, text, prompt tokens, output tokens, seconds, finish]; a sparse-RT selection:
// [layer and delta, "selection", transferred text, reasoning tokens, tokens transferred, null, tokens kept].
// The filters and the open sample live in the URL fragment (#traces?run=ID&route=RT&sample=ID), so a view links.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("trace-data").textContent);
  const PAGE = 20;
  const STAGES = {s_large: "large S (MV1)", s_small: "small S (MV1)", r_small: "small R", s2_small: "small S2",
    select_rt: "selected reasoning (sparse RT)", rt_large: "large RT", single: "single", single_s2: "single S2"};
  const $ = (id) => document.getElementById(id);
  const controls = ["tf-run", "tf-route", "tf-category", "tf-correct", "tf-changed", "tf-a", "tf-b", "tf-search"];
  let page = 0;
  let matches = [];
  let opened = "";  // the sample the fragment names
  // fragment key -> [control, how the value is stored]: runs by id (indices change between reports)
  const STATE = {run: "tf-run", route: "tf-route", category: "tf-category", correct: "tf-correct", changed: "tf-changed",
    a: "tf-a", b: "tf-b", q: "tf-search"};
  const RUN_CONTROLS = new Set(["tf-run", "tf-a", "tf-b"]);

  function option(select, value, text) {
    const o = document.createElement("option");
    o.value = value;
    o.textContent = text;
    select.appendChild(o);
  }

  function element(tag, className, text) {
    const e = document.createElement(tag);
    if (className) e.className = className;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  function setUp() {
    option($("tf-run"), "", "any run");
    data.runs.forEach((run, i) => {
      const text = run.label + " (" + run.short + ", " + run.models + ")";
      option($("tf-run"), String(i), text);
      option($("tf-a"), String(i), text);
      option($("tf-b"), String(i), text);
    });
    $("tf-a").value = String(data.default_a);
    $("tf-b").value = String(data.default_b);
    [...new Set(data.samples.map((s) => s.category))].sort().forEach((c) => option($("tf-category"), c, c));
    controls.forEach((id) => $(id).addEventListener(id === "tf-search" ? "input" : "change", () => {
      page = 0;
      opened = "";
      update();
      saveState();
    }));
    $("tf-prev").addEventListener("click", () => { if (page > 0) { page -= 1; render(); } });
    $("tf-next").addEventListener("click", () => {
      if ((page + 1) * PAGE < matches.length) { page += 1; render(); }
    });
  }

  function stateParams(sample) {
    const params = new URLSearchParams();
    for (const [key, id] of Object.entries(STATE)) {
      const control = $(id);
      let value = control.type === "checkbox" ? (control.checked ? "1" : "") : control.value;
      if (value !== "" && RUN_CONTROLS.has(id)) value = data.runs[Number(value)].id;
      if (value !== "") params.set(key, value);
    }
    if (sample) params.set("sample", sample);
    return params;
  }

  function saveState() {
    history.replaceState(null, "", "#traces?" + stateParams(opened).toString());
  }

  function loadState() {
    if (!location.hash.startsWith("#traces?")) return;
    const params = new URLSearchParams(location.hash.slice("#traces?".length));
    for (const [key, id] of Object.entries(STATE)) {
      if (!params.has(key)) continue;
      const control = $(id);
      let value = params.get(key);
      if (RUN_CONTROLS.has(id)) value = String(data.runs.findIndex((r) => r.id === value));
      if (control.type === "checkbox") control.checked = value === "1";
      else control.value = value;
    }
    opened = params.get("sample") || "";
  }

  function outcomes(sample, run) {
    return run === "" ? Object.values(sample.o) : (sample.o[run] ? [sample.o[run]] : []);
  }

  function keep(sample) {
    const run = $("tf-run").value;
    const mine = outcomes(sample, run);
    if (run !== "" && mine.length === 0) return false;
    const route = $("tf-route").value;
    if (route && !mine.some((o) => o[0] === route)) return false;
    if ($("tf-category").value && sample.category !== $("tf-category").value) return false;
    const correct = $("tf-correct").value;
    if (correct === "right" && !mine.some((o) => o[1] !== null && o[1] >= 0.5)) return false;
    if (correct === "wrong" && !mine.some((o) => o[1] === null || o[1] < 0.5)) return false;
    if ($("tf-changed").checked) {
      const a = sample.o[$("tf-a").value];
      const b = sample.o[$("tf-b").value];
      if (!a || !b || a[1] === null || b[1] === null || a[1] === b[1]) return false;
    }
    const needle = $("tf-search").value.trim().toLowerCase();
    if (needle && !(sample.id.toLowerCase().includes(needle) || sample.question.toLowerCase().includes(needle))) {
      return false;
    }
    return true;
  }

  function update() {
    matches = data.samples.filter(keep);
    $("trace-count").textContent = String(matches.length);
    $("trace-count").dataset.count = String(matches.length);
    render();
  }

  function stageBlock(step) {
    const g = data.gens[step[1]];
    const block = element("div", "stage");
    const facts = [g[0], g[1]];
    const selection = g[1] === "selection";
    if (g[3] !== null) facts.push(g[3] + (selection ? " reasoning tokens" : " prompt tokens"));
    if (g[4] !== null) facts.push(g[4] + (selection ? " tokens transferred" : " output tokens"));
    if (g[5] !== null) facts.push(g[5].toFixed(3) + " s");
    if (g[6]) facts.push(g[6]);
    block.appendChild(element("div", "stage-head", (STAGES[step[0]] || step[0]) + ": " + facts.join(", ")));
    block.appendChild(element("pre", "stage-text", g[2]));
    return block;
  }

  function card(sample) {
    const run = $("tf-run").value;
    const box = element("article", "trace-card");
    box.dataset.sample = sample.id;
    const head = element("div", "trace-head");
    if (sample.image !== null && data.images[sample.image]) {
      const img = document.createElement("img");
      img.src = data.images[sample.image];
      img.alt = "image of " + sample.id;
      head.appendChild(img);
    }
    const text = element("div", "trace-question");
    const id = element("div", "trace-id", sample.id + " \u00b7 " + sample.category + " ");
    const link = element("a", "permalink", "link");
    link.href = "#traces?" + stateParams(sample.id).toString();
    link.addEventListener("click", (event) => {
      event.preventDefault();
      opened = sample.id;
      saveState();
      render();
    });
    id.appendChild(link);
    text.appendChild(id);
    text.appendChild(element("div", "", sample.question));
    sample.options.forEach((o, i) => text.appendChild(element("div", "option",
      String.fromCharCode(65 + i) + ". " + o)));
    text.appendChild(element("div", "reference", "reference: " + sample.reference));
    if (sample.error) text.appendChild(element("div", "warning", "error: " + sample.error));
    head.appendChild(text);
    box.appendChild(head);
    const shown = run === "" ? Object.keys(sample.o) : [run];
    shown.forEach((i) => {
      const o = sample.o[i];
      if (!o) return;
      const r = data.runs[Number(i)];
      const details = document.createElement("details");
      details.open = run !== "" || sample.id === opened;
      const score = o[1] === null ? "-" : o[1];
      const summary = element("summary", o[1] !== null && o[1] >= 0.5 ? "right" : "wrong",
        r.label + " (" + r.short + "): " + o[0] + ", answer " + (o[2] === null ? "(none)" : o[2]) +
        ", score " + score + (o[4] ? ", error " + o[4] : ""));
      details.appendChild(summary);
      o[3].forEach((step) => details.appendChild(stageBlock(step)));
      box.appendChild(details);
    });
    return box;
  }

  function render() {
    const list = $("trace-list");
    list.replaceChildren(...matches.slice(page * PAGE, (page + 1) * PAGE).map(card));
    $("tf-page").textContent = String(page + 1);
    $("tf-pages").textContent = String(Math.max(1, Math.ceil(matches.length / PAGE)));
    const linked = opened && list.querySelector('[data-sample="' + CSS.escape(opened) + '"]');
    if (linked) {
      linked.classList.add("linked");
      linked.scrollIntoView({block: "start"});
    }
  }

  setUp();
  loadState();
  matches = data.samples.filter(keep);
  const at = matches.findIndex((s) => s.id === opened);
  page = at >= 0 ? Math.floor(at / PAGE) : 0;
  $("trace-count").textContent = String(matches.length);
  $("trace-count").dataset.count = String(matches.length);
  render();
})();
