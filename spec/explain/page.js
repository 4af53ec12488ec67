// kachedb-radix explain: the step-through page's script (inlined by spec/explain/page.py).
//
// visibleTree() and layoutTree() repeat spec/explain/collapse.py and
// spec/explain/layout.py step for step (read their docstrings for the algorithms);
// the browser test checks that the page draws every node where the Python side does.
"use strict";
(function () {
  const DATA = JSON.parse(document.getElementById("explain-data").textContent);
  const K = DATA.constants;
  const CHANGE = new Set(K.changeFlags);
  const SVG_NS = "http://www.w3.org/2000/svg";
  const frames = DATA.frames;
  const state = { step: 0, expanded: new Set(), open: new Set(), views: {} };

  // ---------------------------------------------------------------- nodes
  const built = new Map();
  function node(index) {
    let found = built.get(index);
    if (found) return found;
    const row = DATA.nodes[index];
    found = {
      id: row.i, kind: row.k, lines: row.l, blocks: row.b || [], pins: row.p || null,
      stamps: row.s || null, key: row.y || null, flags: row.f || [],
      children: (row.c || []).map(node),
    };
    built.set(index, found);
    return found;
  }
  const isHot = (n) => n.kind === "ghost" || n.flags.some((flag) => CHANGE.has(flag));
  const textLength = (line) => Array.from(line).length;

  // An edge opened by a click lists its blocks: id, pins, stamp; a leaf's last block
  // also its eviction key under the tree's policy (R-POL-1).
  function labelLines(n) {
    if (n.kind !== "edge" || !state.open.has(n.id)) return n.lines;
    const cells = n.blocks.map((block, i) =>
      "#" + block + (n.pins ? " p" + n.pins[i] : "") + (n.stamps ? " t" + n.stamps[i] : ""));
    const rows = [];
    for (let i = 0; i < cells.length; i += 4) rows.push(cells.slice(i, i + 4).join("  "));
    if (n.key) rows.push("eviction key: " + n.key);
    return n.lines.concat(rows);
  }

  // ---------------------------------------------------------------- folding (collapse.py)
  function hotSubtrees(roots) {
    const hot = new Set();
    const visit = (n) => {
      let any = isHot(n);
      for (const child of n.children) any = visit(child) || any;
      if (any) hot.add(n.id);
      return any;
    };
    roots.forEach(visit);
    return hot;
  }
  function isSpine(n) {
    const goingOn = n.children.filter((kid) => kid.children.length > 0);
    return n.kind === "edge" && !isHot(n) && n.children.length >= 2 && goingOn.length === 1 &&
      !n.children.some((kid) => kid.children.length === 0 && isHot(kid));
  }
  function spineRun(n) {
    const run = [];
    while (isSpine(n)) {
      run.push(n);
      n = n.children.find((kid) => kid.children.length > 0);
    }
    return run;
  }
  function countBelow(nodes) {
    let count = 0, blocks = 0;
    const visit = (n) => { count += 1; blocks += n.blocks.length; n.children.forEach(visit); };
    nodes.forEach(visit);
    return [count, blocks];
  }
  function chainNode(first, run) {
    const end = run[run.length - 1].children.find((kid) => kid.children.length > 0);
    const leaves = [];
    run.forEach((n) => n.children.forEach((kid) => { if (kid.children.length === 0) leaves.push(kid); }));
    const blocks = run.concat(leaves).reduce((sum, n) => sum + n.blocks.length, 0);
    return {
      id: first.id + "/chain", kind: "chain", blocks: [], flags: [], children: [], continues: [end],
      lines: ["⋯ " + run.length + " levels", (run.length + leaves.length) + " nodes, " + blocks + " blocks", "click to open"],
    };
  }
  function moreNode(parent, hidden) {
    const [count, blocks] = countBelow(hidden);
    return {
      id: parent.id + "/more", kind: "more", blocks: [], flags: [], children: [],
      lines: ["+" + hidden.length + " more", count + " nodes, " + blocks + " blocks", "click to open"],
    };
  }
  function visibleTree(roots) {
    const hot = hotSubtrees(roots);
    const opened = new Set();
    const show = (n) => {
      const kids = n.kind === "chain" ? n.continues : n.children;
      let kept = kids, hidden = [];
      if (kids.length > K.fanout && !state.expanded.has(n.id + "/more")) {
        const keep = kids.filter((kid, i) => i < K.fanout - 1 || hot.has(kid.id));
        if (kids.length - keep.length >= 2) {
          kept = keep;
          hidden = kids.filter((kid) => !keep.includes(kid));
        }
      }
      const children = kept.map((kid) => {
        const run = opened.has(kid.id) ? [] : spineRun(kid);
        if (run.length >= K.chain && state.expanded.has(kid.id + "/chain")) run.forEach((r) => opened.add(r.id));
        return show(run.length >= K.chain && !opened.has(kid.id) ? chainNode(kid, run) : kid);
      });
      if (hidden.length) children.push({ node: moreNode(n, hidden), children: [] });
      return { node: n, children };
    };
    return roots.map(show);
  }

  // ---------------------------------------------------------------- tidy layout (layout.py)
  function box(lines) {
    const width = Math.max(0, ...lines.map(textLength)) * K.charW + 2 * K.padX;
    return [width, Math.max(lines.length, K.minLines) * K.lineH + 2 * K.padY];
  }
  function layoutTree(roots) {
    const top = { node: null, children: roots };
    const order = [];
    const walk = (shown, depth, up) => {
      order.push([shown, depth, up]);
      shown.children.forEach((child) => walk(child, depth + 1, shown));
    };
    walk(top, 0, null);
    const offsets = new Map(), contours = new Map();
    for (let i = order.length - 1; i >= 0; i--) {
      const shown = order[i][0];
      const width = shown === top ? 0 : box(labelLines(shown.node))[0];
      contours.set(shown, placeChildren(shown, width, offsets, contours));
    }
    const heights = new Map();
    let deepest = 1;
    for (const [shown, depth] of order) {
      if (shown === top) continue;
      heights.set(depth, Math.max(heights.get(depth) || 0, box(labelLines(shown.node))[1]));
      deepest = Math.max(deepest, depth);
    }
    const levelY = new Map([[1, K.margin]]);
    for (let depth = 2; depth <= deepest; depth++) {
      levelY.set(depth, levelY.get(depth - 1) + heights.get(depth - 1) + K.levelGap);
    }
    const placed = [], where = new Map(), centre = new Map([[top, 0]]);
    for (const [shown, depth, up] of order) {
      if (shown === top) {
        shown.children.forEach((child) => centre.set(child, offsets.get(child)));
        continue;
      }
      const x = centre.get(shown);
      shown.children.forEach((child) => centre.set(child, x + offsets.get(child)));
      const [width, height] = box(labelLines(shown.node));
      const item = { shown, x, y: levelY.get(depth), width, height, depth, parent: where.get(up) || null };
      where.set(shown, item);
      placed.push(item);
    }
    if (!placed.length) return [placed, 2 * K.margin, 2 * K.margin];
    const left = Math.min(...placed.map((p) => p.x - p.width / 2));
    placed.forEach((p) => { p.x += K.margin - left; });
    const right = Math.max(...placed.map((p) => p.x + p.width / 2));
    const bottom = Math.max(...placed.map((p) => p.y + p.height));
    return [placed, right + K.margin, bottom + K.margin];
  }
  function placeChildren(shown, width, offsets, contours) {
    const own = [-width / 2, width / 2];
    if (!shown.children.length) return [own];
    const placed = contours.get(shown.children[0]).map((level) => level.slice());
    const shifts = [0];
    for (const child of shown.children.slice(1)) {
      const contour = contours.get(child);
      const shared = Math.min(placed.length, contour.length);
      let most = -Infinity;
      for (let d = 0; d < shared; d++) most = Math.max(most, placed[d][1] - contour[d][0]);
      const shift = most + K.gap;
      shifts.push(shift);
      contour.forEach(([left, right], d) => {
        if (d < placed.length) placed[d][1] = right + shift;
        else placed.push([left + shift, right + shift]);
      });
    }
    const middle = (shifts[0] + shifts[shifts.length - 1]) / 2;
    shown.children.forEach((child, i) => offsets.set(child, shifts[i] - middle));
    return [own].concat(placed.map(([left, right]) => [left - middle, right - middle]));
  }

  // ---------------------------------------------------------------- drawing (svg.py)
  const fmt = (value) => String(+value.toFixed(2));
  function el(name, attrs, parent) {
    const e = document.createElementNS(SVG_NS, name);
    for (const key in attrs) e.setAttribute(key, attrs[key]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function drawTree(svg, roots) {
    svg.replaceChildren();
    const [placed, width, height] = layoutTree(visibleTree(roots));
    const links = el("g", { class: "links" }, svg), nodes = el("g", { class: "nodes" }, svg);
    for (const p of placed) {
      const n = p.shown.node;
      if (p.parent) {
        const bottom = p.parent.y + p.parent.height, middle = fmt((p.y + bottom) / 2);
        el("path", {
          class: "link" + (n.kind === "ghost" ? " ghost" : ""),
          d: "M" + fmt(p.parent.x) + "," + fmt(bottom) + " C" + fmt(p.parent.x) + "," + middle +
            " " + fmt(p.x) + "," + middle + " " + fmt(p.x) + "," + fmt(p.y),
        }, links);
      }
      const flags = n.flags.join(" ");
      const g = el("g", {
        class: "node " + n.kind + (flags ? " " + flags : ""), "data-node": n.id, "data-kind": n.kind,
        "data-blocks": n.blocks.join(" "), "data-flags": flags, "data-x": fmt(p.x), "data-y": fmt(p.y),
        transform: "translate(" + fmt(p.x - p.width / 2) + "," + fmt(p.y) + ")",
      }, nodes);
      el("rect", { width: fmt(p.width), height: fmt(p.height), rx: 5 }, g);
      const text = el("text", {}, g);
      labelLines(n).forEach((line, i) => {
        el("tspan", { x: K.padX, y: K.padY + K.lineH * (i + 1) - 3 }, text).textContent = line;
      });
      const opens = n.kind === "edge" && (n.blocks.length > 1 || n.key);  // a leaf: its key
      if (n.kind === "more" || n.kind === "chain" || opens) {
        g.classList.add("clickable");
        g.addEventListener("click", (event) => { event.stopPropagation(); toggle(n); });
      }
    }
    return [width, height];
  }
  function toggle(n) {
    if (n.kind === "edge") {
      state.open.has(n.id) ? state.open.delete(n.id) : state.open.add(n.id);
    } else {
      state.expanded.add(n.id);
    }
    render();
  }
  function drawPool(svg, pool) {
    svg.replaceChildren();
    if (!pool) return;
    const pitch = K.cell + K.cellGap, size = pool.s.length;
    const width = Math.min(size, K.poolColumns) * pitch;
    const height = Math.max(1, Math.ceil(size / K.poolColumns)) * pitch;
    svg.setAttribute("viewBox", "0 0 " + width + " " + height);
    svg.setAttribute("width", width);
    svg.setAttribute("height", height);
    const changed = new Map();
    for (const change of K.poolChanges) {
      for (const block of pool[change] || []) changed.set(block, (changed.get(block) || []).concat([change]));
    }
    for (let block = 0; block < size; block++) {
      const stateName = K.states[pool.s[block]], changes = changed.get(block) || [];
      const names = [stateName].concat(changes).join(" ");
      const cell = el("rect", {
        class: "cell " + names, "data-block": block, "data-state": stateName,
        "data-change": changes.join(" "), x: (block % K.poolColumns) * pitch,
        y: Math.floor(block / K.poolColumns) * pitch, width: K.cell, height: K.cell,
      }, svg);
      el("title", {}, cell).textContent = "#" + block + " " + names;
    }
  }

  // ---------------------------------------------------------------- pan and zoom
  function frameSize(view) {
    const box = view.frame.getBoundingClientRect();
    return [box.width || 800, box.height || 500];
  }
  function fitView(view) {
    const [frameW, frameH] = frameSize(view);
    view.scale = Math.max(Math.min(1, frameW / view.width, frameH / view.height), 0.05);
    view.x = Math.min(0, (view.width - frameW / view.scale) / 2);
    view.y = 0;
    applyView(view);
  }
  // Show what the step changed, at a legible scale; the whole tree when it fits.
  function focusView(view) {
    const [frameW, frameH] = frameSize(view);
    if (view.width <= frameW && view.height <= frameH) return fitView(view);
    let nodes = Array.from(view.svg.querySelectorAll("g.node")).filter((g) =>
      g.dataset.kind === "ghost" || g.dataset.flags.split(" ").some((flag) => CHANGE.has(flag)));
    if (!nodes.length) nodes = Array.from(view.svg.querySelectorAll("g.node")).slice(0, 1);
    if (!nodes.length) return fitView(view);
    const boxes = nodes.map((g) => {
      const rect = g.querySelector("rect");
      const w = +rect.getAttribute("width"), h = +rect.getAttribute("height");
      return [+g.dataset.x - w / 2, +g.dataset.y, +g.dataset.x + w / 2, +g.dataset.y + h];
    });
    const left = Math.min(...boxes.map((b) => b[0])), right = Math.max(...boxes.map((b) => b[2]));
    const top = Math.min(...boxes.map((b) => b[1])), bottom = Math.max(...boxes.map((b) => b[3]));
    const wanted = Math.min(frameW / (right - left + 40), frameH / (bottom - top + 40));
    view.scale = Math.min(1, Math.max(0.8, wanted));
    // All of it when it fits at a legible scale; else from its left end (pan for the rest).
    view.x = wanted >= 0.8 ? (left + right) / 2 - frameW / 2 / view.scale : left - 20;
    view.y = bottom + 30 <= frameH / view.scale ? 0 : top - 30 / view.scale;
    applyView(view);
  }
  function applyView(view) {
    const [frameW, frameH] = frameSize(view);
    const w = frameW / view.scale, h = frameH / view.scale;
    view.svg.setAttribute("viewBox", [view.x, view.y, w, h].map(fmt).join(" "));
    view.svg.setAttribute("width", "100%");
    view.svg.setAttribute("height", "100%");
    view.svg.dataset.scale = fmt(view.scale);
  }
  function zoom(view, factor, cx, cy) {
    const [frameW, frameH] = frameSize(view);
    const px = cx === undefined ? frameW / 2 : cx, py = cy === undefined ? frameH / 2 : cy;
    const worldX = view.x + px / view.scale, worldY = view.y + py / view.scale;
    view.scale = Math.min(4, Math.max(0.05, view.scale * factor));
    view.x = worldX - px / view.scale;
    view.y = worldY - py / view.scale;
    view.touched = true;
    applyView(view);
  }
  function panZoom(view) {
    const frame = view.frame;
    frame.addEventListener("wheel", (event) => {
      event.preventDefault();
      const box = frame.getBoundingClientRect();
      zoom(view, event.deltaY < 0 ? 1.15 : 1 / 1.15, event.clientX - box.left, event.clientY - box.top);
    }, { passive: false });
    let drag = null;
    frame.addEventListener("pointerdown", (event) => {
      if (event.target.closest && event.target.closest("g.clickable")) return;
      drag = { x: event.clientX, y: event.clientY, vx: view.x, vy: view.y };
      frame.setPointerCapture(event.pointerId);
    });
    frame.addEventListener("pointermove", (event) => {
      if (!drag) return;
      view.x = drag.vx - (event.clientX - drag.x) / view.scale;
      view.y = drag.vy - (event.clientY - drag.y) / view.scale;
      view.touched = true;
      applyView(view);
    });
    frame.addEventListener("pointerup", () => { drag = null; });
  }

  // ---------------------------------------------------------------- panels
  const sides = document.getElementById("sides");
  function panel(name, index) {
    const section = document.createElement("section");
    section.className = "side";
    section.dataset.side = name;
    section.innerHTML =
      '<h2></h2><p class="outcome"></p><p class="side-note" hidden></p>' +
      '<div class="pool-frame"></div>' +
      '<div class="tree-frame"><div class="zoom"><button class="zoom-in" title="zoom in (+)">+</button>' +
      '<button class="zoom-out" title="zoom out (−)">−</button><button class="zoom-fit" title="fit (0)">fit</button></div></div>' +
      '<div class="explain"><div class="rules-box"><h3>rules that decided it</h3><ul class="rules"></ul></div>' +
      '<div class="why-box"><h3>why</h3><div class="why"></div></div></div>';
    section.querySelector("h2").textContent = index === 0 ? name + " (the spec)" : name;
    const pool = el("svg", { class: "pool" }, section.querySelector(".pool-frame"));
    const frame = section.querySelector(".tree-frame");
    const svg = el("svg", { class: "tree", "data-side": name }, frame);
    const view = { svg, frame, scale: 1, x: 0, y: 0, width: 0, height: 0, touched: false, pool, section };
    section.querySelector(".zoom-in").addEventListener("click", () => zoom(view, 1.25));
    section.querySelector(".zoom-out").addEventListener("click", () => zoom(view, 0.8));
    section.querySelector(".zoom-fit").addEventListener("click", () => { view.touched = true; fitView(view); });
    panZoom(view);
    sides.appendChild(section);
    return view;
  }
  const views = DATA.names.map(panel);
  document.body.classList.toggle("side-by-side", views.length > 1);

  function fillSide(view, side, frame) {
    const section = view.section;
    section.querySelector(".outcome").textContent = side.step + "  →  " + side.outcome;
    section.classList.toggle("failed", !side.ok);
    const note = section.querySelector(".side-note");
    note.hidden = !side.note;
    note.textContent = side.note || "";
    const rules = section.querySelector(".rules");
    rules.replaceChildren();
    for (const [rule, reason] of side.rules) {
      const item = document.createElement("li");
      const link = document.createElement("a");
      link.href = "#rule-" + rule;
      link.className = "rule";
      link.dataset.rule = rule;
      link.textContent = rule;
      item.append(link, " " + reason);
      rules.appendChild(item);
    }
    const why = section.querySelector(".why");
    why.replaceChildren();
    for (const [title, lines] of side.why) {
      const part = document.createElement("div");
      part.className = "why-part";
      const head = document.createElement("h4");
      head.textContent = title;
      const body = document.createElement("pre");
      body.textContent = lines.join("\n");
      part.append(head, body);
      why.appendChild(part);
    }
    drawPool(view.pool, side.pool);
    const [width, height] = drawTree(view.svg, side.tree.map(node));
    view.width = width;
    view.height = height;
    view.svg.dataset.step = String(frame.number - 1);
    view.svg.dataset.width = fmt(width);
    view.svg.dataset.height = fmt(height);
    if (!view.touched) focusView(view); else applyView(view);
  }

  // ---------------------------------------------------------------- stepping
  const slider = document.getElementById("slider");
  const counter = document.getElementById("counter");
  function render() {
    const frame = frames[state.step];
    document.body.dataset.step = String(state.step);
    slider.value = String(state.step);
    counter.textContent = "step " + (state.step + 1) + " of " + frames.length +
      (frame.trace ? " · trace " + frame.trace : "");
    const note = document.getElementById("step-note");
    note.textContent = frame.note || "";
    const diff = document.getElementById("step-diff");
    diff.hidden = frame.differs === null || frame.differs === undefined;
    document.body.classList.toggle("differs", !diff.hidden);
    if (!diff.hidden) {
      const first = DATA.firstDifference === state.step ? "first difference: " : "differs: ";
      diff.textContent = "≠ " + first + DATA.names[1] + " parts ways with the reference at " + frame.differs +
        (frame.finding ? " — " + frame.finding : "");
    }
    diff.classList.toggle("safety", Boolean(frame.safety));
    const waived = document.getElementById("step-waived");
    waived.hidden = !frame.waived;
    waived.textContent = frame.waived ? "≈ not marked: " + frame.waived : "";
    frame.sides.forEach((side, i) => fillSide(views[i], side, frame));
    document.querySelectorAll("#ticks .tick").forEach((tick) => {
      tick.classList.toggle("current", +tick.dataset.step === state.step);
    });
  }
  function go(step) {
    state.step = Math.max(0, Math.min(frames.length - 1, step));
    views.forEach((view) => { view.touched = false; });
    render();
  }
  const ticks = document.getElementById("ticks");
  frames.forEach((frame, i) => {
    const tick = document.createElement("span");
    tick.className = "tick" + (frame.differs ? " diff" : "") + (frame.waived ? " waived" : "") + (i === DATA.firstDifference ? " first" : "");
    tick.dataset.step = String(i);
    tick.title = "step " + (i + 1) + (frame.note ? ": " + frame.note : "");
    tick.addEventListener("click", () => go(i));
    ticks.appendChild(tick);
  });
  const jump = document.getElementById("jump-diff");
  jump.hidden = DATA.firstDifference === null;
  jump.addEventListener("click", () => go(DATA.firstDifference));
  document.getElementById("prev").addEventListener("click", () => go(state.step - 1));
  document.getElementById("next").addEventListener("click", () => go(state.step + 1));
  document.getElementById("fold").addEventListener("click", foldAll);
  slider.addEventListener("input", () => go(+slider.value));
  function foldAll() {
    state.expanded.clear();
    state.open.clear();
    render();
  }
  const ruleView = document.getElementById("rule-view");
  document.getElementById("rule-close").addEventListener("click", () => { ruleView.hidden = true; });
  document.addEventListener("click", (event) => {
    const link = event.target.closest && event.target.closest("a.rule");
    if (!link) return;
    const text = document.getElementById("rule-" + link.dataset.rule);
    if (!text) return;
    event.preventDefault();
    document.getElementById("rule-body").innerHTML = text.innerHTML;
    ruleView.dataset.rule = link.dataset.rule;
    ruleView.hidden = false;
  });
  document.addEventListener("keydown", (event) => {
    if (event.target === slider && (event.key === "ArrowLeft" || event.key === "ArrowRight")) {
      event.preventDefault();
    }
    const actions = {
      ArrowLeft: () => go(state.step - 1), ArrowRight: () => go(state.step + 1),
      Home: () => go(0), End: () => go(frames.length - 1),
      d: () => { if (DATA.firstDifference !== null) go(DATA.firstDifference); },
      c: foldAll, Escape: () => { ruleView.hidden = true; },
      "+": () => views.forEach((view) => zoom(view, 1.25)),
      "-": () => views.forEach((view) => zoom(view, 0.8)),
      0: () => views.forEach((view) => { view.touched = true; fitView(view); }),
    };
    const action = actions[event.key];
    if (action) {
      event.preventDefault();
      action();
    }
  });
  go(0);
})();
