// kachedb-radix explain: the step-through page's script (inlined by spec/explain/page.py).
//
// visibleTree() and layoutTree() repeat spec/explain/collapse.py and
// spec/explain/layout.py step for step (read their docstrings for the algorithms);
// the browser test checks that the page draws every node where the Python side does.
//
// What only a browser adds: stepping (keys, slider, ticks, #step=N links), play/pause at
// a chosen speed, sub-steps inside one operation (spec/explain/substeps.py), animated
// transitions between steps (nodes move, a split's halves slide apart, evicted blocks
// fade), "follow" (the view frames what the step changed, folding what did not when the
// change is spread wide), a minimap, opening folds and edges, pan and zoom, refit on
// resize. The playground (spec/explain/serve.py) reloads the data through
// window.kachedbExplain.load().
"use strict";
(function () {
  const SVG_NS = "http://www.w3.org/2000/svg";
  let DATA = JSON.parse(document.getElementById("explain-data").textContent);
  let K = DATA.constants;
  let CHANGE = new Set(K.changeFlags);
  let frames = DATA.frames;
  const quiet = window.matchMedia && window.matchMedia("(prefers-reduced-motion: reduce)").matches;
  const state = {
    step: 0, sub: -1, expanded: new Set(), open: new Set(), playing: false, speed: 1,
    subs: false, follow: true, animate: !quiet, minor: false, adopted: new Set(), timer: null,
  };
  const BASE_MS = 1400;  // one step (or sub-step) at speed 1

  // ---------------------------------------------------------------- nodes
  let built = new Map();
  function node(index) {
    let found = built.get(index);
    if (found) return found;
    const row = DATA.nodes[index];
    found = {
      id: row.i, kind: row.k, lines: row.l, blocks: row.b || [], pins: row.p || null,
      stamps: row.s || null, key: row.y || null, flags: row.f || [], diff: row.d || null,
      tokens: row.t === undefined ? null : DATA.tokens[row.t],
      children: (row.c || []).map(node),
    };
    built.set(index, found);
    return found;
  }
  const isHot = (n) => n.kind === "ghost" || n.flags.some((flag) => CHANGE.has(flag));
  const textLength = (line) => Array.from(line).length;
  // An edge opened by a click lists its blocks: id, pins, stamp and tokens; a leaf's
  // last block also its eviction key under the tree's policy (R-POL-1).
  function labelLines(n) {
    if (n.kind !== "edge" || !state.open.has(n.id)) return n.lines;
    const size = n.tokens ? n.tokens.length / n.blocks.length : 0;
    const rows = n.blocks.map((block, i) =>
      "#" + block + (n.pins ? " p" + n.pins[i] : "") + (n.stamps ? " t" + n.stamps[i] : "") +
      (n.tokens ? " [" + n.tokens.slice(i * size, (i + 1) * size).join(" ") + "]" : ""));
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
  const moreId = (parent, pages) => pages === 0 ? parent + "/more" : parent + "/more" + (pages + 1);
  function pagesOf(parent) {
    let pages = 0;
    while (state.expanded.has(moreId(parent, pages))) pages += 1;
    return pages;
  }
  function moreNode(parent, hidden, pages) {
    const [count, blocks] = countBelow(hidden);
    return {
      id: moreId(parent.id, pages), kind: "more", blocks: [], flags: [], children: [],
      lines: ["+" + hidden.length + " more", count + " nodes, " + blocks + " blocks",
        "click: " + Math.min(K.fanout, hidden.length) + " more"],
    };
  }
  function fanOut(n, kids, hot, focus) {
    const changed = kids.filter((kid) => hot.has(kid.id));
    const focused = focus && changed.length > 0 && kids.length - changed.length >= 2;
    if (kids.length <= K.fanout && !focused) return [kids, []];
    let kept;
    if (focused) {
      kept = changed;
    } else {
      kept = kids.filter((kid, i) => i < K.fanout - 1 || hot.has(kid.id));
      if (kids.length - kept.length < 2) return [kids, []];
    }
    const shown = new Set(kept);
    let hidden = kids.filter((kid) => !shown.has(kid));
    const opened = pagesOf(n.id) * K.fanout;
    if (opened) {
      const revealed = new Set(hidden.slice(0, opened));
      kept = kids.filter((kid) => shown.has(kid) || revealed.has(kid));
      hidden = hidden.slice(opened);
      if (hidden.length < 2) return [kids, []];
    }
    return [kept, hidden];
  }
  function visibleTree(roots, focus) {
    const hot = hotSubtrees(roots);
    const opened = new Set();
    const show = (n) => {
      const kids = n.kind === "chain" ? n.continues : n.children;
      const [kept, hidden] = fanOut(n, kids, hot, focus);
      const children = kept.map((kid) => {
        const run = opened.has(kid.id) ? [] : spineRun(kid);
        if (run.length >= K.chain && state.expanded.has(kid.id + "/chain")) run.forEach((r) => opened.add(r.id));
        return show(run.length >= K.chain && !opened.has(kid.id) ? chainNode(kid, run) : kid);
      });
      if (hidden.length) children.push({ node: moreNode(n, hidden, pagesOf(n.id)), children: [] });
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
    const pending = [[top, 0, null]];
    while (pending.length) {
      const [shown, depth, up] = pending.pop();
      order.push([shown, depth, up]);
      for (let i = shown.children.length - 1; i >= 0; i--) pending.push([shown.children[i], depth + 1, shown]);
    }
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
    let left = Infinity, right = -Infinity, bottom = -Infinity;
    for (const p of placed) left = Math.min(left, p.x - p.width / 2);
    for (const p of placed) {
      p.x += K.margin - left;
      right = Math.max(right, p.x + p.width / 2);
      bottom = Math.max(bottom, p.y + p.height);
    }
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
  // What a node's badge says: the changes a flag records, in words.
  const BADGES = [
    ["new", "new"], ["grown", "grown"], ["split", "split"], ["merged", "merged"],
    ["trimmed", "trimmed"], ["pin+", "+pin"], ["pin-", "−pin"], ["differs", "≠"],
    ["differs-stamp", "≠ t"],
  ];
  function hotBox(placed, highlight) {
    let box = null;
    for (const p of placed) {
      const n = p.shown.node;
      const wanted = highlight && highlight.size ? highlight.has(n.id) : isHot(n);
      if (!wanted) continue;
      const b = [p.x - p.width / 2, p.y - 14, p.x + p.width / 2, p.y + p.height];
      box = box ? [Math.min(box[0], b[0]), Math.min(box[1], b[1]), Math.max(box[2], b[2]), Math.max(box[3], b[3])] : b;
    }
    return box;
  }
  function arrange(view, roots, highlight) {
    // Follow: when what changed does not fit the view legibly, fold what did not change.
    let [placed, width, height] = layoutTree(visibleTree(roots, false));
    let focus = false;
    if (state.follow) {
      const [frameW, frameH] = frameSize(view);
      const wanted = hotBox(placed, highlight);
      if (wanted && (wanted[2] - wanted[0] + 40 > frameW / 0.8 || wanted[3] - wanted[1] + 40 > frameH / 0.8)) {
        focus = true;
        [placed, width, height] = layoutTree(visibleTree(roots, true));
      }
    }
    return [placed, width, height, focus];
  }
  function drawTree(view, roots, highlight, animate) {
    const svg = view.svg;
    const [placed, width, height, focus] = arrange(view, roots, highlight);
    svg.replaceChildren();
    const links = el("g", { class: "links" }, svg), nodes = el("g", { class: "nodes" }, svg);
    const duration = BASE_MS * 0.35 / state.speed;
    const last = view.last, lastBlocks = view.lastBlocks;
    const positions = new Map(), blockPositions = new Map();
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
        class: "node " + n.kind + (flags ? " " + flags : "") + (highlight && highlight.has(n.id) ? " focus" : ""),
        "data-node": n.id, "data-kind": n.kind,
        "data-blocks": n.blocks.join(" "), "data-flags": flags, "data-x": fmt(p.x), "data-y": fmt(p.y),
        transform: "translate(" + fmt(p.x - p.width / 2) + "," + fmt(p.y) + ")",
      }, nodes);
      if (n.diff) g.dataset.diff = n.diff;
      const body = el("g", { class: "body" }, g);
      el("rect", { width: fmt(p.width), height: fmt(p.height), rx: 5 }, body);
      const text = el("text", {}, body);
      labelLines(n).forEach((line, i) => {
        if (i) text.append(" ");  // (between the lines, for the text as read: not drawn)
        el("tspan", { x: K.padX, y: K.padY + K.lineH * (i + 1) - 3 }, text).textContent = line;
      });
      const marks = BADGES.filter(([flag]) => n.flags.includes(flag)).map(([, word]) => word);
      if (marks.length) {
        body.append(" ");
        const badge = el("text", { class: "badge", x: fmt(p.width - 4), y: -4, "text-anchor": "end" }, body);
        badge.textContent = marks.join(" · ");
      }
      // What it is, its marks and how it differs: said in the line under the tree when the
      // pointer or the keyboard is on it (and its accessible name).
      // (a path, not a rect: the stylesheet's node rules style every rect of a node)
      el("path", { class: "focus-ring", d: "M-4,-4h" + fmt(p.width + 8) + "v" + fmt(p.height + 8) + "h" + fmt(-p.width - 8) + "z" }, g);
      // Every node is reached by Tab; a fold or an edge opens with Enter or Space too.
      g.setAttribute("tabindex", "0");
      const [seen, ...what] = describeNode(n);
      g.setAttribute("aria-label", [seen + (marks.length ? " " + marks.join(" · ") : ""), ...what].join("; "));
      const opens = n.kind === "edge" && (n.blocks.length > 1 || n.key || n.tokens);
      if (n.kind === "more" || n.kind === "chain" || opens) {
        g.classList.add("clickable");
        g.setAttribute("role", "button");
        if (n.kind === "edge") g.setAttribute("aria-expanded", String(state.open.has(n.id)));
        g.addEventListener("click", (event) => { event.stopPropagation(); toggle(n); });
        g.addEventListener("keydown", (event) => {
          if (event.key !== "Enter" && event.key !== " ") return;
          event.preventDefault();
          event.stopPropagation();
          toggle(n);
        });
      } else {
        g.setAttribute("role", "img");
      }
      g.addEventListener("focus", () => {
        showNode(view, n);
        if (g.matches(":focus-visible")) bringIntoView(view, p);  // by keyboard, not a click
      });
      g.addEventListener("mouseenter", () => showNode(view, n));
      positions.set(n.id, { x: p.x, y: p.y });
      if (n.blocks.length && n.kind !== "ghost") blockPositions.set(n.blocks[0], { x: p.x, y: p.y });
      if (animate && last) {
        const from = last.get(n.id) || (n.blocks.length && lastBlocks.get(n.blocks[0])) ||
          (p.parent && last.get(p.parent.shown.node.id));
        if (from && (from.x !== p.x || from.y !== p.y)) {
          body.animate([{ transform: "translate(" + (from.x - p.x) + "px," + (from.y - p.y) + "px)" },
            { transform: "translate(0px,0px)" }], { duration, easing: "ease-in-out" });
        }
        if (n.kind === "ghost") {
          body.animate([{ opacity: 1 }, { opacity: 0.55 }], { duration: duration * 1.6, easing: "ease-in" });
        } else if (!last.has(n.id)) {
          body.animate([{ opacity: 0 }, { opacity: 1 }], { duration, easing: "ease-out" });
        }
      }
    }
    if (animate && last) links.animate([{ opacity: 0 }, { opacity: 1 }], { duration: duration * 1.2 });
    view.last = positions;
    view.lastBlocks = blockPositions;
    view.placed = placed;
    svg.dataset.focus = focus ? "1" : "0";
    return [width, height];
  }
  function toggle(n) {
    if (n.kind === "edge") {
      state.open.has(n.id) ? state.open.delete(n.id) : state.open.add(n.id);
    } else {
      state.expanded.add(n.id);
    }
    const focused = document.activeElement && document.activeElement.dataset &&
      document.activeElement.dataset.node;
    render(false);
    // The drawing is made again: the keyboard stays where it was (on the opened node, or
    // on the first of the nodes a fold opened).
    if (focused) {
      const again = document.querySelector('g.node[data-node="' + CSS.escape(focused) + '"]') ||
        document.querySelector('g.node[data-node]:not([data-kind="root"])');
      if (again) again.focus();
    }
  }
  // What a node is, in words: its lines, what the step changed on it, how it differs.
  function describeNode(n) {
    const said = { root: "a namespace root", edge: "an edge", ghost: "evicted", more: "a fold",
      chain: "a fold", version: "a reader's version" }[n.kind] || n.kind;
    // The visible text first, word for word (a name that says what is seen), then what it is.
    const words = [labelLines(n).join(" "), said];
    const marks = n.flags.filter((flag) => flag !== "ghost");
    if (marks.length) words.push("marks: " + marks.join(", "));
    if (n.diff) words.push("differs: " + n.diff);
    return words;
  }
  function showNode(view, n) {
    say(view.section.querySelector(".node-info"), describeNode(n).join(" · "));
  }
  // A node reached by Tab outside the view: the view moves to it (scale kept).
  function bringIntoView(view, p) {
    const [frameW, frameH] = frameSize(view);
    const w = frameW / view.scale, h = frameH / view.scale;
    const left = p.x - p.width / 2, top = p.y;
    if (left >= view.x && left + p.width <= view.x + w && top >= view.y && top + p.height <= view.y + h) return;
    view.x = p.x - w / 2;
    view.y = Math.max(0, p.y + p.height / 2 - h / 2);
    view.touched = true;
    applyView(view);
  }
  // The pool: one cell per block id, in rows as wide as the side's column allows; a
  // cell's fill is its state, a red frame says it was evicted now, a green inner frame
  // that it was allocated now (both, when an id was evicted and handed out again). The
  // cells are kept from step to step and only their marks change.
  function drawPool(view, pool, highlight) {
    const svg = view.pool;
    if (!pool) { svg.replaceChildren(); svg.dataset.size = ""; return; }
    const size = pool.s.length, labelled = size <= K.labelledPool;
    const cellSize = labelled ? K.cell : K.smallCell, pitch = cellSize + K.cellGap;
    const room = Math.max(8, Math.floor((frameSize(view)[0] - 4) / pitch));
    const columns = Math.min(labelled ? K.poolColumns : K.wideColumns, room);
    const shape = size + "/" + columns;
    if (svg.dataset.size !== shape) {
      svg.replaceChildren();
      svg.dataset.size = shape;
      const width = Math.min(size, columns) * pitch, height = Math.max(1, Math.ceil(size / columns)) * pitch;
      svg.setAttribute("viewBox", "0 0 " + width + " " + height);
      svg.setAttribute("width", width);
      svg.setAttribute("height", height);
      for (let block = 0; block < size; block++) {
        const x = (block % columns) * pitch, y = Math.floor(block / columns) * pitch;
        const cell = el("rect", { class: "cell", "data-block": block, x, y, width: cellSize, height: cellSize }, svg);
        el("title", {}, cell);
        el("rect", { class: "mark", x: x + 3, y: y + 3, width: cellSize - 6, height: cellSize - 6 }, svg);
        if (labelled) {
          el("text", { class: "cell-id", x: x + cellSize / 2, y: y + cellSize / 2 + 3.5, "text-anchor": "middle" }, svg)
            .textContent = String(block);
        }
      }
    }
    const changed = new Map();
    for (const change of K.poolChanges) {
      for (const block of pool[change] || []) changed.set(block, (changed.get(block) || []).concat([change]));
    }
    const cells = svg.querySelectorAll("rect.cell"), marks = svg.querySelectorAll("rect.mark");
    const labels = svg.querySelectorAll("text.cell-id");
    if (svg.dataset.size !== view.poolShape) { view.poolShape = svg.dataset.size; view.poolShown = []; }
    for (let block = 0; block < size; block++) {
      const stateName = K.states[pool.s[block]], changes = changed.get(block) || [];
      const names = [stateName].concat(changes).join(" ");
      const mark = names + (highlight && highlight.has(block) ? " sub" : "");
      if (view.poolShown[block] === mark) continue;  // as drawn already
      view.poolShown[block] = mark;
      const cell = cells[block];
      cell.setAttribute("class", "cell " + names + (highlight && highlight.has(block) ? " sub" : ""));
      cell.dataset.state = stateName;
      cell.dataset.change = changes.join(" ");
      cell.firstChild.textContent = "#" + block + " " + stateName +
        (changes.length ? ", " + changes.join(" and ") + " now" : "");
      marks[block].setAttribute("class", "mark" + (changes.includes("allocated") ? " allocated" : ""));
      if (labels.length) labels[block].setAttribute("class", "cell-id " + stateName);
    }
  }

  // ---------------------------------------------------------------- pan, zoom, minimap
  // The frame's size, kept by a ResizeObserver: measuring it while drawing would make the
  // browser lay the whole page out again at every step.
  function frameSize(view) {
    if (!view.size) {
      const box = view.frame.getBoundingClientRect();
      if (!box.width) return [800, 500];
      view.size = [box.width, box.height];
    }
    return view.size;
  }
  // Fit the whole tree, but never below a scale whose labels can still be read: past
  // that the minimap shows the whole and the view stays on what changed.
  const LEGIBLE = 0.5;
  function fitView(view) {
    const [frameW, frameH] = frameSize(view);
    const whole = Math.min(1, frameW / view.width, frameH / view.height);
    view.scale = Math.max(whole, LEGIBLE);
    view.x = Math.min(0, (view.width - frameW / view.scale) / 2);
    view.y = 0;
    if (whole < LEGIBLE) {
      const wanted = hotBox(view.placed || [], view.highlight);
      if (wanted) view.x = (wanted[0] + wanted[2]) / 2 - frameW / 2 / view.scale;
    }
    applyView(view);
  }
  // Show what the step (or sub-step) changed, at a legible scale; the whole tree when it fits.
  function focusView(view, highlight) {
    const [frameW, frameH] = frameSize(view);
    if (view.width <= frameW && view.height <= frameH) return fitView(view);
    const wanted = hotBox(view.placed || [], highlight);
    if (!wanted) return fitView(view);
    const [left, top, right, bottom] = wanted;
    const fits = Math.min(frameW / (right - left + 40), frameH / (bottom - top + 40));
    view.scale = Math.min(1, Math.max(0.8, fits));
    view.x = fits >= 0.8 ? (left + right) / 2 - frameW / 2 / view.scale : left - 20;
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
    const mini = view.minimap;
    const big = view.width > w + 1 || view.height > h + 1;
    mini.toggleAttribute("hidden", !big);
    if (big) {
      const port = mini.querySelector(".mini-view");
      port.setAttribute("x", fmt(view.x));
      port.setAttribute("y", fmt(view.y));
      port.setAttribute("width", fmt(w));
      port.setAttribute("height", fmt(h));
    }
  }
  function drawMinimap(view) {
    const mini = view.minimap;
    mini.replaceChildren();
    const width = Math.max(view.width, 1), height = Math.max(view.height, 1);
    const shownW = 180, shownH = Math.max(36, Math.min(140, shownW * height / width));
    mini.setAttribute("viewBox", "0 0 " + fmt(width) + " " + fmt(height));
    mini.setAttribute("width", shownW);
    mini.setAttribute("height", fmt(shownH));
    mini.setAttribute("preserveAspectRatio", "none");
    el("rect", { class: "mini-back", width: fmt(width), height: fmt(height) }, mini);
    for (const p of view.placed || []) {
      const n = p.shown.node;
      el("rect", {
        class: "mini-node" + (isHot(n) ? " hot" : "") + (n.kind === "ghost" ? " ghost" : ""),
        x: fmt(p.x - p.width / 2), y: fmt(p.y), width: fmt(p.width), height: fmt(p.height),
      }, mini);
    }
    el("rect", { class: "mini-view" }, mini);
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
      if (event.target.closest && (event.target.closest("g.clickable") || event.target.closest(".minimap") ||
          event.target.closest("button"))) return;
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
    // On the frame itself (focused by Tab), the arrow keys pan the view.
    frame.addEventListener("keydown", (event) => {
      if (event.target !== frame) return;
      const moves = { ArrowLeft: [-1, 0], ArrowRight: [1, 0], ArrowUp: [0, -1], ArrowDown: [0, 1] };
      const move = moves[event.key];
      if (!move) return;
      event.preventDefault();
      event.stopPropagation();
      const [frameW, frameH] = frameSize(view);
      view.x += move[0] * frameW / 4 / view.scale;
      view.y += move[1] * frameH / 4 / view.scale;
      view.touched = true;
      applyView(view);
    });
    view.minimap.addEventListener("click", (event) => {
      const box = view.minimap.getBoundingClientRect();
      const worldX = (event.clientX - box.left) / box.width * view.width;
      const worldY = (event.clientY - box.top) / box.height * view.height;
      const [frameW, frameH] = frameSize(view);
      view.x = worldX - frameW / 2 / view.scale;
      view.y = worldY - frameH / 2 / view.scale;
      view.touched = true;
      applyView(view);
    });
    if (window.ResizeObserver) {
      new ResizeObserver((entries) => {
        const border = entries[entries.length - 1].borderBoxSize;
        const box = border && border[0];
        view.size = box && box.inlineSize ? [box.inlineSize, box.blockSize] : null;
        if (!view.width) return;
        if (view.touched) applyView(view); else focusView(view, view.highlight);
      }).observe(frame);
    }
  }

  // ---------------------------------------------------------------- panels
  const sides = document.getElementById("sides");
  const RULE_TEXT = /R-[A-Z]+-[0-9]+/g;
  function ruleLink(rule) {
    const link = document.createElement("a");
    link.href = "#rule-" + rule;
    link.className = "rule";
    link.dataset.rule = rule;
    link.textContent = rule;
    return link;
  }
  // Text with every rule id in it a link to the rule's text, wrapping between words only:
  // a word a browser could cut (at a hyphen: R-LRU-1, sglang-0.5.23, 6-7) is kept whole,
  // and a long list or path wraps after its commas and slashes, nowhere else.
  const CUTTABLE = /.[-/\u2010={[(]/;
  function linked(text) {
    const out = document.createDocumentFragment();
    for (const part of String(text).split(/(\s+)/)) {
      if (!part) continue;
      if (/^\s/.test(part) || !(CUTTABLE.test(part) || part.search(RULE_TEXT) >= 0)) {
        out.append(part);
        continue;
      }
      const pieces = part.length > 24 ? part.split(/(?<=[,/])/) : [part];
      pieces.forEach((piece, i) => {
        if (i) out.append(document.createElement("wbr"));
        const span = document.createElement("span");
        span.className = "nw";
        let at = 0;
        for (const found of piece.matchAll(RULE_TEXT)) {
          span.append(piece.slice(at, found.index), ruleLink(found[0]));
          at = found.index + found[0].length;
        }
        span.append(piece.slice(at));
        out.append(span);
      });
    }
    return out;
  }
  // An element's text, said with linked().
  function say(element, text) {
    element.replaceChildren(linked(text || ""));
    return element;
  }
  function panel(name, index) {
    const section = document.createElement("section");
    section.className = "side";
    section.dataset.side = name;
    section.innerHTML =
      '<div class="side-head"><h2></h2><p class="outcome"></p><p class="side-note" hidden></p>' +
      '<p class="origin" hidden></p><div class="adopted" hidden><p class="adopted-text"></p>' +
      '<button class="show-adopted">show the adopted state</button></div>' +
      '<ul class="diffs" hidden></ul></div>' +
      '<div class="events-box" hidden><h3>KV events <span class="events-scheme"></span></h3>' +
      '<p class="events-head"></p><div class="events"></div></div>' +
      '<div class="picture"><p class="sub-note" hidden><span class="sub-count"></span> <span class="sub-text"></span></p>' +
      '<p class="counts"></p><div class="pool-frame"></div>' +
      '<div class="tree-frame" tabindex="0" role="group" aria-label="the tree (arrow keys pan, + and − zoom)">' +
      '<p class="blank" hidden></p><svg class="minimap" aria-hidden="true" hidden></svg>' +
      '<div class="zoom"><button class="zoom-in" title="zoom in (+)">+</button>' +
      '<button class="zoom-out" title="zoom out (−)">−</button><button class="zoom-fit" title="fit (0)">fit</button>' +
      '<button class="zoom-follow" title="frame what changed (f)">follow</button></div></div>' +
      '<p class="node-info" aria-live="polite"></p></div>' +
      '<div class="explain"><div class="rules-box"><h3></h3><ul class="rules"></ul></div>' +
      '<div class="why-box"><h3>why</h3><div class="why"></div></div></div>';
    section.querySelector("h2").textContent = index === 0 ? name + " (the spec)" : name;
    section.querySelector(".rules-box h3").textContent =
      index === 0 ? "rules that decided it" : "rules it follows or departs from";
    const pool = el("svg", { class: "pool", role: "img" }, section.querySelector(".pool-frame"));
    const frame = section.querySelector(".tree-frame");
    const svg = el("svg", { class: "tree", "data-side": name }, frame);
    const minimap = section.querySelector(".minimap");
    const view = {
      svg, frame, scale: 1, x: 0, y: 0, width: 0, height: 0, touched: false, pool, section, minimap,
      index, last: null, lastBlocks: new Map(), placed: [], highlight: null,
    };
    section.querySelector(".zoom-in").addEventListener("click", () => zoom(view, 1.25));
    section.querySelector(".zoom-out").addEventListener("click", () => zoom(view, 0.8));
    section.querySelector(".zoom-fit").addEventListener("click", () => { view.touched = true; fitView(view); });
    section.querySelector(".zoom-follow").addEventListener("click", () => follow(view));
    section.querySelector(".show-adopted").addEventListener("click", () => {
      state.adopted.has(index) ? state.adopted.delete(index) : state.adopted.add(index);
      render(false);
    });
    panZoom(view);
    sides.appendChild(section);
    return view;
  }
  function follow(view) {
    view.touched = false;
    render(false, [view]);
  }
  let views = [];
  function buildPanels() {
    sides.replaceChildren();
    views = DATA.names.map(panel);
    document.body.classList.toggle("side-by-side", views.length > 1);
    document.body.classList.toggle("single", views.length === 1);
    // A reviewer's two columns need the room: the legend starts folded there.
    const legend = document.querySelector("#legend details");
    const narrow = window.matchMedia && window.matchMedia("(max-width: 700px)").matches;
    if (legend && (views.length > 1 || narrow)) legend.open = false;
  }

  // What a side draws: the adopted state when asked for (a whole side of its own: its
  // outcome, tree, pool, counts, rules, why and sub-steps), else the step's own.
  function shownSide(side, column) {
    return state.adopted.has(column) && side.adopted ? { ...side.adopted, name: side.name } : side;
  }
  // A sub-step's pool: the step's own, each later sub-step's differing cells undone
  // (spec/explain/page.py stores them so); its counts: the last ones given up to it.
  function subPool(side, at) {
    const cells = side.pool.s.split("");
    for (let i = side.sub.length - 1; i >= at; i--) {
      for (const [block, code] of side.sub[i].pool.ds || []) cells[block] = code;
    }
    return { ...side.sub[at].pool, s: cells.join("") };
  }
  function subCounts(side, at) {
    for (let i = at; i >= 0; i--) if (side.sub[i].counts) return side.sub[i].counts;
    return side.counts;
  }
  function subOf(side) {
    const list = side.sub || [];
    if (state.sub < 0 || !list.length) return null;
    return list[Math.min(state.sub, list.length - 1)];
  }
  function fillSide(view, own, frame, frameIndex, animate) {
    const section = view.section;
    const column = view.index;
    const side = shownSide(own, column);
    const showing = side !== own;
    const sub = subOf(side);
    const at = sub ? Math.min(state.sub, side.sub.length - 1) : -1;
    say(section.querySelector(".outcome"), side.step + "  →  " + side.outcome);
    section.classList.toggle("failed", !side.ok);
    const note = section.querySelector(".side-note");
    note.hidden = !own.note;
    say(note, own.note);
    const origin = section.querySelector(".origin");
    origin.hidden = !own.origin;
    say(origin, own.origin);
    const adopted = section.querySelector(".adopted");
    adopted.hidden = !own.adopted;
    if (own.adopted) {
      say(section.querySelector(".adopted-text"), (showing ? "Drawn: the adopted state, " : "The kit then adopts ") +
        DATA.names[1] + "'s choice (" + own.adopted.outcome + ") so the steps after this one stay comparable; " +
        (showing ? "the spec's own: " + own.outcome + "." : "the spec's own is drawn here."));
      section.querySelector(".show-adopted").textContent = showing ? "show the spec's own" : "show the adopted state";
    }
    section.classList.toggle("showing-adopted", showing);
    say(section.querySelector(".counts"), (sub ? subCounts(side, at) : side.counts) || "");
    section.querySelector(".rules-box h3").textContent = column === 0 && !showing ?
      "rules that decided it" : "rules it follows or departs from";
    // Within a sub-step, the rules and the why that come later in the step say so.
    const when = (first) => at < 0 || first < 0 ? "" : first > at ? "later" : first === at ? "now" : "done";
    const rules = section.querySelector(".rules");
    rules.replaceChildren();
    side.rules.forEach(([rule, reason], i) => {
      const verdict = (side.verdicts || [])[i] || "";
      const item = document.createElement("li");
      const moment = when((side.rulesAt || [])[i] ?? -1);
      item.className = [verdict, moment].filter(Boolean).join(" ");
      item.dataset.rule = rule;
      if (verdict) {
        const mark = document.createElement("span");
        mark.className = "verdict";
        // The mark is the step's ruling's (spec/explain/ruling.py): the banner says the same.
        mark.textContent = { follows: "✓ follows ", departs: "✗ departs from ", declared: "≈ declared: ",
          note: "· " }[verdict] || "";
        item.append(mark);
      }
      item.append(ruleLink(rule), " ", linked(reason));
      if (moment === "later") item.append(laterMark());
      rules.appendChild(item);
    });
    const why = section.querySelector(".why");
    why.replaceChildren();
    side.why.forEach(([title, lines], i) => {
      const part = document.createElement("div");
      const moment = when((side.whyAt || [])[i] ?? -1);
      part.className = "why-part" + (moment ? " " + moment : "");
      const head = document.createElement("h4");
      head.textContent = title;
      if (moment === "later") head.append(laterMark());
      const body = document.createElement("pre");
      body.append(linked(lines.join("\n")));
      part.append(head, body);
      why.appendChild(part);
    });
    const subNote = section.querySelector(".sub-note");
    subNote.hidden = !sub;
    if (sub) {
      section.querySelector(".sub-count").textContent = "sub-step " + (at + 1) + " of " + side.sub.length + ":";
      const text = section.querySelector(".sub-text");
      say(text, sub.t);
      if (sub.r) text.append(" (", ruleLink(sub.r), ")");
    }
    const highlight = sub ? new Set(sub.n) : null;
    view.highlight = highlight;
    drawPool(view, sub ? subPool(side, at) : side.pool, sub ? new Set(sub.b) : null);
    const roots = (sub ? sub.tree : side.tree).map(node);
    const [width, height] = drawTree(view, roots, highlight, animate);
    view.width = width;
    view.height = height;
    view.svg.dataset.step = String(frame.number - 1);
    view.svg.dataset.sub = String(at);
    view.svg.dataset.width = fmt(width);
    view.svg.dataset.height = fmt(height);
    view.svg.dataset.tree = showing ? "adopted" : "step";
    view.svg.dataset.clock = String((sub ? sub.clock : side.clock) ?? "");
    const blank = section.querySelector(".blank");
    blank.hidden = !side.blank;
    say(blank, side.blank);
    blank.classList.toggle("below", roots.length > 0);
    view.pool.setAttribute("aria-label", "the pool: " + section.querySelector(".counts").textContent);
    // Every difference is listed; past the first four they fold, one click (or key) away.
    const diffs = section.querySelector(".diffs");
    const differing = roots.length ? collectDiffs(roots) : [];
    diffs.hidden = !differing.length;
    const item = (text) => {
      const entry = document.createElement("li");
      say(entry, "≠ " + text);
      return entry;
    };
    diffs.replaceChildren(...differing.slice(0, 4).map(item));
    if (differing.length > 4) {
      const more = document.createElement("li");
      const fold = document.createElement("details");
      const summary = document.createElement("summary");
      summary.textContent = (differing.length - 4) + " more differences";
      const rest = document.createElement("ul");
      rest.replaceChildren(...differing.slice(4).map(item));
      fold.append(summary, rest);
      more.append(fold);
      diffs.append(more);
    }
    drawMinimap(view);
    if (!view.touched) focusView(view, highlight); else applyView(view);
    fillEvents(view, side, frame);
  }
  function laterMark() {
    const mark = document.createElement("span");
    mark.className = "later-mark";
    mark.textContent = " (later in this step)";
    return mark;
  }

  // ---------------------------------------------------------------- KV events
  // The batches the side emitted during the step (spec/explain/events.py): each event a
  // line; pointing at it (or focusing it) lights up the blocks it names, in the tree and
  // the pool.
  const EVENT_SIGNS = { stored: "+ ", removed: "− ", cleared: "∅ " };
  function fillEvents(view, side, frame) {
    const section = view.section;
    const box = section.querySelector(".events-box");
    box.hidden = !frame.events || !side.events;
    if (box.hidden) return;
    // A declared step draws the spec's own state, or the adopted one: the events with it.
    const adopted = state.adopted.has(view.index) && side.adopted && side.adopted.events;
    if (adopted) side = { ...side, events: side.adopted.events };
    section.querySelector(".events-scheme").textContent = "(" + frame.events + ")";
    const head = section.querySelector(".events-head");
    head.replaceChildren();
    const count = side.events.reduce((sum, batch) => sum + batch.lines.length, 0);
    const differs = frame.eventsDiffer !== null && frame.eventsDiffer !== undefined;
    const found = view.index > 0 && frame.eventsFinding && frame.differs !== null && frame.differs !== undefined;
    head.classList.toggle("differs", differs || found);
    if (found) {
      // The kit's finding at its events read: its rules and cause, as the banner names them.
      head.append("≠ ");
      (frame.rules.length ? frame.rules : ["?"]).forEach((rule, i) => {
        if (i) head.append(", ");
        head.append(rule === "?" ? "?" : ruleLink(rule));
      });
      head.append(linked(": " + (frame.cause || "its events differ") + " "));
      if (frame.eventsLate) head.append("(the kit compared step " + frame.eventsLate + "'s batches only here: it stopped at that step's finding first) ");
    } else if (differs) {
      head.append("≠ " + (view.index > 0 ? "differs from " + DATA.names[0] + "'s " : DATA.names[1] + "'s differ "));
    }
    if (differs) {
      const where = document.createElement("span");
      where.className = "where";
      say(where, "(marked ≠; compared as the kit compares them, first at " + frame.eventsDiffer + ")");
      head.append(where);
    } else if (!count && !found) {
      head.append(linked(side.step.startsWith("reset") ? "none: a fresh cache has nothing to report" :
        "none: no block became cached or stopped being cached (R-EVENT-1)"));
    }
    const list = section.querySelector(".events");
    list.replaceChildren();
    side.events.forEach((batch, number) => {
      const part = document.createElement("div");
      part.className = "batch" + (batch.x ? " differs" : "");
      const title = document.createElement("p");
      title.className = "batch-head";
      say(title, (batch.x ? "≠ " : "") + "batch " + (number + 1) + " of " + side.events.length +
        (batch.ts !== undefined && batch.ts !== null ? " · ts " + batch.ts : "") + (batch.note ? " · " + batch.note : ""));
      const items = document.createElement("ul");
      batch.lines.forEach((line) => {
        const item = document.createElement("li");
        item.className = "event " + line.k + (line.x ? " differs" : "");
        item.tabIndex = 0;
        item.dataset.blocks = line.b.join(" ");
        item.dataset.nodes = line.n.join(" ");
        item.append((line.x ? "≠ " : "") + EVENT_SIGNS[line.k]);
        item.append(linked(line.t));
        const on = () => lightEvent(view, line, true), off = () => lightEvent(view, line, false);
        item.addEventListener("mouseenter", on);
        item.addEventListener("mouseleave", off);
        item.addEventListener("focus", on);
        item.addEventListener("blur", off);
        items.appendChild(item);
      });
      part.append(title, items);
      list.appendChild(part);
    });
  }
  function lightEvent(view, line, on) {
    for (const id of line.n) {
      view.svg.querySelectorAll('g.node[data-node="' + id + '"]').forEach((g) => g.classList.toggle("event-hover", on));
    }
    for (const block of line.b) {
      view.pool.querySelectorAll('rect.cell[data-block="' + block + '"]').forEach((cell) => cell.classList.toggle("event-hover", on));
    }
  }
  function collectDiffs(roots) {
    const found = [];
    const visit = (n) => { if (n.diff) found.push(n.diff); n.children.forEach(visit); };
    roots.forEach(visit);
    return found;
  }

  // ---------------------------------------------------------------- stepping
  const slider = document.getElementById("slider");
  const counter = document.getElementById("counter");
  const subCount = (step = state.step) =>
    Math.max(0, ...frames[step].sides.map((side, i) => (shownSide(side, i).sub || []).length));
  function banner(id, show, build) {
    const element = document.getElementById(id);
    element.hidden = !show;
    element.replaceChildren();
    if (show) build(element);
    return element;
  }
  function render(animate, only) {
    const frame = frames[state.step];
    if (!frame) return;
    document.body.dataset.step = String(state.step);
    document.body.dataset.sub = String(state.sub);
    slider.max = String(Math.max(frames.length - 1, 0));
    slider.value = String(state.step);
    const subs = subCount();
    say(counter, "step " + (state.step + 1) + " of " + frames.length +
      (state.sub >= 0 && subs ? " · sub-step " + (Math.min(state.sub, subs - 1) + 1) + " of " + subs : "") +
      (frame.trace ? " · trace " + frame.trace : ""));
    say(document.getElementById("step-note"), frame.note);
    const names = DATA.names;
    banner("step-declared", frame.declared && frame.declared.length, (element) => {
      element.append("declared: ");
      frame.declared.forEach(([rule, reason], i) => {
        if (i) element.append("; ");
        element.append(ruleLink(rule), " ", linked("(" + reason.replace(/^declared: /, "") + ")"));
      });
      const outcomes = frame.sides.map((side) => side.name + " " + side.outcome.replace(/^cached \d+ tokens: /, ""));
      const both = document.createElement("span");
      both.className = "both";
      both.append(" — ", linked("both outcomes shown: " + outcomes.join("; ")));
      element.append(both);
    });
    const major = frame.differs !== null && frame.differs !== undefined && (!frame.minor || state.minor);
    banner("step-diff", major, (element) => {
      const first = DATA.firstMajor === state.step ? "first difference: " : "";
      element.append("≠ " + first);
      (frame.rules.length ? frame.rules : ["?"]).forEach((rule, i) => {
        if (i) element.append(", ");
        element.append(rule === "?" ? "?" : ruleLink(rule));
      });
      element.append(": ", linked(names[1] + " " + (frame.cause || "parts ways with the reference")));
      const where = document.createElement("span");
      where.className = "where";
      where.append(" ", linked("(at " + frame.differs + ")"));
      element.append(where);
    }).classList.toggle("safety", Boolean(frame.safety));
    banner("step-minor", frame.differs !== null && frame.differs !== undefined && frame.minor && !state.minor, (element) => {
      element.append("≈ stamps only: ");
      frame.rules.forEach((rule, i) => { if (i) element.append(", "); element.append(ruleLink(rule)); });
      element.append(" — ", linked(names[1] + "'s recency differs, nothing else; folded (m shows stamp-only differences)"));
    });
    document.body.classList.toggle("differs", major);
    banner("step-waived", Boolean(frame.waived) && !(frame.declared && frame.declared.length), (element) => {
      element.append(linked("≈ not compared: " + frame.waived));
    });
    frame.sides.forEach((side, i) => {
      if (!only || only.includes(views[i])) fillSide(views[i], side, frame, state.step, animate && state.animate);
    });
    document.querySelectorAll("#ticks .tick").forEach((tick) => {
      tick.classList.toggle("current", +tick.dataset.step === state.step);
    });
    const hash = "#step=" + (state.step + 1) + (state.sub >= 0 ? "&sub=" + (state.sub + 1) : "");
    address(hash);
    document.getElementById("play").textContent = state.playing ? "❚❚ pause" : "▶ play";
    document.getElementById("subs").setAttribute("aria-pressed", String(state.subs));
    document.getElementById("follow").setAttribute("aria-pressed", String(state.follow));
    document.getElementById("animate").setAttribute("aria-pressed", String(state.animate));
  }
  // The address follows the step, at most a few times a second (browsers throttle
  // history updates made faster, and each one costs).
  let addressTimer = null, wanted = "";
  function address(hash) {
    wanted = hash;
    if (addressTimer !== null) return;
    addressTimer = setTimeout(() => {
      addressTimer = null;
      if (location.hash !== wanted && !location.hash.startsWith("#rule-")) history.replaceState(null, "", wanted);
    }, 150);
  }
  function go(step, sub) {
    const target = Math.max(0, Math.min(frames.length - 1, step));
    const moved = target !== state.step;
    state.step = target;
    state.sub = sub === undefined ? (state.subs ? 0 : -1) : sub;
    if (state.sub >= 0 && !subCount()) state.sub = -1;
    views.forEach((view) => { view.touched = false; });
    render(moved);
  }
  function subStep(delta) {
    const subs = subCount();
    if (!subs) return go(state.step + delta, delta < 0 ? -1 : undefined);
    const next = state.sub + delta;
    if (next < -1 || (next === -1 && delta < 0)) {
      if (state.step === 0) return;
      const previous = subCount(state.step - 1);
      return go(state.step - 1, previous ? previous - 1 : -1);
    }
    if (next >= subs) return go(state.step + 1, 0);
    state.sub = next;
    views.forEach((view) => { view.touched = false; });
    render(true);
  }
  function tick() {
    if (!state.playing) return;
    const atEnd = state.step >= frames.length - 1 && (!state.subs || state.sub >= subCount() - 1);
    if (atEnd) return setPlaying(false);
    if (state.subs) subStep(1); else go(state.step + 1);
    state.timer = setTimeout(tick, BASE_MS / state.speed);
  }
  function setPlaying(on) {
    state.playing = on;
    clearTimeout(state.timer);
    if (on) state.timer = setTimeout(tick, BASE_MS / state.speed / 2);
    render(false);
  }
  function nextDifference(from) {
    for (let i = from + 1; i < frames.length; i++) {
      const f = frames[i];
      if ((f.differs !== null && f.differs !== undefined && (!f.minor || state.minor)) || (f.declared && f.declared.length)) return i;
    }
    return null;
  }
  function buildTicks() {
    const ticks = document.getElementById("ticks");
    ticks.replaceChildren();
    frames.forEach((frame, i) => {
      const tick = document.createElement("span");
      const differs = frame.differs !== null && frame.differs !== undefined;
      tick.className = "tick" + (differs ? (frame.minor ? " minor" : " diff") : "") +
        (frame.waived ? " waived" : "") + (frame.declared && frame.declared.length ? " declared" : "") +
        (i === DATA.firstMajor ? " first" : "");
      tick.dataset.step = String(i);
      tick.title = "step " + (i + 1) + (frame.note ? ": " + frame.note : "");
      tick.addEventListener("click", () => go(i));
      ticks.appendChild(tick);
    });
    const jump = document.getElementById("jump-diff");
    jump.hidden = nextDifference(-1) === null;
    const eventsLegend = document.querySelector("#legend .events-legend");
    if (eventsLegend) eventsLegend.hidden = !frames.some((frame) => frame.events);
    document.body.classList.toggle("show-minor", state.minor);
  }
  const first = () => {
    const found = nextDifference(-1);
    if (found !== null) go(found);
  };
  document.getElementById("jump-diff").addEventListener("click", first);
  document.getElementById("prev").addEventListener("click", () => go(state.step - 1));
  document.getElementById("next").addEventListener("click", () => go(state.step + 1));
  document.getElementById("sub-prev").addEventListener("click", () => subStep(-1));
  document.getElementById("sub-next").addEventListener("click", () => subStep(1));
  document.getElementById("play").addEventListener("click", () => setPlaying(!state.playing));
  document.getElementById("speed").addEventListener("change", (event) => { state.speed = +event.target.value; });
  const toggles = {
    subs: () => { state.subs = !state.subs; state.sub = state.subs && subCount() ? 0 : -1; render(false); },
    follow: () => { state.follow = !state.follow; views.forEach((view) => { view.touched = false; }); render(false); },
    animate: () => { state.animate = !state.animate; render(false); },
    minor: () => { state.minor = !state.minor; buildTicks(); render(false); },
  };
  document.getElementById("subs").addEventListener("click", toggles.subs);
  document.getElementById("follow").addEventListener("click", toggles.follow);
  document.getElementById("animate").addEventListener("click", toggles.animate);
  document.getElementById("fold").addEventListener("click", foldAll);
  slider.addEventListener("input", () => go(+slider.value));
  function foldAll() {
    state.expanded.clear();
    state.open.clear();
    render(false);
  }
  const ruleView = document.getElementById("rule-view");
  let ruleFrom = null;  // the link that opened the rule's text: the keyboard goes back to it
  function closeRule() {
    if (ruleView.hidden) return;
    ruleView.hidden = true;
    if (ruleFrom && document.contains(ruleFrom)) ruleFrom.focus();
    ruleFrom = null;
  }
  document.getElementById("rule-close").addEventListener("click", closeRule);
  document.addEventListener("click", (event) => {
    const link = event.target.closest && event.target.closest("a.rule");
    if (!link) return;
    const text = document.getElementById("rule-" + link.dataset.rule);
    if (!text) return;
    event.preventDefault();
    document.getElementById("rule-body").innerHTML = text.innerHTML;
    ruleView.dataset.rule = link.dataset.rule;
    ruleView.hidden = false;
    ruleFrom = link;
    ruleView.focus();
  });
  document.addEventListener("keydown", (event) => {
    const typing = event.target.closest && event.target.closest("input:not([type=range]), textarea, select");
    if (typing) return;
    // Space and Enter press the focused button, link or node (their own meaning first).
    const pressable = event.target.closest && event.target.closest("button, a, summary, [role=button]");
    if (pressable && (event.key === " " || event.key === "Enter")) return;
    if (event.target === slider && (event.key === "ArrowLeft" || event.key === "ArrowRight")) {
      event.preventDefault();
    }
    const actions = {
      ArrowLeft: () => go(state.step - 1), ArrowRight: () => go(state.step + 1),
      ",": () => subStep(-1), ".": () => subStep(1),
      Home: () => go(0), End: () => go(frames.length - 1),
      d: first, n: () => { const found = nextDifference(state.step); if (found !== null) go(found); },
      c: foldAll, Escape: closeRule,
      " ": () => setPlaying(!state.playing), s: toggles.subs, f: toggles.follow, a: toggles.animate,
      m: toggles.minor,
      "+": () => views.forEach((view) => zoom(view, 1.25)),
      "-": () => views.forEach((view) => zoom(view, 0.8)),
      0: () => views.forEach((view) => { view.touched = true; fitView(view); }),
    };
    const action = actions[event.key];
    if (action && !event.ctrlKey && !event.metaKey && !event.altKey) {
      event.preventDefault();
      action();
    }
  });
  // #step=N (1-based) and &sub=K open that step (and sub-step).
  function fromHash(event) {
    clearTimeout(addressTimer);  // the address asked for wins over one still to be written
    addressTimer = null;
    // The address navigated to, not the one the bar shows now: a write of the step left
    // (address(), 150 ms late) may have replaced it between the navigation and this event.
    const hash = event && event.newURL ? new URL(event.newURL).hash : location.hash;
    const found = /step=(\d+)(?:&sub=(\d+))?/.exec(hash);
    if (!found) return false;
    if (found[2]) state.subs = true;
    go(+found[1] - 1, found[2] ? +found[2] - 1 : -1);
    return true;
  }
  window.addEventListener("hashchange", fromHash);

  // The playground reloads the page's data after each operation (spec/explain/serve.py).
  window.kachedbExplain = {
    load(data, step) {
      DATA = data;
      K = DATA.constants;
      CHANGE = new Set(K.changeFlags);
      frames = DATA.frames;
      built = new Map();
      if (views.length !== DATA.names.length) buildPanels();
      buildTicks();
      go(step === undefined ? frames.length - 1 : step);
    },
    state,
    // For tests and for scripting the page: open step (0-based) at sub-step (-1: none).
    go(step, sub) { state.subs = sub >= 0; go(step, sub); },
    subCount,
    steps: () => frames.length,
  };
  buildPanels();
  buildTicks();
  if (!fromHash()) go(0);
})();
