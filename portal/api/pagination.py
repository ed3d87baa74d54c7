"""Page-number pagination: ``?page=N&page_size=M`` (at most 200), with the total count.

A ``page_size`` that is not a whole number from 1 is a 400 naming it (DRF would quietly
use the default); a page past the end is a 404.
"""

from django.utils.translation import gettext as _
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import PageNumberPagination

from portal.numbers import MAX_DIGITS_TYPED


class PortalPagination(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200

    def get_page_size(self, request) -> int:
        asked = request.query_params.get(self.page_size_query_param)
        if asked is None:
            return self.page_size
        # ASCII digits only ("²" is a digit to Python, not to int()), and few enough of
        # them for int(): any number past the most is the most.
        plain = asked.isascii() and asked.isdigit() and len(asked) <= MAX_DIGITS_TYPED
        if not plain or int(asked) < 1:
            raise ValidationError(
                {
                    self.page_size_query_param: [
                        _("Give a whole number of rows from 1 to %(most)s.")
                        % {"most": self.max_page_size}
                    ]
                }
            )
        return min(int(asked), self.max_page_size)
