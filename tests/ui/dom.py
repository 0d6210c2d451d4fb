"""A tiny DOM built with the standard library's HTML parser, enough to query pages in tests.

Assertions about markup go through a parser, not substring checks: "the page has no <img>
element" is a statement about the parsed tree, which is what a browser would build.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser

VOID = {
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
    "track", "wbr",
}  # fmt: skip


BLOCKS = {
    "td", "th", "tr", "li", "p", "div", "dt", "dd", "h1", "h2", "h3", "section", "br", "ul",
    "ol", "table", "thead", "tbody", "nav", "figcaption",
}  # fmt: skip


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    children: list[Element | str] = field(default_factory=list)
    parent: Element | None = field(default=None, repr=False)

    def iter(self) -> Iterator[Element]:
        yield self
        for child in self.children:
            if isinstance(child, Element):
                yield from child.iter()

    def find_all(
        self,
        tag: str | None = None,
        predicate: Callable[[Element], bool] | None = None,
        **attrs: str,
    ) -> list[Element]:
        found = []
        for element in self.iter():
            if tag is not None and element.tag != tag:
                continue
            if any(
                element.attrs.get(name.rstrip("_").replace("_", "-")) != value
                for name, value in attrs.items()
            ):
                continue
            if predicate is not None and not predicate(element):
                continue
            found.append(element)
        return found

    def find(self, tag: str | None = None, **attrs: str) -> Element | None:
        found = self.find_all(tag, **attrs)
        return found[0] if found else None

    def one(self, tag: str | None = None, **attrs: str) -> Element:
        found = self.find_all(tag, **attrs)
        assert len(found) == 1, f"expected one <{tag} {attrs}>, found {len(found)}"
        return found[0]

    def by_id(self, element_id: str) -> Element:
        return self.one(id=element_id)

    @property
    def text(self) -> str:
        """The text content; table cells, list items and blocks are set apart by a space."""
        parts: list[str] = []
        for child in self.children:
            if isinstance(child, str):
                parts.append(child)
            elif child.tag in BLOCKS:
                parts.append(f" {child.text} ")
            else:
                parts.append(child.text)
        return "".join(parts)

    @property
    def clean_text(self) -> str:
        return " ".join(self.text.split())

    def has_class(self, name: str) -> bool:
        return name in self.attrs.get("class", "").split()


class _TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(
            tag, {k: v if v is not None else "" for k, v in attrs}, parent=self.stack[-1]
        )
        self.stack[-1].children.append(element)
        if tag not in VOID:
            self.stack.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(
            tag, {k: v if v is not None else "" for k, v in attrs}, parent=self.stack[-1]
        )
        self.stack[-1].children.append(element)

    def handle_endtag(self, tag: str) -> None:
        for index in range(len(self.stack) - 1, 0, -1):
            if self.stack[index].tag == tag:
                del self.stack[index:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse(html: str) -> Element:
    builder = _TreeBuilder()
    builder.feed(html)
    builder.close()
    return builder.root
