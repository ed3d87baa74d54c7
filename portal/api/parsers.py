"""The API's JSON bodies: DRF's parser, with a nesting limit (``portal.nesting``), so a
body nested 10,000 levels deep is a 400 in the API's error shape, not a server error."""

from typing import Any

from django.utils.translation import gettext as _
from rest_framework import parsers
from rest_framework.exceptions import ParseError

from portal.nesting import MAX_DEPTH, too_deep


def _too_deep_error() -> ParseError:
    return ParseError(
        _("The JSON body is nested too deeply (more than %(most)s levels).") % {"most": MAX_DEPTH},
        code="too_deep",
    )


class JSONParser(parsers.JSONParser):
    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:  # Python's own decoder gave up first
            raise _too_deep_error() from None
        if too_deep(data):
            raise _too_deep_error()
        return data
