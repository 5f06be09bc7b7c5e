// el('div', {class: 'x', title: 't'}, 'text', child): an element with
// attributes and children (strings become text nodes, never HTML).
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v !== undefined && v !== null && v !== '') node.setAttribute(k, v);
  }
  node.append(...children.filter((c) => c !== undefined && c !== null));
  return node;
}

const SVG = 'http://www.w3.org/2000/svg';  // the SVG namespace: a name, never fetched

// svg('rect', {x: 1, ...}): an SVG element.
export function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  node.append(...children);
  return node;
}
