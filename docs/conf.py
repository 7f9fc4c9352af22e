"""Sphinx configuration: the Markdown pages of docs/ (MyST) and the API reference from the docstrings.

Built by ``make docs`` (and by ``make test``, warnings as errors): ``sphinx-build -W -b html docs build/docs``.
"""

import importlib.util
import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "src")))

import strata  # noqa: E402

project = "strata"
author = "the strata authors"
copyright = "the strata authors"
release = strata.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# Markdown: anchors for headings down to ### so that links such as page.md#section resolve.
myst_heading_anchors = 3

# API reference: the docstrings are Google style (Args:/Returns:/Raises:) or plain reST.
autodoc_default_options = {"members": True, "member-order": "bysource"}
autodoc_typehints = "description"
autoclass_content = "both"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
# "Attributes:" sections as :ivar: fields: NamedTuple and dataclass fields are documented once, as members.
napoleon_use_ivar = True

# Optional dependencies (the torch extra): mocked only where they are not installed, so the
# reference builds from a plain install; a full `make` install imports the real modules.
autodoc_mock_imports = [m for m in ("torch", "safetensors", "triton") if importlib.util.find_spec(m) is None]

html_theme = "alabaster"
html_title = f"strata {release}"
html_static_path = []
