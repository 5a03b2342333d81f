// A view redrawn into the nodes already on the page: `morph(live, fresh)` makes the live node look
// like a freshly built, detached one (its attributes, text and children), keeping every node whose
// kind is the same and touching only what differs. A step change of a big batch rebuilds tables of
// hundreds of rows whose cells mostly keep their text: torn down and built again, every node costs
// the browser its style, layout and paint; morphed, only the cells whose text changed do.
//
// The listeners that views.js's el() gave a node (kept on it as `__on`) move with its attributes,
// so a kept node answers as the fresh one would. A view morphed this way must not hold on to its
// fresh nodes (a listener that closes over the node it is on would act on the discarded copy), nor
// keep state in a node that no attribute says (a canvas's pixels): those are replaced, not morphed.

// the live node made like `fresh`; returns the node on the page (`fresh` itself where the two were
// of different kinds and `fresh` took the live one's place)
export function morph(live, fresh) {
  if (live.nodeType !== fresh.nodeType || live.nodeName !== fresh.nodeName || live.namespaceURI !== fresh.namespaceURI
      || live.nodeName === "CANVAS") {
    live.replaceWith(fresh);
    return fresh;
  }
  if (live.nodeType !== Node.ELEMENT_NODE) {
    if (live.nodeValue !== fresh.nodeValue) live.nodeValue = fresh.nodeValue;
    return live;
  }
  const fa = fresh.attributes, la = live.attributes;
  let shared = 0;  // fresh attributes the live node had already (with any value)
  for (let i = 0; i < fa.length; i++) {
    const { name, value } = fa[i];
    const was = live.getAttribute(name);
    if (was !== null) shared++;
    if (was !== value) live.setAttribute(name, value);
  }
  // the live node's other attributes go (it has some only where it had more than those shared)
  if (la.length > shared) for (let i = la.length - 1; i >= 0; i--) if (!fresh.hasAttribute(la[i].name)) live.removeAttribute(la[i].name);
  if (live.__on || fresh.__on) {
    for (const [type, fn] of live.__on || []) live.removeEventListener(type, fn);
    for (const [type, fn] of fresh.__on || []) live.addEventListener(type, fn);
    live.__on = fresh.__on;
  }
  // what a form control shows once used is its property, no longer its attribute
  if (live.nodeName === "INPUT") {
    if (live.checked !== fresh.checked) live.checked = fresh.checked;
    if (live.value !== fresh.value && live !== document.activeElement) live.value = fresh.value;
  }
  // (the common cell: one text in both)
  const lc = live.firstChild, fc = fresh.firstChild;
  if (lc && fc && lc.nodeType === Node.TEXT_NODE && fc.nodeType === Node.TEXT_NODE && !lc.nextSibling && !fc.nextSibling) {
    if (lc.data !== fc.data) lc.data = fc.data;
  } else if (lc || fc) morphChildren(live, [...fresh.childNodes]);
  return live;
}

// `parent`'s children made like `fresh` (detached nodes), position by position: the first ones
// morphed, any further fresh ones appended, any further live ones removed (kept with `keep`: a
// row whose later cells are redrawn after the frame)
export function morphChildren(parent, fresh, { keep = false } = {}) {
  const live = parent.childNodes;
  const n = Math.min(live.length, fresh.length);
  for (let i = 0; i < n; i++) morph(live[i], fresh[i]);
  if (fresh.length > n) parent.append(...fresh.slice(n));
  if (!keep) while (live.length > fresh.length) parent.lastChild.remove();
}
