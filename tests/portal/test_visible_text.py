"""The reader behind the test that every main page reads in Chinese: what it counts as
visible, and what it sets aside."""

from tests.portal.visible_text import data_pattern, english_runs, visible_texts

PAGE = """<html lang="zh-hans"><head><title>租约 · GPU 门户</title>
<style>.x{color:red}</style><script>var label = "Not shown";</script></head>
<body><h1>租约 Waiting list</h1>
<a title="Open the lease" href="/leases/3/">#3</a>
<input type="text" placeholder="e.g. my run"><input type="submit" value="Send now">
<input type="hidden" name="next" value="Hidden value">
<button lang="en">English</button><code>ssh ubuntu@203.0.113.7</code>
<form data-confirm="End this lease?"><p>The actions a lease's state allows</p></form>
<p>Computer Vision 的 4× A100 80GB，g5.xlarge，us-east-1a，over_ceiling，2026-11-03 09:00 UTC</p>
<p>provisioning</p></body></html>"""


def runs(html: str, data: list[str]) -> list[str]:
    pattern = data_pattern(data)
    return [run for text in visible_texts(html) for run in english_runs(text, data=pattern)]


def test_it_reads_text_and_the_attributes_a_person_reads():
    found = runs(PAGE, ["Computer Vision", "A100 80GB", "vision"])
    assert "Waiting list" in found
    assert "Open the lease" in found  # a tooltip
    assert "Send now" in found and "End this lease" in found
    assert "The actions" in found and "my run" in found
    assert "provisioning" in found  # the project "vision" is set aside as a whole word only


def test_it_sets_aside_scripts_code_other_languages_data_figures_and_technical_terms():
    found = " ".join(runs(PAGE, ["Computer Vision", "A100 80GB", "vision"]))
    for absent in ("Not shown", "Hidden value", "English", "ubuntu", "Computer", "xlarge"):
        assert absent not in found
    assert "GPU" not in found and "UTC" not in found and "over_ceiling" not in found
