"""A sweep's ``report.description`` on its results page: the author's code spans and emphasis
render (the docs site showed them as literal backticks and asterisks), nothing else from the
sweep file becomes markup."""

from __future__ import annotations

import markdown as md

from modforge.sweep.report import _prose


def _html(line: str) -> str:
    return md.markdown(_prose(line))


def test_code_spans_and_emphasis_of_a_description_render():
    shown = _html(
        "Corpus: `modforge data make-spoof-corpus corpora/spoof` runs a *randomly initialised* **tiny** model"
    )
    assert "<code>modforge data make-spoof-corpus corpora/spoof</code>" in shown
    assert "<em>randomly initialised</em>" in shown and "<strong>tiny</strong>" in shown
    assert "`" not in shown and "*" not in shown


def test_everything_else_in_a_description_stays_text():
    shown = _html("<script>x</script> [a link](http://example.com) `<b>bold</b>` *<i>x</i>* 2**26 a_b_c")
    assert "<script>" not in shown and "<b>" not in shown and "<i>" not in shown and "<a " not in shown
    assert "&lt;script&gt;" in shown and "[a link](http://example.com)" in shown  # shown, as written
    assert "2**26" in shown and "a_b_c" in shown  # an exponent and a name, not emphasis
