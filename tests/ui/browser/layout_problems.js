// What a reader would call cut or spilled, found in a page as laid out (test_layout.py).
() => {
  const problems = [];
  const name = (el) => {
    let s = el.tagName.toLowerCase() + (el.id ? "#" + el.id : "");
    if (typeof el.className === "string" && el.className.trim()) s += "." + el.className.trim().split(/\s+/).join(".");
    return s + " [" + (el.textContent || "").trim().replace(/\s+/g, " ").slice(0, 50) + "]";
  };
  const root = document.documentElement;
  if (root.scrollWidth > root.clientWidth) {
    problems.push(`page is ${root.scrollWidth} px wide in a ${root.clientWidth} px window`);
  }
  const hides = (style) => style.overflowX === "hidden" || style.overflowX === "clip";
  const scrolls = (style) => style.overflowX === "auto" || style.overflowX === "scroll";
  for (const el of document.querySelectorAll("main *")) {
    const style = getComputedStyle(el);
    const box = el.getBoundingClientRect();
    // Not drawn: hidden, or in a closed <details>.
    if (!el.checkVisibility() || style.visibility === "hidden" || box.width === 0) continue;
    const text = (el.textContent || "").trim();
    const wider = el.scrollWidth > el.clientWidth + 1;
    if (wider && hides(style) && text && !(el instanceof SVGElement)
        && !el.matches(".visually-hidden") && el.getAttribute("title") !== text) {
      problems.push(`cut: ${name(el)} needs ${el.scrollWidth} px, has ${el.clientWidth}`);
    }
    if (wider && scrolls(style) && !el.matches(".table-wrap")) {
      problems.push(`scrolls sideways: ${name(el)}`);
    }
    let up = el.parentElement;
    while (up && up.tagName !== "MAIN" && !up.matches(".card, .tile") && !scrolls(getComputedStyle(up))) {
      up = up.parentElement;
    }
    if (up && up.matches(".card, .tile")) {
      const outer = up.getBoundingClientRect();
      if (box.right > outer.right + 1 || box.left < outer.left - 1
          || box.bottom > outer.bottom + 1 || box.top < outer.top - 1) {
        problems.push(`out of its ${up.matches(".tile") ? "tile" : "card"}: ${name(el)}`);
      }
    }
  }
  return problems;
}
