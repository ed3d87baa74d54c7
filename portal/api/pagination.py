"""Page-number pagination: ``?page=N&page_size=M`` (at most 200), with the total count.

A ``page`` or ``page_size`` that is not a whole number from 1 is a 400 naming it (DRF
would answer a page of 0 with 404 and quietly use the default size), and the schema
says so (``minimum: 1``); a page past the end is a 404, a size past the most is the most.
"""

from typing import Any

from django.utils.translation import gettext as _
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import PageNumberPagination

from portal.numbers import MAX_DIGITS_TYPED


def _whole_from_one(asked: str) -> bool:
    # ASCII digits only ("²" is a digit to Python, not to int()), and few enough of them
    # for int(): any number past the most is the most.
    plain = asked.isascii() and asked.isdigit() and len(asked) <= MAX_DIGITS_TYPED
    return plain and int(asked) >= 1


class PortalPagination(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200

    def get_page_size(self, request) -> int:
        asked = request.query_params.get(self.page_size_query_param)
        if asked is None:
            return self.page_size
        if not _whole_from_one(asked):
            raise ValidationError(
                {
                    self.page_size_query_param: [
                        _("Give a whole number of rows from 1 to %(most)s.")
                        % {"most": self.max_page_size}
                    ]
                }
            )
        return min(int(asked), self.max_page_size)

    def get_page_number(self, request, paginator) -> Any:
        asked = request.query_params.get(self.page_query_param)
        wrong = asked is not None and asked not in self.last_page_strings
        if wrong and not _whole_from_one(asked):
            raise ValidationError({self.page_query_param: [_("Give a whole page number from 1.")]})
        return super().get_page_number(request, paginator)

    def get_schema_operation_parameters(self, view) -> list[dict[str, Any]]:
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] in (self.page_query_param, self.page_size_query_param):
                parameter["schema"]["minimum"] = 1
        return parameters
