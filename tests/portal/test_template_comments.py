"""Django's {# #} comments end on their own line; one that spans lines is printed on the
page as it is (it was, beside the live status of every lease)."""

from pathlib import Path

from django.conf import settings


def test_no_template_comment_spans_lines():
    open_comments = []
    for template in sorted(Path(settings.BASE_DIR, "templates").rglob("*.html")):
        for number, line in enumerate(template.read_text(encoding="utf-8").splitlines(), 1):
            start = line.rfind("{#")
            if start != -1 and "#}" not in line[start:]:
                open_comments.append(f"{template.relative_to(settings.BASE_DIR)}:{number}")
    assert open_comments == [], "use {% comment %} for a note over several lines"
