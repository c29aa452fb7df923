"""mkdocs hook: the docstrings' Sphinx roles (``:func:`x```, ``:data:`~a.b```) shown as code.

mkdocstrings renders a role's name as text beside the code (``:func:<code>x</code>``); this
drops the role and, as Sphinx does for ``~``, keeps the last dotted part."""

from __future__ import annotations

import re

ROLE = re.compile(r":(?:py:)?(?:func|meth|class|data|attr|mod|exc|obj|const|ref|term):(?=<code>)")
TILDE = re.compile(r"<code>~(?:[\w]+\.)*([\w]+)</code>")


def clean(html: str) -> str:
    """``html`` without role prefixes, ``~a.b.c`` shown as ``c``."""
    return TILDE.sub(r"<code>\1</code>", ROLE.sub("", html))


def on_page_content(html: str, **_) -> str:
    """mkdocs event: a page's HTML after its Markdown was rendered."""
    return clean(html)
